//! The other side: one request to an agent's endpoint over a fresh connection, its answer read
//! until the agent closes it (the endpoints answer one request per connection), bounded in
//! time to connect and in size. The operator's reports, orders and heartbeats, and a replica's
//! lease renewals, go this way.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest answer read.
pub const MAX_ANSWER: u64 = 64 * 1024;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("cannot connect to {addr} within {timeout:?}")]
    ConnectTimedOut { addr: String, timeout: Duration },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot send to {addr}: {source}")]
    Send {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot read from {addr}: {source}")]
    Read {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} sent no HTTP answer")]
    NotHttp { addr: String },
}

impl ExchangeError {
    /// No connection was made (refused, or no answer to its setup): nothing of the request can
    /// have reached the other side.
    pub fn never_connected(&self) -> bool {
        matches!(
            self,
            ExchangeError::ConnectTimedOut { .. } | ExchangeError::Connect { .. }
        )
    }
}

/// Sends `request` (a whole HTTP/1.1 request with `Connection: close`) to `addr` (`host:port`,
/// resolved when a name) and returns the answer's status code and body. The caller bounds the
/// whole exchange; this bounds only the connection's setup by `connect_timeout`.
pub async fn exchange(
    addr: &str,
    request: &str,
    connect_timeout: Duration,
) -> Result<(u16, String), ExchangeError> {
    let addr_owned = || addr.to_owned();
    let mut stream = tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| ExchangeError::ConnectTimedOut {
            addr: addr_owned(),
            timeout: connect_timeout,
        })?
        .map_err(|source| ExchangeError::Connect {
            addr: addr_owned(),
            source,
        })?;
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|source| ExchangeError::Send {
            addr: addr_owned(),
            source,
        })?;
    let mut raw = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .await
        .map_err(|source| ExchangeError::Read {
            addr: addr_owned(),
            source,
        })?;
    parse(&String::from_utf8_lossy(&raw))
        .ok_or_else(|| ExchangeError::NotHttp { addr: addr_owned() })
}

/// A `POST` of one line to `path`, as [`exchange`] sends it.
pub fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Status code and body of an HTTP/1.1 answer without chunked encoding (the endpoints').
fn parse(raw: &str) -> Option<(u16, String)> {
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_never_made_says_nothing_arrived() {
        let addr = || "10.0.0.9:9081".to_owned();
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let cases = [
            (
                "connect timed out",
                ExchangeError::ConnectTimedOut {
                    addr: addr(),
                    timeout: Duration::from_millis(700),
                },
                true,
            ),
            (
                "refused",
                ExchangeError::Connect {
                    addr: addr(),
                    source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                },
                true,
            ),
            (
                "cut while sending",
                ExchangeError::Send {
                    addr: addr(),
                    source: io(),
                },
                false,
            ),
            (
                "cut while reading",
                ExchangeError::Read {
                    addr: addr(),
                    source: io(),
                },
                false,
            ),
            ("no HTTP", ExchangeError::NotHttp { addr: addr() }, false),
        ];
        for (name, error, want) in cases {
            assert_eq!(error.never_connected(), want, "{name}");
        }
    }

    #[test]
    fn answers_are_parsed() {
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n{\"a\":1}\n"),
            Some((200, "{\"a\":1}\n".to_owned()))
        );
        assert_eq!(
            parse("HTTP/1.1 503 x\r\n\r\nno observation\n").unwrap().0,
            503
        );
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn a_post_carries_its_length() {
        assert_eq!(
            post("/lease", "{}"),
            "POST /lease HTTP/1.1\r\nHost: agent\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
        );
    }
}
