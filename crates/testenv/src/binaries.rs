//! Locating the control-plane binaries: `BULWARK_CONTROLPLANE_BIN`, or the directory printed by
//! `tests/controlplane/build.sh` (which builds them once into a cache outside the clone).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// Environment variable naming a directory that holds `etcd`, `kube-apiserver` and
/// `kube-controller-manager`. When unset, `tests/controlplane/build.sh` provides them.
pub const BIN_DIR_ENV: &str = "BULWARK_CONTROLPLANE_BIN";

/// Paths of the three control-plane binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The etcd server.
    pub etcd: PathBuf,
    /// The Kubernetes API server.
    pub kube_apiserver: PathBuf,
    /// The Kubernetes controller manager.
    pub kube_controller_manager: PathBuf,
}

impl Binaries {
    /// Finds the binaries in `dir`.
    pub fn in_dir(dir: &Path) -> Result<Self> {
        let find = |binary: &'static str| {
            let path = dir.join(binary);
            if path.is_file() {
                Ok(path)
            } else {
                Err(Error::MissingBinary {
                    binary,
                    dir: dir.to_path_buf(),
                })
            }
        };
        Ok(Self {
            etcd: find("etcd")?,
            kube_apiserver: find("kube-apiserver")?,
            kube_controller_manager: find("kube-controller-manager")?,
        })
    }

    /// Finds the binaries through `BULWARK_CONTROLPLANE_BIN`, or else runs the build script
    /// (blocking; instant when its cache is filled) and uses the directory it prints.
    pub fn locate() -> Result<Self> {
        if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
            return Self::in_dir(Path::new(&dir));
        }
        Self::in_dir(&build_with_script(&build_script())?)
    }
}

/// Root of the repository this crate was built from.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/controlplane/build.sh` of this repository.
pub fn build_script() -> PathBuf {
    repository_root().join("tests/controlplane/build.sh")
}

fn build_with_script(script: &Path) -> Result<PathBuf> {
    let output = Command::new("bash")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::BuildControlPlane {
            script: script.to_path_buf(),
            status: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(Error::BuildControlPlane {
            script: script.to_path_buf(),
            status: output.status.to_string(),
        });
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir.trim())),
        None => Err(Error::BuildControlPlane {
            script: script.to_path_buf(),
            status: "printed no binary directory".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("etcd"), b"").expect("write");
        let err = Binaries::in_dir(dir.path()).expect_err("kube-apiserver is missing");
        assert!(
            matches!(
                err,
                Error::MissingBinary {
                    binary: "kube-apiserver",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn build_script_is_part_of_the_repository() {
        assert!(build_script().is_file(), "{}", build_script().display());
    }
}
