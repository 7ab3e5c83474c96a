//! Copies of a member's data for new members (`bulwark_contract::clone`): the donor side, which
//! the agent serves, runs the physical backup tool against its own server and streams what it
//! writes in frames; the receiving side, which `bulwark-agent seed` runs, takes nothing from a
//! donor that did not prove it holds the order key, extracts the frames into a staging
//! directory and insists on the donor's `complete` line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulwark_contract::clone::{
    CloneRequest, ServedRequests, COMPLETE, MAX_FRAME_BYTES, MAX_REQUEST_BYTES,
};
use bulwark_contract::order::ORDER_KEY;
use bulwark_contract::Account;
use bulwark_engine::source::{self, Connection, DefaultsFile, ToolIo, ToolJob};
use bulwark_http::Accepted;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Time a receiver has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the receiver may wait for the donor's next bytes (the backup tool is silent while it
/// waits for locks).
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest the donor waits for the receiver to take bytes: the backup tool waits on its pipe
/// meanwhile, possibly while it blocks the donor's commits (its last stage).
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes read from the backup tool per frame.
const READ_BYTES: usize = 256 << 10;
/// Connections handled at once (a request is read within [`REQUEST_TIMEOUT`]; one copy runs
/// at a time), and from one address: a pod that opens connections and stays silent holds
/// no more than its share, never the agent's file descriptors.
const MAX_CONNECTIONS: usize = 8;
/// Connections handled at once from one address (a new member asks one donor at a time).
const MAX_PER_PEER: usize = 2;

/// What a donor needs.
#[derive(Debug, Clone)]
pub struct Donor {
    /// mysqld's socket.
    pub socket: PathBuf,
    /// The password files (the backup account's, the order key).
    pub credentials_dir: PathBuf,
    /// The server's data directory as this process sees it.
    pub datadir: PathBuf,
}

/// Serves copies, one at a time, until the listener fails or the task is dropped.
pub async fn serve(listener: TcpListener, donor: Arc<Donor>) {
    let busy = Arc::new(tokio::sync::Semaphore::new(1));
    let served = Arc::new(std::sync::Mutex::new(ServedRequests::default()));
    let admission = bulwark_http::Admission::new(MAX_CONNECTIONS, MAX_PER_PEER);
    loop {
        let (stream, peer, place) = match admission.accept(&listener).await {
            Ok(Accepted::Admitted(stream, peer, place)) => (stream, peer, place),
            Ok(Accepted::OverShare(stream, peer)) => {
                tracing::debug!(peer = %peer, "a client holds its share of copy connections");
                // Said without waiting: a client that does not read gets the connection closed.
                let _ = stream.try_write(b"refused: too many connections from your address\n");
                continue;
            }
            Ok(Accepted::Full(stream, peer)) => {
                tracing::debug!(peer = %peer, "every copy connection place is taken");
                let _ = stream.try_write(b"refused: too many connections\n");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "clone listener failed to accept");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let donor = donor.clone();
        let busy = busy.clone();
        let served = served.clone();
        tokio::spawn(async move {
            if let Err(reason) = answer(stream, peer, &donor, &busy, &served).await {
                tracing::warn!(peer = %peer, reason = %reason, "copy for a new member not served");
            }
            drop(place);
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    peer: SocketAddr,
    donor: &Donor,
    busy: &tokio::sync::Semaphore,
    served: &std::sync::Mutex<ServedRequests>,
) -> Result<(), String> {
    let mut line = String::new();
    let read = {
        let mut limited = tokio::io::BufReader::new((&mut stream).take(MAX_REQUEST_BYTES as u64));
        tokio::time::timeout(REQUEST_TIMEOUT, limited.read_line(&mut line)).await
    };
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return Err("no request line in time".to_owned());
    }
    let key = match read_key(&donor.credentials_dir.join(ORDER_KEY)) {
        Ok(k) => k,
        Err(e) => {
            let reason = format!("the donor cannot read its order key: {e}");
            return refuse(&mut stream, reason).await;
        }
    };
    let me = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let now = unix_now();
    let request = match CloneRequest::verify(&line, &key, &me, now) {
        Ok(r) => r,
        Err(e) => return refuse(&mut stream, e.to_string()).await,
    };
    // Once, whatever follows: a receiver that is refused asks again with a new request.
    let admitted = served
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .admit(&request, now);
    if let Err(e) = admitted {
        return refuse(&mut stream, e.to_string()).await;
    }
    let Ok(_permit) = busy.try_acquire() else {
        let reason = "the donor is already copying its data for another member".to_owned();
        return refuse(&mut stream, reason).await;
    };
    tracing::info!(member = %request.member, peer = %peer, "copying this member's data for a new member");
    let started = Instant::now();
    stream
        .write_all(format!("{}\n", request.streaming_line(&key)).as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let outcome = stream_backup(&mut stream, donor).await;
    let last = match &outcome {
        Ok(bytes) => {
            tracing::info!(member = %request.member, bytes, seconds = started.elapsed().as_secs_f64(), "copy for a new member complete");
            format!("{COMPLETE}\n")
        }
        Err(reason) => format!("failed: {}\n", reason.replace('\n', " ")),
    };
    let _ = write_stalled(&mut stream, last.as_bytes()).await;
    outcome.map(|_| ())
}

async fn refuse(stream: &mut TcpStream, reason: String) -> Result<(), String> {
    let _ = stream
        .write_all(format!("refused: {reason}\n").as_bytes())
        .await;
    Err(reason)
}

/// A new request's nonce: 128 bits from the kernel's random source, in hex.
pub fn fresh_nonce() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Runs the backup tool and sends its stream in frames, then the end frame; the bytes sent.
async fn stream_backup(stream: &mut TcpStream, donor: &Donor) -> Result<u64, String> {
    let password = source::read_password_file(&donor.credentials_dir.join(Account::Backup.key()))
        .map_err(|e| format!("failed to read the backup account's password: {e}"))?;
    let conn = Connection {
        socket: Some(donor.socket.clone()),
        user: Some(Account::Backup.user().to_owned()),
        password: Some(password),
        ..Connection::default()
    };
    let info = source::probe(&conn)
        .await
        .map_err(|e| bulwark_engine::error::chain(&e))?;
    let tool = source::find_tool(info.engine, ToolJob::Physical, None)
        .map_err(|e| bulwark_engine::error::chain(&e))?;
    let defaults = DefaultsFile::create(&conn).map_err(|e| bulwark_engine::error::chain(&e))?;
    let work = tempfile::Builder::new()
        .prefix("bulwark-clone-")
        .tempdir()
        .map_err(|e| format!("failed to create a work directory: {e}"))?;
    let mut args: Vec<String> = defaults.iter().map(DefaultsFile::arg).collect();
    args.extend(source::physical_args(
        &conn,
        work.path(),
        Some(&donor.datadir.display().to_string()),
        &[],
    ));
    let mut tool = source::spawn(&tool, &args, ToolIo::ReadStdout)
        .map_err(|e| bulwark_engine::error::chain(&e))?;
    let mut out = tool.take_stdout();
    let mut buf = vec![0u8; READ_BYTES];
    let mut sent = 0u64;
    loop {
        let n = match tokio::time::timeout(STALL_TIMEOUT, out.read(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                let report = tool.kill().await;
                return Err(format!(
                    "failed to read the backup tool's output: {e}; {}",
                    report.summary()
                ));
            }
            Err(_) => {
                let report = tool.kill().await;
                return Err(format!(
                    "the backup tool wrote nothing for {}s; {}",
                    STALL_TIMEOUT.as_secs(),
                    report.summary()
                ));
            }
        };
        let frame = u32::try_from(n).expect("frame below 4 GiB").to_be_bytes();
        let written = async {
            write_stalled(stream, &frame).await?;
            write_stalled(stream, &buf[..n]).await
        }
        .await;
        if let Err(e) = written {
            tool.kill().await;
            return Err(format!("the receiver stopped reading: {e}"));
        }
        if n == 0 {
            break;
        }
        sent += n as u64;
    }
    tool.finish(Some(source::PHYSICAL_COMPLETION))
        .await
        .map_err(|e| bulwark_engine::error::chain(&e))?;
    Ok(sent)
}

async fn write_stalled(stream: &mut TcpStream, bytes: &[u8]) -> Result<(), String> {
    match tokio::time::timeout(SEND_TIMEOUT, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no progress for {}s", SEND_TIMEOUT.as_secs())),
    }
}

/// The order key: the file's content without its trailing line break.
pub fn read_key(path: &Path) -> std::io::Result<Vec<u8>> {
    let text = std::fs::read(path)?;
    let end = text
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    Ok(text[..end].to_vec())
}

/// Why a copy could not be received.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("failed to connect to the donor {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the donor {addr} refused the copy: {reason}")]
    Refused { addr: SocketAddr, reason: String },
    #[error("{addr} is no donor to copy from: {reason}")]
    Unproven { addr: SocketAddr, reason: String },
    #[error("the copy from {addr} broke off: {reason}")]
    Broken { addr: SocketAddr, reason: String },
    #[error("the donor {addr} failed to copy its data: {reason}")]
    DonorFailed { addr: SocketAddr, reason: String },
}

/// What was received.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub bytes: u64,
    pub files: u64,
}

/// Asks the donor at `addr` for a copy with `request`, signed with `key`, and extracts it into
/// `staging` (an existing, empty directory) once the donor proved it holds the key. Blocking.
pub fn receive(
    addr: SocketAddr,
    request: &CloneRequest,
    key: &[u8],
    staging: &Path,
) -> Result<Received, ReceiveError> {
    let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|source| ReceiveError::Connect { addr, source })?;
    let broken = |reason: String| ReceiveError::Broken { addr, reason };
    stream
        .set_read_timeout(Some(STALL_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(REQUEST_TIMEOUT)))
        .map_err(|e| broken(e.to_string()))?;
    (&stream)
        .write_all(format!("{}\n", request.sign(key)).as_bytes())
        .map_err(|e| broken(format!("failed to send the request: {e}")))?;
    let mut reader = BufReader::new(stream);
    let first = read_line(&mut reader).map_err(&broken)?;
    if let Some(reason) = first.strip_prefix("refused: ") {
        return Err(ReceiveError::Refused {
            addr,
            reason: reason.to_owned(),
        });
    }
    request
        .check_streaming(&first, key)
        .map_err(|e| ReceiveError::Unproven {
            addr,
            reason: e.to_string(),
        })?;
    let mut frames = Frames {
        inner: &mut reader,
        left: 0,
        ended: false,
        bytes: 0,
    };
    let extracted = bulwark_engine::xbstream::extract(&mut frames, staging);
    let (ended, bytes) = (frames.ended, frames.bytes);
    // The donor's verdict comes after the end frame; an extraction error first is reported
    // with it when the donor has one.
    let verdict = if ended {
        read_line(&mut reader)
    } else {
        Err("the stream ended before its last frame".to_owned())
    };
    match verdict {
        Ok(line) if line == COMPLETE => {}
        Ok(line) => {
            let reason = line.strip_prefix("failed: ").unwrap_or(&line).to_owned();
            return Err(ReceiveError::DonorFailed { addr, reason });
        }
        Err(reason) => return Err(broken(extracted.err().unwrap_or(reason))),
    }
    let extracted = extracted.map_err(&broken)?;
    Ok(Received {
        bytes,
        files: extracted.files,
    })
}

fn read_line(reader: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    match reader.take(4096).read_line(&mut line) {
        Ok(0) => Err("the donor closed the connection".to_owned()),
        Ok(_) => Ok(line.trim_end().to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// The frames' payload as one stream, which ends at the end frame.
struct Frames<'a, R: Read> {
    inner: &'a mut R,
    left: usize,
    ended: bool,
    bytes: u64,
}

impl<R: Read> Read for Frames<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.ended || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut len = [0u8; 4];
            self.inner.read_exact(&mut len)?;
            let len = u32::from_be_bytes(len) as usize;
            if len == 0 {
                self.ended = true;
                return Ok(0);
            }
            if len > MAX_FRAME_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a frame of {len} bytes (at most {MAX_FRAME_BYTES})"),
                ));
            }
            self.left = len;
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n;
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(parts: &[&[u8]], end: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            out.extend_from_slice(&(p.len() as u32).to_be_bytes());
            out.extend_from_slice(p);
        }
        if end {
            out.extend_from_slice(&0u32.to_be_bytes());
        }
        out
    }

    #[test]
    fn frames_read_as_one_stream_up_to_the_end_frame() {
        let wire = framed(&[b"hello ", b"world"], true);
        let mut tail = wire.clone();
        tail.extend_from_slice(b"complete\n");
        let mut inner = std::io::Cursor::new(tail);
        let mut frames = Frames {
            inner: &mut inner,
            left: 0,
            ended: false,
            bytes: 0,
        };
        let mut out = String::new();
        frames.read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello world");
        assert!(frames.ended);
        assert_eq!(frames.bytes, 11);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut inner, &mut rest).unwrap();
        assert_eq!(rest, "complete\n");
    }

    #[test]
    fn a_cut_stream_or_an_oversized_frame_is_an_error() {
        let mut cut = framed(&[b"hello"], false);
        cut.truncate(7);
        let mut inner = std::io::Cursor::new(cut);
        let mut frames = Frames {
            inner: &mut inner,
            left: 0,
            ended: false,
            bytes: 0,
        };
        assert!(frames.read_to_end(&mut Vec::new()).is_err());
        let mut huge = std::io::Cursor::new(((MAX_FRAME_BYTES + 1) as u32).to_be_bytes().to_vec());
        let mut frames = Frames {
            inner: &mut huge,
            left: 0,
            ended: false,
            bytes: 0,
        };
        let err = frames.read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn the_key_file_loses_its_line_break_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orders");
        std::fs::write(&p, "k3y \n").unwrap();
        assert_eq!(read_key(&p).unwrap(), b"k3y ");
    }
}
