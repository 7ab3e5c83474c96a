//! Short content hashes used in object names.

use sha2::{Digest, Sha256};

/// The first 10 hex digits of the SHA-256 of `data`.
pub fn short(data: &[u8]) -> String {
    hex::encode(&Sha256::digest(data)[..5])
}
