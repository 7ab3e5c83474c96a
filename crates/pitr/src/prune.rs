//! What `prune` removes: complete backups the retention rules do not keep (but never the base
//! of the current recovery window), archived binlog segments no retained backup needs (with
//! the segments a compacted one replaced), and incomplete backups and segments (no manifest)
//! untouched for longer than the orphan grace. Damaged backups are never removed
//! automatically, nor is a backup a restore or its own writer holds (`bulwark_engine::holds`):
//! it is kept, with the hold as its reason. The plan is pure; [`execute`] carries it out,
//! manifests first, and leaves alone a backup held since the plan was made.

use chrono::{DateTime, Duration, Utc};

use crate::archive::manifest::archive_of;
use crate::archive::retain::{self, BackupPoint};
use crate::archive::segments::{ArchiveListing, IncompleteSegment};
use crate::archive::SegmentManifest;
use crate::retention::{self, Candidate, Decision, KeepPolicy};
use crate::Result;
use bulwark_engine::holds::{self, HoldKind, HoldRecord};
use bulwark_engine::repo::{Catalog, IncompleteBackup, IncompleteState, Repository};

/// The live holds of a repository, by backup id.
pub type Holds = std::collections::BTreeMap<String, Vec<HoldRecord>>;

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

/// Plans a prune of `catalog` at `now`; what `holds` holds is kept.
pub fn plan<'a>(
    catalog: &'a Catalog,
    archives: &'a std::collections::BTreeMap<String, ArchiveListing>,
    holds: &Holds,
    policy: &KeepPolicy,
    orphan_grace: Duration,
    now: DateTime<Utc>,
) -> PrunePlan<'a> {
    let held_by = |id: &str| {
        holds
            .get(id)
            .and_then(|h| holds::conflict(h, HoldKind::Delete, now))
    };
    let candidates: Vec<Candidate> = catalog
        .complete
        .iter()
        .map(|b| Candidate {
            id: b.manifest.id.clone(),
            time: b.manifest.finished_at,
        })
        .collect();
    let mut decisions = retention::plan(policy, &candidates);
    for d in decisions.iter_mut().filter(|d| !d.keep) {
        if let Some(h) = held_by(&d.id) {
            d.keep = true;
            d.reasons.push(format!("held by {h}"));
        }
    }
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
                    && held_by(&i.id).is_none()
            })
            .collect(),
        damaged: catalog
            .incomplete
            .iter()
            .filter(|i| matches!(i.state, IncompleteState::Damaged(_)))
            .collect(),
    }
}

/// What a prune removed, and what it left because it was held meanwhile.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Ids removed, in order.
    pub removed: Vec<String>,
    /// Backups (or segments) the plan removed but a hold taken since kept, with the hold.
    pub held: Vec<(String, String)>,
    /// Whether the plan's segments were left for the next prune (something was held).
    pub segments_left: bool,
}

/// Removes what `plan` does not keep. Each backup is marked for deletion first and left alone
/// when a hold appeared since the plan (then no segment is removed either: the plan counted on
/// that backup going).
pub async fn execute(repo: &Repository, catalog: &Catalog, plan: &PrunePlan<'_>) -> Result<Pruned> {
    let mut pruned = Pruned::default();
    let backups = plan
        .decisions
        .iter()
        .filter(|d| !d.keep)
        .map(|d| (&d.id, &catalog.objects[&d.id], "backup removed"))
        .collect::<Vec<_>>();
    for (id, objects, what) in backups {
        if delete_unless_held(repo, id, objects, &mut pruned).await? {
            tracing::info!(backup_id = %id, "{what}");
        }
    }
    if !pruned.held.is_empty() {
        pruned.segments_left = true;
        tracing::warn!(
            held = pruned.held.len(),
            "backups held since the plan are kept; no binlog segment is removed until the next prune"
        );
        for o in &plan.stale {
            if delete_unless_held(repo, &o.id, &o.objects, &mut pruned).await? {
                tracing::info!(backup_id = %o.id, "incomplete backup removed");
            }
        }
        return Ok(pruned);
    }
    // Replaced segments before the compacted ones: they must not become the archive's again,
    // so a segment found held (a rewrap rewriting it) leaves the rest for the next prune.
    let segments = plan
        .replaced
        .iter()
        .chain(&plan.segments)
        .map(|s| (&s.id, "binlog segment removed"))
        .chain(
            plan.stale_segments
                .iter()
                .map(|s| (&s.id, "incomplete binlog segment removed")),
        );
    for (id, what) in segments {
        match crate::archive::segments::delete(repo.store(), id).await {
            Ok(()) => {
                tracing::info!(segment = %id, "{what}");
                pruned.removed.push(id.clone());
            }
            Err(crate::Error::Engine(bulwark_engine::Error::Held { by, .. })) => {
                tracing::warn!(segment = %id, held_by = %by, "binlog segment held; it and the segments after it are left for the next prune");
                pruned.held.push((id.clone(), by));
                pruned.segments_left = true;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    for o in &plan.stale {
        if delete_unless_held(repo, &o.id, &o.objects, &mut pruned).await? {
            tracing::info!(backup_id = %o.id, "incomplete backup removed");
        }
    }
    Ok(pruned)
}

/// Deletes backup `id` under a deletion mark; a hold found instead is recorded in `pruned`.
async fn delete_unless_held(
    repo: &Repository,
    id: &str,
    objects: &[bulwark_engine::store::ObjectInfo],
    pruned: &mut Pruned,
) -> Result<bool> {
    let mark = match holds::take(repo.store(), id, HoldKind::Delete).await {
        Ok(mark) => mark,
        Err(bulwark_engine::Error::Held { by, .. }) => {
            tracing::warn!(backup_id = %id, held_by = %by, "backup held since the plan was made; left alone");
            pruned.held.push((id.to_owned(), by));
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    };
    let deleted = repo.delete_backup(id, objects).await;
    mark.release().await;
    deleted?;
    pruned.removed.push(id.to_owned());
    Ok(true)
}
