//! Master key rotation: re-wraps the data keys of backups and archived binlog segments
//! encrypted with the old key and signs their manifests under the new one. Only manifests
//! change, each replaced atomically; those already on the new key and signed are skipped, so an
//! interrupted rotation is finished by running it again (as is one that ran while an archiver
//! still wrote with the old key). The same key old and new signs the manifests written before
//! manifests were authenticated, and binds to the repository those signed before manifests
//! were bound.

use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::archive;
use crate::Result;
use bulwark_engine::authenticate;
use bulwark_engine::crypto::{self, Binding, MasterKey};
use bulwark_engine::format::{self, EncryptionInfo};
use bulwark_engine::holds::{self, HoldKind};
use bulwark_engine::repo::Repository;
use bulwark_engine::store::{Store, StoreError};
use bulwark_engine::Error as EngineError;

/// What happened to one manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewrapOutcome {
    Rewrapped,
    /// Already on the new key, written before manifests were authenticated: now signed.
    Signed,
    /// Already on the new key, signed before manifests were bound to their repository: now
    /// signed bound to it.
    Bound,
    NotEncrypted,
    AlreadyOnNewKey,
    /// Encrypted with a third key, named.
    OtherKey(String),
    /// Not authentic under the key it names (a MAC that does not match, none where one is
    /// due, or a data key that does not unwrap): never signed, left as it is.
    NotAuthentic(String),
    /// Could not be read, parsed or written: left as it is.
    Failed(String),
    /// Deleted since the repository was listed, or being deleted: not written back.
    Gone,
}

impl RewrapOutcome {
    /// Whether this manifest keeps the rotation from being complete.
    pub fn unfinished(&self) -> bool {
        matches!(
            self,
            RewrapOutcome::OtherKey(_) | RewrapOutcome::NotAuthentic(_) | RewrapOutcome::Failed(_)
        )
    }
}

impl std::fmt::Display for RewrapOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RewrapOutcome::Rewrapped => f.write_str("re-wrapped"),
            RewrapOutcome::Signed => f.write_str("signed"),
            RewrapOutcome::Bound => f.write_str("bound to the repository"),
            RewrapOutcome::NotEncrypted => f.write_str("skipped: not encrypted"),
            RewrapOutcome::AlreadyOnNewKey => f.write_str("skipped: already on the new key"),
            RewrapOutcome::OtherKey(id) => write!(f, "left: encrypted with another key ({id})"),
            RewrapOutcome::NotAuthentic(why) => write!(f, "left: not authentic ({why})"),
            RewrapOutcome::Failed(why) => write!(f, "left: {why}"),
            RewrapOutcome::Gone => f.write_str("skipped: deleted or being deleted meanwhile"),
        }
    }
}

/// When the id of a backup (`YYYYMMDDTHHMMSSZ-xxxxxx`) or segment (`binlog-<archive>/…`)
/// says it was started.
fn stamp_of(id: &str) -> Option<DateTime<Utc>> {
    let tail = id.rsplit('/').next()?;
    NaiveDateTime::parse_from_str(tail.get(..16)?, "%Y%m%dT%H%M%SZ")
        .ok()
        .map(|t| t.and_utc())
}

/// Whether a manifest names the repository `key` is bound to.
fn names_repository(manifest: &serde_json::Value, key: &MasterKey) -> bool {
    let named = manifest
        .get(authenticate::REPOSITORY_FIELD)
        .and_then(serde_json::Value::as_str);
    named.is_some() && named == key.binding().map(|b| b.repository.as_str())
}

/// Re-wraps and signs one manifest, read as it is stored now, editing only its encryption
/// (fields this build does not know stay, and are signed).
async fn rewrap_one(
    store: &Arc<dyn Store>,
    id: &str,
    old: &MasterKey,
    new: &MasterKey,
    authenticated_since: Option<DateTime<Utc>>,
) -> RewrapOutcome {
    let object = format::object_key(id, format::MANIFEST_NAME);
    let raw = match store.get(&object).await {
        Ok(raw) => raw,
        Err(StoreError::NotFound { .. }) => return RewrapOutcome::Gone,
        Err(e) => return RewrapOutcome::Failed(format!("cannot read its manifest: {e}")),
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&raw) else {
        return RewrapOutcome::Failed("its manifest is not valid JSON".into());
    };
    if value.get("id").and_then(serde_json::Value::as_str) != Some(id) {
        return RewrapOutcome::Failed("its manifest names another id".into());
    }
    let e: Option<EncryptionInfo> = match value.get("encryption").cloned() {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match serde_json::from_value(v) {
            Ok(e) => Some(e),
            Err(_) => return RewrapOutcome::Failed("its encryption is unreadable".into()),
        },
    };
    let Some(e) = e else {
        return RewrapOutcome::NotEncrypted;
    };
    let under = if e.key_id == new.id() {
        new
    } else if e.key_id == old.id() {
        old
    } else {
        return RewrapOutcome::OtherKey(e.key_id);
    };
    let signed = value.get(authenticate::MAC_FIELD).is_some();
    if signed {
        if let Err(why) = authenticate::check_manifest(&raw, Some(under)) {
            return RewrapOutcome::NotAuthentic(why.to_string());
        }
    } else {
        // Only what predates authentication may lack a MAC: since the key check exists, every
        // manifest written carries one, and one without was edited to drop it. Those are
        // signed only by an explicit signing run (the same key old and new), never in passing
        // by a rotation.
        let legacy = match (authenticated_since, stamp_of(id)) {
            (None, _) => true,
            (Some(since), Some(started)) => started < since,
            (Some(_), None) => false,
        };
        if !legacy {
            return RewrapOutcome::NotAuthentic(
                "it carries no MAC but was written after manifests were authenticated".into(),
            );
        }
        if old.id() != new.id() {
            return RewrapOutcome::NotAuthentic(
                "it carries no MAC: sign what predates authentication first, re-wrapping with \
                 the same key old and new"
                    .into(),
            );
        }
        // Where manifests name their repository already, one without a MAC was planted.
        if new.binding().is_some_and(|b| !b.accepts_unbound) {
            return RewrapOutcome::NotAuthentic(
                "it carries no MAC, and this repository's manifests name it already".into(),
            );
        }
    }
    // A data key that does not unwrap under its key is not this repository's.
    if under.unwrap(id, &e).is_err() {
        return RewrapOutcome::NotAuthentic("its data key does not unwrap under its key".into());
    }
    let outcome = match (e.key_id == new.id(), signed) {
        (true, true) if names_repository(&value, new) => return RewrapOutcome::AlreadyOnNewKey,
        (true, true) => RewrapOutcome::Bound,
        (true, false) => RewrapOutcome::Signed,
        (false, _) => RewrapOutcome::Rewrapped,
    };
    if outcome == RewrapOutcome::Rewrapped {
        let rewrapped = match crypto::rewrap(id, &e, old, new) {
            Ok(r) => r,
            Err(err) => return RewrapOutcome::Failed(err.to_string()),
        };
        value["encryption"] = serde_json::to_value(rewrapped).expect("encryption serializes");
    }
    let body = authenticate::manifest_bytes(&value, Some(new));
    if let Err(err) = store.put(&object, bytes::Bytes::from(body)).await {
        return RewrapOutcome::Failed(format!("cannot write its manifest: {err}"));
    }
    tracing::info!(id, old_key = %old.id(), new_key = %new.id(), %outcome, "manifest re-written under the new key");
    outcome
}

/// Re-wraps every backup of `repo`, then every archived binlog segment, from `old` to `new`,
/// and signs each manifest under `new`, bound to the repository; with `old` and `new` the same
/// key it signs the manifests written before the repository's manifests were authenticated
/// (those stamped before its key check, or all of them when it has none), trusting what they
/// say, and binds those signed before manifests were bound. Each manifest is read again just
/// before it is replaced; one that is not authentic under the key it names is left as it is.
/// The key check names `new` once anything is on it, and stops accepting unbound manifests
/// once every manifest that could be read was bound.
/// Returns each id and outcome, backups in id order, then segments by id.
pub async fn rewrap_all(
    repo: &Repository,
    old: &MasterKey,
    new: &MasterKey,
) -> Result<Vec<(String, RewrapOutcome)>> {
    let store = repo.store();
    // The repository's key check must be authentic under the key it names, old or new.
    let check = authenticate::read_key_check(store, None)
        .await
        .map_err(EngineError::from)?;
    if let Some(check) = &check {
        let under = if check.key_id == new.id() { new } else { old };
        authenticate::read_key_check(store, Some(under))
            .await
            .map_err(EngineError::from)?;
    }
    let since = check.as_ref().and_then(|c| c.since);
    let mut ids = manifest_ids(repo).await?;
    // Manifests that name no repository are read (and then named) only where the key check
    // still accepts them: never in a repository all of whose manifests were named already.
    // No key check, or one from before repository ids (or put back from before them): the id
    // is the one the authentic manifests name, so that none is stranded, and manifests naming
    // none are signed only where none names one yet. `derived` says whether any manifest
    // under the keys was there to go by.
    let said = match &check {
        Some(c) if c.binding.is_some() => None,
        _ => Some(repo.manifests_say(&[old, new]).await?),
    };
    let (binding, derived) = match check.as_ref().and_then(|c| c.binding.clone()) {
        Some(binding) => (binding, false),
        None => match said.as_ref().and_then(|s| s.binding.clone()) {
            Some(binding) => (binding, true),
            None => (
                Binding {
                    repository: authenticate::new_repository_id(),
                    accepts_unbound: true,
                },
                false,
            ),
        },
    };
    // The id is recorded before the first manifest names it: readers take both kinds
    // meanwhile, and an interrupted run's successor binds the same way (with no key check, it
    // would find the id named by some manifests and take the others for planted). Without a
    // key check and nothing under the keys to go by, none is written: the repository is not
    // encrypted under them.
    // Without a key check, the key of the newest manifest: an interrupted rotation's rerun
    // names the key its writers already use.
    let newest_on_new = check.is_none()
        && said
            .as_ref()
            .and_then(|s| s.newest_key.as_ref())
            .is_some_and(|(key_id, _)| key_id == new.id());
    let named_key = |check: &Option<authenticate::KeyCheck>| match check {
        Some(c) if c.key_id == new.id() => new,
        None if newest_on_new => new,
        _ => old,
    };
    if check.as_ref().map_or(derived, |c| c.binding.is_none()) {
        authenticate::write_key_check(
            store,
            named_key(&check),
            since.unwrap_or_else(Utc::now),
            Some(&binding),
        )
        .await
        .map_err(EngineError::from)?;
    }
    let old = &old.clone().bound(Some(binding.clone()));
    let new = &new.clone().bound(Some(binding.clone()));
    let mut results: Vec<(String, RewrapOutcome)> = Vec::new();
    // Each manifest is read once, by `rewrap_one`, as it is just before it is replaced, under
    // a hold: a deletion that began first is seen and the manifest skipped, one that begins
    // later waits for the hold, so a deleted manifest is never written back. What writers
    // committed meanwhile is listed again, and re-wrapped in turn, before the key check
    // stops accepting manifests that name no repository.
    loop {
        for id in ids {
            let outcome = rewrap_held(store, &id, old, new, since).await;
            results.push((id, outcome));
        }
        let seen: std::collections::BTreeSet<&String> = results.iter().map(|(id, _)| id).collect();
        ids = manifest_ids(repo)
            .await?
            .into_iter()
            .filter(|id| !seen.contains(id))
            .collect();
        if ids.is_empty() {
            break;
        }
    }
    results.sort_by_key(|(id, _)| (id.starts_with("binlog-"), id.clone()));
    let on_new = results.iter().any(|(_, o)| {
        matches!(
            o,
            RewrapOutcome::Rewrapped
                | RewrapOutcome::Signed
                | RewrapOutcome::Bound
                | RewrapOutcome::AlreadyOnNewKey
        )
    });
    // What is left on another key, or not authentic, is damaged under the new key either way
    // (and reported); only a manifest that could not be read or written may still be unbound
    // and readable, and is read until a run binds it.
    let binding = Binding {
        accepts_unbound: binding.accepts_unbound
            && results
                .iter()
                .any(|(_, o)| matches!(o, RewrapOutcome::Failed(_))),
        ..binding
    };
    // The repository is the new key's as soon as anything is on it.
    let named = if on_new {
        Some(new)
    } else {
        check.as_ref().map(|_| named_key(&check))
    };
    if let Some(named) = named {
        authenticate::write_key_check(store, named, since.unwrap_or_else(Utc::now), Some(&binding))
            .await
            .map_err(EngineError::from)?;
    }
    Ok(results)
}

/// Every manifest's id: backups, then every archive's segments.
async fn manifest_ids(repo: &Repository) -> Result<Vec<String>> {
    Ok(repo
        .manifest_ids()
        .await?
        .into_iter()
        .chain(archive::segments::manifest_ids(repo.store()).await?)
        .collect())
}

/// [`rewrap_one`] under a rewrap hold on the manifest.
async fn rewrap_held(
    store: &Arc<dyn Store>,
    id: &str,
    old: &MasterKey,
    new: &MasterKey,
    since: Option<DateTime<Utc>>,
) -> RewrapOutcome {
    match holds::take(store, id, HoldKind::Rewrap).await {
        Ok(hold) => {
            let outcome = rewrap_one(store, id, old, new, since).await;
            hold.release().await;
            outcome
        }
        // Gone, or still there on the old key if the deletion backed off in turn.
        Err(EngineError::BeingDeleted { by, .. }) => {
            match store
                .get(&format::object_key(id, format::MANIFEST_NAME))
                .await
            {
                Err(StoreError::NotFound { .. }) => RewrapOutcome::Gone,
                _ => RewrapOutcome::Failed(format!(
                    "being deleted by {by}; run rewrap again once that is over"
                )),
            }
        }
        Err(e) => RewrapOutcome::Failed(bulwark_engine::error::chain(&e)),
    }
}
