//! Whole nodes lost or drained: the primary's node stops and returns; the primary's node is
//! drained.

use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_name, servers_of, StoppedNode};
use bulwark_e2e::{sql, wait_for, wait_ready, wait_takes_writes, writer};

use super::cluster::*;

#[test]
fn the_primarys_node_stops_and_returns_without_losing_an_acknowledged_row() {
    let case = Case::start("e2e-chaos-node");
    let (n, password, old, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    let lost_node = node_of(n, old);
    let uid = bulwark_e2e::pod_uid(n, old);
    let began = Instant::now();
    let began_unix = unix_now();
    let stopped = StoppedNode::stop(&lost_node);
    // Its server is gone with the node (so not sampling it below hides nothing): killed, it
    // takes a moment to exit (a large process tears its memory down, then waits to be reaped).
    let killed = Instant::now();
    while !servers_of(&uid).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "{old}'s mariadbd still runs 10s after its node stopped"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Sampled until writes land on a new primary: at most one member is writable at any time.
    let mut promoted_at = None;
    let mut counted_lost = None;
    // When the operator dates the loss from: the primary's last answer to anyone.
    let mut last_heard = None;
    let new = loop {
        let writable = writable_members(n, password, Some(old));
        assert!(
            writable.len() <= 1,
            "two writable members at {:.1}s: {writable:?}",
            began.elapsed().as_secs_f64()
        );
        if promoted_at.is_none() {
            match primary_state(n) {
                (Some(p), _) if p != old => promoted_at = Some((p, began.elapsed().as_secs_f64())),
                (_, true) if counted_lost.is_none() => {
                    counted_lost = Some(began.elapsed().as_secs_f64());
                    last_heard = cluster_status(n)
                        .and_then(|s| unix_seconds(s["primaryLostSince"].as_str()?))
                        .map(|at| at - began_unix);
                }
                _ => {}
            }
        }
        if let Some((p, _)) = &promoted_at {
            if writable.as_slice() == [p.clone()] {
                break p.clone();
            }
        }
        if began.elapsed() > Duration::from_secs(150) {
            bulwark_e2e::dump(n);
            panic!("no member took writes within 150s after {lost_node} stopped");
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let chosen = promoted_at.map(|(_, t)| t).unwrap_or(f64::NAN);
    let writable = began.elapsed().as_secs_f64();
    wait_takes_writes(n, &new, password, service);
    let writable_again = began.elapsed().as_secs_f64();
    // To the millisecond, from the agent's log.
    let made_writable =
        agent_applied_at(n, &new, "set-writable").map_or(f64::NAN, |at| at - began_unix);
    bulwark_e2e::figure!(
        "chaos, primary's node stopped: {old} last heard {:.1}s after {lost_node} began to \
         stop, counted lost at {:.1}s, {new} chosen at {chosen:.1}s and made writable at \
         {made_writable:.2}s (seen at {writable:.1}s), writes through {service} land on it at \
         {writable_again:.1}s",
        last_heard.unwrap_or(f64::NAN),
        counted_lost.unwrap_or(f64::NAN)
    );

    // The node boots again: its pods restart, and the old primary comes back as a read-only
    // replica of the new one holding what it holds, never as a second primary.
    std::thread::sleep(Duration::from_secs(5));
    stopped.start();
    let back = Instant::now();
    wait_for(
        n,
        &format!("{old} back as a read-only replica"),
        Duration::from_secs(180),
        || {
            let writable = writable_members(n, password, None);
            assert!(writable.len() <= 1, "two writable members: {writable:?}");
            match sql(n, old, password, "localhost", "SELECT @@read_only") {
                Ok(out) if out.trim() == "1" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    wait_ready(n, CLUSTER, 3, "the cluster Ready with the returned node");
    let rejoined = back.elapsed().as_secs_f64();
    assert_eq!(current_primary(n).as_deref(), Some(new.as_str()));

    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &new, password, service);
    // The returned member holds exactly the new primary's rows once it has caught up.
    let rows = |pod: &str| {
        sql(
            n,
            pod,
            password,
            "localhost",
            "SELECT COUNT(*) FROM ledger.acks",
        )
    };
    let want = rows(&new).expect("the primary's rows");
    // Waited for by hand, so that a member left behind is shown with its replication state
    // (seen once: read-only, counted ready, and not applying).
    let since = Instant::now();
    loop {
        match rows(old) {
            Ok(have) if have == want => break,
            other if since.elapsed() > Duration::from_secs(60) => {
                let replication = sql(n, old, password, "localhost", "SHOW ALL SLAVES STATUS\\G");
                bulwark_e2e::dump(n);
                panic!(
                    "{old} holds {other:?} rows, the primary {} after 60s; its replication: \
                     {replication:?}",
                    want.trim()
                );
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
    bulwark_e2e::figure!(
        "chaos, primary's node stopped: writes paused {:.1}s at most, {} acknowledged, none \
         lost, {} refused; {old} back as a replica {rejoined:.1}s after its node started",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}

/// Uncordons a node when dropped.
struct Drained(String);

impl Drop for Drained {
    fn drop(&mut self) {
        let _ = bulwark_e2e::try_kubectl(&["uncordon", &self.0]);
    }
}

#[test]
fn draining_the_primarys_node_hands_the_primary_over_without_losing_a_row() {
    let case = Case::start("e2e-chaos-drain");
    let (n, password, old, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    // `kubectl drain` evicts the primary's pod (through the PodDisruptionBudget): its agent
    // holds it in its preStop hooks until the primary is handed over, and its pod cannot come
    // back while the node is cordoned (its claim is bound there).
    let node = node_of(n, old);
    let drained = Drained(node.clone());
    let began = Instant::now();
    // The cluster's pods only: the others on the node (the volume provisioner's helper pods,
    // which have no controller and make `kubectl drain` refuse the whole node while they run;
    // a previous case's pods still terminating) are not what this case is about.
    let selector = format!("--pod-selector=app.kubernetes.io/instance={CLUSTER}");
    let mut drain = Some(std::thread::spawn({
        let node = node.clone();
        move || {
            bulwark_e2e::try_kubectl(&[
                "drain",
                &node,
                &selector,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=180s",
            ])
        }
    }));
    let mut samples = WritableSamples::default();
    let new = loop {
        let writable = samples.take(n, password, began);
        if let Some(p) = current_primary(n).filter(|p| *p != old) {
            if writable.as_slice() == [p.clone()] {
                break p;
            }
        }
        // A refusal ends the drain at once; otherwise it ends once the evicted pod is gone
        // (its preStop hook holds it until the handover), maybe a moment before the samples
        // show the new primary.
        if drain.as_ref().is_some_and(|d| d.is_finished()) {
            let ended = drain
                .take()
                .expect("the drain")
                .join()
                .expect("drain thread");
            if let Err(e) = ended {
                bulwark_e2e::dump(n);
                panic!("kubectl drain {node} failed: {e}");
            }
        }
        if began.elapsed() > Duration::from_secs(120) {
            bulwark_e2e::dump(n);
            panic!("no member took writes within 120s of draining {node}");
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let handed_over = began.elapsed().as_secs_f64();
    if let Some(drain) = drain {
        let drain = drain.join().expect("drain thread");
        assert!(drain.is_ok(), "kubectl drain {node}: {drain:?}");
    }
    let record = cluster_status(n).expect("the cluster")["lastSwitchover"].clone();
    assert_eq!(
        (
            record["from"].as_str(),
            record["to"].as_str(),
            record["result"].as_str()
        ),
        (Some(old), Some(new.as_str()), Some("Completed")),
        "the drain was not a completed switchover: {record}"
    );
    assert!(
        cluster_status(n).expect("the cluster")["lastFailover"].is_null(),
        "a failover followed the drain"
    );

    // Back in service: the old primary's pod returns to its node as a read-only replica with
    // every row.
    drop(drained);
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the uncordon");
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &new, password, service);
    assert_eq!(read_only(n, old, password), Some(true));
    bulwark_e2e::figure!(
        "chaos, primary's node drained: {new} took writes {handed_over:.1}s after the drain \
         began (a switchover, no failover); writes paused {:.1}s at most, {} acknowledged, none \
         lost, {} refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}
