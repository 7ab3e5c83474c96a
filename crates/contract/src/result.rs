//! The result lines of `mysql-backup backup --result-file` and `drill --result-file`: one line
//! of JSON, at most [`LINE_LIMIT`] bytes, written to the Job's termination message and read by
//! the operator. On success it describes the committed backup or the drill that held; on
//! failure it carries the cause.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Engine;

/// Kubernetes keeps at most this many bytes of a termination message.
pub const LINE_LIMIT: usize = 4096;

/// Fields of [`BackupResult`] that may be left out (set to null and named in `omitted`) when the
/// line would exceed [`LINE_LIMIT`], in the order they are given up.
const OMITTABLE: [&str; 4] = ["gtidSet", "location", "toolVersion", "sourceHost"];

/// A committed backup, as the tool reports it (also `mysql-backup backup --json` and each entry
/// of `mysql-backup list --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupResult {
    /// The backup's id.
    pub id: String,
    /// `physical` or `logical`.
    pub method: String,
    /// Where the backup's objects are (repository and the backup's prefix).
    pub location: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_seconds: f64,
    /// The source's engine (`flavor` on the wire).
    #[serde(rename = "flavor")]
    pub engine: Engine,
    pub server_version: String,
    pub source_host: Option<String>,
    /// The program that produced the stream (mariadb-backup, xtrabackup, mariadb-dump, ...).
    pub tool: String,
    pub tool_version: Option<String>,
    pub plaintext_bytes: u64,
    pub plaintext_sha256: String,
    pub stored_bytes: u64,
    pub chunks: u64,
    pub segments: u64,
    pub compression_level: i32,
    pub encrypted: bool,
    pub key_id: Option<String>,
    pub binlog_file: Option<String>,
    pub binlog_position: Option<u64>,
    /// The GTID set at the backup's consistent point.
    pub gtid_set: Option<String>,
    /// SHA-256 of the committed manifest.
    pub manifest_sha256: String,
    /// Fields left out to fit the line limit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
}

impl BackupResult {
    /// The success line: one line of JSON within [`LINE_LIMIT`]. Never cut: if it is too long
    /// (a huge GTID set or repository URL), whole fields are left out and named in `omitted`.
    pub fn to_line(&self) -> String {
        let mut value = serde_json::to_value(self).expect("a backup result serializes");
        let mut omitted: Vec<String> = self.omitted.clone();
        for field in OMITTABLE {
            let line = format!("{value}\n");
            if line.len() <= LINE_LIMIT {
                return line;
            }
            value[field] = serde_json::Value::Null;
            omitted.push(field.to_owned());
            value["omitted"] = serde_json::json!(omitted);
        }
        format!("{value}\n")
    }
}

/// `{"error": …}` on one line within [`LINE_LIMIT`], the message cut (and ended with `…`) if
/// needed.
pub fn error_line(message: &str) -> String {
    let line = |m: &str| format!("{}\n", serde_json::json!({ "error": m }));
    let full = line(message);
    if full.len() <= LINE_LIMIT {
        return full;
    }
    // The longest prefix (on a character boundary) that fits once escaped, by bisection.
    let cuts: Vec<usize> = message.char_indices().map(|(i, _)| i).collect();
    let fits = |n: usize| line(&format!("{}…", &message[..cuts[n]])).len() <= LINE_LIMIT;
    let (mut lo, mut hi) = (0, cuts.len() - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    line(&format!("{}…", &message[..cuts[lo]]))
}

/// What a result line says.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The backup was committed.
    Committed(Box<BackupResult>),
    /// The backup failed, for this reason.
    Failed(String),
}

#[derive(Deserialize)]
struct ErrorLine {
    error: String,
}

/// Reads a result line; `None` when it is neither a success nor an error line.
pub fn parse_line(line: &str) -> Option<Report> {
    let line = line.trim();
    if let Ok(r) = serde_json::from_str::<BackupResult>(line) {
        return Some(Report::Committed(Box::new(r)));
    }
    serde_json::from_str::<ErrorLine>(line)
        .ok()
        .map(|e| Report::Failed(e.error))
}

/// A drill that proved its backup restorable, as `mysql-backup drill --result-file` reports it
/// (also `drill --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillResult {
    /// The backup drilled.
    pub backup_id: String,
    /// `physical` or `logical`.
    pub method: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// Bytes of backup data restored (before compression and encryption).
    pub plaintext_bytes: u64,
    /// From the start until the scratch server held the restored data (and the replay, if
    /// any, was done): the measured recovery time.
    pub restore_seconds: f64,
    pub total_seconds: f64,
    pub tables_checked: u64,
    /// Tables whose engine cannot check them (named, at most a few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables_unchecked: Vec<String>,
    pub assertions: u32,
    /// The GTID position the replay reached, when the drill replayed the binlog archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_gtid: Option<String>,
    /// Transactions the replay applied (none when the backup is at the archive's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_transactions: Option<u64>,
}

/// Unchecked tables named in a drill's line at most; the count is in the message.
const UNCHECKED_NAMED: usize = 8;

impl DrillResult {
    /// The success line: one line of JSON within [`LINE_LIMIT`]; long lists of unchecked
    /// tables are shortened and a long GTID position is left out.
    pub fn to_line(&self) -> String {
        let mut r = self.clone();
        if r.tables_unchecked.len() > UNCHECKED_NAMED {
            let more = r.tables_unchecked.len() - UNCHECKED_NAMED;
            r.tables_unchecked.truncate(UNCHECKED_NAMED);
            r.tables_unchecked.push(format!("and {more} more"));
        }
        let mut line = format!(
            "{}\n",
            serde_json::to_string(&r).expect("a drill result serializes")
        );
        if line.len() > LINE_LIMIT {
            r.reached_gtid = None;
            r.tables_unchecked.clear();
            line = format!(
                "{}\n",
                serde_json::to_string(&r).expect("a drill result serializes")
            );
        }
        line
    }
}

/// What a drill's result line says.
#[derive(Debug, Clone, PartialEq)]
pub enum DrillReport {
    /// The backup was restored and every check held.
    Passed(Box<DrillResult>),
    /// The drill failed, for this reason.
    Failed(String),
}

/// Reads a drill's result line; `None` when it is neither a success nor an error line.
pub fn parse_drill_line(line: &str) -> Option<DrillReport> {
    let line = line.trim();
    if let Ok(r) = serde_json::from_str::<DrillResult>(line) {
        return Some(DrillReport::Passed(Box::new(r)));
    }
    serde_json::from_str::<ErrorLine>(line)
        .ok()
        .map(|e| DrillReport::Failed(e.error))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result with every field set (the operator's tests build theirs the same way).
    pub fn sample() -> BackupResult {
        BackupResult {
            id: "20261122T031633Z-4a0760".into(),
            method: "physical".into(),
            location: Some("s3://b/p/20261122T031633Z-4a0760/".into()),
            started_at: "2026-11-22T03:16:33Z".parse().unwrap(),
            finished_at: "2026-11-22T03:17:00Z".parse().unwrap(),
            duration_seconds: 27.0,
            engine: Engine::MariaDb,
            server_version: "10.11.6-MariaDB".into(),
            source_host: Some("db-1".into()),
            tool: "mariadb-backup".into(),
            tool_version: Some("10.11.6".into()),
            plaintext_bytes: 1000,
            plaintext_sha256: "ab".repeat(32),
            stored_bytes: 400,
            chunks: 1,
            segments: 1,
            compression_level: 1,
            encrypted: true,
            key_id: Some("k1".into()),
            binlog_file: Some("mysql-bin.000003".into()),
            binlog_position: Some(1234),
            gtid_set: Some("0-1-2".into()),
            manifest_sha256: "cd".repeat(32),
            omitted: vec![],
        }
    }

    #[test]
    fn lines_round_trip() {
        let r = sample();
        let line = r.to_line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        assert_eq!(parse_line(&line), Some(Report::Committed(Box::new(r))));
        assert_eq!(
            parse_line(&error_line("failed to connect: refused")),
            Some(Report::Failed("failed to connect: refused".into()))
        );
        assert_eq!(parse_line("not json"), None);
        assert_eq!(parse_line("{\"id\": \"x\"}"), None);
    }

    #[test]
    fn long_results_leave_whole_fields_out() {
        let mut r = sample();
        r.gtid_set = Some("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5,".repeat(200));
        let line = r.to_line();
        assert!(line.len() <= LINE_LIMIT, "{}", line.len());
        let Some(Report::Committed(back)) = parse_line(&line) else {
            panic!("{line}")
        };
        assert_eq!(back.gtid_set, None);
        assert_eq!(back.location, r.location);
        assert_eq!(back.omitted, vec!["gtidSet".to_owned()]);
    }

    fn drill() -> DrillResult {
        DrillResult {
            backup_id: "20261122T031633Z-4a0760".into(),
            method: "physical".into(),
            started_at: "2026-11-22T04:00:00Z".parse().unwrap(),
            finished_at: "2026-11-22T04:01:00Z".parse().unwrap(),
            plaintext_bytes: 1000,
            restore_seconds: 41.5,
            total_seconds: 60.0,
            tables_checked: 12,
            tables_unchecked: vec!["`shop`.`log`".into()],
            assertions: 1,
            reached_gtid: Some("0-1-77".into()),
            replayed_transactions: Some(3),
        }
    }

    #[test]
    fn drill_lines_round_trip_and_are_not_backup_lines() {
        let r = drill();
        let line = r.to_line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        assert_eq!(
            parse_drill_line(&line),
            Some(DrillReport::Passed(Box::new(r)))
        );
        assert_eq!(parse_line(&line), None, "a drill's line is no backup");
        assert_eq!(parse_drill_line(&sample().to_line()), None);
        assert_eq!(
            parse_drill_line(&error_line("drill of backup x failed: boom")),
            Some(DrillReport::Failed("drill of backup x failed: boom".into()))
        );
        assert_eq!(parse_drill_line("not json"), None);
    }

    #[test]
    fn long_drill_lines_stay_within_the_limit() {
        let mut r = drill();
        r.tables_unchecked = (0..500).map(|n| format!("`db`.`table_{n:04}`")).collect();
        r.reached_gtid = Some("0-1-5,".repeat(1000));
        let line = r.to_line();
        assert!(line.len() <= LINE_LIMIT, "{}", line.len());
        let Some(DrillReport::Passed(back)) = parse_drill_line(&line) else {
            panic!("{line}")
        };
        assert_eq!(back.reached_gtid, None);
        let mut r = drill();
        r.tables_unchecked = (0..20).map(|n| format!("`db`.`t{n}`")).collect();
        let Some(DrillReport::Passed(back)) = parse_drill_line(&r.to_line()) else {
            panic!()
        };
        assert_eq!(back.tables_unchecked.len(), UNCHECKED_NAMED + 1);
        assert_eq!(back.tables_unchecked.last().unwrap(), "and 12 more");
    }

    #[test]
    fn long_errors_are_cut_on_a_character_boundary() {
        assert_eq!(
            error_line("failed to connect: refused"),
            "{\"error\":\"failed to connect: refused\"}\n"
        );
        for filler in ["x", "\"", "é", "\u{1}"] {
            let long = error_line(&format!("failed to back up: {}", filler.repeat(5000)));
            let Some(Report::Failed(msg)) = parse_line(&long) else {
                panic!("{long}")
            };
            assert!(long.len() <= LINE_LIMIT, "{filler:?}: {}", long.len());
            assert!(long.len() > LINE_LIMIT - 8, "{filler:?}: {}", long.len());
            assert!(msg.starts_with("failed to back up: ") && msg.ends_with('…'));
        }
    }
}
