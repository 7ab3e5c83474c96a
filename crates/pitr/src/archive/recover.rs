//! The one entry point of a point-in-time replay, for the CLI and the agent alike: checks the
//! backup's engine, finds the tools, lists the archive that continues the backup, and replays
//! into a running server or a restored datadir.

use bulwark_engine::Error as EngineError;
use std::path::PathBuf;

use super::replay::{self, Logged, ReplayOutcome, ReplayTools};
use super::{manifest, offline, segments, RecoveryTarget};
use crate::binlog::{GtidPos, Rebase};
use crate::error::{Error, Result};
use bulwark_contract::Engine;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::repo::{CompleteBackup, Repository};
use bulwark_engine::source::{self, Connection, ToolJob};

/// Where a replay goes.
pub enum ReplayInto {
    /// A running server that holds the restored backup; it logs the replayed transactions
    /// under their archived GTIDs (it continues the source's history). What its replica
    /// position records holding of the history is passed over.
    Server(Connection),
    /// Like `Server`, for a server the backup was just loaded into: it holds exactly the
    /// backup's point, whatever its replica position said before, which is set to that point
    /// first.
    RestoredServer(Connection),
    /// A running server with a history of its own (a cluster loaded from a logical backup
    /// under its own GTIDs): the transactions are logged under its `server_id` and domain,
    /// numbered after its last ([`crate::binlog::rebase`]).
    ServerOwnHistory(Connection),
    /// A restored, prepared datadir (a temporary server is started on it).
    Datadir(PathBuf),
}

/// Replays the archive after `backup` up to `target`.
pub async fn replay_after(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    target: &RecoveryTarget,
    into: &ReplayInto,
) -> Result<ReplayOutcome> {
    let engine = backup.manifest.source.engine;
    if engine != Engine::MariaDb {
        return Err(Error::ArchiveUnsupported(format!(
            "a MariaDB backup; {} is from MySQL",
            backup.manifest.id
        )));
    }
    let tools = ReplayTools {
        decoder: source::find_tool(engine, ToolJob::BinlogDecoder, None)?,
        client: source::find_tool(engine, ToolJob::Client, None)?,
    };
    let archive = manifest::archive_of(&backup.manifest);
    let listing = segments::list(repo.store(), archive, key).await?;
    let (segments, coverage) = (listing.segments, listing.coverage.as_ref());
    let store = repo.store();
    match into {
        ReplayInto::Server(conn) | ReplayInto::RestoredServer(conn) => {
            let mut position = server_position(conn).await?;
            if matches!(into, ReplayInto::RestoredServer(_)) {
                let point = replay::window_of(backup, &segments)?.0.from;
                // Exactly the point: what the position said before the load is gone with it.
                record_replica_position(conn, &GtidPos::default(), &point, |e| {
                    Error::PointInTime(format!(
                        "the backup was loaded, but the server's replica position could not \
                         be set to its point {point} before the replay ({e})"
                    ))
                })
                .await?;
                position = ServerPosition {
                    replica: point,
                    logged_by_others: GtidPos::default(),
                };
            }
            let logged = Logged::Archived {
                known: position.replica.clone(),
                logged_by_others: position.logged_by_others.clone(),
            };
            let outcome = replay::apply(
                store, key, backup, &segments, target, conn, &tools, logged, coverage,
            )
            .await?;
            if outcome.transactions > 0 {
                let reached = GtidPos::parse(&outcome.reached)
                    .map_err(|e| Error::PointInTime(format!("the replay's end: {e}")))?;
                record_replica_position(conn, &position.replica, &reached, |e| {
                    Error::PointInTime(format!(
                        "the replay applied {} transactions up to {reached}, but the server's \
                         replica position could not be set to record them ({e}): a replay run \
                         again would apply them twice; record it (SET GLOBAL gtid_slave_pos) \
                         once the cause is removed",
                        outcome.transactions
                    ))
                })
                .await?;
            }
            Ok(outcome)
        }
        ReplayInto::ServerOwnHistory(conn) => {
            let rebase = Logged::Rebased(server_identity(conn).await?);
            replay::apply(
                store, key, backup, &segments, target, conn, &tools, rebase, coverage,
            )
            .await
        }
        ReplayInto::Datadir(dir) => {
            let server = offline::find_server()?;
            offline::replay_into_datadir(
                store, key, backup, &segments, target, dir, &server, &tools, coverage,
            )
            .await
        }
    }
}

/// The recovery window of `backup` in the archive that continues it, as it is now, along the
/// branch of history a replay to `target` follows (segments read under the repository's key).
pub async fn window(
    repo: &Repository,
    backup: &CompleteBackup,
    target: &RecoveryTarget,
) -> Result<super::Window> {
    let archive = manifest::archive_of(&backup.manifest);
    let listing = segments::list(repo.store(), archive, repo.key()).await?;
    Ok(replay::window_toward(backup, &listing.segments, target)?
        .0
        .covered(listing.coverage.as_ref()))
}

/// The server's `gtid_domain_id`, `server_id` and the sequence number after the last its binary
/// log holds in that domain: what replayed transactions are rewritten to.
async fn server_identity(conn: &Connection) -> Result<Rebase> {
    use mysql_async::prelude::Queryable;
    let query_failed = |e: mysql_async::Error| EngineError::QueryServer(Box::new(e));
    let mut c = super::connect::connect(conn).await?;
    let row: Option<(u32, u32, String)> = c
        .query_first("SELECT @@gtid_domain_id, @@server_id, @@gtid_binlog_pos")
        .await
        .map_err(query_failed)?;
    let _ = c.disconnect().await;
    let (domain, server_id, pos) =
        row.ok_or_else(|| query_failed(mysql_async::Error::Other("no row".into())))?;
    let last = GtidPos::parse(&pos)
        .map_err(|e| Error::PointInTime(format!("the server's @@gtid_binlog_pos: {e}")))?
        .gtids()
        .find(|g| g.domain == domain)
        .map_or(0, |g| g.seq);
    Ok(Rebase {
        domain,
        server_id,
        next_seq: last + 1,
    })
}

/// What a server records of the transactions it holds.
struct ServerPosition {
    /// Its replica position.
    replica: GtidPos,
    /// The last GTIDs its binary log holds under other servers' ids.
    logged_by_others: GtidPos,
}

async fn server_position(conn: &Connection) -> Result<ServerPosition> {
    use mysql_async::prelude::Queryable;
    let query_failed = |e: mysql_async::Error| EngineError::QueryServer(Box::new(e));
    let mut c = super::connect::connect(conn).await?;
    let row: Option<(String, String, u32)> = c
        .query_first("SELECT @@gtid_binlog_state, @@gtid_slave_pos, @@server_id")
        .await
        .map_err(query_failed)?;
    let _ = c.disconnect().await;
    let (binlog_state, replica, server_id) =
        row.ok_or_else(|| query_failed(mysql_async::Error::Other("no row".into())))?;
    let replica = GtidPos::parse(&replica)
        .map_err(|e| Error::PointInTime(format!("the server's @@gtid_slave_pos: {e}")))?;
    let logged_by_others = super::resume::logged_by_others(&binlog_state, server_id)
        .map_err(|e| Error::PointInTime(format!("the server's @@gtid_binlog_state: {e}")))?;
    Ok(ServerPosition {
        replica,
        logged_by_others,
    })
}

/// Sets the server's replica position to `to` in the domains it names, the others as `replica`
/// had them: what the server holds of the source's history. A server without a binary log keeps no GTID of what a client applied, and one
/// whose id is the source's cannot tell replayed transactions from its own, so this is the
/// record a replay run again reads (and a server made a replica of the source continues from).
async fn record_replica_position(
    conn: &Connection,
    replica: &GtidPos,
    to: &GtidPos,
    failed: impl FnOnce(mysql_async::Error) -> Error,
) -> Result<()> {
    use mysql_async::prelude::Queryable;
    let mut position = replica.clone();
    for g in to.gtids() {
        position.advance(g);
    }
    let mut c = super::connect::connect(conn).await?;
    let set = c
        .exec_drop("SET GLOBAL gtid_slave_pos = ?", (position.to_string(),))
        .await;
    let _ = c.disconnect().await;
    set.map_err(failed)
}
