//! Argument groups and helpers shared by the `mysql-backup` and `bulwark-agent` command
//! lines: repository, S3, server connection, key, progress and backup selection.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};
use zeroize::Zeroizing;

use crate::progress;
use bulwark_contract::Engine;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::format::Method;
use bulwark_engine::repo::{CompleteBackup, Repository};
use bulwark_engine::source::Connection;
use bulwark_engine::store::{self, S3Options};
use bulwark_engine::Error;
use bulwark_pitr::archive::RecoveryTarget;

#[derive(Args, Clone)]
pub struct RepoArgs {
    /// Repository: a path, file:///path or s3://bucket/prefix.
    #[arg(long, env = "MYSQL_BACKUP_REPO")]
    pub repo: String,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args, Clone)]
pub struct S3Args {
    /// S3 endpoint for S3-compatible services (http://host:port).
    #[arg(long, env = "MYSQL_BACKUP_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1).
    #[arg(long, env = "MYSQL_BACKUP_S3_REGION")]
    pub s3_region: Option<String>,
    /// Use path-style S3 requests (most S3-compatible servers need this).
    #[arg(long, env = "MYSQL_BACKUP_S3_PATH_STYLE")]
    pub s3_path_style: bool,
    /// Multipart part size, e.g. 16MiB (default: from the segment size, at least 8MiB).
    #[arg(long, env = "MYSQL_BACKUP_S3_PART_SIZE", value_parser = parse_size)]
    pub s3_part_size: Option<u64>,
    /// Multipart parts uploaded at once per object.
    #[arg(long, env = "MYSQL_BACKUP_S3_PARTS_IN_FLIGHT", default_value_t = 3)]
    pub s3_parts_in_flight: usize,
    /// Retries per S3 request before failing.
    #[arg(long, env = "MYSQL_BACKUP_S3_MAX_RETRIES", default_value_t = 10)]
    pub s3_max_retries: usize,
    /// Timeout of one S3 request, e.g. 2min.
    #[arg(long, env = "MYSQL_BACKUP_S3_REQUEST_TIMEOUT", value_parser = humantime::parse_duration, default_value = "2min")]
    pub s3_request_timeout: Duration,
    /// Directory of credential files named AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
    /// optionally AWS_SESSION_TOKEN (a mounted Secret); wins over the environment.
    #[arg(long, env = "MYSQL_BACKUP_S3_CREDENTIALS_DIR")]
    pub s3_credentials_dir: Option<PathBuf>,
}

#[derive(Args, Clone, Default)]
pub struct ConnArgs {
    /// Server Unix socket.
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_SOCKET")]
    pub mysql_socket: Option<PathBuf>,
    /// Server host (TCP).
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_HOST", conflicts_with = "mysql_socket")]
    pub mysql_host: Option<String>,
    /// Server port (TCP).
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_PORT")]
    pub mysql_port: Option<u16>,
    /// User name.
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_USER", default_value = "root")]
    pub mysql_user: String,
    /// File holding the password (else MYSQL_PWD is used).
    #[arg(long, env = "MYSQL_BACKUP_MYSQL_PASSWORD_FILE")]
    pub mysql_password_file: Option<PathBuf>,
}

impl ConnArgs {
    pub fn given(&self) -> bool {
        self.mysql_socket.is_some() || self.mysql_host.is_some()
    }

    pub fn connection(&self) -> Result<Connection, Error> {
        let password = match &self.mysql_password_file {
            Some(p) => Some(
                bulwark_engine::source::read_password_file(p).map_err(|source| Error::LocalIo {
                    action: "read password file",
                    path: p.display().to_string(),
                    source,
                })?,
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
pub struct KeyArgs {
    /// File with the 32-byte master key, raw or base64 (`openssl rand -base64 32 > key`).
    #[arg(long, env = "MYSQL_BACKUP_ENCRYPTION_KEY_FILE")]
    pub encryption_key_file: Option<PathBuf>,
}

impl KeyArgs {
    pub fn load(&self) -> Result<Option<MasterKey>, Error> {
        self.encryption_key_file
            .as_deref()
            .map(MasterKey::from_file)
            .transpose()
            .map_err(Error::from)
    }
}

#[derive(Args)]
pub struct ProgressArgs {
    /// How to show progress: auto (bar on a terminal, log lines otherwise), bar, log, none.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        env = "MYSQL_BACKUP_PROGRESS"
    )]
    pub progress: ProgressMode,
    /// Interval between progress log lines.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s", env = "MYSQL_BACKUP_PROGRESS_INTERVAL")]
    pub progress_interval: Duration,
}

impl ProgressArgs {
    pub fn display(&self) -> progress::Display {
        match self.progress {
            ProgressMode::Auto => progress::Display::auto(self.progress_interval),
            ProgressMode::Bar => progress::Display::Bar,
            ProgressMode::Log => progress::Display::Log(self.progress_interval),
            ProgressMode::None => progress::Display::Quiet,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ProgressMode {
    Auto,
    Bar,
    Log,
    None,
}

/// Which backup to read, where, and with which key.
#[derive(Args)]
pub struct BackupSelector {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Backup id or `latest`.
    pub id: String,
    /// Chunks read and decoded in parallel (default: number of CPUs + 2, fewer when the
    /// memory limit of the process's cgroup cannot hold that many chunks in flight).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    pub workers: Option<usize>,
}

impl BackupSelector {
    /// Loads the key first (a bad key file fails before any I/O), checks it against the
    /// repository's (an encrypted repository needs it), then resolves the backup with its
    /// manifest checked under it.
    pub async fn open(&self) -> Result<(Repository, CompleteBackup, Option<MasterKey>), Error> {
        self.open_checked(true).await
    }

    /// Like [`BackupSelector::open`], but an encrypted repository may be read without its
    /// key: `verify` then checks the stored digests only.
    pub async fn open_to_verify(
        &self,
    ) -> Result<(Repository, CompleteBackup, Option<MasterKey>), Error> {
        self.open_checked(false).await
    }

    async fn open_checked(
        &self,
        key_required: bool,
    ) -> Result<(Repository, CompleteBackup, Option<MasterKey>), Error> {
        let key = self.key.load()?;
        let repo = open_repo(&self.repo, 0).await?.under_key(key);
        // Checked, the repository reads under the key bound to it, which is what is returned.
        let repo = match repo.clone().check_key().await {
            Err(Error::KeyRequiredByRepository { .. }) if !key_required => repo,
            checked => checked?,
        };
        let backup = repo.resolve(&self.id).await?;
        let key = repo.key().cloned();
        Ok((repo, backup, key))
    }

    pub fn parallel(&self) -> usize {
        read_parallel(self.workers)
    }
}

/// Makes a path absolute: the tools we run change directory (mariabackup into the datadir), so
/// relative paths handed to them would point elsewhere.
pub fn absolute(p: &std::path::Path) -> Result<PathBuf, Error> {
    std::path::absolute(p).map_err(|source| Error::LocalIo {
        action: "resolve path",
        path: p.display().to_string(),
        source,
    })
}

/// Checks an archive name (`--archive`, `--binlog-archive`).
pub fn parse_archive_name(s: &str) -> Result<String, String> {
    if bulwark_pitr::archive::manifest::is_archive_name(s) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an archive name: 1 to 63 of a-z, 0-9, '-', '.', '_', starting with a letter or digit"
        ))
    }
}

/// Parses sizes like `8MiB`, `4GiB`, `512KiB`, `16M` or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
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

/// Memory one chunk in flight may hold while it is read: the stored bytes, the decrypted copy
/// and the decompressed one, at the largest default chunk size (8 MiB).
pub const MEMORY_PER_READ_WORKER: u64 = 3 * (8 << 20);
/// Memory the process needs besides the chunks in flight.
pub const MEMORY_BASE: u64 = 64 << 20;

/// Chunks read in parallel: `n + 2` when asked for, else the CPUs + 2 that the memory limit
/// (the process's cgroup's, if any) can hold.
pub fn read_parallel(n: Option<usize>) -> usize {
    match n {
        Some(n) => n.max(1) + 2,
        None => parallel_within(workers(None), cgroup_memory_limit()),
    }
}

/// `cpus + 2` readers, as many as fit in `limit` bytes (at least one).
pub fn parallel_within(cpus: usize, limit: Option<u64>) -> usize {
    let wanted = cpus + 2;
    match limit {
        None => wanted,
        Some(limit) => {
            let fit = limit.saturating_sub(MEMORY_BASE) / MEMORY_PER_READ_WORKER;
            wanted
                .min(usize::try_from(fit).unwrap_or(usize::MAX))
                .max(1)
        }
    }
}

/// The memory limit of this process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`); `None` when unlimited or unreadable. In a container the cgroup
/// root is the container's own.
pub fn cgroup_memory_limit() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    if let Some(v2) = read("/sys/fs/cgroup/memory.max") {
        return v2.trim().parse().ok();
    }
    let v1: u64 = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?
        .trim()
        .parse()
        .ok()?;
    // v1 reports "unlimited" as a huge page-rounded number.
    (v1 < 1 << 60).then_some(v1)
}

pub fn workers(n: Option<usize>) -> usize {
    n.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
    })
    .max(1)
}

pub fn s3_options(args: &S3Args, segment_size: u64) -> S3Options {
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
        credentials_dir: args.s3_credentials_dir.clone(),
    }
}

/// Opens an existing repository: a filesystem path that does not exist is refused.
pub async fn open_repo(args: &RepoArgs, segment_size: u64) -> Result<Repository, Error> {
    open_repo_as(args, segment_size, store::Opening::Existing).await
}

/// Opens the repository a backup or the archive is written to, making its directory.
pub async fn create_repo(args: &RepoArgs, segment_size: u64) -> Result<Repository, Error> {
    open_repo_as(args, segment_size, store::Opening::Create).await
}

async fn open_repo_as(
    args: &RepoArgs,
    segment_size: u64,
    opening: store::Opening,
) -> Result<Repository, Error> {
    let opts = s3_options(&args.s3, segment_size);
    let store = store::open(&args.repo, &opts, opening)
        .await
        .map_err(Error::OpenRepository)?;
    Ok(Repository::new(store))
}

/// Resolves when SIGINT or SIGTERM arrives.
pub fn shutdown_signal() -> Pin<Box<dyn Future<Output = ()> + Send>> {
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

/// A point-in-time target.
#[derive(Args)]
pub struct UntilArgs {
    /// Replay the binlog archive after the backup up to this time (whole seconds: an RFC 3339
    /// time such as 2026-11-25T03:15:00Z, or 2026-11-25 03:15:00 in --time-zone), or `latest`:
    /// every transaction whose commit is stamped at or before it, as long as the log runs in
    /// that order.
    #[arg(long, conflicts_with = "until_gtid")]
    pub until: Option<String>,
    /// The zone a --until time without an offset is read in: UTC, or an IANA name such as
    /// Europe/Berlin. A time a clock change repeats or skips there is refused.
    #[arg(long, default_value = "UTC", value_parser = parse_zone, env = "MYSQL_BACKUP_TIME_ZONE")]
    pub time_zone: chrono_tz::Tz,
    /// Replay the binlog archive after the backup up to and including this MariaDB GTID
    /// position (e.g. 0-1-5012).
    #[arg(long)]
    pub until_gtid: Option<String>,
}

impl Default for UntilArgs {
    fn default() -> Self {
        UntilArgs {
            until: None,
            time_zone: chrono_tz::Tz::UTC,
            until_gtid: None,
        }
    }
}

/// Parses an IANA zone name (or UTC).
fn parse_zone(s: &str) -> Result<chrono_tz::Tz, String> {
    s.trim()
        .parse::<chrono_tz::Tz>()
        .map_err(|_| format!("{s:?} is not an IANA time zone name (e.g. UTC, Europe/Berlin)"))
}

impl UntilArgs {
    pub fn target(&self) -> Result<Option<RecoveryTarget>, Error> {
        let invalid = |flag: &str, why: String| Error::InvalidArgument(format!("{flag}: {why}"));
        if let Some(p) = &self.until_gtid {
            return RecoveryTarget::parse_gtid(p)
                .map(Some)
                .map_err(|why| invalid("--until-gtid", why));
        }
        let Some(until) = self.until.as_deref() else {
            return Ok(None);
        };
        let until = self.in_utc(until).map_err(|why| invalid("--until", why))?;
        RecoveryTarget::parse_time(&until)
            .map(Some)
            .map_err(|why| invalid("--until", why))
    }

    /// A time without an offset, read in `--time-zone`, as an RFC 3339 time in UTC (logged);
    /// anything else as it is.
    fn in_utc(&self, until: &str) -> Result<String, String> {
        use chrono::offset::LocalResult;
        use chrono::TimeZone;
        let trimmed = until.trim();
        let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(trimmed, f).ok());
        let Some(naive) = naive else {
            return Ok(until.to_owned());
        };
        let zone = self.time_zone;
        let at = match zone.from_local_datetime(&naive) {
            LocalResult::Single(t) => t,
            LocalResult::Ambiguous(a, b) => {
                return Err(format!(
                    "{trimmed} happens twice in {zone} (at {} and at {}): give the offset",
                    a.format("%:z"),
                    b.format("%:z")
                ))
            }
            LocalResult::None => {
                return Err(format!(
                    "{trimmed} does not exist in {zone} (a clock change skips it)"
                ))
            }
        };
        let utc = at.with_timezone(&chrono::Utc).format("%Y-%m-%dT%H:%M:%SZ");
        tracing::info!(until = trimmed, zone = %zone, utc = %utc, "--until read in --time-zone");
        Ok(utc.to_string())
    }
}

/// Parses `--method`, listing its values with their tools in `--help`.
pub fn method_parser() -> impl clap::builder::TypedValueParser<Value = Method> {
    PossibleValuesParser::new([
        PossibleValue::new("physical")
            .help("A physical copy streamed as xbstream by xtrabackup or mariabackup"),
        PossibleValue::new("logical").help("An SQL dump from mysqldump or mariadb-dump"),
    ])
    .map(|s| match s.as_str() {
        "logical" => Method::Logical,
        _ => Method::Physical,
    })
}

/// Parses `--engine` (the contract's names), listing its values in `--help`.
pub fn engine_parser() -> impl clap::builder::TypedValueParser<Value = Engine> {
    let help = |e: Engine| match e {
        Engine::MySql => "Oracle MySQL or Percona Server (xtrabackup, mysqldump, mysql)",
        Engine::MariaDb => "MariaDB (mariabackup, mariadb-dump, mariadb)",
    };
    PossibleValuesParser::new(Engine::ALL.map(|e| PossibleValue::new(e.as_str()).help(help(e))))
        .try_map(|s| s.parse::<Engine>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_fit_in_the_memory_limit() {
        let mib = |n: u64| n << 20;
        // (cpus, limit, readers)
        for (cpus, limit, want) in [
            (4, None, 6),
            (64, None, 66),
            // The agent's 256 MiB on a large node: 8 chunks in flight, not 66.
            (64, Some(mib(256)), 8),
            (2, Some(mib(256)), 4),
            (64, Some(mib(1024)), 40),
            // Never none at all, whatever the limit.
            (8, Some(mib(32)), 1),
        ] {
            assert_eq!(parallel_within(cpus, limit), want, "{cpus} cpus, {limit:?}");
        }
        assert_eq!(read_parallel(Some(3)), 5, "asked for: as asked");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("8 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn until_targets() {
        let until = |until: &str| UntilArgs {
            until: Some(until.into()),
            ..UntilArgs::default()
        };
        let ok = [
            ("latest", "the latest archived transaction"),
            ("2026-11-25T03:15:00Z", "2026-11-25T03:15:00Z"),
            ("2026-11-25T04:15:00+01:00", "2026-11-25T03:15:00Z"),
            ("2026-11-25 03:15:00", "2026-11-25T03:15:00Z"),
            ("2026-11-25T03:15:00", "2026-11-25T03:15:00Z"),
        ];
        for (s, shown) in ok {
            let target = until(s).target().unwrap().unwrap();
            assert_eq!(target.to_string(), shown, "{s}");
        }
        // A time without an offset is read in --time-zone; with one, the zone does not matter.
        let zoned = |s: &str, zone: &str| UntilArgs {
            until: Some(s.into()),
            time_zone: parse_zone(zone).unwrap(),
            until_gtid: None,
        };
        let cases = [
            (
                "2026-11-25 03:15:00",
                "Europe/Berlin",
                Ok("2026-11-25T02:15:00Z"),
            ),
            (
                "2026-07-01 03:15:00",
                "Europe/Berlin",
                Ok("2026-07-01T01:15:00Z"),
            ),
            (
                "2026-11-25T03:15:00Z",
                "Europe/Berlin",
                Ok("2026-11-25T03:15:00Z"),
            ),
            (
                "2026-11-25 03:15:00",
                "America/New_York",
                Ok("2026-11-25T08:15:00Z"),
            ),
            (
                "2026-10-25 02:30:00",
                "Europe/Berlin",
                Err("happens twice in Europe/Berlin (at +02:00 and at +01:00): give the offset"),
            ),
            (
                "2026-03-29 02:30:00",
                "Europe/Berlin",
                Err("does not exist in Europe/Berlin"),
            ),
        ];
        for (s, zone, want) in cases {
            match (zoned(s, zone).target(), want) {
                (Ok(t), Ok(w)) => assert_eq!(t.unwrap().to_string(), w, "{s} {zone}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, _) => panic!("{s} {zone}: {got:?}"),
            }
        }
        assert!(parse_zone("Mars/Olympus")
            .unwrap_err()
            .contains("not an IANA time zone"));
        for (s, cause) in [
            (
                "2026-11-25T03:15:00.5Z",
                "--until: \"2026-11-25T03:15:00.5Z\" has a fraction",
            ),
            (
                "yesterday",
                "--until: \"yesterday\" is not `latest` or a time",
            ),
        ] {
            let e = until(s).target().unwrap_err().to_string();
            assert!(e.contains(cause), "{e}");
        }
        let gtid = |p: &str| UntilArgs {
            until_gtid: Some(p.into()),
            ..UntilArgs::default()
        };
        assert!(gtid("0-1-x").target().is_err());
        let e = gtid("").target().unwrap_err().to_string();
        assert!(
            e.contains("--until-gtid: the GTID position is empty"),
            "{e}"
        );
        assert_eq!(
            gtid("0-1-5").target().unwrap().unwrap().to_string(),
            "GTID 0-1-5"
        );
    }
}
