//! The pending logical restore: what `bulwark-agent restore` leaves beside the datadir for the
//! agent (a verified logical backup and, for a point-in-time bootstrap, the target), and how
//! the agent loads it into the new primary: the dump through the SQL client, then the binlog
//! archive up to the target, logged under the new cluster's own GTIDs (its history began with
//! the load) so the replicas get both through replication.

use std::path::{Path, PathBuf};

use bulwark_engine::crypto::MasterKey;
use bulwark_engine::format;
use bulwark_engine::progress::Progress;
use bulwark_engine::repo::Repository;
use bulwark_engine::restore;
use bulwark_engine::source::Connection;
use bulwark_engine::store::{self, S3Options};
use bulwark_pitr::archive::recover::{self, ReplayInto};
use bulwark_pitr::archive::{RecoveryTarget, Window};
use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};

use crate::decide::sql;
use crate::run::files::read_if_present;
use bulwark_engine::outfile::OutfileError;

/// Where a pending logical restore comes from.
#[derive(Debug, Clone)]
pub struct PendingRestoreConfig {
    /// The file `bulwark-agent restore` leaves (holding the backup id).
    pub file: PathBuf,
    /// Repository URL; without it a pending restore fails (and says so).
    pub repo_url: Option<String>,
    /// S3 settings.
    pub s3: S3Options,
    /// Master key file, for encrypted backups.
    pub key_file: Option<PathBuf>,
    /// Chunks read in parallel.
    pub parallel: usize,
    /// SQL client to use instead of the detected one.
    pub tool: Option<String>,
}

/// A logical backup waiting to be loaded, and how far to bring it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingRestore {
    pub backup_id: String,
    /// Replay the archive up to this time (RFC 3339, whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Replay the archive up to this GTID position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_gtid: Option<String>,
}

impl PendingRestore {
    /// A pending restore of `backup_id` to `target` checked against `window` (the backup's
    /// window when the restore was staged). `latest` is fixed to the window's end as it is now,
    /// so that the cluster holds what the restore checked, not whatever the archive holds
    /// when the new primary gets to the load.
    pub fn new(backup_id: &str, target: Option<&RecoveryTarget>, window: Option<&Window>) -> Self {
        let mut p = PendingRestore {
            backup_id: backup_id.to_owned(),
            until: None,
            until_gtid: None,
        };
        match (target, window) {
            (Some(RecoveryTarget::Time(t)), _) => {
                p.until = Some(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            }
            (Some(RecoveryTarget::Gtid(g)), _) => p.until_gtid = Some(g.to_string()),
            (Some(RecoveryTarget::Latest), Some(w)) => p.until_gtid = Some(w.to.to_string()),
            (Some(RecoveryTarget::Latest), None) => p.until = Some("latest".into()),
            (None, _) => {}
        }
        p
    }

    /// The point-in-time target, if any.
    pub fn target(&self) -> Result<Option<RecoveryTarget>, String> {
        match (&self.until_gtid, &self.until) {
            (Some(p), _) => RecoveryTarget::parse_gtid(p).map(Some),
            (None, Some(t)) => RecoveryTarget::parse_time(t).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// Errors of the pending-restore file.
#[derive(Debug, thiserror::Error)]
pub enum PendingFileError {
    #[error("failed to leave the pending logical restore for the agent")]
    WritePending(#[source] OutfileError),
    #[error("failed to read the pending logical restore {path}")]
    ReadPending {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse the pending logical restore {path}: {content:?} is not a backup id")]
    ParsePending { path: String, content: String },
}

/// Leaves `pending` in `path` (atomically): the bare backup id, as every release wrote it,
/// unless a target needs the JSON form.
pub fn write(path: &Path, pending: &PendingRestore) -> Result<(), PendingFileError> {
    let mut text = if pending.until.is_none() && pending.until_gtid.is_none() {
        pending.backup_id.clone()
    } else {
        serde_json::to_string(pending).expect("plain strings serialize")
    };
    text.push('\n');
    crate::run::files::replace(path, text.as_bytes(), 0o644).map_err(PendingFileError::WritePending)
}

/// The pending restore in `path`, or `None` when there is none. A file holding a bare backup
/// id is a restore without a target.
pub fn read(path: &Path) -> Result<Option<PendingRestore>, PendingFileError> {
    let Some(text) = read_if_present(path).map_err(|source| PendingFileError::ReadPending {
        path: path.display().to_string(),
        source,
    })?
    else {
        return Ok(None);
    };
    let text = text.trim();
    let unparsable = || PendingFileError::ParsePending {
        path: path.display().to_string(),
        content: text.chars().take(64).collect(),
    };
    let pending = if text.starts_with('{') {
        serde_json::from_str::<PendingRestore>(text).map_err(|_| unparsable())?
    } else {
        PendingRestore::new(text, None, None)
    };
    if !format::is_backup_id(&pending.backup_id) || pending.target().is_err() {
        return Err(unparsable());
    }
    Ok(Some(pending))
}

/// Loads `pending` into the server through the SQL client (the dump verified in full first),
/// then replays the archive up to its target under the server's own GTIDs. Every load starts
/// by dropping the databases an earlier, failed attempt left (a replay cannot be repeated on
/// top of itself, and part of a load is not a load): this server never held anything else (it
/// is a new cluster's first primary, and the load runs before it serves). While it runs, the
/// partial-load mark names it, through the binary log, on every member that replicates it; it
/// goes last, once everything is loaded.
pub async fn load(
    cfg: &PendingRestoreConfig,
    pending: &PendingRestore,
    conn: Connection,
) -> Result<(), bulwark_pitr::Error> {
    let id = pending.backup_id.as_str();
    let target = pending.target().map_err(|why| {
        bulwark_engine::Error::InvalidArgument(format!("the pending restore's target: {why}"))
    })?;
    let url = cfg.repo_url.as_deref().ok_or_else(|| {
        bulwark_engine::Error::InvalidArgument(
            "no repository given (--repo) for the pending restore".into(),
        )
    })?;
    let key = cfg
        .key_file
        .as_deref()
        .map(MasterKey::from_file)
        .transpose()?;
    let repo = Repository::new(
        store::open(url, &cfg.s3, store::Opening::Existing)
            .await
            .map_err(bulwark_engine::Error::OpenRepository)?,
    )
    .under_key(key)
    .check_key()
    .await?;
    // Bound to the repository: what the archive's segments are read with.
    let key = repo.key().cloned();
    let backup = repo.resolve(id).await?;
    // Held against deletion (retention, delete) until the load and replay are done.
    let hold = repo.hold_for_restore(&backup.manifest.id).await?;
    let loaded = async {
        if let Some(target) = &target {
            // Refused before anything is dropped or loaded when the archive cannot reach it.
            recover::window(&repo, &backup, target)
                .await?
                .check(target)
                .map_err(bulwark_pitr::Error::PointInTime)?;
        }
        // The mark first: a copy of a replica taken at any point from here on holds it.
        mark_partial_load(&conn, pending).await?;
        start_over(&conn).await?;
        let outcome = restore::restore(
            &repo,
            &backup,
            key.as_ref(),
            bulwark_engine::restore::Destination::Server {
                connection: conn.clone(),
                verify_first: true,
                // The replicas get the data from the primary's binary log.
                binlogged: true,
            },
            cfg.tool.as_deref(),
            cfg.parallel,
            Progress::new(),
        )
        .await?;
        tracing::info!(backup_id = %id, bytes = outcome.plaintext_bytes, "backup loaded into mysqld");
        if let Some(target) = &target {
            let into = ReplayInto::ServerOwnHistory(conn.clone());
            let replayed = recover::replay_after(&repo, &backup, key.as_ref(), target, &into).await?;
            tracing::info!(
                backup_id = %id,
                target = %target,
                transactions = replayed.transactions,
                reached = %replayed.reached,
                last_commit = ?replayed.last_commit,
                "binlog archive replayed into mysqld"
            );
        }
        unmark_partial_load(&conn).await?;
        Ok::<(), bulwark_pitr::Error>(())
    }
    .await;
    hold.release().await;
    loaded
}

/// One connection to the server, for the load's own statements.
async fn connect(conn: &Connection) -> Result<mysql_async::Conn, bulwark_engine::Error> {
    mysql_async::Conn::new(conn.opts())
        .await
        .map_err(|e| bulwark_engine::Error::ConnectServer {
            target: conn.describe(),
            source: Box::new(e),
        })
}

fn query_failed(e: mysql_async::Error) -> bulwark_engine::Error {
    bulwark_engine::Error::QueryServer(Box::new(e))
}

/// Marks the load as begun, naming `pending`, through the binary log.
async fn mark_partial_load(
    conn: &Connection,
    pending: &PendingRestore,
) -> Result<(), bulwark_engine::Error> {
    let mut c = connect(conn).await?;
    let json = serde_json::to_string(pending).expect("plain strings serialize");
    for statement in sql::mark_partial_load(&json) {
        c.query_drop(statement).await.map_err(query_failed)?;
    }
    let _ = c.disconnect().await;
    Ok(())
}

/// Ends the mark: the load is whole.
async fn unmark_partial_load(conn: &Connection) -> Result<(), bulwark_engine::Error> {
    let mut c = connect(conn).await?;
    c.query_drop(sql::unmark_partial_load())
        .await
        .map_err(query_failed)?;
    let _ = c.disconnect().await;
    Ok(())
}

/// The load a partial-load mark names (its text as stored), when it names one.
pub fn from_mark(text: &str) -> Option<PendingRestore> {
    serde_json::from_str::<PendingRestore>(text)
        .ok()
        .filter(|p| format::is_backup_id(&p.backup_id) && p.target().is_ok())
}

/// Drops the databases a failed point-in-time load left (through the binary log, so replicas
/// that replicated part of it drop them too).
async fn start_over(conn: &Connection) -> Result<(), bulwark_engine::Error> {
    let mut c = connect(conn).await?;
    let schemas: Vec<String> = c.query(sql::DATABASES_QUERY).await.map_err(query_failed)?;
    for statement in sql::drop_user_databases(&schemas) {
        tracing::warn!(statement = %statement, "dropping what an earlier load attempt left");
        c.query_drop(statement).await.map_err(query_failed)?;
    }
    let _ = c.disconnect().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_pitr::binlog::GtidPos;

    const ID: &str = "20261122T031633Z-4a0760";

    #[test]
    fn pending_files_round_trip_and_old_ones_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pending");
        assert_eq!(read(&p).unwrap(), None);
        let window = Window {
            from: GtidPos::parse("0-1-10").unwrap(),
            from_time: chrono::DateTime::from_timestamp(1_795_000_000, 0).unwrap(),
            to: GtidPos::parse("0-2-90").unwrap(),
            to_time: chrono::DateTime::from_timestamp(1_795_000_100, 0).unwrap(),
        };
        let time =
            bulwark_pitr::archive::RecoveryTarget::parse_time("2026-11-25T03:15:00Z").unwrap();
        let gtid = RecoveryTarget::Gtid(GtidPos::parse("0-2-50").unwrap());
        let to = RecoveryTarget::Gtid(window.to.clone());
        let cases = [
            // (target asked, until, untilGtid, target loaded)
            (None, None, None, None),
            (Some(&time), Some("2026-11-25T03:15:00Z"), None, Some(&time)),
            (Some(&gtid), None, Some("0-2-50"), Some(&gtid)),
            // `latest` is fixed to the window's end when the restore is staged.
            (
                Some(&RecoveryTarget::Latest),
                None,
                Some("0-2-90"),
                Some(&to),
            ),
        ];
        for (target, until, until_gtid, loaded) in cases {
            let pending = PendingRestore::new(ID, target, Some(&window));
            assert_eq!(
                (pending.until.as_deref(), pending.until_gtid.as_deref()),
                (until, until_gtid)
            );
            write(&p, &pending).unwrap();
            assert_eq!(read(&p).unwrap().as_ref(), Some(&pending));
            if target.is_none() {
                assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{ID}\n"));
            }
            assert_eq!(pending.target().unwrap().as_ref(), loaded);
        }
        std::fs::write(&p, format!("{ID}\n")).unwrap();
        assert_eq!(read(&p).unwrap(), Some(PendingRestore::new(ID, None, None)));
        for bad in [
            "../../etc/passwd".to_owned(),
            format!("{{\"backupId\":\"{ID}\",\"untilGtid\":\"zero\"}}"),
            format!("{{\"backupId\":\"{ID}\",\"drop\":true}}"),
            "{".to_owned(),
        ] {
            std::fs::write(&p, &bad).unwrap();
            assert!(
                matches!(read(&p), Err(PendingFileError::ParsePending { .. })),
                "{bad}"
            );
        }
    }
}
