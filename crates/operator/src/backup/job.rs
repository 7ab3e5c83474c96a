//! The Jobs of a MySQLBackup: the backup itself (pinned to the source pod's node for physical
//! backups) and the deletion of its data. Also how a storage is reached from a pod. Pure.

use bulwark_api::cluster::{BackupEncryption, BackupStorage};
use bulwark_api::{BackupMethod, MySQLBackup, MySQLCluster, SecretKeyReference};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, KeyToPath, NFSVolumeSource, PersistentVolumeClaimVolumeSource, Pod, PodSpec,
    PodTemplateSpec, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};

use crate::cluster::build::paths;
use crate::names::{self, component};
use crate::podspec::{self, env, mount, restricted, secret_env};

/// Where a storage is mounted in Job and restore containers.
pub const STORAGE_MOUNT: &str = "/backup-storage";
/// Where the encryption key file is mounted.
pub const KEY_MOUNT: &str = "/etc/bulwark/backup-key";
/// Where the backup account's password is mounted.
pub const PASSWORD_MOUNT: &str = "/etc/bulwark/backup-credentials";
/// Longest a backup Job may run before Kubernetes stops it.
pub const BACKUP_DEADLINE_SECONDS: i64 = 48 * 3600;

/// The storage definition and encryption a backup was written with, recorded on the MySQLBackup
/// so its data can be deleted even after the cluster is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageRecord {
    pub storage: BackupStorage,
}

/// What a container needs to reach a storage: environment, volumes and mounts for
/// `mysql-backup`, and the human-readable location of the repository.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StorageAccess {
    pub env: Vec<EnvVar>,
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    pub location: String,
}

fn secret_file_volume(name: &str, secret: &SecretKeyReference, file: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.name.clone()),
            items: Some(vec![KeyToPath {
                key: secret.key.clone(),
                path: file.to_owned(),
                mode: Some(0o400),
            }]),
            default_mode: Some(0o400),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// How to reach `storage` (and decrypt with `encryption`) from a pod; `None` when the storage
/// sets none of its kinds (possible only in an edited storage record).
pub fn storage_access(
    storage: &BackupStorage,
    encryption: Option<&BackupEncryption>,
) -> Option<StorageAccess> {
    let mut a = StorageAccess::default();
    if let Some(s3) = &storage.s3 {
        let prefix = s3.prefix.as_deref().unwrap_or("").trim_matches('/');
        let repo = if prefix.is_empty() {
            format!("s3://{}", s3.bucket)
        } else {
            format!("s3://{}/{prefix}", s3.bucket)
        };
        a.location = repo.clone();
        a.env.push(env("MYSQL_BACKUP_REPO", repo));
        if let Some(e) = &s3.endpoint {
            a.env.push(env("MYSQL_BACKUP_S3_ENDPOINT", e.clone()));
            if e.starts_with("http://") {
                a.env.push(env("AWS_ALLOW_HTTP", "true"));
            }
        }
        if let Some(r) = &s3.region {
            a.env.push(env("MYSQL_BACKUP_S3_REGION", r.clone()));
        }
        if s3.force_path_style {
            a.env.push(env("MYSQL_BACKUP_S3_PATH_STYLE", "true"));
        }
        if let Some(c) = &s3.credentials_secret {
            a.env.push(secret_env(
                "AWS_ACCESS_KEY_ID",
                &c.name,
                "AWS_ACCESS_KEY_ID",
                false,
            ));
            a.env.push(secret_env(
                "AWS_SECRET_ACCESS_KEY",
                &c.name,
                "AWS_SECRET_ACCESS_KEY",
                false,
            ));
            a.env.push(secret_env(
                "AWS_SESSION_TOKEN",
                &c.name,
                "AWS_SESSION_TOKEN",
                true,
            ));
        }
    } else {
        let (volume, location, sub_path) = if let Some(p) = &storage.pvc {
            (
                Volume {
                    name: "backup-storage".to_owned(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: p.claim_name.clone(),
                        read_only: None,
                    }),
                    ..Volume::default()
                },
                format!(
                    "pvc://{}/{}",
                    p.claim_name,
                    p.sub_path.as_deref().unwrap_or("")
                ),
                p.sub_path.clone(),
            )
        } else {
            let n = storage.nfs.as_ref()?;
            (
                Volume {
                    name: "backup-storage".to_owned(),
                    nfs: Some(NFSVolumeSource {
                        server: n.server.clone(),
                        path: n.path.clone(),
                        read_only: None,
                    }),
                    ..Volume::default()
                },
                format!("nfs://{}{}", n.server, n.path),
                None,
            )
        };
        a.location = location.trim_end_matches('/').to_owned();
        a.volumes.push(volume);
        let mut m = mount("backup-storage", STORAGE_MOUNT, false);
        m.sub_path = sub_path;
        a.mounts.push(m);
        a.env.push(env("MYSQL_BACKUP_REPO", STORAGE_MOUNT));
    }
    if let Some(e) = encryption {
        a.volumes.push(secret_file_volume(
            "backup-key",
            &e.key_secret_ref,
            "master.key",
        ));
        a.mounts.push(mount("backup-key", KEY_MOUNT, true));
        a.env.push(env(
            "MYSQL_BACKUP_ENCRYPTION_KEY_FILE",
            format!("{KEY_MOUNT}/master.key"),
        ));
    }
    Some(a)
}

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

    let mut env = vec![
        env(
            "MYSQL_BACKUP_METHOD",
            if physical { "physical" } else { "logical" },
        ),
        env(
            "MYSQL_BACKUP_MYSQL_HOST",
            names::pod_host(&cluster_name, &input.source.name),
        ),
        env("MYSQL_BACKUP_MYSQL_PORT", names::MYSQL_PORT.to_string()),
        env("MYSQL_BACKUP_MYSQL_USER", "bulwark_backup"),
        env(
            "MYSQL_BACKUP_MYSQL_PASSWORD_FILE",
            format!("{PASSWORD_MOUNT}/password"),
        ),
        env("MYSQL_BACKUP_LOG_FORMAT", "json"),
        env("MYSQL_BACKUP_PROGRESS", "log"),
        env("MYSQL_BACKUP_PROGRESS_INTERVAL", "5s"),
        env("MYSQL_BACKUP_RESULT_FILE", "/dev/termination-log"),
    ];
    env.extend(input.access.env.iter().cloned());
    let mut volumes = vec![secret_file_volume(
        "backup-credentials",
        input.password,
        "password",
    )];
    volumes.extend(input.access.volumes.iter().cloned());
    let mut mounts = vec![mount("backup-credentials", PASSWORD_MOUNT, true)];
    mounts.extend(input.access.mounts.iter().cloned());

    let mut node_name = None;
    if physical {
        // The backup tool copies the data files, so it runs where they are, reading the source
        // pod's volume without being able to change it.
        node_name = Some(input.source.node.clone());
        env.push(podspec::env("MYSQL_BACKUP_DATADIR", paths::DATADIR));
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

    let container = Container {
        name: "backup".to_owned(),
        image: Some(input.image.to_owned()),
        args: Some(vec!["backup".to_owned()]),
        env: Some(env),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("File".to_owned()),
        security_context: Some(restricted()),
        ..Container::default()
    };
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        node_name,
        containers: vec![container],
        volumes: Some(volumes),
        tolerations: input.cluster.spec.tolerations.clone(),
        security_context: Some(podspec::server_user()),
        enable_service_links: Some(false),
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
    let mut env = vec![env("MYSQL_BACKUP_LOG_FORMAT", "json")];
    env.extend(access.env.iter().cloned());
    let container = Container {
        name: "delete".to_owned(),
        image: Some(image.to_owned()),
        args: Some(vec!["delete".to_owned(), backup_id.to_owned()]),
        env: Some(env),
        volume_mounts: Some(access.mounts.clone()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(restricted()),
        ..Container::default()
    };
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        containers: vec![container],
        volumes: Some(access.volumes.clone()),
        security_context: Some(podspec::server_user()),
        enable_service_links: Some(false),
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

    #[test]
    fn storages_are_reached_by_mount_or_by_url() {
        let s3: BackupStorage = serde_json::from_value(serde_json::json!({
            "name": "off", "s3": {"bucket": "b", "prefix": "/p/q/", "region": "r"}
        }))
        .unwrap();
        let a = storage_access(&s3, None).unwrap();
        assert_eq!(a.location, "s3://b/p/q");
        assert!(a.volumes.is_empty() && a.mounts.is_empty());
        assert!(!a.env.iter().any(|e| e.name == "AWS_ALLOW_HTTP"));
        let nfs: BackupStorage = serde_json::from_value(serde_json::json!({
            "name": "nas", "nfs": {"server": "10.1.2.3", "path": "/exports/db"}
        }))
        .unwrap();
        let a = storage_access(&nfs, None).unwrap();
        assert_eq!(a.location, "nfs://10.1.2.3/exports/db");
        assert_eq!(a.mounts[0].mount_path, STORAGE_MOUNT);
        let none: BackupStorage = serde_json::from_value(serde_json::json!({"name": "x"})).unwrap();
        assert!(storage_access(&none, None).is_none());
    }
}
