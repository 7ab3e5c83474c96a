//! A pass's decision about the primary: `settle` reads the members' reports and plans
//! (`plan`); while the primary stays, `act` renews its lease (`lease_step`) and moves the
//! members to the status' primary and epoch in the order
//! `fencing` gives (labels and signed orders to their agents: every other member read-only
//! first), the primary's move only after its data was compared (`roles`). A transition that
//! changes the primary only raises the epoch with the new primary in the status; once that is
//! written, `carry_out` moves the members in the same pass, with the reports the plan was made
//! from. `announce` gives the transition's events once the status holds it.

use std::time::{Duration, Instant};

use bulwark_api::cluster::MySQLClusterStatus;
use bulwark_api::cluster::{FORCE_FAILOVER_ANNOTATION, SWITCHOVER_ANNOTATION};
use bulwark_api::MySQLCluster;
use bulwark_contract::order::RoleOrder;
use chrono::Utc;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::ResourceExt;

use super::fencing::{self, Step};
use super::plan::{self, Finished, Inputs, Plan, Transition};
use super::roles::{self, MemberView, PrimaryLabel};
use super::rollout;
use crate::apply::{self, ROLE_MANAGER};
use crate::context::{Context, Reason};
use crate::error::Result;
use crate::names;
use bulwark_contract::lease::HEARTBEAT_INTERVAL;

use super::primary_lease::{
    await_connecting, lease_step, order_key, renew_lease, LeaseReader, LeaseStep, LeaseTarget,
};
pub use super::primary_lease::{keep_lease, seconds, wants_lease};

/// Fresh reports of a switchover's new primary read in one pass while it catches up.
const SWITCHOVER_COMPARISONS: u32 = 10;

/// What a pass settled about the primary.
#[derive(Debug)]
pub struct Settled {
    /// The pass's decision.
    pub plan: Plan,
    /// The server pods.
    pub pods: Vec<Pod>,
    /// Why the primary does not take writes yet, if it does not.
    pub withheld: Option<String>,
    /// Members whose replication stopped on an error, one line each (`roles::broken_members`).
    pub broken: Vec<String>,
    /// Pods with the cluster's labels that its StatefulSet does not control (ignored).
    pub foreign: Vec<String>,
    /// Members whose agent reported not ready in this pass (after any order it was sent), with
    /// the reason it gave.
    pub unready: Vec<(String, String)>,
    /// The primary's agent gave no report in this pass (lost, or not yet known to be).
    pub primary_silent: bool,
    /// How long the primary may still hold a lease the operator sent it, plus the margin.
    pub lease_outstanding: Duration,
    /// How long until no reporting member renewed a lease lately (`renewals::renewal_wait`).
    pub renewal_wait: Duration,
    /// The members' views a plan that changed the primary or epoch did not act on, and when
    /// they were read: [`carry_out`] moves the members with them once the status holds it.
    pub(super) unacted: Option<(Vec<MemberView>, Instant)>,
}

/// Settles the primary of `cluster` for this pass; `set`: its StatefulSet as applied; `read`:
/// the members running backups read from.
pub async fn settle(
    ctx: &Context,
    cluster: &MySQLCluster,
    ns: &str,
    set: &StatefulSet,
    read: &[String],
) -> Result<Settled> {
    let name = cluster.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let labelled = apply::list(
        &api,
        &names::selector_string(&names::selector_labels(&name)),
    )
    .await?;
    let (pods, foreign) = crate::members::controlled_by(set, labelled);
    if !foreign.is_empty() {
        // The Ready condition and an event say so; every pass would repeat it here.
        tracing::debug!(cluster = %name, pods = ?foreign, "pods carry the cluster's labels without being its StatefulSet's; ignored");
    }
    // Any member may still hold a lease this operator sent it (the adopted primary of a status
    // that went back, one replaced a moment ago): a failover waits for all of them. Counted
    // before the reports are read, so that once it is zero a renewal sent after a report was
    // read finds the lease lapsed (what the reports say of renewals is waited out apart).
    let reader = LeaseReader::of(cluster, ns);
    // While the primary may be lost (counted so, or its heartbeats unanswered lately), one
    // under way that will prove never delivered would count for a whole lease: waited for.
    let status = cluster.status.as_ref();
    let unanswered = reader
        .primary_answer(ctx, status)
        .is_some_and(|at| at.elapsed() > HEARTBEAT_INTERVAL + HEARTBEAT_INTERVAL / 2);
    let lost = status.is_some_and(|s| s.primary_lost_since.is_some());
    if reader.lease.is_some() && (lost || unanswered) {
        await_connecting(ctx, &reader.key).await;
    }
    let leases = reader.read(ctx);
    let seen = Seen {
        views: crate::members::views(ctx.members.as_ref(), &pods).await,
        at: Instant::now(),
        leases,
        pods,
        foreign,
    };
    decide(ctx, cluster, ns, set, read, seen).await
}

/// Moves the members once the status holds the transition `settled` planned, in the same
/// pass: `cluster` as the status write returned it, the views the plan was made from (aged by
/// the time since). A pass that read the members again would wait on a lost one's connection
/// once more before the promotion. When the plan made again changes the primary or epoch once
/// more, nothing is acted on and the caller writes nothing of it.
pub async fn carry_out(
    ctx: &Context,
    cluster: &MySQLCluster,
    ns: &str,
    set: &StatefulSet,
    read: &[String],
    settled: Settled,
) -> Result<Settled> {
    let Some((mut views, at)) = settled.unacted else {
        return Ok(settled);
    };
    crate::members::aged(&mut views, at.elapsed());
    let seen = Seen {
        views,
        at: Instant::now(),
        // Nothing is failed over on these: a plan that changes again is not written.
        leases: LeaseReader::of(cluster, ns).read(ctx),
        pods: settled.pods,
        foreign: settled.foreign,
    };
    decide(ctx, cluster, ns, set, read, seen).await
}

/// The members as a pass read them.
struct Seen {
    pods: Vec<Pod>,
    foreign: Vec<String>,
    views: Vec<MemberView>,
    /// When the views' reports were read, near enough.
    at: Instant,
    /// The leases as read before the views.
    leases: (Duration, super::failover::RenewalTerms),
}

/// Plans the pass from what it saw and, while the primary stays, acts.
async fn decide(
    ctx: &Context,
    cluster: &MySQLCluster,
    ns: &str,
    set: &StatefulSet,
    read: &[String],
    seen: Seen,
) -> Result<Settled> {
    let name = cluster.name_any();
    let Seen {
        pods,
        foreign,
        mut views,
        at: mut seen_at,
        leases,
    } = seen;
    let reader = LeaseReader::of(cluster, ns);
    let (lease, lease_key) = (reader.lease, reader.key.clone());
    let leases_now = || reader.read(ctx);
    let (mut lease_outstanding, mut renewals) = leases;
    let renewal_wait_of = |views: &[MemberView], renewals: super::failover::RenewalTerms| {
        lease.map_or(Duration::ZERO, |lease| {
            super::renewals::renewal_wait(views, lease.max(renewals.longest))
        })
    };
    let mut renewal_wait = renewal_wait_of(&views, renewals);
    let mut status = cluster.status.clone().unwrap_or_default();
    let engine = cluster.spec.engine;
    let failover_after = seconds(cluster.spec.replication.failover_after_seconds);
    let rollout_pods = rollout::pods_of(&name, set, &pods);
    let deleting: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| p.name_any())
        .collect();
    // When the status' primary last answered a heartbeat, on the wall clock.
    let answered = |status: &MySQLClusterStatus| {
        let at = reader.primary_answer(ctx, Some(status))?;
        Some(Utc::now() - chrono::Duration::from_std(at.elapsed()).ok()?)
    };
    let plan_from = |status: &MySQLClusterStatus,
                     views: &[MemberView],
                     status_confirmed: bool,
                     lease_outstanding: Duration,
                     renewals: super::failover::RenewalTerms| {
        plan::plan(&Inputs {
            cluster: &name,
            engine,
            members: cluster.spec.replicas,
            failover_after,
            switchover_timeout: seconds(cluster.spec.replication.switchover_timeout_seconds),
            status,
            status_confirmed,
            annotation: cluster
                .annotations()
                .get(SWITCHOVER_ANNOTATION)
                .map(String::as_str),
            force_failover: cluster
                .annotations()
                .get(FORCE_FAILOVER_ANNOTATION)
                .map(String::as_str),
            semi_sync: super::config::semi_sync(&cluster.spec),
            views,
            rollout: rollout_pods.as_deref(),
            backup_sources: read,
            deleting: &deleting,
            lease_outstanding,
            renewals,
            primary_answered: answered(status),
            now: Utc::now(),
        })
    };
    let mut plan = plan_from(&status, &views, false, lease_outstanding, renewals);
    // A lost primary's takeover time that runs out within moments is waited out here; then
    // the leases are read again and, after them, the reports of the members that gave one
    // (one silent a moment ago is not waited on again).
    let due = plan
        .lost_since
        .as_ref()
        .filter(|_| plan.hold().is_some_and(|h| h.waiting.is_some()))
        .and_then(|since| {
            let outstanding = lease_outstanding.max(renewal_wait);
            plan::due_in(since.0, Utc::now(), failover_after, outstanding)
        })
        .filter(|left| !left.is_zero() && *left <= plan::DUE_WAIT);
    if let Some(left) = due {
        tracing::info!(
            cluster = %name,
            wait_ms = left.as_millis() as u64,
            lease_outstanding_ms = lease_outstanding.as_millis() as u64,
            renewal_wait_ms = renewal_wait.as_millis() as u64,
            "waiting out the lost primary's takeover time"
        );
        tokio::time::sleep(left + Duration::from_millis(20)).await;
        await_connecting(ctx, &lease_key).await;
        (lease_outstanding, renewals) = leases_now();
        crate::members::reread(ctx.members.as_ref(), &pods, &mut views).await;
        seen_at = Instant::now();
        renewal_wait = renewal_wait_of(&views, renewals);
        plan = plan_from(&status, &views, false, lease_outstanding, renewals);
    }
    let mut confirmed = false;
    if plan.hold().is_some_and(|h| h.stale.is_some()) {
        // The members are ahead of the copy this pass read: the API server says whether that
        // copy lags (the newer status is planned from) or the status really went back.
        let clusters: Api<MySQLCluster> = Api::namespaced(ctx.client.clone(), ns);
        if let Some(live) = apply::get_opt(&clusters, &name).await? {
            status = live.status.unwrap_or_default();
            confirmed = true;
            plan = plan_from(&status, &views, true, lease_outstanding, renewals);
        }
    }
    // A failover is decided only once no heartbeat goes to the lost primary any more: those
    // that never connected count for nothing, so the leases read above may be lapsed while
    // the loop still tries, and one that connects after (a cut healing) would renew it. The
    // renewal stops here, before the leases are read again for the decision (a heartbeat
    // prepared before the stop is counted as under way).
    if lease.is_some() && matches!(plan.transition, Transition::Failover { .. }) {
        ctx.leases.stop(&lease_key);
        await_connecting(ctx, &lease_key).await;
        let again = leases_now();
        if again != (lease_outstanding, renewals) {
            (lease_outstanding, renewals) = again;
            plan = plan_from(&status, &views, confirmed, lease_outstanding, renewals);
        }
    }
    let mut settled = Settled {
        plan,
        pods,
        withheld: None,
        broken: Vec::new(),
        foreign,
        unready: Vec::new(),
        primary_silent: false,
        lease_outstanding,
        renewal_wait,
        unacted: None,
    };
    if settled.plan.changed() {
        settled.unacted = Some((views, seen_at));
        return Ok(settled);
    }
    if settled.plan.hold().is_some_and(|h| h.stale.is_some()) {
        return Ok(settled);
    }
    // The failover at this epoch that chose the primary, if one did; the lost primary it
    // replaces is not compared when the choice saw every acknowledged commit on a reporting
    // replica (semi-synchronous replication that never gives up its wait), or when a human
    // forced it, accepting the loss.
    let semi = super::config::semi_sync(&cluster.spec);
    let choice = status.last_failover.as_ref().filter(|f| {
        f.to == settled.plan.primary
            && f.epoch.and_then(|e| u64::try_from(e).ok()) == Some(settled.plan.epoch)
    });
    let replaces = choice
        .filter(|f| f.request.is_some() || (semi.waits() && semi.timeout.is_none()))
        .map(|f| f.from.clone());
    let acting = Acting {
        ctx,
        ns,
        cluster: &name,
        engine,
        lease,
        lease_key: &lease_key,
        had_primary: status.primary_since.is_some(),
        replaces: replaces.as_deref(),
        failover_choice: choice.is_some(),
        followers: super::failover::followers_needed(&semi),
    };
    act(&acting, &mut settled, views).await?;
    Ok(settled)
}

/// What carrying out a held plan needs besides the plan.
struct Acting<'a> {
    ctx: &'a Context,
    ns: &'a str,
    cluster: &'a str,
    engine: bulwark_contract::Engine,
    /// The lease a primary holds with automatic failover on.
    lease: Option<Duration>,
    lease_key: &'a str,
    /// Whether the cluster ever had a ready primary (its data is then compared first).
    had_primary: bool,
    /// The lost primary a failover at this epoch chose the primary to replace, when it is not
    /// compared (`roles::primary_label`).
    replaces: Option<&'a str>,
    /// A failover at this epoch chose the primary.
    failover_choice: bool,
    /// Replicas whose renewals keep the primary's lease, when its agent takes them.
    followers: u32,
}

/// Carries out a plan that holds the primary: the lease, then the members moved in the order
/// `fencing` gives, the primary's move only after its data was compared.
async fn act(a: &Acting<'_>, settled: &mut Settled, mut views: Vec<MemberView>) -> Result<()> {
    let (ctx, ns, name, engine, lease_key) = (a.ctx, a.ns, a.cluster, a.engine, a.lease_key);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let primary = settled.plan.primary.clone();
    let epoch = settled.plan.epoch;
    settled.primary_silent = views
        .iter()
        .find(|v| v.pod == primary)
        .is_some_and(|v| v.report.is_err());
    let had_primary = a.had_primary;
    let pods = &settled.pods;

    let mut order_keys = Orders {
        ctx,
        ns,
        cluster: name,
        key: None,
        primary_host: names::pod_host(name, &primary),
    };
    // The primary pod's own command says whether its agent needs a lease (a change of
    // failoverAfterSeconds reaches it only when it is rolled).
    let primary_pod = pods.iter().find(|p| p.name_any() == primary);
    let wants = primary_pod.is_some_and(wants_lease);
    let step = lease_step(wants, a.lease, settled.plan.lost_since.is_some());
    // The lease the primary is renewed with, when it is.
    let primary_lease = match (step, primary_pod) {
        (LeaseStep::Renew(lease), Some(pod)) => Some(LeaseTarget {
            cluster: lease_key,
            pod,
            epoch,
            lease,
            // Asked of an agent that takes renewals, and only with failover on.
            followers: views
                .iter()
                .find(|v| v.pod == primary)
                .and_then(|v| v.report.as_ref().ok())
                .filter(|r| r.takes_follows && a.lease.is_some())
                .map_or(0, |_| a.followers),
        }),
        _ => None,
    };
    match step {
        LeaseStep::Forget => ctx.leases.forget(lease_key),
        LeaseStep::Stop => ctx.leases.stop(lease_key),
        LeaseStep::Renew(_) => {
            // Only the primary at this epoch is renewed, whoever was before.
            ctx.leases.keep_only(lease_key, &primary, epoch);
            let reports = views.iter().any(|v| v.pod == primary && v.report.is_ok());
            // A failover's choice gets its lease with its promotion (below): one withheld, and
            // then looked at again and never promoted, holds none that would keep another
            // replica from taking over.
            let withheld_choice = a.failover_choice
                && !views.iter().any(|v| {
                    v.pod == primary
                        && v.report.as_ref().is_ok_and(|r| {
                            r.role == Some(bulwark_contract::Role::Primary) && r.epoch >= epoch
                        })
                });
            if let (true, false, Some(target)) = (reports, withheld_choice, &primary_lease) {
                order_keys.renew_lease(target).await;
            }
        }
    }
    // Members whose role changes go first; replicas only told of the new epoch go after the
    // promotion, so that they reconnect once the new primary is there.
    let (demotions, epoch_only): (Vec<Step>, Vec<Step>) =
        fencing::demotions(&primary, &names::primary_service(name), epoch, &views)
            .into_iter()
            .partition(|s| s.fence);
    for step in &demotions {
        move_member(&api, ns, pods, &mut views, step, &mut order_keys).await?;
    }
    let confirm = settled
        .plan
        .switching()
        .filter(|(_, to)| *to == primary)
        .map(|(from, _)| from.to_owned());
    let decide =
        |views: &[MemberView]| match fencing::fenced(&primary, epoch, views, confirm.as_deref()) {
            Err(waiting) => PrimaryLabel::Withhold(waiting),
            Ok(()) if !had_primary => PrimaryLabel::Assign,
            Ok(()) => roles::primary_label(engine, &primary, epoch, had_primary, a.replaces, views),
        };
    let mut decision = decide(&views);
    // In a switchover the writes are paused: the new primary's data is compared with the
    // fenced primary's final transactions as soon as it has applied them, from reports of
    // agent passes that begin after each request, not up to an agent interval old.
    let target = pods.iter().find(|p| p.name_any() == primary);
    let mut attempts = 0;
    while let (Some(_), Some(pod), PrimaryLabel::Withhold(_)) = (&confirm, target, &decision) {
        if attempts == SWITCHOVER_COMPARISONS {
            break;
        }
        attempts += 1;
        let fresh = ctx.members.report(pod, true).await;
        if let Some(view) = views.iter_mut().find(|v| v.pod == primary) {
            view.report = fresh;
        }
        decision = decide(&views);
    }
    match decision {
        PrimaryLabel::Assign => {
            if let Some(step) = fencing::promotion(&primary, epoch, &views) {
                if wants {
                    // The lease first, so that the promoted member takes writes at once.
                    if let Some(target) = &primary_lease {
                        order_keys.renew_lease(target).await;
                    }
                    let beat = ctx
                        .leases
                        .beat(lease_key, &primary, epoch, ctx.members.as_ref());
                    if let Err(e) = beat.await {
                        tracing::warn!(namespace = ns, pod = %primary, error = %e, "lease heartbeat before the promotion not answered");
                    }
                }
                move_member(&api, ns, pods, &mut views, &step, &mut order_keys).await?;
            }
        }
        PrimaryLabel::Withhold(reason) => {
            tracing::info!(namespace = ns, cluster = %name, pod = %primary, reason = %reason, "primary withheld");
            settled.withheld = Some(reason);
        }
    }
    // Also while the primary is withheld: a replica told of the new epoch stops receiving
    // from the lost primary, and its agent applies what it received before its relay log goes.
    for step in &epoch_only {
        move_member(&api, ns, pods, &mut views, step, &mut order_keys).await?;
    }
    settled.broken = roles::broken_members(engine, &primary, &views);
    settled.unready = views
        .iter()
        .filter_map(|v| match &v.report {
            Ok(r) if !r.ready => Some((v.pod.clone(), r.reason.clone())),
            _ => None,
        })
        .collect();
    Ok(())
}

/// The events, metrics and log lines of a pass's transition, once the status records it (a
/// pass whose status write fails plans again, and announces then).
pub(super) async fn announce(ctx: &Context, cluster: &MySQLCluster, ns: &str, plan: &Plan) {
    let name = cluster.name_any();
    let message =
        |r: &bulwark_api::cluster::SwitchoverRecord| r.message.clone().unwrap_or_default();
    match &plan.transition {
        Transition::Failover {
            from, to, reason, ..
        } => {
            tracing::warn!(namespace = ns, cluster = %name, from = %from, to = %to, reason = %reason, "failover");
            ctx.event(
                cluster,
                Reason::Failover,
                format!("promoting {to} in place of {from}: {reason}"),
            )
            .await;
            ctx.metrics.failed_over(ns, &name);
        }
        Transition::SwitchoverAborted(record) => {
            ctx.event(cluster, Reason::SwitchoverAborted, message(record))
                .await;
        }
        Transition::SwitchoverStarted { record, cause } => {
            tracing::info!(namespace = ns, cluster = %name, from = %record.from, to = %record.to, cause = ?cause, "switchover started");
            ctx.event(
                cluster,
                Reason::Switchover,
                format!("switching over from {} to {}", record.from, record.to),
            )
            .await;
        }
        Transition::Hold(hold) => match &hold.finished {
            Some(Finished::Completed(record)) => {
                ctx.event(cluster, Reason::Switchover, message(record))
                    .await;
                ctx.metrics.switched_over(ns, &name);
            }
            Some(Finished::Refused(record)) => {
                ctx.event(cluster, Reason::SwitchoverRefused, message(record))
                    .await;
            }
            None => {}
        },
    }
}

/// What role orders need: the signing key, read from the generated Secret once a pass needs
/// it (`Some(None)`: unreadable, orders are not sent) and, for replicas, the primary's own
/// address to replicate from.
struct Orders<'a> {
    ctx: &'a Context,
    ns: &'a str,
    cluster: &'a str,
    key: Option<Option<Vec<u8>>>,
    primary_host: String,
}

impl Orders<'_> {
    async fn key(&mut self) -> Option<Vec<u8>> {
        if self.key.is_none() {
            self.key = Some(order_key(self.ctx, self.ns, self.cluster).await);
        }
        self.key.clone().flatten()
    }

    /// Renews `target`'s lease with heartbeats signed by the order key, when it can be read.
    async fn renew_lease(&mut self, target: &LeaseTarget<'_>) {
        if let Some(key) = self.key().await {
            renew_lease(self.ctx, target, key);
        }
    }
}

/// Carries out one step: a demotion's labels first (the pod leaves the primary Service at
/// once), then its order; a promotion's order first (the server takes writes), then its labels.
/// An order's answer replaces the member's report for the rest of the pass.
async fn move_member(
    api: &Api<Pod>,
    ns: &str,
    pods: &[Pod],
    views: &mut [MemberView],
    step: &Step,
    orders: &mut Orders<'_>,
) -> Result<()> {
    let promoting = step.standing.role == bulwark_contract::Role::Primary;
    if step.label && !promoting {
        label(api, ns, step).await?;
    }
    // A member whose agent this pass could not reach gets its order in a later pass: sent
    // now, it would hold the pass (a failover's among them) for the connection's timeout.
    let unreached = views.iter().find(|v| v.pod == step.pod).and_then(|v| {
        v.report
            .as_ref()
            .err()
            .filter(|e| crate::members::never_reached(e))
    });
    if let Some(why) = unreached {
        tracing::debug!(namespace = ns, pod = %step.pod, reason = %why, "role order not sent: the agent was not reached this pass");
    }
    let key = match step.order && unreached.is_none() {
        true => orders.key().await,
        false => None,
    };
    if let (Some(key), Some(pod)) = (key, pods.iter().find(|p| p.name_any() == step.pod)) {
        let signed = RoleOrder {
            member: step.pod.clone(),
            role: step.standing.role,
            epoch: step.standing.epoch,
            source: (!promoting).then(|| orders.primary_host.clone()),
        }
        .sign(&key);
        match orders.ctx.members.send_order(pod, &signed).await {
            Ok(answer) => {
                tracing::info!(namespace = ns, pod = %step.pod, role = %step.standing.role, epoch = step.standing.epoch, acted = answer.is_some(), "role order sent");
                if let (Some(report), Some(view)) =
                    (answer, views.iter_mut().find(|v| v.pod == step.pod))
                {
                    view.report = Ok(report);
                }
            }
            Err(e) => {
                tracing::warn!(namespace = ns, pod = %step.pod, error = %e, "role order not delivered");
            }
        }
    }
    if step.label && promoting {
        label(api, ns, step).await?;
    }
    Ok(())
}

async fn label(api: &Api<Pod>, ns: &str, step: &Step) -> Result<()> {
    let patch = Pod {
        metadata: ObjectMeta {
            name: Some(step.pod.clone()),
            labels: Some(
                [
                    (
                        names::ROLE_LABEL.to_owned(),
                        step.standing.role.as_str().to_owned(),
                    ),
                    (
                        names::EPOCH_LABEL.to_owned(),
                        step.standing.epoch.to_string(),
                    ),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    };
    apply::apply(api, &step.pod, &patch, ROLE_MANAGER).await?;
    tracing::info!(namespace = ns, pod = %step.pod, role = %step.standing.role, epoch = step.standing.epoch, "role labels set");
    Ok(())
}
