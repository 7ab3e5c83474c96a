//! Restores that never apply twice and never leave half a result, on real MariaDB: a replay into
//! a server passes over what an earlier replay recorded applying (with or without a binary
//! log), refuses one cut off before it recorded, a server past its target, and one holding
//! another history; a physical restore to a point in time
//! replaces its target only once the replay succeeded, and a killed one leaves the target as it
//! was for the next run to finish.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

/// Rows and a counter every transaction bumps: a transaction applied twice shows in the count.
const COUNTED: &str = "CREATE TABLE pitr.counter (id INT PRIMARY KEY, n BIGINT NOT NULL);
    INSERT INTO pitr.counter VALUES (1, 0);";

fn bump(db: &MariaDb, times: usize) {
    for _ in 0..times {
        db.sql("UPDATE pitr.counter SET n = n + 1 WHERE id = 1")
            .unwrap();
    }
}

fn count(db: &MariaDb) -> u64 {
    db.query("SELECT n FROM pitr.counter").unwrap()[0][0]
        .parse()
        .unwrap()
}

fn last_gtid(db: &MariaDb) -> String {
    db.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone()
}

/// A source with a logical and a physical backup and an archive of what followed: rows, then
/// counter bumps, with the GTID in the middle of them.
struct Archived {
    work: tempfile::TempDir,
    repo: String,
    key: PathBuf,
    source: MariaDb,
    logical: String,
    physical: String,
    middle: String,
    last: String,
}

fn archived() -> Archived {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    source.sql(COUNTED).unwrap();
    write_row(&source);
    let keyarg = ["--encryption-key-file", key.to_str().unwrap()];
    let logical = backup(
        &repo,
        &source,
        &[&["--method", "logical"], &keyarg[..]].concat(),
        &[],
    );
    let physical = backup(&repo, &source, &keyarg, &[]);
    let archiver = Archiver::start(&repo, &source, &key, work.path(), "archiver");
    for _ in 0..3 {
        write_row(&source);
    }
    bump(&source, 3);
    let middle = last_gtid(&source);
    bump(&source, 4);
    write_row(&source);
    let last = last_gtid(&source);
    wait_archived(&repo, &key, &last, &archiver);
    archiver.stop();
    Archived {
        repo,
        key,
        source,
        logical: logical["id"].as_str().unwrap().into(),
        physical: physical["id"].as_str().unwrap().into(),
        middle,
        last,
        work,
    }
}

#[test]
fn a_replay_run_again_applies_nothing_twice_and_a_server_past_the_target_is_refused() {
    let a = archived();
    let (repo, key) = (a.repo.as_str(), a.key.as_path());
    let replay =
        |db: &MariaDb, until: &[&str]| into_server("replay", repo, key, &a.logical, db, until);

    // (name, server options, whether the record of the first replay is lost, as when it is
    // killed before its end)
    let servers: [(&str, &[&str], bool); 3] = [
        ("with a binary log", &[], false),
        ("without one", &["--skip-log-bin"], false),
        (
            "killed before it recorded, on a server with its own id",
            &["--server-id=2"],
            true,
        ),
    ];
    for (name, args, lose_record) in servers {
        let target = MariaDb::start_with_args(args).unwrap();
        let out = ok(into_server(
            "restore",
            repo,
            key,
            &a.logical,
            &target,
            &["--until-gtid", &a.middle],
        ));
        assert_eq!(count(&target), 3, "{name}: {out}");
        if lose_record {
            // Its binary log still holds what was replayed, under the source's id: refused,
            // never applied twice.
            target.sql("SET GLOBAL gtid_slave_pos = ''").unwrap();
            fails(
                replay(&target, &["--until", "latest"]),
                &["an earlier replay was cut off", &a.middle],
            );
            assert_eq!(count(&target), 3, "{name}");
            continue;
        }

        // Continued to the end: what the first replay applied is passed over, not applied again.
        let out = ok(replay(&target, &["--until", "latest"]));
        assert!(out.contains("the server already held"), "{name}: {out}");
        assert_eq!(count(&target), 7, "{name}: {out}");
        assert_eq!(ids(&target), ids(&a.source), "{name}: {out}");

        // Run again: nothing applied.
        let out = ok(replay(&target, &["--until", "latest"]));
        assert!(out.starts_with("replayed 0 transactions"), "{name}: {out}");
        assert!(
            out.contains(&format!("GTID position {}", a.last)),
            "{name}: {out}"
        );
        assert_eq!(count(&target), 7, "{name}: {out}");

        // A target behind what the server holds: refused, nothing applied.
        fails(
            replay(&target, &["--until-gtid", &a.middle]),
            &[
                "the server already holds the archived history up to",
                &a.last,
            ],
        );
        assert_eq!(count(&target), 7, "{name}");
    }

    // Restored to the end, then loaded again without a target: a `replay` starts from the
    // backup's point, not from where the earlier restore had got to.
    let reloaded = MariaDb::start().unwrap();
    ok(into_server(
        "restore",
        repo,
        key,
        &a.logical,
        &reloaded,
        &["--until", "latest"],
    ));
    assert_eq!(count(&reloaded), 7);
    ok(into_server(
        "restore",
        repo,
        key,
        &a.logical,
        &reloaded,
        &[],
    ));
    assert_eq!(count(&reloaded), 0);
    let out = ok(replay(&reloaded, &["--until", "latest"]));
    assert_eq!(count(&reloaded), 7, "{out}");
    assert_eq!(ids(&reloaded), ids(&a.source), "{out}");

    // A server that holds another history's transactions under the archive's numbers (here
    // its replica position) is refused before anything is replayed; a restore, which loads
    // the backup first, starts from the backup's point whatever the position said.
    let other = MariaDb::start().unwrap();
    other
        .sql(&format!(
            "SET GLOBAL gtid_slave_pos = '0-9-{}'",
            seq(&a.last)
        ))
        .unwrap();
    fails(
        replay(&other, &["--until", "latest"]),
        &["the server holds 0-9-", "a replay would mix the two"],
    );
    assert!(other
        .query("SHOW DATABASES LIKE 'pitr'")
        .unwrap()
        .is_empty());
    let out = ok(into_server(
        "restore",
        repo,
        key,
        &a.logical,
        &other,
        &["--until", "latest"],
    ));
    assert_eq!(count(&other), 7, "{out}");
    assert_eq!(
        other.query("SELECT @@gtid_slave_pos").unwrap()[0][0],
        a.last,
        "the replay recorded its end"
    );
}

fn physical_restore(a: &Archived, dir: &Path, until: &[&str]) -> std::process::Command {
    let mut args = vec![
        "restore",
        "--repo",
        &a.repo,
        "--encryption-key-file",
        a.key.to_str().unwrap(),
        &a.physical,
        "--target-dir",
        dir.to_str().unwrap(),
        "--force",
    ];
    args.extend(until);
    cli(&args)
}

fn beside(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".data.restore.lock")
        .collect();
    names.sort();
    names
}

#[test]
fn a_physical_restore_to_a_point_in_time_replaces_its_target_only_when_the_replay_succeeded() {
    let a = archived();
    let parent = a.work.path().join("restores");
    std::fs::create_dir(&parent).unwrap();
    let dir = parent.join("data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("old"), "the data being replaced").unwrap();

    // A damaged segment fails the replay: the old data is still the target, nothing is beside it.
    let seg_dir = Path::new(&a.repo).join("binlogs").join("default");
    let segment = std::fs::read_dir(&seg_dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("seg-000000.zst.aes"))
        .find(|p| p.is_file())
        .unwrap();
    let good = std::fs::read(&segment).unwrap();
    let mut bad = good.clone();
    bad[10] ^= 0x01;
    std::fs::write(&segment, &bad).unwrap();
    fails(
        physical_restore(&a, &dir, &["--until", "latest"]),
        &["is corrupt"],
    );
    assert!(
        dir.join("old").is_file(),
        "a failed replay replaced the target"
    );
    assert_eq!(beside(&dir), ["data"]);
    std::fs::write(&segment, &good).unwrap();

    // Killed while it works: the target is untouched; the next run clears what was left and
    // finishes.
    let mut child = physical_restore(&a, &dir, &["--until", "latest"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let staged = loop {
        let staging = beside(&dir)
            .into_iter()
            .find(|n| n.starts_with(".data.restore-"));
        if let Some(s) = staging.filter(|s| parent.join(s).join("ibdata1").is_file()) {
            break s;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the restore ended before it was killed"
        );
        assert!(Instant::now() < deadline, "no staged datadir in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        dir.join("old").is_file(),
        "a killed restore replaced the target"
    );
    assert!(
        parent.join(&staged).is_dir(),
        "the kill left its staging directory"
    );

    let out = ok(physical_restore(&a, &dir, &["--until", "latest"]));
    assert!(out.contains(&format!("GTID position {}", a.last)), "{out}");
    assert_eq!(beside(&dir), ["data"], "left-overs of the killed restore");
    assert!(!dir.join("old").exists());
    let restored = MariaDb::start_with_datadir(&dir).unwrap();
    assert_eq!(count(&restored), 7);
    let want: BTreeSet<u64> = ids(&a.source);
    assert_eq!(ids(&restored), want);
    drop(restored);

    // Restored to a point, then continued by `replay`: the datadir recorded where it stopped.
    let early = parent.join("early");
    ok(physical_restore(&a, &early, &["--until-gtid", &a.middle]));
    let continued = MariaDb::start_with_datadir(&early).unwrap();
    assert_eq!(count(&continued), 3);
    let out = ok(into_server(
        "replay",
        &a.repo,
        &a.key,
        &a.physical,
        &continued,
        &["--until", "latest"],
    ));
    assert_eq!(count(&continued), 7, "{out}");
    assert_eq!(ids(&continued), want, "{out}");
}
