//! The binlog archiver of a cluster with `backup.binlogArchive`: one pod running
//! `mysql-backup archive` against the primary Service, so it follows every failover and
//! switchover; it resumes from the archive itself, so a restarted or rescheduled pod loses
//! nothing the primary still holds. `Recreate`: two archivers never stream at once.

use bulwark_api::MySQLCluster;
use bulwark_contract::command::{self, ARCHIVER_SERVER_ID};
use bulwark_contract::{paths, ports, Account};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{cluster_name, meta};
use crate::credentials::Credentials;
use crate::names::{self, component};
use crate::podspec::{self, command_container, mount};
use crate::storage::{secret_file_volume, StorageAccess};

/// Seconds between archive commits when the spec does not say.
pub const DEFAULT_FLUSH_EVERY_SECONDS: i32 = 5;

/// The archiver's Deployment, or `None` when the cluster does not archive.
pub fn binlog_archiver(
    cluster: &MySQLCluster,
    credentials: &Credentials,
    access: &StorageAccess,
    image: &str,
) -> Option<Deployment> {
    let spec = cluster.spec.backup.as_ref()?.binlog_archive.as_ref()?;
    let name = cluster_name(cluster);
    let argv = command::Archive {
        repository: access.repository.clone(),
        archive: names::binlog_archive(cluster),
        host: names::primary_service(name),
        port: ports::MYSQL,
        user: Account::Backup.user().to_owned(),
        password_file: paths::BACKUP_PASSWORD_FILE.to_owned(),
        flush_every_seconds: spec
            .flush_every_seconds
            .unwrap_or(DEFAULT_FLUSH_EVERY_SECONDS)
            .max(1) as u32,
        server_id: ARCHIVER_SERVER_ID,
        status_listen: format!("0.0.0.0:{}", ports::ARCHIVER),
        // The operator's retention deletes backups; their segments go with them.
        prune_unneeded: true,
        // Failover is the operator's own act: the survivor's history is the cluster's.
        branch_on_divergence: true,
    }
    .argv();
    let mut volumes = vec![
        secret_file_volume(
            "backup-credentials",
            credentials.source(Account::Backup),
            "password",
        ),
        podspec::tmp_volume(),
    ];
    volumes.extend(access.volumes.iter().cloned());
    let mut mounts = vec![
        mount("backup-credentials", paths::BACKUP_PASSWORD_DIR, true),
        mount("tmp", podspec::TMP_DIR, false),
    ];
    mounts.extend(access.mounts.iter().cloned());
    let quantity = |s: &str| Quantity(s.to_owned());
    let container = Container {
        volume_mounts: Some(mounts),
        // A segment is 16 MiB of binlog by default, held once, plus the chunks being encoded; a
        // compaction holds up to twice that, twice over. A transaction too large for that waits
        // in /tmp (beyond 8 MiB), so its size never sets the memory needed.
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("cpu".into(), quantity("50m")),
                    ("memory".into(), quantity("64Mi")),
                ]
                .into(),
            ),
            limits: Some([("memory".into(), quantity("512Mi"))].into()),
            ..ResourceRequirements::default()
        }),
        ports: Some(vec![ContainerPort {
            name: Some("status".to_owned()),
            container_port: i32::from(ports::ARCHIVER),
            ..ContainerPort::default()
        }]),
        // /healthz fails once the archiver's loop has stalled for two minutes (a hung commit
        // or listing); a restart resumes after the last committed segment.
        liveness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".to_owned()),
                port: IntOrString::Int(i32::from(ports::ARCHIVER)),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        ..command_container("archiver", image, argv)
    };
    let labels = names::labels(name, component::ARCHIVER);
    Some(Deployment {
        metadata: meta(cluster, names::binlog_archiver(name), component::ARCHIVER),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(volumes),
                    tolerations: cluster.spec.tolerations.clone(),
                    node_selector: cluster.spec.node_selector.clone(),
                    security_context: Some(podspec::server_user()),
                    enable_service_links: Some(false),
                    // Nothing in it talks to the Kubernetes API: no token to steal.
                    automount_service_account_token: Some(false),
                    termination_grace_period_seconds: Some(30),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    })
}
