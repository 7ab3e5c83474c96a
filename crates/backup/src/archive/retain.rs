//! What retention means for the archive: the newest backup from which the archive reaches its
//! latest point is the base of the current recovery window and is never removed; a segment
//! stays while a retained backup's chain uses it, or while no retained backup is past it (it
//! may yet serve one being taken). Pure; table-tested.

use super::manifest::SegmentManifest;
use super::window;
use crate::binlog::GtidPos;

/// A complete backup as retention sees it.
#[derive(Debug, Clone)]
pub struct BackupPoint {
    pub id: String,
    /// Its consistent point (`None` when it recorded none).
    pub point: Option<GtidPos>,
    /// Whether the retention rules keep it.
    pub kept: bool,
}

impl BackupPoint {
    /// A backup as retention sees it (a consistent point that does not parse counts as none).
    pub fn of(backup: &crate::repo::CompleteBackup, kept: bool) -> BackupPoint {
        BackupPoint {
            id: backup.manifest.id.clone(),
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
/// its latest point (its point covers every other such backup's); `None` when none reaches it.
pub fn window_base<'a>(
    backups: &'a [BackupPoint],
    segments: &[SegmentManifest],
) -> Option<&'a BackupPoint> {
    let newest = segments
        .iter()
        .max_by_key(|s| (s.received_at, s.id.clone()))?;
    let mut base: Option<(&BackupPoint, &GtidPos)> = None;
    for b in backups {
        let Some(point) = &b.point else { continue };
        let reaches = window::chain_from(segments, point)
            .reached
            .covers(&newest.through);
        if reaches && base.is_none_or(|(_, p)| point.covers(p)) {
            base = Some((b, point));
        }
    }
    base.map(|(b, _)| b)
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
        for i in window::chain_from(segments, point).segments {
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
    backups: &[crate::repo::CompleteBackup],
    segments: &[SegmentManifest],
) -> Vec<usize> {
    let points: Vec<BackupPoint> = backups.iter().map(|b| BackupPoint::of(b, true)).collect();
    plan(&points, segments).remove
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::seg;

    fn b(id: &str, point: &str, kept: bool) -> BackupPoint {
        BackupPoint {
            id: id.into(),
            point: Some(GtidPos::parse(point).unwrap()),
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
