//! The agent's endpoints, the kubelet's probes `/healthz` and `/readyz` and the operator's
//! `/status`, on the shared small-endpoint stack
//! (`bulwark-http`): GET only, one short plain-text line per answer, connections bounded in
//! number and time.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use bulwark_contract::member::MemberStatus;
pub use bulwark_http::serve;
use bulwark_http::Limits;

use crate::decide::report::SourceContact;

/// What `/readyz` answers.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    pub(crate) ready: bool,
    pub(crate) reason: String,
    pub(crate) at: Instant,
    /// When the pass that gave this began.
    pub(crate) started: Instant,
    /// The report of `/status`, when the pass observed the server.
    pub(crate) member: Option<MemberStatus>,
    /// The pass took no action: the server is as its role wants it.
    pub(crate) settled: bool,
    /// When this agent last renewed (or tried to renew) its primary's lease, taken under the
    /// same lock as the report it renewed on (`follow`); the agent's start until it has.
    pub(crate) followed: Instant,
    /// What the pass found of the way to its primary's server, as of `at`: the report gives it
    /// as of the answer.
    pub(crate) source: SourceContact,
}

/// What the agent's passes leave for `/status`, and how to ask for a fresh one.
#[derive(Clone)]
pub(crate) struct Passes {
    pub(crate) readiness: Arc<Mutex<Readiness>>,
    /// Starts a pass now.
    pub(crate) wake: Arc<tokio::sync::Notify>,
    /// Changes when a pass has ended.
    pub(crate) passes: tokio::sync::watch::Receiver<()>,
    /// A report older than this is no observation.
    pub(crate) stale_after: Duration,
    /// How long `?fresh` waits for a pass that began after the request.
    pub(crate) fresh_wait: Duration,
}

/// `/readyz`: the last pass's readiness, unless no pass came for `stale_after`.
pub(crate) async fn readyz(readiness: Arc<Mutex<Readiness>>, stale_after: Duration) -> Response {
    let r = readiness.lock().expect("readiness lock").clone();
    if r.at.elapsed() > stale_after {
        Response::new(
            503,
            format!("not ready: no pass for {}s", r.at.elapsed().as_secs()),
        )
    } else if r.ready {
        Response::new(200, format!("ready: {}", r.reason))
    } else {
        Response::new(503, format!("not ready: {}", r.reason))
    }
}

/// `/status`: the last pass's report for the operator; with `?fresh`, from a pass that began
/// after the request (the operator compares data during a switchover), not from one up to an
/// interval old.
pub(crate) async fn status(mut p: Passes, query: Option<String>) -> Response {
    if query.as_deref() == Some(bulwark_contract::member::FRESH_QUERY) {
        let asked = Instant::now();
        p.passes.mark_unchanged();
        p.wake.notify_one();
        let deadline = tokio::time::Instant::now() + p.fresh_wait;
        while p.readiness.lock().expect("readiness lock").started < asked {
            let next = tokio::time::timeout_at(deadline, p.passes.changed()).await;
            if !matches!(next, Ok(Ok(()))) {
                break;
            }
        }
    }
    let r = p.readiness.lock().expect("readiness lock").clone();
    let age = r.at.elapsed();
    match r.member {
        Some(mut m) if age <= p.stale_after => {
            m.age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            // As of the answer, like the renewal's age below: the operator dates a lost
            // primary's silence from these, not up to an interval late.
            if let Some(rep) = m.replication.as_mut() {
                let aged = r.source.aged(age);
                rep.source_unreachable_seconds = aged.unreachable.map(|d| d.as_secs());
                rep.source_heard_ms = aged
                    .heard_ago
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            }
            m.followed_ms =
                Some(u64::try_from(r.followed.elapsed().as_millis()).unwrap_or(u64::MAX));
            Response::new(200, m.to_line())
        }
        Some(_) => Response::new(
            503,
            format!("no observation: no pass for {}s", age.as_secs()),
        ),
        None => Response::new(503, format!("no observation: {}", r.reason)),
    }
}

/// Time a client has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once (beyond them a reserve for addresses holding few; more are
/// closed when accepted, `bulwark_http::Admission`). `/healthz` checks are coalesced
/// ([`Coalesced`]), so the server sees at most one check connection whatever this is.
const MAX_CONNECTIONS: usize = 64;
/// Connections served at once from one address: the operator asks for a report and sends an
/// order at most a few at a time, the kubelet probes twice; a pod that opens connections and
/// stays silent holds this many, never the kubelet's or the operator's.
const MAX_PER_PEER: usize = 6;

/// An answer: status code and one line of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// One line (a newline is added).
    pub body: String,
}

impl Response {
    /// A response with `status` and `body`.
    pub fn new(status: u16, body: impl Into<String>) -> Self {
        Response {
            status,
            body: body.into(),
        }
    }
}

impl axum::response::IntoResponse for Response {
    fn into_response(self) -> axum::response::Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        bulwark_http::text(status, &self.body)
    }
}

/// Limits for handlers that answer within `handler_time`: the request head within
/// [`HEADER_TIMEOUT`], the whole exchange within the handler's time plus a margin.
pub fn limits(handler_time: Duration) -> Limits {
    Limits {
        header: HEADER_TIMEOUT,
        connection: HEADER_TIMEOUT + handler_time + Duration::from_secs(5),
        max_connections: MAX_CONNECTIONS,
        max_per_peer: MAX_PER_PEER,
    }
}

/// The agent's routes: the probes, `/status` (the operator's view of the member), the
/// operator's role orders, the primary's lease heartbeats and its replicas' renewals (`POST`,
/// signed; see `orders` and `lease`).
pub fn routes<H, HF, R, RF, S, SF, O, OF, L, LF, F, FF>(
    healthz: H,
    readyz: R,
    status: S,
    order: O,
    (lease, follow): (L, F),
) -> Router
where
    F: Fn(axum::body::Bytes) -> FF + Clone + Send + Sync + 'static,
    FF: Future<Output = Response> + Send + 'static,
    O: Fn(axum::body::Bytes) -> OF + Clone + Send + Sync + 'static,
    OF: Future<Output = Response> + Send + 'static,
    L: Fn(axum::body::Bytes) -> LF + Clone + Send + Sync + 'static,
    LF: Future<Output = Response> + Send + 'static,
    H: Fn() -> HF + Clone + Send + Sync + 'static,
    HF: Future<Output = Response> + Send + 'static,
    R: Fn() -> RF + Clone + Send + Sync + 'static,
    RF: Future<Output = Response> + Send + 'static,
    S: Fn(axum::extract::RawQuery) -> SF + Clone + Send + Sync + 'static,
    SF: Future<Output = Response> + Send + 'static,
{
    bulwark_http::get_only(
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route(bulwark_contract::member::STATUS_PATH, get(status)),
        "not found; try /healthz, /readyz or /status",
    )
    .route(
        bulwark_contract::order::ORDER_PATH,
        axum::routing::post(order).layer(axum::extract::DefaultBodyLimit::max(
            bulwark_contract::order::MAX_ORDER_BYTES,
        )),
    )
    .route(
        bulwark_contract::lease::LEASE_PATH,
        axum::routing::post(lease).layer(axum::extract::DefaultBodyLimit::max(
            bulwark_contract::lease::MAX_HEARTBEAT_BYTES,
        )),
    )
    .route(
        bulwark_contract::follow::FOLLOW_PATH,
        axum::routing::post(follow).layer(axum::extract::DefaultBodyLimit::max(
            bulwark_contract::follow::MAX_FOLLOW_BYTES,
        )),
    )
}

/// The probe routes: `/healthz` and `/readyz` answered by the given handlers.
pub fn probes<H, HF, R, RF>(healthz: H, readyz: R) -> Router
where
    H: Fn() -> HF + Clone + Send + Sync + 'static,
    HF: Future<Output = Response> + Send + 'static,
    R: Fn() -> RF + Clone + Send + Sync + 'static,
    RF: Future<Output = Response> + Send + 'static,
{
    bulwark_http::get_only(
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz)),
        "not found; try /healthz or /readyz",
    )
}

/// One check shared by every request that arrives while it runs or within `fresh` of its
/// answer: however many probes (or anyone else on the pod network) ask, the server sees at
/// most one check connection at a time and one per `fresh`.
pub struct Coalesced {
    fresh: Duration,
    last: std::sync::Mutex<Option<(std::time::Instant, Response)>>,
    running: tokio::sync::Mutex<()>,
}

impl Coalesced {
    /// Answers younger than `fresh` are reused.
    pub fn new(fresh: Duration) -> Self {
        Coalesced {
            fresh,
            last: std::sync::Mutex::new(None),
            running: tokio::sync::Mutex::new(()),
        }
    }

    fn recent(&self) -> Option<Response> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < self.fresh)
            .map(|(_, r)| r.clone())
    }

    /// The answer of a check run by `check`, or of one that just ran.
    pub async fn get<F, Fut>(&self, check: F) -> Response
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Response>,
    {
        if let Some(r) = self.recent() {
            return r;
        }
        let _running = self.running.lock().await;
        // The check this request waited for may have answered it.
        if let Some(r) = self.recent() {
            return r;
        }
        let r = check().await;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((std::time::Instant::now(), r.clone()));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_http::testing::exchange;
    use std::net::SocketAddr;
    use tokio::net::TcpListener;

    /// A server answering `/healthz` with 200 and `/readyz` with a two-line 503; stopped when
    /// the sender is dropped.
    async fn start(limits: Limits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = probes(
            || async { Response::new(200, "mysqld answers") },
            || async { Response::new(503, "not ready:\nsecond line") },
        );
        tokio::spawn(serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    #[tokio::test]
    async fn serves_probes_over_tcp() {
        let (addr, _stop) = start(limits(Duration::from_secs(1))).await;
        let ok = exchange(addr, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("content-type: text/plain; charset=utf-8\r\n"),
            "{ok}"
        );
        assert!(ok.contains("cache-control: no-store\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nmysqld answers\n"), "{ok}");

        let not_ready = exchange(addr, "GET /readyz?verbose=1 HTTP/1.0\r\n\r\n").await;
        assert!(
            not_ready.starts_with("HTTP/1.0 503 Service Unavailable\r\n")
                || not_ready.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{not_ready}"
        );
        assert!(
            not_ready.ends_with("\r\n\r\nnot ready: second line\n"),
            "{not_ready}"
        );
        assert!(not_ready.contains("content-length: 23\r\n"), "{not_ready}");

        for request in [
            "POST /readyz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            "HEAD /readyz HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            let a = exchange(addr, request).await;
            assert!(a.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{a}");
            assert!(a.contains("allow: GET\r\n"), "{a}");
        }
        let nowhere = exchange(addr, "GET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(
            nowhere.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{nowhere}"
        );
        assert!(
            nowhere.ends_with("not found; try /healthz or /readyz\n"),
            "{nowhere}"
        );
        let bad = exchange(addr, "GET /a b HTTP/1.1\r\n\r\n").await;
        assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_check() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let checks = Arc::new(AtomicUsize::new(0));
        let coalesced = Arc::new(Coalesced::new(Duration::from_millis(300)));
        let ask = || {
            let checks = checks.clone();
            let coalesced = coalesced.clone();
            tokio::spawn(async move {
                coalesced
                    .get(|| async {
                        let n = checks.fetch_add(1, Ordering::SeqCst) + 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Response::new(200, format!("check {n}"))
                    })
                    .await
            })
        };
        let answers: Vec<Response> = futures::future::join_all((0..50).map(|_| ask()))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(checks.load(Ordering::SeqCst), 1);
        assert!(answers.iter().all(|r| r.body == "check 1"));
        // Once the answer is stale, the next request checks again.
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(ask().await.unwrap().body, "check 2");
    }

    fn member(reason: &str) -> MemberStatus {
        serde_json::from_value(serde_json::json!({
            "role": "replica", "epoch": 1, "ready": true, "reason": reason,
            "flavor": "mariadb", "readOnly": true, "superReadOnly": false,
            "gtidExecuted": "0-1-5", "semiSyncWait": false, "semiSyncClients": 0,
            "replication": null, "ageMs": 0
        }))
        .unwrap()
    }

    fn passed(reason: &str, started: Instant) -> Readiness {
        Readiness {
            ready: true,
            reason: reason.into(),
            at: Instant::now(),
            started,
            member: Some(member(reason)),
            settled: true,
            followed: started,
            source: SourceContact::default(),
        }
    }

    #[tokio::test]
    async fn a_fresh_report_comes_from_a_pass_that_began_after_the_request() {
        let before = Instant::now();
        let readiness = Arc::new(Mutex::new(passed("old pass", before)));
        let (passed_tx, passes) = tokio::sync::watch::channel(());
        let board = Passes {
            readiness: readiness.clone(),
            wake: Arc::new(tokio::sync::Notify::new()),
            passes,
            stale_after: Duration::from_secs(60),
            fresh_wait: Duration::from_secs(5),
        };
        // The pass the request wakes.
        let wake = board.wake.clone();
        let pass = tokio::spawn(async move {
            wake.notified().await;
            let began = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            *readiness.lock().unwrap() = passed("new pass", began);
            passed_tx.send_replace(());
            passed_tx
        });
        let fresh = status(board.clone(), Some("fresh".into())).await;
        assert_eq!(fresh.status, 200);
        assert!(fresh.body.contains("new pass"), "{}", fresh.body);
        let _tx = pass.await.unwrap();
        // Without `?fresh`, the last report as it is.
        let last = status(board.clone(), None).await;
        assert!(last.body.contains("new pass"), "{}", last.body);
        // No pass comes: the wait ends, with the last report.
        let quick = Passes {
            fresh_wait: Duration::from_millis(100),
            ..board
        };
        let waited = Instant::now();
        let stale = status(quick, Some("fresh".into())).await;
        assert!(waited.elapsed() >= Duration::from_millis(100));
        assert!(stale.body.contains("new pass"), "{}", stale.body);
    }

    #[tokio::test]
    async fn readiness_answers_from_the_last_pass_unless_it_is_too_old() {
        let r = Arc::new(Mutex::new(passed("replicating", Instant::now())));
        let ok = readyz(r.clone(), Duration::from_secs(60)).await;
        assert_eq!((ok.status, ok.body.as_str()), (200, "ready: replicating"));
        let old = readyz(r, Duration::ZERO).await;
        assert_eq!(old.status, 503);
        assert!(
            old.body.starts_with("not ready: no pass for"),
            "{}",
            old.body
        );
    }
}
