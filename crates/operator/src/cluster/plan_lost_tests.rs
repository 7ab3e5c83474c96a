//! Since when a silent primary counts as lost: from when it was last heard of (its last answer
//! to a lease heartbeat, or a replica reaching its server later), so that
//! `failoverAfterSeconds` is not lengthened by the seconds its replicas take to notice; and
//! when a pass looks at a lost primary again.

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
            Some(MicroTime(now())),
        ),
        (
            "answered 6 s ago, its replicas reached it until 4 s ago: from then",
            serving("quay-0", 1),
            Some(6),
            (Some(5), Some(4)),
            Waiting,
            Some(lost_ago_ms(4000)),
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
            Some(lost_ago_ms(5000)),
        ),
        (
            "a replica that cannot say since when it failed: from this pass",
            serving("quay-0", 1),
            Some(12),
            (Some(12), None),
            Waiting,
            Some(MicroTime(now())),
        ),
        (
            "the count the status keeps stands",
            lost_for(serving("quay-0", 1), 5),
            Some(12),
            (Some(12), Some(12)),
            Waiting,
            Some(lost_ago_ms(5250)),
        ),
        (
            "an answer stamped in the future: from this pass",
            serving("quay-0", 1),
            Some(-3),
            (Some(12), Some(12)),
            Waiting,
            Some(MicroTime(now())),
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
    assert_eq!(p.lost_since, Some(MicroTime(now())));
}

/// `primary_gone()` with its replicas' agents last answered by the primary's server this many
/// milliseconds ago (`None`: they do not say), failing to reach it for 2 s.
fn heard_ms_ago(quay_1: Option<u64>, quay_2: Option<u64>) -> Vec<MemberView> {
    let mut views = failing_for(Some(2), Some(2));
    for (v, ms) in views[1..].iter_mut().zip([quay_1, quay_2]) {
        let rep = v.report.as_mut().unwrap().replication.as_mut().unwrap();
        rep.source_heard_ms = ms;
    }
    views
}

#[test]
fn a_replicas_last_answer_from_the_primary_dates_the_loss_to_the_millisecond() {
    // (name, the operator's answer that many ms ago, the replicas' last answers, lost since)
    let cases = [
        (
            "the later replica's answer, before its reads began failing",
            Some(6_000),
            (Some(3_500), Some(4_200)),
            lost_ago_ms(3_500),
        ),
        (
            "the operator's answer, when later than the replicas'",
            Some(800),
            (Some(1_900), Some(2_400)),
            lost_ago_ms(800),
        ),
        (
            "a replica of the release before: since its reads failed",
            Some(6_000),
            (Some(3_500), None),
            lost_ago_ms(2_000),
        ),
    ];
    for (name, answered, (q1, q2), lost_since) in cases {
        let mut c = case(
            name,
            serving("quay-0", 1),
            heard_ms_ago(q1, q2),
            Outcome::Waiting,
        );
        c.answered = answered.map(|ms| now() - chrono::Duration::milliseconds(ms));
        let p = c.plan();
        assert_eq!(p.lost_since, Some(lost_since), "{name}");
    }
    // A replica that does not look (its receiver stopped) cannot say: from this pass.
    let mut views = heard_ms_ago(Some(3_500), None);
    let rep = views[2]
        .report
        .as_mut()
        .unwrap()
        .replication
        .as_mut()
        .unwrap();
    rep.source_unreachable_seconds = None;
    let mut c = case("not looking", serving("quay-0", 1), views, Outcome::Waiting);
    c.answered = Some(now() - chrono::Duration::seconds(6));
    assert_eq!(c.plan().lost_since, Some(MicroTime(now())));
}

#[test]
fn views_used_after_they_were_read_date_their_events_from_then() {
    let mut views = heard_ms_ago(Some(1_000), None);
    views[1].report.as_mut().unwrap().followed_ms = Some(2_000);
    crate::members::aged(&mut views, Duration::from_millis(1_500));
    let quay_1 = views[1].report.as_ref().unwrap();
    assert_eq!(quay_1.followed_ms, Some(3_500), "the last renewal");
    let rep = quay_1.replication.as_ref().unwrap();
    assert_eq!(rep.source_heard_ms, Some(2_500), "the last answer");
    assert_eq!(
        rep.source_unreachable_seconds,
        Some(2),
        "whole seconds stay as read (smaller, they only hold a failover back)"
    );
    let quay_2 = views[2].report.as_ref().unwrap();
    assert_eq!(quay_2.replication.as_ref().unwrap().source_heard_ms, None);
    assert!(views[0].report.is_err(), "no report stays none");
}

#[test]
fn a_lost_primary_is_looked_at_again_when_its_takeover_time_is_up() {
    let since = now();
    let at = |secs: i64| since + chrono::Duration::seconds(secs);
    let since_ms = |ms: i64| since + chrono::Duration::milliseconds(ms);
    let after = Duration::from_secs(10);
    // `since` in whole seconds (as the release before wrote it): a second is allowed for the
    // cut.
    let s = Duration::from_secs;
    let cases = [
        ("just lost: every poll", at(0), after, s(0), LOST_POLL),
        (
            "5 s left: 2 s before them, to read the members and wait out the rest",
            at(6),
            after,
            s(0),
            Duration::from_millis(3100),
        ),
        (
            "1.5 s left: just after them",
            since_ms(9500),
            after,
            s(0),
            Duration::from_millis(1600),
        ),
        ("time up: every poll", at(11), after, s(0), LOST_POLL),
        (
            "time up, a lease outstanding: 2 s before it runs out",
            at(11),
            after,
            s(4),
            Duration::from_millis(2100),
        ),
        (
            "a lease outstanding longer than the takeover time",
            at(8),
            after,
            s(5),
            Duration::from_millis(3100),
        ),
        ("far off: every poll", at(1), after, s(0), LOST_POLL),
        ("long past: every poll", at(60), after, s(0), LOST_POLL),
        (
            "failover off: every poll",
            at(3),
            Duration::ZERO,
            s(2),
            LOST_POLL,
        ),
    ];
    assert_eq!(
        crate::cluster::plan::lost_for(since, at(10)),
        Duration::from_secs(9),
        "a count in whole seconds (the release before's): a second allowed"
    );
    let precise = since + chrono::Duration::milliseconds(250);
    assert_eq!(
        crate::cluster::plan::lost_for(precise, at(10)),
        Duration::from_millis(9750),
        "to the microsecond"
    );
    assert_eq!(
        crate::cluster::plan::lost_for(since, at(0)),
        Duration::ZERO,
        "never negative"
    );
    for (name, now, after, outstanding, want) in cases {
        assert_eq!(recheck_lost(since, now, after, outstanding), want, "{name}");
    }
}
