//! The operator's HTTP endpoint: `/metrics` (OpenMetrics text), `/healthz` (the process answers)
//! and `/readyz` (every controller runs and the API server answered lately), routed by axum on
//! hyper through `bulwark-http` (GET only, one request per connection, connections bounded in
//! number and time).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bulwark_http::{get_only, text, Limits};
use tokio::net::TcpListener;

use crate::metrics::{self, Metrics};

/// Longest time without an answer from the API server before `/readyz` fails.
pub const API_STALE_AFTER: Duration = Duration::from_secs(30);

/// Connections served at once and for how long: scrapes and probes are few and quick.
const LIMITS: Limits = Limits {
    header: Duration::from_secs(5),
    connection: Duration::from_secs(30),
    max_connections: 32,
    max_per_peer: 8,
};

/// What `/readyz` asks: `Ok` when ready, else the reason in one line.
pub trait Ready: Send + Sync + 'static {
    /// Whether the operator is ready now, or why not.
    fn ready(&self) -> Result<(), String>;
}

/// A plain switch, for serving the endpoint where no controllers run: ready once set.
impl Ready for AtomicBool {
    fn ready(&self) -> Result<(), String> {
        if self.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("starting".into())
        }
    }
}

/// The operator's readiness: its controllers report when they start and stop, the API server
/// check reports each answer and failure.
pub struct Readiness {
    stale_after: Duration,
    state: Mutex<ReadyState>,
}

/// What readiness is decided from.
#[derive(Debug, Clone, Default)]
pub struct ReadyState {
    /// Each controller started, and whether it still runs.
    pub controllers: Vec<(&'static str, bool)>,
    /// When the API server last answered.
    pub api_answered: Option<Instant>,
    /// The last failed API server check, if none succeeded since.
    pub api_error: Option<String>,
}

impl ReadyState {
    /// Ready, or the first reason not to be: a stopped controller, then the API server, then
    /// controllers not started yet.
    pub fn verdict(&self, now: Instant, stale_after: Duration) -> Result<(), String> {
        if let Some((name, _)) = self.controllers.iter().find(|(_, running)| !running) {
            return Err(format!("controller {name} stopped"));
        }
        let error = self.api_error.as_deref().unwrap_or("no answer yet");
        match self.api_answered {
            None => return Err(format!("api server not reached yet: {error}")),
            Some(at) => {
                let silent = now.saturating_duration_since(at);
                if silent > stale_after {
                    return Err(format!(
                        "api server unreachable for {}s: {error}",
                        silent.as_secs()
                    ));
                }
            }
        }
        if self.controllers.is_empty() {
            return Err("controllers not started yet".into());
        }
        Ok(())
    }
}

impl Readiness {
    /// Not ready until controllers start and the API server answers; not ready again when a
    /// controller stops or the API server has been silent for longer than `stale_after`.
    pub fn new(stale_after: Duration) -> Self {
        Readiness {
            stale_after,
            state: Mutex::default(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut ReadyState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records that controller `name` runs.
    pub fn controller_started(&self, name: &'static str) {
        self.with(
            |s| match s.controllers.iter_mut().find(|(n, _)| *n == name) {
                Some(c) => c.1 = true,
                None => s.controllers.push((name, true)),
            },
        );
    }

    /// Records that controller `name` stopped.
    pub fn controller_stopped(&self, name: &'static str) {
        self.with(
            |s| match s.controllers.iter_mut().find(|(n, _)| *n == name) {
                Some(c) => c.1 = false,
                None => s.controllers.push((name, false)),
            },
        );
    }

    /// Records an answer of the API server at `at`.
    pub fn api_answered(&self, at: Instant) {
        self.with(|s| {
            s.api_answered = Some(at);
            s.api_error = None;
        });
    }

    /// Records a failed API server check; `error` is shown by `/readyz` once it matters.
    pub fn api_failed(&self, error: String) {
        self.with(|s| s.api_error = Some(error));
    }

    /// Ready at `now`, or why not.
    pub fn check(&self, now: Instant) -> Result<(), String> {
        self.with(|s| s.verdict(now, self.stale_after))
    }
}

impl Ready for Readiness {
    fn ready(&self) -> Result<(), String> {
        self.check(Instant::now())
    }
}

#[derive(Clone)]
struct Endpoint {
    metrics: Arc<Metrics>,
    ready: Arc<dyn Ready>,
}

/// The routes: `/metrics`, `/healthz`, `/readyz`.
pub fn router<R: Ready>(metrics: Arc<Metrics>, ready: Arc<R>) -> Router {
    get_only(
        Router::new()
            .route("/metrics", get(metrics_page))
            .route("/healthz", get(|| async { text(StatusCode::OK, "ok") }))
            .route("/readyz", get(readyz)),
        "not found",
    )
    .with_state(Endpoint { metrics, ready })
}

async fn metrics_page(State(e): State<Endpoint>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        e.metrics.render(),
    )
        .into_response()
}

async fn readyz(State(e): State<Endpoint>) -> Response {
    match e.ready.ready() {
        Ok(()) => text(StatusCode::OK, "ready"),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, &reason),
    }
}

/// Serves the endpoints on `listener` until the task is dropped. `ready` decides `/readyz`.
pub async fn serve<R: Ready>(listener: TcpListener, metrics: Arc<Metrics>, ready: Arc<R>) {
    bulwark_http::serve(
        listener,
        router(metrics, ready),
        LIMITS,
        std::future::pending(),
    )
    .await
}

/// Binds the endpoint's listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_http::testing::exchange;

    #[test]
    fn readiness_verdicts() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let all = vec![("cluster", true), ("schedule", true), ("backup", true)];
        let stale = Duration::from_secs(30);
        let cases: Vec<(&str, ReadyState, Instant, Result<(), &str>)> = vec![
            (
                "nothing known yet",
                ReadyState::default(),
                s(0),
                Err("api server not reached yet: no answer yet"),
            ),
            (
                "controllers run, api server not reached",
                ReadyState {
                    controllers: all.clone(),
                    api_error: Some("connection refused".into()),
                    ..Default::default()
                },
                s(1),
                Err("api server not reached yet: connection refused"),
            ),
            (
                "api server answers, controllers not started",
                ReadyState {
                    api_answered: Some(s(0)),
                    ..Default::default()
                },
                s(1),
                Err("controllers not started yet"),
            ),
            (
                "all well",
                ReadyState {
                    controllers: all.clone(),
                    api_answered: Some(s(0)),
                    api_error: None,
                },
                s(5),
                Ok(()),
            ),
            (
                "a recent failure is tolerated",
                ReadyState {
                    controllers: all.clone(),
                    api_answered: Some(s(0)),
                    api_error: Some("timeout".into()),
                },
                s(30),
                Ok(()),
            ),
            (
                "api server silent too long",
                ReadyState {
                    controllers: all.clone(),
                    api_answered: Some(s(0)),
                    api_error: Some("connection refused".into()),
                },
                s(42),
                Err("api server unreachable for 42s: connection refused"),
            ),
            (
                "a stopped controller comes first",
                ReadyState {
                    controllers: vec![("cluster", true), ("schedule", true), ("backup", false)],
                    api_answered: Some(s(0)),
                    api_error: Some("connection refused".into()),
                },
                s(42),
                Err("controller backup stopped"),
            ),
        ];
        for (name, state, now, want) in cases {
            assert_eq!(
                state.verdict(now, stale),
                want.map_err(String::from),
                "{name}"
            );
        }
    }

    #[test]
    fn readiness_follows_reports() {
        let r = Readiness::new(Duration::from_secs(30));
        let t0 = Instant::now();
        for c in ["cluster", "schedule", "backup"] {
            r.controller_started(c);
        }
        r.api_failed("refused".into());
        assert_eq!(
            r.check(t0),
            Err("api server not reached yet: refused".into())
        );
        r.api_answered(t0);
        assert_eq!(r.check(t0 + Duration::from_secs(1)), Ok(()));
        r.controller_stopped("schedule");
        assert_eq!(
            r.check(t0 + Duration::from_secs(1)),
            Err("controller schedule stopped".into())
        );
    }

    fn body(answer: &str) -> &str {
        answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }

    #[tokio::test]
    async fn serves_get_only_on_known_paths() {
        let metrics = Arc::new(Metrics::default());
        metrics.reconciled("cluster", 0.01);
        let ready = Arc::new(AtomicBool::new(false));
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, metrics, ready.clone()));
        let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");

        let m = exchange(addr, &get("/metrics")).await;
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(
            m.contains(&format!("content-type: {}\r\n", metrics::CONTENT_TYPE)),
            "{m}"
        );
        assert!(
            m.contains("\nbulwark_reconciles_total{controller=\"cluster\"} 1\n"),
            "{m}"
        );
        assert!(m.ends_with("# EOF\n"), "{m}");

        let h = exchange(addr, &get("/healthz?verbose")).await;
        assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
        assert_eq!(body(&h), "ok\n");

        let r = exchange(addr, &get("/readyz")).await;
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
        assert_eq!(body(&r), "starting\n");
        ready.store(true, Ordering::Relaxed);
        let r = exchange(addr, &get("/readyz")).await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert_eq!(body(&r), "ready\n");

        for request in [
            "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
            "DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            let a = exchange(addr, request).await;
            assert!(a.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{a}");
            assert!(a.contains("allow: GET\r\n"), "{a}");
        }
        for request in [
            get("/nope"),
            get("/metrics/x"),
            "POST /x HTTP/1.1\r\n\r\n".into(),
        ] {
            let a = exchange(addr, &request).await;
            assert!(a.starts_with("HTTP/1.1 404 Not Found\r\n"), "{a}");
        }
        server.abort();
    }
}
