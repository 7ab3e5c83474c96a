//! Holds: what a running restore or backup is using, recorded in the repository so that every
//! deletion (`prune`, `delete`, the operator's retention, which runs `delete`) and every rewrite
//! (`rewrap`) leaves it alone. A hold is one small object, `holds/<backup>/<kind>-<nonce>.json`,
//! with an expiry its holder renews while it runs, so a holder killed midway blocks nothing
//! for longer than [`HOLD_TTL`].
//!
//! Holders and deleters each write their own mark before they look for the other's: a restore
//! writes its hold and then looks for a deletion, a deletion writes its mark and then looks for
//! holds. Whichever looks second sees the first and backs off, so a restore and a deletion that
//! start together never both go ahead (S3 and filesystems list what was written before). The
//! decision is pure ([`conflict`]); reading and writing the objects is the thin edge.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;

use crate::error::{Error, Result};
use crate::store::Store;

/// Where holds live in a repository.
pub const HOLDS_PREFIX: &str = "holds/";
/// How long a hold lasts unless renewed.
pub const HOLD_TTL: Duration = Duration::minutes(15);
/// How often a holder renews its hold.
const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(5 * 60);
/// How soon a failed renewal is tried again.
const RENEW_RETRY: std::time::Duration = std::time::Duration::from_secs(15);

/// What a hold is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldKind {
    /// A restore, bootstrap or drill reading the backup (and the archive after it).
    Restore,
    /// The backup being written: not an abandoned one.
    Backup,
    /// `rewrap` rewriting the backup's manifest.
    Rewrap,
    /// A deletion of the backup.
    Delete,
    /// A hold that could not be read: it stops everything until it lapses.
    Unknown,
}

impl HoldKind {
    /// The holder's activity, for messages.
    pub fn activity(self) -> &'static str {
        match self {
            HoldKind::Restore => "a restore",
            HoldKind::Backup => "the backup writing it",
            HoldKind::Rewrap => "a rewrap",
            HoldKind::Delete => "a deletion",
            HoldKind::Unknown => "a hold that cannot be read",
        }
    }
}

/// One hold, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldRecord {
    pub backup: String,
    pub kind: HoldKind,
    /// The host and process holding it.
    pub holder: String,
    pub since: DateTime<Utc>,
    pub expires: DateTime<Utc>,
}

impl std::fmt::Display for HoldRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} (until {})",
            self.kind.activity(),
            self.holder,
            self.expires.format("%Y-%m-%dT%H:%M:%SZ")
        )
    }
}

/// The live hold that stops taking a hold of `kind` at `now`, if any: a deletion is stopped by
/// any other live hold; anything else by a live deletion.
pub fn conflict(held: &[HoldRecord], kind: HoldKind, now: DateTime<Utc>) -> Option<&HoldRecord> {
    held.iter().filter(|h| h.expires > now).find(|h| {
        h.kind == HoldKind::Unknown || (kind == HoldKind::Delete) != (h.kind == HoldKind::Delete)
    })
}

/// A hold taken by this process; renewed until released or dropped (a dropped hold lapses at
/// its expiry).
pub struct Hold {
    store: Arc<dyn Store>,
    key: String,
    renewal: tokio::task::JoinHandle<()>,
    released: bool,
    pub record: HoldRecord,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("key", &self.key)
            .field("record", &self.record)
            .finish()
    }
}

impl Hold {
    /// Leaves the hold to lapse at its expiry: what it protects is used again soon by another
    /// process, which takes its own hold (a staged logical bootstrap, loaded once the server
    /// runs).
    pub fn lapse(mut self) {
        self.renewal.abort();
        self.released = true;
    }

    /// Removes the hold (best effort: one left behind lapses at its expiry).
    pub async fn release(mut self) {
        self.renewal.abort();
        // Its task ended: no renewal starts after this (one already handed to the store may
        // still land, and then lapses at its expiry).
        let _ = (&mut self.renewal).await;
        if let Err(e) = self.store.delete(&self.key).await {
            tracing::warn!(hold = %self.key, error = %crate::error::chain(&e), "failed to remove a hold; it lapses at its expiry");
        }
        self.released = true;
    }
}

impl Drop for Hold {
    /// A hold dropped on an error path is removed in the background when a runtime still
    /// runs; otherwise it lapses at its expiry.
    fn drop(&mut self) {
        self.renewal.abort();
        if self.released {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (store, key) = (self.store.clone(), self.key.clone());
            runtime.spawn(async move {
                let _ = store.delete(&key).await;
            });
        }
    }
}

/// A restore's hold, or none where the repository cannot be written.
#[derive(Debug)]
pub struct ReadHold(Option<Hold>);

impl ReadHold {
    pub fn of(hold: Hold) -> ReadHold {
        ReadHold(Some(hold))
    }

    pub fn none() -> ReadHold {
        ReadHold(None)
    }

    /// Removes the hold, if any.
    pub async fn release(self) {
        if let Some(h) = self.0 {
            h.release().await;
        }
    }

    /// Leaves the hold, if any, to lapse ([`Hold::lapse`]).
    pub fn lapse(self) {
        if let Some(h) = self.0 {
            h.lapse();
        }
    }
}

/// Takes a hold of `kind` on backup `backup`: written first, then checked against the holds
/// already there ([`conflict`]); on a conflict it is removed again and the conflict returned.
pub async fn take(store: &Arc<dyn Store>, backup: &str, kind: HoldKind) -> Result<Hold> {
    let now = Utc::now();
    let record = HoldRecord {
        backup: backup.to_owned(),
        kind,
        holder: holder(),
        since: now,
        expires: now + HOLD_TTL,
    };
    let nonce: u64 = rand::random();
    let kind_name = serde_json::to_value(kind).expect("a kind serializes");
    let key = format!(
        "{HOLDS_PREFIX}{backup}/{}-{nonce:016x}.json",
        kind_name.as_str().unwrap_or("hold")
    );
    put(store, &key, &record).await?;
    let others = match of_backup(store, backup).await {
        Ok(all) => all
            .into_iter()
            .filter(|(k, _)| *k != key)
            .map(|(_, h)| h)
            .collect::<Vec<_>>(),
        Err(e) => {
            remove_own(store, &key).await;
            return Err(e);
        }
    };
    if let Some(c) = conflict(&others, kind, Utc::now()) {
        let what = if backup.starts_with(crate::format::ARCHIVE_ID_PREFIX) {
            format!("binlog segment {backup}")
        } else {
            format!("backup {backup}")
        };
        let by = c.to_string();
        let refusal = match kind {
            HoldKind::Delete => Error::Held { what, by },
            _ => Error::BeingDeleted { what, by },
        };
        remove_own(store, &key).await;
        return Err(refusal);
    }
    let renewal = tokio::spawn(renew(store.clone(), key.clone(), record.clone()));
    Ok(Hold {
        store: store.clone(),
        key,
        renewal,
        released: false,
        record,
    })
}

/// Every live hold in the repository at `now`, by backup id; expired ones are left for
/// [`remove_expired`].
pub async fn live(
    store: &Arc<dyn Store>,
    now: DateTime<Utc>,
) -> Result<std::collections::BTreeMap<String, Vec<HoldRecord>>> {
    let mut out: std::collections::BTreeMap<String, Vec<HoldRecord>> = Default::default();
    for (_, h) in read_all(store, HOLDS_PREFIX).await? {
        if h.expires > now {
            out.entry(h.backup.clone()).or_default().push(h);
        }
    }
    Ok(out)
}

/// Removes the holds that expired before `now` (their holders died); returns how many.
pub async fn remove_expired(store: &Arc<dyn Store>, now: DateTime<Utc>) -> Result<usize> {
    let mut removed = 0;
    for (key, h) in read_all(store, HOLDS_PREFIX).await? {
        if h.expires <= now {
            store.delete(&key).await.map_err(|source| Error::Delete {
                key: key.clone(),
                source,
            })?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes a hold this process wrote and does not keep (logged when it fails: it then lapses).
async fn remove_own(store: &Arc<dyn Store>, key: &str) {
    if let Err(e) = store.delete(key).await {
        tracing::warn!(hold = %key, error = %crate::error::chain(&e), "failed to remove a hold not kept; it lapses at its expiry");
    }
}

/// The holds on `backup`, with their keys.
async fn of_backup(store: &Arc<dyn Store>, backup: &str) -> Result<Vec<(String, HoldRecord)>> {
    read_all(store, &format!("{HOLDS_PREFIX}{backup}/")).await
}

/// Reads every hold under `prefix`. One that is gone since listing is skipped; one that does
/// not parse counts as a hold of every kind until it is a TTL old, so damage never lets a
/// deletion through.
async fn read_all(store: &Arc<dyn Store>, prefix: &str) -> Result<Vec<(String, HoldRecord)>> {
    let objects = store.list(prefix).await.map_err(Error::ListRepository)?;
    // A filesystem store's temporary files (`.name.tmp-…`, a write in progress) are no holds.
    let objects = objects.into_iter().filter(|o| {
        !o.key
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .starts_with('.')
    });
    let read: Vec<Result<Option<(String, HoldRecord)>>> = futures::stream::iter(objects)
        .map(|o| async move {
            let body = match store.get(&o.key).await {
                Ok(body) => body,
                Err(crate::store::StoreError::NotFound { .. }) => return Ok(None),
                // A hold that cannot be read is not known to be gone.
                Err(source) => {
                    return Err(Error::ReadHold {
                        key: o.key.clone(),
                        source,
                    })
                }
            };
            let record = serde_json::from_slice(&body).unwrap_or_else(|_| {
                let backup = o.key[HOLDS_PREFIX.len()..]
                    .rsplit_once('/')
                    .map(|(id, _)| id)
                    .unwrap_or_default()
                    .to_owned();
                HoldRecord {
                    backup,
                    kind: HoldKind::Unknown,
                    holder: o.key.clone(),
                    since: o.last_modified,
                    expires: o.last_modified + HOLD_TTL,
                }
            });
            Ok(Some((o.key, record)))
        })
        .buffered(8)
        .collect()
        .await;
    let mut out = Vec::new();
    for r in read {
        out.extend(r?);
    }
    Ok(out)
}

async fn put(store: &Arc<dyn Store>, key: &str, record: &HoldRecord) -> Result<()> {
    let body = serde_json::to_vec_pretty(record).expect("a hold serializes");
    store
        .put(key, Bytes::from(body))
        .await
        .map_err(|source| Error::WriteHold {
            key: key.to_owned(),
            source,
        })
}

/// Renews the hold every [`RENEW_EVERY`] until aborted; a failed renewal is retried every
/// [`RENEW_RETRY`], and a hold that lapsed for want of renewal is logged as an error.
async fn renew(store: Arc<dyn Store>, key: String, mut record: HoldRecord) {
    let mut wait = RENEW_EVERY;
    loop {
        tokio::time::sleep(wait).await;
        let lapsed = record.expires <= Utc::now();
        let renewed = HoldRecord {
            expires: Utc::now() + HOLD_TTL,
            ..record.clone()
        };
        match put(&store, &key, &renewed).await {
            Ok(()) => {
                if lapsed {
                    tracing::error!(hold = %key, "a hold lapsed before it could be renewed: a deletion may have run meanwhile");
                }
                record = renewed;
                wait = RENEW_EVERY;
            }
            Err(e) => {
                tracing::warn!(hold = %key, error = %crate::error::chain(&e), "failed to renew a hold; retrying");
                wait = RENEW_RETRY;
            }
        }
    }
}

/// This process: the host (the pod's name in a pod) and the process id.
fn holder() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown host".to_owned());
    format!("{host} (pid {})", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(kind: HoldKind, expires_in_minutes: i64) -> HoldRecord {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        HoldRecord {
            backup: "b".into(),
            kind,
            holder: "h".into(),
            since: now,
            expires: now + Duration::minutes(expires_in_minutes),
        }
    }

    #[test]
    fn deletions_and_everything_else_exclude_each_other_while_live() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        use HoldKind::*;
        // (name, holds there, kind wanted, blocked by the hold at this index)
        let cases: Vec<(&str, Vec<HoldRecord>, HoldKind, Option<usize>)> = vec![
            ("nothing held", vec![], Delete, None),
            (
                "a restore stops a deletion",
                vec![hold(Restore, 5)],
                Delete,
                Some(0),
            ),
            (
                "a running backup stops a deletion",
                vec![hold(Backup, 5)],
                Delete,
                Some(0),
            ),
            (
                "a rewrap stops a deletion",
                vec![hold(Rewrap, 5)],
                Delete,
                Some(0),
            ),
            (
                "an expired restore does not",
                vec![hold(Restore, -1)],
                Delete,
                None,
            ),
            ("two deletions do not", vec![hold(Delete, 5)], Delete, None),
            (
                "a deletion stops a restore",
                vec![hold(Delete, 5)],
                Restore,
                Some(0),
            ),
            (
                "a deletion stops a rewrap",
                vec![hold(Delete, 5)],
                Rewrap,
                Some(0),
            ),
            ("restores share", vec![hold(Restore, 5)], Restore, None),
            (
                "the live one counts",
                vec![hold(Delete, -5), hold(Delete, 5)],
                Restore,
                Some(1),
            ),
        ];
        for (name, held, kind, want) in cases {
            let got = conflict(&held, kind, now);
            assert_eq!(got, want.map(|i| &held[i]), "{name}");
        }
    }

    #[tokio::test]
    async fn a_deletion_and_a_restore_never_both_go_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(crate::store::FsStore::open(dir.path()).await.unwrap());
        let restore = take(&store, "b1", HoldKind::Restore).await.unwrap();
        let refused = take(&store, "b1", HoldKind::Delete).await.unwrap_err();
        assert!(
            refused.to_string().contains("held by a restore on"),
            "{refused}"
        );
        // The refused deletion left no mark: a second restore is not stopped by it.
        let second = take(&store, "b1", HoldKind::Restore).await.unwrap();
        assert_eq!(live(&store, Utc::now()).await.unwrap()["b1"].len(), 2);
        restore.release().await;
        second.release().await;
        let deletion = take(&store, "b1", HoldKind::Delete).await.unwrap();
        let refused = take(&store, "b1", HoldKind::Restore).await.unwrap_err();
        assert!(refused.to_string().contains("being deleted"), "{refused}");
        deletion.release().await;
        assert!(live(&store, Utc::now()).await.unwrap().is_empty());
        // A holder killed (nothing of it runs any more): its hold lapses, and housekeeping
        // removes it.
        let dead = take(&store, "b2", HoldKind::Restore).await.unwrap();
        dead.renewal.abort();
        std::mem::forget(dead);
        assert!(take(&store, "b2", HoldKind::Delete).await.is_err());
        let later = Utc::now() + HOLD_TTL + Duration::seconds(1);
        assert!(live(&store, later).await.unwrap().is_empty());
        assert_eq!(remove_expired(&store, later).await.unwrap(), 1);
    }
}
