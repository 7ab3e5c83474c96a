//! The commit record of one archived binlog segment: which transactions it holds (the GTID
//! position before and after them, their times) and, like a backup's manifest, how its
//! plaintext is chunked, compressed, encrypted and hashed. The plaintext is a binary log file
//! (magic, format description, whole transactions), so `mariadb-binlog` reads it as it is.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::binlog::{GtidPos, GtidRun};
use bulwark_engine::format::{
    self, Chunking, EncryptionInfo, PlaintextInfo, SegmentInfo, StoredStream, FORMAT_VERSION,
};

/// Value of a segment manifest's `format` field.
pub const ARCHIVE_FORMAT_NAME: &str = "bulwark-binlog";

/// One archived run of whole transactions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentManifest {
    /// Always [`ARCHIVE_FORMAT_NAME`].
    pub format: String,
    /// Format version the segment was written with.
    pub format_version: u32,
    /// `binlog-YYYYMMDDTHHMMSSZ-xxxxxx`: when the segment was closed, and 24 random bits.
    pub id: String,
    /// The server the transactions were read from.
    pub source: ArchiveSource,
    /// GTID position before the first transaction: the end of the segment this one continues.
    pub after: GtidPos,
    /// GTID position after the last transaction.
    pub through: GtidPos,
    /// The branch of history the archiver was following: [`FIRST_TIMELINE`] at first, a new
    /// number each time it stepped back to an earlier position (a new primary without the
    /// archive's last transactions) or began streaming from another server.
    #[serde(default = "first_timeline")]
    pub timeline: u32,
    /// The transactions held, as runs of consecutive GTIDs by one server: which GTIDs exactly,
    /// servers included (empty in segments written before runs were recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<GtidRun>,
    /// GTID of the first transaction.
    pub first_gtid: String,
    /// GTID of the last transaction.
    pub last_gtid: String,
    /// Number of transactions.
    pub transactions: u64,
    /// Commit stamp of the first transaction (whole seconds, as the binlog records them).
    pub first_commit: DateTime<Utc>,
    /// Commit stamp of the last transaction.
    pub last_commit: DateTime<Utc>,
    /// When the archiver received the last transaction.
    pub received_at: DateTime<Utc>,
    /// How plaintext was cut and compressed.
    pub chunking: Chunking,
    /// Present when chunks are encrypted.
    pub encryption: Option<EncryptionInfo>,
    /// Totals over the plaintext.
    pub plaintext: PlaintextInfo,
    /// Sum of segment object sizes.
    pub stored_bytes: u64,
    /// Segment objects in stream order.
    pub segments: Vec<SegmentInfo>,
    /// A compacted segment: the segments it holds the transactions of, which it supersedes
    /// (they are deleted after a grace, so a replay that listed them still reads them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
    /// When a compacted segment was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted_at: Option<DateTime<Utc>>,
}

/// The timeline of an archive's first segments, and of segments written before timelines.
pub const FIRST_TIMELINE: u32 = 1;

fn first_timeline() -> u32 {
    FIRST_TIMELINE
}

/// Where the transactions came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveSource {
    /// `@@hostname` of the server streamed from.
    pub host: String,
    /// `@@server_id` of that server.
    pub server_id: u32,
    /// `@@version` of that server.
    pub server_version: String,
}

impl StoredStream for SegmentManifest {
    fn stream_id(&self) -> &str {
        &self.id
    }
    fn encryption(&self) -> Option<&EncryptionInfo> {
        self.encryption.as_ref()
    }
    fn plaintext(&self) -> &PlaintextInfo {
        &self.plaintext
    }
    fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }
    fn segments(&self) -> &[SegmentInfo] {
        &self.segments
    }
}

/// The archive backups name when they name none: a repository's one archive.
pub const DEFAULT_ARCHIVE: &str = "default";

/// The archive that continues backup `m`.
pub fn archive_of(m: &bulwark_engine::format::Manifest) -> &str {
    m.binlog_archive.as_deref().unwrap_or(DEFAULT_ARCHIVE)
}

/// Whether `name` can name an archive: 1 to 63 of `a-z`, `0-9`, `-`, `.`, `_`, starting with
/// a letter or digit (it becomes a directory and part of every segment id).
pub fn is_archive_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._".contains(c))
}

/// A fresh id for a segment of archive `archive` closed at `at`:
/// `binlog-<archive>/YYYYMMDDTHHMMSSZ-xxxxxx`.
pub fn new_segment_id(archive: &str, at: DateTime<Utc>) -> String {
    format!(
        "{}{archive}/{}",
        format::ARCHIVE_ID_PREFIX,
        bulwark_contract::ids::backup_id(at, rand::random())
    )
}

/// The archive a segment id belongs to, when `s` has the shape of a segment id (guards keys
/// built from listings).
pub fn segment_archive(s: &str) -> Option<&str> {
    let (archive, stamp) = s.strip_prefix(format::ARCHIVE_ID_PREFIX)?.split_once('/')?;
    (is_archive_name(archive) && bulwark_contract::ids::is_backup_id(stamp)).then_some(archive)
}

/// Parses and checks a segment manifest read from the object of segment `id`.
pub fn parse(id: &str, raw: &[u8]) -> Result<SegmentManifest, String> {
    let m: SegmentManifest =
        serde_json::from_slice(raw).map_err(|e| format!("not a segment manifest: {e}"))?;
    if m.format != ARCHIVE_FORMAT_NAME {
        return Err(format!(
            "format is {:?}, not {ARCHIVE_FORMAT_NAME:?}",
            m.format
        ));
    }
    if m.format_version > FORMAT_VERSION {
        return Err(format!(
            "format version {} is newer than this build reads ({FORMAT_VERSION})",
            m.format_version
        ));
    }
    if m.id != id {
        return Err(format!("it names segment {}", m.id));
    }
    // Every domain stays or moves forward, and one moves: no chain of segments can loop.
    let advances = m
        .through
        .gtids()
        .any(|g| m.after.get(g.domain).is_none_or(|a| g.seq > a.seq));
    if m.transactions == 0 || !m.through.covers(&m.after) || !advances {
        return Err("its GTID range is empty or runs backwards".into());
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_ids_and_keys_stay_apart_from_backups() {
        let at = "2026-11-25T03:15:00Z".parse().unwrap();
        let id = new_segment_id("ledger", at);
        assert_eq!(segment_archive(&id), Some("ledger"), "{id}");
        assert!(id.starts_with("binlog-ledger/20261125T031500Z-"), "{id}");
        assert_eq!(segment_archive(&id["binlog-".len()..]), None);
        assert!(!format::is_backup_id(&id));
        let key = format::object_key(&id, "manifest.json");
        assert!(key.starts_with("binlogs/ledger/20261125T031500Z-"), "{key}");
        assert!(key.ends_with("/manifest.json"), "{key}");
        assert_eq!(
            format::object_key("20261125T031500Z-abcdef", "manifest.json"),
            "backups/20261125T031500Z-abcdef/manifest.json"
        );
        for bad in ["", "Ledger", "-x", "a/b", &"x".repeat(64)] {
            assert!(!is_archive_name(bad), "{bad:?}");
        }
        assert!(is_archive_name("prod.ledger-1_a"));
    }
}
