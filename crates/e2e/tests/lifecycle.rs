//! A cluster's life on the real node: the primary's pod deleted under a steady writer (its role
//! handed over by a switchover while the pod waits in its preStop hook; no acknowledged row lost;
//! how long writes were refused is printed), the primary's volume replaced (never an empty server:
//! a replica takes over and pod 0 is seeded from it), scaling 3 → 5 → 3, and a configuration change
//! under a steady writer: replicas restarted first, the primary handed over, then the old primary
//! restarted; no acknowledged row lost (the write pause is printed).

use std::time::{Duration, Instant};

use bulwark_e2e::{
    apply, get_json, kubectl_ok, operator, secret_value, sql, try_kubectl, wait_for, wait_ready,
    writer, Namespace,
};

fn cluster(name: &str, replicas: u32, config: &str) -> String {
    format!(
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: {name}}}\n\
         spec: {{engine: mariadb, version: \"10.11\", replicas: {replicas}, storage: {{size: 1Gi}}{config}}}\n"
    )
}

#[test]
fn deleting_the_primary_pod_loses_no_acknowledged_row() {
    operator();
    let ns = Namespace::create("e2e-failure");
    let n = ns.0.as_str();
    apply(n, &cluster("tide", 3, ""));
    wait_ready(n, "tide", 3, "the cluster to become Ready");
    let password = secret_value(n, "tide-credentials", "root");
    writer::create_table(n, "tide-0", &password, "tide-primary");

    // The writer runs in a replica's pod, so that it outlives the primary's, for 75 s.
    let child = writer::start(n, "tide-2", &password, "tide-primary", 75);
    std::thread::sleep(Duration::from_secs(10));
    let uid = |pod: &serde_json::Value| pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let old_pod = uid(&get_json(n, "pod/tide-0").expect("primary's pod"));
    let deleted = Instant::now();
    kubectl_ok(&["delete", "pod", "-n", n, "tide-0", "--wait=false"]);
    // The status said Ready before the deletion; wait for the replacement pod itself first.
    wait_for(n, "a new primary pod", Duration::from_secs(120), || {
        let pod = get_json(n, "pod/tide-0").ok_or("no pod")?;
        (uid(&pod) != old_pod)
            .then_some(())
            .ok_or_else(|| "the old pod is still there".to_owned())
    });
    wait_ready(
        n,
        "tide",
        3,
        "the cluster to be Ready again after losing its primary's pod",
    );
    bulwark_e2e::figure!(
        "cluster Ready again {:.1}s after the primary's pod was deleted",
        deleted.elapsed().as_secs_f64()
    );
    // The deleted pod waited in its preStop hook while its role was handed over: a
    // switchover, not a failover.
    let st = get_json(n, "mysqlcluster/tide").expect("cluster")["status"].clone();
    let record = &st["lastSwitchover"];
    assert_eq!(record["from"], "tide-0", "{st}");
    assert_eq!(record["result"], "Completed", "{st}");
    assert!(st["lastFailover"].is_null(), "{st}");
    let outcome = writer::finish(child);
    assert!(
        outcome.acked.len() > 20,
        "too few writes acknowledged: {}",
        outcome.lines
    );
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    bulwark_e2e::figure!(
        "the primary's pod deleted: switchover {}; writes paused {:.1}s at most (writer tries \
         every 0.2s), {} attempts refused",
        record["message"],
        outcome.longest_gap,
        outcome.refused
    );
    // Every acknowledged row is on the primary.
    outcome.assert_none_lost(n, "tide-1", &password, "tide-primary");
}

/// The primary's volume is replaced (its claim deleted with its pod): the new pod 0 never comes
/// up as an empty server. Its seed waits while the member with the data cannot give a copy
/// (the replica, not ready without its primary); the replica takes over once the primary has
/// been lost long enough, and pod 0 is then seeded from it and follows it with every row.
/// (Before seeding, pod 0 came up empty and was withheld from the primary role for good.)
#[test]
fn a_primary_whose_volume_was_replaced_comes_back_as_a_seeded_replica() {
    operator();
    let ns = Namespace::create("e2e-volume");
    let n = ns.0.as_str();
    apply(
        n,
        &cluster("shoal", 2, ", replication: {failoverAfterSeconds: 10}"),
    );
    wait_ready(n, "shoal", 2, "the cluster to become Ready");
    let password = secret_value(n, "shoal-credentials", "root");
    sql(
        n,
        "shoal-1",
        &password,
        "shoal-primary",
        "CREATE DATABASE ledger; CREATE TABLE ledger.acks (id INT PRIMARY KEY); \
         INSERT INTO ledger.acks VALUES (1), (2), (3)",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let uid = |pod: &serde_json::Value| pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let old_pod = uid(&get_json(n, "pod/shoal-0").expect("primary's pod"));
    kubectl_ok(&["delete", "pvc", "-n", n, "data-shoal-0", "--wait=false"]);
    kubectl_ok(&["delete", "pod", "-n", n, "shoal-0", "--wait=false"]);
    let promoted = bulwark_e2e::wait_promoted(n, "shoal", "shoal-0");
    assert_eq!(promoted, "shoal-1");
    wait_ready(
        n,
        "shoal",
        2,
        "the cluster Ready with the new pod 0 as a replica",
    );
    let pod = get_json(n, "pod/shoal-0").expect("pod 0");
    assert_ne!(uid(&pod), old_pod, "pod 0 was not replaced");
    let seeded = try_kubectl(&["logs", "-n", n, "shoal-0", "-c", "seed"]).unwrap_or_default();
    assert!(
        seeded.contains("copied") && seeded.contains("the server continues from GTID"),
        "pod 0 was not seeded:\n{seeded}"
    );
    let rows = wait_for(
        n,
        "every row on the new pod 0, read-only",
        Duration::from_secs(60),
        || {
            let out = sql(
                n,
                "shoal-0",
                &password,
                "localhost",
                "SELECT (SELECT COUNT(*) FROM ledger.acks), @@global.read_only",
            )?;
            if out.split_whitespace().collect::<Vec<_>>() == ["3", "1"] {
                Ok(out)
            } else {
                Err(out)
            }
        },
    );
    bulwark_e2e::figure!("pod 0 seeded from shoal-1: {}", rows.trim());
}

#[test]
fn scaling_up_and_down_brings_the_pods_back_to_ready() {
    operator();
    let ns = Namespace::create("e2e-scale");
    let n = ns.0.as_str();
    apply(n, &cluster("reef", 3, ""));
    wait_ready(n, "reef", 3, "3 instances Ready");
    let started = Instant::now();
    apply(n, &cluster("reef", 5, ""));
    wait_ready(n, "reef", 5, "5 instances Ready");
    bulwark_e2e::figure!("3 → 5 in {:.1}s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    apply(n, &cluster("reef", 3, ""));
    wait_ready(n, "reef", 3, "back to 3 instances Ready");
    bulwark_e2e::figure!("5 → 3 in {:.1}s", started.elapsed().as_secs_f64());
}

#[test]
fn a_configuration_change_restarts_the_replicas_first_and_hands_the_primary_over() {
    operator();
    let ns = Namespace::create("e2e-rollout");
    let n = ns.0.as_str();
    apply(n, &cluster("wave", 3, ""));
    wait_ready(n, "wave", 3, "3 instances Ready");
    let password = secret_value(n, "wave-credentials", "root");
    writer::create_table(n, "wave-0", &password, "wave-primary");
    let uid = |pod: &str| {
        get_json(n, &format!("pod/{pod}")).expect("pod")["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let before: Vec<String> = ["wave-0", "wave-1", "wave-2"].map(uid).to_vec();

    let child = writer::start_in_client(n, &password, "wave-primary", 240);
    std::thread::sleep(Duration::from_secs(5));
    let started = Instant::now();
    apply(
        n,
        &cluster("wave", 3, ", mysqldConfig: {max_connections: \"123\"}"),
    );
    wait_ready(n, "wave", 3, "the configuration rolled out");
    let took = started.elapsed().as_secs_f64();
    let outcome = writer::stop(n, child);

    // Every pod was replaced and runs the new configuration.
    for (pod, old) in ["wave-0", "wave-1", "wave-2"].iter().zip(&before) {
        assert_ne!(&uid(pod), old, "{pod} was not restarted");
        let v = sql(n, pod, &password, "127.0.0.1", "SELECT @@max_connections")
            .unwrap_or_else(|e| panic!("{pod}: {e}"));
        assert_eq!(v.trim(), "123", "{pod}");
    }
    // The primary was handed over before its pod restarted: the switchover ended before the
    // old primary's new pod was created, and that pod came last.
    let c = get_json(n, "mysqlcluster/wave").expect("cluster");
    let record = &c["status"]["lastSwitchover"];
    assert_eq!(record["from"], "wave-0", "{record}");
    assert_eq!(record["result"], "Completed", "{record}");
    assert_eq!(
        c["status"]["currentPrimary"], record["to"],
        "{}",
        c["status"]
    );
    let created = |pod: &str| {
        get_json(n, &format!("pod/{pod}")).expect("pod")["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let finished = record["finished"].as_str().unwrap_or_default().to_owned();
    let old_primary = created("wave-0");
    assert!(
        old_primary >= finished,
        "wave-0 recreated at {old_primary}, switchover finished at {finished}"
    );
    for pod in ["wave-1", "wave-2"] {
        assert!(
            created(pod) <= finished,
            "{pod} restarted after the hand-over: {record}"
        );
    }
    // Events of one reason on one object are aggregated: one is enough to see them recorded.
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        n,
        "--field-selector",
        "reason=RollingRestart",
        "-o",
        "name",
    ]);
    assert!(!events.trim().is_empty(), "no RollingRestart event");

    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    bulwark_e2e::figure!(
        "configuration rolled out in {took:.1}s; write pause: longest gap between acknowledged \
         writes {:.2}s (writer tries every 0.2s), {} attempts refused",
        outcome.longest_gap,
        outcome.refused
    );
    let primary = c["status"]["currentPrimary"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    outcome.assert_none_lost(n, &primary, &password, "wave-primary");

    // A change that makes the server fail to start stops at the first replica restarted: the
    // others, the primary among them, keep running the previous spec, and writes go on.
    let good = cluster("wave", 3, ", mysqldConfig: {max_connections: \"123\"}");
    let bad = cluster(
        "wave",
        3,
        ", mysqldConfig: {max_connections: \"123\", no_such_variable: \"1\"}",
    );
    let running: Vec<String> = ["wave-0", "wave-1", "wave-2"].map(uid).to_vec();
    apply(n, &bad);
    let stuck = wait_for(
        n,
        "the rollout to stop at a failing replica",
        Duration::from_secs(120),
        || {
            let c = get_json(n, "mysqlcluster/wave").unwrap_or_default();
            let progressing = bulwark_e2e::condition(&c["status"], "Progressing");
            let message = progressing["message"].as_str().unwrap_or_default();
            message
                .split("rolling out: ")
                .nth(1)
                .and_then(|rest| rest.strip_suffix(" is not ready"))
                .map(str::to_owned)
                .filter(|pod| *pod != primary)
                .ok_or_else(|| message.to_owned())
        },
    );
    wait_for(
        n,
        "the failing replica's server to crash",
        Duration::from_secs(60),
        || {
            let pod = get_json(n, &format!("pod/{stuck}")).unwrap_or_default();
            let restarts = pod["status"]["containerStatuses"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == "mysqld"))
                .and_then(|c| c["restartCount"].as_u64())
                .unwrap_or(0);
            (restarts > 0)
                .then_some(())
                .ok_or_else(|| pod["status"].to_string())
        },
    );
    // Watched for a while: nothing else is restarted, the primary takes writes.
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        for (pod, old) in ["wave-0", "wave-1", "wave-2"].iter().zip(&running) {
            if *pod != stuck {
                assert_eq!(&uid(pod), old, "{pod} was restarted while {stuck} fails");
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    sql(
        n,
        &primary,
        &password,
        "wave-primary",
        "INSERT INTO ledger.acks VALUES (1000000)",
    )
    .unwrap_or_else(|e| panic!("the primary takes no writes while {stuck} fails: {e}"));
    // Back to the previous spec: the failing replica is restarted on it, nobody else.
    apply(n, &good);
    wait_ready(n, "wave", 3, "the cluster Ready on the previous spec");
    for (pod, old) in ["wave-0", "wave-1", "wave-2"].iter().zip(&running) {
        assert_eq!(
            *pod == stuck,
            &uid(pod) != old,
            "{pod}: restarted only if it failed"
        );
    }
    bulwark_e2e::figure!(
        "a failing change stopped at {stuck}; reverted, only {stuck} was restarted"
    );
}
