//! Which archived segments continue which position: the chain a restore replays from a
//! backup's consistent point (exact continuity, one branch of history, the backup's own
//! timeline where branches hold the same GTIDs, the newest timeline or the branch holding a
//! GTID target), every segment any branch reaches (what retention keeps), and the gaps in the
//! archive. Pure; table-tested.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use chrono::{DateTime, Utc};

use super::history;
use super::manifest::SegmentManifest;
use crate::binlog::{Gtid, GtidPos};

/// The segments that continue a position, in replay order, and how far they reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Indices into the segment list, in replay order.
    pub segments: Vec<usize>,
    /// GTID position after the last chained segment (the start when none).
    pub reached: GtidPos,
    /// Commit stamp of the last chained transaction.
    pub last_commit: Option<DateTime<Utc>>,
    /// Timeline of the last chained segment.
    pub timeline: Option<u32>,
}

/// The chain from `start` along the newest history: see [`chain_toward`].
pub fn chain_from(segments: &[SegmentManifest], start: &GtidPos) -> Chain {
    chain_toward(segments, start, None)
}

/// The segments that continue `start`, exactly: the first passes through `start` (servers
/// included, [`history::continues`]) and each next one starts exactly where the one before
/// ends, so a chain never crosses from one branch of history to another however their
/// sequence numbers compare. Where the archive forks (after a failover the archiver steps
/// back to the last archived position the new primary has, and the old primary's lost tail
/// stays archived beside the survivor's history), the chain takes the branch that leads to
/// the highest timeline: the history the archiver followed last. With `target`, a branch
/// holding more of the target's GTIDs exactly comes first, so a GTID of a lost tail restores
/// that tail.
pub fn chain_toward(
    segments: &[SegmentManifest],
    start: &GtidPos,
    target: Option<&GtidPos>,
) -> Chain {
    chain_for(segments, start, None, target)
}

/// [`chain_toward`] for a start that belongs to timeline `belongs_to` (what a backup records,
/// [`super::belonging::backup_timeline`]). Two branches can hold the same GTIDs (a server that
/// lost its last transactions in a crash writes their numbers again under its own id), and
/// then the GTIDs cannot tell them apart; the timeline can. A later timeline that stepped back
/// to before the start (the start's own timeline or an older one holds transactions after
/// where it began, which it did not take) never continues it; one that simply went on (a
/// switchover, a failover that lost nothing) does. A path from exactly the start, or that
/// reaches the start's own timeline or a later one, comes before one that stays on an older
/// branch.
pub fn chain_for(
    segments: &[SegmentManifest],
    start: &GtidPos,
    belongs_to: Option<u32>,
    target: Option<&GtidPos>,
) -> Chain {
    let held: Vec<_> = segments.iter().map(history::held).collect();
    let starting_at = starting_at(segments);
    let stepped_back_before_start = |s: &SegmentManifest| {
        belongs_to.is_some_and(|t| {
            s.timeline > t
                && s.after != *start
                && segments
                    .iter()
                    .zip(&held)
                    .any(|(older, h)| older.timeline <= t && history::continues(older, h, &s.after))
        })
    };
    let heads: Vec<usize> = (0..segments.len())
        .filter(|i| {
            let s = &segments[*i];
            // The cheap test first: few segments continue the start.
            history::continues(s, &held[*i], start) && !stepped_back_before_start(s)
        })
        .collect();
    let mut paths = Paths {
        segments,
        held: &held,
        starting_at,
        start,
        belongs_to,
        target,
        memo: HashMap::new(),
        walking: HashSet::new(),
    };
    let best = paths.best(&heads);
    let last = best.last().map(|i| &segments[*i]);
    Chain {
        segments: best.to_vec(),
        reached: last.map_or_else(|| start.clone(), |s| s.through.clone()),
        last_commit: last.map(|s| s.last_commit),
        timeline: last.map(|s| s.timeline),
    }
}

/// Every segment on any branch of history that continues `start`: what retention keeps for a
/// backup at `start` (a lost tail stays restorable by its GTIDs as long as a backup before it).
pub fn reachable(segments: &[SegmentManifest], start: &GtidPos) -> Vec<usize> {
    let starting_at = starting_at(segments);
    let mut todo: Vec<usize> = (0..segments.len())
        .filter(|i| {
            let s = &segments[*i];
            history::continues(s, &history::held(s), start)
        })
        .collect();
    let mut seen: HashSet<usize> = todo.iter().copied().collect();
    while let Some(i) = todo.pop() {
        for next in starting_at.get(&segments[i].through).into_iter().flatten() {
            if seen.insert(*next) {
                todo.push(*next);
            }
        }
    }
    let mut out: Vec<usize> = seen.into_iter().collect();
    out.sort_unstable();
    out
}

/// Whether the history from `start` along `chain` holds `gtid` exactly: it is where the chain
/// starts, or one of its segments' transactions.
pub fn holds(segments: &[SegmentManifest], chain: &Chain, start: &GtidPos, gtid: Gtid) -> bool {
    start.ends_with(gtid)
        || chain
            .segments
            .iter()
            .any(|i| history::held(&segments[*i]).holds(gtid))
}

/// The segments (indices) by where they start: the candidates to continue each position.
fn starting_at(segments: &[SegmentManifest]) -> HashMap<&GtidPos, Vec<usize>> {
    let mut by_start: HashMap<&GtidPos, Vec<usize>> = HashMap::new();
    for (i, s) in segments.iter().enumerate() {
        by_start.entry(&s.after).or_default().push(i);
    }
    by_start
}

/// The paths through the archive's segments, each computed once.
struct Paths<'a> {
    segments: &'a [SegmentManifest],
    held: &'a [history::Held<'a>],
    starting_at: HashMap<&'a GtidPos, Vec<usize>>,
    /// Where the chain starts.
    start: &'a GtidPos,
    /// The start's own timeline, when known.
    belongs_to: Option<u32>,
    target: Option<&'a GtidPos>,
    /// The best path from each fork's branch.
    memo: HashMap<usize, Rc<Vec<usize>>>,
    /// Branches being walked (a loop of forged manifests ends there).
    walking: HashSet<usize>,
}

impl Paths<'_> {
    /// Of the paths starting with each of `heads`, the best.
    fn best(&mut self, heads: &[usize]) -> Rc<Vec<usize>> {
        let mut best: Option<Rc<Vec<usize>>> = None;
        for head in heads {
            let path = self.path(*head);
            if best
                .as_ref()
                .is_none_or(|b| self.rank(&path) > self.rank(b))
            {
                best = Some(path);
            }
        }
        best.unwrap_or_default()
    }

    /// The best path starting with segment `head`.
    fn path(&mut self, head: usize) -> Rc<Vec<usize>> {
        if let Some(p) = self.memo.get(&head) {
            return p.clone();
        }
        if !self.walking.insert(head) {
            return Rc::default();
        }
        let mut order = vec![head];
        let mut seen = HashSet::from([head]);
        let mut at = head;
        loop {
            let next = self
                .starting_at
                .get(&self.segments[at].through)
                .cloned()
                .unwrap_or_default();
            match next.as_slice() {
                [] => break,
                [one] if !seen.insert(*one) => break,
                [one] => {
                    order.push(*one);
                    at = *one;
                }
                forks if self.duplicates(forks) => {
                    // One segment committed twice (a commit retried after an answer was
                    // lost): the same transactions, so no choice; the last received is taken.
                    let pick = forks
                        .iter()
                        .copied()
                        .max_by_key(|i| (self.segments[*i].received_at, &self.segments[*i].id))
                        .expect("a fork has branches");
                    if !seen.insert(pick) {
                        break;
                    }
                    order.push(pick);
                    at = pick;
                }
                forks => {
                    order.extend(self.best(forks).iter());
                    break;
                }
            }
        }
        self.walking.remove(&head);
        let path = Rc::new(order);
        self.memo.insert(head, path.clone());
        path
    }

    /// Whether the branches of a fork hold the same transactions on the same timeline.
    fn duplicates(&self, forks: &[usize]) -> bool {
        let first = &self.segments[forks[0]];
        forks.iter().all(|i| {
            let s = &self.segments[*i];
            s.through == first.through && s.runs == first.runs && s.timeline == first.timeline
        })
    }

    /// What makes a path better: starting exactly at the start or reaching its own timeline
    /// or a later one (a path that stays on an older branch may hold other transactions under
    /// the same numbers), then holding more of the target's GTIDs exactly (those before a fork
    /// count for every branch alike), then reaching the highest timeline, then ending with the
    /// segment received last.
    fn rank(&self, path: &[usize]) -> (bool, usize, u32, DateTime<Utc>, String) {
        let own = self.belongs_to.is_none_or(|t| {
            path.first()
                .is_some_and(|i| self.segments[*i].after == *self.start)
                || path.iter().any(|i| self.segments[*i].timeline >= t)
        });
        let held = self.target.map_or(0, |t| {
            t.gtids()
                .filter(|g| path.iter().any(|i| self.held[*i].holds(*g)))
                .count()
        });
        match path.last().map(|i| &self.segments[*i]) {
            Some(s) => (own, held, s.timeline, s.received_at, s.id.clone()),
            None => (false, 0, 0, DateTime::<Utc>::MIN_UTC, String::new()),
        }
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

/// The runs of continuous segments, oldest first: each run's first segment is one that no
/// other ends exactly where it starts, as a chain continues. Every run but the first follows a
/// gap.
pub fn gaps(segments: &[SegmentManifest]) -> Vec<Gap> {
    let ends: HashSet<&GtidPos> = segments.iter().map(|s| &s.through).collect();
    let continues_one = |s: &SegmentManifest| ends.contains(&s.after);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::{pos, seg};

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

    /// A segment holding exactly `gtids`, on `timeline`.
    fn exact(
        id: &str,
        after: &str,
        gtids: &[&str],
        timeline: u32,
        received: u32,
    ) -> SegmentManifest {
        let mut s = seg(id, after, gtids.last().unwrap(), received);
        let mut through = pos(after);
        for g in gtids {
            let g = g.parse().unwrap();
            crate::archive::history::record(&mut s.runs, g);
            through.advance(g);
        }
        s.through = through;
        s.timeline = timeline;
        s
    }

    #[test]
    fn a_chain_never_crosses_into_another_branch_of_history() {
        // Server 1 archived 0-1-101..106, which server 2 never had; server 2 took over at
        // 0-1-100 and wrote only 0-2-101..102, whose numbers never pass the lost tail's.
        let segs = vec![
            exact("base", "0-1-90", &["0-1-95", "0-1-96", "0-1-97"], 1, 10),
            exact("y", "0-1-97", &["0-1-98", "0-1-99", "0-1-100"], 1, 11),
            exact(
                "lost1",
                "0-1-100",
                &["0-1-101", "0-1-102", "0-1-103"],
                1,
                12,
            ),
            exact(
                "lost2",
                "0-1-103",
                &["0-1-104", "0-1-105", "0-1-106"],
                1,
                13,
            ),
            exact("new", "0-1-100", &["0-2-101", "0-2-102"], 2, 30),
        ];
        // (start, GTID target, chain, reached, timeline reached)
        type Case<'a> = (&'a str, Option<&'a str>, Vec<&'a str>, &'a str, Option<u32>);
        let cases: Vec<Case> = vec![
            ("0-1-96", None, vec!["base", "y", "new"], "0-2-102", Some(2)),
            // A GTID of the lost tail: the chain that holds it.
            (
                "0-1-96",
                Some("0-1-105"),
                vec!["base", "y", "lost1", "lost2"],
                "0-1-106",
                Some(1),
            ),
            // A number both branches have, from the survivor's server.
            (
                "0-1-96",
                Some("0-2-102"),
                vec!["base", "y", "new"],
                "0-2-102",
                Some(2),
            ),
            // Inside the lost tail (a backup of the old primary): its own history only.
            ("0-1-104", None, vec!["lost2"], "0-1-106", Some(1)),
            // The survivor's numbers inside the lost tail's segments: only the survivor's.
            ("0-2-101", None, vec!["new"], "0-2-102", Some(2)),
            // Never archived on any branch.
            ("0-3-101", None, vec![], "0-3-101", None),
        ];
        for (start, target, want, reached, timeline) in cases {
            let target = target.map(pos);
            let chain = chain_toward(&segs, &pos(start), target.as_ref());
            assert_eq!(ids(&segs, &chain), want, "from {start} toward {target:?}");
            assert_eq!(chain.reached.to_string(), reached, "from {start}");
            assert_eq!(chain.timeline, timeline, "from {start}");
        }
        assert!(gaps(&segs).is_empty(), "{:?}", gaps(&segs));
        let names = |v: Vec<usize>| v.iter().map(|i| segs[*i].id.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(reachable(&segs, &pos("0-1-96"))),
            vec!["base", "y", "lost1", "lost2", "new"]
        );
        assert_eq!(
            names(reachable(&segs, &pos("0-1-101"))),
            vec!["lost1", "lost2"]
        );
    }

    #[test]
    fn a_backup_continues_its_own_timeline_where_two_hold_the_same_gtids() {
        // Server 1 archived 0-1-101..104 on timeline 1, lost 0-1-102..104 in a crash, and
        // after its restart wrote 0-1-102..103 again: timeline 2, from 0-1-101. The GTIDs of
        // the two branches are the same; their transactions are not.
        let segs = vec![
            exact("base", "0-1-90", &["0-1-100", "0-1-101"], 1, 10),
            exact("lost", "0-1-101", &["0-1-102", "0-1-103", "0-1-104"], 1, 11),
            exact("again", "0-1-101", &["0-1-102", "0-1-103"], 2, 40),
        ];
        // (start, its timeline, GTID target, chain)
        type Case<'a> = (&'a str, Option<u32>, Option<&'a str>, &'a [&'a str]);
        let cases: [Case; 7] = [
            // A backup taken before the crash, at a point timeline 2 wrote again.
            ("0-1-102", Some(1), None, &["lost"]),
            ("0-1-102", Some(1), Some("0-1-104"), &["lost"]),
            // One taken after the restart, on the new history, toward a GTID only the lost
            // tail has: not the lost tail (the target is then refused as not reached).
            ("0-1-102", Some(2), Some("0-1-104"), &["again"]),
            ("0-1-102", Some(2), None, &["again"]),
            // At the branch point both continue it; the newest is taken.
            ("0-1-101", Some(1), None, &["again"]),
            // Unknown (a backup from before timelines were recorded): the newest, as before.
            ("0-1-102", None, None, &["again"]),
            // At the branch point, toward the lost tail's last GTID: the lost tail.
            ("0-1-101", Some(2), Some("0-1-104"), &["lost"]),
        ];
        for (start, belongs_to, target, want) in cases {
            let target = target.map(pos);
            let chain = chain_for(&segs, &pos(start), belongs_to, target.as_ref());
            assert_eq!(
                ids(&segs, &chain),
                want,
                "from {start} on {belongs_to:?} toward {target:?}"
            );
        }
    }

    #[test]
    fn a_later_timeline_that_went_on_without_a_loss_continues_a_backup() {
        // The archive was at 0-1-101 on timeline 1 when the backup at 0-1-103 ended; a
        // switchover then started timeline 2 at 0-1-101, losing nothing.
        let segs = vec![
            exact("t1", "0-1-90", &["0-1-100", "0-1-101"], 1, 10),
            exact("t2", "0-1-101", &["0-1-102", "0-1-103", "0-1-104"], 2, 40),
        ];
        let chain = chain_for(&segs, &pos("0-1-103"), Some(1), None);
        assert_eq!(ids(&segs, &chain), ["t2"]);
        // A replica's point naming a domain of its own, at the end of timeline 1; timeline 2
        // began exactly there.
        let segs = vec![
            exact("t1", "0-1-90", &["0-1-100", "0-1-101"], 1, 10),
            exact("t2", "0-1-101", &["0-2-102", "0-2-103"], 2, 40),
        ];
        let chain = chain_for(&segs, &pos("0-1-101,7-9-5"), Some(1), None);
        assert_eq!(ids(&segs, &chain), ["t2"]);
    }

    #[test]
    fn forks_lead_to_the_newest_timeline_even_through_older_branches() {
        // Timeline 2 branched at 0-1-20 and was lost in turn; timeline 3 branched from
        // timeline 1 at 0-1-30, after timeline 2's branch point.
        let segs = vec![
            exact("a", "0-1-10", &["0-1-20"], 1, 10),
            exact("b", "0-1-20", &["0-1-30"], 1, 11),
            exact("c", "0-1-30", &["0-1-40"], 1, 12),
            exact("two", "0-1-20", &["0-2-21", "0-2-22"], 2, 20),
            exact("three", "0-1-30", &["0-3-31"], 3, 30),
        ];
        let chain = chain_from(&segs, &pos("0-1-10"));
        assert_eq!(ids(&segs, &chain), vec!["a", "b", "three"]);
        let chain = chain_from(&segs, &pos("0-2-21"));
        assert_eq!(ids(&segs, &chain), vec!["two"]);
    }

    #[test]
    fn archives_written_before_runs_and_odd_positions_still_chain() {
        // Written before runs: the first segment straddles a switchover (server 1 then 2).
        let segs = vec![
            seg("straddles", "0-1-95", "0-2-110", 10),
            seg("next", "0-2-110", "0-2-120", 11),
            // One segment committed twice (a retried commit): no choice to make.
            seg("twice-a", "0-2-120", "0-2-130", 12),
            seg("twice-b", "0-2-120", "0-2-130", 13),
            seg("after", "0-2-130", "0-2-140", 14),
        ];
        let cases = [
            // A backup on server 1 inside the straddling segment.
            ("0-1-98", vec!["straddles", "next", "twice-b", "after"]),
            // A replica's own domain the archive never names.
            ("0-2-115,7-9-3", vec!["next", "twice-b", "after"]),
            // A replica that applied domain 1 past domain 0's segment (parallel apply).
            ("0-2-112,1-2-40", vec!["next", "twice-b", "after"]),
        ];
        for (start, want) in cases {
            let chain = chain_from(&segs, &pos(start));
            assert_eq!(ids(&segs, &chain), want, "from {start}");
        }
    }

    #[test]
    fn a_target_of_several_domains_picks_the_branch_holding_the_rest() {
        let segs = vec![
            exact("base", "0-1-10,1-1-5", &["1-1-6", "0-1-11"], 1, 10),
            exact("lost", "0-1-11,1-1-6", &["0-1-12", "1-1-7"], 1, 11),
            exact("new", "0-1-11,1-1-6", &["0-2-12"], 2, 20),
        ];
        // 1-1-6 is before the fork; 1-1-7 only on the lost branch.
        let target = pos("0-1-12,1-1-7");
        let chain = chain_toward(&segs, &pos("0-1-10,1-1-5"), Some(&target));
        assert_eq!(ids(&segs, &chain), vec!["base", "lost"]);
        let start = pos("0-1-10,1-1-5");
        assert!(holds(&segs, &chain, &start, "1-1-6".parse().unwrap()));
        assert!(!holds(&segs, &chain, &start, "0-2-12".parse().unwrap()));
    }

    #[test]
    fn forged_manifests_that_loop_end_the_chain() {
        let a = seg("a", "0-1-10", "0-2-11", 10);
        let b = seg("b", "0-2-11", "0-1-10", 11);
        let chain = chain_from(&[a.clone(), b.clone()], &pos("0-1-10"));
        assert_eq!(ids(&[a, b], &chain), vec!["a", "b"]);
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
}
