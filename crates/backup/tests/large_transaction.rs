//! A transaction of any size on real MariaDB: one transaction of more than a gibibyte of
//! binary log is archived and replayed while the archiver and the restore stay well within
//! the memory limits the chart gives them (512 MiB each): what does not fit a fixed memory
//! budget waits in temporary files.

mod common;

use std::time::Duration;

use common::pitr::*;
use common::*;

/// Rows of the large transaction; each logs about 1 KiB.
const ROWS: u64 = 1_100_000;

/// The most resident memory the archiver and the restore may reach: a quarter of the limit
/// the chart gives each pod, so that their own buffers, not the transaction, set it.
const PEAK_MIB: u64 = 128;

#[test]
fn a_gibibyte_transaction_is_archived_and_replayed_within_a_fixed_memory_budget() {
    let ArchivedSource {
        work: _work,
        repo,
        key,
        source,
        backup_id: id,
        archiver: a,
    } = archived_source(
        &[],
        "CREATE TABLE pitr.big (id INT PRIMARY KEY, pad VARCHAR(1000) NOT NULL) ENGINE=InnoDB",
        "large",
    );
    write_row(&source);
    let logged_before = binlog_bytes(&source);
    source
        .sql(&format!(
            "INSERT INTO pitr.big SELECT seq, REPEAT(MD5(seq), 31) FROM pitr.seq_1_to_{ROWS}"
        ))
        .unwrap();
    let transaction_bytes = binlog_bytes(&source) - logged_before;
    assert!(
        transaction_bytes > 1 << 30,
        "the transaction logged only {transaction_bytes} bytes"
    );
    let last = write_row(&source);
    wait_archived_within(&repo, &key, &last.gtid, &a, Duration::from_secs(600));
    let archiver_peak = a.peak_rss_mib();
    a.stop();
    assert!(
        archiver_peak <= PEAK_MIB,
        "the archiver reached {archiver_peak} MiB for a {transaction_bytes}-byte transaction"
    );

    let (restored, out) = restore_until(&repo, &key, &id, &["--until", "latest", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let restore_peak = report["peakRssBytes"].as_u64().unwrap() >> 20;
    assert!(
        restore_peak <= PEAK_MIB,
        "the restore reached {restore_peak} MiB for a {transaction_bytes}-byte transaction"
    );
    // The tools it runs share its container's limit: `mariadb-binlog` and the client.
    let tools_peak = report["peakChildRssBytes"].as_u64().unwrap() >> 20;
    assert!(
        tools_peak <= PEAK_MIB,
        "a tool of the restore reached {tools_peak} MiB for a {transaction_bytes}-byte transaction"
    );
    assert_eq!(ids(&restored), ids(&source));
    let checksum = "CHECKSUM TABLE pitr.big";
    assert_eq!(
        restored.query(checksum).unwrap()[0][1],
        source.query(checksum).unwrap()[0][1]
    );
    println!(
        "large transaction: {} MiB logged; archiver peak {archiver_peak} MiB, restore peak \
         {restore_peak} MiB, its largest tool {tools_peak} MiB",
        transaction_bytes >> 20
    );
}

/// Bytes in the server's binary logs.
fn binlog_bytes(db: &MariaDb) -> u64 {
    db.query("SHOW BINARY LOGS")
        .unwrap()
        .iter()
        .map(|r| r[1].parse::<u64>().unwrap())
        .sum()
}
