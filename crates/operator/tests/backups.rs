//! The MySQLBackup controller against a real control plane: Jobs on the source's node, the
//! status from the result line, deletion policies, where a backup goes, refusals.

mod common;

use common::*;

#[tokio::test]
async fn backups_run_as_jobs_on_the_source_node_and_report_into_status() {
    let (client, ns) = setup("backup").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    apply_yaml(&clusters, BACKUP_CLUSTER).await;
    wait_pods(&client, n, "vault", 2).await;

    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: before-upgrade}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical, deletionPolicy: Delete}\n").await;
    // No instance is ready: the backup waits and says why.
    let waiting = wait_for("pending backup", WAIT, || {
        let backups = backups.clone();
        async move {
            let b = backups
                .get("before-upgrade")
                .await
                .map_err(|e| e.to_string())?;
            let st = b.status.clone().unwrap_or_default();
            match (st.phase, st.message.as_deref()) {
                (Some(BackupPhase::Pending), Some(m)) if m.contains("ready instance") => Ok(b),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(waiting
        .finalizers()
        .contains(&"mysql.bulwark.dev/backup-data".to_owned()));

    // The replica first: the waiting backup may start the moment any instance is ready.
    make_ready(&client, n, "vault-1", "node-b").await;
    make_ready(&client, n, "vault-0", "node-a").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let job = wait_get(&jobs, "before-upgrade-backup").await;
    // The id was recorded before the Job was created, and the Job stores the backup under it.
    let planned_id = backups
        .get("before-upgrade")
        .await
        .unwrap()
        .status
        .and_then(|s| s.backup_id)
        .expect("backup id recorded before the Job");
    assert!(
        bulwark_contract::ids::is_backup_id(&planned_id),
        "{planned_id}"
    );
    let archive = archive_of(&clusters.get("vault").await.unwrap());
    assert_reads_the_replica_on_its_node(&job, &planned_id, &archive);

    // One backup at a time per cluster: a second one waits for the first.
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: adhoc-dump}\nspec: {clusterRef: {name: vault}, storage: offsite, method: logical}\n").await;
    wait_for("second backup waits", WAIT, || {
        let backups = backups.clone();
        async move {
            let b = backups.get("adhoc-dump").await.map_err(|e| e.to_string())?;
            let m = b.status.and_then(|s| s.message).unwrap_or_default();
            if m == "waiting for backup before-upgrade of the cluster to finish" {
                Ok(())
            } else {
                Err(m)
            }
        }
    })
    .await;
    assert!(jobs.get_opt("adhoc-dump-backup").await.unwrap().is_none());

    // A pod that only carries the Job's label, newer than the Job's own, reports a backup
    // that was never taken: it is not read.
    impersonate_job_pod(
        &client,
        n,
        "before-upgrade-backup",
        &result_json("20261122T031500Z-dead"),
    )
    .await;
    end_job_pod(
        &client,
        n,
        "before-upgrade-backup",
        "backup",
        true,
        &result_json("20261122T030000Z-9f3a"),
    )
    .await;
    let done = backup_status(&backups, "before-upgrade", BackupPhase::Succeeded).await;
    let st = done.status.unwrap();
    assert_eq!(st.backup_id.as_deref(), Some("20261122T030000Z-9f3a"));
    assert_eq!(
        st.location.as_deref(),
        Some("pvc://dumps/mysql/vault/20261122T030000Z-9f3a")
    );
    assert_eq!(
        (st.stored_bytes, st.plaintext_bytes),
        (Some(23456789), Some(123456789))
    );
    // What `kubectl get mysqlbackup` shows in its Stored column.
    assert_eq!(st.stored_size.as_deref(), Some("22.4 MiB"));
    assert_eq!(
        (
            st.binlog_file.as_deref(),
            st.binlog_position,
            st.gtid_set.as_deref()
        ),
        (Some("mysql-bin.000007"), Some(4242), Some("0-100-77"))
    );
    assert_eq!(st.source_pod.as_deref(), Some("vault-1"));
    assert!(st
        .conditions
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True"));

    // The next backup starts now; it is logical, so it is not pinned, and goes to S3.
    let job2 = wait_get(&jobs, "adhoc-dump-backup").await;
    assert_dumps_to_s3_with_mounted_credentials(&job2);
    end_job_pod(
        &client,
        n,
        "adhoc-dump-backup",
        "backup",
        false,
        &error_line("failed to connect to the server: Access denied for user 'bulwark_backup'"),
    )
    .await;
    let failed = backup_status(&backups, "adhoc-dump", BackupPhase::Failed).await;
    assert_eq!(
        failed.status.unwrap().message.as_deref(),
        Some("backup failed: failed to connect to the server: Access denied for user 'bulwark_backup'")
    );
    let events = wait_event(&client, n, "adhoc-dump", "BackupFailed").await;
    assert!(
        events.iter().any(|(_, m)| m.contains("Access denied")),
        "{events:?}"
    );

    // The cluster's status records the latest successful backup.
    last_successful_backup(&clusters, "before-upgrade", "20261122T030000Z-9f3a").await;

    // Delete policy: deleting the object runs a deletion Job for its data first.
    backups
        .delete("before-upgrade", &DeleteParams::default())
        .await
        .unwrap();
    let del = wait_get(&jobs, "before-upgrade-delete").await;
    let argv = argv_of(job_container(&del));
    assert_eq!(
        (argv.args[1].as_str(), argv.args.last().map(String::as_str)),
        ("delete", Some("20261122T030000Z-9f3a"))
    );
    assert!(
        backups.get_opt("before-upgrade").await.unwrap().is_some(),
        "held by the finalizer"
    );
    end_job_pod(&client, n, "before-upgrade-delete", "delete", true, "").await;
    wait_gone(&backups, "before-upgrade").await;
    // Retain policy (the cluster's default): the object goes at once.
    backups
        .delete("adhoc-dump", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&backups, "adhoc-dump").await;
    assert!(jobs.get_opt("adhoc-dump-delete").await.unwrap().is_none());
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_finished_backup_follows_its_clusters_deletion_policy_as_it_is_now() {
    let (client, ns) = setup("policy").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let deleting = deleting_vault_ready(&client, n).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: kept}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\n").await;
    end_job_pod(
        &client,
        n,
        "kept-backup",
        "backup",
        true,
        &result_json("20261122T030000Z-4b1d"),
    )
    .await;
    backup_status(&backups, "kept", BackupPhase::Succeeded).await;
    let finalizer = "mysql.bulwark.dev/backup-data".to_owned();
    let has_finalizer = |want: bool| {
        let backups = backups.clone();
        let finalizer = finalizer.clone();
        async move {
            wait_for(&format!("finalizer present: {want}"), WAIT, || {
                let backups = backups.clone();
                let finalizer = finalizer.clone();
                async move {
                    let b = backups.get("kept").await.map_err(|e| e.to_string())?;
                    (b.finalizers().contains(&finalizer) == want)
                        .then_some(())
                        .ok_or_else(|| format!("{:?}", b.finalizers()))
                }
            })
            .await
        }
    };
    has_finalizer(true).await;

    // The user asks to keep the data: the finished backup's finalizer goes, and back again.
    apply_yaml(&clusters, BACKUP_CLUSTER).await;
    has_finalizer(false).await;
    apply_yaml(&clusters, &deleting).await;
    has_finalizer(true).await;

    // Switched to Retain and deleted at once (as retention would): whichever comes first, the
    // refresh or the deletion, the data stays.
    apply_yaml(&clusters, BACKUP_CLUSTER).await;
    backups
        .delete("kept", &DeleteParams::default())
        .await
        .expect("delete backup");
    wait_gone(&backups, "kept").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    assert!(
        jobs.get_opt(&bulwark_operator::backup::job::delete_job_name("kept"))
            .await
            .unwrap()
            .is_none(),
        "no deletion Job for a backup whose cluster retains its data"
    );
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_backup_deleted_while_running_has_what_it_wrote_deleted_under_its_recorded_id() {
    let (client, ns) = setup("midway").await;
    let n = ns.name();
    deleting_vault_ready(&client, n).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: midway}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\n").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let job = wait_get(&jobs, "midway-backup").await;
    let id = backups
        .get("midway")
        .await
        .unwrap()
        .status
        .and_then(|s| s.backup_id)
        .expect("backup id recorded before the Job");
    let argv = argv_of(job_container(&job)).args;
    assert!(argv.contains(&format!("--backup-id={id}")), "{argv:?}");

    // Deleted mid-run: the run's result will never reach the status, yet what it wrote (or
    // commits while it is being stopped) is deleted under the id recorded beforehand.
    backups
        .delete("midway", &DeleteParams::default())
        .await
        .expect("delete backup");
    let del = wait_get(&jobs, "midway-delete").await;
    let argv = argv_of(job_container(&del));
    assert_eq!(
        (argv.args[1].as_str(), argv.args.last().map(String::as_str)),
        ("delete", Some(id.as_str()))
    );
    assert!(
        jobs.get_opt("midway-backup").await.unwrap().is_none(),
        "the deletion runs only once the backup's Job and pod are gone"
    );
    assert!(
        backups.get_opt("midway").await.unwrap().is_some(),
        "held by the finalizer"
    );
    end_job_pod(&client, n, "midway-delete", "delete", true, "").await;
    wait_gone(&backups, "midway").await;
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn where_a_backup_goes_is_decided_by_the_operator_not_by_its_author() {
    let (client, ns) = setup("forged").await;
    let n = ns.name();
    deleting_vault_ready(&client, n).await;
    // The author points the backup at a server of their own, in the annotation an earlier
    // version recorded the storage in, and in the status (which a create cannot set).
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata:\n  name: forged\n  annotations:\n    mysql.bulwark.dev/storage: '{\"storage\":{\"name\":\"nas\",\"nfs\":{\"server\":\"loot.example\",\"path\":\"/x\"}}}'\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\nstatus: {recordedStorage: {name: nas, nfs: {server: loot.example, path: /x}}}\n").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let job = wait_get(&jobs, "forged-backup").await;
    let cluster_nas =
        json!({"name": "nas", "pvc": {"claimName": "dumps", "subPath": "mysql/vault"}});
    let recorded = backups
        .get("forged")
        .await
        .unwrap()
        .status
        .unwrap()
        .recorded_storage;
    assert_eq!(serde_json::to_value(recorded).unwrap(), cluster_nas);
    let uses_loot = |j: &Job| serde_json::to_string(j).unwrap().contains("loot.example");
    assert!(
        !uses_loot(&job),
        "the backup Job goes to the cluster's storage"
    );
    let vols = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert!(vols.iter().any(|v| v
        .persistent_volume_claim
        .as_ref()
        .is_some_and(|c| c.claim_name == "dumps")));

    // The deletion Job, too, targets the recorded storage only.
    end_job_pod(
        &client,
        n,
        "forged-backup",
        "backup",
        true,
        &result_json("20261122T030000Z-5eed"),
    )
    .await;
    backup_status(&backups, "forged", BackupPhase::Succeeded).await;
    backups
        .delete("forged", &DeleteParams::default())
        .await
        .expect("delete backup");
    let del = wait_get(&jobs, "forged-delete").await;
    assert!(
        !uses_loot(&del),
        "the deletion Job goes to the cluster's storage"
    );
    end_job_pod(&client, n, "forged-delete", "delete", true, "").await;
    wait_gone(&backups, "forged").await;
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn physical_work_for_a_series_no_backup_image_serves_is_refused_with_the_cause() {
    let (client, ns) = setup("series").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let unserved = BACKUP_CLUSTER.replace("version: \"11.4\"", "version: \"11.8\"");
    apply_yaml(&clusters, &unserved).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: copy}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\n").await;
    let failed = backup_status(&backups, "copy", BackupPhase::Failed).await;
    let message = failed.status.unwrap().message.unwrap_or_default();
    assert!(
        message.starts_with("physical backups and restores of mariadb-11.8 need mariadb-backup 11.8, which no backup image of the operator has (images serve mariadb-10.11, mariadb-11.4, mysql-8.4;"),
        "{message}"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    assert!(
        jobs.get_opt("copy-backup").await.unwrap().is_none(),
        "no Job for a refused backup"
    );

    // A physical schedule is a spec the operator cannot honour.
    let scheduled = format!("{unserved}    schedules:\n      - {{name: nightly, schedule: '@daily', storage: nas, method: physical}}\n");
    apply_yaml(&clusters, &scheduled).await;
    let degraded = wait_for("Degraded condition", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            condition(&c, "Degraded")
                .filter(|d| d.0 == "True")
                .ok_or_else(|| format!("{:?}", condition(&c, "Degraded")))
        }
    })
    .await;
    assert!(
        degraded.2.contains("need mariadb-backup 11.8") && degraded.1 == "InvalidSpec",
        "{degraded:?}"
    );
    ns.delete().await.expect("delete namespace");
}

/// The physical backup's Job: it reads the ready replica's claim, read-only, on that
/// replica's node, and writes under the storage's subpath with the cluster's key.
fn assert_reads_the_replica_on_its_node(job: &Job, planned_id: &str, archive: &str) {
    let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
    assert_eq!(
        bulwark_operator::backup::job::pinned_node(&pod),
        Some("node-b"),
        "a ready replica is the source, and the job runs on its node"
    );
    // Through the scheduler: a claim bound on first use must be able to bind.
    assert_eq!(pod.node_name, None);
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    let vols: BTreeMap<String, k8s_openapi::api::core::v1::Volume> = pod
        .volumes
        .clone()
        .unwrap()
        .into_iter()
        .map(|v| (v.name.clone(), v))
        .collect();
    let data = vols["source-data"]
        .persistent_volume_claim
        .as_ref()
        .unwrap();
    assert_eq!(
        (data.claim_name.as_str(), data.read_only),
        ("data-vault-1", Some(true))
    );
    assert_eq!(
        vols["backup-storage"]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "dumps"
    );
    assert_eq!(
        vols["backup-key"]
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .as_deref(),
        Some("vault-backup-key")
    );
    let mounts = pod.containers[0].volume_mounts.clone().unwrap();
    let storage_mount = mounts.iter().find(|m| m.name == "backup-storage").unwrap();
    assert_eq!(storage_mount.sub_path.as_deref(), Some("mysql/vault"));
    let source_mount = mounts.iter().find(|m| m.name == "source-data").unwrap();
    assert_eq!(
        (source_mount.read_only, source_mount.sub_path.as_deref()),
        (Some(true), Some("mysql"))
    );
    assert_eq!(
        argv_of(job_container(job)),
        command::Backup {
            repository: command::Repository {
                url: "/backup-storage".into(),
                encryption_key_file: Some("/etc/bulwark/backup-key/master.key".into()),
                ..command::Repository::default()
            },
            method: command::Method::Physical,
            host: "vault-1.vault-headless".into(),
            port: 3306,
            user: "bulwark_backup".into(),
            password_file: "/etc/bulwark/backup-credentials/password".into(),
            datadir: Some("/var/lib/mysql".into()),
            result_file: "/dev/termination-log".into(),
            progress_interval_seconds: 5,
            backup_id: planned_id.to_owned(),
            binlog_archive: archive.to_owned(),
        }
        .argv()
    );
    assert_eq!(pod.containers[0].image.as_deref(), Some(BACKUP_IMAGE));
    assert_eq!(job.owner_references()[0].name, "before-upgrade");
}

/// The logical backup's Job: not pinned to a member, no data or storage claim, the S3
/// repository and its credentials as mounted files (none in the environment).
fn assert_dumps_to_s3_with_mounted_credentials(job2: &Job) {
    let pod2 = job2.spec.as_ref().unwrap().template.spec.clone().unwrap();
    assert_eq!(bulwark_operator::backup::job::pinned_node(&pod2), None);
    assert!(!pod2
        .volumes
        .unwrap()
        .iter()
        .any(|v| v.name == "source-data" || v.name == "backup-storage"));
    let argv2 = argv_of(job_container(job2)).args;
    for flag in [
        "--repo=s3://vault-backups/prod/vault",
        "--s3-endpoint=http://127.0.0.1:9000",
        "--s3-path-style",
        "--method=logical",
    ] {
        assert!(argv2.iter().any(|a| a == flag), "{flag} in {argv2:?}");
    }
    assert!(
        !argv2.iter().any(|a| a.starts_with("--datadir")),
        "{argv2:?}"
    );
    // The S3 credentials reach the tool as the files of the storage's Secret, mounted; none
    // in the environment.
    assert!(
        argv2
            .iter()
            .any(|a| a == "--s3-credentials-dir=/etc/bulwark/s3"),
        "{argv2:?}"
    );
    let pod2 = job2.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert!(
        pod2.containers[0].env.is_none(),
        "{:?}",
        pod2.containers[0].env
    );
    let s3_volume = pod2
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "s3-credentials")
        .and_then(|v| v.secret.as_ref())
        .and_then(|s| s.secret_name.as_deref());
    assert_eq!(s3_volume, Some("vault-s3"));
}

/// Waits until the cluster's status names backup `name` (id `id`) as the latest success.
async fn last_successful_backup(clusters: &Api<MySQLCluster>, name: &str, id: &str) {
    wait_for("cluster lastSuccessfulBackup", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            let last = c
                .status
                .as_ref()
                .and_then(|s| s.last_successful_backup.clone());
            match last {
                Some(l) if l.name == name && l.backup_id.as_deref() == Some(id) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

/// The archive a cluster's backups name: its name and the first 8 hex digits of its UID.
fn archive_of(cluster: &MySQLCluster) -> String {
    let uid = cluster.metadata.uid.as_deref().unwrap();
    format!(
        "{}-{}",
        cluster.metadata.name.as_deref().unwrap(),
        &uid[..8]
    )
}
