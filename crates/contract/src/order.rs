//! Role orders: how the operator tells a member's agent its role directly, without waiting for
//! the kubelet to refresh the downward-API labels file. Every change of primary raises the
//! cluster's epoch; the operator writes `(role, epoch)` both into the pod's labels and, signed
//! with the cluster's order key, into an order it sends to the agent. The agent acts on the
//! pair with the highest epoch from either source, so a late label can never undo an order,
//! and an order that was replayed or delayed can never undo a newer one.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::labels::Role;

/// Label on server pods: the epoch of the role in [`crate::labels::ROLE`].
pub const EPOCH_LABEL: &str = "mysql.bulwark.dev/epoch";
/// Path on the agent port that takes a `POST`ed order.
pub const ORDER_PATH: &str = "/role";
/// Key of the order key in the cluster's generated Secret, and its file name in the credentials
/// directory of the server pods.
pub const ORDER_KEY: &str = "orders";
/// Longest order body an agent reads.
pub const MAX_ORDER_BYTES: usize = 1024;
/// Longest an agent waits to have acted on an order before it answers.
pub const ORDER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A role with the epoch it was given at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub role: Role,
    pub epoch: u64,
}

impl Standing {
    /// The standing that wins: the higher epoch; at the same epoch (which the operator never
    /// gives two roles) the replica, which is the safe one.
    pub fn newest(a: Option<Standing>, b: Option<Standing>) -> Option<Standing> {
        match (a, b) {
            (Some(a), Some(b)) if a.epoch != b.epoch => Some(if a.epoch > b.epoch { a } else { b }),
            (Some(a), Some(b)) => Some(if a.role == Role::Replica { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// The epoch a label value gives; a pod without the label is at epoch 0.
pub fn epoch_from_label(value: Option<&str>) -> Option<u64> {
    match value {
        None => Some(0),
        Some(v) => v.parse().ok(),
    }
}

/// One member's role at an epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleOrder {
    /// The pod the order is for: an order is refused by any other.
    pub member: String,
    pub role: Role,
    pub epoch: u64,
    /// For a replica: the host of the primary to replicate from (its pod's own address, which
    /// is right at once, where the primary Service follows a change only after a moment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The wire form: the order and its HMAC-SHA256 under the order key, hex.
#[derive(Serialize, Deserialize)]
struct Signed {
    member: String,
    role: Role,
    epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    mac: String,
}

/// Why an order was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("it is not readable: {0}")]
    Unreadable(String),
    #[error("its signature does not match")]
    BadSignature,
}

impl RoleOrder {
    /// What the signature covers: every field, unambiguously.
    fn signed_text(&self) -> String {
        format!(
            "bulwark-role-order\n{}\n{}\n{}\n{}",
            self.member,
            self.role,
            self.epoch,
            self.source.as_deref().unwrap_or("")
        )
    }

    /// The order as one line of JSON, signed with `key`.
    pub fn sign(&self, key: &[u8]) -> String {
        let mac = mac(key, &self.signed_text());
        serde_json::to_string(&Signed {
            member: self.member.clone(),
            role: self.role,
            epoch: self.epoch,
            source: self.source.clone(),
            mac,
        })
        .unwrap_or_default()
    }

    /// The order a signed line carries, when `key` signed it.
    pub fn verify(line: &str, key: &[u8]) -> Result<RoleOrder, OrderError> {
        let signed: Signed =
            serde_json::from_str(line.trim()).map_err(|e| OrderError::Unreadable(e.to_string()))?;
        let order = RoleOrder {
            member: signed.member,
            role: signed.role,
            epoch: signed.epoch,
            source: signed.source,
        };
        if !mac_matches(key, &order.signed_text(), &signed.mac) {
            return Err(OrderError::BadSignature);
        }
        Ok(order)
    }

    pub fn standing(&self) -> Standing {
        Standing {
            role: self.role,
            epoch: self.epoch,
        }
    }
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| -> [u8; BLOCK] { std::array::from_fn(|i| block[i] ^ byte) };
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// The HMAC-SHA256 of `text` under `key`, hex: what every signed line of the contract carries.
pub(crate) fn mac(key: &[u8], text: &str) -> String {
    hex(&hmac_sha256(key, text.as_bytes()))
}

/// Whether `given` is the MAC of `text` under `key` (compared in constant time).
pub(crate) fn mac_matches(key: &[u8], text: &str, given: &str) -> bool {
    constant_time_eq(mac(key, text).as_bytes(), given.as_bytes())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than the block).
        let cases: [(&[u8], &[u8], &str); 3] = [
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
        ];
        for (key, message, want) in cases {
            assert_eq!(hex(&hmac_sha256(key, message)), want);
        }
    }

    #[test]
    fn orders_verify_only_under_their_key_and_unchanged() {
        let order = RoleOrder {
            member: "quay-1".into(),
            role: Role::Replica,
            epoch: 7,
            source: Some("quay-0.quay-headless".into()),
        };
        let line = order.sign(b"key one");
        assert!(!line.contains('\n'));
        assert_eq!(RoleOrder::verify(&line, b"key one"), Ok(order.clone()));
        assert_eq!(
            RoleOrder::verify(&line, b"key two"),
            Err(OrderError::BadSignature)
        );
        for (from, to) in [
            ("\"quay-1\"", "\"quay-2\""),
            ("\"replica\"", "\"primary\""),
            (":7,", ":8,"),
            ("quay-0.quay", "quay-2.quay"),
        ] {
            let forged = line.replace(from, to);
            assert_ne!(forged, line, "{from}");
            assert_eq!(
                RoleOrder::verify(&forged, b"key one"),
                Err(OrderError::BadSignature),
                "{forged}"
            );
        }
        assert!(matches!(
            RoleOrder::verify("{\"member\":\"quay-1\"}", b"key one"),
            Err(OrderError::Unreadable(_))
        ));
    }

    #[test]
    fn the_newest_standing_wins_and_a_tie_is_a_replica() {
        let s = |role, epoch| Some(Standing { role, epoch });
        let cases = [
            (
                s(Role::Primary, 1),
                s(Role::Replica, 2),
                s(Role::Replica, 2),
            ),
            (
                s(Role::Primary, 3),
                s(Role::Replica, 2),
                s(Role::Primary, 3),
            ),
            (
                s(Role::Primary, 2),
                s(Role::Replica, 2),
                s(Role::Replica, 2),
            ),
            (
                s(Role::Replica, 2),
                s(Role::Primary, 2),
                s(Role::Replica, 2),
            ),
            (None, s(Role::Primary, 0), s(Role::Primary, 0)),
            (s(Role::Replica, 4), None, s(Role::Replica, 4)),
            (None, None, None),
        ];
        for (a, b, want) in cases {
            assert_eq!(Standing::newest(a, b), want, "{a:?} {b:?}");
        }
    }

    #[test]
    fn epoch_labels() {
        assert_eq!(epoch_from_label(None), Some(0));
        assert_eq!(epoch_from_label(Some("12")), Some(12));
        assert_eq!(epoch_from_label(Some("-1")), None);
        assert_eq!(epoch_from_label(Some("")), None);
    }
}
