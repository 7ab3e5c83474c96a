//! Small process, file and polling helpers shared by the harness parts.

use std::ffi::OsStr;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Directories searched after `PATH`: Debian puts `mariadbd` in `/usr/sbin`, which is not on
/// the `PATH` of every user.
const EXTRA_BIN_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"];

/// Finds the first of `names` (alternatives such as `mariadbd` and `mysqld`) on `PATH` or in
/// the usual system binary directories.
pub(crate) fn find_tool(names: &[&str]) -> Result<PathBuf> {
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for name in names {
        for dir in path_dirs
            .iter()
            .cloned()
            .chain(EXTRA_BIN_DIRS.iter().map(PathBuf::from))
        {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "none of {names:?} found on PATH or in {EXTRA_BIN_DIRS:?}; run scripts/install-test-deps.sh as root"
    )
}

/// Asks the kernel for a currently free loopback TCP port. Another process may take it before
/// the caller binds it, so callers retry on "address in use".
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("failed to bind a probe socket")?;
    Ok(listener.local_addr()?.port())
}

/// Polls `probe` every few milliseconds until it yields `Some`, fails, or `timeout` passes.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(10);
    loop {
        if let Some(value) = probe()? {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(interval);
        interval = (interval * 2).min(Duration::from_millis(200));
    }
}

/// Runs `cmd` to completion with `stdin` fed from `input`, and fails with its stderr when it
/// exits non-zero.
pub(crate) fn run_checked(cmd: &mut Command, input: Option<&[u8]>) -> Result<Output> {
    let program = describe(cmd);
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("failed to start {program}"))?;
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let input = input.to_vec();
        // A writer thread avoids a deadlock when the child fills its stdout pipe before
        // reading all of its input.
        let writer = thread::spawn(move || std::io::Write::write_all(&mut stdin, &input));
        let output = child.wait_with_output()?;
        // A child that fails early closes its stdin; its stderr explains more than EPIPE.
        let written = writer.join().expect("stdin writer panicked");
        return check_output(&program, output, written.err());
    }
    let output = child.wait_with_output()?;
    check_output(&program, output, None)
}

fn check_output(
    program: &str,
    output: Output,
    write_error: Option<std::io::Error>,
) -> Result<Output> {
    if !output.status.success() {
        bail!(
            "{program} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end(),
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .last()
                .map(|l| format!("\nlast stdout line: {l}"))
                .unwrap_or_default()
        );
    }
    if let Some(err) = write_error {
        return Err(err).with_context(|| format!("failed to write the input of {program}"));
    }
    Ok(output)
}

/// The program name of `cmd`, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    Path::new(cmd.get_program())
        .file_name()
        .unwrap_or(OsStr::new("?"))
        .to_string_lossy()
        .into_owned()
}

/// The last `lines` lines of a log file, or a note that it could not be read.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(err) => format!("(cannot read {}: {err})", path.display()),
    }
}

/// The cache directory shared with `scripts/install-test-deps.sh` and `bench/run.sh`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BULWARK_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache").join("bulwark")
}

/// Whether the current process runs as root (mariadbd then needs `--user=root`).
pub(crate) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user of the process reading it.
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether `BULWARK_TESTKIT_KEEP` asks to keep temporary directories for post-mortems.
pub(crate) fn keep_temp() -> bool {
    std::env::var_os("BULWARK_TESTKIT_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}
