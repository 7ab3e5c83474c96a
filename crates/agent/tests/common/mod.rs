//! Shared helpers for the agent's integration tests: run the real `bulwark-agent` binary (and
//! `mysql-backup` to take the backups it restores) against real MariaDB servers.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod agents;
pub use agents::*;

pub use bulwark_mysql_testkit::cli::{fails, key_file, ok, run, tree};
pub use bulwark_mysql_testkit::{assert_same, load_fixture, snapshot, MariaDb};

/// The binary under test.
pub const AGENT: &str = env!("CARGO_BIN_EXE_bulwark-agent");

/// A command for `bulwark-agent`.
pub fn cli(args: &[&str]) -> Command {
    bulwark_mysql_testkit::cli::command(AGENT, args)
}

/// A command for `mysql-backup`, built beside the agent.
pub fn backup_cli(args: &[&str]) -> Command {
    bulwark_mysql_testkit::cli::command(
        bulwark_mysql_testkit::cli::sibling_binary(AGENT, "mysql-backup"),
        args,
    )
}

/// Takes a backup with `mysql-backup`, `args` appended; returns the JSON summary.
pub fn backup(
    repo: &str,
    db: &MariaDb,
    args: &[&str],
    env: &[(String, String)],
) -> serde_json::Value {
    bulwark_mysql_testkit::cli::backup(
        bulwark_mysql_testkit::cli::sibling_binary(AGENT, "mysql-backup"),
        repo,
        db,
        args,
        env,
    )
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
}
