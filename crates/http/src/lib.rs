//! The small HTTP endpoints of the operator (`/metrics`, `/healthz`, `/readyz`) and of the
//! in-pod agent (`/healthz`, `/readyz`): axum routes answering GET only (another method on a
//! route is answered 405, another path 404) in one plain-text line, served on hyper with one
//! request per connection and connections bounded in number, in time and per client address,
//! so a slow or silent client cannot hold the endpoint, and one that opens many connections
//! holds no more than its share. Every connection is accepted at once and those over a bound
//! are closed at once (never left waiting in the backlog), and a reserve of places is kept for
//! addresses that hold few, so many clients together cannot starve a newcomer (the kubelet's
//! probes, the operator's reads) either.

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
    /// Connections served at once from any address (beyond them, a reserve for addresses
    /// that hold few; more are closed when accepted).
    pub max_connections: usize,
    /// Connections served at once from one client address; more are closed when accepted.
    pub max_per_peer: usize,
}

/// Connections being served, in all and per client address, each address up to a share.
struct PeerShares {
    most: usize,
    /// Places for anyone.
    normal: usize,
    /// Places beyond those, for an address that holds fewer than [`RESERVE_SHARE`].
    reserve: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Why a connection is not served.
enum Refusal {
    /// Its address holds its share.
    OverShare,
    /// Every place is taken.
    Full,
}

/// One connection's place in its address' share, given back when dropped.
struct PeerSlot {
    shares: Arc<PeerShares>,
    ip: IpAddr,
}

impl PeerShares {
    /// `normal` places, shares of `most` per address, and `reserve` places more for addresses
    /// that hold fewer than [`RESERVE_SHARE`].
    fn new(normal: usize, most: usize, reserve: usize) -> Arc<PeerShares> {
        Arc::new(PeerShares {
            most,
            normal,
            reserve,
            held: Mutex::new(Held::default()),
        })
    }

    /// A place for one more connection from `ip`.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Result<PeerSlot, Refusal> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mine = held.by_peer.get(&ip).copied().unwrap_or(0);
        if mine >= self.most {
            return Err(Refusal::OverShare);
        }
        let room = held.total < self.normal
            || (mine < RESERVE_SHARE && held.total < self.normal + self.reserve);
        if !room {
            return Err(Refusal::Full);
        }
        held.total += 1;
        *held.by_peer.entry(ip).or_insert(0) += 1;
        Ok(PeerSlot {
            shares: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_peer.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.by_peer.remove(&self.ip);
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
    shares: Arc<PeerShares>,
}

/// An admitted connection's place, given back when dropped.
pub struct Admitted {
    _share: PeerSlot,
}

/// What [`Admission::accept`] took in.
pub enum Accepted {
    /// Served: keep the place as long as the connection.
    Admitted(TcpStream, SocketAddr, Admitted),
    /// Its address holds its share already: the caller closes it (saying why, if it likes).
    OverShare(TcpStream, SocketAddr),
    /// Every place is taken: the caller closes it at once.
    Full(TcpStream, SocketAddr),
}

/// Places kept, beyond `max_connections`, per normal place, for addresses that hold fewer than
/// [`RESERVE_SHARE`]: many clients holding their shares together fill the normal places, and a
/// newcomer still gets in, unless enough more addresses hold the reserve's share each.
const RESERVE_PER_PLACE: usize = 3;

/// How many of the reserve's places one address may hold: two, for the kubelet's liveness and
/// readiness probes, or the operator's report and order, which can be in flight together.
const RESERVE_SHARE: usize = 2;

impl Admission {
    /// `max_connections` in all (and a reserve for addresses that hold few), `max_per_peer`
    /// from one address.
    pub fn new(max_connections: usize, max_per_peer: usize) -> Admission {
        Admission {
            shares: PeerShares::new(
                max_connections,
                max_per_peer,
                max_connections * RESERVE_PER_PLACE,
            ),
        }
    }

    /// Takes the next connection, at once, and decides whether it is served: nothing waits
    /// in the listen backlog behind connections being served.
    pub async fn accept(&self, listener: &TcpListener) -> std::io::Result<Accepted> {
        let (stream, peer) = listener.accept().await?;
        Ok(match self.shares.take(peer.ip()) {
            Ok(share) => Accepted::Admitted(stream, peer, Admitted { _share: share }),
            Err(Refusal::OverShare) => Accepted::OverShare(stream, peer),
            Err(Refusal::Full) => Accepted::Full(stream, peer),
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
    let mut over_share_logged: Option<std::time::Instant> = None;
    let mut full_logged: Option<std::time::Instant> = None;
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
                if over_share_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(peer = %peer.ip(), most = limits.max_per_peer, "a client holds its share of connections; closing its others");
                    over_share_logged = Some(std::time::Instant::now());
                }
                continue;
            }
            Ok(Accepted::Full(_, peer)) => {
                if full_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(peer = %peer.ip(), most = limits.max_connections, "every connection place is taken; closing new ones");
                    full_logged = Some(std::time::Instant::now());
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
        closed_unanswered(
            addr,
            Duration::from_secs(5),
            "closed at once, not after the 30 s header timeout",
        )
        .await;
        // ...while another address is answered at once.
        let mut other = connect_from("127.0.0.2", addr).await.unwrap();
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

    /// A connection from `ip` (a loopback address) to `addr`.
    async fn connect_from(ip: &str, addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(format!("{ip}:0").parse().unwrap())?;
        socket.connect(addr).await
    }

    /// Connects from `ip`, silent after a partial request line.
    async fn silent_from(ip: &str, addr: SocketAddr) -> Option<tokio::net::TcpStream> {
        let mut s = connect_from(ip, addr).await.ok()?;
        s.write_all(b"GET /hello HTTP/1.1\r\n").await.ok()?;
        Some(s)
    }

    /// Asserts that a whole request from 127.0.0.1 is closed unanswered within `within`.
    async fn closed_unanswered(addr: SocketAddr, within: Duration, why: &str) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let mut out = Vec::new();
        tokio::time::timeout(within, s.read_to_end(&mut out))
            .await
            .expect(why)
            .ok();
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }

    #[tokio::test]
    async fn many_clients_holding_their_shares_do_not_starve_a_newcomer() {
        // The agent's own bounds.
        let limits = Limits {
            header: Duration::from_secs(30),
            connection: Duration::from_secs(60),
            max_connections: 64,
            max_per_peer: 6,
        };
        let (addr, _stop) = start_with(limits).await;
        // Hundreds of silent connections from 100 addresses, each its whole share: together
        // far more than the places.
        let mut silent = Vec::new();
        for host in 2..102 {
            for _ in 0..limits.max_per_peer {
                silent.extend(silent_from(&format!("127.0.0.{host}"), addr).await);
            }
        }
        assert!(silent.len() >= 500, "{} connected", silent.len());
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A newcomer is answered at once, not after the 30 s header timeout, and not left
        // waiting in the backlog; so is a second request of its while its first is silent
        // (the kubelet's two probes).
        let slow = silent_from("127.0.0.1", addr)
            .await
            .expect("the first probe connects");
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            exchange(addr, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n"),
        )
        .await
        .expect("answered while the others hold their places");
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(slow);
        // Served: the normal places (the first 11 addresses) and the reserve's share each for
        // the others; the rest were closed when accepted, never held.
        let mut closed = 0;
        for s in &mut silent {
            let mut byte = [0u8; 1];
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_millis(20), s.read(&mut byte)).await
            {
                closed += 1;
            }
        }
        let served = silent.len() - closed;
        let first = limits.max_connections.div_ceil(limits.max_per_peer);
        assert_eq!(
            served,
            limits.max_connections + (100 - first) * RESERVE_SHARE,
            "{closed} closed of {}",
            silent.len()
        );
    }

    #[tokio::test]
    async fn past_every_place_a_newcomer_is_closed_at_once_not_queued() {
        let (addr, _stop) = start_with(Limits {
            header: Duration::from_secs(30),
            ..LIMITS
        })
        .await;
        // Enough addresses to fill the normal places and then the reserve, its share each.
        let needed = LIMITS.max_connections.div_ceil(LIMITS.max_per_peer)
            + LIMITS.max_connections * RESERVE_PER_PLACE / RESERVE_SHARE;
        let mut silent = Vec::new();
        for host in 2..(2 + needed + 2) {
            for _ in 0..LIMITS.max_per_peer {
                silent.extend(silent_from(&format!("127.0.0.{host}"), addr).await);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        closed_unanswered(
            addr,
            Duration::from_secs(2),
            "closed at once, not queued behind the silent ones",
        )
        .await;
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
