//! The MySQLCluster controller: read the referenced objects → validate → build the children →
//! server-side apply them → maintain the role labels → write the status from what was applied.

pub mod archive;
pub mod bootstrap;
pub mod build;
pub mod config;
pub mod failover;
pub mod fencing;
pub mod plan;
pub mod primary;
pub mod primary_lease;
pub mod renewals;
pub mod report;
pub mod roles;
pub mod rollout;
pub mod status;
pub mod switchover;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use bulwark_api::cluster::MySQLClusterStatus;
use bulwark_api::common::condition;
use bulwark_api::{MySQLBackup, MySQLCluster};
use chrono::Utc;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use rand::distributions::{Alphanumeric, DistString};

use crate::apply::{self, CLUSTER_MANAGER};
use crate::conditions::{self, Desired, Status};
use crate::context::{Context, Reason};
use crate::error::Result;
use crate::names::{self, component};
use crate::storage::storage_access;
use bootstrap::RestoreSource;
use build::Images;
use validate::{Refs, Validated};

/// Reconciles one MySQLCluster.
pub async fn reconcile(cluster: Arc<MySQLCluster>, ctx: Arc<Context>) -> Result<Action> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let existing_set = apply::get_opt(&sets, &name).await?;
    let mut refs = dereference(&cluster, &ctx, &ns).await?;
    refs.bootstrapped = existing_set.is_some();
    refs.built_root = existing_set.as_ref().and_then(build::root_password_source);
    let checked = validate::validate(&cluster, &refs).and_then(|v| {
        let images = &ctx.config.backup_images;
        match images.check_cluster(&cluster, refs.bootstrap_backup.as_ref(), refs.bootstrapped) {
            Some(problem) => Err(problem),
            None => Ok(v),
        }
    });
    let running = existing_set
        .as_ref()
        .and_then(|s| build::container_image(s, "mysqld"));
    let checked =
        checked.and_then(
            |v| match ctx.config.server_images.check(&cluster, running.as_deref()) {
                Some(problem) => Err(problem),
                None => Ok(v),
            },
        );
    let validated = match checked {
        Ok(v) => v,
        Err(message) => {
            primary::keep_lease(&ctx, &cluster, &ns).await;
            invalid(&cluster, &ctx, &ns, message).await?;
            // Referenced Secrets and claims are not watched; look again now and then.
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    };
    let applied = apply_children(&cluster, &ctx, &ns, &validated, &refs, existing_set).await?;
    // Backups are listed only while the pods run more than one revision: no restart otherwise.
    let read = if rolling_out(&applied.stateful_set) {
        backup_sources(&ctx, &ns, &name).await?
    } else {
        Vec::new()
    };
    let mut settled = primary::settle(&ctx, &cluster, &ns, &applied.stateful_set, &read).await?;
    if let Some(rollout::Step::Restart(pod)) = settled
        .plan
        .hold()
        .filter(|h| h.switching.is_none())
        .map(|h| &h.rollout)
    {
        restart_member(&cluster, &ctx, &ns, pod, &settled.pods).await?;
    }
    collect_config_maps(&ctx, &ns, &name, &applied).await?;
    // The archiver's report, read once a pass however often the status is written.
    let mut archiver = None;
    let (mut ready, written) =
        report(&cluster, &ctx, &ns, &applied, &settled, &mut archiver).await?;
    if settled.plan.changed() {
        // The status names the new primary and epoch: the members move now, with the reports
        // the plan was made from, and the status says how far they got.
        let set = &applied.stateful_set;
        settled = primary::carry_out(&ctx, &written, &ns, set, &read, settled).await?;
        if settled.plan.changed() {
            // Planned again from reports read before the leases were, the transition changed
            // again: nothing of it is written, and the next pass reads the members afresh.
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        (ready, _) = report(&written, &ctx, &ns, &applied, &settled, &mut archiver).await?;
    }
    let plan = &settled.plan;
    let hold = plan.hold();
    if hold.is_some_and(|h| h.stale.is_some()) {
        // A watch brings the newer status within moments.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if plan.switching().is_some() {
        // Writes are paused until the new primary takes them: look again soon.
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let unsettled =
        hold.is_some_and(|h| h.scale_down_blocked.is_some() || h.rollout != rollout::Step::Done);
    let failover_on =
        cluster.spec.replication.failover_after_seconds > 0 && cluster.spec.replicas > 1;
    if failover_on && settled.primary_silent && plan.lost_since.is_none() {
        // Its replicas may stop receiving any moment (their network timeout), which no pod
        // event announces at once: the first pass that sees it counts the loss (from when the
        // primary was last heard of, `plan::last_heard`).
        return Ok(Action::requeue(plan::SILENT_POLL));
    }
    if settled.withheld.is_some()
        || plan.lost_since.is_some()
        || unsettled
        || !settled.unready.is_empty()
    {
        // No pod event announces that a member's data can now be compared, that a lost
        // primary has been gone long enough, that a restarted replica has caught up, or that a
        // member whose agent is not ready (its pod's condition may not say so yet) is again.
        let after = primary::seconds(cluster.spec.replication.failover_after_seconds);
        return Ok(Action::requeue(plan.lost_since.as_ref().map_or(
            plan::LOST_POLL,
            |since| {
                // Also once a replica's renewal that holds the failover back is old enough.
                let wait = settled.lease_outstanding.max(settled.renewal_wait);
                plan::recheck_lost(since.0, Utc::now(), after, wait)
            },
        )));
    }
    let archiving = cluster
        .spec
        .backup
        .as_ref()
        .is_some_and(|b| b.binlog_archive.is_some());
    Ok(if ready && archiving {
        // The archive's status is read, not watched.
        Action::requeue(Duration::from_secs(30))
    } else if ready {
        Action::requeue(Duration::from_secs(300))
    } else {
        // Pod and StatefulSet changes wake the controller through its watches; the timer only
        // catches what no watch reports.
        Action::requeue(Duration::from_secs(60))
    })
}

/// Reads the Secrets, claims and backup a cluster refers to.
async fn dereference(cluster: &MySQLCluster, ctx: &Context, ns: &str) -> Result<Refs> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    let backups: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), ns);
    let mut refs = Refs::default();
    for s in Refs::secret_names(cluster) {
        if let Some(secret) = apply::get_opt(&secrets, &s).await? {
            refs.secrets.insert(s, secret);
        }
    }
    for c in Refs::claim_names(cluster) {
        if apply::get_opt(&claims, &c).await?.is_some() {
            refs.claims.insert(c);
        }
    }
    if let Some(r) = cluster
        .spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.from_backup.backup_ref.as_ref())
    {
        refs.bootstrap_backup = apply::get_opt(&backups, &r.name).await?;
    }
    Ok(refs)
}

/// Reports an invalid spec: Degraded=True with the cause, and nothing else changed.
async fn invalid(cluster: &MySQLCluster, ctx: &Context, ns: &str, message: String) -> Result<()> {
    let previous = report::previous_conditions(cluster);
    let degraded = Desired::new(
        condition::DEGRADED,
        Status::True,
        "InvalidSpec",
        message.clone(),
    );
    let desired = [
        Desired::new(
            condition::READY,
            Status::False,
            "InvalidSpec",
            "the spec cannot be acted on; see the Degraded condition",
        ),
        Desired::new(
            condition::PROGRESSING,
            Status::False,
            "InvalidSpec",
            "waiting for a valid spec",
        ),
        degraded.clone(),
    ];
    if conditions::flipped(&degraded, &previous) {
        ctx.event(cluster, Reason::InvalidSpec, message).await;
    }
    tracing::info!(namespace = ns, cluster = %cluster.name_any(), "cluster spec is invalid");
    let status = status::carried(
        &cluster.status.clone().unwrap_or_default(),
        report::stamp(cluster, &desired, Utc::now()),
        cluster.meta().generation,
    );
    write_status(cluster, ctx, ns, &status).await?;
    // Not ready; the members were not read, so what the last pass found of them stands.
    record_state(ctx, ns, cluster, &status, None);
    Ok(())
}

/// The cluster's state gauges, from the status just written.
fn record_state(
    ctx: &Context,
    ns: &str,
    cluster: &MySQLCluster,
    status: &MySQLClusterStatus,
    broken_members: Option<usize>,
) {
    let holds = |type_: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    let archiving = cluster
        .spec
        .backup
        .as_ref()
        .is_some_and(|b| b.binlog_archive.is_some());
    ctx.metrics.cluster_state(
        ns,
        &cluster.name_any(),
        crate::metrics::ClusterState {
            ready: holds(condition::READY),
            primary_lost: status.primary_lost_since.is_some(),
            broken_members,
            archive: archiving.then(|| crate::metrics::ArchiveState {
                healthy: holds(archive::CONDITION),
                gaps: status.binlog_archive.as_ref().map_or(0, |a| a.gaps),
            }),
        },
    );
}

/// The state of the children after they were applied.
struct Applied {
    stateful_set: StatefulSet,
    config_map: String,
}

async fn apply_children(
    cluster: &MySQLCluster,
    ctx: &Context,
    ns: &str,
    validated: &Validated,
    refs: &Refs,
    existing_set: Option<StatefulSet>,
) -> Result<Applied> {
    let name = cluster.name_any();
    let client = &ctx.client;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret_name = names::credentials_secret(&name);
    let existing = apply::get_opt(&secrets, &secret_name).await?;
    let generate = || Alphanumeric.sample_string(&mut rand::thread_rng(), 32);
    let s = build::credentials_secret(cluster, validated, existing.as_ref(), generate);
    // Only written when a value is missing: an apply would otherwise rewrite the values it
    // read, racing with anyone rotating them.
    let complete = existing.as_ref().is_some_and(|e| {
        let have = e.data.clone().unwrap_or_default();
        s.data
            .iter()
            .flatten()
            .all(|(k, _)| have.get(k).is_some_and(|v| !v.0.is_empty()))
    });
    if !complete {
        apply::apply(&secrets, &secret_name, &s, CLUSTER_MANAGER).await?;
    }

    let cm = build::config_map(cluster, validated);
    let cm_name = cm.name_any();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    apply::apply(&cms, &cm_name, &cm, CLUSTER_MANAGER).await?;

    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    for svc in [
        build::headless_service(cluster),
        build::role_service(cluster, names::ROLE_PRIMARY),
        build::role_service(cluster, names::ROLE_REPLICA),
    ] {
        apply::apply(&services, &svc.name_any(), &svc, CLUSTER_MANAGER).await?;
    }

    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let defaults = Images {
        agent: ctx.config.backup_images.for_cluster(cluster).to_owned(),
        exporter: ctx.config.exporter_image.clone(),
    };
    // A running cluster keeps the source it was created with, whatever the spec says now.
    let restore = match &existing_set {
        Some(set) => RestoreSource::recorded(set),
        None => RestoreSource::from_spec(cluster, refs),
    };
    let build = |images: &Images| {
        build::stateful_set(cluster, validated, &cm_name, images, restore.as_ref())
    };
    let mut set = build::keeping_running_images(existing_set.as_ref(), &defaults, build);
    // Neither the primary nor the one a running switchover replaces (it must confirm it is
    // read-only) is removed by a scale-down.
    let primary = plan::current_primary(&name, &cluster.status.clone().unwrap_or_default());
    let replacing = cluster
        .status
        .as_ref()
        .and_then(|s| s.last_switchover.as_ref())
        .filter(|s| s.finished.is_none())
        .map(|s| s.from.clone());
    let kept = [Some(primary), replacing]
        .into_iter()
        .flatten()
        .fold(cluster.spec.replicas, |n, pod| {
            switchover::members_kept(n, names::pod_ordinal(&name, &pod))
        });
    if let Some(spec) = set.spec.as_mut() {
        spec.replicas = Some(kept);
    }
    let stateful_set = apply::apply(&sets, &name, &set, CLUSTER_MANAGER).await?;

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb = build::pod_disruption_budget(cluster);
    apply::apply(&pdbs, &name, &pdb, CLUSTER_MANAGER).await?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let archiver_name = names::binlog_archiver(&name);
    let archive_access = cluster.spec.backup.as_ref().and_then(|b| {
        let archive = b.binlog_archive.as_ref()?;
        let storage = b.storages.iter().find(|s| s.name == archive.storage)?;
        storage_access(storage, b.encryption.as_ref())
    });
    let archiver = archive_access.and_then(|access| {
        build::binlog_archiver(cluster, &validated.credentials, &access, &defaults.agent)
    });
    match archiver {
        Some(d) => {
            apply::apply(&deployments, &archiver_name, &d, CLUSTER_MANAGER).await?;
        }
        None => apply::delete_opt(&deployments, &archiver_name).await?,
    }

    Ok(Applied {
        stateful_set,
        config_map: cm_name,
    })
}

/// Whether `set`'s pods may not all run its latest spec (or the controller has not said yet).
fn rolling_out(set: &StatefulSet) -> bool {
    set.status.as_ref().is_none_or(|st| {
        st.observed_generation < set.metadata.generation || st.updated_replicas != Some(st.replicas)
    })
}

/// The members that running backups of cluster `name` read from.
async fn backup_sources(ctx: &Context, ns: &str, name: &str) -> Result<Vec<String>> {
    let backups: Api<MySQLBackup> = Api::namespaced(ctx.client.clone(), ns);
    let running = apply::list(&backups, "").await?.into_iter().filter(|b| {
        b.spec.cluster_ref.name == name
            && b.status
                .as_ref()
                .is_some_and(|s| s.phase == Some(bulwark_api::backup::BackupPhase::Running))
    });
    Ok(running
        .filter_map(|b| b.status.and_then(|s| s.source_pod))
        .collect())
}

/// Restarts `pod` for a rolling change: deleted (only the pod this pass saw, by uid), the
/// StatefulSet recreates it from the current spec.
async fn restart_member(
    cluster: &MySQLCluster,
    ctx: &Context,
    ns: &str,
    pod: &str,
    pods: &[Pod],
) -> Result<()> {
    let Some(uid) = pods
        .iter()
        .find(|p| p.name_any() == pod)
        .and_then(|p| p.uid())
    else {
        return Ok(());
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    apply::delete_uid(&api, pod, &uid).await?;
    tracing::info!(namespace = ns, cluster = %cluster.name_any(), pod, "member restarted for the rollout");
    ctx.event(
        cluster,
        Reason::RollingRestart,
        format!("restarting {pod} to run the current spec"),
    )
    .await;
    Ok(())
}

/// Deletes ConfigMaps of earlier configurations once the rollout no longer needs them.
async fn collect_config_maps(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    applied: &Applied,
) -> Result<()> {
    // Under the OnDelete strategy the controller never moves `currentRevision`: every pod
    // counted as updated is what says the old configurations are unused.
    let set = &applied.stateful_set;
    let revision_known = set
        .status
        .as_ref()
        .is_some_and(|st| st.update_revision.is_some());
    if rolling_out(set) || !revision_known {
        return Ok(());
    }
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let selector = names::selector_string(&names::labels(cluster, component::CONFIG));
    for cm in apply::list(&cms, &selector).await? {
        if cm.name_any() != applied.config_map {
            apply::delete_opt(&cms, &cm.name_any()).await?;
        }
    }
    Ok(())
}

/// The cluster manager's part of the pass's status and its events: the archiver's report
/// (when the cluster archives: read into `archiver` unless the pass has read it already), the
/// rest decided by [`report::of_pass`].
async fn report(
    cluster: &MySQLCluster,
    ctx: &Context,
    ns: &str,
    applied: &Applied,
    settled: &primary::Settled,
    archiver: &mut Option<std::result::Result<bulwark_contract::archive::ArchiveStatus, String>>,
) -> Result<(bool, MySQLCluster)> {
    let st = cluster.status.clone().unwrap_or_default();
    let archive_spec = cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.binlog_archive.as_ref());
    let mut archive = None;
    if let Some(spec) = archive_spec {
        let name = cluster.name_any();
        let read = match archiver {
            Some(read) => read,
            None => archiver.insert(archive::read(&ctx.client, ns, &name).await),
        };
        let flush = spec
            .flush_every_seconds
            .unwrap_or(build::archiver::DEFAULT_FLUSH_EVERY_SECONDS);
        let observed = archive::observe(
            read.as_ref().map_err(String::as_str),
            flush,
            st.binlog_archive.as_ref(),
            &names::binlog_archive(cluster),
        );
        if let Some(lag) = observed.lag_seconds {
            ctx.metrics.archive_lag(ns, &name, lag);
        }
        archive = Some(observed);
    }
    let now = Utc::now();
    let r = report::of_pass(cluster, &applied.stateful_set, settled, archive.as_ref());
    for (reason, message) in r.events {
        if reason == Reason::BinlogArchiveGap {
            ctx.metrics.archive_gap(ns, &cluster.name_any());
        }
        ctx.event(cluster, reason, message).await;
    }
    let status = status::of_pass(
        &st,
        &settled.plan,
        status::Observed {
            conditions: report::stamp(cluster, &r.conditions, now),
            generation: cluster.meta().generation,
            ready: r.ready,
            primary_ready: r.primary_ready,
            binlog_archive: archive.and_then(|a| a.status),
            archiving: archive_spec.is_some(),
            now,
        },
    );
    let written = write_status(cluster, ctx, ns, &status).await?;
    // Members are compared (and broken ones found) only when the pass carried out a held plan.
    let acted = !(settled.plan.changed() || settled.plan.hold().is_some_and(|h| h.stale.is_some()));
    record_state(
        ctx,
        ns,
        cluster,
        &status,
        acted.then_some(settled.broken.len()),
    );
    primary::announce(ctx, cluster, ns, &settled.plan).await;
    Ok((r.ready_now, written))
}

/// Applies the cluster controller's whole part of the status; the cluster as written.
async fn write_status(
    cluster: &MySQLCluster,
    ctx: &Context,
    ns: &str,
    status: &MySQLClusterStatus,
) -> Result<MySQLCluster> {
    let api: Api<MySQLCluster> = Api::namespaced(ctx.client.clone(), ns);
    apply::apply_status(&api, cluster, status, CLUSTER_MANAGER).await
}
