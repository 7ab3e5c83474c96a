//! The archiver's housekeeping between events: the archive's backups listed again (for the
//! recovery window), segments no backup can use removed, small segments compacted in a
//! background task, and the segments a compaction replaced removed once their grace is over.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::compact;
use super::manifest::{self, SegmentManifest};
use super::options::ArchiveOptions;
use super::retain;
use super::segments::{self, IncompleteSegment, Superseded};
use super::status::ArchiverRecord;
use crate::error::Result;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::repo::{CompleteBackup, Repository};
use bulwark_engine::store::Store;

/// How often the backups are listed again.
const BACKUPS_RELIST: Duration = Duration::from_secs(20);
/// How long replaced segments stay when compaction is off (those of an earlier run).
const DEFAULT_GRACE: chrono::Duration = chrono::Duration::hours(1);
/// A segment without a manifest older than this is what an interrupted commit left.
const INCOMPLETE_GRACE: chrono::Duration = chrono::Duration::hours(1);
/// How long after a failed compaction the next is tried.
const RETRY_COMPACTION: chrono::Duration = chrono::Duration::minutes(5);

/// A compaction pass running in the background; it sends each compacted segment.
struct Running {
    task: tokio::task::JoinHandle<()>,
    done: mpsc::UnboundedReceiver<Result<SegmentManifest>>,
}

pub(super) struct Housekeeping<'a> {
    repo: &'a Repository,
    store: Arc<dyn Store>,
    key: Option<MasterKey>,
    opts: &'a ArchiveOptions,
    /// The archive's backups.
    pub backups: Vec<CompleteBackup>,
    /// Backup ids whose manifests were read (whatever their archive).
    seen: BTreeSet<String>,
    listed: Option<Instant>,
    superseded: Vec<Superseded>,
    compaction: Option<Running>,
    next_compaction: DateTime<Utc>,
}

impl Drop for Housekeeping<'_> {
    fn drop(&mut self) {
        // A compaction cut short leaves objects without a manifest, never a wrong segment.
        if let Some(r) = &self.compaction {
            r.task.abort();
        }
    }
}

impl<'a> Housekeeping<'a> {
    pub fn new(
        repo: &'a Repository,
        key: Option<&MasterKey>,
        opts: &'a ArchiveOptions,
        superseded: Vec<Superseded>,
    ) -> Self {
        Housekeeping {
            repo,
            store: repo.store().clone(),
            key: key.cloned(),
            opts,
            backups: Vec::new(),
            seen: BTreeSet::new(),
            listed: None,
            superseded,
            compaction: None,
            next_compaction: Utc::now(),
        }
    }

    /// Whether it is time to look again.
    pub fn due(&self) -> bool {
        self.listed.is_none_or(|t| t.elapsed() > BACKUPS_RELIST)
    }

    /// One round; `segments` are the archive's committed segments, updated in place.
    pub async fn run(
        &mut self,
        segments: &mut Vec<SegmentManifest>,
        record: &ArchiverRecord,
        uncommitted_since: Option<Instant>,
    ) {
        let complete = self.refresh_backups().await;
        // After a key rotation this archiver's key is no longer the repository's: its
        // segments are damaged under the new key, so nothing is merged or removed on its word
        // (it keeps archiving; restart it with the new key, and re-wrap what it wrote).
        let current = match (&self.key, self.repo.store()) {
            (Some(key), store) => {
                match bulwark_engine::authenticate::read_key_check(store, None).await {
                    Ok(Some(check)) if check.key_id != key.id() => {
                        tracing::error!(repository_key = %check.key_id, archiver_key = %key.id(), "the repository's key changed: no segment is merged or removed until the archiver runs with the new key");
                        false
                    }
                    Ok(Some(check))
                        if check.binding.as_ref().map(|b| &b.repository)
                            != key.binding().map(|b| &b.repository) =>
                    {
                        tracing::error!(archiver_key = %key.id(), "the repository's manifests were bound (rewrap) since the archiver started: no segment is merged or removed until it is restarted");
                        false
                    }
                    _ => true,
                }
            }
            (None, _) => true,
        };
        if current && complete && self.opts.prune_unneeded {
            self.prune_unneeded(segments).await;
        }
        self.collect_compacted(segments);
        if current {
            self.remove_replaced().await;
            self.start_compaction(segments);
        }
        record.reviewed(segments, &self.backups, uncommitted_since);
    }

    /// Lists the archive's backups again, reading only manifests not seen before; whether
    /// every listed backup was read (a failure keeps the last list: the window is informational
    /// and must never stop the archiving).
    async fn refresh_backups(&mut self) -> bool {
        // Also when the listing fails: it is tried again after the interval, not on every event.
        self.listed = Some(Instant::now());
        let ids = match self.repo.manifest_ids().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %crate::error::chain(&e), "failed to list backups for the recovery window");
                return false;
            }
        };
        self.backups.retain(|b| ids.contains(&b.manifest.id));
        self.seen.retain(|id| ids.contains(id));
        let mut complete = true;
        for id in ids {
            if self.seen.contains(&id) {
                continue;
            }
            match self.repo.load_manifest(&id).await {
                Ok(b) => {
                    if manifest::archive_of(&b.manifest) == self.opts.archive {
                        self.backups.push(b);
                    }
                    self.seen.insert(id);
                }
                // Damaged or just deleted: looked at again next time, and no segment is
                // deleted on a list that may lack a backup.
                Err(e) => {
                    complete = false;
                    tracing::debug!(backup_id = %id, error = %crate::error::chain(&e), "backup not read for the recovery window")
                }
            }
        }
        complete
    }

    /// Deletes the segments no backup of the archive can use, with the segments they replaced
    /// (first: they must not become the archive's again). A failure is logged and the segment
    /// stays for the next look.
    async fn prune_unneeded(&mut self, segments: &mut Vec<SegmentManifest>) {
        let doomed = retain::unneeded(&self.backups, segments);
        let mut gone = Vec::new();
        for i in doomed {
            let id = segments[i].id.clone();
            match self.delete_with_replaced(&id).await {
                Ok(()) => {
                    tracing::info!(segment = %id, "binlog segment no backup needs removed");
                    gone.push(id);
                }
                Err(e) => {
                    tracing::warn!(segment = %id, error = %crate::error::chain(&e), "failed to remove a binlog segment no backup needs")
                }
            }
        }
        segments.retain(|s| !gone.contains(&s.id));
    }

    async fn delete_with_replaced(&mut self, id: &str) -> Result<()> {
        let replaced: Vec<String> = self
            .superseded
            .iter()
            .filter(|s| s.by == id)
            .map(|s| s.manifest.id.clone())
            .collect();
        for r in &replaced {
            segments::delete(&self.store, r).await?;
            self.superseded.retain(|s| &s.manifest.id != r);
        }
        segments::delete(&self.store, id).await
    }

    /// Takes in what the background compaction committed so far.
    fn collect_compacted(&mut self, segments: &mut Vec<SegmentManifest>) {
        let Some(running) = &mut self.compaction else {
            return;
        };
        while let Ok(result) = running.done.try_recv() {
            match result {
                Ok(merged) => {
                    let since = merged.compacted_at.unwrap_or(merged.received_at);
                    let (replaced, kept): (Vec<_>, Vec<_>) = std::mem::take(segments)
                        .into_iter()
                        .partition(|s| merged.replaces.contains(&s.id));
                    *segments = kept;
                    self.superseded
                        .extend(replaced.into_iter().map(|manifest| Superseded {
                            manifest,
                            by: merged.id.clone(),
                            since,
                        }));
                    segments.push(merged);
                }
                Err(e) => {
                    tracing::warn!(error = %crate::error::chain(&e), "binlog segment compaction failed; the segments stay as they are");
                    self.next_compaction = Utc::now() + RETRY_COMPACTION;
                }
            }
        }
        if running.task.is_finished() && running.done.is_empty() {
            self.compaction = None;
        }
    }

    /// Deletes the replaced segments whose grace is over.
    async fn remove_replaced(&mut self) {
        let grace = self.opts.compact.map_or(DEFAULT_GRACE, |r| r.grace);
        for i in compact::expired(&self.superseded, grace, Utc::now())
            .into_iter()
            .rev()
        {
            let id = self.superseded[i].manifest.id.clone();
            match segments::delete(&self.store, &id).await {
                Ok(()) => {
                    tracing::debug!(segment = %id, "binlog segment a compacted one replaced removed");
                    self.superseded.remove(i);
                }
                Err(e) => {
                    tracing::warn!(segment = %id, error = %crate::error::chain(&e), "failed to remove a binlog segment a compacted one replaced")
                }
            }
        }
    }

    /// Starts a compaction pass when none runs and a span has ended since the last one.
    fn start_compaction(&mut self, segments: &[SegmentManifest]) {
        let Some(rules) = self.opts.compact else {
            return;
        };
        let now = Utc::now();
        if self.compaction.is_some() || now < self.next_compaction {
            return;
        }
        self.next_compaction = compact::next_pass(&rules, now);
        let (tx, done) = mpsc::unbounded_channel();
        let (store, key, write) = (
            self.store.clone(),
            self.key.clone(),
            self.opts.write.clone(),
        );
        let archive = self.opts.archive.clone();
        let segments = segments.to_vec();
        let task = tokio::spawn(async move {
            let (segments, groups) = match tokio::task::spawn_blocking(move || {
                let groups = compact::plan(&segments, &rules, now);
                (segments, groups)
            })
            .await
            {
                Ok(planned) => planned,
                Err(_) => return,
            };
            for group in groups {
                let group: Vec<SegmentManifest> =
                    group.into_iter().map(|i| segments[i].clone()).collect();
                let result =
                    compact::compact_group(&store, key.as_ref(), &write, &archive, &group).await;
                if let Ok(merged) = &result {
                    tracing::info!(segment = %merged.id, replaces = merged.replaces.len(), first = %merged.first_gtid, last = %merged.last_gtid, stored_bytes = merged.stored_bytes, "binlog segments compacted");
                }
                let failed = result.is_err();
                if tx.send(result).is_err() || failed {
                    return;
                }
            }
        });
        self.compaction = Some(Running { task, done });
    }
}

/// Deletes what interrupted commits left (objects without a manifest, older than an hour);
/// damaged manifests stay for a person to look at.
pub(super) async fn remove_incomplete(store: &Arc<dyn Store>, incomplete: &[IncompleteSegment]) {
    let now = Utc::now();
    for i in incomplete
        .iter()
        .filter(|i| !i.damaged && i.newest.is_some_and(|t| now - t > INCOMPLETE_GRACE))
    {
        match segments::delete(store, &i.id).await {
            Ok(()) => {
                tracing::info!(segment = %i.id, "objects of an interrupted segment commit removed")
            }
            Err(e) => {
                tracing::warn!(segment = %i.id, error = %crate::error::chain(&e), "failed to remove the objects of an interrupted segment commit")
            }
        }
    }
}
