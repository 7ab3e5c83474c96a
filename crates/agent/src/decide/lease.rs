//! Whether this member, as the primary, holds the operator's lease (`bulwark_contract::lease`):
//! only a lease renewed for the epoch the member is the primary at counts, and only until its
//! time from the heartbeat's receipt is up.

use std::time::Duration;

/// The last lease taken: for which epoch, how long ago, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub epoch: u64,
    pub age: Duration,
    pub lease: Duration,
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
        match g.lease.checked_sub(g.age).filter(|left| !left.is_zero()) {
            Some(left) => LeaseState::Held(left),
            None => LeaseState::Lapsed(format!(
                "the lease lapsed: no heartbeat from the operator within {}s",
                g.lease.as_secs_f64()
            )),
        }
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
        let g = |epoch, age, lease| {
            Some(Granted {
                epoch,
                age: s(age),
                lease: s(lease),
            })
        };
        let cases = [
            ("failover off", false, 3, None, LeaseState::NotRequired),
            ("held", true, 3, g(3, 2, 6), LeaseState::Held(s(4))),
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
                g(3, 0, 6),
                LeaseState::Lapsed(
                    "no lease for epoch 4 (the last heartbeat was for epoch 3)".into(),
                ),
            ),
            (
                "granted for a later epoch",
                true,
                3,
                g(4, 0, 6),
                LeaseState::Lapsed(
                    "no lease for epoch 3 (the last heartbeat was for epoch 4)".into(),
                ),
            ),
            (
                "run out",
                true,
                3,
                g(3, 6, 6),
                LeaseState::Lapsed(
                    "the lease lapsed: no heartbeat from the operator within 6s".into(),
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
            LeaseState::of(true, 3, g(3, 6, 6), Some("it was a replay")),
            LeaseState::Lapsed(
                "the lease lapsed: no heartbeat from the operator within 6s; the last heartbeat \
                 was refused: it was a replay"
                    .into()
            )
        );
        assert_eq!(
            LeaseState::of(true, 3, g(3, 2, 6), Some("it was a replay")),
            LeaseState::Held(s(4))
        );
    }
}
