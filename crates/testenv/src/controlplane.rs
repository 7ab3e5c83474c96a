//! A Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager on
//! 127.0.0.1 with free ports, a temporary directory, generated certificates and a kubeconfig.
//!
//! [`ControlPlane::start`] waits until every component is ready (etcd `/health`, the API server
//! `/readyz`, the controllers creating the `default` ServiceAccount) and installs the CRDs.
//! Dropping the value stops the processes and removes the directory.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::binaries::{repository_root, Binaries};
use crate::certs::{write_pki, Pki};
use crate::crds::install_crds;
use crate::error::{error_chain, Error, Result};
use crate::process::Process;

/// Environment variable that keeps the temporary directory (certificates, data, logs) after the
/// control plane stops, for debugging.
pub const KEEP_DIR_ENV: &str = "BULWARK_TESTENV_KEEP";

/// How long each component may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Prefix of the temporary directories of control planes.
const DIR_PREFIX: &str = "bulwark-testenv-";

/// File in a control plane's directory holding the process id of the test binary that owns it.
const OWNER_FILE: &str = "owner.pid";

/// How often start-up is tried when a component exits while starting.
const START_ATTEMPTS: usize = 3;

/// Interval between two readiness checks.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Lines of each component log printed when something fails.
const LOG_TAIL_LINES: usize = 40;

/// Options of [`ControlPlane::start`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Directory with the binaries; located with [`Binaries::locate`] when `None`.
    pub bin_dir: Option<PathBuf>,
    /// Directory whose `*.yaml` CRDs are installed; the repository's `crds/` when `None`.
    pub crds_dir: Option<PathBuf>,
}

/// A running control plane. Dropping it stops the processes and deletes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    // Field order is drop order: the processes stop before their directory is removed.
    processes: Vec<Process>,
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    server: String,
    dir: Option<TempDir>,
}

impl ControlPlane {
    /// Starts a control plane, waits until it is ready and installs the CRDs. On failure the
    /// tails of the component logs are printed to stderr.
    pub async fn start(options: Options) -> Result<Self> {
        let binaries = match &options.bin_dir {
            Some(dir) => Binaries::in_dir(dir)?,
            None => tokio::task::spawn_blocking(Binaries::locate)
                .await
                .map_err(|e| Error::BuildControlPlane {
                    script: crate::binaries::build_script(),
                    status: e.to_string(),
                })??,
        };
        let crds_dir = options
            .crds_dir
            .clone()
            .unwrap_or_else(|| repository_root().join("crds"));

        remove_stale_dirs();
        let mut attempt = 1;
        loop {
            match Self::start_once(&binaries, &crds_dir).await {
                // A component that exits during start-up most likely lost the race for one of
                // the ports picked as free; another attempt picks new ones.
                Err(err @ Error::Exited { .. }) if attempt < START_ATTEMPTS => {
                    eprintln!(
                        "bulwark-testenv: start attempt {attempt} failed, retrying: {}",
                        error_chain(&err)
                    );
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(binaries: &Binaries, crds_dir: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(|source| Error::Io {
                path: std::env::temp_dir(),
                source,
            })?;
        // Written whole under another name, then renamed: a sweep running in another test at
        // that moment must never read an owner file that is still empty.
        let owner = dir.path().join(OWNER_FILE);
        let unfinished = dir.path().join(format!("{OWNER_FILE}.new"));
        std::fs::write(&unfinished, std::process::id().to_string())
            .and_then(|()| std::fs::rename(&unfinished, &owner))
            .map_err(|source| Error::Io {
                path: owner,
                source,
            })?;
        let mut control_plane = Self {
            processes: Vec::new(),
            kubeconfig: Kubeconfig::default(),
            kubeconfig_path: dir.path().join("kubeconfig"),
            server: String::new(),
            dir: Some(dir),
        };
        match control_plane.boot(binaries, crds_dir).await {
            Ok(()) => Ok(control_plane),
            Err(err) => {
                eprintln!(
                    "bulwark-testenv: control plane failed to start: {}\n{}",
                    error_chain(&err),
                    control_plane.log_tails()
                );
                Err(err)
            }
        }
    }

    async fn boot(&mut self, binaries: &Binaries, crds_dir: &Path) -> Result<()> {
        let dir = self.dir().to_path_buf();
        let pki = write_pki(&dir)?;
        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let apiserver_port = free_port()?;
        self.server = format!("https://127.0.0.1:{apiserver_port}");

        let mut etcd = Command::new(&binaries.etcd);
        etcd.arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg("--name=testenv")
            .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
            ))
            .arg(format!(
                "--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"
            ))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"
            ))
            .arg(format!(
                "--initial-cluster=testenv=http://127.0.0.1:{etcd_peer_port}"
            ))
            .arg("--unsafe-no-fsync=true")
            .arg("--quota-backend-bytes=4294967296");
        self.spawn("etcd", etcd)?;
        self.wait_for("etcd /health", || etcd_healthy(etcd_port))
            .await?;

        let mut apiserver = Command::new(&binaries.kube_apiserver);
        apiserver
            .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={apiserver_port}"))
            .arg(format!(
                "--cert-dir={}",
                dir.join("apiserver-certs").display()
            ))
            .arg(format!("--tls-cert-file={}", pki.serving_cert.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.serving_key.display()
            ))
            .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!(
                "--service-account-key-file={}",
                pki.service_account_pub.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.service_account_key.display()
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--authorization-mode=RBAC")
            .arg("--allow-privileged=true")
            .arg("--endpoint-reconciler-type=none")
            .arg("--enable-priority-and-fairness=false")
            .arg("--profiling=false");
        self.spawn("kube-apiserver", apiserver)?;

        self.write_kubeconfig(&pki)?;
        let client = self.client().await?;
        self.wait_for("kube-apiserver /readyz", || apiserver_ready(&client))
            .await?;

        let mut kcm = Command::new(&binaries.kube_controller_manager);
        kcm.arg(format!("--kubeconfig={}", self.kubeconfig_path.display()))
            .arg("--secure-port=0")
            .arg("--leader-elect=false")
            .arg(format!(
                "--service-account-private-key-file={}",
                pki.service_account_key.display()
            ))
            .arg(format!("--root-ca-file={}", pki.ca_cert.display()))
            .arg("--use-service-account-credentials=false")
            // No kubelet registers a Node here: tests bind pods to node names that have no
            // Node object, and the pod garbage collector would force-delete them as orphans
            // 40 s later, in the middle of any longer test.
            .arg("--controllers=*,-pod-garbage-collector-controller")
            .arg("--profiling=false");
        self.spawn("kube-controller-manager", kcm)?;
        let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        self.wait_for("kube-controller-manager (default ServiceAccount)", || {
            exists(&service_accounts, "default")
        })
        .await?;

        install_crds(&client, crds_dir).await
    }

    fn spawn(&mut self, component: &'static str, command: Command) -> Result<()> {
        let log = self.dir().join(format!("{component}.log"));
        self.processes
            .push(Process::spawn(component, command, &log)?);
        Ok(())
    }

    /// Polls `check` until it returns true, failing when a process exits or the time is up.
    async fn wait_for<F, Fut>(&mut self, what: &str, mut check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            for process in &mut self.processes {
                process.ensure_running()?;
            }
            if check().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: what.to_owned(),
                    timeout: READY_TIMEOUT,
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn write_kubeconfig(&mut self, pki: &Pki) -> Result<()> {
        let yaml = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: admin
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
    namespace: default
current-context: testenv
",
            server = self.server,
            ca = pki.ca_cert.display(),
            cert = pki.admin_cert.display(),
            key = pki.admin_key.display(),
        );
        std::fs::write(&self.kubeconfig_path, &yaml).map_err(|source| Error::Io {
            path: self.kubeconfig_path.clone(),
            source,
        })?;
        self.kubeconfig =
            Kubeconfig::from_yaml(&yaml).map_err(|e| Error::Kubeconfig(Box::new(e)))?;
        Ok(())
    }

    fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .map(TempDir::path)
            .expect("the directory lives as long as the control plane")
    }

    /// A new client for the API server, bound to the calling test's runtime.
    pub async fn client(&self) -> Result<Client> {
        client_from(&self.kubeconfig).await
    }

    /// The kubeconfig of the admin user (group `system:masters`).
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// Path of the kubeconfig file, for tools such as `kubectl --kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// URL of the API server, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Process ids of the running components, in start order.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Process::pid).collect()
    }

    /// Temporary directory holding data, certificates, kubeconfig and logs.
    pub fn work_dir(&self) -> &Path {
        self.dir()
    }

    /// The last lines of every component's log, with a header per component.
    pub fn log_tails(&self) -> String {
        log_tails(&self.processes)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for process in self.processes.iter_mut().rev() {
            process.terminate();
        }
        if let Some(dir) = self.dir.take() {
            if std::env::var_os(KEEP_DIR_ENV).is_some_and(|v| !v.is_empty()) {
                // Without an owner the directory is never swept as stale.
                let _ = std::fs::remove_file(dir.path().join(OWNER_FILE));
                eprintln!(
                    "bulwark-testenv: keeping {} ({KEEP_DIR_ENV} is set)",
                    dir.keep().display()
                );
            }
        }
    }
}

pub(crate) fn log_tails(processes: &[Process]) -> String {
    let mut text = String::new();
    for process in processes {
        text.push_str(&format!(
            "----- last {LOG_TAIL_LINES} lines of {} ({}) -----\n{}\n",
            process.component(),
            process.log().display(),
            process.log_tail(LOG_TAIL_LINES)
        ));
    }
    text
}

pub(crate) async fn client_from(kubeconfig: &Kubeconfig) -> Result<Client> {
    // kube picks rustls' process-wide provider; make sure one exists even when feature
    // unification compiled in more than one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig(Box::new(e)))?;
    Client::try_from(config).map_err(|e| Error::Client(Box::new(e)))
}

/// Removes the directories of control planes whose test binary died without cleaning up
/// (killed with SIGKILL, for instance; its processes were killed by the kernel).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_ours = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(DIR_PREFIX));
        if !is_ours {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER_FILE)) else {
            continue;
        };
        // An owner that does not parse is never taken for a dead one.
        let Ok(pid) = owner.trim().parse::<u32>() else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Reserves a free port on 127.0.0.1 by binding port 0 and releasing it.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(Error::ReservePort)?;
    let port = listener.local_addr().map_err(Error::ReservePort)?.port();
    Ok(port)
}

async fn etcd_healthy(port: u16) -> bool {
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<bool, std::io::Error>(
            response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        )
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), check).await,
        Ok(Ok(true))
    )
}

async fn apiserver_ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await,
        Ok(Ok(body)) if body.trim() == "ok"
    )
}

async fn exists(api: &Api<ServiceAccount>, name: &str) -> bool {
    matches!(api.get_opt(name).await, Ok(Some(_)))
}
