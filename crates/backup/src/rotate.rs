//! Master key rotation: re-wraps the data keys of backups encrypted with the old key. Only
//! manifests change, each replaced atomically; backups already on the new key are skipped, so
//! an interrupted rotation is finished by running it again.

use crate::crypto::{self, MasterKey};
use crate::repo::Repository;
use crate::{Error, Result};

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

/// Re-wraps every complete backup of `repo` from `old` to `new`; returns each backup's id and
/// outcome, in catalog order.
pub async fn rewrap_all(
    repo: &Repository,
    old: &MasterKey,
    new: &MasterKey,
) -> Result<Vec<(String, RewrapOutcome)>> {
    if old.id() == new.id() {
        return Err(Error::InvalidArgument(
            "the old and new keys are the same key".into(),
        ));
    }
    let catalog = repo.catalog().await?;
    let mut results = Vec::new();
    for b in &catalog.complete {
        let m = &b.manifest;
        let outcome = match &m.encryption {
            None => RewrapOutcome::NotEncrypted,
            Some(e) if e.key_id == new.id() => RewrapOutcome::AlreadyOnNewKey,
            Some(e) if e.key_id != old.id() => RewrapOutcome::OtherKey(e.key_id.clone()),
            Some(e) => {
                let mut updated = m.clone();
                updated.encryption = Some(crypto::rewrap(&m.id, e, old, new)?);
                repo.commit(&updated).await?;
                tracing::info!(backup_id = %m.id, old_key = %old.id(), new_key = %new.id(), "data key re-wrapped");
                RewrapOutcome::Rewrapped
            }
        };
        results.push((m.id.clone(), outcome));
    }
    Ok(results)
}
