//! The primary's lease: with automatic failover on, a primary takes writes only while it holds a
//! lease that the operator renews with signed, time-stamped heartbeats; once the lease lapses,
//! its agent fences the server (client sessions ended, read-only) on its own. The operator
//! promotes another member only once every lease it may have granted has surely lapsed and the
//! old primary has had time to fence itself, so a primary cut off from the operator never takes
//! writes beside a new one.
//!
//! The bound rests on two checks. The agent counts a lease from when it received the heartbeat,
//! on its own monotonic clock, less the time the heartbeat spent on the way by its stamp; it
//! refuses one stamped more than [`MAX_HEARTBEAT_AGE`] away from its wall clock, or not newer
//! than the last one it took, so a delayed or replayed heartbeat renews nothing. So a lease
//! ends by `sent + seconds`, give or take how far the clocks disagree ([`CLOCK_SKEW`]). The
//! operator counts from when it sent its last heartbeat that may have reached the agent (one
//! whose connection was never made cannot have) and promotes nobody before
//! `sent + seconds + LEASE_MARGIN`: the rest of the margin is the agent's time to fence.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::order::{mac, mac_matches, OrderError};

/// Path on the agent port that takes a `POST`ed heartbeat.
pub const LEASE_PATH: &str = "/lease";
/// Longest heartbeat body an agent reads.
pub const MAX_HEARTBEAT_BYTES: usize = 512;
/// How often the operator renews a primary's lease.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Oldest (or furthest in the future) a heartbeat's stamp may be by the agent's clock.
pub const MAX_HEARTBEAT_AGE: Duration = Duration::from_secs(2);
/// How far the nodes' clocks may disagree for the bound to hold (NTP keeps them far closer).
pub const CLOCK_SKEW: Duration = Duration::from_secs(1);
/// Time after a lease lapses by the operator's count before a failover may promote: the
/// clocks' disagreement ([`CLOCK_SKEW`]) and the agent's fencing (its sessions ended and
/// `read_only` set).
pub const LEASE_MARGIN: Duration = Duration::from_secs(4);
/// The shortest lease granted: several heartbeats long, so that one late heartbeat does not
/// fence a primary that is in reach.
pub const MIN_LEASE: Duration = Duration::from_secs(4);
/// The lease of a primary whose pod still runs with `--primary-lease` while automatic failover
/// is off (until its pod is rolled without it): nothing is promoted then, so its length only
/// says how long the operator may be away.
pub const LEASE_WITHOUT_FAILOVER: Duration = Duration::from_secs(60);

/// The table where a MariaDB primary's agent stamps until when the server may take writes; an
/// event in the server fences it once the stamp is past, should the agent be down. Logical
/// backups leave it out: it describes the server, not the data.
pub const WATCHDOG_TABLE: &str = "mysql.bulwark_lease";

/// The lease a primary is granted when a replica takes over after `failover_after`: short
/// enough that it lapses, and the primary fences itself, before the takeover time is up.
/// `None` when automatic failover is off (a primary then needs no lease).
pub fn lease_for(failover_after: Duration) -> Option<Duration> {
    (!failover_after.is_zero()).then(|| failover_after.saturating_sub(LEASE_MARGIN).max(MIN_LEASE))
}

/// One renewal of `member`'s lease as the primary at `epoch`, for `seconds` from its receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub member: String,
    pub epoch: u64,
    /// Length of the lease, in milliseconds.
    pub lease_ms: u64,
    /// When the operator sent it: milliseconds since the Unix epoch, by its clock.
    pub sent_ms: i64,
    /// How many of its replicas must renew the lease (`crate::follow`) for it to outlast the
    /// operator's heartbeats: 0, none may (an operator that predates them, or a primary whose
    /// agent does not take them).
    pub followers: u32,
}

/// The wire form: the heartbeat and its HMAC-SHA256 under the order key, hex.
#[derive(Serialize, Deserialize)]
struct Signed {
    member: String,
    epoch: u64,
    lease_ms: u64,
    sent_ms: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    followers: u32,
    mac: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Why a heartbeat renews nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatRefusal {
    #[error(transparent)]
    Invalid(#[from] OrderError),
    #[error("the heartbeat is for {0}, not this pod")]
    OtherMember(String),
    #[error(
        "the heartbeat was stamped {} ms {} this agent's clock (at most {max_ms} ms): the \
         clocks disagree or it was held up on the way",
        off_ms.unsigned_abs(),
        if *off_ms < 0 { "before" } else { "after" }
    )]
    Stale { off_ms: i64, max_ms: u64 },
    #[error("the heartbeat is not newer than the last one taken")]
    Replayed,
    #[error("the heartbeat is for epoch {got}, older than the last one taken ({have})")]
    OlderEpoch { got: u64, have: u64 },
}

impl HeartbeatRefusal {
    /// What went wrong, in words that do not change from one heartbeat to the next (for a
    /// readiness reason, which should not change every second).
    pub fn kind(&self) -> &'static str {
        match self {
            HeartbeatRefusal::Invalid(OrderError::Unreadable(_)) => "it was unreadable",
            HeartbeatRefusal::Invalid(OrderError::BadSignature) => {
                "it was not signed with this cluster's order key"
            }
            HeartbeatRefusal::OtherMember(_) => "it was for another pod",
            HeartbeatRefusal::Stale { .. } => {
                "its stamp was more than 2 s away from this agent's clock (do the nodes' clocks \
                 agree?)"
            }
            HeartbeatRefusal::Replayed => "it was a replay",
            HeartbeatRefusal::OlderEpoch { .. } => "it was for an older epoch",
        }
    }
}

/// The last heartbeat a member took: its stamp and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastTaken {
    pub sent_ms: i64,
    pub epoch: u64,
}

impl Heartbeat {
    /// What the signature covers: every field, unambiguously, apart from role orders. The
    /// followers' count only when there is one, so that an agent of the release before (which
    /// the operator never asks to take renewals) verifies the heartbeats it gets.
    fn signed_text(&self) -> String {
        let text = format!(
            "bulwark-lease-heartbeat\n{}\n{}\n{}\n{}",
            self.member, self.epoch, self.lease_ms, self.sent_ms
        );
        match self.followers {
            0 => text,
            n => format!("{text}\nfollowers {n}"),
        }
    }

    /// The heartbeat as one line of JSON, signed with `key`.
    pub fn sign(&self, key: &[u8]) -> String {
        serde_json::to_string(&Signed {
            member: self.member.clone(),
            epoch: self.epoch,
            lease_ms: self.lease_ms,
            sent_ms: self.sent_ms,
            followers: self.followers,
            mac: mac(key, &self.signed_text()),
        })
        .unwrap_or_default()
    }

    /// The heartbeat a signed line carries, when `key` signed it.
    pub fn verify(line: &str, key: &[u8]) -> Result<Heartbeat, OrderError> {
        let s: Signed =
            serde_json::from_str(line.trim()).map_err(|e| OrderError::Unreadable(e.to_string()))?;
        let heartbeat = Heartbeat {
            member: s.member,
            epoch: s.epoch,
            lease_ms: s.lease_ms,
            sent_ms: s.sent_ms,
            followers: s.followers,
        };
        if !mac_matches(key, &heartbeat.signed_text(), &s.mac) {
            return Err(OrderError::BadSignature);
        }
        Ok(heartbeat)
    }

    /// Whether `pod` may take this heartbeat (verified under `key`) at `now_ms` by its clock,
    /// having last taken `last`: never an older epoch's, and never one not newer.
    pub fn accept(
        line: &str,
        key: &[u8],
        pod: &str,
        now_ms: i64,
        last: Option<LastTaken>,
    ) -> Result<Heartbeat, HeartbeatRefusal> {
        let h = Heartbeat::verify(line, key)?;
        if h.member != pod {
            return Err(HeartbeatRefusal::OtherMember(h.member));
        }
        let off_ms = h.sent_ms.saturating_sub(now_ms);
        let max_ms = MAX_HEARTBEAT_AGE.as_millis() as u64;
        if off_ms.unsigned_abs() > max_ms {
            return Err(HeartbeatRefusal::Stale { off_ms, max_ms });
        }
        if let Some(last) = last {
            if h.sent_ms <= last.sent_ms {
                return Err(HeartbeatRefusal::Replayed);
            }
            if h.epoch < last.epoch {
                return Err(HeartbeatRefusal::OlderEpoch {
                    got: h.epoch,
                    have: last.epoch,
                });
            }
        }
        Ok(h)
    }

    /// The lease's length.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// What is left of the lease when it is taken at `now_ms`: its length less the time it
    /// spent on the way, so that it ends by its sender's count (give or take the clocks'
    /// disagreement), however late it came.
    pub fn left_at(&self, now_ms: i64) -> Duration {
        let travelled = u64::try_from(now_ms.saturating_sub(self.sent_ms)).unwrap_or(0);
        self.lease()
            .saturating_sub(Duration::from_millis(travelled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(sent_ms: i64) -> Heartbeat {
        Heartbeat {
            member: "quay-0".into(),
            epoch: 3,
            lease_ms: 6000,
            sent_ms,
            followers: 0,
        }
    }

    #[test]
    fn the_lease_lapses_before_the_takeover_time_is_up() {
        let s = Duration::from_secs;
        assert_eq!(lease_for(s(0)), None);
        assert_eq!(lease_for(s(10)), Some(s(6)));
        assert_eq!(lease_for(s(30)), Some(s(26)));
        // Shorter takeover times still get a usable lease; the failover waits for its bound.
        assert_eq!(lease_for(s(3)), Some(MIN_LEASE));
        for after in 8..100 {
            let lease = lease_for(s(after)).unwrap();
            assert!(lease + LEASE_MARGIN <= s(after), "{after}");
        }
        // The margin covers the clocks' disagreement and leaves the agent time to fence.
        assert!(LEASE_MARGIN >= CLOCK_SKEW + Duration::from_secs(3));
    }

    #[test]
    fn heartbeats_are_taken_only_signed_for_this_pod_fresh_and_newer() {
        let key = b"order key";
        let now = 1_800_000_000_000;
        let line = beat(now - 500).sign(key);
        let last = |sent_ms, epoch| Some(LastTaken { sent_ms, epoch });
        assert_eq!(
            Heartbeat::accept(&line, key, "quay-0", now, last(now - 1500, 3)),
            Ok(beat(now - 500))
        );
        type Case<'a> = (&'a str, String, &'a [u8], &'a str, i64, Option<LastTaken>);
        let cases: [Case; 8] = [
            ("another key", line.clone(), b"other", "quay-0", now, None),
            (
                "edited lease",
                line.replace("6000", "60000"),
                key,
                "quay-0",
                now,
                None,
            ),
            ("another pod", line.clone(), key, "quay-1", now, None),
            (
                "held up on the way",
                beat(now - 2500).sign(key),
                key,
                "quay-0",
                now,
                None,
            ),
            (
                "stamped ahead",
                beat(now + 2500).sign(key),
                key,
                "quay-0",
                now,
                None,
            ),
            (
                "replayed",
                line.clone(),
                key,
                "quay-0",
                now,
                last(now - 500, 3),
            ),
            (
                "an older epoch's",
                line.clone(),
                key,
                "quay-0",
                now,
                last(now - 1500, 4),
            ),
            ("unreadable", "{".into(), key, "quay-0", now, None),
        ];
        for (name, line, key, pod, now, last) in cases {
            let refused = Heartbeat::accept(&line, key, pod, now, last);
            assert!(refused.is_err(), "{name}: {refused:?}");
        }
        let stale = Heartbeat::accept(&beat(now - 2500).sign(key), key, "quay-0", now, None)
            .unwrap_err()
            .to_string();
        assert!(stale.contains("stamped 2500 ms before"), "{stale}");
    }

    #[test]
    fn a_lease_ends_by_its_senders_count() {
        let sent = 1_800_000_000_000;
        let ms = Duration::from_millis;
        assert_eq!(beat(sent).left_at(sent + 1500), ms(4500));
        // Stamped ahead of this clock: never longer than granted.
        assert_eq!(beat(sent).left_at(sent - 800), ms(6000));
        assert_eq!(beat(sent).left_at(sent + 7000), Duration::ZERO);
    }

    #[test]
    fn the_followers_count_is_signed_and_absent_when_zero() {
        let key = b"k";
        let plain = beat(5).sign(key);
        // What the release before signed and read: no such field, the same text.
        assert!(!plain.contains("followers"), "{plain}");
        let with = Heartbeat {
            followers: 2,
            ..beat(5)
        };
        let line = with.sign(key);
        assert_eq!(Heartbeat::verify(&line, key), Ok(with));
        for edited in [
            line.replace("\"followers\":2", "\"followers\":1"),
            line.replace(",\"followers\":2", ""),
        ] {
            assert_eq!(
                Heartbeat::verify(&edited, key),
                Err(OrderError::BadSignature),
                "{edited}"
            );
        }
    }

    #[test]
    fn a_heartbeat_never_verifies_as_an_order_or_the_other_way() {
        let key = b"k";
        let order = crate::order::RoleOrder {
            member: "quay-0".into(),
            role: crate::Role::Primary,
            epoch: 3,
            source: None,
        };
        assert!(Heartbeat::verify(&order.sign(key), key).is_err());
        assert!(crate::order::RoleOrder::verify(&beat(5).sign(key), key).is_err());
    }
}
