//! An HTTP/1.1 proxy that sits between an S3 client and the S3 server and injects faults:
//! canned `500 InternalError` answers, connections dropped without an answer, responses reset
//! halfway, or requests that are never answered.
//!
//! Each client connection carries one request: the proxy reads the request head and body
//! (`Content-Length`, `Transfer-Encoding: chunked`, and `Expect: 100-continue`, which it answers
//! itself), decides by a counter, and either injects the fault or forwards the request over a
//! fresh upstream connection and relays the response with `Connection: close`. Requests are
//! forwarded byte for byte except the hop-by-hop `Connection`, `Keep-Alive` and `Expect`
//! headers (SigV4 as sent by object_store/reqwest and boto3 does not sign them; a header the
//! `Authorization` lists as signed is kept). All sockets are shut down and all threads joined
//! when the proxy is dropped.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Largest request or response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Idle limit on every socket, so no thread outlives a stuck peer for long.
const IO_TIMEOUT: Duration = Duration::from_secs(120);

/// A fault to inject into one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer `HTTP/1.1 500 Internal Server Error` with an S3 `InternalError` XML body.
    Status500,
    /// Read the request, then close the connection without any response.
    DropConnection,
    /// Forward the request (so the server acts on it), relay the first half of the response,
    /// then reset the connection.
    ResetMidResponse,
    /// Read the request and never answer; the connection stays open until the client gives up
    /// or the proxy is dropped. For client timeout tests.
    Hang,
}

/// Which requests get a fault. Counting restarts at every [`FaultProxy::set_mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultMode {
    /// Forward everything.
    PassThrough,
    /// Inject `fault` into requests n, 2n, 3n, ... (1-based); `n = 0` injects nothing.
    EveryNth {
        /// Period.
        n: usize,
        /// Fault injected.
        fault: Fault,
    },
    /// Inject `fault` into the first `n` requests, then forward (a transient outage).
    FirstN {
        /// Number of failed requests.
        n: usize,
        /// Fault injected.
        fault: Fault,
    },
    /// Inject the fault into every request.
    All(Fault),
}

/// A fault-injecting HTTP proxy on 127.0.0.1, stopped on drop.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    mode: Mutex<(FaultMode, usize)>,
    injected: AtomicUsize,
    forwarded: AtomicUsize,
    stop: AtomicBool,
    next_id: AtomicU64,
    /// Clones of every open socket, shut down on drop to unblock their threads.
    sockets: Mutex<HashMap<u64, TcpStream>>,
    handlers: Mutex<Vec<JoinHandle<()>>>,
    log: Mutex<Vec<String>>,
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (`"127.0.0.1:PORT"`), initially passing through.
    pub fn start(upstream: &str) -> Result<FaultProxy> {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener =
            TcpListener::bind("127.0.0.1:0").context("failed to bind the fault proxy")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            mode: Mutex::new((FaultMode::PassThrough, 0)),
            injected: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            sockets: Mutex::new(HashMap::new()),
            handlers: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes which requests get faults, and restarts the request count of the mode.
    pub fn set_mode(&self, mode: FaultMode) {
        *lock(&self.shared.mode) = (mode, 0);
    }

    /// Requests that got a fault so far.
    pub fn injected(&self) -> usize {
        self.shared.injected.load(Ordering::SeqCst)
    }

    /// Requests forwarded and answered by upstream so far.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// Request lines seen so far (`"PUT /bucket/key HTTP/1.1"`), with the fault injected, if
    /// any, e.g. `"GET /b/k HTTP/1.1 -> Status500"`.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.log).clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor, which checks the flag after every accepted connection.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for socket in lock(&self.shared.sockets).values() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        let handlers = std::mem::take(&mut *lock(&self.shared.handlers));
        for handler in handlers {
            let _ = handler.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let handler_shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("fault-proxy-conn".into())
            .spawn(move || {
                let Ok(client) = Registered::new(stream, &handler_shared) else {
                    return;
                };
                if let Err(err) = handle(&client, &handler_shared) {
                    if !handler_shared.stop.load(Ordering::SeqCst) {
                        eprintln!("fault proxy: {err:#}");
                    }
                }
            });
        if let Ok(handle) = spawned {
            let mut handlers = lock(&shared.handlers);
            handlers.retain(|h| !h.is_finished());
            handlers.push(handle);
        }
    }
}

/// A socket whose clone is in the registry for as long as it lives.
struct Registered<'a> {
    id: u64,
    stream: TcpStream,
    shared: &'a Shared,
}

impl<'a> Registered<'a> {
    fn new(stream: TcpStream, shared: &'a Shared) -> io::Result<Self> {
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        lock(&shared.sockets).insert(id, stream.try_clone()?);
        if shared.stop.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        Ok(Registered { id, stream, shared })
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.shared.sockets).remove(&self.id);
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// A parsed message head: the start line, the headers in order, and the raw bytes.
#[derive(Debug)]
struct Head {
    start: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn framing(&self, default: Framing) -> Result<Framing> {
        if self
            .header("transfer-encoding")
            .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"))
        {
            return Ok(Framing::Chunked);
        }
        match self.header("content-length") {
            Some(len) => Ok(Framing::Length(
                len.trim().parse().context("bad Content-Length")?,
            )),
            None => Ok(default),
        }
    }

    /// Serialises the head without the hop-by-hop headers (unless `keep` says a header is
    /// signed), adding `Connection: close`.
    fn to_bytes_closing(&self, keep: &[String]) -> Vec<u8> {
        let hop_by_hop = ["connection", "keep-alive", "proxy-connection", "expect"];
        let mut out = format!("{}\r\n", self.start);
        let mut has_connection = false;
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if hop_by_hop.contains(&lower.as_str()) && !keep.contains(&lower) {
                continue;
            }
            has_connection |= lower == "connection";
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        if !has_connection {
            out.push_str("Connection: close\r\n");
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

/// Reads a head (start line and headers up to the empty line). `None` on EOF before any byte.
fn read_head(reader: &mut impl BufRead) -> Result<Option<Head>> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            if lines.is_empty() && total == 0 {
                return Ok(None);
            }
            bail!("connection closed inside a message head");
        }
        total += n;
        if total > MAX_HEAD {
            bail!("message head larger than {MAX_HEAD} bytes");
        }
        let text = String::from_utf8(line).context("message head is not UTF-8")?;
        let text = text.trim_end_matches(['\r', '\n']).to_string();
        if text.is_empty() {
            if lines.is_empty() {
                continue; // tolerate stray CRLF between messages
            }
            break;
        }
        lines.push(text);
    }
    let start = lines.remove(0);
    let headers = lines
        .into_iter()
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .with_context(|| format!("bad header line {line:?}"))?;
            Ok((name.trim().to_string(), value.trim().to_string()))
        })
        .collect::<Result<_>>()?;
    Ok(Some(Head { start, headers }))
}

/// Copies one body delimited by `framing` from `reader` to `sink`, chunk framing included.
fn copy_body(reader: &mut impl BufRead, sink: &mut impl Write, framing: Framing) -> Result<()> {
    match framing {
        Framing::Length(len) => {
            let copied = io::copy(&mut reader.take(len), sink)?;
            if copied != len {
                bail!("body ended after {copied} of {len} bytes");
            }
        }
        Framing::UntilClose => {
            io::copy(reader, sink)?;
        }
        Framing::Chunked => loop {
            let mut size_line = Vec::new();
            if reader.read_until(b'\n', &mut size_line)? == 0 {
                bail!("connection closed inside a chunked body");
            }
            sink.write_all(&size_line)?;
            let text = String::from_utf8_lossy(&size_line);
            let size_hex = text.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_hex, 16)
                .with_context(|| format!("bad chunk size line {text:?}"))?;
            if size == 0 {
                // Trailer fields, then the final empty line.
                loop {
                    let mut line = Vec::new();
                    if reader.read_until(b'\n', &mut line)? == 0 {
                        bail!("connection closed inside chunked trailers");
                    }
                    sink.write_all(&line)?;
                    if line == b"\r\n" || line == b"\n" {
                        return Ok(());
                    }
                }
            }
            let want = size + 2; // data and its CRLF
            let copied = io::copy(&mut reader.take(want), sink)?;
            if copied != want {
                bail!("connection closed inside a chunk");
            }
        },
    }
    Ok(())
}

/// Headers listed in the SigV4 `SignedHeaders` of the request, lower-case.
fn signed_headers(head: &Head) -> Vec<String> {
    head.header("authorization")
        .and_then(|auth| auth.split("SignedHeaders=").nth(1))
        .map(|rest| {
            rest.split([',', ' '])
                .next()
                .unwrap_or("")
                .split(';')
                .map(|h| h.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default()
}

impl Shared {
    /// Counts a request under the current mode and returns the fault to inject, if any.
    fn decide(&self) -> Option<Fault> {
        let mut mode = lock(&self.mode);
        mode.1 += 1;
        let count = mode.1;
        match mode.0 {
            FaultMode::PassThrough => None,
            FaultMode::EveryNth { n, fault } => (n > 0 && count.is_multiple_of(n)).then_some(fault),
            FaultMode::FirstN { n, fault } => (count <= n).then_some(fault),
            FaultMode::All(fault) => Some(fault),
        }
    }
}

/// Serves the one request of a client connection.
fn handle(client: &Registered<'_>, shared: &Shared) -> Result<()> {
    let mut reader = BufReader::new(client.stream.try_clone()?);
    let mut writer = client.stream.try_clone()?;
    let Some(head) = read_head(&mut reader)? else {
        return Ok(());
    };
    let framing = head.framing(Framing::Length(0))?;
    let expects_continue = head
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"));
    let fault = shared.decide();
    lock(&shared.log).push(match fault {
        Some(fault) => format!("{} -> {fault:?}", head.start),
        None => head.start.clone(),
    });
    let send_continue = |writer: &mut TcpStream| -> Result<()> {
        if expects_continue {
            writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        Ok(())
    };

    match fault {
        Some(Fault::Status500) => {
            // Without Expect the body is on its way: read it, so closing with unread data
            // does not turn the answer into a reset. With Expect the client waits instead.
            if !expects_continue {
                copy_body(&mut reader, &mut io::sink(), framing)?;
            }
            shared.injected.fetch_add(1, Ordering::SeqCst);
            let is_head = head.start.starts_with("HEAD ");
            writer.write_all(&canned_500(shared.injected.load(Ordering::SeqCst), is_head))?;
            writer.flush()?;
            let _ = writer.shutdown(Shutdown::Write);
            drain_until_close(&mut reader);
        }
        Some(Fault::DropConnection) => {
            send_continue(&mut writer)?;
            copy_body(&mut reader, &mut io::sink(), framing)?;
            shared.injected.fetch_add(1, Ordering::SeqCst);
            let _ = client.stream.shutdown(Shutdown::Both);
        }
        Some(Fault::Hang) => {
            send_continue(&mut writer)?;
            copy_body(&mut reader, &mut io::sink(), framing)?;
            shared.injected.fetch_add(1, Ordering::SeqCst);
            drain_until_close(&mut reader);
        }
        Some(Fault::ResetMidResponse) => {
            send_continue(&mut writer)?;
            let mut response = Vec::new();
            forward(shared, &head, &mut reader, &mut response)?;
            shared.injected.fetch_add(1, Ordering::SeqCst);
            writer.write_all(&response[..response.len() / 2])?;
            writer.flush()?;
            // Linger 0 makes the close send RST instead of FIN. The registry's clone goes
            // with `client` when this thread ends; dropping all handles closes the socket.
            socket2::SockRef::from(&client.stream).set_linger(Some(Duration::ZERO))?;
        }
        None => {
            send_continue(&mut writer)?;
            forward(shared, &head, &mut reader, &mut writer)?;
            shared.forwarded.fetch_add(1, Ordering::SeqCst);
            writer.flush()?;
            let _ = writer.shutdown(Shutdown::Write);
        }
    }
    Ok(())
}

/// Sends the request (head already read, body still in `reader`) upstream over a fresh
/// connection and writes the response, with `Connection: close`, to `out`.
fn forward(
    shared: &Shared,
    head: &Head,
    reader: &mut impl BufRead,
    out: &mut impl Write,
) -> Result<()> {
    let upstream = TcpStream::connect(&shared.upstream)
        .with_context(|| format!("failed to connect to upstream {}", shared.upstream))?;
    let upstream = Registered::new(upstream, shared)?;
    let mut up_writer = io::BufWriter::new(upstream.stream.try_clone()?);
    up_writer.write_all(&head.to_bytes_closing(&signed_headers(head)))?;
    copy_body(reader, &mut up_writer, head.framing(Framing::Length(0))?)?;
    up_writer.flush()?;

    let mut up_reader = BufReader::new(upstream.stream.try_clone()?);
    loop {
        let response = read_head(&mut up_reader)?.context("upstream closed without a response")?;
        let status: u16 = response
            .start
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {:?}", response.start))?;
        // Interim responses are not relayed (the proxy answered Expect itself).
        if (100..200).contains(&status) {
            continue;
        }
        out.write_all(&response.to_bytes_closing(&[]))?;
        let no_body = head.start.starts_with("HEAD ") || status == 204 || status == 304;
        let framing = if no_body {
            Framing::Length(0)
        } else {
            response.framing(Framing::UntilClose)?
        };
        copy_body(&mut up_reader, out, framing)?;
        return Ok(());
    }
}

/// Reads and discards until the peer closes (or the socket is shut down or times out).
fn drain_until_close(reader: &mut impl Read) {
    let mut buf = [0u8; 8192];
    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
}

fn canned_500(sequence: usize, is_head: bool) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code>\
         <Message>We encountered an internal error. Please try again.</Message>\
         <RequestId>testkit-fault-{sequence}</RequestId></Error>"
    );
    let mut out = format!(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n\
         Content-Length: {}\r\nx-amz-request-id: testkit-fault-{sequence}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !is_head {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        read_head(&mut io::Cursor::new(text.as_bytes()))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn strips_hop_by_hop_headers_unless_signed() {
        let h = head(
            "PUT /b/k HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host;x-amz-date, Signature=s\r\n\r\n",
        );
        assert_eq!(signed_headers(&h), ["host", "x-amz-date"]);
        let out = String::from_utf8(h.to_bytes_closing(&signed_headers(&h))).unwrap();
        assert!(out.starts_with("PUT /b/k HTTP/1.1\r\nHost: x\r\nAuthorization:"));
        assert!(out.ends_with("Connection: close\r\n\r\n"));
        assert!(!out.contains("keep-alive") && !out.contains("Expect"));
        let kept = String::from_utf8(h.to_bytes_closing(&["connection".into()])).unwrap();
        assert!(kept.contains("Connection: keep-alive\r\n") && !kept.contains("close"));
    }

    #[test]
    fn copies_chunked_bodies_verbatim() {
        let raw = "4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nx-trailer: y\r\n\r\nNEXT";
        let mut reader = io::Cursor::new(raw.as_bytes());
        let mut out = Vec::new();
        copy_body(&mut reader, &mut out, Framing::Chunked).unwrap();
        assert_eq!(out, &raw.as_bytes()[..raw.len() - 4]);
    }

    #[test]
    fn counts_modes() {
        let shared = Shared {
            upstream: String::new(),
            mode: Mutex::new((
                FaultMode::EveryNth {
                    n: 3,
                    fault: Fault::Hang,
                },
                0,
            )),
            injected: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            sockets: Mutex::new(HashMap::new()),
            handlers: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
        };
        let seen: Vec<bool> = (0..6).map(|_| shared.decide().is_some()).collect();
        assert_eq!(seen, [false, false, true, false, false, true]);
        *lock(&shared.mode) = (
            FaultMode::FirstN {
                n: 2,
                fault: Fault::Status500,
            },
            0,
        );
        let seen: Vec<bool> = (0..4).map(|_| shared.decide().is_some()).collect();
        assert_eq!(seen, [true, true, false, false]);
    }
}
