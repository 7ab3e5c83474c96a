//! Sources, case by case: engine detection, tool choice and arguments, dump heads.
use super::*;

#[test]
fn binlog_line_from_mariabackup_and_xtrabackup() {
    let l = "[00] 2026-11-22 03:03:47 MySQL binlog position: filename 'mysql-bin.000001', position '623', GTID of the last change '0-1-2'";
    let p = parse_binlog_line(l).unwrap();
    assert_eq!(p.binlog_file.as_deref(), Some("mysql-bin.000001"));
    assert_eq!(p.binlog_position, Some(623));
    assert_eq!(p.gtid_set.as_deref(), Some("0-1-2"));
    let x = "MySQL binlog position: filename 'binlog.000002', position '157', GTID of the last change '3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5'";
    assert_eq!(
        parse_binlog_line(x).unwrap().gtid_set.as_deref(),
        Some("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5")
    );
    assert_eq!(parse_binlog_line("Streaming ./ibdata1"), None);
}

#[test]
fn dump_heads_of_both_engines() {
    let maria = b"-- MariaDB dump\n-- CHANGE MASTER TO MASTER_USE_GTID=slave_pos;\n-- SET GLOBAL gtid_slave_pos='0-1-2';\n-- CHANGE MASTER TO MASTER_LOG_FILE='mysql-bin.000001', MASTER_LOG_POS=623;\n-- Current Database: `x`\n-- CHANGE MASTER TO MASTER_LOG_FILE='later', MASTER_LOG_POS=1;\n";
    let p = parse_dump_head(maria);
    assert_eq!(
        (
            p.binlog_file.as_deref(),
            p.binlog_position,
            p.gtid_set.as_deref()
        ),
        (Some("mysql-bin.000001"), Some(623), Some("0-1-2"))
    );
    let tail = b"INSERT INTO x VALUES (1);\n-- SET GLOBAL gtid_slave_pos='0-1-7';\n-- Dump completed on 2026-11-22\n";
    let p = parse_dump_point(
        b"-- CHANGE MASTER TO MASTER_LOG_FILE='f.000002', MASTER_LOG_POS=9;\n",
        tail,
    );
    assert_eq!(
        (
            p.binlog_file.as_deref(),
            p.binlog_position,
            p.gtid_set.as_deref()
        ),
        (Some("f.000002"), Some(9), Some("0-1-7"))
    );
    let mysql = b"SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ 'abc:1-9';\n-- CHANGE REPLICATION SOURCE TO SOURCE_LOG_FILE='binlog.000003', SOURCE_LOG_POS=157;\n";
    let p = parse_dump_head(mysql);
    assert_eq!(
        (
            p.binlog_file.as_deref(),
            p.binlog_position,
            p.gtid_set.as_deref()
        ),
        (Some("binlog.000003"), Some(157), Some("abc:1-9"))
    );
}

#[test]
fn mysql_dump_flags_follow_the_server_version() {
    let conn = Connection {
        host: Some("db".into()),
        port: Some(3307),
        user: Some("bk".into()),
        ..Default::default()
    };
    let new = logical_args(&conn, Engine::MySql, "8.4.2", true, &[]);
    assert!(
        new.contains(&"--source-data=2".to_string())
            && new.contains(&"--set-gtid-purged=AUTO".to_string())
    );
    let old = logical_args(&conn, Engine::MySql, "8.0.25-15", true, &[]);
    assert!(old.contains(&"--master-data=2".to_string()));
    let maria = logical_args(
        &conn,
        Engine::MariaDb,
        "10.11.6-MariaDB",
        true,
        &["--skip-lock-tables".into()],
    );
    assert!(maria.contains(&"--gtid".to_string()) && maria.last().unwrap() == "--skip-lock-tables");
    let nobin = logical_args(&conn, Engine::MariaDb, "10.11.6-MariaDB", false, &[]);
    assert!(!nobin.iter().any(|a| a.contains("master-data")));
    assert!(new.contains(&"--host=db".to_string()) && new.contains(&"--port=3307".to_string()));
    // The agent's lease stamp stays out of every dump.
    for args in [&new, &old, &maria, &nobin] {
        assert!(args.contains(&"--ignore-table=mysql.bulwark_lease".to_string()));
    }
}

#[test]
fn engine_detection_and_tools() {
    assert_eq!(
        engine_of("10.11.6-MariaDB-0+deb12u1", "Debian 12"),
        Engine::MariaDb
    );
    assert_eq!(
        engine_of("8.0.36", "MySQL Community Server - GPL"),
        Engine::MySql
    );
    assert_eq!(
        engine_of("8.0.36-28", "Percona Server (GPL)"),
        Engine::MySql
    );
    assert_eq!(
        tool_candidates(Engine::MySql, ToolJob::Physical),
        &["xtrabackup"]
    );
}

#[test]
fn stderr_report_is_bounded_and_summarises() {
    let mut r = StderrReport::default();
    for i in 0..10_000 {
        r.push(format!("line {i} {}", "x".repeat(50)));
    }
    assert!(r.tail_bytes <= STDERR_TAIL_BYTES);
    assert!(r.summary().contains("line 9999"));
    r.push("[00] completed OK!".into());
    assert!(r.completed);
}
