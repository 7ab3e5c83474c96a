//! Standard `metav1.Condition`s: built deterministically, with `lastTransitionTime` kept unless
//! the status flips, so that writing a status does not by itself cause another change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// What a condition should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
}

impl Desired {
    /// A condition of `type_` with the given status, reason and message.
    pub fn new(
        type_: &'static str,
        status: Status,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// The condition to write: `desired`, stamped with `generation`, keeping the previous
/// `lastTransitionTime` when the status did not change.
pub fn stamp(
    desired: &Desired,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let prev = previous.iter().find(|c| c.type_ == desired.type_);
    let last_transition_time = match prev {
        Some(p) if p.status == desired.status.as_str() => p.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: desired.type_.to_owned(),
        status: desired.status.as_str().to_owned(),
        reason: desired.reason.to_owned(),
        message: desired.message.clone(),
        observed_generation: generation,
        last_transition_time,
    }
}

/// Whether `type_` flipped status between `previous` and `desired` (absent counts as Unknown).
pub fn flipped(desired: &Desired, previous: &[Condition]) -> bool {
    let before = previous
        .iter()
        .find(|c| c.type_ == desired.type_)
        .map(|c| c.status.as_str())
        .unwrap_or("Unknown");
    before != desired.status.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn at(secs: i64) -> Time {
        Time(Utc.timestamp_opt(secs, 0).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let d = Desired::new("Ready", Status::False, "Starting", "0 of 3 instances ready");
        let first = stamp(&d, Some(1), &[], &at(10));
        assert_eq!(first.last_transition_time, at(10));
        let d2 = Desired::new("Ready", Status::False, "Starting", "1 of 3 instances ready");
        let second = stamp(&d2, Some(2), std::slice::from_ref(&first), &at(20));
        assert_eq!(second.last_transition_time, at(10));
        assert_eq!(second.observed_generation, Some(2));
        assert!(!flipped(&d2, std::slice::from_ref(&first)));
        let d3 = Desired::new(
            "Ready",
            Status::True,
            "AllInstancesReady",
            "3 of 3 instances ready",
        );
        assert!(flipped(&d3, std::slice::from_ref(&second)));
        assert_eq!(
            stamp(&d3, Some(2), &[second], &at(30)).last_transition_time,
            at(30)
        );
    }
}
