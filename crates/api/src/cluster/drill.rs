//! Restore drills of a cluster's backups: when they run and what they check (the spec), what
//! the newest drill found and which backups still wait for one (the cluster's status), and one
//! backup's latest drill (its `MySQLBackup` status).

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Restore drills: on a schedule, one backup at a time is restored in full into a scratch
/// server inside a Job (never joined to the cluster, never on the network), every table is
/// checked, and the assertions are run. Each run drills one backup: first one a user asked for
/// (annotation `mysql.bulwark.dev/drill`), then (with `everyBackupWithin`) the backup that has
/// gone longest without a drill once that is longer than the period, then the newest
/// never-drilled backup of a schedule, the schedules taking turns.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillSpec {
    /// When to start a drill, in cron syntax (`minute hour day-of-month month day-of-week`,
    /// optionally preceded by a seconds field), or a macro such as `@daily`.
    #[schemars(
        length(min = 1, max = 128),
        regex(
            pattern = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4,5})$"
        )
    )]
    pub schedule: String,
    /// IANA time zone the schedule is interpreted in, such as `Europe/Berlin`; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// Every kept backup is drilled (again) once it has gone this long without a drill (years,
    /// months, days and hours, such as `30d`), before new backups. When absent, a backup is
    /// drilled once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 32),
        regex(pattern = r"^([0-9]+y)?([0-9]+m)?([0-9]+d)?([0-9]+h)?$")
    )]
    pub every_backup_within: Option<String>,
    /// SQL run against the restored data, each of which must return one row whose first
    /// column is a non-zero number, such as `SELECT COUNT(*) > 0 FROM shop.orders`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 1024)))]
    pub assertions: Vec<String>,
    /// Also replays the binlog archive after the backup to its end before the checks
    /// (requires `backup.binlogArchive`): the drill then proves the whole recovery window.
    #[serde(default)]
    pub point_in_time: bool,
    /// Starts no drill while true; a running one finishes.
    #[serde(default)]
    pub suspend: bool,
    /// CPU and memory of the drill's pod (the scratch server runs in it). Its scratch space is
    /// requested from the backup's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Where a drill stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DrillPhase {
    /// The drill's Job runs.
    Running,
    /// The backup was restored, every table checked sound and every assertion held.
    Succeeded,
    /// The drill found the backup unusable or could not run; `message` says why.
    Failed,
}

/// A backup's latest restore drill.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillRecord {
    /// The Job that ran (or runs) the drill.
    pub job: String,
    /// The latest value of the `mysql.bulwark.dev/drill` annotation a drill of this backup
    /// answered (kept by later drills, so each value is answered once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// `Running`, `Succeeded` or `Failed`.
    pub result: DrillPhase,
    /// When the drill started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Seconds from the start until the scratch server held the restored data (and the
    /// archive was replayed, when asked): the measured recovery time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<f64>,
    /// Seconds the drill took in all, checks included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_seconds: Option<f64>,
    /// Bytes of data restored (before compression and encryption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub restored_bytes: Option<i64>,
    /// Tables that `CHECK TABLE` found sound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub tables_checked: Option<i64>,
    /// Assertions that held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub assertions: Option<i32>,
    /// The GTID position the replay of the binlog archive reached (with `pointInTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_gtid: Option<String>,
    /// Transactions the replay applied: none when the backup is at the archive's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replayed_transactions: Option<i64>,
    /// One line: what was proven, or why the drill failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The drills of a cluster, as the scheduler last saw them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillsStatus {
    /// When the operator first saw the drill schedule: its first run counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When the schedule last came due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When it comes due next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// The MySQLBackup being drilled now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// The newest finished drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<DrillSummary>,
    /// Succeeded backups that wait for a drill: never drilled, or (with
    /// `everyBackupWithin`) last drilled longer ago than that.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub waiting: i32,
    /// The oldest of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_waiting: Option<String>,
}

/// One finished drill, named by its backup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillSummary {
    /// The MySQLBackup drilled.
    pub backup: String,
    /// `Succeeded` or `Failed`.
    pub result: DrillPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The measured recovery time, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<f64>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
