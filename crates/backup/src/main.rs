//! The `mysql-backup` command line: argument parsing, output formatting and exit codes over the
//! library.

use std::path::PathBuf;

use chrono::Utc;
use clap::{Args, Parser, Subcommand};
use mysql_backup::backup::{self, BackupRequest};
use mysql_backup::cli::args::{
    absolute, open_repo, parse_archive_name, parse_size, shutdown_signal, workers, BackupSelector,
    ConnArgs, KeyArgs, ProgressArgs, RepoArgs,
};
use mysql_backup::cli::output::{
    human_bytes, init_logging, peak_rss_bytes, print_json, print_table, LogFormat,
};
use mysql_backup::crypto::MasterKey;
use mysql_backup::format::{self, Method};
use mysql_backup::progress::{Progress, Reporter};
use mysql_backup::repo::CompleteBackup;
use mysql_backup::restore::{self, Target};
use mysql_backup::retention::{self, KeepPolicy};
use mysql_backup::writer::WriteOptions;
use mysql_backup::{prune, report, rotate, Error};
use serde_json::json;

mod pitr;

#[derive(Parser)]
#[command(
    name = "mysql-backup",
    version,
    about = "Streaming, compressed, encrypted, verifiable MySQL/MariaDB backups to a filesystem or S3"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "MYSQL_BACKUP_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// Log filter (tracing syntax), e.g. `info` or `mysql_backup=debug`.
    #[arg(long, global = true, default_value = "info", env = "MYSQL_BACKUP_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take a backup and commit it to the repository.
    Backup(BackupArgs),
    /// List backups (complete ones; with --all also incomplete and damaged ones).
    List(ListArgs),
    /// Re-read a backup and check every digest (and, with the key, decrypt and decompress).
    Verify(VerifyArgs),
    /// Restore a physical backup into a directory or a logical one into a server.
    Restore(RestoreArgs),
    /// Write a backup's plaintext (xbstream or SQL) to stdout, verifying as it goes.
    Cat(CatArgs),
    /// Apply retention rules and remove stale incomplete backups.
    Prune(PruneArgs),
    /// Rotate the master key: re-wrap the data keys of backups encrypted with the old key
    /// (manifests only; the data is not rewritten).
    Rewrap(RewrapArgs),
    /// Delete one backup (manifest first, then its data); succeeds when it is already gone.
    Delete(DeleteArgs),
    /// Stream the server's binary logs into the repository until stopped (point-in-time
    /// recovery); resumes where the archive ends.
    Archive(pitr::ArchiveArgs),
    /// Apply the binlog archive after a backup to a running server (after restoring that
    /// backup), up to --until or --until-gtid (default: latest).
    Replay(pitr::ReplayArgs),
}

#[derive(Args)]
struct BackupArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// physical (xtrabackup/mariabackup) or logical (mysqldump/mariadb-dump).
    #[arg(
        long,
        value_enum,
        default_value = "physical",
        env = "MYSQL_BACKUP_METHOD"
    )]
    method: Method,
    #[command(flatten)]
    pub conn: ConnArgs,
    /// zstd level (1 is fastest; see the README's benchmark).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, env = "MYSQL_BACKUP_COMPRESSION_LEVEL", value_parser = clap::value_parser!(i32).range(-7..=19))]
    compression_level: i32,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Plaintext chunk size, e.g. 8MiB.
    #[arg(long, default_value = "8MiB", value_parser = parse_size, env = "MYSQL_BACKUP_CHUNK_SIZE")]
    chunk_size: u64,
    /// Cap on a segment object's size, e.g. 4GiB.
    #[arg(long, default_value = "4GiB", value_parser = parse_size, env = "MYSQL_BACKUP_SEGMENT_SIZE")]
    segment_size: u64,
    /// Chunks compressed in parallel (default: number of CPUs).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    workers: Option<usize>,
    /// Backup tool to run instead of the detected one (name or path).
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    tool: Option<String>,
    /// Datadir as mounted here, when it differs from the server's @@datadir.
    #[arg(long, env = "MYSQL_BACKUP_DATADIR")]
    datadir: Option<String>,
    /// Extra argument for the tool (repeatable), e.g. --tool-arg=--parallel=4.
    #[arg(long = "tool-arg", allow_hyphen_values = true)]
    tool_args: Vec<String>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Also write the result as one line of JSON (`{"error": …}` on failure), at most 4096
    /// bytes, e.g. to Kubernetes' /dev/termination-log.
    #[arg(long, env = "MYSQL_BACKUP_RESULT_FILE")]
    result_file: Option<PathBuf>,
    /// Store the backup under this id (like 20261122T031633Z-4a0760) instead of a new one;
    /// refused when the repository already holds anything under it. Lets a scheduler know the
    /// id before the run, to delete what a run it stops leaves.
    #[arg(long)]
    backup_id: Option<String>,
    /// The binlog archive (`mysql-backup archive --archive`) that continues this backup, for
    /// point-in-time restores [default: default].
    #[arg(long, env = "MYSQL_BACKUP_BINLOG_ARCHIVE", value_parser = parse_archive_name)]
    binlog_archive: Option<String>,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Also show incomplete (no manifest) and damaged backups.
    #[arg(long)]
    all: bool,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args)]
struct RestoreArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
    /// Directory to create the datadir in (physical backups).
    #[arg(long, env = "MYSQL_BACKUP_TARGET_DIR")]
    target_dir: Option<PathBuf>,
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Replace a non-empty --target-dir.
    #[arg(long)]
    force: bool,
    /// Extract only; do not run --prepare.
    #[arg(long)]
    skip_prepare: bool,
    /// Logical restores: load without verifying the whole backup first.
    #[arg(long)]
    skip_preverify: bool,
    /// Tool for --prepare or the SQL client, instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    tool: Option<String>,
    #[command(flatten)]
    until: mysql_backup::cli::args::UntilArgs,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args)]
struct CatArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
}

#[derive(Args)]
struct PruneArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Keep the N most recent backups.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_LAST")]
    keep_last: Option<u32>,
    /// Keep the newest backup of each of the last N hours.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_HOURLY")]
    keep_hourly: Option<u32>,
    /// Keep the newest backup of each of the last N days.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_DAILY")]
    keep_daily: Option<u32>,
    /// Keep the newest backup of each of the last N ISO weeks.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_WEEKLY")]
    keep_weekly: Option<u32>,
    /// Keep the newest backup of each of the last N months.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_MONTHLY")]
    keep_monthly: Option<u32>,
    /// Keep the newest backup of each of the last N years.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_YEARLY")]
    keep_yearly: Option<u32>,
    /// Keep every backup younger than this relative to the newest (e.g. 7d, 2w, 1y6m).
    #[arg(long, env = "MYSQL_BACKUP_KEEP_WITHIN", value_parser = retention::parse_duration)]
    keep_within: Option<chrono::Duration>,
    /// Remove incomplete backups (no manifest) untouched for this long.
    #[arg(long, env = "MYSQL_BACKUP_ORPHAN_GRACE", value_parser = retention::parse_duration, default_value = "1d")]
    orphan_grace: chrono::Duration,
    /// Print the plan without deleting anything.
    #[arg(long)]
    dry_run: bool,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DeleteArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Backup id (`latest` is refused: deletion names what it deletes).
    id: String,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RewrapArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The current master key.
    #[arg(long, env = "MYSQL_BACKUP_ENCRYPTION_KEY_FILE")]
    encryption_key_file: PathBuf,
    /// The new master key.
    #[arg(long, env = "MYSQL_BACKUP_NEW_ENCRYPTION_KEY_FILE")]
    new_encryption_key_file: PathBuf,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
}

async fn cmd_backup(a: BackupArgs) -> anyhow::Result<()> {
    let result_file = a.result_file.clone();
    let outcome = run_backup(a).await;
    if let Some(path) = result_file {
        let line = match &outcome {
            Ok(result) => result.to_line(),
            Err(e) => report::error_line(&mysql_backup::error::chain(e.as_ref())),
        };
        match mysql_backup::outfile::write_replacing(&path, line.as_bytes()) {
            Ok(how) => {
                tracing::debug!(path = %path.display(), in_place = how == mysql_backup::outfile::Written::InPlace, "result file written")
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %mysql_backup::error::chain(&e), "failed to write the result file")
            }
        }
    }
    outcome.map(drop)
}

/// Takes the backup and prints the summary; returns the report for the result file.
async fn run_backup(a: BackupArgs) -> anyhow::Result<report::BackupResult> {
    if a.chunk_size == 0 || a.chunk_size > (256 << 20) {
        return Err(Error::InvalidArgument(
            "--chunk-size must be between 1 byte and 256MiB".into(),
        )
        .into());
    }
    if a.segment_size < a.chunk_size {
        return Err(
            Error::InvalidArgument("--segment-size must be at least --chunk-size".into()).into(),
        );
    }
    if let Some(id) = a
        .backup_id
        .as_deref()
        .filter(|id| !format::is_backup_id(id))
    {
        return Err(Error::InvalidArgument(format!(
            "--backup-id {id:?} is not a backup id (they look like 20261122T031633Z-4a0760)"
        ))
        .into());
    }
    let key = a.key.load()?;
    let repo = open_repo(&a.repo, a.segment_size).await?;
    let req = BackupRequest {
        method: a.method,
        connection: a.conn.connection()?,
        tool: match a.tool {
            Some(t) if t.contains('/') => {
                Some(absolute(std::path::Path::new(&t))?.display().to_string())
            }
            other => other,
        },
        datadir: a
            .datadir
            .map(|d| absolute(std::path::Path::new(&d)).map(|p| p.display().to_string()))
            .transpose()?,
        extra_args: a.tool_args,
        write: WriteOptions {
            chunk_size: a.chunk_size as usize,
            level: a.compression_level,
            workers: workers(a.workers),
            segment_size: a.segment_size,
        },
        key,
        binlog_archive: a.binlog_archive,
        id: a.backup_id,
    };
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "backup", a.progress.display());
    let outcome = backup::run(&repo, req, progress, shutdown_signal()).await;
    reporter.finish().await;
    let outcome = outcome?;
    let done = CompleteBackup {
        manifest: outcome.manifest,
        manifest_sha256: outcome.manifest_sha256,
    };
    let location = format!(
        "{}/{}",
        repo.store().describe().trim_end_matches('/'),
        format::object_key(&done.manifest.id, "")
    );
    let summary = report::backup_result(&done, Some(location));
    if a.json {
        let mut v = serde_json::to_value(&summary)?;
        v["peakRssBytes"] = peak_rss_bytes().into();
        print_json(&v);
    } else {
        let m = &done.manifest;
        let secs = (m.finished_at - m.started_at).num_milliseconds().max(1) as f64 / 1000.0;
        println!(
            "backup {} committed: {} plaintext, {} stored (ratio {:.2}), {:.1}s, {}/s{}",
            m.id,
            human_bytes(m.plaintext.bytes),
            human_bytes(m.stored_bytes),
            m.plaintext.bytes as f64 / m.stored_bytes.max(1) as f64,
            secs,
            human_bytes((m.plaintext.bytes as f64 / secs) as u64),
            if m.encryption.is_some() {
                ", encrypted"
            } else {
                ""
            }
        );
    }
    Ok(summary)
}

async fn cmd_list(a: ListArgs) -> anyhow::Result<()> {
    let repo = open_repo(&a.repo, 0).await?;
    let catalog = repo.catalog().await?;
    let archive = pitr::archive_view(&repo, &catalog.complete).await?;
    if a.json {
        let complete: Vec<_> = catalog
            .complete
            .iter()
            .map(|b| {
                let mut v =
                    serde_json::to_value(report::backup_result(b, None)).expect("serializes");
                if let Some(w) = archive.windows.get(&b.manifest.id) {
                    v["recoveryWindow"] = pitr::window_json(w);
                }
                v
            })
            .collect();
        let mut out = json!({ "backups": complete, "archives": archive.json });
        if a.all {
            out["incomplete"] = catalog
                .incomplete
                .iter()
                .map(|i| {
                    json!({
                        "id": i.id,
                        "state": i.state.label(),
                        "reason": i.state.reason(),
                        "objects": i.objects.len(),
                        "bytes": i.bytes(),
                        "lastModified": i.newest(),
                    })
                })
                .collect();
        }
        print_json(&out);
        return Ok(());
    }
    let mut rows: Vec<Vec<String>> = catalog
        .complete
        .iter()
        .map(|b| {
            let m = &b.manifest;
            vec![
                m.id.clone(),
                m.finished_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                m.method.to_string(),
                format!(
                    "{} {}",
                    m.source.flavor,
                    m.source.server_version.split('-').next().unwrap_or("")
                ),
                human_bytes(m.plaintext.bytes),
                human_bytes(m.stored_bytes),
                if m.encryption.is_some() {
                    "yes".into()
                } else {
                    "no".into()
                },
                "complete".into(),
                archive
                    .windows
                    .get(&m.id)
                    .map(|w| w.to_time.format("%Y-%m-%d %H:%M:%S").to_string())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    if a.all {
        for i in &catalog.incomplete {
            rows.push(vec![
                i.id.clone(),
                i.newest()
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                    .unwrap_or_default(),
                "-".into(),
                "-".into(),
                "-".into(),
                human_bytes(i.bytes()),
                "-".into(),
                match i.state.reason() {
                    Some(r) => format!("{}: {r}", i.state.label()),
                    None => format!("{} (no manifest)", i.state.label()),
                },
                "-".into(),
            ]);
        }
    }
    if rows.is_empty() {
        println!("no backups in {}", repo.store().describe());
        for line in &archive.lines {
            println!("{line}");
        }
        return Ok(());
    }
    print_table(
        &[
            "ID",
            "FINISHED (UTC)",
            "METHOD",
            "SERVER",
            "SIZE",
            "STORED",
            "ENCRYPTED",
            "STATE",
            "RECOVERABLE TO",
        ],
        &rows,
    );
    for line in &archive.lines {
        println!("{line}");
    }
    if !a.all && !catalog.incomplete.is_empty() {
        eprintln!(
            "note: {} incomplete or damaged backup(s) not shown; use --all",
            catalog.incomplete.len()
        );
    }
    Ok(())
}

async fn cmd_verify(a: VerifyArgs) -> anyhow::Result<()> {
    let (repo, backup, key) = a.backup.open().await?;
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "verify", a.progress.display());
    let result = restore::verify(&repo, &backup, key.as_ref(), a.backup.parallel(), progress).await;
    reporter.finish().await;
    let summary = result?;
    let full = summary.depth == mysql_backup::reader::Depth::Full;
    if a.json {
        print_json(&json!({
            "id": backup.manifest.id,
            "ok": true,
            "depth": if full { "full" } else { "stored-digests" },
            "chunks": summary.chunks,
            "storedBytes": summary.stored_bytes,
            "plaintextBytes": summary.plaintext_bytes,
        }));
    } else if full {
        println!(
            "backup {} OK: {} chunks, {} stored and {} plaintext checked (digests, {}decompression, plaintext SHA-256)",
            backup.manifest.id,
            summary.chunks,
            human_bytes(summary.stored_bytes),
            human_bytes(summary.plaintext_bytes),
            if backup.manifest.encryption.is_some() { "authentication, " } else { "" }
        );
    } else {
        println!(
            "backup {} stored digests OK: {} chunks, {} checked; it is encrypted and no key was given, so it was not decrypted or decompressed",
            backup.manifest.id,
            summary.chunks,
            human_bytes(summary.stored_bytes)
        );
    }
    Ok(())
}

async fn cmd_restore(a: RestoreArgs) -> anyhow::Result<()> {
    let until = a.until.target()?;
    if until.is_some() && a.skip_prepare {
        return Err(Error::InvalidArgument(
            "--until/--until-gtid replay binary logs into the prepared datadir; drop --skip-prepare".into(),
        )
        .into());
    }
    let target = match (&a.target_dir, a.conn.given()) {
        (Some(dir), false) => Target::Directory {
            path: absolute(dir)?,
            force: a.force,
            prepare: !a.skip_prepare,
        },
        (None, true) => Target::Server {
            connection: a.conn.connection()?,
            verify_first: !a.skip_preverify,
            binlogged: false,
        },
        (Some(_), true) => {
            return Err(Error::InvalidArgument(
                "give either --target-dir or a server (--mysql-socket/--mysql-host), not both"
                    .into(),
            )
            .into())
        }
        (None, false) => {
            return Err(Error::InvalidArgument(
                "give --target-dir (physical) or --mysql-socket/--mysql-host (logical)".into(),
            )
            .into())
        }
    };
    let (repo, backup, key) = a.backup.open().await?;
    if let Some(until) = &until {
        // Refuse a target outside the window before anything is loaded.
        let archive = mysql_backup::archive::manifest::archive_of(&backup.manifest);
        let listing = mysql_backup::archive::store::list(repo.store(), archive).await?;
        let (window, _) = mysql_backup::archive::replay::window_of(&backup, &listing.segments)?;
        window.check(until).map_err(Error::PointInTime)?;
    }
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "restore", a.progress.display());
    let work = restore::restore(
        &repo,
        &backup,
        key.as_ref(),
        target,
        a.tool.as_deref(),
        a.backup.parallel(),
        progress,
    );
    let result = tokio::select! {
        r = work => r,
        _ = shutdown_signal() => Err(Error::Interrupted),
    };
    reporter.finish().await;
    let outcome = result?;
    let replayed = match (&until, &a.target_dir) {
        (Some(until), Some(dir)) => {
            let into = pitr::ReplayInto::Datadir(absolute(dir)?);
            Some(pitr::replay(&repo, &backup, key.as_ref(), until, into).await?)
        }
        (Some(until), None) => {
            let into = pitr::ReplayInto::Server(a.conn.connection()?);
            Some(pitr::replay(&repo, &backup, key.as_ref(), until, into).await?)
        }
        (None, _) => None,
    };
    if a.json {
        let mut v = serde_json::to_value(&outcome)?;
        if let Some(r) = &replayed {
            v["replay"] = serde_json::to_value(r)?;
        }
        v["peakRssBytes"] = peak_rss_bytes().into();
        print_json(&v);
    } else {
        println!(
            "restored backup {} into {}: {}{}{}",
            outcome.backup_id,
            outcome.target,
            human_bytes(outcome.plaintext_bytes),
            outcome
                .files
                .map(|f| format!(", {f} files"))
                .unwrap_or_default(),
            if outcome.prepared { ", prepared" } else { "" }
        );
        if let Some(r) = &replayed {
            pitr::print_outcome(r, false);
        }
    }
    Ok(())
}

async fn cmd_cat(a: CatArgs) -> anyhow::Result<()> {
    let (repo, backup, key) = a.backup.open().await?;
    restore::cat(
        &repo,
        &backup,
        key.as_ref(),
        a.backup.parallel(),
        tokio::io::stdout(),
    )
    .await?;
    Ok(())
}

async fn cmd_prune(a: PruneArgs) -> anyhow::Result<()> {
    let policy = KeepPolicy {
        last: a.keep_last,
        hourly: a.keep_hourly,
        daily: a.keep_daily,
        weekly: a.keep_weekly,
        monthly: a.keep_monthly,
        yearly: a.keep_yearly,
        within: a.keep_within,
    };
    let repo = open_repo(&a.repo, 0).await?;
    let catalog = repo.catalog().await?;
    let archives: Vec<(String, Vec<mysql_backup::archive::SegmentManifest>)> =
        mysql_backup::archive::store::list_all(repo.store())
            .await?
            .into_iter()
            .map(|(name, listing)| (name, listing.segments))
            .collect();
    let plan = prune::plan(&catalog, &archives, &policy, a.orphan_grace, Utc::now());
    for d in &plan.damaged {
        tracing::warn!(backup_id = %d.id, "damaged backup left alone; inspect it and delete it by hand if it is unwanted");
    }
    let removed = if a.dry_run {
        Vec::new()
    } else {
        prune::execute(&repo, &catalog, &plan).await?
    };
    let (decisions, stale) = (&plan.decisions, &plan.stale);
    if a.json {
        print_json(&json!({
            "dryRun": a.dry_run,
            "policy": policy,
            "keepWithin": a.keep_within.map(|d| d.num_seconds()),
            "decisions": decisions,
            "incompleteRemoved": stale.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
            "segmentsRemoved": plan.segments.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
            "removed": removed,
        }));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = decisions
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.time.format("%Y-%m-%d %H:%M:%S").to_string(),
                if d.keep {
                    "keep".into()
                } else if a.dry_run {
                    "would remove".into()
                } else {
                    "removed".into()
                },
                d.reasons.join(", "),
            ]
        })
        .chain(stale.iter().map(|o| {
            vec![
                o.id.clone(),
                o.newest()
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                    .unwrap_or_default(),
                if a.dry_run {
                    "would remove".into()
                } else {
                    "removed".into()
                },
                format!(
                    "incomplete for more than {}",
                    humantime::format_duration(a.orphan_grace.to_std().unwrap_or_default())
                ),
            ]
        }))
        .chain(plan.segments.iter().map(|s| {
            vec![
                s.id.clone(),
                s.received_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                if a.dry_run {
                    "would remove".into()
                } else {
                    "removed".into()
                },
                format!(
                    "binlog {}..{}, needed by no retained backup",
                    s.first_gtid, s.last_gtid
                ),
            ]
        }))
        .collect();
    if rows.is_empty() {
        println!("nothing to prune in {}", repo.store().describe());
    } else {
        print_table(&["ID", "TIME (UTC)", "ACTION", "REASONS"], &rows);
    }
    if policy.is_empty() {
        eprintln!("note: no --keep-* rule given, so every complete backup is kept");
    }
    Ok(())
}

async fn cmd_delete(a: DeleteArgs) -> anyhow::Result<()> {
    let repo = open_repo(&a.repo, 0).await?;
    let deleted = repo.delete(&a.id).await?;
    if deleted {
        tracing::info!(backup_id = %a.id, "backup deleted");
    }
    if a.json {
        print_json(&json!({ "id": a.id, "deleted": deleted }));
    } else if deleted {
        println!("backup {} deleted", a.id);
    } else {
        println!("backup {} already absent", a.id);
    }
    Ok(())
}

async fn cmd_rewrap(a: RewrapArgs) -> anyhow::Result<()> {
    let old = MasterKey::from_file(&a.encryption_key_file).map_err(Error::from)?;
    let new = MasterKey::from_file(&a.new_encryption_key_file).map_err(Error::from)?;
    let repo = open_repo(&a.repo, 0).await?;
    let outcomes = rotate::rewrap_all(&repo, &old, &new).await?;
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|(id, o)| vec![id.clone(), o.to_string()])
        .collect();
    let results: Vec<_> = outcomes
        .iter()
        .map(|(id, o)| json!({ "id": id, "result": o.to_string() }))
        .collect();
    if a.json {
        print_json(&json!({ "oldKeyId": old.id(), "newKeyId": new.id(), "backups": results }));
    } else if rows.is_empty() {
        println!("no complete backups in {}", repo.store().describe());
    } else {
        print_table(&["ID", "RESULT"], &rows);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    // Chunk buffers of a few MiB are allocated and freed continuously. Keeping them on one heap
    // arena (instead of a fresh mmap each, which the kernel must fault in and zero) removed
    // about a third of a restore's wall time in bench/run.sh; a single arena keeps peak RSS
    // at the pipeline's live set (about 100 MiB at the default chunk size) rather than one
    // such set per arena.
    // SAFETY: called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Backup(a) => cmd_backup(a).await,
            Command::List(a) => cmd_list(a).await,
            Command::Verify(a) => cmd_verify(a).await,
            Command::Restore(a) => cmd_restore(a).await,
            Command::Cat(a) => cmd_cat(a).await,
            Command::Prune(a) => cmd_prune(a).await,
            Command::Rewrap(a) => cmd_rewrap(a).await,
            Command::Delete(a) => cmd_delete(a).await,
            Command::Archive(a) => pitr::cmd_archive(a).await,
            Command::Replay(a) => pitr::cmd_replay(a).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", mysql_backup::error::chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command};
    use bulwark_contract::command::{self, Method, Repository};
    use clap::Parser;

    fn repository() -> Repository {
        Repository {
            url: "s3://bucket/prefix".into(),
            s3_endpoint: Some("http://minio:9000".into()),
            s3_region: Some("eu-1".into()),
            s3_path_style: true,
            s3_credentials_dir: Some("/etc/bulwark/s3".into()),
            encryption_key_file: Some("/etc/bulwark/backup-key/master.key".into()),
        }
    }

    fn parse(argv: command::Argv) -> Cli {
        assert_eq!(argv.program, "mysql-backup");
        Cli::try_parse_from(argv.to_vec()).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
    }

    /// What the operator's archiver runs is what this binary parses.
    #[test]
    fn the_operators_archive_command_parses() {
        let built = command::Archive {
            repository: repository(),
            archive: "ledger".into(),
            host: "ledger-primary".into(),
            port: 3306,
            user: "bulwark_backup".into(),
            password_file: "/etc/bulwark/backup-credentials/password".into(),
            flush_every_seconds: 5,
            server_id: command::ARCHIVER_SERVER_ID,
            status_listen: "0.0.0.0:9083".into(),
            prune_unneeded: true,
        };
        let cli = parse(built.argv());
        let Command::Archive(a) = cli.command else {
            panic!("not archive")
        };
        assert_eq!(a.repo.repo, "s3://bucket/prefix");
        assert_eq!(
            a.key.encryption_key_file.unwrap().to_str(),
            Some("/etc/bulwark/backup-key/master.key")
        );
        assert_eq!(a.conn.mysql_host.as_deref(), Some("ledger-primary"));
        assert_eq!(a.conn.mysql_port, Some(3306));
        assert_eq!(a.conn.mysql_user, "bulwark_backup");
        assert_eq!(
            a.conn
                .mysql_password_file
                .as_deref()
                .and_then(|p| p.to_str()),
            Some("/etc/bulwark/backup-credentials/password")
        );
        assert_eq!(a.archive, "ledger");
        assert_eq!(a.flush_every, std::time::Duration::from_secs(5));
        assert_eq!(a.server_id, command::ARCHIVER_SERVER_ID);
        assert_eq!(a.status_listen, Some("0.0.0.0:9083".parse().unwrap()));
        assert!(a.prune_unneeded);
    }

    /// What the operator's backup Job runs is what this binary parses.
    #[test]
    fn the_operators_backup_command_parses() {
        for (method, datadir) in [
            (Method::Physical, Some("/var/lib/mysql")),
            (Method::Logical, None),
        ] {
            let built = command::Backup {
                repository: repository(),
                method,
                host: "db-1.db-headless".into(),
                port: 3306,
                user: "bulwark_backup".into(),
                password_file: "/etc/bulwark/backup-credentials/password".into(),
                datadir: datadir.map(str::to_owned),
                result_file: "/dev/termination-log".into(),
                progress_interval_seconds: 5,
                backup_id: "20261122T031633Z-4a0760".into(),
                binlog_archive: "db".into(),
            };
            let cli = parse(built.argv());
            assert!(matches!(cli.log_format, super::LogFormat::Json));
            let Command::Backup(a) = cli.command else {
                panic!("not a backup")
            };
            assert_eq!(a.binlog_archive.as_deref(), Some("db"));
            assert_eq!(a.repo.repo, "s3://bucket/prefix");
            assert_eq!(a.repo.s3.s3_endpoint.as_deref(), Some("http://minio:9000"));
            assert_eq!(a.repo.s3.s3_region.as_deref(), Some("eu-1"));
            assert!(a.repo.s3.s3_path_style);
            assert_eq!(
                a.repo
                    .s3
                    .s3_credentials_dir
                    .as_deref()
                    .and_then(|p| p.to_str()),
                Some("/etc/bulwark/s3")
            );
            assert_eq!(
                a.key.encryption_key_file.unwrap().to_str(),
                Some("/etc/bulwark/backup-key/master.key")
            );
            assert_eq!(a.method.to_string(), method.as_str());
            assert_eq!(a.conn.mysql_host.as_deref(), Some("db-1.db-headless"));
            assert_eq!(a.conn.mysql_port, Some(3306));
            assert_eq!(a.conn.mysql_user, "bulwark_backup");
            assert_eq!(
                a.conn.mysql_password_file.unwrap().to_str(),
                Some("/etc/bulwark/backup-credentials/password")
            );
            assert_eq!(a.datadir.as_deref(), datadir);
            assert_eq!(
                a.result_file.unwrap().to_str(),
                Some("/dev/termination-log")
            );
            assert!(matches!(
                a.progress.progress,
                mysql_backup::cli::args::ProgressMode::Log
            ));
            assert_eq!(a.progress.progress_interval.as_secs(), 5);
            assert_eq!(a.backup_id.as_deref(), Some("20261122T031633Z-4a0760"));
        }
    }

    #[test]
    fn the_operators_delete_command_parses() {
        let built = command::Delete {
            repository: Repository {
                url: "/backup-storage".into(),
                ..Repository::default()
            },
            backup_id: "20261122T031633Z-4a0760".into(),
        };
        let Command::Delete(a) = parse(built.argv()).command else {
            panic!("not a delete")
        };
        assert_eq!(a.repo.repo, "/backup-storage");
        assert_eq!(a.id, "20261122T031633Z-4a0760");
        assert!(!a.repo.s3.s3_path_style);
    }
}
