//! The network split between nodes or pods: {primary, replica} | {operator, replica}, its
//! mirror {operator, primary} | {replicas}, and the operator alone cut from the primary.

use std::time::Instant;

use bulwark_e2e::node::{node_name, Cut};
use bulwark_e2e::{wait_ready, writer};

use super::cluster::*;

#[test]
fn a_primary_cut_off_with_one_replica_keeps_its_writes_and_is_not_replaced() {
    let case = Case::start("e2e-chaos-split");
    let (n, password, primary, service) = case.parts();
    let primary_node = node_of(n, primary);
    // {primary, its replica A} on two nodes, {operator, replica B} on node 1; the writer beside
    // A, so that it still reaches the primary and A still acknowledges its commits.
    let b = member_on(n, &node_name(1));
    let a = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| *p != primary && *p != b)
        .expect("replica A");
    let a_node = node_of(n, &a);
    let child = case.writer_on(&a_node);

    let cuts = (
        Cut::between(&primary_node, &node_name(1)),
        Cut::between(&a_node, &node_name(1)),
    );
    let began = Instant::now();
    let cut_at = writer::now();
    // Longer than failoverAfterSeconds plus the lease: B alone reports, and a commit A
    // acknowledged may be on A alone, so nobody is promoted; the primary, cut off from the
    // operator, keeps its lease on A's renewals and its writes go on (A acknowledges them).
    let mut waiting_said = None;
    let why = format!("a commit may be on {a} alone, which renews its lease");
    keeps_the_primary_for(n, password, primary, (began, 45), &why, |status, at| {
        let ready = bulwark_e2e::condition(status, "Ready");
        let refusal = "no replica is promoted until 2 report";
        if waiting_said.is_none()
            && ready["message"]
                .as_str()
                .is_some_and(|m| m.contains(refusal))
        {
            waiting_said = Some((ready["message"].clone(), at));
        }
    });
    let (said, at) = waiting_said.unwrap_or_else(|| {
        bulwark_e2e::dump(n);
        panic!("Ready never said that no replica is promoted until 2 report")
    });
    let healed_at = writer::now();
    drop(cuts);
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the heal");
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, primary, password, service);
    let (paused, refused) = outcome.within(cut_at, healed_at);
    let after = outcome.paused_after(healed_at);
    bulwark_e2e::figure!(
        "chaos, {{primary, replica}} cut from {{operator, replica}}: {primary} kept taking \
         writes on {a}'s renewals, no promotion in 45s, Ready said at {at:.1}s: {said}; during \
         the cut writes paused {paused:.1}s at most, {refused} refused; after the heal \
         {after:.1}s at most; over the whole run {:.1}s at most, {} acknowledged, none lost, {} \
         refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
    assert!(
        paused < 5.0 && refused == 0,
        "writes paused {paused:.1}s during the cut, {refused} refused: {}",
        outcome.lines
    );
    // B's registration on its return must not wait for B's old dump thread, which the
    // primary's agent ended during the cut: A acknowledges throughout, so commits must not
    // notice the heal.
    assert!(
        after < 3.0,
        "writes paused {after:.1}s after the heal though {a} acknowledged throughout: {}",
        outcome.lines
    );
}

#[test]
fn a_primary_cut_off_from_its_replicas_alone_holds_its_writes_and_is_not_replaced() {
    let case = Case::start("e2e-chaos-mirror");
    let (n, password, primary, service) = case.parts();
    let replicas: Vec<String> = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .filter(|p| *p != primary)
        .collect();
    let child = case.writer_on(&node_of(n, primary));

    // {operator, primary} | {both replicas}: by pod address, since one replica shares node 1
    // with the operator.
    let (operator_ip, primary_ip) = (
        bulwark_e2e::operator_pod("{.status.podIP}"),
        pod_ip(n, primary),
    );
    let cuts: Vec<Cut> = replicas
        .iter()
        .flat_map(|r| {
            let ip = pod_ip(n, r);
            [
                Cut::between(&primary_ip, &ip),
                Cut::between(&operator_ip, &ip),
            ]
        })
        .collect();
    let began = Instant::now();
    let cut_at = writer::now();
    // The operator reaches the primary and renews its lease, so it is not lost: nobody may be
    // promoted, and it stays writable. No replica acknowledges its commits, so they wait
    // (semi-sync without a timeout) until one returns: held, never answered without a copy.
    let why = format!("the operator still reaches {primary}");
    keeps_the_primary_for(n, password, primary, (began, 40), &why, |_, _| {});
    let healed_at = writer::now();
    drop(cuts);
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the heal");
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, primary, password, service);
    assert_eq!(current_primary(n).as_deref(), Some(primary));
    // No commit may be answered while no replica could hold a copy (the writer's own 5 s bound
    // lets the last one before the cut finish a moment into it).
    if let Some(at) = outcome
        .first_ack_after(cut_at + 6.0)
        .filter(|at| *at < healed_at)
    {
        panic!(
            "a commit was acknowledged at {at:.1} while no replica received (cut at \
             {cut_at:.1}, healed at {healed_at:.1}): {}",
            outcome.lines
        );
    }
    let resumed = outcome.first_ack_after(healed_at).map(|at| at - healed_at);
    bulwark_e2e::figure!(
        "chaos, {{operator, primary}} cut from both replicas: {primary} held its writes (no \
         replica to acknowledge them) and stayed primary, no promotion in 40s; writes resumed \
         {:.1}s after the heal; {} acknowledged, none lost, {} refused",
        resumed.unwrap_or(f64::NAN),
        outcome.acked.len(),
        outcome.refused
    );
    // The primary's agent ended both replicas' dump threads during the cut, so their
    // registrations on their return wait for nothing (they waited 11.9-14.1 s before).
    assert!(
        resumed.is_some_and(|r| r < 5.0),
        "writes resumed {:.1}s after the heal, not within 5s: {}",
        resumed.unwrap_or(f64::NAN),
        outcome.lines
    );
}

#[test]
fn a_primary_cut_off_from_the_operator_alone_keeps_its_writes_and_is_not_replaced() {
    let case = Case::start("e2e-chaos-operator");
    let (n, password, primary, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    let operator_ip = bulwark_e2e::operator_pod("{.status.podIP}");
    let cut = Cut::between(&operator_ip, &pod_ip(n, primary));
    let began = Instant::now();
    let cut_at = writer::now();
    // The replicas still receive from it, so it is not lost and nobody is promoted; without
    // the operator's heartbeats its replicas' renewals keep its lease, and its writes go on.
    let why = format!("the replicas still receive from {primary}");
    keeps_the_primary_for(n, password, primary, (began, 40), &why, |_, _| {});
    let healed_at = writer::now();
    drop(cut);
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, primary, password, service);
    assert_eq!(current_primary(n).as_deref(), Some(primary));
    let (paused, refused) = outcome.within(cut_at, healed_at);
    bulwark_e2e::figure!(
        "chaos, operator cut from the primary: {primary} kept taking writes on its replicas' \
         renewals, no promotion in 40s; during the cut writes paused {paused:.1}s at most, \
         {refused} refused; {} acknowledged, none lost",
        outcome.acked.len(),
    );
    assert!(
        paused < 5.0 && refused == 0,
        "writes paused {paused:.1}s during the cut, {refused} refused: {}",
        outcome.lines
    );
}
