//! Backup sources: probing the server, choosing and invoking xtrabackup / mariabackup /
//! mysqldump / mariadb-dump, capturing their stderr in a bounded buffer, and reading the
//! consistent point and completion line from what they report.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use mysql_async::prelude::Queryable;
use tokio::io::{AsyncBufReadExt, BufReader};
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::format::{ConsistentPoint, Method};
use bulwark_contract::Engine;

/// The completion line the physical tools print last.
pub const PHYSICAL_COMPLETION: &str = "completed OK!";
/// The trailer mysqldump and mariadb-dump write at the end of a complete dump.
pub const DUMP_COMPLETION: &str = "-- Dump completed";
/// Bytes of a tool's stderr kept for error messages.
const STDERR_TAIL_BYTES: usize = 16 << 10;

/// How to reach the server.
#[derive(Clone, Default)]
pub struct Connection {
    /// Unix socket path; preferred when set.
    pub socket: Option<PathBuf>,
    /// TCP host.
    pub host: Option<String>,
    /// TCP port.
    pub port: Option<u16>,
    /// User name.
    pub user: Option<String>,
    /// Password (from `MYSQL_PWD`); never logged.
    pub password: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("target", &self.describe())
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Connection {
    /// Where this connects, for messages.
    pub fn describe(&self) -> String {
        match (&self.socket, &self.host) {
            (Some(s), _) => format!("socket {}", s.display()),
            (None, Some(h)) => format!("{h}:{}", self.port.unwrap_or(3306)),
            (None, None) => "the default socket".to_string(),
        }
    }

    /// Options for the command-line tools (the password goes through a defaults file).
    pub fn tool_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(s) = &self.socket {
            args.push(format!("--socket={}", s.display()));
        } else if let Some(h) = &self.host {
            args.push(format!("--host={h}"));
            args.push(format!("--port={}", self.port.unwrap_or(3306)));
            args.push("--protocol=TCP".into());
        }
        if let Some(u) = &self.user {
            args.push(format!("--user={u}"));
        }
        args
    }

    pub fn opts(&self) -> mysql_async::Opts {
        let mut b = mysql_async::OptsBuilder::default()
            .user(self.user.clone())
            .pass(self.password.as_ref().map(|p| p.to_string()))
            .prefer_socket(false);
        if let Some(s) = &self.socket {
            b = b.socket(Some(s.display().to_string()));
        } else {
            b = b
                .ip_or_hostname(self.host.clone().unwrap_or_else(|| "localhost".into()))
                .tcp_port(self.port.unwrap_or(3306));
        }
        b.into()
    }
}

/// What the server says about itself.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// Family.
    pub engine: Engine,
    /// `@@version`.
    pub version: String,
    /// `@@hostname`.
    pub hostname: String,
    /// `@@datadir`.
    pub datadir: String,
    /// Whether binary logging is on.
    pub log_bin: bool,
    /// Sum of table data and index sizes, an estimate of the stream size.
    pub data_bytes: u64,
}

/// Whether the server holds a logical bootstrap's partial-load mark: part of a load, which a
/// backup must not take for the data. The account must see the mark's schema (`SHOW
/// DATABASES`, as the operator's backup account has, or any privilege on it).
pub async fn holds_partial_load(conn: &Connection) -> Result<bool> {
    let connect = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        mysql_async::Conn::new(conn.opts()),
    );
    let mut c = connect
        .await
        .unwrap_or_else(|_| {
            Err(mysql_async::Error::Other(
                "connection timed out after 30s".into(),
            ))
        })
        .map_err(|source| Error::ConnectServer {
            target: conn.describe(),
            source: Box::new(source),
        })?;
    let marks: Option<u64> = c
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            (bulwark_contract::bootstrap::PARTIAL_LOAD_SCHEMA,),
        )
        .await
        .map_err(|e| Error::QueryServer(Box::new(e)))?;
    let _ = c.disconnect().await;
    Ok(marks.unwrap_or(0) > 0)
}

/// Family of a server from its version string.
pub fn engine_of(version: &str, comment: &str) -> Engine {
    if version.to_ascii_lowercase().contains("mariadb")
        || comment.to_ascii_lowercase().contains("mariadb")
    {
        Engine::MariaDb
    } else {
        Engine::MySql
    }
}

/// Connects and reads version, host, datadir, binlog state and a size estimate.
pub async fn probe(conn: &Connection) -> Result<ServerInfo> {
    let connect = async {
        let pool_conn = mysql_async::Conn::new(conn.opts()).await?;
        Ok::<_, mysql_async::Error>(pool_conn)
    };
    let mut c = tokio::time::timeout(std::time::Duration::from_secs(30), connect)
        .await
        .map_err(|_| Error::ConnectServer {
            target: conn.describe(),
            source: Box::new(mysql_async::Error::Other(
                "connection timed out after 30s".into(),
            )),
        })?
        .map_err(|source| Error::ConnectServer {
            target: conn.describe(),
            source: Box::new(source),
        })?;
    let row: Option<(String, String, String, String, i64)> = c
        .query_first("SELECT @@version, @@version_comment, @@hostname, @@datadir, @@log_bin")
        .await
        .map_err(|e| Error::QueryServer(Box::new(e)))?;
    let (version, comment, hostname, datadir, log_bin) = row
        .ok_or_else(|| Error::QueryServer(Box::new(mysql_async::Error::Other("no row".into()))))?;
    let data_bytes: Option<Option<u64>> = c
        .query_first("SELECT CAST(SUM(data_length + index_length) AS UNSIGNED) FROM information_schema.tables WHERE table_type = 'BASE TABLE'")
        .await
        .map_err(|e| Error::QueryServer(Box::new(e)))?;
    let _ = c.disconnect().await;
    Ok(ServerInfo {
        engine: engine_of(&version, &comment),
        version,
        hostname,
        datadir,
        log_bin: log_bin != 0,
        data_bytes: data_bytes.flatten().unwrap_or(0),
    })
}

/// Programs tried, in order, for a job.
pub fn tool_candidates(engine: Engine, job: ToolJob) -> &'static [&'static str] {
    match (engine, job) {
        (Engine::MariaDb, ToolJob::Physical) => &["mariadb-backup", "mariabackup"],
        (Engine::MySql, ToolJob::Physical) => &["xtrabackup"],
        (Engine::MariaDb, ToolJob::Logical) => &["mariadb-dump", "mysqldump"],
        (Engine::MySql, ToolJob::Logical) => &["mysqldump"],
        (Engine::MariaDb, ToolJob::Client) => &["mariadb", "mysql"],
        (Engine::MySql, ToolJob::Client) => &["mysql"],
        (Engine::MariaDb, ToolJob::BinlogDecoder) => &["mariadb-binlog", "mysqlbinlog"],
        (Engine::MySql, ToolJob::BinlogDecoder) => &["mysqlbinlog"],
    }
}

/// What a tool is needed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolJob {
    /// Physical backup and prepare.
    Physical,
    /// SQL dump.
    Logical,
    /// SQL client for logical restore.
    Client,
    /// Binary log decoder for point-in-time replay.
    BinlogDecoder,
}

impl From<Method> for ToolJob {
    fn from(m: Method) -> Self {
        match m {
            Method::Physical => ToolJob::Physical,
            Method::Logical => ToolJob::Logical,
        }
    }
}

/// Finds the tool: the override if given (a name or path), else the first candidate on PATH.
pub fn find_tool(engine: Engine, job: ToolJob, override_: Option<&str>) -> Result<PathBuf> {
    let candidates: Vec<&str> = match override_ {
        Some(t) => vec![t],
        None => tool_candidates(engine, job).to_vec(),
    };
    for c in &candidates {
        if c.contains('/') {
            if Path::new(c).is_file() {
                return Ok(PathBuf::from(c));
            }
            continue;
        }
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let p = dir.join(c);
                if p.is_file() {
                    return Ok(p);
                }
            }
        }
    }
    Err(Error::ToolNotFound {
        wanted: candidates.join(" or "),
    })
}

/// First line of `tool --version`; empty when the tool does not answer within 10 s (the
/// version is informational and must never hold a backup up).
pub async fn tool_version(tool: &Path) -> String {
    let run = tokio::process::Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(std::time::Duration::from_secs(10), run).await {
        Ok(Ok(out)) => {
            let text = if out.stdout.is_empty() {
                out.stderr
            } else {
                out.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        }
        _ => {
            tracing::warn!(tool = %tool.display(), "tool did not report its version");
            String::new()
        }
    }
}

/// A private option file carrying the password, so it never appears on a command line.
pub struct DefaultsFile {
    dir: tempfile::TempDir,
}

impl DefaultsFile {
    /// Writes the file when a password is set.
    pub fn create(conn: &Connection) -> Result<Option<Self>> {
        let Some(password) = &conn.password else {
            return Ok(None);
        };
        let io = |source| Error::LocalIo {
            action: "write option file in",
            path: std::env::temp_dir().display().to_string(),
            source,
        };
        let dir = tempfile::Builder::new()
            .prefix("mysql-backup-")
            .tempdir()
            .map_err(io)?;
        let escaped = password.replace('\\', "\\\\").replace('"', "\\\"");
        let body = Zeroizing::new(format!(
            "[client]\npassword=\"{escaped}\"\n[mariadb-backup]\npassword=\"{escaped}\"\n[mariabackup]\npassword=\"{escaped}\"\n[xtrabackup]\npassword=\"{escaped}\"\n"
        ));
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.path().join("my.cnf"))
            .map_err(io)?;
        f.write_all(body.as_bytes()).map_err(io)?;
        Ok(Some(Self { dir }))
    }

    /// `--defaults-extra-file=…`, which must be the tool's first argument.
    pub fn arg(&self) -> String {
        format!(
            "--defaults-extra-file={}",
            self.dir.path().join("my.cnf").display()
        )
    }
}

/// Arguments of a physical backup (after the defaults-file argument).
pub fn physical_args(
    conn: &Connection,
    work_dir: &Path,
    datadir: Option<&str>,
    extra: &[String],
) -> Vec<String> {
    let mut args = vec![
        "--backup".to_string(),
        "--stream=xbstream".to_string(),
        format!("--target-dir={}", work_dir.display()),
    ];
    if let Some(d) = datadir {
        args.push(format!("--datadir={d}"));
    }
    args.extend(conn.tool_args());
    args.extend(extra.iter().cloned());
    args
}

/// Arguments of a logical backup: one consistent dump of everything, with binlog coordinates
/// recorded as comments when binary logging is on.
pub fn logical_args(
    conn: &Connection,
    engine: Engine,
    server_version: &str,
    log_bin: bool,
    extra: &[String],
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--single-transaction",
        "--all-databases",
        "--routines",
        "--events",
        "--triggers",
        "--hex-blob",
        "--quick",
        "--flush-privileges",
        "--default-character-set=utf8mb4",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The agent's lease stamp describes the server it was written on, not the data.
    args.push(format!(
        "--ignore-table={}",
        bulwark_contract::lease::WATCHDOG_TABLE
    ));
    if log_bin {
        match engine {
            Engine::MariaDb => {
                args.push("--master-data=2".into());
                args.push("--gtid".into());
            }
            Engine::MySql => {
                // MySQL 8.0.26 renamed --master-data; 8.4 removed the old name.
                let (major, minor, patch) = parse_version(server_version);
                if (major, minor, patch) >= (8, 0, 26) {
                    args.push("--source-data=2".into());
                } else {
                    args.push("--master-data=2".into());
                }
                args.push("--set-gtid-purged=AUTO".into());
            }
        }
    }
    args.extend(conn.tool_args());
    args.extend(extra.iter().cloned());
    args
}

pub use bulwark_contract::engine::parse_version;

/// Parses `MySQL binlog position: filename 'x', position 'n', GTID of the last change 'g'`.
pub fn parse_binlog_line(line: &str) -> Option<ConsistentPoint> {
    let rest = &line[line.find("binlog position:")? + "binlog position:".len()..];
    let quoted = |label: &str| -> Option<String> {
        let at = rest.find(label)? + label.len();
        let tail = rest[at..].trim_start();
        let tail = tail.strip_prefix('\'')?;
        Some(tail[..tail.find('\'')?].to_string())
    };
    let point = ConsistentPoint {
        binlog_file: quoted("filename").filter(|s| !s.is_empty()),
        binlog_position: quoted("position").and_then(|s| s.parse().ok()),
        gtid_set: quoted("GTID of the last change").filter(|s| !s.is_empty()),
    };
    (point.binlog_file.is_some() || point.gtid_set.is_some()).then_some(point)
}

/// Reads binlog coordinates and GTIDs from a dump's header comments and, for MariaDB, the GTID
/// position it writes as a comment at the end.
pub fn parse_dump_point(head: &[u8], tail: &[u8]) -> ConsistentPoint {
    let mut point = parse_dump_head(head);
    if point.gtid_set.is_none() {
        let text = String::from_utf8_lossy(tail);
        point.gtid_set = text.lines().rev().find_map(|l| {
            let rest = l.strip_prefix("-- SET GLOBAL gtid_slave_pos='")?;
            Some(rest[..rest.find('\'')?].to_string())
        });
    }
    point
}

fn parse_dump_head(head: &[u8]) -> ConsistentPoint {
    let text = String::from_utf8_lossy(head);
    let mut point = ConsistentPoint::default();
    let between = |s: &str, start: &str, end: char| -> Option<String> {
        let at = s.find(start)? + start.len();
        let rest = &s[at..];
        Some(rest[..rest.find(end)?].to_string())
    };
    for line in text.lines() {
        let l = line.trim_start_matches("-- ").trim();
        if l.starts_with("CHANGE MASTER TO") || l.starts_with("CHANGE REPLICATION SOURCE TO") {
            let file = between(l, "MASTER_LOG_FILE='", '\'')
                .or_else(|| between(l, "SOURCE_LOG_FILE='", '\''));
            let pos = between(l, "MASTER_LOG_POS=", ';')
                .or_else(|| between(l, "SOURCE_LOG_POS=", ';'))
                .and_then(|p| p.trim().trim_end_matches(',').parse().ok());
            if file.is_some() {
                point.binlog_file = file;
                point.binlog_position = pos;
            }
        } else if l.starts_with("SET GLOBAL gtid_slave_pos=") {
            point.gtid_set = between(l, "gtid_slave_pos='", '\'');
        } else if l.starts_with("SET @@GLOBAL.GTID_PURGED=") {
            // `SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ 'uuid:1-5';`: the set is the last quoted string.
            let quoted: Vec<&str> = l.split('\'').collect();
            if quoted.len() >= 3 {
                point.gtid_set = Some(quoted[quoted.len() - 2].replace(['\n', ' '], ""));
            }
        }
        if l.starts_with("Current Database:") {
            break;
        }
    }
    point
}

/// Reads a tool's stderr as it comes, keeping its last lines: a tool that writes more than a
/// pipe holds (a client echoing a refused statement) must never block on it while its caller
/// waits on the tool.
pub fn drain_stderr(
    stderr: tokio::process::ChildStderr,
    tool: String,
) -> tokio::task::JoinHandle<StderrReport> {
    tokio::spawn(async move {
        let mut report = StderrReport::default();
        let mut reader = BufReader::new(stderr);
        // Each line is kept to its first bytes (a client may echo a statement of gigabytes as
        // one line), read lossily (a tool may print bytes that are not UTF-8), and the pipe is
        // read to its end whatever happens, so the tool never blocks on it.
        let mut line = Vec::new();
        loop {
            line.clear();
            let mut kept = 0;
            let mut ended = false;
            loop {
                let chunk = match reader.fill_buf().await {
                    Ok(chunk) => chunk,
                    Err(_) => {
                        ended = true;
                        break;
                    }
                };
                if chunk.is_empty() {
                    ended = true;
                    break;
                }
                let (part, newline) = match chunk.iter().position(|b| *b == b'\n') {
                    Some(at) => (&chunk[..at], true),
                    None => (chunk, false),
                };
                let room = STDERR_LINE_BYTES.saturating_sub(kept);
                line.extend_from_slice(&part[..part.len().min(room)]);
                kept += part.len().min(room);
                let used = part.len() + usize::from(newline);
                reader.consume(used);
                if newline {
                    break;
                }
            }
            if !line.is_empty() {
                let text = String::from_utf8_lossy(&line).into_owned();
                tracing::trace!(tool = %tool, line = %text, "tool stderr");
                report.push(text);
            }
            if ended {
                return report;
            }
        }
    })
}

/// The bytes kept of one line a tool printed on stderr.
const STDERR_LINE_BYTES: usize = 4096;

/// What a tool left on stderr.
#[derive(Debug, Default)]
pub struct StderrReport {
    /// The last lines, bounded.
    pub tail: VecDeque<String>,
    tail_bytes: usize,
    /// Whether the completion line was seen.
    pub completed: bool,
    /// Coordinates the tool reported.
    pub point: Option<ConsistentPoint>,
}

impl StderrReport {
    fn push(&mut self, line: String) {
        if line.contains(PHYSICAL_COMPLETION) {
            self.completed = true;
        }
        if let Some(p) = parse_binlog_line(&line) {
            self.point = Some(p);
        }
        self.tail_bytes += line.len();
        self.tail.push_back(line);
        while self.tail_bytes > STDERR_TAIL_BYTES && self.tail.len() > 1 {
            let gone = self.tail.pop_front().expect("non-empty");
            self.tail_bytes -= gone.len();
        }
    }

    /// The last few meaningful lines on one line, for error messages.
    pub fn summary(&self) -> String {
        let lines: Vec<&str> = self
            .tail
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !l.contains("InnoDB: ") && !l.contains("Streaming "))
            .collect();
        let start = lines.len().saturating_sub(3);
        let s = lines[start..].join(" | ");
        if s.is_empty() {
            "no output on stderr".into()
        } else {
            s
        }
    }
}

/// A running tool whose stdout is read by the caller.
pub struct ToolProcess {
    /// Program name for messages.
    pub name: String,
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<StderrReport>,
}

/// Which of the tool's standard streams the caller uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolIo {
    /// The caller reads stdout (backup tools).
    ReadStdout,
    /// The caller writes stdin (SQL client).
    WriteStdin,
    /// Neither (prepare).
    Neither,
}

/// Makes the kernel kill the process `command` starts when this one dies, however it dies: a
/// killed `mysql-backup` leaves no tool writing into a directory the next run removes. The
/// signal follows the thread that forks, so commands are spawned from the runtime's own
/// threads (which live as long as the process), never from `spawn_blocking`, whose idle
/// threads exit.
pub fn dies_with_parent(command: &mut tokio::process::Command) -> &mut tokio::process::Command {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: prctl and getppid are async-signal-safe and touch nothing of the parent's state.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the signal was armed: never run orphaned.
            if libc::getppid() != parent {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            Ok(())
        })
    }
}

/// Starts `program args…` with stderr captured and the streams `io` names piped.
pub fn spawn(program: &Path, args: &[String], io: ToolIo) -> Result<ToolProcess> {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tracing::debug!(tool = %name, args = ?args.iter().filter(|a| !a.starts_with("--defaults-extra-file")).collect::<Vec<_>>(), "starting tool");
    let mut child = dies_with_parent(&mut tokio::process::Command::new(program))
        .args(args)
        .stdin(if io == ToolIo::WriteStdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(if io == ToolIo::ReadStdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| Error::StartTool {
            tool: name.clone(),
            source,
        })?;
    let stderr = drain_stderr(child.stderr.take().expect("stderr piped"), name.clone());
    Ok(ToolProcess {
        name,
        child,
        stderr,
    })
}

impl ToolProcess {
    /// The tool's stdout.
    pub fn take_stdout(&mut self) -> tokio::process::ChildStdout {
        self.child.stdout.take().expect("stdout piped")
    }

    /// The tool's stdin.
    pub fn take_stdin(&mut self) -> tokio::process::ChildStdin {
        self.child.stdin.take().expect("stdin piped")
    }

    /// Kills the tool (after a failure elsewhere) and returns what it printed.
    pub async fn kill(mut self) -> StderrReport {
        let _ = self.child.kill().await;
        self.stderr.await.unwrap_or_default()
    }

    /// Waits for exit; fails on a non-zero status or, when `completion` is set, a missing
    /// completion line.
    pub async fn finish(mut self, completion: Option<&str>) -> Result<StderrReport> {
        let status = self.child.wait().await.map_err(|source| Error::StartTool {
            tool: self.name.clone(),
            source,
        })?;
        let report = self.stderr.await.unwrap_or_default();
        if !status.success() {
            let status = match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(c), _) => format!("exit status {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                _ => status.to_string(),
            };
            return Err(Error::ToolFailed {
                tool: self.name,
                status,
                stderr_tail: report.summary(),
            });
        }
        if let Some(line) = completion {
            if !report.completed {
                return Err(Error::ToolIncomplete {
                    tool: self.name,
                    expected: line.to_string(),
                    stderr_tail: report.summary(),
                });
            }
        }
        Ok(report)
    }
}

/// A password file's content without its trailing line break, kept in zeroized memory.
pub fn read_password_file(path: &Path) -> std::io::Result<Zeroizing<String>> {
    let text = Zeroizing::new(std::fs::read_to_string(path)?);
    Ok(Zeroizing::new(
        text.trim_end_matches(['\n', '\r']).to_string(),
    ))
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
