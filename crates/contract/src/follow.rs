//! A replica's renewal of its primary's lease (`crate::lease`): while a replica receives from
//! its primary, its agent says so to the primary's agent every [`FOLLOW_INTERVAL`], signed with
//! the cluster's order key. A primary the operator cannot reach keeps its lease for as long as
//! enough of its replicas renew it (the operator's heartbeat says how many), so an operator
//! that is away (restarted, its node lost, cut off from the primary alone) no longer stops the
//! writes of a primary its replicas still follow.
//!
//! Why no failover meets a primary its replicas keep. A failover promotes only when at least
//! `reports_needed` of the R replicas report that they do not receive from the primary, and
//! only once each of those last renewed its lease more than a lease and the margin ago (the
//! reports say when, [`crate::member::MemberStatus::followed_ms`]). The primary keeps its
//! lease on renewals from `R - reports_needed + 1` distinct replicas: one more than may be
//! silent at a failover, so one renewal it needs is a reporting replica's, which the operator
//! waits out. Renewals only extend a lease that is held: once it lapsed, and the primary fenced
//! itself, only the operator's heartbeat lifts it, so a replica reconnecting a moment later
//! does not undo the fence. A forced failover, which may leave any number silent, waits until
//! no renewal can hold the lease any more: renewals are taken for at most
//! [`MAX_FOLLOWED_FOR`] after the operator's last heartbeat.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lease::MAX_HEARTBEAT_AGE;
use crate::order::{mac, mac_matches, OrderError};

/// Path on the agent port that takes a `POST`ed renewal.
pub const FOLLOW_PATH: &str = "/lease/follow";
/// Longest renewal body an agent reads.
pub const MAX_FOLLOW_BYTES: usize = 512;
/// How often a replica renews its primary's lease.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);
/// How long after the operator's last heartbeat a primary still takes its replicas'
/// renewals: an operator restarted or upgraded is back well within it, and so is one whose node
/// was lost when its pod tolerates an unreachable node for a minute (the chart's default); and
/// what a forced failover, or one right after an operator's start, may wait for.
pub const MAX_FOLLOWED_FOR: Duration = Duration::from_secs(180);

/// `replica`'s renewal of `primary`'s lease at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Follow {
    pub primary: String,
    pub replica: String,
    pub epoch: u64,
    /// When the replica sent it: milliseconds since the Unix epoch, by its clock.
    pub sent_ms: i64,
}

/// The wire form: the renewal and its HMAC-SHA256 under the order key, hex.
#[derive(Serialize, Deserialize)]
struct Signed {
    primary: String,
    replica: String,
    epoch: u64,
    sent_ms: i64,
    mac: String,
}

/// Why a renewal is not taken, as far as its content says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowRefusal {
    #[error(transparent)]
    Invalid(#[from] OrderError),
    #[error("the renewal is for {0}, not this pod")]
    OtherMember(String),
    #[error(
        "the renewal was stamped {} ms {} this agent's clock (at most {max_ms} ms)",
        off_ms.unsigned_abs(),
        if *off_ms < 0 { "before" } else { "after" }
    )]
    Stale { off_ms: i64, max_ms: u64 },
    #[error("the renewal is not newer than the last one {0} sent")]
    Replayed(String),
}

impl Follow {
    /// What the signature covers: every field, in a form no heartbeat or order shares.
    fn signed_text(&self) -> String {
        format!(
            "bulwark-lease-follow\n{}\n{}\n{}\n{}",
            self.primary, self.replica, self.epoch, self.sent_ms
        )
    }

    /// The renewal as one line of JSON, signed with `key`.
    pub fn sign(&self, key: &[u8]) -> String {
        serde_json::to_string(&Signed {
            primary: self.primary.clone(),
            replica: self.replica.clone(),
            epoch: self.epoch,
            sent_ms: self.sent_ms,
            mac: mac(key, &self.signed_text()),
        })
        .unwrap_or_default()
    }

    /// The renewal a signed line carries, when `key` signed it.
    pub fn verify(line: &str, key: &[u8]) -> Result<Follow, OrderError> {
        let s: Signed =
            serde_json::from_str(line.trim()).map_err(|e| OrderError::Unreadable(e.to_string()))?;
        let follow = Follow {
            primary: s.primary,
            replica: s.replica,
            epoch: s.epoch,
            sent_ms: s.sent_ms,
        };
        if !mac_matches(key, &follow.signed_text(), &s.mac) {
            return Err(OrderError::BadSignature);
        }
        Ok(follow)
    }

    /// Whether `pod` may take this renewal (verified under `key`) at `now_ms` by its clock, its
    /// replica's last one taken having been stamped `last_sent_ms`.
    pub fn accept(
        line: &str,
        key: &[u8],
        pod: &str,
        now_ms: i64,
        last_sent_ms: impl FnOnce(&str) -> Option<i64>,
    ) -> Result<Follow, FollowRefusal> {
        let f = Follow::verify(line, key)?;
        if f.primary != pod {
            return Err(FollowRefusal::OtherMember(f.primary));
        }
        let off_ms = f.sent_ms.saturating_sub(now_ms);
        let max_ms = MAX_HEARTBEAT_AGE.as_millis() as u64;
        if off_ms.unsigned_abs() > max_ms {
            return Err(FollowRefusal::Stale { off_ms, max_ms });
        }
        if last_sent_ms(&f.replica).is_some_and(|last| f.sent_ms <= last) {
            return Err(FollowRefusal::Replayed(f.replica));
        }
        Ok(f)
    }

    /// How long ago, at `now_ms`, the replica sent it (zero when stamped ahead of this clock):
    /// the renewal counts from then, as a heartbeat does.
    pub fn travelled(&self, now_ms: i64) -> Duration {
        Duration::from_millis(u64::try_from(now_ms.saturating_sub(self.sent_ms)).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follow(sent_ms: i64) -> Follow {
        Follow {
            primary: "quay-0".into(),
            replica: "quay-1".into(),
            epoch: 3,
            sent_ms,
        }
    }

    #[test]
    fn renewals_are_taken_only_signed_for_this_pod_fresh_and_newer() {
        let key = b"order key";
        let now = 1_800_000_000_000;
        let line = follow(now - 500).sign(key);
        let never = |_: &str| None;
        assert_eq!(
            Follow::accept(&line, key, "quay-0", now, never),
            Ok(follow(now - 500))
        );
        let refused = |line: &str, key: &[u8], pod: &str, last: Option<i64>| {
            Follow::accept(line, key, pod, now, |_: &str| last).unwrap_err()
        };
        assert_eq!(
            refused(&line, b"other", "quay-0", None),
            FollowRefusal::Invalid(OrderError::BadSignature)
        );
        assert_eq!(
            refused(&line.replace("quay-1", "quay-2"), key, "quay-0", None),
            FollowRefusal::Invalid(OrderError::BadSignature),
            "another replica's name"
        );
        assert_eq!(
            refused(&line, key, "quay-1", None),
            FollowRefusal::OtherMember("quay-0".into())
        );
        assert_eq!(
            refused(&follow(now - 2500).sign(key), key, "quay-0", None),
            FollowRefusal::Stale {
                off_ms: -2500,
                max_ms: 2000
            }
        );
        assert_eq!(
            refused(&line, key, "quay-0", Some(now - 500)),
            FollowRefusal::Replayed("quay-1".into())
        );
        assert!(matches!(
            refused("{", key, "quay-0", None),
            FollowRefusal::Invalid(OrderError::Unreadable(_))
        ));
        assert_eq!(follow(now - 500).travelled(now), Duration::from_millis(500));
        assert_eq!(follow(now + 500).travelled(now), Duration::ZERO);
    }

    #[test]
    fn a_renewal_never_verifies_as_a_heartbeat_or_the_other_way() {
        let key = b"k";
        let beat = crate::lease::Heartbeat {
            member: "quay-0".into(),
            epoch: 3,
            lease_ms: 6000,
            sent_ms: 5,
            followers: 1,
        };
        assert!(Follow::verify(&beat.sign(key), key).is_err());
        assert!(crate::lease::Heartbeat::verify(&follow(5).sign(key), key).is_err());
    }
}
