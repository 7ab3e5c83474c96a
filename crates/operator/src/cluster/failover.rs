//! Automatic failover as a pure decision: from the members' reports, whether the primary is
//! lost, and once it has been for the configured time, which replica takes over.
//!
//! A commit the primary acknowledged is on at least `acks` replicas (semi-sync), so a choice is
//! lossless only when enough replicas report that no set of `acks` silent ones could hold a
//! commit the reporting ones lack: with R replicas, R - acks + 1 must report. Then the chosen
//! replica is one that received every transaction any of them received (by GTID, applied or
//! not: a promotion applies the relay log first), and whose applier has not failed. Otherwise
//! the cluster waits and says why; a human who knows the silent members are gone for good can
//! force the choice with [`FORCE_FAILOVER_ANNOTATION`], which is recorded. In every case the
//! lost primary's lease must have lapsed first, so that it has fenced itself: the one the
//! operator's heartbeats granted, and the one its replicas' renewals may keep
//! (`bulwark_contract::follow`, [`followers_needed`]).

use std::time::Duration;

use bulwark_contract::gtid;
use bulwark_contract::lease::{lease_for, LEASE_MARGIN, MIN_LEASE};
use bulwark_contract::member::MemberStatus;
use bulwark_contract::semisync::SemiSync;
use bulwark_contract::Engine;
use bulwark_contract::Role;

pub use bulwark_api::cluster::FORCE_FAILOVER_ANNOTATION;

use super::renewals;
use super::roles::{shown, MemberView};

/// What to do about the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failover {
    /// The primary is there (or nothing can be known about a takeover).
    Healthy,
    /// The primary is lost; nothing is done yet, for `reason`.
    Waiting(String),
    /// Promote `to`.
    Promote {
        /// The replica's pod.
        to: String,
        /// Why, for the event.
        reason: String,
        /// The force-failover annotation's value this failover answers, if one was pending
        /// (whether or not the reports alone allowed the choice): it is not taken again.
        request: Option<String>,
    },
}

/// Replicas that must report before a choice is lossless under `semi`: with fewer, `acks`
/// silent replicas could hold an acknowledged commit no reporting replica has. `None` under
/// asynchronous replication, where no number suffices (a commit may be on the primary alone).
pub fn reports_needed(semi: &SemiSync) -> Option<usize> {
    let replicas = semi.members.saturating_sub(1) as usize;
    (semi.waits()).then(|| replicas.saturating_sub(semi.acks as usize) + 1)
}

/// How many replicas' renewals keep a primary's lease when the operator's heartbeats no longer
/// come (`bulwark_contract::follow`): one more than may be silent when a failover is decided
/// without a human (R replicas, of which [`reports_needed`] must report, any one under
/// asynchronous replication), so that a renewal the primary needs is always a reporting
/// replica's, whose last renewal the failover waits out. 0 for a single member, which has no
/// replica and is never failed over.
pub fn followers_needed(semi: &SemiSync) -> u32 {
    let replicas = semi.members.saturating_sub(1) as usize;
    if replicas == 0 {
        return 0;
    }
    let reporting = reports_needed(semi).unwrap_or(1).clamp(1, replicas);
    u32::try_from(replicas - reporting + 1).unwrap_or(u32::MAX)
}

/// When fewer replicas report than `semi` needs for a lossless choice: that number, and which
/// are silent, as a message.
fn too_few_report(
    semi: &SemiSync,
    primary: &str,
    members: &[MemberView],
    reporting: &[(&str, &MemberStatus)],
) -> Option<(usize, String)> {
    let needed = reports_needed(semi).filter(|n| reporting.len() < *n)?;
    let silent: Vec<&str> = members
        .iter()
        .filter(|m| m.pod != primary && !reporting.iter().any(|(p, _)| *p == m.pod))
        .map(|m| m.pod.as_str())
        .collect();
    let acks = semi.acks;
    Some((
        needed,
        format!(
            "{} of {} replicas report ({} silent or missing), and a commit acknowledged by {acks} \
             replica{} may be on those alone",
            reporting.len(),
            semi.members.saturating_sub(1),
            if silent.is_empty() {
                "the others".to_owned()
            } else {
                silent.join(", ")
            },
            if acks == 1 { "" } else { "s" },
        ),
    ))
}

/// A force-failover request: the pod named by the annotation's value (before any `@suffix`),
/// unless that value already forced a failover (`status.lastFailover.request`).
pub fn forced_request<'a>(
    annotation: Option<&'a str>,
    taken: Option<&str>,
) -> Option<(&'a str, &'a str)> {
    let value = annotation.map(str::trim).filter(|v| !v.is_empty())?;
    if taken == Some(value) {
        return None;
    }
    let pod = value.split('@').next().unwrap_or(value);
    Some((value, pod))
}

/// Why the primary counts as lost, if it does: its agent gives no report, and no reporting
/// replica is receiving (from it or anyone). A replica still receiving means the old primary's
/// server runs and serves it: only its agent or the path to it failed, and promoting another
/// member would make two primaries. A replica whose agent has failed for a while to reach the
/// primary's server no longer counts, whatever its receiver says: a receiver learns that its
/// stream died only after `slave_net_timeout` and a reconnection, the agent within seconds.
pub fn primary_lost(primary: &str, members: &[MemberView]) -> Option<String> {
    let why = match members.iter().find(|m| m.pod == primary) {
        None => format!("pod {primary} does not exist"),
        Some(m) => match &m.report {
            Ok(_) => return None,
            Err(e) => format!("{primary} does not report: {e}"),
        },
    };
    let replicas: Vec<_> = members
        .iter()
        .filter(|m| m.pod != primary)
        .filter_map(|m| m.report.as_ref().ok().map(|r| (m, r)))
        .collect();
    if replicas.is_empty() {
        return None;
    }
    if let Some((m, _)) = replicas
        .iter()
        .find(|(_, r)| r.replication.as_ref().is_some_and(|rep| rep.receiving()))
    {
        tracing::debug!(primary, receiving = %m.pod, "primary unreachable but a replica still receives");
        return None;
    }
    Some(why)
}

/// What a failover decision is made under.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub engine: Engine,
    /// The cluster's semi-synchronous replication (members and acknowledgements).
    pub semi_sync: SemiSync,
    /// The configured time before a takeover (zero: never).
    pub after: Duration,
    /// A pending force-failover request: the annotation's value and the pod it names.
    pub forced: Option<(&'a str, &'a str)>,
    /// How long the lost primary may still hold a lease the operator granted it, and fence
    /// itself after it (`Leases::outstanding_any`): nothing is promoted before it is zero.
    pub lease_outstanding: Duration,
    /// What its replicas' renewals may still keep of such a lease.
    pub renewals: RenewalTerms,
}

pub use super::renewals::RenewalTerms;

/// Decides. `lost_for`: how long the primary has been lost (`None`: it is not).
pub fn decide(
    rules: &Rules<'_>,
    primary: &str,
    members: &[MemberView],
    lost_for: Option<Duration>,
) -> Failover {
    let (engine, after) = (rules.engine, rules.after);
    let Some(lost_for) = lost_for else {
        return Failover::Healthy;
    };
    let Some(why) = primary_lost(primary, members) else {
        return Failover::Healthy;
    };
    if after.is_zero() {
        return Failover::Waiting(format!("{why}; automatic failover is off"));
    }
    if lost_for < after {
        // No running count in the message: the status would change every second, and every
        // change wakes the controller again.
        return Failover::Waiting(format!(
            "{why}; a replica takes over once it has been lost for {}s (status.primaryLostSince)",
            after.as_secs()
        ));
    }
    if !rules.lease_outstanding.is_zero() {
        // Also for a forced failover: the human knows the node is gone, not that the lease is.
        return Failover::Waiting(format!(
            "{why}; it may still hold the lease the operator last granted it: no replica is \
             promoted before that lease has lapsed and {primary} has fenced itself"
        ));
    }
    let replicas: Vec<_> = members
        .iter()
        .filter(|m| m.pod != primary && m.labelled == Some(Role::Replica))
        .filter_map(|m| m.report.as_ref().ok().map(|r| (m.pod.as_str(), r)))
        .collect();
    // A replica that renewed the lease lately keeps it for a lease from then: reporting that
    // it no longer receives does not undo that renewal.
    let lease = lease_for(after)
        .unwrap_or(MIN_LEASE)
        .max(rules.renewals.longest);
    if let Some(pod) = renewals::renewed_lately(&replicas, lease) {
        return Failover::Waiting(format!(
            "{why}; {pod} renewed {primary}'s lease less than {}s ago: no replica is promoted \
             before that renewal has lapsed and {primary} has fenced itself",
            (lease + LEASE_MARGIN).as_secs()
        ));
    }
    let mut forced = None;
    if let Some((needed, short)) = too_few_report(&rules.semi_sync, primary, members, &replicas) {
        let short = format!("{why}; {short}");
        match rules.forced {
            Some((value, pod)) if replicas.iter().any(|(p, _)| *p == pod) => {
                forced = Some((value, pod, short));
            }
            Some((_, pod)) => {
                return Failover::Waiting(format!(
                    "{short}: no replica is promoted until {needed} report; \
                     {FORCE_FAILOVER_ANNOTATION} names {pod}, which is not a reporting replica"
                ))
            }
            None => {
                return Failover::Waiting(format!(
                    "{short}: no replica is promoted until {needed} report, or a human who knows \
                     the silent ones are gone names one with the {FORCE_FAILOVER_ANNOTATION} \
                     annotation"
                ))
            }
        }
    }
    // Silent replicas may be renewing the primary's lease.
    if let Some(unseen) =
        renewals::unseen_renewers(&rules.semi_sync, members, replicas.len(), rules.renewals)
    {
        return Failover::Waiting(format!(
            "{why}; {}{}",
            renewals::unseen_message(unseen, primary, rules.renewals),
            match &forced {
                Some((_, pod, _)) => format!(", then {pod} as {FORCE_FAILOVER_ANNOTATION} asks"),
                None => String::new(),
            }
        ));
    }
    // A promoted replica applies all it received before it takes writes, so members are
    // compared by what they will hold once applied: nobody waits for the slowest applier, and a
    // replica whose applier failed still counts with all it received (it is only no candidate,
    // since it cannot apply). Only a replica that says nothing of what it received is waited
    // for, until its relay log is applied and its GTID set tells.
    if let Some((pod, _)) = replicas.iter().find(|(_, r)| {
        r.replication.as_ref().is_some_and(|rep| {
            rep.received.is_empty()
                && !(rep.relay_applied || (rep.sql_running && rep.sql_caught_up))
        })
    }) {
        return Failover::Waiting(format!(
            "{why}; waiting for {pod} to apply what it received before choosing the new primary"
        ));
    }
    // What each will hold once applied, read once.
    let mut holdings = Vec::with_capacity(replicas.len());
    for (pod, r) in &replicas {
        let Some((position, history)) = r.holding(engine) else {
            return Failover::Waiting(format!(
                "{why}; what {pod} reports it holds does not parse ({}): none is promoted",
                shown(&r.gtid_executed)
            ));
        };
        holdings.push((*pod, *r, position, history));
    }
    let complete: Vec<_> = holdings
        .iter()
        .filter(|(pod, ..)| forced.as_ref().is_none_or(|(_, to, _)| to == pod))
        .filter(|h| holds_all(engine, h, &holdings))
        .collect();
    let best = complete.iter().find(|(_, r, ..)| !applier_failed(r));
    match best {
        Some((pod, _, position, _)) => Failover::Promote {
            to: (*pod).to_owned(),
            reason: match &forced {
                None => format!(
                    "{why} for {}s; {pod} has every transaction the replicas received ({})",
                    lost_for.as_secs(),
                    shown(position)
                ),
                Some((value, _, short)) => format!(
                    "forced by {FORCE_FAILOVER_ANNOTATION}={value}: {short}; {pod} has every \
                     transaction the reporting replicas received ({})",
                    shown(position)
                ),
            },
            request: rules.forced.map(|(value, _)| value.to_owned()),
        },
        None if !complete.is_empty() => Failover::Waiting(format!(
            "{why}; only {} received every transaction, and {} applier failed (error {}): \
             none is promoted until it applies again",
            complete
                .iter()
                .map(|(pod, ..)| *pod)
                .collect::<Vec<_>>()
                .join(", "),
            if complete.len() == 1 { "its" } else { "their" },
            complete
                .iter()
                .filter_map(|(_, r, ..)| r.replication.as_ref().map(|rep| rep.sql_errno))
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )),
        None if forced.is_some() => Failover::Waiting(format!(
            "{why}; {FORCE_FAILOVER_ANNOTATION} names {}, which lacks transactions another \
             reporting replica has: it is not promoted",
            forced.as_ref().map_or("", |(_, pod, _)| *pod)
        )),
        None if holdings.is_empty() => {
            Failover::Waiting(format!("{why}; no replica reports to take over"))
        }
        None => Failover::Waiting(format!(
            "{why}; the replicas' transactions diverge ({}): none is promoted",
            holdings
                .iter()
                .map(|(pod, _, position, _)| format!("{pod}: {position}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// What a replica will hold once it has applied all it received: its pod, report, position
/// and history.
type Holding<'a> = (&'a str, &'a MemberStatus, String, String);

/// Whether `one` will hold every transaction each of `all` will hold.
fn holds_all(engine: Engine, one: &Holding<'_>, all: &[Holding<'_>]) -> bool {
    let (_, _, position, history) = one;
    all.iter()
        .all(|(_, _, theirs, _)| gtid::within_history(engine, theirs, position, history))
}

fn applier_failed(r: &MemberStatus) -> bool {
    r.replication.as_ref().is_some_and(|rep| rep.sql_errno != 0)
}

/// A failover's choice looked at again before it took writes. `chosen` was named by a failover
/// from `failed` at `epoch` and has not taken the primary's role yet (it reports as a replica,
/// and is not labelled primary at `epoch`). When a report that came after the choice (a
/// replica that was silent then, or one that received more since) shows a transaction
/// `chosen` will not hold, and another replica will hold every transaction any reporting
/// replica will, that one is chosen instead (the pod and why): a new failover, at the next
/// epoch. Otherwise `chosen` stays, and is made primary once it holds what the others do.
///
/// `failed` (its pod, and the address replicas reach it at) is no candidate, and not compared here (whether `chosen` must hold what it alone
/// holds is `roles::primary_label`'s). Nothing is looked at again while a replica still
/// receives from `failed` (its sets still grow: choices would follow each other), nor while
/// any member may hold a lease the operator granted (`lease_outstanding`): a replica promoted
/// now must not meet another member still writable on its lease.
pub fn revisit(
    engine: Engine,
    (failed, failed_host): (&str, &str),
    chosen: &str,
    epoch: u64,
    lease_outstanding: Duration,
    members: &[MemberView],
) -> Option<(String, String)> {
    let me = members.iter().find(|m| m.pod == chosen)?;
    let mine = me.report.as_ref().ok()?;
    let took_role = mine.role == Some(Role::Primary) && mine.epoch >= epoch;
    let labelled = me.labelled == Some(Role::Primary) && me.labelled_epoch == Some(epoch);
    if took_role || labelled || !lease_outstanding.is_zero() {
        return None;
    }
    let still_receiving = members.iter().any(|m| {
        m.report.as_ref().is_ok_and(|r| {
            r.replication
                .as_ref()
                .is_some_and(|rep| rep.receiving() && rep.source_host == failed_host)
        })
    });
    if still_receiving {
        return None;
    }
    let mut holdings = Vec::new();
    for m in members
        .iter()
        .filter(|m| m.pod != failed && m.labelled == Some(Role::Replica))
    {
        let Ok(r) = &m.report else { continue };
        if r.role == Some(Role::Primary) {
            continue;
        }
        // Nothing is decided on a report that does not parse.
        let (position, history) = r.holding(engine)?;
        holdings.push((m.pod.as_str(), r, position, history));
    }
    let mine = holdings.iter().find(|(pod, ..)| *pod == chosen)?;
    if holds_all(engine, mine, &holdings) {
        return None;
    }
    let ahead = holdings
        .iter()
        .find(|(_, _, theirs, _)| !gtid::within_history(engine, theirs, &mine.2, &mine.3))?;
    let (to, _, position, _) = holdings
        .iter()
        .filter(|(pod, r, ..)| *pod != chosen && !applier_failed(r))
        .find(|h| holds_all(engine, h, &holdings))?;
    Some((
        (*to).to_owned(),
        format!(
            "{failed} was lost and {chosen} was chosen, but before it took writes {} reported \
             transactions it lacks ({}); {to} has every transaction the replicas received ({})",
            ahead.0,
            shown(&ahead.2),
            shown(position)
        ),
    ))
}

#[cfg(test)]
#[path = "failover_tests.rs"]
mod tests;
