//! The cluster controller's part of the cluster's status, built whole as one typed value in
//! every pass. Server-side apply removes every field a manager leaves out of its apply, so each
//! field this writer owns is set here, from the pass or carried from the status read: the
//! constructions name every field of the status (no `..Default`), so a field added to the API
//! type must be given a source here before the operator compiles. The scheduler owns
//! `schedules`, `lastSuccessfulBackup` and the `BackupHealthy` condition (`schedule`).

use bulwark_api::cluster::{BinlogArchiveStatus, FailoverRecord, MySQLClusterStatus};
use bulwark_api::common::condition;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::archive;
use super::plan::{Plan, Transition};

/// The condition types this writer owns.
pub const CONDITIONS: [&str; 5] = [
    condition::READY,
    condition::PROGRESSING,
    condition::DEGRADED,
    condition::WRITES_PROTECTED,
    archive::CONDITION,
];

/// What a pass of a valid cluster observed, besides the plan.
#[derive(Debug, Clone)]
pub struct Observed {
    /// This writer's conditions, stamped.
    pub conditions: Vec<Condition>,
    pub generation: Option<i64>,
    /// Members ready.
    pub ready: i32,
    /// The primary takes writes and serves (it is ready, and not being replaced).
    pub primary_ready: bool,
    /// The archiver's report; `None` keeps the last one shown (the condition says why), and
    /// the field goes when the spec no longer archives.
    pub binlog_archive: Option<BinlogArchiveStatus>,
    /// The spec asks for a binlog archive.
    pub archiving: bool,
    pub now: DateTime<Utc>,
}

/// This writer's status after a pass of a valid cluster.
pub fn of_pass(previous: &MySQLClusterStatus, plan: &Plan, o: Observed) -> MySQLClusterStatus {
    let last_failover = match &plan.transition {
        Transition::Failover {
            from,
            to,
            reason,
            request,
            ..
        } => Some(FailoverRecord {
            from: from.clone(),
            to: to.clone(),
            time: Time(o.now),
            reason: reason.clone(),
            request: request.clone(),
            epoch: Some(i64::try_from(plan.epoch).unwrap_or(i64::MAX)),
        }),
        _ => previous.last_failover.clone(),
    };
    MySQLClusterStatus {
        conditions: o.conditions,
        observed_generation: o.generation,
        ready_replicas: Some(o.ready),
        current_primary: Some(plan.primary.clone()),
        // Set once, when a primary is first ready, and carried in every later write.
        primary_since: previous
            .primary_since
            .clone()
            .or_else(|| o.primary_ready.then_some(Time(o.now))),
        primary_lost_since: plan.lost_since.clone(),
        last_failover,
        last_switchover: plan
            .switchover_record()
            .cloned()
            .or_else(|| previous.last_switchover.clone()),
        epoch: Some(i64::try_from(plan.epoch).unwrap_or(i64::MAX)),
        binlog_archive: if o.archiving {
            o.binlog_archive.or_else(|| previous.binlog_archive.clone())
        } else {
            None
        },
        // The scheduler's.
        last_successful_backup: None,
        schedules: Vec::new(),
        drills: None,
    }
}

/// This writer's status while the spec is invalid: the new conditions, and everything else it
/// owns as the last pass recorded it (its other conditions included).
pub fn carried(
    previous: &MySQLClusterStatus,
    conditions: Vec<Condition>,
    generation: Option<i64>,
) -> MySQLClusterStatus {
    let MySQLClusterStatus {
        conditions: previous_conditions,
        observed_generation: _,
        ready_replicas,
        current_primary,
        primary_since,
        primary_lost_since,
        last_failover,
        last_switchover,
        epoch,
        binlog_archive,
        last_successful_backup: _,
        schedules: _,
        drills: _,
    } = previous.clone();
    let kept = previous_conditions.into_iter().filter(|c| {
        CONDITIONS.contains(&c.type_.as_str()) && !conditions.iter().any(|n| n.type_ == c.type_)
    });
    let conditions = conditions.iter().cloned().chain(kept).collect();
    MySQLClusterStatus {
        conditions,
        observed_generation: generation,
        ready_replicas,
        current_primary,
        primary_since,
        primary_lost_since,
        last_failover,
        last_switchover,
        epoch,
        binlog_archive,
        last_successful_backup: None,
        schedules: Vec::new(),
        drills: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::Hold;
    use bulwark_api::cluster::{BackupRecord, DrillsStatus, ScheduleStatus, SwitchoverRecord};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn cond(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "Sample".into(),
            message: String::new(),
            last_transition_time: at("2026-11-01T00:00:00Z"),
            observed_generation: Some(3),
        }
    }

    /// A status with every field set, as a cluster that has run a while has it.
    fn lived_in() -> MySQLClusterStatus {
        MySQLClusterStatus {
            conditions: vec![
                cond(condition::READY, "True"),
                cond(condition::PROGRESSING, "False"),
                cond(condition::DEGRADED, "False"),
                cond(condition::BACKUP_HEALTHY, "True"),
                cond(archive::CONDITION, "True"),
            ],
            observed_generation: Some(3),
            ready_replicas: Some(3),
            current_primary: Some("quay-1".into()),
            primary_since: Some(at("2026-11-01T00:00:00Z")),
            primary_lost_since: Some(MicroTime(at("2026-11-02T00:00:00Z").0)),
            last_failover: Some(FailoverRecord {
                from: "quay-0".into(),
                to: "quay-1".into(),
                time: at("2026-11-01T12:00:00Z"),
                reason: "lost".into(),
                request: None,
                epoch: Some(4),
            }),
            last_switchover: Some(SwitchoverRecord {
                request: "quay-1@1".into(),
                from: "quay-0".into(),
                to: "quay-1".into(),
                started: at("2026-11-01T12:00:00Z"),
                finished: Some(at("2026-11-01T12:00:01Z")),
                result: Some("Completed".into()),
                message: Some("done".into()),
            }),
            epoch: Some(7),
            last_successful_backup: Some(BackupRecord {
                name: "quay-nightly-1".into(),
                backup_id: None,
                completion_time: None,
            }),
            schedules: vec![ScheduleStatus {
                name: "nightly".into(),
                since: None,
                last_schedule_time: None,
                next_schedule_time: None,
                last_successful_backup: None,
            }],
            binlog_archive: Some(BinlogArchiveStatus {
                through: "0-1-9".into(),
                ..BinlogArchiveStatus::default()
            }),
            drills: Some(DrillsStatus {
                running: Some("quay-nightly-1".into()),
                ..DrillsStatus::default()
            }),
        }
    }

    /// The JSON keys a status sets.
    fn keys(s: &MySQLClusterStatus) -> Vec<String> {
        let value = serde_json::to_value(s).unwrap();
        let mut keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }

    const OWNED: [&str; 10] = [
        "binlogArchive",
        "conditions",
        "currentPrimary",
        "epoch",
        "lastFailover",
        "lastSwitchover",
        "observedGeneration",
        "primaryLostSince",
        "primarySince",
        "readyReplicas",
    ];

    #[test]
    fn an_invalid_spec_carries_every_field_this_writer_owns() {
        let previous = lived_in();
        let degraded = cond(condition::DEGRADED, "True");
        let carried = carried(&previous, vec![degraded.clone()], Some(4));
        assert_eq!(
            keys(&carried),
            OWNED,
            "the scheduler's fields are not this writer's"
        );
        assert_eq!(carried.epoch, Some(7));
        assert_eq!(carried.last_switchover, previous.last_switchover);
        assert_eq!(carried.binlog_archive, previous.binlog_archive);
        assert_eq!(carried.observed_generation, Some(4));
        let types: Vec<_> = carried
            .conditions
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            [
                condition::DEGRADED,
                condition::READY,
                condition::PROGRESSING,
                archive::CONDITION
            ],
            "the scheduler's condition is left to it"
        );
        assert_eq!(carried.conditions[0], degraded);
    }

    fn hold(primary: &str, epoch: u64) -> Plan {
        Plan {
            primary: primary.into(),
            epoch,
            lost_since: None,
            transition: Transition::Hold(Hold::default()),
        }
    }

    fn observed(archiving: bool, report: Option<BinlogArchiveStatus>) -> Observed {
        Observed {
            conditions: vec![cond(condition::READY, "True")],
            generation: Some(4),
            ready: 2,
            primary_ready: true,
            binlog_archive: report,
            archiving,
            now: "2026-11-25T00:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_pass_writes_every_field_this_writer_owns() {
        let previous = lived_in();
        let s = of_pass(&previous, &hold("quay-1", 7), observed(true, None));
        let mut owned = OWNED.to_vec();
        owned.retain(|k| *k != "primaryLostSince");
        assert_eq!(keys(&s), owned, "the primary is no longer lost");
        assert_eq!(
            s.binlog_archive, previous.binlog_archive,
            "an unreadable report keeps the last one"
        );
        assert_eq!(s.primary_since, previous.primary_since, "set once");
        assert_eq!(s.last_switchover, previous.last_switchover);
        assert_eq!(s.last_failover, previous.last_failover);
        let fresh = BinlogArchiveStatus {
            through: "0-1-12".into(),
            ..BinlogArchiveStatus::default()
        };
        let s = of_pass(
            &previous,
            &hold("quay-1", 7),
            observed(true, Some(fresh.clone())),
        );
        assert_eq!(s.binlog_archive, Some(fresh), "a fresh report is shown");
        let s = of_pass(&previous, &hold("quay-1", 7), observed(false, None));
        assert_eq!(s.binlog_archive, None, "the archive went from the spec");
    }

    #[test]
    fn a_failover_is_recorded_with_the_new_primary_and_epoch() {
        let mut plan = hold("quay-2", 8);
        plan.transition = Transition::Failover {
            from: "quay-1".into(),
            to: "quay-2".into(),
            reason: "quay-1 does not report".into(),
            request: None,
            abandoned: None,
        };
        let previous = lived_in();
        let mut failing_over = observed(false, None);
        // A primary being replaced does not serve yet.
        failing_over.primary_ready = false;
        let s = of_pass(&previous, &plan, failing_over.clone());
        assert_eq!(s.epoch, Some(8));
        assert_eq!(s.current_primary.as_deref(), Some("quay-2"));
        assert_eq!(s.primary_lost_since, None, "no longer lost: replaced");
        let f = s.last_failover.unwrap();
        assert_eq!(
            (f.from.as_str(), f.to.as_str(), f.time),
            ("quay-1", "quay-2", Time(failing_over.now))
        );
        assert_eq!(s.primary_since, previous.primary_since, "set once");
        assert_eq!(
            s.last_switchover, previous.last_switchover,
            "no switchover ran"
        );
        let abandoned = SwitchoverRecord {
            result: Some("Aborted".into()),
            ..previous.last_switchover.clone().unwrap()
        };
        plan.transition = Transition::Failover {
            from: "quay-1".into(),
            to: "quay-2".into(),
            reason: "quay-1 does not report".into(),
            request: None,
            abandoned: Some(abandoned.clone()),
        };
        let s = of_pass(&previous, &plan, failing_over);
        assert_eq!(
            s.last_switchover,
            Some(abandoned),
            "the abandoned one is recorded"
        );

        let new_cluster = of_pass(
            &MySQLClusterStatus::default(),
            &hold("quay-0", 0),
            observed(false, None),
        );
        assert_eq!(
            new_cluster.primary_since,
            Some(Time("2026-11-25T00:00:00Z".parse().unwrap())),
            "a primary ready for the first time"
        );
    }
}
