//! The primary's lease in the agent's decision: fencing when it lapses, ahead of everything
//! else, and releasing when it is renewed or the member is demoted.

use super::*;

#[test]
fn lease_decisions() {
    use Action::*;
    use Engine::{MariaDb, MySql};
    let primary = || Ok(Role::Primary);
    let replica = || Ok(Role::Replica);
    let running = || Some(status(IoState::Running, true));
    let mut promoting = status(IoState::Stopped, true);
    promoting.relay_applied = false;
    promoting.sql_caught_up = false;
    let mut demoted = observed(MariaDb, true, None);
    demoted.gtid_logged = "0-101-42".into();
    let mut mysql_half_read_only_primary = observed(MySql, true, None);
    mysql_half_read_only_primary.super_read_only = false;
    let lapsed =
        || LeaseState::Lapsed("the lease lapsed: no heartbeat from the operator within 6s".into());
    let cases = vec![
        Case {
            lease: LeaseState::Held(Duration::from_secs(4)),
            watchdog_missing: Some("failed to run `SET GLOBAL event_scheduler = ON`"),
            ..case(
                "a leased primary without the server's watchdog stays read-only",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(
            None,
            false,
            "read-only until the server's lease watchdog is in place: failed to run",
        ),
        Case {
            lease: LeaseState::Held(Duration::from_secs(4)),
            ..case(
                "with the watchdog in place it is made writable",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(Some(SetWritable), false, "promoting"),
        Case {
            lease: lapsed(),
            watchdog_missing: Some("the lease watchdog is not installed yet"),
            ..case(
                "a missing watchdog never holds up the agent's own fence",
                primary(),
                observed(MariaDb, false, None),
            )
        }
        .then(Some(FenceUnleased), false, "primary fencing itself"),
        Case {
            lease: lapsed(),
            ..case(
                "a writable primary whose lease lapsed fences itself",
                primary(),
                observed(MariaDb, false, None),
            )
        }
        .then(
            Some(FenceUnleased),
            false,
            "primary fencing itself: the lease lapsed",
        ),
        Case {
            lease: lapsed(),
            ..case(
                "a read-only MariaDB primary without a lease holds its writes (root could commit)",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(Some(FenceUnleased), false, "fencing itself"),
        Case {
            lease: lapsed(),
            fence_hold: Some(Duration::MAX),
            fence_unleased: true,
            load: LoadState::Waiting("B1".into()),
            ..case(
                "a fenced primary waits for its lease before anything else",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(
            None,
            false,
            "primary, fenced: the lease lapsed: no heartbeat from the operator within 6s; \
             writes resume once the operator renews the lease",
        ),
        Case {
            lease: lapsed(),
            fence_hold: Some(Duration::from_secs(3)),
            ..case(
                "a demotion's hold is no lapsed lease's: it is made to last",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(Some(FenceUnleased), false, "fencing itself"),
        Case {
            lease: lapsed(),
            ..case(
                "a MySQL primary is fenced by super_read_only",
                primary(),
                observed(MySql, true, None),
            )
        }
        .then(None, false, "primary, fenced"),
        Case {
            lease: lapsed(),
            ..case(
                "a MySQL primary with super_read_only off is not",
                primary(),
                mysql_half_read_only_primary,
            )
        }
        .then(Some(FenceUnleased), false, "fencing itself"),
        Case {
            lease: lapsed(),
            ..case(
                "a member promoted before its lease came fences before applying",
                primary(),
                observed(MariaDb, true, Some(promoting)),
            )
        }
        .then(Some(FenceUnleased), false, "fencing itself"),
        Case {
            lease: LeaseState::Held(Duration::from_secs(4)),
            fence_hold: Some(Duration::MAX),
            fence_unleased: true,
            accounts: false,
            ..case(
                "a renewed lease releases the hold before the accounts are converged",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(Some(ReleaseFence), false, "the lease is renewed"),
        Case {
            lease: LeaseState::Held(Duration::from_secs(4)),
            ..case(
                "a primary holding its lease takes writes",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(Some(SetWritable), false, "turning read_only off"),
        Case {
            lease: lapsed(),
            fence_hold: Some(Duration::MAX),
            fence_unleased: true,
            ..case(
                "a replica needs no lease: a lapsed lease's hold is released",
                replica(),
                demoted.clone(),
            )
        }
        .then(
            Some(EndFenceAfterHold),
            false,
            "demoted while fenced for want of a lease: holding writes",
        ),
        Case {
            lease: lapsed(),
            accounts: false,
            fence_hold: Some(Duration::MAX),
            fence_unleased: true,
            ..case(
                "a fenced primary converges nothing while its writes are held",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(None, false, "primary, fenced"),
        Case {
            lease: lapsed(),
            accounts: false,
            ..case(
                "a lapsed lease fences before the accounts are converged",
                primary(),
                observed(MariaDb, false, None),
            )
        }
        .then(Some(FenceUnleased), false, "fencing itself"),
        Case {
            lease: lapsed(),
            ..case(
                "and while the role is unknown",
                Err("role unknown: the labels file is unreadable".into()),
                observed(MariaDb, false, None),
            )
        }
        .then(Some(FenceUnleased), false, "fencing itself"),
        Case {
            lease: lapsed(),
            accounts: false,
            ..case(
                "a replica is no primary to fence",
                replica(),
                observed(MariaDb, true, running()),
            )
        }
        .then(Some(EnsureAccounts), false, "ensuring accounts"),
    ];
    check(cases);
}
