//! Two faults at once: the primary's server crash-looping while a replica's node is down. The
//! one replica that reports cannot prove it holds every acknowledged commit (one the stopped
//! replica acknowledged may be on that replica alone), so nobody is promoted and `Ready` says
//! why; once the crashes stop, the primary recovers its own commits and takes writes again, and
//! once the node returns its replica catches up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulwark_e2e::node::{keep_killing, node_name, server_pod, StoppedNode};
use bulwark_e2e::{pod_uid, wait_ready, wait_takes_writes, writer};

use super::cluster::*;

#[test]
fn a_primary_crash_looping_while_a_replica_is_down_is_kept_and_recovers_every_row() {
    let case = Case::start("e2e-chaos-crashloop");
    let (n, password, primary, service) = case.parts();
    // B, the replica whose node stops, is off node 1 (the operator's and the writer's).
    let b = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| p != primary && node_of(n, p) != node_name(1))
        .expect("a replica off node 1");
    let b_node = node_of(n, &b);
    let uid = server_pod(n, primary);
    let child = case.writer_on(&node_name(1));

    let stopped = StoppedNode::stop(&b_node);
    // B is silent before the primary fails: the case is the second fault, not a race of two.
    std::thread::sleep(Duration::from_secs(5));
    let began = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let killing = keep_killing(uid.clone(), stop.clone());
    // Longer than failoverAfterSeconds, the lease and its margin: the one reporting replica may
    // lack a commit that B alone acknowledged, so nobody may be promoted.
    let refusal = "no replica is promoted until 2 report";
    let mut said = None;
    let mut samples = WritableSamples::default();
    while began.elapsed() < Duration::from_secs(40) {
        let writable = samples.take(n, password, began);
        assert!(
            writable.iter().all(|p| p == primary),
            "{writable:?} writable while {primary}'s server crash-loops"
        );
        if let Some(status) = cluster_status(n) {
            if status["currentPrimary"].as_str() != Some(primary) {
                bulwark_e2e::dump(n);
                panic!("a replica was promoted while {b} was down: {status}");
            }
            let ready = bulwark_e2e::condition(&status, "Ready");
            let message = ready["message"].as_str().unwrap_or_default();
            if said.is_none() && message.contains(refusal) {
                said = Some((message.to_owned(), began.elapsed().as_secs_f64()));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    let kills = killing.join().expect("killer");
    let (said, said_at) = said.unwrap_or_else(|| {
        bulwark_e2e::dump(n);
        panic!("Ready never said that {refusal}")
    });
    assert!(kills >= 2, "the primary's server was killed {kills} times");
    assert_eq!(
        pod_uid(n, primary),
        uid,
        "the primary's pod itself was replaced"
    );

    // The server comes back (after the kubelet's back-off) with every commit it logged, and
    // takes writes: A acknowledges them.
    let stopped_killing = writer::now();
    wait_takes_writes(n, primary, password, service);
    let back = writer::now() - stopped_killing;
    stopped.start();
    wait_ready(n, CLUSTER, 3, "the cluster Ready with B back");
    assert_eq!(current_primary(n).as_deref(), Some(primary));
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, primary, password, service);
    wait_replicas_hold_primary_rows(n, password, primary);
    bulwark_e2e::figure!(
        "chaos, primary's server crash-looping ({kills} kills in 40s) while {b}'s node is down: \
         no promotion, Ready said at {said_at:.1}s: {said:?}; {primary} took writes again \
         {back:.1}s after the killing stopped; writes paused {:.1}s at most, {} acknowledged, \
         none lost, {} refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}
