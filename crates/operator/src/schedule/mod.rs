//! The backup scheduler: creates MySQLBackup objects on each schedule's cron, applies retention
//! to each schedule's backups and reports schedule state and backup health in the cluster status.

pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bulwark_api::cluster::{
    BackupRecord, BackupSchedule, DrillsStatus, MySQLClusterStatus, ScheduleStatus,
};
use bulwark_api::{BackupPhase, LocalObjectReference, MySQLBackup, MySQLBackupSpec, MySQLCluster};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::apply::{self, SCHEDULER_MANAGER};
use crate::conditions;
use crate::context::{Context, Reason};
use crate::error::{is_conflict, Error, Result};
use crate::names::{self, component};
use plan::{BackupView, CronSchedule, Fire};

/// Reconciles the schedules of one MySQLCluster.
pub async fn reconcile(cluster: Arc<MySQLCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    if cluster.meta().deletion_timestamp.is_some() {
        ctx.metrics.forget_cluster(&ns, &name);
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let created = cluster
        .meta()
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let api: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let all_backups = apply::backups_of(&ctx.client, &ns, &name).await?;
    let mut backups = all_backups.clone();
    backups.retain(|b| b.meta().deletion_timestamp.is_none());
    // Backups created or deleted by this pass: its list is stale for the drills.
    let mut changed_backups = false;
    let zones: BTreeMap<String, chrono_tz::Tz> = cluster
        .spec
        .backup
        .iter()
        .flat_map(|b| &b.schedules)
        .filter_map(|sc| {
            Some((
                sc.name.clone(),
                sc.time_zone.as_deref().unwrap_or("UTC").parse().ok()?,
            ))
        })
        .collect();
    let views: Vec<BackupView> = backups.iter().map(|b| view(b, &zones)).collect();
    // The binlog archiver's report, as the cluster controller copied it into the status.
    let window_base = cluster
        .status
        .as_ref()
        .and_then(|s| s.binlog_archive.as_ref())
        .and_then(|a| a.window_base_backup.as_deref());

    let schedules: Vec<BackupSchedule> = cluster
        .spec
        .backup
        .as_ref()
        .map(|b| b.schedules.clone())
        .unwrap_or_default();
    let previous: BTreeMap<String, ScheduleStatus> = cluster
        .status
        .as_ref()
        .map(|s| {
            s.schedules
                .iter()
                .map(|x| (x.name.clone(), x.clone()))
                .collect()
        })
        .unwrap_or_default();

    let mut parsed = Vec::new();
    let mut statuses = Vec::new();
    let mut wake = Duration::from_secs(300);
    for sc in &schedules {
        // An unparsable schedule is reported by the cluster controller's Degraded condition.
        let Ok(cron) = CronSchedule::parse(&sc.schedule, sc.time_zone.as_deref()) else {
            continue;
        };
        let mine: Vec<BackupView> = views
            .iter()
            .filter(|v| v.schedule.as_deref() == Some(sc.name.as_str()))
            .cloned()
            .collect();
        let busy = mine.iter().find(|v| v.is_active()).map(|v| v.name.clone());
        let prev = previous.get(&sc.name);
        let since = plan::schedule_since(prev, created, now);
        let mut last_fired = prev.and_then(|p| p.last_schedule_time.as_ref().map(|t| t.0));
        let decision = plan::decide(sc, &cron, last_fired, since, busy.is_some(), now);
        match decision.fire {
            Fire::Start(t) => {
                create_backup(&cluster, &ctx, &api, sc, t).await?;
                changed_backups = true;
                last_fired = Some(t);
            }
            Fire::SkipLate(t) => {
                ctx.event(
                    cluster.as_ref(),
                    Reason::ScheduleSkipped,
                    format!(
                        "schedule {}: the run for {} was skipped: its starting deadline passed",
                        sc.name,
                        rfc3339(t)
                    ),
                )
                .await;
                last_fired = Some(t);
            }
            Fire::SkipBusy(t) => {
                tracing::debug!(namespace = %ns, cluster = %name, schedule = %sc.name, due = %rfc3339(t), "previous backup still running; run deferred");
                // Retried when the running backup finishes (its status change wakes us).
            }
            Fire::Idle => {}
        }
        if let Some(next) = decision.next {
            let until = (next - now).to_std().unwrap_or_default();
            wake = wake.min(until + Duration::from_millis(50));
        }

        for (victim, why) in plan::retention(
            sc.retention.as_ref(),
            sc.failed_backups_history_limit,
            &mine,
            window_base,
        ) {
            apply::delete_opt(&api, &victim).await?;
            changed_backups = true;
            ctx.event(
                cluster.as_ref(),
                Reason::BackupPruned,
                format!("schedule {}: deleted backup {victim}: {why}", sc.name),
            )
            .await;
            tracing::info!(namespace = %ns, cluster = %name, schedule = %sc.name, backup = %victim, "backup pruned");
        }

        statuses.push(ScheduleStatus {
            name: sc.name.clone(),
            since: Some(Time(since)),
            last_schedule_time: last_fired.map(Time),
            next_schedule_time: decision.next.map(Time),
            last_successful_backup: last_success(&backups, Some(&sc.name)),
        });
        parsed.push((sc.clone(), cron, since));
    }

    let active: Vec<plan::ActiveSchedule> = parsed
        .iter()
        .map(|(schedule, cron, since)| plan::ActiveSchedule {
            schedule,
            cron,
            since: *since,
        })
        .collect();
    let health = plan::backup_health(&views, &active, now);
    let drills_scheduled = cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.drills.as_ref())
        .is_some_and(|d| !d.suspend);
    ctx.metrics.scheduled(
        &ns,
        &name,
        schedules.iter().filter(|s| !s.suspend).count(),
        drills_scheduled,
    );
    ctx.metrics.backups_healthy(
        &ns,
        &name,
        match health.status {
            conditions::Status::True => Some(true),
            conditions::Status::False => Some(false),
            conditions::Status::Unknown => None,
        },
    );
    let prev_conds = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let cond = conditions::stamp(&health, cluster.meta().generation, &prev_conds, &Time(now));
    let last = last_success(&backups, None);
    if let Some(b) = last
        .as_ref()
        .and_then(|l| backups.iter().find(|b| b.name_any() == l.name))
    {
        let st = b.status.clone().unwrap_or_default();
        if let (Some(start), Some(end)) = (st.start_time, st.completion_time) {
            let seconds = (end.0 - start.0).num_milliseconds() as f64 / 1000.0;
            let stored = st.stored_bytes.unwrap_or(0).max(0) as u64;
            ctx.metrics
                .backup_succeeded(&ns, &name, end.0, seconds, stored);
        }
    }
    if conditions::flipped(&health, &prev_conds) && health.status != conditions::Status::Unknown {
        let reason = if health.status == conditions::Status::True {
            Reason::BackupsHealthy
        } else {
            Reason::BackupsUnhealthy
        };
        ctx.event(cluster.as_ref(), reason, health.message.clone())
            .await;
    }
    let drills = crate::drill::pass(&cluster, &ctx, &all_backups, !changed_backups, now).await?;
    if let Some(w) = drills.wake {
        wake = wake.min(w);
    }
    let unchanged = cluster.status.as_ref().is_some_and(|s| {
        s.schedules == statuses
            && s.last_successful_backup == last
            && s.conditions.iter().any(|c| c == &cond)
            && s.drills == drills.status
    });
    if !unchanged {
        let status = owned_status(statuses, last, cond, drills.status);
        let clusters: Api<MySQLCluster> = Api::namespaced(ctx.client.clone(), &ns);
        apply::apply_status(&clusters, cluster.as_ref(), status, SCHEDULER_MANAGER).await?;
    }
    Ok(Action::requeue(wake.max(Duration::from_millis(200))))
}

/// The scheduler's whole part of the cluster's status, as one typed value: server-side apply
/// removes what a manager leaves out. Every field is named, so a field added to the status
/// must be given an owner here too; the rest is the cluster controller's (`cluster::status`).
fn owned_status(
    schedules: Vec<ScheduleStatus>,
    last_successful_backup: Option<BackupRecord>,
    backup_health: Condition,
    drills: Option<DrillsStatus>,
) -> MySQLClusterStatus {
    MySQLClusterStatus {
        conditions: vec![backup_health],
        schedules,
        last_successful_backup,
        drills,
        observed_generation: None,
        ready_replicas: None,
        current_primary: None,
        primary_since: None,
        primary_lost_since: None,
        last_failover: None,
        last_switchover: None,
        epoch: None,
        binlog_archive: None,
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A backup as the pure planning functions see it. A scheduled backup counts at its scheduled
/// time, as wall-clock time in the schedule's zone, so that "daily" means the schedule's days
/// however long each backup took.
fn view(b: &MySQLBackup, zones: &BTreeMap<String, chrono_tz::Tz>) -> BackupView {
    let status = b.status.clone().unwrap_or_default();
    let created = b
        .meta()
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(Utc::now);
    let schedule = b.labels().get(names::SCHEDULE_LABEL).cloned();
    let scheduled = b
        .annotations()
        .get(names::SCHEDULED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    let time = match (scheduled, schedule.as_ref().and_then(|s| zones.get(s))) {
        (Some(t), Some(tz)) => t.with_timezone(tz).naive_local().and_utc(),
        (Some(t), None) => t,
        (None, _) => status.completion_time.map(|t| t.0).unwrap_or(created),
    };
    BackupView {
        name: b.name_any(),
        schedule,
        phase: status.phase,
        time,
        backup_id: status.backup_id,
    }
}

/// The latest Succeeded backup, of one schedule or of any.
fn last_success(backups: &[MySQLBackup], schedule: Option<&str>) -> Option<BackupRecord> {
    backups
        .iter()
        .filter(|b| {
            schedule.is_none_or(|s| {
                b.labels().get(names::SCHEDULE_LABEL).map(String::as_str) == Some(s)
            })
        })
        .filter_map(|b| {
            let st = b.status.as_ref()?;
            (st.phase == Some(BackupPhase::Succeeded)).then(|| (st.completion_time.clone(), b))
        })
        .max_by(|(ta, a), (tb, b)| {
            ta.as_ref()
                .map(|t| t.0)
                .cmp(&tb.as_ref().map(|t| t.0))
                .then_with(|| a.name_any().cmp(&b.name_any()))
        })
        .map(|(t, b)| BackupRecord {
            name: b.name_any(),
            backup_id: b.status.as_ref().and_then(|s| s.backup_id.clone()),
            completion_time: t,
        })
}

/// Name of the backup a schedule creates for a fire time; the same time always gives the same
/// name, so a repeated reconcile cannot create a second backup for one run.
pub fn scheduled_backup_name(cluster: &str, schedule: &str, at: DateTime<Utc>) -> String {
    format!("{cluster}-{schedule}-{}", at.format("%Y%m%d%H%M%S"))
}

async fn create_backup(
    cluster: &MySQLCluster,
    ctx: &Context,
    api: &Api<MySQLBackup>,
    sc: &BackupSchedule,
    at: DateTime<Utc>,
) -> Result<()> {
    let cluster_name = cluster.name_any();
    let name = scheduled_backup_name(&cluster_name, &sc.name, at);
    let mut labels = names::labels(&cluster_name, component::BACKUP);
    labels.insert(names::SCHEDULE_LABEL.to_owned(), sc.name.clone());
    let backup = MySQLBackup {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: cluster.namespace(),
            labels: Some(labels),
            annotations: Some([(names::SCHEDULED_AT_ANNOTATION.to_owned(), rfc3339(at))].into()),
            ..ObjectMeta::default()
        },
        spec: MySQLBackupSpec {
            cluster_ref: LocalObjectReference {
                name: cluster_name.clone(),
            },
            method: sc.method,
            storage: sc.storage.clone(),
            deletion_policy: None,
        },
        status: None,
    };
    let pp = PostParams {
        field_manager: Some(SCHEDULER_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.create(&pp, &backup).await {
        Ok(_) => {
            ctx.event(
                cluster,
                Reason::BackupScheduled,
                format!(
                    "schedule {}: created backup {name} for {}",
                    sc.name,
                    rfc3339(at)
                ),
            )
            .await;
            tracing::info!(namespace = ?cluster.namespace(), cluster = %cluster_name, schedule = %sc.name, backup = %name, "scheduled backup created");
            Ok(())
        }
        Err(e) if is_conflict(&e) => {
            // Created by an earlier pass for this run, or a name clash with another cluster's
            // backup (`a-b` + `c` and `a` + `b-c` give the same name): only the former is fine.
            let existing = apply::get_opt(api, &name).await?;
            let ours = existing.as_ref().is_some_and(|b| {
                b.spec.cluster_ref.name == cluster_name
                    && b.labels().get(names::SCHEDULE_LABEL) == Some(&sc.name)
            });
            if !ours {
                ctx.event(
                    cluster,
                    Reason::ScheduleSkipped,
                    format!("schedule {}: the run for {} was skipped: mysqlbackup {name} already exists and belongs to something else", sc.name, rfc3339(at)),
                )
                .await;
            }
            Ok(())
        }
        Err(source) => Err(Error::Create {
            kind: "MySQLBackup",
            name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_names_are_stable_per_fire_time() {
        let t = DateTime::parse_from_rfc3339("2026-11-22T03:15:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            scheduled_backup_name("orders", "hourly", t),
            "orders-hourly-20261122031500"
        );
    }

    #[test]
    fn the_scheduler_writes_its_own_fields_and_no_other() {
        let health = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: bulwark_api::common::condition::BACKUP_HEALTHY.into(),
            status: "True".into(),
            reason: "Recent".into(),
            message: String::new(),
            last_transition_time: Time("2026-11-25T00:00:00Z".parse().unwrap()),
            observed_generation: None,
        };
        let status = owned_status(Vec::new(), None, health, None);
        let value = serde_json::to_value(&status).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["conditions"],
            "none of the cluster controller's fields: {value}"
        );
        assert_eq!(value["conditions"][0]["type"], "BackupHealthy");
    }
}
