//! The controllers against a real control plane (etcd, kube-apiserver, kube-controller-manager
//! from bulwark-testenv; no kubelet, so tests play the kubelet's part where needed: binding
//! pods to nodes, marking them ready, ending Job pods with a termination message).
//! One operator runs for the whole test binary; each test works in its own namespace.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bulwark_api::{BackupPhase, MySQLBackup, MySQLCluster};
use bulwark_operator::context::{Config, Context};
use bulwark_operator::metrics::Metrics;
use bulwark_testenv::TestNamespace;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const BACKUP_IMAGE: &str = "registry.test/mysql-backup:test";
const EXPORTER_IMAGE: &str = "registry.test/mysqld-exporter:test";
const TEST_MANAGER: &str = "bulwark-operator-tests";

/// Starts the operator once per test binary, on its own runtime so that it outlives each test's.
fn operator() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("operator runtime");
            rt.block_on(async move {
                let client = bulwark_testenv::client().await.expect("control plane");
                let config = Config {
                    backup_image: BACKUP_IMAGE.to_owned(),
                    exporter_image: EXPORTER_IMAGE.to_owned(),
                };
                let ctx = Context::new(client, config, Arc::new(Metrics::default()));
                tx.send(()).expect("test waits");
                bulwark_operator::run::controllers(ctx, std::future::pending()).await;
            });
        });
        rx.recv().expect("operator started");
    });
}

async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let _ = tracing_subscriber_init();
    tokio::task::spawn_blocking(operator).await.expect("operator thread");
    let client = bulwark_testenv::client().await.expect("client");
    let ns = TestNamespace::create(&client, prefix).await.expect("namespace");
    (client, ns)
}

fn tracing_subscriber_init() -> Option<()> {
    if std::env::var_os("BULWARK_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
    }
    Some(())
}

/// Polls `probe` until it yields a value, failing with `what` and the last observation after
/// `timeout`.
async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) if start.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

const WAIT: Duration = Duration::from_secs(30);

async fn apply_yaml<K>(api: &Api<K>, yaml: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    let obj: K = serde_yaml::from_str(yaml).expect("fixture parses");
    api.patch(&obj.name_any(), &PatchParams::apply(TEST_MANAGER).force(), &Patch::Apply(&obj))
        .await
        .unwrap_or_else(|e| panic!("apply {}: {e}", obj.name_any()))
}

fn condition(c: &MySQLCluster, type_: &str) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone(), x.message.clone()))
}

async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut out: Vec<(String, String)> = Vec::new();
    for e in api.list(&ListParams::default()).await.expect("events").items {
        if e.involved_object.name.as_deref() == Some(name) {
            out.push((e.reason.unwrap_or_default(), e.message.unwrap_or_default()));
        }
    }
    // events.k8s.io events appear through the core API too, with `note` as message.
    out
}

/// Binds a pod to a node and marks it running and ready, as a scheduler and kubelet would.
async fn make_ready(client: &Client, ns: &str, pod: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}
    });
    let p = pods.get(pod).await.expect("pod");
    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
        let body = serde_json::to_vec(&binding).expect("json");
        pods.create_subresource::<serde_json::Value>("binding", pod, &PostParams::default(), body)
            .await
            .expect("bind pod");
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    pods.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]
        }})),
    )
    .await
    .expect("pod status");
}

/// Ends a Job's pod as the kubelet would, with `message` as the container's termination message.
async fn end_job_pod(client: &Client, ns: &str, job: &str, container: &str, succeeded: bool, message: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = wait_for(&format!("pod of job {job}"), WAIT, || {
        let pods = pods.clone();
        async move {
            let l = pods
                .list(&ListParams::default().labels(&format!("job-name={job}")))
                .await
                .map_err(|e| e.to_string())?;
            l.items.into_iter().next().ok_or_else(|| "no pod yet".to_owned())
        }
    })
    .await;
    let (phase, code) = if succeeded { ("Succeeded", 0) } else { ("Failed", 1) };
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": phase,
            "containerStatuses": [{
                "name": container, "image": BACKUP_IMAGE, "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "reason": if succeeded {"Completed"} else {"Error"}, "message": message}}
            }]
        }})),
    )
    .await
    .expect("end job pod");
}

fn result_json(id: &str) -> String {
    json!({
        "id": id, "method": "physical", "location": "/backup-storage",
        "startedAt": "2026-11-22T03:00:00Z", "finishedAt": "2026-11-22T03:04:10Z",
        "plaintextBytes": 123456789, "storedBytes": 23456789,
        "binlogFile": "mysql-bin.000007", "binlogPosition": 4242, "gtidSet": "0-100-77",
        "manifestSha256": "ab".repeat(32)
    })
    .to_string()
}

const CLUSTER: &str = r#"
apiVersion: mysql.bulwark.dev/v1alpha1
kind: MySQLCluster
metadata: {name: ledger}
spec:
  engine: mariadb
  version: "11.4"
  replicas: 3
  storage: {size: 2Gi, storageClassName: fast-local}
  mysqldConfig: {innodb_buffer_pool_size: 256M}
  metrics: {enabled: true}
  service:
    type: NodePort
    nodePorts: {write: 31406, read: 31407}
"#;

#[tokio::test]
async fn a_cluster_gets_its_objects_and_updates_patch_them_in_place() {
    let (client, ns) = setup("cluster").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let created = apply_yaml(&clusters, CLUSTER).await;
    let uid = created.uid().expect("uid");

    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    let set = wait_for("statefulset", WAIT, || {
        let sets = sets.clone();
        async move { sets.get("ledger").await.map_err(|e| e.to_string()) }
    })
    .await;
    let owner = &set.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("MySQLCluster", uid.as_str(), Some(true)));
    assert_eq!(set.labels().get("app.kubernetes.io/instance").map(String::as_str), Some("ledger"));
    assert_eq!(set.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("bulwark-operator"));
    let spec = set.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.service_name.as_deref(), Some("ledger-headless"));
    let pvc = &spec.volume_claim_templates.as_ref().unwrap()[0];
    let pvc_spec = pvc.spec.as_ref().unwrap();
    assert_eq!(pvc_spec.storage_class_name.as_deref(), Some("fast-local"));
    assert_eq!(pvc_spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0, "2Gi");
    let pod = spec.template.spec.as_ref().unwrap();
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["mysqld", "agent", "exporter"]);
    let mysqld = &pod.containers[0];
    assert_eq!(mysqld.image.as_deref(), Some("docker.io/library/mariadb:11.4"));
    assert_eq!(pod.containers[1].image.as_deref(), Some(BACKUP_IMAGE));
    assert_eq!(pod.containers[2].image.as_deref(), Some(EXPORTER_IMAGE));
    let readiness = mysqld.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap();
    assert_eq!(readiness.path.as_deref(), Some("/readyz"));
    assert!(mysqld.liveness_probe.is_some() && mysqld.startup_probe.is_some());
    let root_env = &mysqld.env.as_ref().unwrap()[0];
    assert_eq!(root_env.name, "MARIADB_ROOT_PASSWORD");
    let root_ref = root_env.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
    assert_eq!((root_ref.name.as_str(), root_ref.key.as_str()), ("ledger-credentials", "root"));
    let init = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(init.args.as_ref().unwrap()[..2], ["instance".to_owned(), "init".to_owned()]);
    let agent_args = pod.containers[1].args.clone().unwrap().join(" ");
    assert!(agent_args.contains("--primary-host ledger-primary"), "{agent_args}");
    let config_volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "config").unwrap();
    let first_cm = config_volume.config_map.as_ref().unwrap().name.clone();
    assert!(first_cm.starts_with("ledger-config-"), "{first_cm}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    let cm = cms.get(&first_cm).await.expect("config map");
    assert_eq!(cm.immutable, Some(true));
    assert!(cm.data.as_ref().unwrap()["my.cnf"].contains("innodb_buffer_pool_size = 256M"));

    let services: Api<Service> = Api::namespaced(client.clone(), n);
    let headless = services.get("ledger-headless").await.expect("headless").spec.unwrap();
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
    assert_eq!(headless.publish_not_ready_addresses, Some(true));
    for (svc, role, port) in [("ledger-primary", "primary", 31406), ("ledger-replicas", "replica", 31407)] {
        let s = services.get(svc).await.expect("role service").spec.unwrap();
        assert_eq!(s.type_.as_deref(), Some("NodePort"));
        assert_eq!(s.selector.as_ref().unwrap()["mysql.bulwark.dev/role"], role);
        assert_eq!(s.ports.as_ref().unwrap()[0].node_port, Some(port));
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), n);
    let pdb = pdbs.get("ledger").await.expect("pdb").spec.unwrap();
    assert_eq!(pdb.max_unavailable, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)));

    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    let creds = secrets.get("ledger-credentials").await.expect("credentials");
    let data = creds.data.clone().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["backup", "metrics", "replication", "root"]);
    assert!(data.values().all(|v| v.0.len() == 32));
    assert!(creds.owner_references().is_empty(), "credentials outlive the cluster, like its volumes");

    // The StatefulSet controller creates the pods; the operator labels their roles.
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let roles = wait_for("role labels", WAIT, || {
        let pods = pods.clone();
        async move {
            let l = pods.list(&ListParams::default().labels("app.kubernetes.io/instance=ledger")).await.map_err(|e| e.to_string())?;
            let roles: BTreeMap<String, String> = l
                .items
                .iter()
                .filter_map(|p| Some((p.name_any(), p.labels().get("mysql.bulwark.dev/role")?.clone())))
                .collect();
            if roles.len() == 3 { Ok(roles) } else { Err(format!("{roles:?}")) }
        }
    })
    .await;
    assert_eq!(roles["ledger-0"], "primary");
    assert_eq!((roles["ledger-1"].as_str(), roles["ledger-2"].as_str()), ("replica", "replica"));

    let status = wait_for("cluster status", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            match (condition(&c, "Ready"), condition(&c, "Degraded")) {
                (Some(r), Some(d)) => Ok((c.clone(), r, d)),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let (c, ready, degraded) = status;
    assert_eq!((ready.0.as_str(), ready.1.as_str()), ("False", "PrimaryNotReady"));
    assert_eq!(degraded.0, "False");
    let st = c.status.unwrap();
    assert_eq!(st.current_primary.as_deref(), Some("ledger-0"));
    assert_eq!(st.observed_generation, c.metadata.generation);

    // A reconcile that changes nothing must not touch the pod template (an operator restart or
    // upgrade behaves the same way: it re-applies identical objects).
    let generation = sets.get("ledger").await.unwrap().metadata.generation;
    clusters
        .patch("ledger", &PatchParams::apply(TEST_MANAGER), &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sets.get("ledger").await.unwrap().metadata.generation, generation);

    // Scaling and configuration changes patch the same objects.
    let changed = CLUSTER.replace("replicas: 3", "replicas: 2").replace("256M", "512M");
    apply_yaml(&clusters, &changed).await;
    let set2 = wait_for("patched statefulset", WAIT, || {
        let sets = sets.clone();
        let first_cm = first_cm.clone();
        async move {
            let s = sets.get("ledger").await.map_err(|e| e.to_string())?;
            let spec = s.spec.clone().unwrap();
            let cm = spec.template.spec.as_ref().unwrap().volumes.as_ref().unwrap().iter().find(|v| v.name == "config").unwrap().config_map.clone().unwrap().name;
            if spec.replicas == Some(2) && cm != first_cm { Ok(s) } else { Err(format!("replicas {:?}, config {cm}", spec.replicas)) }
        }
    })
    .await;
    assert_eq!(set2.uid(), set.uid(), "the StatefulSet is patched, not recreated");
    let creds2 = secrets.get("ledger-credentials").await.unwrap();
    assert_eq!(creds2.data, creds.data, "passwords are never regenerated");
    let new_cm = set2.spec.unwrap().template.spec.unwrap().volumes.unwrap().into_iter().find(|v| v.name == "config").unwrap().config_map.unwrap().name;
    assert!(cms.get(&new_cm).await.unwrap().data.unwrap()["my.cnf"].contains("innodb_buffer_pool_size = 512M"));
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn an_invalid_spec_is_explained_by_a_false_condition() {
    let (client, ns) = setup("invalid").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let bad = CLUSTER
        .replace("  metrics: {enabled: true}\n", "  credentials:\n    root: {name: vault, key: root-password}\n")
        .replace("nodePorts: {write: 31406, read: 31407}", "nodePorts: {write: 31416, read: 31417}");
    apply_yaml(&clusters, &bad).await;
    let (c, degraded) = wait_for("Degraded condition", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            condition(&c, "Degraded").map(|d| (c.clone(), d)).ok_or_else(|| "no condition".to_owned())
        }
    })
    .await;
    assert_eq!(
        degraded,
        ("True".to_owned(), "InvalidSpec".to_owned(), "secret vault named by credentials.root does not exist".to_owned())
    );
    assert_eq!(condition(&c, "Ready").unwrap().0, "False");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    assert!(sets.get_opt("ledger").await.unwrap().is_none(), "nothing is built from an invalid spec");
    let events = wait_for("InvalidSpec event", WAIT, || {
        let client = client.clone();
        let n = n.to_owned();
        async move {
            let ev = events_for(&client, &n, "ledger").await;
            if ev.iter().any(|(r, _)| r == "InvalidSpec") { Ok(ev) } else { Err(format!("{ev:?}")) }
        }
    })
    .await;
    assert!(events.iter().any(|(_, m)| m.contains("secret vault")), "{events:?}");
    ns.delete().await.expect("delete namespace");
}
