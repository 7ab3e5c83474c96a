//! Replay into a datadir: a restored, prepared physical backup is started under a scratch
//! server ([`bulwark_engine::scratch`]: no network, no grant checks, no binary log), the archive
//! is replayed into it, and the server is shut down cleanly, so the directory is left at the
//! target with its redo log applied.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::manifest::SegmentManifest;
use super::replay::{self, ReplayOutcome, ReplayTools};
use super::RecoveryTarget;
use crate::error::Result;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::repo::CompleteBackup;
use bulwark_engine::scratch::ScratchServer;

/// Replays the archive after `backup` up to `target` into the prepared `datadir`, with the
/// server binary `server`.
#[allow(clippy::too_many_arguments)]
pub async fn replay_into_datadir(
    store: &Arc<dyn bulwark_engine::store::Store>,
    key: Option<&MasterKey>,
    backup: &CompleteBackup,
    segments: &[SegmentManifest],
    target: &RecoveryTarget,
    datadir: &Path,
    server: &Path,
    tools: &ReplayTools,
    coverage: Option<&super::coverage::Coverage>,
) -> Result<ReplayOutcome> {
    let scratch = ScratchServer::start(server, datadir, None, false).await?;
    // A datadir restored afresh holds nothing of the archive; its replica position is the
    // source's, which says nothing of this replay.
    let fresh = replay::Logged::Archived {
        known: crate::binlog::GtidPos::default(),
        logged_by_others: Vec::new(),
    };
    let replayed = replay::apply(
        store,
        key,
        backup,
        segments,
        target,
        scratch.connection(),
        tools,
        fresh,
        coverage,
    )
    .await;
    // What the datadir holds is recorded as its replica position, so a replay into the
    // server started on it later begins where this one ended.
    let replayed = match replayed {
        Ok(outcome) => record_reached(&scratch, backup, &outcome)
            .await
            .map(|()| outcome),
        Err(e) => Err(e),
    };
    let stopped = scratch.stop().await;
    let outcome = replayed?;
    stopped?;
    Ok(outcome)
}

async fn record_reached(
    scratch: &ScratchServer,
    backup: &CompleteBackup,
    outcome: &ReplayOutcome,
) -> Result<()> {
    let parse = |what: &str, text: &str| {
        crate::binlog::GtidPos::parse(text)
            .map_err(|e| crate::error::Error::PointInTime(format!("{what}: {e}")))
    };
    let point = parse(
        "the backup's point",
        backup
            .manifest
            .consistent_point
            .gtid_set
            .as_deref()
            .unwrap_or(""),
    )?;
    let reached = parse("the replay's end", &outcome.reached)?;
    let position = super::positions::to_record(&point, &reached, &Default::default());
    super::positions::record(scratch.connection(), &position, |e| {
        crate::error::Error::PointInTime(format!(
            "the replay reached {reached}, but the datadir's replica position could not be set \
             to it ({e})"
        ))
    })
    .await
}

/// The server binary: `mariadbd` (or `mysqld`) on PATH or in the usual sbin directories.
pub fn find_server() -> Result<PathBuf> {
    Ok(bulwark_engine::scratch::find_server()?)
}
