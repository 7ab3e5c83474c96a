//! Ends the binlog dump threads of replicas that stopped answering
//! ([`crate::decide::stale_dumps`]). Every second the pod's TCP tables are read (the agent
//! shares mysqld's network namespace); only when one shows a cut connection on the server's
//! port is mysqld asked for its dump threads, on a connection of this task's own, so that a
//! slow answer never holds up a pass.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::credentials::Credentials;
use crate::decide::sql;
use crate::decide::stale_dumps::{names_an_address, to_end, unanswered, DumpThread, Unanswered};

/// Time between two looks at the TCP tables.
const LOOK_INTERVAL: Duration = Duration::from_secs(1);
/// Time the connection, the query and the kills may take together.
const ROUND_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a round that mysqld did not answer in time: the abandoned session is left to
/// finish, and another is not opened beside it every second.
const ROUND_BACKOFF: Duration = Duration::from_secs(30);
/// The TCP tables of the agent's network namespace, which is the pod's.
const TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// What a round found.
struct Round {
    /// Cut peers that no dump thread serves (an application's session, say): not looked up
    /// again while their connection stays cut.
    unserved: Vec<SocketAddr>,
    /// Some dump thread names its client by a host name, so it cannot be matched.
    named_by_host: bool,
}

/// Looks, for ever, for dump threads on `port` whose replica stopped answering, and ends them.
pub(super) async fn run(socket: PathBuf, credentials_dir: PathBuf, port: u16) {
    let mut ticker = tokio::time::interval(LOOK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last failure, logged once until a round succeeds.
    let mut failing: Option<String> = None;
    let mut unserved: Vec<SocketAddr> = Vec::new();
    let mut named_by_host_said = false;
    loop {
        ticker.tick().await;
        let cut: Vec<Unanswered> = TABLES
            .iter()
            .filter_map(|t| std::fs::read_to_string(t).ok())
            .flat_map(|table| unanswered(&table, port))
            .collect();
        unserved.retain(|peer| cut.iter().any(|c| c.peer == *peer));
        let cut: Vec<Unanswered> = cut
            .into_iter()
            .filter(|c| !unserved.contains(&c.peer))
            .collect();
        if cut.is_empty() {
            continue;
        }
        let round = tokio::time::timeout(ROUND_TIMEOUT, end(&socket, &credentials_dir, &cut));
        let outcome = match round.await {
            Ok(outcome) => outcome,
            Err(_) => {
                let e = format!("mysqld did not answer within {ROUND_TIMEOUT:?}");
                tracing::warn!(error = %e, "the dump threads of cut-off replicas not ended");
                failing = Some(e);
                tokio::time::sleep(ROUND_BACKOFF).await;
                continue;
            }
        };
        match outcome {
            Ok(found) => {
                failing = None;
                if found.named_by_host && !found.unserved.is_empty() && !named_by_host_said {
                    tracing::warn!(
                        "dump threads name their clients by host name (skip_name_resolve is \
                         off): those of replicas that stopped answering cannot be ended, and a \
                         returning replica may stall commits until the old one notices"
                    );
                    named_by_host_said = true;
                }
                unserved.extend(found.unserved);
            }
            Err(e) => {
                if failing.as_ref() != Some(&e) {
                    tracing::warn!(error = %e, "the dump threads of cut-off replicas not ended");
                    failing = Some(e);
                }
            }
        }
    }
}

/// Ends the dump threads serving the peers in `cut`, if any.
async fn end(
    socket: &std::path::Path,
    credentials_dir: &std::path::Path,
    cut: &[Unanswered],
) -> Result<Round, String> {
    let creds = Credentials::read(credentials_dir).map_err(|e| bulwark_engine::error::chain(&e))?;
    let mut conn = mysql_async::Conn::new(creds.connection(socket).opts())
        .await
        .map_err(|e| format!("connecting to mysqld: {e}"))?;
    let rows: Vec<(u64, Option<String>)> = conn
        .query(sql::DUMP_THREADS_QUERY)
        .await
        .map_err(|e| format!("reading the dump threads: {e}"))?;
    let threads: Vec<DumpThread> = rows
        .into_iter()
        .map(|(id, host)| DumpThread {
            id,
            host: host.unwrap_or_default(),
        })
        .collect();
    let ending = to_end(&threads, cut);
    for (id, c) in &ending {
        match conn.query_drop(sql::kill_session(*id).sql.as_str()).await {
            Ok(()) => {
                tracing::info!(thread = id, replica = %c.peer, retransmits = c.retransmits, "ended the dump thread of a replica that stopped answering");
            }
            Err(mysql_async::Error::Server(e)) if e.code == sql::ER_NO_SUCH_THREAD => {}
            Err(e) => return Err(format!("ending dump thread {id}: {e}")),
        }
    }
    let _ = conn.disconnect().await;
    Ok(Round {
        unserved: cut
            .iter()
            .map(|c| c.peer)
            .filter(|peer| !ending.iter().any(|(_, e)| e.peer == *peer))
            .collect(),
        named_by_host: !threads.iter().all(names_an_address),
    })
}
