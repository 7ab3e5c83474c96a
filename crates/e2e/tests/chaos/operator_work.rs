//! The operator killed while its longer work runs: a rolling restart that replaced its first
//! pod, and a backup whose Job runs. The restarted operator goes on from what it finds.

use std::time::{Duration, Instant};

use bulwark_e2e::node::node_name;
use bulwark_e2e::{apply, get_json, kubectl_ok, sql, wait_for, writer};

use super::cluster::*;
use super::operator::*;

#[test]
fn the_operator_killed_mid_rollout_finishes_it_after_its_restart() {
    let case = Case::start("e2e-chaos-oproll");
    let (n, password, old, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    // A configuration change rolls the pods one at a time, replicas first, then a switchover,
    // then the old primary; the operator is killed once the first new pod was made (counted
    // as updated from its creation, before it runs).
    let mut back = None;
    let operator = OperatorPod::current();
    let revision = get_json(n, &format!("statefulset/{CLUSTER}")).expect("the StatefulSet")
        ["status"]["updateRevision"]
        .as_str()
        .expect("its revision")
        .to_owned();
    let watch = StatusWatch::start(
        n,
        &format!("statefulset/{CLUSTER}"),
        "{.status.updateRevision}|{.status.updatedReplicas}",
    );
    let began = Instant::now();
    kubectl_ok(&[
        "patch",
        "-n",
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        "--type=merge",
        "-p",
        r#"{"spec":{"mysqldConfig":{"max_connections":"123"}}}"#,
    ]);
    kill_operator_or_fail(n, watch, &operator, |line| match line.split_once('|') {
        Some((r, _)) if r == revision => Watched::Wait,
        Some((_, "1")) => Watched::Kill,
        Some((_, updated @ ("2" | "3"))) => {
            Watched::TooLate(format!("{updated} pods already replaced"))
        }
        _ => Watched::Wait,
    });
    let killed_at = began.elapsed().as_secs_f64();

    // The restarted operator goes on from the pods as they are: every pod replaced, the
    // primary handed over by a switchover before its own pod restarts, no failover, never two
    // writable members.
    let mut samples = WritableSamples::default();
    loop {
        let writable = samples.take(n, password, began);
        operator.note_replaced(&mut back, began);
        let configured = (0..3)
            .map(|i| format!("{CLUSTER}-{i}"))
            .filter(|pod| {
                sql(n, pod, password, "localhost", "SELECT @@max_connections")
                    .is_ok_and(|v| v.trim() == "123")
            })
            .count();
        let status = cluster_status(n).unwrap_or_default();
        if configured == 3
            && bulwark_e2e::condition(&status, "Ready")["status"] == "True"
            && writable.as_slice() == [status["currentPrimary"].as_str().unwrap_or_default()]
        {
            break;
        }
        if began.elapsed() > Duration::from_secs(240) {
            bulwark_e2e::dump(n);
            panic!("the rollout did not finish within 240s ({configured} of 3 pods configured)");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let finished = began.elapsed().as_secs_f64();
    let status = cluster_status(n).expect("the cluster");
    let record = &status["lastSwitchover"];
    assert_eq!(
        (record["from"].as_str(), record["result"].as_str()),
        (Some(old), Some("Completed")),
        "the old primary was not handed over by a completed switchover: {record}"
    );
    assert!(
        status["lastFailover"].is_null(),
        "a failover happened during the rollout: {}",
        status["lastFailover"]
    );
    // The primary last: its pod was made again only after the switchover that handed its role
    // over had completed, the replicas' before it ended.
    let finished_at = record["finished"].as_str().unwrap_or_default();
    let created = |pod: &str| {
        get_json(n, &format!("pod/{pod}")).unwrap_or_default()["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    for pod in (0..3).map(|i| format!("{CLUSTER}-{i}")) {
        let at = created(&pod);
        if pod == old {
            assert!(
                at.as_str() >= finished_at,
                "{pod} (the old primary) made again at {at}, before the switchover ended at \
                 {finished_at}"
            );
        } else {
            assert!(
                at.as_str() <= finished_at,
                "{pod} made again at {at}, after the switchover ended at {finished_at}"
            );
        }
    }
    let new = status["currentPrimary"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &new, password, service);
    bulwark_e2e::figure!(
        "chaos, operator killed mid-rollout: killed {killed_at:.1}s after the change, once the \
         first new pod was made, a new one running at {:.1}s, every pod configured and Ready at \
         {finished:.1}s ({old} -> {new} by a switchover); writes paused {:.1}s at most, {} \
         acknowledged, none lost, {} refused",
        back.unwrap_or(f64::NAN),
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}

/// The Jobs of the backup `name` (the operator names them after it): uid, and the pods that
/// succeeded and failed (`succeeded|failed`).
fn backup_jobs(n: &str, name: &str) -> Vec<(String, String)> {
    kubectl_ok(&[
        "get",
        "jobs",
        "-n",
        n,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}|{.metadata.uid}|{.status.succeeded}|{.status.failed}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|line| {
        let (job, rest) = line.split_once('|')?;
        let (uid, counts) = rest.split_once('|')?;
        job.starts_with(name).then(|| (uid.to_owned(), counts.to_owned()))
    })
    .collect()
}

/// The base64 master key of the backups (32 bytes).
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[test]
fn the_operator_killed_mid_backup_records_it_after_its_restart() {
    let case = Case::start_with(
        "e2e-chaos-opback",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: atoll-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: dumps}}\n\
             spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n---\n"
        ),
        ", backup: {encryption: {keySecretRef: {name: atoll-key, key: master}}, \
         storages: [{name: shelf, pvc: {claimName: dumps, subPath: atoll}}]}",
    );
    let (n, password, primary, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    // The operator is killed once the backup runs (its Job created); the restarted operator
    // must follow that Job, not start a second writer into the repository, and record it.
    let mut back = None;
    let operator = OperatorPod::current();
    let name = "under-fire";
    let began = Instant::now();
    apply(
        n,
        &format!(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {{name: {name}}}\n\
             spec: {{clusterRef: {{name: {CLUSTER}}}, storage: shelf, method: physical}}\n"
        ),
    );
    // Watched once it exists (a watch of a missing object ends at once); its first line shows
    // it as it is.
    let watch = StatusWatch::start(n, &format!("mysqlbackup/{name}"), "{.status.phase}");
    kill_operator_or_fail(n, watch, &operator, |phase| match phase {
        "Running" => Watched::Kill,
        "Succeeded" | "Failed" => Watched::TooLate(format!("the backup ended {phase}")),
        _ => Watched::Wait,
    });
    let killed_at = began.elapsed().as_secs_f64();
    let running = backup_jobs(n, name);
    assert_eq!(running.len(), 1, "the backup's Jobs as it ran: {running:?}");
    let status = wait_for(
        n,
        &format!("backup {name} to end after the operator's restart"),
        Duration::from_secs(240),
        || {
            operator.note_replaced(&mut back, began);
            let b = get_json(n, &format!("mysqlbackup/{name}")).ok_or("no backup")?;
            match b["status"]["phase"].as_str() {
                Some("Succeeded" | "Failed") => Ok(b["status"].clone()),
                _ => Err(b["status"].to_string()),
            }
        },
    );
    let ended = began.elapsed().as_secs_f64();
    if status["phase"] != "Succeeded" {
        bulwark_e2e::dump(n);
        panic!("backup {name} failed after the operator's restart: {status}");
    }
    // One Job wrote it, the one running at the kill, once: the restarted operator followed it
    // (not a second writer into the repository, nor the same Job made again).
    let ended_jobs = backup_jobs(n, name);
    assert_eq!(
        ended_jobs.iter().map(|(uid, _)| uid).collect::<Vec<_>>(),
        running.iter().map(|(uid, _)| uid).collect::<Vec<_>>(),
        "the backup's Jobs at the end: {ended_jobs:?}"
    );
    assert_eq!(
        ended_jobs[0].1, "1|",
        "the Job's succeeded|failed pods: {ended_jobs:?}"
    );
    // And it is complete and verifiable, read from outside the cluster.
    let id = status["backupId"].as_str().expect("backupId").to_owned();
    bulwark_e2e::verify_from_outside(&bulwark_e2e::claim_dir(n, "dumps").join("atoll"), KEY, &id);
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, primary, password, service);
    bulwark_e2e::figure!(
        "chaos, operator killed mid-backup: killed {killed_at:.1}s after the request, as its Job \
         ran, a new one running at {:.1}s, the backup Succeeded at {ended:.1}s (one Job, verified in \
         full from outside); writes paused {:.1}s at most, {} acknowledged, none lost",
        back.unwrap_or(f64::NAN),
        outcome.longest_gap,
        outcome.acked.len()
    );
}
