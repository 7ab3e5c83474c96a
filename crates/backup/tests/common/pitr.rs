//! Helpers of the point-in-time recovery tests: a writer of rows stamped with their commit
//! times, a running `mysql-backup archive`, and waits on what `list` shows of the archive.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// One committed row: its id, the second its commit is stamped with, and its GTID.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: u64,
    pub second: i64,
    pub gtid: String,
}

pub const SCHEMA: &str = "CREATE DATABASE pitr;
    CREATE TABLE pitr.w (id BIGINT AUTO_INCREMENT PRIMARY KEY, at DATETIME(6) NOT NULL,
                         pad VARCHAR(200) NOT NULL) ENGINE=InnoDB;";

/// Commits one row in its own transaction; `at` is the statement's start, which is also the
/// second MariaDB stamps the transaction's events with.
pub fn write_row(db: &MariaDb) -> Row {
    let out = db
        .query(
            "SET time_zone = '+00:00';
             INSERT INTO pitr.w (at, pad) VALUES (NOW(6), REPEAT('x', 150));
             SELECT id, FLOOR(UNIX_TIMESTAMP(at)), @@last_gtid FROM pitr.w WHERE id = LAST_INSERT_ID();",
        )
        .unwrap();
    let r = &out[0];
    Row {
        id: r[0].parse().unwrap(),
        second: r[1].parse().unwrap(),
        gtid: r[2].clone(),
    }
}

/// Commits rows for at least `span`.
pub fn write_for(db: &MariaDb, span: Duration) -> Vec<Row> {
    let start = Instant::now();
    let mut rows = Vec::new();
    while start.elapsed() < span {
        rows.push(write_row(db));
    }
    rows
}

pub fn ids(db: &MariaDb) -> BTreeSet<u64> {
    db.query("SELECT id FROM pitr.w")
        .unwrap()
        .into_iter()
        .map(|r| r[0].parse().unwrap())
        .collect()
}

pub fn seq(gtid: &str) -> u64 {
    gtid.rsplit('-').next().unwrap().parse().unwrap()
}

/// A running `mysql-backup archive`.
pub struct Archiver {
    pub child: Child,
    pub log: std::path::PathBuf,
    /// Where its `/status` is served.
    pub status: std::net::SocketAddr,
}

impl Archiver {
    pub fn start(repo: &str, db: &MariaDb, key: &Path, work: &Path, name: &str) -> Archiver {
        Self::start_with(repo, db, key, work, name, &[])
    }

    pub fn start_with(
        repo: &str,
        db: &MariaDb,
        key: &Path,
        work: &Path,
        name: &str,
        extra: &[&str],
    ) -> Archiver {
        let log = work.join(format!("{name}.log"));
        let mut args = vec![
            "archive".to_string(),
            "--repo".into(),
            repo.into(),
            "--encryption-key-file".into(),
            key.display().to_string(),
            "--flush-every".into(),
            "1s".into(),
        ];
        let status = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        args.extend(["--status-listen".into(), status.to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(db.cli_args());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = cli(&argv);
        c.env("MYSQL_BACKUP_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut archiver = Archiver {
            child: c.spawn().unwrap(),
            log,
            status,
        };
        archiver.wait_serving();
        archiver
    }

    /// Waits until the archiver serves its status, which it does once its repository is open
    /// (made, for a new one), or until it exits (refused): `list` must not race the making.
    fn wait_serving(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(self.status).is_err() {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the archiver served no status in 30 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /status`, parsed.
    pub fn report(&self) -> serde_json::Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.status).unwrap();
        s.write_all(b"GET /status HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let body = raw.split_once("\r\n\r\n").unwrap().1;
        serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {raw}"))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The archiver's peak resident memory so far, in MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM in {status}"));
        kib / 1024
    }

    /// SIGTERM, and the archiver must exit cleanly.
    pub fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let status = self.child.wait().unwrap();
        let log = self.log();
        assert!(status.success(), "archiver exited with {status}: {log}");
        log
    }

    /// Waits for the archiver to exit on its own; its status and log.
    pub fn wait_exit(mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "the archiver still runs after {within:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Archiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the archive reaches `gtid` (by `list --json`).
pub fn wait_archived(repo: &str, key: &Path, gtid: &str, archiver: &Archiver) -> serde_json::Value {
    wait_archived_within(repo, key, gtid, archiver, Duration::from_secs(30))
}

/// [`wait_archived`] with a deadline of `within`.
pub fn wait_archived_within(
    repo: &str,
    key: &Path,
    gtid: &str,
    archiver: &Archiver,
    within: Duration,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let l = list(repo, &[]);
        let through = l["archives"]["default"]["through"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !through.is_empty() && seq(&through) >= seq(gtid) {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "archive did not reach {gtid} in {within:?} (at {through:?}); key {}; archiver log: {}",
            key.display(),
            archiver.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `mysql-backup <verb>` of backup `id` into the server `db`, with `extra` arguments.
pub fn into_server(
    verb: &str,
    repo: &str,
    key: &Path,
    id: &str,
    db: &MariaDb,
    extra: &[&str],
) -> std::process::Command {
    let mut args = vec![
        verb.to_string(),
        "--repo".into(),
        repo.into(),
        "--encryption-key-file".into(),
        key.display().to_string(),
        id.into(),
    ];
    args.extend(db.cli_args());
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    cli(&argv)
}

/// A fresh server with the backup restored and the archive replayed to `until`.
pub fn restore_until(repo: &str, key: &Path, id: &str, until: &[&str]) -> (MariaDb, String) {
    let db = MariaDb::start().unwrap();
    let out = ok(into_server("restore", repo, key, id, &db, until));
    (db, out)
}

pub fn backup_window_to(listing: &serde_json::Value, id: &str) -> Option<String> {
    listing["backups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id)
        .and_then(|b| b["recoveryWindow"]["to"].as_str())
        .map(str::to_owned)
}

/// Waits until the archive reaches exactly `pos`.
pub fn wait_archived_at(repo: &str, pos: &str, archiver: &Archiver) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = list(repo, &[]);
        let through = l["archives"]["default"]["through"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if through == pos {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "archive did not reach {pos} in 30 s (at {through:?}); archiver log: {}",
            archiver.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a replay test starts from: a server (started with `args`, holding [`SCHEMA`] and then
/// `schema`), a logical backup of it under a new key, and an archiver named `name` following it.
pub struct ArchivedSource {
    pub work: tempfile::TempDir,
    pub repo: String,
    pub key: std::path::PathBuf,
    pub source: MariaDb,
    pub backup_id: String,
    pub archiver: Archiver,
}

pub fn archived_source(args: &[&str], schema: &str, name: &str) -> ArchivedSource {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let source = MariaDb::start_with_args(args).unwrap();
    source.sql(SCHEMA).unwrap();
    if !schema.is_empty() {
        source.sql(schema).unwrap();
    }
    let b = backup(
        &repo,
        &source,
        &[
            "--method",
            "logical",
            "--encryption-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let backup_id = b["id"].as_str().unwrap().to_string();
    let archiver = Archiver::start(&repo, &source, &key, work.path(), name);
    ArchivedSource {
        work,
        repo,
        key,
        source,
        backup_id,
        archiver,
    }
}
