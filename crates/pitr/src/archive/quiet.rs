//! Asking the archived server how quiet it is ([`super::coverage::Quiet`]): only a server
//! whose binary-log stamps all come from its own sessions' clocks (not a replica, not a
//! Galera node), and whose every session the account sees (PROCESS), can vouch for a quiet
//! period. The clock and the running statements are read before where the binary log ends, so
//! a transaction missing from that later read had not started its last statement before the
//! clock was read, or was still running when the sessions were scanned.

use mysql_async::prelude::Queryable;

use super::coverage::Quiet;
use crate::binlog::GtidPos;

/// Who the server is, its clock, and the start of the oldest statement running (replication
/// dumps and sleeping sessions aside).
const CLOCK_QUERY: &str = r#"SELECT @@server_id, UNIX_TIMESTAMP(NOW(6)),
    (SELECT MIN(UNIX_TIMESTAMP(NOW(6)) - TIME_MS / 1000) FROM information_schema.PROCESSLIST
      WHERE ID <> CONNECTION_ID()
        AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump', 'Binlog Dump GTID'))"#;

/// Whether the account holds PROCESS itself (without it, it sees only its own sessions).
const MAY_SEE_ALL_QUERY: &str = r#"SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES
    WHERE PRIVILEGE_TYPE = 'PROCESS'
      AND GRANTEE = CONCAT('''', REPLACE(CURRENT_USER(), '@', '''@'''), '''')"#;

/// Why a server cannot vouch for its quiet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unvouched {
    #[error("the archiver's account lacks PROCESS, so it cannot see the statements running")]
    NoProcessPrivilege,
    #[error("the server replicates from another, whose transactions keep their own stamps")]
    Replica,
    #[error("the server is a Galera node, whose appliers keep other nodes' stamps")]
    Galera,
    #[error("the server did not answer: {0}")]
    Query(String),
}

impl Unvouched {
    /// Whether asking again later can change the answer (a failed query can; what the server
    /// is, rarely).
    pub fn lasting(&self) -> bool {
        !matches!(self, Unvouched::Query(_))
    }
}

/// Asks the server at `c` for its [`Quiet`], or why it cannot vouch for it.
pub async fn probe(c: &mut mysql_async::Conn) -> Result<Quiet, Unvouched> {
    let failed = |e: mysql_async::Error| Unvouched::Query(e.to_string());
    // UTC: no clock change makes NOW() ambiguous.
    c.query_drop("SET time_zone = '+00:00'")
        .await
        .map_err(failed)?;
    let may_see_all: Option<u64> = c.query_first(MAY_SEE_ALL_QUERY).await.map_err(failed)?;
    if may_see_all.unwrap_or(0) == 0 {
        return Err(Unvouched::NoProcessPrivilege);
    }
    let sources: Vec<mysql_async::Row> = c.query("SHOW ALL SLAVES STATUS").await.map_err(failed)?;
    if !sources.is_empty() {
        return Err(Unvouched::Replica);
    }
    let wsrep: Option<(String, String)> = c
        .query_first("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
        .await
        .map_err(failed)?;
    if wsrep.is_some_and(|(_, on)| on.eq_ignore_ascii_case("ON")) {
        return Err(Unvouched::Galera);
    }
    let clock: Option<(u32, f64, Option<f64>)> =
        c.query_first(CLOCK_QUERY).await.map_err(failed)?;
    let (server_id, now, oldest_running) =
        clock.ok_or_else(|| Unvouched::Query("no row".into()))?;
    let end: Option<String> = c
        .query_first("SELECT @@gtid_binlog_pos")
        .await
        .map_err(failed)?;
    let binlog_end = GtidPos::parse(&end.unwrap_or_default()).map_err(Unvouched::Query)?;
    Ok(Quiet {
        server_id,
        now,
        oldest_running,
        binlog_end,
    })
}
