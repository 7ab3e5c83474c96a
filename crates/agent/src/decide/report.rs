//! What a member reports on `/status` (`bulwark_contract::member`), built from a pass's role,
//! observation and decision.

use std::time::Duration;

use bulwark_contract::member::{MemberReplication, MemberStatus};
use bulwark_contract::order::Standing;

use super::topology::{Decision, Observed};

/// The report of `/status` from a pass's role, observation and decision; `source_unreachable`:
/// how long a replica's agent has failed to reach its primary.
pub fn member_status(
    role: Option<Standing>,
    o: &Observed,
    decision: &Decision,
    clone_port: u16,
    writes_held: bool,
    handover_pending: bool,
    source_unreachable: Option<Duration>,
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
            source_unreachable_seconds: source_unreachable.map(|d| d.as_secs()),
        }),
        age_ms: 0,
        takes_follows: true,
        // Counted when the report is served.
        followed_ms: None,
    }
}
