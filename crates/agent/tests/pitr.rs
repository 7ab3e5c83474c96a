//! A new cluster bootstrapped from a logical backup to a point in time, on real MariaDB: the
//! source's binary logs are archived by `mysql-backup archive`; each new pod's restore checks
//! the target against the archive and leaves it with the pending load; the primary's agent
//! loads the dump and replays the archive up to the target under the new cluster's own GTIDs,
//! and the replica, whose `server_id` is the source's, gets all of it by replication.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

fn seq(gtid: &str) -> u64 {
    gtid.rsplit('-').next().unwrap().parse().unwrap()
}

#[test]
fn a_logical_bootstrap_to_a_gtid_replays_the_archive_under_the_new_clusters_gtids() {
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = w.join("repo").display().to_string();
    // server_id 101, as the new cluster's replica will have.
    let source = instance_server(w, "harbor-1");
    source.sql("SET GLOBAL read_only = OFF").unwrap();
    load_fixture(&source, 100).unwrap();
    let b = backup(&repo, &source, &["--method", "logical"], &[]);
    let id = b["id"].as_str().unwrap().to_owned();

    let log = w.join("archiver.log");
    let mut args = vec!["archive", "--repo", &repo, "--flush-every", "1s"];
    let db_args = source.cli_args();
    args.extend(db_args.iter().map(String::as_str));
    let mut archiver = backup_cli(&args)
        .env("MYSQL_BACKUP_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    source
        .sql("CREATE DATABASE tide; CREATE TABLE tide.marks (id INT PRIMARY KEY, at VARCHAR(20))")
        .unwrap();
    for i in 1..=30 {
        source
            .sql(&format!("INSERT INTO tide.marks VALUES ({i}, 'mark {i}')"))
            .unwrap();
        if i == 20 {
            source
                .sql("UPDATE tide.marks SET at = 'updated' WHERE id = 3")
                .unwrap();
        }
    }
    let beyond = scalar(&source, "SELECT @@gtid_binlog_pos");
    // The target: row 20 and the update after it; rows 21..30 lie beyond it.
    let target = format!("0-101-{}", seq(&beyond) - 10);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = ok(backup_cli(&["list", "--json", "--repo", &repo]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let through = v["archives"]["default"]["through"]
            .as_str()
            .unwrap_or("0-0-0");
        if seq(through) >= seq(&beyond) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "archive at {through}, not {beyond}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &archiver.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(archiver.wait().unwrap().success());
    // What the new cluster must hold: the source as it was at the target.
    source.sql("DELETE FROM tide.marks WHERE id > 20").unwrap();
    let at_target = snapshot(&source).unwrap();
    drop(source);

    // Each pod's restore container, into its own volume.
    let restore = |volume: &str, until_gtid: &str| {
        let datadir = w.join(volume).join("data");
        std::fs::create_dir_all(&datadir).unwrap();
        let mut c = cli(&[
            "restore",
            "--repo",
            &repo,
            "--until-gtid",
            until_gtid,
            "--datadir",
        ]);
        c.arg(&datadir).arg(&id);
        c
    };
    // A target the archive does not reach is refused before anything is left for the agent.
    let c = restore("volume-x", "0-101-99999");
    fails(c, &["outside the recovery window"]);
    assert!(!w.join("volume-x/bulwark-pending-logical-restore").exists());

    let mut pending = Vec::new();
    for ordinal in 0..2 {
        let c = restore(&format!("volume-{ordinal}"), &target);
        assert!(ok(c).contains("the agent loads it"));
        let file = w.join(format!("volume-{ordinal}/bulwark-pending-logical-restore"));
        let staged: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            staged,
            serde_json::json!({"backupId": id, "untilGtid": target})
        );
        pending.push(file);
    }
    let p_db = instance_server(w, "quay-0");
    let mut r_db = instance_server(w, "quay-1");
    assert_eq!(scalar(&r_db, "SELECT @@server_id"), "101");
    // What an earlier attempt that failed part-way would have left: the load starts over.
    p_db.sql("CREATE DATABASE tide; CREATE TABLE tide.marks (id INT PRIMARY KEY); INSERT INTO tide.marks VALUES (999)")
        .unwrap();
    let pair = BootstrappedPair::start(w, &p_db, &r_db, &pending, &repo);
    let (p, r) = (&pair.primary, &pair.replica);

    wait_status(p, &[r], "/readyz", 200, "primary: writable");
    assert!(!pending[0].exists());
    assert!(
        p.logs().contains("binlog archive replayed into mysqld"),
        "{}",
        p.logs()
    );
    assert_same(&at_target, &snapshot(&p_db).unwrap());
    // Everything the new primary logged is its own: its server_id, one domain, in order.
    let pos = scalar(&p_db, "SELECT @@gtid_binlog_pos");
    assert!(pos.starts_with("0-100-"), "{pos}");
    let events = p_db.query("SHOW BINLOG EVENTS").unwrap();
    let gtids: Vec<&Vec<String>> = events.iter().filter(|e| e[2] == "Gtid").collect();
    assert!(
        gtids.len() > 31,
        "the load and the replay are logged: {events:?}"
    );
    assert!(events.iter().all(|e| e[3] == "100"), "{events:?}");

    wait_status(r, &[p], "/readyz", 200, "replica: replicating from");
    wait_for("the replica at the primary's position", &[p, r], || {
        (scalar(&r_db, "SELECT @@gtid_slave_pos") == pos).then_some(())
    });
    assert_same(&at_target, &replica_snapshot(&r_db));
    let status = replica_status(&r_db);
    assert_eq!(status["Last_SQL_Errno"], "0", "{status:?}");

    // The cluster goes on from there.
    p_db.sql("INSERT INTO tide.marks VALUES (21, 'after')")
        .unwrap();
    let now = scalar(&p_db, "SELECT @@gtid_binlog_pos");
    wait_for("the replica at the primary's position", &[p, r], || {
        (scalar(&r_db, "SELECT @@gtid_slave_pos") == now).then_some(())
    });
    r_db.restart().unwrap();
    assert_same(&snapshot(&p_db).unwrap(), &replica_snapshot(&r_db));
    eprintln!(
        "point-in-time copy replicated after {:?}",
        started.elapsed()
    );
}
