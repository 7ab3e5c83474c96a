//! The operator on a real node: installed from the Helm chart with the images built here, it
//! becomes ready, and a three-member MariaDB cluster it builds comes up, takes writes through
//! its primary Service and serves them through its replicas Service; its exporters answer
//! scrapes over the pod network.

use std::time::{Duration, Instant};

use bulwark_e2e::node::http_get;
use bulwark_e2e::operator_pod;
use bulwark_e2e::{
    apply, dump, get_json, kubectl_ok, operator, secret_value, sql, wait_for, wait_ready, Namespace,
};

#[test]
fn the_chart_installs_an_operator_that_becomes_ready() {
    operator();
    let deploy = get_json("bulwark-system", "deployment/mysql-operator").expect("deployment");
    let available = deploy["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True");
    assert!(available, "{}", deploy["status"]);
    // Its readiness endpoint through the API server's proxy: controllers running, API server
    // answering.
    let pod = operator_pod("{.metadata.name}");
    let ready = kubectl_ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/bulwark-system/pods/http:{pod}:8080/proxy/readyz"),
    ]);
    assert_eq!(ready.trim(), "ready");
}

#[test]
fn a_three_member_mariadb_cluster_takes_writes_and_serves_reads_through_its_services() {
    operator();
    let ns = Namespace::create("e2e-cluster");
    let n = ns.0.as_str();
    let started = Instant::now();
    apply(
        n,
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: harbor}\nspec: {engine: mariadb, version: \"10.11\", replicas: 3, storage: {size: 1Gi}, metrics: {enabled: true}}\n",
    );
    wait_ready(n, "harbor", 3, "the cluster to become Ready");
    bulwark_e2e::figure!(
        "cluster Ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );

    let password = secret_value(n, "harbor-credentials", "root");
    let write = sql(
        n,
        "harbor-0",
        &password,
        "harbor-primary",
        "CREATE DATABASE ledger; CREATE TABLE ledger.entries (id INT PRIMARY KEY, note TEXT); \
         INSERT INTO ledger.entries VALUES (1, 'first'), (2, 'second'); SELECT @@hostname",
    );
    let primary = match write {
        Ok(out) => out.trim().to_owned(),
        Err(e) => {
            dump(n);
            panic!("write through harbor-primary: {e}")
        }
    };
    assert_eq!(
        primary, "harbor-0",
        "the primary Service leads to the primary"
    );
    // Reads through the replicas Service land on a read-only replica and see the rows once
    // replication has applied them.
    let seen = wait_for(
        n,
        "the rows through harbor-replicas",
        Duration::from_secs(60),
        || {
            let out = sql(
                n,
                "harbor-0",
                &password,
                "harbor-replicas",
                // A scalar subquery: MariaDB 10.11 reports @@read_only as 0 next to an aggregate
                // over a table in the same SELECT.
                "SELECT @@hostname, @@global.read_only, (SELECT COUNT(*) FROM ledger.entries)",
            )?;
            let fields: Vec<&str> = out.split_whitespace().collect();
            match fields.as_slice() {
                [host, "1", "2"] => Ok(host.to_string()),
                _ => Err(out),
            }
        },
    );
    assert!(
        seen == "harbor-1" || seen == "harbor-2",
        "read through the replicas Service from {seen}"
    );

    // Semi-synchronous replication (the default): once both replicas are connected the
    // primary waits for their acknowledgements, and a commit is answered acknowledged.
    let status_of = |names: &str| {
        format!(
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME IN ({names}) ORDER BY VARIABLE_NAME"
        )
    };
    wait_for(
        n,
        "the primary to wait for semi-sync acknowledgements",
        Duration::from_secs(60),
        || {
            let out = sql(
                n,
                "harbor-0",
                &password,
                "harbor-primary",
                &status_of("'RPL_SEMI_SYNC_MASTER_CLIENTS', 'RPL_SEMI_SYNC_MASTER_STATUS'"),
            )?;
            let fields: Vec<&str> = out.split_whitespace().collect();
            (fields == ["2", "ON"]).then_some(()).ok_or(out)
        },
    );
    let acknowledged = sql(
        n,
        "harbor-0",
        &password,
        "harbor-primary",
        &format!(
            "INSERT INTO ledger.entries VALUES (3, 'acknowledged'); {}",
            status_of("'RPL_SEMI_SYNC_MASTER_NO_TX', 'RPL_SEMI_SYNC_MASTER_YES_TX'")
        ),
    )
    .unwrap_or_else(|e| panic!("a write once semi-sync waits: {e}"));
    let counts: Vec<&str> = acknowledged.split_whitespace().collect();
    assert!(
        matches!(counts.as_slice(), [_, yes] if *yes != "0"),
        "no acknowledged commit (no_tx, yes_tx): {acknowledged}"
    );

    // Each member's exporter, scraped over the pod network as a Prometheus would: the server is
    // up, and on the replicas the replication threads run.
    for pod in ["harbor-0", "harbor-1", "harbor-2"] {
        let ip = kubectl_ok(&["get", "pod", "-n", n, pod, "-o", "jsonpath={.status.podIP}"]);
        let metrics = http_get(&format!("{}:9104", ip.trim()), "/metrics")
            .unwrap_or_else(|e| panic!("{pod}: {e}"));
        assert!(
            metrics.lines().any(|l| l == "mysql_up 1"),
            "{pod}: no `mysql_up 1` in:\n{metrics}"
        );
        if pod != "harbor-0" {
            for thread in ["io", "sql"] {
                let name = format!("mysql_slave_status_slave_{thread}_running");
                assert!(
                    metrics
                        .lines()
                        .any(|l| l.starts_with(&name) && l.ends_with(" 1")),
                    "{pod}: no {name} 1 in:\n{metrics}"
                );
            }
        }
    }
}
