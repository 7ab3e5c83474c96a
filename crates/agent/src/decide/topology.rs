//! The agent's decision as a pure function: from the pod's role and what the server reports,
//! the one next action (at most one per pass) and whether the pod is ready, with a one-line
//! reason.

use std::time::Duration;

use crate::decide::caught_up::SourceLag;
use crate::decide::labels::Role;
use crate::decide::lease::LeaseState;
use crate::decide::restored::RestoredGtid;
use crate::decide::sql::{IoState, ReplicaStatus, Source, REPLICATION_USER};
use bulwark_contract::gtid;
use bulwark_contract::semisync;
use bulwark_contract::Engine;

/// What the server reported in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Server family.
    pub engine: Engine,
    /// `@@version`.
    pub version: String,
    /// `@@read_only`.
    pub read_only: bool,
    /// `@@super_read_only` (MySQL; always false on MariaDB).
    pub super_read_only: bool,
    /// What the server has logged by GTID: `@@gtid_binlog_pos` (MariaDB) or
    /// `@@gtid_executed` (MySQL).
    pub gtid_logged: String,
    /// MariaDB's `@@gtid_binlog_state` (every server's last GTID in every domain); empty on
    /// MySQL.
    pub gtid_history: String,
    /// The primary waits for replicas' acknowledgements of its commits
    /// (`rpl_semi_sync_master_enabled` / `rpl_semi_sync_source_enabled`).
    pub semi_sync_wait: bool,
    /// Replicas connected with semi-sync (`Rpl_semi_sync_*_clients`).
    pub semi_sync_clients: u32,
    /// Replicas reading its binary log, semi-sync or not.
    pub replicas_attached: u32,
    /// The replica status row, `None` when no replication is configured.
    pub replication: Option<ReplicaStatus>,
}

/// Whether a pass looks for a partial-load mark (part of a bootstrap load, copied from a member
/// mid-load): only on a primary with nothing to load, once any promotion is over (everything
/// received applied, replication removed). A replica promoted while it still applied a load
/// that finished on the old primary has the mark's removal in its relay log, and must never
/// load again over what followed.
pub fn looks_for_partial_load(role: &Result<Role, String>, o: &Observed, load: &LoadState) -> bool {
    matches!(role, Ok(Role::Primary)) && o.replication.is_none() && *load == LoadState::Nothing
}

/// Where the load of a pending logical backup into a primary stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadState {
    /// Nothing to load.
    Nothing,
    /// Backup `id` waits to be loaded.
    Waiting(String),
    /// Backup `id` is being loaded.
    Loading(String),
    /// The last attempt failed; another follows after a pause.
    Failed {
        /// Backup id.
        id: String,
        /// Why, on one line.
        error: String,
    },
}

/// The GTID position of a physical restore, waiting to be adopted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtidAdoption {
    /// Nothing to adopt.
    Nothing,
    /// The restore's position waits.
    Waiting(RestoredGtid),
    /// The file cannot be read, or was adopted and cannot be removed.
    Failed(String),
}

/// Everything a decision depends on.
#[derive(Debug, Clone)]
pub struct Situation<'a> {
    /// The pod's role, or why it is unknown.
    pub role: Result<Role, String>,
    /// The server's state.
    pub observed: &'a Observed,
    /// Where replicas replicate from.
    pub source: &'a Source,
    /// The accounts were converged with the current passwords on this connection.
    pub accounts_current: bool,
    /// The replication password the server uses is not the current one.
    pub source_password_stale: bool,
    /// Replication may be started (not retried too often after it stopped on an error).
    pub start_allowed: bool,
    /// A demoted primary's writes are held (MariaDB: a global read lock, which also stops the
    /// accounts `read_only` does not): `Some(remaining)` while the hold lasts, `Some(ZERO)`
    /// once it is to be released.
    pub fence_hold: Option<Duration>,
    /// The hold on writes lasts until released: a primary's whose lease lapsed.
    pub fence_unleased: bool,
    /// Whether this member, as the primary, holds the operator's lease.
    pub lease: &'a LeaseState,
    /// The primary changed (a newer epoch) since replication last connected: the receiver
    /// may still be attached to the former primary through the Service's old connection.
    pub reconnect: bool,
    /// The pending logical backup: waiting, loading, failed or nothing.
    pub load: &'a LoadState,
    /// The restored GTID position.
    pub restored_gtid: &'a GtidAdoption,
    /// Largest replica lag that is still ready.
    pub max_lag: Duration,
    /// A running replica against its primary's own position.
    pub source_lag: &'a SourceLag,
    /// Replicas that must acknowledge each commit once the primary waits (0: asynchronous).
    pub semi_sync_acks: u32,
    /// Why the server's own guard on the lease (`sql::watchdog`) is not in place where
    /// failover needs it: a primary is not made writable without it.
    pub watchdog_missing: Option<&'a str>,
}

/// One step towards the desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create the accounts and converge passwords and privileges.
    EnsureAccounts,
    /// Stop receiving from the old source (promotion, first step).
    StopReplicationIo,
    /// Stop both replication threads.
    StopReplication,
    /// Forget the replication source.
    ResetReplication,
    /// Start the applier alone (promotion: apply the received relay log first).
    StartReplicationSql,
    /// Stop both threads and forget the source (promotion, once everything is applied).
    FinishPromotion,
    /// The primary starts (true) or stops (false) waiting for acknowledgements.
    SetSemiSyncWait(bool),
    /// read_only (and super_read_only) off.
    SetWritable,
    /// read_only (and on MySQL super_read_only) on.
    SetReadOnly,
    /// Point replication at the source; on MariaDB, first adopt this server's own binlog GTID
    /// position when given.
    ChangeSource {
        /// `gtid_slave_pos` to set first.
        adopt_gtid_pos: Option<String>,
    },
    /// Start replication.
    StartReplication,
    /// Restart the receiver alone, so that it connects to the current primary.
    RestartReplicationIo,
    /// End the client sessions that waited on a demoted primary's hold, then release it.
    ReleaseFence,
    /// The primary's lease lapsed: end the client sessions, turn read_only on and (MariaDB)
    /// hold writes until the lease is renewed.
    FenceUnleased,
    /// A hold until released (a lapsed lease's) on a member now a replica ends after a
    /// demotion's time instead.
    EndFenceAfterHold,
    /// Load the pending logical backup.
    LoadPendingRestore {
        /// Backup id.
        backup_id: String,
    },
    /// Forget the pending logical backup: a replica gets the primary's copy by replication,
    /// and must never load it later, once promoted, over live data.
    DiscardPendingRestore {
        /// Backup id.
        backup_id: String,
    },
    /// Continue the binary log and the replica position from a physical restore's GTID
    /// position, then remove its file.
    AdoptRestoredGtid {
        /// The restore's file content.
        restored: RestoredGtid,
        /// Replication came configured with the backup: stop and remove it first.
        stop_replication: bool,
    },
}

impl Action {
    /// Short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Action::EnsureAccounts => "ensure-accounts",
            Action::StopReplicationIo => "stop-replication-io",
            Action::StopReplication => "stop-replication",
            Action::ResetReplication => "reset-replication",
            Action::StartReplicationSql => "start-replication-sql",
            Action::FinishPromotion => "finish-promotion",
            Action::SetSemiSyncWait(true) => "start-semi-sync-wait",
            Action::SetSemiSyncWait(false) => "stop-semi-sync-wait",
            Action::SetWritable => "set-writable",
            Action::SetReadOnly => "set-read-only",
            Action::ChangeSource { .. } => "change-source",
            Action::StartReplication => "start-replication",
            Action::RestartReplicationIo => "restart-replication-io",
            Action::ReleaseFence => "release-fence",
            Action::FenceUnleased => "fence-unleased",
            Action::EndFenceAfterHold => "end-fence-after-hold",
            Action::LoadPendingRestore { .. } => "load-pending-restore",
            Action::DiscardPendingRestore { .. } => "discard-pending-restore",
            Action::AdoptRestoredGtid { .. } => "adopt-restored-gtid",
        }
    }
}

/// The outcome of one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do now, if anything.
    pub action: Option<Action>,
    /// Whether the pod is ready as it is now.
    pub ready: bool,
    /// Why (one line, for `/readyz`).
    pub reason: String,
}

fn act(action: Action, reason: impl Into<String>) -> Decision {
    Decision {
        action: Some(action),
        ready: false,
        reason: reason.into(),
    }
}

fn wait(reason: impl Into<String>) -> Decision {
    Decision {
        action: None,
        ready: false,
        reason: reason.into(),
    }
}

fn ready(reason: impl Into<String>) -> Decision {
    Decision {
        action: None,
        ready: true,
        reason: reason.into(),
    }
}

fn errors(r: &ReplicaStatus) -> String {
    if r.last_error.is_empty() {
        String::new()
    } else {
        format!(": {}", r.last_error)
    }
}

/// The fence of a member that is not known to be a replica and whose lease lapsed, while it is
/// not fenced yet; `None` once it is (or when it holds its lease). `decide` takes it before
/// anything else.
fn fence_unleased(s: &Situation<'_>, o: &Observed) -> Option<Decision> {
    let why = s.lease.lapsed()?;
    let fenced = o.read_only
        && match o.engine {
            Engine::MySql => o.super_read_only,
            Engine::MariaDb => s.fence_unleased,
        };
    (!fenced).then(|| {
        act(
            Action::FenceUnleased,
            format!("primary fencing itself: {why}"),
        )
    })
}

/// The next action and the readiness.
pub fn decide(s: &Situation<'_>) -> Decision {
    let o = s.observed;
    // Ahead of everything that could fail or wait (accounts, a restored position, an unknown
    // role): the operator may promote another member once the lease has run out. Fenced,
    // nothing else is done (the held lock would stop it) until the lease is renewed.
    if let (false, Some(why)) = (matches!(s.role, Ok(Role::Replica)), s.lease.lapsed()) {
        return fence_unleased(s, o).unwrap_or_else(|| {
            wait(format!(
                "primary, fenced: {why}; writes resume once the operator renews the lease"
            ))
        });
    }
    // A lapsed lease's hold goes before anything that writes (which it would stop): at once
    // for a primary whose lease is back, after a demotion's time for a member now a replica,
    // while clients still routed to it move on.
    if s.fence_unleased {
        return match s.role {
            Ok(Role::Primary) => act(
                Action::ReleaseFence,
                "the lease is renewed: ending the client sessions held, then releasing the hold",
            ),
            _ => act(
                Action::EndFenceAfterHold,
                "demoted while fenced for want of a lease: holding writes while clients move",
            ),
        };
    }
    if !s.accounts_current {
        return act(Action::EnsureAccounts, "ensuring accounts");
    }
    let role = match &s.role {
        Ok(r) => *r,
        Err(reason) => return wait(reason.clone()),
    };
    // Before anything that writes, replicates or makes the server writable, and only once
    // the role is known.
    match s.restored_gtid {
        GtidAdoption::Nothing => {}
        GtidAdoption::Failed(error) => return wait(format!("restored GTID position: {error}")),
        GtidAdoption::Waiting(r) => {
            let shown = if r.gtid_set.is_empty() {
                "(none)"
            } else {
                r.gtid_set.as_str()
            };
            if !gtid::within(o.engine, &o.gtid_logged, &r.gtid_set) {
                return wait(format!(
                    "not adopting the GTID position {shown} of restored backup {}: the server \
                     has logged {} since; check it and remove the restored GTID file",
                    r.backup_id, o.gtid_logged
                ));
            }
            return act(
                Action::AdoptRestoredGtid {
                    restored: r.clone(),
                    stop_replication: o.replication.is_some(),
                },
                format!(
                    "adopting the GTID position {shown} of restored backup {}",
                    r.backup_id
                ),
            );
        }
    }
    match role {
        Role::Primary => decide_primary(s, o),
        Role::Replica => decide_replica(s, o),
    }
}

fn decide_primary(s: &Situation<'_>, o: &Observed) -> Decision {
    if let Some(why) = semisync::lossy_crash_recovery(o.engine, &o.version) {
        return wait(why);
    }
    if s.fence_hold.is_some() {
        // Made the primary again (an aborted switchover): its writes are released first.
        return act(
            Action::ReleaseFence,
            "primary again: ending the client sessions held, then releasing the hold",
        );
    }
    if let Some(r) = &o.replication {
        let from = format!("{}:{}", r.source_host, r.source_port);
        // Received transactions are never discarded: they may be acknowledged writes.
        if !r.sql_running && !r.relay_applied {
            if r.sql_errno != 0 {
                return wait(format!(
                    "promotion halted: applying what was received from {from} failed{}; the \
                     received transactions are kept: resolve the error, then start the applier",
                    errors(r)
                ));
            }
            // MariaDB (GTID mode) empties the relay log when a thread starts while both are
            // stopped; with the receiver still running it keeps it.
            if r.io != IoState::Stopped || o.engine == Engine::MySql {
                return act(
                    Action::StartReplicationSql,
                    format!("promoting: applying what was received from {from} first"),
                );
            }
            return wait(format!(
                "promotion halted: both replication threads are stopped with transactions \
                 received from {from} not applied, and MariaDB would discard them on any start; \
                 they are kept: apply them by position, or give them up with RESET SLAVE ALL"
            ));
        }
        if r.io != IoState::Stopped {
            return act(
                Action::StopReplicationIo,
                format!("promoting: stopping replication from {from}"),
            );
        }
        if r.sql_running {
            if r.relay_applied || r.sql_caught_up {
                return act(
                    Action::FinishPromotion,
                    format!(
                        "promoting: everything received from {from} is applied; removing \
                         replication"
                    ),
                );
            }
            return wait(format!("promoting: applying what was received from {from}"));
        }
        return act(
            Action::ResetReplication,
            "promoting: removing the replication configuration",
        );
    }
    // Commits wait for acknowledgements before the first one is taken, and for good: a
    // primary never answers a commit that no replica has, however long its replicas are away.
    // The wait is not persistent: a server that restarted (a crash) comes back asynchronous
    // while its replicas, which may take over, are still reconnecting, and a commit answered
    // then could be lost in a failover.
    let acks = s.semi_sync_acks;
    if acks > 0 && !o.semi_sync_wait {
        return act(
            Action::SetSemiSyncWait(true),
            format!(
                "commits wait for {acks} replica acknowledgement(s) before the primary takes \
                 writes ({} semi-sync replica(s) connected)",
                o.semi_sync_clients
            ),
        );
    }
    if acks == 0 && o.semi_sync_wait {
        return act(
            Action::SetSemiSyncWait(false),
            "asynchronous replication: commits no longer wait for replicas",
        );
    }
    if o.read_only || o.super_read_only {
        if let Some(why) = s.watchdog_missing {
            return wait(format!(
                "primary: read-only until the server's lease watchdog is in place: {why}"
            ));
        }
        return act(Action::SetWritable, "promoting: turning read_only off");
    }
    let writable = if o.semi_sync_wait {
        format!(
            "primary: writable, commits wait for {acks} replica acknowledgement(s) ({} \
             connected)",
            o.semi_sync_clients
        )
    } else {
        "primary: writable".to_owned()
    };
    match s.load {
        LoadState::Nothing => ready(writable),
        LoadState::Waiting(id) => act(
            Action::LoadPendingRestore {
                backup_id: id.clone(),
            },
            format!("loading backup {id}"),
        ),
        LoadState::Loading(id) => wait(format!("loading backup {id}")),
        LoadState::Failed { id, error } => {
            wait(format!("loading backup {id} failed (retrying): {error}"))
        }
    }
}

fn decide_replica(s: &Situation<'_>, o: &Observed) -> Decision {
    let want = s.source;
    if let LoadState::Waiting(id) = s.load {
        return act(
            Action::DiscardPendingRestore {
                backup_id: id.clone(),
            },
            format!("discarding pending backup {id}: a replica gets the data by replication"),
        );
    }
    if !o.read_only || (o.engine == Engine::MySql && !o.super_read_only) {
        return act(Action::SetReadOnly, "demoting: turning read_only on");
    }
    match s.fence_hold {
        Some(left) if !left.is_zero() => {
            return wait(format!(
                "demoted: writes held for {}s more while clients move to the new primary",
                left.as_secs_f64().ceil()
            ))
        }
        Some(_) => {
            return act(
                Action::ReleaseFence,
                "demoted: ending the client sessions held, then releasing the hold",
            )
        }
        None => {}
    }
    if o.semi_sync_wait {
        // A promoted replica starts waiting once its own replicas are connected.
        return act(
            Action::SetSemiSyncWait(false),
            "demoting: commits no longer wait for acknowledgements",
        );
    }
    let Some(r) = &o.replication else {
        // No configuration: a new replica, or a primary being demoted, whose own transactions
        // are in its binary log (MariaDB's slave position does not know them).
        let adopt_gtid_pos = (o.engine == Engine::MariaDb && !o.gtid_logged.is_empty())
            .then(|| o.gtid_logged.clone());
        return act(
            Action::ChangeSource { adopt_gtid_pos },
            format!("configuring replication from {}:{}", want.host, want.port),
        );
    };
    let misdirected = r.source_host != want.host
        || r.source_port != want.port
        || r.source_user != REPLICATION_USER
        || !r.gtid
        || s.source_password_stale;
    if misdirected {
        let (from, to) = (
            format!("{}:{}", r.source_host, r.source_port),
            format!("{}:{}", want.host, want.port),
        );
        // Re-pointing to another server empties the relay log, which may hold acknowledged
        // commits applied nowhere yet (a failover's replicas): as in a promotion, the receiver
        // stops first and the applier finishes what was received. An applier that failed
        // cannot; what it left is fetched again from the new source, which has it when the
        // choice was lossless. New credentials for the same source lose nothing.
        let moved = r.source_host != want.host || r.source_port != want.port;
        if moved && r.io != IoState::Stopped {
            return act(
                Action::StopReplicationIo,
                format!("re-pointing replication from {from} to {to}: stopping the receiver first"),
            );
        }
        if moved && r.sql_running && !(r.relay_applied || r.sql_caught_up) {
            return wait(format!(
                "re-pointing replication from {from} to {to}: applying what was received first"
            ));
        }
        // MySQL keeps the relay log when the applier starts alone (MariaDB empties it when a
        // thread starts while both are stopped).
        if moved
            && o.engine == Engine::MySql
            && !r.sql_running
            && !r.relay_applied
            && r.sql_errno == 0
        {
            return act(
                Action::StartReplicationSql,
                format!(
                    "re-pointing replication from {from} to {to}: applying what was received \
                     first"
                ),
            );
        }
        if r.io != IoState::Stopped || r.sql_running {
            return act(
                Action::StopReplication,
                format!("re-pointing replication from {from} to {to}"),
            );
        }
        return act(
            Action::ChangeSource {
                adopt_gtid_pos: None,
            },
            format!("re-pointing replication to {}:{}", want.host, want.port),
        );
    }
    if r.io == IoState::Stopped || !r.sql_running {
        let why = format!("replication stopped{}", errors(r));
        return if s.start_allowed {
            act(Action::StartReplication, why)
        } else {
            wait(why)
        };
    }
    if s.reconnect {
        return act(
            Action::RestartReplicationIo,
            format!(
                "the primary changed: reconnecting replication through {}:{}",
                want.host, want.port
            ),
        );
    }
    if r.io == IoState::Connecting {
        return wait(format!(
            "replication connecting to {}:{}{}",
            r.source_host,
            r.source_port,
            errors(r)
        ));
    }
    let max = s.max_lag.as_secs();
    let lag = match r.lag_seconds {
        None => return wait("replication lag unknown"),
        Some(lag) if lag > max => return wait(format!("replica {lag}s behind (at most {max}s)")),
        Some(lag) => lag,
    };
    // The replica's own figure is 0 whenever its applier is idle, whether or not anything
    // arrives: it is served only while it provably holds what the primary had logged within
    // the lag allowed, and nothing the primary lacks.
    let from = format!("{}:{}", r.source_host, r.source_port);
    match s.source_lag {
        SourceLag::Within(d) if *d <= s.max_lag => ready(format!(
            "replica: replicating from {from}, {lag}s behind; holds what the primary had \
             logged {}s ago",
            d.as_secs()
        )),
        SourceLag::Within(d) => wait(format!(
            "replica holds only what the primary had logged {:.1}s ago (at most {max}s), \
             though it reports {lag}s behind",
            d.as_secs_f64()
        )),
        SourceLag::Behind {
            at_least,
            primary,
            replica,
        } => wait(if *at_least <= s.max_lag {
            format!(
                "replica catching up: not yet shown to hold the primary's position read \
                 {:.1}s ago (the primary is at {primary}, this server at {replica})",
                at_least.as_secs_f64()
            )
        } else {
            format!(
                "replica lacks what the primary had logged {}s ago or earlier, though it \
                 reports {lag}s behind: the primary is at {primary}, this server at {replica}",
                at_least.as_secs()
            )
        }),
        SourceLag::Diverged { primary, replica } => wait(format!(
            "replica withheld: it holds transactions the primary lacks (the primary is at \
             {primary}, this server's history is {replica}); rebuild it from the primary"
        )),
        SourceLag::Unreadable(why) => wait(format!(
            "replica not shown to be current: the primary's position cannot be read from \
             {from}: {why}"
        )),
        SourceLag::Unconfirmed(why) => ready(format!(
            "replica: replicating from {from}, {lag}s behind by its own account; the primary's \
             position cannot be read through {from}: {why}"
        )),
        SourceLag::NotMeasured => wait("replica not shown to be current: not measured"),
    }
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
