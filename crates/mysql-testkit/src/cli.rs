//! Running the project's binaries in tests: a command with quiet logging, its exit status and
//! one-line error checked, key files, and the files a run leaves behind.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::MariaDb;

/// A command for `program` with `args`, logging only warnings so stderr stays readable, without
/// progress output, a password from the environment or standard input.
pub fn command(program: impl AsRef<OsStr>, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args)
        .env("MYSQL_BACKUP_LOG", "warn")
        .env("BULWARK_AGENT_LOG", "warn")
        .env("MYSQL_BACKUP_PROGRESS", "none")
        .env_remove("MYSQL_PWD")
        .stdin(Stdio::null());
    c
}

/// The binary `name` built next to `program` (same target directory). `cargo test --workspace`
/// builds every binary of the workspace before it runs any test.
pub fn sibling_binary(program: &str, name: &str) -> PathBuf {
    let path = Path::new(program).with_file_name(name);
    assert!(
        path.exists(),
        "{} is not built: run the tests with `cargo test --workspace` or build it first",
        path.display()
    );
    path
}

/// Runs and returns the output.
pub fn run(mut c: Command) -> Output {
    c.output()
        .unwrap_or_else(|e| panic!("failed to run {:?}: {e}", c.get_program()))
}

/// Runs, asserts success, returns stdout.
pub fn ok(c: Command) -> String {
    let program = c.get_program().to_owned();
    let out = run(c);
    assert!(
        out.status.success(),
        "{program:?} failed: {}\nstdout: {}",
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

/// Takes a backup of `db` with `mysql-backup` (`program`), `args` appended; returns the JSON
/// summary.
pub fn backup(
    program: impl AsRef<OsStr>,
    repo: &str,
    db: &MariaDb,
    args: &[&str],
    env: &[(String, String)],
) -> serde_json::Value {
    let mut all = vec!["backup", "--repo", repo, "--json"];
    let conn = db.cli_args();
    all.extend(conn.iter().map(String::as_str));
    all.extend_from_slice(args);
    let mut c = command(program, &all);
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
