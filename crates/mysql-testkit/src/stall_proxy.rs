//! A TCP relay that can silence the connections it carries without closing them: after
//! [`StallProxy::stall`], every connection open at that moment stays open and relays nothing
//! more either way, while connections made later relay normally (a stale NAT entry: a fresh
//! connection gets through). After [`StallProxy::cut`], new connections are silent from the
//! start too (a dead route). The receiving end of a silenced stream sees no error and no end.
//! Loopback only.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result};

/// How often a relay thread looks at its stall flag while its peer is quiet.
const POLL: Duration = Duration::from_millis(100);

/// One carried connection: both sockets and whether it is silenced.
struct Carried {
    sockets: [TcpStream; 2],
    stalled: Arc<AtomicBool>,
}

/// A relay from a loopback port to `upstream`.
pub struct StallProxy {
    addr: SocketAddr,
    closing: Arc<AtomicBool>,
    /// New connections are silent from the start.
    cut: Arc<AtomicBool>,
    carried: Arc<Mutex<Vec<Carried>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl StallProxy {
    /// Listens on 127.0.0.1 (a free port) and relays each connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<StallProxy> {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST, upstream)
    }

    /// Listens on `ip`, a loopback address (a free port), and relays each connection to
    /// `upstream`.
    pub fn start_on(ip: std::net::Ipv4Addr, upstream: SocketAddr) -> Result<StallProxy> {
        anyhow::ensure!(ip.is_loopback(), "{ip} is not a loopback address");
        let listener = TcpListener::bind((ip, 0)).context("bind the stall proxy")?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let closing = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let carried: Arc<Mutex<Vec<Carried>>> = Arc::default();
        let acceptor = {
            let (closing, cut, carried) = (closing.clone(), cut.clone(), carried.clone());
            thread::spawn(move || accept(listener, upstream, &closing, &cut, &carried))
        };
        Ok(StallProxy {
            addr,
            closing,
            cut,
            carried,
            acceptor: Some(acceptor),
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Silences every connection, those open now and those made later.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.stall();
    }

    /// Silences every connection open now; later ones relay normally.
    pub fn stall(&self) {
        for c in self.carried.lock().expect("carried").iter() {
            c.stalled.store(true, Ordering::SeqCst);
        }
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        for c in self.carried.lock().expect("carried").drain(..) {
            for s in &c.sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    closing: &Arc<AtomicBool>,
    cut: &AtomicBool,
    carried: &Mutex<Vec<Carried>>,
) {
    while !closing.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(POLL);
                continue;
            }
            Err(_) => {
                thread::sleep(POLL);
                continue;
            }
        };
        let Ok(server) = TcpStream::connect(upstream) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let stalled = Arc::new(AtomicBool::new(cut.load(Ordering::SeqCst)));
        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
            client.try_clone(),
            server.try_clone(),
            client.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        for (from, to) in [(c2, s2), (s3, c3)] {
            let stalled = stalled.clone();
            let closing = closing.clone();
            thread::spawn(move || relay(from, to, &stalled, &closing));
        }
        carried.lock().expect("carried").push(Carried {
            sockets: [client, server],
            stalled,
        });
    }
}

/// Copies `from` to `to` until either ends; once stalled, reads nothing more and keeps both
/// open until the proxy is dropped.
fn relay(mut from: TcpStream, mut to: TcpStream, stalled: &AtomicBool, closing: &AtomicBool) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    loop {
        if closing.load(Ordering::SeqCst) {
            return;
        }
        if stalled.load(Ordering::SeqCst) {
            // Silenced: what the peer sends stays unread (its window closes, as on a dead
            // route), and the sockets are held until the proxy is dropped.
            thread::sleep(POLL);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
