//! Deleting a MySQLBackup: a running Job is stopped, and with the Delete policy the backup's
//! data is removed by a deletion Job before the finalizer lets the object go.

use std::time::Duration;

use bulwark_api::{DeletionPolicy, MySQLBackup, MySQLCluster};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::outcome::{self, Outcome};
use super::{api_message, effective_policy, job};
use crate::apply::{self, BACKUP_MANAGER};
use crate::context::{Context, Reason};
use crate::error::{Error, Result};
use crate::names;
use crate::storage;

/// Deletion of a MySQLBackup: stops a running Job, and with the Delete policy removes the data
/// through a deletion Job before letting the object go. Works without the cluster: the storage
/// was recorded on the object.
pub(super) async fn finalize(
    backup: &MySQLBackup,
    ctx: &Context,
    ns: &str,
    api: &Api<MySQLBackup>,
) -> Result<Action> {
    if !backup
        .finalizers()
        .iter()
        .any(|f| f == names::BACKUP_DATA_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    // The policy as it is now decides: a cluster switched to Retain keeps the data of backups
    // deleted before the switch reached their finalizers.
    if backup.spec.deletion_policy.is_none() {
        let clusters: Api<MySQLCluster> = Api::namespaced(ctx.client.clone(), ns);
        if let Some(cluster) = apply::get_opt(&clusters, &backup.spec.cluster_ref.name).await? {
            if effective_policy(backup, &cluster) == DeletionPolicy::Retain {
                tracing::info!(namespace = ns, backup = %backup.name_any(), "data retained: the cluster's deletion policy is Retain now");
                return release(backup, api).await;
            }
        }
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let name = backup.name_any();
    // A backup still running is stopped first, and waited for: its Job is deleted in the
    // foreground, so it is gone only once its pod is, and nothing can be committed after the
    // data under the backup's id (assigned before the Job started) is deleted.
    let backup_job = job::backup_job_name(&name);
    let mut committed_id = backup.status.as_ref().and_then(|s| s.backup_id.clone());
    if let Some(j) = apply::get_opt(&jobs, &backup_job).await? {
        match outcome::backup_outcome(&j, None) {
            Outcome::Pending | Outcome::Running { .. } => {
                if j.meta().deletion_timestamp.is_none() {
                    apply::delete_foreground(&jobs, &backup_job).await?;
                }
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
            // The Job committed a backup whose result never reached the status (the object
            // was deleted at once, or the operator was down): its pod still says which.
            _ if committed_id.is_none() => {
                let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
                let job_pods = apply::list(&pods, &format!("job-name={backup_job}")).await?;
                if let Some(Outcome::Succeeded(r)) = job_pods
                    .iter()
                    .filter(|p| crate::ownership::controls(&j, *p))
                    .map(|p| outcome::backup_outcome(&j, Some(p)))
                    .find(|o| matches!(o, Outcome::Succeeded(_)))
                {
                    committed_id = Some(r.id);
                }
            }
            _ => {}
        }
    }
    let record = backup
        .status
        .as_ref()
        .and_then(|s| s.recorded_storage.clone());
    let access = record
        .as_ref()
        .and_then(|s| storage::storage_access(s, None));
    let (Some(id), Some(storage), Some(access)) = (committed_id, record, access) else {
        // Nothing was committed (or nothing is known about where): nothing to delete.
        return release(backup, api).await;
    };
    let delete_name = job::delete_job_name(&name);
    match apply::get_opt(&jobs, &delete_name).await? {
        None => {
            let j = job::delete_job(
                backup,
                &backup.spec.cluster_ref.name,
                &id,
                &access,
                ctx.config.backup_images.default_image(),
            );
            match apply::apply(&jobs, &delete_name, &j, BACKUP_MANAGER).await {
                Ok(_) => {}
                // Forbidden: the namespace is being deleted, and with it the Secrets a deletion
                // Job would need. Holding the object would hold the namespace forever.
                Err(e) if !e.is_retryable() => {
                    ctx.event(
                        backup,
                        Reason::BackupDataDeleteFailed,
                        format!(
                            "backup {id} was not deleted from storage {}: {}; the data stays",
                            storage.name,
                            api_message(&e)
                        ),
                    )
                    .await;
                    return release(backup, api).await;
                }
                Err(e) => return Err(e),
            }
            tracing::info!(namespace = ns, backup = %name, backup_id = %id, "data deletion job created");
            Ok(Action::requeue(Duration::from_secs(5)))
        }
        Some(j) => {
            let conds = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let is = |t: &str| conds.iter().any(|c| c.type_ == t && c.status == "True");
            if is("Complete") {
                ctx.event(
                    backup,
                    Reason::BackupDataDeleted,
                    format!("backup {id} deleted from storage {}", storage.name),
                )
                .await;
                release(backup, api).await
            } else if is("Failed") {
                // The tool's own cause (a backup a restore holds is left alone, and says so).
                // Unreadable, the event goes without it: the retry matters more.
                let pod = super::job_pod(ctx, ns, &j).await.ok().flatten();
                let cause = pod
                    .as_ref()
                    .and_then(|p| outcome::termination_message(p, "delete"))
                    .and_then(outcome::last_line)
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default();
                ctx.event(
                    backup,
                    Reason::BackupDataDeleteFailed,
                    format!(
                        "deleting backup {id} from storage {} failed{cause}; retrying",
                        storage.name
                    ),
                )
                .await;
                apply::delete_opt(&jobs, &delete_name).await?;
                Ok(Action::requeue(Duration::from_secs(60)))
            } else {
                Ok(Action::requeue(Duration::from_secs(5)))
            }
        }
    }
}

/// Removes the data finalizer.
async fn release(backup: &MySQLBackup, api: &Api<MySQLBackup>) -> Result<Action> {
    let doc = serde_json::json!({
        "apiVersion": MySQLBackup::api_version(&()),
        "kind": MySQLBackup::kind(&()),
        "metadata": { "name": backup.name_any(), "finalizers": [] }
    });
    match api
        .patch(
            &backup.name_any(),
            &PatchParams::apply(BACKUP_MANAGER).force(),
            &Patch::Apply(doc),
        )
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(e) if crate::error::is_not_found(&e) => Ok(Action::await_change()),
        Err(source) => Err(Error::UpdateFinalizers {
            kind: "MySQLBackup",
            name: backup.name_any(),
            source,
        }),
    }
}
