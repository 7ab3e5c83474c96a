//! Two branches of history under the same GTIDs, on real MariaDB. A server that lost its last
//! archived transactions (a crash with `sync_binlog=0`, or a rebuild from an older copy) writes
//! their numbers again under its own server id; the archiver, finding the server without the
//! archive's head, starts a new timeline from the last position it has, and the GTIDs of the
//! two branches are the same from there on. A backup records the timeline its point belongs to,
//! so each restores its own history: one taken before, the lost transactions; one taken after,
//! the server's new ones.

mod common;

use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

/// `list --json`'s entry for backup `id`.
fn entry(listing: &serde_json::Value, id: &str) -> serde_json::Value {
    listing["backups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {listing}"))
}

#[test]
fn each_backup_restores_its_own_history_when_a_server_writes_archived_gtids_again() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let k = key.to_str().unwrap();
    let logical = ["--method", "logical", "--encryption-key-file", k];
    let rows = |db: &MariaDb| db.query("SELECT id, at FROM pitr.w ORDER BY id").unwrap();
    let gtid_pos = |db: &MariaDb| db.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();

    // The server's history up to the point it is later rebuilt from.
    let old = MariaDb::start().unwrap();
    old.sql(SCHEMA).unwrap();
    write_row(&old);
    let base = backup(&repo, &old, &logical, &[]);
    let base_id = base["id"].as_str().unwrap().to_string();
    let base_point = gtid_pos(&old);

    let a = Archiver::start_with(
        &repo,
        &old,
        &key,
        work.path(),
        "old",
        &["--branch-on-divergence"],
    );
    write_row(&old);
    let at_backup = write_row(&old);
    wait_archived_at(&repo, &at_backup.gtid, &a);
    // Taken while the archiver follows the server: on timeline 1.
    let before = backup(&repo, &old, &logical, &[]);
    let before_id = before["id"].as_str().unwrap().to_string();
    let lost = write_row(&old);
    wait_archived_at(&repo, &lost.gtid, &a);
    a.stop();
    assert_eq!(
        entry(&list(&repo, &[]), &before_id)["binlogTimeline"],
        1,
        "the backup records the timeline it was taken on"
    );

    // Rebuilt from the base backup, under the same server id, its binary log where the
    // base's point left it: it has none of the transactions archived after that point.
    let rebuilt = MariaDb::start().unwrap();
    ok(into_server("restore", &repo, &key, &base_id, &rebuilt, &[]));
    rebuilt
        .sql(&format!(
            "RESET MASTER; SET GLOBAL gtid_binlog_state = '{base_point}'"
        ))
        .unwrap();
    let a = Archiver::start_with(
        &repo,
        &rebuilt,
        &key,
        work.path(),
        "rebuilt",
        &["--branch-on-divergence"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a.log().contains("a new timeline starts") {
        assert!(Instant::now() < deadline, "no new timeline: {}", a.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its new transactions take the lost ones' GTIDs, and one more.
    let again: Vec<Row> = (0..4).map(|_| write_row(&rebuilt)).collect();
    assert_eq!(again[2].gtid, lost.gtid, "the same GTID, written again");
    let after = backup(&repo, &rebuilt, &logical, &[]);
    let after_id = after["id"].as_str().unwrap().to_string();
    wait_archived_at(&repo, &again[3].gtid, &a);
    a.stop();
    let listing = list(&repo, &[]);
    assert_eq!(entry(&listing, &after_id)["binlogTimeline"], 2, "{listing}");
    assert_eq!(
        listing["archives"]["default"]["timelines"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{listing}"
    );

    // The backup taken before the rebuild restores the lost transaction, never the rebuilt
    // server's rows under the same GTIDs after it.
    let (restored, out) = restore_until(&repo, &key, &before_id, &["--until", "latest"]);
    assert_eq!(rows(&restored), rows(&old), "{out}");
    assert_eq!(gtid_pos(&restored), lost.gtid, "{out}");
    // The one taken after restores the rebuilt server's history.
    let (restored, out) = restore_until(&repo, &key, &after_id, &["--until", "latest"]);
    assert_eq!(rows(&restored), rows(&rebuilt), "{out}");
}
