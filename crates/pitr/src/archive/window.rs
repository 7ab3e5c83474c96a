//! Which archived segments continue which position: the chain a restore replays from a
//! backup's consistent point, the recovery window that chain gives, the gaps in the archive,
//! and whether a restore target lies inside a window. Pure; table-tested.

use chrono::{DateTime, NaiveDateTime, Utc};

use super::manifest::SegmentManifest;
use crate::binlog::GtidPos;

/// The segments that continue a position, in replay order, and how far they reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Indices into the segment list, in replay order.
    pub segments: Vec<usize>,
    /// GTID position after the last chained segment (the start when none).
    pub reached: GtidPos,
    /// Commit stamp of the last chained transaction.
    pub last_commit: Option<DateTime<Utc>>,
}

/// The segments that continue `start`. A segment continues a position when it starts at or
/// before it and ends beyond it. When several do, the one received last wins: after a failover
/// the archiver follows the surviving primary from the last position that primary has, so a
/// segment received later holds the history that survived.
pub fn chain_from(segments: &[SegmentManifest], start: &GtidPos) -> Chain {
    let mut chain = Chain {
        segments: Vec::new(),
        reached: start.clone(),
        last_commit: None,
    };
    loop {
        let next = segments
            .iter()
            .enumerate()
            .filter(|(_, s)| chain.reached.covers(&s.after) && !chain.reached.covers(&s.through))
            .max_by(|(_, a), (_, b)| (a.received_at, &a.id).cmp(&(b.received_at, &b.id)));
        let Some((i, s)) = next else {
            return chain;
        };
        chain.segments.push(i);
        chain.reached = s.through.clone();
        chain.last_commit = Some(s.last_commit);
    }
}

/// A break in the archive: no segment ends where a later run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// Where the archive stopped being continuous (`None` when nothing came before).
    pub after: Option<GtidPos>,
    /// Where it resumed.
    pub resumed_at: GtidPos,
    /// When the first segment after the gap was received.
    pub resumed_received: DateTime<Utc>,
}

/// The runs of continuous segments, oldest first: each run's first segment is one that
/// continues no other. Every run but the first follows a gap.
pub fn gaps(segments: &[SegmentManifest]) -> Vec<Gap> {
    // A segment continues another that starts before it and ends at or after its start.
    let continues_one = |s: &SegmentManifest| {
        segments
            .iter()
            .any(|t| t.after != s.after && s.after.covers(&t.after) && t.through.covers(&s.after))
    };
    let mut starts: Vec<&SegmentManifest> = segments.iter().filter(|s| !continues_one(s)).collect();
    starts.sort_by_key(|s| (s.received_at, s.id.clone()));
    starts.dedup_by(|a, b| a.after == b.after);
    starts
        .iter()
        .skip(1)
        .map(|s| Gap {
            after: segments
                .iter()
                .filter(|t| t.received_at < s.received_at)
                .max_by_key(|t| (t.received_at, t.id.clone()))
                .map(|t| t.through.clone()),
            resumed_at: s.after.clone(),
            resumed_received: s.received_at,
        })
        .collect()
}

/// What a point-in-time restore replays up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryTarget {
    /// Everything the archive holds after the backup.
    Latest,
    /// Every transaction up to and including this position.
    Gtid(GtidPos),
    /// Every transaction whose commit is stamped at or before this second.
    Time(DateTime<Utc>),
}

impl std::fmt::Display for RecoveryTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryTarget::Latest => f.write_str("the latest archived transaction"),
            RecoveryTarget::Gtid(p) => write!(f, "GTID {p}"),
            RecoveryTarget::Time(t) => write!(f, "{}", t.format("%Y-%m-%dT%H:%M:%SZ")),
        }
    }
}

impl RecoveryTarget {
    /// `latest`, an RFC 3339 time, or `YYYY-MM-DD HH:MM:SS` (UTC); whole seconds only, since
    /// MariaDB stamps binlog events with the second their statement started.
    pub fn parse_time(s: &str) -> Result<RecoveryTarget, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("latest") {
            return Ok(RecoveryTarget::Latest);
        }
        let t = DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").map(|t| t.and_utc()))
            .map_err(|_| format!("{s:?} is not `latest` or a time like 2026-11-25T03:15:00Z"))?;
        if t.timestamp_subsec_nanos() != 0 {
            return Err(format!(
                "{s:?} has a fraction of a second; MariaDB stamps binlog events with whole \
                 seconds, so give a whole second or a GTID position"
            ));
        }
        Ok(RecoveryTarget::Time(t))
    }

    /// A MariaDB GTID position (`0-1-5012`, one per domain, comma-separated).
    pub fn parse_gtid(s: &str) -> Result<RecoveryTarget, String> {
        let pos = GtidPos::parse(s)?;
        if pos.is_empty() {
            return Err("the GTID position is empty".into());
        }
        Ok(RecoveryTarget::Gtid(pos))
    }
}

/// A backup's recovery window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The backup's consistent point.
    pub from: GtidPos,
    /// When the backup finished (nothing earlier can be restored from it).
    pub from_time: DateTime<Utc>,
    /// How far the archive reaches from it.
    pub to: GtidPos,
    /// Commit stamp of the last transaction reachable (the backup's time when none).
    pub to_time: DateTime<Utc>,
}

impl Window {
    /// The window of a backup at `from` (finished at `from_time`) given its chain.
    pub fn of(from: GtidPos, from_time: DateTime<Utc>, chain: &Chain) -> Window {
        Window {
            to: chain.reached.clone(),
            to_time: chain.last_commit.map_or(from_time, |t| t.max(from_time)),
            from,
            from_time,
        }
    }

    /// `from .. to` for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}) .. {} ({})",
            show(&self.from),
            self.from_time.format("%Y-%m-%dT%H:%M:%SZ"),
            show(&self.to),
            self.to_time.format("%Y-%m-%dT%H:%M:%SZ")
        )
    }

    /// Checks that `target` is inside the window; the error is one line naming the window.
    pub fn check(&self, target: &RecoveryTarget) -> Result<(), String> {
        let inside = match target {
            RecoveryTarget::Latest => true,
            RecoveryTarget::Gtid(p) => self.to.covers(p) && !self.from.covers(p) || self.from == *p,
            RecoveryTarget::Time(t) => *t >= self.from_time && *t <= self.to_time,
        };
        if inside {
            Ok(())
        } else {
            Err(format!(
                "{target} is outside the recovery window {}",
                self.describe()
            ))
        }
    }
}

fn show(p: &GtidPos) -> String {
    if p.is_empty() {
        "(empty)".into()
    } else {
        p.to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::archive::manifest::{ArchiveSource, ARCHIVE_FORMAT_NAME};
    use bulwark_engine::format::{Chunking, PlaintextInfo};

    pub fn at(s: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_795_000_000 + i64::from(s), 0).unwrap()
    }

    pub fn pos(s: &str) -> GtidPos {
        GtidPos::parse(s).unwrap()
    }

    pub fn seg(id: &str, after: &str, through: &str, received: u32) -> SegmentManifest {
        SegmentManifest {
            format: ARCHIVE_FORMAT_NAME.into(),
            format_version: 1,
            id: id.into(),
            source: ArchiveSource {
                host: "db-0".into(),
                server_id: 1,
                server_version: "10.11".into(),
            },
            after: pos(after),
            through: pos(through),
            first_gtid: String::new(),
            last_gtid: String::new(),
            transactions: 1,
            first_commit: at(received - 1),
            last_commit: at(received),
            received_at: at(received),
            chunking: Chunking {
                chunk_size: 1,
                compression: "zstd".into(),
                compression_level: 1,
            },
            encryption: None,
            plaintext: PlaintextInfo {
                bytes: 0,
                chunks: 0,
                sha256: String::new(),
            },
            stored_bytes: 0,
            segments: vec![],
            replaces: vec![],
            compacted_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{at, pos, seg};
    use super::*;

    fn ids(segments: &[SegmentManifest], chain: &Chain) -> Vec<String> {
        chain
            .segments
            .iter()
            .map(|i| segments[*i].id.clone())
            .collect()
    }

    #[test]
    fn chains_start_inside_a_segment_and_follow_positions() {
        let segs = vec![
            seg("a", "0-1-10", "0-1-20", 10),
            seg("b", "0-1-20", "0-1-30", 15),
            seg("c", "0-1-30", "0-2-45", 20),
            seg("z", "0-1-60", "0-1-70", 40),
        ];
        let cases = [
            ("0-1-10", vec!["a", "b", "c"], "0-2-45"),
            ("0-1-15", vec!["a", "b", "c"], "0-2-45"),
            ("0-1-20", vec!["b", "c"], "0-2-45"),
            ("0-2-45", vec![], "0-2-45"),
            ("0-1-5", vec![], "0-1-5"),
            ("0-1-65", vec!["z"], "0-1-70"),
        ];
        for (start, want, reached) in cases {
            let chain = chain_from(&segs, &pos(start));
            assert_eq!(ids(&segs, &chain), want, "from {start}");
            assert_eq!(chain.reached.to_string(), reached, "from {start}");
        }
    }

    #[test]
    fn a_segment_received_later_supersedes_an_overlapping_one() {
        // The old primary's 0-1-21..25 reached the archive but not the new primary, which
        // went on from 0-1-20 as server 2.
        let segs = vec![
            seg("a", "0-1-10", "0-1-20", 10),
            seg("orphan", "0-1-20", "0-1-25", 11),
            seg("new", "0-1-20", "0-2-40", 30),
        ];
        let chain = chain_from(&segs, &pos("0-1-10"));
        assert_eq!(ids(&segs, &chain), vec!["a", "new"]);
    }

    #[test]
    fn gaps_are_where_runs_restart() {
        let segs = vec![
            seg("a", "0-1-10", "0-1-20", 10),
            seg("b", "0-1-20", "0-1-30", 15),
            seg("c", "0-1-50", "0-1-60", 40),
            seg("d", "0-1-60", "0-1-61", 41),
        ];
        let found = gaps(&segs);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].after, Some(pos("0-1-30")));
        assert_eq!(found[0].resumed_at, pos("0-1-50"));
        assert!(gaps(&segs[..2]).is_empty());
    }

    #[test]
    fn targets_outside_the_window_are_refused_naming_it() {
        let segs = vec![
            seg("a", "0-1-10", "0-1-20", 100),
            seg("b", "0-1-20", "0-1-30", 200),
        ];
        let w = Window::of(pos("0-1-12"), at(50), &chain_from(&segs, &pos("0-1-12")));
        let cases = [
            (RecoveryTarget::Latest, None),
            (RecoveryTarget::Gtid(pos("0-1-25")), None),
            (RecoveryTarget::Gtid(pos("0-1-12")), None),
            (
                RecoveryTarget::Gtid(pos("0-1-31")),
                Some("GTID 0-1-31 is outside"),
            ),
            (
                RecoveryTarget::Gtid(pos("0-1-11")),
                Some("GTID 0-1-11 is outside"),
            ),
            (RecoveryTarget::Time(at(150)), None),
            (
                RecoveryTarget::Time(at(49)),
                Some("is outside the recovery window 0-1-12"),
            ),
            (RecoveryTarget::Time(at(201)), Some("outside")),
        ];
        for (target, want) in cases {
            match (w.check(&target), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{e}"),
                (r, _) => panic!("{target}: {r:?}"),
            }
        }
        assert_eq!(
            w.describe(),
            "0-1-12 (2026-11-18T11:07:30Z) .. 0-1-30 (2026-11-18T11:10:00Z)"
        );
    }
}
