//! Test support for Bulwark: a real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager) with the CRDs of `crds/` installed.
//!
//! One control plane serves a whole test binary; each test gets its own client and namespace:
//!
//! ```no_run
//! # async fn example() -> Result<(), bulwark_testenv::Error> {
//! let client = bulwark_testenv::client().await?;
//! let namespace = bulwark_testenv::TestNamespace::create(&client, "backup-status").await?;
//! // ... create objects in namespace.name() ...
//! namespace.delete().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The binaries come from `BULWARK_CONTROLPLANE_BIN` or from `tests/controlplane/build.sh`,
//! which builds them once into a cache outside the clone. The shared control plane is stopped
//! and its temporary directory removed when the test binary exits; its processes are also
//! killed by the kernel if the binary dies without cleaning up.

pub mod binaries;
pub mod certs;
pub mod controlplane;
pub mod crds;
pub mod error;
pub mod namespace;
pub mod process;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kube::config::Kubeconfig;
use kube::Client;
use tokio::sync::OnceCell;

pub use binaries::BIN_DIR_ENV;
pub use controlplane::{ControlPlane, Options, KEEP_DIR_ENV};
pub use error::{Error, Result};
pub use namespace::TestNamespace;

/// What tests need of the shared control plane. The processes themselves are owned by a
/// separate static so they can be stopped when the test binary exits.
#[derive(Debug)]
pub struct SharedControlPlane {
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    server: String,
}

impl SharedControlPlane {
    /// A new client for the API server, bound to the calling test's runtime.
    pub async fn client(&self) -> Result<Client> {
        controlplane::client_from(&self.kubeconfig).await
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// Path of the kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// URL of the API server.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The last lines of every component's log.
    pub fn log_tails(&self) -> String {
        SHARED_OWNER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .map(ControlPlane::log_tails)
            .unwrap_or_default()
    }
}

static SHARED: OnceCell<std::result::Result<SharedControlPlane, String>> = OnceCell::const_new();
static SHARED_OWNER: Mutex<Option<ControlPlane>> = Mutex::new(None);

/// The control plane shared by every test of this binary, started on first use. A failed start
/// is remembered: later callers get [`Error::SharedUnavailable`] at once.
pub async fn shared() -> Result<&'static SharedControlPlane> {
    let shared = SHARED
        .get_or_init(|| async {
            match ControlPlane::start(Options::default()).await {
                Ok(control_plane) => {
                    let shared = SharedControlPlane {
                        kubeconfig: control_plane.kubeconfig().clone(),
                        kubeconfig_path: control_plane.kubeconfig_path().to_path_buf(),
                        server: control_plane.server().to_owned(),
                    };
                    *SHARED_OWNER
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(control_plane);
                    register_exit_teardown();
                    Ok(shared)
                }
                Err(err) => Err(error::error_chain(&err)),
            }
        })
        .await;
    shared.as_ref().map_err(|reason| Error::SharedUnavailable {
        reason: reason.clone(),
    })
}

/// A client of the shared control plane for the calling test.
pub async fn client() -> Result<Client> {
    shared().await?.client().await
}

/// Stops the shared control plane when the test binary exits (normally or after failed tests).
fn register_exit_teardown() {
    extern "C" fn teardown() {
        // A panic must not unwind into libc.
        let _ = std::panic::catch_unwind(|| {
            let control_plane = SHARED_OWNER
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            drop(control_plane);
        });
    }
    // SAFETY: registers a plain function without captured state; it runs once at exit.
    let registered = unsafe { libc::atexit(teardown) };
    if registered != 0 {
        eprintln!("bulwark-testenv: atexit registration failed; processes stop with the binary");
    }
}
