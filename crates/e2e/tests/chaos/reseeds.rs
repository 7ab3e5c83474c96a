//! Two faults at once: a replica's volume lost (its claim deleted with its pod, so that it
//! comes back empty and must be seeded) while the primary's node stops. The intact replica
//! alone cannot prove it holds every acknowledged commit (one only the lost volume
//! acknowledged is now on the stopped primary alone), and the empty one is given no copy the
//! primary cannot vouch for (a copy would report as a replica and count towards a quorum it
//! cannot stand for): nobody is promoted and `Ready` says why. Once the node returns, the
//! primary takes writes again, the empty replica is seeded, and every acknowledged row is on
//! all three members.

use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_name, StoppedNode};
use bulwark_e2e::{
    get_json, kubectl_ok, pod_uid, try_kubectl, wait_ready, wait_takes_writes, writer,
};

use super::cluster::*;

/// Whether `pod`'s `seed` init container is running (waiting for a donor, or copying).
fn seeding(n: &str, pod: &str) -> bool {
    get_json(n, &format!("pod/{pod}")).is_some_and(|p| {
        p["status"]["initContainerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == "seed" && c["state"]["running"].is_object())
    })
}

#[test]
fn a_replicas_volume_lost_while_the_primarys_node_stops_promotes_nobody_and_loses_nothing() {
    let case = Case::start("e2e-chaos-reseed");
    let (n, password, primary, service) = case.parts();
    let emptied = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| p != primary)
        .expect("a replica");
    let primary_node = node_of(n, primary);
    let old_uid = pod_uid(n, &emptied);
    let child = case.writer_on(&node_name(1));

    kubectl_ok(&[
        "delete",
        "pvc",
        "-n",
        n,
        &format!("data-{emptied}"),
        "--wait=false",
    ]);
    kubectl_ok(&["delete", "pod", "-n", n, &emptied, "--wait=false"]);
    let stopped = StoppedNode::stop(&primary_node);
    let began = Instant::now();
    // Longer than failoverAfterSeconds, the lease and its margin.
    let refusal = "no replica is promoted until 2 report";
    let mut said = None;
    while began.elapsed() < Duration::from_secs(40) {
        let writable = writable_members(n, password, Some(primary));
        assert!(
            writable.is_empty(),
            "{writable:?} writable at {:.1}s while {primary}'s node is down",
            began.elapsed().as_secs_f64()
        );
        if let Some(status) = cluster_status(n) {
            if status["currentPrimary"].as_str() != Some(primary) {
                bulwark_e2e::dump(n);
                panic!("a replica was promoted while {emptied} was empty: {status}");
            }
            let ready = bulwark_e2e::condition(&status, "Ready");
            let message = ready["message"].as_str().unwrap_or_default();
            if said.is_none() && message.contains(refusal) {
                said = Some((message.to_owned(), began.elapsed().as_secs_f64()));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (said, said_at) = said.unwrap_or_else(|| {
        bulwark_e2e::dump(n);
        panic!("Ready never said that {refusal}")
    });
    assert_ne!(
        pod_uid(n, &emptied),
        old_uid,
        "{emptied} was not made again"
    );
    assert!(
        seeding(n, &emptied),
        "{emptied} is not waiting in its seed while the primary is away"
    );

    // The node returns: the primary recovers and takes writes again (no failover happened),
    // and the empty member is given a copy now that the primary vouches for one.
    stopped.start();
    let returned = Instant::now();
    wait_takes_writes(n, primary, password, service);
    let back = returned.elapsed().as_secs_f64();
    wait_ready(n, CLUSTER, 3, "the cluster Ready with the seeded member");
    let seeded_at = returned.elapsed().as_secs_f64();
    assert_eq!(current_primary(n).as_deref(), Some(primary));
    let seed_log = try_kubectl(&["logs", "-n", n, &emptied, "-c", "seed"]).unwrap_or_default();
    assert!(
        seed_log.contains("copied") && seed_log.contains("the server continues from GTID"),
        "{emptied} was not seeded:\n{seed_log}"
    );
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, primary, password, service);
    wait_replicas_hold_primary_rows(n, password, primary);
    bulwark_e2e::figure!(
        "chaos, {emptied}'s volume lost while {primary}'s node is down: no promotion, Ready \
         said at {said_at:.1}s: {said:?}; {primary} took writes again {back:.1}s after the \
         node returned, {emptied} seeded and the cluster Ready at {seeded_at:.1}s; writes \
         paused {:.1}s at most, {} acknowledged, none lost, {} refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}
