//! The agent sidecar. It serves `/healthz` (does mysqld answer?), `/readyz` (is this pod
//! what its role label says, and healthy at it?) and `/status` (what the last pass observed, as
//! JSON, for the operator), and every pass reads the role from the
//! pod's labels, observes mysqld, and takes the one action [`topology::decide`] names:
//! accounts, the GTID position of a physical restore, read_only, replication, and loading a
//! pending logical backup into a new primary.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use bulwark_contract::member::{MemberReplication, MemberStatus};
use bulwark_contract::Account;

use crate::bootstrap;
use crate::fence::Fence;
use crate::http::{self, Readiness, Response};
use crate::labels::{self, Role};
use crate::orders::Orders;
use crate::pending::{self, PendingRestoreConfig};
use crate::sql::{self, Source, Statement};
use crate::topology::{self, Action, Decision, GtidAdoption, Observed, Pending, Situation};
use bulwark_contract::order::Standing;
use bulwark_contract::Engine;
use bulwark_engine::source::{engine_of, Connection};

/// Time to connect to mysqld.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time one statement may take.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause before replication is started again after it stopped.
const START_RETRY: Duration = Duration::from_secs(10);
/// Pause before a failed logical restore is tried again.
const RESTORE_RETRY: Duration = Duration::from_secs(30);
/// Pause before a stale replication password is replaced again.
const CHANGE_RETRY: Duration = Duration::from_secs(60);
/// MySQL/MariaDB "access denied" (the replication password is wrong).
const ER_ACCESS_DENIED: u32 = 1045;
/// Syntax errors quote the statement, which may hold a password.
const ER_PARSE_ERROR: u16 = 1064;

/// Errors of the agent. Only [`AgentError::Listen`] ends it; the others make a pass fail and
/// show in `/readyz`.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("failed to listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the labels file {path}")]
    ReadLabels {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the credentials file {path}")]
    ReadCredentials {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to connect to mysqld at {target}")]
    Connect {
        target: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to observe mysqld ({what})")]
    Observe {
        what: &'static str,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to send `{statement}`")]
    SendStatement {
        statement: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to run `{statement}`: error {code}: {message}")]
    RunStatement {
        statement: String,
        code: u16,
        message: String,
    },
    #[error("failed to load backup {id}")]
    LoadPendingRestore {
        id: String,
        #[source]
        source: Box<bulwark_pitr::Error>,
    },
    #[error("failed to remove the pending logical restore {path}")]
    RemovePending {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to finish adopting the restored GTID position")]
    FinishGtidAdoption(#[source] bootstrap::BootstrapError),
}

impl AgentError {
    /// Whether the connection to mysqld is unusable after this error.
    fn connection_lost(&self) -> bool {
        matches!(
            self,
            AgentError::Connect { .. }
                | AgentError::Observe { .. }
                | AgentError::SendStatement { .. }
        )
    }
}

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// mysqld's unix socket.
    pub socket: PathBuf,
    /// Address of the probe server.
    pub listen: SocketAddr,
    /// The downward API labels file.
    pub labels_file: PathBuf,
    /// This pod's name: role orders name the member they are for (`None`: orders refused).
    pub pod_name: Option<String>,
    /// Where accepted role orders are kept (`None`: in memory only).
    pub order_file: Option<PathBuf>,
    /// Directory with the `root`, `replication`, `backup` and `metrics` password files.
    pub credentials_dir: PathBuf,
    /// Where replicas replicate from.
    pub source: Source,
    /// Largest replica lag that is still ready.
    pub max_replica_lag: Duration,
    /// Replicas that must acknowledge each commit once the primary waits (0: asynchronous).
    pub semi_sync_acks: u32,
    /// Time between passes.
    pub interval: Duration,
    /// Time mysqld has to answer a health check.
    pub health_timeout: Duration,
    /// A logical backup to load once the pod is primary.
    pub pending: Option<PendingRestoreConfig>,
    /// The GTID position a physical restore left (`bulwark-agent restore --gtid-file`).
    pub gtid_file: Option<PathBuf>,
    /// Where copies of this member's data are served to new members, and the server's data
    /// directory they are taken from (`None`: no copies served).
    pub clone: Option<(SocketAddr, PathBuf)>,
}

/// Passwords from the credentials directory.
struct Credentials {
    root: Option<Zeroizing<String>>,
    replication: Zeroizing<String>,
    backup: Zeroizing<String>,
    exporter: Zeroizing<String>,
}

impl Credentials {
    fn read(dir: &Path) -> Result<Self, AgentError> {
        let required = |name: &str| -> Result<Zeroizing<String>, AgentError> {
            let path = dir.join(name);
            read_secret(&path)?.ok_or_else(|| AgentError::ReadCredentials {
                path: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the file does not exist",
                ),
            })
        };
        Ok(Credentials {
            root: read_secret(&dir.join(Account::Root.key()))?,
            replication: required(Account::Replication.key())?,
            backup: required(Account::Backup.key())?,
            exporter: required(Account::Metrics.key())?,
        })
    }

    /// Identifies the account passwords (not reversible; only compared).
    fn accounts_digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for p in [&self.replication, &self.backup, &self.exporter] {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        h.finalize().into()
    }

    fn replication_digest(&self) -> [u8; 32] {
        Sha256::digest(self.replication.as_bytes()).into()
    }

    fn connection(&self, socket: &Path) -> Connection {
        connection(socket, self.root.clone())
    }
}

fn connection(socket: &Path, root: Option<Zeroizing<String>>) -> Connection {
    Connection {
        socket: Some(socket.to_path_buf()),
        host: None,
        port: None,
        user: Some(Account::Root.user().into()),
        password: root,
    }
}

/// A password file's content without its trailing newline; `None` when the file is absent.
pub fn read_secret(path: &Path) -> Result<Option<Zeroizing<String>>, AgentError> {
    crate::files::read_secret(path).map_err(|source| AgentError::ReadCredentials {
        path: path.display().to_string(),
        source,
    })
}

/// The report of `/status` from a pass's role, observation and decision.
fn member_status(
    role: Option<Standing>,
    o: &Observed,
    decision: &Decision,
    clone_port: u16,
    writes_held: bool,
) -> MemberStatus {
    MemberStatus {
        writes_held,
        role: role.map(|r| r.role),
        epoch: role.map_or(0, |r| r.epoch),
        ready: decision.ready,
        reason: decision.reason.clone(),
        engine: o.engine,
        read_only: o.read_only,
        super_read_only: o.super_read_only,
        gtid_executed: o.gtid_logged.clone(),
        gtid_history: o.gtid_history.clone(),
        clone_port,
        semi_sync_wait: o.semi_sync_wait,
        semi_sync_clients: o.semi_sync_clients,
        replication: o.replication.as_ref().map(|r| MemberReplication {
            source_host: r.source_host.clone(),
            source_port: r.source_port,
            io: r.io,
            sql_running: r.sql_running,
            relay_applied: r.relay_applied,
            sql_caught_up: r.sql_caught_up,
            io_errno: r.io_errno,
            sql_errno: r.sql_errno,
            lag_seconds: r.lag_seconds,
        }),
        age_ms: 0,
    }
}

/// How long a demoted MariaDB primary holds its writes (`Agent::hold_writes`): longer than a
/// Service takes to stop routing to it.
const FENCE_HOLD: Duration = Duration::from_secs(5);

/// Longest a `/status?fresh` request waits for a pass that began after it.
const FRESH_WAIT: Duration = Duration::from_secs(3);

/// Passes run back to back while each applies an action (a promotion or a demotion is several
/// steps), at most this many before the interval is waited again.
const MAX_BUSY_PASSES: u32 = 16;

/// Least time between two log lines giving a changed not-ready reason.
const NOT_READY_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Runs the agent until `shutdown` resolves.
pub async fn run(
    config: AgentConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), AgentError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| AgentError::Listen {
            addr: config.listen,
            source,
        })?;
    let local = listener.local_addr().unwrap_or(config.listen);
    tracing::info!(listen = %local, socket = %config.socket.display(), "agent listening");
    println!("listening on {local}");

    // Copies are served beside the probes; a listener that cannot be bound is no reason to
    // stop serving the server's role and probes.
    let mut clone_port = 0;
    let clone_server = match &config.clone {
        Some((addr, datadir)) => match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                clone_port = l.local_addr().map_or(0, |a| a.port());
                let donor = Arc::new(crate::clone::Donor {
                    socket: config.socket.clone(),
                    credentials_dir: config.credentials_dir.clone(),
                    datadir: datadir.clone(),
                });
                tracing::info!(listen = %addr, port = clone_port, "serving copies of this member's data");
                Some(tokio::spawn(crate::clone::serve(l, donor)))
            }
            Err(e) => {
                tracing::error!(listen = %addr, error = %e, "failed to listen for copies of this member's data");
                None
            }
        },
        None => None,
    };
    let readiness = Arc::new(Mutex::new(Readiness {
        ready: false,
        reason: "starting".into(),
        at: Instant::now(),
        started: Instant::now(),
        member: None,
        settled: false,
    }));
    let orders = Arc::new(Orders::load(
        config.pod_name.clone(),
        config.order_file.clone(),
    ));
    let wake = Arc::new(tokio::sync::Notify::new());
    let (passed, passes) = tokio::sync::watch::channel(());
    let order = crate::orders::handler(
        orders.clone(),
        config.credentials_dir.clone(),
        wake.clone(),
        passes.clone(),
        readiness.clone(),
    );
    let stale_after = config.interval * 3 + STATEMENT_TIMEOUT * 3;
    let healthz = {
        let socket = config.socket.clone();
        let credentials_dir = config.credentials_dir.clone();
        let timeout = config.health_timeout;
        // Probes (and anyone else on the pod network) share one check a second: requests
        // never multiply root connections to the server.
        let coalesced = Arc::new(http::Coalesced::new(Duration::from_secs(1)));
        move || {
            let socket = socket.clone();
            let credentials_dir = credentials_dir.clone();
            let coalesced = coalesced.clone();
            async move {
                coalesced
                    .get(|| health(&socket, &credentials_dir, timeout))
                    .await
            }
        }
    };
    let readyz = {
        let readiness = readiness.clone();
        move || http::readyz(readiness.clone(), stale_after)
    };
    let status = {
        let board = http::Passes {
            readiness: readiness.clone(),
            wake: wake.clone(),
            passes,
            stale_after,
            fresh_wait: FRESH_WAIT,
        };
        move |axum::extract::RawQuery(query): axum::extract::RawQuery| {
            http::status(board.clone(), query)
        }
    };
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        listener,
        http::routes(healthz, readyz, status, order),
        http::limits(config.health_timeout),
        async {
            let _ = http_stopped.await;
        },
    ));

    let mut agent = Agent::new(config, orders);
    let mut ticker = tokio::time::interval(agent.config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    // When the pod is not ready, why: in the log too (the kubelet's events show only the status
    // code), but a changing reason (a lag in seconds) at most every NOT_READY_LOG_INTERVAL.
    let mut not_ready_logged: Option<Instant> = None;
    let mut busy_passes = 0;
    loop {
        if busy_passes == 0 || busy_passes >= MAX_BUSY_PASSES {
            busy_passes = 0;
            tokio::select! {
                _ = ticker.tick() => {}
                _ = wake.notified() => {}
                _ = &mut shutdown => break,
            }
        }
        let began = Instant::now();
        let decision = agent.pass().await;
        let acted = agent.acted;
        busy_passes = if acted { busy_passes + 1 } else { 0 };
        let mut r = readiness.lock().expect("readiness lock");
        if r.ready != decision.ready {
            tracing::info!(ready = decision.ready, reason = %decision.reason, "readiness changed");
            not_ready_logged = (!decision.ready).then(Instant::now);
        } else if r.reason != decision.reason {
            if !decision.ready
                && not_ready_logged.is_none_or(|t| t.elapsed() >= NOT_READY_LOG_INTERVAL)
            {
                tracing::warn!(reason = %decision.reason, "not ready");
                not_ready_logged = Some(Instant::now());
            } else {
                tracing::debug!(ready = decision.ready, reason = %decision.reason, "readiness reason changed");
            }
        }
        let member = agent.last_observed.as_ref().map(|o| {
            let role = agent.last_role.clone().and_then(Result::ok);
            let held = agent
                .fence
                .as_ref()
                .is_some_and(|f| f.remaining().is_some());
            member_status(role, o, &decision, clone_port, held)
        });
        *r = Readiness {
            ready: decision.ready,
            reason: decision.reason,
            at: Instant::now(),
            started: began,
            member,
            settled: decision.action.is_none(),
        };
        drop(r);
        passed.send_replace(());
    }
    tracing::info!("agent stopping");
    if let Some(fence) = agent.fence.take() {
        if fence.remaining().is_some() {
            fence.wait_out().await;
        }
    }
    let _ = stop_http.send(());
    let _ = server.await;
    if let Some(copies) = clone_server {
        // No new copies; one in progress ends with the process (its receiver fails and tries
        // again).
        copies.abort();
    }
    if let Some(conn) = agent.conn.take() {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.disconnect()).await;
    }
    Ok(())
}

/// `/healthz`: 200 while mysqld answers `SELECT 1` in time, and while it does not listen yet
/// (starting, or recovering after a crash: liveness must not kill that); 503 when it accepts
/// connections but does not answer.
async fn health(socket: &Path, credentials_dir: &Path, timeout: Duration) -> Response {
    let root = read_secret(&credentials_dir.join(Account::Root.key()))
        .ok()
        .flatten();
    let opts = connection(socket, root).opts();
    let check = async {
        let mut c = mysql_async::Conn::new(opts).await?;
        let answer = c.query_drop("SELECT 1").await;
        let _ = c.disconnect().await;
        answer
    };
    match tokio::time::timeout(timeout, check).await {
        Ok(Ok(())) => Response::new(200, "mysqld answers"),
        Ok(Err(mysql_async::Error::Server(e))) => {
            Response::new(200, format!("mysqld answers (error {})", e.code))
        }
        Ok(Err(mysql_async::Error::Io(mysql_async::IoError::Io(e))))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Response::new(200, "mysqld is not listening yet (starting or recovering)")
        }
        Ok(Err(e)) => Response::new(503, format!("mysqld does not answer: {e}")),
        Err(_) => Response::new(
            503,
            format!(
                "mysqld accepted a connection but did not answer within {}",
                humantime::format_duration(timeout)
            ),
        ),
    }
}

/// The logical restore running in the background, or how the last one ended.
#[derive(Default)]
struct RestoreState {
    running: Option<(String, tokio::task::JoinHandle<Result<(), AgentError>>)>,
    failed: Option<(String, String, Instant)>,
    /// Loaded by this agent but the pending file could not be removed: never loaded again.
    loaded: Option<String>,
    /// The pending file as this pass read it: what a load started in the pass loads.
    staged: Option<pending::PendingRestore>,
}

struct Agent {
    config: AgentConfig,
    conn: Option<mysql_async::Conn>,
    engine: Engine,
    /// `@@version` of the connected server.
    version: String,
    accounts_digest: Option<[u8; 32]>,
    converge_after_load: bool,
    source_digest: Option<[u8; 32]>,
    last_change: Option<Instant>,
    last_start: Option<Instant>,
    last_role: Option<Result<Standing, String>>,
    /// Accepted role orders.
    orders: Arc<Orders>,
    /// The epoch at which replication last connected; `None` since the agent started.
    io_epoch: Option<u64>,
    /// The epoch of the role this pass acts on.
    epoch: u64,
    /// The last pass applied an action.
    acted: bool,
    /// A demoted primary's hold on writes, while it runs.
    fence: Option<Fence>,
    /// Where this pass replicates from: the primary an order names, else `--primary-host`.
    source: Source,
    /// What the last pass observed, `None` when it could not.
    last_observed: Option<Observed>,
    /// The last failed action and its error, so a failure repeated every pass is logged once.
    last_failure: Option<String>,
    restore: RestoreState,
    /// Backup whose GTID position was adopted but whose file could not be removed yet: the
    /// file is removed, never applied again, and nothing else happens until it is gone.
    gtid_adopted: Option<String>,
}

impl Agent {
    fn new(config: AgentConfig, orders: Arc<Orders>) -> Self {
        Agent {
            source: config.source.clone(),
            orders,
            io_epoch: None,
            epoch: 0,
            acted: false,
            fence: None,
            config,
            conn: None,
            engine: Engine::MariaDb,
            version: String::new(),
            accounts_digest: None,
            converge_after_load: false,
            source_digest: None,
            last_change: None,
            last_start: None,
            last_role: None,
            last_observed: None,
            last_failure: None,
            restore: RestoreState::default(),
            gtid_adopted: None,
        }
    }

    /// The role from the labels or the operator's order, whichever is newer.
    fn read_role(&mut self) -> Result<Standing, String> {
        let path = &self.config.labels_file;
        let labelled = match std::fs::read_to_string(path) {
            Ok(text) => labels::standing(&labels::parse_labels(&text)),
            Err(source) => Err(format!(
                "role unknown: {}",
                bulwark_engine::error::chain(&AgentError::ReadLabels {
                    path: path.display().to_string(),
                    source,
                })
            )),
        };
        let role = match (self.orders.standing(), labelled) {
            (Err(why), _) => Err(why),
            (Ok(None), labelled) => labelled,
            (Ok(Some(ordered)), Err(_)) => Ok(ordered),
            (Ok(ordered), Ok(labelled)) => {
                Ok(Standing::newest(ordered, Some(labelled)).unwrap_or(labelled))
            }
        };
        if self.last_role.as_ref() != Some(&role) {
            match &role {
                Ok(r) => tracing::info!(role = %r.role, epoch = r.epoch, "role changed"),
                Err(reason) => tracing::warn!(reason = %reason, "role unknown"),
            }
            self.last_role = Some(role.clone());
        }
        role
    }

    /// One pass: observe, decide, act once. Failures become the not-ready reason.
    async fn pass(&mut self) -> Decision {
        let role = self.read_role();
        self.last_observed = None;
        if self.fence.as_ref().is_some_and(|f| f.remaining().is_none()) {
            self.fence = None;
        }
        self.acted = false;
        if let Ok(r) = &role {
            self.epoch = r.epoch;
        }
        // An order that names the primary wins over the Service while it is the role's.
        let named = self.orders.source().filter(|(epoch, _)| {
            role.as_ref()
                .is_ok_and(|r| r.epoch == *epoch && r.role == Role::Replica)
        });
        self.source = Source {
            host: named.map_or_else(|| self.config.source.host.clone(), |(_, host)| host),
            port: self.config.source.port,
        };
        match self.try_pass(role.map(|r| r.role)).await {
            Ok(d) => d,
            Err(e) => {
                if e.connection_lost() && self.conn.is_some() {
                    tracing::warn!(error = %bulwark_engine::error::chain(&e), "lost the connection to mysqld");
                }
                if e.connection_lost() {
                    self.disconnect();
                }
                Decision {
                    action: None,
                    ready: false,
                    reason: bulwark_engine::error::chain(&e),
                }
            }
        }
    }

    fn disconnect(&mut self) {
        self.conn = None;
        self.accounts_digest = None;
    }

    async fn try_pass(&mut self, role: Result<Role, String>) -> Result<Decision, AgentError> {
        let creds = Credentials::read(&self.config.credentials_dir)?;
        if self.conn.is_none() {
            self.connect(&creds).await?;
        }
        let observed = self.observe().await?;
        self.last_observed = Some(observed.clone());
        let pending = self.pending_state();
        let restored_gtid = self.gtid_adoption();
        let stale = match &observed.replication {
            Some(r) => {
                let changed = self
                    .source_digest
                    .is_some_and(|d| d != creds.replication_digest());
                let denied = r.io_errno == ER_ACCESS_DENIED
                    && self.last_change.is_none_or(|t| t.elapsed() > CHANGE_RETRY);
                changed || denied
            }
            None => false,
        };
        let source = self.source.clone();
        let mut decision = topology::decide(&Situation {
            role,
            observed: &observed,
            source: &source,
            accounts_current: self.accounts_digest == Some(creds.accounts_digest())
                && !self.converge_after_load,
            source_password_stale: stale,
            start_allowed: self.last_start.is_none_or(|t| t.elapsed() > START_RETRY),
            // Unknown after an agent restart: the receiver may predate the current primary.
            reconnect: self.io_epoch.is_none_or(|e| e < self.epoch),
            fence_hold: self.fence.as_ref().and_then(Fence::remaining),
            pending: &pending,
            restored_gtid: &restored_gtid,
            max_lag: self.config.max_replica_lag,
            semi_sync_acks: self.config.semi_sync_acks,
        });
        if let Some(action) = decision.action.clone() {
            let applied = self.apply(&action, &creds).await;
            if applied.is_ok() {
                self.last_failure = None;
                self.acted = true;
            }
            if let Err(e) = applied {
                let msg = bulwark_engine::error::chain(&e);
                let failure = format!("{}: {msg}", action.name());
                if self.last_failure.as_ref() != Some(&failure) {
                    tracing::warn!(action = action.name(), error = %msg, "action failed");
                    self.last_failure = Some(failure);
                } else {
                    tracing::debug!(action = action.name(), error = %msg, "action failed again");
                }
                if e.connection_lost() {
                    return Err(e);
                }
                decision.reason = format!("{}: {msg}", decision.reason);
            }
        }
        Ok(decision)
    }

    async fn connect(&mut self, creds: &Credentials) -> Result<(), AgentError> {
        let target = creds.connection(&self.config.socket);
        let connect_err = |source| AgentError::Connect {
            target: target.describe(),
            source: Box::new(source),
        };
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, mysql_async::Conn::new(target.opts()))
            .await
            .map_err(|_| connect_err(mysql_async::Error::Other("timed out".into())))?
            .map_err(connect_err)?;
        for st in sql::session_setup() {
            exec(&mut conn, &st, &[]).await?;
        }
        let row: Option<(String, String)> = conn
            .query_first("SELECT @@version, @@version_comment")
            .await
            .map_err(|e| AgentError::Observe {
                what: "version",
                source: Box::new(e),
            })?;
        let (version, comment) = row.unwrap_or_default();
        self.engine = engine_of(&version, &comment);
        tracing::info!(engine = %self.engine, version = %version, "connected to mysqld");
        self.version = version;
        self.conn = Some(conn);
        self.accounts_digest = None;
        Ok(())
    }

    async fn observe(&mut self) -> Result<Observed, AgentError> {
        let engine = self.engine;
        let conn = self.conn.as_mut().expect("connected");
        let observe_err = |what| {
            move |source| AgentError::Observe {
                what,
                source: Box::new(source),
            }
        };
        let vars: Vec<mysql_async::Row> = timed(conn.query(sql::variables_query(engine)))
            .await
            .map_err(observe_err("variables"))?;
        let vars = sql::parse_variables(&vars.first().map(row_texts).unwrap_or_default());
        let status: Vec<mysql_async::Row> =
            timed(conn.query(sql::replication_status_query(engine)))
                .await
                .map_err(observe_err("replication status"))?;
        let replication = status
            .first()
            .map(|row| {
                let named: BTreeMap<String, Option<String>> = row
                    .columns_ref()
                    .iter()
                    .zip(row_texts(row))
                    .map(|(c, v)| (c.name_str().into_owned(), v))
                    .collect();
                sql::parse_replica_status(&named)
            })
            .filter(|r| !r.source_host.is_empty());
        Ok(Observed {
            engine,
            read_only: vars.read_only,
            super_read_only: engine == Engine::MySql && vars.super_read_only,
            gtid_logged: vars.gtid_logged,
            gtid_history: vars.gtid_history,
            semi_sync_wait: vars.semi_sync_wait,
            semi_sync_clients: vars.semi_sync_clients,
            replication,
        })
    }

    /// The restored GTID file's state; first retries the removal of an adopted one.
    fn gtid_adoption(&mut self) -> GtidAdoption {
        let Some(path) = &self.config.gtid_file else {
            return GtidAdoption::Nothing;
        };
        if let Some(id) = &self.gtid_adopted {
            return match bootstrap::remove_restored_gtid(path) {
                Ok(()) => {
                    tracing::info!(backup_id = %id, gtid_file = %path.display(), "restored GTID file removed");
                    self.gtid_adopted = None;
                    GtidAdoption::Nothing
                }
                Err(e) => GtidAdoption::Failed(format!(
                    "adopted for backup {id}, but {}",
                    bulwark_engine::error::chain(&e)
                )),
            };
        }
        match bootstrap::read_restored_gtid(path) {
            Ok(None) => GtidAdoption::Nothing,
            Ok(Some(r)) => GtidAdoption::Waiting(r),
            Err(e) => GtidAdoption::Failed(bulwark_engine::error::chain(&e)),
        }
    }

    /// Reaps a finished restore and reads the pending file.
    fn pending_state(&mut self) -> Pending {
        let Some(cfg) = &self.config.pending else {
            return Pending::Nothing;
        };
        if let Some((id, handle)) = &self.restore.running {
            if !handle.is_finished() {
                return Pending::Loading(id.clone());
            }
            let (id, handle) = self.restore.running.take().expect("running");
            let result = futures::FutureExt::now_or_never(handle)
                .expect("finished")
                .unwrap_or_else(|join| {
                    Err(AgentError::LoadPendingRestore {
                        id: id.clone(),
                        source: Box::new(
                            bulwark_engine::Error::InvalidArgument(format!(
                                "restore task ended: {join}"
                            ))
                            .into(),
                        ),
                    })
                })
                .and_then(|()| remove_pending(&cfg.file));
            match result {
                Ok(()) => {
                    tracing::info!(backup_id = %id, "pending logical restore loaded");
                    self.restore.failed = None;
                    // The dump replaced the privilege tables: converge the accounts and root.
                    self.converge_after_load = true;
                }
                Err(e @ AgentError::RemovePending { .. }) => {
                    tracing::error!(backup_id = %id, error = %bulwark_engine::error::chain(&e), "backup loaded but the pending file remains; it will not be loaded again by this agent");
                    self.restore.loaded = Some(id.clone());
                    self.restore.failed =
                        Some((id, bulwark_engine::error::chain(&e), Instant::now()));
                }
                Err(e) => {
                    let msg = bulwark_engine::error::chain(&e);
                    tracing::warn!(backup_id = %id, error = %msg, retry_in_seconds = RESTORE_RETRY.as_secs(), "pending logical restore failed; retrying later");
                    self.restore.failed = Some((id, msg, Instant::now()));
                }
            }
        }
        self.restore.staged = None;
        let id = match pending::read(&cfg.file) {
            Ok(None) => return Pending::Nothing,
            Ok(Some(p)) => {
                let id = p.backup_id.clone();
                self.restore.staged = Some(p);
                id
            }
            Err(e) => {
                return Pending::Failed {
                    id: "?".into(),
                    error: bulwark_engine::error::chain(&e),
                }
            }
        };
        if let Some((failed_id, error, at)) = &self.restore.failed {
            if *failed_id == id
                && (self.restore.loaded.as_deref() == Some(&id) || at.elapsed() < RESTORE_RETRY)
            {
                return Pending::Failed {
                    id,
                    error: error.clone(),
                };
            }
        }
        Pending::Waiting(id)
    }

    async fn apply(&mut self, action: &Action, creds: &Credentials) -> Result<(), AgentError> {
        let engine = self.engine;
        let statements = match action {
            Action::EnsureAccounts => {
                let passwords = sql::AccountPasswords {
                    replication: &creds.replication,
                    backup: &creds.backup,
                    exporter: &creds.exporter,
                };
                if self.converge_after_load {
                    // Only a primary loads a backup, so the server is writable here.
                    let root = creds.root.as_ref().filter(|r| !r.is_empty());
                    sql::converge_after_load(engine, &passwords, root.map(|r| r.as_str()))
                } else {
                    // MySQL's super_read_only stops even root: lifted around the change if on.
                    let lift = engine == Engine::MySql && self.super_read_only().await?;
                    sql::ensure_accounts(engine, &passwords, lift)
                }
            }
            Action::StopReplicationIo => sql::stop_replication_io(engine),
            Action::StopReplication => sql::stop_replication(engine),
            Action::ResetReplication => sql::reset_replication(engine),
            Action::StartReplicationSql => sql::start_replication_sql(engine),
            Action::SetSemiSyncWait(on) => sql::set_semi_sync_wait(engine, *on),
            Action::FinishPromotion => sql::finish_promotion(engine),
            Action::SetWritable => sql::set_writable(engine),
            Action::SetReadOnly => sql::set_read_only(engine),
            Action::RestartReplicationIo => sql::restart_replication_io(engine),
            Action::ReleaseFence => {
                if let Some(fence) = self.fence.take() {
                    fence.release().await;
                }
                return Ok(());
            }
            Action::ChangeSource { adopt_gtid_pos } => sql::change_source(
                engine,
                &self.source,
                &creds.replication,
                adopt_gtid_pos.as_deref(),
            ),
            Action::StartReplication => {
                self.last_start = Some(Instant::now());
                sql::start_replication(engine)
            }
            Action::LoadPendingRestore { backup_id } => {
                self.start_restore(backup_id, creds);
                return Ok(());
            }
            Action::DiscardPendingRestore { backup_id } => {
                if let Some(cfg) = &self.config.pending {
                    remove_pending(&cfg.file)?;
                    tracing::info!(backup_id = %backup_id, pending_file = %cfg.file.display(), "pending logical restore discarded: a replica gets the data by replication");
                }
                return Ok(());
            }
            Action::AdoptRestoredGtid {
                restored,
                stop_replication,
            } => {
                let lift = engine == Engine::MySql && self.super_read_only().await?;
                sql::adopt_restored_gtid(
                    engine,
                    &self.version,
                    &restored.gtid_set,
                    &restored.gtid_history,
                    *stop_replication,
                    lift,
                )
            }
        };
        let secrets: Vec<&str> = [
            Some(creds.replication.as_str()),
            Some(creds.backup.as_str()),
            Some(creds.exporter.as_str()),
            creds.root.as_ref().map(|r| r.as_str()),
        ]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
        let conn = self.conn.as_mut().expect("connected");
        for (i, st) in statements.iter().enumerate() {
            if let Err(e) = exec(conn, st, &secrets).await {
                for undo in sql::after_failure(&statements, i) {
                    if let Err(undo_error) = exec(conn, &undo, &secrets).await {
                        tracing::error!(statement = %undo.shown, error = %bulwark_engine::error::chain(&undo_error), "could not restore super_read_only after a failed change");
                    }
                }
                return Err(e);
            }
        }
        if matches!(
            action,
            Action::ChangeSource { .. } | Action::StartReplication | Action::RestartReplicationIo
        ) {
            self.io_epoch = Some(self.epoch);
        }
        match action {
            Action::SetReadOnly => {
                // MariaDB's read_only lets READ ONLY ADMIN accounts (root) commit; MySQL's
                // super_read_only stops everyone.
                if engine == Engine::MariaDb {
                    self.hold_writes(creds).await;
                }
                let keep = self.fence.as_ref().map(|f| f.session);
                self.end_client_sessions(keep).await?
            }
            Action::EnsureAccounts => {
                self.accounts_digest = Some(creds.accounts_digest());
                self.converge_after_load = false;
                tracing::info!(
                    accounts = ?[sql::REPLICATION_USER, sql::BACKUP_USER, sql::EXPORTER_USER],
                    "accounts ensured"
                );
            }
            Action::ChangeSource { adopt_gtid_pos } => {
                self.source_digest = Some(creds.replication_digest());
                self.last_change = Some(Instant::now());
                // A fresh configuration starts at once, not after the restart pause.
                self.last_start = None;
                tracing::info!(
                    host = %self.source.host,
                    port = self.source.port,
                    adopted_gtid_pos = adopt_gtid_pos.as_deref().unwrap_or(""),
                    "replication source changed"
                );
            }
            Action::AdoptRestoredGtid { restored, .. } => {
                tracing::info!(backup_id = %restored.backup_id, gtid_set = %restored.gtid_set, "restored GTID position adopted");
                // Removed before anything else happens: a file still there after a crash
                // means the server has not been written to since, so adopting again is
                // harmless.
                if let Some(path) = &self.config.gtid_file {
                    if let Err(e) = bootstrap::remove_restored_gtid(path) {
                        self.gtid_adopted = Some(restored.backup_id.clone());
                        return Err(AgentError::FinishGtidAdoption(e));
                    }
                    tracing::info!(gtid_file = %path.display(), "restored GTID file removed");
                }
            }
            other => tracing::info!(action = other.name(), "action applied"),
        }
        Ok(())
    }

    /// Holds every commit of a demoted MariaDB primary for [`FENCE_HOLD`] (`fence`). Without
    /// it (the lock could not be taken) read_only and the ended sessions still fence, except
    /// against READ ONLY ADMIN accounts.
    async fn hold_writes(&mut self, creds: &Credentials) {
        let opts = creds.connection(&self.config.socket).opts();
        let agent_session = self.conn.as_ref().map_or(0, |c| u64::from(c.id()));
        match tokio::time::timeout(
            STATEMENT_TIMEOUT,
            Fence::hold(opts, agent_session, FENCE_HOLD),
        )
        .await
        {
            Ok(Ok(fence)) => self.fence = Some(fence),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not hold the demoted primary's writes"),
            Err(_) => tracing::warn!("could not hold the demoted primary's writes in time"),
        }
    }

    /// Fences a server that was writable: every client session but the operator's accounts'
    /// and the hold's is ended, so that none commits after the demotion.
    async fn end_client_sessions(&mut self, keep: Option<u64>) -> Result<(), AgentError> {
        let conn = self.conn.as_mut().expect("connected");
        let ended = timed(crate::fence::end_client_sessions(conn, keep))
            .await
            .map_err(|e| AgentError::Observe {
                what: "client sessions",
                source: Box::new(e),
            })?;
        tracing::info!(sessions = ended, "read-only; client sessions ended");
        Ok(())
    }

    async fn super_read_only(&mut self) -> Result<bool, AgentError> {
        let conn = self.conn.as_mut().expect("connected");
        let v: Option<i64> = timed(conn.query_first("SELECT @@GLOBAL.super_read_only"))
            .await
            .map_err(|e| AgentError::Observe {
                what: "super_read_only",
                source: Box::new(e),
            })?;
        Ok(v.unwrap_or(0) != 0)
    }

    fn start_restore(&mut self, id: &str, creds: &Credentials) {
        let Some(cfg) = self.config.pending.clone() else {
            return;
        };
        // Read in this pass by `pending_state`, which decided the load.
        let Some(staged) = self.restore.staged.take().filter(|p| p.backup_id == id) else {
            return;
        };
        tracing::info!(backup_id = %id, until = ?staged.until, until_gtid = ?staged.until_gtid, "loading pending logical restore");
        let conn = creds.connection(&self.config.socket);
        let task_id = id.to_string();
        let handle = tokio::spawn(async move {
            pending::load(&cfg, &staged, conn).await.map_err(|source| {
                AgentError::LoadPendingRestore {
                    id: task_id,
                    source: Box::new(source),
                }
            })
        });
        self.restore.running = Some((id.to_string(), handle));
    }
}

fn remove_pending(path: &Path) -> Result<(), AgentError> {
    crate::files::remove(path).map_err(|source| AgentError::RemovePending {
        path: path.display().to_string(),
        source,
    })
}

async fn timed<T>(
    f: impl Future<Output = Result<T, mysql_async::Error>>,
) -> Result<T, mysql_async::Error> {
    tokio::time::timeout(STATEMENT_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(mysql_async::Error::Other(
                format!("no answer within {}s", STATEMENT_TIMEOUT.as_secs()).into(),
            ))
        })
}

/// Runs one statement; server errors keep the connection, others lose it. Passwords in
/// `secrets` never reach a message.
async fn exec(
    conn: &mut mysql_async::Conn,
    st: &Statement,
    secrets: &[&str],
) -> Result<(), AgentError> {
    match timed(conn.query_drop(st.sql.as_str())).await {
        Ok(()) => Ok(()),
        Err(mysql_async::Error::Server(e)) => Err(AgentError::RunStatement {
            statement: st.shown.clone(),
            code: e.code,
            message: redact(e.code, &e.message, secrets),
        }),
        Err(source) => Err(AgentError::SendStatement {
            statement: st.shown.clone(),
            source: Box::new(source),
        }),
    }
}

/// A server message with passwords removed; syntax errors quote the statement, so their
/// message is withheld whole.
fn redact(code: u16, message: &str, secrets: &[&str]) -> String {
    if code == ER_PARSE_ERROR {
        return "syntax error (message withheld: the statement may carry a password)".into();
    }
    let mut out = message.to_string();
    for s in secrets {
        out = out.replace(s, "<redacted>");
    }
    out
}

/// The values of a row as text (`None` for NULL).
fn row_texts(row: &mysql_async::Row) -> Vec<Option<String>> {
    (0..row.len())
        .map(|i| match row.as_ref(i) {
            None | Some(mysql_async::Value::NULL) => None,
            Some(mysql_async::Value::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            Some(mysql_async::Value::Int(v)) => Some(v.to_string()),
            Some(mysql_async::Value::UInt(v)) => Some(v.to_string()),
            Some(other) => Some(format!("{other:?}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_lose_their_trailing_newline_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("root");
        assert!(read_secret(&p).unwrap().is_none());
        for (content, want) in [
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            (" pw \n\n", " pw "),
            ("", ""),
        ] {
            std::fs::write(&p, content).unwrap();
            assert_eq!(
                read_secret(&p).unwrap().unwrap().as_str(),
                want,
                "{content:?}"
            );
        }
    }

    #[test]
    fn messages_never_carry_passwords() {
        assert_eq!(
            redact(
                1396,
                "Operation ALTER USER failed for hunter2",
                &["hunter2"]
            ),
            "Operation ALTER USER failed for <redacted>"
        );
        assert!(!redact(1064, "near 'hunter2' at line 1", &[]).contains("hunter2"));
    }
}
