//! Reads the primary's own GTID position and history over a short connection as the
//! replication account, so that a replica's readiness rests on what the primary has logged,
//! not on the replica's idea of its lag (see [`crate::decide::caught_up`]).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use zeroize::Zeroizing;

use bulwark_contract::{Account, Engine};
use bulwark_engine::source::Connection;

use super::error::AgentError;
use crate::decide::sql::{self, Source};

/// Time for the whole read (connection included): a pass must not wait long on a primary that
/// does not answer; the replica then is not shown to be current, which is the point.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// The primary's `(position, history)`: MariaDB `@@gtid_binlog_pos` and `@@gtid_binlog_state`,
/// MySQL `@@gtid_executed` twice (its set is whole).
pub(super) async fn read(
    engine: Engine,
    source: &Source,
    password: &Zeroizing<String>,
) -> Result<(String, String), AgentError> {
    let target = Connection {
        socket: None,
        host: Some(source.host.clone()),
        port: Some(source.port),
        user: Some(Account::Replication.user().into()),
        password: Some(password.clone()),
    };
    let fail = |source: mysql_async::Error| AgentError::ReadPrimaryPosition {
        target: target.describe(),
        source: Box::new(source),
    };
    let read = async {
        let mut conn = mysql_async::Conn::new(target.opts()).await?;
        let row: Option<(String, String)> = conn
            .query_first(sql::primary_position_query(engine))
            .await?;
        // The answer is what counts; a failed goodbye is not the primary's position.
        let _ = conn.disconnect().await;
        Ok::<_, mysql_async::Error>(row.unwrap_or_default())
    };
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| AgentError::ReadPrimaryPositionTimedOut {
            target: target.describe(),
            seconds: READ_TIMEOUT.as_secs(),
        })?
        .map_err(fail)
        .map(|(position, history)| {
            (
                crate::decide::restored::normalize_gtid_set(&position),
                crate::decide::restored::normalize_gtid_set(&history),
            )
        })
}
