//! The segment being gathered: whole transactions after a known position, the format
//! description they were written under, and the rule for when to close it. Pure.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::history::{self, GtidRun, FIRST_TIMELINE};
use super::manifest::{ArchiveSource, SegmentManifest, ARCHIVE_FORMAT_NAME};
use crate::binlog::event::BINLOG_MAGIC;
use crate::binlog::{GtidPos, Transaction};
use crate::spool::{SpillRules, Spool, SpoolWriter, SEGMENT_MEMORY};
use bulwark_engine::format::{Chunking, PlaintextInfo, FORMAT_VERSION};

/// Transactions received but not yet committed to the repository.
#[derive(Debug)]
pub struct Gathering {
    /// Position before the first transaction.
    pub after: GtidPos,
    /// Position after the last transaction.
    pub through: GtidPos,
    format: Option<Vec<u8>>,
    /// The segment's plaintext so far: magic, format description, then whole transactions
    /// (empty until the first transaction); a large transaction's file is shared, not copied.
    events: SpoolWriter,
    /// The plaintext handed to a commit, kept until the commit succeeds (a failed one is
    /// retried with it, or more transactions are appended to it).
    sealed: Option<Spool>,
    runs: Vec<GtidRun>,
    first_gtid: Option<String>,
    last_gtid: String,
    transactions: u64,
    first_commit: u32,
    last_commit: u32,
    received_at: Option<DateTime<Utc>>,
    opened: Option<Instant>,
    /// The server the transactions come from.
    pub source: Option<ArchiveSource>,
    /// The timeline the transactions belong to.
    pub timeline: u32,
}

/// What adding a transaction did.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    /// Appended.
    Appended,
    /// Already archived (at or before the position); dropped.
    Duplicate,
}

impl Gathering {
    /// An empty segment continuing `after`.
    pub fn new(after: GtidPos) -> Gathering {
        Gathering {
            through: after.clone(),
            after,
            format: None,
            events: SpoolWriter::new(SpillRules::memory(SEGMENT_MEMORY)),
            sealed: None,
            runs: Vec::new(),
            first_gtid: None,
            last_gtid: String::new(),
            transactions: 0,
            first_commit: 0,
            last_commit: 0,
            received_at: None,
            opened: None,
            source: None,
            timeline: FIRST_TIMELINE,
        }
    }

    /// Whether no transaction is held.
    pub fn is_empty(&self) -> bool {
        self.transactions == 0
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.sealed.as_ref().map_or(self.events.len(), Spool::len)
    }

    /// The format description transactions are written under; a different one may only be
    /// set on an empty segment (the caller closes the segment first).
    pub fn format_changes(&self, fde: &[u8]) -> bool {
        self.format.as_deref().is_some_and(|f| f != fde)
    }

    /// Sets the format description.
    pub fn set_format(&mut self, fde: Vec<u8>) {
        debug_assert!(self.is_empty() || !self.format_changes(&fde));
        self.format = Some(fde);
    }

    /// Whether a format description is known.
    pub fn has_format(&self) -> bool {
        self.format.is_some()
    }

    /// Adds a transaction received at `now`; fails only when a temporary file does.
    pub fn add(
        &mut self,
        trx: Transaction,
        now: DateTime<Utc>,
        at: Instant,
    ) -> std::io::Result<Added> {
        if self.through.includes(trx.gtid) {
            return Ok(Added::Duplicate);
        }
        if let Some(sealed) = self.sealed.take() {
            // Its commit failed: the same bytes, with more to follow.
            self.events = SpoolWriter::new(SpillRules::memory(SEGMENT_MEMORY));
            self.events.append(&sealed)?;
        }
        if self.events.is_empty() {
            self.events.write(&BINLOG_MAGIC)?;
            self.events
                .write(self.format.as_deref().unwrap_or_default())?;
        }
        self.events.append(&trx.events)?;
        if self.first_gtid.is_none() {
            self.first_gtid = Some(trx.gtid.to_string());
            self.first_commit = trx.committed;
            self.opened = Some(at);
        }
        history::record(&mut self.runs, trx.gtid);
        self.last_gtid = trx.gtid.to_string();
        self.last_commit = trx.committed;
        self.through.advance(trx.gtid);
        self.transactions += 1;
        self.received_at = Some(now);
        Ok(Added::Appended)
    }

    /// Whether the segment should be closed: it is older than `every`, or holds `bytes`.
    pub fn due(&self, now: Instant, every: Duration, bytes: u64) -> bool {
        !self.is_empty() && (self.bytes() >= bytes || self.opened.is_some_and(|o| now >= o + every))
    }

    /// When the oldest transaction held arrived.
    pub fn opened(&self) -> Option<Instant> {
        self.opened
    }

    /// When the segment becomes due by age.
    pub fn deadline(&self, every: Duration) -> Option<Instant> {
        self.opened.map(|o| o + every)
    }

    /// The plaintext (a binlog file) and the manifest to complete once it is stored.
    pub fn seal(
        &mut self,
        id: String,
        chunk_size: u64,
        level: i32,
    ) -> std::io::Result<(Spool, SegmentManifest)> {
        let source = self.source.clone().unwrap_or(ArchiveSource {
            host: String::new(),
            server_id: 0,
            server_version: String::new(),
        });
        let plain = match &self.sealed {
            Some(sealed) => sealed.clone(),
            None => {
                let events = std::mem::replace(
                    &mut self.events,
                    SpoolWriter::new(SpillRules::memory(SEGMENT_MEMORY)),
                );
                let sealed = events.finish()?;
                self.sealed = Some(sealed.clone());
                sealed
            }
        };
        let stamp = |s: u32| DateTime::from_timestamp(i64::from(s), 0).unwrap_or_default();
        let manifest = SegmentManifest {
            format: ARCHIVE_FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            id,
            source,
            after: self.after.clone(),
            through: self.through.clone(),
            timeline: self.timeline,
            runs: self.runs.clone(),
            first_gtid: self.first_gtid.clone().unwrap_or_default(),
            last_gtid: self.last_gtid.clone(),
            transactions: self.transactions,
            first_commit: stamp(self.first_commit),
            last_commit: stamp(self.last_commit),
            received_at: self.received_at.unwrap_or_default(),
            chunking: Chunking {
                chunk_size,
                compression: "zstd".into(),
                compression_level: level,
            },
            encryption: None,
            plaintext: PlaintextInfo {
                bytes: 0,
                chunks: 0,
                sha256: String::new(),
            },
            stored_bytes: 0,
            segments: Vec::new(),
            replaces: Vec::new(),
            compacted_at: None,
        };
        Ok((plain, manifest))
    }

    /// Drops what is held (a temporary file failed): back at `after`, with the same format
    /// description, source and timeline, for the transactions to be streamed again.
    pub fn discard(&mut self) {
        let mut again = Gathering::new(self.after.clone());
        again.format = self.format.take();
        again.source = self.source.take();
        again.timeline = self.timeline;
        *self = again;
    }

    /// The next segment, continuing this one (same format description).
    pub fn next(&self) -> Gathering {
        let mut next = Gathering::new(self.through.clone());
        next.format = self.format.clone();
        next.source = self.source.clone();
        next.timeline = self.timeline;
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::Gtid;

    fn trx(seq: u64, committed: u32) -> Transaction {
        Transaction {
            gtid: Gtid {
                domain: 0,
                server: 1,
                seq,
            },
            started: committed,
            committed,
            events: Spool::from_bytes(vec![seq as u8; 10]),
        }
    }

    #[test]
    fn a_segment_gathers_new_transactions_and_closes_on_age_or_size() {
        let t0 = Instant::now();
        let now = Utc::now();
        let mut p = Gathering::new(GtidPos::parse("0-1-4").unwrap());
        p.set_format(vec![9; 5]);
        assert!(!p.due(t0 + Duration::from_secs(60), Duration::from_secs(5), 1));
        assert_eq!(p.add(trx(4, 100), now, t0).unwrap(), Added::Duplicate);
        assert_eq!(p.add(trx(5, 100), now, t0).unwrap(), Added::Appended);
        assert_eq!(
            p.add(trx(6, 103), now, t0 + Duration::from_secs(3))
                .unwrap(),
            Added::Appended
        );
        assert!(!p.due(t0 + Duration::from_secs(4), Duration::from_secs(5), 1 << 20));
        assert!(p.due(t0 + Duration::from_secs(5), Duration::from_secs(5), 1 << 20));
        assert!(p.due(t0, Duration::from_secs(5), 20));
        assert!(p.format_changes(&[1]));
        assert!(!p.format_changes(&[9; 5]));

        p.source = Some(ArchiveSource {
            host: "db".into(),
            server_id: 1,
            server_version: "10.11".into(),
        });
        let (plain, m) = p.seal("binlog-x".into(), 8, 1).unwrap();
        let plain = plain.to_vec().unwrap();
        assert_eq!(m.source.host, "db");
        assert_eq!(&plain[..4], &BINLOG_MAGIC);
        assert_eq!(plain.len(), 4 + 5 + 20);
        assert_eq!(
            (m.after.to_string(), m.through.to_string()),
            ("0-1-4".into(), "0-1-6".into())
        );
        assert_eq!(
            (m.first_gtid.as_str(), m.last_gtid.as_str()),
            ("0-1-5", "0-1-6")
        );
        assert_eq!(m.transactions, 2);
        assert_eq!(
            (m.timeline, m.runs.len(), m.runs[0].first, m.runs[0].last),
            (FIRST_TIMELINE, 1, 5, 6)
        );
        assert_eq!(m.last_commit.timestamp(), 103);
        let next = p.next();
        assert!(next.is_empty() && next.has_format());
        assert_eq!(next.after.to_string(), "0-1-6");
    }
}
