//! Restore drills on real MariaDB: a good physical and a good logical backup pass, with every
//! table checked and the user's assertions held, also brought to the archive's end; a failing
//! assertion, a damaged backup and a table the server finds damaged each fail the drill with
//! the cause in one line; a backup at the archive's very end passes with nothing replayed;
//! nothing is left in the scratch directory.

mod common;

use std::path::Path;
use std::time::Duration;

use common::pitr::*;
use common::*;

fn drill(
    s: &Scenario,
    key: &Path,
    scratch: &Path,
    id: &str,
    extra: &[&str],
) -> std::process::Command {
    let mut args = vec![
        "drill",
        "--repo",
        &s.repo,
        "--encryption-key-file",
        key.to_str().unwrap(),
        "--scratch-dir",
        scratch.to_str().unwrap(),
        id,
    ];
    args.extend(extra);
    cli(&args)
}

/// Nothing in `dir` but the lock drills take in it while they start.
fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .all(|e| e.unwrap().file_name() == ".mysql-backup-drill-lock")
}

#[test]
fn good_backups_pass_their_drills_and_bad_ones_fail_with_the_cause() {
    let s = Scenario::new(300);
    let key = key_file(s.work.path(), "key");
    let keyarg = ["--encryption-key-file", key.to_str().unwrap()];
    let scratch = s.work.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    s.source.sql(SCHEMA).unwrap();
    let before: Vec<Row> = (0..3).map(|_| write_row(&s.source)).collect();
    let (physical, physical_dir) = s.backup(&keyarg);
    let (logical, _) = s.backup(&[&["--method", "logical"], &keyarg[..]].concat());
    let tables: u64 = s
        .source
        .query(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' \
         AND TABLE_SCHEMA NOT IN ('information_schema', 'performance_schema', 'sys', 'mysql')",
        )
        .unwrap()[0][0]
        .parse()
        .unwrap();

    // Each method: restored, every table checked, the assertion held, nothing left behind.
    let rows_then = format!("SELECT COUNT(*) = {} FROM pitr.w", before.len());
    for id in [&physical, &logical] {
        let out = ok(drill(
            &s,
            &key,
            &scratch,
            id,
            &["--assert", &rows_then, "--json"],
        ));
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["ok"], true, "{report}");
        assert_eq!(report["backupId"], id.as_str(), "{report}");
        assert!(
            report["tablesChecked"].as_u64().unwrap() > tables,
            "the user's tables and the system's: {report}"
        );
        assert_eq!(report["assertions"], 1, "{report}");
        assert!(report["restoreSeconds"].as_f64().unwrap() > 0.0, "{report}");
        assert!(empty(&scratch), "the drill of {id} left files behind");
    }

    // To the archive's end: the rows written after the backup are there.
    let archiver = Archiver::start(&s.repo, &s.source, &key, s.work.path(), "archiver");
    let after = write_for(&s.source, Duration::from_millis(1500));
    let last = after.last().unwrap().gtid.clone();
    wait_archived(&s.repo, &key, &last, &archiver);
    archiver.stop();
    let rows_now = format!(
        "SELECT COUNT(*) = {} FROM pitr.w",
        before.len() + after.len()
    );
    for id in [&physical, &logical] {
        let out = ok(drill(
            &s,
            &key,
            &scratch,
            id,
            &["--until", "latest", "--assert", &rows_now],
        ));
        assert!(
            out.starts_with(&format!("drill of backup {id} passed")),
            "{out}"
        );
        assert!(
            out.contains(&format!("replayed to GTID position {last}")),
            "{out}"
        );
        assert!(empty(&scratch));
    }
    // A backup at the archive's very end: nothing is left to replay, and the drill passes.
    let (fresh, _) = s.backup(&keyarg);
    let out = ok(drill(
        &s,
        &key,
        &scratch,
        &fresh,
        &["--until", "latest", "--assert", &rows_now],
    ));
    assert!(
        out.contains(&format!("replayed to GTID position {last}")),
        "{out}"
    );

    // An assertion must be one statement: a second result would go unjudged.
    fails(
        drill(
            &s,
            &key,
            &scratch,
            &logical,
            &["--assert", "SELECT 1; SELECT 0"],
        ),
        &["assertion 1", "returned more than one result"],
    );
    assert!(empty(&scratch));

    // An assertion that does not hold fails the drill, naming it.
    fails(
        drill(&s, &key, &scratch, &logical, &["--assert", &rows_now]),
        &[
            &format!("drill of backup {logical} failed"),
            "assertion 1",
            "does not hold: it returned 0",
        ],
    );
    assert!(empty(&scratch));

    // A table the server finds damaged, though every digest is right: the physical copy of a
    // MyISAM table whose index was cut short.
    s.source
        .sql(
            "USE pitr;
             CREATE TABLE pitr.frail (id INT PRIMARY KEY, v VARCHAR(100)) ENGINE=MyISAM;
             INSERT INTO pitr.frail SELECT seq, REPEAT('v', 50) FROM seq_1_to_2000;
             FLUSH TABLES pitr.frail;",
        )
        .unwrap();
    let index = s.source.datadir().join("pitr").join("frail.MYI");
    let mut bytes = std::fs::read(&index).unwrap();
    let cut = bytes.len() / 2;
    bytes[1024..cut].fill(0xff);
    std::fs::write(&index, &bytes).unwrap();
    let (frail, _) = s.backup(&keyarg);
    fails(
        drill(&s, &key, &scratch, &frail, &[]),
        &[
            &format!("drill of backup {frail} failed"),
            "CHECK TABLE found 1 damaged table(s); pitr.frail",
        ],
    );
    assert!(empty(&scratch));

    // A damaged backup: the restore refuses the chunk.
    let segment = std::fs::read_dir(&physical_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .min()
        .unwrap();
    let mut data = std::fs::read(&segment).unwrap();
    data[100] ^= 0x01;
    std::fs::write(&segment, data).unwrap();
    fails(
        drill(&s, &key, &scratch, &physical, &[]),
        &[
            &format!("drill of backup {physical} failed: restore:"),
            "is corrupt",
        ],
    );
    assert!(empty(&scratch));
}

/// The source's accounts, which a logical dump loads and flushes into the scratch server, do
/// not lock the drill out; a stopped drill leaves nothing, a killed one leaves its directory
/// to the next drill, which removes it.
#[test]
fn a_drill_is_not_locked_out_by_the_sources_accounts_and_leaves_nothing_when_stopped() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let scratch = work.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let source = MariaDb::start().unwrap();
    // The sequence engine's `seq_*` tables need a current database.
    source
        .sql(
            "CREATE DATABASE shop; USE shop; \
             CREATE TABLE shop.orders (id INT PRIMARY KEY, v VARCHAR(200)); \
             INSERT INTO shop.orders SELECT seq, REPEAT('o', 150) FROM seq_1_to_20000; \
             ALTER USER 'root'@'localhost' IDENTIFIED BY 'the-sources-own-secret';",
        )
        .unwrap();
    let port = source.port().to_string();
    let out = ok(cli(&[
        "backup",
        "--repo",
        &repo,
        "--json",
        "--method",
        "logical",
        "--encryption-key-file",
        key.to_str().unwrap(),
        "--mysql-host",
        "127.0.0.1",
        "--mysql-port",
        &port,
        "--mysql-user",
        "root",
    ]));
    let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let args = |extra: &[&str]| {
        let mut all = vec![
            "drill",
            "--repo",
            &repo,
            "--encryption-key-file",
            key.to_str().unwrap(),
            "--scratch-dir",
            scratch.to_str().unwrap(),
            &id,
        ];
        all.extend_from_slice(extra);
        all.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        let argv: Vec<&str> = a.iter().map(String::as_str).collect();
        cli(&argv)
    };
    let out = ok(run(&[
        "--assert",
        "SELECT COUNT(*) = 20000 FROM shop.orders",
    ]));
    assert!(out.contains("1 assertions held"), "{out}");
    assert!(empty(&scratch));

    // Stopped (SIGTERM) or killed while it restores.
    for signal in ["-TERM", "-KILL"] {
        let mut child = run(&[])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while empty(&scratch) {
            assert!(child.try_wait().unwrap().is_none(), "the drill ended first");
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap()
            .success());
        let status = child.wait().unwrap();
        assert!(!status.success(), "{signal}: {status}");
        if signal == "-TERM" {
            assert!(empty(&scratch), "a stopped drill left files behind");
        } else {
            assert!(!empty(&scratch), "a killed drill cannot clean up");
        }
    }
    ok(run(&[]));
    assert!(
        empty(&scratch),
        "the next drill removes what a killed one left"
    );
    // So the test's server shuts down as it was started.
    source
        .sql_as(
            "root",
            Some("the-sources-own-secret"),
            "ALTER USER 'root'@'localhost' IDENTIFIED BY ''",
        )
        .unwrap();
}
