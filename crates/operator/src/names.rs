//! Names and labels of the objects the operator creates, in one place so that every controller
//! and the tests agree on them.

use std::collections::BTreeMap;

use bulwark_contract::{ports, Role};

/// Label holding the cluster name on every object of a cluster.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Label naming the application.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// Label naming an object's part in the cluster.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// Label naming the manager of an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of `app.kubernetes.io/name` on every server object.
pub const APP_NAME: &str = "mysql";
/// Value of `app.kubernetes.io/managed-by`.
pub const MANAGED_BY: &str = "bulwark-operator";
/// Label the operator maintains on server pods: `primary` or `replica`; the Services select by it
/// and the agent reads it.
pub const ROLE_LABEL: &str = bulwark_contract::labels::ROLE;
/// Label on server pods: the epoch of their role (`bulwark_contract::order`).
pub const EPOCH_LABEL: &str = bulwark_contract::order::EPOCH_LABEL;
/// Role label value of the pod running the primary.
pub const ROLE_PRIMARY: &str = Role::Primary.as_str();
/// Role label value of the pods running replicas.
pub const ROLE_REPLICA: &str = Role::Replica.as_str();
/// Label on MySQLBackup objects a schedule created: the schedule's name.
pub const SCHEDULE_LABEL: &str = "mysql.bulwark.dev/schedule";
/// Label on Jobs and pods: the MySQLBackup they belong to.
pub const BACKUP_LABEL: &str = "mysql.bulwark.dev/backup";
/// Annotation on scheduled MySQLBackups: the time the schedule fired for (RFC 3339).
pub const SCHEDULED_AT_ANNOTATION: &str = "mysql.bulwark.dev/scheduled-at";
/// Annotation on a bootstrapped cluster's StatefulSet: the backup its pods restore, as JSON
/// (`cluster::bootstrap::RestoreSource`), resolved once when the cluster was created.
pub const RESTORE_SOURCE_ANNOTATION: &str = "mysql.bulwark.dev/restore-source";
/// Finalizer on MySQLBackups whose data is deleted with them.
pub const BACKUP_DATA_FINALIZER: &str = "mysql.bulwark.dev/backup-data";
/// Annotation on a MySQLBackup asking for a restore drill of it; each new value is answered
/// by one drill (`status.lastDrill.request` names the value answered).
pub const DRILL_REQUEST_ANNOTATION: &str = "mysql.bulwark.dev/drill";

/// Port of the MySQL protocol (as Kubernetes types it).
pub const MYSQL_PORT: i32 = ports::MYSQL as i32;
/// Port of the agent sidecar's health endpoints.
pub const AGENT_PORT: i32 = ports::AGENT as i32;
/// The agent's port for copies of a member's data (`seed`).
pub const CLONE_PORT: i32 = ports::CLONE as i32;
/// The server pods' metrics port: the agent answers `/metrics` there with the exporter's.
pub const EXPORTER_PORT: i32 = ports::EXPORTER as i32;

/// Component values.
pub mod component {
    /// Server pods, their StatefulSet, Services and PodDisruptionBudget.
    pub const DATABASE: &str = "database";
    /// The my.cnf ConfigMaps.
    pub const CONFIG: &str = "config";
    /// Generated credentials.
    pub const CREDENTIALS: &str = "credentials";
    /// Backup and deletion Jobs.
    pub const BACKUP: &str = "backup";
    /// The binlog archiver.
    pub const ARCHIVER: &str = "binlog-archiver";
    pub const DRILL: &str = "drill";
}

/// Labels that select a cluster's server pods.
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_owned(), APP_NAME.to_owned()),
        (INSTANCE_LABEL.to_owned(), cluster.to_owned()),
        (COMPONENT_LABEL.to_owned(), component::DATABASE.to_owned()),
    ])
}

/// Labels of an object of a cluster with the given component.
pub fn labels(cluster: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_owned(), APP_NAME.to_owned()),
        (INSTANCE_LABEL.to_owned(), cluster.to_owned()),
        (COMPONENT_LABEL.to_owned(), component.to_owned()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// A label selector string matching every object of `labels`.
pub fn selector_string(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Headless Service giving each pod a stable DNS name.
pub fn headless_service(cluster: &str) -> String {
    format!("{cluster}-headless")
}

/// Service routing to the primary.
pub fn primary_service(cluster: &str) -> String {
    format!("{cluster}-primary")
}

/// The binlog archiver's Deployment.
pub fn binlog_archiver(cluster: &str) -> String {
    format!("{cluster}-binlog-archiver")
}

/// The archive in the repository that the cluster's binary logs go to and its backups name:
/// the cluster's name and the first 8 hex digits of its UID, so a cluster deleted and created
/// again under the same name starts an archive of its own and never continues the history of
/// another (their GTIDs look alike). Once recorded in the status it stays; a cluster that
/// archived before archives were named so (a status without the name) keeps its plain name.
pub fn binlog_archive(cluster: &bulwark_api::cluster::MySQLCluster) -> String {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let recorded = cluster
        .status
        .as_ref()
        .and_then(|s| s.binlog_archive.as_ref());
    if let Some(status) = recorded {
        return status.archive.clone().unwrap_or_else(|| name.to_owned());
    }
    let uid: String = cluster
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(8)
        .collect();
    if uid.is_empty() {
        name.to_owned()
    } else {
        format!("{name}-{}", uid.to_ascii_lowercase())
    }
}

/// Service routing to the replicas.
pub fn replicas_service(cluster: &str) -> String {
    format!("{cluster}-replicas")
}

/// Secret holding the generated passwords.
pub fn credentials_secret(cluster: &str) -> String {
    format!("{cluster}-credentials")
}

/// ConfigMap holding my.cnf, named by a hash of its content.
pub fn config_map(cluster: &str, content_hash: &str) -> String {
    format!("{cluster}-config-{content_hash}")
}

/// Name of the pod with the given ordinal.
pub fn pod(cluster: &str, ordinal: i32) -> String {
    format!("{cluster}-{ordinal}")
}

/// Ordinal of a cluster's pod, from its name.
pub fn pod_ordinal(cluster: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(cluster)?.strip_prefix('-')?.parse().ok()
}

/// The data PersistentVolumeClaim of a pod (volume claim template `data`).
pub fn data_claim(pod: &str) -> String {
    format!("data-{pod}")
}

/// DNS name of a pod through the headless Service.
pub fn pod_host(cluster: &str, pod: &str) -> String {
    format!("{pod}.{}", headless_service(cluster))
}

/// Name of a Job, at most 63 characters (Job names become label values): `<base>-<suffix>`,
/// with the base shortened when too long.
pub fn job(base: &str, suffix: &str) -> String {
    format!("{}-{suffix}", shorten(base, 63 - suffix.len() - 1))
}

/// `value` as a label value (at most 63 characters).
pub fn label_value(value: &str) -> String {
    shorten(value, 63)
}

/// `value` if it has at most `max` characters, else its start and a hash of all of it, so that
/// distinct long values stay distinct.
fn shorten(value: &str, max: usize) -> String {
    if value.len() <= max {
        return value.to_owned();
    }
    let hash = crate::hash::short(value.as_bytes());
    let mut cut = max - hash.len() - 1;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    let start = value[..cut].trim_end_matches(['-', '.', '_']);
    format!("{start}-{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_are_named_per_cluster_incarnation_and_stay() {
        let cluster = |status: &str| -> bulwark_api::cluster::MySQLCluster {
            serde_yaml::from_str(&format!(
                "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\n\
                 metadata: {{name: till, uid: 0A1B2C3D-4e5f-6789-abcd-ef0123456789}}\n\
                 spec: {{engine: mariadb, version: '11.4', storage: {{size: 1Gi}}}}\n{status}"
            ))
            .unwrap()
        };
        let cases = [
            ("new", "", "till-0a1b2c3d"),
            (
                "recorded",
                "status: {binlogArchive: {archive: till-99999999}}",
                "till-99999999",
            ),
            (
                "archived before archives were named so",
                "status: {binlogArchive: {through: 0-100-5}}",
                "till",
            ),
        ];
        for (case, status, want) in cases {
            assert_eq!(binlog_archive(&cluster(status)), want, "{case}");
        }
    }

    #[test]
    fn ordinals_parse_only_for_the_cluster() {
        assert_eq!(pod_ordinal("shop", "shop-2"), Some(2));
        assert_eq!(pod_ordinal("shop", "shop-db-2"), None);
        assert_eq!(pod_ordinal("shop", "shopx-1"), None);
    }

    #[test]
    fn long_names_become_distinct_label_values() {
        assert_eq!(label_value("nightly"), "nightly");
        let a = label_value(&"a".repeat(100));
        assert!(a.len() <= 63, "{a}");
        assert_ne!(a, label_value(&format!("{}b", "a".repeat(99))));
    }

    #[test]
    fn job_names_fit_label_values() {
        assert_eq!(job("nightly", "backup"), "nightly-backup");
        let long = "a".repeat(80);
        let name = job(&long, "backup");
        assert_eq!(name.len(), 63, "{name}");
        assert!(name.ends_with("-backup"));
        assert_ne!(job(&long, "backup"), job(&"b".repeat(80), "backup"));
    }
}
