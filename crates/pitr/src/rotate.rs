//! Master key rotation: re-wraps the data keys of backups and archived binlog segments
//! encrypted with the old key. Only manifests change, each replaced atomically; those already on
//! the new key are skipped, so an interrupted rotation is finished by running it again (as is
//! one that ran while an archiver still wrote with the old key).

use crate::archive;
use crate::Result;
use bulwark_engine::crypto::{self, MasterKey};
use bulwark_engine::repo::Repository;
use bulwark_engine::Error as EngineError;

/// What happened to one backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewrapOutcome {
    Rewrapped,
    NotEncrypted,
    AlreadyOnNewKey,
    /// Encrypted with a third key, named.
    OtherKey(String),
}

impl std::fmt::Display for RewrapOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RewrapOutcome::Rewrapped => f.write_str("re-wrapped"),
            RewrapOutcome::NotEncrypted => f.write_str("skipped: not encrypted"),
            RewrapOutcome::AlreadyOnNewKey => f.write_str("skipped: already on the new key"),
            RewrapOutcome::OtherKey(id) => write!(f, "skipped: encrypted with another key ({id})"),
        }
    }
}

/// What to do with one manifest's encryption.
fn decide(
    encryption: Option<&bulwark_engine::format::EncryptionInfo>,
    old: &MasterKey,
    new: &MasterKey,
) -> Option<RewrapOutcome> {
    match encryption {
        None => Some(RewrapOutcome::NotEncrypted),
        Some(e) if e.key_id == new.id() => Some(RewrapOutcome::AlreadyOnNewKey),
        Some(e) if e.key_id != old.id() => Some(RewrapOutcome::OtherKey(e.key_id.clone())),
        Some(_) => None,
    }
}

/// Re-wraps every complete backup of `repo`, then every archived binlog segment, from `old` to
/// `new`; returns each id and outcome, backups in catalog order, then segments by id.
pub async fn rewrap_all(
    repo: &Repository,
    old: &MasterKey,
    new: &MasterKey,
) -> Result<Vec<(String, RewrapOutcome)>> {
    if old.id() == new.id() {
        return Err(
            EngineError::InvalidArgument("the old and new keys are the same key".into()).into(),
        );
    }
    let catalog = repo.catalog().await?;
    let mut results = Vec::new();
    for b in &catalog.complete {
        let m = &b.manifest;
        let outcome = match (decide(m.encryption.as_ref(), old, new), &m.encryption) {
            (Some(skip), _) => skip,
            (None, None) => RewrapOutcome::NotEncrypted,
            (None, Some(e)) => {
                let mut updated = m.clone();
                updated.encryption = Some(crypto::rewrap(&m.id, e, old, new)?);
                repo.commit(&updated).await?;
                tracing::info!(backup_id = %m.id, old_key = %old.id(), new_key = %new.id(), "data key re-wrapped");
                RewrapOutcome::Rewrapped
            }
        };
        results.push((m.id.clone(), outcome));
    }
    let store = repo.store();
    for (_, listing) in archive::segments::list_all(store).await? {
        let segments = listing
            .segments
            .into_iter()
            .chain(listing.superseded.into_iter().map(|s| s.manifest));
        for m in segments {
            let outcome = match (decide(m.encryption.as_ref(), old, new), &m.encryption) {
                (Some(skip), _) => skip,
                (None, Some(e)) => {
                    let mut updated = m.clone();
                    updated.encryption = Some(crypto::rewrap(&m.id, e, old, new)?);
                    archive::segments::put_manifest(store, &updated).await?;
                    tracing::info!(segment = %m.id, old_key = %old.id(), new_key = %new.id(), "data key re-wrapped");
                    RewrapOutcome::Rewrapped
                }
                (None, None) => RewrapOutcome::NotEncrypted,
            };
            results.push((m.id.clone(), outcome));
        }
    }
    Ok(results)
}
