//! The MySQLBackup controller.

mod deletion;
pub mod job;
pub mod outcome;

use std::sync::Arc;
use std::time::Duration;

use bulwark_api::common::condition;
use bulwark_api::{
    BackupMethod, BackupPhase, DeletionPolicy, MySQLBackup, MySQLBackupStatus, MySQLCluster,
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, LogParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::apply::{self, BACKUP_MANAGER};
use crate::conditions::{self, Desired, Status};
use crate::context::{Context, Reason};
use crate::credentials::{credential_sources, Account};
use crate::error::{Error, Result};
use crate::names;
use crate::storage::{self, StorageAccess};
use outcome::Outcome;

/// How long a backup waits for its cluster or storage to appear (they may be applied in the
/// same batch) before it fails.
const REFERENCE_GRACE: chrono::Duration = chrono::Duration::minutes(5);
/// How long a backup pod may stay unstarted (image pull, volume attach) before the backup fails.
const START_DEADLINE: chrono::Duration = chrono::Duration::minutes(10);

/// Reconciles one MySQLBackup.
pub async fn reconcile(backup: Arc<MySQLBackup>, ctx: Arc<Context>) -> Result<Action> {
    let ns = backup.namespace().unwrap_or_default();
    let api: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), &ns);

    if backup.meta().deletion_timestamp.is_some() {
        return deletion::finalize(&backup, &ctx, &ns, &api).await;
    }
    let status = backup.status.clone().unwrap_or_default();
    let clusters: Api<MySQLCluster> = Api::namespaced(ctx.client.clone(), &ns);
    match status.phase {
        // The data of a finished backup follows its cluster's deletion policy as it is now,
        // not as it was when the backup ran.
        Some(BackupPhase::Succeeded) => {
            let cluster = apply::get_opt(&clusters, &backup.spec.cluster_ref.name).await?;
            if let Some(cluster) = cluster {
                let policy = effective_policy(&backup, &cluster);
                ensure_finalizer(&backup, &api, policy).await?;
            }
            return Ok(Action::await_change());
        }
        Some(BackupPhase::Failed) => return Ok(Action::await_change()),
        _ => {}
    }

    let Some(cluster) = apply::get_opt(&clusters, &backup.spec.cluster_ref.name).await? else {
        let message = format!(
            "mysqlcluster {} does not exist",
            backup.spec.cluster_ref.name
        );
        return wait_or_fail(&backup, &ctx, &ns, message).await;
    };
    // The storage is recorded in the status before any data is written: later edits of the
    // cluster's storages do not move a started backup, and its data can be found (and deleted)
    // after the cluster is gone. Only the status counts: anything a backup's author wrote
    // elsewhere on the object is ignored.
    let recorded = status.recorded_storage.clone();
    let storage = match recorded.clone() {
        Some(s) => s,
        None => match cluster
            .spec
            .backup
            .as_ref()
            .and_then(|b| b.storages.iter().find(|s| s.name == backup.spec.storage))
        {
            Some(s) => s.clone(),
            None => {
                let message = format!(
                    "storage {} is not defined in spec.backup.storages of mysqlcluster {}",
                    backup.spec.storage,
                    cluster.name_any()
                );
                return wait_or_fail(&backup, &ctx, &ns, message).await;
            }
        },
    };
    let encryption = cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.encryption.as_ref());
    let Some(access) = storage::storage_access(&storage, encryption) else {
        let message = format!("storage {} sets none of s3, pvc or nfs", storage.name);
        return fail(&backup, &ctx, &ns, message, None).await;
    };
    let policy = effective_policy(&backup, &cluster);
    if ensure_finalizer(&backup, &api, policy).await? {
        // The status is written over the object it was decided from: the next pass.
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if recorded.is_none() {
        write_status(&backup, &ctx, &ns, &[], |s| {
            s.phase = Some(BackupPhase::Pending);
            s.recorded_storage = Some(storage);
            s.message = Some("storage recorded".to_owned());
        })
        .await?;
        return Ok(Action::requeue(Duration::from_millis(200)));
    }

    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let job_name = job::backup_job_name(&backup.name_any());
    let Some(existing) = apply::get_opt(&jobs, &job_name).await? else {
        return start(&backup, &cluster, &ctx, &ns, &access).await;
    };
    // A Job of an earlier object with the same name is not this backup's.
    let uid = backup.uid().unwrap_or_default();
    if !existing.owner_references().iter().any(|o| o.uid == uid) {
        if existing.meta().deletion_timestamp.is_none() {
            apply::delete_opt(&jobs, &job_name).await?;
        }
        return pending(
            &backup,
            &ctx,
            &ns,
            format!("waiting for job {job_name} of an earlier backup of the same name to go away"),
        )
        .await;
    }
    observe(&backup, &ctx, &ns, &existing, &access).await
}

/// Keeps a backup Pending while a reference may still appear, then fails it.
async fn wait_or_fail(
    backup: &MySQLBackup,
    ctx: &Context,
    ns: &str,
    message: String,
) -> Result<Action> {
    let created = backup
        .meta()
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(Utc::now);
    if Utc::now() - created > REFERENCE_GRACE {
        return fail(backup, ctx, ns, message, None).await;
    }
    pending(backup, ctx, ns, message).await
}

/// The deletion policy of a backup: its own, else its cluster's.
fn effective_policy(backup: &MySQLBackup, cluster: &MySQLCluster) -> DeletionPolicy {
    backup.spec.deletion_policy.unwrap_or_else(|| {
        cluster
            .spec
            .backup
            .as_ref()
            .map(|b| b.deletion_policy)
            .unwrap_or_default()
    })
}

/// Holds the backup's data finalizer exactly when its data goes with it (policy Delete);
/// whether the object was changed.
async fn ensure_finalizer(
    backup: &MySQLBackup,
    api: &Api<MySQLBackup>,
    policy: DeletionPolicy,
) -> Result<bool> {
    let wants_finalizer = policy == DeletionPolicy::Delete;
    let has_finalizer = backup
        .finalizers()
        .iter()
        .any(|f| f == names::BACKUP_DATA_FINALIZER);
    if wants_finalizer == has_finalizer {
        return Ok(false);
    }
    let finalizers: Vec<&str> = if wants_finalizer {
        vec![names::BACKUP_DATA_FINALIZER]
    } else {
        vec![]
    };
    let doc = serde_json::json!({
        "apiVersion": MySQLBackup::api_version(&()),
        "kind": MySQLBackup::kind(&()),
        "metadata": {
            "name": backup.name_any(),
            "finalizers": finalizers,
        }
    });
    api.patch(
        &backup.name_any(),
        &PatchParams::apply(BACKUP_MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .map_err(|source| Error::UpdateFinalizers {
        kind: "MySQLBackup",
        name: backup.name_any(),
        source,
    })?;
    Ok(true)
}

/// Starts the backup Job, unless another backup of the cluster is running or no instance is
/// ready; then the backup waits, Pending, with the reason in its message.
async fn start(
    backup: &MySQLBackup,
    cluster: &MySQLCluster,
    ctx: &Context,
    ns: &str,
    access: &StorageAccess,
) -> Result<Action> {
    let cluster_name = cluster.name_any();
    let mut siblings = apply::backups_of(&ctx.client, ns, &cluster_name).await?;
    siblings.retain(|b| b.name_any() != backup.name_any());
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let cluster_jobs = apply::list(
        &jobs,
        &names::selector_string(&names::labels(&cluster_name, names::component::BACKUP)),
    )
    .await?;
    let blocker =
        running_backup_job(backup, &cluster_jobs).or_else(|| first_in_line(backup, &siblings));
    if let Some(blocker) = blocker {
        return pending(
            backup,
            ctx,
            ns,
            format!("waiting for backup {blocker} of the cluster to finish"),
        )
        .await;
    }
    // A drill of the cluster's backups runs: the backup waits for it, so that the two never
    // share a node's disk (drills start only while no backup runs or waits).
    let drill_jobs = apply::list(
        &jobs,
        &names::selector_string(&crate::drill::job::drill_labels(&cluster_name)),
    )
    .await?;
    if let Some(drilled) = running_job(&drill_jobs) {
        return pending(
            backup,
            ctx,
            ns,
            format!("waiting for the restore drill of backup {drilled} to finish"),
        )
        .await;
    }

    // Refused before any Job: no image has the tool of the cluster's series.
    if backup.spec.method == BackupMethod::Physical {
        if let Some(message) = ctx.config.backup_images.physical_refusal(cluster) {
            return fail(backup, ctx, ns, message, None).await;
        }
    }

    let credentials = credential_sources(cluster);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let labelled = apply::list(
        &pods,
        &names::selector_string(&names::selector_labels(&cluster_name)),
    )
    .await?;
    // Only the cluster's own pods are read from, not any pod given its labels.
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let list = match apply::get_opt(&sets, &cluster_name).await? {
        Some(set) => crate::members::controlled_by(&set, labelled).0,
        None => Vec::new(),
    };
    let Some(source) = job::pick_source(&cluster_name, &list) else {
        return pending(
            backup,
            ctx,
            ns,
            "waiting for a ready instance to back up from".to_owned(),
        )
        .await;
    };
    // The id is recorded before the Job exists: whatever becomes of the run (its object
    // deleted mid-way, the operator restarted), what it wrote can be found under it.
    let Some(backup_id) = backup.status.as_ref().and_then(|s| s.backup_id.clone()) else {
        let id = bulwark_contract::ids::backup_id(Utc::now(), rand::random());
        write_status(backup, ctx, ns, &[], |s| {
            s.phase = Some(BackupPhase::Pending);
            s.backup_id = Some(id);
            s.message = Some("starting the backup job".to_owned());
        })
        .await?;
        return Ok(Action::requeue(Duration::from_millis(200)));
    };
    let job = job::backup_job(&job::BackupJobInput {
        backup,
        cluster,
        source: &source,
        access,
        password: credentials.source(Account::Backup),
        image: ctx.config.backup_images.for_cluster(cluster),
        backup_id: &backup_id,
    });
    let name = job.name_any();
    match apply::apply(&jobs, &name, &job, BACKUP_MANAGER).await {
        Ok(_) => {}
        // The API server rejects what was built (e.g. a name it cannot take): retrying the same
        // request cannot help, and a backup stuck before its Job would block every later one.
        Err(e) if !e.is_retryable() => {
            let message = format!("failed to create backup job {name}: {}", api_message(&e));
            return fail(backup, ctx, ns, message, None).await;
        }
        Err(e) => return Err(e),
    }
    ctx.event(
        backup,
        Reason::BackupStarted,
        format!(
            "backup job {name} started on {} (node {})",
            source.name, source.node
        ),
    )
    .await;
    tracing::info!(namespace = ns, backup = %backup.name_any(), job = %name, source = %source.name, "backup job created");
    write_status(backup, ctx, ns, &[], |s| {
        s.phase = Some(BackupPhase::Pending);
        s.source_pod = Some(source.name.clone());
        s.message = Some(format!("backup job {name} created"));
    })
    .await?;
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// The backup whose Job still runs (or is still being torn down), other than `backup`'s own:
/// its pods may still read the server or write the storage, whatever its object says.
pub fn running_backup_job(backup: &MySQLBackup, cluster_jobs: &[Job]) -> Option<String> {
    let own = job::backup_job_name(&backup.name_any());
    let others: Vec<Job> = cluster_jobs
        .iter()
        .filter(|j| j.name_any() != own)
        .cloned()
        .collect();
    running_job(&others)
}

/// The backup (or the drill's backup) whose backup or drill Job among `jobs` still runs or is
/// still being torn down.
pub fn running_job(jobs: &[Job]) -> Option<String> {
    jobs.iter()
        .filter(|j| {
            let name = j.name_any();
            name.ends_with("-backup") || name.contains("-drill-")
        })
        .find(|j| {
            let st = j.status.clone().unwrap_or_default();
            let finished = st
                .conditions
                .iter()
                .flatten()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
            !finished || st.active.unwrap_or(0) > 0 || st.terminating.unwrap_or(0) > 0
        })
        .map(|j| {
            j.labels()
                .get(names::BACKUP_LABEL)
                .cloned()
                .unwrap_or_else(|| j.name_any())
        })
}

/// The older unfinished backup that must start before `backup` (first come, first served).
pub fn first_in_line(backup: &MySQLBackup, others: &[MySQLBackup]) -> Option<String> {
    let key = |b: &MySQLBackup| {
        (
            b.meta().creation_timestamp.clone().map(|t| t.0),
            b.name_any(),
        )
    };
    let mine = key(backup);
    others
        .iter()
        .filter(|b| {
            b.meta().deletion_timestamp.is_none()
                && !matches!(
                    b.status.as_ref().and_then(|s| s.phase),
                    Some(BackupPhase::Succeeded | BackupPhase::Failed)
                )
        })
        .filter(|b| key(b) < mine)
        .min_by_key(|b| key(b))
        .map(|b| b.name_any())
}

/// The API server's own message of a rejected request (never contains what we sent).
/// A stored size for people, in binary units with one decimal (`748.4 KiB`), as `kubectl get`
/// shows it.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn api_message(e: &Error) -> String {
    match std::error::Error::source(e).and_then(|s| s.downcast_ref::<kube::Error>()) {
        Some(kube::Error::Api(resp)) => resp.message.clone(),
        _ => e.to_string(),
    }
}

async fn pending(backup: &MySQLBackup, ctx: &Context, ns: &str, message: String) -> Result<Action> {
    write_status(backup, ctx, ns, &[], |s| {
        s.phase = Some(BackupPhase::Pending);
        s.message = Some(message);
    })
    .await?;
    Ok(Action::requeue(Duration::from_secs(10)))
}

/// Follows a backup Job to its end.
async fn observe(
    backup: &MySQLBackup,
    ctx: &Context,
    ns: &str,
    job: &Job,
    access: &StorageAccess,
) -> Result<Action> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod = job_pod(ctx, ns, job).await?;
    let pod = pod.as_ref();
    let location_base = access.location.clone();
    let outcome = outcome::backup_outcome(job, pod);
    if matches!(outcome, Outcome::Pending | Outcome::Running { .. }) {
        if let Some(reason) =
            pod.and_then(|p| outcome::stuck_before_start(p, Utc::now(), START_DEADLINE))
        {
            // A pod that cannot start (its node or volume is gone, its image cannot be pulled)
            // would otherwise hold the cluster's backup slot until the Job's deadline.
            let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
            apply::delete_opt(&jobs, &job.name_any()).await?;
            let message = format!(
                "backup pod did not start within {} minutes: {reason}",
                START_DEADLINE.num_minutes()
            );
            return fail(backup, ctx, ns, message, None).await;
        }
    }
    let pod_running =
        pod.is_some_and(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
    match outcome {
        Outcome::Pending => Ok(Action::requeue(Duration::from_secs(5))),
        Outcome::Running { .. } if !pod_running => {
            pending(backup, ctx, ns, "backup pod is starting".to_owned()).await
        }
        Outcome::Running { started } => {
            let progress = match pod {
                Some(p) => read_progress(&pods, &p.name_any()).await,
                None => None,
            };
            write_status(backup, ctx, ns, &[], |s| {
                s.phase = Some(BackupPhase::Running);
                s.message = Some("copying data".to_owned());
                if let Some(t) = started {
                    s.start_time = Some(Time(t));
                }
                s.progress = progress;
            })
            .await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
        Outcome::Succeeded(r) => {
            let message = format!(
                "backup {} committed: {} bytes read, {} bytes stored",
                r.id, r.plaintext_bytes, r.stored_bytes
            );
            let bytes = |n: u64| Some(i64::try_from(n).unwrap_or(i64::MAX));
            let committed = |s: &mut MySQLBackupStatus| {
                s.phase = Some(BackupPhase::Succeeded);
                s.start_time = Some(Time(r.started_at));
                s.completion_time = Some(Time(r.finished_at));
                s.backup_id = Some(r.id.clone());
                s.location = Some(format!("{location_base}/{}", r.id));
                s.stored_bytes = bytes(r.stored_bytes);
                s.stored_size = Some(human_size(r.stored_bytes));
                s.plaintext_bytes = bytes(r.plaintext_bytes);
                s.manifest_sha256 = Some(r.manifest_sha256.clone());
                s.binlog_file = r.binlog_file.clone();
                s.binlog_position = r.binlog_position.map(|p| bytes(p).unwrap_or(i64::MAX));
                s.gtid_set = r.gtid_set.clone();
                s.message = Some(message.clone());
            };
            let conds = [
                Desired::new(
                    condition::COMPLETE,
                    Status::True,
                    "BackupCommitted",
                    message.clone(),
                ),
                Desired::new(
                    condition::FAILED,
                    Status::False,
                    "BackupCommitted",
                    "the backup succeeded",
                ),
            ];
            // The per-cluster backup gauges follow from this status (the scheduler sets them
            // from the cluster's latest success on each pass, also after a restart).
            write_status(backup, ctx, ns, &conds, committed).await?;
            ctx.event(backup, Reason::BackupSucceeded, message).await;
            Ok(Action::await_change())
        }
        Outcome::Failed { message, finished } => fail(backup, ctx, ns, message, finished).await,
    }
}

/// The newest pod `job` controls, if any: another pod given its label could report a result
/// the Job never produced (its termination message is the result).
pub(crate) async fn job_pod(ctx: &Context, ns: &str, job: &Job) -> Result<Option<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let list = apply::list(&pods, &format!("job-name={}", job.name_any())).await?;
    Ok(list
        .into_iter()
        .filter(|p| crate::ownership::controls(job, p))
        .max_by_key(|p| p.meta().creation_timestamp.clone().map(|t| t.0)))
}

/// The latest progress the backup tool logged, if the logs can be read.
async fn read_progress(pods: &Api<Pod>, pod: &str) -> Option<bulwark_api::BackupProgress> {
    let params = LogParams {
        container: Some("backup".to_owned()),
        tail_lines: Some(20),
        ..LogParams::default()
    };
    match pods.logs(pod, &params).await {
        Ok(log) => outcome::parse_progress(&log),
        Err(e) => {
            tracing::debug!(pod, error = %crate::error::chain(&e), "backup logs not readable");
            None
        }
    }
}

async fn fail(
    backup: &MySQLBackup,
    ctx: &Context,
    ns: &str,
    message: String,
    finished: Option<DateTime<Utc>>,
) -> Result<Action> {
    let finished = finished.unwrap_or_else(Utc::now);
    let failed = |s: &mut MySQLBackupStatus| {
        s.phase = Some(BackupPhase::Failed);
        s.completion_time = Some(Time(finished));
        s.message = Some(message.clone());
    };
    let conds = [
        Desired::new(
            condition::COMPLETE,
            Status::False,
            "BackupFailed",
            "the backup failed",
        ),
        Desired::new(
            condition::FAILED,
            Status::True,
            "BackupFailed",
            message.clone(),
        ),
    ];
    write_status(backup, ctx, ns, &conds, failed).await?;
    ctx.metrics.backup_failed(ns, &backup.spec.cluster_ref.name);
    ctx.event(backup, Reason::BackupFailed, message).await;
    tracing::warn!(namespace = ns, backup = %backup.name_any(), "backup failed");
    Ok(Action::await_change())
}

/// Applies the backup controller's part of a backup's status, as one typed value: what the last
/// write recorded with `change` applied and `desired` conditions stamped. A running backup's
/// progress is kept only while a write sets it; the drill manager's `lastDrill` is never
/// written here (carried, it would be owned twice and could go back to an older record).
async fn write_status(
    backup: &MySQLBackup,
    ctx: &Context,
    ns: &str,
    desired: &[Desired],
    change: impl FnOnce(&mut MySQLBackupStatus),
) -> Result<()> {
    let previous = backup.status.clone().unwrap_or_default();
    let mut status = MySQLBackupStatus {
        progress: None,
        last_drill: None,
        ..previous.clone()
    };
    change(&mut status);
    if !desired.is_empty() {
        let now = Time(Utc::now());
        status.conditions = desired
            .iter()
            .map(|d| conditions::stamp(d, backup.meta().generation, &previous.conditions, &now))
            .collect();
    }
    let unchanged = MySQLBackupStatus {
        last_drill: previous.last_drill.clone(),
        ..status.clone()
    } == previous;
    if unchanged {
        return Ok(());
    }
    // Written only over the object it was decided from (a stale copy gets a conflict and the
    // reconcile runs again on fresh data): a field an earlier write recorded is never dropped,
    // and a transition (with its event and metric) happens once.
    let api: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), ns);
    apply::apply_status(&api, backup, status, BACKUP_MANAGER).await?;
    Ok(())
}

#[cfg(test)]
mod size_tests {
    #[test]
    fn stored_sizes_read_like_people_write_them() {
        for (bytes, want) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (766_385, "748.4 KiB"),
            (5 << 30, "5.0 GiB"),
        ] {
            assert_eq!(super::human_size(bytes), want);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(name: &str, created: &str, phase: Option<&str>) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.bulwark.dev/v1alpha1", "kind": "MySQLBackup",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"clusterRef": {"name": "tide"}, "storage": "nas"},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn job(name: &str, backup: &str, conditions: serde_json::Value, active: i32) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {names::BACKUP_LABEL: backup}},
            "status": {"conditions": conditions, "active": active}
        }))
        .unwrap()
    }

    #[test]
    fn one_backup_at_a_time_first_come_first_served() {
        let me = backup("b2", "2026-11-22T03:00:02Z", None);
        let older = backup("b1", "2026-11-22T03:00:01Z", Some("Pending"));
        let newer = backup("b3", "2026-11-22T03:00:03Z", None);
        let done = backup("b0", "2026-11-22T03:00:00Z", Some("Succeeded"));
        assert_eq!(
            first_in_line(&me, &[older.clone(), newer.clone(), done.clone()]).as_deref(),
            Some("b1")
        );
        assert_eq!(first_in_line(&me, &[newer, done]), None);

        let complete = serde_json::json!([{"type": "Complete", "status": "True"}]);
        let running = job("b0-backup", "b0", serde_json::json!([]), 1);
        let finished = job("b0-backup", "b0", complete.clone(), 0);
        // A finished Job whose pod is still being torn down still holds the slot.
        let tearing_down = job("b0-backup", "b0", complete, 1);
        let deleting_data = job("b0-delete", "b0", serde_json::json!([]), 1);
        let own = job("b2-backup", "b2", serde_json::json!([]), 1);
        assert_eq!(running_backup_job(&me, &[running]).as_deref(), Some("b0"));
        assert_eq!(
            running_backup_job(&me, &[tearing_down]).as_deref(),
            Some("b0")
        );
        assert_eq!(
            running_backup_job(&me, &[finished, deleting_data, own]),
            None
        );
    }
}
