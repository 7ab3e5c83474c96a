//! The Job of a restore drill: `mysql-backup drill` in the backup image, with a scratch volume
//! sized from the backup, no credentials of the cluster and no API access. Pure.

use std::collections::BTreeMap;

use bulwark_api::{BackupMethod, MySQLBackup, MySQLCluster};
use bulwark_contract::{command, paths};
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, PodSpec, PodTemplateSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::outcome::CONTAINER;
use crate::names::{self, component};
use crate::podspec::{self, command_container, mount};
use crate::storage::StorageAccess;

/// Longest a drill may run before Kubernetes stops it.
pub const DRILL_DEADLINE_SECONDS: i64 = 24 * 3600;
/// Seconds between the drill's progress log lines.
const PROGRESS_INTERVAL_SECONDS: u32 = 5;

/// Everything a drill Job is built from.
pub struct DrillJobInput<'a> {
    pub backup: &'a MySQLBackup,
    pub cluster: &'a MySQLCluster,
    /// The backup's storage, as its status recorded it.
    pub access: &'a StorageAccess,
    pub image: &'a str,
    /// When the drill starts (part of the Job's name).
    pub at: DateTime<Utc>,
    /// The drill request annotation's value this drill answers, if a user asked for it.
    pub request: Option<&'a str>,
    /// The due time of the drill schedule this drill was started for, if any.
    pub scheduled: Option<DateTime<Utc>>,
}

/// The Job's record of why it runs, read back by a pass that finds it unrecorded: the
/// request it answers and the due time it was started for.
pub fn why_started(job: &Job) -> (Option<String>, Option<DateTime<Utc>>) {
    let annotations = job.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).cloned();
    let scheduled = get(names::SCHEDULED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&Utc));
    (get(names::DRILL_REQUEST_ANNOTATION), scheduled)
}

/// Name of the drill Job of `backup` started at `at`.
pub fn drill_job_name(backup: &str, at: DateTime<Utc>) -> String {
    names::job(backup, &format!("drill-{}", at.format("%Y%m%d%H%M%S")))
}

/// The labels of a cluster's drill Jobs and their pods.
pub fn drill_labels(cluster: &str) -> BTreeMap<String, String> {
    names::labels(cluster, component::DRILL)
}

/// The Job that drills `input.backup`. The cluster's `backup.drills` gives the assertions,
/// the replay and the resources; a drill a user asked for without it checks the tables only.
pub fn drill_job(input: &DrillJobInput<'_>) -> Job {
    let backup = input.backup;
    let backup_name = backup.metadata.name.clone().unwrap_or_default();
    let cluster_name = input.cluster.metadata.name.clone().unwrap_or_default();
    let spec = input
        .cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.drills.as_ref());
    let status = backup.status.clone().unwrap_or_default();
    let scratch = bulwark_contract::drill::scratch_bytes(
        status.plaintext_bytes.unwrap_or(0).max(0) as u64,
        backup.spec.method == BackupMethod::Logical,
    );
    let scratch = Quantity(scratch.to_string());

    let mut volumes = vec![
        podspec::tmp_volume(),
        Volume {
            name: "scratch".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(scratch.clone()),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    volumes.extend(input.access.volumes.iter().cloned());
    let mut mounts = vec![
        mount("tmp", podspec::TMP_DIR, false),
        mount("scratch", paths::DRILL_SCRATCH, false),
    ];
    // A drill only reads the repository: a faulty one cannot damage what it proves.
    mounts.extend(input.access.mounts.iter().map(|m| VolumeMount {
        read_only: Some(true),
        ..m.clone()
    }));

    let argv = command::Drill {
        repository: input.access.repository.clone(),
        backup_id: status.backup_id.clone().unwrap_or_default(),
        scratch_dir: paths::DRILL_SCRATCH.to_owned(),
        assertions: spec.map(|s| s.assertions.clone()).unwrap_or_default(),
        point_in_time: spec.is_some_and(|s| s.point_in_time),
        result_file: paths::TERMINATION_LOG.to_owned(),
        progress_interval_seconds: PROGRESS_INTERVAL_SECONDS,
    }
    .argv();
    // The scratch space is requested, so the drill lands only where the node can hold it.
    let mut resources = spec.and_then(|s| s.resources.clone()).unwrap_or_default();
    resources
        .requests
        .get_or_insert_with(BTreeMap::new)
        .insert("ephemeral-storage".to_owned(), scratch);
    let container = Container {
        volume_mounts: Some(mounts),
        termination_message_policy: Some("File".to_owned()),
        resources: Some(resources),
        ..command_container(CONTAINER, input.image, argv)
    };

    let mut labels = drill_labels(&cluster_name);
    labels.insert(
        names::BACKUP_LABEL.to_owned(),
        names::label_value(&backup_name),
    );
    let pod = PodSpec {
        restart_policy: Some("Never".to_owned()),
        containers: vec![container],
        volumes: Some(volumes),
        tolerations: input.cluster.spec.tolerations.clone(),
        security_context: Some(podspec::server_user()),
        enable_service_links: Some(false),
        // The drill reads the repository, never the Kubernetes API.
        automount_service_account_token: Some(false),
        // Off the servers' nodes where the cluster has room: a drill's disk and CPU load.
        affinity: Some(podspec::spread_over_nodes(&cluster_name)),
        ..PodSpec::default()
    };
    let mut annotations = BTreeMap::new();
    if let Some(request) = input.request {
        annotations.insert(
            names::DRILL_REQUEST_ANNOTATION.to_owned(),
            request.to_owned(),
        );
    }
    if let Some(t) = input.scheduled {
        annotations.insert(
            names::SCHEDULED_AT_ANNOTATION.to_owned(),
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        );
    }
    let meta = ObjectMeta {
        name: Some(drill_job_name(&backup_name, input.at)),
        namespace: backup.metadata.namespace.clone(),
        labels: Some(labels.clone()),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: Some(vec![backup
            .controller_owner_ref(&())
            .expect("a stored backup has a name and uid")]),
        ..ObjectMeta::default()
    };
    Job {
        metadata: meta,
        spec: Some(JobSpec {
            // A failed drill is a finding, not a glitch to retry: it is reported as it is.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(DRILL_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(drills: &str) -> MySQLCluster {
        serde_yaml::from_str(&format!(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\n\
             metadata: {{name: tide, namespace: ns}}\n\
             spec: {{engine: mariadb, version: '10.11', storage: {{size: 1Gi}}, \
             backup: {{storages: [{{name: nas, pvc: {{claimName: dumps}}}}], \
             binlogArchive: {{storage: nas}}{drills}}}}}\n"
        ))
        .unwrap()
    }

    fn backup(method: &str) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.bulwark.dev/v1alpha1", "kind": "MySQLBackup",
            "metadata": {"name": "tide-nightly-20261122030000", "namespace": "ns", "uid": "u-1"},
            "spec": {"clusterRef": {"name": "tide"}, "storage": "nas", "method": method},
            "status": {"phase": "Succeeded", "backupId": "20261122T030000Z-ab12", "plaintextBytes": 1_073_741_824i64}
        }))
        .unwrap()
    }

    fn access() -> StorageAccess {
        StorageAccess {
            repository: command::Repository {
                url: "/backup-storage".into(),
                ..command::Repository::default()
            },
            volumes: vec![],
            mounts: vec![mount("storage", "/backup-storage", false)],
            location: "pvc://dumps".into(),
        }
    }

    fn build(cluster: &MySQLCluster, backup: &MySQLBackup) -> Job {
        drill_job(&DrillJobInput {
            backup,
            cluster,
            access: &access(),
            image: "bulwark/backup:1",
            at: "2026-11-22T04:00:00Z".parse().unwrap(),
            request: Some("r1"),
            scheduled: Some("2026-11-22T03:59:00Z".parse().unwrap()),
        })
    }

    fn container(job: &Job) -> &Container {
        &job.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
    }

    #[test]
    fn the_drill_runs_the_spec_checks_with_room_for_the_backup() {
        let c = cluster(
            ", drills: {schedule: '@daily', pointInTime: true, assertions: ['SELECT 1'], \
             resources: {limits: {memory: 1Gi}}}",
        );
        let job = build(&c, &backup("physical"));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("tide-nightly-20261122030000-drill-20261122040000")
        );
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("MySQLBackup", "u-1")
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[names::COMPONENT_LABEL], "drill");
        assert_eq!(labels[names::BACKUP_LABEL], "tide-nightly-20261122030000");
        let c0 = container(&job);
        let args = c0.args.as_ref().unwrap();
        for want in [
            "drill",
            "--assert=SELECT 1",
            "--until=latest",
            "--scratch-dir=/var/lib/bulwark-drill",
            "--result-file=/dev/termination-log",
            "20261122T030000Z-ab12",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        let resources = c0.resources.as_ref().unwrap();
        let want = ((1u64 << 30) + (512 << 20)).to_string();
        assert_eq!(
            resources.requests.as_ref().unwrap()["ephemeral-storage"].0,
            want
        );
        assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "1Gi");
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let scratch = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "scratch")
            .unwrap();
        assert_eq!(
            scratch
                .empty_dir
                .as_ref()
                .unwrap()
                .size_limit
                .as_ref()
                .unwrap()
                .0,
            want
        );
        assert_eq!(
            c0.security_context
                .as_ref()
                .unwrap()
                .read_only_root_filesystem,
            Some(true)
        );
        let storage = c0
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.name == "storage");
        assert_eq!(
            storage.and_then(|m| m.read_only),
            Some(true),
            "the repository is read only"
        );
        assert_eq!(
            why_started(&job),
            (
                Some("r1".to_owned()),
                Some("2026-11-22T03:59:00Z".parse().unwrap())
            )
        );
    }

    #[test]
    fn a_requested_drill_without_a_drill_spec_checks_the_tables_only() {
        let job = build(&cluster(""), &backup("logical"));
        let c0 = container(&job);
        let args = c0.args.as_ref().unwrap();
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--assert") || a.starts_with("--until")),
            "{args:?}"
        );
        // A logical load builds indexes and logs beside the data.
        let want = ((2u64 << 30) + (512 << 20)).to_string();
        assert_eq!(
            c0.resources.as_ref().unwrap().requests.as_ref().unwrap()["ephemeral-storage"].0,
            want
        );
    }
}
