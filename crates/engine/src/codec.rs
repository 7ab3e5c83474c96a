//! Chunk codec: plaintext → zstd frame → optional AES-256-GCM → SHA-256, and the checked reverse.
//! Runs on blocking threads; each thread keeps its own zstd contexts.

use std::cell::RefCell;

use sha2::{Digest, Sha256};

use crate::crypto::DataKey;

/// A chunk as stored, with what the segment index records about it.
pub struct EncodedChunk {
    /// Position in the stream.
    pub index: u64,
    /// Stored bytes.
    pub stored: Vec<u8>,
    /// Plaintext length.
    pub plain_len: u64,
    /// SHA-256 of `stored`.
    pub sha256: [u8; 32],
}

thread_local! {
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compresses, maybe seals, and hashes one chunk.
pub fn encode(
    plain: &[u8],
    index: u64,
    last: bool,
    level: i32,
    key: Option<(&DataKey, &str)>,
) -> std::io::Result<EncodedChunk> {
    let mut stored = COMPRESSOR.with(|cell| -> std::io::Result<Vec<u8>> {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().map(|(l, _)| *l) != Some(level) {
            let mut c = zstd::bulk::Compressor::new(level)?;
            // Chunk and plaintext digests already cover integrity; the frame checksum would be
            // a third pass over the data.
            c.include_checksum(false)?;
            c.include_contentsize(true)?;
            *slot = Some((level, c));
        }
        let (_, c) = slot.as_mut().expect("set above");
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(plain.len()) + 16);
        c.compress_to_buffer(plain, &mut out)?;
        Ok(out)
    })?;
    if let Some((key, backup_id)) = key {
        key.seal(backup_id, index, last, &mut stored);
    }
    let sha256 = Sha256::digest(&stored).into();
    Ok(EncodedChunk {
        index,
        stored,
        plain_len: plain.len() as u64,
        sha256,
    })
}

/// Why a stored chunk was rejected.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Stored bytes do not match the recorded digest.
    Digest,
    /// Authentication failed: wrong data, position, backup or truncated stream.
    Authentication,
    /// zstd rejected the frame.
    Decompress(String),
    /// Decompressed length differs from the recorded one.
    Length { expected: u64, got: u64 },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Digest => f.write_str("stored bytes do not match their SHA-256"),
            DecodeError::Authentication => f.write_str("AES-GCM authentication failed"),
            DecodeError::Decompress(e) => write!(f, "zstd could not decompress it ({e})"),
            DecodeError::Length { expected, got } => {
                write!(f, "it decompressed to {got} bytes instead of {expected}")
            }
        }
    }
}

/// Checks the stored digest; then, given a key (or for unencrypted data), opens and decompresses.
/// Returns `None` when only the digest was checked.
pub fn decode(
    mut stored: Vec<u8>,
    sha256: &[u8; 32],
    plain_len: u64,
    index: u64,
    last: bool,
    key: Option<(&DataKey, &str)>,
    digest_only: bool,
) -> Result<Option<Vec<u8>>, DecodeError> {
    if Sha256::digest(&stored).as_slice() != sha256 {
        return Err(DecodeError::Digest);
    }
    if digest_only {
        return Ok(None);
    }
    if let Some((key, backup_id)) = key {
        if !key.open(backup_id, index, last, &mut stored) {
            return Err(DecodeError::Authentication);
        }
    }
    let plain = DECOMPRESSOR.with(|cell| -> Result<Vec<u8>, DecodeError> {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| DecodeError::Decompress(e.to_string()))?,
            );
        }
        let d = slot.as_mut().expect("set above");
        let mut out = Vec::with_capacity(plain_len as usize);
        d.decompress_to_buffer(&stored, &mut out)
            .map_err(|e| DecodeError::Decompress(e.to_string()))?;
        Ok(out)
    })?;
    if plain.len() as u64 != plain_len {
        return Err(DecodeError::Length {
            expected: plain_len,
            got: plain.len() as u64,
        });
    }
    Ok(Some(plain))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "20260102T030405Z-abcdef";

    #[test]
    fn round_trip_plain_and_encrypted() {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let key = DataKey::generate();
        for k in [None, Some((&key, ID))] {
            let enc = encode(&data, 5, true, 1, k).unwrap();
            assert!(enc.stored.len() < data.len());
            let back = decode(
                enc.stored.clone(),
                &enc.sha256,
                data.len() as u64,
                5,
                true,
                k,
                false,
            )
            .unwrap();
            assert_eq!(back.unwrap(), data);
            assert_eq!(
                decode(enc.stored, &enc.sha256, 0, 5, true, k, true).unwrap(),
                None
            );
        }
    }

    #[test]
    fn unencrypted_chunks_are_plain_zstd_frames() {
        let enc = encode(b"hello hello hello", 0, true, 3, None).unwrap();
        assert_eq!(
            zstd::decode_all(&enc.stored[..]).unwrap(),
            b"hello hello hello"
        );
    }

    #[test]
    fn damage_is_reported_by_kind() {
        let key = DataKey::generate();
        let enc = encode(b"abcdef", 1, false, 1, Some((&key, ID))).unwrap();
        let mut bad = enc.stored.clone();
        bad[3] ^= 1;
        assert_eq!(
            decode(bad, &enc.sha256, 6, 1, false, Some((&key, ID)), false),
            Err(DecodeError::Digest)
        );
        // Digest intact but moved to the wrong position: authentication catches it.
        let r = decode(
            enc.stored.clone(),
            &enc.sha256,
            6,
            2,
            false,
            Some((&key, ID)),
            false,
        );
        assert_eq!(r, Err(DecodeError::Authentication));
        let r = decode(
            enc.stored,
            &enc.sha256,
            7,
            1,
            false,
            Some((&key, ID)),
            false,
        );
        assert_eq!(
            r,
            Err(DecodeError::Length {
                expected: 7,
                got: 6
            })
        );
    }
}
