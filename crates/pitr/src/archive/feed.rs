//! The segments a replay reads, in chain order, each fully verified. When one can no longer be
//! read (a compaction replaced it, and its grace ran out during a long replay) the archive is
//! listed again and the chain continues from where the replay is: the segment that replaced it
//! starts earlier, and the replay's selector skips what it already gave.

use std::collections::VecDeque;
use std::sync::Arc;

use super::manifest::SegmentManifest;
use super::{segments, window};
use crate::binlog::GtidPos;
use crate::error::Result;
use crate::spool::Spool;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::store::Store;

/// Reads a chain of segments one after another.
pub struct Feed<'a> {
    store: &'a Arc<dyn Store>,
    key: Option<&'a MasterKey>,
    archive: &'a str,
    queue: VecDeque<SegmentManifest>,
    /// The position after the last segment read.
    at: GtidPos,
    /// The GTID target the chain was chosen toward, if any.
    toward: Option<GtidPos>,
    /// The timeline the position is on, when known ([`window::chain_for`]).
    timeline: Option<u32>,
}

/// One segment of the chain.
#[derive(Debug)]
pub struct Fed {
    pub id: String,
    /// Where its manifest says it starts.
    pub after: GtidPos,
    /// Where its manifest says it ends.
    pub through: GtidPos,
    /// Its verified plaintext.
    pub plain: Result<Spool>,
}

impl<'a> Feed<'a> {
    /// A feed of `chain` (in replay order) of archive `archive`, which continues `from`
    /// (toward GTID target `toward`, when the chain was chosen for one).
    pub fn new(
        store: &'a Arc<dyn Store>,
        key: Option<&'a MasterKey>,
        archive: &'a str,
        chain: Vec<SegmentManifest>,
        from: GtidPos,
        toward: Option<GtidPos>,
    ) -> Self {
        Feed {
            store,
            key,
            archive,
            queue: chain.into(),
            at: from,
            toward,
            timeline: None,
        }
    }

    /// The feed of a chain whose start belongs to `timeline` (what the backup recorded): a
    /// chain listed again follows that history.
    pub fn on_timeline(mut self, timeline: Option<u32>) -> Self {
        self.timeline = timeline;
        self
    }

    /// The next segment; `None` at the end of the chain.
    pub async fn next(&mut self) -> Option<Fed> {
        let seg = self.queue.pop_front()?;
        let plain = match segments::read(self.store, &seg, self.key).await {
            Ok(plain) => plain,
            Err(e) => match self.relist(&seg.id).await {
                Some(replacement) => {
                    tracing::info!(segment = %seg.id, replacement = %replacement.id, "segment replaced since the archive was listed; continuing with the archive as it is now");
                    let plain = segments::read(self.store, &replacement, self.key).await;
                    return Some(self.advance(replacement, plain));
                }
                None => return Some(self.advance(seg, Err(e))),
            },
        };
        Some(self.advance(seg, Ok(plain)))
    }

    fn advance(&mut self, seg: SegmentManifest, plain: Result<Spool>) -> Fed {
        if plain.is_ok() {
            self.at = seg.through.clone();
            self.timeline = Some(seg.timeline);
        }
        Fed {
            id: seg.id,
            after: seg.after,
            through: seg.through,
            plain,
        }
    }

    /// Lists the archive again; when the chain from the current position now starts with
    /// another segment than `failed`, the queue becomes that chain and its first is returned.
    async fn relist(&mut self, failed: &str) -> Option<SegmentManifest> {
        let listing = segments::list(self.store, self.archive, self.key)
            .await
            .ok()?;
        let chain = window::chain_for(
            &listing.segments,
            &self.at,
            self.timeline,
            self.toward.as_ref(),
        );
        let mut again: VecDeque<SegmentManifest> = chain
            .segments
            .iter()
            .map(|i| listing.segments[*i].clone())
            .collect();
        if again.front().is_none_or(|s| s.id == failed) {
            return None;
        }
        let first = again.pop_front();
        self.queue = again;
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::compact;
    use crate::archive::replay::Selector;
    use crate::archive::window::tests_support::{at, pos, seg};
    use crate::archive::RecoveryTarget;
    use crate::binlog::event::{build, gtid_body, kind, query_body, BINLOG_MAGIC};
    use bulwark_engine::writer::WriteOptions;

    fn plaintext(seqs: std::ops::RangeInclusive<u64>) -> Vec<u8> {
        let mut out = BINLOG_MAGIC.to_vec();
        out.extend(build(kind::FORMAT_DESCRIPTION, 1, 1, 0, &[4; 20]));
        for s in seqs {
            out.extend(build(kind::GTID, 5, 1, 0, &gtid_body(0, s, true)));
            out.extend(build(kind::QUERY, 5, 1, 0, &query_body("t", "DO 1")));
        }
        out
    }

    #[tokio::test]
    async fn a_segment_compacted_and_deleted_mid_replay_is_read_from_its_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            bulwark_engine::store::FsStore::open(dir.path())
                .await
                .unwrap(),
        );
        let key = MasterKey::from_bytes(&[7u8; 32]).unwrap();
        let write = WriteOptions {
            chunk_size: 64,
            level: 1,
            workers: 1,
            segment_size: 1 << 20,
        };
        let mut chain = Vec::new();
        for (n, (after, through, seqs)) in [
            ("0-1-10", "0-1-12", 11..=12),
            ("0-1-12", "0-1-14", 13..=14),
            ("0-1-14", "0-1-15", 15..=15),
        ]
        .into_iter()
        .enumerate()
        {
            let mut m = seg("x", after, through, 100 + n as u32);
            m.id = crate::archive::manifest::new_segment_id("t", at(n as u32));
            m.transactions = seqs.clone().count() as u64;
            let committed = segments::commit(
                &store,
                Spool::from_bytes(plaintext(seqs)),
                Some(&key),
                &write,
                m,
                bulwark_engine::progress::Progress::new(),
            )
            .await
            .unwrap();
            chain.push(committed);
        }
        let mut feed = Feed::new(&store, Some(&key), "t", chain.clone(), pos("0-1-11"), None);
        let mut selector = Selector::new(pos("0-1-11"), RecoveryTarget::Latest);
        let mut out = crate::spool::SpoolWriter::new(crate::spool::SpillRules::memory(1 << 20));
        let fed = feed.next().await.unwrap();
        selector
            .take(&fed.id, &fed.after, &fed.plain.unwrap(), &mut out)
            .unwrap();
        assert_eq!(selector.reached().to_string(), "0-1-12");

        // All three are merged, and the two not yet read are deleted.
        let merged = compact::compact_group(&store, Some(&key), &write, "t", &chain)
            .await
            .unwrap();
        for s in &chain[1..] {
            segments::delete(&store, &s.id).await.unwrap();
        }
        let fed = feed.next().await.unwrap();
        assert_eq!(fed.id, merged.id);
        selector
            .take(&fed.id, &fed.after, &fed.plain.unwrap(), &mut out)
            .unwrap();
        assert!(feed.next().await.is_none());
        assert_eq!(selector.reached().to_string(), "0-1-15");
        assert_eq!(selector.transactions, 4, "0-1-12 is not given twice");

        // A segment that is simply gone, with nothing replacing it, fails the replay.
        let mut feed = Feed::new(
            &store,
            Some(&key),
            "t",
            chain[1..].to_vec(),
            pos("0-1-12"),
            None,
        );
        segments::delete(&store, &merged.id).await.unwrap();
        let fed = feed.next().await.unwrap();
        assert_eq!(fed.id, chain[1].id);
        assert!(fed.plain.is_err());
    }
}
