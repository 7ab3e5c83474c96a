//! Pure decisions of the scheduler: when a schedule fires, whether a run starts or is skipped,
//! which backups retention deletes, and whether backups are healthy.

use std::collections::BTreeMap;

use bulwark_api::cluster::{BackupSchedule, RetentionPolicy, ScheduleStatus};
use bulwark_api::BackupPhase;
use bulwark_retention::{Candidate, KeepPolicy};
use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

use crate::conditions::{Desired, Status};
use bulwark_api::common::condition;

/// Starting deadline when a schedule sets none.
pub const DEFAULT_STARTING_DEADLINE: Duration = Duration::seconds(600);

/// A parsed cron expression with its time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    inner: cron::Schedule,
    tz: Tz,
}

impl CronSchedule {
    /// Parses a standard 5-field expression (minute hour day-of-month month day-of-week, with
    /// Sunday as 0 or 7), the same with a leading seconds field, or a macro such as `@daily`,
    /// in an IANA time zone (UTC when absent).
    pub fn parse(expr: &str, time_zone: Option<&str>) -> Result<Self, String> {
        let tz: Tz = match time_zone {
            None => Tz::UTC,
            Some(z) => z.parse().map_err(|_| format!("unknown time zone {z:?}"))?,
        };
        let invalid = || format!("invalid cron expression {expr:?}");
        let fields: Vec<&str> = expr.split_whitespace().collect();
        let normalized = match fields.as_slice() {
            [m] if m.starts_with('@') => match *m {
                "@yearly" | "@annually" => "0 0 0 1 1 *".to_owned(),
                "@monthly" => "0 0 0 1 * *".to_owned(),
                "@weekly" => "0 0 0 * * SUN".to_owned(),
                "@daily" | "@midnight" => "0 0 0 * * *".to_owned(),
                "@hourly" => "0 0 * * * *".to_owned(),
                _ => return Err(invalid()),
            },
            [min, hour, dom, mon, dow] => {
                format!(
                    "0 {min} {hour} {dom} {mon} {}",
                    day_names(dow).ok_or_else(invalid)?
                )
            }
            [sec, min, hour, dom, mon, dow] => {
                format!(
                    "{sec} {min} {hour} {dom} {mon} {}",
                    day_names(dow).ok_or_else(invalid)?
                )
            }
            _ => return Err(invalid()),
        };
        let inner: cron::Schedule = normalized.parse().map_err(|_| invalid())?;
        if inner.upcoming(tz).next().is_none() {
            return Err(format!("cron expression {expr:?} never fires"));
        }
        Ok(Self { inner, tz })
    }

    /// The first fire time strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.inner
            .after(&t.with_timezone(&self.tz))
            .next()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The latest fire time at or before `t`.
    pub fn latest_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let just_after = t + Duration::milliseconds(1);
        self.inner
            .after(&just_after.with_timezone(&self.tz))
            .next_back()
            .map(|d| d.with_timezone(&Utc))
    }
}

/// Standard cron day-of-week numbers (0 or 7 = Sunday) as the names the `cron` crate reads
/// unambiguously (its numbers start at 1 = Sunday).
fn day_names(field: &str) -> Option<String> {
    const NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    let name = |s: &str| -> Option<String> {
        match s.parse::<usize>() {
            Ok(n) if n < NAMES.len() => Some(NAMES[n].to_owned()),
            Ok(_) => None,
            Err(_) => Some(s.to_owned()),
        }
    };
    let mut out = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        let mut converted = match range.split_once('-') {
            Some((a, "7")) if step.is_none() => {
                // A range ending on Sunday as 7 wraps in the cron crate's numbering.
                out.push("SUN".to_owned());
                if a == "0" || a == "7" {
                    continue;
                }
                format!("{}-SAT", name(a)?)
            }
            Some((a, b)) => format!("{}-{}", name(a)?, name(b)?),
            None => name(range)?,
        };
        if let Some(s) = step {
            if range == "*" {
                converted = "*".to_owned();
            }
            converted = format!("{converted}/{s}");
        }
        out.push(converted);
    }
    Some(out.join(","))
}

/// What a schedule does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fire {
    /// Nothing is due.
    Idle,
    /// Start the backup for this scheduled time.
    Start(DateTime<Utc>),
    /// The run for this time is skipped: the previous backup has not finished.
    SkipBusy(DateTime<Utc>),
    /// The run for this time is skipped: its starting deadline passed.
    SkipLate(DateTime<Utc>),
}

/// A schedule's decision and its next fire time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub fire: Fire,
    pub next: Option<DateTime<Utc>>,
}

/// When a schedule counts from: the time recorded in its status when the operator first saw
/// it; a schedule seen for the first time counts from `now`, and one recorded by an operator
/// that kept no such time from the cluster's creation.
pub fn schedule_since(
    previous: Option<&ScheduleStatus>,
    cluster_created: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    match previous {
        None => now,
        Some(p) => p.since.as_ref().map_or(cluster_created, |t| t.0),
    }
}

/// A schedule the health check looks at, with the time it counts from.
pub struct ActiveSchedule<'a> {
    pub schedule: &'a BackupSchedule,
    pub cron: &'a CronSchedule,
    pub since: DateTime<Utc>,
}

/// Decides what a schedule does at `now`: the latest fire time after `last_fired` (or after
/// `since`, when the schedule was first seen, when it never fired) starts a backup unless one of the
/// schedule's backups is still `busy` (concurrency Forbid) or the time is older than the
/// starting deadline.
pub fn decide(
    schedule: &BackupSchedule,
    cron: &CronSchedule,
    last_fired: Option<DateTime<Utc>>,
    since: DateTime<Utc>,
    busy: bool,
    now: DateTime<Utc>,
) -> Decision {
    if schedule.suspend {
        return Decision {
            fire: Fire::Idle,
            next: None,
        };
    }
    let floor = last_fired.unwrap_or(since);
    let due = cron.latest_at_or_before(now).filter(|t| *t > floor);
    let deadline = schedule
        .starting_deadline_seconds
        .map(Duration::seconds)
        .unwrap_or(DEFAULT_STARTING_DEADLINE);
    let fire = match due {
        None => Fire::Idle,
        Some(t) if now - t > deadline => Fire::SkipLate(t),
        Some(t) if busy => Fire::SkipBusy(t),
        Some(t) => Fire::Start(t),
    };
    Decision {
        fire,
        next: cron.next_after(now),
    }
}

/// A backup as retention and health see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupView {
    pub name: String,
    pub schedule: Option<String>,
    pub phase: Option<BackupPhase>,
    /// Completion time, or creation time when it has none.
    pub time: DateTime<Utc>,
    /// The id in the repository (`status.backupId`), once known.
    pub backup_id: Option<String>,
}

impl BackupView {
    /// Whether the backup is still going (neither Succeeded nor Failed).
    pub fn is_active(&self) -> bool {
        !matches!(
            self.phase,
            Some(BackupPhase::Succeeded | BackupPhase::Failed)
        )
    }
}

/// Converts the API's retention rules into the shared planner's policy.
pub fn keep_policy(r: &RetentionPolicy) -> KeepPolicy {
    let n = |v: Option<i32>| v.map(|v| v.max(0) as u32);
    KeepPolicy {
        last: n(r.keep_last),
        hourly: n(r.keep_hourly),
        daily: n(r.keep_daily),
        weekly: n(r.keep_weekly),
        monthly: n(r.keep_monthly),
        yearly: n(r.keep_yearly),
        within: r
            .keep_within
            .as_deref()
            .and_then(|w| bulwark_retention::parse_duration(w).ok()),
    }
}

/// The backups of one schedule that retention deletes, with the reason, oldest first:
/// Succeeded backups the keep rules do not keep (none without rules) and Failed backups beyond
/// the newest `failed_limit`. Running and pending backups are never touched, and failed ones
/// never count towards the keep rules. `window_base` is the backup id the binlog archive
/// reports as the base of the current recovery window: it stays whatever the rules say, or
/// point-in-time recovery to the archive's latest point would be lost.
pub fn retention(
    policy: Option<&RetentionPolicy>,
    failed_limit: i32,
    backups: &[BackupView],
    window_base: Option<&str>,
) -> Vec<(String, String)> {
    let mut delete = Vec::new();
    if let Some(policy) = policy {
        let candidates: Vec<Candidate> = backups
            .iter()
            .filter(|b| b.phase == Some(BackupPhase::Succeeded))
            .map(|b| Candidate {
                id: b.name.clone(),
                time: b.time,
            })
            .collect();
        let base = backups
            .iter()
            .find(|b| window_base.is_some() && b.backup_id.as_deref() == window_base)
            .map(|b| b.name.as_str());
        for d in bulwark_retention::plan(&keep_policy(policy), &candidates) {
            if !d.keep && Some(d.id.as_str()) != base {
                delete.push((d.time, d.id, "not kept by the retention rules".to_owned()));
            }
        }
    }
    let mut failed: Vec<&BackupView> = backups
        .iter()
        .filter(|b| b.phase == Some(BackupPhase::Failed))
        .collect();
    failed.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| b.name.cmp(&a.name)));
    // The latest finished backup stays whatever the limit: it is what BackupHealthy reports.
    let latest_finished = backups
        .iter()
        .filter(|b| !b.is_active())
        .max_by(|a, b| a.time.cmp(&b.time).then_with(|| a.name.cmp(&b.name)))
        .map(|b| b.name.as_str());
    for b in failed
        .iter()
        .skip(failed_limit.max(0) as usize)
        .filter(|b| Some(b.name.as_str()) != latest_finished)
    {
        delete.push((
            b.time,
            b.name.clone(),
            format!("beyond the {failed_limit} most recent failed backups"),
        ));
    }
    delete.sort();
    delete.into_iter().map(|(_, n, why)| (n, why)).collect()
}

/// The `BackupHealthy` condition: False when the latest finished backup failed or an active
/// schedule has not produced a successful backup since the fire time before its latest one;
/// Unknown before any backup; True otherwise.
pub fn backup_health(
    backups: &[BackupView],
    schedules: &[ActiveSchedule<'_>],
    now: DateTime<Utc>,
) -> Desired {
    let finished: Vec<&BackupView> = backups.iter().filter(|b| !b.is_active()).collect();
    let latest = finished
        .iter()
        .max_by(|a, b| a.time.cmp(&b.time).then_with(|| a.name.cmp(&b.name)));
    if let Some(b) = latest {
        if b.phase == Some(BackupPhase::Failed) {
            return Desired::new(
                condition::BACKUP_HEALTHY,
                Status::False,
                "LastBackupFailed",
                format!("the latest backup, {}, failed", b.name),
            );
        }
    }
    let mut last_success: BTreeMap<&str, DateTime<Utc>> = BTreeMap::new();
    for b in &finished {
        if let (Some(s), Some(BackupPhase::Succeeded)) = (&b.schedule, b.phase) {
            let e = last_success.entry(s.as_str()).or_insert(b.time);
            *e = (*e).max(b.time);
        }
    }
    for ActiveSchedule {
        schedule: sc,
        cron,
        since,
    } in schedules
    {
        if sc.suspend {
            continue;
        }
        let Some(latest_fire) = cron.latest_at_or_before(now) else {
            continue;
        };
        let Some(previous_fire) = cron.latest_at_or_before(latest_fire - Duration::milliseconds(1))
        else {
            continue;
        };
        if previous_fire <= *since {
            continue;
        }
        let ok = last_success
            .get(sc.name.as_str())
            .is_some_and(|t| *t >= previous_fire);
        if !ok {
            return Desired::new(
                condition::BACKUP_HEALTHY,
                Status::False,
                "BackupOverdue",
                format!(
                    "schedule {} has no successful backup since {}",
                    sc.name,
                    previous_fire.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
            );
        }
    }
    match latest {
        None => Desired::new(
            condition::BACKUP_HEALTHY,
            Status::Unknown,
            "NoBackups",
            "no backup has finished yet",
        ),
        Some(b) => Desired::new(
            condition::BACKUP_HEALTHY,
            Status::True,
            "LastBackupSucceeded",
            format!("the latest backup, {}, succeeded", b.name),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn sched(expr: &str) -> BackupSchedule {
        serde_json::from_value(serde_json::json!({
            "name": "nightly", "schedule": expr, "storage": "nas"
        }))
        .unwrap()
    }

    #[test]
    fn standard_day_of_week_numbers_mean_what_crontab_says() {
        // 2026-11-23 is a Monday.
        let mon = CronSchedule::parse("0 3 * * 1", None).unwrap();
        assert_eq!(
            mon.next_after(t("2026-11-22T00:00:00Z")),
            Some(t("2026-11-23T03:00:00Z"))
        );
        let sun0 = CronSchedule::parse("0 3 * * 0", None).unwrap();
        let sun7 = CronSchedule::parse("0 3 * * 7", None).unwrap();
        assert_eq!(
            sun0.next_after(t("2026-11-20T00:00:00Z")),
            Some(t("2026-11-22T03:00:00Z"))
        );
        assert_eq!(
            sun7.next_after(t("2026-11-20T00:00:00Z")),
            Some(t("2026-11-22T03:00:00Z"))
        );
        let weekend = CronSchedule::parse("0 3 * * 6-7", None).unwrap();
        assert_eq!(
            weekend.next_after(t("2026-11-22T04:00:00Z")),
            Some(t("2026-11-28T03:00:00Z"))
        );
        let workdays = CronSchedule::parse("0 3 * * 1-5", None).unwrap();
        assert_eq!(
            workdays.next_after(t("2026-11-21T04:00:00Z")),
            Some(t("2026-11-23T03:00:00Z"))
        );
    }

    #[test]
    fn time_zones_macros_and_seconds() {
        let berlin = CronSchedule::parse("15 2 * * *", Some("Europe/Berlin")).unwrap();
        assert_eq!(
            berlin.next_after(t("2026-11-22T00:00:00Z")),
            Some(t("2026-11-22T01:15:00Z"))
        );
        let daily = CronSchedule::parse("@daily", None).unwrap();
        assert_eq!(
            daily.next_after(t("2026-11-22T10:00:00Z")),
            Some(t("2026-11-23T00:00:00Z"))
        );
        let fast = CronSchedule::parse("*/5 * * * * *", None).unwrap();
        assert_eq!(
            fast.next_after(t("2026-11-22T10:00:01Z")),
            Some(t("2026-11-22T10:00:05Z"))
        );
        assert_eq!(
            fast.latest_at_or_before(t("2026-11-22T10:00:05Z")),
            Some(t("2026-11-22T10:00:05Z"))
        );
        assert!(CronSchedule::parse("0 3 * * *", Some("Mars/Olympus"))
            .unwrap_err()
            .contains("unknown time zone"));
        assert!(CronSchedule::parse("0 3 * *", None).is_err());
        assert!(CronSchedule::parse("0 3 31 2 *", None)
            .unwrap_err()
            .contains("never fires"));
    }

    #[test]
    fn decisions_follow_cronjob_semantics() {
        let s = sched("0 * * * *");
        let c = CronSchedule::parse(&s.schedule, None).unwrap();
        let since = t("2026-11-22T09:30:00Z");
        // Due at 10:00, 2 minutes ago.
        let d = decide(&s, &c, None, since, false, t("2026-11-22T10:02:00Z"));
        assert_eq!(d.fire, Fire::Start(t("2026-11-22T10:00:00Z")));
        assert_eq!(d.next, Some(t("2026-11-22T11:00:00Z")));
        // Already fired for 10:00.
        let d = decide(
            &s,
            &c,
            Some(t("2026-11-22T10:00:00Z")),
            since,
            false,
            t("2026-11-22T10:30:00Z"),
        );
        assert_eq!(d.fire, Fire::Idle);
        // Forbid: the previous backup still runs.
        let d = decide(
            &s,
            &c,
            Some(t("2026-11-22T09:00:00Z")),
            since,
            true,
            t("2026-11-22T10:01:00Z"),
        );
        assert_eq!(d.fire, Fire::SkipBusy(t("2026-11-22T10:00:00Z")));
        // Operator down until 10:20: past the default 10-minute deadline.
        let d = decide(
            &s,
            &c,
            Some(t("2026-11-22T09:00:00Z")),
            since,
            false,
            t("2026-11-22T10:20:00Z"),
        );
        assert_eq!(d.fire, Fire::SkipLate(t("2026-11-22T10:00:00Z")));
        let mut lenient = s.clone();
        lenient.starting_deadline_seconds = Some(3600);
        let d = decide(
            &lenient,
            &c,
            Some(t("2026-11-22T09:00:00Z")),
            since,
            false,
            t("2026-11-22T10:20:00Z"),
        );
        assert_eq!(d.fire, Fire::Start(t("2026-11-22T10:00:00Z")));
        // Before the cluster existed nothing was due.
        let d = decide(
            &s,
            &c,
            None,
            t("2026-11-22T10:01:00Z"),
            false,
            t("2026-11-22T10:02:00Z"),
        );
        assert_eq!(d.fire, Fire::Idle);
        let mut off = s.clone();
        off.suspend = true;
        assert_eq!(
            decide(&off, &c, None, since, false, t("2026-11-22T10:02:00Z")),
            Decision {
                fire: Fire::Idle,
                next: None
            }
        );
    }

    fn view(name: &str, phase: BackupPhase, time: DateTime<Utc>) -> BackupView {
        BackupView {
            name: name.into(),
            schedule: Some("nightly".into()),
            phase: Some(phase),
            time,
            backup_id: Some(format!("id-{name}")),
        }
    }

    #[test]
    fn retention_keeps_by_rules_and_trims_failures_separately() {
        let day = |d: u32| Utc.with_ymd_and_hms(2026, 11, d, 3, 0, 0).unwrap();
        let backups = vec![
            view("b15", BackupPhase::Succeeded, day(15)),
            view("b16", BackupPhase::Succeeded, day(16)),
            view("f17", BackupPhase::Failed, day(17)),
            view("b18", BackupPhase::Succeeded, day(18)),
            view("f19", BackupPhase::Failed, day(19)),
            view("f20", BackupPhase::Failed, day(20)),
            view("r21", BackupPhase::Running, day(21)),
        ];
        let policy = RetentionPolicy {
            keep_last: Some(2),
            ..RetentionPolicy::default()
        };
        let out = retention(Some(&policy), 1, &backups, None);
        assert_eq!(
            out,
            vec![
                (
                    "b15".to_owned(),
                    "not kept by the retention rules".to_owned()
                ),
                (
                    "f17".to_owned(),
                    "beyond the 1 most recent failed backups".to_owned()
                ),
                (
                    "f19".to_owned(),
                    "beyond the 1 most recent failed backups".to_owned()
                ),
            ]
        );
        // Without rules every successful backup stays.
        assert_eq!(retention(None, 5, &backups, None), vec![]);
        // A limit of 0 still leaves the latest finished backup when it failed.
        let out = retention(None, 0, &backups, None);
        assert_eq!(
            out.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["f17", "f19"]
        );
    }

    #[test]
    fn retention_never_deletes_the_base_of_the_recovery_window() {
        let day = |d: u32| Utc.with_ymd_and_hms(2026, 11, d, 3, 0, 0).unwrap();
        let backups = vec![
            view("b15", BackupPhase::Succeeded, day(15)),
            view("b16", BackupPhase::Succeeded, day(16)),
            view("b17", BackupPhase::Succeeded, day(17)),
        ];
        let policy = RetentionPolicy {
            keep_last: Some(1),
            ..RetentionPolicy::default()
        };
        let deleted = |base: Option<&str>| -> Vec<String> {
            retention(Some(&policy), 1, &backups, base)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        let cases = [
            // (window base reported by the archive, deleted)
            (None, vec!["b15", "b16"]),
            (Some("id-b16"), vec!["b15"]),
            (Some("id-b17"), vec!["b15", "b16"]),
            // A base of another storage or schedule protects nothing here.
            (Some("id-elsewhere"), vec!["b15", "b16"]),
        ];
        for (base, want) in cases {
            assert_eq!(deleted(base), want, "{base:?}");
        }
    }

    #[test]
    fn health_reports_failures_and_overdue_schedules() {
        let s = sched("0 3 * * *");
        let c = CronSchedule::parse(&s.schedule, None).unwrap();
        let since = t("2026-11-01T00:00:00Z");
        let now = t("2026-11-22T12:00:00Z");
        let active = |since| {
            [ActiveSchedule {
                schedule: &s,
                cron: &c,
                since,
            }]
        };
        let h = backup_health(&[], &active(t("2026-11-22T00:00:00Z")), now);
        assert_eq!((h.status, h.reason), (Status::Unknown, "NoBackups"));
        let ok = [view(
            "b22",
            BackupPhase::Succeeded,
            t("2026-11-22T03:05:00Z"),
        )];
        let h = backup_health(&ok, &active(since), now);
        assert_eq!((h.status, h.reason), (Status::True, "LastBackupSucceeded"));
        // Yesterday's success still covers the latest fire (today's may be running).
        let older = [view(
            "b21",
            BackupPhase::Succeeded,
            t("2026-11-21T03:05:00Z"),
        )];
        assert_eq!(
            backup_health(&older, &active(since), now).status,
            Status::True
        );
        let stale = [view(
            "b20",
            BackupPhase::Succeeded,
            t("2026-11-20T03:05:00Z"),
        )];
        let h = backup_health(&stale, &active(since), now);
        assert_eq!((h.status, h.reason), (Status::False, "BackupOverdue"));
        assert_eq!(
            h.message,
            "schedule nightly has no successful backup since 2026-11-21T03:00:00Z"
        );
        let failed = [
            view("b21", BackupPhase::Succeeded, t("2026-11-21T03:05:00Z")),
            view("f22", BackupPhase::Failed, t("2026-11-22T03:05:00Z")),
        ];
        let h = backup_health(&failed, &active(since), now);
        assert_eq!(
            (h.status, h.message.as_str()),
            (Status::False, "the latest backup, f22, failed")
        );
    }

    #[test]
    fn a_schedule_counts_from_when_it_was_first_seen() {
        let created = t("2026-01-01T00:00:00Z");
        let added = t("2026-11-22T10:00:00Z");
        let status = |since: Option<&str>| ScheduleStatus {
            name: "nightly".into(),
            since: since.map(|s| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(s))),
            last_schedule_time: None,
            next_schedule_time: None,
            last_successful_backup: None,
        };
        // New: from now. Recorded: from the record. Recorded by an operator that kept no time:
        // from the cluster's creation, as before.
        assert_eq!(schedule_since(None, created, added), added);
        let seen = status(Some("2026-11-22T10:00:00Z"));
        assert_eq!(
            schedule_since(Some(&seen), created, t("2026-11-23T00:00:00Z")),
            added
        );
        assert_eq!(schedule_since(Some(&status(None)), created, added), created);

        // A nightly schedule added to a month-old cluster is not overdue at once, nor does it
        // start a backup for a slot before it existed.
        let s = sched("0 3 * * *");
        let c = CronSchedule::parse(&s.schedule, None).unwrap();
        let since = schedule_since(None, created, added);
        let active = [ActiveSchedule {
            schedule: &s,
            cron: &c,
            since,
        }];
        let h = backup_health(&[], &active, added);
        assert_eq!((h.status, h.reason), (Status::Unknown, "NoBackups"));
        assert_eq!(decide(&s, &c, None, since, false, added).fire, Fire::Idle);
        // Two nights later with no success, it is.
        let later = t("2026-11-24T12:00:00Z");
        assert_eq!(backup_health(&[], &active, later).reason, "BackupOverdue");
    }
}
