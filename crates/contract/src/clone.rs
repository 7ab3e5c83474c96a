//! Seeding a new member from a running one: the new pod's `seed` container asks a member's agent
//! for a copy of its data (a physical backup streamed as it is taken) on [`crate::ports::CLONE`].
//!
//! The request is one line of JSON signed with the cluster's order key (only pods that mount
//! it, the cluster's own, can read a member's data) and dated, so that a captured request
//! cannot be replayed for long. The answer is a line (`streaming`, or `refused: <reason>`),
//! then frames (a 4-byte big-endian length and that many bytes of xbstream), a frame of length
//! 0, and a last line: `complete`, or `failed: <reason>`.

use serde::{Deserialize, Serialize};

use crate::order::{constant_time_eq, hex, hmac_sha256};

/// Largest request line read.
pub const MAX_REQUEST_BYTES: usize = 1024;
/// How far a request's date may be from the donor's clock.
pub const REQUEST_VALIDITY_SECONDS: i64 = 300;
/// Largest frame a donor sends (a receiver refuses larger ones as corrupt).
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// The donor's first line when it streams.
pub const STREAMING: &str = "streaming";
/// The donor's last line when the copy is whole.
pub const COMPLETE: &str = "complete";

/// A request for a copy of a member's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneRequest {
    /// The pod that asks (for the donor's log).
    pub member: String,
    /// Unix seconds when it was made.
    pub issued_at: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Signed {
    member: String,
    issued_at: i64,
    mac: String,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloneRequestError {
    #[error("the clone request is not readable: {0}")]
    Unreadable(String),
    #[error("the clone request's signature does not match")]
    BadSignature,
    #[error("the clone request is dated {issued_at}, {skew}s from the donor's clock")]
    Stale { issued_at: i64, skew: i64 },
}

impl CloneRequest {
    fn signed_text(&self) -> String {
        format!("bulwark-clone-request\n{}\n{}", self.member, self.issued_at)
    }

    /// The request as one line of JSON, signed with `key`.
    pub fn sign(&self, key: &[u8]) -> String {
        serde_json::to_string(&Signed {
            member: self.member.clone(),
            issued_at: self.issued_at,
            mac: hex(&hmac_sha256(key, self.signed_text().as_bytes())),
        })
        .unwrap_or_default()
    }

    /// The request a signed line carries, when `key` signed it and it is dated within
    /// [`REQUEST_VALIDITY_SECONDS`] of `now` (Unix seconds).
    pub fn verify(line: &str, key: &[u8], now: i64) -> Result<CloneRequest, CloneRequestError> {
        let signed: Signed = serde_json::from_str(line.trim())
            .map_err(|e| CloneRequestError::Unreadable(e.to_string()))?;
        let request = CloneRequest {
            member: signed.member,
            issued_at: signed.issued_at,
        };
        let want = hex(&hmac_sha256(key, request.signed_text().as_bytes()));
        if !constant_time_eq(want.as_bytes(), signed.mac.as_bytes()) {
            return Err(CloneRequestError::BadSignature);
        }
        let skew = now.saturating_sub(request.issued_at);
        if skew.abs() > REQUEST_VALIDITY_SECONDS {
            return Err(CloneRequestError::Stale {
                issued_at: request.issued_at,
                skew,
            });
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_signed_dated_and_checked() {
        let request = CloneRequest {
            member: "quay-2".into(),
            issued_at: 1_800_000_000,
        };
        let line = request.sign(b"order-key");
        assert!(!line.contains('\n'));
        assert_eq!(
            CloneRequest::verify(&line, b"order-key", 1_800_000_100),
            Ok(request.clone())
        );
        assert_eq!(
            CloneRequest::verify(&line, b"other-key", 1_800_000_000),
            Err(CloneRequestError::BadSignature)
        );
        assert_eq!(
            CloneRequest::verify(&line, b"order-key", 1_800_000_301),
            Err(CloneRequestError::Stale {
                issued_at: 1_800_000_000,
                skew: 301
            })
        );
        assert!(CloneRequest::verify(&line, b"order-key", 1_799_999_700).is_ok());
        let forged = line.replace("quay-2", "quay-3");
        assert_eq!(
            CloneRequest::verify(&forged, b"order-key", 1_800_000_000),
            Err(CloneRequestError::BadSignature)
        );
        assert!(matches!(
            CloneRequest::verify("{", b"order-key", 0),
            Err(CloneRequestError::Unreadable(_))
        ));
    }
}
