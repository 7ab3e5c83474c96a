//! The archive's connection to a server: one attempt, bounded in time, so that a server that
//! does not answer is reported rather than waited on.

use std::time::Duration;

use bulwark_engine::source::Connection;
use bulwark_engine::Error as EngineError;

use crate::error::Result;

/// A connection to `conn`, or why there is none within 30 s.
pub(super) async fn connect(conn: &Connection) -> Result<mysql_async::Conn> {
    let attempt =
        tokio::time::timeout(Duration::from_secs(30), mysql_async::Conn::new(conn.opts()));
    match attempt.await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(source)) => Err(EngineError::ConnectServer {
            target: conn.describe(),
            source: Box::new(source),
        }
        .into()),
        Err(_) => Err(EngineError::ConnectServer {
            target: conn.describe(),
            source: Box::new(mysql_async::Error::Other(
                "connection timed out after 30s".into(),
            )),
        }
        .into()),
    }
}
