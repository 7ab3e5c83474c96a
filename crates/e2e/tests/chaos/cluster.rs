//! What the chaos cases share: a case's turn on the nodes with its three-member cluster on
//! three nodes and its writer, and its members' state as sampled on each pod.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_count, node_name};
use std::process::Child;

use bulwark_e2e::{
    apply, get_json, kubectl_ok, operator, secret_value, sql, wait_for, wait_ready,
    wait_takes_writes, writer, Namespace,
};

pub(crate) const CLUSTER: &str = "atoll";

/// The node `pod` runs on.
pub(crate) fn node_of(n: &str, pod: &str) -> String {
    get_json(n, &format!("pod/{pod}")).unwrap_or_default()["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn current_primary(n: &str) -> Option<String> {
    primary_state(n).0
}

/// The cluster's primary, and whether it counts as lost (`status.primaryLostSince`).
pub(crate) fn primary_state(n: &str) -> (Option<String>, bool) {
    let status = cluster_status(n).unwrap_or_default();
    (
        status["currentPrimary"].as_str().map(str::to_owned),
        status["primaryLostSince"].is_string(),
    )
}

/// `@@read_only` of `pod`'s server, asked on the pod itself; `None` when it does not answer (a
/// fenced primary ends client sessions, root's included).
pub(crate) fn read_only(n: &str, pod: &str, password: &str) -> Option<bool> {
    match sql(n, pod, password, "localhost", "SELECT @@read_only")
        .ok()?
        .trim()
    {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// Which members answer as writable (`@@read_only` 0), asked on each pod itself, but `off`: the
/// member whose node is down (its server is gone with it, and the API server would wait for the
/// node's kubelet until its connection times out).
pub(crate) fn writable_members(n: &str, password: &str, off: Option<&str>) -> Vec<String> {
    member_states(n, password, off)
        .into_iter()
        .filter(|(_, read_only)| *read_only == Some(false))
        .map(|(pod, _)| pod)
        .collect()
}

/// Each member's `@@read_only` as [`read_only`] reads it, but `off`'s.
pub(crate) fn member_states(
    n: &str,
    password: &str,
    off: Option<&str>,
) -> Vec<(String, Option<bool>)> {
    (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .filter(|pod| Some(pod.as_str()) != off)
        .map(|pod| {
            let state = read_only(n, &pod, password);
            (pod, state)
        })
        .collect()
}

/// Waits until both replicas of `primary` hold exactly its rows of the writer's table.
pub(crate) fn wait_replicas_hold_primary_rows(n: &str, password: &str, primary: &str) {
    let rows = |pod: &str| {
        sql(
            n,
            pod,
            password,
            "localhost",
            "SELECT COUNT(*), COALESCE(SUM(id), 0) FROM ledger.acks",
        )
    };
    let want = rows(primary).expect("the primary's rows");
    for replica in (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .filter(|p| p != primary)
    {
        wait_for(
            n,
            &format!("{replica} to hold the primary's rows"),
            Duration::from_secs(60),
            || match rows(&replica) {
                Ok(have) if have == want => Ok(()),
                other => Err(format!("{other:?}, the primary {}", want.trim())),
            },
        );
    }
}

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(f64::NAN, |d| d.as_secs_f64())
}

/// An RFC 3339 time as seconds since the Unix epoch (`date` reads it).
pub(crate) fn unix_seconds(rfc3339: &str) -> Option<f64> {
    let out = std::process::Command::new("date")
        .args(["-d", rfc3339, "+%s.%N"])
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// When `pod`'s agent last logged that it applied `action`, in seconds since the Unix epoch
/// (its log's own stamp: the samples above are a second or more apart).
pub(crate) fn agent_applied_at(n: &str, pod: &str, action: &str) -> Option<f64> {
    let log = bulwark_e2e::try_kubectl(&["logs", "-n", n, pod, "-c", "agent"]).ok()?;
    let wanted = format!("\"action\":\"{action}\"");
    let line = log.lines().rev().find(|l| l.contains(&wanted))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    unix_seconds(v["timestamp"].as_str()?)
}

/// The cluster's status, `None` when it could not be read (a sample to skip, not a verdict).
pub(crate) fn cluster_status(n: &str) -> Option<serde_json::Value> {
    get_json(n, &format!("mysqlcluster/{CLUSTER}")).map(|c| c["status"].clone())
}

/// The cluster on three nodes, one member each, with its primary off node 1 (which holds the
/// control plane and cannot be stopped): a switchover moves it when it started there.
pub(crate) fn three_members_on_three_nodes(n: &str, password: &str) -> String {
    let nodes: BTreeSet<String> = (0..3)
        .map(|i| node_of(n, &format!("{CLUSTER}-{i}")))
        .collect();
    if nodes.len() != 3 {
        bulwark_e2e::dump(n);
        panic!("the members share nodes: {nodes:?}");
    }
    let primary = current_primary(n).expect("a primary");
    if node_of(n, &primary) != node_name(1) {
        return primary;
    }
    let to = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| *p != primary)
        .expect("a replica");
    kubectl_ok(&[
        "annotate",
        "-n",
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        &format!("mysql.bulwark.dev/switchover={to}"),
    ]);
    wait_for(
        n,
        &format!("the switchover to {to}"),
        Duration::from_secs(90),
        || match current_primary(n) {
            Some(p) if p == to => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the switchover");
    wait_takes_writes(n, &to, password, &format!("{CLUSTER}-primary"));
    to
}

/// A case: its turn on the nodes (taken first, given back last), its cluster and the table its
/// writer fills. Fields drop in order: the namespace's pods are gone before the turn ends.
pub(crate) struct Case {
    ns: CaseNamespace,
    password: String,
    primary: String,
    service: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Case {
    /// [`three_member_cluster_with`] with nothing more, in the case's turn.
    pub(crate) fn start(prefix: &str) -> Case {
        Case::start_with(prefix, "", "")
    }

    /// [`three_member_cluster_with`], in the case's turn.
    pub(crate) fn start_with(prefix: &str, objects: &str, spec_extra: &str) -> Case {
        three_nodes();
        let turn = serial();
        let (ns, password, primary) = three_member_cluster_with(prefix, objects, spec_extra);
        let service = format!("{CLUSTER}-primary");
        writer::create_table(ns.name(), &primary, &password, &service);
        Case {
            ns,
            password,
            primary,
            service,
            _turn: turn,
        }
    }

    /// The namespace, the root password, the primary at the start and its Service.
    pub(crate) fn parts(&self) -> (&str, &str, &str, &str) {
        (self.ns.name(), &self.password, &self.primary, &self.service)
    }

    /// The writer, in a client pod on `node`, through the primary Service, given 5 s of writes
    /// before the fault.
    pub(crate) fn writer_on(&self, node: &str) -> Child {
        let child = writer::start_in_client_on(
            self.ns.name(),
            &self.password,
            &self.service,
            (300, 5),
            node,
        );
        std::thread::sleep(Duration::from_secs(5));
        child
    }
}

/// Which members are writable, sampled one after another: a sample can show the old primary
/// writable before its demotion and the new one after its promotion, but two members writable
/// in two samples running were writable at once (each answered between the other's two
/// answers, and a demoted primary is not made writable again within a sample), which fails
/// the case.
#[derive(Default)]
pub(crate) struct WritableSamples {
    before: Vec<String>,
}

impl WritableSamples {
    /// One sample (every member asked); `began` dates a failure.
    pub(crate) fn take(&mut self, n: &str, password: &str, began: Instant) -> Vec<String> {
        let writable = writable_members(n, password, None);
        let both: Vec<&String> = writable
            .iter()
            .filter(|p| self.before.contains(p))
            .collect();
        if both.len() > 1 {
            let at = began.elapsed().as_secs_f64();
            bulwark_e2e::dump(n);
            panic!(
                "two members writable in two samples running, at {at:.1}s: {both:?}; status: {}",
                cluster_status(n).unwrap_or_default()
            );
        }
        self.before = writable.clone();
        writable
    }
}

/// A namespace with the operator and a Ready 3-member cluster (`failoverAfterSeconds: 10`) on
/// three nodes (required anti-affinity: the default only prefers it), its primary off node 1,
/// with `objects` (YAML documents, each ending in `---`) applied before it and `spec_extra`
/// (`, field: value` in flow style) added to its spec; the root password and the primary.
fn three_member_cluster_with(
    prefix: &str,
    objects: &str,
    spec_extra: &str,
) -> (CaseNamespace, String, String) {
    operator();
    // Guarded from the start: a case that fails while its cluster starts is cleaned up too.
    let ns = CaseNamespace(Namespace::create(prefix));
    let n = ns.name();
    apply(
        n,
        &format!(
            "{objects}apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: {CLUSTER}}}\n\
             spec: {{engine: mariadb, version: \"10.11\", replicas: 3, storage: {{size: 1Gi}}, \
             replication: {{failoverAfterSeconds: 10}}, affinity: {{podAntiAffinity: \
             {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: kubernetes.io/hostname, \
             labelSelector: {{matchLabels: {{app.kubernetes.io/instance: {CLUSTER}, \
             app.kubernetes.io/component: database}}}}}}]}}}}{spec_extra}}}\n"
        ),
    );
    wait_ready(n, CLUSTER, 3, "the cluster to become Ready");
    let password = secret_value(n, &format!("{CLUSTER}-credentials"), "root");
    let primary = three_members_on_three_nodes(n, &password);
    (ns, password, primary)
}

/// A case's namespace, deleted when dropped, its pods waited for (before the case's turn
/// ends): the next case starts on nodes that run no pod of this one, which would otherwise
/// take the nodes' cores while it starts, or go down with a node it stops. The namespace itself
/// is not waited for: Kubernetes' namespace controller comes back for the claims only after
/// the pods' grace period, a minute or more after they went.
pub(crate) struct CaseNamespace(Namespace);

impl CaseNamespace {
    pub(crate) fn name(&self) -> &str {
        &self.0 .0
    }
}

impl Drop for CaseNamespace {
    fn drop(&mut self) {
        let name = self.name().to_owned();
        let began = Instant::now();
        let gone = bulwark_e2e::try_kubectl(&["delete", "namespace", &name, "--wait=false"])
            .and_then(|_| {
                bulwark_e2e::try_kubectl(&[
                    "wait",
                    "-n",
                    &name,
                    "--for=delete",
                    "pod",
                    "--all",
                    "--timeout=180s",
                ])
            });
        match gone {
            Ok(_) => eprintln!(
                "{name}'s pods gone in {:.1}s",
                began.elapsed().as_secs_f64()
            ),
            Err(e) => eprintln!(
                "deleting {name}'s pods after the case did not end ({e}): the next case may \
                 meet them still terminating"
            ),
        }
    }
}

/// The member on `node`.
pub(crate) fn member_on(n: &str, node: &str) -> String {
    (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| node_of(n, p) == node)
        .unwrap_or_else(|| panic!("no member on {node}"))
}
/// The address of `pod` in `n`.
pub(crate) fn pod_ip(n: &str, pod: &str) -> String {
    get_json(n, &format!("pod/{pod}")).unwrap_or_default()["status"]["podIP"]
        .as_str()
        .unwrap_or_else(|| panic!("{pod} has no address"))
        .to_owned()
}
/// Fails unless the test cluster has exactly three nodes (one member on each).
fn three_nodes() {
    assert_eq!(
        node_count(),
        3,
        "the chaos cases need three nodes: BULWARK_NODE_COUNT=3 tests/node/node.sh up \
         (scripts/test.sh does)"
    );
}

/// Samples the cluster until `seconds` after `began`: never two writable members, `primary`
/// stays the primary and stays writable (a promotion or a fence fails the case, saying that
/// neither may happen while `why`); each status read goes to `seen` with its time.
pub(crate) fn keeps_the_primary_for(
    n: &str,
    password: &str,
    primary: &str,
    (began, seconds): (Instant, u64),
    why: &str,
    mut seen: impl FnMut(&serde_json::Value, f64),
) {
    while began.elapsed() < Duration::from_secs(seconds) {
        let states = member_states(n, password, None);
        let writable: Vec<_> = states.iter().filter(|(_, ro)| *ro == Some(false)).collect();
        assert!(writable.len() <= 1, "two writable members: {writable:?}");
        if states.contains(&(primary.to_owned(), Some(true))) {
            bulwark_e2e::dump(n);
            panic!(
                "{primary} turned read-only {:.1}s into the fault while {why}",
                began.elapsed().as_secs_f64()
            );
        }
        // A status that could not be read is a sample to skip, not a verdict.
        if let Some(status) = cluster_status(n) {
            assert_eq!(
                status["currentPrimary"].as_str(),
                Some(primary),
                "a replica was promoted while {why}: {status}"
            );
            seen(&status, began.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The cases share the nodes: one runs at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
