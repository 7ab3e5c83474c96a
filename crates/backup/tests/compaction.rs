//! Archive compaction on real MariaDB: a quiet server's many small segments are merged once
//! their span is over, the segments they replace are deleted after the grace (also by an
//! archiver restarted in between), restores to a GTID and to the latest point stay exact, and
//! a key rotation re-wraps the compacted segments with the backups.

mod common;

use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

fn archive_state(repo: &str) -> (u64, u64) {
    let l = list(repo, &[]);
    let a = &l["archives"]["default"];
    (
        a["segments"].as_u64().unwrap(),
        a["superseded"].as_u64().unwrap(),
    )
}

fn wait_for(what: &str, archiver: &Archiver, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen in 90 s; archiver log: {}",
            archiver.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn small_segments_are_merged_their_originals_go_after_the_grace_and_restores_stay_exact() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let keyarg = key.to_str().unwrap();
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    let compacting = ["--compact-span", "4s", "--compact-grace", "3s"];
    let a = Archiver::start_with(&repo, &source, &key, work.path(), "compacting", &compacting);
    let base = backup(
        &repo,
        &source,
        &["--method", "logical", "--encryption-key-file", keyarg],
        &[],
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    // One segment a second (--flush-every 1s) for a few seconds.
    let rows = write_for(&source, Duration::from_secs(5));
    wait_archived(&repo, &key, &rows.last().unwrap().gtid, &a);
    let (before, _) = archive_state(&repo);
    assert!(before >= 4, "{before} segments");

    wait_for("a compaction", &a, || {
        let (segments, superseded) = archive_state(&repo);
        segments < before && superseded > 0
    });
    // Stopped within the grace: the next run finds the replaced segments and removes them.
    let log = a.stop();
    assert!(log.contains("binlog segments compacted"), "{log}");
    let (during, superseded) = archive_state(&repo);
    assert!(
        superseded > 0,
        "the replaced segments went before the grace was over"
    );
    let a = Archiver::start_with(&repo, &source, &key, work.path(), "restarted", &compacting);
    wait_for("the replaced segments' removal", &a, || {
        archive_state(&repo).1 == 0
    });
    let (after, _) = archive_state(&repo);
    assert!(
        after <= during,
        "{during} segments before the restart, {after} after"
    );

    // The compacted archive replays exactly: up to a GTID in the middle, and to the latest.
    let middle = &rows[rows.len() / 2];
    let (restored, _) = restore_until(&repo, &key, &base, &["--until-gtid", &middle.gtid]);
    let want: std::collections::BTreeSet<u64> = rows
        .iter()
        .filter(|r| r.id <= middle.id)
        .map(|r| r.id)
        .collect();
    assert_eq!(ids(&restored), want);
    assert_eq!(
        restored.query("SELECT @@gtid_binlog_pos").unwrap()[0][0],
        middle.gtid
    );
    drop(restored);

    // A key rotation re-wraps the segments too: the old key can go.
    a.stop();
    let (segments, superseded) = archive_state(&repo);
    let new_key = key_file(work.path(), "new-key");
    let rotated = ok(cli(&[
        "rewrap",
        "--repo",
        &repo,
        "--encryption-key-file",
        keyarg,
        "--new-encryption-key-file",
        new_key.to_str().unwrap(),
        "--json",
    ]));
    let rotated: serde_json::Value = serde_json::from_str(&rotated).unwrap();
    let segments_rewrapped = rotated["backups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["id"].as_str().unwrap().starts_with("binlog-") && r["result"] == "re-wrapped")
        .count();
    assert_eq!(
        segments_rewrapped as u64,
        segments + superseded,
        "{rotated}"
    );
    let (restored, _) = restore_until(&repo, &new_key, &base, &["--until", "latest"]);
    assert_eq!(ids(&restored), ids(&source));
}
