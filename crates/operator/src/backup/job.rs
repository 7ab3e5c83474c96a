//! The Jobs of a MySQLBackup: the backup itself (pinned to the source pod's node for physical
//! backups) and the deletion of its data. Pure.

use bulwark_api::{BackupMethod, MySQLBackup, MySQLCluster, SecretKeyReference};
use bulwark_contract::command::{self, Method};
use bulwark_contract::{paths, ports, Account};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::names::{self, component};
use crate::podspec::{self, command_container, mount};
use crate::storage::{secret_file_volume, StorageAccess};

/// Longest a backup Job may run before Kubernetes stops it.
pub const BACKUP_DEADLINE_SECONDS: i64 = 48 * 3600;
/// Seconds between the backup tool's progress log lines (read into the status).
const PROGRESS_INTERVAL_SECONDS: u32 = 5;

/// The pod a backup reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePod {
    pub name: String,
    /// Node the pod runs on; physical backups run there.
    pub node: String,
}

/// Chooses the source of a backup: a ready replica (the highest ordinal, so that the same one is
/// chosen while the set is stable), else the ready primary; `None` when no instance is ready.
pub fn pick_source(cluster: &str, pods: &[Pod]) -> Option<SourcePod> {
    let ready = |p: &&Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let role = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::ROLE_LABEL))
            .cloned()
    };
    let mut candidates: Vec<(bool, i32, &Pod)> = pods
        .iter()
        .filter(ready)
        .filter_map(|p| {
            let ordinal = names::pod_ordinal(cluster, p.metadata.name.as_deref()?)?;
            match role(p).as_deref() {
                Some(names::ROLE_REPLICA) => Some((true, ordinal, p)),
                Some(names::ROLE_PRIMARY) => Some((false, ordinal, p)),
                _ => None,
            }
        })
        .collect();
    candidates.sort_by_key(|(replica, ordinal, _)| (*replica, *ordinal));
    candidates.last().map(|(_, _, p)| SourcePod {
        name: p.metadata.name.clone().unwrap_or_default(),
        node: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
    })
}

/// Everything the backup Job is built from.
pub struct BackupJobInput<'a> {
    pub backup: &'a MySQLBackup,
    pub cluster: &'a MySQLCluster,
    pub source: &'a SourcePod,
    pub access: &'a StorageAccess,
    /// Secret key of the backup account's password.
    pub password: &'a SecretKeyReference,
    pub image: &'a str,
    /// The id the backup is stored under (recorded in the backup's status beforehand).
    pub backup_id: &'a str,
}

fn job_meta(backup: &MySQLBackup, name: String, cluster: &str) -> ObjectMeta {
    let mut labels = names::labels(cluster, component::BACKUP);
    labels.insert(
        names::BACKUP_LABEL.to_owned(),
        names::label_value(backup.metadata.name.as_deref().unwrap_or_default()),
    );
    ObjectMeta {
        name: Some(name),
        namespace: backup.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![backup
            .controller_owner_ref(&())
            .expect("a stored backup has a name and uid")]),
        ..ObjectMeta::default()
    }
}

fn job(meta: ObjectMeta, pod: PodSpec, deadline: Option<i64>) -> Job {
    Job {
        metadata: meta.clone(),
        spec: Some(JobSpec {
            // mysql-backup retries transient storage errors itself; a failed attempt has
            // cleaned up after itself, and the next scheduled run is the retry.
            backoff_limit: Some(0),
            active_deadline_seconds: deadline,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: meta.labels.clone(),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// Requires the node named `node`.
fn on_node(node: &str) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![node.to_owned()]),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// The node a Job's pod is pinned to by [`on_node`], if any.
pub fn pinned_node(pod: &PodSpec) -> Option<&str> {
    let terms = &pod
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let field = terms.first()?.match_fields.as_ref()?.first()?;
    (field.key == "metadata.name" && field.operator == "In")
        .then(|| field.values.as_ref()?.first().map(String::as_str))
        .flatten()
}

/// Name of the backup Job of a MySQLBackup.
pub fn backup_job_name(backup: &str) -> String {
    names::job(backup, "backup")
}

/// Name of the data deletion Job of a MySQLBackup.
pub fn delete_job_name(backup: &str) -> String {
    names::job(backup, "delete")
}

/// The Job that takes the backup.
pub fn backup_job(input: &BackupJobInput<'_>) -> Job {
    let backup = input.backup;
    let cluster_name = input.cluster.metadata.name.clone().unwrap_or_default();
    let name = backup_job_name(backup.metadata.name.as_deref().unwrap_or_default());
    let physical = backup.spec.method == BackupMethod::Physical;

    let mut volumes = vec![
        secret_file_volume("backup-credentials", input.password, "password"),
        podspec::tmp_volume(),
    ];
    volumes.extend(input.access.volumes.iter().cloned());
    let mut mounts = vec![
        mount("backup-credentials", paths::BACKUP_PASSWORD_DIR, true),
        mount("tmp", podspec::TMP_DIR, false),
    ];
    mounts.extend(input.access.mounts.iter().cloned());

    let mut affinity = None;
    if physical {
        // The backup tool copies the data files, so it runs where they are, reading the source
        // pod's volume without being able to change it. Pinned through the scheduler (not
        // `nodeName`), so that volumes bound on first use (the backup storage's claim) bind.
        affinity = Some(on_node(&input.source.node));
        volumes.push(Volume {
            name: "source-data".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names::data_claim(&input.source.name),
                read_only: Some(true),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            sub_path: Some(paths::DATADIR_SUBPATH.to_owned()),
            ..mount("source-data", paths::DATADIR, true)
        });
    }
    let argv = command::Backup {
        repository: input.access.repository.clone(),
        method: if physical {
            Method::Physical
        } else {
            Method::Logical
        },
        host: names::pod_host(&cluster_name, &input.source.name),
        port: ports::MYSQL,
        user: Account::Backup.user().to_owned(),
        password_file: paths::BACKUP_PASSWORD_FILE.to_owned(),
        datadir: physical.then(|| paths::DATADIR.to_owned()),
        result_file: paths::TERMINATION_LOG.to_owned(),
        progress_interval_seconds: PROGRESS_INTERVAL_SECONDS,
        backup_id: input.backup_id.to_owned(),
        binlog_archive: names::binlog_archive(input.cluster),
    }
    .argv();
    let container = Container {
        volume_mounts: Some(mounts),
        termination_message_policy: Some("File".to_owned()),
        ..command_container("backup", input.image, argv)
    };
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        affinity,
        containers: vec![container],
        volumes: Some(volumes),
        tolerations: input.cluster.spec.tolerations.clone(),
        security_context: Some(podspec::server_user()),
        enable_service_links: Some(false),
        // Nothing in it talks to the Kubernetes API: no token to steal.
        automount_service_account_token: Some(false),
        ..PodSpec::default()
    };
    job(
        job_meta(backup, name, &cluster_name),
        pod,
        Some(BACKUP_DEADLINE_SECONDS),
    )
}

/// The Job that deletes a backup's data (`mysql-backup delete <id>`, which succeeds when the
/// data is already gone).
pub fn delete_job(
    backup: &MySQLBackup,
    cluster: &str,
    backup_id: &str,
    access: &StorageAccess,
    image: &str,
) -> Job {
    let name = delete_job_name(backup.metadata.name.as_deref().unwrap_or_default());
    let argv = command::Delete {
        repository: access.repository.clone(),
        backup_id: backup_id.to_owned(),
    }
    .argv();
    let mut mounts = vec![mount("tmp", podspec::TMP_DIR, false)];
    mounts.extend(access.mounts.iter().cloned());
    let mut volumes = vec![podspec::tmp_volume()];
    volumes.extend(access.volumes.iter().cloned());
    let container = Container {
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..command_container("delete", image, argv)
    };
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        containers: vec![container],
        volumes: Some(volumes),
        security_context: Some(podspec::server_user()),
        enable_service_links: Some(false),
        // Nothing in it talks to the Kubernetes API: no token to steal.
        automount_service_account_token: Some(false),
        ..PodSpec::default()
    };
    let mut j = job(job_meta(backup, name, cluster), pod, Some(3600));
    // Deletion is idempotent, so transient failures are simply retried.
    if let Some(s) = j.spec.as_mut() {
        s.backoff_limit = Some(6);
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, role: Option<&str>, node: Option<&str>, ready: bool) -> Pod {
        let mut labels = serde_json::Map::new();
        if let Some(r) = role {
            labels.insert(names::ROLE_LABEL.into(), r.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [], "nodeName": node},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_source_is_a_ready_replica_else_the_ready_primary() {
        let src = |pods: &[Pod]| pick_source("tide", pods).map(|s| (s.name, s.node));
        let p0 = pod("tide-0", Some("primary"), Some("n0"), true);
        let r1 = pod("tide-1", Some("replica"), Some("n1"), true);
        let r2 = pod("tide-2", Some("replica"), Some("n2"), true);
        let r2_down = pod("tide-2", Some("replica"), Some("n2"), false);
        let unbound = pod("tide-1", Some("replica"), None, true);
        let unlabelled = pod("tide-1", None, Some("n1"), true);
        let other = pod("tidal-1", Some("replica"), Some("n9"), true);
        type Case = (Vec<Pod>, Option<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                vec![p0.clone(), r1.clone(), r2.clone()],
                Some(("tide-2", "n2")),
            ),
            (
                vec![p0.clone(), r1.clone(), r2_down],
                Some(("tide-1", "n1")),
            ),
            (vec![p0.clone(), unbound], Some(("tide-0", "n0"))),
            (vec![p0.clone(), unlabelled, other], Some(("tide-0", "n0"))),
            (
                vec![pod("tide-0", Some("primary"), Some("n0"), false)],
                None,
            ),
            (vec![], None),
        ];
        for (pods, want) in cases {
            let want = want.map(|(p, n)| (p.to_owned(), n.to_owned()));
            assert_eq!(
                src(&pods),
                want,
                "{:?}",
                pods.iter()
                    .map(|p| p.metadata.name.clone())
                    .collect::<Vec<_>>()
            );
        }
    }
}
