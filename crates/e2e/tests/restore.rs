//! Backups to S3 and new clusters restored from them: a moto server inside the node's namespace
//! (outside the cluster) holds the repository; a physical and a logical backup reach
//! `Succeeded` and pass `mysql-backup verify` run outside the cluster against the same bucket;
//! then a cluster bootstrapped from each backup holds exactly the source's data at the backup,
//! not what was written after it, on its primary and on its replica. The operator's metrics,
//! scraped over the pod network, record the backups.

use std::time::{Duration, Instant};

use bulwark_e2e::node::{http_get, NodeS3, S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY};
use bulwark_e2e::{
    apply, binaries_dir, dump, operator, secret_value, sql, wait_for, wait_ready, Namespace,
};
use bulwark_e2e::{operator_pod, take_backup};

/// The base64 master key of the test cluster (32 bytes).
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// The spec lines every cluster of this test shares: the S3 storage and the key.
fn backup_spec(endpoint: &str) -> String {
    format!(
        "  backup:\n    encryption: {{keySecretRef: {{name: mill-key, key: master}}}}\n\
         \x20   storages:\n    - name: harbor\n      s3: {{bucket: harbor, prefix: mill, endpoint: \"{endpoint}\", \
         region: {S3_REGION}, forcePathStyle: true, credentialsSecret: {{name: mill-s3}}}}\n"
    )
}

fn cluster(name: &str, extra: &str, endpoint: &str) -> String {
    format!(
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: {name}}}\n\
         spec:\n  engine: mariadb\n  version: \"10.11\"\n  replicas: 2\n  storage: {{size: 1Gi}}\n{}{extra}",
        backup_spec(endpoint)
    )
}

/// `CHECKSUM TABLE` and the row count of the test table, through `host`.
fn table_state(n: &str, pod: &str, password: &str, host: &str) -> Result<String, String> {
    sql(
        n,
        pod,
        password,
        host,
        "CHECKSUM TABLE mill.grain; SELECT COUNT(*) FROM mill.grain",
    )
    .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[test]
fn backups_to_s3_verify_from_outside_and_bootstrap_clusters_equal_to_the_source_at_the_backup() {
    operator();
    let s3 = NodeS3::start();
    s3.create_bucket("harbor");
    let ns = Namespace::create("e2e-restore");
    let n = ns.0.as_str();
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: mill-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {{name: mill-s3}}\n\
             stringData: {{AWS_ACCESS_KEY_ID: {S3_ACCESS_KEY}, AWS_SECRET_ACCESS_KEY: {S3_SECRET_KEY}}}\n---\n{}",
            cluster("mill", "", &s3.endpoint())
        ),
    );
    wait_ready(n, "mill", 2, "the source cluster to become Ready");
    let password = secret_value(n, "mill-credentials", "root");
    sql(
        n,
        "mill-0",
        &password,
        "mill-primary",
        "CREATE DATABASE mill; USE mill; CREATE TABLE grain (id INT PRIMARY KEY, note VARCHAR(64)); \
         INSERT INTO grain SELECT seq, MD5(seq) FROM seq_1_to_5000",
    )
    .unwrap_or_else(|e| {
        dump(n);
        panic!("write through mill-primary: {e}")
    });
    let at_backup = table_state(n, "mill-0", &password, "mill-primary").unwrap();

    let key_file =
        std::env::temp_dir().join(format!("bulwark-e2e-mill-{}.key", std::process::id()));
    std::fs::write(&key_file, KEY).unwrap();
    for method in ["physical", "logical"] {
        let name = format!("{method}-s3");
        let status = take_backup(n, "mill", &name, "harbor", method);
        let id = status["backupId"].as_str().expect("backupId").to_owned();
        assert_eq!(
            status["location"].as_str(),
            Some(format!("s3://harbor/mill/{id}").as_str()),
            "{status}"
        );
        // Outside the cluster, against the same bucket.
        let out = s3.mysql_backup(
            &binaries_dir(),
            &[
                "verify",
                "--json",
                "--repo",
                "s3://harbor/mill",
                "--encryption-key-file",
                key_file.to_str().unwrap(),
                &id,
            ],
        );
        assert!(
            out.status.success(),
            "verify {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (report["ok"].as_bool(), report["depth"].as_str()),
            (Some(true), Some("full")),
            "{report}"
        );
    }
    let _ = std::fs::remove_file(&key_file);

    // Written after the backups: no restored cluster may hold it.
    sql(
        n,
        "mill-0",
        &password,
        "mill-primary",
        "INSERT INTO mill.grain VALUES (5001, 'after the backups')",
    )
    .unwrap();

    // The operator's metrics over the pod network record the cluster's latest backup.
    let operator_ip = operator_pod("{.status.podIP}");
    let metrics = http_get(&format!("{operator_ip}:8080"), "/metrics").unwrap();
    let series = format!("bulwark_backup_last_stored_bytes{{namespace=\"{n}\",cluster=\"mill\"}}");
    assert!(
        metrics.lines().any(|l| l.starts_with(&series)),
        "{series} missing from the operator's metrics:\n{metrics}"
    );

    // One new cluster from each backup, side by side. The physical backup brings the source's
    // accounts, so root's password is the source's.
    let started = Instant::now();
    let copies = [("mill-copy", "physical-s3"), ("mill-load", "logical-s3")];
    for (copy, backup) in copies {
        let extra = format!(
            "  credentials:\n    root: {{name: mill-credentials, key: root}}\n\
             \x20 bootstrap:\n    fromBackup: {{backupRef: {{name: {backup}}}}}\n"
        );
        apply(n, &cluster(copy, &extra, &s3.endpoint()));
    }
    for (copy, backup) in copies {
        wait_ready(
            n,
            copy,
            2,
            &format!("{copy} (from {backup}) to become Ready"),
        );
        bulwark_e2e::figure!(
            "{copy} from {backup} Ready {:.1}s after apply",
            started.elapsed().as_secs_f64()
        );
        let pod = format!("{copy}-0");
        let primary = table_state(n, &pod, &password, &format!("{copy}-primary"))
            .unwrap_or_else(|e| panic!("{copy}: {e}"));
        assert_eq!(
            primary, at_backup,
            "{copy} from {backup}: the source's table at the backup"
        );
        // The replica holds the same, once replication has caught up.
        wait_for(
            n,
            &format!("{copy}'s replica to hold the backup's data"),
            Duration::from_secs(120),
            || {
                let replica = table_state(n, &pod, &password, &format!("{copy}-replicas"))?;
                (replica == primary).then_some(()).ok_or(replica)
            },
        );
    }
}
