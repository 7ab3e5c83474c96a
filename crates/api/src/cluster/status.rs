//! The observed state of a `MySQLCluster`: readiness, the primary and its epoch, the last
//! failover and switchover, the binlog archive's window and each schedule's backups. The
//! operator's cluster and schedule managers write it (the operator's `cluster/status.rs` and
//! `schedule::owned_status`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A planned change of primary, asked for with [`super::SWITCHOVER_ANNOTATION`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverRecord {
    /// The annotation value this record answers.
    pub request: String,
    /// The primary when it was asked for.
    pub from: String,
    /// The pod asked for.
    pub to: String,
    /// When the operator took the request on.
    pub started: Time,
    /// When it ended; unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Time>,
    /// `Completed`, `Refused` or `Aborted`; unset while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why it was refused or aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A primary replaced by a replica.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRecord {
    /// The pod that was the primary.
    pub from: String,
    /// The pod promoted.
    pub to: String,
    /// When the operator decided it.
    pub time: Time,
    /// Why, with the GTID set of the promoted replica.
    pub reason: String,
    /// The force-failover annotation value this failover answered, if one was pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The epoch the failover raised the roles to: until the promoted replica takes writes at
    /// it, the choice is looked at again with every new report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
}

/// Observed state of a MySQL or MariaDB cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MySQLClusterStatus {
    /// Standard conditions: `Ready`, `Progressing`, `Degraded`, `BackupHealthy` and, with
    /// `backup.binlogArchive`, `BinlogArchiveHealthy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of server instances that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Name of the pod that currently runs the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,
    /// When a primary was first ready: from then on the cluster holds data, and a pod is made
    /// the primary only once its data has been compared with the other members'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_since: Option<Time>,
    /// Since when the primary has been lost (unset while it is not): when it was last heard
    /// of, to the microsecond, which `failoverAfterSeconds` is counted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_lost_since: Option<MicroTime>,
    /// The latest automatic failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<FailoverRecord>,
    /// The latest planned switchover (running while `finished` is unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_switchover: Option<SwitchoverRecord>,
    /// Raised at every change of primary; the members' roles carry it (pod label
    /// `mysql.bulwark.dev/epoch` and the operator's orders to the agents), so that no late
    /// label or order can undo a newer one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
    /// The latest backup of the cluster that succeeded, of any schedule or taken on demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<BackupRecord>,
    /// State of each backup schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub schedules: Vec<ScheduleStatus>,
    /// The binlog archive, as its archiver last reported (with `backup.binlogArchive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_archive: Option<BinlogArchiveStatus>,
    /// Restore drills (with `backup.drills`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drills: Option<super::DrillsStatus>,
}

/// The binlog archive and the recovery window it gives.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct BinlogArchiveStatus {
    /// The archive in the repository (`binlogs/<archive>/`) the cluster's binary logs go to
    /// and its backups name: the cluster's name and the start of its UID, so a cluster created
    /// again under the same name never continues another's history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// Whether the archiver is streaming from the primary.
    #[serde(default)]
    pub streaming: bool,
    /// GTID position after the last archived transaction.
    #[serde(default)]
    pub through: String,
    /// Commit stamp of the last archived transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
    /// Seconds the archive may be behind the primary.
    #[serde(default)]
    pub lag_seconds: i64,
    /// Gaps in the archive (binary logs purged before they were archived).
    #[serde(default)]
    pub gaps: u32,
    /// Where the newest gap resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap_resumed_at: Option<String>,
    /// The first point in time a new cluster can be restored to, continuously up to
    /// `recoverableTo`: the finish of the oldest backup the archive continues to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from: Option<String>,
    /// That backup's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from_backup: Option<String>,
    /// The last point in time a new cluster can be restored to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_to: Option<String>,
    /// The newest backup (id) the archive continues to its end: the base of the current
    /// window, which the schedules' retention never deletes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_base_backup: Option<String>,
    /// The timeline the archive follows: a new one each time another member becomes primary
    /// or a failover leaves archived transactions behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<i64>,
    /// Where that timeline began (GTID position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_began_at: Option<String>,
    /// The timeline it branched from when that one went on past where it began: transactions
    /// archived there that the primary lacks (lost by a failover); not in the history that
    /// `latest` or a time restores, but still archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branched_from: Option<i64>,
    /// How far the branch left behind reaches: restoring to this GTID position recovers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_behind_through: Option<String>,
    /// Every branch a failover left behind, oldest first (the newest ten), so what an earlier
    /// failover lost stays findable after later ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_branches: Vec<LostBranchStatus>,
}

/// Transactions archived on one timeline that the next one did not take (a failover lost them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct LostBranchStatus {
    /// The timeline that went on without them.
    pub timeline: i64,
    /// Where it began (GTID position): the point the branches share.
    pub began_at: String,
    /// The timeline holding them.
    pub branched_from: i64,
    /// How far they reach (GTID position): restoring to it recovers them.
    pub through: String,
}

/// A successful backup, as recorded in a cluster's status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    /// Name of the MySQLBackup object.
    pub name: String,
    /// Identifier of the backup inside its storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    /// When the backup completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// State of one backup schedule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// Name of the schedule in `spec.backup.schedules`.
    pub name: String,
    /// When the operator first saw this schedule: its first run and the overdue check count
    /// from here, not from the cluster's creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When the schedule last started a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the schedule starts its next backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// The latest backup of this schedule that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<BackupRecord>,
}
