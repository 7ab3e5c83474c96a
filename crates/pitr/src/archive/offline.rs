//! Replay into a datadir: a restored, prepared physical backup is started under a temporary
//! server (no network, no grant checks, no binary log, its own socket and logs), the archive is
//! replayed into it, and the server is shut down cleanly, so the directory is left at the
//! target with its redo log applied.

use bulwark_engine::Error as EngineError;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::manifest::SegmentManifest;
use super::replay::{self, ReplayOutcome, ReplayTools};
use super::RecoveryTarget;
use crate::error::{Error, Result};
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::repo::CompleteBackup;
use bulwark_engine::source::Connection;

/// How long a temporary server may take to start (crash recovery of a large redo log).
const START_TIMEOUT: Duration = Duration::from_secs(600);
/// How long it may take to shut down.
const STOP_TIMEOUT: Duration = Duration::from_secs(600);

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
) -> Result<ReplayOutcome> {
    let failed = |reason: String| {
        Error::from(EngineError::RestoreTarget {
            target: datadir.display().to_string(),
            reason,
        })
    };
    let run = tempfile::Builder::new()
        .prefix("mysql-backup-pitr-")
        .tempdir()
        .map_err(|source| EngineError::LocalIo {
            action: "create a directory in",
            path: std::env::temp_dir().display().to_string(),
            source,
        })?;
    let socket = run.path().join("mysqld.sock");
    let error_log = run.path().join("error.log");
    let mut args: Vec<String> = vec![
        "--no-defaults".into(),
        format!("--datadir={}", datadir.display()),
        format!("--socket={}", socket.display()),
        format!("--pid-file={}", run.path().join("mysqld.pid").display()),
        format!("--log-error={}", error_log.display()),
        format!("--tmpdir={}", run.path().display()),
        "--skip-networking".into(),
        "--skip-grant-tables".into(),
        "--skip-log-bin".into(),
        "--skip-slave-start".into(),
        "--innodb-buffer-pool-size=256M".into(),
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        args.push("--user=root".into());
    }
    let mut command = tokio::process::Command::new(server);
    command
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // A killed restore must not leave a server running on a staging directory the next
    // restore removes.
    bulwark_engine::source::dies_with_parent(&mut command);
    let mut child = command.spawn().map_err(|source| EngineError::StartTool {
        tool: server.display().to_string(),
        source,
    })?;
    let conn = Connection {
        socket: Some(socket.clone()),
        user: Some("root".into()),
        ..Default::default()
    };
    let started = Instant::now();
    let mut admin = loop {
        if let Ok(Ok(c)) =
            tokio::time::timeout(Duration::from_secs(5), mysql_async::Conn::new(conn.opts())).await
        {
            break c;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failed(format!(
                "the temporary server exited ({status}): {}",
                log_tail(&error_log)
            )));
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(failed(format!(
                "the temporary server did not start in {START_TIMEOUT:?}: {}",
                log_tail(&error_log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tracing::info!(datadir = %datadir.display(), "temporary server started for the replay");
    // A datadir restored afresh holds nothing of the archive; its replica position is the
    // source's, which says nothing of this replay.
    let fresh = replay::Logged::Archived {
        known: crate::binlog::GtidPos::default(),
        logged_by_others: crate::binlog::GtidPos::default(),
    };
    let replayed = replay::apply(store, key, backup, segments, target, &conn, tools, fresh).await;
    let stopped = async {
        admin.query_drop("SHUTDOWN").await.ok();
        drop(admin);
        match tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(failed(format!(
                "the temporary server stopped with {status}: {}",
                log_tail(&error_log)
            ))),
            Ok(Err(source)) => Err(EngineError::LocalIo {
                action: "wait for",
                path: server.display().to_string(),
                source,
            }
            .into()),
            Err(_) => {
                let _ = child.kill().await;
                Err(failed(format!(
                    "the temporary server did not stop in {STOP_TIMEOUT:?}"
                )))
            }
        }
    }
    .await;
    let outcome = replayed?;
    stopped?;
    Ok(outcome)
}

/// The server binary: `mariadbd` (or `mysqld`) on PATH or in the usual sbin directories.
pub fn find_server() -> Result<PathBuf> {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/libexec"].map(PathBuf::from));
    let dirs: Vec<PathBuf> = dirs.collect();
    for name in ["mariadbd", "mysqld"] {
        if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            return Ok(p);
        }
    }
    Err(EngineError::ToolNotFound {
        wanted: "mariadbd or mysqld (the server runs the replay into a directory)".into(),
    }
    .into())
}

/// The last lines of the temporary server's error log, on one line.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}
