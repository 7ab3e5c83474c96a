//! Types shared by the `MySQLCluster` and `MySQLBackup` resources: backup methods, deletion
//! policies, object references and the condition types both kinds report.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// How a backup reads the data out of the server.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum BackupMethod {
    /// Copies the InnoDB data files while the server runs (hot, fast to restore; the restore
    /// needs the same major version of the server).
    #[default]
    #[serde(rename = "physical")]
    Physical,
    /// Dumps the rows as SQL (slower, portable across versions and between MySQL and MariaDB).
    #[serde(rename = "logical")]
    Logical,
}

/// What happens to a backup's data in its storage when its `MySQLBackup` object is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeletionPolicy {
    /// The backup data stays in the storage; only the Kubernetes object goes away.
    #[default]
    Retain,
    /// The backup data is deleted from the storage before the object goes away.
    Delete,
}

/// A reference to a key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Name of the Secret, in the namespace of the referring object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret whose value is used.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A reference to an object of a known kind in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Name of the referenced object, in the namespace of the referring object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Condition types reported in `status.conditions` (standard `metav1.Condition` shape: type,
/// status, reason, message, lastTransitionTime, observedGeneration).
pub mod condition {
    /// `MySQLCluster`: all replicas run and the primary accepts writes.
    pub const READY: &str = "Ready";
    /// `MySQLCluster`: the observed state is moving towards the spec (rollout, scale, failover).
    pub const PROGRESSING: &str = "Progressing";
    /// `MySQLCluster`: the spec cannot be acted on (a reference is missing or invalid); the
    /// condition's message says why.
    pub const DEGRADED: &str = "Degraded";
    /// `MySQLCluster`: a commit a client saw succeed survives the loss of the primary
    /// (semi-synchronous replication without a timeout, and failover only to a replica that
    /// provably holds it); False, with the reason, when the spec gives that up.
    pub const WRITES_PROTECTED: &str = "WritesProtected";
    /// `MySQLCluster`: the latest backup succeeded and no schedule is overdue.
    pub const BACKUP_HEALTHY: &str = "BackupHealthy";
    /// `MySQLBackup`: the backup finished and its manifest was written and verified.
    pub const COMPLETE: &str = "Complete";
    /// `MySQLBackup`: the backup failed; the condition's message says why.
    pub const FAILED: &str = "Failed";
}

/// Schema of an optional string enum: the enum's own schema marked `nullable`.
///
/// schemars describes `Option<Enum>` as `anyOf: [<enum>, null]`, which is not a structural
/// schema and is rejected by the API server; use with `#[schemars(schema_with = ...)]`.
pub(crate) fn nullable_enum<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = T::json_schema(generator);
    schema.insert("nullable".to_owned(), true.into());
    schema
}
