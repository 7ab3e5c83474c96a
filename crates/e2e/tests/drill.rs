//! Restore drills on the real node: a cluster with a drill schedule, a binlog archive and an
//! assertion drills its new physical backup in a Job of the backup image (restore, prepare,
//! a scratch server, the archive replayed to its end, `CHECK TABLE`, the assertion), and
//! records the result with its durations. Drills a user asks for through the annotation: one
//! replays rows written after the backup (the archive's end); one whose assertion does not
//! hold fails with the cause; one of a backup whose stored data was damaged on the claim fails
//! with the cause. Each result shows in the backup's status, an event and the cluster's status.

use std::time::{Duration, Instant};

use bulwark_e2e::{
    apply, claim_dir, dump, get_json, kubectl_ok, operator, secret_value, sql, take_backup,
    wait_for, wait_ready, Namespace,
};

/// The base64 master key of the test cluster (32 bytes).
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// The cluster, its archiver (both under its nodeSelector) and so its physical backups' Jobs on
/// node 1: `dumps` is a local-path claim, bound to the node of its first user, and a physical
/// backup runs on its source's node (see the README on claims bound to one node).
fn cluster(assertion: &str) -> String {
    format!(
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: quay}}\n\
         spec:\n  engine: mariadb\n  version: \"10.11\"\n  replicas: 1\n  storage: {{size: 1Gi}}\n\
         \x20 nodeSelector: {{kubernetes.io/hostname: bulwark-node}}\n\
         \x20 backup:\n    encryption: {{keySecretRef: {{name: quay-key, key: master}}}}\n\
         \x20   storages: [{{name: shelf, pvc: {{claimName: dumps, subPath: quay}}}}]\n\
         \x20   binlogArchive: {{storage: shelf, flushEverySeconds: 2}}\n\
         \x20   drills:\n      schedule: \"*/10 * * * * *\"\n      pointInTime: true\n\
         \x20     assertions: [\"{assertion}\"]\n"
    )
}

/// Waits until backup `name`'s latest drill has finished after `after` (or answered `request`);
/// returns its record.
fn drill_finished(n: &str, name: &str, request: Option<&str>) -> serde_json::Value {
    wait_for(
        n,
        &format!("the drill of {name} ({request:?}) to finish"),
        Duration::from_secs(300),
        || {
            let b = get_json(n, &format!("mysqlbackup/{name}")).ok_or("no backup")?;
            let r = b["status"]["lastDrill"].clone();
            let done = matches!(r["result"].as_str(), Some("Succeeded" | "Failed"));
            if done && r["request"].as_str() == request {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        },
    )
}

/// Asks for a drill of backup `name` with a new request value.
fn request_drill(n: &str, name: &str, request: &str) {
    kubectl_ok(&[
        "annotate",
        "--overwrite",
        "-n",
        n,
        &format!("mysqlbackup/{name}"),
        &format!("mysql.bulwark.dev/drill={request}"),
    ]);
}

/// The events about `object` with `reason`: their messages.
fn events(n: &str, object: &str, reason: &str) -> Vec<String> {
    let list = kubectl_ok(&["get", "events", "-n", n, "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["name"] == object && e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn drills_prove_a_backup_restorable_and_name_what_fails() {
    operator();
    let ns = Namespace::create("e2e-drill");
    let n = ns.0.as_str();
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: quay-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: dumps}}\n\
             spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 2Gi}}}}}}\n---\n{}",
            cluster("SELECT COUNT(*) >= 3 FROM ledger.entries")
        ),
    );
    wait_ready(n, "quay", 1, "the cluster to become Ready");
    let password = secret_value(n, "quay-credentials", "root");
    let write = |statement: &str| {
        sql(n, "quay-0", &password, "quay-primary", statement).unwrap_or_else(|e| {
            dump(n);
            panic!("{statement}: {e}")
        })
    };
    write("CREATE DATABASE ledger; CREATE TABLE ledger.entries (id INT PRIMARY KEY); INSERT INTO ledger.entries VALUES (1), (2), (3)");
    let status = take_backup(n, "quay", "base", "shelf", "physical");
    let backup_id = status["backupId"].as_str().unwrap().to_owned();
    let succeeded = Instant::now();
    write("INSERT INTO ledger.entries VALUES (4), (5), (6)");

    // The schedule drills the new backup by itself, to the archive's end as it then was.
    let first = drill_finished(n, "base", None);
    assert_eq!(first["result"], "Succeeded", "{first}");
    let restore = first["restoreSeconds"].as_f64().unwrap_or(0.0);
    assert!(
        restore > 0.0 && first["totalSeconds"].as_f64() >= Some(restore),
        "{first}"
    );
    assert!(first["tablesChecked"].as_i64() > Some(0), "{first}");
    assert_eq!(first["assertions"], 1, "{first}");
    assert!(
        first["reachedGtid"].as_str().is_some_and(|g| !g.is_empty()),
        "{first}"
    );
    assert!(!events(n, "base", "DrillSucceeded").is_empty());
    bulwark_e2e::figure!(
        "drill: scheduled drill of a physical backup finished {:.1}s after the backup succeeded; restore {restore:.1}s, total {:.1}s",
        succeeded.elapsed().as_secs_f64(),
        first["totalSeconds"].as_f64().unwrap_or(0.0)
    );

    // Once the archive holds the rows written after the backup, a drill replays them: it
    // reaches the archive's end.
    let position = write("SELECT @@gtid_binlog_pos").trim().to_owned();
    wait_for(
        n,
        "the archive to reach the last rows",
        Duration::from_secs(120),
        || {
            let c = get_json(n, "mysqlcluster/quay").ok_or("no cluster")?;
            let through = c["status"]["binlogArchive"]["through"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (through == position).then_some(()).ok_or(through)
        },
    );
    apply(n, &cluster("SELECT COUNT(*) = 6 FROM ledger.entries"));
    request_drill(n, "base", "to-the-end");
    let replayed = drill_finished(n, "base", Some("to-the-end"));
    assert_eq!(replayed["result"], "Succeeded", "{replayed}");
    assert_eq!(
        replayed["reachedGtid"].as_str(),
        Some(position.as_str()),
        "{replayed}"
    );
    assert!(
        replayed["replayedTransactions"].as_i64() >= Some(1),
        "{replayed}"
    );

    // An assertion that does not hold fails the drill, with the cause.
    apply(n, &cluster("SELECT COUNT(*) = 7 FROM ledger.entries"));
    request_drill(n, "base", "seven");
    let refuted = drill_finished(n, "base", Some("seven"));
    assert_eq!(refuted["result"], "Failed", "{refuted}");
    let message = refuted["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("assertion 1 (SELECT COUNT(*) = 7 FROM ledger.entries) does not hold"),
        "{refuted}"
    );
    assert!(!events(n, "base", "DrillFailed").is_empty());

    // Damage on the storage itself: a byte flipped in the middle of a stored segment.
    apply(n, &cluster("SELECT COUNT(*) = 6 FROM ledger.entries"));
    let dir = claim_dir(n, "dumps").join("quay/backups").join(&backup_id);
    let segment = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("seg-"))
        })
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a stored segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&segment, &bytes).unwrap();
    request_drill(n, "base", "damaged");
    let damaged = drill_finished(n, "base", Some("damaged"));
    assert_eq!(damaged["result"], "Failed", "{damaged}");
    let message = damaged["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("drill of backup {backup_id} failed: restore: ")),
        "{damaged}"
    );
    bulwark_e2e::figure!("drill: a damaged segment fails the drill: {message}");

    // The cluster shows the newest drill, and `kubectl get` the backup's.
    let c = get_json(n, "mysqlcluster/quay").unwrap();
    let drills = &c["status"]["drills"];
    assert_eq!(
        (
            drills["lastDrill"]["backup"].as_str(),
            drills["lastDrill"]["result"].as_str()
        ),
        (Some("base"), Some("Failed")),
        "{drills}"
    );
    // The running operator serves what the chart's alerts and dashboard query of a cluster
    // that backs up, archives and drills.
    let ip = bulwark_e2e::operator_pod("{.status.podIP}");
    let scrape =
        bulwark_e2e::node::http_get(&format!("{ip}:8080"), "/metrics").expect("operator metrics");
    for name in [
        "bulwark_backup_last_success_timestamp_seconds",
        "bulwark_backups_failed_total",
        "bulwark_drill_last_timestamp_seconds",
        "bulwark_drill_last_success",
        "bulwark_drill_restore_duration_seconds_bucket",
        "bulwark_drills_failed_total",
        "bulwark_binlog_archive_lag_seconds",
        "bulwark_binlog_archive_gaps",
        "bulwark_binlog_archive_healthy",
        "bulwark_binlog_archive_new_gaps_total",
        "bulwark_cluster_backup_schedules",
        "bulwark_cluster_drills_scheduled",
        "bulwark_cluster_ready",
        "bulwark_cluster_primary_lost",
        "bulwark_cluster_replication_broken_members",
    ] {
        let series = format!("{name}{{");
        assert!(
            scrape
                .lines()
                .any(|l| l.starts_with(&series) && l.contains(&format!("namespace=\"{n}\""))),
            "the operator serves no {name} of {n}:\n{scrape}"
        );
    }
    let table = kubectl_ok(&["get", "mysqlbackup", "-n", n, "base"]);
    eprintln!("{table}");
    assert!(
        table.lines().next().unwrap_or_default().contains("DRILL"),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap_or_default().contains("Failed"),
        "{table}"
    );
}
