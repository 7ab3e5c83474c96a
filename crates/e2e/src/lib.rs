//! Driving the real test node (`tests/node`) from tests: `kubectl` against the node's API
//! server (the host's loopback address `node.sh` serves it on), the operator installed once per
//! test binary from the Helm chart with the images built here, and, when a test fails, a dump of
//! the objects, events and container logs of its namespace.
//!
//! Everything runs in the node's network namespace; from the host only its API server is
//! reached, on 127.0.0.1. Queries to the databases run in pods (`kubectl exec`); programs that
//! stand outside the cluster (an S3 server, `mysql-backup verify`, metric scrapes) run inside
//! the namespace through [`node`], never on the host's network.

pub mod node;

pub mod writer;

/// Prints a figure an end-to-end test measured (a pause, a time to promotion, rows acknowledged
/// and lost) and records it for the end of the run (see [`record_figure`]).
#[macro_export]
macro_rules! figure {
    ($($arg:tt)*) => {
        $crate::record_figure(&format!($($arg)*))
    };
}

/// Prints `line` and, when `BULWARK_E2E_FIGURES` names a file (`scripts/test.sh` sets it),
/// appends it there under the running test's name: the test harness hides what a passing test
/// printed, and the script shows every figure at the end of the run.
pub fn record_figure(line: &str) {
    eprintln!("{line}");
    let Ok(path) = std::env::var("BULWARK_E2E_FIGURES") else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned();
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, format!("{test}: {line}\n").as_bytes())
        });
    if let Err(e) = appended {
        eprintln!("could not record the figure in {path}: {e}");
    }
}

use std::path::{Path, PathBuf};

use base64::Engine as _;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The node's host kubeconfig, from `BULWARK_NODE_KUBECONFIG` (scripts/test.sh exports it after
/// `tests/node/node.sh up`).
pub fn kubeconfig() -> PathBuf {
    let path = std::env::var_os("BULWARK_NODE_KUBECONFIG").unwrap_or_else(|| {
        panic!(
            "BULWARK_NODE_KUBECONFIG is not set: these tests need the real node; run them \
             through scripts/test.sh, or `tests/node/node.sh up` and export \
             BULWARK_NODE_KUBECONFIG from `tests/node/node.sh env`"
        )
    });
    PathBuf::from(path)
}

/// The directory of the binaries `cargo test --workspace` built (mysql-operator, mysql-backup,
/// bulwark-agent): the parent of this test executable's `deps` directory.
pub fn binaries_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf();
    for bin in ["mysql-operator", "mysql-backup", "bulwark-agent"] {
        assert!(
            dir.join(bin).exists(),
            "{} is not built: run the tests with `cargo test --workspace`",
            dir.join(bin).display()
        );
    }
    dir
}

/// `kubectl` (the node's own release, from `BULWARK_NODE_BIN`, else PATH) on the node.
pub fn kubectl(args: &[&str]) -> Command {
    let program = std::env::var_os("BULWARK_NODE_BIN")
        .map(|d| PathBuf::from(d).join("kubectl"))
        .unwrap_or_else(|| PathBuf::from("kubectl"));
    let mut c = Command::new(program);
    c.arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args)
        .stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    c.output()
        .unwrap_or_else(|e| panic!("failed to run {:?}: {e}", c.get_program()))
}

/// Runs kubectl; its stdout, or the failure.
pub fn try_kubectl(args: &[&str]) -> Result<String, String> {
    let out = run(kubectl(args));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs kubectl and asserts success; its stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    try_kubectl(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Applies a manifest given as text.
pub fn apply(namespace: &str, manifest: &str) {
    let mut c = kubectl(&["apply", "--server-side", "-n", namespace, "-f", "-"]);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("kubectl apply");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), manifest.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}\n{manifest}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An object as JSON, or `None` when it does not exist.
pub fn get_json(namespace: &str, what: &str) -> Option<serde_json::Value> {
    let out = try_kubectl(&["get", "-n", namespace, what, "-o", "json"]).ok()?;
    serde_json::from_str(&out).ok()
}

/// `pod`'s uid: a pod made again under its name has another.
pub fn pod_uid(namespace: &str, pod: &str) -> String {
    get_json(namespace, &format!("pod/{pod}")).unwrap_or_else(|| panic!("pod {pod} cannot be read"))
        ["metadata"]["uid"]
        .as_str()
        .unwrap_or_else(|| panic!("pod {pod} has no uid"))
        .to_owned()
}

/// Polls `probe` every second until it yields a value; after `timeout`, panics with `what` and
/// the last observation, after dumping `namespace`.
pub fn wait_for<T>(
    namespace: &str,
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match probe() {
            Ok(v) => return v,
            Err(last) if start.elapsed() > timeout => {
                dump(namespace);
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// The condition of `type_` in an object's `status` (null when absent).
pub fn condition(status: &serde_json::Value, type_: &str) -> serde_json::Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or_default()
}

/// Waits until the cluster is Ready with `replicas` ready instances, all on the current spec,
/// and its primary Service routes.
pub fn wait_ready(n: &str, name: &str, replicas: u64, what: &str) {
    wait_for(n, what, Duration::from_secs(300), || {
        let c = get_json(n, &format!("mysqlcluster/{name}")).ok_or("no cluster yet")?;
        let st = &c["status"];
        let ready = condition(st, "Ready");
        let progressing = condition(st, "Progressing");
        let settled = ready["status"] == "True"
            && progressing["status"] == "False"
            && st["readyReplicas"].as_u64() == Some(replicas)
            && st["observedGeneration"] == c["metadata"]["generation"];
        settled
            .then_some(())
            .ok_or_else(|| format!("{ready} {progressing} ready={}", st["readyReplicas"]))
    });
    // Ready is the pods' and agents' word; kube-proxy routes a new Service or endpoint a moment
    // later. Tests use the cluster through its primary Service, so wait until that answers
    // (`mariadb-admin ping` exits 0 on any answer, a refused login included).
    let primary = get_json(n, &format!("mysqlcluster/{name}"))
        .and_then(|c| c["status"]["currentPrimary"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{name}-0"));
    let service = format!("{name}-primary");
    wait_for(
        n,
        &format!("{service} to route"),
        Duration::from_secs(60),
        || {
            try_kubectl(&[
                "exec",
                "-n",
                n,
                &primary,
                "-c",
                "mysqld",
                "--",
                "mariadb-admin",
                "--connect-timeout=2",
                "-h",
                &service,
                "ping",
            ])
            .map(drop)
        },
    );
}

/// Waits until the status of cluster `name` names a primary other than `old`; returns it.
pub fn wait_promoted(n: &str, name: &str, old: &str) -> String {
    wait_for(n, "a replica promoted", Duration::from_secs(120), || {
        let c = get_json(n, &format!("mysqlcluster/{name}")).unwrap_or_default();
        match c["status"]["currentPrimary"].as_str() {
            Some(p) if p != old => Ok(p.to_owned()),
            other => Err(format!("{other:?}")),
        }
    })
}

/// Waits until writes through `service` reach `pod`'s server, writable.
pub fn wait_takes_writes(n: &str, pod: &str, password: &str, service: &str) {
    wait_for(
        n,
        &format!("{pod} to take writes through {service}"),
        Duration::from_secs(120),
        || {
            sql(n, pod, password, service, "SELECT @@hostname, @@read_only").and_then(|out| {
                let f: Vec<&str> = out.split_whitespace().collect();
                (f == [pod, "0"]).then_some(()).ok_or(out)
            })
        },
    );
}

/// Takes a backup of `cluster` to `storage` with `method` as MySQLBackup `name`, waits for
/// it to succeed, and checks what every successful backup reports (stored and plaintext
/// sizes, the GTID set); its status. The time from apply to `Succeeded` is printed.
pub fn take_backup(
    n: &str,
    cluster: &str,
    name: &str,
    storage: &str,
    method: &str,
) -> serde_json::Value {
    let started = Instant::now();
    apply(
        n,
        &format!(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {{name: {name}}}\n\
             spec: {{clusterRef: {{name: {cluster}}}, storage: {storage}, method: {method}}}\n"
        ),
    );
    let status = backup_succeeded(n, name);
    eprintln!(
        "{method} backup {name} to {storage} Succeeded {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    for size in ["storedBytes", "plaintextBytes"] {
        assert!(status[size].as_i64().unwrap_or(0) > 0, "{size}: {status}");
    }
    assert!(
        status["gtidSet"].as_str().is_some_and(|g| !g.is_empty()),
        "{status}"
    );
    status
}

/// A field of the operator's pod (installed by [`operator`]), by JSONPath, e.g.
/// `{.status.podIP}`.
pub fn operator_pod(jsonpath: &str) -> String {
    let field = jsonpath.trim_start_matches('{').trim_end_matches('}');
    operator_pods(&format!("{{.items[0]{field}}}"))
        .unwrap_or_else(|e| panic!("{e}"))
        .trim()
        .to_owned()
}

/// The operator's pods (none for a moment while one is replaced) through a JSONPath template
/// over their list, e.g. `{range .items[*]}{.metadata.uid}{"\n"}{end}`.
pub fn operator_pods(template: &str) -> Result<String, String> {
    try_kubectl(&[
        "get",
        "pods",
        "-n",
        "bulwark-system",
        "-l",
        "app.kubernetes.io/name=mysql-operator",
        "-o",
        &format!("jsonpath={template}"),
    ])
}

/// `mysql-backup verify --json` of backup `id` in the repository at `repo` (a claim's
/// directory on the node's disk), run from outside the cluster with the base64 master `key`:
/// fails the test unless the backup verifies in full.
pub fn verify_from_outside(repo: &Path, key: &str, id: &str) {
    let dir = std::env::temp_dir().join(format!(
        "bulwark-e2e-key-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).expect("a key directory");
    let key_file = dir.join("master.key");
    std::fs::write(&key_file, key).expect("the key file");
    let out = Command::new(binaries_dir().join("mysql-backup"))
        .args(["verify", "--json", "--repo"])
        .arg(repo)
        .arg("--encryption-key-file")
        .arg(&key_file)
        .arg(id)
        .env("MYSQL_BACKUP_PROGRESS", "none")
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("mysql-backup verify");
    assert!(
        out.status.success(),
        "verify {id} in {}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("verify's JSON report");
    assert_eq!(
        (report["ok"].as_bool(), report["depth"].as_str()),
        (Some(true), Some("full")),
        "{report}"
    );
}

/// A suffix that keeps two calls of one process apart.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Waits until MySQLBackup `name` has finished and returns its status; a failed backup dumps
/// the namespace and fails the test with the status.
pub fn backup_succeeded(n: &str, name: &str) -> serde_json::Value {
    let status = wait_for(
        n,
        &format!("backup {name} to finish"),
        Duration::from_secs(240),
        || {
            let b = get_json(n, &format!("mysqlbackup/{name}")).ok_or("no backup yet")?;
            match b["status"]["phase"].as_str() {
                Some("Succeeded" | "Failed") => Ok(b["status"].clone()),
                _ => Err(b["status"].to_string()),
            }
        },
    );
    if status["phase"] != "Succeeded" {
        dump(n);
        panic!("backup {name} failed: {status}");
    }
    status
}

/// Prints what explains a failure in `namespace`: its objects, events and every container's log.
pub fn dump(namespace: &str) {
    eprintln!("===== dump of namespace {namespace} =====");
    for args in [
        vec![
            "get",
            "-n",
            namespace,
            "mysqlclusters,mysqlbackups,statefulsets,jobs,pods,pvc,services,endpointslices,pdb",
            "-o",
            "wide",
        ],
        vec![
            "get",
            "-n",
            namespace,
            "mysqlclusters,mysqlbackups",
            "-o",
            "yaml",
        ],
        vec!["get", "-n", namespace, "events", "--sort-by=.lastTimestamp"],
    ] {
        match try_kubectl(&args) {
            Ok(out) => eprintln!("$ kubectl {}\n{out}", args.join(" ")),
            Err(e) => eprintln!("{e}"),
        }
    }
    let pods = try_kubectl(&["get", "pods", "-n", namespace, "-o", "name"]).unwrap_or_default();
    for pod in pods.lines() {
        let logs = try_kubectl(&[
            "logs",
            "-n",
            namespace,
            pod,
            "--all-containers",
            "--prefix",
            "--tail=60",
        ])
        .unwrap_or_else(|e| e);
        eprintln!("----- logs of {pod} -----\n{logs}");
    }
}

/// The operator, installed once per test binary from the chart with the images built here
/// (`tests/node/install-operator.sh`); waits until it is ready.
pub fn operator() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let script = repo_root().join("tests/node/install-operator.sh");
        let out = run({
            let mut c = Command::new("bash");
            c.arg(&script).arg(binaries_dir()).stdin(Stdio::null());
            c
        });
        assert!(
            out.status.success(),
            "installing the operator failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// A namespace of its own for a test, deleted (with everything in it) when dropped.
pub struct Namespace(pub String);

impl Namespace {
    pub fn create(prefix: &str) -> Namespace {
        let name = format!(
            "{prefix}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                % 1_000_000
        );
        kubectl_ok(&["create", "namespace", &name]);
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = try_kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// Longest a statement of [`sql`] may take.
pub const SQL_TIMEOUT: Duration = Duration::from_secs(60);

/// A SQL statement run with the `mariadb` client inside `pod`'s `mysqld` container, against
/// `host` (a Service name) as root; the output lines.
pub fn sql(
    namespace: &str,
    pod: &str,
    password: &str,
    host: &str,
    statement: &str,
) -> Result<String, String> {
    // The password travels in the exec request's environment of the client; a failure names
    // the statement and the error, never the command line that carries it. A statement that
    // hangs (a commit waiting for an acknowledgement that never comes) fails after a minute
    // instead of holding the test run.
    let out = run(kubectl(&[
        "exec",
        "-n",
        namespace,
        pod,
        "-c",
        "mysqld",
        "--",
        "timeout",
        &SQL_TIMEOUT.as_secs().to_string(),
        "env",
        &format!("MYSQL_PWD={password}"),
        "mariadb",
        "-h",
        host,
        "-u",
        "root",
        "-N",
        "-B",
        "-e",
        statement,
    ]));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else if out.status.code() == Some(124) {
        Err(format!(
            "{statement} (through {host} from {pod}): no answer within {SQL_TIMEOUT:?}"
        ))
    } else {
        Err(format!(
            "{statement} (through {host} from {pod}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The value of `key` in Secret `name`, decoded.
pub fn secret_value(namespace: &str, name: &str, key: &str) -> String {
    let b64 = kubectl_ok(&[
        "get",
        "secret",
        "-n",
        namespace,
        name,
        "-o",
        &format!("jsonpath={{.data.{key}}}"),
    ]);

    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .unwrap_or_else(|e| panic!("secret {name} key {key} is not base64: {e}"));
    String::from_utf8(bytes).expect("utf-8 secret")
}

/// The directory on the node's disk that holds a bound claim's volume (local-path), readable
/// from the host as from the node.
pub fn claim_dir(namespace: &str, claim: &str) -> PathBuf {
    let pvc = get_json(namespace, &format!("pvc/{claim}")).expect("claim");
    let pv_name = pvc["spec"]["volumeName"].as_str().expect("bound claim");
    let pv = get_json("default", &format!("pv/{pv_name}")).expect("volume");
    let path = pv["spec"]["hostPath"]["path"]
        .as_str()
        .or_else(|| pv["spec"]["local"]["path"].as_str())
        .unwrap_or_else(|| panic!("no host path in {}", pv["spec"]));
    PathBuf::from(path)
}
