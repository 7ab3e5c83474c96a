//! `backup`: take a backup and commit it to the repository.

use std::path::PathBuf;

use bulwark_cli::args::{
    absolute, create_repo, method_parser, parse_archive_name, parse_size, shutdown_signal, workers,
    ConnArgs, KeyArgs, ProgressArgs, RepoArgs,
};
use bulwark_cli::output::{human_bytes, peak_rss_bytes, print_json};
use bulwark_cli::progress::Reporter;
use bulwark_engine::backup::{self, BackupRequest, TimelineProbe};
use bulwark_engine::format::{self, Method};
use bulwark_engine::progress::Progress;
use bulwark_engine::repo::CompleteBackup;
use bulwark_engine::store::Store;
use bulwark_engine::writer::WriteOptions;
use bulwark_engine::{report, Error};
use bulwark_pitr::archive::manifest::DEFAULT_ARCHIVE;
use bulwark_pitr::archive::{belonging, segments};
use bulwark_pitr::binlog::GtidPos;
use clap::Args;

#[derive(Args)]
pub struct BackupArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// physical (xtrabackup/mariabackup) or logical (mysqldump/mariadb-dump).
    #[arg(
        long,
        value_parser = method_parser(),
        default_value = "physical",
        env = "MYSQL_BACKUP_METHOD"
    )]
    pub method: Method,
    #[command(flatten)]
    pub conn: ConnArgs,
    /// zstd level (1 is fastest; see the README's benchmark).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, env = "MYSQL_BACKUP_COMPRESSION_LEVEL", value_parser = clap::value_parser!(i32).range(-7..=19))]
    pub compression_level: i32,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Plaintext chunk size, e.g. 8MiB.
    #[arg(long, default_value = "8MiB", value_parser = parse_size, env = "MYSQL_BACKUP_CHUNK_SIZE")]
    pub chunk_size: u64,
    /// Cap on a segment object's size, e.g. 4GiB.
    #[arg(long, default_value = "4GiB", value_parser = parse_size, env = "MYSQL_BACKUP_SEGMENT_SIZE")]
    pub segment_size: u64,
    /// Chunks compressed in parallel (default: number of CPUs).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    pub workers: Option<usize>,
    /// Backup tool to run instead of the detected one (name or path).
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    pub tool: Option<String>,
    /// Datadir as mounted here, when it differs from the server's @@datadir.
    #[arg(long, env = "MYSQL_BACKUP_DATADIR")]
    pub datadir: Option<String>,
    /// Extra argument for the tool (repeatable), e.g. --tool-arg=--parallel=4.
    #[arg(long = "tool-arg", allow_hyphen_values = true)]
    pub tool_args: Vec<String>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write the result as one line of JSON (`{"error": …}` on failure), at most 4096
    /// bytes, e.g. to Kubernetes' /dev/termination-log.
    #[arg(long, env = "MYSQL_BACKUP_RESULT_FILE")]
    pub result_file: Option<PathBuf>,
    /// Store the backup under this id (like 20261122T031633Z-4a0760) instead of a new one;
    /// refused when the repository already holds anything under it. Lets a scheduler know the
    /// id before the run, to delete what a run it stops leaves.
    #[arg(long)]
    pub backup_id: Option<String>,
    /// The binlog archive (`mysql-backup archive --archive`) that continues this backup, for
    /// point-in-time restores [default: default].
    #[arg(long, env = "MYSQL_BACKUP_BINLOG_ARCHIVE", value_parser = parse_archive_name)]
    pub binlog_archive: Option<String>,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

pub async fn cmd_backup(a: BackupArgs) -> anyhow::Result<()> {
    let result_file = a.result_file.clone();
    let outcome = run_backup(a).await;
    if let Some(path) = result_file {
        let line = match &outcome {
            Ok(result) => result.to_line(),
            Err(e) => report::error_line(&bulwark_cli::output::failure_line(e.as_ref())),
        };
        match bulwark_engine::outfile::write_replacing(&path, line.as_bytes()) {
            Ok(how) => {
                tracing::debug!(path = %path.display(), in_place = how == bulwark_engine::outfile::Written::InPlace, "result file written")
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %bulwark_engine::error::chain(&e), "failed to write the result file")
            }
        }
    }
    outcome.map(drop)
}

/// Asks the backup's binlog archive, once the copy is complete, which of its timelines the
/// consistent point belongs to ([`belonging::backup_timeline`]). A repository without that
/// archive, a point that is no MariaDB GTID position, or a listing that fails records none.
fn timeline_probe(store: std::sync::Arc<dyn Store>, archive: Option<String>) -> TimelineProbe {
    TimelineProbe(Box::new(move |point, started, key| {
        Box::pin(async move {
            let point = GtidPos::parse(point.gtid_set.as_deref()?).ok()?;
            let archive = archive.as_deref().unwrap_or(DEFAULT_ARCHIVE);
            let list = || async {
                segments::list(&store, archive, key.as_ref())
                    .await
                    .map_err(|e| tracing::warn!(archive, error = %bulwark_engine::error::chain(&e), "failed to list the binlog archive; the backup records no timeline"))
                    .ok()
            };
            let changed = || async { segments::last_changed(&store, archive).await.ok().flatten() };
            let mut listing = list().await?;
            let mut listed_change = changed().await;
            // An archiver seen lately but not since the backup began is waited for: a quiet
            // server's is seen every 10 s, one reconnecting after a crash once it follows the
            // server's history again. The manifests are read again only once something of the
            // archive was written (a listing reads every one).
            let deadline = tokio::time::Instant::now() + TIMELINE_WAIT;
            let seen = |l: &segments::ArchiveListing| {
                belonging::last_seen(&l.segments, l.coverage.as_ref())
            };
            let lately = |at: Option<chrono::DateTime<chrono::Utc>>| {
                at.is_some_and(|at| {
                    at < started && chrono::Utc::now() - at < chrono::Duration::minutes(2)
                })
            };
            while lately(seen(&listing)) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                let change = changed().await;
                if change != listed_change {
                    listing = list().await?;
                    listed_change = change;
                }
            }
            let timeline = belonging::backup_timeline(
                &listing.segments,
                listing.coverage.as_ref(),
                &point,
                started,
            );
            if timeline.is_none() && !listing.segments.is_empty() {
                tracing::info!(archive, last_seen = ?seen(&listing), "the binlog archive cannot say which timeline the backup belongs to (its archiver was not seen following the server since the backup began, or no timeline holds the backup's point); none is recorded");
            }
            timeline
        })
    }))
}

/// How long a backup waits at its end for its archive to show it follows the server.
const TIMELINE_WAIT: std::time::Duration = std::time::Duration::from_secs(25);

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
    let repo = create_repo(&a.repo, a.segment_size).await?;
    let timeline = timeline_probe(repo.store().clone(), a.binlog_archive.clone());
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
        timeline: Some(timeline),
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
