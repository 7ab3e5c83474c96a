//! A primary cut off the pod network on the real node (every packet to or from its pod
//! dropped, the node's own kubelet still reaching it): with automatic failover on, its lease
//! runs out and it fences itself (read-only, every commit held) before a replica is promoted,
//! so at no sampled moment do two members take writes; writes resume through the primary
//! Service on the new primary with every acknowledged row; once the cut heals, the old primary
//! is a read-only replica at the new epoch.

use std::time::{Duration, Instant};

use bulwark_e2e::node::Isolated;
use bulwark_e2e::{
    apply, get_json, operator, secret_value, sql, wait_for, wait_ready, wait_takes_writes, writer,
    Namespace,
};

/// `@@read_only` of `pod`'s server, read on the pod itself (not over the pod network); `None`
/// when it does not answer (a fenced primary ends client sessions every 200 ms, root's
/// included: a sample that is cut short is taken again).
fn read_only(n: &str, pod: &str, password: &str) -> Option<bool> {
    let out = sql(n, pod, password, "localhost", "SELECT @@read_only").ok()?;
    match out.trim() {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// The cluster's primary, and whether it counts as lost (`status.primaryLostSince`).
fn primary_state(n: &str) -> (Option<String>, bool) {
    let status = get_json(n, "mysqlcluster/islet").unwrap_or_default()["status"].clone();
    (
        status["currentPrimary"].as_str().map(str::to_owned),
        status["primaryLostSince"].is_string(),
    )
}

fn current_primary(n: &str) -> Option<String> {
    primary_state(n).0
}

#[test]
fn a_primary_cut_off_fences_itself_before_a_replica_is_promoted() {
    operator();
    let ns = Namespace::create("e2e-partition");
    let n = ns.0.as_str();
    apply(
        n,
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: islet}\n\
         spec: {engine: mariadb, version: \"10.11\", replicas: 3, storage: {size: 1Gi}, \
         replication: {failoverAfterSeconds: 10}}\n",
    );
    wait_ready(n, "islet", 3, "the cluster to become Ready");
    let password = secret_value(n, "islet-credentials", "root");
    let old = current_primary(n).expect("a primary");
    writer::create_table(n, &old, &password, "islet-primary");
    let child = writer::start_in_client_bounded(n, &password, "islet-primary", 120, 5);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(read_only(n, &old, &password), Some(false));

    let ip = get_json(n, &format!("pod/{old}")).expect("the primary's pod")["status"]["podIP"]
        .as_str()
        .expect("the primary's address")
        .to_owned();
    let cut = Isolated::pod(&ip);
    let began = Instant::now();
    // Sampled until a replica is promoted: the old primary must be read-only by then.
    let mut fenced: Option<f64> = None;
    let mut counted_lost: Option<f64> = None;
    let new = loop {
        if fenced.is_none() && read_only(n, &old, &password) == Some(true) {
            fenced = Some(began.elapsed().as_secs_f64());
            // Root, whom MariaDB's read_only lets commit, cannot either: writes are held.
            let root = sql(
                n,
                &old,
                &password,
                "localhost",
                "INSERT INTO ledger.acks VALUES (999999)",
            );
            assert!(root.is_err(), "root committed on the fenced primary");
        }
        match primary_state(n) {
            (Some(p), _) if p != old => break p,
            (_, true) if counted_lost.is_none() => {
                counted_lost = Some(began.elapsed().as_secs_f64());
            }
            _ => {}
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "no replica promoted within 120s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let promoted = began.elapsed().as_secs_f64();
    let fenced = fenced.unwrap_or_else(|| {
        bulwark_e2e::dump(n);
        panic!("{new} was promoted {promoted:.1}s after the cut while {old} was not seen read-only")
    });
    bulwark_e2e::figure!(
        "cut-off primary read-only {fenced:.1}s after the cut (lease 6s); counted lost after \
         {:.1}s (its replicas stopped receiving); {new} promoted {promoted:.1}s after it",
        counted_lost.unwrap_or(f64::NAN)
    );
    assert!(fenced < promoted);

    // From here on two members would be writable if the old one were: it never is.
    wait_takes_writes(n, &new, &password, "islet-primary");
    let writable_again = began.elapsed().as_secs_f64();
    bulwark_e2e::figure!(
        "writes through islet-primary land on {new} {writable_again:.1}s after the cut"
    );
    let mut samples = 0;
    while samples < 10 {
        if let Some(ro) = read_only(n, &old, &password) {
            assert!(ro, "{old} writable while {new} is the primary");
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(300));
    }

    drop(cut);
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    bulwark_e2e::figure!(
        "writes paused {:.1}s at most (writer tries every 0.2s, gives up after 5s), {} refused",
        outcome.longest_gap,
        outcome.refused
    );
    outcome.assert_none_lost(n, &new, &password, "islet-primary");

    // Healed: the old primary is told it is a replica at the new epoch, and stays read-only.
    let epoch = get_json(n, "mysqlcluster/islet").unwrap()["status"]["epoch"].clone();
    wait_for(
        n,
        "the old primary labelled a replica at the new epoch",
        Duration::from_secs(60),
        || {
            let pod = get_json(n, &format!("pod/{old}")).unwrap_or_default();
            let labels = &pod["metadata"]["labels"];
            let (role, at) = (
                labels["mysql.bulwark.dev/role"].as_str(),
                labels["mysql.bulwark.dev/epoch"].as_str(),
            );
            (role == Some("replica") && at == Some(epoch.to_string().trim_matches('"')))
                .then_some(())
                .ok_or(format!("{role:?} at {at:?}"))
        },
    );
    wait_for(
        n,
        "the old primary read-only",
        Duration::from_secs(30),
        || match read_only(n, &old, &password) {
            Some(true) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(current_primary(n).as_deref(), Some(new.as_str()));
}
