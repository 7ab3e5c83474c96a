//! The priority order of the cluster pass, case by case.

use super::*;
use crate::cluster::roles::sample_view;
use bulwark_contract::member::{IoState, MemberReplication};
use rollout::Step;

const NOW: &str = "2026-11-25T12:00:00Z";

fn now() -> DateTime<Utc> {
    NOW.parse().unwrap()
}

fn ago(seconds: i64) -> Time {
    Time(now() - chrono::Duration::seconds(seconds))
}

/// A loss counted from `ms` milliseconds ago, as the status records it.
fn lost_ago_ms(ms: i64) -> MicroTime {
    MicroTime(now() - chrono::Duration::milliseconds(ms))
}

/// The status of a cluster whose primary `primary` has served at `epoch`.
fn serving(primary: &str, epoch: i64) -> MySQLClusterStatus {
    MySQLClusterStatus {
        current_primary: Some(primary.into()),
        primary_since: Some(ago(3600)),
        epoch: Some(epoch),
        ..MySQLClusterStatus::default()
    }
}

/// `status` whose primary has been lost for `seconds`.
fn lost_for(mut status: MySQLClusterStatus, seconds: i64) -> MySQLClusterStatus {
    status.primary_lost_since = Some(lost_ago_ms(seconds * 1000 + 250));
    status
}

/// `status` with a switchover from `from` to `to` running for `seconds` (the status names `to`
/// the primary, at the epoch the switchover raised).
fn switching(
    mut status: MySQLClusterStatus,
    from: &str,
    to: &str,
    seconds: i64,
) -> MySQLClusterStatus {
    status.current_primary = Some(to.into());
    status.last_switchover = Some(SwitchoverRecord {
        request: format!("{to}@1"),
        from: from.into(),
        to: to.into(),
        started: ago(seconds),
        finished: None,
        result: None,
        message: None,
    });
    status
}

fn primary(pod: &str, epoch: u64) -> MemberView {
    sample_view(pod, Role::Primary, epoch, false, None)
}

fn replica(pod: &str, epoch: u64) -> MemberView {
    sample_view(pod, Role::Replica, epoch, true, Some(0))
}

/// A replica whose source went away: it receives nothing.
fn orphaned(pod: &str, gtid: &str) -> MemberView {
    let mut v = replica(pod, 1);
    let r = v.report.as_mut().unwrap();
    r.gtid_executed = gtid.into();
    r.replication = Some(MemberReplication {
        io: IoState::Connecting,
        lag_seconds: None,
        ..r.replication.clone().unwrap()
    });
    v
}

fn silent(pod: &str) -> MemberView {
    MemberView {
        pod: pod.into(),
        labelled: Some(Role::Primary),
        labelled_epoch: Some(1),
        report: Err("connection refused".into()),
    }
}

/// Pods of a rollout: `updated[o]` for ordinal `o`, every one ready.
fn pods(updated: &[bool]) -> Vec<rollout::Pod> {
    updated
        .iter()
        .enumerate()
        .map(|(o, u)| rollout::Pod {
            name: format!("quay-{o}"),
            ordinal: o as i32,
            updated: *u,
            ready: true,
            terminating: false,
        })
        .collect()
}

/// What a plan comes to, for comparing with a case's expectation.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Nothing to do but keep the members where they are.
    Steady,
    /// The primary is lost and not replaced yet.
    Waiting,
    /// The status read is older than the members: nothing moves.
    Stale,
    FailoverTo(String),
    SwitchoverRunning,
    SwitchoverCompleted,
    SwitchoverAborted,
    SwitchoverRefused,
    SwitchoverTo(String, HandOver),
    ScaleDownBlocked,
    Rollout(Step),
}

fn outcome(plan: &Plan) -> Outcome {
    match &plan.transition {
        Transition::Failover { to, .. } => Outcome::FailoverTo(to.clone()),
        Transition::SwitchoverAborted(_) => Outcome::SwitchoverAborted,
        Transition::SwitchoverStarted { record, cause } => {
            Outcome::SwitchoverTo(record.to.clone(), *cause)
        }
        Transition::Hold(h) => match (&h.finished, &h.switching) {
            (Some(Finished::Completed(_)), _) => Outcome::SwitchoverCompleted,
            (Some(Finished::Refused(_)), _) => Outcome::SwitchoverRefused,
            (None, Some(_)) => Outcome::SwitchoverRunning,
            (None, None) if h.stale.is_some() => Outcome::Stale,
            (None, None) if h.waiting.is_some() => Outcome::Waiting,
            (None, None) if h.scale_down_blocked.is_some() => Outcome::ScaleDownBlocked,
            (None, None) if h.rollout != Step::Done => Outcome::Rollout(h.rollout.clone()),
            (None, None) => Outcome::Steady,
        },
    }
}

struct Case {
    name: &'static str,
    members: i32,
    status: MySQLClusterStatus,
    annotation: Option<&'static str>,
    views: Vec<MemberView>,
    rollout: Option<Vec<rollout::Pod>>,
    deleting: Vec<String>,
    /// The status was read from the API server in the pass.
    confirmed: bool,
    /// When the status' primary last answered a heartbeat.
    answered: Option<DateTime<Utc>>,
    expect: Outcome,
}

fn case(
    name: &'static str,
    status: MySQLClusterStatus,
    views: Vec<MemberView>,
    expect: Outcome,
) -> Case {
    Case {
        name,
        members: 3,
        status,
        annotation: None,
        views,
        rollout: None,
        deleting: Vec::new(),
        confirmed: false,
        answered: None,
        expect,
    }
}

impl Case {
    fn asking(mut self, annotation: &'static str) -> Case {
        self.annotation = Some(annotation);
        self
    }
    fn confirmed(mut self) -> Case {
        self.confirmed = true;
        self
    }
    fn members(mut self, members: i32) -> Case {
        self.members = members;
        self
    }
    fn deleting(mut self, pods: &[&str]) -> Case {
        self.deleting = pods.iter().map(|p| (*p).to_owned()).collect();
        self
    }
    fn rolling(mut self, updated: &[bool]) -> Case {
        self.rollout = Some(pods(updated));
        self
    }
    fn plan(&self) -> Plan {
        plan(&Inputs {
            cluster: "quay",
            engine: Engine::MariaDb,
            members: self.members,
            force_failover: None,
            semi_sync: SemiSync {
                acks: 1,
                timeout: None,
                members: self.members as u32,
            },
            failover_after: Duration::from_secs(10),
            switchover_timeout: Duration::from_secs(60),
            status: &self.status,
            status_confirmed: self.confirmed,
            annotation: self.annotation,
            views: &self.views,
            rollout: self.rollout.as_deref(),
            backup_sources: &[],
            deleting: &self.deleting,
            lease_outstanding: Duration::ZERO,
            renewals: Default::default(),
            primary_answered: self.answered,
            now: now(),
        })
    }
}

/// `healthy()` with the primary's pod waiting in its preStop hooks for a hand-over.
fn primary_waiting() -> Vec<MemberView> {
    let mut v = healthy();
    if let Ok(r) = &mut v[0].report {
        r.handover_pending = true;
    }
    v
}

fn healthy() -> Vec<MemberView> {
    vec![
        primary("quay-0", 1),
        replica("quay-1", 1),
        replica("quay-2", 1),
    ]
}

/// quay-1 took over from the silent quay-0 at epoch 2, quay-2 follows it.
fn promoted_at_2() -> Vec<MemberView> {
    vec![silent("quay-0"), primary("quay-1", 2), replica("quay-2", 2)]
}

/// The primary quay-0 gives no report; quay-1 holds more than quay-2.
fn primary_gone() -> Vec<MemberView> {
    vec![
        silent("quay-0"),
        orphaned("quay-1", "0-1-12"),
        orphaned("quay-2", "0-1-11"),
    ]
}

#[test]
fn the_pass_takes_one_transition_in_priority_order() {
    use HandOver::{Deleting, Requested, ScaleDown};
    use Outcome::*;
    let promoted = || {
        let mut v = primary_gone();
        v[1] = primary("quay-1", 2);
        v
    };
    let cases = [
        case(
            "a healthy cluster is left as it is",
            serving("quay-0", 1),
            healthy(),
            Steady,
        ),
        case(
            "an older copy of the status, members moved on but none promoted yet: nothing moves",
            lost_for(serving("quay-0", 1), 60),
            vec![silent("quay-0"), replica("quay-1", 2), replica("quay-2", 2)],
            Stale,
        ),
        case(
            "an older copy of the status never fails over again",
            lost_for(serving("quay-0", 1), 60),
            promoted_at_2(),
            Steady,
        ),
        case(
            "a new cluster's first primary is no failover",
            MySQLClusterStatus::default(),
            primary_gone(),
            Steady,
        ),
        case(
            "a lost primary waits for the configured time",
            lost_for(serving("quay-0", 1), 5),
            primary_gone(),
            Waiting,
        ),
        case(
            "a primary lost for long enough is replaced by the replica holding the most",
            lost_for(serving("quay-0", 1), 11),
            primary_gone(),
            FailoverTo("quay-1".into()),
        ),
        case(
            "a single member is never failed over",
            lost_for(serving("quay-0", 1), 600),
            primary_gone(),
            Steady,
        )
        .members(1),
        case(
            "a failover goes before a switchover request",
            lost_for(serving("quay-0", 1), 11),
            primary_gone(),
            FailoverTo("quay-1".into()),
        )
        .asking("quay-2@1"),
        case(
            "a request waits while the primary is lost",
            lost_for(serving("quay-0", 1), 5),
            primary_gone(),
            Waiting,
        )
        .asking("quay-2@1"),
        case(
            "a failover goes before a running switchover",
            lost_for(switching(serving("quay-0", 1), "quay-2", "quay-0", 5), 11),
            primary_gone(),
            FailoverTo("quay-1".into()),
        ),
        case(
            "a switchover whose replica took writes completes",
            switching(serving("quay-0", 2), "quay-0", "quay-1", 3),
            promoted(),
            SwitchoverCompleted,
        ),
        case(
            "a switchover under way keeps running",
            switching(serving("quay-0", 2), "quay-0", "quay-1", 3),
            healthy(),
            SwitchoverRunning,
        ),
        case(
            "a switchover not done in time is aborted",
            switching(serving("quay-0", 2), "quay-0", "quay-1", 61),
            healthy(),
            SwitchoverAborted,
        ),
        case(
            "a request for a replica in step starts a switchover",
            serving("quay-0", 1),
            healthy(),
            SwitchoverTo("quay-2".into(), Requested),
        )
        .asking("quay-2@1"),
        case(
            "a request for the primary itself is refused",
            serving("quay-0", 1),
            healthy(),
            SwitchoverRefused,
        )
        .asking("quay-0@1"),
        case(
            "a request waits while the primary has not taken writes at the epoch",
            serving("quay-0", 2),
            healthy(),
            Steady,
        )
        .asking("quay-2@1"),
        case(
            "a scale-down removing the primary hands it over first",
            serving("quay-2", 1),
            vec![
                replica("quay-0", 1),
                replica("quay-1", 1),
                primary("quay-2", 1),
            ],
            SwitchoverTo("quay-0".into(), ScaleDown),
        )
        .members(2),
        case(
            "a primary pod being deleted hands over to a replica in step",
            serving("quay-0", 1),
            primary_waiting(),
            SwitchoverTo("quay-1".into(), Deleting),
        )
        .deleting(&["quay-0"]),
        case(
            "a primary pod being deleted does not hand over to a pod being deleted too",
            serving("quay-0", 1),
            primary_waiting(),
            SwitchoverTo("quay-2".into(), Deleting),
        )
        .deleting(&["quay-0", "quay-1"]),
        case(
            "a primary pod being deleted whose agent does not wait for a hand-over is left to \
             stop",
            serving("quay-0", 1),
            healthy(),
            Steady,
        )
        .deleting(&["quay-0"]),
        case(
            "a deleted primary pod's hand-over answers a request it cannot honour",
            serving("quay-0", 1),
            primary_waiting(),
            SwitchoverTo("quay-1".into(), Deleting),
        )
        .deleting(&["quay-0"])
        .asking("quay-0@1"),
        case(
            "a primary pod being deleted with no replica in step is left to stop (a failover \
             follows)",
            serving("quay-0", 1),
            {
                let mut v = primary_waiting();
                v[1] = orphaned("quay-1", "0-1-9");
                v[2] = orphaned("quay-2", "0-1-9");
                v
            },
            Steady,
        )
        .deleting(&["quay-0"]),
        case(
            "a replica pod being deleted moves nothing",
            serving("quay-0", 1),
            healthy(),
            Steady,
        )
        .deleting(&["quay-1"]),
        case(
            "a primary pod being deleted before it took writes at the epoch waits",
            serving("quay-0", 2),
            primary_waiting(),
            Steady,
        )
        .deleting(&["quay-0"]),
        case(
            "a scale-down's hand-over answers a request it cannot honour",
            serving("quay-2", 1),
            vec![
                replica("quay-0", 1),
                replica("quay-1", 1),
                primary("quay-2", 1),
            ],
            SwitchoverTo("quay-0".into(), ScaleDown),
        )
        .members(2)
        .asking("quay-2@1"),
        case(
            "a scale-down waits for a replica in step",
            serving("quay-2", 1),
            vec![
                orphaned("quay-0", "0-1-9"),
                orphaned("quay-1", "0-1-9"),
                primary("quay-2", 1),
            ],
            ScaleDownBlocked,
        )
        .members(2),
        case(
            "a rollout restarts the highest outdated replica",
            serving("quay-0", 1),
            healthy(),
            Rollout(Step::Restart("quay-2".into())),
        )
        .rolling(&[false, false, false]),
        case(
            "a rollout whose replicas are updated hands the primary over",
            serving("quay-0", 1),
            healthy(),
            SwitchoverTo("quay-1".into(), HandOver::Rollout),
        )
        .rolling(&[false, true, true]),
        case(
            "a request goes before a rollout's hand-over",
            serving("quay-0", 1),
            healthy(),
            SwitchoverTo("quay-2".into(), Requested),
        )
        .asking("quay-2@1")
        .rolling(&[false, true, true]),
        case(
            "a refused request holds the rollout's hand-over back for this pass",
            serving("quay-0", 1),
            healthy(),
            SwitchoverRefused,
        )
        .asking("quay-7@1")
        .rolling(&[false, true, true]),
        case(
            "a rollout restarts nothing while the primary is lost",
            lost_for(serving("quay-0", 1), 5),
            primary_gone(),
            Waiting,
        )
        .rolling(&[false, false, false]),
    ];
    let mut failed = Vec::new();
    for c in &cases {
        let got = outcome(&c.plan());
        if got != c.expect {
            failed.push(format!("{}: expected {:?}, got {got:?}", c.name, c.expect));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn members_ahead_of_the_status_name_the_primary_it_lost() {
    let run = |status: MySQLClusterStatus, views: Vec<MemberView>| {
        let c = case("", status, views, Outcome::Steady);
        c.plan()
    };
    // A status that went back (or an older copy of it): the members' kept orders say quay-1
    // is the primary at epoch 2, and the pass keeps them there instead of failing over again.
    let p = run(lost_for(serving("quay-0", 1), 60), promoted_at_2());
    assert_eq!((p.primary.as_str(), p.epoch), ("quay-1", 2));
    assert!(matches!(
        p.transition,
        Transition::Hold(Hold { stale: None, .. })
    ));
    // Labels alone tell too (the agent is down).
    let mut views = promoted_at_2();
    views[1].report = Err("connection refused".into());
    views[1].labelled_epoch = Some(2);
    let p = run(MySQLClusterStatus::default(), views);
    assert_eq!((p.primary.as_str(), p.epoch), ("quay-1", 2));
    // Adopted, and silent itself: lost from now on, not since the status' count for the
    // primary it replaced.
    let mut views = promoted_at_2();
    views[1].report = Err("connection refused".into());
    views[2] = orphaned("quay-2", "0-1-9");
    views[2].report.as_mut().unwrap().epoch = 2;
    let p = run(lost_for(serving("quay-0", 1), 600), views);
    assert_eq!((p.primary.as_str(), p.epoch), ("quay-1", 2));
    assert_eq!(p.lost_since, Some(MicroTime(now())));
    assert!(matches!(
        p.transition,
        Transition::Hold(Hold {
            waiting: Some(_),
            ..
        })
    ));
    // A cluster created again over kept volumes: the members hold replica orders of the old
    // one, and no status. Confirmed by the API server, the roles start again above them.
    let kept = vec![
        replica("quay-0", 4),
        replica("quay-1", 4),
        replica("quay-2", 4),
    ];
    let c = case(
        "",
        MySQLClusterStatus::default(),
        kept.clone(),
        Outcome::Steady,
    );
    assert!(matches!(
        c.plan().transition,
        Transition::Hold(Hold { stale: Some(_), .. })
    ));
    let p = c.confirmed().plan();
    assert_eq!((p.primary.as_str(), p.epoch), ("quay-0", 5));
    assert!(matches!(
        p.transition,
        Transition::Hold(Hold { stale: None, .. })
    ));
    // Nobody is the primary at the newest epoch: the status stays, and says why.
    let p = run(
        serving("quay-0", 1),
        vec![
            replica("quay-0", 2),
            replica("quay-1", 2),
            replica("quay-2", 2),
        ],
    );
    assert_eq!((p.primary.as_str(), p.epoch), ("quay-0", 1));
    let Transition::Hold(Hold {
        stale: Some(why), ..
    }) = p.transition
    else {
        panic!("{p:?}")
    };
    assert_eq!(
        why,
        "the status (epoch 1) is older than the members (epoch 2), and none of them is the \
         primary at 2: waiting for the newer status"
    );
}

#[test]
fn a_transition_raises_the_epoch_and_names_the_new_primary() {
    let plan = case(
        "failover",
        lost_for(switching(serving("quay-0", 1), "quay-2", "quay-0", 5), 11),
        primary_gone(),
        Outcome::FailoverTo("quay-1".into()),
    )
    .plan();
    assert_eq!((plan.primary.as_str(), plan.epoch), ("quay-1", 2));
    assert!(plan.changed() && plan.lost_since.is_none());
    let abandoned = plan
        .switchover_record()
        .expect("the running switchover ends");
    assert_eq!(abandoned.result.as_deref(), Some(switchover::ABORTED));
    assert_eq!(
        abandoned.message.as_deref(),
        Some("quay-0 was lost; failover to quay-1")
    );

    let aborted = case(
        "abort",
        switching(serving("quay-0", 2), "quay-0", "quay-1", 61),
        healthy(),
        Outcome::SwitchoverAborted,
    )
    .plan();
    assert_eq!(
        (aborted.primary.as_str(), aborted.epoch),
        ("quay-0", 3),
        "the old primary takes writes again, at a new epoch"
    );

    let started = case(
        "start",
        serving("quay-0", 1),
        healthy(),
        Outcome::SwitchoverTo("quay-2".into(), HandOver::Requested),
    )
    .asking("quay-2@1")
    .plan();
    assert_eq!((started.primary.as_str(), started.epoch), ("quay-2", 2));
    assert_eq!(started.switching(), Some(("quay-0", "quay-2")));
    let record = started.switchover_record().unwrap();
    assert_eq!(
        (record.request.as_str(), record.finished.as_ref()),
        ("quay-2@1", None)
    );
}

#[test]
fn a_hand_over_answers_the_request_the_annotation_holds() {
    let scale_down = case(
        "scale-down",
        serving("quay-2", 1),
        vec![
            replica("quay-0", 1),
            replica("quay-1", 1),
            primary("quay-2", 1),
        ],
        Outcome::SwitchoverTo("quay-0".into(), HandOver::ScaleDown),
    )
    .members(2)
    .asking("quay-2@1")
    .plan();
    let record = scale_down.switchover_record().unwrap();
    assert_eq!(
        (record.request.as_str(), record.to.as_str()),
        ("quay-2@1", "quay-0"),
        "the next pass does not take the annotation up again"
    );
    let mut handled = serving("quay-0", 1);
    handled.last_switchover = Some(SwitchoverRecord {
        request: "quay-1@4".into(),
        finished: Some(ago(60)),
        ..switching(serving("quay-0", 1), "quay-1", "quay-0", 60)
            .last_switchover
            .unwrap()
    });
    let rollout = case(
        "rollout",
        handled,
        healthy(),
        Outcome::SwitchoverTo("quay-1".into(), HandOver::Rollout),
    )
    .rolling(&[false, true, true])
    .plan();
    assert_eq!(
        rollout.switchover_record().unwrap().request,
        "quay-1@4",
        "without an annotation, the request handled last"
    );
}

#[test]
fn a_rollout_restarts_no_replica_while_the_primary_is_lost() {
    let lost = case(
        "lost",
        lost_for(serving("quay-0", 1), 5),
        primary_gone(),
        Outcome::Waiting,
    )
    .rolling(&[false, false, false])
    .plan();
    assert_eq!(
        lost.hold().unwrap().rollout,
        Step::Wait("the primary is lost".into())
    );
}

#[test]
fn a_held_pass_keeps_the_primary_and_records_how_long_it_has_been_lost() {
    let waiting = case(
        "waiting",
        lost_for(serving("quay-0", 1), 5),
        primary_gone(),
        Outcome::Waiting,
    )
    .plan();
    assert_eq!((waiting.primary.as_str(), waiting.epoch), ("quay-0", 1));
    assert!(!waiting.changed());
    assert_eq!(
        waiting.lost_since,
        Some(lost_ago_ms(5250)),
        "the first loss is kept"
    );
    let fresh = case(
        "fresh",
        serving("quay-0", 1),
        primary_gone(),
        Outcome::Waiting,
    )
    .plan();
    assert_eq!(
        fresh.lost_since,
        Some(MicroTime(now())),
        "lost from this pass on"
    );

    let completed = case(
        "completed",
        switching(serving("quay-0", 2), "quay-0", "quay-1", 3),
        vec![silent("quay-0"), primary("quay-1", 2)],
        Outcome::SwitchoverCompleted,
    )
    .plan();
    let record = completed.switchover_record().unwrap();
    assert_eq!(record.result.as_deref(), Some(switchover::COMPLETED));
    assert_eq!(
        record.message.as_deref(),
        Some("writes moved from quay-0 to quay-1 in 3.0s")
    );
    assert_eq!(completed.switching(), None);
}

#[path = "plan_revisit_tests.rs"]
mod revisit;

#[path = "plan_abort_tests.rs"]
mod abort;

#[path = "plan_lost_tests.rs"]
mod lost;
