//! The primary's lease as its replicas' renewals keep it (`bulwark_contract::follow`), the
//! operator's pure side: how many renewals a heartbeat asks for, and what a decision that
//! makes another member the primary (a failover, a switchover given back) must wait out first.
//! One renewal the primary needs must always be a reporting replica's, whose last renewal its
//! report dates: so while renewals asked for may still keep a lease, fewer replicas may be
//! silent than the fewest renewals asked for.

use std::time::Duration;

use bulwark_contract::follow::MAX_FOLLOWED_FOR;
use bulwark_contract::lease::{lease_for, LEASE_MARGIN, MIN_LEASE};
use bulwark_contract::member::MemberStatus;
use bulwark_contract::semisync::SemiSync;

use super::roles::MemberView;

/// What replicas' renewals may still keep of a lease the operator granted asking for them
/// (`Leases::renewals`): nothing is promoted while they might, unless fewer replicas are silent
/// than the fewest renewals asked for (one needed is then a reporting replica's, waited out by
/// its report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenewalTerms {
    /// How long such a lease may still be kept, plus the margin (zero: none may).
    pub outstanding: Duration,
    /// The fewest replicas a heartbeat asked to renew (0: none asked).
    pub fewest: u32,
    /// The longest lease so granted, which each renewal counts for.
    pub longest: Duration,
}

/// A reporting replica that renewed the primary's lease less than the lease and its margin
/// ago, by its report (`followed_ms` as of the answer, plus nothing: the answer is fresh).
pub(super) fn renewed_lately<'a>(
    replicas: &[(&'a str, &MemberStatus)],
    lease: Duration,
) -> Option<&'a str> {
    let within = lease + LEASE_MARGIN;
    replicas.iter().find_map(|(pod, r)| {
        r.followed_ms
            .is_some_and(|ms| Duration::from_millis(ms) < within)
            .then_some(*pod)
    })
}

/// How many replicas may be renewing a primary's lease unseen, when that many could keep it:
/// while renewals asked for may still keep a lease, no fewer than the fewest asked for are
/// silent (`reporting` of the replicas report; the pods count too, during a scale-down one
/// more than the spec).
pub(super) fn unseen_renewers(
    semi: &SemiSync,
    members: &[MemberView],
    reporting: usize,
    renewals: RenewalTerms,
) -> Option<usize> {
    let slots = (semi.members as usize).max(members.len()).saturating_sub(1);
    let silent = slots.saturating_sub(reporting);
    (!renewals.outstanding.is_zero() && renewals.fewest > 0 && silent >= renewals.fewest as usize)
        .then_some(silent)
}

/// What [`unseen_renewers`] found, in words that do not change from one pass to the next.
pub(super) fn unseen_message(silent: usize, primary: &str, renewals: RenewalTerms) -> String {
    format!(
        "{silent} replica{} may be renewing {primary}'s lease unseen (it was asked for renewals \
         from {}): nothing is promoted until renewals can no longer keep it, {}s after the \
         operator's last heartbeat at most",
        if silent == 1 { "" } else { "s" },
        renewals.fewest,
        MAX_FOLLOWED_FOR.as_secs(),
    )
}

/// Why `holder`, which may have taken writes, could still hold a lease: the operator's
/// (`lease_outstanding`), or one its replicas renew (a reporting replica that receives from it
/// or renewed it lately, or silent ones that may). `None` once nothing can keep it, so that
/// another member may take writes. A switchover given back to the old primary waits for it.
pub fn still_leased(
    holder: &str,
    members: &[MemberView],
    semi: &SemiSync,
    after: Duration,
    lease_outstanding: Duration,
    renewals: RenewalTerms,
) -> Option<String> {
    if !lease_outstanding.is_zero() {
        return Some(format!(
            "{holder} may still hold the lease the operator last granted it"
        ));
    }
    let prefix = format!("{holder}.");
    let reporting: Vec<(&str, &MemberStatus)> = members
        .iter()
        .filter(|m| m.pod != holder)
        .filter_map(|m| m.report.as_ref().ok().map(|r| (m.pod.as_str(), r)))
        .collect();
    let following: Vec<(&str, &MemberStatus)> = reporting
        .iter()
        .copied()
        .filter(|(_, r)| {
            r.replication
                .as_ref()
                .is_some_and(|rep| rep.source_host.starts_with(&prefix))
        })
        .collect();
    if let Some((pod, _)) = following
        .iter()
        .find(|(_, r)| r.replication.as_ref().is_some_and(|rep| rep.receiving()))
    {
        return Some(format!("{pod} still receives from {holder}"));
    }
    let lease = lease_for(after).unwrap_or(MIN_LEASE).max(renewals.longest);
    if let Some(pod) = renewed_lately(&following, lease) {
        return Some(format!(
            "{pod} renewed {holder}'s lease less than {}s ago",
            (lease + LEASE_MARGIN).as_secs()
        ));
    }
    unseen_renewers(semi, members, reporting.len(), renewals)
        .map(|silent| unseen_message(silent, holder, renewals))
}

/// How long until every reporting member's last renewal, as its report dates it, is older than
/// `lease` and the margin: when a failover held back by one ([`renewed_lately`]) may look again.
pub fn renewal_wait(members: &[MemberView], lease: Duration) -> Duration {
    let within = lease + LEASE_MARGIN;
    members
        .iter()
        .filter_map(|m| m.report.as_ref().ok()?.followed_ms)
        .map(|ms| within.saturating_sub(Duration::from_millis(ms)))
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::roles::sample_view;
    use bulwark_contract::Role;

    #[test]
    fn a_failover_looks_again_when_the_latest_renewal_is_old_enough() {
        let renewed = |pod: &str, ms: Option<u64>| {
            let mut v = sample_view(pod, Role::Replica, 1, true, Some(0));
            if let Ok(r) = &mut v.report {
                r.followed_ms = ms;
            }
            v
        };
        let six = Duration::from_secs(6);
        let s = Duration::from_secs;
        assert_eq!(renewal_wait(&[], six), Duration::ZERO);
        assert_eq!(
            renewal_wait(&[renewed("a", Some(7_000)), renewed("b", Some(9_000))], six),
            s(3),
            "the most recent renewal, 7 s ago, is old enough in 3 s"
        );
        assert_eq!(
            renewal_wait(&[renewed("a", Some(60_000)), renewed("b", None)], six),
            Duration::ZERO
        );
    }
}
