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

/// How long a drill Job may go without a started pod (no node with room for its scratch
/// space, an image that cannot be pulled, a pod the API server refuses) before it fails.
const START_DEADLINE: chrono::Duration = chrono::Duration::minutes(10);
/// How often a running drill is looked at, besides the wake-ups its Job's changes bring.
const RUNNING_POLL: Duration = Duration::from_secs(10);

/// What the drills' part of a pass leaves: the cluster's drill status (none when drills are
/// off and none ever ran) and when to look again.
pub struct Pass {
    pub status: Option<DrillsStatus>,
    pub wake: Option<Duration>,
}

/// The backups of the cluster as this pass leaves them: each write's answer replaces the copy
/// read, so a second write to one backup goes over the first, never over a stale copy.
struct Backups(BTreeMap<String, MySQLBackup>);

impl Backups {
    fn record(&self, name: &str) -> Option<DrillRecord> {
        self.0.get(name)?.status.as_ref()?.last_drill.clone()
    }

    fn live(&self) -> impl Iterator<Item = &MySQLBackup> {
        self.0
            .values()
            .filter(|b| b.meta().deletion_timestamp.is_none())
    }
}

/// Runs the drills' part of a scheduler pass over `cluster`, whose backups (being deleted ones
/// included: their drills still run) are `backups`. No drill starts when `may_start` is false
/// (the pass created or deleted backups, so its list is already stale).
pub async fn pass(
    cluster: &MySQLCluster,
    ctx: &Context,
    backups: &[MySQLBackup],
    may_start: bool,
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
    let mut current = Backups(backups.iter().map(|b| (b.name_any(), b.clone())).collect());

    let mut running = None;
    let mut last_fired = cluster
        .status
        .as_ref()
        .and_then(|s| s.drills.as_ref())
        .and_then(|d| d.last_schedule_time.as_ref().map(|t| t.0));
    let mut finished_jobs = Vec::new();
    for j in &jobs {
        // Only Jobs a backup of this cluster controls: a Job given the labels is no drill.
        let Some(backup) = backups.iter().find(|b| crate::ownership::controls(*b, j)) else {
            continue;
        };
        let backup = backup.name_any();
        let job_name = j.name_any();
        if j.meta().deletion_timestamp.is_some() {
            // Being taken back (a backup slipped in) or cleared: no drill to record, but its
            // pod may still run, so nothing starts beside it.
            running = Some(backup);
            continue;
        }
        let (request, scheduled) = job::why_started(j);
        // A due time a Job was started for is used, whatever the status write of its pass did.
        last_fired = last_fired.max(scheduled);
        let record = current.record(&backup);
        let ours = record.as_ref().filter(|r| r.job == job_name).cloned();
        if ours
            .as_ref()
            .is_some_and(|r| r.result != DrillPhase::Running)
        {
            // Finished and recorded (the newest, kept for its log): nothing to read again.
            finished_jobs.push(j);
            continue;
        }
        let pod = crate::backup::job_pod(ctx, &ns, j).await?;
        let mut result = outcome::drill_outcome(j, pod.as_ref());
        let mut stuck = false;
        if result == DrillOutcome::Running {
            if let Some(why) = never_started(j, pod.as_ref(), now) {
                stuck = true;
                result = DrillOutcome::Failed {
                    message: format!(
                        "the drill pod did not start within {} minutes: {why}",
                        START_DEADLINE.num_minutes()
                    ),
                    finished: Some(now),
                };
            }
        }
        // Started by a pass that did not live to record it: the Job says why it runs.
        let start = ours.clone().unwrap_or_else(|| {
            let answered = request.or_else(|| record.as_ref().and_then(|r| r.request.clone()));
            outcome::started(&job_name, answered, job_created(j).unwrap_or(now))
        });
        if result == DrillOutcome::Running {
            running = Some(backup.clone());
            if ours.is_none() {
                record_drill(ctx, &ns, &mut current, &backup, &start).await?;
            }
            continue;
        }
        finished_jobs.push(j);
        // A record of a later drill is never replaced by an older Job's.
        let newer_recorded = record.as_ref().is_some_and(|r| {
            r.job != job_name && r.start_time.as_ref().map(|t| t.0) > job_created(j)
        });
        if !newer_recorded {
            let done = outcome::finished(&start, &result, now);
            record_drill(ctx, &ns, &mut current, &backup, &done).await?;
            announce(ctx, &ns, &name, current.0.get(&backup), &done).await;
        }
        if stuck {
            // Recorded first: a failed deletion leaves the cause in place, not "gone".
            apply::delete_opt(&jobs_api, &job_name).await?;
        }
    }
    // A drill recorded as running whose Job is gone (deleted by hand) never reports.
    let names: Vec<String> = current.0.keys().cloned().collect();
    for b in names {
        let Some(r) = current.record(&b) else {
            continue;
        };
        // A Job being deleted is not gone yet.
        if r.result == DrillPhase::Running && !jobs.iter().any(|j| j.name_any() == r.job) {
            let gone = DrillOutcome::Failed {
                message: format!("the drill job {} is gone without a result", r.job),
                finished: Some(now),
            };
            let done = outcome::finished(&r, &gone, now);
            record_drill(ctx, &ns, &mut current, &b, &done).await?;
            announce(ctx, &ns, &name, current.0.get(&b), &done).await;
        }
    }
    forget_old_jobs(&jobs_api, finished_jobs).await?;

    let again_after = spec
        .and_then(|s| s.every_backup_within.as_deref())
        .and_then(|w| bulwark_retention::parse_duration(w).ok());
    let cron = spec.and_then(|s| CronSchedule::parse(&s.schedule, s.time_zone.as_deref()).ok());
    let previous = cluster.status.as_ref().and_then(|s| s.drills.clone());
    let since = previous
        .as_ref()
        .and_then(|p| p.since.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let due = match (&cron, spec) {
        (Some(cron), Some(s)) if !s.suspend => plan::due(cron, last_fired, since, now),
        _ => None,
    };
    let mut wake = cron
        .as_ref()
        .and_then(|c| c.next_after(now))
        .map(|t| (t - now).to_std().unwrap_or_default() + Duration::from_millis(50));
    if running.is_none() {
        let views = views_of(&current);
        // The backups are looked at only when there is a drill to start.
        let choice = plan::choose(&views, due.is_some(), again_after, now);
        let busy = match &choice {
            Some(_) => backup_running(ctx, &ns, &name, current.live()).await?,
            None => None,
        };
        match (choice, busy) {
            (Some(_), Some(_)) => {
                // Started once the backup finishes; the due time stays due until then.
                wake = Some(RUNNING_POLL);
            }
            (Some(_), None) if !may_start => wake = Some(Duration::from_millis(200)),
            (Some(choice), None) => {
                let scheduled = due.filter(|_| !matches!(choice.pick, Pick::Requested(_)));
                match start(ctx, cluster, &mut current, &choice, scheduled, now).await? {
                    Started::Running => {
                        running = Some(choice.backup.clone());
                        last_fired = last_fired.max(scheduled);
                    }
                    Started::Failed => last_fired = last_fired.max(scheduled),
                    // Nothing was recorded: the due time stays due.
                    Started::TakenBack => wake = Some(RUNNING_POLL),
                }
            }
            (None, _) => last_fired = last_fired.max(due),
        }
    }
    if running.is_some() {
        wake = Some(RUNNING_POLL);
    }

    let finished = current
        .live()
        .filter_map(|b| Some((b.name_any(), b.status.as_ref()?.last_drill.clone()?)))
        .filter(|(_, r)| r.result != DrillPhase::Running)
        .max_by_key(|(b, r)| (r.completion_time.as_ref().map(|t| t.0), b.clone()));
    if let Some((_, r)) = &finished {
        if let Some(t) = &r.completion_time {
            ctx.metrics
                .drill_latest(&ns, &name, t.0, r.result == DrillPhase::Succeeded);
        }
    }
    if spec.is_none() && finished.is_none() && running.is_none() {
        return Ok(Pass { status: None, wake });
    }
    let (waiting, oldest_waiting) = plan::waiting(&views_of(&current), again_after, now);
    let status = DrillsStatus {
        since: spec.map(|_| Time(since)),
        last_schedule_time: last_fired.map(Time),
        next_schedule_time: cron.as_ref().and_then(|c| c.next_after(now)).map(Time),
        running,
        last_drill: finished.map(|(b, r)| DrillSummary {
            backup: b,
            result: r.result,
            completion_time: r.completion_time,
            restore_seconds: r.restore_seconds,
            message: r.message,
        }),
        waiting: i32::try_from(waiting).unwrap_or(i32::MAX),
        oldest_waiting,
    };
    Ok(Pass {
        status: Some(status),
        wake,
    })
}

/// The succeeded backups (not being deleted) as the drill plan sees them.
fn views_of(current: &Backups) -> Vec<DrillView> {
    current
        .live()
        .filter_map(|b| {
            let st = b.status.as_ref()?;
            if st.phase != Some(BackupPhase::Succeeded) || st.backup_id.is_none() {
                return None;
            }
            let record = st.last_drill.as_ref();
            let asked = b.annotations().get(names::DRILL_REQUEST_ANNOTATION);
            let answered = record.and_then(|r| r.request.as_ref());
            let running = record.is_some_and(|r| r.result == DrillPhase::Running);
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
                    .filter(|r| r.result != DrillPhase::Running)
                    .and_then(|r| r.completion_time.as_ref().map(|t| t.0)),
                request: asked.filter(|a| !running && Some(*a) != answered).cloned(),
            })
        })
        .collect()
}

fn job_created(j: &Job) -> Option<DateTime<Utc>> {
    j.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// Why a running drill Job has not started its pod within [`START_DEADLINE`], if so: its pod's
/// waiting reason, or that it has no pod at all (the API server refused it: a quota, a limit
/// range, an admission policy; the Job's events say which).
fn never_started(j: &Job, pod: Option<&Pod>, now: DateTime<Utc>) -> Option<String> {
    match pod {
        Some(p) => stuck_before_start(p, now, START_DEADLINE),
        None => job_created(j)
            .filter(|t| now - *t >= START_DEADLINE)
            .map(|_| "no pod was created (see the job's events)".to_owned()),
    }
}

/// A backup of the cluster that runs (or waits to) now: a drill never runs beside one, so that
/// the two never share a node's disk, and the backup goes first.
async fn backup_running<'a>(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    mut backups: impl Iterator<Item = &'a MySQLBackup>,
) -> Result<Option<String>> {
    let pending = backups.find(|b| {
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

/// What became of a drill [`start`] was asked for.
enum Started {
    /// Its Job runs, and its backup's record says so.
    Running,
    /// It could not start; its backup's record says why.
    Failed,
    /// A backup slipped in while its Job was made: the Job is taken back, nothing recorded.
    TakenBack,
}

/// Starts the drill of `choice` (for the due time `scheduled`, if the schedule chose it). A
/// backup that appeared while the Job was made wins: the Job is taken back and the drill waits
/// for the next pass.
async fn start(
    ctx: &Context,
    cluster: &MySQLCluster,
    current: &mut Backups,
    choice: &Choice,
    scheduled: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Started> {
    let ns = cluster.namespace().unwrap_or_default();
    let Some(backup) = current.0.get(&choice.backup).cloned() else {
        return Ok(Started::TakenBack);
    };
    let previous = backup.status.as_ref().and_then(|s| s.last_drill.clone());
    let request = match &choice.pick {
        Pick::Requested(token) => Some(token.clone()),
        // The last value answered stays answered.
        Pick::New | Pick::Overdue => previous.and_then(|r| r.request),
    };
    let name = job::drill_job_name(&backup.name_any(), now);
    let started = outcome::started(&name, request.clone(), now);
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
        let why = "the backup's status records no usable storage";
        return cannot_start(ctx, cluster, current, &choice.backup, &started, why, now).await;
    };
    let built = job::drill_job(&job::DrillJobInput {
        backup: &backup,
        cluster,
        access: &access,
        image: ctx.config.backup_images.for_cluster(cluster),
        at: now,
        request: match &choice.pick {
            Pick::Requested(token) => Some(token.as_str()),
            Pick::New | Pick::Overdue => None,
        },
        scheduled,
    });
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    match apply::apply(&jobs, &name, &built, DRILL_MANAGER).await {
        Ok(_) => {}
        Err(e) if !e.is_retryable() => {
            let why = format!("failed to create drill job {name}: {e}");
            return cannot_start(ctx, cluster, current, &choice.backup, &started, &why, now).await;
        }
        Err(e) => return Err(e),
    }
    // The backup controller starts a backup only while no drill Job exists: looked at again
    // after this one exists, a backup that slipped in between is seen here.
    let backups = apply::backups_of(&ctx.client, &ns, &cluster.name_any()).await?;
    let live = backups
        .iter()
        .filter(|b| b.meta().deletion_timestamp.is_none());
    if let Some(b) = backup_running(ctx, &ns, &cluster.name_any(), live).await? {
        tracing::info!(namespace = %ns, backup = %b, job = %name, "a backup started beside the new drill; the drill waits for it");
        apply::delete_foreground(&jobs, &name).await?;
        return Ok(Started::TakenBack);
    }
    record_drill(ctx, &ns, current, &choice.backup, &started).await?;
    let why = match &choice.pick {
        Pick::Requested(_) => "as requested",
        Pick::New => "never drilled",
        Pick::Overdue => "not drilled within everyBackupWithin",
    };
    ctx.event(
        &backup,
        Reason::DrillStarted,
        format!("drill job {name} started ({why})"),
    )
    .await;
    tracing::info!(namespace = %ns, backup = %choice.backup, job = %name, "drill job created");
    Ok(Started::Running)
}

/// Records the drill of `backup` that could not start as failed, with `why`.
async fn cannot_start(
    ctx: &Context,
    cluster: &MySQLCluster,
    current: &mut Backups,
    backup: &str,
    started: &DrillRecord,
    why: &str,
    now: DateTime<Utc>,
) -> Result<Started> {
    let ns = cluster.namespace().unwrap_or_default();
    let failed = DrillOutcome::Failed {
        message: format!("the drill could not start: {why}"),
        finished: Some(now),
    };
    let done = outcome::finished(started, &failed, now);
    record_drill(ctx, &ns, current, backup, &done).await?;
    announce(ctx, &ns, &cluster.name_any(), current.0.get(backup), &done).await;
    Ok(Started::Failed)
}

/// Writes a backup's `status.lastDrill` (the drill manager's only field of it) over the copy
/// this pass holds, and keeps the answer for the next write.
async fn record_drill(
    ctx: &Context,
    ns: &str,
    current: &mut Backups,
    backup: &str,
    record: &DrillRecord,
) -> Result<()> {
    let Some(read) = current.0.get(backup) else {
        return Ok(());
    };
    if read.status.as_ref().and_then(|s| s.last_drill.as_ref()) == Some(record) {
        return Ok(());
    }
    let api: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), ns);
    let status = serde_json::json!({ "lastDrill": record });
    let written = apply::apply_status(&api, read, status, DRILL_MANAGER).await?;
    current.0.insert(backup.to_owned(), written);
    Ok(())
}

/// The event and metrics of a drill that just finished, after its record was written.
async fn announce(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    backup: Option<&MySQLBackup>,
    r: &DrillRecord,
) {
    let Some(backup) = backup else {
        return;
    };
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
