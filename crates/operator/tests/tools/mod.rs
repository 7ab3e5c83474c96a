//! The Go tools the chart tests run (helm, promtool), each from its environment variable (a
//! directory) or else built once by its script under `tests/` and cached outside the clone.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory `env` names, or the one the build script prints (run once per test binary;
/// instant when its cache is filled).
fn tool_dir(env: &str, script: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(env).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let script = repository_root().join(script);
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_else(|| panic!("{} printed no directory", script.display()));
    PathBuf::from(dir.trim())
}

/// Directory of the helm binary: `BULWARK_HELM_BIN`, or `tests/helm/build.sh`'s.
pub fn helm_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tool_dir("BULWARK_HELM_BIN", "tests/helm/build.sh"))
}

/// Directory of the promtool binary: `BULWARK_PROMTOOL_BIN`, or `tests/promtool/build.sh`'s.
pub fn promtool_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tool_dir("BULWARK_PROMTOOL_BIN", "tests/promtool/build.sh"))
}
