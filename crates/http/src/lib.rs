//! The small HTTP endpoints of the operator (`/metrics`, `/healthz`, `/readyz`) and of the
//! in-pod agent (`/healthz`, `/readyz`): axum routes answering GET only (another method on a
//! route is answered 405, another path 404) in one plain-text line, served on hyper with one
//! request per connection and connections bounded in number and time, so a slow or silent
//! client cannot hold the endpoint.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

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

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = async {
                let slot = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
                (slot, listener.accept().await)
            } => a,
            _ = &mut shutdown => return,
        };
        let (slot, stream) = match accepted {
            (slot, Ok((stream, _))) => (slot, stream),
            (_, Err(e)) => {
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
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS: Limits = Limits {
        header: Duration::from_secs(1),
        connection: Duration::from_secs(5),
        max_connections: 4,
    };

    /// A server with one route; stopped when the sender is dropped or used.
    async fn start() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
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
        tokio::spawn(serve(listener, app, LIMITS, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    async fn exchange(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
            .await
            .expect("the server closes the connection")
            .unwrap();
        out
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
