//! Chaos on the three-node test cluster (`BULWARK_NODE_COUNT=3`): members on three nodes, the
//! operator on node 1 (beside the control plane), a writer recording every acknowledged row,
//! and faults made for real: a whole node lost (its link down, every process of it killed,
//! `tests/node/node.sh node stop`), or the network split between nodes (`node.sh cut`). Each
//! case ends with every acknowledged row on the final primary and never two writable members at
//! a sampled moment, or with the documented refusal, and prints its write unavailability, time
//! to promotion and rows. The cases run one after the other (they share the nodes).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_count, node_name, servers_of, Cut, StoppedNode};
use bulwark_e2e::{
    apply, get_json, kubectl_ok, operator, secret_value, sql, wait_for, wait_ready,
    wait_takes_writes, writer, Namespace,
};

const CLUSTER: &str = "atoll";

/// The node `pod` runs on.
fn node_of(n: &str, pod: &str) -> String {
    get_json(n, &format!("pod/{pod}")).unwrap_or_default()["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn current_primary(n: &str) -> Option<String> {
    primary_state(n).0
}

/// The cluster's primary, and whether it counts as lost (`status.primaryLostSince`).
fn primary_state(n: &str) -> (Option<String>, bool) {
    let status = cluster_status(n).unwrap_or_default();
    (
        status["currentPrimary"].as_str().map(str::to_owned),
        status["primaryLostSince"].is_string(),
    )
}

/// `@@read_only` of `pod`'s server, asked on the pod itself; `None` when it does not answer (a
/// fenced primary ends client sessions, root's included).
fn read_only(n: &str, pod: &str, password: &str) -> Option<bool> {
    match sql(n, pod, password, "localhost", "SELECT @@read_only")
        .ok()?
        .trim()
    {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// Which members answer as writable (`@@read_only` 0), asked on each pod itself, but `off`: the
/// member whose node is down (its server is gone with it, and the API server would wait for the
/// node's kubelet until its connection times out).
fn writable_members(n: &str, password: &str, off: Option<&str>) -> Vec<String> {
    member_states(n, password, off)
        .into_iter()
        .filter(|(_, read_only)| *read_only == Some(false))
        .map(|(pod, _)| pod)
        .collect()
}

/// Each member's `@@read_only` as [`read_only`] reads it, but `off`'s.
fn member_states(n: &str, password: &str, off: Option<&str>) -> Vec<(String, Option<bool>)> {
    (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .filter(|pod| Some(pod.as_str()) != off)
        .map(|pod| {
            let state = read_only(n, &pod, password);
            (pod, state)
        })
        .collect()
}

/// The cluster's status, `None` when it could not be read (a sample to skip, not a verdict).
fn cluster_status(n: &str) -> Option<serde_json::Value> {
    get_json(n, &format!("mysqlcluster/{CLUSTER}")).map(|c| c["status"].clone())
}

/// The cluster on three nodes, one member each, with its primary off node 1 (which holds the
/// control plane and cannot be stopped): a switchover moves it when it started there.
fn three_members_on_three_nodes(n: &str, password: &str) -> String {
    let nodes: BTreeSet<String> = (0..3)
        .map(|i| node_of(n, &format!("{CLUSTER}-{i}")))
        .collect();
    if nodes.len() != 3 {
        bulwark_e2e::dump(n);
        panic!("the members share nodes: {nodes:?}");
    }
    let primary = current_primary(n).expect("a primary");
    if node_of(n, &primary) != node_name(1) {
        return primary;
    }
    let to = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| *p != primary)
        .expect("a replica");
    kubectl_ok(&[
        "annotate",
        "-n",
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        &format!("mysql.bulwark.dev/switchover={to}"),
    ]);
    wait_for(
        n,
        &format!("the switchover to {to}"),
        Duration::from_secs(90),
        || match current_primary(n) {
            Some(p) if p == to => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the switchover");
    wait_takes_writes(n, &to, password, &format!("{CLUSTER}-primary"));
    to
}

/// A namespace with the operator and a Ready 3-member cluster (`failoverAfterSeconds: 10`) on
/// three nodes (required anti-affinity: the default only prefers it), its primary off node 1;
/// the root password and the primary.
fn three_member_cluster(prefix: &str) -> (Namespace, String, String) {
    operator();
    let ns = Namespace::create(prefix);
    let n = ns.0.as_str();
    apply(
        n,
        &format!(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: {CLUSTER}}}\n\
             spec: {{engine: mariadb, version: \"10.11\", replicas: 3, storage: {{size: 1Gi}}, \
             replication: {{failoverAfterSeconds: 10}}, affinity: {{podAntiAffinity: \
             {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: kubernetes.io/hostname, \
             labelSelector: {{matchLabels: {{app.kubernetes.io/instance: {CLUSTER}, \
             app.kubernetes.io/component: database}}}}}}]}}}}}}\n"
        ),
    );
    wait_ready(n, CLUSTER, 3, "the cluster to become Ready");
    let password = secret_value(n, &format!("{CLUSTER}-credentials"), "root");
    let primary = three_members_on_three_nodes(n, &password);
    (ns, password, primary)
}

#[test]
fn the_primarys_node_stops_and_returns_without_losing_an_acknowledged_row() {
    three_nodes();
    let _one_at_a_time = serial();
    let (ns, password, old) = three_member_cluster("e2e-chaos-node");
    let n = ns.0.as_str();
    let service = format!("{CLUSTER}-primary");
    writer::create_table(n, &old, &password, &service);
    let child = writer::start_in_client_on(n, &password, &service, (240, 5), &node_name(1));
    std::thread::sleep(Duration::from_secs(5));

    let lost_node = node_of(n, &old);
    let uid = get_json(n, &format!("pod/{old}")).expect("the primary's pod")["metadata"]["uid"]
        .as_str()
        .expect("its uid")
        .to_owned();
    let began = Instant::now();
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
    let new = loop {
        let writable = writable_members(n, &password, Some(&old));
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
    let promoted = promoted_at.map(|(_, t)| t).unwrap_or(f64::NAN);
    wait_takes_writes(n, &new, &password, &service);
    let writable_again = began.elapsed().as_secs_f64();
    bulwark_e2e::figure!(
        "chaos, primary's node stopped: counted lost {:.1}s after {lost_node} stopped, {new} \
         promoted at {promoted:.1}s, writes through {service} land on it at {writable_again:.1}s",
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
            let writable = writable_members(n, &password, None);
            assert!(writable.len() <= 1, "two writable members: {writable:?}");
            match sql(n, &old, &password, "localhost", "SELECT @@read_only") {
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
    outcome.assert_none_lost(n, &new, &password, &service);
    // The returned member holds exactly the new primary's rows once it has caught up.
    let rows = |pod: &str| {
        sql(
            n,
            pod,
            &password,
            "localhost",
            "SELECT COUNT(*) FROM ledger.acks",
        )
    };
    let want = rows(&new).expect("the primary's rows");
    // Waited for by hand, so that a member left behind is shown with its replication state
    // (seen once: read-only, counted ready, and not applying).
    let since = Instant::now();
    loop {
        match rows(&old) {
            Ok(have) if have == want => break,
            other if since.elapsed() > Duration::from_secs(60) => {
                let replication = sql(n, &old, &password, "localhost", "SHOW ALL SLAVES STATUS\\G");
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

/// The member on `node`.
fn member_on(n: &str, node: &str) -> String {
    (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| node_of(n, p) == node)
        .unwrap_or_else(|| panic!("no member on {node}"))
}

#[test]
fn a_primary_cut_off_with_one_replica_keeps_its_writes_and_is_not_replaced() {
    three_nodes();
    let _one_at_a_time = serial();
    let (ns, password, primary) = three_member_cluster("e2e-chaos-split");
    let n = ns.0.as_str();
    let primary_node = node_of(n, &primary);
    // {primary, its replica A} on two nodes, {operator, replica B} on node 1; the writer beside
    // A, so that it still reaches the primary and A still acknowledges its commits.
    let b = member_on(n, &node_name(1));
    let a = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| *p != primary && *p != b)
        .expect("replica A");
    let a_node = node_of(n, &a);
    let service = format!("{CLUSTER}-primary");
    writer::create_table(n, &primary, &password, &service);
    let child = writer::start_in_client_on(n, &password, &service, (240, 5), &a_node);
    std::thread::sleep(Duration::from_secs(5));

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
    let why = format!("a commit may be on {a} alone");
    let fenced = no_promotion_for(n, &password, &primary, (began, 45), &why, |status, at| {
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
    if let Some(fenced) = fenced {
        bulwark_e2e::dump(n);
        panic!("{primary} turned read-only {fenced:.1}s after the cut while {a} renewed its lease");
    }
    let healed_at = writer::now();
    drop(cuts);
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the heal");
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &primary, &password, &service);
    let (paused, refused) = outcome.within(cut_at, healed_at);
    bulwark_e2e::figure!(
        "chaos, {{primary, replica}} cut from {{operator, replica}}: {primary} kept taking \
         writes on {a}'s renewals, no promotion in 45s, Ready said at {at:.1}s: {said}; during \
         the cut writes paused {paused:.1}s at most, {refused} refused; over the whole run {:.1}s \
         at most, {} acknowledged, none lost, {} refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
    assert!(
        paused < 5.0 && refused == 0,
        "writes paused {paused:.1}s during the cut, {refused} refused: {}",
        outcome.lines
    );
}

/// Fails unless the test cluster has exactly three nodes (one member on each).
fn three_nodes() {
    assert_eq!(
        node_count(),
        3,
        "the chaos cases need three nodes: BULWARK_NODE_COUNT=3 tests/node/node.sh up \
         (scripts/test.sh does)"
    );
}

/// Samples the cluster until `seconds` after `began`: never two writable members, and `primary`
/// stays the primary (a promotion fails the test, naming `why` none may happen); each status
/// read goes to `seen` with its time. Returns when `primary` was first seen read-only (fenced).
fn no_promotion_for(
    n: &str,
    password: &str,
    primary: &str,
    (began, seconds): (Instant, u64),
    why: &str,
    mut seen: impl FnMut(&serde_json::Value, f64),
) -> Option<f64> {
    let mut fenced = None;
    while began.elapsed() < Duration::from_secs(seconds) {
        let states = member_states(n, password, None);
        let writable: Vec<_> = states.iter().filter(|(_, ro)| *ro == Some(false)).collect();
        assert!(writable.len() <= 1, "two writable members: {writable:?}");
        if fenced.is_none() && states.contains(&(primary.to_owned(), Some(true))) {
            fenced = Some(began.elapsed().as_secs_f64());
        }
        // A status that could not be read is a sample to skip, not a verdict.
        if let Some(status) = cluster_status(n) {
            assert_eq!(
                status["currentPrimary"].as_str(),
                Some(primary),
                "a replica was promoted while {why}: {status}"
            );
            seen(&status, began.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    fenced
}

/// The cases share the nodes: one runs at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_primary_cut_off_from_the_operator_alone_keeps_its_writes_and_is_not_replaced() {
    three_nodes();
    let _one_at_a_time = serial();
    let (ns, password, primary) = three_member_cluster("e2e-chaos-operator");
    let n = ns.0.as_str();
    let service = format!("{CLUSTER}-primary");
    writer::create_table(n, &primary, &password, &service);
    let child = writer::start_in_client_on(n, &password, &service, (240, 5), &node_name(1));
    std::thread::sleep(Duration::from_secs(5));

    let operator_ip = bulwark_e2e::operator_pod("{.status.podIP}");
    let primary_ip = get_json(n, &format!("pod/{primary}")).expect("the primary's pod")["status"]
        ["podIP"]
        .as_str()
        .expect("its address")
        .to_owned();
    let cut = Cut::between(&operator_ip, &primary_ip);
    let began = Instant::now();
    let cut_at = writer::now();
    // The replicas still receive from it, so it is not lost and nobody is promoted; without
    // the operator's heartbeats its replicas' renewals keep its lease, and its writes go on.
    let why = format!("the replicas still receive from {primary}");
    let fenced = no_promotion_for(n, &password, &primary, (began, 40), &why, |_, _| {});
    if let Some(fenced) = fenced {
        bulwark_e2e::dump(n);
        panic!("{primary} turned read-only {fenced:.1}s after the operator was cut off from it");
    }
    let healed_at = writer::now();
    drop(cut);
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &primary, &password, &service);
    assert_eq!(current_primary(n).as_deref(), Some(primary.as_str()));
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

/// Uncordons a node when dropped.
struct Drained(String);

impl Drop for Drained {
    fn drop(&mut self) {
        let _ = bulwark_e2e::try_kubectl(&["uncordon", &self.0]);
    }
}

#[test]
fn draining_the_primarys_node_hands_the_primary_over_without_losing_a_row() {
    three_nodes();
    let _one_at_a_time = serial();
    let (ns, password, old) = three_member_cluster("e2e-chaos-drain");
    let n = ns.0.as_str();
    let service = format!("{CLUSTER}-primary");
    writer::create_table(n, &old, &password, &service);
    let child = writer::start_in_client_on(n, &password, &service, (240, 5), &node_name(1));
    std::thread::sleep(Duration::from_secs(5));

    // `kubectl drain` evicts the primary's pod (through the PodDisruptionBudget): its agent
    // holds it in its preStop hooks until the primary is handed over, and its pod cannot come
    // back while the node is cordoned (its claim is bound there).
    let node = node_of(n, &old);
    let drained = Drained(node.clone());
    let began = Instant::now();
    let drain = std::thread::spawn({
        let node = node.clone();
        move || {
            bulwark_e2e::try_kubectl(&[
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=180s",
            ])
        }
    });
    // Members are asked one after another, so one sample can show the old primary writable
    // before its demotion and the new one after its promotion. Two members writable in two
    // samples running are writable at once: each answered between the other's two answers,
    // and a demoted primary is not made writable again within a sample.
    let mut before: Vec<String> = Vec::new();
    let new = loop {
        let writable = writable_members(n, &password, None);
        let both: Vec<&String> = writable.iter().filter(|p| before.contains(p)).collect();
        if both.len() > 1 {
            let at = began.elapsed().as_secs_f64();
            bulwark_e2e::dump(n);
            panic!(
                "two members writable in two samples running, at {at:.1}s: {both:?}; status: {}",
                cluster_status(n).unwrap_or_default()
            );
        }
        before = writable.clone();
        if let Some(p) = current_primary(n).filter(|p| *p != old) {
            if writable.as_slice() == [p.clone()] {
                break p;
            }
        }
        if began.elapsed() > Duration::from_secs(120) {
            bulwark_e2e::dump(n);
            panic!("no member took writes within 120s of draining {node}");
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let handed_over = began.elapsed().as_secs_f64();
    let drain = drain.join().expect("drain thread");
    assert!(drain.is_ok(), "kubectl drain {node}: {drain:?}");
    let record = cluster_status(n).expect("the cluster")["lastSwitchover"].clone();
    assert_eq!(
        (
            record["from"].as_str(),
            record["to"].as_str(),
            record["result"].as_str()
        ),
        (Some(old.as_str()), Some(new.as_str()), Some("Completed")),
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
    outcome.assert_none_lost(n, &new, &password, &service);
    assert_eq!(read_only(n, &old, &password), Some(true));
    bulwark_e2e::figure!(
        "chaos, primary's node drained: {new} took writes {handed_over:.1}s after the drain \
         began (a switchover, no failover); writes paused {:.1}s at most, {} acknowledged, none \
         lost, {} refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}
