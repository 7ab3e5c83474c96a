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

    // The TCP port answers too (the server binds loopback only).
    let addr = std::net::TcpStream::connect(("127.0.0.1", db.port())).unwrap();
    drop(addr);

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
