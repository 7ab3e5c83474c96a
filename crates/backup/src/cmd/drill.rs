//! `drill`: proves a backup restorable by restoring it. The backup is restored in full (every
//! chunk checked) into a scratch directory, optionally brought to a point in time from the
//! binlog archive, started under a scratch server that never listens on the network, every
//! table checked with `CHECK TABLE`, the user's assertions run, and everything removed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bulwark_cli::args::{shutdown_signal, BackupSelector, ProgressArgs, UntilArgs};
use bulwark_cli::output::{human_bytes, print_json};
use bulwark_cli::progress::Reporter;
use bulwark_contract::result::{self as report, DrillResult};
use bulwark_engine::format::Method;
use bulwark_engine::progress::Progress;
use bulwark_engine::restore::{self, Destination};
use bulwark_engine::scratch::{self, ScratchServer};
use bulwark_engine::source::Connection;
use bulwark_engine::Error;
use clap::Args;
use mysql_async::prelude::Queryable;
use serde_json::json;

use super::drill_checks::{self, CheckRow};
use super::pitr;

/// Tables named in one `CHECK TABLE` statement.
const CHECK_BATCH: usize = 50;

#[derive(Args)]
pub struct DrillArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
    /// Directory the scratch datadir is made in (default: the system's temporary directory);
    /// refused when it cannot hold the restore.
    #[arg(long, env = "MYSQL_BACKUP_SCRATCH_DIR")]
    pub scratch_dir: Option<PathBuf>,
    /// SQL that must return one row whose first column is a non-zero number, run against the
    /// restored data, e.g. `SELECT COUNT(*) > 0 FROM shop.orders`; may be repeated.
    #[arg(long = "assert", value_name = "SQL")]
    pub assertions: Vec<String>,
    #[command(flatten)]
    pub until: UntilArgs,
    /// Tool for --prepare or the SQL client, instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    pub tool: Option<String>,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write the result as one line of JSON (`{"error": …}` on failure), at most 4096
    /// bytes, e.g. to Kubernetes' /dev/termination-log.
    #[arg(long, env = "MYSQL_BACKUP_RESULT_FILE")]
    pub result_file: Option<PathBuf>,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

fn drill_failed(id: &str, why: String) -> anyhow::Error {
    anyhow::anyhow!("drill of backup {id} failed: {why}")
}

/// Free bytes for an unprivileged writer on the filesystem holding `dir`.
fn free_bytes(dir: &Path) -> Result<u64, Error> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("{} holds a NUL byte", dir.display())))?;
    // SAFETY: statvfs writes only into `st`, which outlives the call; `path` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(Error::LocalIo {
            action: "inspect",
            path: dir.display().to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

pub async fn cmd_drill(a: DrillArgs) -> anyhow::Result<()> {
    let parent = a.scratch_dir.clone().unwrap_or_else(std::env::temp_dir);
    let (work, lock) = scratch_dir(&parent)?;
    let work = work.keep();
    let result_file = a.result_file.clone();
    // Stopped by a signal, the drill's future is dropped: the scratch server and the tools it
    // started are killed; either way the scratch directory is removed after.
    let result = tokio::select! {
        r = drill(a, &work) => r,
        _ = shutdown_signal() => Err(Error::Interrupted.into()),
    };
    remove_abandoned(&work);
    drop(lock);
    if let Some(path) = result_file {
        let line = match &result {
            Ok(r) => r.to_line(),
            Err(e) => report::error_line(&bulwark_cli::output::failure_line(e.as_ref())),
        };
        if let Err(e) = bulwark_engine::outfile::write_replacing(&path, line.as_bytes()) {
            tracing::error!(path = %path.display(), error = %bulwark_engine::error::chain(&e), "failed to write the result file");
        }
    }
    result.map(drop)
}

/// Prefix of a drill's scratch directory, and the lock a running drill holds in it.
const WORK_PREFIX: &str = "mysql-backup-drill-";
const WORK_LOCK: &str = "drill.lock";

/// Makes this drill's scratch directory under `parent`, locked for as long as the drill runs,
/// after removing those of drills that no longer run (killed ones), all under `parent`'s own
/// drill lock so two drills starting together never take each other's for abandoned.
fn scratch_dir(parent: &Path) -> Result<(tempfile::TempDir, std::fs::File), Error> {
    let io = |action: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |source| Error::LocalIo {
            action,
            path,
            source,
        }
    };
    let parent_lock_path = parent.join(format!(".{WORK_PREFIX}lock"));
    let parent_lock = loop {
        if let Some(lock) = bulwark_engine::staging::try_lock(&parent_lock_path)? {
            break lock;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    for entry in std::fs::read_dir(parent).map_err(io("read", parent))? {
        let entry = entry.map_err(io("read", parent))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(WORK_PREFIX) || !entry.path().is_dir() {
            continue;
        }
        if bulwark_engine::staging::try_lock(&entry.path().join(WORK_LOCK))?.is_some() {
            tracing::warn!(path = %entry.path().display(), "removing the scratch directory of a drill that was stopped");
            remove_abandoned(&entry.path());
        }
    }
    let work = tempfile::Builder::new()
        .prefix(WORK_PREFIX)
        .tempdir_in(parent)
        .map_err(io("create a directory in", parent))?;
    let lock = bulwark_engine::staging::try_lock(&work.path().join(WORK_LOCK))?
        .ok_or_else(|| Error::InvalidArgument("a new scratch directory is locked".into()))?;
    drop(parent_lock);
    Ok((work, lock))
}

/// Removes a drill's scratch directory, its own at its end or a killed one's. A process it had
/// started may still be dying, so a directory that fills while it is removed is tried again
/// for a while; one that cannot be removed is left for the next drill, with a warning.
fn remove_abandoned(dir: &Path) {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e)
                if e.kind() == std::io::ErrorKind::DirectoryNotEmpty
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(e) => {
                tracing::warn!(path = %dir.display(), error = %e, "could not remove the scratch directory of a drill that was stopped; the next drill tries again");
                return;
            }
        }
    }
}

async fn drill(a: DrillArgs, work: &Path) -> anyhow::Result<DrillResult> {
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let until = a.until.target()?;
    let (repo, backup, key) = a.backup.open().await?;
    let m = &backup.manifest;
    let id = m.id.clone();
    if let Some(until) = &until {
        bulwark_pitr::archive::recover::window(&repo, &backup, until)
            .await?
            .check(until)
            .map_err(bulwark_pitr::Error::PointInTime)?;
    }
    let parent = a.scratch_dir.clone().unwrap_or_else(std::env::temp_dir);
    let logical = m.method == Method::Logical;
    let (needed, free) = (
        bulwark_contract::drill::scratch_bytes(m.plaintext.bytes, logical),
        free_bytes(&parent)?,
    );
    if free < needed {
        return Err(drill_failed(
            &id,
            format!(
                "the scratch directory {} has {} free, and restoring it needs about {}",
                parent.display(),
                human_bytes(free),
                human_bytes(needed)
            ),
        ));
    }
    let server_binary = scratch::find_server_for(m.source.engine).await?;
    scratch::check_run_parent(None)?;
    let datadir = work.join("data");
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "drill", a.progress.display());
    let parallel = a.backup.parallel();
    let restore_into = |target| {
        restore::restore(
            &repo,
            &backup,
            key.as_ref(),
            target,
            a.tool.as_deref(),
            parallel,
            progress,
        )
    };
    // Held against deletion while it is read: a drill never fails for retention's sake.
    let hold = repo.hold_for_restore(&id).await?;
    let restored = async {
        let server = match m.method {
            Method::Physical => {
                restore_into(Destination::Directory {
                    path: datadir.clone(),
                    force: false,
                    prepare: true,
                })
                .await?;
                ScratchServer::start(&server_binary, &datadir, None, false).await?
            }
            Method::Logical => {
                std::fs::create_dir(&datadir).map_err(|source| Error::LocalIo {
                    action: "create",
                    path: datadir.display().to_string(),
                    source,
                })?;
                scratch::initialize(&datadir).await?;
                let server = ScratchServer::start(&server_binary, &datadir, None, true).await?;
                restore_into(Destination::Server {
                    connection: server.connection().clone(),
                    verify_first: true,
                    binlogged: false,
                })
                .await?;
                // The dump's accounts replaced the scratch server's own (it flushes privileges):
                // from here on, no account is checked.
                server.stop().await?;
                ScratchServer::start(&server_binary, &datadir, None, false).await?
            }
        };
        // Either way the scratch server holds exactly the backup now; the archive is replayed
        // into it as it runs (one server start, not a second one for a replay into the datadir).
        let replayed = match &until {
            Some(until) => {
                let into = pitr::ReplayInto::RestoredServer(server.connection().clone());
                Some(pitr::replay(&repo, &backup, key.as_ref(), until, into).await?)
            }
            None => None,
        };
        Ok::<_, anyhow::Error>((server, replayed))
    };
    let restored = restored.await;
    hold.release().await;
    reporter.finish().await;
    let (server, replayed) = restored.map_err(|e| {
        drill_failed(
            &id,
            format!("restore: {}", bulwark_cli::output::failure_line(e.as_ref())),
        )
    })?;
    let restore_seconds = started.elapsed().as_secs_f64();
    let checked = check(server.connection(), &a.assertions).await;
    let stopped = server.stop().await;
    let checked = checked.map_err(|why| drill_failed(&id, why))?;
    stopped.map_err(|e| drill_failed(&id, format!("the scratch server: {e}")))?;
    let total_seconds = started.elapsed().as_secs_f64();
    let result = DrillResult {
        backup_id: id.clone(),
        method: m.method.to_string(),
        started_at,
        finished_at: chrono::Utc::now(),
        plaintext_bytes: m.plaintext.bytes,
        restore_seconds,
        total_seconds,
        tables_checked: checked.tables_checked as u64,
        tables_unchecked: checked.unchecked.clone(),
        assertions: a.assertions.len() as u32,
        reached_gtid: replayed.as_ref().map(|r| r.reached.to_string()),
        replayed_transactions: replayed.as_ref().map(|r| r.transactions),
    };
    if a.json {
        print_json(&json!({
            "backupId": id,
            "method": m.method.to_string(),
            "ok": true,
            "plaintextBytes": m.plaintext.bytes,
            "restoreSeconds": restore_seconds,
            "totalSeconds": total_seconds,
            "tablesChecked": checked.tables_checked,
            "tablesUnchecked": checked.unchecked,
            "assertions": a.assertions.len(),
            "replay": replayed,
        }));
    } else {
        println!(
            "drill of backup {id} passed: restored {} in {restore_seconds:.1} s{}, {} tables checked{}, {} assertions held; {total_seconds:.1} s in all",
            human_bytes(m.plaintext.bytes),
            replayed
                .as_ref()
                .map(|r| format!(" and replayed to GTID position {}", r.reached))
                .unwrap_or_default(),
            checked.tables_checked,
            if checked.unchecked.is_empty() {
                String::new()
            } else {
                format!(" ({} its engine cannot check: {})", checked.unchecked.len(), checked.unchecked.join(", "))
            },
            a.assertions.len(),
        );
    }
    Ok(result)
}

/// What the checks found sound.
struct Checked {
    tables_checked: usize,
    unchecked: Vec<String>,
}

/// Checks every table and runs the assertions; the first failure, in one line.
async fn check(conn: &Connection, assertions: &[String]) -> Result<Checked, String> {
    let mut c = mysql_async::Conn::new(conn.opts())
        .await
        .map_err(|e| format!("connect to the scratch server: {e}"))?;
    let result = check_on(&mut c, assertions).await;
    let _ = c.disconnect().await;
    result
}

async fn check_on(c: &mut mysql_async::Conn, assertions: &[String]) -> Result<Checked, String> {
    let tables: Vec<(String, String)> = c
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES \
             WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED', 'SEQUENCE') \
             AND TABLE_SCHEMA NOT IN ('information_schema', 'performance_schema', 'sys') \
             ORDER BY TABLE_SCHEMA, TABLE_NAME",
        )
        .await
        .map_err(|e| format!("list the tables: {e}"))?;
    let quote = |s: &str| format!("`{}`", s.replace('`', "``"));
    let mut verdict = drill_checks::CheckVerdict::default();
    for batch in tables.chunks(CHECK_BATCH) {
        let names: Vec<String> = batch
            .iter()
            .map(|(schema, table)| format!("{}.{}", quote(schema), quote(table)))
            .collect();
        let rows: Vec<(String, String, String, String)> = c
            .query(format!("CHECK TABLE {}", names.join(", ")))
            .await
            .map_err(|e| format!("CHECK TABLE: {e}"))?;
        let rows: Vec<CheckRow> = rows
            .into_iter()
            .map(|(table, _op, msg_type, msg_text)| CheckRow {
                table,
                msg_type,
                msg_text,
            })
            .collect();
        let v = drill_checks::judge_check(&rows);
        verdict.sound.extend(v.sound);
        verdict.unchecked.extend(v.unchecked);
        verdict.damaged.extend(v.damaged);
    }
    if let Some((table, said)) = verdict.damaged.first() {
        return Err(format!(
            "CHECK TABLE found {} damaged table(s); {table}: {said}",
            verdict.damaged.len()
        ));
    }
    for (n, sql) in assertions.iter().enumerate() {
        let failed =
            |e: mysql_async::Error| format!("assertion {} ({sql}) failed to run: {e}", n + 1);
        let mut result = c.query_iter(sql.as_str()).await.map_err(failed)?;
        let rows: Vec<mysql_async::Row> = result.collect().await.map_err(failed)?;
        // One statement, one answer: a second result would go unjudged.
        if !result.is_empty() {
            let _ = result.drop_result().await;
            return Err(format!(
                "assertion {} ({sql}) returned more than one result; give one statement",
                n + 1
            ));
        }
        drop(result);
        let values: Vec<Vec<Option<String>>> = rows
            .into_iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.get_opt::<Option<String>, _>(i)
                            .and_then(Result::ok)
                            .flatten()
                    })
                    .collect()
            })
            .collect();
        drill_checks::judge_assertion(&values)
            .map_err(|why| format!("assertion {} ({sql}) does not hold: {why}", n + 1))?;
    }
    Ok(Checked {
        tables_checked: verdict.sound.len(),
        unchecked: verdict.unchecked,
    })
}
