//! One pass of the agent: read the role (the labels, or a newer order), observe the server, let
//! [`topology::decide`] name the one action, and apply it. What the agent remembers between
//! passes lives here, grouped by what it is about; failures become the not-ready reason.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bulwark_contract::order::Standing;

use super::config::AgentConfig;
use super::credentials::Credentials;
use super::error::AgentError;
use super::fence::Fence;
use super::lease::Lease;
use super::observe::Server;
use super::orders::Orders;
use super::restoring::RestoreState;
use crate::decide::caught_up::{Holding, SourceLag, SourceSamples};
use crate::decide::labels::{self, Role};
use crate::decide::lease::LeaseState;
use crate::decide::sql::{IoState, Source};
use crate::decide::topology::{self, Decision, Observed, Situation};

/// Pause before replication is started again after it stopped.
const START_RETRY: Duration = Duration::from_secs(10);
/// Pause before a stale replication password is replaced again.
const CHANGE_RETRY: Duration = Duration::from_secs(60);
/// MySQL/MariaDB "access denied" (the replication password is wrong).
const ER_ACCESS_DENIED: u32 = 1045;
/// Longest a pass waits for its read of the primary's position; a slower read finishes in
/// the background and counts in a later pass. Without the bound a primary that does not
/// answer would stretch every pass to the read's timeout, and with them the orders a
/// failover sends and the report that tells the operator the primary is gone. A promotion
/// order that comes while a pass waits on a dead primary's read starts its pass after it: the
/// bound is short (a live primary answers within milliseconds).
const POSITION_WAIT: Duration = Duration::from_millis(300);

/// The answer of a read of the primary's position: what it held, or why none came.
type PositionAnswer = Result<(String, String), (AgentError, crate::decide::caught_up::Reach)>;

/// A read of the primary's position under way.
pub(super) struct PositionRead {
    /// The primary read and the epoch it was read at.
    of: (Source, u64),
    asked: Instant,
    /// When its name resolved and the connection began.
    resolved: Arc<OnceLock<Instant>>,
    /// The answer and when it came.
    task: tokio::task::JoinHandle<(PositionAnswer, Instant)>,
}

/// What the agent last made of the server, so that a pass converges only what changed.
#[derive(Default)]
pub(super) struct Converged {
    /// The passwords the accounts carry (forgotten with the connection: checked again).
    pub(super) accounts_digest: Option<[u8; 32]>,
    /// A loaded dump replaced the privilege tables: accounts and root are converged again.
    pub(super) accounts_after_load: bool,
    /// The replication password the source was configured with.
    pub(super) source_digest: Option<[u8; 32]>,
    pub(super) last_change: Option<Instant>,
    pub(super) last_start: Option<Instant>,
    /// The epoch at which replication last connected; `None` since the agent started.
    pub(super) io_epoch: Option<u64>,
    /// The last failure to keep the lease watchdog, logged once.
    pub(super) watchdog_failure: Option<String>,
    /// With failover off, a leftover stamp was looked for (and removed) on this connection:
    /// nothing writes one since, so it is not looked for every pass.
    pub(super) watchdog_cleared: bool,
}

/// The role a pass acts on.
pub(super) struct RoleView {
    /// The last role read (or why none could be), to log changes once.
    pub(super) last: Option<Result<Standing, String>>,
    /// The epoch of the role this pass acts on.
    pub(super) epoch: u64,
    /// Where this pass replicates from: the primary an order names, else `--primary-host`.
    pub(super) source: Source,
    /// An order named the primary (its pod), rather than the primary Service.
    pub(super) source_named: bool,
}

/// What the last pass saw and did.
#[derive(Default)]
pub(super) struct LastPass {
    /// What it observed, `None` when it could not.
    pub(super) observed: Option<Observed>,
    /// It applied an action.
    pub(super) acted: bool,
    /// The last failed action and its error, so a failure repeated every pass is logged once.
    pub(super) failure: Option<String>,
}

pub(super) struct Agent {
    pub(super) config: AgentConfig,
    pub(super) server: Option<Server>,
    pub(super) converged: Converged,
    pub(super) role: RoleView,
    /// Accepted role orders.
    pub(super) orders: Arc<Orders>,
    /// The primary's lease, as the operator's heartbeats renew it.
    pub(super) lease: Arc<Lease>,
    /// A demoted primary's hold on writes, while it runs.
    pub(super) fence: Option<Fence>,
    pub(super) restore: RestoreState,
    pub(super) last: LastPass,
    /// The primary's positions as this member, a replica, read them.
    pub(super) primary_positions: SourceSamples,
    /// The read of them still under way, if any.
    pub(super) position_read: Option<PositionRead>,
    /// Whether the keeper task moves the lease watchdog's stamp between passes.
    pub(super) stamp_keeper: Arc<super::stamp_keeper::StampKeeper>,
}

impl Agent {
    pub(super) fn new(config: AgentConfig, orders: Arc<Orders>, lease: Arc<Lease>) -> Self {
        Agent {
            role: RoleView {
                last: None,
                epoch: 0,
                source: config.source.clone(),
                source_named: false,
            },
            config,
            server: None,
            converged: Converged::default(),
            orders,
            lease,
            fence: None,
            restore: RestoreState::default(),
            last: LastPass::default(),
            primary_positions: SourceSamples::default(),
            position_read: None,
            stamp_keeper: Arc::default(),
        }
    }

    /// The connected server; a pass acts only once connected.
    pub(super) fn server(&mut self) -> &mut Server {
        self.server.as_mut().expect("connected")
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
        if self.role.last.as_ref() != Some(&role) {
            match &role {
                Ok(r) => tracing::info!(role = %r.role, epoch = r.epoch, "role changed"),
                Err(reason) => tracing::warn!(reason = %reason, "role unknown"),
            }
            self.role.last = Some(role.clone());
        }
        role
    }

    /// One pass: observe, decide, act once. Failures become the not-ready reason.
    pub(super) async fn pass(&mut self) -> Decision {
        let role = self.read_role();
        self.last = LastPass {
            failure: self.last.failure.take(),
            ..LastPass::default()
        };
        if self.fence.as_ref().is_some_and(|f| f.remaining().is_none()) {
            self.fence = None;
        }
        if let Ok(r) = &role {
            self.role.epoch = r.epoch;
        }
        // An order that names the primary wins over the Service while it is the role's.
        let named = self.orders.source().filter(|(epoch, _)| {
            role.as_ref()
                .is_ok_and(|r| r.epoch == *epoch && r.role == Role::Replica)
        });
        self.role.source_named = named.is_some();
        self.role.source = Source {
            host: named.map_or_else(|| self.config.source.host.clone(), |(_, host)| host),
            port: self.config.source.port,
        };
        match self.try_pass(role.map(|r| r.role)).await {
            Ok(d) => d,
            Err(e) => {
                if e.connection_lost() && self.server.is_some() {
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
        self.server = None;
        self.converged.accounts_digest = None;
        self.converged.watchdog_cleared = false;
    }

    /// Closes the connection to mysqld at shutdown, waiting briefly for the server's goodbye.
    pub(super) async fn disconnect_gracefully(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), server.conn.disconnect()).await;
        }
    }

    async fn try_pass(&mut self, role: Result<Role, String>) -> Result<Decision, AgentError> {
        let creds = Credentials::read(&self.config.credentials_dir)?;
        if self.server.is_none() {
            let server = super::observe::connect(&self.config.socket, &creds).await?;
            // A hold on writes ends every session but the agent's: this is the agent's now.
            if let Some(fence) = &self.fence {
                fence.spare(u64::from(server.conn.id()));
            }
            self.server = Some(server);
            self.converged.accounts_digest = None;
            self.converged.watchdog_cleared = false;
        }
        let observed = super::observe::observe(self.server()).await?;
        let observed_at = Instant::now();
        self.last.observed = Some(observed.clone());
        let source_lag = self.source_lag(&role, &observed, observed_at, &creds).await;
        let mut load = self.restore.load_state(
            self.config.pending.as_ref(),
            &mut self.converged.accounts_after_load,
        );
        if topology::looks_for_partial_load(&role, &observed, &load) {
            load = self
                .restore
                .partial_load(
                    self.config.pending.as_ref(),
                    &mut self.server.as_mut().expect("connected").conn,
                    &mut self.converged.accounts_after_load,
                )
                .await?;
        }
        let restored_gtid = self.restore.gtid_adoption(self.config.gtid_file.as_deref());
        let c = &self.converged;
        let stale = observed.replication.as_ref().is_some_and(|r| {
            let changed = c
                .source_digest
                .is_some_and(|d| d != creds.replication_digest());
            let denied = r.io_errno == ER_ACCESS_DENIED
                && c.last_change.is_none_or(|t| t.elapsed() > CHANGE_RETRY);
            changed || denied
        });
        let refused = self.lease.refused_since();
        let lease = LeaseState::of(
            self.config.primary_lease,
            self.role.epoch,
            self.lease.granted(),
            refused,
        );
        let role_now = role.as_ref().ok().copied();
        let watchdog_missing = self.keep_watchdog(role_now, &lease, &observed).await?;
        let c = &self.converged;
        let mut decision = topology::decide(&Situation {
            role,
            observed: &observed,
            source: &self.role.source,
            accounts_current: c.accounts_digest == Some(creds.accounts_digest())
                && !c.accounts_after_load,
            source_password_stale: stale,
            start_allowed: c.last_start.is_none_or(|t| t.elapsed() > START_RETRY),
            // Unknown after an agent restart: the receiver may predate the current primary.
            reconnect: c.io_epoch.is_none_or(|e| e < self.role.epoch),
            fence_hold: self.fence.as_ref().and_then(Fence::remaining),
            fence_unleased: self.fence.as_ref().is_some_and(Fence::until_released),
            lease: &lease,
            load: &load,
            restored_gtid: &restored_gtid,
            max_lag: self.config.max_replica_lag,
            source_lag: &source_lag,
            semi_sync_acks: self.config.semi_sync_acks,
            watchdog_missing: watchdog_missing.as_deref(),
        });
        let Some(action) = decision.action.clone() else {
            return Ok(decision);
        };
        match self.apply(&action, &creds).await {
            Ok(()) => {
                self.last.failure = None;
                self.last.acted = true;
            }
            Err(e) => {
                let msg = bulwark_engine::error::chain(&e);
                let failure = format!("{}: {msg}", action.name());
                if self.last.failure.as_ref() != Some(&failure) {
                    tracing::warn!(action = action.name(), error = %msg, "action failed");
                    self.last.failure = Some(failure);
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

    /// How this member, a running replica, stands against its primary, from the primary's
    /// position read now and in earlier passes; `NotMeasured` for anything else. The reads go
    /// on while its receiver is connecting: since when they fail is what the operator counts a
    /// lost primary's silence from, and a receiver notices a dead stream only after
    /// `slave_net_timeout`.
    async fn source_lag(
        &mut self,
        role: &Result<Role, String>,
        observed: &Observed,
        observed_at: Instant,
        creds: &Credentials,
    ) -> SourceLag {
        // The receiver's state while the applier runs.
        let io = observed
            .replication
            .as_ref()
            .filter(|r| r.sql_running)
            .map(|r| r.io);
        if !(matches!(role, Ok(Role::Replica)) && io.is_some_and(|io| io != IoState::Stopped)) {
            if let Some(read) = self.position_read.take() {
                read.task.abort();
            }
            self.primary_positions.not_read();
            return SourceLag::NotMeasured;
        }
        let source = self.role.source.clone();
        let samples = &mut self.primary_positions;
        samples.follow(&source.host, self.role.epoch, !self.role.source_named);
        // One read at a time, of the primary this pass follows; one of another is dropped.
        let of = (source.clone(), self.role.epoch);
        let mut read = match self.position_read.take() {
            Some(read) if read.of == of => read,
            other => {
                if let Some(read) = other {
                    read.task.abort();
                }
                let (engine, password) = (observed.engine, creds.replication.clone());
                let resolved = Arc::new(OnceLock::new());
                let set = Arc::clone(&resolved);
                PositionRead {
                    of,
                    asked: Instant::now(),
                    resolved,
                    task: tokio::spawn(async move {
                        let read = super::primary_position::read(engine, &source, &password, &set);
                        (read.await, Instant::now())
                    }),
                }
            }
        };
        match tokio::time::timeout(POSITION_WAIT, &mut read.task).await {
            Ok(Ok((Ok((position, history)), answered))) => {
                samples.record(read.asked, answered, position, history)
            }
            Ok(Ok((Err((e, reach)), ended))) => {
                // A run of failures starts with the connection, not the name's lookup.
                let began = read.resolved.get().copied().unwrap_or(read.asked);
                samples.failed(began, ended, bulwark_engine::error::chain(&e), reach)
            }
            Ok(Err(ended)) => samples.failed(
                read.asked,
                Instant::now(),
                format!("the read of the primary's position ended: {ended}"),
                crate::decide::caught_up::Reach::Unknown,
            ),
            // Still under way: this pass judges on what earlier reads found.
            Err(_) => {
                if let Some(connecting) = read.resolved.get() {
                    samples.unanswered(*connecting, Instant::now());
                }
                self.position_read = Some(read);
            }
        }
        // A receiver that reconnects is not judged (its readiness says it connects), and two
        // judgments in a row that find it diverging are two of a running receiver.
        if io != Some(IoState::Running) {
            return SourceLag::NotMeasured;
        }
        samples.judge(
            &Holding {
                engine: observed.engine,
                at: observed_at,
                logged: &observed.gtid_logged,
                history: &observed.gtid_history,
            },
            self.config.max_replica_lag,
        )
    }
}
