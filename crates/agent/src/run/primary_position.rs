//! Reads the primary's own GTID position and history over a short connection as the
//! replication account, so that a replica's readiness rests on what the primary has logged,
//! not on the replica's idea of its lag (see [`crate::decide::caught_up`]).

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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
/// connection, made earlier, may be fine), a server error says it runs. `resolved` is set
/// when the name has resolved and the connection begins.
pub(super) async fn read(
    engine: Engine,
    source: &Source,
    password: &Zeroizing<String>,
    resolved: &OnceLock<Instant>,
) -> Result<(String, String), (AgentError, Reach)> {
    let shown = format!("{}:{}", source.host, source.port);
    let failed = |source: mysql_async::Error| {
        let reach = reach_of(&source);
        let error = AgentError::ReadPrimaryPosition {
            target: shown.clone(),
            source: Box::new(source),
        };
        (error, reach)
    };
    // Resolved apart, on a clock of its own: a name service that does not answer says
    // nothing of the primary's server.
    let unresolved = || {
        let error = AgentError::ResolvePrimary {
            host: source.host.clone(),
        };
        (error, Reach::Unknown)
    };
    let addresses: Vec<SocketAddr> = tokio::time::timeout(
        READ_TIMEOUT,
        tokio::net::lookup_host((source.host.as_str(), source.port)),
    )
    .await
    .map_err(|_| unresolved())?
    .map_err(|_| unresolved())?
    .collect();
    if addresses.is_empty() {
        return Err(unresolved());
    }
    let _ = resolved.set(Instant::now());
    let read = async {
        // Each address in turn, as the server's own replication client does.
        let mut last = None;
        for address in &addresses {
            let target = Connection {
                socket: None,
                host: Some(address.ip().to_string()),
                port: Some(address.port()),
                user: Some(Account::Replication.user().into()),
                password: Some(password.clone()),
            };
            match mysql_async::Conn::new(target.opts()).await {
                Ok(mut conn) => {
                    let row: Option<(String, String)> = conn
                        .query_first(sql::primary_position_query(engine))
                        .await
                        .map_err(&failed)?;
                    // The answer is what counts; a failed goodbye is not the primary's
                    // position.
                    let _ = conn.disconnect().await;
                    return Ok(row.unwrap_or_default());
                }
                Err(e) => last = Some(failed(e)),
            }
        }
        Err(last.unwrap_or_else(unresolved))
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

/// What an error of the client says of the way to the server: only a connection that was
/// refused, reset, or never made is no answer. Anything the client could only learn from the
/// server's bytes (an error packet, an unknown authentication plugin, a malformed packet)
/// means the server runs.
fn reach_of(error: &mysql_async::Error) -> Reach {
    use std::io::ErrorKind;
    match error {
        mysql_async::Error::Server(_) => Reach::Answered,
        mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed) => Reach::Unknown,
        mysql_async::Error::Driver(_) => Reach::Answered,
        mysql_async::Error::Io(mysql_async::IoError::Io(e)) => match e.kind() {
            ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::TimedOut
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable => Reach::NoAnswer,
            ErrorKind::InvalidData => Reach::Answered,
            _ => Reach::Unknown,
        },
        _ => Reach::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn only_a_connection_never_made_or_cut_is_no_answer() {
        let io = |kind: ErrorKind| {
            mysql_async::Error::Io(mysql_async::IoError::Io(Error::new(kind, "x")))
        };
        let cases = [
            ("refused", io(ErrorKind::ConnectionRefused), Reach::NoAnswer),
            ("reset", io(ErrorKind::ConnectionReset), Reach::NoAnswer),
            ("no route", io(ErrorKind::HostUnreachable), Reach::NoAnswer),
            (
                "a malformed packet",
                io(ErrorKind::InvalidData),
                Reach::Answered,
            ),
            ("anything else", io(ErrorKind::Other), Reach::Unknown),
            (
                "too many connections",
                mysql_async::Error::Server(mysql_async::ServerError {
                    code: 1040,
                    message: "Too many connections".into(),
                    state: "08004".into(),
                }),
                Reach::Answered,
            ),
            (
                "an unknown authentication plugin",
                mysql_async::Error::Driver(mysql_async::DriverError::UnknownAuthPlugin {
                    name: "client_ed25519".into(),
                }),
                Reach::Answered,
            ),
            (
                "closed after an earlier failure",
                mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed),
                Reach::Unknown,
            ),
        ];
        for (name, error, want) in cases {
            assert_eq!(reach_of(&error), want, "{name}");
        }
    }
}
