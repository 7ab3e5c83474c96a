//! The archive's objects in the repository: listing and loading segment manifests, committing
//! a segment (chunks through the backup write pipeline, then the manifest), and reading a
//! segment's verified plaintext back.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;

use super::manifest::{self, SegmentManifest};
use crate::crypto::{DataKey, MasterKey};
use crate::error::{Error, Result};
use crate::format::{self, EncryptionInfo};
use crate::progress::Progress;
use crate::reader::{self, Depth, WriteSink};
use crate::store::Store;

/// Segments whose manifest loaded, and those present without a valid one.
#[derive(Debug, Default)]
pub struct ArchiveListing {
    /// Committed segments, by id.
    pub segments: Vec<SegmentManifest>,
    /// Segment ids with objects but no valid manifest, with the reason.
    pub incomplete: Vec<(String, String)>,
}

/// The names of the archives the repository holds.
pub async fn archives(store: &Arc<dyn Store>) -> Result<Vec<String>> {
    let objects = store
        .list(format::BINLOGS_PREFIX)
        .await
        .map_err(Error::ListRepository)?;
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

/// Every archive's segments, by archive name.
pub async fn list_all(store: &Arc<dyn Store>) -> Result<BTreeMap<String, ArchiveListing>> {
    let mut out = BTreeMap::new();
    for name in archives(store).await? {
        let listing = list(store, &name).await?;
        out.insert(name, listing);
    }
    Ok(out)
}

/// Lists and loads every segment manifest of archive `archive`.
pub async fn list(store: &Arc<dyn Store>, archive: &str) -> Result<ArchiveListing> {
    let prefix = format!("{}{archive}/", format::BINLOGS_PREFIX);
    let objects = store.list(&prefix).await.map_err(Error::ListRepository)?;
    let mut by_id: BTreeMap<String, bool> = BTreeMap::new();
    for o in &objects {
        let rest = &o.key[prefix.len()..];
        if let Some((dir, name)) = rest.split_once('/') {
            let id = format!("{}{archive}/{dir}", format::ARCHIVE_ID_PREFIX);
            if manifest::segment_archive(&id) == Some(archive) {
                *by_id.entry(id).or_default() |= name == format::MANIFEST_NAME;
            }
        }
    }
    let loaded: Vec<(String, Option<Result<SegmentManifest>>)> = futures::stream::iter(by_id)
        .map(|(id, has_manifest)| async move {
            let m = if has_manifest {
                Some(load(store, &id).await)
            } else {
                None
            };
            (id, m)
        })
        .buffered(16)
        .collect()
        .await;
    let mut listing = ArchiveListing::default();
    for (id, m) in loaded {
        match m {
            Some(Ok(m)) => listing.segments.push(m),
            Some(Err(e)) => listing.incomplete.push((id, crate::error::chain(&e))),
            None => listing.incomplete.push((id, "no manifest".into())),
        }
    }
    Ok(listing)
}

/// Loads one segment manifest.
pub async fn load(store: &Arc<dyn Store>, id: &str) -> Result<SegmentManifest> {
    let raw = store
        .get(&format::object_key(id, format::MANIFEST_NAME))
        .await
        .map_err(|source| Error::ReadManifest {
            id: id.to_string(),
            source,
        })?;
    manifest::parse(id, &raw).map_err(|reason| Error::DamagedSegment {
        id: id.to_string(),
        reason,
    })
}

/// Stores a segment's plaintext through the write pipeline, then its manifest (the commit
/// point). `fill` completes the manifest from what was written. On failure the objects
/// written are deleted (best effort; a leftover has no manifest and is never read).
pub async fn commit(
    store: &Arc<dyn Store>,
    plaintext: Bytes,
    key: Option<&MasterKey>,
    write: &crate::writer::WriteOptions,
    mut manifest: SegmentManifest,
) -> Result<SegmentManifest> {
    let id = manifest.id.clone();
    let data_key = key.map(|_| Arc::new(DataKey::generate()));
    let written = crate::writer::write_stream(
        store,
        &id,
        std::io::Cursor::new(plaintext),
        "binlog archiver",
        write,
        data_key.clone(),
        Arc::new(Progress::default()),
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
            let body = serde_json::to_vec_pretty(&manifest).expect("segment manifest serializes");
            store
                .put(
                    &format::object_key(&id, format::MANIFEST_NAME),
                    Bytes::from(body),
                )
                .await
                .map_err(|source| Error::WriteManifest {
                    id: id.clone(),
                    source,
                })
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        discard(store, &id).await;
        return Err(e);
    }
    Ok(manifest)
}

/// Deletes a segment's objects, manifest first (best effort).
pub async fn discard(store: &Arc<dyn Store>, id: &str) {
    if let Err(e) = delete(store, id).await {
        tracing::warn!(segment = id, error = %crate::error::chain(&e), "failed to delete what a failed segment commit wrote; it has no manifest and is never read");
    }
}

/// Deletes a segment, manifest first (it stops existing before its data goes).
pub async fn delete(store: &Arc<dyn Store>, id: &str) -> Result<()> {
    let manifest = format::object_key(id, format::MANIFEST_NAME);
    let objects = store
        .list(&format::object_key(id, ""))
        .await
        .map_err(Error::ListRepository)?;
    for key in std::iter::once(manifest.clone()).chain(
        objects
            .into_iter()
            .map(|o| o.key)
            .filter(|k| *k != manifest),
    ) {
        store
            .delete(&key)
            .await
            .map_err(|source| Error::Delete { key, source })?;
    }
    Ok(())
}

/// Reads a segment's plaintext with every check (digests, authentication, totals).
pub async fn read(
    store: &Arc<dyn Store>,
    segment: &SegmentManifest,
    key: Option<&MasterKey>,
) -> Result<Vec<u8>> {
    let data_key = match (&segment.encryption, key) {
        (Some(info), Some(master)) => Some(Arc::new(master.unwrap(&segment.id, info)?)),
        (Some(_), None) => {
            return Err(Error::KeyRequired {
                id: segment.id.clone(),
            })
        }
        _ => None,
    };
    let mut sink = WriteSink {
        out: Vec::with_capacity(segment.plaintext.bytes as usize),
        what: "memory",
    };
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
    Ok(sink.out)
}
