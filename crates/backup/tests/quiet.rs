//! A quiet period on real MariaDB: after the last commit the server writes nothing, the
//! archiver's heartbeats say so, and a time target inside that period is recoverable (it
//! restores everything archived) where it used to be refused as outside the window; a target
//! past what the heartbeats covered is still refused. The archiver's report and `list` show the
//! window reaching into the quiet period.

mod common;

use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

fn stamp(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[test]
fn a_time_target_in_a_quiet_period_the_heartbeats_cover_restores_everything_archived() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    write_row(&source);
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
    let archiver = Archiver::start(&repo, &source, &key, work.path(), "archiver");
    let rows: Vec<Row> = (0..3).map(|_| write_row(&source)).collect();
    let last = rows.last().unwrap().clone();
    wait_archived(&repo, &key, &last.gtid, &archiver);

    // The server stays quiet; the window reaches past the last commit.
    let quiet_until = last.second + 3;
    let deadline = Instant::now() + Duration::from_secs(40);
    let listing = loop {
        let l = list(&repo, &[]);
        let to = l["backups"][0]["recoveryWindow"]["toTime"]
            .as_str()
            .map(|t| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp());
        if to.is_some_and(|t| t >= quiet_until) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the window did not reach {} in 40 s: {l}; archiver log: {}",
            stamp(quiet_until),
            archiver.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        listing["backups"][0]["recoveryWindow"]["to"],
        last.gtid.as_str(),
        "the window's end is still the last transaction: {listing}"
    );
    // A statement that runs for seconds holds the coverage back at its start (its stamp):
    // a restore to a time after it started must wait until it is archived.
    let slow = {
        let socket = source.socket().to_path_buf();
        std::thread::spawn(move || {
            std::process::Command::new("mariadb")
                .args(["--socket", socket.to_str().unwrap(), "--user", "root", "-e"])
                .arg("INSERT INTO pitr.w (at, pad) SELECT NOW(6), CONCAT('slow', SLEEP(14))")
                .status()
                .unwrap()
        })
    };
    // Longer than the coverage is written every (10 s).
    std::thread::sleep(Duration::from_secs(12));
    let to = |l: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(
            l["backups"][0]["recoveryWindow"]["toTime"]
                .as_str()
                .unwrap(),
        )
        .unwrap()
        .timestamp()
    };
    let during = list(&repo, &[]);
    assert!(slow.join().unwrap().success());
    // Its start as the server stamped it: the client may begin it a moment after it was
    // spawned, in the next second, and a probe before then rightly covers the second before.
    let slow_started: i64 = source
        .query("SELECT FLOOR(UNIX_TIMESTAMP(at)) FROM pitr.w WHERE pad LIKE 'slow%'")
        .unwrap()[0][0]
        .parse()
        .unwrap();
    assert!(
        to(&during) < slow_started,
        "the window passed a running statement's start ({}): {during}",
        stamp(slow_started)
    );
    let slow_row = source.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();
    wait_archived(&repo, &key, &slow_row, &archiver);
    let last = Row {
        id: *ids(&source).iter().max().unwrap(),
        second: slow_started,
        gtid: slow_row,
    };
    let quiet_until = slow_started + 1;
    let deadline = Instant::now() + Duration::from_secs(40);
    while to(&list(&repo, &[])) < quiet_until {
        assert!(Instant::now() < deadline, "the window did not move on");
        std::thread::sleep(Duration::from_millis(500));
    }
    let report = archiver.report();
    let reported = chrono::DateTime::parse_from_rfc3339(report["recoverableTo"].as_str().unwrap())
        .unwrap()
        .timestamp();
    assert!(reported >= quiet_until, "{report}");
    archiver.stop();

    let until = stamp(quiet_until);
    let (restored, out) = restore_until(&repo, &key, &id, &["--until", &until]);
    assert_eq!(
        ids(&restored),
        ids(&source),
        "restore --until {until}: {out}"
    );
    assert!(
        out.contains(&format!("the data is at GTID position {}", last.gtid)),
        "{out}"
    );

    // Past what the heartbeats covered: refused, with the window.
    let empty = MariaDb::start().unwrap();
    let later = stamp(chrono::Utc::now().timestamp() + 3600);
    fails(
        into_server("restore", &repo, &key, &id, &empty, &["--until", &later]),
        &["outside the recovery window"],
    );
}
