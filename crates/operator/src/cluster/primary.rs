//! The primary of a pass: the members' reports read, a lost primary replaced by the replica
//! with every transaction the replicas have once it has been lost long enough (the status
//! first, the labels in the next pass), and the role labels set: replicas first, the primary's
//! only after its data was compared with the members' (`roles`).

use std::time::Duration;

use bulwark_api::MySQLCluster;
use chrono::Utc;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::Api;
use kube::ResourceExt;

use super::failover::{self, Failover};
use super::members;
use super::roles::{self, PrimaryLabel};
use crate::apply::{self, ROLE_MANAGER};
use crate::context::Context;
use crate::error::Result;
use crate::names;

/// What a pass settled about the primary.
#[derive(Debug)]
pub struct Settled {
    /// The pod that is (or is becoming) the primary.
    pub primary: String,
    /// The server pods.
    pub pods: Vec<Pod>,
    /// Why the primary's label was withheld, if it was.
    pub withheld: Option<String>,
    /// Since when the primary has been lost, if it is.
    pub lost_since: Option<Time>,
    /// Why a lost primary is not replaced yet.
    pub waiting: Option<String>,
    /// A replica promoted in this pass: `(from, to, reason)`. Only the status changes in this
    /// pass; the labels follow in the next one, from the status.
    pub promoted: Option<(String, String, String)>,
}

/// Settles the primary of `cluster` for this pass.
pub async fn settle(ctx: &Context, cluster: &MySQLCluster, ns: &str) -> Result<Settled> {
    let name = cluster.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pods = apply::list(
        &api,
        &names::selector_string(&names::selector_labels(&name)),
    )
    .await?;
    let primary = current_primary(cluster);
    let status = cluster.status.clone().unwrap_or_default();
    let had_primary = status.primary_since.is_some();
    let labelled = pods.iter().any(|p| {
        p.name_any() == primary
            && p.labels().get(names::ROLE_LABEL).map(String::as_str) == Some(names::ROLE_PRIMARY)
    });
    let replicated = cluster.spec.replicas > 1;
    // Reports are read when a decision depends on them: a cluster with data and replicas
    // (failover), or a primary to be labelled after a comparison.
    let views = if had_primary && (replicated || !labelled) {
        members::views(&pods).await
    } else {
        Vec::new()
    };
    let engine = super::config::contract_engine(cluster.spec.engine);

    let mut lost_since = None;
    let mut waiting = None;
    if had_primary && replicated {
        let now = Utc::now();
        lost_since = failover::primary_lost(&primary, &views)
            .map(|_| status.primary_lost_since.clone().unwrap_or(Time(now)));
        let lost_for = lost_since
            .as_ref()
            .map(|t| (now - t.0).to_std().unwrap_or_default());
        let after = Duration::from_secs(
            u64::try_from(cluster.spec.replication.failover_after_seconds).unwrap_or(0),
        );
        match failover::decide(engine, &primary, &views, lost_for, after) {
            Failover::Healthy => {}
            Failover::Waiting(reason) => waiting = Some(reason),
            Failover::Promote { to, reason } => {
                return Ok(Settled {
                    primary: to.clone(),
                    pods,
                    withheld: None,
                    lost_since: None,
                    waiting: None,
                    promoted: Some((primary, to, reason)),
                });
            }
        }
    }

    let decision = if labelled || !had_primary {
        PrimaryLabel::Assign
    } else {
        roles::primary_label(engine, &primary, had_primary, &views)
    };
    let withheld = match decision {
        PrimaryLabel::Assign => None,
        PrimaryLabel::Withhold(reason) => {
            tracing::warn!(namespace = ns, cluster = %name, pod = %primary, reason = %reason, "primary label withheld");
            Some(reason)
        }
    };
    label(&api, ns, &pods, &primary, withheld.is_none()).await?;
    Ok(Settled {
        primary,
        pods,
        withheld,
        lost_since,
        waiting,
        promoted: None,
    })
}

/// Labels every pod but `primary` replica, then `primary` primary when `assign`: a former
/// primary leaves the primary Service before another pod joins it.
async fn label(api: &Api<Pod>, ns: &str, pods: &[Pod], primary: &str, assign: bool) -> Result<()> {
    let replicas = pods.iter().filter(|p| p.name_any() != primary);
    let chosen = pods.iter().filter(|p| assign && p.name_any() == primary);
    for (pod, role) in replicas
        .map(|p| (p, names::ROLE_REPLICA))
        .chain(chosen.map(|p| (p, names::ROLE_PRIMARY)))
    {
        if pod.labels().get(names::ROLE_LABEL).map(String::as_str) == Some(role) {
            continue;
        }
        let pod_name = pod.name_any();
        let patch = Pod {
            metadata: ObjectMeta {
                name: Some(pod_name.clone()),
                labels: Some([(names::ROLE_LABEL.to_owned(), role.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        apply::apply(api, &pod_name, &patch, ROLE_MANAGER).await?;
        tracing::info!(namespace = ns, pod = %pod_name, role, "role label set");
    }
    Ok(())
}

/// The pod that should run the primary: the one in the status, else ordinal 0.
fn current_primary(cluster: &MySQLCluster) -> String {
    let name = cluster.name_any();
    cluster
        .status
        .as_ref()
        .and_then(|s| s.current_primary.clone())
        .filter(|p| names::pod_ordinal(&name, p).is_some_and(|o| o < cluster.spec.replicas))
        .unwrap_or_else(|| names::pod(&name, 0))
}
