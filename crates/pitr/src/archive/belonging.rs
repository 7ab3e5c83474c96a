//! Which timeline of an archive a backup belongs to, decided when the backup ends and recorded
//! in its manifest: what tells two branches apart once they hold the same GTIDs (a server that
//! lost its last transactions in a crash, or was rebuilt from an older copy, writes their
//! numbers again under its own id). Pure; table-tested.

use chrono::{DateTime, Utc};

use super::coverage::Coverage;
use super::history;
use super::manifest::SegmentManifest;
use crate::binlog::GtidPos;

/// The timeline of the archive a backup at `point`, begun at `started`, belongs to, or `None`
/// when the archive cannot say:
/// - only an archive seen following its server while the backup ran (a segment received, or a
///   quiet period recorded, since `started`) is asked: an archiver still reconnecting after a
///   crash has not yet stepped back onto the server's new history, and its newest timeline
///   would be the old one;
/// - the newest timeline, when it holds `point` or has not reached it yet (the archiver is a
///   few seconds behind the server it follows);
/// - else the newest timeline holding `point` exactly (the backup came from a server still on
///   an older branch).
pub fn backup_timeline(
    segments: &[SegmentManifest],
    coverage: Option<&Coverage>,
    point: &GtidPos,
    started: DateTime<Utc>,
) -> Option<u32> {
    if point.is_empty() || last_seen(segments, coverage).is_none_or(|at| at < started) {
        return None;
    }
    let holds_point = |s: &SegmentManifest| {
        let held = history::held(s);
        history::passes_through(s, &held, point)
            && point.gtids().any(|g| held.holds(g) || s.after.ends_with(g))
    };
    let newest = segments.iter().map(|s| s.timeline).max()?;
    let newest_end = segments
        .iter()
        .filter(|s| s.timeline == newest)
        .max_by_key(|s| (s.received_at, s.id.clone()))
        .map(|s| &s.through)?;
    let behind = point.covers(newest_end) && point != newest_end;
    let holding: Vec<u32> = segments
        .iter()
        .filter(|s| holds_point(s))
        .map(|s| s.timeline)
        .collect();
    if behind || holding.contains(&newest) {
        return Some(newest);
    }
    holding.into_iter().max()
}

/// When the archive last showed its archiver following the server: the newest segment
/// received, or the end of the newest quiet period recorded.
pub fn last_seen(
    segments: &[SegmentManifest],
    coverage: Option<&Coverage>,
) -> Option<DateTime<Utc>> {
    let received = segments.iter().map(|s| s.received_at).max();
    received.max(coverage.map(|c| c.covered_until))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::{at, pos, seg};

    /// A segment on `timeline` holding exactly the transactions after `after` through
    /// `through` (domain 0, all by `through`'s server), received at `received` seconds.
    fn on(id: &str, after: &str, through: &str, timeline: u32, received: u32) -> SegmentManifest {
        let mut s = seg(id, after, through, received);
        let end = s.through.get(0).expect("domain 0");
        let first = s.after.get(0).map_or(1, |a| a.seq + 1);
        for seq in first..=end.seq {
            history::record(&mut s.runs, crate::binlog::Gtid { seq, ..end });
        }
        s.timeline = timeline;
        s
    }

    fn covered(through: &str, until: u32) -> Coverage {
        Coverage {
            archive: "default".into(),
            timeline: 1,
            through: pos(through),
            covered_until: at(until),
        }
    }

    #[test]
    fn a_backup_belongs_to_the_timeline_that_held_its_point_when_it_ended() {
        // Timeline 1: 0-1-101..103, the last ones lost in a crash; timeline 2: the same server
        // writing 0-1-101.. again after its restart.
        let crash = vec![
            on("t1", "0-1-100", "0-1-103", 1, 10),
            on("t2", "0-1-100", "0-1-102", 2, 40),
        ];
        // (what, segments, coverage, point, started, timeline)
        type Case<'a> = (
            &'a str,
            Vec<SegmentManifest>,
            Option<Coverage>,
            &'a str,
            u32,
            Option<u32>,
        );
        let cases: Vec<Case> = vec![
            (
                "before the crash: only timeline 1 holds it",
                crash[..1].to_vec(),
                None,
                "0-1-102",
                5,
                Some(1),
            ),
            (
                "after the restart, both hold the numbers: the newest",
                crash.clone(),
                None,
                "0-1-102",
                30,
                Some(2),
            ),
            (
                "the archive a few seconds behind the server it follows",
                crash.clone(),
                None,
                "0-1-104",
                30,
                Some(2),
            ),
            (
                "a server still on the older branch (a lagging replica)",
                vec![
                    on("t1", "0-1-100", "0-1-103", 1, 10),
                    on("t2", "0-1-103", "0-2-110", 2, 40),
                ],
                None,
                "0-1-102",
                30,
                Some(1),
            ),
            (
                "nothing received since the backup began: not known",
                crash.clone(),
                None,
                "0-1-102",
                41,
                None,
            ),
            (
                "a quiet period recorded since the backup began",
                crash[..1].to_vec(),
                Some(covered("0-1-103", 50)),
                "0-1-103",
                45,
                Some(1),
            ),
            (
                "a point no timeline holds nor is behind",
                vec![on("t1", "0-1-100", "0-1-103", 1, 10)],
                None,
                "0-2-102",
                5,
                None,
            ),
            ("an empty archive", vec![], None, "0-1-102", 5, None),
            ("no point", crash.clone(), None, "", 5, None),
        ];
        for (what, segments, coverage, point, started, want) in cases {
            let got = backup_timeline(&segments, coverage.as_ref(), &pos(point), at(started));
            assert_eq!(got, want, "{what}");
        }
    }
}
