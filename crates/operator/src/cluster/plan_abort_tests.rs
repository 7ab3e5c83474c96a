//! A switchover that timed out is given back to the old primary only once its target cannot
//! hold a lease.

use super::*;

#[test]
fn a_switchover_is_given_back_only_once_its_target_cannot_keep_a_lease() {
    // quay-1 may have taken writes before the operator lost sight of it.
    let following = |source: &str| {
        let mut v = replica("quay-2", 2);
        if let Ok(r) = &mut v.report {
            if let Some(rep) = r.replication.as_mut() {
                rep.source_host = source.into();
            }
        }
        v
    };
    let status = switching(serving("quay-0", 2), "quay-0", "quay-1", 61);
    let decide = |views: Vec<MemberView>, outstanding: u64| {
        plan(&Inputs {
            cluster: "quay",
            engine: Engine::MariaDb,
            members: 3,
            force_failover: None,
            semi_sync: SemiSync {
                acks: 1,
                timeout: None,
                members: 3,
            },
            failover_after: Duration::from_secs(10),
            switchover_timeout: Duration::from_secs(60),
            status: &status,
            status_confirmed: false,
            annotation: None,
            views: &views,
            rollout: None,
            backup_sources: &[],
            deleting: &[],
            lease_outstanding: Duration::from_secs(outstanding),
            renewals: Default::default(),
            primary_answered: None,
            now: now(),
        })
    };
    let old = replica("quay-0", 2);
    let cases = [
        (
            "the lease the operator granted quay-1 may run",
            vec![old.clone(), silent("quay-1"), following("quay-primary")],
            5,
            Some("quay-1 may still hold the lease the operator last granted it"),
        ),
        (
            "quay-2 still receives from quay-1",
            vec![
                old.clone(),
                silent("quay-1"),
                following("quay-1.quay-headless"),
            ],
            0,
            Some("quay-2 still receives from quay-1"),
        ),
        (
            "nothing keeps quay-1's lease",
            vec![old, silent("quay-1"), following("quay-primary")],
            0,
            None,
        ),
    ];
    for (name, views, outstanding, waits) in cases {
        let p = decide(views, outstanding);
        match waits {
            Some(needle) => {
                assert_eq!(outcome(&p), Outcome::SwitchoverRunning, "{name}");
                let waiting = p.hold().and_then(|h| h.waiting.clone()).unwrap_or_default();
                assert!(waiting.contains(needle), "{name}: {waiting}");
            }
            None => assert_eq!(outcome(&p), Outcome::SwitchoverAborted, "{name}"),
        }
    }
}

/// A cluster whose first primary never took writes (a logical bootstrap still loading, which
/// keeps it unready) never fails over, however long that primary is silent: a replica holds at
/// most part of the load.
#[test]
fn a_primary_that_never_served_is_never_failed_over() {
    let never_served = MySQLClusterStatus {
        current_primary: Some("quay-0".into()),
        epoch: Some(1),
        ..MySQLClusterStatus::default()
    };
    for silent_for in [0, 60, 3600] {
        let c = case(
            "never served",
            lost_for(never_served.clone(), silent_for),
            primary_gone(),
            Outcome::Steady,
        );
        let plan = c.plan();
        assert_eq!(plan.primary, "quay-0", "lost for {silent_for} s");
        assert_eq!(plan.epoch, 1, "lost for {silent_for} s");
        assert!(
            !matches!(outcome(&plan), Outcome::FailoverTo(_)),
            "lost for {silent_for} s: {:?}",
            outcome(&plan)
        );
    }
}
