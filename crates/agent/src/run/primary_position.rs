//! Reads the primary's own GTID position and history over a short connection as the
//! replication account, so that a replica's readiness rests on what the primary has logged,
//! not on the replica's idea of its lag (see [`crate::decide::caught_up`]).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use zeroize::Zeroizing;

use bulwark_contract::{Account, Engine};
use bulwark_engine::source::Connection;

use super::error::AgentError;
use crate::decide::caught_up::Reach;
use crate::decide::restored::normalize_gtid_set;
use crate::decide::sql::{self, Source};

/// Time for the whole read (connection included): a pass must not wait long on a primary that
/// does not answer; the replica then is not shown to be current, which is the point.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// The primary's `(position, history)`: MariaDB `@@gtid_binlog_pos` and `@@gtid_binlog_state`,
/// MySQL `@@gtid_executed` twice (its set is whole). On failure, what it says of the way to the
/// primary's server: a name that does not resolve says nothing of the server (the receiver's
/// connection, made earlier, may be fine), a server error says it runs.
pub(super) async fn read(
    engine: Engine,
    source: &Source,
    password: &Zeroizing<String>,
) -> Result<(String, String), (AgentError, Reach)> {
    let shown = format!("{}:{}", source.host, source.port);
    let failed = |source: mysql_async::Error| {
        let reach = match &source {
            mysql_async::Error::Server(_) => Reach::Answered,
            mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => Reach::NoAnswer,
            _ => Reach::Unknown,
        };
        let error = AgentError::ReadPrimaryPosition {
            target: shown.clone(),
            source: Box::new(source),
        };
        (error, reach)
    };
    let read = async {
        let address = tokio::net::lookup_host((source.host.as_str(), source.port))
            .await
            .ok()
            .and_then(|mut found| found.next())
            .ok_or_else(|| {
                let error = AgentError::ResolvePrimary {
                    host: source.host.clone(),
                };
                (error, Reach::Unknown)
            })?;
        let target = Connection {
            socket: None,
            host: Some(address.ip().to_string()),
            port: Some(address.port()),
            user: Some(Account::Replication.user().into()),
            password: Some(password.clone()),
        };
        let mut conn = mysql_async::Conn::new(target.opts())
            .await
            .map_err(&failed)?;
        let row: Option<(String, String)> = conn
            .query_first(sql::primary_position_query(engine))
            .await
            .map_err(&failed)?;
        // The answer is what counts; a failed goodbye is not the primary's position.
        let _ = conn.disconnect().await;
        Ok(row.unwrap_or_default())
    };
    let (position, history) = tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| {
            let error = AgentError::ReadPrimaryPositionTimedOut {
                target: shown.clone(),
                seconds: READ_TIMEOUT.as_secs(),
            };
            (error, Reach::NoAnswer)
        })??;
    Ok((normalize_gtid_set(&position), normalize_gtid_set(&history)))
}
