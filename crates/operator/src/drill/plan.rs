//! Pure decisions of the restore drills: when the drill schedule is due, which backup the next
//! drill restores, and which backups still wait for one.

use chrono::{DateTime, Duration, Utc};

use crate::schedule::plan::CronSchedule;

/// A succeeded backup as the drills see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrillView {
    pub name: String,
    /// The schedule that took it; `None` for backups taken on demand (a group of their own).
    pub schedule: Option<String>,
    pub completed: DateTime<Utc>,
    /// When its latest drill finished, whatever its result (a failed drill is not repeated on
    /// its own: the failure is what a person must look at).
    pub drilled: Option<DateTime<Utc>>,
    /// The value of its drill request annotation, when no drill has answered it yet.
    pub request: Option<String>,
}

/// Why a backup is drilled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// A user asked for it with this annotation value.
    Requested(String),
    /// It was never drilled.
    New,
    /// Its last drill (or, never drilled, its completion) is older than `everyBackupWithin`.
    Overdue,
}

/// The backup the next drill restores, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub backup: String,
    pub pick: Pick,
}

/// The latest fire time of the drill schedule after `last_fired` (or after `since`, when it
/// never fired), if one has come. A late time is not skipped: a drill loses nothing by
/// starting late, and only the latest missed time counts.
pub fn due(
    cron: &CronSchedule,
    last_fired: Option<DateTime<Utc>>,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let floor = last_fired.unwrap_or(since);
    cron.latest_at_or_before(now).filter(|t| *t > floor)
}

/// Since when a backup has gone without a drill, when that is longer than `again_after`: its
/// last drill, or its completion when it was never drilled.
fn overdue(
    v: &DrillView,
    again_after: Option<Duration>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let since = v.drilled.unwrap_or(v.completed);
    (since < now - again_after?).then_some(since)
}

/// Whether a backup waits for a drill: never drilled, or overdue.
fn waits(v: &DrillView, again_after: Option<Duration>, now: DateTime<Utc>) -> bool {
    v.drilled.is_none() || overdue(v, again_after, now).is_some()
}

/// Chooses the backup of the next drill, if any: a requested one first (whether the schedule
/// is `due` or not); else, when it is due, the backup that has gone longest without a drill
/// once that is longer than `again_after` (so that every kept backup is drilled within it
/// while drills keep up, however many new backups come); else the newest never-drilled backup
/// of the group (schedule, or on demand) whose latest drill is the oldest (a group never
/// drilled first), so that each schedule's newest backups take turns. Ties go to the name that
/// sorts first, so the choice is stable.
pub fn choose(
    views: &[DrillView],
    due: bool,
    again_after: Option<Duration>,
    now: DateTime<Utc>,
) -> Option<Choice> {
    if let Some(v) = views
        .iter()
        .filter(|v| v.request.is_some())
        .min_by(|a, b| a.name.cmp(&b.name))
    {
        return Some(Choice {
            backup: v.name.clone(),
            pick: Pick::Requested(v.request.clone().unwrap_or_default()),
        });
    }
    if !due {
        return None;
    }
    if let Some(v) = views
        .iter()
        .filter_map(|v| Some((overdue(v, again_after, now)?, v)))
        .min_by(|(a, va), (b, vb)| (a, &va.name).cmp(&(b, &vb.name)))
        .map(|(_, v)| v)
    {
        return Some(Choice {
            backup: v.name.clone(),
            pick: Pick::Overdue,
        });
    }
    let group_drilled = |group: &Option<String>| {
        views
            .iter()
            .filter(|v| &v.schedule == group)
            .filter_map(|v| v.drilled)
            .max()
    };
    let newest_undrilled = views.iter().filter(|v| v.drilled.is_none()).min_by(|a, b| {
        (
            group_drilled(&a.schedule),
            &a.schedule,
            std::cmp::Reverse(a.completed),
            &a.name,
        )
            .cmp(&(
                group_drilled(&b.schedule),
                &b.schedule,
                std::cmp::Reverse(b.completed),
                &b.name,
            ))
    });
    newest_undrilled.map(|v| Choice {
        backup: v.name.clone(),
        pick: Pick::New,
    })
}

/// How many backups wait for a drill, and the one that completed first among them.
pub fn waiting(
    views: &[DrillView],
    again_after: Option<Duration>,
    now: DateTime<Utc>,
) -> (usize, Option<String>) {
    let mut waiting: Vec<&DrillView> = views
        .iter()
        .filter(|v| waits(v, again_after, now))
        .collect();
    waiting.sort_by(|a, b| (a.completed, &a.name).cmp(&(b.completed, &b.name)));
    (waiting.len(), waiting.first().map(|v| v.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(hour: u32) -> DateTime<Utc> {
        format!("2026-11-20T{hour:02}:00:00Z").parse().unwrap()
    }

    fn view(name: &str, schedule: Option<&str>, completed: u32, drilled: Option<u32>) -> DrillView {
        DrillView {
            name: name.into(),
            schedule: schedule.map(str::to_owned),
            completed: at(completed),
            drilled: drilled.map(at),
            request: None,
        }
    }

    #[test]
    fn the_next_drill_is_chosen_in_a_fixed_order() {
        let requested = DrillView {
            request: Some("r1".into()),
            ..view("n-3", Some("nightly"), 3, Some(4))
        };
        let day = Some(Duration::hours(10));
        type Case = (
            &'static str,
            Vec<DrillView>,
            bool,
            Option<Duration>,
            Option<(&'static str, Pick)>,
        );
        let cases: Vec<Case> = vec![
            ("nothing succeeded yet", vec![], true, day, None),
            (
                "a request goes first, due or not",
                vec![view("n-5", Some("nightly"), 5, None), requested.clone()],
                false,
                None,
                Some(("n-3", Pick::Requested("r1".into()))),
            ),
            (
                "not due: nothing else starts",
                vec![view("n-5", Some("nightly"), 5, None)],
                false,
                day,
                None,
            ),
            (
                "the newest never-drilled backup",
                vec![
                    view("n-1", Some("nightly"), 1, None),
                    view("n-5", Some("nightly"), 5, None),
                    view("n-3", Some("nightly"), 3, Some(4)),
                ],
                true,
                None,
                Some(("n-5", Pick::New)),
            ),
            (
                "schedules take turns: the one drilled longest ago goes first",
                vec![
                    view("h-9", Some("hourly"), 9, None),
                    view("h-8", Some("hourly"), 8, Some(9)),
                    view("w-2", Some("weekly"), 2, None),
                    view("w-1", Some("weekly"), 1, Some(3)),
                ],
                true,
                None,
                Some(("w-2", Pick::New)),
            ),
            (
                "a schedule never drilled goes before one drilled",
                vec![
                    view("h-9", Some("hourly"), 9, None),
                    view("h-8", Some("hourly"), 8, Some(9)),
                    view("manual", None, 2, None),
                ],
                true,
                None,
                Some(("manual", Pick::New)),
            ),
            (
                "older never-drilled backups come after the newest",
                vec![
                    view("n-1", Some("nightly"), 1, None),
                    view("n-5", Some("nightly"), 5, Some(6)),
                ],
                true,
                None,
                Some(("n-1", Pick::New)),
            ),
            (
                "every backup drilled, none again without everyBackupWithin",
                vec![view("n-1", Some("nightly"), 1, Some(2))],
                true,
                None,
                None,
            ),
            (
                "drilled again once older than everyBackupWithin, oldest drill first",
                vec![
                    view("n-1", Some("nightly"), 1, Some(3)),
                    view("n-2", Some("nightly"), 2, Some(2)),
                    view("n-5", Some("nightly"), 5, Some(20)),
                ],
                true,
                day,
                Some(("n-2", Pick::Overdue)),
            ),
            (
                "an overdue drill goes before a new backup",
                vec![
                    view("h-22", Some("hourly"), 22, None),
                    view("n-1", Some("nightly"), 1, Some(2)),
                ],
                true,
                day,
                Some(("n-1", Pick::Overdue)),
            ),
            (
                "a backup never drilled for longer than everyBackupWithin is overdue",
                vec![
                    view("n-1", Some("nightly"), 1, None),
                    view("n-20", Some("nightly"), 20, None),
                ],
                true,
                day,
                Some(("n-1", Pick::Overdue)),
            ),
            (
                "without everyBackupWithin the newest goes first",
                vec![
                    view("n-1", Some("nightly"), 1, None),
                    view("n-20", Some("nightly"), 20, None),
                ],
                true,
                None,
                Some(("n-20", Pick::New)),
            ),
            (
                "a drill within everyBackupWithin is not repeated",
                vec![view("n-5", Some("nightly"), 5, Some(20))],
                true,
                day,
                None,
            ),
        ];
        let now = at(23);
        for (name, views, due, again, want) in cases {
            let got = choose(&views, due, again, now).map(|c| (c.backup, c.pick));
            let want = want.map(|(b, p)| (b.to_owned(), p));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn waiting_backups_are_counted_oldest_first() {
        let now = at(23);
        let views = vec![
            view("n-5", Some("nightly"), 5, None),
            view("n-2", Some("nightly"), 2, Some(3)),
            view("n-1", Some("nightly"), 1, Some(20)),
            view("m-4", None, 4, None),
        ];
        assert_eq!(waiting(&views, None, now), (2, Some("m-4".to_owned())));
        // Overdue: n-2 (drilled at 3) and n-5 (never drilled, completed at 5, waits anyway).
        assert_eq!(
            waiting(&views, Some(Duration::hours(10)), now),
            (3, Some("n-2".to_owned()))
        );
        assert_eq!(waiting(&[], None, now), (0, None));
    }

    #[test]
    fn a_late_drill_still_starts_once() {
        let cron = CronSchedule::parse("0 * * * *", None).unwrap();
        let since = at(1);
        assert_eq!(due(&cron, None, since, at(1)), None, "not after since");
        assert_eq!(
            due(&cron, None, since, at(5) + Duration::minutes(30)),
            Some(at(5)),
            "only the latest missed time"
        );
        assert_eq!(
            due(&cron, Some(at(5)), since, at(5) + Duration::minutes(59)),
            None
        );
        assert_eq!(due(&cron, Some(at(5)), since, at(6)), Some(at(6)));
    }
}
