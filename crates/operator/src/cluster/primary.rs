//! The primary of a pass. The members' reports are read; a lost primary is replaced
//! (`failover`), a requested switchover is taken on, completed or aborted (`switchover`): each
//! change of primary only raises the epoch with the new primary in the status, in this pass.
//! Then the members are moved to the status' primary and epoch in the order `fencing` gives
//! (labels and signed orders to their agents: every other member read-only first), the
//! primary's move only after its data was compared (`roles`).

use std::time::Duration;

use bulwark_api::cluster::{SwitchoverRecord, SWITCHOVER_ANNOTATION};
use bulwark_api::MySQLCluster;
use bulwark_contract::order::{RoleOrder, ORDER_KEY};
use chrono::Utc;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::Api;
use kube::ResourceExt;

use super::failover::{self, Failover};
use super::fencing::{self, Step};
use super::members;
use super::roles::{self, MemberView, PrimaryLabel};
use super::rollout;
use super::switchover::{self, Progress, Request};
use crate::apply::{self, ROLE_MANAGER};
use crate::context::{Context, Reason};
use crate::error::Result;
use crate::names;

/// Fresh reports of a switchover's new primary read in one pass while it catches up.
const SWITCHOVER_COMPARISONS: u32 = 10;
/// Largest lag of a replica a switchover may be asked to.
const SWITCHOVER_MAX_LAG: Duration = Duration::from_secs(10);

/// What a pass settled about the primary.
#[derive(Debug, Default)]
pub struct Settled {
    /// The pod that is (or is becoming) the primary.
    pub primary: String,
    /// The epoch of the roles (`status.epoch`).
    pub epoch: u64,
    /// The server pods.
    pub pods: Vec<Pod>,
    /// Why the primary does not take writes yet, if it does not.
    pub withheld: Option<String>,
    /// Since when the primary has been lost, if it is.
    pub lost_since: Option<Time>,
    /// Why a lost primary is not replaced yet.
    pub waiting: Option<String>,
    /// A replica promoted in this pass: `(from, to, reason)`. Only the status changes in this
    /// pass; the members move in the next one.
    pub promoted: Option<(String, String, String)>,
    /// The switchover record, when it changed in this pass.
    pub switchover: Option<SwitchoverRecord>,
    /// A switchover runs: from, to.
    pub switching: Option<(String, String)>,
    /// The status changed the primary or the epoch in this pass; the members move in the next.
    pub changed: bool,
    /// A scale-down would remove the primary and no member can take over yet.
    pub scale_down_blocked: Option<String>,
    /// Members whose replication stopped on an error, one line each (`roles::broken_members`).
    pub broken: Vec<String>,
    /// The next step of a rolling change of the pods (`rollout`).
    pub rollout: rollout::Step,
    /// Members whose agent reported not ready in this pass (after any order it was sent).
    pub unready: Vec<String>,
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
    let pods = apply::list(
        &api,
        &names::selector_string(&names::selector_labels(&name)),
    )
    .await?;
    let status = cluster.status.clone().unwrap_or_default();
    let epoch = status.epoch.map_or(0, |e| u64::try_from(e).unwrap_or(0));
    let primary = current_primary(cluster);
    let had_primary = status.primary_since.is_some();
    let mut views = members::views(&pods).await;
    let engine = super::config::contract_engine(cluster.spec.engine);
    let now = Utc::now();
    let running = status
        .last_switchover
        .clone()
        .filter(|s| s.finished.is_none());
    let mut settled = Settled {
        primary: primary.clone(),
        epoch,
        ..Settled::default()
    };

    if had_primary && cluster.spec.replicas > 1 {
        settled.lost_since = failover::primary_lost(&primary, &views)
            .map(|_| status.primary_lost_since.clone().unwrap_or(Time(now)));
        let lost_for = settled
            .lost_since
            .as_ref()
            .map(|t| (now - t.0).to_std().unwrap_or_default());
        let after = seconds(cluster.spec.replication.failover_after_seconds);
        match failover::decide(engine, &primary, &views, lost_for, after) {
            Failover::Healthy => {}
            Failover::Waiting(reason) => settled.waiting = Some(reason),
            Failover::Promote { to, reason } => {
                let abandoned = running.map(|r| {
                    finish(
                        r,
                        switchover::ABORTED,
                        format!("{primary} was lost; failover to {to}"),
                    )
                });
                return Ok(Settled {
                    primary: to.clone(),
                    epoch: epoch + 1,
                    pods,
                    promoted: Some((primary, to, reason)),
                    switchover: abandoned,
                    changed: true,
                    ..Settled::default()
                });
            }
        }
    }

    if let Some(run) = running {
        let elapsed = (now - run.started.0).to_std().unwrap_or_default();
        let timeout = seconds(cluster.spec.replication.switchover_timeout_seconds);
        match switchover::progress(&run, epoch, &views, elapsed, timeout) {
            Progress::Running => settled.switching = Some((run.from.clone(), run.to.clone())),
            Progress::Completed => {
                let took = format!(
                    "writes moved from {} to {} in {:.1}s",
                    run.from,
                    run.to,
                    elapsed.as_secs_f64()
                );
                ctx.event(cluster, Reason::Switchover, took.clone()).await;
                ctx.metrics.switched_over(ns, &name);
                settled.switchover = Some(finish(run, switchover::COMPLETED, took));
            }
            Progress::Aborted(why) => {
                ctx.event(cluster, Reason::SwitchoverAborted, why.clone())
                    .await;
                return Ok(Settled {
                    primary: run.from.clone(),
                    epoch: epoch + 1,
                    pods,
                    switchover: Some(finish(run, switchover::ABORTED, why)),
                    changed: true,
                    ..Settled::default()
                });
            }
        }
    } else {
        let settled_primary = views.iter().any(|m| {
            m.pod == primary
                && m.report.as_ref().is_ok_and(|r| {
                    r.role.as_deref() == Some(names::ROLE_PRIMARY)
                        && r.epoch >= epoch
                        && !r.read_only
                })
        });
        let busy_reason = if !had_primary {
            Some("the cluster has had no primary yet")
        } else if settled.lost_since.is_some() {
            Some("the primary is lost")
        } else if !settled_primary {
            Some("the primary has not taken writes at the current epoch yet")
        } else {
            None
        };
        let busy = busy_reason.is_some();
        let step = rollout::pods_of(&name, set, &pods).map_or(rollout::Step::Done, |members| {
            rollout::next(
                cluster.spec.replicas,
                &primary,
                &members,
                &views,
                busy_reason,
                read,
                SWITCHOVER_MAX_LAG,
            )
        });
        // While a lost primary may be replaced, every replica's report counts: none restarts.
        settled.rollout = match step {
            rollout::Step::Done => rollout::Step::Done,
            _ if settled.lost_since.is_some() => {
                rollout::Step::Wait("the primary is lost".to_owned())
            }
            step => step,
        };
        let member_pods: Vec<String> = (0..cluster.spec.replicas)
            .map(|i| names::pod(&name, i))
            .collect();
        let annotation = cluster
            .annotations()
            .get(SWITCHOVER_ANNOTATION)
            .map(String::as_str);
        let handled = status.last_switchover.as_ref().map(|s| s.request.as_str());
        let mut request = switchover::evaluate(
            annotation,
            handled,
            &primary,
            busy,
            &member_pods,
            &views,
            SWITCHOVER_MAX_LAG,
        );
        // A scale-down that would remove the primary hands it over first.
        let removed =
            names::pod_ordinal(&name, &primary).is_some_and(|o| o >= cluster.spec.replicas);
        if removed && !busy && !matches!(request, Request::Start { .. }) {
            let ordinal = |p: &str| names::pod_ordinal(&name, p);
            let target = switchover::handover_target(
                |p| ordinal(p).is_some_and(|o| o < cluster.spec.replicas),
                &views,
                SWITCHOVER_MAX_LAG,
            );
            match target {
                Some(to) => {
                    request = Request::Start {
                        // Whatever the annotation asks now is answered by this switchover.
                        request: annotation.or(handled).unwrap_or_default().to_owned(),
                        to,
                    }
                }
                None => {
                    settled.scale_down_blocked = Some(format!(
                        "the scale-down to {} members waits: no replica that stays is in step \
                         to take over from {primary}",
                        cluster.spec.replicas
                    ))
                }
            }
        }
        // A rolling change whose replicas are all updated hands the primary to one of them.
        if let (rollout::Step::HandOver(to), Request::Nothing) = (&settled.rollout, &request) {
            tracing::info!(namespace = ns, cluster = %name, to = %to, "rollout hands the primary over");
            request = Request::Start {
                request: annotation.or(handled).unwrap_or_default().to_owned(),
                to: to.clone(),
            };
        }
        match request {
            Request::Nothing => {}
            Request::Refuse {
                request,
                to,
                message,
            } => {
                ctx.event(cluster, Reason::SwitchoverRefused, message.clone())
                    .await;
                let record = SwitchoverRecord {
                    request,
                    from: primary.clone(),
                    to,
                    started: Time(now),
                    finished: None,
                    result: None,
                    message: None,
                };
                settled.switchover = Some(finish(record, switchover::REFUSED, message));
            }
            Request::Start { request, to } => {
                let message = format!("switching over from {primary} to {to}");
                tracing::info!(namespace = ns, cluster = %name, from = %primary, to = %to, "switchover started");
                ctx.event(cluster, Reason::Switchover, message).await;
                return Ok(Settled {
                    primary: to.clone(),
                    epoch: epoch + 1,
                    pods,
                    switching: Some((primary.clone(), to.clone())),
                    switchover: Some(SwitchoverRecord {
                        request,
                        from: primary,
                        to,
                        started: Time(now),
                        finished: None,
                        result: None,
                        message: None,
                    }),
                    changed: true,
                    ..Settled::default()
                });
            }
        }
    }

    let mut order_keys = Orders {
        ctx,
        ns,
        cluster: &name,
        key: None,
        primary_host: names::pod_host(&name, &primary),
    };
    // Members whose role changes go first; replicas only told of the new epoch go after the
    // promotion, so that they reconnect once the new primary is there.
    let (demotions, epoch_only): (Vec<Step>, Vec<Step>) =
        fencing::demotions(&primary, epoch, &views)
            .into_iter()
            .partition(|s| s.fence);
    for step in &demotions {
        move_member(&api, ns, &pods, &mut views, step, &mut order_keys).await?;
    }
    let confirm = settled
        .switching
        .as_ref()
        .filter(|(_, to)| *to == primary)
        .map(|(from, _)| from.as_str());
    let decide = |views: &[MemberView]| match fencing::fenced(&primary, epoch, views, confirm) {
        Err(waiting) => PrimaryLabel::Withhold(waiting),
        Ok(()) if !had_primary => PrimaryLabel::Assign,
        Ok(()) => roles::primary_label(engine, &primary, epoch, had_primary, views),
    };
    let mut decision = decide(&views);
    // In a switchover the writes are paused: the new primary's data is compared with the
    // fenced primary's final transactions as soon as it has applied them, from reports of
    // agent passes that begin after each request, not up to an agent interval old.
    let target = pods.iter().find(|p| p.name_any() == primary);
    let mut attempts = 0;
    while let (Some(_), Some(pod), PrimaryLabel::Withhold(_)) = (confirm, target, &decision) {
        if attempts == SWITCHOVER_COMPARISONS {
            break;
        }
        attempts += 1;
        let fresh = members::fresh_report(pod).await;
        if let Some(view) = views.iter_mut().find(|v| v.pod == primary) {
            view.report = fresh;
        }
        decision = decide(&views);
    }
    match decision {
        PrimaryLabel::Assign => {
            if let Some(step) = fencing::promotion(&primary, epoch, &views) {
                move_member(&api, ns, &pods, &mut views, &step, &mut order_keys).await?;
            }
        }
        PrimaryLabel::Withhold(reason) => {
            tracing::info!(namespace = ns, cluster = %name, pod = %primary, reason = %reason, "primary withheld");
            settled.withheld = Some(reason);
        }
    }
    for step in &epoch_only {
        move_member(&api, ns, &pods, &mut views, step, &mut order_keys).await?;
    }
    settled.broken = roles::broken_members(engine, &primary, &views);
    settled.unready = views
        .iter()
        .filter(|v| v.report.as_ref().is_ok_and(|r| !r.ready))
        .map(|v| v.pod.clone())
        .collect();
    settled.pods = pods;
    Ok(settled)
}

fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

fn finish(mut record: SwitchoverRecord, result: &str, message: String) -> SwitchoverRecord {
    record.finished = Some(Time(Utc::now()));
    record.result = Some(result.to_owned());
    record.message = Some(message);
    record
}

/// The key that signs role orders, from the generated Secret; `None` (logged) when it cannot be
/// read: the labels still move the members, only later.
async fn order_key(ctx: &Context, ns: &str, cluster: &str) -> Option<Vec<u8>> {
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
    let key = if step.order { orders.key().await } else { None };
    if let (Some(key), Some(pod)) = (key, pods.iter().find(|p| p.name_any() == step.pod)) {
        let signed = RoleOrder {
            member: step.pod.clone(),
            role: step.standing.role,
            epoch: step.standing.epoch,
            source: (!promoting).then(|| orders.primary_host.clone()),
        }
        .sign(&key);
        match members::send_order(pod, &signed).await {
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

/// The pod that should run the primary: the one in the status, else ordinal 0. A primary
/// beyond the spec's members stays until a switchover hands it over (`members_kept`).
pub fn current_primary(cluster: &MySQLCluster) -> String {
    let name = cluster.name_any();
    cluster
        .status
        .as_ref()
        .and_then(|s| s.current_primary.clone())
        .filter(|p| names::pod_ordinal(&name, p).is_some())
        .unwrap_or_else(|| names::pod(&name, 0))
}
