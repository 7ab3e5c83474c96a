//! The cluster pass's decision about the primary, pure: from the spec, the status, the members'
//! reports, the pods' revisions and the time, the one transition this pass makes. The priority
//! order is the product's most important rule and lives here alone: a lost primary is replaced
//! first (`failover`); then a running switchover completes, is aborted, or keeps running; then a
//! new switchover starts (one asked for, a scale-down's hand-over, a deleted primary pod's, a
//! rollout's, in that order); then a rollout may restart a member. A transition that changes the
//! primary only raises the epoch: the members move once the status holds it (`primary`).

use std::time::Duration;

use bulwark_api::cluster::{MySQLClusterStatus, SwitchoverRecord};
use bulwark_contract::semisync::SemiSync;
use bulwark_contract::Engine;
use bulwark_contract::Role;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

use super::failover::{self, Failover};
use super::renewals;
use super::roles::MemberView;
use super::rollout;
use super::switchover::{self, Progress, Request};
use crate::names;

/// Largest lag of a replica a switchover may be asked to.
pub const SWITCHOVER_MAX_LAG: Duration = Duration::from_secs(10);

/// Everything a pass decides from.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    pub engine: Engine,
    /// `spec.replicas`.
    pub members: i32,
    pub failover_after: Duration,
    pub switchover_timeout: Duration,
    /// The status as read at the start of the pass.
    pub status: &'a MySQLClusterStatus,
    /// `status` was read from the API server in this pass, not from the controller's cache:
    /// members ahead of it mean the status went back, not that the copy lags.
    pub status_confirmed: bool,
    /// The switchover annotation's value.
    pub annotation: Option<&'a str>,
    /// The force-failover annotation's value.
    pub force_failover: Option<&'a str>,
    /// The cluster's semi-synchronous replication: what an acknowledged commit is on.
    pub semi_sync: SemiSync,
    /// The members' views (labels and reports).
    pub views: &'a [MemberView],
    /// The server pods as the rollout sees them; `None` while the StatefulSet controller has
    /// not taken the latest spec in (`rollout::pods_of`).
    pub rollout: Option<&'a [rollout::Pod]>,
    /// Members that running backups read from.
    pub backup_sources: &'a [String],
    /// Server pods being deleted (a drain, an eviction, a human): a primary among them is
    /// handed over while its pod waits in its preStop hook.
    pub deleting: &'a [String],
    /// How long the status' primary may still hold a lease the operator granted it, and fence
    /// itself after it (`Leases::outstanding`).
    pub lease_outstanding: Duration,
    /// What its replicas' renewals may keep of such a lease (`Leases::renewals`).
    pub renewals: failover::RenewalTerms,
    /// When the status' primary, at the status' epoch, last answered this operator's lease
    /// heartbeats (`Leases::last_answer`): its loss is counted from when it was last heard of
    /// ([`last_heard`]), not from the pass that first saw it (its replicas take seconds to
    /// notice).
    pub primary_answered: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

/// What a pass decided about the primary.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The pod that is (or is becoming) the primary.
    pub primary: String,
    /// The epoch of the roles (`status.epoch`).
    pub epoch: u64,
    /// Since when the primary has been lost, if it is.
    pub lost_since: Option<MicroTime>,
    pub transition: Transition,
}

/// The one transition of a pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// A replica takes over from the lost primary `from`.
    Failover {
        from: String,
        to: String,
        reason: String,
        /// The force-failover annotation value this failover answers (`failover::Failover`).
        request: Option<String>,
        /// A running switchover this failover ends.
        abandoned: Option<SwitchoverRecord>,
    },
    /// A switchover's replica did not take over in time: its old primary takes writes again.
    SwitchoverAborted(SwitchoverRecord),
    /// A switchover starts.
    SwitchoverStarted {
        record: SwitchoverRecord,
        cause: HandOver,
    },
    /// The primary stays; the members are moved to it.
    Hold(Hold),
}

/// Why a switchover starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOver {
    /// The switchover annotation asked for it.
    Requested,
    /// A scale-down removes the primary's pod.
    ScaleDown,
    /// A rolling change has updated every replica; the primary's pod is next.
    Rollout,
    /// The primary's pod is being deleted.
    Deleting,
}

/// A pass that keeps the primary, and what it found on the way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hold {
    /// Why a lost primary is not replaced yet.
    pub waiting: Option<String>,
    /// A switchover runs: from, to.
    pub switching: Option<(String, String)>,
    /// A switchover that ended in this pass without a change of primary.
    pub finished: Option<Finished>,
    /// A scale-down would remove the primary and no member can take over yet.
    pub scale_down_blocked: Option<String>,
    /// The next step of a rolling change of the pods.
    pub rollout: rollout::Step,
    /// Members stand at a newer epoch than the status this pass read (an older copy, or a
    /// status that went back) and none is its primary: nothing is moved, and why.
    pub stale: Option<String>,
}

/// A switchover that ended in a pass that keeps the primary.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// The new primary took writes (`took`: how long the writes moved for, in the record).
    Completed(SwitchoverRecord),
    /// The request was refused.
    Refused(SwitchoverRecord),
}

impl Plan {
    /// The status names a new primary or epoch; the members move once it is written.
    pub fn changed(&self) -> bool {
        !matches!(self.transition, Transition::Hold(_))
    }

    /// A switchover under way (started in this pass or before): from, to.
    pub fn switching(&self) -> Option<(&str, &str)> {
        match &self.transition {
            Transition::SwitchoverStarted { record, .. } => {
                Some((record.from.as_str(), record.to.as_str()))
            }
            Transition::Hold(Hold {
                switching: Some((from, to)),
                ..
            }) => Some((from.as_str(), to.as_str())),
            _ => None,
        }
    }

    /// The switchover record this pass writes, when it changed.
    pub fn switchover_record(&self) -> Option<&SwitchoverRecord> {
        match &self.transition {
            Transition::Failover { abandoned, .. } => abandoned.as_ref(),
            Transition::SwitchoverAborted(record)
            | Transition::SwitchoverStarted { record, .. }
            | Transition::Hold(Hold {
                finished: Some(Finished::Completed(record) | Finished::Refused(record)),
                ..
            }) => Some(record),
            Transition::Hold(_) => None,
        }
    }

    /// What the pass found when it keeps the primary.
    pub fn hold(&self) -> Option<&Hold> {
        match &self.transition {
            Transition::Hold(hold) => Some(hold),
            _ => None,
        }
    }
}

/// The pod that should run the primary: the one in the status, else ordinal 0. A primary
/// beyond the spec's members stays until a switchover hands it over (`members_kept`).
pub fn current_primary(cluster: &str, status: &MySQLClusterStatus) -> String {
    status
        .current_primary
        .clone()
        .filter(|p| names::pod_ordinal(cluster, p).is_some())
        .unwrap_or_else(|| names::pod(cluster, 0))
}

/// The newest epoch a member stands at, by its labels or its agent's report, and the member
/// that is the primary at it, if one is.
fn newest_standing(views: &[MemberView]) -> Option<(u64, Option<&str>)> {
    let at = |v: &MemberView| {
        let reported = v.report.as_ref().ok().map(|r| (r.epoch, r.role));
        let labelled = v.labelled_epoch.map(|e| (e, v.labelled));
        [reported, labelled].into_iter().flatten()
    };
    let newest = views.iter().flat_map(at).map(|(e, _)| e).max()?;
    let primary = views
        .iter()
        .find(|v| at(v).any(|(e, role)| e == newest && role == Some(Role::Primary)))
        .map(|v| v.pod.as_str());
    Some((newest, primary))
}

/// Decides the pass.
pub fn plan(i: &Inputs) -> Plan {
    let status = i.status;
    let mut epoch = status.epoch.map_or(0, |e| u64::try_from(e).unwrap_or(0));
    let mut primary = current_primary(i.cluster, status);
    // Members never run ahead of the status the operator wrote: ahead of this copy, it is an
    // older one (a lagging cache) or the status went back (a cluster created again over kept
    // volumes, a restored object). The members' kept orders and labels then say who the
    // primary is; the status write that follows is refused if this copy was old. With no
    // member primary at that epoch, nothing moves until the API server confirms the status
    // (moving the members to an older epoch would undo a newer decision); confirmed, the roles
    // start again at the next epoch, which no member holds yet.
    let mut adopted = false;
    if let Some((newest, newest_primary)) = newest_standing(i.views).filter(|(e, _)| *e > epoch) {
        match newest_primary {
            Some(p) => {
                adopted = p != primary;
                (primary, epoch) = (p.to_owned(), newest);
            }
            None if i.status_confirmed => epoch = newest + 1,
            None => {
                return Plan {
                    primary,
                    epoch,
                    lost_since: None,
                    transition: Transition::Hold(Hold {
                        stale: Some(format!(
                            "the status (epoch {epoch}) is older than the members (epoch \
                             {newest}), and none of them is the primary at {newest}: waiting \
                             for the newer status"
                        )),
                        ..Hold::default()
                    }),
                };
            }
        }
    }
    // Since when the primary has been lost: the status' count is another member's when the
    // primary was adopted.
    let counted_lost_since = status.primary_lost_since.clone().filter(|_| !adopted);
    let had_primary = status.primary_since.is_some();
    let changed = |primary: String, transition| Plan {
        primary,
        epoch: epoch + 1,
        lost_since: None,
        transition,
    };
    let mut hold = Hold::default();
    let mut lost_since = None;

    if had_primary && i.members > 1 {
        // The status' primary's answer, not an adopted one's.
        let answered = i.primary_answered.filter(|_| !adopted);
        lost_since = failover::primary_lost(&primary, i.views).map(|_| {
            counted_lost_since
                .clone()
                .unwrap_or_else(|| MicroTime(last_heard(answered, &primary, i.views, i.now)))
        });
        let lost_for = lost_since.as_ref().map(|t| lost_for(t.0, i.now));
        let rules = failover::Rules {
            engine: i.engine,
            semi_sync: i.semi_sync,
            after: i.failover_after,
            forced: failover::forced_request(
                i.force_failover,
                status
                    .last_failover
                    .as_ref()
                    .and_then(|f| f.request.as_deref()),
            ),
            lease_outstanding: i.lease_outstanding,
            renewals: i.renewals,
        };
        match failover::decide(&rules, &primary, i.views, lost_for) {
            Failover::Healthy => {
                if let Some((failed, to, reason, request)) = revisit(i, &primary, epoch) {
                    return changed(
                        to.clone(),
                        Transition::Failover {
                            from: failed,
                            to,
                            reason,
                            request,
                            abandoned: None,
                        },
                    );
                }
            }
            Failover::Waiting(reason) => hold.waiting = Some(reason),
            Failover::Promote {
                to,
                reason,
                request,
            } => {
                let abandoned = running(status).map(|r| {
                    finish(
                        r,
                        switchover::ABORTED,
                        format!("{primary} was lost; failover to {to}"),
                        i.now,
                    )
                });
                return changed(
                    to.clone(),
                    Transition::Failover {
                        from: primary,
                        to,
                        reason,
                        request,
                        abandoned,
                    },
                );
            }
        }
    }

    if let Some(run) = running(status) {
        let elapsed = (i.now - run.started.0).to_std().unwrap_or_default();
        match switchover::progress(&run, epoch, i.views, elapsed, i.switchover_timeout) {
            Progress::Running => hold.switching = Some((run.from.clone(), run.to.clone())),
            Progress::Completed => {
                let took = format!(
                    "writes moved from {} to {} in {:.1}s",
                    run.from,
                    run.to,
                    elapsed.as_secs_f64()
                );
                hold.finished = Some(Finished::Completed(finish(
                    run,
                    switchover::COMPLETED,
                    took,
                    i.now,
                )));
            }
            Progress::Aborted(why) => {
                // `to` may have taken writes before the operator lost sight of it: `from` gets
                // them back only once nothing can keep `to`'s lease, its replicas' renewals
                // included.
                let leased = renewals::still_leased(
                    &run.to,
                    i.views,
                    &i.semi_sync,
                    i.failover_after,
                    i.lease_outstanding,
                    i.renewals,
                );
                if let Some(wait) = leased {
                    hold.switching = Some((run.from.clone(), run.to.clone()));
                    hold.waiting = Some(format!(
                        "{why} once {} can no longer take writes: {wait}",
                        run.to
                    ));
                } else {
                    let from = run.from.clone();
                    let record = finish(run, switchover::ABORTED, why, i.now);
                    return changed(from, Transition::SwitchoverAborted(record));
                }
            }
        }
    } else {
        let busy = busy_reason(i, &primary, epoch, lost_since.is_some());
        let step = i.rollout.map_or(rollout::Step::Done, |pods| {
            rollout::next(
                i.members,
                &primary,
                pods,
                i.views,
                busy,
                i.backup_sources,
                SWITCHOVER_MAX_LAG,
            )
        });
        // While a lost primary may be replaced, every replica's report counts: none restarts.
        hold.rollout = match step {
            rollout::Step::Done => rollout::Step::Done,
            _ if lost_since.is_some() => rollout::Step::Wait("the primary is lost".to_owned()),
            step => step,
        };
        match new_switchover(i, &primary, busy.is_some(), &mut hold) {
            None => {}
            Some((Request::Start { request, to }, cause)) => {
                let record = SwitchoverRecord {
                    request,
                    from: primary,
                    to: to.clone(),
                    started: Time(i.now),
                    finished: None,
                    result: None,
                    message: None,
                };
                return changed(to, Transition::SwitchoverStarted { record, cause });
            }
            Some((
                Request::Refuse {
                    request,
                    to,
                    message,
                },
                _,
            )) => {
                let record = SwitchoverRecord {
                    request,
                    from: primary.clone(),
                    to,
                    started: Time(i.now),
                    finished: None,
                    result: None,
                    message: None,
                };
                hold.finished = Some(Finished::Refused(finish(
                    record,
                    switchover::REFUSED,
                    message,
                    i.now,
                )));
            }
            Some((Request::Nothing, _)) => {}
        }
    }
    Plan {
        primary,
        epoch,
        lost_since,
        transition: Transition::Hold(hold),
    }
}

/// A failover's choice that has not taken writes yet, looked at again with this pass' reports
/// (`failover::revisit`): the failed primary, the replica chosen instead, why, and the
/// force-failover request the first choice answered (taken still).
fn revisit(
    i: &Inputs,
    primary: &str,
    epoch: u64,
) -> Option<(String, String, String, Option<String>)> {
    let record = i.status.last_failover.as_ref()?;
    let at = record.epoch.and_then(|e| u64::try_from(e).ok())?;
    if record.to != primary || at != epoch {
        return None;
    }
    let failed_host = names::pod_host(i.cluster, &record.from);
    let (to, reason) = failover::revisit(
        i.engine,
        (&record.from, &failed_host),
        primary,
        epoch,
        i.lease_outstanding,
        i.views,
    )?;
    Some((record.from.clone(), to, reason, record.request.clone()))
}

/// When a primary first counted lost at `now` was last heard of: its last answer to this
/// operator's heartbeats (`answered`), or later, a replica's last answer from its server (each
/// says how long ago it came; an agent of the release before, only since when its reads have
/// failed). Only the time its replicas took to notice is so taken off `failoverAfterSeconds`,
/// never a silence towards the operator alone (cut off from it, its replicas kept reaching
/// it): `now` when no answer is known, when a reporting replica cannot say when it last heard
/// the primary (it does not look), or for an answer stamped in the future.
pub fn last_heard(
    answered: Option<DateTime<Utc>>,
    primary: &str,
    views: &[MemberView],
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let Some(answered) = answered.filter(|at| *at <= now) else {
        return now;
    };
    let ago = |ms: u64| chrono::Duration::try_milliseconds(i64::try_from(ms).ok()?);
    let by_replicas = views
        .iter()
        .filter(|v| v.pod != primary)
        .filter_map(|v| v.report.as_ref().ok())
        .map(|r| {
            let rep = r.replication.as_ref();
            let heard = rep.and_then(|rep| rep.source_heard_ms).and_then(ago);
            let failing = rep
                .and_then(|rep| rep.source_unreachable_seconds)
                .and_then(|s| ago(s.saturating_mul(1000)));
            heard.or(failing).map_or(now, |d| now - d)
        })
        .max();
    by_replicas
        .map_or(answered, |heard| heard.max(answered))
        .min(now)
}

/// How long the primary has been lost at `now`, counted from `since` as the status records it.
/// A count written in whole seconds (by the release before, which cut it down) gets the
/// second back, so that a failover never comes before `failoverAfterSeconds`.
pub fn lost_for(since: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    use chrono::Timelike;
    let whole = since.nanosecond() == 0;
    let counted = (now - since).to_std().unwrap_or_default();
    match whole {
        true => counted.saturating_sub(Duration::from_secs(1)),
        false => counted,
    }
}

/// How often a pass looks again while the primary is lost and no event may announce a change.
pub const LOST_POLL: Duration = Duration::from_secs(5);

/// How often a pass looks again while the primary gives no report but is not known lost yet
/// (a pass itself takes over a second then: the silent member's connection times out).
pub const SILENT_POLL: Duration = Duration::from_millis(500);

/// Longest a pass waits, with the reports it read, for a lost primary's takeover time (or a
/// lease it may hold) that runs out within it, rather than leave the decision to a pass that
/// reads the members again: reading them takes most of this when one is silent (the connection
/// to it times out), and the decision would come that much late.
pub const DUE_WAIT: Duration = Duration::from_secs(2);

/// How long until a primary lost since `since` may be replaced, as far as time goes: its
/// takeover time, and then any lease it may hold (`lease_outstanding` from `now`). `None`
/// when automatic failover is off.
pub fn due_in(
    since: DateTime<Utc>,
    now: DateTime<Utc>,
    failover_after: Duration,
    lease_outstanding: Duration,
) -> Option<Duration> {
    (!failover_after.is_zero()).then(|| {
        failover_after
            .saturating_sub(lost_for(since, now))
            .max(lease_outstanding)
    })
}

/// When the next pass should run while the primary has been lost since `since`: [`DUE_WAIT`]
/// before the takeover time is up, or the lease it may hold has run out, so that the pass has
/// read the members by then and waits out the rest ([`due_in`]); just after it, when it is
/// nearer; every [`LOST_POLL`] until then and after it (reports may still change the decision).
pub fn recheck_lost(
    since: DateTime<Utc>,
    now: DateTime<Utc>,
    failover_after: Duration,
    lease_outstanding: Duration,
) -> Duration {
    // Past the deadline by a little: a pass exactly at it would find it not yet up.
    let past = Duration::from_millis(100);
    match due_in(since, now, failover_after, lease_outstanding) {
        Some(left) if left > DUE_WAIT => (left - DUE_WAIT + past).min(LOST_POLL),
        Some(left) if !left.is_zero() => left + past,
        _ => LOST_POLL,
    }
}

/// The switchover the status records as running.
fn running(status: &MySQLClusterStatus) -> Option<SwitchoverRecord> {
    status
        .last_switchover
        .clone()
        .filter(|s| s.finished.is_none())
}

/// Why the primary must not move now, if it must not.
fn busy_reason(i: &Inputs, primary: &str, epoch: u64, lost: bool) -> Option<&'static str> {
    let settled = i.views.iter().any(|m| {
        m.pod == primary
            && m.report
                .as_ref()
                .is_ok_and(|r| r.role == Some(Role::Primary) && r.epoch >= epoch && !r.read_only)
    });
    if i.status.primary_since.is_none() {
        Some("the cluster has had no primary yet")
    } else if lost {
        Some("the primary is lost")
    } else if !settled {
        Some("the primary has not taken writes at the current epoch yet")
    } else {
        None
    }
}

/// The switchover to start or refuse, in priority order: the annotation's request, a
/// scale-down's hand-over, a deleted primary pod's hand-over (either also answers a refused
/// request), the refusal, a rollout's hand-over. Records in `hold` a scale-down that waits.
fn new_switchover(
    i: &Inputs,
    primary: &str,
    busy: bool,
    hold: &mut Hold,
) -> Option<(Request, HandOver)> {
    let member_pods: Vec<String> = (0..i.members).map(|o| names::pod(i.cluster, o)).collect();
    let handled = i
        .status
        .last_switchover
        .as_ref()
        .map(|s| s.request.as_str());
    let request = switchover::evaluate(
        i.annotation,
        handled,
        primary,
        busy,
        &member_pods,
        i.views,
        SWITCHOVER_MAX_LAG,
    );
    if matches!(request, Request::Start { .. }) {
        return Some((request, HandOver::Requested));
    }
    // Whatever the annotation asks now is answered by a hand-over.
    let answered = || i.annotation.or(handled).unwrap_or_default().to_owned();
    let ordinal = |p: &str| names::pod_ordinal(i.cluster, p);
    let removed = ordinal(primary).is_some_and(|o| o >= i.members);
    if removed && !busy {
        let target = switchover::handover_target(
            |p| ordinal(p).is_some_and(|o| o < i.members),
            i.views,
            SWITCHOVER_MAX_LAG,
        );
        match target {
            Some(to) => {
                let start = Request::Start {
                    request: answered(),
                    to,
                };
                return Some((start, HandOver::ScaleDown));
            }
            None => {
                hold.scale_down_blocked = Some(format!(
                    "the scale-down to {} members waits: no replica that stays is in step to \
                     take over from {primary}",
                    i.members
                ))
            }
        }
    }
    // A primary pod being deleted waits in its preStop hooks while its role is handed over, so
    // that a drain costs a switchover's pause instead of a failover's. Only while its agent says
    // the hooks wait: an agent without the mark (an older image), or hooks that gave up, leave a
    // server that is stopping, and a switchover to it would only time out.
    let waits = i
        .views
        .iter()
        .any(|m| m.pod == primary && m.report.as_ref().is_ok_and(|r| r.handover_pending));
    if !busy && waits && i.deleting.iter().any(|p| p == primary) {
        let target = switchover::handover_target(
            |p| ordinal(p).is_some_and(|o| o < i.members) && !i.deleting.iter().any(|d| d == p),
            i.views,
            SWITCHOVER_MAX_LAG,
        );
        if let Some(to) = target {
            let start = Request::Start {
                request: answered(),
                to,
            };
            return Some((start, HandOver::Deleting));
        }
    }
    // A refused request is answered as such, unless a scale-down's hand-over answers it.
    if matches!(request, Request::Refuse { .. }) {
        return Some((request, HandOver::Requested));
    }
    if let rollout::Step::HandOver(to) = &hold.rollout {
        let start = Request::Start {
            request: answered(),
            to: to.clone(),
        };
        return Some((start, HandOver::Rollout));
    }
    None
}

fn finish(
    mut record: SwitchoverRecord,
    result: &str,
    message: String,
    now: DateTime<Utc>,
) -> SwitchoverRecord {
    record.finished = Some(Time(now));
    record.result = Some(result.to_owned());
    record.message = Some(message);
    record
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
