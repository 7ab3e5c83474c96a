//! A minimal HTTP/1.1 server for the kubelet's probes: GET only, one short plain-text line per
//! answer, and the connection closed after each response.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Longest request head read.
const MAX_HEAD: usize = 8 << 10;
/// Time a client has to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

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

    fn encode(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            503 => "Service Unavailable",
            _ => "Unknown",
        };
        let body = format!("{}\n", self.body.replace(['\r', '\n'], " "));
        let allow = if self.status == 405 {
            "Allow: GET\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nCache-Control: no-store\r\n{allow}Connection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )
        .into_bytes()
    }
}

/// The path of a GET request, or the response that refuses it.
pub fn parse_request(head: &[u8]) -> Result<String, Response> {
    let text = std::str::from_utf8(head).map_err(|_| Response::new(400, "bad request"))?;
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::new(400, "bad request"));
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Err(Response::new(400, "bad request"));
    }
    if method != "GET" {
        return Err(Response::new(405, "only GET is served"));
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    Ok(path.to_string())
}

/// Answers requests on `listener` with `handler(path)` until `shutdown` resolves.
pub async fn serve<H, F>(listener: TcpListener, handler: H, shutdown: impl Future<Output = ()>)
where
    H: Fn(String) -> F + Clone + Send + 'static,
    F: Future<Output = Response> + Send,
{
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return,
        };
        let (mut stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "failed to accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
                Ok(Ok(head)) => head,
                _ => return,
            };
            let response = match parse_request(&head) {
                Ok(path) => handler(path).await,
                Err(refusal) => refusal,
            };
            let _ = stream.write_all(&response.encode()).await;
            let _ = stream.shutdown().await;
        });
    }
}

async fn read_head(stream: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(head);
        }
        head.extend_from_slice(&buf[..n]);
        let complete =
            head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n");
        if complete || head.len() >= MAX_HEAD {
            return Ok(head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let cases: &[(&str, Result<&str, u16>)] = &[
            ("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", Ok("/healthz")),
            ("GET /readyz?verbose=1 HTTP/1.0\r\n\r\n", Ok("/readyz")),
            ("POST /readyz HTTP/1.1\r\n\r\n", Err(405)),
            ("HEAD /readyz HTTP/1.1\r\n\r\n", Err(405)),
            ("GET /readyz\r\n\r\n", Err(400)),
            ("GET /a b HTTP/1.1\r\n\r\n", Err(400)),
            ("", Err(400)),
        ];
        for (raw, want) in cases {
            let got = parse_request(raw.as_bytes());
            match (want, got) {
                (Ok(p), Ok(g)) => assert_eq!(*p, g, "{raw:?}"),
                (Err(code), Err(r)) => assert_eq!(*code, r.status, "{raw:?}"),
                (w, g) => panic!("{raw:?}: wanted {w:?}, got {g:?}"),
            }
        }
    }

    #[test]
    fn responses_are_one_line() {
        let r = Response::new(503, "not ready:\nsecond line").encode();
        let text = String::from_utf8(r).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nnot ready: second line\n"), "{text}");
        assert!(text.contains("Content-Length: 23\r\n"), "{text}");
        assert!(String::from_utf8(Response::new(405, "x").encode())
            .unwrap()
            .contains("Allow: GET\r\n"));
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            |path: String| async move { Response::new(200, format!("path {path}")) },
            async {
                let _ = stopped.await;
            },
        ));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(
            out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("path /healthz\n"),
            "{out}"
        );
        stop.send(()).unwrap();
        server.await.unwrap();
    }
}
