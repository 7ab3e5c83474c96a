//! Verifying an archive without a server: every segment read back in full (digests, and under
//! a key its manifest's MAC and the chunks' authentication), its binary log parsed event by
//! event (CRC32, whole transactions), and what it holds compared with what its manifest says:
//! the transaction count, the first and last GTID, the runs, and the position after it. The
//! comparison is pure ([`holds_what_it_says`]); reading is the thin edge ([`verify_archive`]).

use std::sync::Arc;

use super::manifest::SegmentManifest;
use super::segments::{self, ArchiveListing};
use super::window;
use crate::binlog::event;
use crate::binlog::{Assembler, GtidRun, Step};
use crate::error::Result;
use crate::spool::Spool;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::store::Store;

/// Checks that `plain`, a segment's verified plaintext, holds what `m` says.
pub fn holds_what_it_says(m: &SegmentManifest, plain: &Spool) -> std::result::Result<(), String> {
    let events = event::file_events(plain)?;
    let mut assembler = Assembler::default();
    let mut through = m.after.clone();
    let mut runs: Vec<GtidRun> = Vec::new();
    let (mut count, mut first, mut last) = (0u64, None, None);
    for ev in events {
        match assembler.push(ev?).map_err(|e| e.to_string())? {
            Step::Transaction(trx) => {
                // Each domain's first transaction is the next after where the segment starts
                // (numbers skip only when an administrator sets gtid_seq_no).
                let opens_domain = !runs.iter().any(|r| r.domain == trx.gtid.domain);
                if opens_domain && !m.after.is_next(trx.gtid) {
                    return Err(format!(
                        "its first transaction of domain {} is {}, which does not follow its \
                         start {}",
                        trx.gtid.domain, trx.gtid, m.after
                    ));
                }
                count += 1;
                first.get_or_insert(trx.gtid);
                last = Some(trx.gtid);
                crate::binlog::runs::record(&mut runs, trx.gtid);
                through.advance(trx.gtid);
            }
            Step::Format(_) | Step::Nothing | Step::Heartbeat => {}
        }
    }
    if assembler.in_transaction() {
        return Err("it ends inside a transaction".into());
    }
    let shown = |g: Option<crate::binlog::Gtid>| g.map(|g| g.to_string()).unwrap_or_default();
    let checks = [
        (
            count == m.transactions,
            format!("{count} transactions, its manifest says {}", m.transactions),
        ),
        (
            shown(first) == m.first_gtid,
            format!(
                "its first transaction is {}, its manifest says {}",
                shown(first),
                m.first_gtid
            ),
        ),
        (
            shown(last) == m.last_gtid,
            format!(
                "its last transaction is {}, its manifest says {}",
                shown(last),
                m.last_gtid
            ),
        ),
        (
            through == m.through,
            format!("it ends at {through}, its manifest says {}", m.through),
        ),
        (
            m.runs.is_empty() || runs == m.runs,
            "its GTIDs are not the runs its manifest records".to_owned(),
        ),
    ];
    match checks.into_iter().find(|(ok, _)| !ok) {
        Some((_, why)) => Err(why),
        None => Ok(()),
    }
}

/// What verifying one segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentVerdict {
    pub id: String,
    /// `None` when the segment holds exactly what its manifest says.
    pub problem: Option<String>,
}

/// An archive verified: each segment, the segments without a valid manifest, and the gaps.
#[derive(Debug, Clone)]
pub struct ArchiveVerdict {
    pub archive: String,
    pub segments: Vec<SegmentVerdict>,
    /// Segments whose manifest is missing, damaged or not authentic, with why.
    pub unusable: Vec<(String, String)>,
    /// Where runs of continuous segments restart (the archive was not continuous there).
    pub gaps: Vec<window::Gap>,
}

impl ArchiveVerdict {
    /// Whether anything is wrong (a gap is reported, not wrong: the windows say what it costs).
    pub fn failed(&self) -> bool {
        !self.unusable.is_empty() || self.segments.iter().any(|s| s.problem.is_some())
    }
}

/// Reads back every segment of `archive` (manifests checked under `key`) and checks each.
pub async fn verify_archive(
    store: &Arc<dyn Store>,
    key: Option<&MasterKey>,
    archive: &str,
) -> Result<ArchiveVerdict> {
    let ArchiveListing {
        segments: listed,
        superseded,
        incomplete,
        ..
    } = segments::list(store, archive, key).await?;
    let mut verdicts = Vec::new();
    let all = listed.iter().chain(superseded.iter().map(|s| &s.manifest));
    for m in all {
        let problem = match segments::read(store, m, key).await {
            Ok(plain) => holds_what_it_says(m, &plain).err(),
            Err(e) => Some(crate::error::chain(&e)),
        };
        verdicts.push(SegmentVerdict {
            id: m.id.clone(),
            problem,
        });
    }
    verdicts.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(ArchiveVerdict {
        archive: archive.to_owned(),
        gaps: window::gaps(&listed),
        segments: verdicts,
        unusable: incomplete.into_iter().map(|i| (i.id, i.reason)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::{plain, pos, seg};

    #[test]
    fn a_segment_must_hold_what_its_manifest_says() {
        let held = plain(&[(1, 11), (1, 12), (2, 13)]);
        let good = || {
            let mut m = seg("s", "0-1-10", "0-2-13", 10);
            m.transactions = 3;
            m.first_gtid = "0-1-11".into();
            m.last_gtid = "0-2-13".into();
            for g in ["0-1-11", "0-1-12", "0-2-13"] {
                crate::binlog::runs::record(&mut m.runs, g.parse().unwrap());
            }
            m
        };
        let spooled = |b: &[u8]| Spool::from_bytes(b.to_vec());
        assert_eq!(holds_what_it_says(&good(), &spooled(&held)), Ok(()));
        type Edit = Box<dyn Fn(&mut SegmentManifest)>;
        let cases: Vec<(&str, Edit, &str)> = vec![
            (
                "count",
                Box::new(|m| m.transactions = 4),
                "3 transactions, its manifest says 4",
            ),
            (
                "first",
                Box::new(|m| m.first_gtid = "0-1-10".into()),
                "first transaction is 0-1-11",
            ),
            (
                "last",
                Box::new(|m| m.last_gtid = "0-1-13".into()),
                "last transaction is 0-2-13",
            ),
            (
                "after",
                Box::new(|m| m.after = pos("0-1-9")),
                "does not follow its start 0-1-9",
            ),
            (
                "through",
                Box::new(|m| m.through = pos("0-1-13")),
                "its manifest says 0-1-13",
            ),
            ("runs", Box::new(|m| m.runs[1].server = 3), "not the runs"),
        ];
        for (case, edit, want) in cases {
            let mut m = good();
            edit(&mut m);
            let e = holds_what_it_says(&m, &spooled(&held)).unwrap_err();
            assert!(e.contains(want), "{case}: {e}");
        }
        let mut cut = held.clone();
        cut.truncate(cut.len() - 5);
        assert!(holds_what_it_says(&good(), &spooled(&cut)).is_err());
    }
}
