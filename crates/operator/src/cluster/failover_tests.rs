//! The failover decision's table tests.

use super::*;
use bulwark_contract::member::{IoState, MemberReplication};

fn replica(pod: &str, gtid: &str, io: IoState, applied: bool) -> MemberView {
    let mut report = super::super::roles::sample_report(gtid);
    report.role = Some(Role::Replica);
    report.replication = Some(MemberReplication {
        source_host: "db-primary".into(),
        source_port: 3306,
        io,
        sql_running: true,
        relay_applied: applied,
        sql_caught_up: applied,
        io_errno: 0,
        sql_errno: 0,
        lag_seconds: None,
        received: String::new(),
        source_unreachable_seconds: None,
        source_heard_ms: None,
    });
    MemberView {
        pod: pod.into(),
        labelled: Some(Role::Replica),
        labelled_epoch: Some(0),
        report: Ok(report),
    }
}

fn with_history(mut member: MemberView, history: &str) -> MemberView {
    if let Ok(r) = &mut member.report {
        r.gtid_history = history.into();
    }
    member
}

/// A replica that lost its source, has applied `executed` and received up to `position` (all
/// of it applied when they are equal), its applier failed with `sql_errno` (0: not).
fn receiving(pod: &str, executed: &str, position: &str, sql_errno: u32) -> MemberView {
    received(
        replica(pod, executed, IoState::Connecting, executed == position),
        position,
        sql_errno,
    )
}

/// `member` having received up to `position`, its applier failed with `sql_errno` (0: not).
fn received(mut member: MemberView, position: &str, sql_errno: u32) -> MemberView {
    if let Ok(r) = &mut member.report {
        let rep = r.replication.as_mut().expect("a replica");
        rep.received = position.into();
        rep.sql_errno = sql_errno;
        rep.sql_running = sql_errno == 0;
    }
    member
}

/// `member` whose agent has failed for `seconds` to reach the primary's server.
fn unreachable(mut member: MemberView, seconds: u64) -> MemberView {
    if let Ok(r) = &mut member.report {
        r.replication
            .as_mut()
            .expect("a replica")
            .source_unreachable_seconds = Some(seconds);
    }
    member
}

fn gone(pod: &str) -> MemberView {
    MemberView {
        pod: pod.into(),
        labelled: Some(Role::Primary),
        labelled_epoch: Some(0),
        report: Err("connection refused".into()),
    }
}

const AFTER: Duration = Duration::from_secs(30);

fn lost(secs: u64) -> Option<Duration> {
    Some(Duration::from_secs(secs))
}

/// What a case expects.
#[derive(Debug)]
enum Expect {
    Healthy,
    /// Waiting, with a reason that contains this.
    Waiting(&'static str),
    /// This pod is promoted.
    Promote(&'static str),
}
use Expect::*;

/// Name, members, how long the primary has been lost, the time before a takeover, and the
/// expected decision.
type Case = (
    &'static str,
    Vec<MemberView>,
    Option<Duration>,
    Duration,
    Expect,
);

#[test]
fn decisions() {
    let cases: Vec<Case> = vec![
        (
            "a primary that reports is healthy",
            vec![
                MemberView {
                    report: replica("db-0", "0-100-9", IoState::Stopped, true).report,
                    ..gone("db-0")
                },
                replica("db-1", "0-100-9", IoState::Connecting, true),
            ],
            lost(300),
            AFTER,
            Healthy,
        ),
        (
            "not lost while a replica still receives",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-9", IoState::Running, true),
            ],
            lost(300),
            AFTER,
            Healthy,
        ),
        (
            "not lost while a receiving replica's agent failed to reach the primary only briefly",
            vec![
                gone("db-0"),
                unreachable(replica("db-1", "0-100-9", IoState::Running, true), 2),
            ],
            lost(300),
            AFTER,
            Healthy,
        ),
        (
            "lost once the agents of the replicas whose receivers run cannot reach the primary",
            vec![
                gone("db-0"),
                unreachable(replica("db-1", "0-100-9", IoState::Running, true), 3),
                unreachable(replica("db-2", "0-100-9", IoState::Running, true), 9),
            ],
            lost(31),
            AFTER,
            Promote("db-1"),
        ),
        (
            "not lost while one replica still reaches the primary",
            vec![
                gone("db-0"),
                unreachable(replica("db-1", "0-100-9", IoState::Running, true), 9),
                replica("db-2", "0-100-9", IoState::Running, true),
            ],
            lost(300),
            AFTER,
            Healthy,
        ),
        (
            "lost, within the grace",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-9", IoState::Connecting, true),
            ],
            lost(10),
            AFTER,
            Waiting("a replica takes over once it has been lost for 30s"),
        ),
        (
            "failover off",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-9", IoState::Connecting, true),
            ],
            lost(300),
            Duration::ZERO,
            Waiting("automatic failover is off"),
        ),
        (
            "the most advanced replica is promoted",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-7", IoState::Connecting, true),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            lost(31),
            AFTER,
            Promote("db-2"),
        ),
        (
            "the replica that received the most is chosen, though another applied more",
            vec![
                gone("db-0"),
                receiving("db-1", "0-100-7", "0-100-12", 0),
                receiving("db-2", "0-100-9", "0-100-9", 0),
            ],
            lost(31),
            AFTER,
            Promote("db-1"),
        ),
        (
            "a replica whose applier failed does not block a choice that has its transactions",
            vec![
                gone("db-0"),
                receiving("db-1", "0-100-7", "0-100-9", 1062),
                receiving("db-2", "0-100-9", "0-100-9", 0),
            ],
            lost(31),
            AFTER,
            Promote("db-2"),
        ),
        (
            "the only replica that received everything cannot apply it: nobody",
            vec![
                gone("db-0"),
                receiving("db-1", "0-100-7", "0-100-12", 1062),
                receiving("db-2", "0-100-9", "0-100-9", 0),
            ],
            lost(31),
            AFTER,
            Waiting("only db-1 received every transaction, and its applier failed (error 1062)"),
        ),
        (
            "a replica that says nothing of what it received and whose applier failed with \
             its relay log unapplied makes the choice wait (its relay log may hold the only \
             copy)",
            vec![
                gone("db-0"),
                receiving("db-1", "0-100-7", "", 1062),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            lost(31),
            AFTER,
            Waiting("waiting for db-1 to apply"),
        ),
        (
            "a received position that does not parse makes the choice wait",
            vec![
                gone("db-0"),
                receiving("db-1", "0-100-7", "0-100-x", 0),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            lost(31),
            AFTER,
            Waiting("what db-1 reports it holds does not parse"),
        ),
        (
            "a replica still applying that says nothing of what it received makes the choice \
             wait",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-7", IoState::Stopped, false),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            lost(31),
            AFTER,
            Waiting("waiting for db-1 to apply"),
        ),
        (
            "diverging replicas: nobody",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-7,1-101-3", IoState::Connecting, true),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            lost(31),
            AFTER,
            Waiting("diverge"),
        ),
        (
            "a rejoined old primary's unacknowledged commit, behind the position of a \
             replica that never had it: nobody",
            vec![
                gone("db-0"),
                with_history(
                    replica("db-1", "0-101-200", IoState::Connecting, true),
                    "0-100-39,0-101-200",
                ),
                with_history(
                    replica("db-2", "0-100-40", IoState::Connecting, true),
                    "0-100-40",
                ),
            ],
            lost(31),
            AFTER,
            Waiting("diverge"),
        ),
        (
            "histories that agree: the most advanced",
            vec![
                gone("db-0"),
                with_history(
                    replica("db-1", "0-101-200", IoState::Connecting, true),
                    "0-100-39,0-101-200",
                ),
                with_history(
                    replica("db-2", "0-101-150", IoState::Connecting, true),
                    "0-100-39,0-101-150",
                ),
            ],
            lost(31),
            AFTER,
            Promote("db-1"),
        ),
        (
            "a deleted primary pod counts as lost",
            vec![replica("db-1", "0-100-9", IoState::Connecting, true)],
            lost(31),
            AFTER,
            Promote("db-1"),
        ),
        (
            "nothing known of the replicas: no takeover",
            vec![
                gone("db-0"),
                MemberView {
                    labelled: Some(Role::Replica),
                    labelled_epoch: Some(0),
                    ..gone("db-1")
                },
            ],
            lost(300),
            AFTER,
            Healthy,
        ),
        (
            "not yet seen lost",
            vec![
                gone("db-0"),
                replica("db-1", "0-100-9", IoState::Connecting, true),
            ],
            None,
            AFTER,
            Healthy,
        ),
    ];
    for (name, members, lost_for, after, want) in cases {
        // Every replica of these clusters is in the views, one acknowledgement each.
        let replicas = members.iter().filter(|m| m.pod != "db-0").count();
        let rules = Rules {
            after,
            ..rules(replicas, 1, None)
        };
        check(name, &decide(&rules, "db-0", &members, lost_for), &want);
    }
}

fn rules(
    replicas: usize,
    acks: u32,
    forced: Option<(&'static str, &'static str)>,
) -> Rules<'static> {
    Rules {
        engine: Engine::MariaDb,
        semi_sync: SemiSync {
            acks,
            timeout: None,
            members: replicas as u32 + 1,
        },
        after: AFTER,
        forced,
        lease_outstanding: Duration::ZERO,
        renewals: RenewalTerms::default(),
    }
}

fn check(name: &str, got: &Failover, want: &Expect) {
    match (want, got) {
        (Healthy, Failover::Healthy) => {}
        (Waiting(needle), Failover::Waiting(reason)) if reason.contains(needle) => {}
        (Promote(pod), Failover::Promote { to, .. }) if to == pod => {}
        _ => panic!("{name}: expected {want:?}, got {got:?}"),
    }
}

/// A member of the primary's side of a cut: no report reaches the operator.
fn silent(pod: &str) -> MemberView {
    MemberView {
        labelled: Some(Role::Replica),
        ..gone(pod)
    }
}

#[test]
fn a_choice_waits_until_no_silent_replica_can_hold_an_acknowledged_commit() {
    // Name, replicas in the spec, acknowledgements, a force request, the members, the
    // expected decision.
    type QuorumCase = (
        &'static str,
        usize,
        u32,
        Option<(&'static str, &'static str)>,
        Vec<MemberView>,
        Expect,
    );
    let cases: Vec<QuorumCase> = vec![
        (
            "{primary, db-1} cut from {operator, db-2}: db-1 may hold acknowledged commits",
            2,
            1,
            None,
            vec![
                gone("db-0"),
                silent("db-1"),
                replica("db-2", "0-100-129", IoState::Connecting, true),
            ],
            Waiting("1 of 2 replicas report (db-1 silent or missing)"),
        ),
        (
            "a replica whose pod is gone counts as silent",
            2,
            1,
            None,
            vec![
                gone("db-0"),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            Waiting("1 of 2 replicas report (the others silent or missing)"),
        ),
        (
            "every replica reports: the most advanced",
            2,
            1,
            None,
            vec![
                gone("db-0"),
                replica("db-1", "0-100-485", IoState::Connecting, true),
                replica("db-2", "0-100-129", IoState::Connecting, true),
            ],
            Promote("db-1"),
        ),
        (
            "four replicas, two acknowledgements: three reporting suffice",
            4,
            2,
            None,
            vec![
                gone("db-0"),
                silent("db-1"),
                replica("db-2", "0-100-9", IoState::Connecting, true),
                replica("db-3", "0-100-7", IoState::Connecting, true),
                replica("db-4", "0-100-8", IoState::Connecting, true),
            ],
            Promote("db-2"),
        ),
        (
            "four replicas, two acknowledgements: two reporting do not",
            4,
            2,
            None,
            vec![
                gone("db-0"),
                silent("db-1"),
                silent("db-2"),
                replica("db-3", "0-100-9", IoState::Connecting, true),
                replica("db-4", "0-100-8", IoState::Connecting, true),
            ],
            Waiting("no replica is promoted until 3 report"),
        ),
        (
            "asynchronous replication: the reporting replicas decide (writes may be lost)",
            2,
            0,
            None,
            vec![
                gone("db-0"),
                silent("db-1"),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            Promote("db-2"),
        ),
        (
            "forced: the named reporting replica, recorded",
            2,
            1,
            Some(("db-2", "db-2")),
            vec![
                gone("db-0"),
                silent("db-1"),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            Promote("db-2"),
        ),
        (
            "forced to a silent replica: nothing",
            2,
            1,
            Some(("db-1", "db-1")),
            vec![
                gone("db-0"),
                silent("db-1"),
                replica("db-2", "0-100-9", IoState::Connecting, true),
            ],
            Waiting("until 2 report; mysql.bulwark.dev/force-failover names db-1, which is not a reporting replica"),
        ),
        (
            "forced to a replica that lacks what another reporting one has: nothing",
            3,
            1,
            Some(("db-3@2", "db-3")),
            vec![
                gone("db-0"),
                silent("db-1"),
                replica("db-2", "0-100-9", IoState::Connecting, true),
                replica("db-3", "0-100-7", IoState::Connecting, true),
            ],
            Waiting("names db-3, which lacks transactions"),
        ),
    ];
    for (name, replicas, acks, forced, members, want) in cases {
        let got = decide(&rules(replicas, acks, forced), "db-0", &members, lost(31));
        check(name, &got, &want);
        if let (
            Some((value, _)),
            Failover::Promote {
                request, reason, ..
            },
        ) = (forced, &got)
        {
            assert_eq!(request.as_deref(), Some(value), "{name}");
            assert!(reason.starts_with("forced by"), "{name}: {reason}");
        }
    }
}

#[test]
fn a_force_request_is_taken_once() {
    assert_eq!(forced_request(Some("db-2"), None), Some(("db-2", "db-2")));
    assert_eq!(
        forced_request(Some("db-2@2"), Some("db-2")),
        Some(("db-2@2", "db-2"))
    );
    assert_eq!(forced_request(Some("db-2"), Some("db-2")), None);
    assert_eq!(forced_request(Some(" "), None), None);
    assert_eq!(forced_request(None, None), None);
}

#[test]
fn lost_is_judged_from_the_reports() {
    assert!(
        primary_lost("db-0", &[gone("db-0")]).is_none(),
        "no replica reports"
    );
    assert!(primary_lost(
        "db-0",
        &[gone("db-0"), replica("db-1", "", IoState::Connecting, true)]
    )
    .is_some_and(|w| w.contains("db-0 does not report")));
}

#[test]
fn nothing_is_promoted_while_the_lost_primary_may_still_hold_its_lease() {
    let members = vec![
        gone("db-0"),
        replica("db-1", "0-100-9", IoState::Stopped, true),
        replica("db-2", "0-100-8", IoState::Stopped, true),
    ];
    let held = |outstanding: u64, forced| Rules {
        lease_outstanding: Duration::from_secs(outstanding),
        ..rules(2, 1, forced)
    };
    let cases = [
        (
            "lease outstanding",
            held(3, None),
            Waiting("may still hold the lease"),
        ),
        (
            "forced, lease outstanding",
            held(3, Some(("db-2", "db-2"))),
            Waiting("before that lease has lapsed and db-0 has fenced itself"),
        ),
        ("lease lapsed", held(0, None), Promote("db-1")),
    ];
    for (name, rules, want) in cases {
        check(name, &decide(&rules, "db-0", &members, lost(300)), &want);
    }
    // Before the takeover time is up, that is what the message says.
    check(
        "not lost long enough",
        &decide(&held(3, None), "db-0", &members, lost(1)),
        &Waiting("once it has been lost for 30s"),
    );
}

#[test]
fn a_choice_is_replaced_only_by_a_replica_that_holds_everything() {
    let chosen = |gtid: &str| receiving("db-1", gtid, gtid, 0);
    // Name, the members (db-0 failed, db-1 chosen at epoch 2), the replica chosen instead.
    let cases: Vec<(&str, Vec<MemberView>, Option<&str>)> = vec![
        (
            "db-2 received more, applied or not",
            vec![
                gone("db-0"),
                chosen("0-1-12"),
                receiving("db-2", "0-1-11", "0-1-14", 0),
            ],
            Some("db-2"),
        ),
        (
            "db-2 received more but its applier failed: nobody else holds everything",
            vec![
                gone("db-0"),
                chosen("0-1-12"),
                receiving("db-2", "0-1-11", "0-1-14", 1062),
            ],
            None,
        ),
        (
            "db-3 holds more than db-1, db-2 more than both on another branch: none is complete",
            vec![
                gone("db-0"),
                chosen("0-1-12"),
                with_history(receiving("db-2", "0-2-15", "0-2-15", 0), "0-1-11,0-2-15"),
                receiving("db-3", "0-1-14", "0-1-14", 0),
            ],
            None,
        ),
        (
            "a report that does not parse decides nothing",
            vec![
                gone("db-0"),
                chosen("0-1-12"),
                receiving("db-2", "0-1-14", "0-1-14", 0),
                receiving("db-3", "garbage", "garbage", 0),
            ],
            None,
        ),
        (
            "db-2 still receives from the lost primary: its sets still grow",
            vec![gone("db-0"), chosen("0-1-12"), {
                let mut m = receiving("db-2", "0-1-14", "0-1-14", 0);
                if let Ok(r) = &mut m.report {
                    let rep = r.replication.as_mut().unwrap();
                    (rep.io, rep.source_host) = (IoState::Running, "db-0.db-members".into());
                }
                m
            }],
            None,
        ),
        (
            "the chosen replica is promoted already",
            vec![
                gone("db-0"),
                {
                    let mut m = chosen("0-1-12");
                    if let Ok(r) = &mut m.report {
                        (r.role, r.epoch) = (Some(Role::Primary), 2);
                    }
                    m
                },
                receiving("db-2", "0-1-14", "0-1-14", 0),
            ],
            None,
        ),
    ];
    for (name, members, want) in cases {
        let got = revisit(
            Engine::MariaDb,
            ("db-0", "db-0.db-members"),
            "db-1",
            2,
            Duration::ZERO,
            &members,
        );
        assert_eq!(got.as_ref().map(|(to, _)| to.as_str()), want, "{name}");
    }
}

#[test]
fn a_choice_is_not_looked_at_again_while_a_lease_may_be_held() {
    let members = vec![
        gone("db-0"),
        receiving("db-1", "0-1-12", "0-1-12", 0),
        receiving("db-2", "0-1-14", "0-1-14", 0),
    ];
    let at = |lease: u64| {
        revisit(
            Engine::MariaDb,
            ("db-0", "db-0.db-members"),
            "db-1",
            2,
            Duration::from_secs(lease),
            &members,
        )
        .map(|(to, _)| to)
    };
    assert_eq!(at(3), None);
    assert_eq!(at(0).as_deref(), Some("db-2"));
}

#[path = "failover_renewal_tests.rs"]
mod renewals;
