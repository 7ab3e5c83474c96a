//! Point-in-time recovery on real MariaDB: the archiver streams binary logs into a repository
//! while a writer commits rows stamped with their commit times; restores to a time, to a GTID
//! and to the latest point give exactly the rows committed up to the target. A killed archiver
//! resumes without duplicates, a purged binlog shows as a gap, and a tampered segment is caught.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

#[test]
fn restores_to_a_time_a_gtid_and_the_latest_point_hold_exactly_the_rows_committed_by_then() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    let before: Vec<Row> = (0..5).map(|_| write_row(&source)).collect();
    let b = backup(
        &repo,
        &source,
        &[
            "--method",
            "logical",
            "--encryption-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();
    let p = backup(
        &repo,
        &source,
        &["--encryption-key-file", key.to_str().unwrap()],
        &[],
    );
    let physical = p["id"].as_str().unwrap().to_string();
    let baseline_physical: BTreeSet<u64> = ids(&source);

    let archiver = Archiver::start(&repo, &source, &key, work.path(), "archiver");
    let rows = write_for(&source, Duration::from_millis(3500));
    let last = rows.last().unwrap().clone();
    let listing = wait_archived(&repo, &key, &last.gtid, &archiver);
    // The archiver's own report: streaming, at the end, caught up, the window from the backup.
    let report = archiver.report();
    assert_eq!(report["streaming"], true, "{report}");
    assert_eq!(report["through"], last.gtid.as_str(), "{report}");
    assert_eq!(report["gaps"], 0, "{report}");
    assert_eq!(
        report["recoverableFromBackup"],
        id.as_str(),
        "the older backup: {report}"
    );
    assert_eq!(
        report["windowBaseBackup"],
        physical.as_str(),
        "the newer backup, which retention keeps: {report}"
    );
    assert!(report["lagSeconds"].as_f64().unwrap() < 3.0, "{report}");
    let log = archiver.stop();
    assert!(log.contains("binlog segment archived"), "{log}");
    assert_eq!(
        listing["archives"]["default"]["gaps"],
        serde_json::json!([]),
        "{listing}"
    );
    let window = &listing["backups"][0]["recoveryWindow"];
    assert_eq!(window["to"], last.gtid.as_str(), "{listing}");

    let baseline: BTreeSet<u64> = before.iter().map(|r| r.id).collect();
    let seconds: BTreeSet<i64> = rows.iter().map(|r| r.second).collect();
    assert!(seconds.len() >= 3, "the writer spanned {seconds:?}");

    // To a time: every row stamped at or before the second, none after.
    let cut = *seconds.iter().nth(1).unwrap();
    let until = chrono::DateTime::from_timestamp(cut, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (at_time, out) = restore_until(&repo, &key, &id, &["--until", &until]);
    let want: BTreeSet<u64> = baseline
        .iter()
        .copied()
        .chain(rows.iter().filter(|r| r.second <= cut).map(|r| r.id))
        .collect();
    assert!(want.len() > baseline.len() && want.len() < baseline.len() + rows.len());
    assert_eq!(ids(&at_time), want, "restore --until {until}: {out}");

    // To a GTID: that transaction and everything before it.
    let middle = &rows[rows.len() / 3];
    let (at_gtid, out) = restore_until(&repo, &key, &id, &["--until-gtid", &middle.gtid]);
    let want: BTreeSet<u64> = baseline
        .iter()
        .copied()
        .chain(
            rows.iter()
                .filter(|r| seq(&r.gtid) <= seq(&middle.gtid))
                .map(|r| r.id),
        )
        .collect();
    assert_eq!(
        ids(&at_gtid),
        want,
        "restore --until-gtid {}: {out}",
        middle.gtid
    );
    let pos = at_gtid.query("SELECT @@gtid_binlog_pos").unwrap();
    assert_eq!(
        pos[0][0], middle.gtid,
        "replayed transactions keep their GTIDs"
    );

    // A server whose binary log has a longer history of its own, under gtid_strict_mode,
    // refuses the archived numbers (here already the backup's point as its replica position,
    // before the replay); `--replay-gtids server` logs the replay under its own.
    let own_history = || {
        let db = MariaDb::start().unwrap();
        db.sql(
            "SET GLOBAL gtid_strict_mode = ON; SET SESSION gtid_seq_no = 100000; \
             CREATE DATABASE scratch",
        )
        .unwrap();
        db
    };
    let until_middle = ["--until-gtid", middle.gtid.as_str()];
    let strict = own_history();
    fails(
        into_server("restore", &repo, &key, &id, &strict, &until_middle),
        &["conflicts with the binary log"],
    );
    let strict = own_history();
    let args = [&until_middle[..], &["--replay-gtids", "server"]].concat();
    let out = ok(into_server("restore", &repo, &key, &id, &strict, &args));
    assert_eq!(ids(&strict), want, "--replay-gtids server: {out}");
    let pos = strict.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();
    assert!(
        pos.starts_with("0-1-") && seq(&pos) > 100_000,
        "the replay continues the server's own history: {pos}"
    );
    fails(
        into_server(
            "restore",
            &repo,
            &key,
            &id,
            &strict,
            &["--replay-gtids", "server"],
        ),
        &["--replay-gtids applies to a replay into a running server"],
    );

    // A physical backup into a directory: replayed under a temporary server, which stops
    // cleanly, and the directory then starts as a server holding exactly those rows.
    let dir = work.path().join("physical");
    let out = ok(cli(&[
        "restore",
        "--repo",
        &repo,
        "--encryption-key-file",
        key.to_str().unwrap(),
        &physical,
        "--target-dir",
        dir.to_str().unwrap(),
        "--until-gtid",
        &middle.gtid,
    ]));
    assert!(
        out.contains(&format!("the data is at GTID position {}", middle.gtid)),
        "{out}"
    );
    let restored = MariaDb::start_with_datadir(&dir).unwrap();
    let want: BTreeSet<u64> = baseline_physical
        .iter()
        .copied()
        .chain(
            rows.iter()
                .filter(|r| seq(&r.gtid) <= seq(&middle.gtid))
                .map(|r| r.id),
        )
        .collect();
    assert_eq!(ids(&restored), want, "physical restore --until-gtid: {out}");
    drop(restored);

    // Latest: every row, and the same rows as the source.
    let (latest, out) = restore_until(&repo, &key, &id, &["--until", "latest"]);
    assert_eq!(ids(&latest), ids(&source), "{out}");
    assert!(
        out.contains(&format!("the data is at GTID position {}", last.gtid)),
        "{out}"
    );

    // Outside the window: one line naming the window, and nothing loaded.
    let empty = MariaDb::start().unwrap();
    for until in [
        ["--until", "2001-01-01T00:00:00Z"],
        ["--until-gtid", "0-1-999999"],
    ] {
        fails(
            into_server("restore", &repo, &key, &id, &empty, &until),
            &["outside the recovery window", &last.gtid],
        );
    }
    let schemas = empty.query("SHOW DATABASES LIKE 'pitr'").unwrap();
    assert!(schemas.is_empty(), "a refused restore loaded data");
}

#[test]
fn a_killed_archiver_resumes_without_duplicates_a_purge_is_a_gap_and_tampering_is_caught() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let keyarg = key.to_str().unwrap();
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    let before: Vec<Row> = (0..3).map(|_| write_row(&source)).collect();
    let b = backup(
        &repo,
        &source,
        &["--method", "logical", "--encryption-key-file", keyarg],
        &[],
    );
    let first_backup = b["id"].as_str().unwrap().to_string();

    // Killed mid-stream, writes while it is down, started again: every transaction once.
    let a = Archiver::start(&repo, &source, &key, work.path(), "a1");
    let mut rows = write_for(&source, Duration::from_millis(1500));
    wait_archived(&repo, &key, &rows.last().unwrap().gtid, &a);
    rows.extend(write_for(&source, Duration::from_millis(300)));
    a.kill9();
    rows.extend(write_for(&source, Duration::from_millis(700)));
    let a = Archiver::start(&repo, &source, &key, work.path(), "a2");
    rows.extend(write_for(&source, Duration::from_millis(1000)));
    let listing = wait_archived(&repo, &key, &rows.last().unwrap().gtid, &a);
    a.stop();
    assert_eq!(
        listing["archives"]["default"]["transactions"]
            .as_u64()
            .unwrap(),
        rows.len() as u64,
        "each transaction archived exactly once: {listing}"
    );
    assert_eq!(
        listing["archives"]["default"]["gaps"],
        serde_json::json!([]),
        "{listing}"
    );
    let (latest, _) = restore_until(&repo, &key, &first_backup, &["--until", "latest"]);
    assert_eq!(ids(&latest), ids(&source));
    let continuous_to = rows.last().unwrap().gtid.clone();

    // Binary logs purged before the archiver saw them: a gap, reported, and the window of
    // the older backup ends where the archive stopped being continuous.
    let lost = write_for(&source, Duration::from_millis(300));
    // The server keeps a binlog a dump thread still reads; the stopped archiver's thread goes
    // when its next heartbeat finds the connection closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while source
        .query(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'",
        )
        .unwrap()[0][0]
        != "0"
    {
        assert!(
            Instant::now() < deadline,
            "the archiver's dump thread stayed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    source.sql("FLUSH BINARY LOGS").unwrap();
    let current = source.query("SHOW MASTER STATUS").unwrap()[0][0].clone();
    // MariaDB keeps a binlog until the engine has made its commits durable (the binlog
    // checkpoint), which comes shortly after the rotation.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        source
            .sql(&format!("PURGE BINARY LOGS TO '{current}'"))
            .unwrap();
        if source.query("SHOW BINARY LOGS").unwrap()[0][0] == current {
            break;
        }
        assert!(Instant::now() < deadline, "the old binlog was not purged");
        std::thread::sleep(Duration::from_millis(200));
    }
    let after_gap = write_for(&source, Duration::from_millis(300));
    let a = Archiver::start(&repo, &source, &key, work.path(), "a3");
    let listing = wait_archived(&repo, &key, &after_gap.last().unwrap().gtid, &a);
    let log = a.stop();
    assert!(log.contains("purged before they were archived"), "{log}");
    let gaps = listing["archives"]["default"]["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{listing}");
    assert_eq!(gaps[0]["after"], continuous_to.as_str(), "{listing}");
    assert_eq!(
        gaps[0]["resumedAt"],
        lost.last().unwrap().gtid.as_str(),
        "{listing}"
    );
    assert_eq!(
        backup_window_to(&listing, &first_backup).as_deref(),
        Some(continuous_to.as_str())
    );
    let text = ok(cli(&["list", "--repo", &repo]));
    assert!(text.contains("binlog archive default GAP"), "{text}");
    let (latest, out) = restore_until(&repo, &key, &first_backup, &["--until", "latest"]);
    let want: BTreeSet<u64> = before.iter().chain(&rows).map(|r| r.id).collect();
    assert_eq!(ids(&latest), want, "replay stops at the gap");
    // Said, not silent: the archive goes on past what this backup can reach.
    assert!(
        out.contains(&format!(
            "the archive has a gap after {continuous_to}: it goes on from {}",
            lost.last().unwrap().gtid
        )),
        "{out}"
    );

    // The window restarts at the next backup.
    let b = backup(
        &repo,
        &source,
        &["--method", "logical", "--encryption-key-file", keyarg],
        &[],
    );
    let second_backup = b["id"].as_str().unwrap().to_string();
    let a = Archiver::start(&repo, &source, &key, work.path(), "a4");
    let more = write_for(&source, Duration::from_millis(300));
    let listing = wait_archived(&repo, &key, &more.last().unwrap().gtid, &a);
    a.stop();
    assert_eq!(
        backup_window_to(&listing, &second_backup).as_deref(),
        Some(more.last().unwrap().gtid.as_str()),
        "{listing}"
    );

    // Retention: keeping only the newest backup removes the older one and every segment only
    // it needed; the newest backup's window stays whole.
    let segments_before = listing["archives"]["default"]["segments"].as_u64().unwrap();
    let dry: serde_json::Value = serde_json::from_str(&ok(cli(&[
        "prune",
        "--repo",
        &repo,
        "--encryption-key-file",
        keyarg,
        "--keep-last",
        "1",
        "--dry-run",
        "--json",
    ])))
    .unwrap();
    let doomed = dry["segmentsRemoved"].as_array().unwrap().len() as u64;
    assert!(doomed > 0 && doomed < segments_before, "{dry}");
    assert_eq!(
        list(&repo, &[])["archives"]["default"]["segments"],
        segments_before,
        "dry run removed"
    );
    ok(cli(&[
        "prune",
        "--repo",
        &repo,
        "--encryption-key-file",
        keyarg,
        "--keep-last",
        "1",
    ]));
    let listing = list(&repo, &[]);
    assert_eq!(complete_ids(&listing), vec![second_backup.clone()]);
    assert_eq!(
        listing["archives"]["default"]["segments"].as_u64().unwrap(),
        segments_before - doomed
    );
    assert_eq!(
        backup_window_to(&listing, &second_backup).as_deref(),
        Some(more.last().unwrap().gtid.as_str())
    );

    // A changed byte in an archived segment fails the replay before it is applied.
    let seg_dir = Path::new(&repo).join("binlogs").join("default");
    let mut dirs: Vec<_> = std::fs::read_dir(&seg_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let victim = dirs[0].join("seg-000000.zst.aes");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&victim, bytes).unwrap();
    let fresh = MariaDb::start().unwrap();
    fails(
        into_server("replay", &repo, &key, &second_backup, &fresh, &[]),
        &["is corrupt"],
    );
}

#[test]
fn an_archiver_removes_the_segments_no_backup_needs_once_their_backups_are_gone() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let keyarg = key.to_str().unwrap();
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    let a = Archiver::start_with(
        &repo,
        &source,
        &key,
        work.path(),
        "pruning",
        &["--prune-unneeded"],
    );
    let take = || {
        let b = backup(
            &repo,
            &source,
            &["--method", "logical", "--encryption-key-file", keyarg],
            &[],
        );
        b["id"].as_str().unwrap().to_string()
    };
    let mut rows = write_for(&source, Duration::from_millis(1500));
    wait_archived(&repo, &key, &rows.last().unwrap().gtid, &a);
    let first = take();
    rows.extend(write_for(&source, Duration::from_millis(1500)));
    wait_archived(&repo, &key, &rows.last().unwrap().gtid, &a);
    let second = take();
    rows.extend(write_for(&source, Duration::from_millis(1500)));
    wait_archived(&repo, &key, &rows.last().unwrap().gtid, &a);
    let before = list(&repo, &[])["archives"]["default"]["segments"]
        .as_u64()
        .unwrap();

    // Retention removes the older backup; the archiver removes what only it needed.
    ok(cli(&["delete", "--repo", &repo, &first]));
    let unneeded = || -> usize {
        let dry: serde_json::Value = serde_json::from_str(&ok(cli(&[
            "prune",
            "--repo",
            &repo,
            "--encryption-key-file",
            keyarg,
            "--keep-last",
            "1",
            "--dry-run",
            "--json",
        ])))
        .unwrap();
        dry["segmentsRemoved"].as_array().unwrap().len()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while unneeded() > 0 {
        assert!(
            Instant::now() < deadline,
            "segments no backup needs stayed: {}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let listing = list(&repo, &[]);
    let after = listing["archives"]["default"]["segments"].as_u64().unwrap();
    assert!(after < before, "{before} segments before, {after} after");
    assert_eq!(
        backup_window_to(&listing, &second).as_deref(),
        Some(rows.last().unwrap().gtid.as_str()),
        "{listing}"
    );
    let log = a.stop();
    assert!(log.contains("no backup needs removed"), "{log}");
    let (restored, _) = restore_until(&repo, &key, &second, &["--until", "latest"]);
    assert_eq!(ids(&restored), ids(&source));
}

#[test]
fn xa_transactions_are_archived_and_replayed_like_any_other() {
    let ArchivedSource {
        work: _work,
        repo,
        key,
        source,
        backup_id: id,
        archiver: a,
    } = archived_source(&[], "", "xa");
    write_row(&source);
    // An XA transaction ends its first binlog transaction with an XA_PREPARE event; its
    // XA COMMIT (or ROLLBACK) is a transaction of its own.
    source
        .sql(
            "XA START 'x1'; INSERT INTO pitr.w (at, pad) VALUES (NOW(6), 'committed by XA');
             XA END 'x1'; XA PREPARE 'x1'; XA COMMIT 'x1';
             XA START 'x2'; INSERT INTO pitr.w (at, pad) VALUES (NOW(6), 'rolled back by XA');
             XA END 'x2'; XA PREPARE 'x2'; XA ROLLBACK 'x2';",
        )
        .unwrap();
    let after: Vec<Row> = (0..4).map(|_| write_row(&source)).collect();
    wait_archived(&repo, &key, &after.last().unwrap().gtid, &a);
    a.stop();
    let (restored, _) = restore_until(&repo, &key, &id, &["--until", "latest"]);
    assert_eq!(ids(&restored), ids(&source));
    let xa = restored
        .query("SELECT pad FROM pitr.w WHERE pad LIKE '%by XA'")
        .unwrap();
    assert_eq!(xa, [["committed by XA".to_owned()]]);
}
