//! The `MySQLBackup` resource: one backup of a `MySQLCluster`, taken on demand or by a schedule.
//!
//! The spec says what to back up and where; it is immutable once created. The status records
//! where the backup landed and the replication coordinates it is consistent with.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::BackupStorage;
use crate::common::{BackupMethod, DeletionPolicy, LocalObjectReference};

/// Desired backup of a MySQL or MariaDB cluster. Immutable once created.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.bulwark.dev",
    version = "v1alpha1",
    kind = "MySQLBackup",
    doc = "One backup of a MySQLCluster, taken on demand or by a schedule.",
    plural = "mysqlbackups",
    singular = "mysqlbackup",
    namespaced,
    status = "MySQLBackupStatus",
    shortname = "mybk",
    category = "bulwark",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterRef.name"}"#,
    printcolumn = r#"{"name":"Method","type":"string","jsonPath":".spec.method"}"#,
    printcolumn = r#"{"name":"Storage","type":"string","jsonPath":".spec.storage"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Stored","type":"string","jsonPath":".status.storedSize","description":"Size stored (compressed and encrypted)"}"#,
    printcolumn = r#"{"name":"Drill","type":"string","jsonPath":".status.lastDrill.result","description":"Result of the latest restore drill"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("MySQLBackup spec is immutable"))]
pub struct MySQLBackupSpec {
    /// MySQLCluster, in the same namespace, to back up.
    pub cluster_ref: LocalObjectReference,
    /// Backup method: `physical` (default) or `logical`.
    #[serde(default)]
    pub method: BackupMethod,
    /// Name of the entry of the cluster's `spec.backup.storages` to write the backup to.
    #[schemars(length(min = 1, max = 63))]
    pub storage: String,
    /// What happens to the backup data when this object is deleted: `Retain` or `Delete`. The
    /// cluster's `spec.backup.deletionPolicy` applies when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::nullable_enum::<DeletionPolicy>")]
    pub deletion_policy: Option<DeletionPolicy>,
}

/// Lifecycle phase of a backup.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum BackupPhase {
    /// Accepted, not started yet.
    Pending,
    /// Data is being copied to the storage.
    Running,
    /// Finished; the manifest is written and the backup can be restored.
    Succeeded,
    /// Finished without a usable backup; `message` says why.
    Failed,
}

/// Observed state of a backup.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MySQLBackupStatus {
    /// Lifecycle phase: `Pending`, `Running`, `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::nullable_enum::<BackupPhase>")]
    pub phase: Option<BackupPhase>,
    /// When the data copy started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the backup succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Identifier of the backup inside its storage; what `bootstrap.fromBackup.backupId` of a
    /// MySQLCluster refers to. Assigned before the backup's Job is created, so that what a run
    /// cut short leaves can be found and deleted; the backup exists under it once `phase` is
    /// `Succeeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    /// Full location of the backup, such as `s3://bucket/prefix/<backupId>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Bytes written to the storage (after compression and encryption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub stored_bytes: Option<i64>,
    /// `storedBytes` for people, in binary units (`748.4 KiB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_size: Option<String>,
    /// Bytes of data read from the server (before compression and encryption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub plaintext_bytes: Option<i64>,
    /// SHA-256 of the backup's manifest, hex encoded; checked before a restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub manifest_sha256: Option<String>,
    /// Binary log file the backup is consistent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_file: Option<String>,
    /// Position in `binlogFile` the backup is consistent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub binlog_position: Option<i64>,
    /// GTID set executed at the point the backup is consistent with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_set: Option<String>,
    /// Pod the backup was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pod: Option<String>,
    /// The storage the backup is written to, as its cluster defined it when the backup
    /// started, recorded by the operator before any data is written: where the data is found
    /// (and deleted) whatever later happens to the cluster. Only the operator writes it; a
    /// MySQLBackup's author cannot choose where data goes beyond naming one of the cluster's
    /// storages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_storage: Option<BackupStorage>,
    /// Progress of a running backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<BackupProgress>,
    /// Standard conditions: `Complete` and `Failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Human-readable detail of the current phase, such as the reason of a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The latest restore drill of this backup (the cluster's `backup.drills`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<crate::cluster::DrillRecord>,
}

/// Progress of a running backup.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupProgress {
    /// Bytes of data read from the server so far.
    #[schemars(range(min = 0))]
    pub bytes_done: i64,
    /// Recent throughput, in bytes read per second.
    #[schemars(range(min = 0))]
    pub bytes_per_second: i64,
}
