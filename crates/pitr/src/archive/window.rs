//! Restore targets and recovery windows: what a point-in-time restore replays up to, the window
//! a backup's chain ([`super::chain`]) gives, and whether a target lies inside it. Pure;
//! table-tested.

use chrono::{DateTime, NaiveDateTime, Utc};

pub use super::chain::{chain_for, chain_from, chain_toward, gaps, reachable, Chain, Gap};
use crate::binlog::GtidPos;

/// What a point-in-time restore replays up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryTarget {
    /// Everything the archive holds after the backup.
    Latest,
    /// Every transaction up to and including this position.
    Gtid(GtidPos),
    /// Every transaction whose commit is stamped at or before this second.
    Time(DateTime<Utc>),
}

impl std::fmt::Display for RecoveryTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryTarget::Latest => f.write_str("the latest archived transaction"),
            RecoveryTarget::Gtid(p) => write!(f, "GTID {p}"),
            RecoveryTarget::Time(t) => write!(f, "{}", t.format("%Y-%m-%dT%H:%M:%SZ")),
        }
    }
}

impl RecoveryTarget {
    /// `latest`, an RFC 3339 time, or `YYYY-MM-DD HH:MM:SS` (UTC); whole seconds only, since
    /// MariaDB stamps binlog events with the second their statement started.
    pub fn parse_time(s: &str) -> Result<RecoveryTarget, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("latest") {
            return Ok(RecoveryTarget::Latest);
        }
        let t = DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").map(|t| t.and_utc()))
            .map_err(|_| format!("{s:?} is not `latest` or a time like 2026-11-25T03:15:00Z"))?;
        if t.timestamp_subsec_nanos() != 0 {
            return Err(format!(
                "{s:?} has a fraction of a second; MariaDB stamps binlog events with whole \
                 seconds, so give a whole second or a GTID position"
            ));
        }
        Ok(RecoveryTarget::Time(t))
    }

    /// The position of a GTID target.
    pub fn gtid(&self) -> Option<&GtidPos> {
        match self {
            RecoveryTarget::Gtid(p) => Some(p),
            _ => None,
        }
    }

    /// A MariaDB GTID position (`0-1-5012`, one per domain, comma-separated).
    pub fn parse_gtid(s: &str) -> Result<RecoveryTarget, String> {
        let pos = GtidPos::parse(s)?;
        if pos.is_empty() {
            return Err("the GTID position is empty".into());
        }
        Ok(RecoveryTarget::Gtid(pos))
    }
}

/// A backup's recovery window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The backup's consistent point.
    pub from: GtidPos,
    /// When the backup finished (nothing earlier can be restored from it).
    pub from_time: DateTime<Utc>,
    /// How far the archive reaches from it.
    pub to: GtidPos,
    /// Commit stamp of the last transaction reachable (the backup's time when none).
    pub to_time: DateTime<Utc>,
}

impl Window {
    /// The window extended in time by the archive's coverage, when that is of the window's
    /// very end: a quiet period after the last commit is recoverable too.
    pub fn covered(mut self, coverage: Option<&super::coverage::Coverage>) -> Window {
        if let Some(until) = coverage.and_then(|c| c.extends(&self.to)) {
            self.to_time = self.to_time.max(until);
        }
        self
    }

    /// The window of a backup at `from` (finished at `from_time`) given its chain.
    pub fn of(from: GtidPos, from_time: DateTime<Utc>, chain: &Chain) -> Window {
        Window {
            to: chain.reached.clone(),
            to_time: chain.last_commit.map_or(from_time, |t| t.max(from_time)),
            from,
            from_time,
        }
    }

    /// `from .. to` for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}) .. {} ({})",
            show(&self.from),
            self.from_time.format("%Y-%m-%dT%H:%M:%SZ"),
            show(&self.to),
            self.to_time.format("%Y-%m-%dT%H:%M:%SZ")
        )
    }

    /// Checks that `target` is inside the window; the error is one line naming the window.
    pub fn check(&self, target: &RecoveryTarget) -> Result<(), String> {
        let inside = match target {
            RecoveryTarget::Latest => true,
            RecoveryTarget::Gtid(p) => self.to.covers(p) && !self.from.covers(p) || self.from == *p,
            RecoveryTarget::Time(t) => *t >= self.from_time && *t <= self.to_time,
        };
        if inside {
            Ok(())
        } else {
            Err(format!(
                "{target} is outside the recovery window {}",
                self.describe()
            ))
        }
    }
}

fn show(p: &GtidPos) -> String {
    if p.is_empty() {
        "(empty)".into()
    } else {
        p.to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::archive::manifest::{ArchiveSource, SegmentManifest, ARCHIVE_FORMAT_NAME};
    use bulwark_engine::format::{Chunking, PlaintextInfo};

    pub fn at(s: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_795_000_000 + i64::from(s), 0).unwrap()
    }

    pub fn pos(s: &str) -> GtidPos {
        GtidPos::parse(s).unwrap()
    }

    /// A segment's plaintext holding `gtids` (`server-seq`, domain 0), one statement each.
    pub fn plain(gtids: &[(u32, u64)]) -> Vec<u8> {
        use crate::binlog::event::{build, gtid_body, kind, query_body, BINLOG_MAGIC};
        let mut out = BINLOG_MAGIC.to_vec();
        out.extend(build(kind::FORMAT_DESCRIPTION, 1, 1, 0, &[4; 20]));
        for (server, seq) in gtids {
            out.extend(build(kind::GTID, 5, *server, 0, &gtid_body(0, *seq, true)));
            out.extend(build(kind::QUERY, 5, *server, 0, &query_body("t", "DO 1")));
        }
        out
    }

    pub fn seg(id: &str, after: &str, through: &str, received: u32) -> SegmentManifest {
        SegmentManifest {
            format: ARCHIVE_FORMAT_NAME.into(),
            format_version: 1,
            id: id.into(),
            source: ArchiveSource {
                host: "db-0".into(),
                server_id: 1,
                server_version: "10.11".into(),
            },
            after: pos(after),
            through: pos(through),
            timeline: crate::archive::history::FIRST_TIMELINE,
            runs: Vec::new(),
            first_gtid: String::new(),
            last_gtid: String::new(),
            transactions: 1,
            first_commit: at(received - 1),
            last_commit: at(received),
            received_at: at(received),
            chunking: Chunking {
                chunk_size: 1,
                compression: "zstd".into(),
                compression_level: 1,
            },
            encryption: None,
            plaintext: PlaintextInfo {
                bytes: 0,
                chunks: 0,
                sha256: String::new(),
            },
            stored_bytes: 0,
            segments: vec![],
            replaces: vec![],
            compacted_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{at, pos, seg};
    use super::*;

    #[test]
    fn targets_outside_the_window_are_refused_naming_it() {
        let segs = vec![
            seg("a", "0-1-10", "0-1-20", 100),
            seg("b", "0-1-20", "0-1-30", 200),
        ];
        let w = Window::of(pos("0-1-12"), at(50), &chain_from(&segs, &pos("0-1-12")));
        let cases = [
            (RecoveryTarget::Latest, None),
            (RecoveryTarget::Gtid(pos("0-1-25")), None),
            (RecoveryTarget::Gtid(pos("0-1-12")), None),
            (
                RecoveryTarget::Gtid(pos("0-1-31")),
                Some("GTID 0-1-31 is outside"),
            ),
            (
                RecoveryTarget::Gtid(pos("0-1-11")),
                Some("GTID 0-1-11 is outside"),
            ),
            (RecoveryTarget::Time(at(150)), None),
            (
                RecoveryTarget::Time(at(49)),
                Some("is outside the recovery window 0-1-12"),
            ),
            (RecoveryTarget::Time(at(201)), Some("outside")),
        ];
        for (target, want) in cases {
            match (w.check(&target), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{e}"),
                (r, _) => panic!("{target}: {r:?}"),
            }
        }
        assert_eq!(
            w.describe(),
            "0-1-12 (2026-11-18T11:07:30Z) .. 0-1-30 (2026-11-18T11:10:00Z)"
        );
    }
}
