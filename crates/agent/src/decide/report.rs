//! What a member reports on `/status` (`bulwark_contract::member`), built from a pass's role,
//! observation and decision.

use std::time::Duration;

use bulwark_contract::member::{MemberReplication, MemberStatus};
use bulwark_contract::order::Standing;

use super::topology::{Decision, Observed};

/// What a replica's agent found of the way to its primary's server, as of its pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceContact {
    /// How long its reads have failed with no answer.
    pub unreachable: Option<Duration>,
    /// How long ago the last read the server answered got its answer.
    pub heard_ago: Option<Duration>,
    /// The failures were begun by a read still unanswered, which may yet be answered.
    pub provisional: bool,
}

impl SourceContact {
    /// The same, `by` later. A provisional run of failures is not aged: its read may have been
    /// answered meanwhile, which only the next pass learns.
    pub fn aged(self, by: Duration) -> SourceContact {
        SourceContact {
            unreachable: match self.provisional {
                true => self.unreachable,
                false => self.unreachable.map(|d| d + by),
            },
            heard_ago: self.heard_ago.map(|d| d + by),
            provisional: self.provisional,
        }
    }
}

/// The report of `/status` from a pass's role, observation and decision; `source`: what a
/// replica's agent found of the way to its primary.
pub fn member_status(
    role: Option<Standing>,
    o: &Observed,
    decision: &Decision,
    clone_port: u16,
    writes_held: bool,
    handover_pending: bool,
    source: SourceContact,
) -> MemberStatus {
    MemberStatus {
        writes_held,
        handover_pending,
        role: role.map(|r| r.role),
        epoch: role.map_or(0, |r| r.epoch),
        ready: decision.ready,
        reason: decision.reason.clone(),
        engine: o.engine,
        read_only: o.read_only,
        super_read_only: o.super_read_only,
        gtid_executed: o.gtid_logged.clone(),
        gtid_history: o.gtid_history.clone(),
        clone_port,
        semi_sync_wait: o.semi_sync_wait,
        semi_sync_clients: o.semi_sync_clients,
        replication: o.replication.as_ref().map(|r| MemberReplication {
            source_host: r.source_host.clone(),
            source_port: r.source_port,
            io: r.io,
            sql_running: r.sql_running,
            relay_applied: r.relay_applied,
            sql_caught_up: r.sql_caught_up,
            io_errno: r.io_errno,
            sql_errno: r.sql_errno,
            lag_seconds: r.lag_seconds,
            received: r.received.clone(),
            source_unreachable_seconds: source.unreachable.map(|d| d.as_secs()),
            // Aged further when the report is served.
            source_heard_ms: source
                .heard_ago
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }),
        age_ms: 0,
        takes_follows: true,
        // Counted when the report is served.
        followed_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provisional_run_of_failures_is_not_aged_when_served() {
        let s = Duration::from_secs;
        let contact = |provisional| SourceContact {
            unreachable: Some(s(2)),
            heard_ago: Some(s(4)),
            provisional,
        };
        let confirmed = contact(false).aged(s(1));
        assert_eq!(
            (confirmed.unreachable, confirmed.heard_ago),
            (Some(s(3)), Some(s(5)))
        );
        let provisional = contact(true).aged(s(1));
        assert_eq!(
            (provisional.unreachable, provisional.heard_ago),
            (Some(s(2)), Some(s(5)))
        );
    }
}
