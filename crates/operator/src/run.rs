//! Wiring: the three controllers with their watches, metrics and error policy, and what they
//! report for `/readyz`: each controller's end, and whether the API server still answers.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulwark_api::{MySQLBackup, MySQLCluster};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use tracing::Instrument;

use crate::context::{Context, Reason};
use crate::error::{chain, Error};
use crate::http::Readiness;
use crate::names;

/// Time between two checks of the API server for `/readyz`.
const API_CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// Time the API server has to answer a check.
const API_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the controllers until `shutdown` resolves.
pub async fn controllers(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let client = ctx.client.clone();
    let owned = watcher::Config::default().labels(&format!(
        "{}={}",
        names::MANAGED_BY_LABEL,
        names::MANAGED_BY
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let readiness = ctx.readiness.clone();
    for name in ["cluster", "schedule", "backup"] {
        readiness.controller_started(name);
    }
    tokio::spawn(check_api_server(
        client.clone(),
        readiness.clone(),
        stop_rx.clone(),
    ));
    // The primaries' leases: a primary cut off from the operator fences itself.
    let lease_ctx = ctx.clone();
    let mut lease_stop = stop_rx.clone();
    tokio::spawn(async move {
        let readiness = lease_ctx.readiness.clone();
        let in_charge = move || readiness.check(std::time::Instant::now()).is_ok();
        tokio::select! {
            _ = lease_stop.wait_for(|s| *s) => {}
            _ = lease_ctx.leases.run(lease_ctx.members.as_ref(), &in_charge) => {}
        }
    });

    let scopes: Vec<Option<String>> = if ctx.config.namespaces.is_empty() {
        vec![None]
    } else {
        ctx.config.namespaces.iter().cloned().map(Some).collect()
    };
    let sets = scopes.iter().map(|scope| {
        controller_set(
            ctx.clone(),
            scope.as_deref(),
            owned.clone(),
            stop_rx.clone(),
        )
    });

    // Per-cluster series of deleted clusters are dropped, keeping the label set bounded.
    let metrics_client = client.clone();
    let metrics = ctx.metrics.clone();
    let mut metrics_stop = stop_rx.clone();
    let metric_scopes = scopes.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = metrics_stop.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
            }
            let mut live = std::collections::BTreeSet::new();
            let mut complete = true;
            for scope in &metric_scopes {
                let clusters: Api<MySQLCluster> = scoped(&metrics_client, scope.as_deref());
                match clusters.list(&Default::default()).await {
                    Ok(list) => live.extend(
                        list.items
                            .iter()
                            .map(|c| (c.namespace().unwrap_or_default(), c.name_any())),
                    ),
                    Err(_) => complete = false,
                }
            }
            // A partial list would drop the series of clusters that still exist.
            if complete {
                metrics.retain_clusters(&live);
            }
        }
    });

    tracing::info!(namespaces = ?ctx.config.namespaces, "controllers started");
    futures::future::join_all(sets).await;
    tracing::info!("controllers stopped");
}

/// The clusters in `scope` (one namespace, or all) whose primary stopped answering its lease
/// heartbeats, as they are announced.
fn unanswered_clusters(
    ctx: &Context,
    scope: Option<&str>,
) -> impl futures::Stream<Item = ObjectRef<MySQLCluster>> + Send + 'static {
    let scope = scope.map(str::to_owned);
    futures::stream::unfold(ctx.leases.unanswered(), |mut rx| async move {
        let key = rx.recv().await?;
        Some((key, rx))
    })
    .filter_map(move |key| {
        let cluster = crate::leases::cluster_of(&key)
            .filter(|(ns, _)| scope.as_deref().is_none_or(|s| s == *ns))
            .map(|(ns, name)| ObjectRef::<MySQLCluster>::new(name).within(ns));
        futures::future::ready(cluster)
    })
}

/// An API for `K` in `scope`: one namespace, or all of them.
fn scoped<K>(client: &kube::Client, scope: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The cluster, schedule and backup controllers over one namespace, or all of them (`None`).
/// The operator runs one set per watched namespace, so a namespace-scoped install needs no
/// permission outside its namespaces.
async fn controller_set(
    ctx: Arc<Context>,
    scope: Option<&str>,
    owned: watcher::Config,
    stop_rx: tokio::sync::watch::Receiver<bool>,
) {
    let client = ctx.client.clone();
    let readiness = ctx.readiness.clone();
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let clusters: Api<MySQLCluster> = scoped(&client, scope);
    let clusters_for_backups = clusters.clone();
    let backups: Api<MySQLBackup> = scoped(&client, scope);

    let cluster_ctl = Controller::new(clusters.clone(), watcher::Config::default())
        .owns(scoped::<StatefulSet>(&client, scope), owned.clone())
        .owns(scoped::<Service>(&client, scope), owned.clone())
        .owns(scoped::<ConfigMap>(&client, scope), owned.clone())
        .owns(scoped::<PodDisruptionBudget>(&client, scope), owned.clone())
        .owns(scoped::<Deployment>(&client, scope), owned.clone())
        // Role labels are not in the pod template: a recreated pod is labelled when it appears.
        .watches(
            scoped::<Pod>(&client, scope),
            watcher::Config::default().labels(&format!(
                "{}={},{}={}",
                names::NAME_LABEL,
                names::APP_NAME,
                names::COMPONENT_LABEL,
                names::component::DATABASE
            )),
            |p: Pod| {
                let cluster = p.labels().get(names::INSTANCE_LABEL)?.clone();
                Some(ObjectRef::<MySQLCluster>::new(&cluster).within(&p.namespace()?))
            },
        )
        // A primary that stops answering its heartbeats: looked at now, not once its replicas'
        // readiness changes (their network timeout) or the node controller marks its pod.
        .reconcile_on(unanswered_clusters(&ctx, scope))
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            |obj, ctx| timed("cluster", obj, ctx, crate::cluster::reconcile),
            |obj, err, ctx| error_policy("cluster", obj, err, ctx),
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));

    let schedule_ctl = Controller::new(clusters, watcher::Config::default())
        .watches(
            backups.clone(),
            watcher::Config::default(),
            |b: MySQLBackup| {
                Some(
                    ObjectRef::<MySQLCluster>::new(&b.spec.cluster_ref.name)
                        .within(&b.namespace()?),
                )
            },
        )
        // A drill Job's changes (its pod ended) wake its cluster's scheduler, which records it.
        .watches(
            scoped::<Job>(&client, scope),
            watcher::Config::default().labels(&format!(
                "{}={},{}={}",
                crate::names::COMPONENT_LABEL,
                crate::names::component::DRILL,
                crate::names::MANAGED_BY_LABEL,
                crate::names::MANAGED_BY
            )),
            |j: Job| {
                let cluster = j.labels().get(crate::names::INSTANCE_LABEL)?.clone();
                Some(ObjectRef::<MySQLCluster>::new(&cluster).within(&j.namespace()?))
            },
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            |obj, ctx| timed("schedule", obj, ctx, crate::schedule::reconcile),
            |obj, err, ctx| error_policy("schedule", obj, err, ctx),
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));

    let backup_ctl = Controller::new(backups, watcher::Config::default());
    let backup_store = backup_ctl.store();
    // A cluster's deletion policy, as last seen: only a change of it wakes the cluster's
    // backups (their finalizers follow it), not every status write of the cluster.
    let policies = std::sync::Mutex::new(std::collections::HashMap::new());
    let backup_ctl = backup_ctl
        // Pending backups waiting for a sibling to finish poll on a short requeue.
        .owns(scoped::<Job>(&client, scope), owned)
        .watches(
            clusters_for_backups,
            watcher::Config::default(),
            move |c: MySQLCluster| {
                let ns = c.namespace();
                let name = c.name_any();
                let policy = c
                    .spec
                    .backup
                    .as_ref()
                    .map(|b| b.deletion_policy)
                    .unwrap_or_default();
                let previous = policies
                    .lock()
                    .expect("policy map")
                    .insert((ns.clone(), name.clone()), policy);
                let changed = previous.is_some_and(|p| p != policy);
                let refs: Vec<ObjectRef<MySQLBackup>> = if changed {
                    backup_store
                        .state()
                        .iter()
                        .filter(|b| b.namespace() == ns && b.spec.cluster_ref.name == name)
                        .map(|b| ObjectRef::from_obj(b.as_ref()))
                        .collect()
                } else {
                    Vec::new()
                };
                refs
            },
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            |obj, ctx| timed("backup", obj, ctx, crate::backup::reconcile),
            |obj, err, ctx| error_policy("backup", obj, err, ctx),
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));

    futures::join!(
        tracked("cluster", cluster_ctl, &readiness, &stop_rx),
        tracked("schedule", schedule_ctl, &readiness, &stop_rx),
        tracked("backup", backup_ctl, &readiness, &stop_rx),
    );
}

/// Runs a controller to its end, then reports it stopped: `/readyz` fails from then on.
async fn tracked(
    name: &'static str,
    controller: impl Future<Output = ()>,
    readiness: &Readiness,
    stop: &tokio::sync::watch::Receiver<bool>,
) {
    controller.await;
    readiness.controller_stopped(name);
    if *stop.borrow() {
        tracing::info!(controller = name, "controller stopped");
    } else {
        tracing::error!(controller = name, "controller stopped before shutdown");
    }
}

/// Asks the API server for its version every few seconds until `stop`, reporting each answer
/// and failure to `readiness`; changes are logged once.
async fn check_api_server(
    client: kube::Client,
    readiness: Arc<Readiness>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut reachable = None;
    loop {
        let failure =
            match tokio::time::timeout(API_CHECK_TIMEOUT, client.apiserver_version()).await {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(chain(&e)),
                Err(_) => Some(format!("no answer within {}s", API_CHECK_TIMEOUT.as_secs())),
            };
        match failure {
            None => {
                readiness.api_answered(Instant::now());
                if reachable != Some(true) {
                    tracing::info!("api server answers");
                }
                reachable = Some(true);
            }
            Some(error) => {
                if reachable != Some(false) {
                    tracing::warn!(%error, "api server check failed");
                }
                readiness.api_failed(crate::context::truncate(error, 300));
                reachable = Some(false);
            }
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tokio::time::sleep(API_CHECK_INTERVAL) => {}
        }
    }
}

async fn timed<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> Result<Action, Error>
where
    K: kube::Resource,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>>,
{
    let span = tracing::info_span!(
        "reconcile",
        controller,
        namespace = obj.meta().namespace.as_deref().unwrap_or(""),
        name = obj.meta().name.as_deref().unwrap_or("")
    );
    let key = backoff_key(controller, obj.as_ref());
    let start = Instant::now();
    let metrics = ctx.metrics.clone();
    let result = f(obj, ctx.clone()).instrument(span).await;
    metrics.reconciled(controller, start.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.reset_failures(&key);
    }
    result
}

fn backoff_key<K: kube::Resource>(controller: &str, obj: &K) -> String {
    format!(
        "{controller}/{}/{}",
        obj.meta().namespace.as_deref().unwrap_or(""),
        obj.meta().name.as_deref().unwrap_or("")
    )
}

fn error_policy<K>(controller: &'static str, obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
{
    if err.is_conflict() {
        // Written from a stale copy: the watch already has the newer version queued.
        tracing::debug!(
            controller,
            namespace = obj.meta().namespace.as_deref().unwrap_or(""),
            name = obj.meta().name.as_deref().unwrap_or(""),
            "status decided from a stale copy; reconciling again"
        );
        return Action::requeue(std::time::Duration::from_millis(200));
    }
    ctx.metrics.reconcile_failed(controller, err.category());
    let failures = ctx.count_failure(&backoff_key(controller, obj.as_ref()));
    let delay = retry_delay(err, failures);
    tracing::warn!(
        controller,
        namespace = obj.meta().namespace.as_deref().unwrap_or(""),
        name = obj.meta().name.as_deref().unwrap_or(""),
        category = err.category(),
        retryable = err.is_retryable(),
        failures,
        retry_seconds = delay.as_secs(),
        error = %chain(err),
        "reconcile failed"
    );
    // The event carries only the failed step, not the API server's text.
    let note = format!("{err}; retrying in {}s", delay.as_secs());
    tokio::spawn(async move {
        ctx.event(obj.as_ref(), Reason::ReconcileFailed, note).await;
    });
    Action::requeue(delay)
}

/// Exponential backoff per object: 5 s doubling to 5 minutes; rejected requests wait 5 minutes.
pub fn retry_delay(err: &Error, failures: u32) -> std::time::Duration {
    if !err.is_retryable() {
        // A rejected request will be rejected again until someone changes something.
        return std::time::Duration::from_secs(300);
    }
    let exp = failures.saturating_sub(1).min(6);
    std::time::Duration::from_secs((5u64 << exp).min(300))
}
