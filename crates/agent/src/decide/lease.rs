//! Whether this member, as the primary, holds its lease (`bulwark_contract::lease`): only a
//! lease renewed for the epoch the member is the primary at counts, and only until its time is
//! up: from the operator's last heartbeat, or from the renewals of as many of its replicas as
//! the heartbeat asked for (`bulwark_contract::follow`), whichever ends later.

use std::time::{Duration, Instant};

/// The last lease taken, as of now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub epoch: u64,
    /// What is left of it (zero once it ran out).
    pub left: Duration,
    /// Its length, as the operator's heartbeat gave it.
    pub length: Duration,
    /// Replicas whose renewals keep it (0: only the operator's heartbeats do).
    pub followers: u32,
}

/// When a lease whose operator's heartbeat runs out at `heartbeat_end` ends, given when each
/// replica last renewed it (at the lease's epoch, counted from when they were sent): at the
/// heartbeat's end, or `length` after the renewal of the `followers`-th most recent replica
/// when that is later. Whether renewals may still be taken is the caller's (a lapsed lease
/// takes none); this only counts those taken.
pub fn ends(
    heartbeat_end: Instant,
    length: Duration,
    followers: u32,
    mut renewed: Vec<Instant>,
) -> Instant {
    let needed = followers as usize;
    if needed == 0 || renewed.len() < needed {
        return heartbeat_end;
    }
    renewed.sort_unstable_by(|a, b| b.cmp(a));
    heartbeat_end.max(renewed[needed - 1] + length)
}

/// Where the primary's lease stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// Automatic failover is off: the primary needs no lease.
    NotRequired,
    /// Held, for this much longer.
    Held(Duration),
    /// Not held, and why (one line without a running count, so that it does not change every
    /// pass).
    Lapsed(String),
}

impl LeaseState {
    /// Where the lease stands for a primary at `epoch`, given the last one taken and why the
    /// heartbeats since were refused, if they were.
    pub fn of(
        required: bool,
        epoch: u64,
        granted: Option<Granted>,
        refused: Option<&str>,
    ) -> LeaseState {
        match Self::of_granted(required, epoch, granted) {
            LeaseState::Lapsed(why) => LeaseState::Lapsed(match refused {
                Some(kind) => format!("{why}; the last heartbeat was refused: {kind}"),
                None => why,
            }),
            state => state,
        }
    }

    fn of_granted(required: bool, epoch: u64, granted: Option<Granted>) -> LeaseState {
        if !required {
            return LeaseState::NotRequired;
        }
        let Some(g) = granted else {
            return LeaseState::Lapsed(
                "no lease from the operator yet (no heartbeat since the agent started)".into(),
            );
        };
        if g.epoch != epoch {
            return LeaseState::Lapsed(format!(
                "no lease for epoch {epoch} (the last heartbeat was for epoch {})",
                g.epoch
            ));
        }
        if !g.left.is_zero() {
            return LeaseState::Held(g.left);
        }
        let within = g.length.as_secs_f64();
        LeaseState::Lapsed(match g.followers {
            0 => format!("the lease lapsed: no heartbeat from the operator within {within}s"),
            n => format!(
                "the lease lapsed: no heartbeat from the operator, nor renewals from {n} of its \
                 replicas, within {within}s"
            ),
        })
    }

    pub fn lapsed(&self) -> Option<&str> {
        match self {
            LeaseState::Lapsed(why) => Some(why),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_current_lease_for_the_members_epoch_counts() {
        let s = Duration::from_secs;
        let g = |epoch, left, length| {
            Some(Granted {
                epoch,
                left: s(left),
                length: s(length),
                followers: 0,
            })
        };
        let cases = [
            ("failover off", false, 3, None, LeaseState::NotRequired),
            ("held", true, 3, g(3, 4, 6), LeaseState::Held(s(4))),
            (
                "never granted",
                true,
                3,
                None,
                LeaseState::Lapsed(
                    "no lease from the operator yet (no heartbeat since the agent started)".into(),
                ),
            ),
            (
                "granted for the epoch before",
                true,
                4,
                g(3, 6, 6),
                LeaseState::Lapsed(
                    "no lease for epoch 4 (the last heartbeat was for epoch 3)".into(),
                ),
            ),
            (
                "granted for a later epoch",
                true,
                3,
                g(4, 6, 6),
                LeaseState::Lapsed(
                    "no lease for epoch 3 (the last heartbeat was for epoch 4)".into(),
                ),
            ),
            (
                "run out",
                true,
                3,
                g(3, 0, 6),
                LeaseState::Lapsed(
                    "the lease lapsed: no heartbeat from the operator within 6s".into(),
                ),
            ),
            (
                "run out, renewals too",
                true,
                3,
                Some(Granted {
                    followers: 1,
                    ..g(3, 0, 6).unwrap()
                }),
                LeaseState::Lapsed(
                    "the lease lapsed: no heartbeat from the operator, nor renewals from 1 of \
                     its replicas, within 6s"
                        .into(),
                ),
            ),
        ];
        for (name, required, epoch, granted, want) in cases {
            assert_eq!(
                LeaseState::of(required, epoch, granted, None),
                want,
                "{name}"
            );
        }
        assert_eq!(
            LeaseState::of(true, 3, g(3, 0, 6), Some("it was a replay")),
            LeaseState::Lapsed(
                "the lease lapsed: no heartbeat from the operator within 6s; the last heartbeat \
                 was refused: it was a replay"
                    .into()
            )
        );
        assert_eq!(
            LeaseState::of(true, 3, g(3, 4, 6), Some("it was a replay")),
            LeaseState::Held(s(4))
        );
    }

    #[test]
    fn enough_replicas_renewing_outlast_the_operators_heartbeat() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let six = Duration::from_secs(6);
        let heartbeat_end = at(6_000);
        let cases: [(&str, u32, Vec<Instant>, Instant); 7] = [
            ("no renewals asked for", 0, vec![at(9_000)], heartbeat_end),
            ("none came", 1, vec![], heartbeat_end),
            ("one of one", 1, vec![at(9_000)], at(15_000)),
            (
                "the newest counts when one is needed",
                1,
                vec![at(2_000), at(9_000)],
                at(15_000),
            ),
            (
                "two needed: the older of the two newest",
                2,
                vec![at(9_000), at(3_000), at(8_000)],
                at(14_000),
            ),
            ("two needed, one came", 2, vec![at(9_000)], heartbeat_end),
            (
                "renewals older than the heartbeat do not shorten it",
                1,
                vec![at(0)],
                heartbeat_end,
            ),
        ];
        for (name, followers, renewed, want) in cases {
            assert_eq!(ends(heartbeat_end, six, followers, renewed), want, "{name}");
        }
    }
}
