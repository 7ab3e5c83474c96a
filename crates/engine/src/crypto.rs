//! Envelope encryption: the user's master key wraps a random per-backup data key, which seals
//! each chunk with AES-256-GCM under a nonce derived from the chunk index.

use std::path::Path;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::format;

/// Errors of key handling. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("failed to read encryption key file {path}")]
    ReadKeyFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("encryption key file {path} must hold 32 bytes, raw or base64 (as `openssl rand -base64 32` prints); found {found}")]
    MalformedKeyFile { path: String, found: String },
    #[error("backup {backup_id} was encrypted with key {expected}, but the key given is {given}")]
    WrongKey {
        backup_id: String,
        expected: String,
        given: String,
    },
    #[error("failed to unwrap the data key of backup {backup_id}: the manifest's wrapped key is damaged")]
    UnwrapDataKey { backup_id: String },
}

/// HMAC-SHA256 (RFC 2104). The padded key blocks are wiped after use.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = Zeroizing::new([0u8; 64]);
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| Zeroizing::new(block.map(|b| b ^ byte));
    let inner = Sha256::new()
        .chain_update(&pad(0x36)[..])
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(&pad(0x5c)[..])
        .chain_update(inner)
        .finalize()
        .into()
}

/// The user's long-lived key; it only ever encrypts data keys.
#[derive(Clone)]
pub struct MasterKey {
    key: Zeroizing<[u8; 32]>,
    id: String,
    /// The repository this key signs manifests for, once its key check was read.
    binding: Option<Binding>,
}

/// The repository a key's manifest signatures are bound to, as its key check names it: a
/// manifest signed for one repository does not verify in another under the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The repository's id (its key check's `repository`).
    pub repository: String,
    /// Whether manifests signed before repositories were bound are still accepted: true while
    /// `rewrap` has not yet re-signed all of a repository's older manifests bound.
    pub accepts_unbound: bool,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey")
            .field("id", &self.id)
            .field("binding", &self.binding)
            .finish_non_exhaustive()
    }
}

impl MasterKey {
    /// Reads a key file holding 32 raw bytes or their base64 (whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let display = path.display().to_string();
        let raw = Zeroizing::new(std::fs::read(path).map_err(|source| KeyError::ReadKeyFile {
            path: display.clone(),
            source,
        })?);
        Self::from_bytes(&raw).map_err(|found| KeyError::MalformedKeyFile {
            path: display,
            found,
        })
    }

    /// Accepts 32 raw bytes or base64 of 32 bytes; the error describes the shape, not the content.
    pub fn from_bytes(raw: &[u8]) -> Result<Self, String> {
        if raw.len() == 32 {
            let mut key = Zeroizing::new([0u8; 32]);
            key.copy_from_slice(raw);
            return Ok(Self::new(key));
        }
        let text: Zeroizing<Vec<u8>> = Zeroizing::new(
            raw.iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect(),
        );
        match base64::engine::general_purpose::STANDARD.decode(&*text) {
            Ok(decoded) if decoded.len() == 32 => {
                let decoded = Zeroizing::new(decoded);
                let mut key = Zeroizing::new([0u8; 32]);
                key.copy_from_slice(&decoded);
                Ok(Self::new(key))
            }
            Ok(decoded) => Err(format!("base64 of {} bytes", decoded.len())),
            Err(_) => Err(format!(
                "{} bytes that are neither 32 raw bytes nor base64",
                raw.len()
            )),
        }
    }

    fn new(key: Zeroizing<[u8; 32]>) -> Self {
        let mut h = Sha256::new();
        h.update(b"bulwark-key-id-v1");
        h.update(&key[..]);
        let id = hex::encode(&h.finalize()[..8]);
        Self {
            key,
            id,
            binding: None,
        }
    }

    /// This key, signing and checking manifests for the repository `binding` names.
    pub fn bound(mut self, binding: Option<Binding>) -> Self {
        self.binding = binding;
        self
    }

    /// The repository this key signs manifests for; `None` before its key check was read, or
    /// for a repository whose key check predates binding.
    pub fn binding(&self) -> Option<&Binding> {
        self.binding.as_ref()
    }

    /// The key manifests are authenticated under: derived from this one, never used to
    /// encrypt (`authenticate`).
    pub fn authentication_key(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(hmac_sha256(
            &self.key[..],
            b"bulwark-manifest-authentication-v1",
        ))
    }

    /// Public identifier of this key, recorded in manifests.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Wraps `data_key` for `backup_id`; the result is nonce || ciphertext || tag, base64.
    pub fn wrap(&self, backup_id: &str, data_key: &DataKey) -> String {
        let cipher = Aes256Gcm::new_from_slice(&self.key[..]).expect("32-byte key");
        let nonce: [u8; 12] = rand::random();
        let mut buf = data_key.key.to_vec();
        let tag = cipher
            .encrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                &format::key_wrap_aad(backup_id),
                &mut buf,
            )
            .expect("wrapping 32 bytes cannot exceed GCM limits");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        out.extend_from_slice(&tag);
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    /// Unwraps the data key recorded in a manifest.
    pub fn unwrap(
        &self,
        backup_id: &str,
        info: &format::EncryptionInfo,
    ) -> Result<DataKey, KeyError> {
        if info.key_id != self.id {
            return Err(KeyError::WrongKey {
                backup_id: backup_id.to_string(),
                expected: info.key_id.clone(),
                given: self.id.clone(),
            });
        }
        let damaged = || KeyError::UnwrapDataKey {
            backup_id: backup_id.to_string(),
        };
        let blob = base64::engine::general_purpose::STANDARD
            .decode(&info.wrapped_data_key)
            .map_err(|_| damaged())?;
        if blob.len() != 12 + 32 + 16 {
            return Err(damaged());
        }
        let cipher = Aes256Gcm::new_from_slice(&self.key[..]).expect("32-byte key");
        let mut key = Zeroizing::new([0u8; 32]);
        key.copy_from_slice(&blob[12..44]);
        cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(&blob[..12]),
                &format::key_wrap_aad(backup_id),
                &mut key[..],
                Tag::from_slice(&blob[44..]),
            )
            .map_err(|_| damaged())?;
        Ok(DataKey::from_key(key))
    }
}

/// Re-wraps a backup's data key from `old` to `new` master key (key rotation: the data and its
/// chunk encryption are untouched).
pub fn rewrap(
    backup_id: &str,
    info: &format::EncryptionInfo,
    old: &MasterKey,
    new: &MasterKey,
) -> Result<format::EncryptionInfo, KeyError> {
    let data_key = old.unwrap(backup_id, info)?;
    Ok(format::EncryptionInfo {
        algorithm: info.algorithm.clone(),
        key_id: new.id().to_string(),
        wrapped_data_key: new.wrap(backup_id, &data_key),
    })
}

/// The random key of one backup.
pub struct DataKey {
    key: Zeroizing<[u8; 32]>,
    cipher: Aes256Gcm,
}

impl DataKey {
    /// A fresh random data key.
    pub fn generate() -> Self {
        let mut key = Zeroizing::new([0u8; 32]);
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut key[..]);
        Self::from_key(key)
    }

    fn from_key(key: Zeroizing<[u8; 32]>) -> Self {
        let cipher = Aes256Gcm::new_from_slice(&key[..]).expect("32-byte key");
        Self { key, cipher }
    }

    /// Encrypts `buf` in place and appends the tag.
    pub fn seal(&self, backup_id: &str, index: u64, last: bool, buf: &mut Vec<u8>) {
        let tag = self
            .cipher
            .encrypt_in_place_detached(
                Nonce::from_slice(&format::chunk_nonce(index)),
                &format::chunk_aad(backup_id, index, last),
                buf,
            )
            .expect("chunk sizes are far below GCM limits");
        buf.extend_from_slice(&tag);
    }

    /// Authenticates and decrypts `buf` (ciphertext || tag) in place; false when it does not verify.
    pub fn open(&self, backup_id: &str, index: u64, last: bool, buf: &mut Vec<u8>) -> bool {
        if buf.len() < 16 {
            return false;
        }
        let tag_at = buf.len() - 16;
        let tag = *Tag::from_slice(&buf[tag_at..]);
        buf.truncate(tag_at);
        self.cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(&format::chunk_nonce(index)),
                &format::chunk_aad(backup_id, index, last),
                buf,
                &tag,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "20260102T030405Z-abcdef";

    fn key(byte: u8) -> MasterKey {
        MasterKey::from_bytes(&[byte; 32]).unwrap()
    }

    #[test]
    fn key_file_accepts_raw_and_base64_and_rejects_other_shapes() {
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        assert_eq!(
            MasterKey::from_bytes(format!("{b64}\n").as_bytes())
                .unwrap()
                .id(),
            key(7).id()
        );
        let err = MasterKey::from_bytes(b"c2hvcnQ=\n").unwrap_err();
        assert_eq!(err, "base64 of 5 bytes");
        assert!(MasterKey::from_bytes(b"not a key at all!").is_err());
    }

    #[test]
    fn wrap_unwrap_and_wrong_key() {
        let master = key(1);
        let dk = DataKey::generate();
        let info = format::EncryptionInfo {
            algorithm: "AES-256-GCM".into(),
            key_id: master.id().into(),
            wrapped_data_key: master.wrap(ID, &dk),
        };
        let back = master.unwrap(ID, &info).unwrap();
        assert_eq!(&back.key[..], &dk.key[..]);
        assert!(matches!(
            key(2).unwrap(ID, &info),
            Err(KeyError::WrongKey { .. })
        ));
        assert!(matches!(
            master.unwrap("20260102T030405Z-000000", &info),
            Err(KeyError::UnwrapDataKey { .. })
        ));
    }

    #[test]
    fn rewrapped_keys_open_with_the_new_key_only() {
        let (old, new) = (key(1), key(2));
        let dk = DataKey::generate();
        let info = format::EncryptionInfo {
            algorithm: "AES-256-GCM".into(),
            key_id: old.id().into(),
            wrapped_data_key: old.wrap(ID, &dk),
        };
        let moved = rewrap(ID, &info, &old, &new).unwrap();
        assert_eq!(moved.key_id, new.id());
        assert_eq!(&new.unwrap(ID, &moved).unwrap().key[..], &dk.key[..]);
        assert!(matches!(
            old.unwrap(ID, &moved),
            Err(KeyError::WrongKey { .. })
        ));
        assert!(matches!(
            rewrap(ID, &moved, &old, &new),
            Err(KeyError::WrongKey { .. })
        ));
    }

    #[test]
    fn chunks_detect_reordering_truncation_and_splicing() {
        let dk = DataKey::generate();
        let mut buf = b"hello".to_vec();
        dk.seal(ID, 3, false, &mut buf);
        let sealed = buf.clone();
        assert!(dk.open(ID, 3, false, &mut buf));
        assert_eq!(buf, b"hello");
        for (id, index, last) in [
            (ID, 4, false),
            (ID, 3, true),
            ("20260102T030405Z-abcdee", 3, false),
        ] {
            let mut b = sealed.clone();
            assert!(!dk.open(id, index, last, &mut b), "{id} {index} {last}");
        }
        let mut flipped = sealed.clone();
        flipped[0] ^= 0x80;
        assert!(!dk.open(ID, 3, false, &mut flipped));
    }
}
