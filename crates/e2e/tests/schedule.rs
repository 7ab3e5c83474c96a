//! A backup schedule on the real node: every minute, with `keepLast: 2` and deletion policy
//! `Delete`. After three scheduled backups have succeeded, exactly the two newest are kept, as
//! objects and as data: the repository, listed from outside the cluster, holds those two and
//! nothing else (no incomplete leftovers either).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use bulwark_e2e::{
    apply, binaries_dir, claim_dir, dump, kubectl_ok, operator, secret_value, sql, wait_for,
    wait_ready, Namespace,
};

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const SCHEDULE_LABEL: &str = "mysql.bulwark.dev/schedule";

fn cluster(suspend: bool) -> String {
    format!(
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: clock}}\n\
         spec:\n  engine: mariadb\n  version: \"10.11\"\n  replicas: 1\n  storage: {{size: 1Gi}}\n\
         \x20 backup:\n    deletionPolicy: Delete\n\
         \x20   encryption: {{keySecretRef: {{name: clock-key, key: master}}}}\n\
         \x20   storages: [{{name: shelf, pvc: {{claimName: dumps, subPath: clock}}}}]\n\
         \x20   schedules:\n    - {{name: minutely, schedule: \"* * * * *\", method: logical, storage: shelf, \
         suspend: {suspend}, retention: {{keepLast: 2}}}}\n"
    )
}

/// The schedule's backups: name → (creation time, phase, backup id).
fn scheduled(n: &str) -> BTreeMap<String, (String, String, String)> {
    let out = kubectl_ok(&[
        "get",
        "mysqlbackups",
        "-n",
        n,
        "-l",
        &format!("{SCHEDULE_LABEL}=minutely"),
        "-o",
        "json",
    ]);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            (
                s(&b["metadata"]["name"]),
                (
                    s(&b["metadata"]["creationTimestamp"]),
                    s(&b["status"]["phase"]),
                    s(&b["status"]["backupId"]),
                ),
            )
        })
        .collect()
}

#[test]
fn a_minutely_schedule_keeps_exactly_what_its_retention_says() {
    operator();
    let ns = Namespace::create("e2e-schedule");
    let n = ns.0.as_str();
    let started = Instant::now();
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: clock-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: dumps}}\n\
             spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n---\n{}",
            cluster(false)
        ),
    );
    wait_ready(n, "clock", 1, "the cluster to become Ready");
    let password = secret_value(n, "clock-credentials", "root");
    sql(
        n,
        "clock-0",
        &password,
        "clock-primary",
        "CREATE DATABASE ticks; CREATE TABLE ticks.t (id INT PRIMARY KEY); INSERT INTO ticks.t VALUES (1)",
    )
    .unwrap_or_else(|e| {
        dump(n);
        panic!("write: {e}")
    });

    // Every backup seen to succeed, by creation time; done once three have and only the two
    // newest of them are left.
    let mut succeeded: BTreeMap<(String, String), String> = BTreeMap::new();
    wait_for(
        n,
        "three scheduled backups, the two newest kept",
        Duration::from_secs(420),
        || {
            let now = scheduled(n);
            for (name, (created, phase, id)) in &now {
                if phase == "Failed" {
                    return Ok(Err(format!("scheduled backup {name} failed")));
                }
                if phase == "Succeeded" {
                    succeeded.insert((created.clone(), name.clone()), id.clone());
                }
            }
            let newest: Vec<&String> = succeeded.keys().rev().take(2).map(|(_, n)| n).collect();
            let left: Vec<&String> = now
                .iter()
                .filter(|(_, (_, phase, _))| phase == "Succeeded")
                .map(|(name, _)| name)
                .collect();
            let mut want = newest.clone();
            want.sort();
            (succeeded.len() >= 3 && left == want)
                .then_some(Ok(()))
                .ok_or_else(|| format!("seen {succeeded:?}, left {left:?}"))
        },
    )
    .unwrap_or_else(|e| {
        dump(n);
        panic!("{e}")
    });
    bulwark_e2e::figure!(
        "{} scheduled backups succeeded, retention applied, {:.1}s after apply",
        succeeded.len(),
        started.elapsed().as_secs_f64()
    );

    // Suspended, so that the final state holds still; a run already started finishes first.
    apply(n, &cluster(true));
    let kept = wait_for(
        n,
        "the suspended schedule's backups to settle",
        Duration::from_secs(180),
        || {
            let now = scheduled(n);
            if now.values().any(|(_, phase, _)| phase != "Succeeded") {
                return Err(format!("{now:?}"));
            }
            let newest: Vec<(String, String)> = now
                .iter()
                .map(|(name, (created, _, id))| (format!("{created} {name}"), id.clone()))
                .collect();
            (newest.len() == 2)
                .then(|| newest.into_iter().map(|(_, id)| id).collect::<Vec<_>>())
                .ok_or(format!("{now:?}"))
        },
    );

    // The data of the pruned backups is gone from the repository, seen from outside.
    let repo = claim_dir(n, "dumps").join("clock");
    let listed = wait_for(
        n,
        "the pruned backups' data to be deleted",
        Duration::from_secs(120),
        || {
            let out = Command::new(binaries_dir().join("mysql-backup"))
                .args(["list", "--json", "--all", "--repo"])
                .arg(&repo)
                .env("MYSQL_BACKUP_PROGRESS", "none")
                .output()
                .expect("mysql-backup list");
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut ids: Vec<String> = v["backups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| b["id"].as_str().unwrap_or_default().to_owned())
                .collect();
            ids.sort();
            let incomplete = v["incomplete"].as_array().map_or(0, Vec::len);
            let mut want = kept.clone();
            want.sort();
            (ids == want && incomplete == 0)
                .then_some(ids)
                .ok_or_else(|| format!("{v}"))
        },
    );
    assert_eq!(listed.len(), 2);
}
