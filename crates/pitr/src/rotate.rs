//! Master key rotation: re-wraps the data keys of backups and archived binlog segments
//! encrypted with the old key and signs their manifests under the new one. Only manifests
//! change, each replaced atomically; those already on the new key and signed are skipped, so an
//! interrupted rotation is finished by running it again (as is one that ran while an archiver
//! still wrote with the old key). The same key old and new signs the manifests written before
//! manifests were authenticated.

use std::sync::Arc;

use crate::archive;
use crate::Result;
use bulwark_engine::authenticate;
use bulwark_engine::crypto::{self, MasterKey};
use bulwark_engine::format;
use bulwark_engine::repo::Repository;
use bulwark_engine::store::{Store, StoreError};
use bulwark_engine::Error as EngineError;

/// What happened to one backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewrapOutcome {
    Rewrapped,
    /// Already on the new key, written before manifests were authenticated: now signed.
    Signed,
    NotEncrypted,
    AlreadyOnNewKey,
    /// Encrypted with a third key, named.
    OtherKey(String),
    /// Its manifest is not authentic under the key it names: never signed, left as it is.
    NotAuthentic(String),
    /// Deleted since the repository was listed: not written back.
    Gone,
}

impl std::fmt::Display for RewrapOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RewrapOutcome::Rewrapped => f.write_str("re-wrapped"),
            RewrapOutcome::Signed => f.write_str("signed"),
            RewrapOutcome::NotEncrypted => f.write_str("skipped: not encrypted"),
            RewrapOutcome::AlreadyOnNewKey => f.write_str("skipped: already on the new key"),
            RewrapOutcome::OtherKey(id) => write!(f, "skipped: encrypted with another key ({id})"),
            RewrapOutcome::NotAuthentic(why) => write!(f, "skipped: not authentic ({why})"),
            RewrapOutcome::Gone => f.write_str("skipped: deleted meanwhile"),
        }
    }
}

/// What to do with one manifest, read as stored (`raw`): its encryption, and whether it
/// carries a MAC, which must then be authentic under the key its encryption names.
fn decide(
    raw: &[u8],
    encryption: Option<&bulwark_engine::format::EncryptionInfo>,
    old: &MasterKey,
    new: &MasterKey,
) -> Decision {
    let Some(e) = encryption else {
        return Decision::Skip(RewrapOutcome::NotEncrypted);
    };
    let under = if e.key_id == new.id() {
        new
    } else if e.key_id == old.id() {
        old
    } else {
        return Decision::Skip(RewrapOutcome::OtherKey(e.key_id.clone()));
    };
    let signed = serde_json::from_slice::<serde_json::Value>(raw)
        .is_ok_and(|v| v.get(authenticate::MAC_FIELD).is_some());
    if signed {
        if let Err(why) = authenticate::check_manifest(raw, Some(under)) {
            return Decision::Skip(RewrapOutcome::NotAuthentic(why));
        }
    }
    match (e.key_id == new.id(), signed) {
        (true, true) => Decision::Skip(RewrapOutcome::AlreadyOnNewKey),
        (true, false) => Decision::Write(RewrapOutcome::Signed),
        (false, _) => Decision::Write(RewrapOutcome::Rewrapped),
    }
}

enum Decision {
    Skip(RewrapOutcome),
    Write(RewrapOutcome),
}

/// The manifest object of `id` as stored now; `None` once deleted.
async fn read_now(store: &Arc<dyn Store>, id: &str) -> Result<Option<bytes::Bytes>> {
    match store
        .get(&format::object_key(id, format::MANIFEST_NAME))
        .await
    {
        Ok(raw) => Ok(Some(raw)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(source) => Err(EngineError::ReadManifest {
            id: id.to_string(),
            source,
        }
        .into()),
    }
}

/// Re-wraps every backup of `repo`, then every archived binlog segment, from `old` to `new`,
/// and signs each manifest under `new` (with `old` and `new` the same key it only signs the
/// manifests written before manifests were authenticated). Each manifest is read again just
/// before it is written, so one deleted meanwhile is not brought back; one that carries a MAC
/// not authentic under its key is never signed. The repository's key check names `new` at the
/// end. Returns each id and outcome, backups in id order, then segments by id.
pub async fn rewrap_all(
    repo: &Repository,
    old: &MasterKey,
    new: &MasterKey,
) -> Result<Vec<(String, RewrapOutcome)>> {
    let store = repo.store();
    // The repository's key check must be authentic under the key it names, old or new.
    if let Some(check) = authenticate::read_key_check(store, None)
        .await
        .map_err(EngineError::from)?
    {
        let under = if check.key_id == new.id() { new } else { old };
        authenticate::read_key_check(store, Some(under))
            .await
            .map_err(EngineError::from)?;
    }
    let mut results = Vec::new();
    for id in repo.manifest_ids().await? {
        let outcome = match read_now(store, &id).await? {
            None => RewrapOutcome::Gone,
            Some(raw) => {
                let m = bulwark_engine::repo::parse_manifest(&id, &raw)?.manifest;
                match decide(&raw, m.encryption.as_ref(), old, new) {
                    Decision::Skip(outcome) => outcome,
                    Decision::Write(outcome) => {
                        let e = m.encryption.as_ref().expect("decided on an encrypted one");
                        let mut updated = m.clone();
                        if outcome == RewrapOutcome::Rewrapped {
                            updated.encryption = Some(crypto::rewrap(&m.id, e, old, new)?);
                        }
                        repo.commit(&updated, Some(new)).await?;
                        tracing::info!(backup_id = %m.id, old_key = %old.id(), new_key = %new.id(), %outcome, "manifest re-written under the new key");
                        outcome
                    }
                }
            }
        };
        results.push((id, outcome));
    }
    for (_, listing) in archive::segments::list_all(store, None).await? {
        let segments = listing
            .segments
            .into_iter()
            .chain(listing.superseded.into_iter().map(|s| s.manifest));
        for listed in segments {
            let id = listed.id.clone();
            let outcome = match read_now(store, &id).await? {
                None => RewrapOutcome::Gone,
                Some(raw) => {
                    let m = archive::manifest::parse(&id, &raw).map_err(|reason| {
                        crate::Error::DamagedSegment {
                            id: id.clone(),
                            reason,
                        }
                    })?;
                    match decide(&raw, m.encryption.as_ref(), old, new) {
                        Decision::Skip(outcome) => outcome,
                        Decision::Write(outcome) => {
                            let e = m.encryption.as_ref().expect("decided on an encrypted one");
                            let mut updated = m.clone();
                            if outcome == RewrapOutcome::Rewrapped {
                                updated.encryption = Some(crypto::rewrap(&m.id, e, old, new)?);
                            }
                            archive::segments::put_manifest(store, &updated, Some(new)).await?;
                            tracing::info!(segment = %m.id, old_key = %old.id(), new_key = %new.id(), %outcome, "manifest re-written under the new key");
                            outcome
                        }
                    }
                }
            };
            results.push((id, outcome));
        }
    }
    let unfinished = results.iter().any(|(_, o)| {
        matches!(
            o,
            RewrapOutcome::OtherKey(_) | RewrapOutcome::NotAuthentic(_)
        )
    });
    if !unfinished {
        authenticate::write_key_check(store, new)
            .await
            .map_err(EngineError::from)?;
    }
    Ok(results)
}
