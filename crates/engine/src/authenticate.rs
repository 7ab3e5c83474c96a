//! Authenticated manifests. Under a master key every manifest (backups and archived binlog
//! segments) carries `mac`: HMAC-SHA256, under a key derived from the master key, of the
//! manifest's canonical JSON without that field (object keys sorted, no whitespace), so no
//! field can be edited, added or removed by someone who can write to the repository but has no
//! key. Each manifest names, signed, the repository it was written for (`repository`), so none
//! is taken from another repository under the same key. The repository's key check
//! (`repository.json`) says, authenticated, that the repository is encrypted, under which key,
//! and its id. Pure except the key check's reads and writes.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

pub use crate::crypto::hmac_sha256;
use crate::crypto::{Binding, MasterKey};
use crate::store::{Store, StoreError};

/// The field holding a manifest's MAC.
pub const MAC_FIELD: &str = "mac";
/// The field naming the repository a manifest was written for.
pub const REPOSITORY_FIELD: &str = "repository";
/// Prefix of a MAC's text.
const MAC_PREFIX: &str = "hmac-sha256:";
/// The repository's key check object, at its root.
pub const KEY_CHECK_NAME: &str = "repository.json";
/// Value of the key check's `format` field.
const KEY_CHECK_FORMAT: &str = "bulwark-repository";

/// Whether two MAC texts are equal, in time that does not depend on where they differ.
fn same_mac(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// `value` as canonical JSON: object keys sorted by their bytes, no whitespace; the same bytes
/// whatever order the fields were written or read in.
pub fn canonical(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(k).expect("a string serializes"));
                out.push(b':');
                write_canonical(&map[k.as_str()], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).expect("a scalar serializes")),
    }
}

/// The MAC of `value` (its `mac` field left out) under `key`.
fn mac_of(value: &Value, key: &MasterKey) -> String {
    let mut unsigned = value.clone();
    if let Value::Object(map) = &mut unsigned {
        map.remove(MAC_FIELD);
    }
    let mut message = b"bulwark-manifest-v1\n".to_vec();
    message.extend(canonical(&unsigned));
    let mac = hmac_sha256(&key.authentication_key()[..], &message);
    format!("{MAC_PREFIX}{}", hex::encode(mac))
}

/// `value` with its MAC under `key`.
fn signed(mut value: Value, key: &MasterKey) -> Value {
    if let Value::Object(map) = &mut value {
        let mac = mac_of(&Value::Object(map.clone()), key);
        map.insert(MAC_FIELD.into(), Value::String(mac));
    }
    value
}

/// `manifest` as the pretty JSON stored, with its MAC under `key` when there is one, naming
/// the repository the key is bound to (none in a repository whose key check predates binding).
pub fn manifest_bytes<T: serde::Serialize>(manifest: &T, key: Option<&MasterKey>) -> Vec<u8> {
    let mut value = serde_json::to_value(manifest).expect("a manifest serializes");
    if let Some(key) = key {
        if let (Some(binding), Value::Object(map)) = (key.binding(), &mut value) {
            map.insert(
                REPOSITORY_FIELD.into(),
                Value::String(binding.repository.clone()),
            );
        }
        value = signed(value, key);
    }
    serde_json::to_vec_pretty(&value).expect("a manifest serializes")
}

/// Why a stored manifest is refused under a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestRefusal {
    #[error("not valid JSON ({0})")]
    NotJson(String),
    /// It may have been written before manifests were authenticated.
    #[error("it carries no MAC, though a key was given: written before manifests were authenticated (re-wrapping with the same key signs those), or edited to drop it")]
    Unsigned,
    #[error("its MAC does not match under key {0}: edited, or signed with another key")]
    Mismatch(String),
    #[error("it was written for repository {found}, not this one ({expected}): copied from another repository (or the key check {KEY_CHECK_NAME} was replaced by another repository's: then delete it and run rewrap with the same key old and new)")]
    OtherRepository { found: String, expected: String },
    /// Written before manifests named their repository, in a repository whose older manifests
    /// were all re-signed naming it (or that never had any).
    #[error("it names no repository, and this one ({0}) accepts only manifests naming it: copied from another repository, or written by a release before manifests named their repository")]
    Unbound(String),
    /// Naming a repository, in one whose key check names none.
    #[error("it was written for repository {0}, but this repository's key check names none (it predates repository ids, or was replaced): copied from another repository, or run rewrap with the same key old and new to restore the id")]
    NoRepositoryId(String),
    #[error("it says its data is not encrypted, though a key was given")]
    Unencrypted,
}

/// Checks a stored manifest under `key`: it must carry a MAC, the MAC must match, and it must
/// say its data is encrypted (anyone who can write to the repository can write an unencrypted
/// manifest). Without a key nothing can be checked.
pub fn check_manifest(raw: &[u8], key: Option<&MasterKey>) -> Result<(), ManifestRefusal> {
    let Some(key) = key else {
        return Ok(());
    };
    let value = check_mac(raw, Some(key))?;
    if value.get("encryption").is_none_or(Value::is_null) {
        return Err(ManifestRefusal::Unencrypted);
    }
    Ok(())
}

/// Checks the MAC of a stored record under `key` (any record [`manifest_bytes`] signed, not
/// only manifests) and returns it parsed; without a key nothing can be checked.
pub fn check_mac(raw: &[u8], key: Option<&MasterKey>) -> Result<Value, ManifestRefusal> {
    let value: Value =
        serde_json::from_slice(raw).map_err(|e| ManifestRefusal::NotJson(e.to_string()))?;
    let Some(key) = key else {
        return Ok(value);
    };
    let Some(stored) = value.get(MAC_FIELD) else {
        return Err(ManifestRefusal::Unsigned);
    };
    if !same_mac(stored.as_str().unwrap_or_default(), &mac_of(&value, key)) {
        return Err(ManifestRefusal::Mismatch(key.id().to_owned()));
    }
    let named = value
        .get(REPOSITORY_FIELD)
        .map(|v| v.as_str().unwrap_or_default().to_owned());
    match (named, key.binding()) {
        (Some(found), Some(binding)) if found != binding.repository => {
            Err(ManifestRefusal::OtherRepository {
                found,
                expected: binding.repository.clone(),
            })
        }
        (None, Some(binding)) if !binding.accepts_unbound => {
            Err(ManifestRefusal::Unbound(binding.repository.clone()))
        }
        (Some(found), None) => Err(ManifestRefusal::NoRepositoryId(found)),
        _ => Ok(value),
    }
}

/// What a stored manifest says of its repository, when its MAC is authentic under `key`
/// (whatever repository it is read in): `Some(None)` when it names none (written before
/// manifests named their repository), `None` when it is not authentic.
pub fn named_repository(raw: &[u8], key: &MasterKey) -> Option<Option<String>> {
    let value: Value = serde_json::from_slice(raw).ok()?;
    let stored = value.get(MAC_FIELD)?.as_str()?;
    if !same_mac(stored, &mac_of(&value, key)) {
        return None;
    }
    Some(
        value
            .get(REPOSITORY_FIELD)
            .and_then(Value::as_str)
            .map(str::to_owned),
    )
}

/// The binding the manifests `(id, stored bytes)` imply for their repository when its key check
/// is missing or names no repository: the one id the authentic ones (under any of `keys`)
/// name, or, when none names one, a new id that still accepts manifests naming none (they all
/// predate repository ids, or authentication when they carry no MAC). Once one names the
/// repository, one naming none is taken for planted. `None` when there is no manifest to go
/// by; refused when they name different repositories (some were copied in).
pub fn binding_named_by<'a>(
    manifests: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    keys: &[&MasterKey],
) -> Result<Option<Binding>, KeyCheckError> {
    let mut named: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    let mut any = false;
    for (id, raw) in manifests {
        match keys.iter().find_map(|k| named_repository(raw, k)) {
            Some(Some(repository)) => named.entry(repository).or_default().push(id),
            Some(None) => {}
            // Not authentic: evidence only when it carries no MAC at all and says it is
            // encrypted under one of `keys` (from before authentication); an edited, foreign or
            // unencrypted one says nothing.
            None if unsigned_under(raw, keys) => {}
            None => continue,
        }
        any = true;
    }
    if named.len() > 1 {
        let by_id: Vec<String> = named
            .iter()
            .map(|(repository, ids)| format!("{repository} by {}", ids.join(", ")))
            .collect();
        return Err(KeyCheckError::ConflictingIds(by_id.join("; ")));
    }
    let accepts_unbound = named.is_empty();
    Ok(any.then(|| Binding {
        repository: named.into_keys().next().unwrap_or_else(new_repository_id),
        accepts_unbound,
    }))
}

/// Whether a stored manifest carries no MAC and says its data is encrypted under one of `keys`.
fn unsigned_under(raw: &[u8], keys: &[&MasterKey]) -> bool {
    serde_json::from_slice::<Value>(raw).is_ok_and(|v| {
        v.get(MAC_FIELD).is_none()
            && keys
                .iter()
                .any(|k| v["encryption"]["key_id"].as_str() == Some(k.id()))
    })
}

/// The key the newest encrypted manifest among `manifests` `(where, stored bytes)` says its
/// data is encrypted under, with where it is: newest by the stamp its id starts with
/// (`YYYYMMDDTHHMMSSZ`, backups' and segments' alike). A rotation may leave older manifests on
/// an older key; the newest says whose the repository is now.
pub fn newest_key_id<'a>(
    manifests: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Option<(String, String)> {
    manifests
        .into_iter()
        .filter_map(|(at, raw)| {
            let v = serde_json::from_slice::<Value>(raw).ok()?;
            let key_id = v["encryption"]["key_id"].as_str()?.to_owned();
            let stamp = at.rsplit('/').next()?.get(..16)?.to_owned();
            Some((stamp, at.to_owned(), key_id))
        })
        .max()
        .map(|(_, at, key_id)| (key_id, at))
}

/// `key` bound as the repository's key check says now: what a manifest is signed with just
/// before it is written, so that a writer that started before the repository was bound (or
/// while two writers created its key check on a store that ignores create-if-absent) signs
/// for the repository as it is. A key check that cannot be read, or names another key (a
/// rotation since), leaves `key` as it was.
pub async fn signing_key(store: &Arc<dyn Store>, key: &MasterKey) -> MasterKey {
    match read_key_check(store, Some(key)).await {
        Ok(Some(check)) => check.bind(key),
        Ok(None) => key.clone(),
        Err(e) => {
            tracing::warn!(key = %key.id(), error = %crate::chain::chain(&e), "the repository's key check could not be read before a manifest was written; signed for the repository as it was when this writer started");
            key.clone()
        }
    }
}

/// What the repository's key check says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCheck {
    /// Id of the master key the repository is encrypted with.
    pub key_id: String,
    /// Since when every manifest written is authenticated: a manifest whose id is stamped
    /// earlier may carry no MAC (written before), one stamped later must.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// The repository's id, which manifests' MACs are bound to; `None` in a key check written
    /// before manifests were bound (until `rewrap` binds them).
    pub binding: Option<Binding>,
}

impl KeyCheck {
    /// `key` signing and checking manifests for this repository.
    pub fn bind(&self, key: &MasterKey) -> MasterKey {
        key.clone().bound(self.binding.clone())
    }
}

/// A new repository id: 128 random bits in hex.
pub fn new_repository_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

fn key_check_bytes(
    key: &MasterKey,
    since: chrono::DateTime<chrono::Utc>,
    binding: Option<&Binding>,
) -> Vec<u8> {
    let mut check = serde_json::json!({
        "format": KEY_CHECK_FORMAT,
        "key_id": key.id(),
        "since": since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    if let Some(binding) = binding {
        check["repository"] = binding.repository.clone().into();
        if binding.accepts_unbound {
            check["accepts_unbound"] = true.into();
        }
    }
    serde_json::to_vec_pretty(&signed(check, key)).expect("a key check serializes")
}

/// Reads the key check; `None` when the repository has none (unencrypted, or written before
/// key checks). Under `key`, it must be authentic and name that key.
pub async fn read_key_check(
    store: &Arc<dyn Store>,
    key: Option<&MasterKey>,
) -> Result<Option<KeyCheck>, KeyCheckError> {
    let raw = match store.get(KEY_CHECK_NAME).await {
        Ok(raw) => raw,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(source) => return Err(KeyCheckError::Read(source)),
    };
    let value: Value = serde_json::from_slice(&raw)
        .map_err(|e| KeyCheckError::Damaged(format!("not valid JSON ({e})")))?;
    let key_id = value
        .get("key_id")
        .and_then(Value::as_str)
        .filter(|_| value.get("format").and_then(Value::as_str) == Some(KEY_CHECK_FORMAT))
        .ok_or_else(|| KeyCheckError::Damaged("not a key check".into()))?
        .to_owned();
    if let Some(key) = key {
        if key_id != key.id() {
            return Err(KeyCheckError::OtherKey {
                expected: key_id,
                given: key.id().to_owned(),
            });
        }
        let stored = value.get(MAC_FIELD).and_then(Value::as_str);
        if !same_mac(stored.unwrap_or_default(), &mac_of(&value, key)) {
            return Err(KeyCheckError::Damaged(format!(
                "its MAC does not match under key {}",
                key.id()
            )));
        }
    }
    let since = value
        .get("since")
        .and_then(Value::as_str)
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    let binding = match value.get("repository") {
        None => None,
        Some(Value::String(id)) if !id.is_empty() => Some(Binding {
            repository: id.clone(),
            accepts_unbound: value.get("accepts_unbound") == Some(&Value::Bool(true)),
        }),
        Some(_) => {
            return Err(KeyCheckError::Damaged(
                "its repository id is not text".into(),
            ))
        }
    };
    Ok(Some(KeyCheck {
        key_id,
        since,
        binding,
    }))
}

/// The repository's key check, written for `key` unless the repository has one, which must
/// then be `key`'s. A new key check binds manifests as `existing` says (what the manifests
/// already there imply: a lost key check's id, and whether they predate repository ids), else
/// to a new id. Of two writers creating it at once, one creates it and the other reads it, so
/// both sign for the same repository.
pub async fn ensure_key_check(
    store: &Arc<dyn Store>,
    key: &MasterKey,
    existing: Option<Binding>,
) -> Result<KeyCheck, KeyCheckError> {
    if let Some(check) = read_key_check(store, Some(key)).await? {
        return Ok(check);
    }
    let since = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 0);
    let binding = existing.unwrap_or_else(|| Binding {
        repository: new_repository_id(),
        accepts_unbound: false,
    });
    let body = Bytes::from(key_check_bytes(key, since, Some(&binding)));
    if store
        .put_new(KEY_CHECK_NAME, body)
        .await
        .map_err(KeyCheckError::Write)?
    {
        return Ok(KeyCheck {
            key_id: key.id().to_owned(),
            since: Some(since),
            binding: Some(binding),
        });
    }
    read_key_check(store, Some(key))
        .await?
        .ok_or_else(|| KeyCheckError::Damaged("it was created and is gone".into()))
}

/// Writes (or replaces) the key check for `key`, authenticated `since` (now for a new one; the
/// old one's for a rotation), binding manifests to `binding` (`None` only for a repository
/// whose manifests are not bound yet).
pub async fn write_key_check(
    store: &Arc<dyn Store>,
    key: &MasterKey,
    since: chrono::DateTime<chrono::Utc>,
    binding: Option<&Binding>,
) -> Result<(), KeyCheckError> {
    store
        .put(
            KEY_CHECK_NAME,
            Bytes::from(key_check_bytes(key, since, binding)),
        )
        .await
        .map_err(KeyCheckError::Write)
}

/// Why the repository's key check refuses.
#[derive(Debug, thiserror::Error)]
pub enum KeyCheckError {
    #[error("failed to read the repository's key check ({KEY_CHECK_NAME})")]
    Read(#[source] StoreError),
    #[error("failed to write the repository's key check ({KEY_CHECK_NAME})")]
    Write(#[source] StoreError),
    #[error("the repository's key check names key {expected}, but the key given is {given}")]
    OtherKey { expected: String, given: String },
    #[error("the repository has no key check ({KEY_CHECK_NAME}), and its newest manifest ({at}) is encrypted with key {expected}, but the key given is {given} (if {given} is the repository's key now, run rewrap with it as old and new key to write the key check again)")]
    ManifestsUnderOtherKey {
        expected: String,
        given: String,
        at: String,
    },
    #[error("the repository's key check ({KEY_CHECK_NAME}) is damaged or forged: {0}")]
    Damaged(String),
    #[error("the repository's key check ({KEY_CHECK_NAME}) names no repository, and its authentic manifests name several (repository {0}): some were copied in from another repository under the same key; remove those, then run rewrap with the same key old and new")]
    ConflictingIds(String),
}

#[cfg(test)]
#[path = "authenticate_tests.rs"]
mod tests;
