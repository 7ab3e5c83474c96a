//! Repository format v1: object layout, manifest and segment index types, and the
//! byte-level conventions (nonces, associated data, skippable frames) shared by writer and reader.

use bulwark_contract::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Version of the on-disk format written by this build; readers refuse anything newer.
pub const FORMAT_VERSION: u32 = 1;
/// Value of the manifest's `format` field, so a stray JSON file is never taken for a manifest.
pub const FORMAT_NAME: &str = "bulwark-backup";
/// Every backup lives under this prefix of the repository.
pub const BACKUPS_PREFIX: &str = "backups/";
/// Archived binlog segments live under this prefix of the repository.
pub const BINLOGS_PREFIX: &str = "binlogs/";
/// Ids of archived binlog segments start with this (`binlog-<archive>/<stamp>`), which keeps
/// them apart from backup ids in chunk associated data and object keys.
pub const ARCHIVE_ID_PREFIX: &str = "binlog-";
/// The commit marker of a backup, written last.
pub const MANIFEST_NAME: &str = "manifest.json";
/// zstd skippable-frame magic used for the chunk index at the end of each segment.
pub const INDEX_FRAME_MAGIC: u32 = 0x184D_2A5B;
/// Default plaintext chunk size.
pub const DEFAULT_CHUNK_SIZE: usize = 8 << 20;
/// Default cap on the stored size of one segment object.
pub const DEFAULT_SEGMENT_SIZE: u64 = 4 << 30;
/// Domain separator for chunk associated data.
const CHUNK_AAD_LABEL: &[u8] = b"bulwark-chunk-v1";
/// Domain separator for the wrapped data key's associated data.
const KEY_WRAP_AAD_LABEL: &[u8] = b"bulwark-data-key-v1";

/// How the backup was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// A physical copy streamed as xbstream by xtrabackup or mariabackup.
    Physical,
    /// An SQL dump from mysqldump or mariadb-dump.
    Logical,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Physical => "physical",
            Method::Logical => "logical",
        })
    }
}

/// The commit record of one backup. Its presence is what makes a backup exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Format version the backup was written with.
    pub format_version: u32,
    /// Backup id: `YYYYMMDDTHHMMSSZ-xxxxxx`, sortable by time.
    pub id: String,
    /// Physical or logical.
    pub method: Method,
    /// When the source tool was started.
    pub started_at: DateTime<Utc>,
    /// When the last segment was durably stored.
    pub finished_at: DateTime<Utc>,
    /// Where the data came from.
    pub source: SourceInfo,
    /// Replication coordinates at the backup's consistent point, as the tool reported them.
    pub consistent_point: ConsistentPoint,
    /// The binlog archive that continues this backup (`None`: the repository's default one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_archive: Option<String>,
    /// The timeline of that archive the consistent point belongs to, as the archive showed
    /// it when the backup ended (`None`: it could not say). Two branches of history can hold
    /// the same GTIDs; a restore continues this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_timeline: Option<u32>,
    /// How plaintext was cut and compressed.
    pub chunking: Chunking,
    /// Present when chunks are encrypted.
    pub encryption: Option<EncryptionInfo>,
    /// Totals over the plaintext stream.
    pub plaintext: PlaintextInfo,
    /// Sum of segment object sizes.
    pub stored_bytes: u64,
    /// Segment objects in stream order.
    pub segments: Vec<SegmentInfo>,
}

/// The server and tool that produced the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// Host name reported by the server (`@@hostname`).
    pub host: String,
    /// Server family.
    #[serde(rename = "flavor")]
    pub engine: Engine,
    /// `@@version` of the server.
    pub server_version: String,
    /// Program that produced the stream.
    pub tool: String,
    /// First line of `tool --version`.
    pub tool_version: String,
}

/// Binary log coordinates at the consistent point; empty when binary logging was off.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistentPoint {
    /// Binary log file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_file: Option<String>,
    /// Position inside [`Self::binlog_file`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_position: Option<u64>,
    /// GTID set (MySQL) or GTID position (MariaDB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid_set: Option<String>,
}

/// Chunking and compression parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunking {
    /// Plaintext bytes per chunk (the last chunk may be shorter).
    pub chunk_size: u64,
    /// Always `zstd`.
    pub compression: String,
    /// zstd level used.
    pub compression_level: i32,
}

/// Envelope encryption parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncryptionInfo {
    /// Always `AES-256-GCM`.
    pub algorithm: String,
    /// Identifies the master key that wraps the data key (not secret).
    pub key_id: String,
    /// Base64 of nonce (12 bytes) followed by the wrapped data key and its tag.
    pub wrapped_data_key: String,
}

/// Totals over the plaintext.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaintextInfo {
    /// Plaintext length.
    pub bytes: u64,
    /// Number of chunks.
    pub chunks: u64,
    /// Hex SHA-256 of the whole plaintext stream.
    pub sha256: String,
}

/// One segment object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// Object name relative to the backup's directory.
    pub name: String,
    /// Stored size of the whole object, index frame included.
    pub size: u64,
    /// Index of the first chunk in this segment.
    pub first_chunk: u64,
    /// Number of chunks in this segment.
    pub chunks: u64,
    /// Offset of the index skippable frame.
    pub index_offset: u64,
    /// Length of the index skippable frame, header included.
    pub index_length: u64,
    /// Hex SHA-256 of the index frame.
    pub index_sha256: String,
}

/// The chunk table stored in a segment's trailing skippable frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentIndex {
    /// Backup this segment belongs to, so segments cannot be swapped between backups unnoticed.
    pub backup_id: String,
    /// Sequence number of the segment.
    pub segment: u64,
    /// Index of the first chunk.
    pub first_chunk: u64,
    /// Chunks in order.
    pub chunks: Vec<ChunkEntry>,
}

/// One stored chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEntry {
    /// Offset inside the segment object.
    pub offset: u64,
    /// Stored (compressed, maybe encrypted) length.
    pub stored: u64,
    /// Plaintext length.
    pub plain: u64,
    /// Hex SHA-256 of the stored bytes.
    pub sha256: String,
}

/// Key of the object named `name` of a backup, or of an archived binlog segment (whose ids
/// start with [`ARCHIVE_ID_PREFIX`] and live under [`BINLOGS_PREFIX`]).
pub fn object_key(id: &str, name: &str) -> String {
    match id.strip_prefix(ARCHIVE_ID_PREFIX) {
        Some(segment) => format!("{BINLOGS_PREFIX}{segment}/{name}"),
        None => format!("{BACKUPS_PREFIX}{id}/{name}"),
    }
}

/// What the read pipeline needs of a stored stream: a backup, or an archived binlog segment.
pub trait StoredStream: Sync {
    /// The id bound into every chunk's associated data and object key.
    fn stream_id(&self) -> &str;
    /// Present when chunks are encrypted.
    fn encryption(&self) -> Option<&EncryptionInfo>;
    /// Totals over the plaintext.
    fn plaintext(&self) -> &PlaintextInfo;
    /// Sum of segment object sizes.
    fn stored_bytes(&self) -> u64;
    /// Segment objects in stream order.
    fn segments(&self) -> &[SegmentInfo];
}

impl StoredStream for Manifest {
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

/// Name of segment `n`; the suffix tells a human whether `zstd -d` can read it.
pub fn segment_name(n: u64, encrypted: bool) -> String {
    if encrypted {
        format!("seg-{n:06}.zst.aes")
    } else {
        format!("seg-{n:06}.zst")
    }
}

/// A fresh backup id for a backup started at `at`.
pub fn new_backup_id(at: DateTime<Utc>) -> String {
    bulwark_contract::ids::backup_id(at, rand::random())
}

/// Whether `s` has the shape of a backup id (guards paths built from user input).
pub fn is_backup_id(s: &str) -> bool {
    bulwark_contract::ids::is_backup_id(s)
}

/// GCM nonce of chunk `index`: unique per data key because the index never repeats.
pub fn chunk_nonce(index: u64) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&index.to_be_bytes());
    nonce
}

/// Associated data binding a chunk to format, backup, position and end of stream.
pub fn chunk_aad(backup_id: &str, index: u64, last: bool) -> Vec<u8> {
    let mut aad = Vec::with_capacity(CHUNK_AAD_LABEL.len() + 4 + 2 + backup_id.len() + 9);
    aad.extend_from_slice(CHUNK_AAD_LABEL);
    aad.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
    aad.extend_from_slice(&(backup_id.len() as u16).to_be_bytes());
    aad.extend_from_slice(backup_id.as_bytes());
    aad.extend_from_slice(&index.to_be_bytes());
    aad.push(u8::from(last));
    aad
}

/// Associated data of the wrapped data key.
pub fn key_wrap_aad(backup_id: &str) -> Vec<u8> {
    let mut aad = KEY_WRAP_AAD_LABEL.to_vec();
    aad.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
    aad.extend_from_slice(backup_id.as_bytes());
    aad
}

/// Wraps a serialized index in a zstd skippable frame.
pub fn index_frame(index: &SegmentIndex) -> Vec<u8> {
    let body = serde_json::to_vec(index).expect("segment index serializes");
    let mut frame = Vec::with_capacity(body.len() + 8);
    frame.extend_from_slice(&INDEX_FRAME_MAGIC.to_le_bytes());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Parses a skippable frame written by [`index_frame`].
pub fn parse_index_frame(frame: &[u8]) -> Result<SegmentIndex, String> {
    if frame.len() < 8 || frame[..4] != INDEX_FRAME_MAGIC.to_le_bytes() {
        return Err("index frame has no skippable-frame header".into());
    }
    let len = u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes")) as usize;
    if frame.len() != len + 8 {
        return Err(format!(
            "index frame declares {len} bytes but holds {}",
            frame.len() - 8
        ));
    }
    serde_json::from_slice(&frame[8..]).map_err(|e| format!("index is not valid JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_keeps_the_field_names_every_manifest_has() {
        let source = SourceInfo {
            host: "db-0".into(),
            engine: Engine::MariaDb,
            server_version: "10.11.19-MariaDB-log".into(),
            tool: "mariadb-backup".into(),
            tool_version: "10.11.19".into(),
        };
        let json = serde_json::to_value(&source).unwrap();
        assert_eq!(json["flavor"], "mariadb", "{json}");
        let read: SourceInfo = serde_json::from_value(json).unwrap();
        assert_eq!(read.engine, Engine::MariaDb);
    }

    #[test]
    fn backup_ids_round_trip_and_sort_by_time() {
        let a = new_backup_id("2026-01-02T03:04:05Z".parse().unwrap());
        let b = new_backup_id("2026-01-02T03:04:06Z".parse().unwrap());
        assert!(is_backup_id(&a), "{a}");
        assert!(a < b);
        for bad in [
            "",
            "../../etc",
            "20260102T030405Z-zzzzzz",
            "20260102T030405Z_abcdef",
        ] {
            assert!(!is_backup_id(bad), "{bad}");
        }
    }

    #[test]
    fn aad_differs_by_every_bound_field() {
        let base = chunk_aad("20260102T030405Z-abcdef", 7, false);
        assert_ne!(base, chunk_aad("20260102T030405Z-abcdee", 7, false));
        assert_ne!(base, chunk_aad("20260102T030405Z-abcdef", 8, false));
        assert_ne!(base, chunk_aad("20260102T030405Z-abcdef", 7, true));
        assert_ne!(chunk_nonce(1), chunk_nonce(2));
    }

    #[test]
    fn index_frame_round_trips_and_rejects_damage() {
        let index = SegmentIndex {
            backup_id: "x".into(),
            segment: 3,
            first_chunk: 10,
            chunks: vec![ChunkEntry {
                offset: 0,
                stored: 5,
                plain: 9,
                sha256: "ab".into(),
            }],
        };
        let frame = index_frame(&index);
        assert_eq!(parse_index_frame(&frame).unwrap(), index);
        assert!(parse_index_frame(&frame[..frame.len() - 1]).is_err());
        let mut bad = frame.clone();
        bad[0] ^= 1;
        assert!(parse_index_frame(&bad).is_err());
    }
}
