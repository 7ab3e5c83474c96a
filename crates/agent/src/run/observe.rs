//! The agent's reads and writes on the local mysqld, each bounded in time: the connection
//! (engine and version learned once), the pass's observation through the queries and parsers
//! of [`sql`], statements sent with passwords kept out of every message, and the liveness
//! check behind `/healthz`.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use bulwark_contract::{Account, Engine};
use bulwark_engine::source::engine_of;

use super::credentials::{connection, read_secret, Credentials};
use super::error::AgentError;
use super::http::Response;
use crate::decide::sql::{self, Statement};
use crate::decide::topology::Observed;

/// Time to connect to mysqld.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time one statement may take.
pub(super) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);
/// Syntax errors quote the statement, which may hold a password.
const ER_PARSE_ERROR: u16 = 1064;

/// The connection to mysqld and what the server said of itself when it was made.
pub(super) struct Server {
    pub(super) conn: mysql_async::Conn,
    pub(super) engine: Engine,
    /// `@@version`.
    pub(super) version: String,
}

/// Connects as root over the socket and sets the agent's session up.
pub(super) async fn connect(socket: &Path, creds: &Credentials) -> Result<Server, AgentError> {
    let target = creds.connection(socket);
    let connect_err = |source| AgentError::Connect {
        target: target.describe(),
        source: Box::new(source),
    };
    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, mysql_async::Conn::new(target.opts()))
        .await
        .map_err(|_| connect_err(mysql_async::Error::Other("timed out".into())))?
        .map_err(connect_err)?;
    for st in sql::session_setup() {
        exec(&mut conn, &st, &[]).await?;
    }
    let row: Option<(String, String)> = conn
        .query_first(sql::VERSION_QUERY)
        .await
        .map_err(observe_err("version"))?;
    let (version, comment) = row.unwrap_or_default();
    let engine = engine_of(&version, &comment);
    tracing::info!(engine = %engine, version = %version, "connected to mysqld");
    Ok(Server {
        conn,
        engine,
        version,
    })
}

fn observe_err(what: &'static str) -> impl Fn(mysql_async::Error) -> AgentError {
    move |source| AgentError::Observe {
        what,
        source: Box::new(source),
    }
}

/// What the server reports in this pass.
pub(super) async fn observe(server: &mut Server) -> Result<Observed, AgentError> {
    let engine = server.engine;
    let conn = &mut server.conn;
    let vars: Vec<mysql_async::Row> = timed(conn.query(sql::variables_query(engine)))
        .await
        .map_err(observe_err("variables"))?;
    let vars = sql::parse_variables(&vars.first().map(row_texts).unwrap_or_default());
    let status: Vec<mysql_async::Row> = timed(conn.query(sql::replication_status_query(engine)))
        .await
        .map_err(observe_err("replication status"))?;
    let replication = status
        .first()
        .map(|row| {
            let named: BTreeMap<String, Option<String>> = row
                .columns_ref()
                .iter()
                .zip(row_texts(row))
                .map(|(c, v)| (c.name_str().into_owned(), v))
                .collect();
            sql::parse_replica_status(&named)
        })
        .filter(|r| !r.source_host.is_empty());
    Ok(Observed {
        engine,
        version: server.version.clone(),
        read_only: vars.read_only,
        super_read_only: engine == Engine::MySql && vars.super_read_only,
        gtid_logged: vars.gtid_logged,
        gtid_history: vars.gtid_history,
        semi_sync_wait: vars.semi_sync_wait,
        semi_sync_clients: vars.semi_sync_clients,
        replicas_attached: vars.replicas_attached,
        replication,
    })
}

/// The partial-load mark, when the server holds one (part of a bootstrap load that never
/// finished on it): its text, or `None` for a mark schema without its table.
pub(super) async fn partial_load_mark(
    conn: &mut mysql_async::Conn,
) -> Result<Option<Option<String>>, AgentError> {
    timed(conn.query_first(sql::partial_load_query()))
        .await
        .map_err(observe_err("the partial-load mark"))
}

/// MySQL's `@@super_read_only`, which stops even root: lifted around a change when on.
pub(super) async fn super_read_only(conn: &mut mysql_async::Conn) -> Result<bool, AgentError> {
    let v: Option<i64> = timed(conn.query_first(sql::SUPER_READ_ONLY_QUERY))
        .await
        .map_err(observe_err("super_read_only"))?;
    Ok(v.unwrap_or(0) != 0)
}

/// Fences a server that was writable: every client session but the operator's accounts' and
/// `keep` (the hold's) is ended, so that none commits after the demotion.
pub(super) async fn end_client_sessions(
    conn: &mut mysql_async::Conn,
    keep: Option<u64>,
) -> Result<(), AgentError> {
    let ended = timed(super::fence::end_client_sessions(conn, keep))
        .await
        .map_err(observe_err("client sessions"))?;
    tracing::info!(sessions = ended, "read-only; client sessions ended");
    Ok(())
}

pub(super) async fn timed<T>(
    f: impl Future<Output = Result<T, mysql_async::Error>>,
) -> Result<T, mysql_async::Error> {
    tokio::time::timeout(STATEMENT_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(mysql_async::Error::Other(
                format!("no answer within {}s", STATEMENT_TIMEOUT.as_secs()).into(),
            ))
        })
}

/// Runs one statement; server errors keep the connection, others lose it. Passwords in
/// `secrets` never reach a message.
pub(super) async fn exec(
    conn: &mut mysql_async::Conn,
    st: &Statement,
    secrets: &[&str],
) -> Result<(), AgentError> {
    match timed(conn.query_drop(st.sql.as_str())).await {
        Ok(()) => Ok(()),
        Err(mysql_async::Error::Server(e)) => Err(AgentError::RunStatement {
            statement: st.shown.clone(),
            code: e.code,
            message: redact(e.code, &e.message, secrets),
        }),
        Err(source) => Err(AgentError::SendStatement {
            statement: st.shown.clone(),
            source: Box::new(source),
        }),
    }
}

/// A server message with passwords removed; syntax errors quote the statement, so their
/// message is withheld whole.
fn redact(code: u16, message: &str, secrets: &[&str]) -> String {
    if code == ER_PARSE_ERROR {
        return "syntax error (message withheld: the statement may carry a password)".into();
    }
    let mut out = message.to_string();
    for s in secrets {
        out = out.replace(s, "<redacted>");
    }
    out
}

/// The values of a row as text (`None` for NULL).
pub(super) fn row_texts(row: &mysql_async::Row) -> Vec<Option<String>> {
    (0..row.len())
        .map(|i| match row.as_ref(i) {
            None | Some(mysql_async::Value::NULL) => None,
            Some(mysql_async::Value::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            Some(mysql_async::Value::Int(v)) => Some(v.to_string()),
            Some(mysql_async::Value::UInt(v)) => Some(v.to_string()),
            Some(other) => Some(format!("{other:?}")),
        })
        .collect()
}

/// `/healthz`: 200 while mysqld answers `SELECT 1` in time, and while it does not listen yet
/// (starting, or recovering after a crash: liveness must not kill that); 503 when it accepts
/// connections but does not answer.
pub(super) async fn health(socket: &Path, credentials_dir: &Path, timeout: Duration) -> Response {
    let root = read_secret(&credentials_dir.join(Account::Root.key()))
        .ok()
        .flatten();
    let opts = connection(socket, root).opts();
    let check = async {
        let mut c = mysql_async::Conn::new(opts).await?;
        let answer = c.query_drop(sql::HEALTH_QUERY).await;
        let _ = c.disconnect().await;
        answer
    };
    match tokio::time::timeout(timeout, check).await {
        Ok(Ok(())) => Response::new(200, "mysqld answers"),
        Ok(Err(mysql_async::Error::Server(e))) => {
            Response::new(200, format!("mysqld answers (error {})", e.code))
        }
        Ok(Err(mysql_async::Error::Io(mysql_async::IoError::Io(e))))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Response::new(200, "mysqld is not listening yet (starting or recovering)")
        }
        Ok(Err(e)) => Response::new(503, format!("mysqld does not answer: {e}")),
        Err(_) => Response::new(
            503,
            format!(
                "mysqld accepted a connection but did not answer within {}",
                humantime::format_duration(timeout)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_carry_passwords() {
        assert_eq!(
            redact(
                1396,
                "Operation ALTER USER failed for hunter2",
                &["hunter2"]
            ),
            "Operation ALTER USER failed for <redacted>"
        );
        assert!(!redact(1064, "near 'hunter2' at line 1", &[]).contains("hunter2"));
    }
}
