//! The operator on a real node: installed from the Helm chart with the images built here, it
//! becomes ready, and a three-member MariaDB cluster it builds comes up, takes writes through
//! its primary Service and serves them through its replicas Service; its exporters answer
//! scrapes over the pod network (and nothing else of the exporter's does), and a neighbour
//! holding idle connections to the primary's ports does not make it unready.

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
    // The server container mounts root's password file alone, and reads files for clients
    // only in a directory of its own: an account with FILE (root here) reads neither the
    // order key nor a password.
    let files = sql(
        n,
        "harbor-0",
        &password,
        "localhost",
        "SELECT LOAD_FILE('/etc/bulwark/credentials/orders') IS NULL, \
         LOAD_FILE('/etc/bulwark/server-credentials/root') IS NULL, @@secure_file_priv",
    )
    .unwrap();
    assert_eq!(
        files.split_whitespace().collect::<Vec<_>>(),
        ["1", "1", "/var/lib/mysql-files/"],
        "{files}"
    );
    let listed = bulwark_e2e::kubectl(&[
        "exec",
        "-n",
        n,
        "harbor-0",
        "-c",
        "mysqld",
        "--",
        "ls",
        "/etc/bulwark",
    ])
    .output()
    .expect("kubectl exec");
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        "server-credentials",
        "{}",
        String::from_utf8_lossy(&listed.stderr)
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

    // The replicas start from the primary Service their labels give them; the operator's role
    // orders then name the primary pod's own address, through which their agents tell a lost
    // primary from a Service without endpoints (the README's failover section).
    for replica in ["harbor-1", "harbor-2"] {
        wait_for(
            n,
            &format!("{replica} to replicate from harbor-0's own address"),
            Duration::from_secs(60),
            || {
                let out = sql(n, replica, &password, "localhost", "SHOW SLAVE STATUS")?;
                // Master_Host is the second column.
                let host = out.split('\t').nth(1).unwrap_or_default();
                host.starts_with("harbor-0.")
                    .then_some(())
                    .ok_or_else(|| format!("replicating from {host:?}"))
            },
        );
    }

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
    // The exporter metrics the chart's alert rules and dashboard query are ones a replica's
    // exporter serves.
    let ip = kubectl_ok(&[
        "get",
        "pod",
        "-n",
        n,
        "harbor-1",
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let replica = http_get(&format!("{}:9104", ip.trim()), "/metrics").expect("replica metrics");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/mysql-operator");
    for file in ["templates/prometheusrule.yaml", "files/dashboard.json"] {
        let text = std::fs::read_to_string(root.join(file)).expect("chart file");
        // The name MySQL 8.4's exporters give the lag (after SHOW REPLICA STATUS), which the
        // rule and the panel take beside MariaDB's: not served here.
        let mysql_only = ["mysql_slave_status_seconds_behind_source"];
        for name in text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|t| t.starts_with("mysql_") && !mysql_only.contains(t))
        {
            assert!(
                replica
                    .lines()
                    .any(|l| l.starts_with(&format!("{name}{{"))
                        || l.starts_with(&format!("{name} "))),
                "{file} queries {name}, which the exporter does not serve:\n{replica}"
            );
        }
    }
    // Nothing else of the exporter's is reachable from the pod network: its `/probe`, which
    // logs in with its account to any server a caller names, is not served on the metrics
    // port, and the exporter itself listens on the pod's loopback only.
    let ip = kubectl_ok(&[
        "get",
        "pod",
        "-n",
        n,
        "harbor-1",
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let ip = ip.trim();
    let probe = http_get(&format!("{ip}:9104"), "/probe?target=127.0.0.1:3306")
        .expect_err("the metrics port serves /probe");
    assert!(probe.contains("404"), "{probe}");
    let direct = http_get(&format!("{ip}:9105"), "/metrics")
        .expect_err("the exporter answers on the pod network");
    assert!(direct.contains("refused"), "{direct}");

    // A neighbour that keeps opening connections to the primary's agent and copy ports and
    // stays silent holds its share of them only: the kubelet's probes and the operator's
    // reads still get through, so the primary stays ready and nothing is restarted.
    let primary_ip = kubectl_ok(&[
        "get",
        "pod",
        "-n",
        n,
        "harbor-0",
        "-o",
        "jsonpath={.status.podIP}",
    ]);
    let restarts = || {
        kubectl_ok(&[
            "get",
            "pod",
            "-n",
            n,
            "harbor-0",
            "-o",
            "jsonpath={.status.containerStatuses[*].restartCount}",
        ])
    };
    let restarts_before = restarts();
    // Twenty new connections a second, each left open (silent) for about 12 s: more than the
    // agent's header timeout, so it always holds as many as it lets one address hold.
    let flood = format!(
        "end=$((SECONDS+40)); fd=10; while [ $SECONDS -lt $end ]; do \
           for k in $(seq 1 20); do \
             fd=$((fd >= 250 ? 10 : fd + 1)); eval \"exec $fd>&-\"; \
             port=9081; [ $((fd % 5)) -eq 0 ] && port=9082; \
             eval \"exec $fd<>/dev/tcp/{ip}/$port\" 2>/dev/null; \
           done; sleep 1; \
         done",
        ip = primary_ip.trim()
    );
    let mut neighbour = bulwark_e2e::kubectl(&[
        "exec", "-n", n, "harbor-2", "-c", "mysqld", "--", "bash", "-c", &flood,
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("kubectl exec");
    std::thread::sleep(Duration::from_secs(5));
    let mut unready = Vec::new();
    for sample in 0..15 {
        let pod = get_json(n, "pod/harbor-0").unwrap_or_default();
        let ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if !ready {
            unready.push(sample);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let _ = neighbour.kill();
    let _ = neighbour.wait();
    bulwark_e2e::figure!(
        "a neighbour holding idle connections to the primary's ports: {} of 15 samples unready",
        unready.len()
    );
    assert!(
        unready.is_empty(),
        "the primary was unready in samples {unready:?}"
    );
    assert_eq!(
        restarts(),
        restarts_before,
        "a container of the primary restarted"
    );
    sql(n, "harbor-0", &password, "harbor-primary", "SELECT 1")
        .unwrap_or_else(|e| panic!("the primary Service after the flood: {e}"));

    // A pod that someone else created with the cluster's labels is no member: the cluster
    // says so, and stays Ready with its three.
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: harbor-impostor\n  labels: \
             {{app.kubernetes.io/name: mysql, app.kubernetes.io/instance: harbor, \
             app.kubernetes.io/component: database}}\nspec:\n  \
             securityContext: {{runAsNonRoot: true, runAsUser: 999, seccompProfile: {{type: RuntimeDefault}}}}\n  \
             containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Never\n    \
             command: [sleep, infinity]\n    \
             securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}\n",
            image = bulwark_e2e::node::MARIADB_IMAGE,
        ),
    );
    let named = wait_for(
        n,
        "the cluster to name the pod that is no member",
        Duration::from_secs(90),
        || {
            let c = get_json(n, "mysqlcluster/harbor").unwrap_or_default();
            let ready = bulwark_e2e::condition(&c["status"], "Ready");
            let message = ready["message"].as_str().unwrap_or_default().to_owned();
            (ready["status"] == "True"
                && message.contains("pods harbor-impostor carry the cluster's labels"))
            .then_some(message.clone())
            .ok_or(message)
        },
    );
    assert!(named.starts_with("3 of 3 instances ready"), "{named}");
    kubectl_ok(&["delete", "pod", "-n", n, "harbor-impostor", "--wait=false"]);
}
