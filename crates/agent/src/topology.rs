//! The agent's decision as a pure function: from the pod's role and what the server reports,
//! the one next action (at most one per pass) and whether the pod is ready, with a one-line
//! reason.

use std::time::Duration;

use crate::labels::Role;
use crate::restored::RestoredGtid;
use crate::sql::{IoState, ReplicaStatus, Source, REPLICATION_USER};
use bulwark_contract::gtid;
use bulwark_contract::Engine;

/// What the server reported in this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Server family.
    pub engine: Engine,
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
    /// The replica status row, `None` when no replication is configured.
    pub replication: Option<ReplicaStatus>,
}

/// A logical backup waiting to be loaded into a primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
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
    /// The primary changed (a newer epoch) since replication last connected: the receiver
    /// may still be attached to the former primary through the Service's old connection.
    pub reconnect: bool,
    /// The pending logical restore.
    pub pending: &'a Pending,
    /// The restored GTID position.
    pub restored_gtid: &'a GtidAdoption,
    /// Largest replica lag that is still ready.
    pub max_lag: Duration,
    /// Replicas that must acknowledge each commit once the primary waits (0: asynchronous).
    pub semi_sync_acks: u32,
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

/// The next action and the readiness.
pub fn decide(s: &Situation<'_>) -> Decision {
    let o = s.observed;
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
    match s.pending {
        Pending::Nothing => ready(writable),
        Pending::Waiting(id) => act(
            Action::LoadPendingRestore {
                backup_id: id.clone(),
            },
            format!("loading backup {id}"),
        ),
        Pending::Loading(id) => wait(format!("loading backup {id}")),
        Pending::Failed { id, error } => {
            wait(format!("loading backup {id} failed (retrying): {error}"))
        }
    }
}

fn decide_replica(s: &Situation<'_>, o: &Observed) -> Decision {
    let want = s.source;
    if let Pending::Waiting(id) = s.pending {
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
        if r.io != IoState::Stopped || r.sql_running {
            return act(
                Action::StopReplication,
                format!(
                    "re-pointing replication from {}:{} to {}:{}",
                    r.source_host, r.source_port, want.host, want.port
                ),
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
    match r.lag_seconds {
        None => wait("replication lag unknown"),
        Some(lag) if lag > max => wait(format!("replica {lag}s behind (at most {max}s)")),
        Some(lag) => ready(format!(
            "replica: replicating from {}:{}, {lag}s behind",
            r.source_host, r.source_port
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            host: "quay-primary".into(),
            port: 3306,
        }
    }

    fn status(io: IoState, sql: bool) -> ReplicaStatus {
        ReplicaStatus {
            source_host: "quay-primary".into(),
            source_port: 3306,
            source_user: REPLICATION_USER.into(),
            io,
            sql_running: sql,
            lag_seconds: Some(0),
            gtid: true,
            relay_applied: true,
            sql_caught_up: sql,
            io_errno: 0,
            sql_errno: 0,
            last_error: String::new(),
        }
    }

    fn observed(engine: Engine, read_only: bool, r: Option<ReplicaStatus>) -> Observed {
        Observed {
            engine,
            read_only,
            super_read_only: engine == Engine::MySql && read_only,
            gtid_logged: String::new(),
            gtid_history: String::new(),
            semi_sync_wait: false,
            semi_sync_clients: 0,
            replication: r,
        }
    }

    struct Case {
        name: &'static str,
        role: Result<Role, String>,
        observed: Observed,
        accounts: bool,
        stale: bool,
        start_allowed: bool,
        reconnect: bool,
        fence_hold: Option<Duration>,
        pending: Pending,
        restored_gtid: GtidAdoption,
        semi_sync_acks: u32,
        want_action: Option<Action>,
        want_ready: bool,
        reason_has: &'static str,
    }

    fn case(name: &'static str, role: Result<Role, String>, observed: Observed) -> Case {
        Case {
            name,
            role,
            observed,
            accounts: true,
            stale: false,
            start_allowed: true,
            reconnect: false,
            fence_hold: None,
            pending: Pending::Nothing,
            restored_gtid: GtidAdoption::Nothing,
            semi_sync_acks: 0,
            want_action: None,
            want_ready: false,
            reason_has: "",
        }
    }

    impl Case {
        fn then(mut self, action: Option<Action>, ready: bool, reason: &'static str) -> Self {
            self.want_action = action;
            self.want_ready = ready;
            self.reason_has = reason;
            self
        }
    }

    #[test]
    fn decisions() {
        use Action::*;
        use Engine::{MariaDb, MySql};
        let primary = || Ok(Role::Primary);
        let replica = || Ok(Role::Replica);
        let running = || Some(status(IoState::Running, true));
        let mut lagging = status(IoState::Running, true);
        lagging.lag_seconds = Some(31);
        let mut unapplied = status(IoState::Stopped, true);
        unapplied.relay_applied = false;
        unapplied.sql_caught_up = false;
        // The receiver stopped inside a transaction: the applier has done all it can.
        let mut cut = status(IoState::Stopped, true);
        cut.relay_applied = false;
        let mut unapplied_stopped = status(IoState::Stopped, false);
        unapplied_stopped.relay_applied = false;
        let mut unapplied_receiving = unapplied_stopped.clone();
        unapplied_receiving.io = IoState::Connecting;
        let mut unapplied_failed = unapplied_stopped.clone();
        unapplied_failed.sql_errno = 1062;
        unapplied_failed.last_error = "Duplicate entry '7' for key 'PRIMARY'".into();
        let mut elsewhere = status(IoState::Running, true);
        elsewhere.source_host = "10.0.0.9".into();
        let mut stopped_elsewhere = elsewhere.clone();
        stopped_elsewhere.io = IoState::Stopped;
        stopped_elsewhere.sql_running = false;
        let mut broken = status(IoState::Stopped, false);
        broken.last_error = "Duplicate entry".into();
        let mut demoted = observed(MariaDb, true, None);
        demoted.gtid_logged = "0-101-42".into();
        let mut mysql_half_read_only = observed(MySql, true, running());
        mysql_half_read_only.super_read_only = false;
        let restored = |g: &str| RestoredGtid {
            backup_id: "B1".into(),
            gtid_set: g.into(),
            gtid_history: String::new(),
        };
        let waiting = |g: &str| GtidAdoption::Waiting(restored(g));
        let mut adopted = observed(MariaDb, true, None);
        adopted.gtid_logged = "0-1-500".into();
        let mut logged_more = observed(MariaDb, true, None);
        logged_more.gtid_logged = "0-100-501".into();

        let mut waiting_read_only = observed(MariaDb, true, None);
        waiting_read_only.semi_sync_wait = true;
        let with_clients = |clients: u32, waiting: bool, r: Option<ReplicaStatus>| {
            let mut o = observed(MariaDb, r.is_some(), r);
            o.semi_sync_clients = clients;
            o.semi_sync_wait = waiting;
            o
        };
        let cases = vec![
            Case {
                semi_sync_acks: 1,
                ..case(
                    "a primary whose server restarted (read-only, not waiting) waits for \
                     acknowledgements before it takes writes, replicas connected or not",
                    primary(),
                    observed(MariaDb, true, None),
                )
            }
            .then(
                Some(SetSemiSyncWait(true)),
                false,
                "before the primary takes writes (0 semi-sync replica(s) connected)",
            ),
            Case {
                semi_sync_acks: 1,
                ..case(
                    "a writable primary that does not wait (the setting was lost) waits again",
                    primary(),
                    with_clients(1, false, None),
                )
            }
            .then(Some(SetSemiSyncWait(true)), false, "commits wait"),
            Case {
                semi_sync_acks: 1,
                ..case(
                    "then it turns read_only off",
                    primary(),
                    waiting_read_only.clone(),
                )
            }
            .then(Some(SetWritable), false, "read_only off"),
            Case {
                semi_sync_acks: 2,
                ..case(
                    "and keeps waiting when replicas go away",
                    primary(),
                    with_clients(0, true, None),
                )
            }
            .then(None, true, "commits wait for 2 replica acknowledgement(s)"),
            case(
                "asynchronous replication stops the wait",
                primary(),
                with_clients(1, true, None),
            )
            .then(Some(SetSemiSyncWait(false)), false, "asynchronous"),
            Case {
                semi_sync_acks: 1,
                ..case(
                    "a demoted primary stops waiting",
                    replica(),
                    with_clients(0, true, running()),
                )
            }
            .then(Some(SetSemiSyncWait(false)), false, "demoting"),
            Case {
                accounts: false,
                ..case(
                    "accounts come first",
                    primary(),
                    observed(MariaDb, true, None),
                )
            }
            .then(Some(EnsureAccounts), false, "accounts"),
            case(
                "unknown role waits",
                Err("role unknown: no label".into()),
                observed(MariaDb, false, None),
            )
            .then(None, false, "role unknown"),
            case(
                "writable primary is ready",
                primary(),
                observed(MariaDb, false, None),
            )
            .then(None, true, "primary"),
            case(
                "read-only primary turns writable",
                primary(),
                observed(MySql, true, None),
            )
            .then(Some(SetWritable), false, "read_only off"),
            case(
                "promotion stops receiving first",
                primary(),
                observed(MariaDb, true, running()),
            )
            .then(
                Some(StopReplicationIo),
                false,
                "stopping replication from quay-primary:3306",
            ),
            case(
                "promotion applies the relay log",
                primary(),
                observed(MariaDb, true, Some(unapplied)),
            )
            .then(None, false, "applying"),
            case(
                "promotion then stops and resets",
                primary(),
                observed(MariaDb, true, Some(status(IoState::Stopped, true))),
            )
            .then(Some(FinishPromotion), false, "everything received"),
            case(
                "a transaction cut by the stopped receiver does not block promotion",
                primary(),
                observed(MariaDb, true, Some(cut)),
            )
            .then(Some(FinishPromotion), false, "everything received"),
            case(
                "a stopped applier with unapplied relay log is started, not reset",
                primary(),
                observed(MySql, true, Some(unapplied_stopped.clone())),
            )
            .then(
                Some(StartReplicationSql),
                false,
                "applying what was received from quay-primary:3306 first",
            ),
            case(
                "on MariaDB the applier is started while the receiver still runs",
                primary(),
                observed(MariaDb, true, Some(unapplied_receiving)),
            )
            .then(Some(StartReplicationSql), false, "first"),
            case(
                "on MariaDB, with both threads stopped, a start would discard: halted",
                primary(),
                observed(MariaDb, true, Some(unapplied_stopped)),
            )
            .then(None, false, "MariaDB would discard them"),
            case(
                "a failed applier halts promotion and keeps what was received",
                primary(),
                observed(MariaDb, true, Some(unapplied_failed)),
            )
            .then(None, false, "promotion halted: applying what was received"),
            case(
                "promotion resets a configuration with nothing left to apply",
                primary(),
                observed(MariaDb, true, Some(status(IoState::Stopped, false))),
            )
            .then(Some(ResetReplication), false, "removing"),
            Case {
                pending: Pending::Waiting("B1".into()),
                ..case(
                    "pending restore loads",
                    primary(),
                    observed(MariaDb, false, None),
                )
            }
            .then(
                Some(LoadPendingRestore {
                    backup_id: "B1".into(),
                }),
                false,
                "loading backup B1",
            ),
            Case {
                pending: Pending::Loading("B1".into()),
                ..case(
                    "loading is not ready",
                    primary(),
                    observed(MariaDb, false, None),
                )
            }
            .then(None, false, "loading backup B1"),
            Case {
                pending: Pending::Failed {
                    id: "B1".into(),
                    error: "boom".into(),
                },
                ..case(
                    "failed load waits",
                    primary(),
                    observed(MariaDb, false, None),
                )
            }
            .then(None, false, "failed (retrying): boom"),
            case(
                "writable replica turns read-only",
                replica(),
                observed(MariaDb, false, running()),
            )
            .then(Some(SetReadOnly), false, "read_only on"),
            case(
                "MySQL replica needs super_read_only",
                replica(),
                mysql_half_read_only,
            )
            .then(Some(SetReadOnly), false, "read_only on"),
            case(
                "new replica is configured",
                replica(),
                observed(MariaDb, true, None),
            )
            .then(
                Some(ChangeSource {
                    adopt_gtid_pos: None,
                }),
                false,
                "configuring replication from quay-primary:3306",
            ),
            case(
                "demoted primary adopts its binlog position",
                replica(),
                demoted.clone(),
            )
            .then(
                Some(ChangeSource {
                    adopt_gtid_pos: Some("0-101-42".into()),
                }),
                false,
                "configuring",
            ),
            case(
                "running replica is ready",
                replica(),
                observed(MariaDb, true, running()),
            )
            .then(None, true, "replicating from quay-primary:3306, 0s behind"),
            case(
                "MySQL running replica is ready",
                replica(),
                observed(MySql, true, running()),
            )
            .then(None, true, "replicating"),
            case(
                "lagging replica is not ready",
                replica(),
                observed(MariaDb, true, Some(lagging)),
            )
            .then(None, false, "31s behind (at most 30s)"),
            Case {
                fence_hold: Some(Duration::from_millis(2500)),
                ..case(
                    "a fenced primary holds writes before anything else",
                    replica(),
                    demoted.clone(),
                )
            }
            .then(None, false, "writes held for 3s more"),
            Case {
                fence_hold: Some(Duration::ZERO),
                ..case(
                    "and releases the hold once it is over",
                    replica(),
                    demoted.clone(),
                )
            }
            .then(Some(ReleaseFence), false, "releasing the hold"),
            Case {
                fence_hold: Some(Duration::from_secs(4)),
                ..case(
                    "a fenced primary made primary again releases its hold at once",
                    primary(),
                    demoted.clone(),
                )
            }
            .then(Some(ReleaseFence), false, "primary again"),
            Case {
                reconnect: true,
                ..case(
                    "a new primary: the receiver reconnects",
                    replica(),
                    observed(MariaDb, true, running()),
                )
            }
            .then(
                Some(RestartReplicationIo),
                false,
                "reconnecting replication through quay-primary:3306",
            ),
            Case {
                reconnect: true,
                ..case(
                    "a new primary, replication stopped: started, not restarted",
                    replica(),
                    observed(MariaDb, true, Some(status(IoState::Stopped, false))),
                )
            }
            .then(Some(StartReplication), false, "stopped"),
            Case {
                reconnect: true,
                ..case(
                    "a new primary, for the new primary: nothing to reconnect",
                    primary(),
                    observed(MariaDb, false, None),
                )
            }
            .then(None, true, "primary: writable"),
            case(
                "connecting replica waits",
                replica(),
                observed(MariaDb, true, Some(status(IoState::Connecting, true))),
            )
            .then(None, false, "connecting"),
            case(
                "stopped replica starts",
                replica(),
                observed(MariaDb, true, Some(broken.clone())),
            )
            .then(Some(StartReplication), false, "stopped: Duplicate entry"),
            Case {
                start_allowed: false,
                ..case(
                    "restart is throttled",
                    replica(),
                    observed(MariaDb, true, Some(broken)),
                )
            }
            .then(None, false, "stopped"),
            case(
                "moved source: stop first",
                replica(),
                observed(MariaDb, true, Some(elsewhere)),
            )
            .then(
                Some(StopReplication),
                false,
                "from 10.0.0.9:3306 to quay-primary:3306",
            ),
            case(
                "moved source: then re-point",
                replica(),
                observed(MariaDb, true, Some(stopped_elsewhere)),
            )
            .then(
                Some(ChangeSource {
                    adopt_gtid_pos: None,
                }),
                false,
                "re-pointing",
            ),
            Case {
                stale: true,
                ..case(
                    "stale password: re-point",
                    replica(),
                    observed(MariaDb, true, running()),
                )
            }
            .then(Some(StopReplication), false, "re-pointing"),
            Case {
                pending: Pending::Waiting("B1".into()),
                ..case(
                    "replicas never load, and forget the pending load",
                    replica(),
                    observed(MariaDb, true, running()),
                )
            }
            .then(
                Some(DiscardPendingRestore {
                    backup_id: "B1".into(),
                }),
                false,
                "discarding pending backup B1",
            ),
            Case {
                restored_gtid: waiting("0-1-500"),
                ..case(
                    "restored primary adopts the backup's position first",
                    primary(),
                    observed(MariaDb, true, None),
                )
            }
            .then(
                Some(AdoptRestoredGtid {
                    restored: restored("0-1-500"),
                    stop_replication: false,
                }),
                false,
                "adopting the GTID position 0-1-500 of restored backup B1",
            ),
            Case {
                restored_gtid: waiting("0-1-500"),
                ..case(
                    "restored replica adopts it before replicating",
                    replica(),
                    observed(MariaDb, true, None),
                )
            }
            .then(
                Some(AdoptRestoredGtid {
                    restored: restored("0-1-500"),
                    stop_replication: false,
                }),
                false,
                "adopting",
            ),
            Case {
                restored_gtid: waiting(""),
                ..case(
                    "replication that came with the backup is removed",
                    primary(),
                    observed(MySql, true, running()),
                )
            }
            .then(
                Some(AdoptRestoredGtid {
                    restored: restored(""),
                    stop_replication: true,
                }),
                false,
                "adopting the GTID position (none)",
            ),
            Case {
                restored_gtid: waiting("0-1-500"),
                ..case(
                    "adopted once already: again, harmlessly",
                    primary(),
                    adopted.clone(),
                )
            }
            .then(
                Some(AdoptRestoredGtid {
                    restored: restored("0-1-500"),
                    stop_replication: false,
                }),
                false,
                "adopting",
            ),
            Case {
                restored_gtid: waiting("0-1-500"),
                ..case(
                    "a server that logged more is never reset",
                    primary(),
                    logged_more,
                )
            }
            .then(None, false, "has logged 0-100-501 since"),
            Case {
                restored_gtid: waiting("0-1-500"),
                ..case(
                    "the role comes first",
                    Err("role unknown: no label".into()),
                    observed(MariaDb, true, None),
                )
            }
            .then(None, false, "role unknown"),
            Case {
                accounts: false,
                restored_gtid: waiting("0-1-500"),
                ..case(
                    "accounts before the position",
                    primary(),
                    observed(MariaDb, true, None),
                )
            }
            .then(Some(EnsureAccounts), false, "accounts"),
            Case {
                restored_gtid: GtidAdoption::Failed("cannot remove".into()),
                ..case("an unfinished adoption waits", primary(), adopted)
            }
            .then(None, false, "restored GTID position: cannot remove"),
        ];
        for c in cases {
            let src = source();
            let d = decide(&Situation {
                role: c.role.clone(),
                observed: &c.observed,
                source: &src,
                accounts_current: c.accounts,
                source_password_stale: c.stale,
                start_allowed: c.start_allowed,
                reconnect: c.reconnect,
                fence_hold: c.fence_hold,
                pending: &c.pending,
                restored_gtid: &c.restored_gtid,
                max_lag: Duration::from_secs(30),
                semi_sync_acks: c.semi_sync_acks,
            });
            assert_eq!(d.action, c.want_action, "{}: {d:?}", c.name);
            assert_eq!(d.ready, c.want_ready, "{}: {d:?}", c.name);
            assert!(
                d.reason.contains(c.reason_has),
                "{}: {:?}",
                c.name,
                d.reason
            );
        }
    }
}
