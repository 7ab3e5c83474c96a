//! Restore drills, run by the scheduler's pass over a cluster: each finished drill Job is
//! recorded in its backup's `status.lastDrill` (with an event and metrics), and when the drill
//! schedule is due (or a user asked) the next backup is drilled, one at a time per cluster and
//! never beside a backup of the cluster. What the pass found becomes the cluster's
//! `status.drills`.

pub mod job;
pub mod outcome;
pub mod plan;

use std::collections::BTreeMap;
use std::time::Duration;

use bulwark_api::cluster::{DrillPhase, DrillRecord, DrillSummary, DrillsStatus};
use bulwark_api::{BackupPhase, MySQLBackup, MySQLCluster};
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use crate::apply::{self, DRILL_MANAGER};
use crate::backup::outcome::stuck_before_start;
use crate::context::{Context, Reason};
use crate::error::Result;
use crate::names;
use crate::schedule::plan::CronSchedule;
use crate::storage;
use outcome::DrillOutcome;
use plan::{Choice, DrillView, Pick};

/// How long a drill pod may stay unstarted (no node with room for its scratch space, an image
/// that cannot be pulled) before the drill fails.
const START_DEADLINE: chrono::Duration = chrono::Duration::minutes(10);
/// How often a running drill is looked at (its Job's changes also wake the scheduler).
const RUNNING_POLL: Duration = Duration::from_secs(10);

/// What the drills' part of a pass leaves: the cluster's drill status (none when drills are
/// off and none ever ran) and when to look again.
pub struct Pass {
    pub status: Option<DrillsStatus>,
    pub wake: Option<Duration>,
}

/// Runs the drills' part of a scheduler pass over `cluster`, whose backups (not being deleted)
/// are `backups`.
pub async fn pass(
    cluster: &MySQLCluster,
    ctx: &Context,
    backups: &[MySQLBackup],
    now: DateTime<Utc>,
) -> Result<Pass> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let spec = cluster.spec.backup.as_ref().and_then(|b| b.drills.as_ref());
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let jobs = apply::list(
        &jobs_api,
        &names::selector_string(&job::drill_labels(&name)),
    )
    .await?;
    // Each backup's latest record, as this pass leaves it.
    let mut records: BTreeMap<String, Option<DrillRecord>> = backups
        .iter()
        .map(|b| {
            (
                b.name_any(),
                b.status.as_ref().and_then(|s| s.last_drill.clone()),
            )
        })
        .collect();

    let mut running = None;
    let mut finished_jobs = Vec::new();
    for j in &jobs {
        // Only Jobs a backup of this cluster controls: a Job given the labels is no drill.
        let Some(backup) = backups.iter().find(|b| crate::ownership::controls(*b, j)) else {
            continue;
        };
        let job_name = j.name_any();
        let pod = job_pod(ctx, &ns, j).await?;
        let mut result = outcome::drill_outcome(j, pod.as_ref());
        if result == DrillOutcome::Running {
            if let Some(why) = pod
                .as_ref()
                .and_then(|p| stuck_before_start(p, now, START_DEADLINE))
            {
                apply::delete_opt(&jobs_api, &job_name).await?;
                result = DrillOutcome::Failed {
                    message: format!(
                        "the drill pod did not start within {} minutes: {why}",
                        START_DEADLINE.num_minutes()
                    ),
                    finished: Some(now),
                };
            }
        }
        let record = records.get(&backup.name_any()).cloned().flatten();
        let ours = record.as_ref().filter(|r| r.job == job_name);
        match result {
            DrillOutcome::Running => {
                running = Some(backup.name_any());
                if ours.is_none() {
                    // Started by a pass that did not live to record it.
                    let start = outcome::started(&job_name, None, job_created(j).unwrap_or(now));
                    record_drill(ctx, &ns, backup, &start).await?;
                    records.insert(backup.name_any(), Some(start));
                }
            }
            finished => {
                finished_jobs.push(j);
                let recorded = ours.is_some_and(|r| r.result != DrillPhase::Running);
                // A record of a later drill is never replaced by an older Job's.
                let newer_recorded = record.as_ref().is_some_and(|r| {
                    r.job != job_name && r.start_time.as_ref().map(|t| t.0) > job_created(j)
                });
                if recorded || newer_recorded {
                    continue;
                }
                let start = ours.cloned().unwrap_or_else(|| {
                    outcome::started(&job_name, None, job_created(j).unwrap_or(now))
                });
                let done = outcome::finished(&start, &finished, now);
                record_drill(ctx, &ns, backup, &done).await?;
                announce(ctx, &ns, &name, backup, &done).await;
                records.insert(backup.name_any(), Some(done));
            }
        }
    }
    // A drill recorded as running whose Job is gone (deleted by hand) never reports.
    for b in backups {
        let Some(Some(r)) = records.get(&b.name_any()).cloned() else {
            continue;
        };
        if r.result == DrillPhase::Running && !jobs.iter().any(|j| j.name_any() == r.job) {
            let done = outcome::finished(
                &r,
                &DrillOutcome::Failed {
                    message: format!("the drill job {} is gone without a result", r.job),
                    finished: Some(now),
                },
                now,
            );
            record_drill(ctx, &ns, b, &done).await?;
            announce(ctx, &ns, &name, b, &done).await;
            records.insert(b.name_any(), Some(done));
        }
    }
    forget_old_jobs(&jobs_api, finished_jobs).await?;

    let views = views_of(backups, &records);
    let again_after = spec
        .and_then(|s| s.every_backup_within.as_deref())
        .and_then(|w| bulwark_retention::parse_duration(w).ok());
    let cron = spec.and_then(|s| CronSchedule::parse(&s.schedule, s.time_zone.as_deref()).ok());
    let previous = cluster.status.as_ref().and_then(|s| s.drills.clone());
    let since = previous
        .as_ref()
        .and_then(|p| p.since.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let mut last_fired = previous
        .as_ref()
        .and_then(|p| p.last_schedule_time.as_ref().map(|t| t.0));
    let due = match (&cron, spec) {
        (Some(cron), Some(s)) if !s.suspend => plan::due(cron, last_fired, since, now),
        _ => None,
    };
    let mut wake = cron
        .as_ref()
        .and_then(|c| c.next_after(now))
        .map(|t| (t - now).to_std().unwrap_or_default() + Duration::from_millis(50));
    if running.is_none() {
        let busy = backup_running(ctx, &ns, &name, backups).await?;
        let choice = plan::choose(&views, due.is_some(), again_after, now);
        match (busy, choice) {
            (Some(_), Some(_)) => {
                // Started once the backup finishes (its status change wakes the scheduler); the
                // due time stays due until then.
                wake = Some(RUNNING_POLL);
            }
            (None, Some(choice)) => {
                let backup = backups
                    .iter()
                    .find(|b| b.name_any() == choice.backup)
                    .expect("chosen among these backups");
                let record = start(ctx, cluster, backup, &choice, now).await?;
                if record.result == DrillPhase::Running {
                    running = Some(backup.name_any());
                }
                records.insert(backup.name_any(), Some(record));
                last_fired = due.or(last_fired);
            }
            (_, None) => last_fired = due.or(last_fired),
        }
    }
    if running.is_some() {
        wake = Some(RUNNING_POLL);
    }

    let latest = views_of(backups, &records);
    let finished = records
        .iter()
        .filter_map(|(b, r)| Some((b, r.as_ref()?)))
        .filter(|(_, r)| r.result != DrillPhase::Running)
        .max_by_key(|(b, r)| (r.completion_time.as_ref().map(|t| t.0), *b));
    if let Some((_, r)) = finished {
        if let Some(t) = &r.completion_time {
            ctx.metrics
                .drill_latest(&ns, &name, t.0, r.result == DrillPhase::Succeeded);
        }
    }
    if spec.is_none() && finished.is_none() && running.is_none() {
        return Ok(Pass { status: None, wake });
    }
    let (waiting, oldest_waiting) = plan::waiting(&latest, again_after, now);
    let status = DrillsStatus {
        since: spec.map(|_| Time(since)),
        last_schedule_time: last_fired.map(Time),
        next_schedule_time: cron.as_ref().and_then(|c| c.next_after(now)).map(Time),
        running,
        last_drill: finished.map(|(b, r)| DrillSummary {
            backup: b.clone(),
            result: r.result,
            completion_time: r.completion_time.clone(),
            restore_seconds: r.restore_seconds,
            message: r.message.clone(),
        }),
        waiting: i32::try_from(waiting).unwrap_or(i32::MAX),
        oldest_waiting,
    };
    Ok(Pass {
        status: Some(status),
        wake,
    })
}

/// The succeeded backups as the drill plan sees them, with the records of this pass.
fn views_of(
    backups: &[MySQLBackup],
    records: &BTreeMap<String, Option<DrillRecord>>,
) -> Vec<DrillView> {
    backups
        .iter()
        .filter_map(|b| {
            let st = b.status.as_ref()?;
            if st.phase != Some(BackupPhase::Succeeded) || st.backup_id.is_none() {
                return None;
            }
            let record = records.get(&b.name_any()).cloned().flatten();
            let asked = b
                .annotations()
                .get(names::DRILL_REQUEST_ANNOTATION)
                .cloned();
            let answered = record.as_ref().and_then(|r| r.request.clone());
            let running = record
                .as_ref()
                .is_some_and(|r| r.result == DrillPhase::Running);
            Some(DrillView {
                name: b.name_any(),
                schedule: b.labels().get(names::SCHEDULE_LABEL).cloned(),
                completed: st
                    .completion_time
                    .as_ref()
                    .map(|t| t.0)
                    .or_else(|| b.meta().creation_timestamp.as_ref().map(|t| t.0))
                    .unwrap_or_default(),
                drilled: record
                    .as_ref()
                    .filter(|r| r.result != DrillPhase::Running)
                    .and_then(|r| r.completion_time.as_ref().map(|t| t.0)),
                request: asked.filter(|a| !running && Some(a) != answered.as_ref()),
            })
        })
        .collect()
}

/// The newest pod the drill Job controls, if any.
async fn job_pod(ctx: &Context, ns: &str, j: &Job) -> Result<Option<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let list = apply::list(&pods, &format!("job-name={}", j.name_any())).await?;
    Ok(list
        .into_iter()
        .filter(|p| crate::ownership::controls(j, p))
        .max_by_key(|p| p.meta().creation_timestamp.clone().map(|t| t.0)))
}

fn job_created(j: &Job) -> Option<DateTime<Utc>> {
    j.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// A backup of the cluster that runs (or waits to) now: a drill never runs beside one, so that
/// the two never share a node's disk, and the backup goes first.
async fn backup_running(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    backups: &[MySQLBackup],
) -> Result<Option<String>> {
    let pending = backups.iter().find(|b| {
        !matches!(
            b.status.as_ref().and_then(|s| s.phase),
            Some(BackupPhase::Succeeded | BackupPhase::Failed)
        )
    });
    if let Some(b) = pending {
        return Ok(Some(b.name_any()));
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let backup_jobs = apply::list(
        &jobs,
        &names::selector_string(&names::labels(cluster, names::component::BACKUP)),
    )
    .await?;
    Ok(crate::backup::running_job(&backup_jobs))
}

/// Starts the drill of `choice`, and returns the record written: running, or failed when its
/// Job cannot be made.
async fn start(
    ctx: &Context,
    cluster: &MySQLCluster,
    backup: &MySQLBackup,
    choice: &Choice,
    now: DateTime<Utc>,
) -> Result<DrillRecord> {
    let ns = cluster.namespace().unwrap_or_default();
    let request = match &choice.pick {
        Pick::Requested(token) => Some(token.clone()),
        Pick::New | Pick::Again => None,
    };
    let name = job::drill_job_name(&backup.name_any(), now);
    let started = outcome::started(&name, request, now);
    let encryption = cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.encryption.as_ref());
    let access = backup
        .status
        .as_ref()
        .and_then(|s| s.recorded_storage.as_ref())
        .and_then(|s| storage::storage_access(s, encryption));
    let Some(access) = access else {
        let done = cannot_start(
            &started,
            "the backup's status records no usable storage",
            now,
        );
        record_drill(ctx, &ns, backup, &done).await?;
        announce(ctx, &ns, &cluster.name_any(), backup, &done).await;
        return Ok(done);
    };
    let built = job::drill_job(&job::DrillJobInput {
        backup,
        cluster,
        access: &access,
        image: ctx.config.backup_images.for_cluster(cluster),
        at: now,
    });
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    match apply::apply(&jobs, &name, &built, DRILL_MANAGER).await {
        Ok(_) => {}
        Err(e) if !e.is_retryable() => {
            let done = cannot_start(
                &started,
                &format!("failed to create drill job {name}: {e}"),
                now,
            );
            record_drill(ctx, &ns, backup, &done).await?;
            announce(ctx, &ns, &cluster.name_any(), backup, &done).await;
            return Ok(done);
        }
        Err(e) => return Err(e),
    }
    record_drill(ctx, &ns, backup, &started).await?;
    let why = match &choice.pick {
        Pick::Requested(_) => "as requested",
        Pick::New => "never drilled",
        Pick::Again => "its last drill is older than everyBackupWithin",
    };
    ctx.event(
        backup,
        Reason::DrillStarted,
        format!("drill job {name} started ({why})"),
    )
    .await;
    tracing::info!(namespace = %ns, backup = %backup.name_any(), job = %name, "drill job created");
    Ok(started)
}

fn cannot_start(started: &DrillRecord, why: &str, now: DateTime<Utc>) -> DrillRecord {
    outcome::finished(
        started,
        &DrillOutcome::Failed {
            message: format!("the drill could not start: {why}"),
            finished: Some(now),
        },
        now,
    )
}

/// Writes a backup's `status.lastDrill` (the drill manager's only field of it).
async fn record_drill(
    ctx: &Context,
    ns: &str,
    backup: &MySQLBackup,
    record: &DrillRecord,
) -> Result<()> {
    if backup.status.as_ref().and_then(|s| s.last_drill.as_ref()) == Some(record) {
        return Ok(());
    }
    let api: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), ns);
    let status = serde_json::json!({ "lastDrill": record });
    apply::apply_status(&api, backup, status, DRILL_MANAGER).await?;
    Ok(())
}

/// The event and metrics of a drill that just finished, after its record was written.
async fn announce(ctx: &Context, ns: &str, cluster: &str, backup: &MySQLBackup, r: &DrillRecord) {
    let message = r.message.clone().unwrap_or_default();
    match r.result {
        DrillPhase::Succeeded => {
            ctx.metrics.drill_finished(ns, cluster, r.restore_seconds);
            ctx.event(backup, Reason::DrillSucceeded, message).await;
        }
        DrillPhase::Failed => {
            ctx.metrics.drill_finished(ns, cluster, None);
            ctx.event(backup, Reason::DrillFailed, message).await;
            tracing::warn!(namespace = %ns, backup = %backup.name_any(), "drill failed");
        }
        DrillPhase::Running => {}
    }
}

/// Deletes finished drill Jobs but the newest (its pod's log is the drill's full account),
/// once recorded.
async fn forget_old_jobs(jobs: &Api<Job>, mut finished: Vec<&Job>) -> Result<()> {
    finished.sort_by_key(|j| (job_created(j), j.name_any()));
    finished.pop();
    for j in finished {
        apply::delete_opt(jobs, &j.name_any()).await?;
    }
    Ok(())
}
