//! How the archiver runs: what it archives, how often it commits, and its housekeeping.

use std::time::Duration;

use bulwark_engine::writer::WriteOptions;

use super::compact::CompactRules;
use crate::binlog::GtidPos;

/// How the archiver behaves.
#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    /// The archive written (one per source cluster in a repository).
    pub archive: String,
    /// A segment is committed at least this often while transactions arrive.
    pub flush_every: Duration,
    /// ... and as soon as it holds this many bytes.
    pub segment_bytes: u64,
    /// Server id the archiver registers with; must differ from every server's and replica's.
    pub server_id: u32,
    /// Where to start when the repository holds no segment (else: the newest backup's
    /// consistent point, else the server's current position).
    pub start: Option<GtidPos>,
    /// How often the server sends a heartbeat when idle; three missed ones mean reconnect.
    pub heartbeat: Duration,
    /// Chunking of segment plaintext.
    pub write: WriteOptions,
    /// Delete the segments no backup in the repository can use (checked when backups are
    /// listed), so the archive shrinks as retention removes backups.
    pub prune_unneeded: bool,
    /// Merge small segments once their span of time is over (`None`: never).
    pub compact: Option<CompactRules>,
    /// When the server lacks archived transactions (a new primary that lost the old one's
    /// last ones), start a new timeline from the newest archived position it has; otherwise
    /// stop, since the server's history is not the archive's.
    pub branch_on_divergence: bool,
}
