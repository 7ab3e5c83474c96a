//! Branches of history on real MariaDB: after a failover that lost the old primary's last
//! transactions the archiver refuses the survivor unless told to branch, then archives it as a
//! new timeline; restores follow one branch only (the survivor's, or the lost tail's by its
//! GTIDs), however their sequence numbers compare. A damaged binary log on the server is
//! reported, never taken for a purge. A cluster deleted and created again under its name (a
//! new server whose GTIDs repeat the old one's) archives on its own, and each restores only its
//! own history.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

#[test]
fn after_a_failover_to_a_replica_without_the_last_transactions_the_archive_follows_the_survivor() {
    failover_with_orphans(4, 6);
}

/// The survivor writes fewer transactions than the old primary lost: its sequence numbers never
/// pass the orphans', so only the servers in the GTIDs tell the two histories apart.
#[test]
fn a_survivor_that_writes_less_than_the_lost_tail_is_restored_without_it() {
    failover_with_orphans(6, 2);
}

/// The old primary archives `orphan_rows` transactions its replica never receives; the replica
/// takes over and writes `survivor_rows`. `--until latest` restores the survivor's history.
fn failover_with_orphans(orphan_rows: usize, survivor_rows: usize) {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let old = MariaDb::start().unwrap();
    let new = MariaDb::start_with_args(&["--server-id=2", "--log-slave-updates"]).unwrap();
    new.sql(&format!(
        "CHANGE MASTER TO master_host='127.0.0.1', master_port={}, master_user='root', \
         master_use_gtid=slave_pos; START SLAVE;",
        old.port()
    ))
    .unwrap();
    let caught_up = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while new.query("SELECT @@gtid_binlog_pos").unwrap()[0][0] != want {
            assert!(
                Instant::now() < deadline,
                "the replica did not reach {want}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    old.sql(SCHEMA).unwrap();
    let mut kept: Vec<Row> = (0..3).map(|_| write_row(&old)).collect();
    let b = backup(
        &repo,
        &old,
        &[
            "--method",
            "logical",
            "--encryption-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();

    // Archived from the old primary, replicated.
    let a = Archiver::start(&repo, &old, &key, work.path(), "old");
    kept.extend((0..5).map(|_| write_row(&old)));
    caught_up(&kept.last().unwrap().gtid);
    // Archived, but never replicated: the old primary's last transactions.
    new.sql("STOP SLAVE").unwrap();
    let orphans: Vec<Row> = (0..orphan_rows).map(|_| write_row(&old)).collect();
    wait_archived_at(&repo, &orphans.last().unwrap().gtid, &a);
    a.stop();

    // The replica takes over and writes; the archiver now reaches it at the same address.
    new.sql("RESET SLAVE ALL").unwrap();
    kept.extend((0..survivor_rows).map(|_| write_row(&new)));
    let at = new.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();
    // Its history is not the archive's: without consent the archiver stops, saying so.
    let refused = Archiver::start(&repo, &new, &key, work.path(), "refused");
    let (status, log) = refused.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    let lost_head = &orphans.last().unwrap().gtid;
    assert!(
        log.contains(&format!(
            "lacks archived transactions up to {lost_head} (it is at {at})"
        )) && log.contains("--branch-on-divergence"),
        "{log}"
    );
    let a = Archiver::start_with(
        &repo,
        &new,
        &key,
        work.path(),
        "new",
        &["--branch-on-divergence"],
    );
    wait_archived_at(&repo, &at, &a);
    // The archiver's report (the cluster status shows it) names the lost branch, once it has
    // listed the archive again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let report = a.report();
        let lost = &report["lostBranches"];
        if lost.as_array().is_some_and(|l| !l.is_empty()) {
            assert_eq!(lost[0]["timeline"], 2, "{report}");
            assert_eq!(lost[0]["branchedFrom"], 1, "{report}");
            assert_eq!(lost[0]["through"], lost_head.as_str(), "{report}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no lost branch reported: {report}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = a.stop();
    assert!(log.contains("a new timeline starts"), "{log}");
    let listing = list(&repo, &[]);
    let timelines = &listing["archives"]["default"]["timelines"];
    assert_eq!(timelines.as_array().map(Vec::len), Some(2), "{listing}");
    assert_eq!(timelines[1]["timeline"], 2, "{listing}");
    assert_eq!(timelines[1]["through"], at.as_str(), "{listing}");
    // The backup's window follows the survivor's timeline 2.
    let entry = listing["backups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(entry["recoveryWindow"]["timeline"], 2, "{listing}");
    // The lost tail: what timeline 2 left behind on timeline 1.
    assert_eq!(timelines[1]["leftBehind"]["timeline"], 1, "{listing}");
    assert_eq!(
        timelines[1]["leftBehind"]["through"],
        lost_head.as_str(),
        "{listing}"
    );

    // The survivor's rows exactly (its new rows reuse the lost ones' ids; their times differ).
    let (restored, out) = restore_until(&repo, &key, &id, &["--until", "latest"]);
    let rows = |db: &MariaDb| db.query("SELECT id, at FROM pitr.w ORDER BY id").unwrap();
    assert_eq!(rows(&restored), rows(&new), "{out}");
    assert_eq!(
        ids(&restored),
        kept.iter().map(|r| r.id).collect::<BTreeSet<u64>>()
    );
    let lost: Vec<Vec<String>> = orphans
        .iter()
        .flat_map(|r| {
            old.query(&format!("SELECT id, at FROM pitr.w WHERE id = {}", r.id))
                .unwrap()
        })
        .collect();
    assert!(
        lost.iter().all(|r| !rows(&restored).contains(r)),
        "a lost row came back"
    );
    assert_eq!(
        restored.query("SELECT @@gtid_binlog_pos").unwrap()[0][0],
        at
    );

    // The lost tail stays archived on its own branch: its last GTID restores it.
    let (recovered, out) = restore_until(&repo, &key, &id, &["--until-gtid", lost_head]);
    let with_tail: BTreeSet<u64> = (1..=(8 + orphan_rows as u64)).collect();
    assert_eq!(ids(&recovered), with_tail, "{out}");
    assert_eq!(rows(&recovered), rows(&old), "{out}");
}

/// Error 1236 also reports a damaged binary log on the server. Taken for a purge, it made the
/// archiver record a gap and stream again from the oldest binary log, into the same damage, for
/// ever; now it is reported like any failure and retried, and the archive never moves.
#[test]
fn a_damaged_binary_log_on_the_server_is_reported_never_taken_for_a_purge() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let db = MariaDb::start().unwrap();
    db.sql(SCHEMA).unwrap();
    let start = db.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();
    for _ in 0..3 {
        write_row(&db);
    }
    let first = db.query("SHOW BINARY LOGS").unwrap().last().unwrap()[0].clone();
    db.sql("FLUSH BINARY LOGS").unwrap();
    write_row(&db);

    // The closed binary log's first row event says it is 5 bytes long: shorter than a header.
    let path = db.datadir().join(&first);
    let mut bytes = std::fs::read(&path).unwrap();
    let mut at = 4;
    let mut damaged = false;
    while at + 19 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[at + 9..at + 13].try_into().unwrap()) as usize;
        // WRITE_ROWS_EVENT (v1): the first row of the writer's transactions.
        if bytes[at + 4] == 23 {
            bytes[at + 9..at + 13].copy_from_slice(&5u32.to_le_bytes());
            damaged = true;
            break;
        }
        at += size;
    }
    assert!(damaged, "no row event in {first}");
    std::fs::write(&path, bytes).unwrap();

    let a = Archiver::start_with(
        &repo,
        &db,
        &key,
        work.path(),
        "damaged",
        &["--start-gtid", &start],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let error = loop {
        // `/status` answers once the archiver has listed the repository.
        let r = std::net::TcpStream::connect(a.status)
            .ok()
            .map(|_| a.report())
            .unwrap_or_default();
        if let Some(e) = r["error"].as_str().filter(|e| e.contains("1236")) {
            break e.to_owned();
        }
        assert!(Instant::now() < deadline, "{r} {}", a.log());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(error.contains("log event"), "{error}");
    // Several retries later: still no gap, nothing archived past the damage.
    std::thread::sleep(Duration::from_secs(4));
    let r = a.report();
    assert_eq!(
        (r["streaming"].as_bool(), r["gaps"].as_u64()),
        (Some(false), Some(0)),
        "{r}"
    );
    let log = a.stop();
    assert!(!log.contains("purged before they were archived"), "{log}");
    assert!(!log.contains("continuing from"), "{log}");
    let listing = list(&repo, &[]);
    let gaps = &listing["archives"]["default"]["gaps"];
    assert!(
        gaps.is_null() || *gaps == serde_json::json!([]),
        "{listing}"
    );
}

/// Waits until archive `name` of `repo` reaches exactly `pos`.
fn wait_archive_at(repo: &str, name: &str, pos: &str, archiver: &Archiver) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while list(repo, &[])["archives"][name]["through"] != pos {
        assert!(
            Instant::now() < deadline,
            "archive {name} did not reach {pos}: {}",
            archiver.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The operator names a cluster's archive after the cluster and its uid, so a cluster deleted
/// and created again under the same name starts its own archive beside the old one in the same
/// repository. Its server's GTIDs repeat the old one's (same domain, same server id), yet each
/// backup restores to `latest` with its own cluster's history only; and a new server pointed at
/// the old cluster's archive is refused, never continued.
#[test]
fn a_cluster_created_again_under_its_name_never_continues_the_old_ones_archive() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let k = key.to_str().unwrap();
    let rows = |db: &MariaDb| db.query("SELECT id, at FROM pitr.w ORDER BY id").unwrap();
    let incarnation = |archive: &str, writes: usize| {
        let db = MariaDb::start().unwrap();
        db.sql(SCHEMA).unwrap();
        write_row(&db);
        let b = backup(
            &repo,
            &db,
            &[
                "--method",
                "logical",
                "--encryption-key-file",
                k,
                "--binlog-archive",
                archive,
            ],
            &[],
        );
        let a = Archiver::start_with(
            &repo,
            &db,
            &key,
            work.path(),
            archive,
            &["--archive", archive],
        );
        let written: Vec<Row> = (0..writes).map(|_| write_row(&db)).collect();
        let head = written.last().unwrap().gtid.clone();
        wait_archive_at(&repo, archive, &head, &a);
        a.stop();
        (db, b["id"].as_str().unwrap().to_string(), head)
    };
    // The first cluster writes more than the second: by sequence numbers alone, the second's
    // `latest` would run on into the first's rows.
    let (first, first_backup, first_head) = incarnation("quay-1111aaaa", 6);
    let (second, second_backup, second_head) = incarnation("quay-2222bbbb", 2);
    assert_eq!(
        first.query("SELECT @@gtid_binlog_pos").unwrap()[0][0]
            .split('-')
            .take(2)
            .collect::<Vec<_>>(),
        second.query("SELECT @@gtid_binlog_pos").unwrap()[0][0]
            .split('-')
            .take(2)
            .collect::<Vec<_>>(),
        "the same domain and server id"
    );
    let (restored, out) = restore_until(&repo, &key, &second_backup, &["--until", "latest"]);
    assert_eq!(rows(&restored), rows(&second), "{out}");
    assert_eq!(
        restored.query("SELECT @@gtid_binlog_pos").unwrap()[0][0],
        second_head
    );
    let (restored, out) = restore_until(&repo, &key, &first_backup, &["--until", "latest"]);
    assert_eq!(rows(&restored), rows(&first), "{out}");
    assert_eq!(
        restored.query("SELECT @@gtid_binlog_pos").unwrap()[0][0],
        first_head
    );

    // The second cluster's server on the first cluster's archive: its history lacks the
    // archive's head, and the archiver stops, saying so.
    let refused = Archiver::start_with(
        &repo,
        &second,
        &key,
        work.path(),
        "refused",
        &["--archive", "quay-1111aaaa"],
    );
    let (status, log) = refused.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    assert!(log.contains("lacks archived transactions"), "{log}");
}
