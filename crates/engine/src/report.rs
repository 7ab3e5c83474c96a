//! What a committed backup is reported as: the result line of `backup --result-file`, the
//! `--json` output of `backup` and `list` (the contract's [`BackupResult`]).

pub use bulwark_contract::result::{error_line, BackupResult};

use crate::repo::CompleteBackup;

/// The report of a committed backup found at `location` (`None` where it is not known, as in
/// listings).
pub fn backup_result(b: &CompleteBackup, location: Option<String>) -> BackupResult {
    let m = &b.manifest;
    BackupResult {
        id: m.id.clone(),
        method: m.method.to_string(),
        location,
        started_at: m.started_at,
        finished_at: m.finished_at,
        duration_seconds: (m.finished_at - m.started_at).num_milliseconds() as f64 / 1000.0,
        engine: m.source.engine,
        server_version: m.source.server_version.clone(),
        source_host: Some(m.source.host.clone()),
        tool: m.source.tool.clone(),
        tool_version: Some(m.source.tool_version.clone()),
        plaintext_bytes: m.plaintext.bytes,
        plaintext_sha256: m.plaintext.sha256.clone(),
        stored_bytes: m.stored_bytes,
        chunks: m.plaintext.chunks,
        segments: m.segments.len() as u64,
        compression_level: m.chunking.compression_level,
        encrypted: m.encryption.is_some(),
        key_id: m.encryption.as_ref().map(|e| e.key_id.clone()),
        binlog_file: m.consistent_point.binlog_file.clone(),
        binlog_position: m.consistent_point.binlog_position,
        gtid_set: m.consistent_point.gtid_set.clone(),
        manifest_sha256: b.manifest_sha256.clone(),
        omitted: Vec::new(),
    }
}
