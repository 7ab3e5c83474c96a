//! Table tests of [`super::decide`]: one case per situation a pass can meet, by role.

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
        received: String::new(),
    }
}

fn observed(engine: Engine, read_only: bool, r: Option<ReplicaStatus>) -> Observed {
    Observed {
        engine,
        version: match engine {
            Engine::MariaDb => "10.11.19-MariaDB".into(),
            Engine::MySql => "8.4.3".into(),
        },
        read_only,
        super_read_only: engine == Engine::MySql && read_only,
        gtid_logged: String::new(),
        gtid_history: String::new(),
        semi_sync_wait: false,
        semi_sync_clients: 0,
        replicas_attached: 0,
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
    fence_unleased: bool,
    lease: LeaseState,
    load: LoadState,
    restored_gtid: GtidAdoption,
    semi_sync_acks: u32,
    source_lag: SourceLag,
    watchdog_missing: Option<&'static str>,
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
        fence_unleased: false,
        lease: LeaseState::NotRequired,
        watchdog_missing: None,
        load: LoadState::Nothing,
        restored_gtid: GtidAdoption::Nothing,
        source_lag: SourceLag::Within(Duration::from_secs(2)),
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
    let mut applied_elsewhere = elsewhere.clone();
    applied_elsewhere.io = IoState::Stopped;
    let mut unapplied_stopped_elsewhere = stopped_elsewhere.clone();
    unapplied_stopped_elsewhere.relay_applied = false;
    let mut applying_elsewhere = applied_elsewhere.clone();
    applying_elsewhere.relay_applied = false;
    applying_elsewhere.sql_caught_up = false;
    let mut broken = status(IoState::Stopped, false);
    broken.last_error = "Duplicate entry".into();
    let mut demoted = observed(MariaDb, true, None);
    demoted.gtid_logged = "0-101-42".into();
    let mut mysql_half_read_only = observed(MySql, true, running());
    mysql_half_read_only.super_read_only = false;
    let mut waiting_read_only = observed(MariaDb, true, None);
    waiting_read_only.semi_sync_wait = true;
    let with_clients = |clients: u32, waiting: bool, r: Option<ReplicaStatus>| {
        let mut o = observed(MariaDb, r.is_some(), r);
        o.semi_sync_clients = clients;
        o.semi_sync_wait = waiting;
        o
    };
    let cases =
        vec![
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
            load: LoadState::Waiting("B1".into()),
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
            load: LoadState::Loading("B1".into()),
            ..case(
                "loading is not ready",
                primary(),
                observed(MariaDb, false, None),
            )
        }
        .then(None, false, "loading backup B1"),
        Case {
            load: LoadState::Failed {
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
        // Seconds_Behind_Master says 0 whenever the applier is idle: the primary's own
        // position decides.
        Case {
            source_lag: SourceLag::Behind {
                at_least: Duration::from_secs(60),
                primary: "0-101-776".into(),
                replica: "0-100-24".into(),
            },
            ..case(
                "a replica 0s behind that lacks what the primary logged is not ready",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(
            None,
            false,
            "lacks what the primary had logged 60s ago or earlier, though it reports 0s behind: \
             the primary is at 0-101-776, this server at 0-100-24",
        ),
        Case {
            source_lag: SourceLag::Within(Duration::from_secs(31)),
            ..case(
                "a replica holding only what the primary logged long ago is not ready",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(
            None,
            false,
            "holds only what the primary had logged 31.0s ago (at most 30s), though it reports \
             0s behind",
        ),
        Case {
            source_lag: SourceLag::Diverged {
                primary: "0-101-30".into(),
                replica: "0-100-25,0-101-30".into(),
            },
            ..case(
                "a replica holding a commit the primary lacks is withheld",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(None, false, "withheld: it holds transactions the primary lacks"),
        Case {
            source_lag: SourceLag::Unreadable("connection refused".into()),
            ..case(
                "a replica that cannot read the primary's position is not ready",
                replica(),
                observed(MySql, true, running()),
            )
        }
        .then(
            None,
            false,
            "the primary's position cannot be read from quay-primary:3306: connection refused",
        ),
        Case {
            source_lag: SourceLag::Behind {
                at_least: Duration::from_millis(2500),
                primary: "0-101-776".into(),
                replica: "0-101-770".into(),
            },
            ..case(
                "a replica not yet shown to hold a recent position is not ready",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(
            None,
            false,
            "catching up: not yet shown to hold the primary's position read 2.5s ago",
        ),
        Case {
            source_lag: SourceLag::Unconfirmed("connection refused".into()),
            ..case(
                "a replica that cannot read the primary through the Service keeps its own word",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(
            None,
            true,
            "0s behind by its own account; the primary's position cannot be read through \
             quay-primary:3306: connection refused",
        ),
        Case {
            source_lag: SourceLag::NotMeasured,
            ..case(
                "a replica never measured is not ready",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(None, false, "not measured"),
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
            "moved source: the receiver stops first",
            replica(),
            observed(MariaDb, true, Some(elsewhere.clone())),
        )
        .then(
            Some(StopReplicationIo),
            false,
            "from 10.0.0.9:3306 to quay-primary:3306: stopping the receiver first",
        ),
        case(
            "moved source: what was received is applied before the relay log goes",
            replica(),
            observed(MariaDb, true, Some(applying_elsewhere)),
        )
        .then(None, false, "applying what was received first"),
        case(
            "moved source on MySQL, both threads stopped: the applier alone first",
            replica(),
            observed(MySql, true, Some(unapplied_stopped_elsewhere)),
        )
        .then(
            Some(StartReplicationSql),
            false,
            "applying what was received first",
        ),
        case(
            "moved source: everything received applied, the applier stops",
            replica(),
            observed(MariaDb, true, Some(applied_elsewhere)),
        )
        .then(
            Some(StopReplication),
            false,
            "re-pointing replication from 10.0.0.9:3306 to quay-primary:3306",
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
                "stale password, the same source: both threads stop at once",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(Some(StopReplication), false, "re-pointing"),
        Case {
            load: LoadState::Waiting("B1".into()),
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
        case(
            "a MariaDB with lossy crash recovery is never made primary",
            primary(),
            {
                let mut o = observed(MariaDb, true, None);
                o.version = "10.11.8-MariaDB-log".into();
                o
            },
        )
        .then(None, false, "MDEV-33465"),
        case("nor kept as one", primary(), {
            let mut o = observed(MariaDb, false, None);
            o.version = "11.4.2-MariaDB".into();
            o
        })
        .then(None, false, "run 11.4.3 or later"),
    ];
    check(cases);
}

/// Decides each case and compares the action, readiness and reason with what it wants.
fn check(cases: Vec<Case>) {
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
            fence_unleased: c.fence_unleased,
            lease: &c.lease,
            load: &c.load,
            restored_gtid: &c.restored_gtid,
            max_lag: Duration::from_secs(30),
            source_lag: &c.source_lag,
            semi_sync_acks: c.semi_sync_acks,
            watchdog_missing: c.watchdog_missing,
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

#[path = "topology_lease_tests.rs"]
mod lease;

#[path = "topology_load_tests.rs"]
mod load;

#[path = "topology_restored_tests.rs"]
mod restored;
