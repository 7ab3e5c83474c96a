//! A planned switchover on the real node, under a steady writer: asked for with the
//! `mysql.bulwark.dev/switchover` annotation, the old primary is made read-only before the
//! chosen replica takes writes, the pause is measured, every acknowledged row is on the new
//! primary, and the old primary replicates from it. A request naming no member is refused
//! with the cause in the status and an event.

use std::time::{Duration, Instant};

use bulwark_e2e::{
    apply, get_json, kubectl_ok, operator, secret_value, sql, wait_for, wait_ready, writer,
    Namespace,
};

fn switchover_record(n: &str) -> serde_json::Value {
    get_json(n, "mysqlcluster/tide")
        .map(|c| c["status"]["lastSwitchover"].clone())
        .unwrap_or_default()
}

/// Waits until the last switchover answers `request` with a result; returns the record.
fn finished(n: &str, request: &str) -> serde_json::Value {
    wait_for(
        n,
        &format!("the switchover request {request} to end"),
        Duration::from_secs(90),
        || {
            let r = switchover_record(n);
            (r["request"] == request && r["result"].is_string())
                .then(|| r.clone())
                .ok_or_else(|| r.to_string())
        },
    )
}

#[test]
fn a_requested_switchover_fences_the_old_primary_and_loses_no_acknowledged_row() {
    operator();
    let ns = Namespace::create("e2e-switchover");
    let n = ns.0.as_str();
    apply(
        n,
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: tide}\n\
         spec: {engine: mariadb, version: \"10.11\", replicas: 3, storage: {size: 1Gi}}\n",
    );
    wait_ready(n, "tide", 3, "the cluster to become Ready");
    let password = secret_value(n, "tide-credentials", "root");
    writer::create_table(n, "tide-0", &password, "tide-primary");

    let child = writer::start(n, "tide-2", &password, "tide-primary", 40);
    std::thread::sleep(Duration::from_secs(8));
    let asked = Instant::now();
    kubectl_ok(&[
        "annotate",
        "-n",
        n,
        "mysqlcluster/tide",
        "mysql.bulwark.dev/switchover=tide-1",
    ]);
    let record = finished(n, "tide-1");
    bulwark_e2e::figure!(
        "switchover ended {:.1}s after it was asked for: {record}",
        asked.elapsed().as_secs_f64()
    );
    assert_eq!(record["result"], "Completed", "{record}");
    assert_eq!(
        (&record["from"], &record["to"]),
        (&"tide-0".into(), &"tide-1".into())
    );
    let cluster = get_json(n, "mysqlcluster/tide").expect("cluster");
    assert_eq!(cluster["status"]["currentPrimary"], "tide-1");
    let epoch = cluster["status"]["epoch"].as_u64().expect("an epoch");
    assert!(epoch >= 1, "{}", cluster["status"]);
    for (pod, role) in [("tide-0", "replica"), ("tide-1", "primary")] {
        let labels = get_json(n, &format!("pod/{pod}")).expect("pod")["metadata"]["labels"].clone();
        assert_eq!(labels["mysql.bulwark.dev/role"], role, "{pod}: {labels}");
        assert_eq!(
            labels["mysql.bulwark.dev/epoch"],
            epoch.to_string(),
            "{pod}: {labels}"
        );
    }

    let outcome = writer::finish(child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    bulwark_e2e::figure!(
        "switchover write pause: longest gap between acknowledged writes {:.2}s (writer tries \
         every 0.2s), {} attempts refused",
        outcome.longest_gap,
        outcome.refused
    );
    let stored = outcome.assert_none_lost(n, "tide-1", &password, "tide-primary");

    // The old primary is read-only and replicates every row from the new one.
    let total = stored.lines().count().to_string();
    wait_for(
        n,
        "every row on the old primary",
        Duration::from_secs(60),
        || {
            sql(
                n,
                "tide-0",
                &password,
                "localhost",
                // MariaDB reads @@read_only as 0 next to an aggregate: a subquery keeps them apart.
                "SELECT (SELECT COUNT(*) FROM ledger.acks), @@read_only",
            )
            .and_then(|out| {
                let f: Vec<&str> = out.split_whitespace().collect();
                (f == [total.as_str(), "1"]).then_some(()).ok_or(out)
            })
        },
    );
    wait_ready(n, "tide", 3, "the cluster Ready after the switchover");

    // A request naming no member is refused, with the cause.
    kubectl_ok(&[
        "annotate",
        "--overwrite",
        "-n",
        n,
        "mysqlcluster/tide",
        "mysql.bulwark.dev/switchover=tide-7",
    ]);
    let refused = finished(n, "tide-7");
    assert_eq!(refused["result"], "Refused", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a member")),
        "{refused}"
    );
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        n,
        "--field-selector",
        "reason=SwitchoverRefused",
        "-o",
        "name",
    ]);
    assert!(!events.trim().is_empty(), "no SwitchoverRefused event");
    assert_eq!(
        get_json(n, "mysqlcluster/tide").expect("cluster")["status"]["currentPrimary"],
        "tide-1"
    );

    // A scale-down that would remove the primary (now tide-2) hands it over first.
    kubectl_ok(&[
        "annotate",
        "--overwrite",
        "-n",
        n,
        "mysqlcluster/tide",
        "mysql.bulwark.dev/switchover=tide-2",
    ]);
    assert_eq!(finished(n, "tide-2")["result"], "Completed");
    kubectl_ok(&[
        "patch",
        "-n",
        n,
        "mysqlcluster/tide",
        "--type=merge",
        "-p",
        "{\"spec\":{\"replicas\":2}}",
    ]);
    let handed = wait_for(
        n,
        "the primary handed over before the scale-down",
        Duration::from_secs(90),
        || {
            let c = get_json(n, "mysqlcluster/tide").unwrap_or_default();
            let r = &c["status"]["lastSwitchover"];
            let primary = c["status"]["currentPrimary"].as_str().unwrap_or_default();
            (r["from"] == "tide-2" && r["result"] == "Completed" && primary != "tide-2")
                .then(|| primary.to_owned())
                .ok_or_else(|| c["status"].to_string())
        },
    );
    wait_ready(n, "tide", 2, "the cluster Ready with 2 members");
    wait_for(
        n,
        "pod tide-2 removed",
        Duration::from_secs(60),
        || match get_json(n, "pod/tide-2") {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        },
    );
    let rows = sql(
        n,
        &handed,
        &password,
        "tide-primary",
        "SELECT COUNT(*) FROM ledger.acks",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.trim(), total, "rows on {handed} after the scale-down");

    // A transaction written on the replica itself (root passes read_only), then one on the
    // primary: the replica's replication stops, and the cluster says which member holds what
    // the primary lacks.
    let replica = if handed == "tide-0" {
        "tide-1"
    } else {
        "tide-0"
    };
    sql(
        n,
        replica,
        &password,
        "localhost",
        "INSERT INTO ledger.acks VALUES (1000000)",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    sql(
        n,
        &handed,
        &password,
        "tide-primary",
        "INSERT INTO ledger.acks VALUES (1000001)",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let needle = format!("{replica} has transactions {handed} lacks");
    let message = wait_for(
        n,
        "the cluster to name the replica with transactions the primary lacks",
        Duration::from_secs(90),
        || {
            let c = get_json(n, "mysqlcluster/tide").unwrap_or_default();
            let ready = bulwark_e2e::condition(&c["status"], "Ready");
            let message = ready["message"].as_str().unwrap_or_default().to_owned();
            message
                .contains(&needle)
                .then_some(message.clone())
                .ok_or(message)
        },
    );
    bulwark_e2e::figure!("Ready: {message}");
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        n,
        "--field-selector",
        "reason=ReplicationBroken",
        "-o",
        "name",
    ]);
    assert!(!events.trim().is_empty(), "no ReplicationBroken event");
}
