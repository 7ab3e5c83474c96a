//! The repository catalogue: which backups are complete (have a readable manifest), damaged
//! (manifest present but unreadable) or orphaned (data without a manifest).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use crate::authenticate;
use crate::crypto::{Binding, MasterKey};
use crate::error::{Error, Result};
use crate::format::{self, Manifest};
use crate::store::{ObjectInfo, Store, StoreError};

/// A backup with a valid manifest.
#[derive(Debug, Clone)]
pub struct CompleteBackup {
    /// The manifest.
    pub manifest: Manifest,
    /// Hex SHA-256 of the manifest object as stored.
    pub manifest_sha256: String,
}

/// Objects under a backup id that are not a complete backup.
#[derive(Debug, Clone)]
pub struct IncompleteBackup {
    /// Backup id (directory name).
    pub id: String,
    /// Objects found.
    pub objects: Vec<ObjectInfo>,
    /// Why it is not complete.
    pub state: IncompleteState,
}

/// Kinds of incomplete backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IncompleteState {
    /// No manifest: an interrupted or running backup.
    Orphan,
    /// A manifest exists but cannot be used.
    Damaged(String),
}

impl IncompleteState {
    /// Short name shown by `list`: `incomplete` or `damaged`.
    pub fn label(&self) -> &'static str {
        match self {
            IncompleteState::Orphan => "incomplete",
            IncompleteState::Damaged(_) => "damaged",
        }
    }

    /// Why a damaged backup is damaged.
    pub fn reason(&self) -> Option<&str> {
        match self {
            IncompleteState::Orphan => None,
            IncompleteState::Damaged(r) => Some(r),
        }
    }
}

impl IncompleteBackup {
    /// Total size of the objects.
    pub fn bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.size).sum()
    }

    /// The most recent modification among the objects.
    pub fn newest(&self) -> Option<DateTime<Utc>> {
        self.objects.iter().map(|o| o.last_modified).max()
    }
}

/// Everything in a repository.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Complete backups in id order, i.e. by start time: the last is what `latest` resolves to.
    pub complete: Vec<CompleteBackup>,
    /// Orphaned and damaged backups in id order.
    pub incomplete: Vec<IncompleteBackup>,
    /// All objects by backup id (for deletion).
    pub objects: BTreeMap<String, Vec<ObjectInfo>>,
}

/// What a repository's stored manifests say while its key check is missing or names no
/// repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestsSay {
    /// The binding they imply ([`authenticate::binding_named_by`]): the id of a key check since
    /// lost, and whether manifests from before repository ids are still accepted.
    pub binding: Option<Binding>,
    /// The key the newest encrypted one is under, with where it is
    /// ([`authenticate::newest_key_id`]).
    pub newest_key: Option<(String, String)>,
}

/// The directory of the manifest stored at `object` (`backups/<id>`, `binlogs/<archive>/<id>`).
fn manifest_dir(object: &str) -> &str {
    object
        .strip_suffix(format::MANIFEST_NAME)
        .map_or(object, |dir| dir.trim_end_matches('/'))
}

/// A repository of backups on some store.
#[derive(Clone)]
pub struct Repository {
    store: Arc<dyn Store>,
    /// The master key manifests are read under: each must be authentic under it.
    key: Option<MasterKey>,
}

impl Repository {
    /// Wraps an opened store; manifests are read unchecked until [`Repository::under_key`].
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, key: None }
    }

    /// Reads every manifest under `key`: a manifest that is not authentic under it, or says
    /// its data is not encrypted, is damaged ([`authenticate::check_manifest`]).
    pub fn under_key(mut self, key: Option<MasterKey>) -> Self {
        self.key = key;
        self
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The key manifests are read under.
    pub fn key(&self) -> Option<&MasterKey> {
        self.key.as_ref()
    }

    /// Makes sure the repository's key check names `key`, writing one if the repository has
    /// none yet; a repository whose newest manifest (a backup's or an archived segment's) is
    /// encrypted with another key is refused first, so one run with a wrong key file cannot
    /// claim it, and a key check written again after it was lost binds as the manifests say
    /// ([`Repository::manifests_say`]). Returns `key` bound to the repository: what a
    /// writer signs manifests with.
    pub async fn ensure_key_check(&self, key: &MasterKey) -> Result<MasterKey> {
        if let Some(check) = authenticate::read_key_check(&self.store, Some(key)).await? {
            return Ok(check.bind(key));
        }
        let said = self.manifests_say(&[key]).await?;
        if let Some((other, at)) = said.newest_key.filter(|(newest, _)| newest != key.id()) {
            return Err(authenticate::KeyCheckError::ManifestsUnderOtherKey {
                expected: other,
                given: key.id().to_owned(),
                at,
            }
            .into());
        }
        let check = authenticate::ensure_key_check(&self.store, key, said.binding).await?;
        Ok(check.bind(key))
    }

    /// What the repository's manifests (backups', and the archived segments'), read once, say
    /// while its key check is missing or names no repository.
    pub async fn manifests_say(&self, keys: &[&MasterKey]) -> Result<ManifestsSay> {
        let manifests = self.stored_manifests().await?;
        let stored = || manifests.iter().map(|(at, raw)| (at.as_str(), &raw[..]));
        Ok(ManifestsSay {
            binding: authenticate::binding_named_by(stored(), keys)?,
            newest_key: authenticate::newest_key_id(stored()),
        })
    }

    /// The key the newest archived segment's manifest says its data is encrypted under, with
    /// where it is; `None` when there is no segment or the newest is not encrypted.
    async fn newest_segment_key(&self) -> Result<Option<(String, String)>> {
        let newest = self
            .segment_manifests()
            .await?
            .into_iter()
            .filter_map(|object| {
                let at = manifest_dir(&object).to_owned();
                let stamp = at.rsplit('/').next()?.get(..16)?.to_owned();
                Some((stamp, object, at))
            })
            .max();
        let Some((_, object, at)) = newest else {
            return Ok(None);
        };
        let raw = match self.store.get(&object).await {
            Ok(raw) => raw,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(source) => {
                return Err(Error::ReadObject {
                    key: object,
                    source,
                })
            }
        };
        Ok(authenticate::newest_key_id([(at.as_str(), &raw[..])]))
    }

    /// The object keys of every archived segment's manifest.
    async fn segment_manifests(&self) -> Result<Vec<String>> {
        let listed = self
            .store
            .list(format::BINLOGS_PREFIX)
            .await
            .map_err(Error::ListRepository)?;
        Ok(listed
            .into_iter()
            .map(|o| o.key)
            .filter(|k| k.ends_with(&format!("/{}", format::MANIFEST_NAME)))
            .collect())
    }

    /// Every stored manifest, backups' and archived segments', as `(where, bytes)`: `where` is
    /// the manifest's directory in the repository (`backups/<id>`, `binlogs/<archive>/<id>`).
    async fn stored_manifests(&self) -> Result<Vec<(String, Bytes)>> {
        let objects: Vec<String> = self
            .manifest_ids()
            .await?
            .iter()
            .map(|id| format::object_key(id, format::MANIFEST_NAME))
            .chain(self.segment_manifests().await?)
            .collect();
        futures::stream::iter(objects)
            .map(|object| async move {
                let got = self.store.get(&object).await;
                (object, got)
            })
            .buffered(8)
            .filter_map(|(object, got)| {
                let at = manifest_dir(&object).to_owned();
                async move {
                    match got {
                        Ok(raw) => Some(Ok((at, raw))),
                        Err(StoreError::NotFound { .. }) => None,
                        Err(source) => Some(Err(Error::ReadObject {
                            key: object,
                            source,
                        })),
                    }
                }
            })
            .try_collect()
            .await
    }

    /// Checks the repository's key check against the key manifests are read under: a wrong key
    /// is named at once; without a key, an encrypted repository is refused, known by its key
    /// check or, when that was deleted, by its newest backup being encrypted (so a keyless run
    /// never writes plaintext beside encrypted backups; only a key protects against someone
    /// with write access, who can also plant unencrypted backups). Returns the repository read
    /// under the key bound to it ([`Repository::key`] is then what manifests are signed and
    /// checked with).
    pub async fn check_key(mut self) -> Result<Self> {
        let check = authenticate::read_key_check(&self.store, self.key.as_ref()).await?;
        match (&check, &self.key) {
            (Some(check), Some(key)) => self.key = Some(check.bind(key)),
            // A lost key check: its manifests say which repository this is, so that one
            // copied in from another repository, or planted to predate repository ids where
            // none does, is still refused.
            (None, Some(key)) => {
                let binding = self.manifests_say(&[key]).await?.binding;
                self.key = Some(key.clone().bound(binding));
            }
            _ => {}
        }
        let checked = match (check, &self.key) {
            (Some(check), None) => Err(Error::KeyRequiredByRepository {
                evidence: format!("its key check names key {}", check.key_id),
                key_id: check.key_id,
            }),
            (None, None) => match Repository::new(self.store.clone()).resolve("latest").await {
                Ok(newest) => match newest.manifest.encryption {
                    Some(e) => Err(Error::KeyRequiredByRepository {
                        evidence: format!(
                            "its newest backup {} is encrypted with key {}, though its key check \
                             {} is missing",
                            newest.manifest.id,
                            e.key_id,
                            authenticate::KEY_CHECK_NAME
                        ),
                        key_id: e.key_id,
                    }),
                    None => Ok(()),
                },
                // No backup: the newest archived segment says it, for an archive can come
                // first (one listing and one manifest read, only in this case).
                Err(Error::NoBackups) => match self.newest_segment_key().await? {
                    Some((key_id, at)) => Err(Error::KeyRequiredByRepository {
                        evidence: format!(
                            "its newest archived segment {at} is encrypted with key {key_id}, \
                             though its key check {} is missing",
                            authenticate::KEY_CHECK_NAME
                        ),
                        key_id,
                    }),
                    None => Ok(()),
                },
                Err(e) => Err(e),
            },
            _ => Ok(()),
        };
        if checked.is_ok() && self.key.is_none() {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| tracing::warn!("the repository is not encrypted: its SHA-256 digests catch damage, not an attacker who can write to it (who can change what a restore or replay applies); use --encryption-key-file for a repository nobody can rewrite without the key"));
        }
        checked.map(|()| self)
    }

    /// Loads and checks one manifest.
    pub async fn load_manifest(&self, id: &str) -> Result<CompleteBackup> {
        if !format::is_backup_id(id) {
            return Err(Error::NoSuchBackup(id.to_string()));
        }
        let raw = match self
            .store
            .get(&format::object_key(id, format::MANIFEST_NAME))
            .await
        {
            Ok(raw) => raw,
            Err(StoreError::NotFound { .. }) => return Err(Error::NoSuchBackup(id.to_string())),
            Err(source) => {
                return Err(Error::ReadManifest {
                    id: id.to_string(),
                    source,
                })
            }
        };
        authenticate::check_manifest(&raw, self.key.as_ref()).map_err(|refusal| {
            Error::DamagedManifest {
                id: id.to_string(),
                reason: refusal.to_string(),
            }
        })?;
        parse_manifest(id, &raw)
    }

    /// Ids of the backups that have a manifest (one listing, no manifest read).
    pub async fn manifest_ids(&self) -> Result<Vec<String>> {
        Ok(ids_with_manifest(&self.objects_by_id().await?))
    }

    /// Lists every backup and loads the manifests.
    pub async fn catalog(&self) -> Result<Catalog> {
        let by_id = self.objects_by_id().await?;
        let with_manifest = ids_with_manifest(&by_id);
        let loaded: Vec<(String, Result<CompleteBackup>)> = futures::stream::iter(with_manifest)
            .map(|id| async move {
                let r = self.load_manifest(&id).await;
                (id, r)
            })
            .buffered(8)
            .collect()
            .await;
        let mut catalog = Catalog::default();
        let mut loaded: BTreeMap<String, Result<CompleteBackup>> = loaded.into_iter().collect();
        for (id, objs) in &by_id {
            match loaded.remove(id) {
                Some(Ok(b)) => catalog.complete.push(b),
                // Deleted between listing and reading (a concurrent prune): no longer there.
                Some(Err(Error::NoSuchBackup(_))) => {}
                // An unreadable manifest says nothing about the backup; only content is judged.
                Some(Err(e @ Error::ReadManifest { .. })) => return Err(e),
                Some(Err(e)) => catalog.incomplete.push(IncompleteBackup {
                    id: id.clone(),
                    objects: objs.clone(),
                    state: IncompleteState::Damaged(crate::error::chain(&e)),
                }),
                None => catalog.incomplete.push(IncompleteBackup {
                    id: id.clone(),
                    objects: objs.clone(),
                    state: IncompleteState::Orphan,
                }),
            }
        }
        catalog.objects = by_id;
        Ok(catalog)
    }

    /// Resolves an id, or `latest` (the most recently started complete backup), to a complete
    /// backup. `latest` reads manifests newest first and stops at the first valid one.
    pub async fn resolve(&self, id: &str) -> Result<CompleteBackup> {
        if id != "latest" {
            return self.load_manifest(id).await;
        }
        let by_id = self.objects_by_id().await?;
        for id in ids_with_manifest(&by_id).iter().rev() {
            match self.load_manifest(id).await {
                Ok(b) => return Ok(b),
                Err(e @ Error::ReadManifest { .. }) => return Err(e),
                // Gone since listing, damaged or too new: not a candidate.
                Err(_) => continue,
            }
        }
        Err(Error::NoBackups)
    }

    /// Lists the repository once and groups the objects by backup id.
    async fn objects_by_id(&self) -> Result<BTreeMap<String, Vec<ObjectInfo>>> {
        let objects = self
            .store
            .list(format::BACKUPS_PREFIX)
            .await
            .map_err(Error::ListRepository)?;
        let mut by_id: BTreeMap<String, Vec<ObjectInfo>> = BTreeMap::new();
        for o in objects {
            let rest = &o.key[format::BACKUPS_PREFIX.len()..];
            if let Some((id, _)) = rest.split_once('/') {
                by_id.entry(id.to_string()).or_default().push(o);
            }
        }
        Ok(by_id)
    }

    /// Holds backup `id` against deletion while a restore reads it ([`crate::holds`]):
    /// refused while the backup is being deleted, or when it was deleted before the hold was
    /// taken. A repository this process may not write to (a read-only mount or credentials)
    /// is read without a hold, with a warning.
    pub async fn hold_for_restore(&self, id: &str) -> Result<crate::holds::ReadHold> {
        use crate::holds::{HoldKind, ReadHold};
        let hold = match crate::holds::take(&self.store, id, HoldKind::Restore).await {
            Ok(hold) => hold,
            Err(Error::WriteHold { key, source }) if source.is_refused_write() => {
                tracing::warn!(backup_id = id, hold = %key, error = %crate::error::chain(&source), "the repository may not be written here (read-only): the backup is read without a hold, and a prune or delete may remove it meanwhile");
                self.load_manifest(id).await?;
                return Ok(ReadHold::none());
            }
            Err(e) => return Err(e),
        };
        // A deletion that ran to its end before the hold was written left no mark to see.
        match self.load_manifest(id).await {
            Ok(_) => Ok(ReadHold::of(hold)),
            Err(e) => {
                hold.release().await;
                Err(e)
            }
        }
    }

    /// Stores a manifest, signed under `key` when the backup is encrypted with it, for the
    /// repository as its key check binds it now ([`authenticate::signing_key`]): the commit
    /// point of a backup.
    pub async fn commit(&self, manifest: &Manifest, key: Option<&MasterKey>) -> Result<String> {
        let key = match key {
            Some(key) => Some(authenticate::signing_key(&self.store, key).await),
            None => None,
        };
        let body = authenticate::manifest_bytes(manifest, key.as_ref());
        let digest = hex::encode(Sha256::digest(&body));
        self.store
            .put(
                &format::object_key(&manifest.id, format::MANIFEST_NAME),
                Bytes::from(body),
            )
            .await
            .map_err(|source| Error::WriteManifest {
                id: manifest.id.clone(),
                source,
            })?;
        Ok(digest)
    }

    /// Deletes whatever a failed backup wrote. Best effort: what remains is an orphan that
    /// `prune` removes after its grace period, so failures are logged, not returned.
    pub async fn discard(&self, id: &str) {
        let deleted = match self.store.list(&format::object_key(id, "")).await {
            Ok(objects) => self.delete_backup(id, &objects).await,
            Err(source) => Err(Error::ListRepository(source)),
        };
        if let Err(e) = deleted {
            tracing::warn!(backup_id = id, error = %crate::error::chain(&e), "failed to delete data of failed backup; prune removes it later");
        }
    }

    /// Deletes the backup `id` (complete or not), manifest first, unless a restore or the
    /// backup itself holds it ([`Error::Held`]). Returns false when nothing is stored under
    /// that id, so a retried deletion succeeds.
    pub async fn delete(&self, id: &str) -> Result<bool> {
        if !format::is_backup_id(id) {
            return Err(Error::InvalidArgument(format!(
                "{id:?} is not a backup id (they look like 20261122T031633Z-4a0760)"
            )));
        }
        let objects = self
            .store
            .list(&format::object_key(id, ""))
            .await
            .map_err(Error::ListRepository)?;
        if objects.is_empty() {
            return Ok(false);
        }
        let mark = crate::holds::take(&self.store, id, crate::holds::HoldKind::Delete).await?;
        let deleted = self.delete_backup(id, &objects).await;
        mark.release().await;
        deleted?;
        Ok(true)
    }

    /// Deletes a backup's objects, manifest first, so an interrupted deletion leaves an orphan
    /// rather than a manifest pointing at missing data.
    pub async fn delete_backup(&self, id: &str, objects: &[ObjectInfo]) -> Result<()> {
        let manifest = format::object_key(id, format::MANIFEST_NAME);
        self.store
            .delete(&manifest)
            .await
            .map_err(|source| Error::Delete {
                key: manifest.clone(),
                source,
            })?;
        futures::stream::iter(objects.iter().filter(|o| o.key != manifest))
            .map(|o| async move {
                self.store
                    .delete(&o.key)
                    .await
                    .map_err(|source| Error::Delete {
                        key: o.key.clone(),
                        source,
                    })
            })
            .buffer_unordered(8)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }
}

/// Ids (in order) that have a manifest object.
fn ids_with_manifest(by_id: &BTreeMap<String, Vec<ObjectInfo>>) -> Vec<String> {
    by_id
        .iter()
        .filter(|(id, objs)| {
            let manifest = format::object_key(id, format::MANIFEST_NAME);
            objs.iter().any(|o| o.key == manifest)
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// Parses and sanity-checks a manifest's bytes.
pub fn parse_manifest(id: &str, raw: &[u8]) -> Result<CompleteBackup> {
    let damaged = |reason: String| Error::DamagedManifest {
        id: id.to_string(),
        reason,
    };
    let manifest: Manifest =
        serde_json::from_slice(raw).map_err(|e| damaged(format!("not valid JSON ({e})")))?;
    if manifest.format != format::FORMAT_NAME {
        return Err(damaged(format!(
            "format is {:?}, not {:?}",
            manifest.format,
            format::FORMAT_NAME
        )));
    }
    if manifest.format_version > format::FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            id: id.to_string(),
            version: manifest.format_version,
            supported: format::FORMAT_VERSION,
        });
    }
    if manifest.id != id {
        return Err(damaged(format!("it names backup {}", manifest.id)));
    }
    let mut next = 0u64;
    for s in &manifest.segments {
        if s.first_chunk != next || s.index_offset + s.index_length != s.size {
            return Err(damaged(format!(
                "segment {} is inconsistent with its neighbours",
                s.name
            )));
        }
        next += s.chunks;
    }
    if next != manifest.plaintext.chunks {
        return Err(damaged(format!(
            "segments hold {next} chunks, plaintext says {}",
            manifest.plaintext.chunks
        )));
    }
    if manifest.segments.iter().map(|s| s.size).sum::<u64>() != manifest.stored_bytes {
        return Err(damaged(
            "segment sizes do not add up to stored_bytes".into(),
        ));
    }
    Ok(CompleteBackup {
        manifest,
        manifest_sha256: hex::encode(Sha256::digest(raw)),
    })
}
