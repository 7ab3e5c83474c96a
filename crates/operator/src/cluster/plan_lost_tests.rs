//! Since when a silent primary counts as lost: from when it was last heard of (its last answer
//! to a lease heartbeat, or a replica reaching its server later), so that
//! `failoverAfterSeconds` is not lengthened by the seconds its replicas take to notice.

use super::*;

/// `primary_gone()` with its replicas' agents failing to reach the primary for these many
/// seconds (`None`: they cannot say).
fn failing_for(quay_1: Option<u64>, quay_2: Option<u64>) -> Vec<MemberView> {
    let mut views = primary_gone();
    for (v, secs) in views[1..].iter_mut().zip([quay_1, quay_2]) {
        let rep = v.report.as_mut().unwrap().replication.as_mut().unwrap();
        rep.source_unreachable_seconds = secs;
    }
    views
}

#[test]
fn a_silent_primary_is_lost_from_when_it_was_last_heard_of() {
    use Outcome::*;
    let hour: i64 = 3600;
    // (name, status, its answer that many seconds ago, the replicas failing for, outcome,
    // lost since)
    let cases = [
        (
            "no answer known (an operator just started): from this pass",
            serving("quay-0", 1),
            None,
            (Some(12), Some(12)),
            Waiting,
            Some(Time(now())),
        ),
        (
            "answered 6 s ago, its replicas reached it until 4 s ago: from then",
            serving("quay-0", 1),
            Some(6),
            (Some(5), Some(4)),
            Waiting,
            Some(ago(4)),
        ),
        (
            "answered and reached 11 s ago: lost longer than failoverAfterSeconds, replaced now",
            serving("quay-0", 1),
            Some(12),
            (Some(11), Some(12)),
            FailoverTo("quay-1".into()),
            None,
        ),
        (
            "an answer an hour old (cut off from the operator alone): from the replicas",
            serving("quay-0", 1),
            Some(hour),
            (Some(5), Some(hour as u64)),
            Waiting,
            Some(ago(5)),
        ),
        (
            "a replica that cannot say since when it failed: from this pass",
            serving("quay-0", 1),
            Some(12),
            (Some(12), None),
            Waiting,
            Some(Time(now())),
        ),
        (
            "the count the status keeps stands",
            lost_for(serving("quay-0", 1), 5),
            Some(12),
            (Some(12), Some(12)),
            Waiting,
            Some(ago(5)),
        ),
        (
            "an answer stamped in the future: from this pass",
            serving("quay-0", 1),
            Some(-3),
            (Some(12), Some(12)),
            Waiting,
            Some(Time(now())),
        ),
    ];
    for (name, status, answered, (q1, q2), expect, lost_since) in cases {
        let mut c = case(name, status, failing_for(q1, q2), expect);
        c.answered = answered.map(|s| now() - chrono::Duration::seconds(s));
        let p = c.plan();
        assert_eq!(outcome(&p), c.expect, "{name}");
        assert_eq!(p.lost_since, lost_since, "{name}");
    }
}

#[test]
fn an_adopted_primary_is_not_lost_from_the_status_primarys_answer() {
    // quay-1 was promoted at epoch 2 (its labels say so) while the status still names quay-0
    // at epoch 1; quay-1 is silent too. quay-0's answer says nothing of quay-1.
    let mut views = promoted_at_2();
    views[1].report = Err("connection refused".into());
    views[1].labelled_epoch = Some(2);
    views[2] = orphaned("quay-2", "0-1-9");
    views[2].report.as_mut().unwrap().epoch = 2;
    let mut c = case("adopted", serving("quay-0", 1), views, Outcome::Waiting);
    c.answered = Some(now() - chrono::Duration::seconds(30));
    let p = c.plan();
    assert_eq!((p.primary.as_str(), p.epoch), ("quay-1", 2));
    assert_eq!(p.lost_since, Some(Time(now())));
}
