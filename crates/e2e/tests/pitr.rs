//! Point-in-time recovery on the real node: a cluster archives its binary logs into S3 (moto,
//! inside the node's namespace) through its archiver Deployment; a physical backup is taken;
//! rows are written, the primary's server is killed until a replica takes over, and more rows
//! are written through the new primary; the archive follows the new primary. A new cluster
//! bootstrapped from the backup to a GTID position after the failover holds exactly the rows
//! written up to that position (from both primaries) and none written after it; so does one
//! bootstrapped from a logical backup taken beside it, on its replica too (the archive is
//! replayed into its primary under its own GTIDs and replicated).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulwark_e2e::node::{keep_killing, NodeS3, S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY};
use bulwark_e2e::{
    apply, binaries_dir, condition, dump, get_json, kubectl_ok, operator, secret_value, sql,
    take_backup, wait_for, wait_promoted, wait_ready, wait_takes_writes, Namespace,
};

/// The base64 master key of the test cluster (32 bytes).
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

fn cluster(name: &str, endpoint: &str, extra: &str) -> String {
    format!(
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: {name}}}\n\
         spec:\n  engine: mariadb\n  version: \"10.11\"\n  replicas: 2\n  storage: {{size: 1Gi}}\n\
         \x20 replication: {{failoverAfterSeconds: 10}}\n\
         \x20 backup:\n    encryption: {{keySecretRef: {{name: till-key, key: master}}}}\n\
         \x20   storages:\n    - name: harbor\n      s3: {{bucket: harbor, prefix: till, endpoint: \"{endpoint}\", \
         region: {S3_REGION}, forcePathStyle: true, credentialsSecret: {{name: till-s3}}}}\n{extra}"
    )
}

/// Inserts rows `from..=to` through the primary Service; returns the primary's GTID position
/// after them.
fn insert(n: &str, pod: &str, password: &str, from: u32, to: u32) -> String {
    sql(
        n,
        pod,
        password,
        "till-primary",
        &format!("USE till; INSERT INTO ledger SELECT seq, @@hostname FROM seq_{from}_to_{to}"),
    )
    .unwrap_or_else(|e| {
        dump(n);
        panic!("insert {from}..{to}: {e}")
    });
    sql(n, pod, password, "till-primary", "SELECT @@gtid_binlog_pos")
        .unwrap()
        .trim()
        .to_owned()
}

fn seq(gtid: &str) -> u64 {
    gtid.rsplit('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_cluster_archives_through_a_failover_and_a_new_cluster_is_bootstrapped_to_a_gtid() {
    operator();
    let s3 = NodeS3::start();
    s3.create_bucket("harbor");
    let ns = Namespace::create("e2e-pitr");
    let n = ns.0.as_str();
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: till-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {{name: till-s3}}\n\
             stringData: {{AWS_ACCESS_KEY_ID: {S3_ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: {S3_SECRET_KEY}}}\n---\n{}",
            cluster(
                "till",
                &s3.endpoint(),
                "    binlogArchive: {storage: harbor, flushEverySeconds: 2}\n"
            )
        ),
    );
    wait_ready(n, "till", 2, "the source cluster to become Ready");
    let password = secret_value(n, "till-credentials", "root");
    sql(
        n,
        "till-0",
        &password,
        "till-primary",
        "CREATE DATABASE till; CREATE TABLE till.ledger (id INT PRIMARY KEY, host VARCHAR(64))",
    )
    .unwrap();
    insert(n, "till-0", &password, 1, 1000);
    let base_id = take_backup(n, "till", "base", "harbor", "physical")["backupId"]
        .as_str()
        .expect("backupId")
        .to_owned();
    take_backup(n, "till", "base-dump", "harbor", "logical");

    // After the backup, on the first primary.
    let old_primary = get_json(n, "mysqlcluster/till").unwrap()["status"]["currentPrimary"]
        .as_str()
        .unwrap()
        .to_owned();
    insert(n, "till-0", &password, 1001, 2000);

    // The primary's server crashes until a replica takes over.
    let uid = get_json(n, &format!("pod/{old_primary}")).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let killing = keep_killing(uid, stop.clone());
    let new_primary = wait_promoted(n, "till", &old_primary);
    stop.store(true, Ordering::Relaxed);
    killing.join().unwrap();
    wait_takes_writes(n, &new_primary, &password, "till-primary");

    // After the failover, on the new primary: the target, then rows past it.
    let target = insert(n, &new_primary, &password, 2001, 3000);
    let beyond = insert(n, &new_primary, &password, 3001, 3500);
    bulwark_e2e::figure!(
        "failover {old_primary} -> {new_primary}; target {target}, beyond {beyond}"
    );

    // The archive follows the new primary up to the last rows.
    let key_file =
        std::env::temp_dir().join(format!("bulwark-e2e-till-{}.key", std::process::id()));
    std::fs::write(&key_file, KEY).unwrap();
    // The cluster's archive: its name and the start of its UID (a cluster created again under
    // the same name never continues it).
    let uid = get_json(n, "mysqlcluster/till").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let archive_name = format!("till-{}", &uid[..8]);
    let started = Instant::now();
    let listing = wait_for(
        n,
        "the archive to reach the rows written after the failover",
        Duration::from_secs(120),
        || {
            let out = s3.mysql_backup(
                &binaries_dir(),
                &["list", "--json", "--repo", "s3://harbor/till"],
            );
            let v: serde_json::Value =
                serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
            let through = v["archives"][archive_name.as_str()]["through"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (seq(&through) >= seq(&beyond))
                .then_some(v.clone())
                .ok_or(through)
        },
    );
    bulwark_e2e::figure!(
        "archive reached {beyond} {:.1}s after the last insert",
        started.elapsed().as_secs_f64()
    );
    let archive = &listing["archives"][archive_name.as_str()];
    assert_eq!(archive["gaps"], serde_json::json!([]), "{listing}");
    let base = &listing["backups"][0];
    assert_eq!(
        base["recoveryWindow"]["to"].as_str(),
        archive["through"].as_str(),
        "{listing}"
    );
    let _ = std::fs::remove_file(&key_file);

    // The cluster's status shows the archive and its recovery window, from the archiver's report:
    // from the physical backup (the older) to the last rows, the logical one the window's base.
    let dump_id = get_json(n, "mysqlbackup/base-dump").unwrap()["status"]["backupId"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = wait_for(
        n,
        "the cluster's status to show the archive at the last rows",
        Duration::from_secs(90),
        || {
            let status = get_json(n, "mysqlcluster/till").unwrap()["status"].clone();
            let archive = status["binlogArchive"].clone();
            let healthy = condition(&status, "BinlogArchiveHealthy");
            (archive["through"] == beyond.as_str()
                && healthy["status"] == "True"
                && archive["recoverableFromBackup"] == base_id.as_str()
                && archive["windowBaseBackup"] == dump_id.as_str())
            .then(|| (archive.clone(), healthy.clone()))
            .ok_or(format!("{archive} {healthy}"))
        },
    );
    assert_eq!(
        shown.0["recoverableFromBackup"],
        base_id.as_str(),
        "{}",
        shown.0
    );
    assert_eq!(shown.0["gaps"], 0, "{}", shown.0);
    assert_eq!(shown.0["archive"], archive_name.as_str(), "{}", shown.0);
    // Another server streams since the failover: a timeline of its own.
    assert!(shown.0["timeline"].as_i64() >= Some(2), "{}", shown.0);
    assert!(
        shown.1["message"]
            .as_str()
            .unwrap()
            .contains("recoverable from"),
        "{}",
        shown.1
    );

    // A new cluster from the backup, to the target: the rows of both primaries up to it.
    let started = Instant::now();
    apply(
        n,
        &cluster(
            "till-copy",
            &s3.endpoint(),
            &format!(
                "  credentials:\n    root: {{name: till-credentials, key: root}}\n\
                 \x20 bootstrap:\n    fromBackup: {{backupRef: {{name: base}}, untilGtid: \"{target}\"}}\n"
            ),
        ),
    );
    wait_ready(n, "till-copy", 2, "the point-in-time copy to become Ready");
    bulwark_e2e::figure!(
        "till-copy Ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    let rows = sql(
        n,
        "till-copy-0",
        &password,
        "till-copy-primary",
        "SELECT COUNT(*), MIN(id), MAX(id), COUNT(DISTINCT host) FROM till.ledger",
    )
    .unwrap();
    let rows: Vec<&str> = rows.split_whitespace().collect();
    assert_eq!(
        rows,
        vec!["3000", "1", "3000", "2"],
        "rows 1..3000 from both primaries, none beyond the target"
    );
    let pos = sql(
        n,
        "till-copy-0",
        &password,
        "till-copy-primary",
        "SELECT @@gtid_binlog_pos",
    )
    .unwrap();
    assert_eq!(pos.trim(), target, "the copy continues from the target");

    // A new cluster from the logical backup, to the same target: loaded and replayed into its
    // primary, replicated to its replica.
    let started = Instant::now();
    apply(
        n,
        &cluster(
            "till-dump",
            &s3.endpoint(),
            &format!(
                "  credentials:\n    root: {{name: till-credentials, key: root}}\n\
                 \x20 bootstrap:\n    fromBackup: {{backupRef: {{name: base-dump}}, untilGtid: \"{target}\"}}\n"
            ),
        ),
    );
    wait_ready(
        n,
        "till-dump",
        2,
        "the logical point-in-time copy to become Ready",
    );
    bulwark_e2e::figure!(
        "till-dump Ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    let count = "SELECT COUNT(*), MIN(id), MAX(id), COUNT(DISTINCT host) FROM till.ledger";
    let rows = sql(n, "till-dump-0", &password, "till-dump-primary", count).unwrap();
    assert_eq!(
        rows.split_whitespace().collect::<Vec<_>>(),
        vec!["3000", "1", "3000", "2"],
        "the logical copy: rows 1..3000 from both primaries, none beyond the target"
    );
    wait_for(
        n,
        "the logical copy's replica to hold the same rows",
        Duration::from_secs(120),
        || {
            let replica = sql(n, "till-dump-0", &password, "till-dump-replicas", count)?;
            (replica == rows).then_some(()).ok_or(replica)
        },
    );

    // Three members from the backup to the archive's latest point while the source keeps
    // writing: only the first member restores and the others copy it, so all three start at
    // the same position (each resolving `latest` at its own moment would not).
    kubectl_ok(&[
        "delete",
        "-n",
        n,
        "mysqlcluster",
        "till-copy",
        "till-dump",
        "--wait=false",
    ]);
    bulwark_e2e::writer::create_table(n, "till-0", &password, "till-primary");
    let writer = bulwark_e2e::writer::start_in_client(n, &password, "till-primary", 300);
    let started = Instant::now();
    apply(
        n,
        &cluster(
            "till-latest",
            &s3.endpoint(),
            "  credentials:\n    root: {name: till-credentials, key: root}\n\
             \x20 bootstrap:\n    fromBackup: {backupRef: {name: base}, until: latest}\n",
        )
        .replace("replicas: 2", "replicas: 3"),
    );
    wait_ready(
        n,
        "till-latest",
        3,
        "the three-member copy to the latest point",
    );
    bulwark_e2e::figure!(
        "till-latest (3 members, until latest) Ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    bulwark_e2e::writer::stop(n, writer);
    let restore_log = |pod: &str| kubectl_ok(&["logs", "-n", n, pod, "-c", "restore"]);
    assert!(
        restore_log("till-latest-0").contains("datadir restored"),
        "{}",
        restore_log("till-latest-0")
    );
    for pod in ["till-latest-1", "till-latest-2"] {
        // Copied by the restore container; or by `seed` before it, when the pod started only
        // once the first member already ran.
        let log = restore_log(pod);
        let seeded = kubectl_ok(&["logs", "-n", n, pod, "-c", "seed"]);
        assert!(
            log.contains("copied the first member's data")
                || seeded.contains("copying a member's data"),
            "{pod}: {log}"
        );
        assert!(!log.contains("datadir restored"), "{pod} restored: {log}");
    }
    // Every member replicates what the new primary writes: none holds a transaction of the
    // source the primary lacks.
    let marker = sql(
        n,
        "till-latest-0",
        &password,
        "till-latest-primary",
        "CREATE DATABASE after_latest; SELECT @@gtid_binlog_pos",
    )
    .unwrap();
    for pod in ["till-latest-0", "till-latest-1", "till-latest-2"] {
        wait_for(
            n,
            &format!("{pod} to hold the new primary's first transaction"),
            Duration::from_secs(120),
            || {
                let at = sql(n, pod, &password, "127.0.0.1", "SELECT @@gtid_current_pos")?;
                (at.trim() == marker.trim()).then_some(()).ok_or(at)
            },
        );
    }
}
