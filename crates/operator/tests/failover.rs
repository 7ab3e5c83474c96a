//! The cluster controller's failover against a real control plane, with scripted members
//! (`common::members`): what the operator decides from the members' reports and which signed
//! orders it sends, case by case.

mod common;

use bulwark_contract::member::IoState;
use bulwark_contract::order::{RoleOrder, ORDER_KEY};
use bulwark_contract::Role;
use bulwark_operator::names;
use common::*;

const WAIT: Duration = Duration::from_secs(60);

const CLUSTER: &str = r#"
apiVersion: mysql.bulwark.dev/v1alpha1
kind: MySQLCluster
metadata: {name: till}
spec:
  engine: mariadb
  version: "11.4"
  replicas: 3
  storage: {size: 1Gi}
  replication: {failoverAfterSeconds: 3}
"#;

/// The cluster's order key, once the operator generated it.
async fn order_key(client: &Client, n: &str) -> Vec<u8> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    wait_for("the order key", WAIT, || {
        let secrets = secrets.clone();
        async move {
            let s = secrets
                .get(&names::credentials_secret("till"))
                .await
                .map_err(|e| e.to_string())?;
            s.data
                .and_then(|d| d.get(ORDER_KEY).map(|k| k.0.clone()))
                .ok_or_else(|| "no order key yet".to_owned())
        }
    })
    .await
}

/// The last order `pod` accepted.
fn last_order(n: &str, pod: &str) -> Option<RoleOrder> {
    members().get(n, pod).orders.last().cloned()
}

/// Waits until the status names `primary` at `epoch`.
async fn primary_at(clusters: &Api<MySQLCluster>, primary: &str, epoch: i64) -> MySQLCluster {
    wait_for(&format!("{primary} primary at epoch {epoch}"), WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("till").await.map_err(|e| e.to_string())?;
            let st = c.status.clone().unwrap_or_default();
            if st.current_primary.as_deref() == Some(primary) && st.epoch == Some(epoch) {
                Ok(c)
            } else {
                Err(format!("{:?} at {:?}", st.current_primary, st.epoch))
            }
        }
    })
    .await
}

/// When `pod` accepted the order that made it the primary at `epoch`.
async fn promotion_order(n: &str, pod: &str, epoch: u64) -> Instant {
    wait_for(&format!("{pod}'s promotion order"), WAIT, || async move {
        let m = members().get(n, pod);
        m.orders
            .iter()
            .zip(&m.order_times)
            .find(|(o, _)| o.role == Role::Primary && o.epoch == epoch)
            .map(|(_, at)| *at)
            .ok_or_else(|| format!("{:?}", m.orders))
    })
    .await
}

/// A three-member cluster whose members obeyed their first orders: till-0 primary at epoch 0
/// (the first), the others its replicas.
async fn running_cluster(client: &Client, n: &str) -> Api<MySQLCluster> {
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    apply_yaml(&clusters, CLUSTER).await;
    let key = order_key(client, n).await;
    for i in 0..3 {
        members().add(n, &format!("till-{i}"), &key);
    }
    wait_pods(client, n, "till", 3).await;
    for i in 0..3 {
        make_ready(client, n, &format!("till-{i}"), "node-a").await;
    }
    primary_at(&clusters, "till-0", 0).await;
    wait_for("the members' first orders", WAIT, || async move {
        let orders: Vec<_> = (0..3)
            .map(|i| last_order(n, &format!("till-{i}")).map(|o| (o.role, o.epoch)))
            .collect();
        let want = [(Role::Primary, 0), (Role::Replica, 0), (Role::Replica, 0)];
        if orders == want.map(Some) {
            Ok(())
        } else {
            Err(format!("{orders:?}"))
        }
    })
    .await;
    // A primary counts as lost only once it has been ready (`status.primarySince`).
    wait_for("the cluster ready", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("till").await.map_err(|e| e.to_string())?;
            let since = c.status.as_ref().and_then(|s| s.primary_since.clone());
            match (since, condition(&c, "Ready")) {
                (Some(_), Some(ready)) if ready.0 == "True" => Ok(()),
                (since, ready) => Err(format!("primarySince {since:?}, {ready:?}")),
            }
        }
    })
    .await;
    clusters
}

/// till-0's server is gone: its replicas' receivers retry, its agent is silent, and its pod's
/// readiness fails (the event that wakes the operator comes last).
async fn lose_primary(client: &Client, n: &str) {
    for pod in ["till-1", "till-2"] {
        members().update(n, pod, |m| {
            if let Some(r) = m.report.replication.as_mut() {
                r.io = IoState::Connecting;
            }
        });
    }
    members().update(n, "till-0", |m| m.answers = false);
    make_unready(client, n, "till-0").await;
}

#[tokio::test]
async fn a_lost_primary_is_replaced_by_the_replica_that_holds_every_transaction() {
    let (client, ns) = setup("failover").await;
    let n = ns.name();
    let clusters = running_cluster(&client, n).await;
    let set_gtid = |pod: &str, gtid: &str| {
        members().update(n, pod, |m| {
            m.report.gtid_executed = gtid.to_owned();
            m.report.gtid_history = gtid.to_owned();
        })
    };
    set_gtid("till-0", "0-1-50");
    // till-1 lags; till-2 has everything, so the lower ordinal is not the choice.
    set_gtid("till-1", "0-1-45");
    set_gtid("till-2", "0-1-50");

    let lost = Instant::now();
    lose_primary(&client, n).await;
    primary_at(&clusters, "till-2", 1).await;
    assert!(
        lost.elapsed() >= Duration::from_secs(3),
        "promoted after {:?}, before failoverAfterSeconds",
        lost.elapsed()
    );
    wait_for("the new primary's orders", WAIT, || async move {
        let promoted = last_order(n, "till-2").map(|o| (o.role, o.epoch));
        let repointed = last_order(n, "till-1").map(|o| (o.role, o.epoch, o.source));
        let want = (
            Some((Role::Primary, 1)),
            Some((Role::Replica, 1, Some(names::pod_host("till", "till-2")))),
        );
        if (promoted, repointed.clone()) == want {
            Ok(())
        } else {
            Err(format!("{promoted:?}, {repointed:?}"))
        }
    })
    .await;
    assert!(
        members()
            .get(n, "till-1")
            .orders
            .iter()
            .all(|o| o.role == Role::Replica),
        "the lagging replica was never ordered primary"
    );
    let events = events_for(&client, n, "till").await;
    assert!(
        events
            .iter()
            .any(|(reason, message)| reason == "Failover" && message.contains("till-2")),
        "{events:?}"
    );
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_primary_whose_agent_is_silent_but_whose_server_serves_is_kept() {
    let (client, ns) = setup("unreached").await;
    let n = ns.name();
    let clusters = running_cluster(&client, n).await;
    for pod in ["till-0", "till-1", "till-2"] {
        members().update(n, pod, |m| m.report.gtid_executed = "0-1-50".into());
    }
    // The primary's agent is hung (its pod fails its readiness probe) but its server runs:
    // the replicas still receive from it, so promoting one would make two primaries.
    members().update(n, "till-0", |m| m.answers = false);
    make_unready(&client, n, "till-0").await;
    let ready = wait_for("the silent primary in Ready", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("till").await.map_err(|e| e.to_string())?;
            match condition(&c, "Ready") {
                Some(ready) if ready.1 == "PrimaryNotReady" => Ok(ready),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // Three times failoverAfterSeconds. Had the pass counted the primary lost, it would have
    // looked again within 5 s (`primaryLostSince` set) and promoted a replica by now.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let c = clusters.get("till").await.expect("cluster");
    let st = c.status.unwrap_or_default();
    assert_eq!(
        (
            st.current_primary.as_deref(),
            st.epoch,
            st.primary_lost_since
        ),
        (Some("till-0"), Some(0), None),
        "{ready:?}"
    );
    for pod in ["till-1", "till-2"] {
        assert!(
            members()
                .get(n, pod)
                .orders
                .iter()
                .all(|o| o.role == Role::Replica && o.epoch == 0),
            "{pod} was moved"
        );
    }
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_primary_cut_off_with_a_replica_is_not_replaced_until_a_human_forces_it() {
    let (client, ns) = setup("partition").await;
    let n = ns.name();
    let clusters = running_cluster(&client, n).await;
    // {till-0, till-1} are cut from {operator, till-2}: till-1 kept acknowledging the
    // primary's commits, which till-2 never received.
    members().update(n, "till-0", |m| m.report.gtid_executed = "0-1-485".into());
    members().update(n, "till-1", |m| {
        m.report.gtid_executed = "0-1-485".into();
        m.answers = false;
    });
    members().update(n, "till-2", |m| {
        m.report.gtid_executed = "0-1-129".into();
        if let Some(r) = m.report.replication.as_mut() {
            r.io = IoState::Connecting;
        }
    });
    members().update(n, "till-0", |m| m.answers = false);
    make_unready(&client, n, "till-0").await;
    make_unready(&client, n, "till-1").await;
    let waiting = wait_for("the failover held back", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("till").await.map_err(|e| e.to_string())?;
            match condition(&c, "Ready") {
                Some(ready) if ready.2.contains("1 of 2 replicas report (till-1") => Ok(ready),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // Well past failoverAfterSeconds, with passes every 5 s: still till-0's.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let c = clusters.get("till").await.expect("cluster");
    let st = c.status.clone().unwrap_or_default();
    assert_eq!(
        (st.current_primary.as_deref(), st.epoch),
        (Some("till-0"), Some(0)),
        "{waiting:?}"
    );
    assert!(st.primary_lost_since.is_some(), "{st:?}");
    assert!(
        members()
            .get(n, "till-2")
            .orders
            .iter()
            .all(|o| o.role == Role::Replica),
        "till-2 was promoted without the commits only till-1 holds"
    );

    // The human knows till-0's and till-1's node is gone for good.
    clusters
        .patch(
            "till",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "mysql.bulwark.dev/force-failover": "till-2"
            }}})),
        )
        .await
        .expect("annotate");
    let forced = primary_at(&clusters, "till-2", 1).await;
    let record = forced
        .status
        .and_then(|s| s.last_failover)
        .expect("the failover is recorded");
    assert_eq!(record.request.as_deref(), Some("till-2"));
    assert!(record.reason.starts_with("forced by"), "{}", record.reason);
    let events = events_for(&client, n, "till").await;
    assert!(
        events
            .iter()
            .any(|(reason, message)| reason == "Failover" && message.contains("forced by")),
        "{events:?}"
    );
    ns.delete().await.expect("delete namespace");
}

/// The operator renews the primary's lease every second with heartbeats signed for it and its
/// epoch; once the primary is lost it sends no more, promotes nobody before the last lease it
/// sent has run out plus the margin (here longer than `failoverAfterSeconds`), and gives the
/// new primary its lease before the order that promotes it.
#[tokio::test]
async fn a_failover_waits_for_the_lost_primarys_lease_and_leases_the_new_one_first() {
    use bulwark_contract::lease::{lease_for, LEASE_MARGIN};
    let (client, ns) = setup("lease").await;
    let n = ns.name();
    let clusters = running_cluster(&client, n).await;
    let lease = lease_for(Duration::from_secs(3)).unwrap();
    let heartbeats = |pod: &str| members().get(n, pod).heartbeats;
    wait_for("heartbeats to the primary", WAIT, || async move {
        let beats = heartbeats("till-0");
        match beats.iter().rev().take(3).collect::<Vec<_>>().as_slice() {
            [c, b, a] if c.0 - a.0 < Duration::from_millis(2500) => {
                assert_eq!((c.1.epoch, c.1.lease()), (0, lease));
                Ok(())
            }
            _ => Err(format!("{} so far", beats.len())),
        }
    })
    .await;
    assert!(heartbeats("till-1").is_empty() && heartbeats("till-2").is_empty());

    for pod in ["till-0", "till-1", "till-2"] {
        members().update(n, pod, |m| m.report.gtid_executed = "0-1-50".into());
    }
    lose_primary(&client, n).await;
    let c = primary_at(&clusters, "till-1", 1).await;
    let last_to_old = heartbeats("till-0").last().expect("heartbeats").0;
    let promoted_at = promotion_order(n, "till-1", 1).await;
    assert!(
        promoted_at - last_to_old >= lease + LEASE_MARGIN - Duration::from_millis(200),
        "promoted {:?} after the last heartbeat to the lost primary: {:?}",
        promoted_at - last_to_old,
        c.status.and_then(|s| s.last_failover)
    );
    // No heartbeat to the lost primary since, and the new one had its lease first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(heartbeats("till-0").last().unwrap().0, last_to_old);
    let new = heartbeats("till-1");
    assert!(
        new.iter().any(|(at, h)| h.epoch == 1 && *at <= promoted_at),
        "no lease for epoch 1 before the promotion: {new:?}"
    );
    ns.delete().await.expect("delete namespace");
}

/// A primary whose node is gone takes none of the heartbeats tried after (no connection is
/// made): its lease runs out from the last one it may have had, not from the last one tried
/// while its replicas were still noticing, and it counts as lost from its last answer.
#[tokio::test]
async fn a_lost_nodes_lease_runs_out_from_the_last_heartbeat_it_may_have_had() {
    use bulwark_contract::lease::{lease_for, LEASE_MARGIN};
    let (client, ns) = setup("lease-node").await;
    let n = ns.name();
    let clusters = running_cluster(&client, n).await;
    let bound = lease_for(Duration::from_secs(3)).unwrap() + LEASE_MARGIN;
    let heartbeats = |pod: &str| members().get(n, pod).heartbeats;
    wait_for("heartbeats to the primary", WAIT, || async move {
        match heartbeats("till-0").len() {
            0 | 1 => Err("fewer than two".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    for pod in ["till-0", "till-1", "till-2"] {
        members().update(n, pod, |m| m.report.gtid_executed = "0-1-50".into());
    }
    // The node goes: nothing reaches till-0 from now on, and its replicas notice 4 s later.
    members().update(n, "till-0", |m| m.reachable = false);
    tokio::time::sleep(Duration::from_secs(4)).await;
    lose_primary(&client, n).await;
    let last = heartbeats("till-0").last().expect("heartbeats").0;
    let c = primary_at(&clusters, "till-1", 1).await;
    let promoted_at = promotion_order(n, "till-1", 1).await;
    let after = promoted_at - last;
    let failover = c.status.and_then(|s| s.last_failover);
    assert!(
        after >= bound - Duration::from_millis(200),
        "promoted {after:?} after the last heartbeat till-0 may have had: {failover:?}"
    );
    // Counted from the last one tried, as before, it would be 4 s later at least.
    assert!(
        after < bound + Duration::from_millis(3500),
        "promoted {after:?} after the last heartbeat till-0 may have had, not within 3.5 s \
         of the bound ({bound:?}): {failover:?}"
    );
    ns.delete().await.expect("delete namespace");
}

/// Automatic failover turned off: the primary's pod still runs an agent that needs its lease
/// until it is rolled, so the lease is still renewed (longer: nothing is promoted now), never
/// left to lapse and fence a healthy primary.
#[tokio::test]
async fn turning_failover_off_keeps_the_running_primarys_lease() {
    use bulwark_contract::lease::LEASE_WITHOUT_FAILOVER;
    let (client, ns) = setup("lease-off").await;
    let n = ns.name();
    let clusters = running_cluster(&client, n).await;
    clusters
        .patch(
            "till",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replication": {"failoverAfterSeconds": 0}}})),
        )
        .await
        .expect("turn failover off");
    let beats = || members().get(n, "till-0").heartbeats;
    let since = Instant::now();
    wait_for("heartbeats with the longer lease", WAIT, || async move {
        let recent: Vec<_> = beats()
            .into_iter()
            .filter(|(at, h)| *at > since && h.lease() == LEASE_WITHOUT_FAILOVER)
            .collect();
        if recent.len() >= 3 {
            Ok(())
        } else {
            Err(format!("{} so far", recent.len()))
        }
    })
    .await;
    ns.delete().await.expect("delete namespace");
}
