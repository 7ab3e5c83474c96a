//! The one entry point of a point-in-time replay, for the CLI and the agent alike: checks the
//! backup's engine, finds the tools, lists the archive that continues the backup, and replays
//! into a running server or a restored datadir.

use bulwark_engine::Error as EngineError;
use std::path::PathBuf;

use super::replay::{self, Logged, ReplayOutcome, ReplayTools};
use super::{manifest, positions, segments, RecoveryTarget};
use crate::binlog::{GtidPos, Rebase};
use crate::error::{Error, Result};
use bulwark_contract::Engine;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::repo::{CompleteBackup, Repository};
use bulwark_engine::scratch::{self, ScratchServer};
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
            let lock = positions::ReplayLock::take(conn).await?;
            let result = replay_archived(
                conn,
                matches!(into, ReplayInto::RestoredServer(_)),
                (store, key, backup, &segments, target, &tools, coverage),
            )
            .await;
            lock.release().await;
            result
        }
        ReplayInto::ServerOwnHistory(conn) => {
            let rebase = Logged::Rebased(server_identity(conn).await?);
            replay::apply(
                store, key, backup, &segments, target, conn, &tools, rebase, coverage,
            )
            .await
        }
        // A restored datadir is started under a scratch server and replayed into like a
        // server the backup was just restored into; the server stops cleanly, so the datadir
        // is left at the target with its redo log applied and its replica position recorded.
        ReplayInto::Datadir(dir) => {
            let scratch = ScratchServer::start(&scratch::find_server()?, dir, None, false).await?;
            let replayed = replay_archived(
                scratch.connection(),
                true,
                (store, key, backup, &segments, target, &tools, coverage),
            )
            .await;
            let stopped = scratch.stop().await;
            let outcome = replayed?;
            stopped?;
            Ok(outcome)
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

/// What a replay into a server under the archived GTIDs reads.
type ArchivedReplay<'a> = (
    &'a std::sync::Arc<dyn bulwark_engine::store::Store>,
    Option<&'a MasterKey>,
    &'a CompleteBackup,
    &'a [super::SegmentManifest],
    &'a RecoveryTarget,
    &'a ReplayTools,
    Option<&'a super::coverage::Coverage>,
);

/// Replays into a server under the archived GTIDs, from what its replica position records
/// (the backup's point, set first, when the backup was just loaded), and records the end.
async fn replay_archived(
    conn: &Connection,
    just_loaded: bool,
    (store, key, backup, segments, target, tools, coverage): ArchivedReplay<'_>,
) -> Result<ReplayOutcome> {
    let mut position = positions::read(conn).await?;
    if just_loaded {
        // The load replaced whatever the server held: its binary log's GTIDs from before say
        // nothing of it.
        position.replica = positions::record_restored(conn, backup).await?;
        position.logged_by_others.clear();
    }
    let logged = Logged::Archived {
        known: position.replica.clone(),
        logged_by_others: position.logged_by_others.clone(),
    };
    let outcome = replay::apply(
        store, key, backup, segments, target, conn, tools, logged, coverage,
    )
    .await?;
    if outcome.transactions > 0 {
        let reached = GtidPos::parse(&outcome.reached)
            .map_err(|e| Error::PointInTime(format!("the replay's end: {e}")))?;
        let binlog = positions::read(conn).await?.binlog;
        let recorded = positions::to_record(&position.replica, &reached, &binlog);
        positions::record(conn, &recorded, |e| {
            Error::PointInTime(format!(
                "the replay applied {} transactions up to {reached}, but the server's replica \
                 position could not be set to {recorded} to record them ({e}): a replay run \
                 again would take the server for one that holds less",
                outcome.transactions
            ))
        })
        .await?;
    }
    Ok(outcome)
}
