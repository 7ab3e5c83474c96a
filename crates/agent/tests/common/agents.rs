//! Running `bulwark-agent run` beside real MariaDB servers: the agent process and its HTTP
//! endpoints, a labels directory swapped the way the kubelet does it, the mounted credentials,
//! and servers started with what `bulwark-agent init` writes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

pub const WAIT: Duration = Duration::from_secs(90);

/// A running agent; killed on drop.
pub struct Agent {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Agent {
    pub fn start(
        name: &str,
        dir: &Path,
        db: &MariaDb,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        let log = dir.join(format!("{name}.log"));
        let mut c = Command::new(AGENT);
        c.args(["run", "--listen", "127.0.0.1:0", "--interval", "200ms"])
            .arg("--socket")
            .arg(db.socket())
            .args(args)
            .envs(env.iter().copied())
            .env(
                "BULWARK_AGENT_LOG",
                "info,bulwark_agent=debug,bulwark_engine=debug,bulwark_pitr=debug",
            )
            .env_remove("MYSQL_PWD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = c.spawn().expect("start the agent");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let addr = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "agent {name} did not start: {first:?}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .parse()
            .unwrap();
        Agent { child, addr, log }
    }

    /// `GET path` → (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.trim_end().to_string();
        (status, body)
    }

    /// `POST path` with `body` → (status, body).
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: agent\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.trim_end().to_string();
        (status, body)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM, as the kubelet does when the pod is deleted.
    pub fn terminate(&self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
    }

    /// Whether the process has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `probe` until it yields `Some`; on timeout fails with the agents' logs.
pub fn wait_for<T>(what: &str, agents: &[&Agent], mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = agents.iter().map(|a| a.logs()).collect();
            panic!(
                "timed out after {WAIT:?} waiting for {what}\n--- agent logs ---\n{}",
                logs.join("\n---\n")
            );
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Waits until `path` answers `status` with a body containing `needle`; returns the body.
pub fn wait_status(
    agent: &Agent,
    others: &[&Agent],
    path: &str,
    status: u16,
    needle: &str,
) -> String {
    let mut all = vec![agent];
    all.extend_from_slice(others);
    let mut last = (0, String::new());
    wait_for(
        &format!("{path} to answer {status} with {needle:?}"),
        &all,
        || {
            last = agent.get(path);
            (last.0 == status && last.1.contains(needle)).then(|| last.1.clone())
        },
    )
}

/// A labels directory the way the kubelet keeps it: `labels` → `..data/labels`, and `..data`
/// a symlink swapped atomically to a new timestamped directory on every change.
pub struct Labels {
    dir: PathBuf,
    version: u32,
}

impl Labels {
    pub fn new(dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        Labels { dir, version: 0 }
    }

    pub fn file(&self) -> PathBuf {
        self.dir.join("labels")
    }

    pub fn set(&mut self, role: Option<&str>) {
        self.write(role, None);
    }

    pub fn set_with_epoch(&mut self, role: &str, epoch: u64) {
        self.write(Some(role), Some(epoch));
    }

    fn write(&mut self, role: Option<&str>, epoch: Option<u64>) {
        self.version += 1;
        let ts = format!("..2026_11_22_00_00_{:02}.{}", self.version, self.version);
        std::fs::create_dir(self.dir.join(&ts)).unwrap();
        let mut text = "app.kubernetes.io/name=\"quay\"\n".to_string();
        if let Some(r) = role {
            text.push_str(&format!("mysql.bulwark.dev/role=\"{r}\"\n"));
        }
        if let Some(e) = epoch {
            text.push_str(&format!("mysql.bulwark.dev/epoch=\"{e}\"\n"));
        }
        text.push_str("statefulset.kubernetes.io/pod-name=\"quay-0\"");
        std::fs::write(self.dir.join(&ts).join("labels"), text).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&ts, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if std::fs::symlink_metadata(self.file()).is_err() {
            std::os::unix::fs::symlink("..data/labels", self.file()).unwrap();
        }
    }
}

/// The credentials directory as mounted from Secrets (trailing newlines included).
pub fn credentials(dir: &Path, root: &str) -> PathBuf {
    let c = dir.join("credentials");
    std::fs::create_dir_all(&c).unwrap();
    for (name, pw) in [
        ("root", root),
        ("replication", "r3pl-'secret\\"),
        ("backup", "b4ckup-secret"),
        ("metrics", "m3trics-secret"),
    ] {
        std::fs::write(c.join(name), format!("{pw}\n")).unwrap();
    }
    c
}

/// [`credentials`] with no root password and the order key `order-key`, which signs the
/// operator's heartbeats and orders; its path as an argument.
pub fn credentials_with_order_key(dir: &Path) -> String {
    let c = credentials(dir, "");
    std::fs::write(c.join("orders"), "order-key\n").unwrap();
    c.to_str().unwrap().to_owned()
}

/// The server options `bulwark-agent init` writes for `pod`.
pub fn instance_args(work: &Path, pod: &str) -> Vec<String> {
    let config = work.join("my.cnf");
    std::fs::write(&config, "[mysqld]\n").unwrap();
    let conf_dir = work.join(format!("conf-{pod}"));
    let mut c = cli(&["init", "--pod-name", pod, "--cluster", "quay"]);
    c.args(["--engine", "mariadb", "--config-file"])
        .arg(&config)
        .arg("--conf-dir")
        .arg(&conf_dir);
    ok(c);
    let cnf = std::fs::read_to_string(conf_dir.join("bulwark-instance.cnf")).unwrap();
    cnf.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| format!("--{k}={v}"))
        .collect()
}

/// A server started with what `bulwark-agent init` writes for `pod`.
pub fn instance_server(work: &Path, pod: &str) -> MariaDb {
    let args = instance_args(work, pod);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let db = MariaDb::start_with_args(&args).unwrap();
    // The harness binlogged its own set-up; a server fresh from the image's entrypoint has
    // an empty binary log.
    db.sql("RESET MASTER").unwrap();
    db
}

/// Runs SQL over TCP from 127.0.0.1 as `user` with `password`.
pub fn sql_tcp(db: &MariaDb, user: &str, password: &str, sql: &str) -> Result<String, String> {
    sql_at_port(db.port(), user, password, sql)
}

/// Runs SQL with the `mariadb` client over TCP to 127.0.0.1:`port`.
fn sql_at_port(port: u16, user: &str, password: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("mariadb")
        .args([
            "--no-defaults",
            "-N",
            "-B",
            "--protocol=TCP",
            "-h",
            "127.0.0.1",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--user={user}"))
        .args(["-e", sql])
        .env("MYSQL_PWD", password)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Whether `user` with `password` can log in over TCP from the loopback address `from` (the
/// whole of 127.0.0.0/8 reaches the server; the client cannot choose its address, so one
/// connection is relayed from `from`): `Err` with the client's message otherwise.
pub fn login_from(db: &MariaDb, from: &str, user: &str, password: &str) -> Result<(), String> {
    let relay = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_port = relay.local_addr().unwrap().port();
    let server = SocketAddr::from(([127, 0, 0, 1], db.port()));
    let from: std::net::IpAddr = from.parse().unwrap();
    relay.set_nonblocking(true).unwrap();
    let relaying = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            match relay.accept() {
                Ok((client, _)) => break client,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "the client never connected");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{e}"),
            }
        };
        client.set_nonblocking(true).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut client = tokio::net::TcpStream::from_std(client).unwrap();
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(from, 0)).unwrap();
            let mut upstream = socket.connect(server).await.unwrap();
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
    });
    let login = sql_at_port(relay_port, user, password, "SELECT 1");
    relaying.join().unwrap();
    login.map(drop)
}

/// `@@read_only` read as the metrics account: a demoted primary's hold on writes ends client
/// sessions (root's included) for a few seconds, but spares the operator's accounts.
pub fn read_only(db: &MariaDb) -> String {
    sql_tcp(
        db,
        "bulwark_exporter",
        "m3trics-secret",
        "SELECT @@read_only",
    )
    .unwrap_or_else(|e| panic!("read_only: {e}"))
}

pub fn scalar(db: &MariaDb, sql: &str) -> String {
    db.sql(sql).unwrap().trim().to_string()
}

/// An agent for a member whose role comes from `labels`, replicating from 127.0.0.1:`port`.
pub fn member_agent(
    name: &str,
    dir: &Path,
    db: &MariaDb,
    labels: &Labels,
    credentials: &str,
    port: &str,
    extra: &[&str],
) -> Agent {
    let labels_file = labels.file();
    let mut args = vec![
        "--labels-file",
        labels_file.to_str().unwrap(),
        "--credentials-dir",
        credentials,
        "--primary-host",
        "127.0.0.1",
        "--primary-port",
        port,
    ];
    args.extend_from_slice(extra);
    Agent::start(name, dir, db, &args, &[])
}

/// A replica's snapshot as its primary's would read: events created by replication are
/// `DISABLE ON SLAVE` there, so that they run on the primary only.
pub fn replica_snapshot(db: &MariaDb) -> bulwark_mysql_testkit::DbSnapshot {
    let mut s = snapshot(db).unwrap();
    for e in s.events.values_mut() {
        *e = e.replace(" DISABLE ON SLAVE ", " ENABLE ");
    }
    s
}

/// `SHOW SLAVE STATUS` as column → value (empty when replication is not configured).
pub fn replica_status(db: &MariaDb) -> std::collections::BTreeMap<String, String> {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "-B", "--user=root"])
        .arg(format!("--socket={}", db.socket().display()))
        .args(["-e", "SHOW SLAVE STATUS"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(names), Some(values)) => names
            .split('\t')
            .zip(values.split('\t'))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        _ => Default::default(),
    }
}

/// Two members of cluster `quay` started as `bulwark-agent init` configures them: `quay-0`
/// labelled primary and `quay-1` labelled replica, with the credentials (order key included).
pub struct Pair {
    pub work: tempfile::TempDir,
    pub a_db: MariaDb,
    pub b_db: MariaDb,
    /// The credentials directory.
    pub creds: String,
    pub a_labels: Labels,
    pub b_labels: Labels,
}

impl Pair {
    pub fn new() -> Pair {
        let work = tempfile::tempdir().unwrap();
        let w = work.path();
        let a_db = instance_server(w, "quay-0");
        let b_db = instance_server(w, "quay-1");
        let creds = credentials(w, "");
        std::fs::write(creds.join("orders"), "order-key\n").unwrap();
        let mut a_labels = Labels::new(w.join("podinfo-a"));
        let mut b_labels = Labels::new(w.join("podinfo-b"));
        a_labels.set(Some("primary"));
        b_labels.set(Some("replica"));
        Pair {
            creds: creds.to_str().unwrap().to_owned(),
            work,
            a_db,
            b_db,
            a_labels,
            b_labels,
        }
    }
}

/// The agents of a new cluster's first two members, each with the pending load its `restore`
/// left (`pending[ordinal]`, repository `repo`): `quay-0` primary on `p_db`, `quay-1` its
/// replica on `r_db`. The labels live as long as the agents need them.
pub struct BootstrappedPair {
    pub primary: Agent,
    pub replica: Agent,
    _labels: [Labels; 2],
}

impl BootstrappedPair {
    pub fn start(
        w: &Path,
        p_db: &MariaDb,
        r_db: &MariaDb,
        pending: &[PathBuf],
        repo: &str,
    ) -> BootstrappedPair {
        let creds = credentials(w, "");
        let p_port = p_db.port().to_string();
        let mut labels = [
            Labels::new(w.join("podinfo-0")),
            Labels::new(w.join("podinfo-1")),
        ];
        labels[0].set(Some("primary"));
        labels[1].set(Some("replica"));
        let agent = |ordinal: usize, db: &MariaDb| {
            Agent::start(
                &format!("quay-{ordinal}"),
                w,
                db,
                &[
                    "--labels-file",
                    labels[ordinal].file().to_str().unwrap(),
                    "--credentials-dir",
                    creds.to_str().unwrap(),
                    "--primary-host",
                    "127.0.0.1",
                    "--primary-port",
                    &p_port,
                    "--pending-logical-restore",
                    pending[ordinal].to_str().unwrap(),
                ],
                &[("MYSQL_BACKUP_REPO", repo)],
            )
        };
        BootstrappedPair {
            primary: agent(0, p_db),
            replica: agent(1, r_db),
            _labels: labels,
        }
    }
}

/// An agent labelled primary over `db`, in `work`, that loads a pending logical restore
/// (`pending`) from repository `repo` under `key`: a bootstrapped cluster's first member.
pub fn loading_primary(
    name: &str,
    work: &Path,
    db: &MariaDb,
    pending: &Path,
    repo: &str,
    key: &str,
) -> Agent {
    let creds = credentials(work, "");
    let mut labels = Labels::new(work.join("podinfo"));
    labels.set(Some("primary"));
    Agent::start(
        name,
        work,
        db,
        &[
            "--labels-file",
            labels.file().to_str().unwrap(),
            "--credentials-dir",
            creds.to_str().unwrap(),
            "--primary-host",
            "quay-primary",
            "--pending-logical-restore",
            pending.to_str().unwrap(),
            "--encryption-key-file",
            key,
        ],
        &[("MYSQL_BACKUP_REPO", repo)],
    )
}
