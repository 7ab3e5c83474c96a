//! Whether the pod's stop waits for a hand-over: the mark its preStop hooks wait on
//! (`bulwark_contract::paths::HANDOVER_FILE`), from what a pass observed. Pure.

use std::time::{Duration, Instant};

/// How long the mark stays after the server stopped needing it: the operator confirms a
/// switchover by reading the demoted primary's read-only report at the new epoch, so the agent
/// must still answer a few of its passes after the demotion.
pub const LINGER: Duration = Duration::from_secs(5);

/// Whether the server needs its pod kept while its role is handed over: it holds writes after
/// a demotion, or replicas read from it while it is the primary or still writable (a demotion
/// whose read_only failed).
pub fn pending(primary: bool, read_only: bool, replicas_attached: u32, writes_held: bool) -> bool {
    writes_held || (replicas_attached > 0 && (primary || !read_only))
}

/// Whether the mark shows at `now`, given when the server last needed it.
pub fn shown(last_pending: Option<Instant>, now: Instant) -> bool {
    last_pending.is_some_and(|at| now.saturating_duration_since(at) < LINGER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_cases() {
        let cases = [
            ("a primary replicas read from", true, false, 1, false, true),
            (
                "a primary no replica reads from",
                true,
                false,
                0,
                false,
                false,
            ),
            ("a replica", false, true, 0, false, false),
            (
                "a demoted primary holding its writes",
                false,
                true,
                0,
                true,
                true,
            ),
            (
                "a demoted primary still writable with a replica",
                false,
                false,
                1,
                false,
                true,
            ),
            (
                "a demoted primary read-only with a replica left",
                false,
                true,
                1,
                false,
                false,
            ),
        ];
        for (name, primary, read_only, attached, held, want) in cases {
            assert_eq!(pending(primary, read_only, attached, held), want, "{name}");
        }
    }

    #[test]
    fn the_mark_lingers_after_the_need() {
        let now = Instant::now();
        assert!(!shown(None, now), "never needed");
        assert!(shown(Some(now), now), "needed now");
        assert!(shown(Some(now), now + LINGER / 2), "needed a moment ago");
        assert!(!shown(Some(now), now + LINGER), "needed long ago");
    }
}
