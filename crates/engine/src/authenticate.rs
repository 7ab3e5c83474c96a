//! Authenticated manifests. Under a master key every manifest (backups and archived binlog
//! segments) carries `mac`: HMAC-SHA256, under a key derived from the master key, of the
//! manifest's canonical JSON without that field (object keys sorted, no whitespace), so no field
//! can be edited, added or removed by someone who can write to the repository but has no key.
//! The repository's key check (`repository.json`) says, authenticated, that the repository is
//! encrypted and under which key. Pure except [`ensure_key_check`] and [`read_key_check`].

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

pub use crate::crypto::hmac_sha256;
use crate::crypto::MasterKey;
use crate::store::{Store, StoreError};

/// The field holding a manifest's MAC.
pub const MAC_FIELD: &str = "mac";
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

/// `manifest` as the pretty JSON stored, with its MAC under `key` when there is one.
pub fn manifest_bytes<T: serde::Serialize>(manifest: &T, key: Option<&MasterKey>) -> Vec<u8> {
    let mut value = serde_json::to_value(manifest).expect("a manifest serializes");
    if let (Some(key), Value::Object(map)) = (key, &mut value) {
        let mac = mac_of(&Value::Object(map.clone()), key);
        map.insert(MAC_FIELD.into(), Value::String(mac));
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
    Ok(value)
}

/// What the repository's key check says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCheck {
    /// Id of the master key the repository is encrypted with.
    pub key_id: String,
    /// Since when every manifest written is authenticated: a manifest whose id is stamped
    /// earlier may carry no MAC (written before), one stamped later must.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}

fn key_check_bytes(key: &MasterKey, since: chrono::DateTime<chrono::Utc>) -> Vec<u8> {
    let check = serde_json::json!({
        "format": KEY_CHECK_FORMAT,
        "key_id": key.id(),
        "since": since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    manifest_bytes(&check, Some(key))
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
    Ok(Some(KeyCheck { key_id, since }))
}

/// Writes the key check for `key` unless the repository has one (which must then be `key`'s).
pub async fn ensure_key_check(
    store: &Arc<dyn Store>,
    key: &MasterKey,
) -> Result<(), KeyCheckError> {
    if read_key_check(store, Some(key)).await?.is_some() {
        return Ok(());
    }
    write_key_check(store, key, chrono::Utc::now()).await
}

/// Writes (or replaces) the key check for `key`, authenticated `since` (now for a new one; the
/// old one's for a rotation).
pub async fn write_key_check(
    store: &Arc<dyn Store>,
    key: &MasterKey,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<(), KeyCheckError> {
    store
        .put(KEY_CHECK_NAME, Bytes::from(key_check_bytes(key, since)))
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
    #[error("the repository's key check ({KEY_CHECK_NAME}) is damaged or forged: {0}")]
    Damaged(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> MasterKey {
        MasterKey::from_bytes(&[byte; 32]).unwrap()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let long_key = [0xaa; 131];
        let mac = hmac_sha256(
            &long_key,
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex::encode(mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn canonical_json_ignores_field_order_and_whitespace() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "é"}], "a": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(
            String::from_utf8(canonical(&a)).unwrap(),
            r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#
        );
    }

    #[test]
    fn a_signed_manifest_refuses_every_edit() {
        let k = key(7);
        let manifest = serde_json::json!({
            "id": "20261126T100000Z-abcdef",
            "through": "0-1-8",
            "replaces": ["a"],
            "encryption": {"key_id": k.id()},
            "stored_bytes": 920u64,
        });
        let signed = manifest_bytes(&manifest, Some(&k));
        assert_eq!(check_manifest(&signed, Some(&k)), Ok(()));
        assert_eq!(
            check_manifest(&signed, None),
            Ok(()),
            "nothing to check without a key"
        );
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut v: Value = serde_json::from_slice(&signed).unwrap();
            f(&mut v);
            serde_json::to_vec(&v).unwrap()
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "a field changed",
                edit(&|v| v["through"] = "0-1-9".into()),
                "does not match",
            ),
            (
                "a field added",
                edit(&|v| v["after"] = "0-1-1".into()),
                "does not match",
            ),
            (
                "a list changed",
                edit(&|v| v["replaces"][0] = "b".into()),
                "does not match",
            ),
            (
                "the MAC dropped",
                edit(&|v| {
                    v.as_object_mut().unwrap().remove(MAC_FIELD);
                }),
                "carries no MAC",
            ),
            (
                "encryption dropped and signed by no one",
                edit(&|v| v["encryption"] = Value::Null),
                "does not match",
            ),
            ("another key", signed.clone(), "another key"),
        ];
        for (case, raw, want) in cases {
            let under = if case == "another key" {
                key(8)
            } else {
                k.clone()
            };
            let err = check_manifest(&raw, Some(&under)).unwrap_err().to_string();
            assert!(err.contains(want), "{case}: {err}");
        }
        // Signed, but unencrypted: refused under a key all the same.
        let plain = manifest_bytes(
            &serde_json::json!({"id": "x", "encryption": null}),
            Some(&k),
        );
        let err = check_manifest(&plain, Some(&k)).unwrap_err().to_string();
        assert!(err.contains("not encrypted"), "{err}");
    }
}
