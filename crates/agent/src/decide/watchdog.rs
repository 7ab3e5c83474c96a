//! What a pass does with the server's own guard on the lease (`sql::watchdog`), where failover
//! needs it: install it; keep the stamp at the lease's end and the event scheduler on while
//! the lease is held; at a read-only replica, remove the stamp and stop the scheduler (events
//! copied from a primary would write beside replication); remove the stamp once failover is
//! off, so that the event never fences a server the agent means to be writable. A primary whose
//! lease lapsed is left alone: its agent's own fence comes first, and the past stamp stays to
//! fence it should the agent stop.

use std::time::Duration;

use bulwark_contract::Engine;

use super::labels::Role;
use super::lease::LeaseState;
use super::sql::WatchdogState;

/// A stamp further than this from the lease's end is written again. Heartbeats move the end
/// every second; a smaller drift is the time between the two readings.
pub const RESTAMP_DRIFT: Duration = Duration::from_millis(250);

/// Whether a stamp with `stamp_left` to run stays for a lease with `lease_left`: never later
/// than the lease, and at most [`RESTAMP_DRIFT`] short of its end.
pub fn stamp_current(stamp_left: Duration, lease_left: Duration) -> bool {
    stamp_left <= lease_left && lease_left - stamp_left <= RESTAMP_DRIFT
}

/// The change a pass makes to the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampChange {
    /// Leave it as it is.
    Keep,
    /// This server may take writes for this much longer (the lease's end, read again when
    /// the stamp is written).
    Set(Duration),
    /// Remove it.
    Clear,
}

/// What a pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogPlan {
    /// Create the table and the event.
    pub install: bool,
    /// The stamp's change.
    pub stamp: StampChange,
    /// Start (`Some(true)`) or stop the event scheduler.
    pub scheduler: Option<bool>,
}

impl WatchdogPlan {
    pub const NOTHING: WatchdogPlan = WatchdogPlan {
        install: false,
        stamp: StampChange::Keep,
        scheduler: None,
    };
}

/// What a pass plans from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogInput<'a> {
    pub engine: Engine,
    /// Automatic failover is on: a primary holds a lease.
    pub lease_required: bool,
    /// The role the pass acts on, `None` when unknown.
    pub role: Option<Role>,
    pub lease: &'a LeaseState,
    pub read_only: bool,
    /// A hold on writes runs (its global read lock would stop the change).
    pub fenced: bool,
    pub state: &'a WatchdogState,
}

/// Whether the pass reads the watchdog at all: not at MySQL (which has none: its agent's fence
/// is all there is), not under a hold on writes, and not at a primary whose lease lapsed.
pub fn looked_at(engine: Engine, role: Option<Role>, lease: &LeaseState, fenced: bool) -> bool {
    engine == Engine::MariaDb
        && !fenced
        && (role == Some(Role::Replica) || lease.lapsed().is_none())
}

/// Whether the stamp is to follow the lease between passes (the agent's keeper task): for a
/// member the pass looked at that is not a replica and holds its lease.
pub fn keeps_stamp(
    engine: Engine,
    lease_required: bool,
    role: Option<Role>,
    lease: &LeaseState,
    fenced: bool,
) -> bool {
    looked_at(engine, role, lease, fenced)
        && lease_required
        && role != Some(Role::Replica)
        && matches!(lease, LeaseState::Held(_))
}

/// The pass's plan.
pub fn plan(i: &WatchdogInput<'_>) -> WatchdogPlan {
    if !looked_at(i.engine, i.role, i.lease, i.fenced) {
        return WatchdogPlan::NOTHING;
    }
    let replica = i.role == Some(Role::Replica);
    let settled_replica = replica && i.read_only;
    let want = match i.lease {
        // A replica's stamp goes once it is read-only; until then a past one may fence it.
        _ if settled_replica => StampChange::Clear,
        _ if replica => StampChange::Keep,
        LeaseState::NotRequired => StampChange::Clear,
        LeaseState::Held(left) => StampChange::Set(*left),
        LeaseState::Lapsed(_) => StampChange::Keep,
    };
    let stamp = match (want, i.state.stamp) {
        (StampChange::Clear, None) => StampChange::Keep,
        // Never later than the lease: only a stamp at most a little short of its end stays.
        (StampChange::Set(left), Some((us, true)))
            if u64::try_from(us).is_ok_and(|us| stamp_current(Duration::from_micros(us), left)) =>
        {
            StampChange::Keep
        }
        (want, _) => want,
    };
    let scheduler = match want {
        StampChange::Set(_) if i.lease_required => Some(true),
        StampChange::Clear if i.lease_required && settled_replica => Some(false),
        _ => None,
    }
    .filter(|on| *on != i.state.scheduler_on);
    WatchdogPlan {
        install: i.lease_required && !i.state.installed(),
        stamp,
        scheduler,
    }
}

#[cfg(test)]
#[path = "watchdog_tests.rs"]
mod tests;
