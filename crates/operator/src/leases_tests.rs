//! The leases' bookkeeping: what counts, what is taken back, what is remembered.

use super::*;

#[test]
fn every_subscriber_hears_of_every_unanswered_cluster() {
    let leases = Leases::default();
    let (mut a, b) = (leases.unanswered(), leases.unanswered());
    drop(b);
    let mut c = leases.unanswered();
    leases.announce_unanswered("shop/atoll/1");
    assert_eq!(a.try_recv().ok().as_deref(), Some("shop/atoll/1"));
    assert_eq!(c.try_recv().ok().as_deref(), Some("shop/atoll/1"));
    assert_eq!(
        leases.unanswered.lock().unwrap().len(),
        2,
        "the dropped one is forgotten"
    );
}

#[test]
fn lease_keys_name_their_cluster() {
    let cases = [
        ("a key", "shop/atoll/9c6c829b", Some(("shop", "atoll"))),
        ("no uid yet", "shop/atoll/", Some(("shop", "atoll"))),
        ("no name", "shop//x", None),
        ("no namespace", "/atoll/x", None),
        ("not a key", "atoll", None),
    ];
    for (name, key, want) in cases {
        assert_eq!(cluster_of(key), want, "{name}");
    }
}

fn holder(pod: &str, lease: u64) -> Holder {
    Holder {
        pod: pod.into(),
        addr: "10.0.0.1:9081".into(),
        epoch: 2,
        lease: Duration::from_secs(lease),
        followers: 0,
    }
}

#[test]
fn a_lease_is_outstanding_until_the_last_one_sent_ran_out_plus_the_margin() {
    let six = Duration::from_secs(6);
    let leases = Leases::default();
    // Nothing sent since the start: as if renewed just before it.
    let before = leases.outstanding_any("ns/quay", six);
    assert!(before > Duration::from_secs(9) && before <= Duration::from_secs(10));
    leases.renew("ns/quay", holder("quay-0", 20), b"k".to_vec());
    let (sent_to, line, _) = leases.prepare("ns/quay").unwrap();
    assert_eq!(sent_to.pod, "quay-0");
    let taken = Heartbeat::verify(&line, b"k").unwrap();
    assert_eq!((taken.epoch, taken.lease_ms), (2, 20_000));
    let left = leases.outstanding_any("ns/quay", six);
    assert!(left > Duration::from_secs(23) && left <= Duration::from_secs(24));
    // The lease goes to another member: the first one's still counts.
    leases.renew("ns/quay", holder("quay-1", 6), b"k".to_vec());
    assert_eq!(leases.prepare("ns/quay").unwrap().0.pod, "quay-1");
    assert!(leases.outstanding_any("ns/quay", six) > Duration::from_secs(23));
    // Another cluster's do not.
    assert!(leases.outstanding_any("ns/other", six) <= Duration::from_secs(10));
}

#[test]
fn renewals_asked_for_are_waited_out_with_the_fewest_and_the_longest() {
    let six = Duration::from_secs(6);
    let leases = Leases {
        // An operator started long ago: nothing is assumed of a process before.
        started: Instant::now() - MAX_FOLLOWED_FOR - Duration::from_secs(60),
        ..Leases::default()
    };
    assert_eq!(leases.renewals("ns/quay", six, 1), RenewalTerms::default());
    leases.renew("ns/quay", holder("quay-0", 6), b"k".to_vec());
    leases.prepare("ns/quay").unwrap();
    assert_eq!(
        leases.renewals("ns/quay", six, 1),
        RenewalTerms::default(),
        "no renewals asked for"
    );
    let asking = |followers, lease| Holder {
        followers,
        ..holder("quay-0", lease)
    };
    leases.renew("ns/quay", asking(2, 6), b"k".to_vec());
    let (_, line, _) = leases.prepare("ns/quay").unwrap();
    assert_eq!(Heartbeat::verify(&line, b"k").unwrap().followers, 2);
    // The spec changes: fewer asked of, with longer leases. Both count until they expire.
    leases.renew("ns/quay", asking(1, 20), b"k".to_vec());
    leases.prepare("ns/quay").unwrap();
    let terms = leases.renewals("ns/quay", six, 2);
    let most = MAX_FOLLOWED_FOR + Duration::from_secs(20) + LEASE_MARGIN;
    assert!(
        terms.outstanding > most - Duration::from_secs(1) && terms.outstanding <= most,
        "{terms:?}"
    );
    assert_eq!((terms.fewest, terms.longest), (1, Duration::from_secs(20)));
    assert_eq!(leases.renewals("ns/other", six, 1), RenewalTerms::default());
    // Just started: the process before may have asked for what the spec says now.
    let fresh = Leases::default();
    let terms = fresh.renewals("ns/quay", six, 1);
    assert!(terms.outstanding > MAX_FOLLOWED_FOR, "{terms:?}");
    assert_eq!((terms.fewest, terms.longest), (1, six));
    assert_eq!(fresh.renewals("ns/quay", six, 0), RenewalTerms::default());
}

#[test]
fn a_pass_from_an_older_status_renews_nobody() {
    let leases = Leases::default();
    leases.renew("ns/quay", holder("quay-1", 6), b"k".to_vec());
    let older = Holder {
        epoch: 1,
        ..holder("quay-0", 6)
    };
    leases.renew("ns/quay", older, b"k".to_vec());
    assert!(leases.renews("ns/quay", "quay-1", 2));
    leases.keep_only("ns/quay", "quay-0", 1);
    assert!(leases.prepare("ns/quay").is_none());
}

#[test]
fn a_stopped_or_forgotten_lease_sends_nothing() {
    let leases = Leases::default();
    leases.renew("ns/quay", holder("quay-0", 6), b"k".to_vec());
    leases.stop("ns/quay");
    assert!(leases.prepare("ns/quay").is_none());
    leases.renew("ns/quay", holder("quay-1", 6), b"k".to_vec());
    assert_eq!(leases.prepare("ns/quay").unwrap().0.pod, "quay-1");
    leases.forget("ns/quay");
    assert!(leases.prepare("ns/quay").is_none());
}

/// Members whose heartbeats all end with `answer`.
struct Heartbeats(Result<(), HeartbeatError>);

impl Members for Heartbeats {
    fn report<'a>(
        &'a self,
        _: &'a k8s_openapi::api::core::v1::Pod,
        _: bool,
    ) -> futures::future::BoxFuture<'a, Result<bulwark_contract::member::MemberStatus, String>>
    {
        unreachable!("leases read no reports")
    }

    fn send_order<'a>(
        &'a self,
        _: &'a k8s_openapi::api::core::v1::Pod,
        _: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<bulwark_contract::member::MemberStatus>, String>,
    > {
        unreachable!("leases send no orders")
    }

    fn send_heartbeat<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), HeartbeatError>> {
        let answer = self.0.clone();
        Box::pin(async move { answer })
    }
}

#[tokio::test]
async fn a_heartbeat_that_never_connected_grants_nothing_and_an_answer_is_remembered() {
    let six = Duration::from_secs(6);
    let before_any = Duration::from_secs(10);
    let cases = [
        ("answered", Ok(()), true, true),
        (
            "taken, maybe, with no answer",
            Err(HeartbeatError::Unanswered("timed out".into())),
            true,
            false,
        ),
        (
            "never connected",
            Err(HeartbeatError::NotDelivered("refused".into())),
            false,
            false,
        ),
    ];
    for (name, answer, counts, remembered) in cases {
        let leases = Leases::default();
        leases.renew(
            "ns/quay",
            Holder {
                followers: 1,
                ..holder("quay-0", 20)
            },
            b"k".to_vec(),
        );
        let sent = leases.send("ns/quay", &Heartbeats(answer.clone())).await;
        assert_eq!(sent, Some(answer), "{name}");
        let left = leases.outstanding_any("ns/quay", six);
        let asked = leases.renewals("ns/quay", six, 0);
        if counts {
            assert!(left > Duration::from_secs(23), "{name}: {left:?}");
            assert_eq!(asked.fewest, 1, "{name}: {asked:?}");
        } else {
            assert!(left <= before_any, "{name}: {left:?}");
            assert_eq!(asked, RenewalTerms::default(), "{name}");
        }
        let at = leases.last_answer("ns/quay", "quay-0", 2);
        assert_eq!(at.is_some(), remembered, "{name}");
        assert_eq!(leases.last_answer("ns/quay", "quay-0", 3), None, "{name}");
        assert_eq!(leases.last_answer("ns/quay", "quay-1", 2), None, "{name}");
    }
}

#[test]
fn heartbeats_under_way_count_until_settled_and_only_those_that_may_have_arrived_stay() {
    let six = Duration::from_secs(6);
    let s = Duration::from_secs;
    // Long started: nothing is assumed of a process before, so only what was sent counts.
    let long_ago = || Leases::started_at(Instant::now() - MAX_FOLLOWED_FOR - s(60));
    let asking = |lease| Holder {
        followers: 1,
        ..holder("quay-0", lease)
    };
    let outstanding = |l: &Leases| l.outstanding_any("ns/quay", six);
    let renewals = |l: &Leases| l.renewals("ns/quay", six, 0).outstanding;

    // Two under way at once (a pass's and the loop's), both never delivered: nothing stays,
    // in whichever order they fail; under way, each counted.
    for first_fails_first in [true, false] {
        let leases = long_ago();
        leases.renew("ns/quay", asking(20), b"k".to_vec());
        let (_, _, a) = leases.prepare("ns/quay").unwrap();
        let (_, _, b) = leases.prepare("ns/quay").unwrap();
        assert!(outstanding(&leases) > s(23));
        assert!(renewals(&leases) > MAX_FOLLOWED_FOR + s(23));
        let (x, y) = if first_fails_first { (a, b) } else { (b, a) };
        leases.settle(x, false);
        assert!(outstanding(&leases) > s(23), "the other is still under way");
        leases.settle(y, false);
        assert_eq!(outstanding(&leases), Duration::ZERO);
        assert_eq!(renewals(&leases), Duration::ZERO);
    }

    // The lease shortened between two: the short one delivered stays when the long one,
    // never delivered, goes.
    let leases = long_ago();
    leases.renew("ns/quay", asking(20), b"k".to_vec());
    let (_, _, long) = leases.prepare("ns/quay").unwrap();
    leases.renew("ns/quay", asking(6), b"k".to_vec());
    let (_, _, short) = leases.prepare("ns/quay").unwrap();
    leases.settle(short, true);
    leases.settle(long, false);
    let left = outstanding(&leases);
    assert!(left > s(9) && left <= s(10), "{left:?}");

    // A sender that gave up waiting (dropped unsettled) was connected: its heartbeat stays.
    let leases = long_ago();
    leases.renew("ns/quay", asking(20), b"k".to_vec());
    let (_, _, number) = leases.prepare("ns/quay").unwrap();
    drop(Sending {
        leases: &leases,
        number,
        settled: false,
    });
    assert!(outstanding(&leases) > s(23));
    assert!(leases.under_way.lock().unwrap().is_empty());
}

#[test]
fn a_failover_knows_until_when_a_heartbeat_under_way_may_still_be_connecting() {
    let leases = Leases::started_at(Instant::now() - MAX_FOLLOWED_FOR - Duration::from_secs(60));
    assert_eq!(
        leases.connecting_until("ns/quay"),
        None,
        "nothing under way"
    );
    leases.renew("ns/quay", holder("quay-0", 6), b"k".to_vec());
    let before = Instant::now();
    let (_, _, number) = leases.prepare("ns/quay").unwrap();
    let until = leases
        .connecting_until("ns/quay")
        .expect("one is connecting");
    assert!(until >= before + crate::members::HEARTBEAT_CONNECT_TIMEOUT);
    assert!(until <= Instant::now() + crate::members::HEARTBEAT_CONNECT_TIMEOUT);
    assert_eq!(
        leases.connecting_until("ns/other"),
        None,
        "another cluster's"
    );
    leases.settle(number, false);
    assert_eq!(leases.connecting_until("ns/quay"), None, "settled");
}
