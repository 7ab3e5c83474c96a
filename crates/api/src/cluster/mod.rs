//! The `MySQLCluster` resource: a replicated MySQL or MariaDB server with its storage, services,
//! scheduled backups and the way it is first populated.
//!
//! Validation that the API server can do alone lives in the schema as CEL rules
//! (`x-kubernetes-validations`): immutable fields, one-of choices and references between fields.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{LocalObjectReference, SecretKeyReference};

mod backup_spec;
mod drill;
mod status;

pub use backup_spec::{
    BackupEncryption, BackupSchedule, BackupSpec, BackupStorage, BinlogArchiveSpec, NfsStorage,
    PvcStorage, RetentionPolicy, S3Storage,
};
pub use drill::{DrillPhase, DrillRecord, DrillSpec, DrillSummary, DrillsStatus};
pub use status::{
    BackupRecord, BinlogArchiveStatus, FailoverRecord, LostBranchStatus, MySQLClusterStatus,
    ScheduleStatus, SwitchoverRecord,
};

/// The pattern of [`MANAGED_OPTIONS_PATTERN`], as a literal for `concat!`.
macro_rules! managed_options_pattern {
    () => {
        "^(loose_)?(maximum_)?((skip|disable|enable)_)?(bind_address|binlog_format|datadir|\
         enforce_gtid_consistency|gtid_domain_id|gtid_mode|gtid_strict_mode|log_bin|log_bin_index|\
         log_replica_updates|log_slave_updates|port|read_only|relay_log|relay_log_index|\
         report_host|secure_file_priv|server_id|skip_grant_tables|skip_networking|skip_replica_start|\
         skip_slave_start|socket|super_read_only|rpl_semi_sync_[a-z0-9_]+)$"
    };
}

/// The `mysqldConfig` keys the operator refuses, as an RE2 pattern over a key lowercased with
/// dashes turned to underscores: the options it manages, under every prefix the server accepts.
pub const MANAGED_OPTIONS_PATTERN: &str = managed_options_pattern!();

/// The CRD's CEL rule on `mysqldConfig`.
const MANAGED_OPTIONS_RULE: &str = concat!(
    "self.all(k, !k.lowerAscii().replace('-', '_').matches('",
    managed_options_pattern!(),
    "'))"
);

/// Desired state of a MySQL or MariaDB cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.bulwark.dev",
    version = "v1alpha1",
    kind = "MySQLCluster",
    doc = "A replicated MySQL or MariaDB cluster managed by Bulwark, with its storage, services and scheduled backups.",
    plural = "mysqlclusters",
    singular = "mysqlcluster",
    namespaced,
    status = "MySQLClusterStatus",
    shortname = "myc",
    category = "bulwark",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Engine","type":"string","jsonPath":".spec.engine"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Instances","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Instances ready"}"#,
    printcolumn = r#"{"name":"Primary","type":"string","jsonPath":".status.currentPrimary"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","description":"Why the cluster is or is not Ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.version) || has(self.image)")
        .message("one of version or image must be set"),
    validation = Rule::new("has(self.bootstrap) == has(oldSelf.bootstrap)")
        .message("bootstrap cannot be added or removed after creation"),
    validation = Rule::new(
        "!has(self.bootstrap) || !has(self.bootstrap.fromBackup) || !has(self.bootstrap.fromBackup.storage) || (has(self.backup) && self.backup.storages.exists(s, s.name == self.bootstrap.fromBackup.storage))"
    )
    .message("bootstrap.fromBackup.storage must name an entry of backup.storages")
    .field_path(".bootstrap.fromBackup.storage")
)]
pub struct MySQLClusterSpec {
    /// Database engine: `mysql` or `mariadb`. Cannot be changed after creation.
    #[x_kube(validation = Rule::new("self == oldSelf").message("engine is immutable"))]
    pub engine: Engine,

    /// Server version to run, such as `8.4` or `11.4`; selects the default image of the
    /// engine. One of version or image must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        regex(pattern = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
    )]
    pub version: Option<String>,

    /// Container image of the server; overrides the image chosen from `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,

    /// Number of server instances: one primary, the rest replicas.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,

    /// Persistent volume of each instance. Cannot be changed after creation.
    #[x_kube(validation = Rule::new("self == oldSelf")
        .message("storage is immutable: storageClassName and size cannot be changed"))]
    pub storage: StorageSpec,

    /// CPU and memory requests and limits of the server container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Server options added to the `[mysqld]` section of the configuration file, such as
    /// `innodb_buffer_pool_size: 1G`. Options the operator manages (identity, where the server
    /// listens and keeps its data, binary and relay logs, GTIDs, read_only, replication start,
    /// semi-sync) cannot be set here, under any spelling (`loose-`, `skip-`, dashes, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 256))]
    #[x_kube(validation = Rule::new(MANAGED_OPTIONS_RULE)
    .message("mysqldConfig cannot set options the operator manages: server_id, datadir, socket, port, bind_address, report_host, read_only, super_read_only, log_bin, relay_log, binlog_format, log_slave_updates, gtid_*, skip_networking, skip_slave_start, skip_grant_tables, rpl_semi_sync_* (in any spelling)"))]
    pub mysqld_config: Option<BTreeMap<String, String>>,

    /// Secrets holding the passwords of the accounts the operator uses. A Secret that is not
    /// named here is generated when the cluster is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsSpec>,

    /// Services that expose the primary (writes) and the replicas (reads).
    #[serde(default)]
    pub service: ServiceSpec,

    /// Prometheus metrics exporter running next to each server.
    #[serde(default)]
    pub metrics: MetricsSpec,

    /// Scheduling constraints of the server pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Tolerations of the server pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Node labels a node must carry to run a server pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// PodDisruptionBudget protecting the server pods from voluntary evictions.
    #[serde(default)]
    pub pod_disruption_budget: DisruptionBudgetSpec,

    /// How the replicas confirm the primary's commits.
    #[serde(default)]
    pub replication: ReplicationSpec,

    /// Backup storages, encryption and schedules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSpec>,

    /// How the cluster is populated when it is created. Cannot be changed after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("bootstrap is immutable"))]
    pub bootstrap: Option<BootstrapSpec>,
}

fn default_replicas() -> i32 {
    3
}

/// Database engine of a cluster (the contract's type: one for the API, the command lines, the
/// repository and the agent).
pub use bulwark_contract::Engine;

/// Persistent volume of each server instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// StorageClass of the volumes; the cluster's default StorageClass when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,
    /// Size of each volume, such as `20Gi`.
    pub size: Quantity,
}

/// Secrets holding the passwords of the accounts the operator uses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsSpec {
    /// Password of the `root` account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<SecretKeyReference>,
    /// Password of the account replicas use to connect to the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<SecretKeyReference>,
    /// Password of the account backups connect with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<SecretKeyReference>,
    /// Password of the account the metrics exporter connects with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SecretKeyReference>,
}

/// Kind of the Services that expose the cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ServiceType {
    /// Reachable inside the Kubernetes cluster only.
    #[default]
    ClusterIP,
    /// Also reachable on a port of every node (see `nodePorts`).
    NodePort,
    /// Also reachable through a cloud load balancer.
    LoadBalancer,
}

/// Services that expose the primary (writes) and the replicas (reads).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.nodePorts) || self.type == 'NodePort'")
    .message("nodePorts can only be set when service type is NodePort")
    .field_path(".nodePorts"))]
pub struct ServiceSpec {
    /// Kind of the Services: `ClusterIP` (default), `NodePort` or `LoadBalancer`.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Node ports of the write and read Services when `type` is `NodePort`; 30306 and 30307 when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ports: Option<NodePorts>,
    /// Annotations added to both Services, for instance to configure a load balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Node ports of the write and read Services.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.write != self.read")
    .message("write and read node ports must differ"))]
pub struct NodePorts {
    /// Node port of the Service that routes to the primary.
    #[serde(default = "default_write_node_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub write: i32,
    /// Node port of the Service that routes to the replicas.
    #[serde(default = "default_read_node_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub read: i32,
}

impl Default for NodePorts {
    fn default() -> Self {
        Self {
            write: default_write_node_port(),
            read: default_read_node_port(),
        }
    }
}

fn default_write_node_port() -> i32 {
    30306
}

fn default_read_node_port() -> i32 {
    30307
}

/// Prometheus metrics exporter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Runs the exporter next to each server and exposes its metrics port.
    #[serde(default)]
    pub enabled: bool,
}

/// Annotation on a `MySQLCluster` asking for a planned switchover to the named member pod:
/// `kubectl annotate mysqlcluster/quay mysql.bulwark.dev/switchover=quay-1`. Each value is
/// taken on once (`status.lastSwitchover.request`); to ask again for the same pod, give a new
/// value with a suffix after `@`, e.g. `quay-1@2`.
pub const SWITCHOVER_ANNOTATION: &str = "mysql.bulwark.dev/switchover";

/// Annotation on a `MySQLCluster` naming the replica to promote when its primary is lost but
/// too few replicas report for the operator to know that none of the silent ones holds a
/// commit the others lack: `kubectl annotate mysqlcluster/quay
/// mysql.bulwark.dev/force-failover=quay-2`. For the human who knows the silent members are
/// gone for good; whatever only they held is lost. The named replica must still hold every
/// transaction the reporting replicas have. Each value is taken once
/// (`status.lastFailover.request`); to ask again for the same pod, add a suffix after `@`.
pub const FORCE_FAILOVER_ANNOTATION: &str = "mysql.bulwark.dev/force-failover";

/// Replication between the members.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// Semi-synchronous replication: the primary returns a commit to its client only once
    /// replicas have it, so that a replica promoted after the primary is lost has every write
    /// a client was told succeeded.
    #[serde(default)]
    pub semi_sync: SemiSyncSpec,

    /// Seconds the primary must be lost (its agent gives no report and no replica receives
    /// from it) before the replica with every transaction the replicas have is promoted. 0
    /// turns automatic failover off.
    #[serde(default = "default_failover_after_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub failover_after_seconds: i64,

    /// Longest a planned switchover may pause writes: once the old primary is read-only, the
    /// chosen replica must have applied everything it wrote within this many seconds, or the
    /// switchover is aborted and the old primary takes writes again.
    #[serde(default = "default_switchover_timeout_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub switchover_timeout_seconds: i64,
}

impl Default for ReplicationSpec {
    fn default() -> Self {
        Self {
            semi_sync: SemiSyncSpec::default(),
            failover_after_seconds: default_failover_after_seconds(),
            switchover_timeout_seconds: default_switchover_timeout_seconds(),
        }
    }
}

fn default_failover_after_seconds() -> i64 {
    30
}

fn default_switchover_timeout_seconds() -> i64 {
    30
}

/// Semi-synchronous replication, with the after-sync wait point.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SemiSyncSpec {
    /// Replicas that must have each commit before the client gets the answer. 0 turns
    /// semi-synchronous replication off: a failover may then lose the last commits. It must
    /// be less than `replicas` (a one-member cluster waits for nobody); MariaDB waits for one
    /// replica at most.
    #[serde(default = "default_acks")]
    #[schemars(range(min = 0, max = 8))]
    pub acks: i32,

    /// How long a commit waits for the acknowledgements before the primary gives up and
    /// continues asynchronously (until replicas catch up). Unset: as long as it takes, so no
    /// commit is ever answered unacknowledged, and writes stop while no replica can
    /// acknowledge them (lossless; the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4294967))]
    pub timeout_seconds: Option<i64>,
}

impl Default for SemiSyncSpec {
    fn default() -> Self {
        Self {
            acks: default_acks(),
            timeout_seconds: None,
        }
    }
}

fn default_acks() -> i32 {
    1
}

/// PodDisruptionBudget of the server pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudgetSpec {
    /// Number or percentage of server pods that may be unavailable during voluntary
    /// disruptions such as node drains.
    #[serde(default = "default_max_unavailable")]
    pub max_unavailable: IntOrString,
}

impl Default for DisruptionBudgetSpec {
    fn default() -> Self {
        Self {
            max_unavailable: default_max_unavailable(),
        }
    }
}

fn default_max_unavailable() -> IntOrString {
    IntOrString::Int(1)
}

/// How a cluster is populated when it is created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Restores a backup into the new cluster.
    pub from_backup: BootstrapFromBackup,
}

/// The backup a new cluster is restored from: a MySQLBackup object, or a backup id in one of
/// the cluster's storages (for backups of clusters that no longer exist).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "has(self.backupRef) ? !has(self.storage) && !has(self.backupId) : has(self.storage) && has(self.backupId)"
)
.message("fromBackup needs either backupRef, or both storage and backupId"))]
#[x_kube(validation = Rule::new("!(has(self.until) && has(self.untilGtid))")
.message("fromBackup takes until or untilGtid, not both"))]
pub struct BootstrapFromBackup {
    /// MySQLBackup object, in the cluster's namespace, to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<LocalObjectReference>,
    /// Entry of `backup.storages` that holds the backup named by `backupId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub storage: Option<String>,
    /// Identifier of the backup inside `storage`, as reported in a MySQLBackup's
    /// `status.backupId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub backup_id: Option<String>,
    /// Brings the restored data to a point in time with the binlog archive of the backup's
    /// storage: `latest`, or a UTC time in whole seconds such as `2026-11-25T03:15:00Z` (every
    /// transaction whose commit is stamped at or before it). A physical backup is brought
    /// there before the servers start; a logical one is loaded into the first primary and the
    /// archive replayed after it under the new cluster's own GTIDs (`latest` then means the
    /// archive's end when the restore began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(latest|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2}))$"
    ))]
    pub until: Option<String>,
    /// Brings the restored data up to and including this MariaDB GTID position (such as
    /// `0-1-5012`) with the binlog archive of the backup's storage, physical or logical.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+-[0-9]+-[0-9]+(,[0-9]+-[0-9]+-[0-9]+)*$"))]
    pub until_gtid: Option<String>,
}
