//! Table tests of [`super::plan`]: one case per member a pass can be.

use super::*;

const S4: Duration = Duration::from_secs(4);

struct Case {
    name: &'static str,
    engine: Engine,
    role: Option<Role>,
    lease: LeaseState,
    read_only: bool,
    fenced: bool,
    state: WatchdogState,
    want: WatchdogPlan,
}

/// A MariaDB primary holding a 4 s lease, writable, its watchdog installed and running with a
/// stamp at the lease's end: nothing to do.
fn case(name: &'static str) -> Case {
    Case {
        name,
        engine: Engine::MariaDb,
        role: Some(Role::Primary),
        lease: LeaseState::Held(S4),
        read_only: false,
        fenced: false,
        state: running(Some((3_900_000, true))),
        want: WatchdogPlan::NOTHING,
    }
}

fn running(stamp: Option<(i64, bool)>) -> WatchdogState {
    WatchdogState {
        scheduler_on: true,
        event_current: true,
        stamp,
    }
}

fn wants(install: bool, stamp: StampChange, scheduler: Option<bool>) -> WatchdogPlan {
    WatchdogPlan {
        install,
        stamp,
        scheduler,
    }
}

fn lapsed() -> LeaseState {
    LeaseState::Lapsed("the lease lapsed".into())
}

#[test]
fn the_stamp_follows_the_lease_of_a_primary_only() {
    let cases = [
        case("held, stamped near its end: nothing"),
        Case {
            read_only: true,
            state: WatchdogState::ABSENT,
            want: wants(true, StampChange::Set(S4), Some(true)),
            ..case("a new primary: installed, stamped, the scheduler started")
        },
        Case {
            state: running(Some((3_000_000, true))),
            want: wants(false, StampChange::Set(S4), None),
            ..case("held, renewed since: stamped again")
        },
        Case {
            state: running(Some((9_000_000, true))),
            want: wants(false, StampChange::Set(S4), None),
            ..case("held, a stamp beyond the lease: brought back to it")
        },
        Case {
            state: running(Some((4_100_000, true))),
            want: wants(false, StampChange::Set(S4), None),
            ..case("held, a stamp a little beyond the lease: brought back to it too")
        },
        Case {
            read_only: true,
            state: running(Some((4_000_000, false))),
            want: wants(false, StampChange::Set(S4), None),
            ..case("held, another server's stamp (a copied datadir): replaced")
        },
        Case {
            role: None,
            state: running(None),
            want: wants(false, StampChange::Set(S4), None),
            ..case("held, role unknown: stamped")
        },
        Case {
            state: WatchdogState {
                scheduler_on: false,
                ..running(Some((3_900_000, true)))
            },
            want: wants(false, StampChange::Keep, Some(true)),
            ..case("held, the scheduler stopped by hand: started again")
        },
        Case {
            state: WatchdogState {
                event_current: false,
                ..running(Some((3_900_000, true)))
            },
            want: wants(true, StampChange::Keep, None),
            ..case("held, the event dropped by hand: installed again")
        },
        Case {
            lease: lapsed(),
            state: WatchdogState::ABSENT,
            ..case("lapsed: left alone (the agent's own fence comes first)")
        },
        Case {
            lease: lapsed(),
            role: None,
            state: running(Some((-2_000_000, true))),
            ..case("lapsed, role unknown: left alone")
        },
        Case {
            fenced: true,
            read_only: true,
            state: WatchdogState::ABSENT,
            ..case("a hold on writes runs (its lock would stop the change): nothing")
        },
        Case {
            role: Some(Role::Replica),
            lease: lapsed(),
            read_only: true,
            state: running(Some((-5, true))),
            want: wants(false, StampChange::Clear, Some(false)),
            ..case("a read-only replica: stamp removed, scheduler stopped")
        },
        Case {
            role: Some(Role::Replica),
            lease: lapsed(),
            read_only: true,
            state: WatchdogState::ABSENT,
            want: wants(true, StampChange::Keep, None),
            ..case("a new replica: installed for a later promotion")
        },
        Case {
            role: Some(Role::Replica),
            lease: lapsed(),
            read_only: false,
            state: running(Some((-5, true))),
            ..case("a replica still writable (being demoted): the stamp stays")
        },
        Case {
            role: Some(Role::Replica),
            lease: lapsed(),
            read_only: true,
            state: WatchdogState {
                scheduler_on: false,
                ..running(None)
            },
            ..case("a settled replica: nothing")
        },
        Case {
            lease: LeaseState::NotRequired,
            state: running(Some((-5, true))),
            want: wants(false, StampChange::Clear, None),
            ..case("failover off: an old stamp removed, the scheduler left as it is")
        },
        Case {
            lease: LeaseState::NotRequired,
            state: WatchdogState::ABSENT,
            ..case("failover off, nothing there: nothing")
        },
        Case {
            engine: Engine::MySql,
            read_only: true,
            state: WatchdogState::ABSENT,
            ..case("MySQL: no watchdog")
        },
    ];
    for c in cases {
        let got = plan(&WatchdogInput {
            engine: c.engine,
            lease_required: c.lease != LeaseState::NotRequired,
            role: c.role,
            lease: &c.lease,
            read_only: c.read_only,
            fenced: c.fenced,
            state: &c.state,
        });
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn the_keeper_moves_the_stamp_of_a_leased_primary_only() {
    let keeps = |c: &Case| {
        keeps_stamp(
            c.engine,
            c.lease != LeaseState::NotRequired,
            c.role,
            &c.lease,
            c.fenced,
        )
    };
    let cases = [
        (case("a primary holding its lease"), true),
        (
            Case {
                role: None,
                ..case("role unknown, lease held")
            },
            true,
        ),
        (
            Case {
                lease: lapsed(),
                ..case("lease lapsed")
            },
            false,
        ),
        (
            Case {
                role: Some(Role::Replica),
                ..case("a replica")
            },
            false,
        ),
        (
            Case {
                fenced: true,
                ..case("a hold on writes")
            },
            false,
        ),
        (
            Case {
                lease: LeaseState::NotRequired,
                ..case("failover off")
            },
            false,
        ),
        (
            Case {
                state: WatchdogState::ABSENT,
                ..case("leased, the watchdog not in place yet (its install may fail)")
            },
            true,
        ),
        (
            Case {
                engine: Engine::MySql,
                ..case("MySQL")
            },
            false,
        ),
    ];
    for (c, want) in cases {
        assert_eq!(keeps(&c), want, "{}", c.name);
    }
}
