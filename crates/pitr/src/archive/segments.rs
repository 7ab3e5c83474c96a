//! The archive's objects in the repository: listing and loading segment manifests, committing
//! a segment (chunks through the backup write pipeline, then the manifest), and reading a
//! segment's verified plaintext back (in memory, or in a temporary file when it is large).

use bulwark_engine::authenticate::ManifestRefusal;
use bulwark_engine::Error as EngineError;
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::manifest::{self, SegmentManifest};
use crate::error::{Error, Result};
use crate::spool::{SpillRules, Spool, SpoolWriter, SEGMENT_MEMORY};
use bulwark_engine::crypto::{DataKey, MasterKey};
use bulwark_engine::format::{self, EncryptionInfo};
use bulwark_engine::holds::{self, HoldKind};
use bulwark_engine::progress::Progress;
use bulwark_engine::reader::{self, ChunkSink, Depth};
use bulwark_engine::store::Store;

/// An archive's segments as the repository holds them.
#[derive(Debug, Default)]
pub struct ArchiveListing {
    /// Committed segments no compacted segment supersedes: what chains are built from.
    pub segments: Vec<SegmentManifest>,
    /// Committed segments a compacted one holds the transactions of, kept for a grace.
    pub superseded: Vec<Superseded>,
    /// Segment ids with objects but no valid manifest.
    pub incomplete: Vec<IncompleteSegment>,
    /// How far in time the archive is known complete while idle.
    pub coverage: Option<super::coverage::Coverage>,
}

/// A segment whose transactions a compacted segment holds.
#[derive(Debug, Clone)]
pub struct Superseded {
    pub manifest: SegmentManifest,
    /// The compacted segment.
    pub by: String,
    /// When that segment was written.
    pub since: DateTime<Utc>,
}

/// A segment with objects but no manifest that loads.
#[derive(Debug, Clone)]
pub struct IncompleteSegment {
    pub id: String,
    /// Why it is incomplete ("no manifest", or why the manifest did not load).
    pub reason: String,
    /// Whether a manifest exists but did not load (never removed automatically).
    pub damaged: bool,
    /// Whether it was refused under the key for carrying no MAC: it may predate authentication.
    pub unsigned: bool,
    /// The most recent modification among its objects.
    pub newest: Option<DateTime<Utc>>,
}

/// The names of the archives the repository holds.
pub async fn archives(store: &Arc<dyn Store>) -> Result<Vec<String>> {
    let objects = store
        .list(format::BINLOGS_PREFIX)
        .await
        .map_err(EngineError::ListRepository)?;
    let mut names: Vec<String> = objects
        .iter()
        .filter_map(|o| o.key[format::BINLOGS_PREFIX.len()..].split_once('/'))
        .map(|(name, _)| name.to_owned())
        .filter(|n| manifest::is_archive_name(n))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Every archive's segments, by archive name, their manifests read under `key`.
pub async fn list_all(
    store: &Arc<dyn Store>,
    key: Option<&MasterKey>,
) -> Result<BTreeMap<String, ArchiveListing>> {
    let mut out = BTreeMap::new();
    for name in archives(store).await? {
        let listing = list(store, &name, key).await?;
        out.insert(name, listing);
    }
    Ok(out)
}

/// Lists and loads every segment manifest of archive `archive`. Under `key` a manifest that is
/// not authentic, or says its data is not encrypted, makes its segment damaged: never chained,
/// never removed automatically.
pub async fn list(
    store: &Arc<dyn Store>,
    archive: &str,
    key: Option<&MasterKey>,
) -> Result<ArchiveListing> {
    let by_id = objects_by_id(store, archive).await?;
    let loaded: Vec<_> = futures::stream::iter(by_id)
        .map(|(id, (has_manifest, newest))| async move {
            let m = if has_manifest {
                Some(load(store, &id, key).await)
            } else {
                None
            };
            (id, m, newest)
        })
        .buffered(16)
        .collect()
        .await;
    let mut all = Vec::new();
    let mut listing = ArchiveListing::default();
    for (id, m, newest) in loaded {
        let unsigned = matches!(m, Some(Err(Error::UnsignedSegment { .. })));
        let (reason, damaged) = match m {
            Some(Ok(m)) => {
                all.push(m);
                continue;
            }
            // The reason itself (`list` shows it beside the id).
            Some(Err(Error::DamagedSegment { reason, .. })) => (reason, true),
            Some(Err(Error::UnsignedSegment { .. })) => {
                (ManifestRefusal::Unsigned.to_string(), true)
            }
            Some(Err(e)) => (crate::error::chain(&e), true),
            None => ("no manifest".to_string(), false),
        };
        listing.incomplete.push(IncompleteSegment {
            id,
            reason,
            damaged,
            unsigned,
            newest,
        });
    }
    let replaced: BTreeMap<&str, (&str, DateTime<Utc>)> = all
        .iter()
        .flat_map(|m| {
            let since = m.compacted_at.unwrap_or(m.received_at);
            m.replaces
                .iter()
                .map(move |r| (r.as_str(), (m.id.as_str(), since)))
        })
        .collect();
    let (superseded, segments): (Vec<_>, Vec<_>) = all
        .iter()
        .cloned()
        .partition(|m| replaced.contains_key(m.id.as_str()));
    listing.superseded = superseded
        .into_iter()
        .map(|manifest| {
            let (by, since) = replaced[manifest.id.as_str()];
            Superseded {
                by: by.to_string(),
                since,
                manifest,
            }
        })
        .collect();
    listing.segments = segments;
    listing.coverage = super::coverage::read(store, archive, key).await;
    Ok(listing)
}

/// Per segment id of archive `archive` (one listing, no manifest read): whether it has a
/// manifest, and when its newest object was written.
/// When anything of archive `archive` (a segment's object, its coverage) was last written,
/// by one listing and no read: what tells a waiter the archive changed.
pub async fn last_changed(store: &Arc<dyn Store>, archive: &str) -> Result<Option<DateTime<Utc>>> {
    let prefix = format!("{}{archive}/", format::BINLOGS_PREFIX);
    let objects = store
        .list(&prefix)
        .await
        .map_err(EngineError::ListRepository)?;
    Ok(objects.iter().map(|o| o.last_modified).max())
}

async fn objects_by_id(
    store: &Arc<dyn Store>,
    archive: &str,
) -> Result<BTreeMap<String, (bool, Option<DateTime<Utc>>)>> {
    let prefix = format!("{}{archive}/", format::BINLOGS_PREFIX);
    let objects = store
        .list(&prefix)
        .await
        .map_err(EngineError::ListRepository)?;
    let mut by_id: BTreeMap<String, (bool, Option<DateTime<Utc>>)> = BTreeMap::new();
    for o in &objects {
        let rest = &o.key[prefix.len()..];
        if let Some((dir, name)) = rest.split_once('/') {
            let id = format!("{}{archive}/{dir}", format::ARCHIVE_ID_PREFIX);
            if manifest::segment_archive(&id) == Some(archive) {
                let entry = by_id.entry(id).or_default();
                entry.0 |= name == format::MANIFEST_NAME;
                entry.1 = entry.1.max(Some(o.last_modified));
            }
        }
    }
    Ok(by_id)
}

/// The ids of every archive's segments that have a manifest, superseded ones included, from
/// one listing per archive (no manifest read).
pub async fn manifest_ids(store: &Arc<dyn Store>) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for name in archives(store).await? {
        let by_id = objects_by_id(store, &name).await?;
        ids.extend(
            by_id
                .into_iter()
                .filter(|(_, (has_manifest, _))| *has_manifest)
                .map(|(id, _)| id),
        );
    }
    Ok(ids)
}

/// Loads one segment manifest, checked under `key`.
pub async fn load(
    store: &Arc<dyn Store>,
    id: &str,
    key: Option<&MasterKey>,
) -> Result<SegmentManifest> {
    let raw = store
        .get(&format::object_key(id, format::MANIFEST_NAME))
        .await
        .map_err(|source| EngineError::ReadManifest {
            id: id.to_string(),
            source,
        })?;
    if let Err(refusal) = bulwark_engine::authenticate::check_manifest(&raw, key) {
        return Err(match refusal {
            ManifestRefusal::Unsigned => Error::UnsignedSegment { id: id.to_string() },
            other => Error::DamagedSegment {
                id: id.to_string(),
                reason: other.to_string(),
            },
        });
    }
    manifest::parse(id, &raw).map_err(|reason| Error::DamagedSegment {
        id: id.to_string(),
        reason,
    })
}

/// Stores a segment's plaintext through the write pipeline (counted in `progress`), then its
/// manifest (the commit point), completed from what was written. On failure the objects
/// written are deleted (best effort; a leftover has no manifest and is never read).
pub async fn commit(
    store: &Arc<dyn Store>,
    plaintext: Spool,
    key: Option<&MasterKey>,
    write: &bulwark_engine::writer::WriteOptions,
    mut manifest: SegmentManifest,
    progress: Arc<Progress>,
) -> Result<SegmentManifest> {
    let id = manifest.id.clone();
    let data_key = key.map(|_| Arc::new(DataKey::generate()));
    let written = bulwark_engine::writer::write_stream(
        store,
        &id,
        plaintext.reader(),
        "binlog archiver",
        write,
        data_key.clone(),
        progress,
    )
    .await;
    let result = match written {
        Ok(w) => {
            manifest.encryption = match (key, &data_key) {
                (Some(master), Some(dk)) => Some(EncryptionInfo {
                    algorithm: "AES-256-GCM".into(),
                    key_id: master.id().to_string(),
                    wrapped_data_key: master.wrap(&id, dk),
                }),
                _ => None,
            };
            manifest.plaintext = format::PlaintextInfo {
                bytes: w.plaintext_bytes,
                chunks: w.chunks,
                sha256: w.plaintext_sha256,
            };
            manifest.stored_bytes = w.stored_bytes;
            manifest.segments = w.segments;
            put_manifest(store, &manifest, key).await
        }
        Err(e) => Err(e.into()),
    };
    if let Err(e) = result {
        discard(store, &id).await;
        return Err(e);
    }
    Ok(manifest)
}

/// Writes (or replaces, in one put) a segment's manifest, signed under `key`: the segment's
/// commit point.
pub async fn put_manifest(
    store: &Arc<dyn Store>,
    manifest: &SegmentManifest,
    key: Option<&MasterKey>,
) -> Result<()> {
    // Signed for the repository as its key check binds it now: an archiver that started
    // before the repository was bound signs what it commits since for it.
    let key = match key {
        Some(key) => Some(bulwark_engine::authenticate::signing_key(store, key).await),
        None => None,
    };
    let body = bulwark_engine::authenticate::manifest_bytes(manifest, key.as_ref());
    store
        .put(
            &format::object_key(&manifest.id, format::MANIFEST_NAME),
            Bytes::from(body),
        )
        .await
        .map_err(|source| {
            EngineError::WriteManifest {
                id: manifest.id.clone(),
                source,
            }
            .into()
        })
}

/// Deletes a segment's objects, manifest first (best effort).
pub async fn discard(store: &Arc<dyn Store>, id: &str) {
    if let Err(e) = delete(store, id).await {
        tracing::warn!(segment = id, error = %crate::error::chain(&e), "failed to delete what a failed segment commit wrote; it has no manifest and is never read");
    }
}

/// Deletes a segment, manifest first (it stops existing before its data goes), under a
/// deletion mark; a segment a rewrap holds is refused ([`EngineError::Held`]) and left for the
/// next pass (a rewrap takes milliseconds), so its manifest is never written back after its
/// data went.
pub async fn delete(store: &Arc<dyn Store>, id: &str) -> Result<()> {
    let mark = holds::take(store, id, HoldKind::Delete).await?;
    let deleted = delete_objects(store, id).await;
    mark.release().await;
    deleted
}

async fn delete_objects(store: &Arc<dyn Store>, id: &str) -> Result<()> {
    let manifest = format::object_key(id, format::MANIFEST_NAME);
    let objects = store
        .list(&format::object_key(id, ""))
        .await
        .map_err(EngineError::ListRepository)?;
    for key in std::iter::once(manifest.clone()).chain(
        objects
            .into_iter()
            .map(|o| o.key)
            .filter(|k| *k != manifest),
    ) {
        store
            .delete(&key)
            .await
            .map_err(|source| EngineError::Delete { key, source })?;
    }
    Ok(())
}

/// Reads a segment's plaintext with every check (digests, authentication, totals): in memory
/// up to [`SEGMENT_MEMORY`], the rest in a temporary file.
pub async fn read(
    store: &Arc<dyn Store>,
    segment: &SegmentManifest,
    key: Option<&MasterKey>,
) -> Result<Spool> {
    let data_key = match (&segment.encryption, key) {
        (Some(info), Some(master)) => Some(Arc::new(master.unwrap(&segment.id, info)?)),
        (Some(_), None) => {
            return Err(EngineError::KeyRequired {
                id: segment.id.clone(),
            }
            .into())
        }
        _ => None,
    };
    let mut sink = SpoolSink(SpoolWriter::new(SpillRules::memory(SEGMENT_MEMORY)));
    reader::read_backup(
        store,
        segment,
        data_key,
        Depth::Full,
        4,
        Arc::new(Progress::default()),
        &mut sink,
    )
    .await?;
    sink.0.finish().map_err(Error::spool)
}

/// Verified plaintext chunks, gathered into a spool.
struct SpoolSink(SpoolWriter);

#[async_trait::async_trait]
impl ChunkSink for SpoolSink {
    async fn accept(&mut self, chunk: Bytes) -> bulwark_engine::Result<()> {
        self.0.write(&chunk).map_err(|source| EngineError::LocalIo {
            action: "hold in a temporary file",
            path: std::env::temp_dir().display().to_string(),
            source,
        })
    }
}
