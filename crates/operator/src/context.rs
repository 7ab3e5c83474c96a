//! What every reconcile shares: the client, the operator's configuration, metrics and the event
//! recorder; and the readiness the controllers report into.

use std::sync::Arc;

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::http::{Readiness, API_STALE_AFTER};
use crate::images::BackupImages;
use crate::leases::Leases;
use crate::members::{AgentMembers, Members};
use crate::metrics::Metrics;

/// Images and settings given to the operator at start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Images with `mysql-backup`, `bulwark-agent` and the backup tools, by engine series:
    /// backup and deletion Jobs, init, restore and agent containers.
    pub backup_images: BackupImages,
    /// Image of the Prometheus mysqld exporter sidecar.
    pub exporter_image: String,
    /// The server images a cluster's `spec.image` may name.
    pub server_images: crate::server_images::ServerImages,
    /// Namespaces to watch; empty: all of them.
    pub namespaces: Vec<String>,
}

/// Shared state of the controllers.
pub struct Context {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// What `/readyz` answers: the controllers and the API server check report into it.
    pub readiness: Arc<Readiness>,
    /// How the members' agents are reached (over the pod network but in controller tests).
    pub members: Arc<dyn Members>,
    /// The primaries' leases, renewed by [`Leases::run`].
    pub leases: Arc<Leases>,
    recorder: Recorder,
    /// Consecutive failed reconciles per controller and object, for backoff.
    failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

impl Context {
    /// A context whose events are reported as `mysql-operator` (instance: the pod name, if known).
    pub fn new(client: Client, config: Config, metrics: Arc<Metrics>) -> Arc<Self> {
        Self::with_members(client, config, metrics, Arc::new(AgentMembers))
    }

    /// A context that reaches the members' agents through `members`.
    pub fn with_members(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        members: Arc<dyn Members>,
    ) -> Arc<Self> {
        Self::with_leases(client, config, metrics, members, Leases::default())
    }

    /// [`Context::with_members`] keeping the primaries' leases in `leases`.
    pub fn with_leases(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        members: Arc<dyn Members>,
        leases: Leases,
    ) -> Arc<Self> {
        let reporter = Reporter {
            controller: "mysql-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            metrics,
            readiness: Arc::new(Readiness::new(API_STALE_AFTER)),
            members,
            leases: Arc::new(leases),
            failures: Default::default(),
        })
    }

    /// Counts a failed reconcile of `key`; returns the consecutive failures so far.
    pub fn count_failure(&self, key: &str) -> u32 {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn reset_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Publishes an event about `obj`; failures are logged, never fatal.
    pub async fn event<K>(&self, obj: &K, reason: Reason, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        let ev = Event {
            type_: reason.event_type(),
            reason: reason.as_str().into(),
            note: Some(truncate(note.into(), 1000)),
            action: reason.action().into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(reason = reason.as_str(), error = %crate::error::chain(&e), "failed to publish event");
        }
    }
}

/// Every event reason the operator emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The spec cannot be acted on.
    InvalidSpec,
    /// All instances became ready.
    ClusterReady,
    /// Instances stopped being ready.
    ClusterNotReady,
    /// A spec that was invalid became valid.
    SpecValid,
    /// The `BackupHealthy` condition turned True.
    BackupsHealthy,
    /// The `BackupHealthy` condition turned False.
    BackupsUnhealthy,
    /// A backup Job was created.
    BackupStarted,
    BackupSucceeded,
    BackupFailed,
    /// A schedule created a backup.
    BackupScheduled,
    /// A schedule's run was skipped (a backup still running, or too late to start).
    ScheduleSkipped,
    /// Retention deleted a backup.
    BackupPruned,
    /// A backup's remote data was deleted.
    BackupDataDeleted,
    /// Deleting a backup's remote data failed; it is retried.
    BackupDataDeleteFailed,
    /// A reconcile failed; retried with backoff.
    ReconcileFailed,
    /// The primary was lost and a replica is being promoted.
    Failover,
    /// The primary is lost and no replica is promoted yet (the reason says why).
    PrimaryLost,
    /// A requested switchover started or completed.
    Switchover,
    /// A switchover request was refused (the message says why).
    SwitchoverRefused,
    /// A running switchover was given up; the old primary takes writes again.
    SwitchoverAborted,
    /// A member's replication stopped on an error (an old primary with transactions the
    /// primary lacks among them).
    ReplicationBroken,
    /// A member was restarted to run the current spec (a rolling change).
    RollingRestart,
    /// The binlog archive has a new gap (binary logs purged before they were archived).
    BinlogArchiveGap,
    /// The binlog archive follows a new timeline that leaves archived transactions behind.
    BinlogArchiveBranched,
    /// Pods carry the cluster's labels without being its StatefulSet's; they are ignored.
    ForeignPods,
    /// A restore drill of a backup started.
    DrillStarted,
    /// A restore drill proved a backup restorable.
    DrillSucceeded,
    /// A restore drill found a backup unusable, or could not run.
    DrillFailed,
}

impl Reason {
    /// The reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::ClusterReady => "ClusterReady",
            Reason::ClusterNotReady => "ClusterNotReady",
            Reason::Failover => "Failover",
            Reason::PrimaryLost => "PrimaryLost",
            Reason::Switchover => "Switchover",
            Reason::SwitchoverRefused => "SwitchoverRefused",
            Reason::SwitchoverAborted => "SwitchoverAborted",
            Reason::ReplicationBroken => "ReplicationBroken",
            Reason::RollingRestart => "RollingRestart",
            Reason::BinlogArchiveGap => "BinlogArchiveGap",
            Reason::BinlogArchiveBranched => "BinlogArchiveBranched",
            Reason::ForeignPods => "ForeignPods",
            Reason::SpecValid => "SpecValid",
            Reason::BackupsHealthy => "BackupsHealthy",
            Reason::BackupsUnhealthy => "BackupsUnhealthy",
            Reason::BackupStarted => "BackupStarted",
            Reason::BackupSucceeded => "BackupSucceeded",
            Reason::BackupFailed => "BackupFailed",
            Reason::BackupScheduled => "BackupScheduled",
            Reason::ScheduleSkipped => "ScheduleSkipped",
            Reason::BackupPruned => "BackupPruned",
            Reason::BackupDataDeleted => "BackupDataDeleted",
            Reason::BackupDataDeleteFailed => "BackupDataDeleteFailed",
            Reason::ReconcileFailed => "ReconcileFailed",
            Reason::DrillStarted => "DrillStarted",
            Reason::DrillSucceeded => "DrillSucceeded",
            Reason::DrillFailed => "DrillFailed",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Reason::InvalidSpec
            | Reason::ClusterNotReady
            | Reason::BackupFailed
            | Reason::ScheduleSkipped
            | Reason::BackupDataDeleteFailed
            | Reason::BackupsUnhealthy
            | Reason::ReconcileFailed
            | Reason::BinlogArchiveGap
            | Reason::BinlogArchiveBranched
            | Reason::Failover
            | Reason::PrimaryLost
            | Reason::SwitchoverRefused
            | Reason::SwitchoverAborted
            | Reason::ReplicationBroken
            | Reason::ForeignPods
            | Reason::DrillFailed => EventType::Warning,
            _ => EventType::Normal,
        }
    }

    fn action(self) -> &'static str {
        match self {
            Reason::InvalidSpec | Reason::SpecValid | Reason::ReconcileFailed => "Reconcile",
            Reason::ClusterReady
            | Reason::ClusterNotReady
            | Reason::ReplicationBroken
            | Reason::ForeignPods => "Observe",
            Reason::BackupsHealthy | Reason::BackupsUnhealthy => "Backup",
            Reason::BackupStarted | Reason::BackupSucceeded | Reason::BackupFailed => "Backup",
            Reason::BackupScheduled | Reason::ScheduleSkipped => "Schedule",
            Reason::BackupPruned => "Retention",
            Reason::BackupDataDeleted | Reason::BackupDataDeleteFailed => "DeleteData",
            Reason::Failover | Reason::PrimaryLost => "Failover",
            Reason::Switchover | Reason::SwitchoverRefused | Reason::SwitchoverAborted => {
                "Switchover"
            }
            Reason::RollingRestart => "Rollout",
            Reason::BinlogArchiveGap | Reason::BinlogArchiveBranched => "Archive",
            Reason::DrillStarted | Reason::DrillSucceeded | Reason::DrillFailed => "Drill",
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
