//! What `prune` removes: complete backups the retention rules do not keep (but never the base
//! of the current recovery window), archived binlog segments no retained backup needs (with
//! the segments a compacted one replaced), and incomplete backups and segments (no manifest)
//! untouched for longer than the orphan grace. Damaged backups
//! are never removed automatically. The plan is pure; [`execute`] carries it out, manifests
//! first.

use chrono::{DateTime, Duration, Utc};

use crate::archive::manifest::archive_of;
use crate::archive::retain::{self, BackupPoint};
use crate::archive::segments::{ArchiveListing, IncompleteSegment};
use crate::archive::SegmentManifest;
use crate::retention::{self, Candidate, Decision, KeepPolicy};
use crate::Result;
use bulwark_engine::repo::{Catalog, IncompleteBackup, IncompleteState, Repository};

/// What a prune will do.
#[derive(Debug)]
pub struct PrunePlan<'a> {
    /// One decision per complete backup, newest first.
    pub decisions: Vec<Decision>,
    /// Incomplete backups past the grace: removed.
    pub stale: Vec<&'a IncompleteBackup>,
    /// Damaged backups: left alone, reported.
    pub damaged: Vec<&'a IncompleteBackup>,
    /// Archived binlog segments no retained backup needs: removed.
    pub segments: Vec<&'a SegmentManifest>,
    /// Segments a compacted one replaced, past the grace or with it: removed first.
    pub replaced: Vec<&'a SegmentManifest>,
    /// Segments without a manifest (an interrupted commit) past the grace: removed.
    pub stale_segments: Vec<&'a IncompleteSegment>,
}

/// The reason a backup the rules would drop is kept.
pub const WINDOW_BASE: &str = "base of the current recovery window";

/// Plans a prune of `catalog` at `now`.
pub fn plan<'a>(
    catalog: &'a Catalog,
    archives: &'a std::collections::BTreeMap<String, ArchiveListing>,
    policy: &KeepPolicy,
    orphan_grace: Duration,
    now: DateTime<Utc>,
) -> PrunePlan<'a> {
    let candidates: Vec<Candidate> = catalog
        .complete
        .iter()
        .map(|b| Candidate {
            id: b.manifest.id.clone(),
            time: b.manifest.finished_at,
        })
        .collect();
    let mut decisions = retention::plan(policy, &candidates);
    let mut removed_segments = Vec::new();
    let mut replaced = Vec::new();
    let mut stale_segments = Vec::new();
    for (archive, listing) in archives {
        let segments = &listing.segments;
        let points: Vec<BackupPoint> = catalog
            .complete
            .iter()
            .filter(|b| archive_of(&b.manifest) == archive)
            .map(|b| {
                let kept = decisions.iter().any(|d| d.id == b.manifest.id && d.keep);
                BackupPoint::of(b, kept)
            })
            .collect();
        let archive = retain::plan(&points, segments);
        if let Some(id) = &archive.rescued {
            if let Some(d) = decisions.iter_mut().find(|d| &d.id == id) {
                d.keep = true;
                d.reasons.push(WINDOW_BASE.into());
            }
        }
        // A damaged backup (unreadable, or not authentic under the key: one written before
        // manifests were authenticated among them) may still need segments: none are removed
        // while one exists.
        let damaged = catalog
            .incomplete
            .iter()
            .any(|i| i.state.reason().is_some());
        let removed: Vec<&SegmentManifest> = if damaged {
            Vec::new()
        } else {
            archive.remove.iter().map(|i| &segments[*i]).collect()
        };
        replaced.extend(
            listing
                .superseded
                .iter()
                .filter(|s| now - s.since > orphan_grace || removed.iter().any(|r| r.id == s.by))
                .map(|s| &s.manifest),
        );
        removed_segments.extend(removed);
        stale_segments.extend(
            listing
                .incomplete
                .iter()
                .filter(|i| !i.damaged && i.newest.is_some_and(|t| now - t > orphan_grace)),
        );
    }
    PrunePlan {
        decisions,
        segments: removed_segments,
        replaced,
        stale_segments,
        stale: catalog
            .incomplete
            .iter()
            .filter(|i| {
                i.state == IncompleteState::Orphan
                    && i.newest().is_some_and(|t| now - t > orphan_grace)
            })
            .collect(),
        damaged: catalog
            .incomplete
            .iter()
            .filter(|i| matches!(i.state, IncompleteState::Damaged(_)))
            .collect(),
    }
}

/// Removes what `plan` does not keep; returns the ids removed, in order.
pub async fn execute(
    repo: &Repository,
    catalog: &Catalog,
    plan: &PrunePlan<'_>,
) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for d in plan.decisions.iter().filter(|d| !d.keep) {
        repo.delete_backup(&d.id, &catalog.objects[&d.id]).await?;
        tracing::info!(backup_id = %d.id, "backup removed");
        removed.push(d.id.clone());
    }
    // Replaced segments before the compacted ones: they must not become the archive's again.
    for s in plan.replaced.iter().chain(&plan.segments) {
        crate::archive::segments::delete(repo.store(), &s.id).await?;
        tracing::info!(segment = %s.id, "binlog segment removed");
        removed.push(s.id.clone());
    }
    for s in &plan.stale_segments {
        crate::archive::segments::delete(repo.store(), &s.id).await?;
        tracing::info!(segment = %s.id, "incomplete binlog segment removed");
        removed.push(s.id.clone());
    }
    for o in &plan.stale {
        repo.delete_backup(&o.id, &o.objects).await?;
        tracing::info!(backup_id = %o.id, "incomplete backup removed");
        removed.push(o.id.clone());
    }
    Ok(removed)
}
