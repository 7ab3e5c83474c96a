//! Wiring: the three controllers with their watches, metrics and error policy.

use std::sync::Arc;
use std::time::Instant;

use bulwark_api::{MySQLBackup, MySQLCluster};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use tracing::Instrument;

use crate::context::Context;
use crate::error::{chain, Error};
use crate::names;

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
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let clusters: Api<MySQLCluster> = Api::all(client.clone());
    let backups: Api<MySQLBackup> = Api::all(client.clone());

    let cluster_ctl = Controller::new(clusters.clone(), watcher::Config::default())
        .owns(Api::<StatefulSet>::all(client.clone()), owned.clone())
        .owns(Api::<Service>::all(client.clone()), owned.clone())
        .owns(Api::<ConfigMap>::all(client.clone()), owned.clone())
        .owns(
            Api::<PodDisruptionBudget>::all(client.clone()),
            owned.clone(),
        )
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
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            |obj, ctx| timed("schedule", obj, ctx, crate::schedule::reconcile),
            |obj, err, ctx| error_policy("schedule", obj, err, ctx),
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));

    let backup_ctl = Controller::new(backups, watcher::Config::default())
        // Pending backups waiting for a sibling to finish poll on a short requeue.
        .owns(Api::<Job>::all(client.clone()), owned)
        .graceful_shutdown_on(stopped(stop_rx))
        .run(
            |obj, ctx| timed("backup", obj, ctx, crate::backup::reconcile),
            |obj, err, ctx| error_policy("backup", obj, err, ctx),
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));

    tracing::info!("controllers started");
    futures::join!(cluster_ctl, schedule_ctl, backup_ctl);
    tracing::info!("controllers stopped");
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
    let start = Instant::now();
    let metrics = ctx.metrics.clone();
    let result = f(obj, ctx).instrument(span).await;
    metrics.reconciled(controller, start.elapsed().as_secs_f64());
    result
}

fn error_policy<K: kube::Resource>(
    controller: &'static str,
    obj: Arc<K>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.reconcile_failed(controller, err.category());
    tracing::warn!(
        controller,
        namespace = obj.meta().namespace.as_deref().unwrap_or(""),
        name = obj.meta().name.as_deref().unwrap_or(""),
        category = err.category(),
        retryable = err.is_retryable(),
        error = %chain(err),
        "reconcile failed"
    );
    Action::requeue(err.retry_after())
}
