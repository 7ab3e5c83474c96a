//! What retention means for the archive: the newest backup from which the archive reaches its
//! latest point is the base of the current recovery window and is never removed; a segment
//! stays while a retained backup's chain uses it, or while no retained backup is past it (it
//! may yet serve one being taken). Pure; table-tested.

use chrono::{DateTime, Utc};

use super::manifest::SegmentManifest;
use super::window;
use crate::binlog::GtidPos;

/// A complete backup as retention sees it.
#[derive(Debug, Clone)]
pub struct BackupPoint {
    pub id: String,
    /// Its consistent point (`None` when it recorded none).
    pub point: Option<GtidPos>,
    /// When it finished.
    pub finished: DateTime<Utc>,
    /// The archive's timeline it recorded (`None`: none).
    pub timeline: Option<u32>,
    /// Whether the retention rules keep it.
    pub kept: bool,
}

impl BackupPoint {
    /// A backup as retention sees it (a consistent point that does not parse counts as none).
    pub fn of(backup: &bulwark_engine::repo::CompleteBackup, kept: bool) -> BackupPoint {
        BackupPoint {
            id: backup.manifest.id.clone(),
            finished: backup.manifest.finished_at,
            timeline: backup.manifest.binlog_timeline,
            point: backup
                .manifest
                .consistent_point
                .gtid_set
                .as_deref()
                .and_then(|p| GtidPos::parse(p).ok()),
            kept,
        }
    }
}

/// The archive's part of a prune.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArchivePrune {
    /// The backup the current window starts from, when the rules would remove it.
    pub rescued: Option<String>,
    /// Segments (indices) to remove.
    pub remove: Vec<usize>,
}

/// The base of the current recovery window: the newest backup from which the archive reaches
/// its latest point; `None` when none reaches it.
pub fn window_base<'a>(
    backups: &'a [BackupPoint],
    segments: &[SegmentManifest],
) -> Option<&'a BackupPoint> {
    let newest = segments
        .iter()
        .max_by_key(|s| (s.received_at, s.id.clone()))?;
    newest_of(backups.iter().filter_map(|b| {
        let point = b.point.as_ref()?;
        let reaches =
            window::chain_for(segments, point, b.timeline, None).reached == newest.through;
        reaches.then_some(((b.finished, b.id.as_str()), b, point))
    }))
}

/// When a backup finished, and its id: what tells apart backups at the same point.
pub type Finished<'a> = (DateTime<Utc>, &'a str);

/// Of backups whose chains all reach the archive's end, given with when they finished and their
/// consistent points, the newest: the one whose point covers every other's; of backups at the
/// same point, the one finished last.
pub fn newest_of<'a, T>(
    reaching: impl IntoIterator<Item = (Finished<'a>, T, &'a GtidPos)>,
) -> Option<T> {
    let mut base: Option<(Finished<'a>, T, &GtidPos)> = None;
    for (finished, b, point) in reaching {
        let newer = base
            .as_ref()
            .is_none_or(|(best, _, p)| point.covers(p) && (!p.covers(point) || finished > *best));
        if newer {
            base = Some((finished, b, point));
        }
    }
    base.map(|(_, b, _)| b)
}

/// Plans the archive's part of a prune. `backups` are in any order; `kept` reflects the rules.
pub fn plan(backups: &[BackupPoint], segments: &[SegmentManifest]) -> ArchivePrune {
    let mut out = ArchivePrune::default();
    let mut kept: Vec<&GtidPos> = backups
        .iter()
        .filter(|b| b.kept)
        .filter_map(|b| b.point.as_ref())
        .collect();
    if let Some(b) = window_base(backups, segments).filter(|b| !b.kept) {
        out.rescued = Some(b.id.clone());
        kept.extend(b.point.as_ref());
    }
    let mut used = vec![false; segments.len()];
    for point in &kept {
        for i in window::reachable(segments, point) {
            used[i] = true;
        }
    }
    out.remove = segments
        .iter()
        .enumerate()
        .filter(|(i, s)| !used[*i] && kept.iter().any(|p| p.covers(&s.through)))
        .map(|(i, _)| i)
        .collect();
    out
}

/// The segments no existing backup of `backups` can use: the archiver's own housekeeping,
/// where every backup still in the repository counts as retained (retention decides elsewhere
/// which backups go; once they are gone, so are the segments only they needed).
pub fn unneeded(
    backups: &[bulwark_engine::repo::CompleteBackup],
    segments: &[SegmentManifest],
) -> Vec<usize> {
    let points: Vec<BackupPoint> = backups.iter().map(|b| BackupPoint::of(b, true)).collect();
    plan(&points, segments).remove
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::{at, seg};

    fn b(id: &str, point: &str, kept: bool) -> BackupPoint {
        b_at(id, point, kept, 0)
    }

    fn b_at(id: &str, point: &str, kept: bool, finished: u32) -> BackupPoint {
        BackupPoint {
            id: id.into(),
            point: Some(GtidPos::parse(point).unwrap()),
            finished: at(finished),
            timeline: None,
            kept,
        }
    }

    fn removed(segs: &[SegmentManifest], p: &ArchivePrune) -> Vec<String> {
        p.remove.iter().map(|i| segs[*i].id.clone()).collect()
    }

    #[test]
    fn segments_before_the_oldest_kept_backup_go_the_rest_stay() {
        let segs = vec![
            seg("s1", "0-1-0", "0-1-10", 10),
            seg("s2", "0-1-10", "0-1-20", 20),
            seg("s3", "0-1-20", "0-1-30", 30),
            seg("s4", "0-1-30", "0-1-40", 40),
        ];
        let cases = [
            // (backups, rescued, removed)
            (
                vec![b("b1", "0-1-5", false), b("b2", "0-1-25", true)],
                None,
                vec!["s1", "s2"],
            ),
            (
                vec![b("b1", "0-1-5", true), b("b2", "0-1-25", true)],
                None,
                vec![],
            ),
            // The rules keep nothing: the newest backup reaching the end is kept anyway.
            (
                vec![b("b1", "0-1-5", false), b("b2", "0-1-25", false)],
                Some("b2"),
                vec!["s1", "s2"],
            ),
            // A backup at the very end: its chain is empty, everything before it goes.
            (
                vec![b("b3", "0-1-40", true)],
                None,
                vec!["s1", "s2", "s3", "s4"],
            ),
        ];
        for (backups, rescued, want) in cases {
            let p = plan(&backups, &segs);
            assert_eq!(p.rescued.as_deref(), rescued, "{backups:?}");
            assert_eq!(removed(&segs, &p), want, "{backups:?}");
        }
    }

    #[test]
    fn the_window_base_is_the_newest_backup_the_archive_continues_to_its_end() {
        let segs = vec![
            seg("s1", "0-1-0", "0-1-10", 10),
            seg("s2", "0-1-10", "0-1-20", 20),
            // A gap: binary logs purged before they were archived.
            seg("s3", "0-1-50", "0-1-60", 30),
        ];
        let no_point = BackupPoint {
            id: "bx".into(),
            point: None,
            finished: at(0),
            timeline: None,
            kept: true,
        };
        let base = |backups: &[BackupPoint]| window_base(backups, &segs).map(|b| b.id.clone());
        let cases = [
            // (backups, base)
            (vec![b("b1", "0-1-5", true), b("b2", "0-1-15", true)], None),
            (
                vec![b("b1", "0-1-5", true), b("b5", "0-1-55", true)],
                Some("b5"),
            ),
            (
                vec![b("b6", "0-1-58", true), b("b5", "0-1-55", true)],
                Some("b6"),
            ),
            // At the same point, the one finished last, whatever the ids.
            (
                vec![
                    b_at("b7-z", "0-1-55", true, 2),
                    b_at("b7-a", "0-1-55", true, 3),
                ],
                Some("b7-a"),
            ),
            (
                vec![
                    b_at("b7-a", "0-1-55", true, 3),
                    b_at("b7-z", "0-1-55", true, 2),
                ],
                Some("b7-a"),
            ),
            // A backup that recorded no GTID position continues nothing.
            (vec![b("b5", "0-1-55", true), no_point.clone()], Some("b5")),
            (vec![no_point], None),
            (vec![], None),
        ];
        for (backups, want) in cases {
            assert_eq!(base(&backups).as_deref(), want, "{backups:?}");
        }
        assert!(window_base(&[b("b1", "0-1-5", true)], &[]).is_none());
        // The rules would drop the base: it is rescued, and the segments before it go.
        let p = plan(&[b("b1", "0-1-5", true), b("b5", "0-1-55", false)], &segs);
        assert_eq!(p.rescued.as_deref(), Some("b5"));
        assert_eq!(removed(&segs, &p), Vec::<String>::new());
        let p = plan(&[b("b1", "0-1-5", false), b("b5", "0-1-55", false)], &segs);
        assert_eq!(removed(&segs, &p), vec!["s1", "s2"]);
    }

    #[test]
    fn segments_after_a_gap_wait_for_a_backup_past_them() {
        let segs = vec![
            seg("s1", "0-1-0", "0-1-10", 10),
            seg("after-gap", "0-1-50", "0-1-60", 50),
            seg("s3", "0-1-60", "0-1-70", 60),
        ];
        // Only a backup before the gap: the segments after it stay (a backup may be under way).
        let p = plan(&[b("b1", "0-1-5", true)], &segs);
        assert_eq!(removed(&segs, &p), Vec::<String>::new());
        // A backup past them: they serve nobody.
        let p = plan(&[b("b1", "0-1-5", true), b("b2", "0-1-65", true)], &segs);
        assert_eq!(removed(&segs, &p), vec!["after-gap"]);
    }
}
