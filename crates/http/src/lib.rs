//! The small HTTP endpoints of the operator (`/metrics`, `/healthz`, `/readyz`) and of the
//! in-pod agent (`/healthz`, `/readyz`): axum routes answering GET only (another method on a
//! route is answered 405, another path 404) in one plain-text line, served on hyper with one
//! request per connection and connections bounded in number, in time and per client address,
//! so a slow or silent client cannot hold the endpoint, and one that opens many connections
//! holds no more than its share (the kubelet's probes come from another address).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

pub mod client;

/// Largest request head read (hyper's minimum buffer is 8 KiB).
const MAX_HEAD: usize = 16 << 10;

/// How many connections are served at once and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send its request head.
    pub header: Duration,
    /// Longest a connection is served, response included.
    pub connection: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Connections served at once from one client address; more are closed when accepted.
    pub max_per_peer: usize,
}

/// Connections being served, per client address, each address up to a share.
struct PeerShares {
    most: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its address' share, given back when dropped.
struct PeerSlot {
    shares: Arc<PeerShares>,
    ip: IpAddr,
}

impl PeerShares {
    /// Shares of `most` connections per address.
    fn new(most: usize) -> Arc<PeerShares> {
        Arc::new(PeerShares {
            most,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection from `ip`; `None` while `ip` holds its share.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(ip).or_insert(0);
        if *n >= self.most {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            shares: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// A plain-text answer of one line (line breaks in `line` become spaces), never cached.
pub fn text(status: StatusCode, line: &str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        format!("{}\n", line.replace(['\r', '\n'], " ")),
    )
        .into_response()
}

/// `routes` answering GET only, with `not_found` for any other path.
pub fn get_only<S>(routes: Router<S>, not_found: &'static str) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    routes
        // Applies to the routes above only: axum's `get` would also answer HEAD.
        .route_layer(axum::middleware::from_fn(only_get))
        .fallback(move || async move { text(StatusCode::NOT_FOUND, not_found) })
}

async fn only_get(request: Request, next: Next) -> Response {
    if request.method() == Method::GET {
        return next.run(request).await;
    }
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served");
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    response
}

/// The connections a listener serves at once, in all and per client address (the HTTP
/// endpoints here, and the agent's copy port, which is not HTTP).
pub struct Admission {
    slots: Arc<tokio::sync::Semaphore>,
    shares: Arc<PeerShares>,
}

/// An admitted connection's place, given back when dropped.
pub struct Admitted {
    _slot: tokio::sync::OwnedSemaphorePermit,
    _share: PeerSlot,
}

/// What [`Admission::accept`] took in.
pub enum Accepted {
    /// Served: keep the place as long as the connection.
    Admitted(TcpStream, SocketAddr, Admitted),
    /// Its address holds its share already: the caller closes it (saying why, if it likes).
    OverShare(TcpStream, SocketAddr),
}

impl Admission {
    /// `max_connections` in all, `max_per_peer` from one address.
    pub fn new(max_connections: usize, max_per_peer: usize) -> Admission {
        Admission {
            slots: Arc::new(tokio::sync::Semaphore::new(max_connections)),
            shares: PeerShares::new(max_per_peer),
        }
    }

    /// Waits for a free place (more clients wait in the listen backlog), then takes the next
    /// connection.
    pub async fn accept(&self, listener: &TcpListener) -> std::io::Result<Accepted> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (stream, peer) = listener.accept().await?;
        Ok(match self.shares.take(peer.ip()) {
            Some(share) => Accepted::Admitted(
                stream,
                peer,
                Admitted {
                    _slot: slot,
                    _share: share,
                },
            ),
            None => Accepted::OverShare(stream, peer),
        })
    }
}

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let admission = Admission::new(limits.max_connections, limits.max_per_peer);
    let mut refused_logged: Option<std::time::Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = admission.accept(&listener) => a,
            _ = &mut shutdown => return,
        };
        let (stream, place) = match accepted {
            Ok(Accepted::Admitted(stream, _, place)) => (stream, place),
            Ok(Accepted::OverShare(_, peer)) => {
                // Closed at once, the slot free for others at once.
                if refused_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(peer = %peer.ip(), most = limits.max_per_peer, "a client holds its share of connections; closing its others");
                    refused_logged = Some(std::time::Instant::now());
                }
                continue;
            }
            Err(e) => {
                // Out of file descriptors, usually: pause rather than spin.
                tracing::warn!(error = %e, "failed to accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header)
                .max_buf_size(MAX_HEAD)
                // One request per connection: probes and scrapes reconnect anyway.
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            // Errors are the client's (reset, malformed, too slow): nothing to do about them.
            let _ = tokio::time::timeout(limits.connection, connection).await;
            drop(place);
        });
    }
}

/// Helpers for the tests of the crates that serve endpoints (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::net::SocketAddr;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// `request` sent raw; the whole answer, read until the server closes the connection
    /// (at most 10 s).
    pub async fn exchange(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
            .await
            .expect("the server closes the connection")
            .unwrap();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::exchange;
    use axum::routing::get;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS: Limits = Limits {
        header: Duration::from_secs(1),
        connection: Duration::from_secs(5),
        max_connections: 8,
        max_per_peer: 3,
    };

    /// A server with one route; stopped when the sender is dropped or used.
    async fn start() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        start_with(LIMITS).await
    }

    async fn start_with(limits: Limits) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = get_only(
            Router::new().route(
                "/hello",
                get(|| async { text(StatusCode::OK, "hi\nthere") }),
            ),
            "nothing here",
        );
        tokio::spawn(serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    #[tokio::test]
    async fn answers_get_only_in_one_line() {
        let (addr, _stop) = start().await;
        let ok = exchange(addr, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("cache-control: no-store\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nhi there\n"), "{ok}");
        let head = exchange(addr, "HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(
            head.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")
                && head.contains("allow: GET\r\n"),
            "{head}"
        );
        let missing = exchange(addr, "GET /other HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(
            missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{missing}"
        );
        assert!(missing.ends_with("nothing here\n"), "{missing}");
    }

    #[tokio::test]
    async fn a_silent_client_is_disconnected() {
        let (addr, _stop) = start().await;
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        silent.write_all(b"GET /hello HTTP/1.1\r\n").await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(LIMITS.header * 3, silent.read_to_end(&mut out))
            .await
            .expect("the server hangs up on an unfinished request")
            .ok();
    }

    #[tokio::test]
    async fn a_client_holding_its_share_does_not_starve_others() {
        // Silent connections are held for long enough to see.
        let (addr, _stop) = start_with(Limits {
            header: Duration::from_secs(30),
            ..LIMITS
        })
        .await;
        // LIMITS.max_per_peer silent connections from 127.0.0.1 hold its whole share...
        let mut silent = Vec::new();
        for _ in 0..LIMITS.max_per_peer {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /hello HTTP/1.1\r\n").await.unwrap();
            silent.push(s);
        }
        // (the server has taken them all up)
        tokio::time::sleep(Duration::from_millis(200)).await;
        // ...so its next one is closed unanswered...
        let mut more = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = more
            .write_all(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n")
            .await;
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), more.read_to_end(&mut out))
            .await
            .expect("closed at once, not after the 30 s header timeout")
            .ok();
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        // ...while another address is answered at once.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut other = socket.connect(addr).await.unwrap();
        other
            .write_all(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), other.read_to_string(&mut answer))
            .await
            .expect("answered without waiting for the silent ones")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        // Once the silent ones are gone, the address has its share back (as soon as the
        // server has seen them close).
        drop(silent);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let back = exchange(addr, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n").await;
            if back.starts_with("HTTP/1.1 200 OK\r\n") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{back:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn stops_accepting_on_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Router::new(), LIMITS, async {
            let _ = stopped.await;
        }));
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns on shutdown")
            .unwrap();
    }
}
