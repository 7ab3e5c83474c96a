//! The agent sidecar's life: it binds the endpoints (`/healthz`, `/readyz`, `/status`, the
//! operator's `/role` and `/lease`, the replicas' `/lease/follow`), the copy server and the
//! metrics, starts renewing its primary's lease as a replica, then runs passes (on the
//! interval, when an order or a renewed lease wakes it, when the lease runs out, back to back
//! while each acts) and publishes each pass's readiness and report until shutdown.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulwark_contract::Role;

use super::config::AgentConfig;
use super::error::AgentError;
use super::handover::HandoverMark;
use super::http::{self, Readiness};
use super::lease::Lease;
use super::observe::{self, STATEMENT_TIMEOUT};
use super::orders::Orders;
use super::pass::Agent;
use crate::decide::handover;
use crate::decide::report::{member_status, SourceContact};
use crate::decide::topology::Decision;

/// Longest a `/status?fresh` request waits for a pass that began after it.
const FRESH_WAIT: Duration = Duration::from_secs(3);

/// Passes run back to back while each applies an action (a promotion or a demotion is several
/// steps), at most this many before the interval is waited again.
const MAX_BUSY_PASSES: u32 = 16;

/// Least time between two log lines giving a changed not-ready reason.
const NOT_READY_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Runs the agent until `shutdown` resolves.
pub async fn run(
    config: AgentConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), AgentError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| AgentError::Listen {
            addr: config.listen,
            source,
        })?;
    let local = listener.local_addr().unwrap_or(config.listen);
    tracing::info!(listen = %local, socket = %config.socket.display(), "agent listening");
    println!("listening on {local}");

    let (clone_port, copies) = serve_copies(&config).await;
    let metrics = serve_metrics(&config).await;
    let readiness = Arc::new(Mutex::new(Readiness {
        ready: false,
        reason: "starting".into(),
        at: Instant::now(),
        started: Instant::now(),
        member: None,
        settled: false,
        // The process before may have renewed a moment ago.
        followed: Instant::now(),
        source: SourceContact::default(),
    }));
    let orders = Arc::new(Orders::load(
        config.pod_name.clone(),
        config.order_file.clone(),
    ));
    let lease = Arc::new(Lease::new(
        config.pod_name.clone(),
        config.primary_lease.then(|| {
            config
                .socket
                .with_file_name(bulwark_contract::paths::LEASE_FILE)
        }),
    ));
    let wake = Arc::new(tokio::sync::Notify::new());
    let (passed, passes) = tokio::sync::watch::channel(());
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let endpoints = tokio::spawn(http::serve(
        listener,
        routes(&config, &orders, &lease, &readiness, &wake, passes),
        http::limits(config.health_timeout),
        async {
            let _ = http_stopped.await;
        },
    ));

    // Members renew their primary's lease when they hold one themselves as the primary: with
    // automatic failover on.
    let follows = config
        .pod_name
        .clone()
        .filter(|_| config.primary_lease)
        .map(|pod| {
            tokio::spawn(super::follow::run(
                pod,
                config.credentials_dir.clone(),
                readiness.clone(),
            ))
        });

    // mysqld listens on the port its replicas reach their primary at: members share one
    // configuration.
    let stale_dumps = tokio::spawn(super::stale_dumps::run(
        config.socket.clone(),
        config.credentials_dir.clone(),
        config.source.port,
    ));

    // Beside the socket: `paths::RUN_DIR` in a pod, which the preStop hooks read.
    let mut mark = HandoverMark::new(
        config
            .socket
            .with_file_name(bulwark_contract::paths::HANDOVER_FILE),
    );
    let mut agent = Agent::new(config, orders, lease);
    // The lease watchdog's stamp follows the lease between passes (MariaDB, failover on).
    let stamp_keeper = agent.config.primary_lease.then(|| {
        tokio::spawn(super::stamp_keeper::keep_stamp(
            agent.config.socket.clone(),
            agent.config.credentials_dir.clone(),
            agent.lease.clone(),
            agent.stamp_keeper.clone(),
        ))
    });
    let mut ticker = tokio::time::interval(agent.config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let mut log = ReadinessLog::default();
    let mut busy_passes = 0;
    loop {
        if busy_passes == 0 || busy_passes >= MAX_BUSY_PASSES {
            busy_passes = 0;
            // A primary fences itself as soon as its lease runs out, not up to an interval later.
            let lapse = agent
                .lease
                .deadline()
                .filter(|d| *d > Instant::now() && agent.config.primary_lease);
            tokio::select! {
                _ = ticker.tick() => {}
                _ = wake.notified() => {}
                _ = sleep_until(lapse) => {}
                _ = &mut shutdown => break,
            }
        }
        let began = Instant::now();
        let decision = agent.pass().await;
        busy_passes = if agent.last.acted { busy_passes + 1 } else { 0 };
        let mut r = readiness.lock().expect("readiness lock");
        log.record(&r, &decision);
        let role = agent.role.last.clone().and_then(Result::ok);
        let held = agent
            .fence
            .as_ref()
            .is_some_and(|f| f.remaining().is_some());
        let needed = agent.last.observed.as_ref().is_some_and(|o| {
            let primary = role.as_ref().is_some_and(|r| r.role == Role::Primary);
            handover::pending(primary, o.read_only, o.replicas_attached, held)
        });
        let shown = mark.update(needed, Instant::now());
        let now = Instant::now();
        let source = SourceContact {
            unreachable: agent.primary_positions.unreachable_for(now),
            heard_ago: agent.primary_positions.heard_ago(now),
            provisional: agent.primary_positions.provisional(),
        };
        let member = agent
            .last
            .observed
            .as_ref()
            .map(|o| member_status(role, o, &decision, clone_port, held, shown, source));
        *r = Readiness {
            ready: decision.ready,
            reason: decision.reason,
            at: now,
            started: began,
            member,
            settled: decision.action.is_none(),
            followed: r.followed,
            source,
        };
        drop(r);
        passed.send_replace(());
    }
    tracing::info!("agent stopping");
    if let Some(fence) = agent.fence.take() {
        if fence.remaining().is_some() {
            fence.wait_out().await;
        }
    }
    if let Some(follows) = follows {
        follows.abort();
    }
    stale_dumps.abort();
    if let Some(keeper) = stamp_keeper {
        keeper.abort();
    }
    let _ = stop_http.send(());
    let _ = endpoints.await;
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    if let Some(copies) = copies {
        // No new copies; one in progress ends with the process (its receiver fails and tries
        // again).
        copies.abort();
    }
    agent.disconnect_gracefully().await;
    mark.clear();
    Ok(())
}

/// Until `deadline`, or for ever.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// The endpoints' handlers over the state the passes publish.
fn routes(
    config: &AgentConfig,
    orders: &Arc<Orders>,
    lease: &Arc<Lease>,
    readiness: &Arc<Mutex<Readiness>>,
    wake: &Arc<tokio::sync::Notify>,
    passes: tokio::sync::watch::Receiver<()>,
) -> axum::Router {
    let order = super::orders::handler(
        orders.clone(),
        config.credentials_dir.clone(),
        wake.clone(),
        passes.clone(),
        readiness.clone(),
    );
    let stale_after = config.interval * 3 + STATEMENT_TIMEOUT * 3;
    let healthz = {
        let socket = config.socket.clone();
        let credentials_dir = config.credentials_dir.clone();
        let timeout = config.health_timeout;
        // Probes (and anyone else on the pod network) share one check a second: requests
        // never multiply root connections to the server.
        let coalesced = Arc::new(http::Coalesced::new(Duration::from_secs(1)));
        move || {
            let socket = socket.clone();
            let credentials_dir = credentials_dir.clone();
            let coalesced = coalesced.clone();
            async move {
                coalesced
                    .get(|| observe::health(&socket, &credentials_dir, timeout))
                    .await
            }
        }
    };
    let readyz = {
        let readiness = readiness.clone();
        move || http::readyz(readiness.clone(), stale_after)
    };
    let status = {
        let board = http::Passes {
            readiness: readiness.clone(),
            wake: wake.clone(),
            passes,
            stale_after,
            fresh_wait: FRESH_WAIT,
        };
        move |axum::extract::RawQuery(query): axum::extract::RawQuery| {
            http::status(board.clone(), query)
        }
    };
    let follow = super::lease_follow::follow_handler(lease.clone(), config.credentials_dir.clone());
    let lease = super::lease::handler(lease.clone(), config.credentials_dir.clone(), wake.clone());
    http::routes(healthz, readyz, status, order, (lease, follow))
}

/// Serves copies of this member's data beside the probes, when configured: the port (0 when
/// none) and the server's task. A listener that cannot be bound is no reason to stop serving
/// the server's role and probes.
async fn serve_copies(config: &AgentConfig) -> (u16, Option<tokio::task::JoinHandle<()>>) {
    let Some((addr, datadir)) = &config.clone else {
        return (0, None);
    };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => {
            let port = l.local_addr().map_or(0, |a| a.port());
            let donor = Arc::new(super::clone::Donor {
                socket: config.socket.clone(),
                credentials_dir: config.credentials_dir.clone(),
                datadir: datadir.clone(),
            });
            tracing::info!(listen = %addr, port, "serving copies of this member's data");
            (port, Some(tokio::spawn(super::clone::serve(l, donor))))
        }
        Err(e) => {
            tracing::error!(listen = %addr, error = %e, "failed to listen for copies of this member's data");
            (0, None)
        }
    }
}

/// Serves the exporter's `/metrics`, when configured. A listener that cannot be bound is no
/// reason to stop serving the server's role and probes: the scrapes fail, and say so.
async fn serve_metrics(config: &AgentConfig) -> Option<tokio::task::JoinHandle<()>> {
    let m = config.metrics?;
    match tokio::net::TcpListener::bind(m.listen).await {
        Ok(l) => {
            tracing::info!(listen = %m.listen, upstream = %m.upstream, "serving the exporter's metrics");
            Some(tokio::spawn(http::serve(
                l,
                super::metrics::routes(m.upstream),
                super::metrics::limits(),
                std::future::pending(),
            )))
        }
        Err(e) => {
            tracing::error!(listen = %m.listen, error = %e, "failed to listen for metrics scrapes");
            None
        }
    }
}

/// When the pod is not ready, why: in the log too (the kubelet's events show only the status
/// code), but a changing reason (a lag in seconds) at most every [`NOT_READY_LOG_INTERVAL`].
#[derive(Default)]
struct ReadinessLog {
    not_ready_logged: Option<Instant>,
}

impl ReadinessLog {
    fn record(&mut self, was: &Readiness, now: &Decision) {
        if was.ready != now.ready {
            tracing::info!(ready = now.ready, reason = %now.reason, "readiness changed");
            self.not_ready_logged = (!now.ready).then(Instant::now);
        } else if was.reason != now.reason {
            if !now.ready
                && self
                    .not_ready_logged
                    .is_none_or(|t| t.elapsed() >= NOT_READY_LOG_INTERVAL)
            {
                tracing::warn!(reason = %now.reason, "not ready");
                self.not_ready_logged = Some(Instant::now());
            } else {
                tracing::debug!(ready = now.ready, reason = %now.reason, "readiness reason changed");
            }
        }
    }
}
