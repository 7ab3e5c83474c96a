//! The server's metrics on the pod's `metrics` port: `/metrics` answered with what the exporter
//! sidecar answers on loopback, and nothing else. mysqld_exporter 0.15+ also serves
//! `/probe?target=HOST`, which logs in to any server a caller names with the metrics account,
//! so a pod able to reach the exporter could collect that password from a server of its own;
//! the exporter therefore listens on loopback only, and only this one path reaches it. A
//! scrape's query string is not passed on: which collectors run is the pod's choice, not a
//! scraper's.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bulwark_http::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest a scrape of the exporter may take (Prometheus' default scrape timeout is 10 s).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest exporter answer passed on: the default collectors give a few hundred KiB, per-table
/// collectors on a server with very many tables a few MiB.
const MAX_ANSWER: usize = 8 << 20;
/// Longest `Accept` header passed on (Prometheus sends about 200 bytes).
const MAX_ACCEPT: usize = 512;

/// Where the metrics are served, and the exporter they come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsConfig {
    pub listen: SocketAddr,
    /// The exporter's loopback address.
    pub upstream: SocketAddr,
}

/// Connections served at once and for how long: scrapes are few, one at a time per scraper.
pub fn limits() -> Limits {
    Limits {
        header: Duration::from_secs(5),
        connection: SCRAPE_TIMEOUT + Duration::from_secs(10),
        max_connections: 4,
        max_per_peer: 2,
    }
}

/// `/metrics`, GET only; any other path is answered 404.
pub fn routes(upstream: SocketAddr) -> Router {
    bulwark_http::get_only(
        Router::new().route(
            "/metrics",
            get(move |headers: HeaderMap| scrape(upstream, headers)),
        ),
        "not found; try /metrics",
    )
}

async fn scrape(upstream: SocketAddr, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= MAX_ACCEPT && v.bytes().all(|b| (0x20..0x7f).contains(&b)));
    match tokio::time::timeout(SCRAPE_TIMEOUT, fetch(upstream, accept)).await {
        Ok(Ok(answer)) => answer.into_response(),
        Ok(Err(why)) => {
            tracing::warn!(upstream = %upstream, error = %why, "metrics scrape failed");
            bulwark_http::text(StatusCode::BAD_GATEWAY, &format!("exporter: {why}"))
        }
        Err(_) => bulwark_http::text(
            StatusCode::GATEWAY_TIMEOUT,
            &format!("exporter: no answer within {}s", SCRAPE_TIMEOUT.as_secs()),
        ),
    }
}

/// The exporter's answer: status, content type and body.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let mut response = (status, self.body).into_response();
        let content_type = self
            .content_type
            .and_then(|c| HeaderValue::from_str(&c).ok())
            .unwrap_or_else(|| HeaderValue::from_static("text/plain; version=0.0.4"));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        response
    }
}

/// One HTTP/1.0 exchange with the exporter (no keep-alive, no chunked answer).
async fn fetch(upstream: SocketAddr, accept: Option<&str>) -> Result<Answer, String> {
    let mut stream = tokio::net::TcpStream::connect(upstream)
        .await
        .map_err(|e| format!("cannot connect to {upstream}: {e}"))?;
    let mut request = format!("GET /metrics HTTP/1.0\r\nHost: {upstream}\r\n");
    if let Some(accept) = accept {
        request.push_str(&format!("Accept: {accept}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send the request: {e}"))?;
    let mut raw = Vec::new();
    let read = (&mut stream)
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut raw)
        .await;
    read.map_err(|e| format!("cannot read the answer: {e}"))?;
    if raw.len() > MAX_ANSWER {
        return Err(format!("the answer exceeds {} MiB", MAX_ANSWER >> 20));
    }
    parse(raw)
}

/// Splits an HTTP/1.x answer read to its end.
fn parse(mut raw: Vec<u8>) -> Result<Answer, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the answer has no end of header")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "the answer's header is not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split(' ').nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| (100..600).contains(code))
        .ok_or_else(|| format!("the answer's status line is {status_line:?}"))?;
    let mut content_type = None;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_owned()),
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" if !value.eq_ignore_ascii_case("identity") => {
                return Err(format!("the answer is sent with transfer encoding {value}"));
            }
            "content-encoding" if !value.eq_ignore_ascii_case("identity") => {
                return Err(format!("the answer is sent with content encoding {value}"));
            }
            _ => {}
        }
    }
    let body = raw.split_off(end + 4);
    if let Some(length) = length.filter(|l| *l != body.len()) {
        return Err(format!(
            "the answer ended after {} of {length} bytes",
            body.len()
        ));
    }
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_http::testing::exchange;
    use tokio::net::TcpListener;

    /// An exporter stand-in that records each request's head and answers `answer`.
    async fn exporter(answer: &'static str) -> (SocketAddr, tokio::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (heads, received) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read_exact(&mut byte).await.is_ok() {
                    head.push(byte[0]);
                }
                let _ = heads
                    .send(String::from_utf8_lossy(&head).into_owned())
                    .await;
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        (addr, received)
    }

    async fn serve(upstream: SocketAddr) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(bulwark_http::serve(
            listener,
            routes(upstream),
            limits(),
            std::future::pending(),
        ));
        addr
    }

    #[tokio::test]
    async fn metrics_pass_through_and_nothing_else_reaches_the_exporter() {
        let (upstream, mut heads) = exporter(
            "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0\r\n\
             Content-Length: 12\r\n\r\nmysql_up 1\n\n",
        )
        .await;
        let agent = serve(upstream).await;
        let ok = exchange(
            agent,
            "GET /metrics HTTP/1.1\r\nHost: pod\r\nAccept: application/openmetrics-text\r\n\r\n",
        )
        .await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("content-type: application/openmetrics-text; version=1.0.0\r\n"),
            "{ok}"
        );
        assert!(ok.ends_with("\r\n\r\nmysql_up 1\n\n"), "{ok}");
        let head = heads.recv().await.unwrap();
        assert!(head.starts_with("GET /metrics HTTP/1.0\r\n"), "{head}");
        assert!(
            head.contains("Accept: application/openmetrics-text\r\n"),
            "{head}"
        );

        // The exporter's other endpoints are not reachable through the agent.
        for path in ["/probe?target=attacker:3306", "/", "/metrics/../probe"] {
            let refused =
                exchange(agent, &format!("GET {path} HTTP/1.1\r\nHost: pod\r\n\r\n")).await;
            assert!(
                refused.starts_with("HTTP/1.1 404 Not Found\r\n"),
                "{path}: {refused}"
            );
        }
        let posted = exchange(
            agent,
            "POST /metrics HTTP/1.1\r\nHost: pod\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(posted.starts_with("HTTP/1.1 405"), "{posted}");
        assert!(
            heads.try_recv().is_err(),
            "only the one scrape reached the exporter"
        );
    }

    #[tokio::test]
    async fn an_exporter_that_is_down_or_garbled_gets_a_one_line_cause() {
        // A port nothing listens on.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let nowhere = closed.local_addr().unwrap();
        drop(closed);
        let agent = serve(nowhere).await;
        let down = exchange(agent, "GET /metrics HTTP/1.1\r\nHost: pod\r\n\r\n").await;
        assert!(down.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{down}");
        assert!(
            down.contains("exporter: cannot connect to 127.0.0.1:"),
            "{down}"
        );

        let (chunked, _) =
            exporter("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
                .await;
        let agent = serve(chunked).await;
        let a = exchange(agent, "GET /metrics HTTP/1.1\r\nHost: pod\r\n\r\n").await;
        assert!(a.starts_with("HTTP/1.1 502"), "{a}");
        assert!(
            a.ends_with("exporter: the answer is sent with transfer encoding chunked\n"),
            "{a}"
        );
    }

    #[test]
    fn answers_are_split_or_refused() {
        let ok = parse(b"HTTP/1.0 503 Service Unavailable\r\nX: y\r\n\r\nbusy".to_vec()).unwrap();
        assert_eq!(
            ok,
            Answer {
                status: 503,
                content_type: None,
                body: b"busy".to_vec()
            }
        );
        for (raw, cause) in [
            (&b"HTTP/1.0 200 OK\r\n"[..], "no end of header"),
            (b"SSH-2.0\r\n\r\n", "status line"),
            (
                b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort",
                "after 5 of 10 bytes",
            ),
            (
                b"HTTP/1.0 200 OK\r\nContent-Encoding: gzip\r\n\r\nx",
                "content encoding gzip",
            ),
        ] {
            let e = parse(raw.to_vec()).unwrap_err();
            assert!(e.contains(cause), "{e}");
        }
    }
}
