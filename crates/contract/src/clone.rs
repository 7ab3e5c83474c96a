//! Seeding a new member from a running one: the new pod's `seed` container asks a member's agent
//! for a copy of its data (a physical backup streamed as it is taken) on [`crate::ports::CLONE`].
//!
//! The request is one line of JSON signed with the cluster's order key (only pods that mount
//! it, the cluster's own, can read a member's data), dated, and made once (a random nonce the
//! donor remembers while the request is valid), so that a captured request cannot be replayed. The answer is a line (`streaming <proof>`, the proof an HMAC of
//! the request under the same key, so that only a member can answer; or `refused: <reason>`),
//! then frames (a 4-byte big-endian length and that many bytes of xbstream), a frame of length
//! 0, and a last line: `complete`, or `failed: <reason>`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::order::{constant_time_eq, mac, mac_matches};

/// Largest request line read.
pub const MAX_REQUEST_BYTES: usize = 1024;
/// How far a request's date may be from the donor's clock.
pub const REQUEST_VALIDITY_SECONDS: i64 = 300;
/// Largest frame a donor sends (a receiver refuses larger ones as corrupt).
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// The donor's first line when it streams starts with this word; the donor's proof follows.
pub const STREAMING: &str = "streaming";
/// The donor's last line when the copy is whole.
pub const COMPLETE: &str = "complete";

/// A request for a copy of a member's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneRequest {
    /// The pod that asks (for the donor's log).
    pub member: String,
    /// The donor's address as the receiver connects to it (`ip:port`): a donor serves only
    /// requests made for it, so a captured request is good for one donor only.
    pub donor: String,
    /// Unix seconds when it was made.
    pub issued_at: i64,
    /// Random, new for each request ([`NONCE_HEX_LEN`] hex digits): a donor serves it once.
    pub nonce: String,
}

/// Length of a request's nonce: 128 random bits in hex.
pub const NONCE_HEX_LEN: usize = 32;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Signed {
    member: String,
    donor: String,
    issued_at: i64,
    #[serde(default)]
    nonce: String,
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
    #[error("the clone request is for {wanted}, not this donor ({actual})")]
    OtherDonor { wanted: String, actual: String },
    #[error(
        "the donor did not prove it holds the cluster's order key (a pod that only carries the \
         cluster's labels?)"
    )]
    DonorUnproven,
    #[error("the clone request carries no nonce of {NONCE_HEX_LEN} hex digits")]
    NoNonce,
    #[error("the clone request was served before: a replay")]
    Replayed,
}

impl CloneRequest {
    fn signed_text(&self) -> String {
        format!(
            "bulwark-clone-request\n{}\n{}\n{}\n{}",
            self.member, self.donor, self.issued_at, self.nonce
        )
    }

    /// The donor's first line when it streams for this request: [`STREAMING`] and an HMAC
    /// under the order key of the request itself. Any pod given the cluster's labels stands
    /// behind its headless Service and can be asked for a copy; only a member, which mounts
    /// the key, can answer so, and the answer fits this request only.
    pub fn streaming_line(&self, key: &[u8]) -> String {
        format!("{STREAMING} {}", self.proof(key))
    }

    /// Whether the donor's first line `line` is [`Self::streaming_line`]'s under `key`.
    pub fn check_streaming(&self, line: &str, key: &[u8]) -> Result<(), CloneRequestError> {
        let proof = line
            .strip_prefix(STREAMING)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or(CloneRequestError::DonorUnproven)?;
        if constant_time_eq(self.proof(key).as_bytes(), proof.trim().as_bytes()) {
            Ok(())
        } else {
            Err(CloneRequestError::DonorUnproven)
        }
    }

    fn proof(&self, key: &[u8]) -> String {
        let text = format!("bulwark-clone-donor\n{}", self.signed_text());
        mac(key, &text)
    }

    /// The request as one line of JSON, signed with `key`.
    pub fn sign(&self, key: &[u8]) -> String {
        serde_json::to_string(&Signed {
            member: self.member.clone(),
            donor: self.donor.clone(),
            issued_at: self.issued_at,
            nonce: self.nonce.clone(),
            mac: mac(key, &self.signed_text()),
        })
        .unwrap_or_default()
    }

    /// The request a signed line carries, when `key` signed it, it names `donor` (the address
    /// the connection came in on) and it is dated within [`REQUEST_VALIDITY_SECONDS`] of `now`
    /// (Unix seconds).
    pub fn verify(
        line: &str,
        key: &[u8],
        donor: &str,
        now: i64,
    ) -> Result<CloneRequest, CloneRequestError> {
        let signed: Signed = serde_json::from_str(line.trim())
            .map_err(|e| CloneRequestError::Unreadable(e.to_string()))?;
        let request = CloneRequest {
            member: signed.member,
            donor: signed.donor,
            issued_at: signed.issued_at,
            nonce: signed.nonce,
        };
        if !mac_matches(key, &request.signed_text(), &signed.mac) {
            return Err(CloneRequestError::BadSignature);
        }
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if request.nonce.len() != NONCE_HEX_LEN || !request.nonce.chars().all(hex) {
            return Err(CloneRequestError::NoNonce);
        }
        if request.donor != donor {
            return Err(CloneRequestError::OtherDonor {
                wanted: request.donor,
                actual: donor.to_owned(),
            });
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

/// The requests a donor served while they could still be valid: each is served once.
#[derive(Debug, Default)]
pub struct ServedRequests {
    /// Nonce → the request's date.
    served: HashMap<String, i64>,
}

impl ServedRequests {
    /// Records `request` as served at `now` (Unix seconds), or refuses it as a replay. A
    /// request dated further back than [`REQUEST_VALIDITY_SECONDS`] is refused as stale
    /// anyway, so older nonces are forgotten.
    pub fn admit(&mut self, request: &CloneRequest, now: i64) -> Result<(), CloneRequestError> {
        self.served
            .retain(|_, issued| now.saturating_sub(*issued) <= 2 * REQUEST_VALIDITY_SECONDS);
        if self.served.contains_key(&request.nonce) {
            return Err(CloneRequestError::Replayed);
        }
        self.served.insert(request.nonce.clone(), request.issued_at);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn a_request_is_served_once_and_needs_a_nonce() {
        let request = CloneRequest {
            member: "quay-2".into(),
            donor: "10.0.0.5:9082".into(),
            issued_at: 1_800_000_000,
            nonce: NONCE.into(),
        };
        let mut served = ServedRequests::default();
        assert_eq!(served.admit(&request, 1_800_000_001), Ok(()));
        assert_eq!(
            served.admit(&request, 1_800_000_200),
            Err(CloneRequestError::Replayed)
        );
        let another = CloneRequest {
            nonce: "ffeeddccbbaa99887766554433221100".into(),
            ..request.clone()
        };
        assert_eq!(served.admit(&another, 1_800_000_200), Ok(()));
        // Forgotten only once the request is stale anyway.
        assert_eq!(served.admit(&request, 1_800_000_601), Ok(()));
        // The nonce is signed, and must be one.
        let line = request.sign(b"order-key");
        let other = line.replace(NONCE, "ffeeddccbbaa99887766554433221100");
        assert_eq!(
            CloneRequest::verify(&other, b"order-key", "10.0.0.5:9082", 1_800_000_000),
            Err(CloneRequestError::BadSignature)
        );
        for nonce in ["", "short", "00112233445566778899AABBCCDDEEFF"] {
            let bare = CloneRequest {
                nonce: nonce.into(),
                ..request.clone()
            };
            assert_eq!(
                CloneRequest::verify(
                    &bare.sign(b"order-key"),
                    b"order-key",
                    "10.0.0.5:9082",
                    1_800_000_000
                ),
                Err(CloneRequestError::NoNonce),
                "{nonce:?}"
            );
        }
    }

    #[test]
    fn only_a_donor_holding_the_key_can_answer_a_request() {
        let request = CloneRequest {
            member: "quay-2".into(),
            donor: "10.0.0.5:9082".into(),
            issued_at: 1_800_000_000,
            nonce: NONCE.into(),
        };
        let line = request.streaming_line(b"order-key");
        assert!(
            line.starts_with("streaming ") && !line.contains('\n'),
            "{line}"
        );
        assert_eq!(request.check_streaming(&line, b"order-key"), Ok(()));
        let later = CloneRequest {
            issued_at: 1_800_000_001,
            ..request.clone()
        };
        for (name, answer, key) in [
            ("no proof", "streaming".to_owned(), &b"order-key"[..]),
            ("an empty proof", "streaming ".to_owned(), b"order-key"),
            (
                "another key's",
                request.streaming_line(b"other-key"),
                b"order-key",
            ),
            (
                "another request's",
                later.streaming_line(b"order-key"),
                b"order-key",
            ),
            ("a refusal", "refused: busy".to_owned(), b"order-key"),
        ] {
            assert_eq!(
                request.check_streaming(&answer, key),
                Err(CloneRequestError::DonorUnproven),
                "{name}"
            );
        }
    }

    #[test]
    fn requests_are_signed_dated_bound_to_a_donor_and_checked() {
        let request = CloneRequest {
            member: "quay-2".into(),
            donor: "10.0.0.5:9082".into(),
            issued_at: 1_800_000_000,
            nonce: NONCE.into(),
        };
        let line = request.sign(b"order-key");
        assert!(!line.contains('\n'));
        let verify = |line: &str, key: &[u8], donor: &str, now: i64| {
            CloneRequest::verify(line, key, donor, now)
        };
        assert_eq!(
            verify(&line, b"order-key", "10.0.0.5:9082", 1_800_000_100),
            Ok(request.clone())
        );
        assert_eq!(
            verify(&line, b"other-key", "10.0.0.5:9082", 1_800_000_000),
            Err(CloneRequestError::BadSignature)
        );
        assert_eq!(
            verify(&line, b"order-key", "10.0.0.6:9082", 1_800_000_000),
            Err(CloneRequestError::OtherDonor {
                wanted: "10.0.0.5:9082".into(),
                actual: "10.0.0.6:9082".into()
            })
        );
        assert_eq!(
            verify(&line, b"order-key", "10.0.0.5:9082", 1_800_000_301),
            Err(CloneRequestError::Stale {
                issued_at: 1_800_000_000,
                skew: 301
            })
        );
        assert!(verify(&line, b"order-key", "10.0.0.5:9082", 1_799_999_700).is_ok());
        for (from, to) in [("quay-2", "quay-3"), ("10.0.0.5", "10.0.0.6")] {
            let forged = line.replace(from, to);
            let donor = if from == "quay-2" {
                "10.0.0.5:9082"
            } else {
                "10.0.0.6:9082"
            };
            assert_eq!(
                verify(&forged, b"order-key", donor, 1_800_000_000),
                Err(CloneRequestError::BadSignature)
            );
        }
        assert!(matches!(
            verify("{", b"order-key", "10.0.0.5:9082", 0),
            Err(CloneRequestError::Unreadable(_))
        ));
    }
}
