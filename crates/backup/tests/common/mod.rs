//! Shared helpers for the CLI integration tests: run the real `mysql-backup` binary and check
//! its exit code, its one-line error and the repository it leaves behind.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub use bulwark_mysql_testkit::{
    assert_same, load_fixture, snapshot, Fault, FaultMode, FaultProxy, MariaDb, S3Server,
};

/// Rows per big fixture table: enough for many chunks with the small chunk sizes used here.
pub const ROWS: usize = 3000;

/// A command for the binary under test, logging only warnings so stderr stays readable.
pub fn cli(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mysql-backup"));
    c.args(args)
        .env("MYSQL_BACKUP_LOG", "warn")
        .env("MYSQL_BACKUP_PROGRESS", "none")
        .env_remove("MYSQL_PWD")
        .stdin(Stdio::null());
    c
}

/// Runs and returns the output.
pub fn run(mut c: Command) -> Output {
    c.output().expect("failed to run mysql-backup")
}

/// Runs, asserts success, returns stdout.
pub fn ok(c: Command) -> String {
    let out = run(c);
    assert!(
        out.status.success(),
        "mysql-backup failed: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs, asserts a non-zero exit whose last stderr line is a one-line `error: …` containing
/// every one of `needles`; returns that line.
pub fn fails(c: Command, needles: &[&str]) -> String {
    let out = run(c);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {stderr}");
    let last = stderr.lines().last().unwrap_or_default().to_string();
    assert!(
        last.starts_with("error: "),
        "last stderr line is not an error line: {stderr}"
    );
    for n in needles {
        assert!(last.contains(n), "error line lacks {n:?}: {last}");
    }
    last
}

/// A base64 key file like `openssl rand -base64 32` writes.
pub fn key_file(dir: &Path, name: &str) -> PathBuf {
    let out = Command::new("openssl")
        .args(["rand", "-base64", "32"])
        .output()
        .expect("openssl");
    assert!(out.status.success());
    let p = dir.join(name);
    std::fs::write(&p, out.stdout).unwrap();
    p
}

/// `list --all --json` parsed.
pub fn list(repo: &str, extra: &[(String, String)]) -> serde_json::Value {
    let mut c = cli(&["list", "--repo", repo, "--all", "--json"]);
    c.envs(extra.iter().cloned());
    serde_json::from_str(&ok(c)).expect("list prints JSON")
}

/// Ids of complete backups.
pub fn complete_ids(listing: &serde_json::Value) -> Vec<String> {
    listing["backups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect()
}

/// Number of incomplete or damaged backups.
pub fn incomplete_count(listing: &serde_json::Value) -> usize {
    listing["incomplete"].as_array().map(Vec::len).unwrap_or(0)
}

/// Takes a backup with `args` appended and returns the JSON summary.
pub fn backup(
    repo: &str,
    db: &MariaDb,
    args: &[&str],
    env: &[(String, String)],
) -> serde_json::Value {
    let mut all = vec!["backup", "--repo", repo, "--json"];
    let conn = db.cli_args();
    all.extend(conn.iter().map(String::as_str));
    all.extend_from_slice(args);
    let mut c = cli(&all);
    c.envs(env.iter().cloned());
    serde_json::from_str(&ok(c)).expect("backup prints JSON")
}

/// Files of a directory tree (relative paths), for checking nothing was left behind.
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// A temporary directory, a MariaDB loaded with the fixture, and a repository path inside the
/// directory (not created yet).
pub struct Scenario {
    pub work: tempfile::TempDir,
    pub source: MariaDb,
    pub repo: String,
}

impl Scenario {
    pub fn new(rows: usize) -> Self {
        let work = tempfile::tempdir().unwrap();
        let source = MariaDb::start().unwrap();
        load_fixture(&source, rows).unwrap();
        let repo = work.path().join("repo").display().to_string();
        Self { work, source, repo }
    }

    /// Takes a backup with `args`; returns its id and directory in the repository.
    pub fn backup(&self, args: &[&str]) -> (String, PathBuf) {
        let b = backup(&self.repo, &self.source, args, &[]);
        let id = b["id"].as_str().unwrap().to_string();
        let dir = Path::new(&self.repo).join("backups").join(&id);
        (id, dir)
    }
}

/// Hex SHA-256 computed by `sha256sum`, independently of the code under test.
pub fn sha256_hex(data: &[u8]) -> String {
    use std::io::Write;
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(data).unwrap();
    String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap()[..64].to_string()
}
