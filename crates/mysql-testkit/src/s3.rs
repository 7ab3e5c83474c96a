//! A moto S3 server on loopback, from the venv that `scripts/install-test-deps.sh` creates, and
//! S3 helpers for tests (bucket creation, listing, and object get/put/delete for tamper tests).
//! The helpers speak the S3 protocol through boto3 from the same venv, so requests are signed
//! like a real client's.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::util::{cache_dir, free_port, keep_temp, poll_until, tail};

/// The moto version `scripts/install-test-deps.sh` installs; the venv directory is named after
/// it.
pub const MOTO_VERSION: &str = "5.2.5";
const START_TIMEOUT: Duration = Duration::from_secs(60);
const PORT_ATTEMPTS: usize = 4;
/// Credentials moto accepts (it accepts any).
const ACCESS_KEY: &str = "testing";
const SECRET_KEY: &str = "testing";
const REGION: &str = "us-east-1";

/// A long-lived boto3 helper used by [`S3Client`], so each operation costs a round trip rather
/// than a Python start. Protocol on stdin: a line `op arg-hex... body-length`, then the body;
/// answer on stdout: a line `ok|err length`, then that many bytes. No retries, so injected
/// faults are seen.
const BOTO_SCRIPT: &str = r#"
import os, sys, boto3
from botocore.config import Config
s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["TESTKIT_S3_ENDPOINT"],
    aws_access_key_id=os.environ["TESTKIT_S3_ACCESS_KEY"],
    aws_secret_access_key=os.environ["TESTKIT_S3_SECRET_KEY"],
    region_name=os.environ["TESTKIT_S3_REGION"],
    config=Config(s3={"addressing_style": "path"},
                  retries={"total_max_attempts": 1, "mode": "standard"},
                  connect_timeout=10, read_timeout=60),
)

def run(op, args, body):
    if op == "create_bucket":
        s3.create_bucket(Bucket=args[0])
    elif op == "put":
        s3.put_object(Bucket=args[0], Key=args[1], Body=body)
    elif op == "get":
        return s3.get_object(Bucket=args[0], Key=args[1])["Body"].read()
    elif op == "delete":
        s3.delete_object(Bucket=args[0], Key=args[1])
    elif op == "list":
        lines = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=args[0], Prefix=args[1]):
            for obj in page.get("Contents", []):
                lines.append("%s %d\n" % (obj["Key"].encode().hex(), obj["Size"]))
        return "".join(lines).encode()
    else:
        raise ValueError("unknown op " + op)
    return b""

inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    line = inp.readline()
    if not line:
        break
    parts = line.decode().split()
    op, args, length = parts[0], [bytes.fromhex(a).decode() for a in parts[1:-1]], int(parts[-1])
    body = inp.read(length)
    try:
        status, payload = b"ok", run(op, args, body)
    except Exception as e:
        status, payload = b"err", ("%s: %s" % (type(e).__name__, e)).encode()
    out.write(b"%s %d\n" % (status, len(payload)))
    out.write(payload)
    out.flush()
"#;

/// A `moto_server` child process on 127.0.0.1, killed on drop.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    port: u16,
    venv: PathBuf,
    log_dir: Option<TempDir>,
    /// Helper for the server's own endpoint, started on first use.
    client: OnceLock<S3Client>,
}

impl S3Server {
    /// Starts `moto_server` on a random loopback port and waits until it answers HTTP.
    pub fn start() -> Result<S3Server> {
        let venv = venv_dir();
        let moto = venv.join("bin").join("moto_server");
        if !moto.is_file() || !venv.join(".installed").is_file() {
            bail!(
                "moto {MOTO_VERSION} is not installed at {}; run scripts/install-test-deps.sh \
                 (as root) first",
                venv.display()
            );
        }
        let log_dir = tempfile::Builder::new()
            .prefix("bulwark-s3.")
            .tempdir()
            .context("failed to create a temporary directory")?;
        let log_path = log_dir.path().join("moto.log");
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port()?;
            let log = File::create(&log_path)?;
            let mut child = Command::new(&moto)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .env("PYTHONUNBUFFERED", "1")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("failed to start {}", moto.display()))?;
            let ready = poll_until(START_TIMEOUT, "moto_server to answer", || {
                if let Some(status) = child.try_wait()? {
                    bail!("moto_server exited during startup ({status})");
                }
                Ok(answers_http(port).then_some(()))
            });
            match ready {
                Ok(()) => {
                    return Ok(S3Server {
                        child,
                        port,
                        venv,
                        log_dir: Some(log_dir),
                        client: OnceLock::new(),
                    })
                }
                Err(err) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log_tail = tail(&log_path, 20);
                    if log_tail.contains("Address already in use") && attempt < PORT_ATTEMPTS {
                        continue;
                    }
                    return Err(err.context(format!("moto_server did not start:\n{log_tail}")));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Environment for a `mysql-backup` child talking to this server: credentials, region,
    /// endpoint, plain HTTP allowed, path-style requests, no instance metadata lookups, both
    /// as the standard `AWS_*` variables and as the CLI's own `MYSQL_BACKUP_S3_*` ones.
    pub fn env(&self) -> Vec<(String, String)> {
        self.env_with_endpoint(&self.endpoint())
    }

    /// Like [`S3Server::env`] with another endpoint, e.g. a [`crate::FaultProxy`] in front.
    pub fn env_with_endpoint(&self, endpoint: &str) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_DEFAULT_REGION", REGION),
            ("AWS_REGION", REGION),
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_ENDPOINT", endpoint),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("MYSQL_BACKUP_S3_ENDPOINT", endpoint),
            ("MYSQL_BACKUP_S3_REGION", REGION),
            ("MYSQL_BACKUP_S3_PATH_STYLE", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// A boto3-backed client for this server (one shared helper process).
    pub fn client(&self) -> Result<S3Client> {
        if let Some(client) = self.client.get() {
            return Ok(client.clone());
        }
        let client = self.client_via(&self.endpoint())?;
        Ok(self.client.get_or_init(|| client).clone())
    }

    /// A boto3-backed client (its own helper process) that reaches this server through
    /// `endpoint`, e.g. a [`crate::FaultProxy`].
    pub fn client_via(&self, endpoint: &str) -> Result<S3Client> {
        S3Client::new(&self.venv.join("bin").join("python"), endpoint)
    }

    /// Creates a bucket.
    pub fn create_bucket(&self, name: &str) -> Result<()> {
        self.client()?.create_bucket(name)
    }

    /// Keys under `prefix` with their sizes, in key order.
    pub fn list_keys(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.client()?.list_keys(bucket, prefix)
    }

    /// Writes an object.
    pub fn put_object(&self, bucket: &str, key: &str, body: &[u8]) -> Result<()> {
        self.client()?.put_object(bucket, key, body)
    }

    /// Reads an object.
    pub fn get_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        self.client()?.get_object(bucket, key)
    }

    /// Deletes an object.
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.client()?.delete_object(bucket, key)
    }

    /// Tamper helper: flips every bit of the byte at `offset` of an object.
    pub fn flip_byte(&self, bucket: &str, key: &str, offset: usize) -> Result<()> {
        let mut body = self.get_object(bucket, key)?;
        let len = body.len();
        let byte = body
            .get_mut(offset)
            .with_context(|| format!("offset {offset} is beyond {key} ({len} bytes)"))?;
        *byte ^= 0xff;
        self.put_object(bucket, key, &body)
    }

    /// Tamper helper: cuts an object down to its first `len` bytes.
    pub fn truncate_object(&self, bucket: &str, key: &str, len: usize) -> Result<()> {
        let mut body = self.get_object(bucket, key)?;
        body.truncate(len);
        self.put_object(bucket, key, &body)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.log_dir.take() {
            if keep_temp() {
                eprintln!("testkit: keeping moto log dir {}", dir.keep().display());
            }
        }
    }
}

/// S3 operations through a boto3 helper process against one endpoint. Cloning shares the
/// helper; it exits when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct S3Client {
    endpoint: String,
    helper: Arc<Mutex<Helper>>,
}

#[derive(Debug)]
struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl S3Client {
    fn new(python: &Path, endpoint: &str) -> Result<S3Client> {
        let mut child = Command::new(python)
            .arg("-c")
            .arg(BOTO_SCRIPT)
            .env("TESTKIT_S3_ENDPOINT", endpoint)
            .env("TESTKIT_S3_ACCESS_KEY", ACCESS_KEY)
            .env("TESTKIT_S3_SECRET_KEY", SECRET_KEY)
            .env("TESTKIT_S3_REGION", REGION)
            // Keep the caller's AWS settings out of the helper.
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_CONFIG_FILE")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("failed to start {}", python.display()))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        Ok(S3Client {
            endpoint: endpoint.to_string(),
            helper: Arc::new(Mutex::new(Helper {
                child,
                stdin,
                stdout,
            })),
        })
    }

    /// The endpoint this client sends requests to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn run(&self, op: &str, args: &[&str], body: &[u8]) -> Result<Vec<u8>> {
        let mut helper = self
            .helper
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut line = op.to_string();
        for arg in args {
            line.push(' ');
            line.push_str(&encode_hex(arg.as_bytes()));
        }
        line.push_str(&format!(" {}\n", body.len()));
        let exchange = (|| -> Result<(String, Vec<u8>)> {
            helper.stdin.write_all(line.as_bytes())?;
            helper.stdin.write_all(body)?;
            helper.stdin.flush()?;
            let mut status = String::new();
            if helper.stdout.read_line(&mut status)? == 0 {
                bail!("the boto3 helper exited");
            }
            let (kind, len) = status
                .trim_end()
                .split_once(' ')
                .with_context(|| format!("bad helper status line {status:?}"))?;
            let mut payload = vec![0; len.parse()?];
            helper.stdout.read_exact(&mut payload)?;
            Ok((kind.to_string(), payload))
        })();
        let what = || format!("S3 {op} {} via {}", args.join(" "), self.endpoint);
        let (kind, payload) = exchange.with_context(what)?;
        if kind != "ok" {
            bail!("{} failed: {}", what(), String::from_utf8_lossy(&payload));
        }
        Ok(payload)
    }

    /// Creates a bucket.
    pub fn create_bucket(&self, name: &str) -> Result<()> {
        self.run("create_bucket", &[name], b"").map(drop)
    }

    /// Keys under `prefix` with their sizes, in key order.
    pub fn list_keys(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>> {
        let out = self.run("list", &[bucket, prefix], b"")?;
        String::from_utf8(out)?
            .lines()
            .map(|line| {
                let (hex, size) = line
                    .split_once(' ')
                    .with_context(|| format!("bad listing line {line:?}"))?;
                Ok((String::from_utf8(decode_hex(hex)?)?, size.parse()?))
            })
            .collect()
    }

    /// Writes an object.
    pub fn put_object(&self, bucket: &str, key: &str, body: &[u8]) -> Result<()> {
        self.run("put", &[bucket, key], body).map(drop)
    }

    /// Reads an object.
    pub fn get_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        self.run("get", &[bucket, key], b"")
    }

    /// Deletes an object.
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.run("delete", &[bucket, key], b"").map(drop)
    }
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where `scripts/install-test-deps.sh` puts the moto venv.
pub fn venv_dir() -> PathBuf {
    cache_dir().join(format!("moto-{MOTO_VERSION}"))
}

/// Whether something on the port answers an HTTP request with an HTTP status line.
fn answers_http(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}

fn decode_hex(hex: &str) -> Result<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        bail!("odd-length hex {hex:?}");
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).with_context(|| format!("bad hex {hex:?}")))
        .collect()
}
