//! Every kind of transaction MariaDB writes, archived and replayed on real servers: row,
//! statement and mixed formats; compressed events; binary logs encrypted at rest; DDL, MyISAM
//! and InnoDB in one transaction, rollbacks that keep non-transactional changes, sequences,
//! temporary tables, stored programs, `LOAD DATA`, and two-phase and one-phase XA. After
//! `restore --until latest` the restored server must equal the source, table by table.

mod common;

use common::pitr::*;
use common::*;

/// The transactions, in kinds the server logs differently; `{load}` is a file to load and
/// `{sequence}` takes a sequence's next value (row-based logging only).
const NEXT_VALUE: &str = "INSERT INTO zoo.i (v, n) SELECT CONCAT('sequence ', NEXTVAL(zoo.s)), 5;";

const WORKLOAD: &str = "
    CREATE DATABASE zoo;
    CREATE TABLE zoo.i (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(400) NOT NULL,
                        n DOUBLE NOT NULL DEFAULT 0) ENGINE=InnoDB;
    CREATE TABLE zoo.m (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(400) NOT NULL) ENGINE=MyISAM;
    CREATE SEQUENCE zoo.s START WITH 100 INCREMENT BY 7;
    INSERT INTO zoo.i (v, n) VALUES (REPEAT('a', 300), 1.5), ('b', 2), ('c', 3);
    UPDATE zoo.i SET v = CONCAT(v, 'x') WHERE id = 1;
    DELETE FROM zoo.i WHERE id = 2;
    SET @u = 'a user variable';
    INSERT INTO zoo.i (v, n) VALUES (@u, RAND());
    INSERT INTO zoo.i (v, n) VALUES (CONCAT('after ', LAST_INSERT_ID()), 4);
    BEGIN;
    INSERT INTO zoo.i (v) VALUES ('innodb beside myisam');
    INSERT INTO zoo.m (v) VALUES ('myisam beside innodb');
    COMMIT;
    BEGIN;
    INSERT INTO zoo.i (v) VALUES ('rolled back');
    INSERT INTO zoo.m (v) VALUES ('kept by a rollback');
    ROLLBACK;
    {sequence}
    CREATE TEMPORARY TABLE zoo.t (a INT);
    INSERT INTO zoo.t VALUES (5), (6);
    INSERT INTO zoo.i (v) SELECT CONCAT('from a temporary table ', a) FROM zoo.t;
    DROP TEMPORARY TABLE zoo.t;
    XA START 'two';
    INSERT INTO zoo.i (v) VALUES ('two-phase XA');
    XA END 'two';
    XA PREPARE 'two';
    XA COMMIT 'two';
    XA START 'one';
    INSERT INTO zoo.i (v) VALUES ('one-phase XA');
    XA END 'one';
    XA COMMIT 'one' ONE PHASE;
    XA START 'undone';
    INSERT INTO zoo.i (v) VALUES ('rolled-back XA');
    XA END 'undone';
    XA PREPARE 'undone';
    XA ROLLBACK 'undone';
    ALTER TABLE zoo.i ADD COLUMN extra INT NOT NULL DEFAULT 7;
    CREATE TABLE zoo.c AS SELECT id, v FROM zoo.i WHERE id < 5;
    CREATE VIEW zoo.vw AS SELECT id, v FROM zoo.i;
    CREATE PROCEDURE zoo.p(x INT) INSERT INTO zoo.i (v, n) VALUES ('from a procedure', x);
    CALL zoo.p(9);
    CREATE TRIGGER zoo.tr AFTER INSERT ON zoo.m FOR EACH ROW
        INSERT INTO zoo.i (v) VALUES (CONCAT('from a trigger ', NEW.id));
    INSERT INTO zoo.m (v) VALUES ('fires the trigger');
    LOAD DATA INFILE '{load}' INTO TABLE zoo.m (v);
    LOAD DATA INFILE '{load}' INTO TABLE zoo.i (v);
    RENAME TABLE zoo.c TO zoo.c2;
    DROP VIEW zoo.vw;
";

/// Starts a server with `args`, runs the workload while it is archived, restores the backup
/// taken before it to the latest point, and compares.
/// The kinds of event the source logged from `file` at `position` on (what the archive holds
/// after the backup), with the header events of `file` the archiver reads first (its format
/// and, encrypted at rest, its encryption).
fn event_kinds(db: &MariaDb, file: &str, position: u64) -> std::collections::BTreeSet<String> {
    let logs = db.query("SHOW BINARY LOGS").unwrap();
    let header = db
        .query(&format!("SHOW BINLOG EVENTS IN '{file}' LIMIT 2"))
        .unwrap();
    logs.iter()
        .filter(|log| log[0].as_str() >= file)
        .flat_map(|log| {
            let from = if log[0] == file { position } else { 4 };
            db.query(&format!("SHOW BINLOG EVENTS IN '{}' FROM {from}", log[0]))
                .unwrap()
        })
        .chain(header)
        .map(|event| event[2].clone())
        .collect()
}

/// Archives the workload from a source started with `args`, whose binary log must hold events
/// of each kind in `kinds`, and restores it to `latest`.
fn archived_and_replayed(name: &str, args: &[&str], kinds: &[&str]) {
    let ArchivedSource {
        work,
        repo,
        key,
        source,
        backup_id: id,
        archiver: a,
    } = archived_source(args, "", name);
    let load = work.path().join("load.txt");
    std::fs::write(&load, "loaded one\nloaded two\nloaded three\n").unwrap();
    let statement_based = args.contains(&"--binlog-format=STATEMENT");
    let workload = WORKLOAD
        .replace("{load}", load.to_str().unwrap())
        .replace("{sequence}", if statement_based { "" } else { NEXT_VALUE });
    source
        .sql(&workload)
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    let last = write_row(&source);
    let listing = list(&repo, &[]);
    let backup = listing["backups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{listing}"));
    let logged = event_kinds(
        &source,
        backup["binlogFile"].as_str().unwrap(),
        backup["binlogPosition"].as_u64().unwrap(),
    );
    for kind in kinds {
        assert!(logged.contains(*kind), "{name}: no {kind} among {logged:?}");
    }
    wait_archived(&repo, &key, &last.gtid, &a);
    a.stop();
    let (restored, _) = restore_until(&repo, &key, &id, &["--until", "latest"]);
    assert_same(&snapshot(&source).unwrap(), &snapshot(&restored).unwrap());
    let xa = restored
        .query("SELECT v FROM zoo.i WHERE v LIKE '%XA' ORDER BY v")
        .unwrap();
    assert_eq!(xa, [["one-phase XA"], ["two-phase XA"]], "{name}");
}

#[test]
fn row_events_compressed_are_archived_and_replayed() {
    archived_and_replayed(
        "row-compressed",
        &["--log-bin-compress=ON", "--log-bin-compress-min-len=10"],
        &[
            "Annotate_rows",
            "Write_rows_compressed_v1",
            "Update_rows_compressed_v1",
            "Delete_rows_compressed_v1",
            "Query_compressed",
            "XA_prepare",
        ],
    );
}

#[test]
fn statement_events_are_archived_and_replayed() {
    archived_and_replayed(
        "statement",
        &["--binlog-format=STATEMENT"],
        &[
            "Query",
            "User var",
            "Intvar",
            "RAND",
            "Begin_load_query",
            "Execute_load_query",
            "XA_prepare",
        ],
    );
}

#[test]
fn mixed_events_of_a_binlog_encrypted_at_rest_are_archived_and_replayed() {
    let keys = tempfile::tempdir().unwrap();
    let file = keys.path().join("keys.txt");
    // One key, id 1 (AES-256): the binary log is encrypted with key 1.
    std::fs::write(&file, format!("1;{}\n", "ab".repeat(32))).unwrap();
    let plugin = format!("--file-key-management-filename={}", file.display());
    archived_and_replayed(
        "mixed-encrypted",
        &[
            "--binlog-format=MIXED",
            "--plugin-load-add=file_key_management",
            &plugin,
            "--encrypt-binlog=ON",
        ],
        &[
            "Start_encryption",
            "Annotate_rows",
            "Write_rows_v1",
            "Query",
            "XA_prepare",
        ],
    );
}
