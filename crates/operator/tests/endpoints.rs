//! The `mysql-operator run` binary's endpoint when the API server cannot be reached: alive
//! (`/healthz` 200) but not ready (`/readyz` 503 naming the API server), metrics served in the
//! OpenMetrics format, GET only, and a silent client disconnected. Needs no control plane: the
//! kubeconfig points at a loopback port nothing listens on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The operator process; killed on drop.
struct Operator {
    child: Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Operator {
    fn start(dir: &Path, api_port: u16) -> Operator {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:{api_port}
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: not-a-token
contexts:
- name: nowhere
  context:
    cluster: nowhere
    user: nobody
current-context: nowhere
"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("operator.log");
        let child = Command::new(env!("CARGO_BIN_EXE_mysql-operator"))
            .arg("run")
            .env("KUBECONFIG", &kubeconfig)
            .env("MYSQL_OPERATOR_LISTEN", addr.to_string())
            .env("MYSQL_OPERATOR_LOG_FORMAT", "text")
            .env("MYSQL_OPERATOR_LOG", "info")
            // Nothing but the loopback address in the kubeconfig may be dialled.
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start mysql-operator");
        Operator { child, addr, log }
    }

    /// `request` sent raw → (status, head, body); `None` while nothing listens.
    fn exchange(&self, request: &str) -> Option<(u16, String, String)> {
        let mut s = TcpStream::connect(self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        let status = head.get(9..12)?.parse().ok()?;
        Some((status, head.to_owned(), body.to_owned()))
    }

    fn get(&self, path: &str) -> Option<(u16, String, String)> {
        self.exchange(&format!("GET {path} HTTP/1.1\r\nHost: operator\r\n\r\n"))
    }

    /// Polls until `path` answers `status` with a body containing `needle`.
    fn wait_for(&mut self, path: &str, status: u16, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        let mut last = None;
        loop {
            if let Some((code, _, body)) = self.get(path) {
                if code == status && body.contains(needle) {
                    return body;
                }
                last = Some((code, body));
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("the operator exited ({exit}):\n{}", self.logs());
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {WAIT:?} waiting for {path} to answer {status} with \
                     {needle:?}; last answer: {last:?}\n--- operator log ---\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn without_an_api_server_the_operator_is_alive_but_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let mut op = Operator::start(dir.path(), free_port());

    let health = op.wait_for("/healthz", 200, "ok");
    assert_eq!(health, "ok\n");
    let reason = op.wait_for("/readyz", 503, "api server");
    assert!(
        reason.trim_end().lines().count() == 1,
        "one line: {reason:?}"
    );
    // Still alive: liveness does not depend on the API server.
    assert_eq!(op.get("/healthz").map(|a| a.0), Some(200));

    let (code, head, metrics) = op.get("/metrics").expect("metrics");
    assert_eq!(code, 200, "{head}\n{metrics}");
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    // Nothing reconciled yet, so no samples: families without samples are not written.
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");

    for request in [
        "POST /readyz HTTP/1.1\r\nHost: operator\r\nContent-Length: 0\r\n\r\n",
        "HEAD /metrics HTTP/1.1\r\nHost: operator\r\n\r\n",
    ] {
        let (code, head, _) = op.exchange(request).expect("answer");
        assert_eq!(code, 405, "{request:?}: {head}");
        assert!(head.contains("allow: GET"), "{head}");
    }
    assert_eq!(op.get("/nope").map(|a| a.0), Some(404));

    // A client that never finishes its request is disconnected, and does not block others.
    let mut silent = TcpStream::connect(op.addr).unwrap();
    silent.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(op.get("/healthz").map(|a| a.0), Some(200));
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = silent.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the silent connection was held for {:?}",
        started.elapsed()
    );

    // SIGTERM stops it even though its controllers never got their first listing.
    // SAFETY: sends a signal to our own child process.
    unsafe { kill(op.child.id() as i32, 15) };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = op.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "still running {:?} after SIGTERM\n{}",
            started.elapsed(),
            op.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}\n{}", op.logs());
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
