//! The operator's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` and `/readyz`.
//! GET only; anything else is answered 404 or 405.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Serves the endpoints on `listener` until the task is dropped. `ready` turns `/readyz` green.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, ready: Arc<AtomicBool>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            // Read the request head (the body of a GET is ignored).
            loop {
                match tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    stream.read(&mut buf[len..]),
                )
                .await
                {
                    Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => {
                        len += n;
                        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") || len == buf.len() {
                            break;
                        }
                    }
                }
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let mut parts = head.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let path = path.split('?').next().unwrap_or("");
            let (status, ctype, body) = match (method, path) {
                ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
                ("GET", "/readyz") if ready.load(Ordering::Relaxed) => {
                    ("200 OK", "text/plain", "ready\n".to_owned())
                }
                ("GET", "/readyz") => (
                    "503 Service Unavailable",
                    "text/plain",
                    "starting\n".to_owned(),
                ),
                ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
                _ => (
                    "405 Method Not Allowed",
                    "text/plain",
                    "method not allowed\n".to_owned(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Binds the endpoint's listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
