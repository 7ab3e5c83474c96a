//! Programs run inside the node's network namespace but outside the cluster: a moto S3 server
//! the pods reach on the node's address, `mysql-backup` reading the same repositories as the
//! backup Jobs, and HTTP requests to pods over the pod network. Nothing here can reach beyond
//! the namespace, which has no route out.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The MariaDB server image the node holds (tests/node/lib.sh `MARIADB_IMAGE`); never pulled.
pub const MARIADB_IMAGE: &str = "docker.io/library/mariadb:10.11";

/// The node's network namespace (`BULWARK_NODE_NETNS`, exported by `node.sh env`).
pub fn netns() -> String {
    std::env::var("BULWARK_NODE_NETNS").unwrap_or_else(|_| "bulwark-node".to_owned())
}

/// The node's address inside its namespace (`BULWARK_NODE_IP`): pods reach it through their
/// bridge's gateway, so a server bound there serves the pods.
pub fn node_ip() -> Ipv4Addr {
    std::env::var("BULWARK_NODE_IP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(Ipv4Addr::new(10, 200, 0, 1))
}

/// How many nodes the test cluster has (`BULWARK_NODE_COUNT`, exported by `node.sh env`).
pub fn node_count() -> usize {
    std::env::var("BULWARK_NODE_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Node `k`'s name (1-based; tests/node/lib.sh `node_name`): node 1 holds the control plane.
pub fn node_name(k: usize) -> String {
    if k == 1 {
        "bulwark-node".to_owned()
    } else {
        format!("bulwark-node-{k}")
    }
}

/// The network namespace of every node that is up: node 1's, then node k's (`<netns>-k`), as
/// found in /run/netns (not from the environment, which a hand run may lack).
pub fn every_netns() -> Vec<String> {
    let first = netns();
    let mut found: Vec<(usize, String)> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| {
            let k = if name == first {
                1
            } else {
                name.strip_prefix(&format!("{first}-"))?.parse().ok()?
            };
            Some((k, name))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, name)| name).collect()
}

/// `tests/node/node.sh` with `args` (a chaos verb); panics with its output when it fails.
fn node_script(args: &[&str]) {
    if let Err(e) = try_node_script(args) {
        panic!("{e}");
    }
}

/// [`node_script`] for guards' drops, which must not panic (a panic while a failed test
/// unwinds aborts the whole test binary).
fn try_node_script(args: &[&str]) -> Result<(), String> {
    let script = crate::repo_root().join("tests/node/node.sh");
    let out = output({
        let mut c = Command::new("bash");
        c.arg(&script).args(args).stdin(Stdio::null());
        c
    });
    out.status.success().then_some(()).ok_or_else(|| {
        format!(
            "node.sh {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// A node stopped (`node.sh node stop`: its link down, then every process of it killed at once;
/// its files stay) until [`StoppedNode::start`] or drop starts it again.
pub struct StoppedNode {
    name: String,
    running: bool,
}

impl StoppedNode {
    pub fn stop(name: &str) -> StoppedNode {
        // The guard first: a stop that fails half-way is undone by its drop.
        let stopped = StoppedNode {
            name: name.to_owned(),
            running: false,
        };
        node_script(&["node", "stop", name]);
        stopped
    }

    /// Boots it again (link up, containerd, kubelet and kube-proxy started; its pods follow)
    /// and waits until it is Ready.
    pub fn start(mut self) {
        self.running = true;
        if let Err(e) = boot(&self.name) {
            panic!("{e}");
        }
    }
}

/// Starts a stopped node and waits until it reports Ready, so that whatever comes next can
/// schedule on it.
fn boot(name: &str) -> Result<(), String> {
    try_node_script(&["node", "start", name])?;
    crate::try_kubectl(&[
        "wait",
        "--for=condition=Ready",
        "--timeout=120s",
        &format!("node/{name}"),
    ])
    .map(drop)
}

impl Drop for StoppedNode {
    fn drop(&mut self) {
        if !self.running {
            if let Err(e) = boot(&self.name) {
                eprintln!("starting {} again after the test: {e}", self.name);
            }
        }
    }
}

/// Traffic between `a` and `b` (nodes or pod addresses) dropped both ways in every node
/// (`node.sh cut`), the API server and DNS on node 1 excepted, until dropped (`node.sh heal`).
pub struct Cut;

impl Cut {
    pub fn between(a: &str, b: &str) -> Cut {
        // The guard first: a cut that fails half-way is healed by its drop.
        let cut = Cut;
        node_script(&["cut", a, b]);
        cut
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if let Err(e) = try_node_script(&["heal"]) {
            eprintln!("healing after the test: {e}");
        }
    }
}

/// `program` run inside the node's namespace (`ip netns exec`, which execs it: the child is the
/// program itself, so killing the child stops it).
pub fn in_node(program: impl AsRef<std::ffi::OsStr>) -> Command {
    in_netns(&netns(), program)
}

fn in_netns(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec"])
        .arg(ns)
        .arg(program)
        .stdin(Stdio::null());
    c
}

fn output(mut c: Command) -> Output {
    c.output()
        .unwrap_or_else(|e| panic!("failed to run {:?}: {e}", c.get_args()))
}

/// The body of `http://{addr}{path}`, fetched from inside the node's namespace (Python from the
/// moto venv: no extra tool on the host).
pub fn http_get(addr: &str, path: &str) -> Result<String, String> {
    let python = bulwark_mysql_testkit::venv_dir().join("bin/python");
    let mut c = in_node(python);
    c.args([
        "-c",
        "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())",
        &format!("http://{addr}{path}"),
    ]);
    let out = output(c);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "GET http://{addr}{path}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Credentials moto accepts (it accepts any).
pub const S3_ACCESS_KEY: &str = "testing";
pub const S3_SECRET_KEY: &str = "testing";
pub const S3_REGION: &str = "us-east-1";

/// A moto S3 server inside the node's namespace on the node's address, killed on drop.
pub struct NodeS3 {
    child: Child,
    port: u16,
}

impl NodeS3 {
    /// Starts moto and waits until it answers.
    pub fn start() -> NodeS3 {
        let moto = bulwark_mysql_testkit::venv_dir().join("bin/moto_server");
        assert!(
            moto.is_file(),
            "{} is missing: run scripts/install-test-deps.sh",
            moto.display()
        );
        // The namespace has its own port space; a port another test binary's server answers
        // on (binaries run side by side, scripts/e2e.sh) is skipped, and a clash in the
        // moment between is seen as an early exit and the next port is tried.
        let first = 19_000 + (std::process::id() % 500) as u16 * 2;
        for port in first..first + 20 {
            if http_get(&format!("{}:{port}", node_ip()), "/").is_ok() {
                continue;
            }
            let mut c = in_node(&moto);
            c.args(["-H", &node_ip().to_string(), "-p", &port.to_string()])
                .env("PYTHONUNBUFFERED", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = c.spawn().expect("moto_server");
            let address = format!("{}:{port}", node_ip());
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(60) {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                if http_get(&address, "/").is_ok() {
                    return NodeS3 { child, port };
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("moto_server did not start inside the node's namespace");
    }

    /// `host:port` of the server.
    pub fn address(&self) -> String {
        format!("{}:{}", node_ip(), self.port)
    }

    /// The endpoint URL pods and `mysql-backup` use.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address())
    }

    /// Creates a bucket.
    pub fn create_bucket(&self, bucket: &str) {
        let python = bulwark_mysql_testkit::venv_dir().join("bin/python");
        let mut c = in_node(python);
        c.args([
            "-c",
            "import sys, boto3; boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id='testing', \
             aws_secret_access_key='testing', region_name='us-east-1').create_bucket(Bucket=sys.argv[2])",
            &self.endpoint(),
            bucket,
        ]);
        let out = output(c);
        assert!(
            out.status.success(),
            "create bucket {bucket}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `mysql-backup ARGS` (from `bin`) inside the node's namespace with this server's
    /// endpoint and credentials.
    pub fn mysql_backup(&self, bin: &Path, args: &[&str]) -> Output {
        let mut c = in_node(bin.join("mysql-backup"));
        c.args(args)
            .env("MYSQL_BACKUP_PROGRESS", "none")
            .env("MYSQL_BACKUP_S3_ENDPOINT", self.endpoint())
            .env("MYSQL_BACKUP_S3_REGION", S3_REGION)
            .env("MYSQL_BACKUP_S3_PATH_STYLE", "true")
            .env("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY)
            .env("AWS_EC2_METADATA_DISABLED", "true");
        output(c)
    }
}

impl Drop for NodeS3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Host PIDs of the running `mariadbd` processes of the pod with `uid` (the node's processes
/// share the host's PID namespace; a pod's cgroup path names its uid). A zombie (killed, not yet
/// reaped: its parent shim was killed with it) runs no more and is left out.
pub fn servers_of(uid: &str) -> Vec<i32> {
    processes_of(uid, "mariadbd")
}

/// Host PIDs of the running processes named `comm` (as `/proc/PID/comm` shows it, at most 15
/// bytes) of the pod with `uid`, as [`servers_of`] finds them.
pub fn processes_of(uid: &str, comm: &str) -> Vec<i32> {
    processes_in(uid, Some(comm))
}

/// Host PIDs of the running processes of the pod with `uid` named `comm`, or of any name (the
/// sandbox's `pause` included: none is left once the pod is torn down).
pub fn processes_in(uid: &str, comm: Option<&str>) -> Vec<i32> {
    let underscored = uid.replace('-', "_");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'));
            comm.is_none_or(|c| name.trim() == c)
                && !zombie
                && (cgroup.contains(uid) || cgroup.contains(&underscored))
        })
        .collect()
}

/// The uid of `pod`, whose server the host sees running (so that [`keep_killing`] can find
/// it).
pub fn server_pod(namespace: &str, pod: &str) -> String {
    let uid = crate::pod_uid(namespace, pod);
    assert!(
        !servers_of(&uid).is_empty(),
        "no mariadbd of pod {pod} ({uid}) seen from the host"
    );
    uid
}

/// Kills the pod's server whenever it runs, until `stop`; returns how many times it did.
pub fn keep_killing(uid: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut kills = 0;
        while !stop.load(Ordering::Relaxed) {
            for pid in servers_of(&uid) {
                let killed = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .is_ok_and(|s| s.success());
                kills += usize::from(killed);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        kills
    })
}

/// A pod cut off the pod network, both ways, until dropped: inside every node's namespace, every
/// packet forwarded to or from its address is dropped (ahead of kube-proxy's rules, which let
/// established connections through). The node itself (the kubelet's probes, `kubectl exec`)
/// still reaches it, as a node's own kubelet does when its network splits from the others, and
/// it still reaches the API server and DNS, as with a control plane apart from the split. (On
/// node 1 it also still reaches other services on node 1's own address, such as moto.)
pub struct Isolated {
    ip: String,
}

impl Isolated {
    pub fn pod(ip: &str) -> Isolated {
        // The guard first: rules added before a failure are removed by its drop.
        let cut = Isolated { ip: ip.to_owned() };
        for ns in every_netns() {
            for rule in cut.rules() {
                let out = output({
                    let mut c = in_netns(&ns, iptables());
                    c.args(["-w", "-I", "FORWARD", "1"]).args(&rule);
                    c
                });
                assert!(
                    out.status.success(),
                    "iptables in {ns}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        cut
    }

    /// The rules in the order they are inserted at the top of FORWARD (so the last comes
    /// first): the drops, then what stays reachable wherever the pod runs, the API server and
    /// DNS on node 1 (on node 1 itself that traffic never crosses FORWARD).
    fn rules(&self) -> Vec<Vec<String>> {
        let rule = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        let (ip, node) = (self.ip.as_str(), node_ip().to_string());
        let mut rules = vec![
            rule(&["-s", ip, "-j", "DROP"]),
            rule(&["-d", ip, "-j", "DROP"]),
        ];
        for (proto, port) in [("tcp", "6443"), ("udp", "53"), ("tcp", "53")] {
            rules.push(rule(&[
                "-s", ip, "-d", &node, "-p", proto, "--dport", port, "-j", "ACCEPT",
            ]));
            rules.push(rule(&[
                "-s", &node, "-d", ip, "-p", proto, "--sport", port, "-j", "ACCEPT",
            ]));
        }
        rules
    }
}

impl Drop for Isolated {
    fn drop(&mut self) {
        for ns in every_netns() {
            for rule in self.rules() {
                let _ = output({
                    let mut c = in_netns(&ns, iptables());
                    c.args(["-w", "-D", "FORWARD"]).args(&rule);
                    c
                });
            }
        }
    }
}

/// `iptables`, from sbin when it is there (a non-login root shell may not have it on PATH).
fn iptables() -> &'static str {
    if Path::new("/usr/sbin/iptables").exists() {
        "/usr/sbin/iptables"
    } else {
        "iptables"
    }
}
