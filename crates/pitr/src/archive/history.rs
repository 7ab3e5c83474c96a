//! Which history a segment belongs to, exactly. Two branches of history reuse the same
//! sequence numbers (an old primary's lost tail and the survivor's new transactions are both
//! `0-?-101`), so a segment records the runs of GTIDs it holds, servers included, and the
//! timeline the archiver was following when it wrote them. Whether a segment continues a
//! position is decided here, from those records; the chains ([`super::window`]) and the
//! replay's own checks build on it. Pure; table-tested.

use super::manifest::SegmentManifest;
pub use super::manifest::FIRST_TIMELINE;
pub use crate::binlog::runs::{holds, record, GtidRun};
use crate::binlog::{Gtid, GtidPos};

/// What a segment's manifest says it holds.
#[derive(Debug, Clone)]
pub enum Held<'a> {
    /// Exactly these GTIDs, servers included.
    Exact(&'a [GtidRun]),
    /// Written before runs were recorded: per domain, the numbers after its start up to its
    /// end, from whichever server (such a segment may straddle a server change). The replay
    /// checks the servers transaction by transaction.
    Numbers(Vec<GtidRun>),
}

impl Held<'_> {
    /// Whether `gtid` is one of the transactions held.
    pub fn holds(&self, gtid: Gtid) -> bool {
        match self {
            Held::Exact(runs) => holds(runs, gtid),
            Held::Numbers(ranges) => ranges
                .iter()
                .any(|r| r.domain == gtid.domain && (r.first..=r.last).contains(&gtid.seq)),
        }
    }
}

/// What `seg` holds ([`Held`]).
pub fn held(seg: &SegmentManifest) -> Held<'_> {
    if !seg.runs.is_empty() {
        return Held::Exact(&seg.runs);
    }
    Held::Numbers(
        seg.through
            .gtids()
            .filter(|end| !seg.after.ends_with(*end))
            .map(|end| GtidRun {
                domain: end.domain,
                server: end.server,
                first: seg.after.get(end.domain).map_or(0, |a| a.seq + 1),
                last: end.seq,
            })
            .collect(),
    )
}

/// Whether `pos` can be a point of `seg`'s history: in every domain either where the segment
/// starts, or exactly one of its transactions, or past all of them (a replica applying
/// several domains in parallel stops at a point that is no prefix of the log; the replay
/// skips those and must meet the position's own transaction exactly in a later segment), or a
/// domain the segment never names (a replica's own).
pub fn passes_through(seg: &SegmentManifest, held: &Held<'_>, pos: &GtidPos) -> bool {
    let domains = pos
        .gtids()
        .chain(seg.after.gtids())
        .chain(seg.through.gtids())
        .map(|g| g.domain);
    let mut placed = true;
    for d in domains {
        let (p, a, t) = (pos.get(d), seg.after.get(d), seg.through.get(d));
        placed &= match p {
            _ if p == a => true,
            None => false,
            Some(p) => held.holds(p) || t.is_none_or(|t| p.seq > t.seq),
        };
    }
    placed
}

/// Whether `seg` continues the history at `pos`: `pos` can be a point of its history and it
/// holds transactions after it.
pub fn continues(seg: &SegmentManifest, held: &Held<'_>, pos: &GtidPos) -> bool {
    let more = seg
        .through
        .gtids()
        .any(|t| pos.get(t.domain).is_none_or(|p| t.seq > p.seq));
    more && passes_through(seg, held, pos)
}

/// One timeline of an archive, as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    pub timeline: u32,
    /// Where its first segment starts.
    pub began_at: GtidPos,
    /// The timeline whose segment ends where this one began (`None` for a first timeline or
    /// after a gap).
    pub parent: Option<u32>,
    /// An older timeline that also went on from where this one began (a failover that lost
    /// the transactions archived there), and how far it reaches.
    pub left_behind: Option<(u32, GtidPos)>,
    /// Where its newest segment ends.
    pub through: GtidPos,
    pub segments: usize,
    /// The servers its segments were streamed from.
    pub server_ids: Vec<u32>,
    pub first_received: chrono::DateTime<chrono::Utc>,
    pub last_received: chrono::DateTime<chrono::Utc>,
}

/// The archive's timelines, in order.
pub fn timelines(segments: &[SegmentManifest]) -> Vec<Timeline> {
    let mut out: Vec<Timeline> = Vec::new();
    let mut ordered: Vec<&SegmentManifest> = segments.iter().collect();
    ordered.sort_by_key(|s| (s.timeline, s.received_at, s.id.clone()));
    for s in ordered {
        match out.last_mut().filter(|t| t.timeline == s.timeline) {
            Some(t) => {
                t.through = s.through.clone();
                t.segments += 1;
                t.last_received = s.received_at;
                if !t.server_ids.contains(&s.source.server_id) {
                    t.server_ids.push(s.source.server_id);
                }
            }
            None => out.push(Timeline {
                timeline: s.timeline,
                began_at: s.after.clone(),
                parent: None,
                left_behind: None,
                through: s.through.clone(),
                segments: 1,
                server_ids: vec![s.source.server_id],
                first_received: s.received_at,
                last_received: s.received_at,
            }),
        }
    }
    let ends: Vec<(u32, GtidPos)> = out
        .iter()
        .map(|t| (t.timeline, t.through.clone()))
        .collect();
    for t in &mut out {
        t.parent = segments
            .iter()
            .filter(|s| s.timeline < t.timeline && s.through == t.began_at)
            .map(|s| s.timeline)
            .max();
        let other = segments
            .iter()
            .filter(|s| s.timeline < t.timeline && s.after == t.began_at)
            .map(|s| s.timeline)
            .max();
        t.left_behind = other.and_then(|o| ends.iter().find(|(tl, _)| *tl == o).cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::{pos, seg};

    fn g(s: &str) -> crate::binlog::Gtid {
        s.parse().unwrap()
    }

    #[test]
    fn a_segment_continues_only_its_own_history() {
        let mut recorded = seg("s", "0-1-100", "0-2-105", 10);
        for gtid in ["0-1-101", "0-1-102", "0-2-103", "0-2-104", "0-2-105"] {
            record(&mut recorded.runs, g(gtid));
        }
        // Written before runs: all of it taken as server 2's.
        let older = seg("o", "0-1-100", "0-2-105", 10);
        let cases = [
            (&recorded, "0-1-100", true),
            (&recorded, "0-1-102", true),
            (&recorded, "0-2-102", false),
            (&recorded, "0-1-103", false),
            (&recorded, "0-2-104", true),
            (&recorded, "0-2-105", false),
            (&recorded, "0-1-99", false),
            (&recorded, "0-1-104,1-1-1", false),
            (&older, "0-1-100", true),
            (&older, "0-2-103", true),
            // By number only: it may straddle a server change.
            (&older, "0-1-103", true),
            (&older, "0-9-100", false),
        ];
        for (s, at, want) in cases {
            assert_eq!(continues(s, &held(s), &pos(at)), want, "{} from {at}", s.id);
        }
    }

    #[test]
    fn timelines_say_where_each_branched() {
        let on = |id: &str, after: &str, through: &str, timeline: u32, received: u32| {
            let mut s = seg(id, after, through, received);
            s.timeline = timeline;
            s.source.server_id = timeline;
            s
        };
        let segs = vec![
            on("a", "0-1-10", "0-1-20", 1, 10),
            on("b", "0-1-20", "0-1-30", 1, 11),
            on("c", "0-1-30", "0-1-35", 1, 12),
            on("d", "0-1-30", "0-2-33", 2, 20),
            on("e", "0-2-33", "0-2-40", 2, 21),
            on("f", "0-2-90", "0-2-95", 2, 40),
        ];
        let show = |segs: &[SegmentManifest]| {
            timelines(segs)
                .into_iter()
                .map(|t| {
                    (
                        t.timeline,
                        t.began_at.to_string(),
                        t.parent,
                        t.left_behind.map(|(tl, p)| format!("{tl}:{p}")),
                        t.through.to_string(),
                        t.segments,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            show(&segs),
            vec![
                (1, "0-1-10".into(), None, None, "0-1-35".into(), 3),
                (
                    2,
                    "0-1-30".into(),
                    Some(1),
                    Some("1:0-1-35".into()),
                    "0-2-95".into(),
                    3
                ),
            ]
        );
        // A switchover: the new timeline continues the old one where it ended. Then a failover
        // to a server that has none of timeline 2: all of it is left behind.
        let mut switched = vec![
            on("a", "0-1-10", "0-1-20", 1, 10),
            on("b", "0-1-20", "0-2-25", 2, 20),
        ];
        assert_eq!(
            show(&switched)[1],
            (2, "0-1-20".into(), Some(1), None, "0-2-25".into(), 1)
        );
        switched.push(on("c", "0-1-20", "0-3-21", 3, 30));
        assert_eq!(
            show(&switched)[2],
            (
                3,
                "0-1-20".into(),
                Some(1),
                Some("2:0-2-25".into()),
                "0-3-21".into(),
                1
            )
        );
    }
}
