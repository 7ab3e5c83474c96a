//! The failover decision's table tests for the lease its replicas renew: how many renewals
//! are asked for, and what a failover waits out.

use super::*;

#[test]
fn renewals_keep_as_many_replicas_as_may_be_silent_plus_one() {
    let semi = |members: u32, acks: u32, timeout: Option<u64>| SemiSync {
        acks,
        timeout: timeout.map(Duration::from_secs),
        members,
    };
    // Name, the semi-sync settings, the renewals needed.
    let cases = [
        ("a single member: no replica to renew", semi(1, 0, None), 0),
        (
            "3 members, 1 ack: both report, one renewing is enough",
            semi(3, 1, None),
            1,
        ),
        (
            "3 members, asynchronous: one may report, both must renew",
            semi(3, 0, None),
            2,
        ),
        (
            "3 members, a timeout: the same number report",
            semi(3, 1, Some(10)),
            1,
        ),
        ("5 members, 1 ack: all report", semi(5, 1, None), 1),
        ("5 members, 2 acks: 3 of 4 report", semi(5, 2, None), 2),
        ("5 members, 3 acks: 2 of 4 report", semi(5, 3, None), 3),
        ("2 members, 1 ack", semi(2, 1, None), 1),
    ];
    for (name, semi, want) in cases {
        assert_eq!(followers_needed(&semi), want, "{name}");
        // The disjointness the safety rests on: the renewers needed outnumber the replicas a
        // failover may leave silent.
        let replicas = semi.members.saturating_sub(1);
        let may_be_silent = replicas - reports_needed(&semi).map_or(1, |n| n as u32).min(replicas);
        assert!(replicas == 0 || want > may_be_silent, "{name}");
    }
}

#[test]
fn a_replica_that_renewed_the_lease_lately_is_waited_out() {
    let renewed = |mut m: MemberView, ms: u64| {
        if let Ok(r) = &mut m.report {
            r.followed_ms = Some(ms);
        }
        m
    };
    let members = |db2_ms| {
        vec![
            gone("db-0"),
            renewed(replica("db-1", "0-100-9", IoState::Stopped, true), 60_000),
            renewed(replica("db-2", "0-100-8", IoState::Stopped, true), db2_ms),
        ]
    };
    // The lease for 30 s is 26 s; with the margin, 30 s.
    check(
        "db-2 renewed 29 s ago",
        &decide(&rules(2, 1, None), "db-0", &members(29_000), lost(300)),
        &Waiting("db-2 renewed db-0's lease less than 30s ago"),
    );
    check(
        "db-2 renewed 31 s ago",
        &decide(&rules(2, 1, None), "db-0", &members(31_000), lost(300)),
        &Promote("db-1"),
    );
    // An agent of the release before says nothing of renewals, and renews nothing.
    let mut old = members(0);
    if let Ok(r) = &mut old[2].report {
        r.followed_ms = None;
    }
    check(
        "no renewals reported",
        &decide(&rules(2, 1, None), "db-0", &old, lost(300)),
        &Promote("db-1"),
    );
}

#[test]
fn a_failover_waits_while_silent_replicas_may_keep_the_lease() {
    let asked = |outstanding: u64, fewest: u32| RenewalTerms {
        outstanding: Duration::from_secs(outstanding),
        fewest,
        longest: Duration::from_secs(26),
    };
    let one_silent = vec![
        gone("db-0"),
        silent("db-1"),
        replica("db-2", "0-100-8", IoState::Stopped, true),
    ];
    let reporting = vec![
        gone("db-0"),
        replica("db-1", "0-100-9", IoState::Stopped, true),
        replica("db-2", "0-100-8", IoState::Stopped, true),
    ];
    let forced = |renewals| Rules {
        renewals,
        ..rules(2, 1, Some(("db-2", "db-2")))
    };
    let plain = |renewals, replicas, acks| Rules {
        renewals,
        ..rules(replicas, acks, None)
    };
    // Name, rules, members, expected.
    let cases: Vec<(&str, Rules, Vec<MemberView>, Expect)> = vec![
        (
            "forced, and the silent one may keep the lease",
            forced(asked(200, 1)),
            one_silent.clone(),
            Waiting("1 replica may be renewing db-0's lease unseen"),
        ),
        (
            "forced, once renewals can no longer keep it",
            forced(asked(0, 1)),
            one_silent.clone(),
            Promote("db-2"),
        ),
        (
            "forced, no renewals ever asked for",
            forced(asked(200, 0)),
            one_silent.clone(),
            Promote("db-2"),
        ),
        (
            "every replica reports: none may be renewing unseen",
            plain(asked(200, 1), 2, 1),
            reporting.clone(),
            Promote("db-1"),
        ),
        (
            "a scale-down keeps a third replica's pod: it may be renewing",
            plain(asked(200, 1), 1, 1),
            vec![reporting[0].clone(), reporting[1].clone(), silent("db-2")],
            Waiting("1 replica may be renewing db-0's lease unseen"),
        ),
        (
            "asynchronous: one report suffices, but the other may be renewing",
            plain(asked(200, 1), 2, 0),
            one_silent.clone(),
            Waiting("(it was asked for renewals from 1)"),
        ),
        (
            "asynchronous, asked of both: the silent one alone keeps nothing",
            plain(asked(200, 2), 2, 0),
            one_silent,
            Promote("db-2"),
        ),
    ];
    for (name, rules, members, want) in cases {
        check(name, &decide(&rules, "db-0", &members, lost(300)), &want);
    }
    // The longest lease asked for is what a renewal is waited out by.
    let mut late = reporting.clone();
    if let Ok(r) = &mut late[2].report {
        r.followed_ms = Some(35_000);
    }
    check(
        "a renewal 35 s ago under a 40 s lease granted before the spec changed",
        &decide(
            &plain(
                RenewalTerms {
                    longest: Duration::from_secs(40),
                    ..asked(0, 1)
                },
                2,
                1,
            ),
            "db-0",
            &late,
            lost(300),
        ),
        &Waiting("db-2 renewed db-0's lease less than 44s ago"),
    );
}
