//! Shared helpers for the CLI integration tests: run the real `mysql-backup` binary and check
//! its exit code, its one-line error and the repository it leaves behind.
#![allow(dead_code, unused_imports)]

pub mod pitr;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use bulwark_mysql_testkit::{
    assert_same, load_fixture, snapshot, Fault, FaultMode, FaultProxy, MariaDb, S3Server,
};

/// Rows per big fixture table: enough for many chunks with the small chunk sizes used here.
pub const ROWS: usize = 3000;

pub use bulwark_mysql_testkit::cli::{fails, key_file, ok, run, tree};

/// A command for the binary under test.
pub fn cli(args: &[&str]) -> Command {
    bulwark_mysql_testkit::cli::command(env!("CARGO_BIN_EXE_mysql-backup"), args)
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
    bulwark_mysql_testkit::cli::backup(env!("CARGO_BIN_EXE_mysql-backup"), repo, db, args, env)
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
