//! The backup scheduler against a real control plane: cron schedules, one backup at a time,
//! retention, and schedules added to a running cluster.

mod common;

use common::*;

#[tokio::test]
async fn a_fast_schedule_creates_backups_one_at_a_time_and_retention_prunes_the_right_ones() {
    let (client, ns) = setup("schedule").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let yaml = format!(
        "{BACKUP_CLUSTER}    deletionPolicy: Delete\n    schedules:\n      - name: every2s\n        schedule: \"*/2 * * * * *\"\n        storage: nas\n        retention: {{keepLast: 2}}\n        failedBackupsHistoryLimit: 1\n"
    );
    apply_yaml(&clusters, &yaml).await;
    wait_pods(&client, n, "vault", 2).await;
    make_ready(&client, n, "vault-0", "node-a").await;
    make_ready(&client, n, "vault-1", "node-b").await;

    // Play the binlog archiver's report as the cluster controller copies it: the first backup
    // (the id the first success gets below) is the base of the recovery window, so retention
    // keeps it whatever keepLast says.
    let first_id = "20261122T000000Z-0000";
    archiver_reports_window_base(&clusters, first_id).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let outcomes = run_six_backups(&client, n, &backups, &jobs).await;
    // Stop the schedule, then let retention and the deletion jobs settle.
    let suspended = yaml.replace(
        "failedBackupsHistoryLimit: 1\n",
        "failedBackupsHistoryLimit: 1\n        suspend: true\n",
    );
    apply_yaml(&clusters, &suspended).await;
    let succeeded: Vec<&String> = outcomes
        .iter()
        .filter(|(_, (ok, _))| *ok)
        .map(|(n, _)| n)
        .collect();
    let failed: Vec<&String> = outcomes
        .iter()
        .filter(|(_, (ok, _))| !*ok)
        .map(|(n, _)| n)
        .collect();
    // Names sort by scheduled time; the newest two successes stay, the one failure stays, and
    // so does the base of the recovery window.
    let mut expected: Vec<String> = succeeded[succeeded.len() - 2..]
        .iter()
        .map(|s| (*s).clone())
        .collect();
    expected.extend(failed.iter().map(|s| (*s).clone()));
    let base = outcomes
        .iter()
        .find(|(_, (_, id))| id == first_id)
        .map(|(name, _)| name.clone())
        .unwrap();
    assert!(
        !expected.contains(&base),
        "the base is older than keepLast keeps"
    );
    expected.push(base);
    expected.sort();
    let remaining = settled_backups(&client, n, &backups, &jobs, &expected).await;
    assert_eq!(remaining.len(), 4);
    // Every pruned success had its data deleted by id.
    for (name, (ok, id)) in &outcomes {
        if *ok && !expected.contains(name) {
            let j = jobs
                .get(&format!("{name}-delete"))
                .await
                .expect("deletion job of a pruned backup");
            let args = argv_of(job_container(&j)).args;
            assert_eq!(
                (args[1].as_str(), args.last()),
                ("delete", Some(id)),
                "{args:?}"
            );
        }
    }
    let c = clusters.get("vault").await.unwrap();
    let st = c.status.clone().unwrap();
    let sched = &st.schedules[0];
    assert_eq!(sched.name, "every2s");
    assert!(sched.last_schedule_time.is_some());
    assert_eq!(
        sched.next_schedule_time, None,
        "a suspended schedule has no next run"
    );
    assert_eq!(
        sched.last_successful_backup.as_ref().map(|b| &b.name),
        Some(succeeded[succeeded.len() - 1])
    );
    let events = events_for(&client, n, "vault").await;
    assert!(
        events.iter().any(|(r, _)| r == "BackupScheduled"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "BackupPruned" && m.contains("not kept by the retention rules")),
        "{events:?}"
    );
    ns.delete().await.expect("delete namespace");
}

/// A schedule added to a cluster that has run for a while is not overdue at once: it counts
/// from when the operator first saw it, not from the cluster's creation.
#[tokio::test]
async fn a_schedule_added_later_is_not_overdue_at_once() {
    let (client, ns) = setup("late-schedule").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let created = apply_yaml(&clusters, BACKUP_CLUSTER)
        .await
        .creation_timestamp()
        .expect("created")
        .0;
    // Let two runs of a 5-second schedule pass after the creation, so that, counted from the
    // creation, a schedule added now would have missed one.
    let period = chrono::Duration::seconds(5);
    wait_for(
        "two schedule periods since the creation",
        WAIT,
        || async move {
            let missed = chrono::Utc::now() - created > period * 2 + chrono::Duration::seconds(1);
            missed.then_some(()).ok_or_else(|| "too early".to_owned())
        },
    )
    .await;
    let yaml = format!(
        "{BACKUP_CLUSTER}    schedules:\n      - name: every5s\n        schedule: \"*/5 * * * * *\"\n        storage: nas\n"
    );
    apply_yaml(&clusters, &yaml).await;
    let health = wait_for("the schedule in the status", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let st = clusters
                .get("vault")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if !st.schedules.iter().any(|s| s.name == "every5s") {
                return Err(format!("{:?}", st.schedules));
            }
            st.conditions
                .into_iter()
                .find(|c| c.type_ == "BackupHealthy")
                .ok_or_else(|| "no BackupHealthy".to_owned())
        }
    })
    .await;
    assert_ne!(health.reason, "BackupOverdue", "{health:?}");
    ns.delete().await.expect("delete namespace");
}

/// Plays the binlog archiver's report as the cluster controller copies it: backup `base` is
/// the base of the recovery window, which retention keeps whatever keepLast says.
async fn archiver_reports_window_base(clusters: &Api<MySQLCluster>, base: &str) {
    clusters
        .patch_status(
            "vault",
            &PatchParams::apply("test-archiver").force(),
            &Patch::Apply(json!({
                "apiVersion": "mysql.bulwark.dev/v1alpha1",
                "kind": "MySQLCluster",
                "status": {"binlogArchive": {
                    "streaming": true, "through": "0-1-9", "lagSeconds": 0, "gaps": 0,
                    "windowBaseBackup": base,
                }},
            })),
        )
        .await
        .unwrap();
}

/// Plays the kubelet until six scheduled backups ended: each backup Job as it appears (the 3rd
/// fails, the others succeed with ids in order) and each deletion Job. Meanwhile never more
/// than one unfinished backup may exist. Backup name → (succeeded, id).
async fn run_six_backups(
    client: &Client,
    n: &str,
    backups: &Api<MySQLBackup>,
    jobs: &Api<Job>,
) -> BTreeMap<String, (bool, String)> {
    let mut outcomes: BTreeMap<String, (bool, String)> = BTreeMap::new();
    let mut ended: std::collections::BTreeSet<String> = Default::default();
    let start = Instant::now();
    while outcomes.len() < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "schedule too slow: {outcomes:?}"
        );
        let list = backups
            .list(&ListParams::default().labels("mysql.bulwark.dev/schedule=every2s"))
            .await
            .unwrap()
            .items;
        let active: Vec<String> = list
            .iter()
            .filter(|b| {
                !matches!(
                    b.status.as_ref().and_then(|s| s.phase),
                    Some(BackupPhase::Succeeded | BackupPhase::Failed)
                )
            })
            .map(|b| b.name_any())
            .collect();
        assert!(active.len() <= 1, "concurrency Forbid violated: {active:?}");
        for j in jobs.list(&ListParams::default()).await.unwrap().items {
            let name = j.name_any();
            if ended.contains(&name) || j.status.as_ref().and_then(|s| s.active).unwrap_or(0) == 0 {
                continue;
            }
            if let Some(backup) = name.strip_suffix("-backup") {
                let ok = outcomes.len() != 2;
                let id = format!("20261122T{:06}Z-{:04}", outcomes.len(), outcomes.len());
                let msg = if ok {
                    result_json(&id)
                } else {
                    error_line("failed to stream the backup: disk full")
                };
                end_job_pod(client, n, &name, "backup", ok, &msg).await;
                outcomes.insert(backup.to_owned(), (ok, id));
            } else if name.ends_with("-delete") {
                end_job_pod(client, n, &name, "delete", true, "").await;
            }
            ended.insert(name);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    outcomes
}

/// Ends deletion Jobs until the finished backups are exactly `expected` (sorted); their names.
async fn settled_backups(
    client: &Client,
    n: &str,
    backups: &Api<MySQLBackup>,
    jobs: &Api<Job>,
    expected: &[String],
) -> Vec<String> {
    wait_for("retention", Duration::from_secs(60), || {
        let backups = backups.clone();
        let jobs = jobs.clone();
        let client = client.clone();
        let expected = expected.to_owned();
        let n = n.to_owned();
        async move {
            for j in jobs
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
            {
                if j.name_any().ends_with("-delete")
                    && j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0
                {
                    end_job_pod(&client, &n, &j.name_any(), "delete", true, "").await;
                }
            }
            let mut names: Vec<String> = backups
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .filter(|b| {
                    b.status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .is_some_and(|p| p != BackupPhase::Pending && p != BackupPhase::Running)
                })
                .map(|b| b.name_any())
                .collect();
            names.sort();
            if names == expected {
                Ok(names)
            } else {
                Err(format!("{names:?} != {expected:?}"))
            }
        }
    })
    .await
}
