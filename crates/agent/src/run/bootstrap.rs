//! `bulwark-agent restore`: bootstraps a new cluster's datadir from a backup, before mysqld first
//! starts. A datadir that already holds a server is never touched. A physical backup is
//! extracted and prepared in a staging directory inside the datadir (a mount point, which
//! cannot be replaced by a rename) and its entries moved in; a marker file makes an
//! interrupted restore visible, so the next attempt starts over instead of leaving a
//! half-restored server. A physical restore also leaves the backup's GTID position in a file
//! for the agent, which makes the new server's binary log and replica position continue from
//! it (a restored datadir has no binary log). A logical backup is verified and left in a
//! pending file for the agent (with the point-in-time target, checked against the archive),
//! which loads it once mysqld runs ([`crate::run::pending`]). A logical bootstrap leaves no GTID
//! file: the load and the replay go through the primary's binary log under the new cluster's
//! own GTIDs, and replicas, which start empty, replicate them from the beginning of that log;
//! the dump's GTID position is the source's history, which no server of the new cluster holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bulwark_engine::crypto::MasterKey;
use bulwark_engine::format::{self, Method};
use bulwark_engine::outfile::OutfileError;
use bulwark_engine::progress::Progress;
use bulwark_engine::repo::{CompleteBackup, Repository};
use bulwark_engine::restore::{self, RestoreOutcome};
use bulwark_engine::source::{self, ToolJob};
use bulwark_pitr::archive::recover::{self, ReplayInto};
use bulwark_pitr::archive::replay::ReplayOutcome;
use bulwark_pitr::archive::RecoveryTarget;

use crate::decide::restored::{
    normalize_gtid_set, parse_binlog_info, plausible_gtid_set, RestoredGtid,
};
use crate::run::files::{self, read_if_present, sync_dir};
use crate::run::pending::{self, PendingFileError};

/// Marker present in the datadir from the start of a physical restore until its last file is
/// in place.
pub const MARKER_NAME: &str = ".bulwark-restore-incomplete";
/// Staging directory inside the datadir.
pub const STAGING_NAME: &str = ".bulwark-restore-staging";
/// Default name of the pending logical restore file, beside the datadir.
pub const PENDING_NAME: &str = "bulwark-pending-logical-restore";
/// Default name of the restored GTID file, beside the datadir.
pub const GTID_NAME: &str = "bulwark-restored-gtid";
/// Files where mariabackup (`mariadb_backup_binlog_info` in newer releases) and xtrabackup
/// record the binary log coordinates of a backup: `file<TAB>position<TAB>gtid`.
const BINLOG_INFO_NAMES: &[&str] = &["xtrabackup_binlog_info", "mariadb_backup_binlog_info"];
/// Entries that say a server has been initialized in a datadir (MariaDB and MySQL).
const SERVER_EVIDENCE: &[&str] = &["mysql", "ibdata1", "mysql.ibd"];
/// Entries a fresh volume may hold that are not data.
const IGNORED: &[&str] = &["lost+found"];

impl From<bulwark_engine::Error> for BootstrapError {
    fn from(e: bulwark_engine::Error) -> Self {
        BootstrapError::Restore(e.into())
    }
}

/// Errors of `bulwark-agent restore`.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("failed to inspect the datadir {path}")]
    InspectDatadir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "failed to accept the datadir {path}: it holds {entries} but no server; \
         refusing to restore over unknown files"
    )]
    AcceptDatadir { path: String, entries: String },
    #[error("failed to clear the interrupted restore in {path}")]
    ClearDatadir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to mark the restore as in progress")]
    MarkInProgress(#[source] OutfileError),
    #[error("failed to create the staging directory {path}")]
    CreateStaging {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to move {name} into the datadir {path}")]
    MoveIntoDatadir {
        name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to complete the restore in {path}")]
    CompleteRestore {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to restore the backup")]
    Restore(#[from] bulwark_pitr::Error),
    #[error(transparent)]
    Pending(#[from] PendingFileError),
    #[error("failed to read the binary log coordinates {path} of the restored backup")]
    ReadBinlogInfo {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to leave the restored GTID position for the agent")]
    WriteGtid(#[source] OutfileError),
    #[error("failed to read the restored GTID file {path}")]
    ReadGtid {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse the restored GTID file {path}: {reason}")]
    ParseGtid { path: String, reason: String },
    #[error("failed to remove the restored GTID file {path}")]
    RemoveGtid {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What a datadir holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatadirState {
    /// Nothing but ignorable entries: restore.
    Empty,
    /// A server's files (the entry named is the evidence): never touch.
    Initialized(String),
    /// The marker of an unfinished restore: clear and restore again.
    Interrupted,
    /// Files that are neither a server nor ours: refuse.
    Unexpected(Vec<String>),
}

/// Classifies a datadir by the names of its entries. `also_ignored` names entries that may
/// be there and are not data (the pending file, when it is kept inside the datadir).
pub fn classify(names: &[String], also_ignored: &[&str]) -> DatadirState {
    if names.iter().any(|n| n == MARKER_NAME) {
        return DatadirState::Interrupted;
    }
    if let Some(e) = names.iter().find(|n| SERVER_EVIDENCE.contains(&n.as_str())) {
        return DatadirState::Initialized(e.clone());
    }
    let mut unexpected: Vec<String> = names
        .iter()
        .filter(|n| !IGNORED.contains(&n.as_str()) && !also_ignored.contains(&n.as_str()))
        .cloned()
        .collect();
    if unexpected.is_empty() {
        DatadirState::Empty
    } else {
        unexpected.sort();
        DatadirState::Unexpected(unexpected)
    }
}

fn entry_names(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// Looks at the datadir, creating it when it does not exist. `own_files` (the pending and the
/// GTID file) are not data when they are kept inside the datadir.
pub fn inspect(datadir: &Path, own_files: &[&Path]) -> Result<DatadirState, BootstrapError> {
    let err = |source| BootstrapError::InspectDatadir {
        path: datadir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(datadir).map_err(err)?;
    let names = entry_names(datadir).map_err(err)?;
    let inside: Vec<String> = own_files
        .iter()
        .filter(|f| f.parent() == Some(datadir))
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let also: Vec<&str> = inside.iter().map(String::as_str).collect();
    Ok(match classify(&names, &also) {
        // The staging directory alone, without the marker, is a leftover of a restore that
        // stopped before it began: nothing else was written.
        DatadirState::Unexpected(u) if u == [STAGING_NAME] => DatadirState::Interrupted,
        other => other,
    })
}

/// Removes everything a restore may have written, except the marker (removed last, by the
/// next restore's completion) and ignorable entries.
pub fn clear(datadir: &Path) -> Result<(), BootstrapError> {
    let err = |source| BootstrapError::ClearDatadir {
        path: datadir.display().to_string(),
        source,
    };
    for name in entry_names(datadir).map_err(err)? {
        if name == MARKER_NAME || IGNORED.contains(&name.as_str()) {
            continue;
        }
        let p = datadir.join(&name);
        let meta = std::fs::symlink_metadata(&p).map_err(err)?;
        if meta.is_dir() {
            std::fs::remove_dir_all(&p).map_err(err)?;
        } else {
            std::fs::remove_file(&p).map_err(err)?;
        }
    }
    sync_dir(datadir).map_err(err)
}

/// What a physical bootstrap did.
#[derive(Debug, Clone)]
pub struct PhysicalBootstrap {
    /// The restore.
    pub outcome: RestoreOutcome,
    /// The GTID position left for the agent.
    pub gtid: RestoredGtid,
    /// The binlog replay after the backup, when a point in time was asked for.
    pub replayed: Option<ReplayOutcome>,
}

/// Whether `pod` is its StatefulSet's first member (ordinal 0): in a cluster restored to the
/// archive's latest point, the one member that restores; the others copy its data.
pub fn is_first_member(pod: &str) -> bool {
    pod.rsplit_once('-')
        .is_some_and(|(_, ordinal)| ordinal == "0")
}

/// Restores a physical backup into `datadir` (empty but for ignorable entries and, after an
/// interruption, the marker): marker, extraction and prepare in the staging directory, entries
/// moved in, the binlog archive replayed up to `until` (if given) under a temporary server, the
/// GTID position reached written to `gtid_file`, marker removed. The GTID file is written
/// before the marker goes, so a restore that completed always left it.
#[allow(clippy::too_many_arguments)]
pub async fn restore_physical(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    until: Option<&RecoveryTarget>,
    datadir: &Path,
    gtid_file: &Path,
    tool: Option<&str>,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<PhysicalBootstrap, BootstrapError> {
    let m = &backup.manifest;
    let dk = restore::data_key(backup, key)?;
    if m.encryption.is_some() && dk.is_none() {
        return Err(bulwark_engine::Error::KeyRequired { id: m.id.clone() }.into());
    }
    let prepare_tool = source::find_tool(m.source.engine, ToolJob::Physical, tool)?;
    let marker = datadir.join(MARKER_NAME);
    files::replace(
        &marker,
        format!("restoring backup {}\n", m.id).as_bytes(),
        0o644,
    )
    .map_err(BootstrapError::MarkInProgress)?;
    // One from an earlier, interrupted attempt describes a restore that never completed.
    remove_restored_gtid(gtid_file)?;
    clear(datadir)?;
    let restored = async {
        let staged =
            stage_and_move(repo, backup, dk, datadir, &prepare_tool, parallel, progress).await?;
        let replayed = match until {
            Some(target) => Some(replay_archive(repo, backup, key, target, datadir).await?),
            None => None,
        };
        Ok::<_, BootstrapError>((staged, replayed))
    }
    .await;
    if restored.is_err() {
        // Free the space now; the marker stays, so nothing here passes for a server.
        if let Err(e) = clear(datadir) {
            tracing::warn!(datadir = %datadir.display(), error = %bulwark_engine::error::chain(&e), "failed to clear the datadir after a failed restore");
        }
    }
    let (staged, replayed) = restored?;
    let gtid = RestoredGtid {
        backup_id: m.id.clone(),
        gtid_set: match replayed.as_ref().map(|r| r.reached.clone()).or_else(|| {
            m.consistent_point
                .gtid_set
                .as_deref()
                .map(normalize_gtid_set)
        }) {
            Some(g) if !g.is_empty() => g,
            _ => binlog_info_gtid(datadir)?.unwrap_or_default(),
        },
        gtid_history: String::new(),
    };
    write_restored_gtid(gtid_file, &gtid)?;
    let complete = |source| BootstrapError::CompleteRestore {
        path: datadir.display().to_string(),
        source,
    };
    files::remove(&marker).map_err(complete)?;
    Ok(PhysicalBootstrap {
        outcome: staged.outcome(datadir),
        gtid,
        replayed,
    })
}

/// Replays the binlog archive after `backup` up to `target` into the restored `datadir`.
async fn replay_archive(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    target: &RecoveryTarget,
    datadir: &Path,
) -> Result<ReplayOutcome, BootstrapError> {
    let into = ReplayInto::Datadir(datadir.to_path_buf());
    let outcome = recover::replay_after(repo, backup, key, target, &into).await?;
    tracing::info!(backup_id = %backup.manifest.id, transactions = outcome.transactions, reached = %outcome.reached, "binlog archive replayed into the restored datadir");
    Ok(outcome)
}

async fn stage_and_move(
    repo: &Repository,
    backup: &CompleteBackup,
    dk: Option<Arc<bulwark_engine::crypto::DataKey>>,
    datadir: &Path,
    prepare_tool: &Path,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<restore::Staged, BootstrapError> {
    let staging = datadir.join(STAGING_NAME);
    std::fs::create_dir(&staging).map_err(|source| BootstrapError::CreateStaging {
        path: staging.display().to_string(),
        source,
    })?;
    let staged = restore::stage_physical(
        repo,
        backup,
        dk,
        &staging,
        Some(prepare_tool),
        parallel,
        progress,
    )
    .await?;
    move_staged(&staging, datadir)?;
    Ok(staged)
}

/// Moves what was staged in `staging` (inside `datadir`) into `datadir`, removes the staging
/// directory and syncs.
pub fn move_staged(staging: &Path, datadir: &Path) -> Result<(), BootstrapError> {
    let complete = |source| BootstrapError::CompleteRestore {
        path: datadir.display().to_string(),
        source,
    };
    for name in entry_names(staging).map_err(complete)? {
        let from = staging.join(&name);
        let to = datadir.join(&name);
        if IGNORED.contains(&name.as_str()) && to.exists() {
            continue;
        }
        std::fs::rename(&from, &to).map_err(|source| BootstrapError::MoveIntoDatadir {
            name: name.clone(),
            path: datadir.display().to_string(),
            source,
        })?;
    }
    std::fs::remove_dir_all(staging).map_err(complete)?;
    sync_dir(datadir).map_err(complete)
}

/// Marks the datadir as being restored (or copied into), with `what` in the marker.
pub fn mark(datadir: &Path, what: &str) -> Result<(), BootstrapError> {
    files::replace(
        &datadir.join(MARKER_NAME),
        format!("{what}\n").as_bytes(),
        0o644,
    )
    .map_err(BootstrapError::MarkInProgress)
}

/// Removes the marker of a restore in progress (absent is fine): what the datadir holds is
/// now whole.
pub fn finish_marked(datadir: &Path) -> Result<(), BootstrapError> {
    let complete = |source| BootstrapError::CompleteRestore {
        path: datadir.display().to_string(),
        source,
    };
    files::remove(&datadir.join(MARKER_NAME)).map_err(complete)
}

/// Verifies a logical backup in full and leaves it in `pending_file` for the agent, with the
/// point-in-time target, which must lie inside the backup's window as the archive is now.
pub async fn stage_logical(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    until: Option<&RecoveryTarget>,
    pending_file: &Path,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<(), BootstrapError> {
    let m = &backup.manifest;
    if m.method != Method::Logical {
        return Err(bulwark_engine::Error::InvalidArgument(format!(
            "backup {} is not logical",
            m.id
        ))
        .into());
    }
    if m.encryption.is_some() && key.is_none() {
        return Err(bulwark_engine::Error::KeyRequired { id: m.id.clone() }.into());
    }
    let window = match until {
        Some(target) => {
            let window = recover::window(repo, backup, target).await?;
            window
                .check(target)
                .map_err(bulwark_pitr::Error::PointInTime)?;
            Some(window)
        }
        None => None,
    };
    restore::verify(repo, backup, key, parallel, progress).await?;
    pending::write(
        pending_file,
        &pending::PendingRestore::new(&m.id, until, window.as_ref()),
    )?;
    Ok(())
}

/// The default pending file: beside the datadir.
pub fn default_pending_file(datadir: &Path) -> PathBuf {
    beside(datadir, PENDING_NAME)
}

/// The default restored GTID file: beside the datadir.
pub fn default_gtid_file(datadir: &Path) -> PathBuf {
    beside(datadir, GTID_NAME)
}

fn beside(datadir: &Path, name: &str) -> PathBuf {
    match datadir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(name),
        _ => PathBuf::from(name),
    }
}

/// The GTID the backup tool recorded in a prepared datadir, if any.
pub fn binlog_info_gtid(datadir: &Path) -> Result<Option<String>, BootstrapError> {
    for name in BINLOG_INFO_NAMES {
        let path = datadir.join(name);
        let text =
            files::read_if_present(&path).map_err(|source| BootstrapError::ReadBinlogInfo {
                path: path.display().to_string(),
                source,
            })?;
        if let Some(g) = text.as_deref().and_then(parse_binlog_info) {
            return Ok(Some(g));
        }
    }
    Ok(None)
}

/// Writes the restored GTID file atomically.
pub fn write_restored_gtid(path: &Path, gtid: &RestoredGtid) -> Result<(), BootstrapError> {
    let mut text = serde_json::to_string(gtid).expect("plain strings serialize");
    text.push('\n');
    files::replace(path, text.as_bytes(), 0o644).map_err(BootstrapError::WriteGtid)
}

/// The restored GTID file's content, or `None` when there is none.
pub fn read_restored_gtid(path: &Path) -> Result<Option<RestoredGtid>, BootstrapError> {
    let Some(text) = read_if_present(path).map_err(|source| BootstrapError::ReadGtid {
        path: path.display().to_string(),
        source,
    })?
    else {
        return Ok(None);
    };
    let bad = |reason: String| BootstrapError::ParseGtid {
        path: path.display().to_string(),
        reason,
    };
    let gtid: RestoredGtid = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if !format::is_backup_id(&gtid.backup_id) {
        return Err(bad(format!(
            "{:?} is not a backup id",
            gtid.backup_id.chars().take(64).collect::<String>()
        )));
    }
    if !plausible_gtid_set(&gtid.gtid_history) {
        return Err(bad(format!(
            "{:?} is not a GTID history",
            gtid.gtid_history.chars().take(64).collect::<String>()
        )));
    }
    if !plausible_gtid_set(&gtid.gtid_set) {
        return Err(bad(format!(
            "{:?} is not a GTID set",
            gtid.gtid_set.chars().take(64).collect::<String>()
        )));
    }
    Ok(Some(gtid))
}

/// Removes the restored GTID file (absent is fine) and syncs its directory.
pub fn remove_restored_gtid(path: &Path) -> Result<(), BootstrapError> {
    let err = |source| BootstrapError::RemoveGtid {
        path: path.display().to_string(),
        source,
    };
    files::remove(path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn datadir_states() {
        use DatadirState::*;
        let cases: Vec<(&[&str], DatadirState)> = vec![
            (&[], Empty),
            (&["lost+found"], Empty),
            (&["pending"], Empty),
            (&["mysql", "ibdata1"], Initialized("mysql".into())),
            (&["lost+found", "ibdata1"], Initialized("ibdata1".into())),
            (&["mysql.ibd", "undo_001"], Initialized("mysql.ibd".into())),
            // The marker wins over evidence: a half-moved restore has a mysql/ directory.
            (&["mysql", MARKER_NAME], Interrupted),
            (&[MARKER_NAME, STAGING_NAME], Interrupted),
            (&["notes.txt", "a"], Unexpected(names(&["a", "notes.txt"]))),
        ];
        for (entries, want) in cases {
            assert_eq!(classify(&names(entries), &["pending"]), want, "{entries:?}");
        }
    }

    #[test]
    fn clear_keeps_the_marker_and_lost_found() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["mysql", "lost+found", STAGING_NAME] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("mysql/user.frm"), "x").unwrap();
        std::fs::write(d.join("ibdata1"), "x").unwrap();
        std::fs::write(d.join(MARKER_NAME), "x").unwrap();
        clear(d).unwrap();
        let mut left = entry_names(d).unwrap();
        left.sort();
        assert_eq!(left, [MARKER_NAME, "lost+found"]);
        assert_eq!(
            inspect(d, &[&d.join("p")]).unwrap(),
            DatadirState::Interrupted
        );
    }

    #[test]
    fn default_files_lie_beside_the_datadir() {
        assert_eq!(
            default_pending_file(Path::new("/var/lib/mysql")),
            Path::new("/var/lib/bulwark-pending-logical-restore")
        );
    }

    #[test]
    fn own_files_inside_the_datadir_are_not_data() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("pending"), "x").unwrap();
        std::fs::write(d.join("gtid"), "x").unwrap();
        assert_eq!(
            inspect(d, &[&d.join("pending"), &d.join("gtid")]).unwrap(),
            DatadirState::Empty
        );
        assert_eq!(
            inspect(d, &[&d.join("pending"), &dir.path().join("elsewhere/gtid")]).unwrap(),
            DatadirState::Unexpected(names(&["gtid"]))
        );
    }

    #[test]
    fn binlog_info_files() {
        let cases: &[(&str, Option<&str>)] = &[
            ("mysql-bin.000001\t814\t0-100-503\n", Some("0-100-503")),
            ("mysql-bin.000001\t814\t0-1-5,1-2-7\n", Some("0-1-5,1-2-7")),
            // MySQL prints long sets over lines.
            (
                "binlog.000003\t157\t3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\n\
                 5d4a2b10-1f2e-11ee-8f00-0242ac120002:1-3\n",
                Some(
                    "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\
                     5d4a2b10-1f2e-11ee-8f00-0242ac120002:1-3",
                ),
            ),
            ("mysql-bin.000001\t814\t\n", None),
            ("mysql-bin.000001\t814\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_binlog_info(text).as_deref(), *want, "{text:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(binlog_info_gtid(dir.path()).unwrap(), None);
        std::fs::write(
            dir.path().join("mariadb_backup_binlog_info"),
            "mysql-bin.000002\t330\t0-101-42\n",
        )
        .unwrap();
        assert_eq!(
            binlog_info_gtid(dir.path()).unwrap().as_deref(),
            Some("0-101-42")
        );
    }

    #[test]
    fn restored_gtid_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gtid");
        assert_eq!(read_restored_gtid(&p).unwrap(), None);
        remove_restored_gtid(&p).unwrap();
        for (gtid_set, history) in [
            ("0-1-500,1-2-3", "0-100-5,0-1-500,1-2-3"),
            ("", ""),
            ("3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_1:1-5", ""),
        ] {
            let g = RestoredGtid {
                backup_id: "20261122T031633Z-4a0760".into(),
                gtid_set: gtid_set.into(),
                gtid_history: history.into(),
            };
            write_restored_gtid(&p, &g).unwrap();
            assert_eq!(read_restored_gtid(&p).unwrap(), Some(g));
        }
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"backupId\":\"20261122T031633Z-4a0760\",\
             \"gtidSet\":\"3e11fa47-71ca-11e1-9e33-c80aa9429562:tag_1:1-5\"}\n"
        );
        for (bad, needle) in [
            (
                "{\"backupId\":\"x\",\"gtidSet\":\"0-1-2\"}",
                "not a backup id",
            ),
            (
                "{\"backupId\":\"20261122T031633Z-4a0760\",\"gtidSet\":\"0-1-2'; DROP\"}",
                "not a GTID set",
            ),
            (
                "{\"backupId\":\"20261122T031633Z-4a0760\",\"gtidSet\":\"0-1-2\",\"gtidHistory\":\"0-1-2'\"}",
                "not a GTID history",
            ),
            ("0-1-2", "expected"),
        ] {
            std::fs::write(&p, bad).unwrap();
            let e = read_restored_gtid(&p).unwrap_err();
            assert!(
                bulwark_engine::error::chain(&e).contains(needle),
                "{bad}: {}",
                bulwark_engine::error::chain(&e)
            );
        }
        remove_restored_gtid(&p).unwrap();
        assert!(!p.exists());
        assert_eq!(
            default_gtid_file(Path::new("/var/lib/mysql")),
            Path::new("/var/lib/bulwark-restored-gtid")
        );
    }
}
