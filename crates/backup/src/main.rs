//! The `mysql-backup` command line: argument parsing, output formatting and exit codes over the
//! library.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context as _;
use chrono::Utc;
use clap::{Args, Parser, Subcommand, ValueEnum};
use mysql_backup::backup::{self, BackupRequest};
use mysql_backup::crypto::MasterKey;
use mysql_backup::format::{self, Method};
use mysql_backup::progress::{self, Progress, Reporter};
use mysql_backup::repo::{CompleteBackup, IncompleteState, Repository};
use mysql_backup::restore::{self, Target};
use mysql_backup::retention::{self, Candidate, KeepPolicy};
use mysql_backup::source::Connection;
use mysql_backup::store::{self, S3Options};
use mysql_backup::writer::WriteOptions;
use mysql_backup::Error;
use serde_json::json;
use zeroize::Zeroizing;

mod instance_cmd;

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

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
    /// What runs inside each MySQL pod: configuration, bootstrap from a backup, the agent.
    Instance {
        #[command(subcommand)]
        command: instance_cmd::InstanceCommand,
    },
}

#[derive(Args, Clone)]
struct RepoArgs {
    /// Repository: a path, file:///path or s3://bucket/prefix.
    #[arg(long, env = "MYSQL_BACKUP_REPO")]
    repo: String,
    #[command(flatten)]
    s3: S3Args,
}

#[derive(Args, Clone)]
struct S3Args {
    /// S3 endpoint for S3-compatible services (http://host:port).
    #[arg(long, env = "MYSQL_BACKUP_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1).
    #[arg(long, env = "MYSQL_BACKUP_S3_REGION")]
    s3_region: Option<String>,
    /// Use path-style S3 requests (most S3-compatible servers need this).
    #[arg(long, env = "MYSQL_BACKUP_S3_PATH_STYLE")]
    s3_path_style: bool,
    /// Multipart part size, e.g. 16MiB (default: from the segment size, at least 8MiB).
    #[arg(long, env = "MYSQL_BACKUP_S3_PART_SIZE", value_parser = parse_size)]
    s3_part_size: Option<u64>,
    /// Multipart parts uploaded at once per object.
    #[arg(long, env = "MYSQL_BACKUP_S3_PARTS_IN_FLIGHT", default_value_t = 3)]
    s3_parts_in_flight: usize,
    /// Retries per S3 request before failing.
    #[arg(long, env = "MYSQL_BACKUP_S3_MAX_RETRIES", default_value_t = 10)]
    s3_max_retries: usize,
    /// Timeout of one S3 request, e.g. 2min.
    #[arg(long, env = "MYSQL_BACKUP_S3_REQUEST_TIMEOUT", value_parser = humantime::parse_duration, default_value = "2min")]
    s3_request_timeout: Duration,
}

#[derive(Args, Clone, Default)]
struct ConnArgs {
    /// Server Unix socket.
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_SOCKET")]
    mysql_socket: Option<PathBuf>,
    /// Server host (TCP).
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_HOST", conflicts_with = "mysql_socket")]
    mysql_host: Option<String>,
    /// Server port (TCP).
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_PORT")]
    mysql_port: Option<u16>,
    /// User name.
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_USER", default_value = "root")]
    mysql_user: String,
    /// File holding the password (else MYSQL_PWD is used).
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_PASSWORD_FILE")]
    mysql_password_file: Option<PathBuf>,
}

impl ConnArgs {
    fn given(&self) -> bool {
        self.mysql_socket.is_some() || self.mysql_host.is_some()
    }

    fn connection(&self) -> anyhow::Result<Connection> {
        let password = match &self.mysql_password_file {
            Some(p) => Some(
                mysql_backup::source::read_password_file(p)
                    .with_context(|| format!("failed to read password file {}", p.display()))?,
            ),
            None => std::env::var("MYSQL_PWD").ok().map(Zeroizing::new),
        };
        Ok(Connection {
            socket: self.mysql_socket.as_deref().map(absolute).transpose()?,
            host: self.mysql_host.clone(),
            port: self.mysql_port,
            user: Some(self.mysql_user.clone()),
            password,
        })
    }
}

#[derive(Args, Clone)]
struct KeyArgs {
    /// File with the 32-byte master key, raw or base64 (`openssl rand -base64 32 > key`).
    #[arg(long, env = "MYSQL_BACKUP_ENCRYPTION_KEY_FILE")]
    encryption_key_file: Option<PathBuf>,
}

impl KeyArgs {
    fn load(&self) -> Result<Option<MasterKey>, Error> {
        self.encryption_key_file
            .as_deref()
            .map(MasterKey::from_file)
            .transpose()
            .map_err(Error::from)
    }
}

#[derive(Args)]
struct ProgressArgs {
    /// How to show progress: auto (bar on a terminal, log lines otherwise), bar, log, none.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        env = "MYSQL_BACKUP_PROGRESS"
    )]
    progress: ProgressMode,
    /// Interval between progress log lines.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s", env = "MYSQL_BACKUP_PROGRESS_INTERVAL")]
    progress_interval: Duration,
}

impl ProgressArgs {
    fn display(&self) -> progress::Display {
        match self.progress {
            ProgressMode::Auto => progress::Display::auto(self.progress_interval),
            ProgressMode::Bar => progress::Display::Bar,
            ProgressMode::Log => progress::Display::Log(self.progress_interval),
            ProgressMode::None => progress::Display::Quiet,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ProgressMode {
    Auto,
    Bar,
    Log,
    None,
}

#[derive(Args)]
struct BackupArgs {
    #[command(flatten)]
    repo: RepoArgs,
    /// physical (xtrabackup/mariabackup) or logical (mysqldump/mariadb-dump).
    #[arg(
        long,
        value_enum,
        default_value = "physical",
        env = "MYSQL_BACKUP_METHOD"
    )]
    method: Method,
    #[command(flatten)]
    conn: ConnArgs,
    /// zstd level (1 is fastest; see the README's benchmark).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, env = "MYSQL_BACKUP_COMPRESSION_LEVEL", value_parser = clap::value_parser!(i32).range(-7..=19))]
    compression_level: i32,
    #[command(flatten)]
    key: KeyArgs,
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
    #[command(flatten)]
    progress: ProgressArgs,
}

#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    repo: RepoArgs,
    /// Also show incomplete (no manifest) and damaged backups.
    #[arg(long)]
    all: bool,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Which backup to read, where, and with which key.
#[derive(Args)]
struct BackupSelector {
    #[command(flatten)]
    repo: RepoArgs,
    #[command(flatten)]
    key: KeyArgs,
    /// Backup id or `latest`.
    id: String,
    /// Chunks read and decoded in parallel (default: number of CPUs + 2).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    workers: Option<usize>,
}

impl BackupSelector {
    /// Loads the key first (a bad key file fails before any I/O), then resolves the backup.
    async fn open(&self) -> anyhow::Result<(Repository, CompleteBackup, Option<MasterKey>)> {
        let key = self.key.load()?;
        let repo = open_repo(&self.repo, 0).await?;
        let backup = repo.resolve(&self.id).await?;
        Ok((repo, backup, key))
    }

    fn parallel(&self) -> usize {
        workers(self.workers) + 2
    }
}

#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    backup: BackupSelector,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    progress: ProgressArgs,
}

#[derive(Args)]
struct RestoreArgs {
    #[command(flatten)]
    backup: BackupSelector,
    /// Directory to create the datadir in (physical backups).
    #[arg(long, env = "MYSQL_BACKUP_TARGET_DIR")]
    target_dir: Option<PathBuf>,
    #[command(flatten)]
    conn: ConnArgs,
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
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    progress: ProgressArgs,
}

#[derive(Args)]
struct CatArgs {
    #[command(flatten)]
    backup: BackupSelector,
}

#[derive(Args)]
struct PruneArgs {
    #[command(flatten)]
    repo: RepoArgs,
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

/// Makes a path absolute: the tools we run change directory (mariabackup into the datadir), so
/// relative paths handed to them would point elsewhere.
fn absolute(p: &std::path::Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("failed to resolve path {}", p.display()))
}

#[derive(Args)]
struct DeleteArgs {
    #[command(flatten)]
    repo: RepoArgs,
    /// Backup id (`latest` is refused: deletion names what it deletes).
    id: String,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RewrapArgs {
    #[command(flatten)]
    repo: RepoArgs,
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

/// Parses sizes like `8MiB`, `4GiB`, `512KiB`, `16M` or plain bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected e.g. 8MiB"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        other => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {other:?} (use KiB, MiB, GiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("invalid size {s:?}: too large"))
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn workers(n: Option<usize>) -> usize {
    n.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
    })
    .max(1)
}

fn s3_options(args: &S3Args, segment_size: u64) -> S3Options {
    // Parts sized so a capped segment stays far below S3's 10,000-part limit.
    let auto_part = (segment_size / 8000).max(8 << 20) as usize;
    S3Options {
        endpoint: args.s3_endpoint.clone(),
        region: args.s3_region.clone(),
        path_style: args.s3_path_style,
        part_size: args.s3_part_size.map(|p| p as usize).unwrap_or(auto_part),
        parts_in_flight: args.s3_parts_in_flight,
        request_timeout: Some(args.s3_request_timeout),
        max_retries: Some(args.s3_max_retries),
    }
}

async fn open_repo(args: &RepoArgs, segment_size: u64) -> Result<Repository, Error> {
    let opts = s3_options(&args.s3, segment_size);
    let store = store::open(&args.repo, &opts)
        .await
        .map_err(Error::OpenRepository)?;
    Ok(Repository::new(store))
}

/// Resolves when SIGINT or SIGTERM arrives.
fn shutdown_signal() -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::warn!("signal received; stopping and cleaning up");
    })
}

fn manifest_json(b: &CompleteBackup, location: &str) -> serde_json::Value {
    let m = &b.manifest;
    json!({
        "id": m.id,
        "method": m.method,
        "location": location,
        "startedAt": m.started_at,
        "finishedAt": m.finished_at,
        "durationSeconds": (m.finished_at - m.started_at).num_milliseconds() as f64 / 1000.0,
        "flavor": m.source.flavor,
        "serverVersion": m.source.server_version,
        "sourceHost": m.source.host,
        "tool": m.source.tool,
        "toolVersion": m.source.tool_version,
        "plaintextBytes": m.plaintext.bytes,
        "plaintextSha256": m.plaintext.sha256,
        "storedBytes": m.stored_bytes,
        "chunks": m.plaintext.chunks,
        "segments": m.segments.len(),
        "compressionLevel": m.chunking.compression_level,
        "encrypted": m.encryption.is_some(),
        "keyId": m.encryption.as_ref().map(|e| e.key_id.clone()),
        "binlogFile": m.consistent_point.binlog_file,
        "binlogPosition": m.consistent_point.binlog_position,
        "gtidSet": m.consistent_point.gtid_set,
        "manifestSha256": b.manifest_sha256,
    })
}

/// Peak resident memory of this process (not of the tools it runs), in bytes.
fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage fills the struct it is given and has no other effect.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    (usage.ru_maxrss as u64) * 1024
}

fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON serializes")
    );
}

/// Prints rows as aligned columns.
fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|s| s.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

/// Kubernetes keeps at most this many bytes of a termination message.
const RESULT_FILE_LIMIT: usize = 4096;

async fn cmd_backup(a: BackupArgs) -> anyhow::Result<()> {
    let result_file = a.result_file.clone();
    let outcome = run_backup(a).await;
    if let Some(path) = result_file {
        let line = match &outcome {
            Ok(summary) => result_line(summary.clone()),
            Err(e) => error_result_line(&error_line(e)),
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

/// The success JSON on one line, within [`RESULT_FILE_LIMIT`]. Never cut: if it is too long
/// (a huge GTID set or repository URL), whole fields are left out and named in `omitted`.
fn result_line(mut summary: serde_json::Value) -> String {
    let mut omitted = Vec::new();
    for field in ["gtidSet", "location", "toolVersion", "sourceHost"] {
        let line = format!("{summary}\n");
        if line.len() <= RESULT_FILE_LIMIT {
            return line;
        }
        summary[field] = serde_json::Value::Null;
        omitted.push(field);
        summary["omitted"] = json!(omitted);
    }
    format!("{summary}\n")
}

/// `{"error": …}` on one line within [`RESULT_FILE_LIMIT`], the message cut (and ended with
/// `…`) if needed.
fn error_result_line(message: &str) -> String {
    let line = |m: &str| format!("{}\n", json!({ "error": m }));
    let full = line(message);
    if full.len() <= RESULT_FILE_LIMIT {
        return full;
    }
    // The longest prefix (on a character boundary) that fits once escaped, by bisection.
    let cuts: Vec<usize> = message.char_indices().map(|(i, _)| i).collect();
    let fits = |n: usize| line(&format!("{}…", &message[..cuts[n]])).len() <= RESULT_FILE_LIMIT;
    let (mut lo, mut hi) = (0, cuts.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    line(&format!("{}…", &message[..cuts[lo]]))
}

/// Takes the backup and prints the summary; returns the summary for the result file.
async fn run_backup(a: BackupArgs) -> anyhow::Result<serde_json::Value> {
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
    let summary = manifest_json(&done, &location);
    if a.json {
        let mut v = summary.clone();
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
    if a.json {
        let complete: Vec<_> = catalog
            .complete
            .iter()
            .map(|b| manifest_json(b, ""))
            .collect();
        let mut out = json!({ "backups": complete });
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
            ]);
        }
    }
    if rows.is_empty() {
        println!("no backups in {}", repo.store().describe());
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
        ],
        &rows,
    );
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
    if a.json {
        let mut v = serde_json::to_value(&outcome)?;
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
    let candidates: Vec<Candidate> = catalog
        .complete
        .iter()
        .map(|b| Candidate {
            id: b.manifest.id.clone(),
            time: b.manifest.finished_at,
        })
        .collect();
    let decisions = retention::plan(&policy, &candidates);
    let now = Utc::now();
    let stale: Vec<_> = catalog
        .incomplete
        .iter()
        .filter(|i| {
            i.state == IncompleteState::Orphan
                && i.newest().is_some_and(|t| now - t > a.orphan_grace)
        })
        .collect();
    let damaged: Vec<_> = catalog
        .incomplete
        .iter()
        .filter(|i| matches!(i.state, IncompleteState::Damaged(_)))
        .collect();
    for d in &damaged {
        tracing::warn!(backup_id = %d.id, "damaged backup left alone; inspect it and delete it by hand if it is unwanted");
    }
    let mut removed = Vec::new();
    if !a.dry_run {
        for d in decisions.iter().filter(|d| !d.keep) {
            repo.delete_backup(&d.id, &catalog.objects[&d.id]).await?;
            tracing::info!(backup_id = %d.id, "backup removed");
            removed.push(d.id.clone());
        }
        for o in &stale {
            repo.delete_backup(&o.id, &o.objects).await?;
            tracing::info!(backup_id = %o.id, "incomplete backup removed");
            removed.push(o.id.clone());
        }
    }
    if a.json {
        print_json(&json!({
            "dryRun": a.dry_run,
            "policy": policy,
            "keepWithin": a.keep_within.map(|d| d.num_seconds()),
            "decisions": decisions,
            "incompleteRemoved": stale.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
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
    if old.id() == new.id() {
        return Err(Error::InvalidArgument("the old and new keys are the same key".into()).into());
    }
    let repo = open_repo(&a.repo, 0).await?;
    let catalog = repo.catalog().await?;
    let mut rows = Vec::new();
    let mut results = Vec::new();
    // Each manifest is replaced atomically and backups already on the new key are skipped, so
    // an interrupted rotation is finished by running it again.
    for b in &catalog.complete {
        let m = &b.manifest;
        let outcome = match &m.encryption {
            None => "skipped: not encrypted".to_string(),
            Some(e) if e.key_id == new.id() => "skipped: already on the new key".to_string(),
            Some(e) if e.key_id != old.id() => {
                format!("skipped: encrypted with another key ({})", e.key_id)
            }
            Some(e) => {
                let mut updated = m.clone();
                updated.encryption =
                    Some(mysql_backup::crypto::rewrap(&m.id, e, &old, &new).map_err(Error::from)?);
                repo.commit(&updated).await?;
                tracing::info!(backup_id = %m.id, old_key = %old.id(), new_key = %new.id(), "data key re-wrapped");
                "re-wrapped".to_string()
            }
        };
        rows.push(vec![m.id.clone(), outcome.clone()]);
        results.push(json!({ "id": m.id, "result": outcome }));
    }
    if a.json {
        print_json(&json!({ "oldKeyId": old.id(), "newKeyId": new.id(), "backups": results }));
    } else if rows.is_empty() {
        println!("no complete backups in {}", repo.store().describe());
    } else {
        print_table(&["ID", "RESULT"], &rows);
    }
    Ok(())
}

/// The cause chain of a failure on one line, as printed after `error: `.
fn error_line(e: &anyhow::Error) -> String {
    let msg = match e.downcast_ref::<Error>() {
        Some(err) => mysql_backup::error::chain(err),
        None => format!("{e:#}"),
    };
    msg.replace('\n', " ")
}

fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
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
            Command::Instance { command } => instance_cmd::run(command).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{error_result_line, parse_size, result_line, RESULT_FILE_LIMIT};
    use serde_json::json;

    #[test]
    fn result_lines_fit_the_termination_message_limit() {
        let ok = result_line(json!({ "id": "20261122T031633Z-4a0760", "gtidSet": "0-1-2" }));
        assert_eq!(
            ok,
            "{\"gtidSet\":\"0-1-2\",\"id\":\"20261122T031633Z-4a0760\"}\n"
        );
        // A huge GTID set is left out whole, never cut.
        let huge = "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5,".repeat(200);
        let line = result_line(json!({ "id": "x", "gtidSet": huge, "location": "s3://b/p" }));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(line.len() <= RESULT_FILE_LIMIT, "{}", line.len());
        assert_eq!(
            (v["gtidSet"].is_null(), v["location"].as_str()),
            (true, Some("s3://b/p"))
        );
        assert_eq!(v["omitted"], json!(["gtidSet"]));

        let short = error_result_line("failed to connect: refused");
        assert_eq!(short, "{\"error\":\"failed to connect: refused\"}\n");
        for filler in ["x", "\"", "é", "\u{1}"] {
            let long = error_result_line(&format!("failed to back up: {}", filler.repeat(5000)));
            let v: serde_json::Value = serde_json::from_str(&long).unwrap();
            let msg = v["error"].as_str().unwrap();
            assert!(
                long.len() <= RESULT_FILE_LIMIT,
                "{filler:?}: {}",
                long.len()
            );
            assert!(
                long.len() > RESULT_FILE_LIMIT - 8,
                "{filler:?}: {}",
                long.len()
            );
            assert!(msg.starts_with("failed to back up: ") && msg.ends_with('…'));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("8 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }
}
