//! Restore drills against a real control plane: the scheduler starts one drill Job at a time
//! when the drill schedule is due or a user asks, never beside a backup, and records each
//! drill's result in its backup's status, the cluster's status and events.

mod common;

use bulwark_api::cluster::DrillPhase;
use bulwark_contract::result::DrillResult;
use common::*;

/// What `mysql-backup drill` reports for a drill that held, built with the producer's type.
fn drill_line(backup_id: &str) -> String {
    DrillResult {
        backup_id: backup_id.to_owned(),
        method: "physical".into(),
        started_at: "2026-11-22T04:00:00Z".parse().unwrap(),
        finished_at: "2026-11-22T04:01:30Z".parse().unwrap(),
        plaintext_bytes: 123456789,
        restore_seconds: 61.5,
        total_seconds: 90.0,
        tables_checked: 12,
        tables_unchecked: vec![],
        assertions: 1,
        reached_gtid: None,
        replayed_transactions: None,
    }
    .to_line()
}

/// The cluster's drill Jobs, oldest first.
async fn drill_jobs(jobs: &Api<Job>) -> Vec<Job> {
    let mut l = jobs
        .list(&ListParams::default().labels("app.kubernetes.io/component=drill"))
        .await
        .expect("list drill jobs")
        .items;
    l.sort_by_key(|j| j.name_any());
    l
}

/// Waits for a drill Job of `backup` other than those in `seen`; returns it.
async fn new_drill_job(jobs: &Api<Job>, backup: &str, seen: &[String]) -> Job {
    wait_for(&format!("drill job of {backup}"), WAIT, || async move {
        drill_jobs(jobs)
            .await
            .into_iter()
            .find(|j| {
                j.name_any().starts_with(&format!("{backup}-drill-"))
                    && !seen.contains(&j.name_any())
            })
            .ok_or_else(|| "none yet".to_owned())
    })
    .await
}

/// Waits until `backup`'s latest drill (of Job `job`) has `result`; returns the backup.
async fn drill_recorded(
    backups: &Api<MySQLBackup>,
    backup: &str,
    job: &str,
    result: DrillPhase,
) -> MySQLBackup {
    wait_for(&format!("{backup} drill {result:?}"), WAIT, || async move {
        let b = backups.get(backup).await.map_err(|e| e.to_string())?;
        let r = b.status.as_ref().and_then(|s| s.last_drill.clone());
        match r {
            Some(r) if r.job == job && r.result == result => Ok(b),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// A backup of vault that succeeded with `id`.
async fn succeeded_backup(
    client: &Client,
    n: &str,
    backups: &Api<MySQLBackup>,
    name: &str,
    id: &str,
) {
    apply_yaml(backups, &format!("apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {{name: {name}}}\nspec: {{clusterRef: {{name: vault}}, storage: nas}}\n")).await;
    end_job_pod(
        client,
        n,
        &format!("{name}-backup"),
        "backup",
        true,
        &result_json(id),
    )
    .await;
    backup_status(backups, name, BackupPhase::Succeeded).await;
}

/// Asks for a drill of `backup` with the annotation's value `request`.
async fn annotate(backups: &Api<MySQLBackup>, backup: &str, request: &str) {
    backups
        .patch(
            backup,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"mysql.bulwark.dev/drill": request}}}),
            ),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn drills_prove_each_backup_one_at_a_time_and_report_where_people_look() {
    let (client, ns) = setup("drill").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let yaml = format!(
        "{BACKUP_CLUSTER}    drills:\n      schedule: \"*/2 * * * * *\"\n      assertions: [\"SELECT COUNT(*) > 0 FROM shop.orders\"]\n      resources: {{limits: {{memory: 1Gi}}}}\n"
    );
    apply_yaml(&clusters, &yaml).await;
    wait_pods(&client, n, "vault", 2).await;
    make_ready(&client, n, "vault-1", "node-b").await;
    make_ready(&client, n, "vault-0", "node-a").await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);

    // A new backup is drilled at the next due time: the backup image runs `mysql-backup drill`
    // with the cluster's assertions, with room for the backup and no API access.
    succeeded_backup(&client, n, &backups, "first", "20261122T030000Z-9f3a").await;
    let drill = new_drill_job(&jobs, "first", &[]).await;
    let first_job = drill.name_any();
    let c = job_container(&drill);
    let argv = argv_of(c);
    assert_eq!(argv.args[1], "drill", "{argv:?}");
    assert_eq!(
        argv.args.last().map(String::as_str),
        Some("20261122T030000Z-9f3a")
    );
    assert!(argv
        .args
        .contains(&"--assert=SELECT COUNT(*) > 0 FROM shop.orders".to_owned()));
    assert!(
        argv.args
            .contains(&"--encryption-key-file=/etc/bulwark/backup-key/master.key".to_owned()),
        "{argv:?}"
    );
    let requests = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    assert_eq!(
        requests.get("ephemeral-storage").map(|q| q.0.as_str()),
        Some(((123456789u64) + (512 << 20)).to_string().as_str())
    );
    let pod = drill.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    drill_recorded(&backups, "first", &first_job, DrillPhase::Running).await;
    wait_event(&client, n, "first", "DrillStarted").await;

    // A backup that comes due while the drill runs waits for it: the two never share a disk.
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: second}\nspec: {clusterRef: {name: vault}, storage: nas}\n").await;
    wait_for("second backup waits for the drill", WAIT, || {
        let backups = backups.clone();
        async move {
            let b = backups.get("second").await.map_err(|e| e.to_string())?;
            let m = b.status.and_then(|s| s.message).unwrap_or_default();
            (m == "waiting for the restore drill of backup first to finish")
                .then_some(())
                .ok_or(m)
        }
    })
    .await;
    assert!(jobs.get_opt("second-backup").await.unwrap().is_none());

    // A user asks for a drill of the backup while its scheduled drill runs: answered after it.
    annotate(&backups, "first", "during-1").await;

    // The drill passes: the backup's status, an event and the cluster's status say so.
    end_job_pod(
        &client,
        n,
        &first_job,
        "drill",
        true,
        &drill_line("20261122T030000Z-9f3a"),
    )
    .await;
    let b = drill_recorded(&backups, "first", &first_job, DrillPhase::Succeeded).await;
    let r = b.status.unwrap().last_drill.unwrap();
    assert_eq!(
        (
            r.restore_seconds,
            r.total_seconds,
            r.restored_bytes,
            r.tables_checked,
            r.assertions
        ),
        (Some(61.5), Some(90.0), Some(123456789), Some(12), Some(1))
    );
    assert_eq!(r.request, None);
    let events = wait_event(&client, n, "first", "DrillSucceeded").await;
    assert!(
        events
            .iter()
            .any(|(_, m)| m.starts_with("restored 123456789 bytes in 61.5 s")),
        "{events:?}"
    );

    // Then the waiting backup runs, and the requested drill waits for it in turn.
    wait_get(&jobs, "second-backup").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        drill_jobs(&jobs)
            .await
            .iter()
            .map(|j| j.name_any())
            .collect::<Vec<_>>(),
        std::slice::from_ref(&first_job),
        "no drill beside a running backup"
    );
    end_job_pod(
        &client,
        n,
        "second-backup",
        "backup",
        true,
        &result_json("20261122T040000Z-1b2c"),
    )
    .await;
    backup_status(&backups, "second", BackupPhase::Succeeded).await;
    // The request comes first, and is answered once.
    let asked = new_drill_job(&jobs, "first", std::slice::from_ref(&first_job)).await;
    let running = drill_recorded(&backups, "first", &asked.name_any(), DrillPhase::Running).await;
    assert_eq!(
        running
            .status
            .unwrap()
            .last_drill
            .unwrap()
            .request
            .as_deref(),
        Some("during-1")
    );
    end_job_pod(
        &client,
        n,
        &asked.name_any(),
        "drill",
        true,
        &drill_line("20261122T030000Z-9f3a"),
    )
    .await;
    drill_recorded(&backups, "first", &asked.name_any(), DrillPhase::Succeeded).await;
    // Then the new backup's own drill, which fails.
    let drill2 = new_drill_job(&jobs, "second", &[]).await;
    let cause = "drill of backup 20261122T040000Z-1b2c failed: CHECK TABLE found 1 damaged table(s); shop.orders: Corrupt";
    end_job_pod(
        &client,
        n,
        &drill2.name_any(),
        "drill",
        false,
        &error_line(cause),
    )
    .await;
    let b = drill_recorded(&backups, "second", &drill2.name_any(), DrillPhase::Failed).await;
    assert_eq!(
        b.status.unwrap().last_drill.unwrap().message.as_deref(),
        Some(cause)
    );
    wait_event(&client, n, "second", "DrillFailed").await;
    let c = wait_for("cluster drill status", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            let d = c
                .status
                .as_ref()
                .and_then(|s| s.drills.clone())
                .unwrap_or_default();
            match &d.last_drill {
                Some(l) if l.backup == "second" && d.running.is_none() => Ok(d),
                _ => Err(format!("{d:?}")),
            }
        }
    })
    .await;
    assert_eq!(c.last_drill.as_ref().unwrap().result, DrillPhase::Failed);
    assert_eq!((c.waiting, c.oldest_waiting.as_deref()), (0, None));
    assert!(c.next_schedule_time.is_some() && c.last_schedule_time.is_some());
    // Only the newest finished drill Job stays (its pod's log is the drill's full account).
    wait_gone(&jobs, &first_job).await;
    wait_gone(&jobs, &asked.name_any()).await;

    // Every backup is drilled: no drill starts on its own (no everyBackupWithin) ...
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(drill_jobs(&jobs).await.len(), 1, "no new drill");
    // ... but one a user asks for does, once per request.
    annotate(&backups, "first", "again-1").await;
    let drill3 = new_drill_job(&jobs, "first", &[first_job.clone(), asked.name_any()]).await;
    let running = drill_recorded(&backups, "first", &drill3.name_any(), DrillPhase::Running).await;
    assert_eq!(
        running
            .status
            .unwrap()
            .last_drill
            .unwrap()
            .request
            .as_deref(),
        Some("again-1")
    );
    end_job_pod(
        &client,
        n,
        &drill3.name_any(),
        "drill",
        true,
        &drill_line("20261122T030000Z-9f3a"),
    )
    .await;
    drill_recorded(&backups, "first", &drill3.name_any(), DrillPhase::Succeeded).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        drill_jobs(&jobs)
            .await
            .iter()
            .map(|j| j.name_any())
            .collect::<Vec<_>>(),
        [drill3.name_any()],
        "the request was answered once"
    );
    ns.delete().await.expect("delete namespace");
}
