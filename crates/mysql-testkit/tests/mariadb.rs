//! The MariaDB side of the harness against a real server: fixture, snapshots, users, restart.

use std::time::Instant;

use bulwark_mysql_testkit::{assert_same, load_fixture, snapshot, MariaDb, FIXTURE_DATABASES};

#[test]
fn fixture_snapshot_detects_changes_and_survives_restart() {
    let started = Instant::now();
    let mut db = MariaDb::start().expect("start MariaDB");
    eprintln!("server start: {:?}", started.elapsed());

    let loaded = Instant::now();
    load_fixture(&db, 2_000).expect("load fixture");
    eprintln!("fixture load (2000 rows): {:?}", loaded.elapsed());

    let snap_time = Instant::now();
    let before = snapshot(&db).expect("snapshot");
    eprintln!("snapshot: {:?}", snap_time.elapsed());
    for name in FIXTURE_DATABASES {
        let key = format!("`{name}`");
        assert!(
            before.databases.contains_key(&key),
            "missing database {key}"
        );
    }
    assert_eq!(before.tables["`orchard`.`orders`"].rows, 2_000);
    assert_eq!(before.tables["`tidewater`.`readings`"].rows, 2_000);
    assert_eq!(before.tables["`orchard`.`balance_audit`"].rows, 1);
    assert_eq!(before.tables["`orchard`.`refunds`"].rows, 0);
    assert!(before.tables["`tidewater`.`sensor_log`"]
        .create
        .contains("ENGINE=Aria"));
    assert!(before.tables["`tidewater`.`legacy_counters`"]
        .create
        .contains("ENGINE=MyISAM"));
    assert!(before.tables.contains_key("`tide-pool`.`kelp forest`"));
    assert!(before.tables.contains_key("`orchard`.`invoice_no`"));
    assert!(before.views["`orchard`.`order_totals`"].contains("`fixture_owner`@`localhost`"));
    assert_eq!(before.procedures.len(), 1);
    assert_eq!(before.functions.len(), 1);
    assert_eq!(before.triggers.len(), 2);
    assert_eq!(before.events.len(), 1);
    assert!(before.functions["`orchard`.`order_tax`"].contains("Mehrwertsteuer – 19 %"));

    // Equal to itself and to a second capture.
    assert_same(&before, &before);
    assert_same(&before, &snapshot(&db).unwrap());

    // Non-ASCII text round-trips through the client.
    let names = db
        .sql("SELECT display_name FROM orchard.customers WHERE id = 7")
        .unwrap();
    assert_eq!(names.trim(), "Ярослав 7 🍎");

    // A clean restart keeps everything (data and definitions live in the datadir).
    db.restart().expect("restart");
    assert_same(&before, &snapshot(&db).unwrap());

    // One changed byte in one row changes the checksum, and the diff names it.
    db.sql("UPDATE orchard.orders SET note = 'changed' WHERE id = 1000")
        .unwrap();
    let after = snapshot(&db).unwrap();
    let diff = before.diff(&after);
    assert_eq!(diff.len(), 1, "{diff:#?}");
    assert!(diff[0].contains("`orchard`.`orders` checksum"), "{diff:#?}");
    let panic = std::panic::catch_unwind(|| assert_same(&before, &after)).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("`orchard`.`orders` checksum"), "{message}");

    // A changed definition shows as a line diff.
    db.sql("CREATE OR REPLACE DEFINER='root'@'localhost' FUNCTION orchard.order_tax(p DECIMAL(12,2)) RETURNS DECIMAL(12,2) DETERMINISTIC RETURN ROUND(p * 0.2, 2)")
        .unwrap();
    let diff = after.diff(&snapshot(&db).unwrap()).join("\n");
    assert!(diff.contains("function `orchard`.`order_tax`"), "{diff}");
    eprintln!("total: {:?}", started.elapsed());
}

#[test]
fn password_user_and_crash_recovery() {
    let mut db = MariaDb::start().expect("start MariaDB");
    db.create_user("backup_operator", "s3cr3t 'quoted'")
        .unwrap();
    let who = db
        .sql_as(
            "backup_operator",
            Some("s3cr3t 'quoted'"),
            "SELECT CURRENT_USER()",
        )
        .unwrap();
    assert_eq!(who.trim(), "backup_operator@localhost");
    let err = db
        .sql_as("backup_operator", Some("wrong"), "SELECT 1")
        .unwrap_err();
    assert!(format!("{err:#}").contains("Access denied"), "{err:#}");
    let grants = db.sql("SHOW GRANTS FOR 'backup_operator'@'%'").unwrap();
    assert!(
        grants.contains("RELOAD") && grants.contains("BINLOG MONITOR"),
        "{grants}"
    );

    // Over TCP on loopback: root without password, and the password user.
    let tcp = |user: &str, password: &str| {
        std::process::Command::new("mariadb")
            .args([
                "--no-defaults",
                "-N",
                "-B",
                "--protocol=TCP",
                "--host=127.0.0.1",
            ])
            .arg(format!("--port={}", db.port()))
            .arg(format!("--user={user}"))
            .env("MYSQL_PWD", password)
            .args(["-e", "SELECT CURRENT_USER()"])
            .output()
            .unwrap()
    };
    let root = tcp("root", "");
    assert!(
        root.status.success(),
        "{}",
        String::from_utf8_lossy(&root.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&root.stdout).trim(),
        "root@127.0.0.1"
    );
    let operator = tcp("backup_operator", "s3cr3t 'quoted'");
    assert!(
        operator.status.success(),
        "{}",
        String::from_utf8_lossy(&operator.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&operator.stdout).trim(),
        "backup_operator@%"
    );

    db.sql("CREATE DATABASE marsh; CREATE TABLE marsh.t (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO marsh.t VALUES (1), (2);")
        .unwrap();
    db.kill9();
    assert!(!db.is_running());
    db.restart().expect("crash recovery");
    assert_eq!(db.sql("SELECT COUNT(*) FROM marsh.t").unwrap().trim(), "2");
}

#[test]
fn start_on_existing_datadir() {
    let mut first = MariaDb::start().unwrap();
    first
        .sql("CREATE DATABASE estuary; CREATE TABLE estuary.t (id INT PRIMARY KEY, v VARCHAR(10)); INSERT INTO estuary.t VALUES (1, 'ä');")
        .unwrap();
    first.stop().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", first.datadir().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    drop(first);

    let second = MariaDb::start_with_datadir(copy.path()).unwrap();
    assert_eq!(second.sql("SELECT v FROM estuary.t").unwrap().trim(), "ä");
    drop(second);
    assert!(copy.path().join("mysql").is_dir(), "datadir left in place");

    let err = MariaDb::start_with_datadir(&copy.path().join("estuary")).unwrap_err();
    assert!(format!("{err:#}").contains("does not look like a MariaDB datadir"));
}

/// The snapshot's normalisation is right when the standard tools' round trips compare equal:
/// a physical copy (mariabackup backup + prepare) and a logical one (mariadb-dump | mariadb).
#[test]
fn snapshot_equal_after_standard_tool_round_trips() {
    use std::process::{Command, Stdio};

    let source = MariaDb::start().unwrap();
    load_fixture(&source, 500).unwrap();
    let expected = snapshot(&source).unwrap();

    let backup = tempfile::tempdir().unwrap();
    let target = backup.path().join("full");
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new("mariabackup")
        .arg("--backup")
        .arg(format!("--target-dir={}", target.display()))
        .arg(format!("--socket={}", source.socket().display()))
        .arg("--user=root"));
    run(Command::new("mariabackup")
        .arg("--prepare")
        .arg(format!("--target-dir={}", target.display())));
    let physical = MariaDb::start_with_datadir(&target).unwrap();
    assert_same(&expected, &snapshot(&physical).unwrap());
    drop(physical);

    let logical = MariaDb::start().unwrap();
    let mut dump = Command::new("mariadb-dump")
        .args(["--no-defaults", "--user=root", "--single-transaction"])
        .args(["--routines", "--events", "--triggers", "--databases"])
        .args(FIXTURE_DATABASES)
        .arg(format!("--socket={}", source.socket().display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let load = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", logical.socket().display()))
        .stdin(dump.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(dump.wait().unwrap().success());
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    assert_same(&expected, &snapshot(&logical).unwrap());
}
