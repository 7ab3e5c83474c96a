//! Errors of the test environment. Display says what failed; the cause is in `source()`.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while providing a control plane to a test.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `tests/controlplane/build.sh` could not be run or failed.
    #[error("failed to build the control plane with {script} (status: {status})")]
    BuildControlPlane {
        /// Path of the build script.
        script: PathBuf,
        /// Exit status, or why the script could not be started.
        status: String,
    },
    /// A control-plane binary is missing from the binary directory.
    #[error("failed to find {binary} in {dir} (set BULWARK_CONTROLPLANE_BIN to a directory holding etcd, kube-apiserver and kube-controller-manager)")]
    MissingBinary {
        /// Name of the missing binary.
        binary: &'static str,
        /// Directory that was searched.
        dir: PathBuf,
    },
    /// A file of the test environment could not be written or read.
    #[error("failed to access {path}")]
    Io {
        /// File or directory involved.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// No free loopback port could be reserved.
    #[error("failed to reserve a free port on 127.0.0.1")]
    ReservePort(#[source] std::io::Error),
    /// Generating the certificates or keys failed.
    #[error("failed to generate the {what}")]
    Certificate {
        /// Which certificate or key.
        what: &'static str,
        /// Underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// A control-plane process could not be started.
    #[error("failed to start {component}")]
    Spawn {
        /// Component name.
        component: &'static str,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A control-plane process exited while it should be running.
    #[error("{component} exited unexpectedly ({status}); its log is {log}")]
    Exited {
        /// Component name.
        component: &'static str,
        /// Exit status.
        status: String,
        /// Path of the component's log file.
        log: PathBuf,
    },
    /// A component did not become ready in time.
    #[error("{what} was not ready after {timeout:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long was waited.
        timeout: Duration,
    },
    /// The kubeconfig of the test environment could not be loaded.
    #[error("failed to load the test kubeconfig")]
    Kubeconfig(#[source] Box<kube::config::KubeconfigError>),
    /// A Kubernetes client could not be built.
    #[error("failed to build a Kubernetes client")]
    Client(#[source] Box<kube::Error>),
    /// A request to the API server failed.
    #[error("failed to {action}")]
    Api {
        /// What the request was for.
        action: String,
        /// Underlying error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A CRD file could not be parsed.
    #[error("failed to parse CRD file {path}")]
    ParseCrd {
        /// CRD file.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: serde_yaml::Error,
    },
    /// The shared control plane of this test binary failed to start earlier; every test that
    /// asks for it gets this error.
    #[error("failed to start the shared control plane: {reason}")]
    SharedUnavailable {
        /// The error chain of the failed start, rendered once.
        reason: String,
    },
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Renders an error with its chain of causes, one per line.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str("\n  caused by: ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
