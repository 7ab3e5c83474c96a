//! Table tests of compaction planning and merging.

use super::*;
use crate::archive::replay::Selector;
use crate::archive::window::tests_support::{at, pos, seg};
use crate::archive::window::{self, RecoveryTarget};
use crate::binlog::event::{build, gtid_body, kind, query_body};

/// `tests_support::at(0)` lies 3200 s before the end of its hour: offsets 0..3199 share one
/// hour, 3200..6799 the next.
const HOUR: u32 = 3200;

fn rules(max_bytes: u64) -> CompactRules {
    CompactRules {
        span: Duration::hours(1),
        max_bytes,
        grace: Duration::hours(1),
    }
}

fn sized(mut s: SegmentManifest, bytes: u64) -> SegmentManifest {
    s.plaintext.bytes = bytes;
    s
}

fn ids(segs: &[SegmentManifest], groups: &[Vec<usize>]) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|g| g.iter().map(|i| segs[*i].id.clone()).collect())
        .collect()
}

#[test]
fn runs_within_a_past_hour_merge_and_the_current_hour_waits() {
    let segs = vec![
        seg("a", "0-1-10", "0-1-20", 100),
        seg("b", "0-1-20", "0-1-30", 200),
        seg("c", "0-1-30", "0-1-40", 300),
        // The next hour.
        seg("d", "0-1-40", "0-1-50", HOUR + 10),
        seg("e", "0-1-50", "0-1-60", HOUR + 20),
    ];
    let cases = [
        // Before the hour ended, and within the settling minute after it.
        (HOUR - 1, vec![]),
        (HOUR + 59, vec![]),
        (HOUR + 60, vec![vec!["a", "b", "c"]]),
        (2 * HOUR + 3600, vec![vec!["a", "b", "c"], vec!["d", "e"]]),
    ];
    for (now, want) in cases {
        let got = ids(&segs, &plan(&segs, &rules(1000), at(now)));
        assert_eq!(got, want, "at +{now}");
    }
}

#[test]
fn size_bounds_split_groups_and_large_segments_stay() {
    let segs = vec![
        sized(seg("a", "0-1-10", "0-1-20", 100), 300),
        sized(seg("b", "0-1-20", "0-1-30", 110), 300),
        sized(seg("c", "0-1-30", "0-1-40", 120), 300),
        sized(seg("d", "0-1-40", "0-1-50", 130), 300),
        sized(seg("big", "0-1-50", "0-1-60", 140), 500),
        sized(seg("f", "0-1-60", "0-1-70", 150), 10),
        sized(seg("g", "0-1-70", "0-1-80", 160), 10),
    ];
    let got = ids(&segs, &plan(&segs, &rules(1000), at(2 * HOUR)));
    assert_eq!(got, vec![vec!["a", "b", "c"], vec!["f", "g"]]);
}

#[test]
fn overlaps_of_a_failover_and_changes_of_server_are_left_alone() {
    let mut other = seg("other-server", "0-2-45", "0-2-50", 500);
    other.source.host = "db-1".into();
    let segs = vec![
        seg("a", "0-1-10", "0-1-20", 100),
        seg("b", "0-1-20", "0-1-30", 110),
        // The old primary's tail, and the new primary's history from 0-1-30.
        seg("orphan", "0-1-30", "0-1-35", 120),
        seg("new", "0-1-30", "0-2-40", 300),
        seg("next", "0-2-40", "0-2-45", 400),
        other,
        seg("after", "0-2-50", "0-2-55", 600),
    ];
    let got = ids(&segs, &plan(&segs, &rules(1000), at(2 * HOUR)));
    // `b` has two continuations, `new` overlaps `orphan`, and the server changes before
    // `other-server` and after it.
    assert_eq!(got, vec![vec!["a", "b"]]);
}

#[test]
fn a_merge_keeps_every_chain_and_window() {
    let segs = vec![
        seg("a", "0-1-10", "0-1-20", 100),
        seg("b", "0-1-20", "0-1-30", 200),
        seg("c", "0-1-30", "0-1-40", 300),
        seg("d", "0-1-40", "0-1-50", HOUR + 10),
    ];
    let groups = plan(&segs, &rules(1000), at(2 * HOUR));
    assert_eq!(groups.len(), 1);
    let write = WriteOptions {
        chunk_size: 1 << 20,
        level: 3,
        workers: 1,
        segment_size: 1 << 30,
    };
    let group: Vec<SegmentManifest> = groups[0].iter().map(|i| segs[*i].clone()).collect();
    let merged = draft(&group, Vec::new(), "m".into(), at(2 * HOUR), &write);
    assert_eq!(merged.replaces, vec!["a", "b", "c"]);
    assert_eq!(
        (merged.after.to_string(), merged.through.to_string()),
        ("0-1-10".into(), "0-1-40".into())
    );
    assert_eq!(
        merged.received_at, segs[2].received_at,
        "the last one's: gaps and supersession order stay"
    );
    assert_eq!(merged.transactions, 3);
    let after: Vec<SegmentManifest> = vec![merged, segs[3].clone()];
    for start in ["0-1-10", "0-1-15", "0-1-30", "0-1-45"] {
        let before = window::chain_from(&segs, &pos(start));
        let now = window::chain_from(&after, &pos(start));
        assert_eq!(before.reached, now.reached, "from {start}");
        assert_eq!(before.last_commit, now.last_commit, "from {start}");
    }
    assert_eq!(window::gaps(&after), window::gaps(&segs));
}

fn fde(ts: u32) -> Vec<u8> {
    build(kind::FORMAT_DESCRIPTION, ts, 1, 0, &[4; 20])
}

fn trx(seq: u64, ts: u32) -> Vec<u8> {
    let mut out = build(kind::GTID, ts, 1, 0, &gtid_body(0, seq, true));
    out.extend(build(
        kind::QUERY,
        ts,
        1,
        0,
        &query_body("t", "CREATE TABLE x (i int)"),
    ));
    out
}

fn plaintext(fde: &[u8], trxs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = BINLOG_MAGIC.to_vec();
    out.extend_from_slice(fde);
    for t in trxs {
        out.extend_from_slice(t);
    }
    out
}

#[test]
fn merged_plaintext_replays_like_its_parts() {
    let (f1, f2) = (fde(1), fde(2));
    let p1 = plaintext(&f1, &[trx(11, 5), trx(12, 6)]);
    let p2 = plaintext(&f1, &[trx(13, 7)]);
    let p3 = plaintext(&f2, &[trx(14, 8)]);
    let parts: Vec<(&str, &[u8])> = vec![("a", &p1), ("b", &p2), ("c", &p3)];
    let merged = merge(&parts, 4).unwrap();
    // One format description per change: f1 once, then f2.
    let want = plaintext(
        &f1,
        &[trx(11, 5), trx(12, 6), trx(13, 7), f2.clone(), trx(14, 8)],
    );
    assert_eq!(merged.plain, want);
    let runs: Vec<(u32, u64, u64)> = merged
        .runs
        .iter()
        .map(|r| (r.server, r.first, r.last))
        .collect();
    assert_eq!(runs, vec![(1, 11, 14)]);
    let starts = ["0-1-10", "0-1-12", "0-1-13"];
    for target in [RecoveryTarget::Latest, RecoveryTarget::Gtid(pos("0-1-13"))] {
        let replay = |plains: &[(&str, &str, &[u8])]| {
            let mut sel = Selector::new(pos("0-1-11"), target.clone());
            let mut out = Vec::new();
            for (id, after, p) in plains {
                sel.take_bytes(id, &pos(after), p, &mut out).unwrap();
            }
            (out, sel.reached().to_string())
        };
        let apart: Vec<(&str, &str, &[u8])> = parts
            .iter()
            .zip(starts)
            .map(|((id, p), after)| (*id, after, *p))
            .collect();
        assert_eq!(
            replay(&apart),
            replay(&[("m", "0-1-10", &merged.plain)]),
            "{target}"
        );
    }
    let err = merge(&parts, 5).unwrap_err();
    assert!(
        err.contains("hold 4 transactions, their manifests say 5"),
        "{err}"
    );
    let mut cut = p2.clone();
    cut.truncate(cut.len() - 3);
    let err = merge(&[("a", &p1), ("b", &cut)], 3).unwrap_err();
    assert!(err.starts_with("segment b: "), "{err}");
}

#[test]
fn replaced_segments_go_after_the_grace() {
    let sup = |id: &str, since: u32| Superseded {
        manifest: seg(id, "0-1-1", "0-1-2", 1),
        by: "m".into(),
        since: at(since),
    };
    let list = vec![sup("old", 0), sup("young", 3000)];
    assert_eq!(expired(&list, Duration::hours(1), at(3600)), vec![0]);
    assert_eq!(expired(&list, Duration::hours(1), at(6600)), vec![0, 1]);
}

#[test]
fn a_pass_runs_once_each_span_has_ended_and_settled() {
    let hourly = rules(1000);
    assert_eq!(settle(Duration::hours(1)), Duration::seconds(60));
    assert_eq!(settle(Duration::seconds(4)), Duration::seconds(2));
    let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
    assert_eq!(
        next_pass(&hourly, t("2026-11-25T06:14:09Z")),
        t("2026-11-25T07:01:00Z")
    );
    assert_eq!(
        next_pass(&hourly, t("2026-11-25T07:00:00Z")),
        t("2026-11-25T08:01:00Z")
    );
    let short = CompactRules {
        span: Duration::seconds(4),
        ..hourly
    };
    assert_eq!(
        next_pass(&short, t("2026-11-25T06:14:09Z")),
        t("2026-11-25T06:14:14Z")
    );
}
