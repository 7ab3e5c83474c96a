//! The primary's lease as a cluster pass handles it: how a pass reads the leases the
//! operator may have granted ([`LeaseReader`], once no heartbeat that may prove never delivered
//! is still connecting: [`await_connecting`]), what it does with the primary's lease
//! ([`lease_step`]), how a renewal is started, and the order key that signs heartbeats and role
//! orders. [`keep_lease`] keeps the primary renewed while no pass settles it.

use std::time::{Duration, Instant};

use bulwark_api::cluster::MySQLClusterStatus;
use bulwark_api::MySQLCluster;
use bulwark_contract::lease::{lease_for, LEASE_WITHOUT_FAILOVER};
use bulwark_contract::order::ORDER_KEY;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use kube::ResourceExt;

use crate::apply;
use crate::context::Context;
use crate::leases::Holder;
use crate::names;

/// Waits until no heartbeat to the cluster's members may still be connecting (at most
/// [`crate::members::HEARTBEAT_CONNECT_TIMEOUT`]), while a lost primary may be replaced: one
/// that never connects is then not counted as granted.
pub(super) async fn await_connecting(ctx: &Context, lease_key: &str) {
    if let Some(until) = ctx.leases.connecting_until(lease_key) {
        // Its connection attempt starts a moment after it was prepared.
        let slack = Duration::from_millis(50);
        tokio::time::sleep_until((until + slack).into()).await;
    }
}

/// How a pass reads the leases the operator may have granted a cluster's members.
pub(super) struct LeaseReader {
    /// The failover lease (none when automatic failover is off).
    pub(super) lease: Option<Duration>,
    pub(super) key: String,
    /// Replicas whose renewals a heartbeat asks for.
    followers: u32,
}

impl LeaseReader {
    pub(super) fn of(cluster: &MySQLCluster, ns: &str) -> LeaseReader {
        LeaseReader {
            lease: lease_length(cluster),
            key: lease_key(cluster, ns),
            followers: super::failover::followers_needed(&super::config::semi_sync(&cluster.spec)),
        }
    }

    /// When the status' primary, at the status' epoch, last answered a heartbeat.
    pub(super) fn primary_answer(
        &self,
        ctx: &Context,
        status: Option<&MySQLClusterStatus>,
    ) -> Option<Instant> {
        let status = status?;
        let primary = status.current_primary.as_deref()?;
        let epoch = u64::try_from(status.epoch?).ok()?;
        ctx.leases.last_answer(&self.key, primary, epoch)
    }

    /// How long a lease any member may hold is outstanding, and what renewals may keep.
    pub(super) fn read(&self, ctx: &Context) -> (Duration, super::failover::RenewalTerms) {
        self.lease
            .map_or((Duration::ZERO, Default::default()), |lease| {
                (
                    ctx.leases.outstanding_any(&self.key, lease),
                    ctx.leases.renewals(&self.key, lease, self.followers),
                )
            })
    }
}

/// What the pass does with the primary's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseStep {
    /// The primary needs none: nothing is kept for the cluster.
    Forget,
    /// The primary is counted lost with failover on: nothing may renew its lease any more.
    Stop,
    /// The primary (only it, at this epoch) is renewed with this lease.
    Renew(Duration),
}

/// Decides the lease step: `wants` whether the primary's pod runs an agent that needs a lease,
/// `lease` the failover lease (none when automatic failover is off), `lost` whether the primary
/// is counted lost.
pub(super) fn lease_step(wants: bool, lease: Option<Duration>, lost: bool) -> LeaseStep {
    match (wants, lease) {
        (false, _) => LeaseStep::Forget,
        // A failover may be counting.
        (true, Some(_)) if lost => LeaseStep::Stop,
        (true, lease) => LeaseStep::Renew(lease.unwrap_or(LEASE_WITHOUT_FAILOVER)),
    }
}

/// A spec's seconds as a duration (a negative number reads as zero).
pub fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

/// Whom a lease is renewed for.
pub(super) struct LeaseTarget<'a> {
    /// `namespace/name` of the cluster.
    pub(super) cluster: &'a str,
    pub(super) pod: &'a Pod,
    pub(super) epoch: u64,
    pub(super) lease: Duration,
    /// Replicas whose renewals keep it past the heartbeats (0: none).
    pub(super) followers: u32,
}

/// The key of `cluster`'s leases: by uid too, so that a cluster created again under the same
/// name starts afresh.
pub(super) fn lease_key(cluster: &MySQLCluster, ns: &str) -> String {
    format!(
        "{ns}/{}/{}",
        cluster.name_any(),
        cluster.uid().unwrap_or_default()
    )
}

/// The lease the cluster's primary is granted when its pod needs one: short enough to lapse
/// before a failover (a single member too: it may be scaled up, and an operator restarted
/// meanwhile could not know of a longer lease); `None` while failover is off.
pub(super) fn lease_length(cluster: &MySQLCluster) -> Option<Duration> {
    lease_for(seconds(cluster.spec.replication.failover_after_seconds))
}

/// Whether `pod`'s agent runs with `--primary-lease` (as the primary, it takes writes only
/// while it holds a lease).
pub fn wants_lease(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter(|c| c.name == "agent")
        .flat_map(|c| c.command.iter().chain(&c.args).flatten())
        .any(|a| a == "--primary-lease")
}

/// Renews `target`'s lease, signed with the order `key` (callers renew only a primary that
/// reports, or one no pass settles). Without an address nothing is renewed: the primary
/// fences itself and says why.
pub(super) fn renew_lease(ctx: &Context, target: &LeaseTarget<'_>, key: Vec<u8>) {
    let Ok(addr) = crate::members::agent_address(target.pod) else {
        return;
    };
    let holder = Holder {
        pod: target.pod.name_any(),
        addr,
        epoch: target.epoch,
        lease: target.lease,
        followers: target.followers,
    };
    ctx.leases.renew(target.cluster, holder, key);
}

/// Keeps renewing the status' primary while no pass settles it (the spec is invalid, so nothing
/// fails over either): a typo in the spec must not stop the database taking writes. Renews
/// nothing when the primary is renewed already.
pub async fn keep_lease(ctx: &Context, cluster: &MySQLCluster, ns: &str) {
    let name = cluster.name_any();
    let lease_key = lease_key(cluster, ns);
    let Some(status) = cluster.status.as_ref() else {
        return;
    };
    let (Some(primary), Some(epoch)) = (
        status.current_primary.as_deref(),
        status.epoch.and_then(|e| u64::try_from(e).ok()),
    ) else {
        return;
    };
    // A lost primary is renewed by no path: a failover may be counting on its lease.
    if status.primary_lost_since.is_some() || ctx.leases.renews(&lease_key, primary, epoch) {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let Ok(Some(pod)) = apply::get_opt(&pods, primary).await else {
        return;
    };
    if !wants_lease(&pod) {
        return;
    }
    let target = LeaseTarget {
        cluster: &lease_key,
        pod: &pod,
        epoch,
        lease: lease_length(cluster).unwrap_or(LEASE_WITHOUT_FAILOVER),
        // While the spec is invalid: the operator's heartbeats alone.
        followers: 0,
    };
    if let Some(key) = order_key(ctx, ns, &name).await {
        renew_lease(ctx, &target, key);
    }
}

/// The key that signs role orders, from the generated Secret; `None` (logged) when it cannot be
/// read: the labels still move the members, only later.
pub(super) async fn order_key(ctx: &Context, ns: &str, cluster: &str) -> Option<Vec<u8>> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret_name = names::credentials_secret(cluster);
    match apply::get_opt(&secrets, &secret_name).await {
        Ok(Some(s)) => {
            let key = s.data.and_then(|d| d.get(ORDER_KEY).map(|v| v.0.clone()));
            if key.is_none() {
                tracing::warn!(namespace = ns, secret = %secret_name, "no order key in the generated Secret");
            }
            key.filter(|k| !k.is_empty())
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(namespace = ns, secret = %secret_name, error = %e, "order key unreadable");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_renewed_only_for_a_primary_that_is_not_counted_lost() {
        let failover = Some(Duration::from_secs(6));
        let cases = [
            (
                "an agent without leases",
                false,
                failover,
                false,
                LeaseStep::Forget,
            ),
            (
                "lost with failover on: never renewed again",
                true,
                failover,
                true,
                LeaseStep::Stop,
            ),
            (
                "held",
                true,
                failover,
                false,
                LeaseStep::Renew(Duration::from_secs(6)),
            ),
            (
                "failover off: the long lease, lost or not",
                true,
                None,
                true,
                LeaseStep::Renew(LEASE_WITHOUT_FAILOVER),
            ),
        ];
        for (name, wants, lease, lost, want) in cases {
            assert_eq!(lease_step(wants, lease, lost), want, "{name}");
        }
    }
}
