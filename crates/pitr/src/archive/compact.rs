//! Compaction: the small segments a quiet server leaves (one every few seconds) are merged,
//! once their span of time has passed, into segments of up to a size bound, so an archive
//! holds tens of objects a day rather than thousands. A compacted segment names the segments
//! it replaces; they stay readable for a grace (a replay may have listed them) and are deleted
//! after it. Planning and merging are pure; [`compact_group`] is the thin edge.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::history::{self, GtidRun};
use super::manifest::{self, SegmentManifest};
use super::segments::{self, Superseded};
use crate::binlog::event::{self, BINLOG_MAGIC};
use crate::binlog::{Assembler, Step};
use crate::error::{Error, Result};
use crate::spool::Spool;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::writer::WriteOptions;

/// When and how segments are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactRules {
    /// Segments received within one span (aligned to the epoch: whole hours for an hour) are
    /// merged once the span is over.
    pub span: Duration,
    /// A merged segment holds at most this many plaintext bytes; a segment of half that or
    /// more is left as it is (a busy server's segments are already large).
    pub max_bytes: u64,
    /// How long replaced segments stay after the compacted one is written.
    pub grace: Duration,
}

/// How long after a span ends it is merged: a segment received just before its end may still
/// be committing (a minute, or half the span when that is shorter).
pub fn settle(span: Duration) -> Duration {
    (span / 2).min(Duration::seconds(60))
}

/// When the span after the one `now` is in has ended and settled: the next pass.
pub fn next_pass(rules: &CompactRules, now: DateTime<Utc>) -> DateTime<Utc> {
    let span = rules.span.num_seconds().max(1);
    let next_end = (now.timestamp().div_euclid(span) + 1) * span;
    DateTime::from_timestamp(next_end, 0).unwrap_or(now) + settle(rules.span)
}

/// The groups of segments (indices, in replay order, two or more each) to merge at `now`.
///
/// Only segments that follow one another exactly are merged, and only where the chain has
/// no choice: the one segment starting where the previous ends is the only one continuing it,
/// and nothing else ends there. A failover leaves overlapping segments; they are not touched,
/// so a merge never changes which transactions any chain replays.
pub fn plan(
    segments: &[SegmentManifest],
    rules: &CompactRules,
    now: DateTime<Utc>,
) -> Vec<Vec<usize>> {
    let span = rules.span.num_seconds();
    if span <= 0 {
        return Vec::new();
    }
    let bucket = |s: &SegmentManifest| s.received_at.timestamp().div_euclid(span);
    let closed = |s: &SegmentManifest| {
        let ends = (bucket(s) + 1) * span;
        ends <= (now - settle(rules.span)).timestamp()
    };
    let small = |s: &SegmentManifest| s.plaintext.bytes < rules.max_bytes / 2;
    // No other segment shares any of its transactions (a failover's overlap).
    let alone = |i: usize| {
        let s = &segments[i];
        segments.iter().enumerate().all(|(j, u)| {
            j == i
                || u.after == s.through
                || !s.through.covers(&u.after)
                || s.after.covers(&u.through)
        })
    };
    let eligible: Vec<bool> = (0..segments.len())
        .map(|i| closed(&segments[i]) && small(&segments[i]) && alone(i))
        .collect();
    let mut by_after: HashMap<String, Vec<usize>> = HashMap::new();
    let mut by_through: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, s) in segments.iter().enumerate() {
        by_after.entry(s.after.to_string()).or_default().push(i);
        by_through.entry(s.through.to_string()).or_default().push(i);
    }
    // The one segment that starts where segment `i` ends, when nothing else ends there too.
    let successor = |i: usize| -> Option<usize> {
        let s = &segments[i];
        let key = s.through.to_string();
        let [next] = by_after.get(&key)?.as_slice() else {
            return None;
        };
        let t = &segments[*next];
        let one_end = by_through.get(&key).is_some_and(|v| v.len() == 1);
        (eligible[*next]
            && one_end
            && t.source == s.source
            && t.timeline == s.timeline
            && bucket(t) == bucket(s))
        .then_some(*next)
    };
    let links: Vec<Option<usize>> = (0..segments.len())
        .map(|i| if eligible[i] { successor(i) } else { None })
        .collect();
    let mut has_predecessor = vec![false; segments.len()];
    for next in links.iter().flatten() {
        has_predecessor[*next] = true;
    }
    let mut groups = Vec::new();
    let mut heads: Vec<usize> = (0..segments.len())
        .filter(|i| eligible[*i] && !has_predecessor[*i])
        .collect();
    heads.sort_by_key(|i| (segments[*i].received_at, segments[*i].id.clone()));
    for head in heads {
        let mut group = vec![head];
        let mut bytes = segments[head].plaintext.bytes;
        let mut at = head;
        while let Some(next) = links[at] {
            let add = segments[next].plaintext.bytes;
            if bytes + add > rules.max_bytes {
                if group.len() > 1 {
                    groups.push(std::mem::take(&mut group));
                }
                group.clear();
                bytes = 0;
            }
            group.push(next);
            bytes += add;
            at = next;
        }
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

/// A merged segment's plaintext and the runs of GTIDs it holds.
#[derive(Debug)]
pub struct Merged {
    pub plain: Vec<u8>,
    /// Read from the transactions themselves, so they are exact even when the parts were
    /// written before segments recorded runs.
    pub runs: Vec<GtidRun>,
}

/// One binlog holding the transactions of `parts` (segment plaintexts in replay order): a
/// format description only where it changes. Every event is checked again, and the result must
/// hold exactly `expected` transactions.
pub fn merge(parts: &[(&str, &[u8])], expected: u64) -> std::result::Result<Merged, String> {
    let total: usize = parts.iter().map(|(_, p)| p.len()).sum();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&BINLOG_MAGIC);
    let mut format: Option<Vec<u8>> = None;
    let mut transactions = 0u64;
    let mut runs = Vec::new();
    for (id, plain) in parts {
        let body = plain
            .strip_prefix(&BINLOG_MAGIC[..])
            .ok_or_else(|| format!("segment {id} does not start with the binlog magic"))?;
        let mut assembler = Assembler::default();
        for ev in event::events(body) {
            let ev = ev.map_err(|e| format!("segment {id}: {e}"))?;
            match assembler
                .push(ev)
                .map_err(|e| format!("segment {id}: {e}"))?
            {
                Step::Format(fde) => {
                    if format.as_deref() != Some(fde.bytes()) {
                        out.extend_from_slice(fde.bytes());
                        format = Some(fde.bytes().to_vec());
                    }
                }
                Step::Transaction(trx) => {
                    transactions += 1;
                    history::record(&mut runs, trx.gtid);
                    std::io::Read::read_to_end(&mut trx.events.reader(), &mut out)
                        .map_err(|e| format!("segment {id}: {e}"))?;
                }
                Step::Nothing | Step::Heartbeat => {}
            }
        }
        if assembler.in_transaction() {
            return Err(format!("segment {id} ends inside a transaction"));
        }
    }
    if transactions != expected {
        return Err(format!(
            "the merged segments hold {transactions} transactions, their manifests say {expected}"
        ));
    }
    Ok(Merged { plain: out, runs })
}

/// The manifest of a segment holding `group` (in replay order, one timeline), before it is
/// stored; `runs` are the merged transactions'.
pub fn draft(
    group: &[SegmentManifest],
    runs: Vec<GtidRun>,
    id: String,
    now: DateTime<Utc>,
    write: &WriteOptions,
) -> SegmentManifest {
    let (first, last) = (&group[0], &group[group.len() - 1]);
    let mut m = last.clone();
    m.id = id;
    m.after = first.after.clone();
    m.runs = runs;
    m.first_gtid = first.first_gtid.clone();
    m.first_commit = first.first_commit;
    m.transactions = group.iter().map(|s| s.transactions).sum();
    m.chunking.chunk_size = write.chunk_size as u64;
    m.chunking.compression_level = write.level;
    m.encryption = None;
    m.segments = Vec::new();
    m.stored_bytes = 0;
    m.replaces = group.iter().map(|s| s.id.clone()).collect();
    m.compacted_at = Some(now);
    m
}

/// Reads `group` (verified), merges it and commits the compacted segment; the group's
/// segments stay until [`expired`] says so.
pub async fn compact_group(
    store: &Arc<dyn bulwark_engine::store::Store>,
    key: Option<&MasterKey>,
    write: &WriteOptions,
    archive: &str,
    group: &[SegmentManifest],
) -> Result<SegmentManifest> {
    // Only segments under half the size bound are merged: each is read into memory.
    let mut plains = Vec::with_capacity(group.len());
    for s in group {
        let plain = segments::read(store, s, key).await?;
        plains.push(plain.to_vec().map_err(Error::spool)?);
    }
    let parts: Vec<(&str, &[u8])> = group
        .iter()
        .zip(&plains)
        .map(|(s, p)| (s.id.as_str(), p.as_slice()))
        .collect();
    let now = Utc::now();
    let expected = group.iter().map(|s| s.transactions).sum();
    let id = manifest::new_segment_id(archive, now);
    let merged = merge(&parts, expected).map_err(|reason| Error::DamagedSegment {
        id: group[0].id.clone(),
        reason,
    })?;
    drop(plains);
    // The merged transactions must end where the group's manifests say; a mismatch is damage,
    // never to be sealed into a new manifest.
    let last = &group[group.len() - 1];
    let ends_there = merged.runs.iter().all(|r| {
        let newest = merged.runs.iter().rev().find(|x| x.domain == r.domain);
        newest.is_some_and(|n| {
            last.through.get(n.domain)
                == Some(crate::binlog::Gtid {
                    domain: n.domain,
                    server: n.server,
                    seq: n.last,
                })
        })
    });
    if !ends_there {
        return Err(Error::DamagedSegment {
            id: last.id.clone(),
            reason: format!(
                "the transactions of its group do not end at {}, where its manifest says",
                last.through
            ),
        });
    }
    let draft = draft(group, merged.runs, id, now, write);
    let progress = bulwark_engine::progress::Progress::new();
    segments::commit(
        store,
        Spool::from_bytes(merged.plain),
        key,
        write,
        draft,
        progress,
    )
    .await
}

/// The replaced segments whose grace is over at `now`.
pub fn expired(superseded: &[Superseded], grace: Duration, now: DateTime<Utc>) -> Vec<usize> {
    superseded
        .iter()
        .enumerate()
        .filter(|(_, s)| now - s.since >= grace)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
