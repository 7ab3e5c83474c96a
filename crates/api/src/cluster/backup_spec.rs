//! The backup section of a `MySQLCluster`: where backups go (storages), how they are
//! encrypted, when they are taken (schedules) and kept (retention), and the binlog archive.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{BackupMethod, DeletionPolicy, LocalObjectReference, SecretKeyReference};

/// Backup storages, encryption and schedules of a cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "self.schedules.all(sc, self.storages.exists(st, st.name == sc.storage))"
)
.message("every schedule's storage must name an entry of backup.storages")
.field_path(".schedules"))]
#[x_kube(validation = Rule::new(
    "!has(self.binlogArchive) || self.storages.exists(st, st.name == self.binlogArchive.storage)"
)
.message("binlogArchive.storage must name an entry of backup.storages")
.field_path(".binlogArchive"))]
#[x_kube(validation = Rule::new(
    "!has(self.drills) || !self.drills.pointInTime || has(self.binlogArchive)"
)
.message("drills.pointInTime replays the binlog archive: set backup.binlogArchive")
.field_path(".drills"))]
pub struct BackupSpec {
    /// Places backups are written to, each with a name that schedules and backups refer to.
    #[schemars(length(min = 1, max = 8))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub storages: Vec<BackupStorage>,

    /// Client-side encryption of the backup data. Backups are stored unencrypted when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,

    /// Backups taken on a schedule.
    #[serde(default)]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub schedules: Vec<BackupSchedule>,

    /// What happens to the data of this cluster's backups (unless a MySQLBackup sets its own)
    /// when their MySQLBackup objects are deleted, by retention or by hand: `Retain` (default)
    /// or `Delete`. MySQLBackup objects are not deleted with the cluster.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Continuous archiving of the binary logs for point-in-time recovery: the primary's
    /// transactions are streamed into a storage's binlog archive, next to its backups, within
    /// seconds of their commit. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_archive: Option<BinlogArchiveSpec>,

    /// Restore drills that prove the backups restorable, on a schedule. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drills: Option<super::DrillSpec>,
}

/// Where and how often the binary logs are archived.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BinlogArchiveSpec {
    /// Name of the entry of `backup.storages` the archive is written to; backups in the same
    /// storage can be restored to any point the archive covers after them.
    #[schemars(length(min = 1, max = 63))]
    pub storage: String,
    /// Seconds between commits of the archive while transactions arrive (the most a whole-
    /// cluster loss can lose, besides the archiver's own delay). 5 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 300))]
    pub flush_every_seconds: Option<i32>,
}

/// A named place backups are written to. Exactly one of `s3`, `pvc` or `nfs` is set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.s3) ? 1 : 0) + (has(self.pvc) ? 1 : 0) + (has(self.nfs) ? 1 : 0) == 1"
)
.message("exactly one of s3, pvc or nfs must be set in a backup storage"))]
pub struct BackupStorage {
    /// Name that schedules and MySQLBackup objects use to refer to this storage.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// An S3 or S3-compatible bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Storage>,
    /// A PersistentVolumeClaim in the cluster's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcStorage>,
    /// A directory exported by an NFS server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<NfsStorage>,
}

/// An S3 or S3-compatible bucket.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct S3Storage {
    /// Name of the bucket.
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Key prefix under which the backups of this cluster are stored, such as `prod/orders`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub prefix: Option<String>,
    /// Endpoint URL of an S3-compatible service; AWS S3 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("isURL(self) && (url(self).getScheme() == 'https' || url(self).getScheme() == 'http')")
        .message("endpoint must be an http or https URL"))]
    pub endpoint: Option<String>,
    /// Region of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,
    /// Addresses the bucket as `endpoint/bucket` instead of `bucket.endpoint` (needed by most
    /// S3-compatible services).
    #[serde(default)]
    pub force_path_style: bool,
    /// Secret with the keys `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and optionally
    /// `AWS_SESSION_TOKEN`). The pod's ambient credentials are used when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<LocalObjectReference>,
}

/// A PersistentVolumeClaim in the cluster's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PvcStorage {
    /// Name of the PersistentVolumeClaim.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// Directory inside the volume, relative to its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.split('/').exists(p, p == '..')")
        .message("subPath must be a relative path without '..'"))]
    pub sub_path: Option<String>,
}

/// A directory exported by an NFS server.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NfsStorage {
    /// Host name or IP address of the NFS server.
    #[schemars(length(min = 1, max = 253))]
    pub server: String,
    /// Exported directory, an absolute path.
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("nfs path must be absolute"))]
    pub path: String,
}

/// Client-side encryption of backup data.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupEncryption {
    /// Secret key holding the 32-byte master key, base64 encoded (`openssl rand -base64 32`),
    /// that wraps each backup's data key. Losing it makes the backups unreadable.
    pub key_secret_ref: SecretKeyReference,
}

/// A backup taken on a schedule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSchedule {
    /// Name of the schedule, unique within the cluster; part of the names of its backups.
    #[schemars(
        length(min = 1, max = 40),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// When to take a backup, in cron syntax (`minute hour day-of-month month day-of-week`,
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
    /// Backup method: `physical` (default) or `logical`.
    #[serde(default)]
    pub method: BackupMethod,
    /// Name of the entry of `backup.storages` the backups are written to.
    #[schemars(length(min = 1, max = 63))]
    pub storage: String,
    /// Which backups of this schedule are kept; all are kept when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionPolicy>,
    /// Stops taking new backups while true; existing backups are kept.
    #[serde(default)]
    pub suspend: bool,
    /// How late, in seconds, a backup may still start after its scheduled time (for instance
    /// after the operator was down); later runs are skipped and reported. 600 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub starting_deadline_seconds: Option<i64>,
    /// How many failed backups of this schedule are kept for inspection; older failed ones are
    /// deleted. Failed backups never count towards `retention`.
    #[serde(default = "default_failed_history_limit")]
    #[schemars(range(min = 0, max = 100))]
    pub failed_backups_history_limit: i32,
}

fn default_failed_history_limit() -> i32 {
    3
}

/// Which backups of a schedule are kept. A backup is kept when any rule keeps it; the others
/// are deleted (as their deletion policy says).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "has(self.keepLast) || has(self.keepHourly) || has(self.keepDaily) || has(self.keepWeekly) || has(self.keepMonthly) || has(self.keepYearly) || has(self.keepWithin)"
)
.message("retention must set at least one keep rule"))]
pub struct RetentionPolicy {
    /// Keeps the latest N successful backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("keepLast must be zero or positive"))]
    pub keep_last: Option<i32>,
    /// Keeps the latest backup of each of the last N hours that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("keepHourly must be zero or positive"))]
    pub keep_hourly: Option<i32>,
    /// Keeps the latest backup of each of the last N days that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("keepDaily must be zero or positive"))]
    pub keep_daily: Option<i32>,
    /// Keeps the latest backup of each of the last N weeks that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("keepWeekly must be zero or positive"))]
    pub keep_weekly: Option<i32>,
    /// Keeps the latest backup of each of the last N months that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("keepMonthly must be zero or positive"))]
    pub keep_monthly: Option<i32>,
    /// Keeps the latest backup of each of the last N years that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("keepYearly must be zero or positive"))]
    pub keep_yearly: Option<i32>,
    /// Keeps every backup younger than this duration, written as years, months, days and
    /// hours, such as `1y6m`, `14d` or `36h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 32),
        regex(pattern = r"^([0-9]+y)?([0-9]+m)?([0-9]+d)?([0-9]+h)?$")
    )]
    pub keep_within: Option<String>,
}
