//! The controllers against a real control plane (etcd, kube-apiserver, kube-controller-manager
//! from bulwark-testenv; no kubelet, so tests play the kubelet's part where needed: binding
//! pods to nodes, marking them ready, ending Job pods with a termination message).
//! One operator runs for the whole test binary; each test works in its own namespace.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bulwark_api::{BackupPhase, MySQLBackup, MySQLCluster};
use bulwark_contract::command;
use bulwark_contract::result::{error_line, BackupResult};
use bulwark_operator::context::{Config, Context};
use bulwark_operator::images::BackupImages;
use bulwark_operator::metrics::Metrics;
use bulwark_testenv::TestNamespace;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Event, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const BACKUP_IMAGE: &str = "registry.test/mysql-backup:test";
const EXPORTER_IMAGE: &str = "registry.test/mysqld-exporter:test";
const TEST_MANAGER: &str = "bulwark-operator-tests";
const ADMISSION_POLICY: &str = "mysql-operator-limits";

/// The operator's identity in these tests: a service account that holds exactly the rules the
/// chart grants (`rbac::cluster_role_rules()`, which `tests/chart.rs` checks against the chart),
/// cluster-wide, or with a Role in `namespace` only, under the chart's admission policy
/// (`admission::policy`). A call the rules do not allow fails the
/// reconcile, and with it the test that needs it.
async fn bound_client(
    admin: &Client,
    kubeconfig: &kube::config::Kubeconfig,
    namespace: Option<&str>,
) -> Client {
    let account = "mysql-operator";
    let account_ns = "bulwark-system";
    let rules = serde_json::to_value(bulwark_operator::rbac::cluster_role_rules()).unwrap();
    let subject = json!([{"kind": "ServiceAccount", "name": account, "namespace": account_ns}]);
    let (role, binding, kind) = match namespace {
        None => (
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": account}, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": account},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
                   "subjects": subject}),
            "cluster",
        ),
        Some(ns) => (
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": account, "namespace": ns}, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": account, "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                   "subjects": subject}),
            "namespace",
        ),
    };
    let pp = PatchParams::apply(TEST_MANAGER).force();
    let applied = match namespace {
        None => {
            let roles: Api<ClusterRole> = Api::all(admin.clone());
            let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
            let r = roles
                .patch(account, &pp, &Patch::Apply(&role))
                .await
                .map(drop);
            match r {
                Ok(()) => bindings
                    .patch(account, &pp, &Patch::Apply(&binding))
                    .await
                    .map(drop),
                e => e,
            }
        }
        Some(ns) => {
            let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
            let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
            let r = roles
                .patch(account, &pp, &Patch::Apply(&role))
                .await
                .map(drop);
            match r {
                Ok(()) => bindings
                    .patch(account, &pp, &Patch::Apply(&binding))
                    .await
                    .map(drop),
                e => e,
            }
        }
    };
    applied.unwrap_or_else(|e| panic!("{kind} rbac for the operator: {e}"));
    let user = bulwark_operator::admission::service_account_user(account_ns, account);
    let (policy, policy_binding) = bulwark_operator::admission::policy(ADMISSION_POLICY, &user);
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    policies
        .patch(ADMISSION_POLICY, &pp, &Patch::Apply(&policy))
        .await
        .expect("the operator's admission policy");
    let policy_bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(admin.clone());
    policy_bindings
        .patch(ADMISSION_POLICY, &pp, &Patch::Apply(&policy_binding))
        .await
        .expect("the operator's admission policy binding");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &Default::default())
        .await
        .expect("kubeconfig");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{account_ns}:{account}"));
    Client::try_from(config).expect("operator client")
}

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
                let shared = bulwark_testenv::shared().await.expect("control plane");
                let admin = shared.client().await.expect("admin client");
                let client = bound_client(&admin, shared.kubeconfig(), None).await;
                let config = Config {
                    // The fixtures run MariaDB 11.4; 11.8 is the series no image serves.
                    backup_images: BackupImages::parse(
                        BACKUP_IMAGE,
                        "mariadb-10.11,mariadb-11.4,mysql-8.4",
                        "",
                    )
                    .unwrap(),
                    exporter_image: EXPORTER_IMAGE.to_owned(),
                    namespaces: Vec::new(),
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
    tokio::task::spawn_blocking(operator)
        .await
        .expect("operator thread");
    let client = bulwark_testenv::client().await.expect("client");
    let ns = TestNamespace::create(&client, prefix)
        .await
        .expect("namespace");
    (client, ns)
}

fn tracing_subscriber_init() -> Option<()> {
    if std::env::var_os("BULWARK_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_test_writer()
            .try_init();
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
    api.patch(
        &obj.name_any(),
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(&obj),
    )
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
    for e in api
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        if e.involved_object.name.as_deref() == Some(name) {
            out.push((e.reason.unwrap_or_default(), e.message.unwrap_or_default()));
        }
    }
    // events.k8s.io events appear through the core API too, with `note` as message.
    out
}

/// Waits for an event with `reason` about `object`; returns all events about it.
async fn wait_event(
    client: &Client,
    ns: &str,
    object: &str,
    reason: &str,
) -> Vec<(String, String)> {
    wait_for(
        &format!("{reason} event about {object}"),
        WAIT,
        || async move {
            let ev = events_for(client, ns, object).await;
            if ev.iter().any(|(r, _)| r == reason) {
                Ok(ev)
            } else {
                Err(format!("{ev:?}"))
            }
        },
    )
    .await
}

/// Waits until an object exists; returns it.
async fn wait_get<K>(api: &Api<K>, name: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    wait_for(name, WAIT, || async move {
        api.get(name).await.map_err(|e| e.to_string())
    })
    .await
}

/// Waits until an object is gone (its finalizers released).
async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    wait_for(&format!("{name} gone"), WAIT, || async move {
        match api.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(o) => Err(format!("finalizers {:?}", o.finalizers())),
        }
    })
    .await
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
async fn end_job_pod(
    client: &Client,
    ns: &str,
    job: &str,
    container: &str,
    succeeded: bool,
    message: &str,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = wait_for(&format!("pod of job {job}"), WAIT, || {
        let pods = pods.clone();
        async move {
            let l = pods
                .list(&ListParams::default().labels(&format!("job-name={job}")))
                .await
                .map_err(|e| e.to_string())?;
            l.items
                .into_iter()
                .next()
                .ok_or_else(|| "no pod yet".to_owned())
        }
    })
    .await;
    let (phase, code) = if succeeded {
        ("Succeeded", 0)
    } else {
        ("Failed", 1)
    };
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

/// The result line `mysql-backup` writes for a committed backup, built with the producer's type.
fn result_json(id: &str) -> String {
    BackupResult {
        id: id.to_owned(),
        method: "physical".into(),
        location: Some("/backup-storage".into()),
        started_at: "2026-11-22T03:00:00Z".parse().unwrap(),
        finished_at: "2026-11-22T03:04:10Z".parse().unwrap(),
        duration_seconds: 250.0,
        engine: bulwark_contract::Engine::MariaDb,
        server_version: "11.4.4-MariaDB".into(),
        source_host: Some("vault-1".into()),
        tool: "mariadb-backup".into(),
        tool_version: Some("11.4.4".into()),
        plaintext_bytes: 123456789,
        plaintext_sha256: "cd".repeat(32),
        stored_bytes: 23456789,
        chunks: 15,
        segments: 1,
        compression_level: 1,
        encrypted: true,
        key_id: Some("k1".into()),
        binlog_file: Some("mysql-bin.000007".into()),
        binlog_position: Some(4242),
        gtid_set: Some("0-100-77".into()),
        manifest_sha256: "ab".repeat(32),
        omitted: vec![],
    }
    .to_line()
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
    let set = wait_get(&sets, "ledger").await;
    let owner = &set.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("MySQLCluster", uid.as_str(), Some(true))
    );
    assert_eq!(
        set.labels()
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some("ledger")
    );
    assert_eq!(
        set.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("bulwark-operator")
    );
    let spec = set.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.service_name.as_deref(), Some("ledger-headless"));
    let pvc = &spec.volume_claim_templates.as_ref().unwrap()[0];
    let pvc_spec = pvc.spec.as_ref().unwrap();
    assert_eq!(pvc_spec.storage_class_name.as_deref(), Some("fast-local"));
    assert_eq!(
        pvc_spec
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "2Gi"
    );
    let pod = spec.template.spec.as_ref().unwrap();
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["mysqld", "agent", "exporter"]);
    // No container holds a secret in its environment: the exporter reads its password from
    // the option file init writes into a memory volume.
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        assert!(
            c.env.iter().flatten().all(|e| e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .is_none()),
            "{} takes a secret from its environment",
            c.name
        );
    }
    let exporter = &pod.containers[2];
    assert!(exporter
        .args
        .iter()
        .flatten()
        .any(|a| a == "--config.my-cnf=/run/bulwark-exporter/my.cnf"));
    let mysqld = &pod.containers[0];
    assert_eq!(
        mysqld.image.as_deref(),
        Some("docker.io/library/mariadb:11.4")
    );
    assert_eq!(pod.containers[1].image.as_deref(), Some(BACKUP_IMAGE));
    assert_eq!(pod.containers[2].image.as_deref(), Some(EXPORTER_IMAGE));
    let readiness = mysqld
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(readiness.path.as_deref(), Some("/readyz"));
    assert!(mysqld.liveness_probe.is_some());
    let data_mount = mysqld
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == "data")
        .unwrap();
    assert_eq!(
        (
            data_mount.mount_path.as_str(),
            data_mount.sub_path.as_deref()
        ),
        ("/var/lib/mysql", Some("mysql")),
        "the datadir is a subdirectory of the volume, never its root"
    );
    // The root password reaches the server as a file of the credentials volume, never as
    // an environment value.
    let root_env = &mysqld.env.as_ref().unwrap()[0];
    assert_eq!(
        (root_env.name.as_str(), root_env.value.as_deref()),
        (
            "MARIADB_ROOT_PASSWORD_FILE",
            Some("/etc/bulwark/credentials/root")
        )
    );
    assert!(mysqld.env.iter().flatten().all(|e| e.value_from.is_none()));
    let credentials = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "credentials")
        .unwrap();
    let root_item = credentials
        .projected
        .as_ref()
        .unwrap()
        .sources
        .iter()
        .flatten()
        .filter_map(|s| s.secret.as_ref())
        .find(|s| s.name == "ledger-credentials")
        .and_then(|s| s.items.as_ref())
        .and_then(|items| items.iter().find(|i| i.path == "root"))
        .map(|i| i.key.clone());
    assert_eq!(root_item.as_deref(), Some("root"));
    let init = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(
        argv_of(init),
        command::Init::for_pod("ledger", bulwark_contract::Engine::MariaDb, true).argv()
    );
    assert_eq!(
        argv_of(&pod.containers[1]),
        command::Agent::for_pod("ledger-primary", 1, None).argv()
    );
    let config_volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "config")
        .unwrap();
    let first_cm = config_volume.config_map.as_ref().unwrap().name.clone();
    assert!(first_cm.starts_with("ledger-config-"), "{first_cm}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    let cm = cms.get(&first_cm).await.expect("config map");
    assert_eq!(cm.immutable, Some(true));
    assert!(cm.data.as_ref().unwrap()["my.cnf"].contains("innodb_buffer_pool_size = 256M"));

    let services: Api<Service> = Api::namespaced(client.clone(), n);
    let headless = services
        .get("ledger-headless")
        .await
        .expect("headless")
        .spec
        .unwrap();
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
    assert_eq!(headless.publish_not_ready_addresses, Some(true));
    for (svc, role, port) in [
        ("ledger-primary", "primary", 31406),
        ("ledger-replicas", "replica", 31407),
    ] {
        let s = services.get(svc).await.expect("role service").spec.unwrap();
        assert_eq!(s.type_.as_deref(), Some("NodePort"));
        assert_eq!(s.selector.as_ref().unwrap()["mysql.bulwark.dev/role"], role);
        assert_eq!(s.ports.as_ref().unwrap()[0].node_port, Some(port));
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), n);
    let pdb = pdbs.get("ledger").await.expect("pdb").spec.unwrap();
    assert_eq!(
        pdb.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    let creds = secrets
        .get("ledger-credentials")
        .await
        .expect("credentials");
    let data = creds.data.clone().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["backup", "metrics", "orders", "replication", "root"]
    );
    assert!(data.values().all(|v| v.0.len() == 32));
    assert!(
        creds.owner_references().is_empty(),
        "credentials outlive the cluster, like its volumes"
    );

    // The StatefulSet controller creates the pods; the operator labels their roles.
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let roles = wait_for("role labels", WAIT, || {
        let pods = pods.clone();
        async move {
            let l = pods
                .list(&ListParams::default().labels("app.kubernetes.io/instance=ledger"))
                .await
                .map_err(|e| e.to_string())?;
            let roles: BTreeMap<String, String> = l
                .items
                .iter()
                .filter_map(|p| {
                    Some((
                        p.name_any(),
                        p.labels().get("mysql.bulwark.dev/role")?.clone(),
                    ))
                })
                .collect();
            if roles.len() == 3 {
                Ok(roles)
            } else {
                Err(format!("{roles:?}"))
            }
        }
    })
    .await;
    assert_eq!(roles["ledger-0"], "primary");
    assert_eq!(
        (roles["ledger-1"].as_str(), roles["ledger-2"].as_str()),
        ("replica", "replica")
    );

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
    assert_eq!(
        (ready.0.as_str(), ready.1.as_str()),
        ("False", "PrimaryNotReady")
    );
    assert_eq!(degraded.0, "False");
    let st = c.status.unwrap();
    assert_eq!(st.current_primary.as_deref(), Some("ledger-0"));
    assert_eq!(st.observed_generation, c.metadata.generation);

    // A spec change that concerns no pod (a backup storage) is reconciled without touching the
    // pod template; an operator restart or upgrade re-applies identical objects the same way.
    let generation = sets.get("ledger").await.unwrap().metadata.generation;
    let with_storage = format!(
        "{CLUSTER}  backup:\n    storages: [{{name: offsite, s3: {{bucket: ledger-backups}}}}]\n"
    );
    let bumped = apply_yaml(&clusters, &with_storage)
        .await
        .metadata
        .generation;
    wait_for("reconcile of the new generation", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            let seen = c.status.and_then(|s| s.observed_generation);
            if seen == bumped {
                Ok(())
            } else {
                Err(format!("observed {seen:?}, want {bumped:?}"))
            }
        }
    })
    .await;
    assert_eq!(
        sets.get("ledger").await.unwrap().metadata.generation,
        generation
    );

    // Scaling and configuration changes patch the same objects.
    let changed = CLUSTER
        .replace("replicas: 3", "replicas: 2")
        .replace("256M", "512M");
    apply_yaml(&clusters, &changed).await;
    let set2 = wait_for("patched statefulset", WAIT, || {
        let sets = sets.clone();
        let first_cm = first_cm.clone();
        async move {
            let s = sets.get("ledger").await.map_err(|e| e.to_string())?;
            let spec = s.spec.clone().unwrap();
            let cm = spec
                .template
                .spec
                .as_ref()
                .unwrap()
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .find(|v| v.name == "config")
                .unwrap()
                .config_map
                .clone()
                .unwrap()
                .name;
            if spec.replicas == Some(2) && cm != first_cm {
                Ok(s)
            } else {
                Err(format!("replicas {:?}, config {cm}", spec.replicas))
            }
        }
    })
    .await;
    assert_eq!(
        set2.uid(),
        set.uid(),
        "the StatefulSet is patched, not recreated"
    );
    let creds2 = secrets.get("ledger-credentials").await.unwrap();
    assert_eq!(creds2.data, creds.data, "passwords are never regenerated");
    let new_cm = set2
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "config")
        .unwrap()
        .config_map
        .unwrap()
        .name;
    assert!(cms.get(&new_cm).await.unwrap().data.unwrap()["my.cnf"]
        .contains("innodb_buffer_pool_size = 512M"));
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn an_invalid_spec_is_explained_by_a_false_condition() {
    let (client, ns) = setup("invalid").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let bad = CLUSTER
        .replace(
            "  metrics: {enabled: true}\n",
            "  credentials:\n    root: {name: vault, key: root-password}\n",
        )
        .replace(
            "nodePorts: {write: 31406, read: 31407}",
            "nodePorts: {write: 31416, read: 31417}",
        );
    apply_yaml(&clusters, &bad).await;
    let (c, degraded) = wait_for("Degraded condition", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            condition(&c, "Degraded")
                .map(|d| (c.clone(), d))
                .ok_or_else(|| "no condition".to_owned())
        }
    })
    .await;
    assert_eq!(
        degraded,
        (
            "True".to_owned(),
            "InvalidSpec".to_owned(),
            "secret vault named by credentials.root does not exist".to_owned()
        )
    );
    assert_eq!(condition(&c, "Ready").unwrap().0, "False");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    assert!(
        sets.get_opt("ledger").await.unwrap().is_none(),
        "nothing is built from an invalid spec"
    );
    let events = wait_event(&client, n, "ledger", "InvalidSpec").await;
    assert!(
        events.iter().any(|(_, m)| m.contains("secret vault")),
        "{events:?}"
    );
    ns.delete().await.expect("delete namespace");
}

/// Server-side apply removes every field a manager leaves out: an invalid edit of a cluster
/// that has switched over must keep what its status records (the epoch above all: orders at an
/// older epoch than the members accepted are refused, so a switchover after the edit would
/// abort).
#[tokio::test]
async fn an_invalid_edit_of_a_running_cluster_keeps_every_status_field() {
    let (client, ns) = setup("carried").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let valid = "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\n\
                 metadata: {name: ledger}\nspec: {engine: mariadb, version: \"11.4\", \
                 replicas: 2, storage: {size: 1Gi}}\n";
    apply_yaml(&clusters, valid).await;
    wait_for("the first status", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            condition(&c, "Degraded")
                .filter(|d| d.0 == "False")
                .ok_or_else(|| "no Degraded=False yet".to_owned())
        }
    })
    .await;
    // What a pass after a failover and a switchover recorded, written as the operator's
    // cluster controller writes it.
    let recorded = json!({
        "currentPrimary": "ledger-1",
        "primarySince": "2026-11-01T00:00:00Z",
        "epoch": 3,
        "lastFailover": {"from": "ledger-0", "to": "ledger-1", "time": "2026-11-02T00:00:00Z", "reason": "ledger-0 was lost"},
        "lastSwitchover": {"request": "ledger-1@2", "from": "ledger-0", "to": "ledger-1",
            "started": "2026-11-03T00:00:00Z", "finished": "2026-11-03T00:00:02Z",
            "result": "Completed", "message": "writes moved from ledger-0 to ledger-1 in 1.9s"},
    });
    let owned = |c: &MySQLCluster| {
        let status = serde_json::to_value(c.status.clone().unwrap_or_default()).unwrap();
        let mut kept = serde_json::Map::new();
        for key in recorded.as_object().unwrap().keys() {
            if let Some(v) = status.get(key) {
                kept.insert(key.clone(), v.clone());
            }
        }
        serde_json::Value::Object(kept)
    };
    wait_for("the recorded status", WAIT, || {
        let (clusters, recorded) = (clusters.clone(), recorded.clone());
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            let mut status = serde_json::to_value(c.status.clone().unwrap_or_default()).unwrap();
            status
                .as_object_mut()
                .unwrap()
                .extend(recorded.as_object().unwrap().clone());
            // Conditions stay the operator's own (the scheduler's are not this writer's).
            status.as_object_mut().unwrap().remove("schedules");
            status
                .as_object_mut()
                .unwrap()
                .remove("lastSuccessfulBackup");
            bulwark_operator::apply::apply_status(
                &clusters,
                &c,
                status,
                bulwark_operator::apply::CLUSTER_MANAGER,
            )
            .await
            .map_err(|e| e.to_string())
        }
    })
    .await;
    let invalid = valid.replace(
        "storage: {size: 1Gi}",
        "storage: {size: 1Gi}, credentials: {root: {name: elsewhere, key: root-password}}",
    );
    apply_yaml(&clusters, &invalid).await;
    let c = wait_for("Degraded=True", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            match condition(&c, "Degraded") {
                Some(d) if d.0 == "True" => Ok(c),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(owned(&c), recorded, "the invalid spec's write keeps them");
    apply_yaml(&clusters, valid).await;
    let c = wait_for("Degraded=False again", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            match condition(&c, "Degraded") {
                Some(d) if d.0 == "False" => Ok(c),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(owned(&c), recorded, "a valid pass carries them on");
    ns.delete().await.expect("delete namespace");
}

const BACKUP_CLUSTER: &str = r#"
apiVersion: mysql.bulwark.dev/v1alpha1
kind: MySQLCluster
metadata: {name: vault}
spec:
  engine: mariadb
  version: "11.4"
  replicas: 2
  storage: {size: 1Gi}
  tolerations: [{key: dedicated, operator: Equal, value: db, effect: NoSchedule}]
  backup:
    encryption: {keySecretRef: {name: vault-backup-key, key: master-key}}
    storages:
      - name: nas
        pvc: {claimName: dumps, subPath: mysql/vault}
      - name: offsite
        s3: {bucket: vault-backups, prefix: prod/vault, endpoint: "http://127.0.0.1:9000", region: eu-west-1, forcePathStyle: true, credentialsSecret: {name: vault-s3}}
"#;

async fn backup_prerequisites(client: &Client, n: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    apply_yaml(&secrets, "apiVersion: v1\nkind: Secret\nmetadata: {name: vault-backup-key}\nstringData: {master-key: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=}\n").await;
    apply_yaml(&secrets, "apiVersion: v1\nkind: Secret\nmetadata: {name: vault-s3}\nstringData: {AWS_ACCESS_KEY_ID: test, AWS_SECRET_ACCESS_KEY: test}\n").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), n);
    apply_yaml(&claims, "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: dumps}\nspec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 10Gi}}}\n").await;
}

/// The backup cluster `vault` with deletion policy Delete and both members ready (replica on
/// node-b, primary on node-a); its spec, for later edits.
async fn deleting_vault_ready(client: &Client, n: &str) -> String {
    backup_prerequisites(client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let spec = format!("{BACKUP_CLUSTER}    deletionPolicy: Delete\n");
    apply_yaml(&clusters, &spec).await;
    wait_pods(client, n, "vault", 2).await;
    make_ready(client, n, "vault-1", "node-b").await;
    make_ready(client, n, "vault-0", "node-a").await;
    spec
}

async fn wait_pods(client: &Client, n: &str, cluster: &str, count: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let selector = format!("app.kubernetes.io/instance={cluster},mysql.bulwark.dev/role");
    wait_for("labelled pods", WAIT, || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move {
            let l = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            if l.items.len() == count {
                Ok(())
            } else {
                Err(format!("{} pods", l.items.len()))
            }
        }
    })
    .await;
}

async fn backup_status(api: &Api<MySQLBackup>, name: &str, phase: BackupPhase) -> MySQLBackup {
    wait_for(&format!("backup {name} {phase:?}"), WAIT, || {
        let api = api.clone();
        let name = name.to_owned();
        async move {
            let b = api.get(&name).await.map_err(|e| e.to_string())?;
            let st = b.status.clone().unwrap_or_default();
            if st.phase == Some(phase) {
                Ok(b)
            } else {
                Err(format!("{:?}: {:?}", st.phase, st.message))
            }
        }
    })
    .await
}

/// The command line of a container, as the contract types it.
fn argv_of(c: &Container) -> command::Argv {
    let program = match c.command.as_deref() {
        Some([p]) if p == command::BACKUP_PROGRAM => command::BACKUP_PROGRAM,
        Some([p]) if p == command::AGENT_PROGRAM => command::AGENT_PROGRAM,
        other => panic!("unexpected command {other:?}"),
    };
    command::Argv {
        program,
        args: c.args.clone().unwrap_or_default(),
    }
}

fn job_container(job: &Job) -> &Container {
    &job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

#[tokio::test]
async fn backups_run_as_jobs_on_the_source_node_and_report_into_status() {
    let (client, ns) = setup("backup").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    apply_yaml(&clusters, BACKUP_CLUSTER).await;
    wait_pods(&client, n, "vault", 2).await;

    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: before-upgrade}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical, deletionPolicy: Delete}\n").await;
    // No instance is ready: the backup waits and says why.
    let waiting = wait_for("pending backup", WAIT, || {
        let backups = backups.clone();
        async move {
            let b = backups
                .get("before-upgrade")
                .await
                .map_err(|e| e.to_string())?;
            let st = b.status.clone().unwrap_or_default();
            match (st.phase, st.message.as_deref()) {
                (Some(BackupPhase::Pending), Some(m)) if m.contains("ready instance") => Ok(b),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(waiting
        .finalizers()
        .contains(&"mysql.bulwark.dev/backup-data".to_owned()));

    // The replica first: the waiting backup may start the moment any instance is ready.
    make_ready(&client, n, "vault-1", "node-b").await;
    make_ready(&client, n, "vault-0", "node-a").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let job = wait_get(&jobs, "before-upgrade-backup").await;
    // The id was recorded before the Job was created, and the Job stores the backup under it.
    let planned_id = backups
        .get("before-upgrade")
        .await
        .unwrap()
        .status
        .and_then(|s| s.backup_id)
        .expect("backup id recorded before the Job");
    assert!(
        bulwark_contract::ids::is_backup_id(&planned_id),
        "{planned_id}"
    );
    let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
    assert_eq!(
        bulwark_operator::backup::job::pinned_node(&pod),
        Some("node-b"),
        "a ready replica is the source, and the job runs on its node"
    );
    // Through the scheduler: a claim bound on first use must be able to bind.
    assert_eq!(pod.node_name, None);
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    let vols: BTreeMap<String, k8s_openapi::api::core::v1::Volume> = pod
        .volumes
        .clone()
        .unwrap()
        .into_iter()
        .map(|v| (v.name.clone(), v))
        .collect();
    let data = vols["source-data"]
        .persistent_volume_claim
        .as_ref()
        .unwrap();
    assert_eq!(
        (data.claim_name.as_str(), data.read_only),
        ("data-vault-1", Some(true))
    );
    assert_eq!(
        vols["backup-storage"]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "dumps"
    );
    assert_eq!(
        vols["backup-key"]
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .as_deref(),
        Some("vault-backup-key")
    );
    let mounts = pod.containers[0].volume_mounts.clone().unwrap();
    let storage_mount = mounts.iter().find(|m| m.name == "backup-storage").unwrap();
    assert_eq!(storage_mount.sub_path.as_deref(), Some("mysql/vault"));
    let source_mount = mounts.iter().find(|m| m.name == "source-data").unwrap();
    assert_eq!(
        (source_mount.read_only, source_mount.sub_path.as_deref()),
        (Some(true), Some("mysql"))
    );
    assert_eq!(
        argv_of(job_container(&job)),
        command::Backup {
            repository: command::Repository {
                url: "/backup-storage".into(),
                encryption_key_file: Some("/etc/bulwark/backup-key/master.key".into()),
                ..command::Repository::default()
            },
            method: command::Method::Physical,
            host: "vault-1.vault-headless".into(),
            port: 3306,
            user: "bulwark_backup".into(),
            password_file: "/etc/bulwark/backup-credentials/password".into(),
            datadir: Some("/var/lib/mysql".into()),
            result_file: "/dev/termination-log".into(),
            progress_interval_seconds: 5,
            backup_id: planned_id.clone(),
            binlog_archive: "vault".into(),
        }
        .argv()
    );
    assert_eq!(pod.containers[0].image.as_deref(), Some(BACKUP_IMAGE));
    assert_eq!(job.owner_references()[0].name, "before-upgrade");

    // One backup at a time per cluster: a second one waits for the first.
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: adhoc-dump}\nspec: {clusterRef: {name: vault}, storage: offsite, method: logical}\n").await;
    wait_for("second backup waits", WAIT, || {
        let backups = backups.clone();
        async move {
            let b = backups.get("adhoc-dump").await.map_err(|e| e.to_string())?;
            let m = b.status.and_then(|s| s.message).unwrap_or_default();
            if m == "waiting for backup before-upgrade of the cluster to finish" {
                Ok(())
            } else {
                Err(m)
            }
        }
    })
    .await;
    assert!(jobs.get_opt("adhoc-dump-backup").await.unwrap().is_none());

    end_job_pod(
        &client,
        n,
        "before-upgrade-backup",
        "backup",
        true,
        &result_json("20261122T030000Z-9f3a"),
    )
    .await;
    let done = backup_status(&backups, "before-upgrade", BackupPhase::Succeeded).await;
    let st = done.status.unwrap();
    assert_eq!(st.backup_id.as_deref(), Some("20261122T030000Z-9f3a"));
    assert_eq!(
        st.location.as_deref(),
        Some("pvc://dumps/mysql/vault/20261122T030000Z-9f3a")
    );
    assert_eq!(
        (st.stored_bytes, st.plaintext_bytes),
        (Some(23456789), Some(123456789))
    );
    assert_eq!(
        (
            st.binlog_file.as_deref(),
            st.binlog_position,
            st.gtid_set.as_deref()
        ),
        (Some("mysql-bin.000007"), Some(4242), Some("0-100-77"))
    );
    assert_eq!(st.source_pod.as_deref(), Some("vault-1"));
    assert!(st
        .conditions
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True"));

    // The next backup starts now; it is logical, so it is not pinned, and goes to S3.
    let job2 = wait_get(&jobs, "adhoc-dump-backup").await;
    let pod2 = job2.spec.as_ref().unwrap().template.spec.clone().unwrap();
    assert_eq!(bulwark_operator::backup::job::pinned_node(&pod2), None);
    assert!(!pod2
        .volumes
        .unwrap()
        .iter()
        .any(|v| v.name == "source-data" || v.name == "backup-storage"));
    let argv2 = argv_of(job_container(&job2)).args;
    for flag in [
        "--repo=s3://vault-backups/prod/vault",
        "--s3-endpoint=http://127.0.0.1:9000",
        "--s3-path-style",
        "--method=logical",
    ] {
        assert!(argv2.iter().any(|a| a == flag), "{flag} in {argv2:?}");
    }
    assert!(
        !argv2.iter().any(|a| a.starts_with("--datadir")),
        "{argv2:?}"
    );
    // The S3 credentials reach the tool as the files of the storage's Secret, mounted; none
    // in the environment.
    assert!(
        argv2
            .iter()
            .any(|a| a == "--s3-credentials-dir=/etc/bulwark/s3"),
        "{argv2:?}"
    );
    let pod2 = job2.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert!(
        pod2.containers[0].env.is_none(),
        "{:?}",
        pod2.containers[0].env
    );
    let s3_volume = pod2
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "s3-credentials")
        .and_then(|v| v.secret.as_ref())
        .and_then(|s| s.secret_name.as_deref());
    assert_eq!(s3_volume, Some("vault-s3"));
    end_job_pod(
        &client,
        n,
        "adhoc-dump-backup",
        "backup",
        false,
        &error_line("failed to connect to the server: Access denied for user 'bulwark_backup'"),
    )
    .await;
    let failed = backup_status(&backups, "adhoc-dump", BackupPhase::Failed).await;
    assert_eq!(
        failed.status.unwrap().message.as_deref(),
        Some("backup failed: failed to connect to the server: Access denied for user 'bulwark_backup'")
    );
    let events = wait_event(&client, n, "adhoc-dump", "BackupFailed").await;
    assert!(
        events.iter().any(|(_, m)| m.contains("Access denied")),
        "{events:?}"
    );

    // The cluster's status records the latest successful backup.
    wait_for("cluster lastSuccessfulBackup", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            let last = c
                .status
                .as_ref()
                .and_then(|s| s.last_successful_backup.clone());
            match last {
                Some(l)
                    if l.name == "before-upgrade"
                        && l.backup_id.as_deref() == Some("20261122T030000Z-9f3a") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;

    // Delete policy: deleting the object runs a deletion Job for its data first.
    backups
        .delete("before-upgrade", &DeleteParams::default())
        .await
        .unwrap();
    let del = wait_get(&jobs, "before-upgrade-delete").await;
    let argv = argv_of(job_container(&del));
    assert_eq!(
        (argv.args[1].as_str(), argv.args.last().map(String::as_str)),
        ("delete", Some("20261122T030000Z-9f3a"))
    );
    assert!(
        backups.get_opt("before-upgrade").await.unwrap().is_some(),
        "held by the finalizer"
    );
    end_job_pod(&client, n, "before-upgrade-delete", "delete", true, "").await;
    wait_gone(&backups, "before-upgrade").await;
    // Retain policy (the cluster's default): the object goes at once.
    backups
        .delete("adhoc-dump", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&backups, "adhoc-dump").await;
    assert!(jobs.get_opt("adhoc-dump-delete").await.unwrap().is_none());
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_fast_schedule_creates_backups_one_at_a_time_and_retention_prunes_the_right_ones() {
    let (client, ns) = setup("schedule").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let yaml = format!(
        "{BACKUP_CLUSTER}    deletionPolicy: Delete\n    schedules:\n      - name: every2s\n        schedule: \"*/2 * * * * *\"\n        storage: nas\n        retention: {{keepLast: 2}}\n        failedBackupsHistoryLimit: 1\n"
    );
    apply_yaml(&clusters, &yaml).await;
    wait_pods(&client, n, "vault", 2).await;
    make_ready(&client, n, "vault-0", "node-a").await;
    make_ready(&client, n, "vault-1", "node-b").await;

    // Play the binlog archiver's report as the cluster controller copies it: the first backup
    // (the id the first success gets below) is the base of the recovery window, so retention
    // keeps it whatever keepLast says.
    let first_id = "20261122T000000Z-0000";
    clusters
        .patch_status(
            "vault",
            &PatchParams::apply("test-archiver").force(),
            &Patch::Apply(json!({
                "apiVersion": "mysql.bulwark.dev/v1alpha1",
                "kind": "MySQLCluster",
                "status": {"binlogArchive": {
                    "streaming": true, "through": "0-1-9", "lagSeconds": 0, "gaps": 0,
                    "windowBaseBackup": first_id,
                }},
            })),
        )
        .await
        .unwrap();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    // Play the kubelet: end each backup job as it appears; the 3rd fails, the others succeed;
    // also end deletion jobs. Meanwhile, never more than one unfinished backup may exist.
    let mut outcomes: BTreeMap<String, (bool, String)> = BTreeMap::new();
    let mut ended: std::collections::BTreeSet<String> = Default::default();
    let start = Instant::now();
    while outcomes.len() < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "schedule too slow: {outcomes:?}"
        );
        let list = backups
            .list(&ListParams::default().labels("mysql.bulwark.dev/schedule=every2s"))
            .await
            .unwrap()
            .items;
        let active: Vec<String> = list
            .iter()
            .filter(|b| {
                !matches!(
                    b.status.as_ref().and_then(|s| s.phase),
                    Some(BackupPhase::Succeeded | BackupPhase::Failed)
                )
            })
            .map(|b| b.name_any())
            .collect();
        assert!(active.len() <= 1, "concurrency Forbid violated: {active:?}");
        for j in jobs.list(&ListParams::default()).await.unwrap().items {
            let name = j.name_any();
            if ended.contains(&name) || j.status.as_ref().and_then(|s| s.active).unwrap_or(0) == 0 {
                continue;
            }
            if let Some(backup) = name.strip_suffix("-backup") {
                let ok = outcomes.len() != 2;
                let id = format!("20261122T{:06}Z-{:04}", outcomes.len(), outcomes.len());
                let msg = if ok {
                    result_json(&id)
                } else {
                    error_line("failed to stream the backup: disk full")
                };
                end_job_pod(&client, n, &name, "backup", ok, &msg).await;
                outcomes.insert(backup.to_owned(), (ok, id));
            } else if name.ends_with("-delete") {
                end_job_pod(&client, n, &name, "delete", true, "").await;
            }
            ended.insert(name);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Stop the schedule, then let retention and the deletion jobs settle.
    let suspended = yaml.replace(
        "failedBackupsHistoryLimit: 1\n",
        "failedBackupsHistoryLimit: 1\n        suspend: true\n",
    );
    apply_yaml(&clusters, &suspended).await;
    let succeeded: Vec<&String> = outcomes
        .iter()
        .filter(|(_, (ok, _))| *ok)
        .map(|(n, _)| n)
        .collect();
    let failed: Vec<&String> = outcomes
        .iter()
        .filter(|(_, (ok, _))| !*ok)
        .map(|(n, _)| n)
        .collect();
    // Names sort by scheduled time; the newest two successes stay, the one failure stays, and
    // so does the base of the recovery window.
    let mut expected: Vec<String> = succeeded[succeeded.len() - 2..]
        .iter()
        .map(|s| (*s).clone())
        .collect();
    expected.extend(failed.iter().map(|s| (*s).clone()));
    let base = outcomes
        .iter()
        .find(|(_, (_, id))| id == first_id)
        .map(|(name, _)| name.clone())
        .unwrap();
    assert!(
        !expected.contains(&base),
        "the base is older than keepLast keeps"
    );
    expected.push(base);
    expected.sort();
    let remaining = wait_for("retention", Duration::from_secs(60), || {
        let backups = backups.clone();
        let jobs = jobs.clone();
        let client = client.clone();
        let expected = expected.clone();
        let n = n.to_owned();
        async move {
            for j in jobs
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
            {
                if j.name_any().ends_with("-delete")
                    && j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0
                {
                    end_job_pod(&client, &n, &j.name_any(), "delete", true, "").await;
                }
            }
            let mut names: Vec<String> = backups
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .filter(|b| {
                    b.status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .is_some_and(|p| p != BackupPhase::Pending && p != BackupPhase::Running)
                })
                .map(|b| b.name_any())
                .collect();
            names.sort();
            if names == expected {
                Ok(names)
            } else {
                Err(format!("{names:?} != {expected:?}"))
            }
        }
    })
    .await;
    assert_eq!(remaining.len(), 4);
    // Every pruned success had its data deleted by id.
    for (name, (ok, id)) in &outcomes {
        if *ok && !expected.contains(name) {
            let j = jobs
                .get(&format!("{name}-delete"))
                .await
                .expect("deletion job of a pruned backup");
            let args = argv_of(job_container(&j)).args;
            assert_eq!(
                (args[1].as_str(), args.last()),
                ("delete", Some(id)),
                "{args:?}"
            );
        }
    }
    let c = clusters.get("vault").await.unwrap();
    let st = c.status.clone().unwrap();
    let sched = &st.schedules[0];
    assert_eq!(sched.name, "every2s");
    assert!(sched.last_schedule_time.is_some());
    assert_eq!(
        sched.next_schedule_time, None,
        "a suspended schedule has no next run"
    );
    assert_eq!(
        sched.last_successful_backup.as_ref().map(|b| &b.name),
        Some(succeeded[succeeded.len() - 1])
    );
    let events = events_for(&client, n, "vault").await;
    assert!(
        events.iter().any(|(r, _)| r == "BackupScheduled"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "BackupPruned" && m.contains("not kept by the retention rules")),
        "{events:?}"
    );
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_finished_backup_follows_its_clusters_deletion_policy_as_it_is_now() {
    let (client, ns) = setup("policy").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let deleting = deleting_vault_ready(&client, n).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: kept}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\n").await;
    end_job_pod(
        &client,
        n,
        "kept-backup",
        "backup",
        true,
        &result_json("20261122T030000Z-4b1d"),
    )
    .await;
    backup_status(&backups, "kept", BackupPhase::Succeeded).await;
    let finalizer = "mysql.bulwark.dev/backup-data".to_owned();
    let has_finalizer = |want: bool| {
        let backups = backups.clone();
        let finalizer = finalizer.clone();
        async move {
            wait_for(&format!("finalizer present: {want}"), WAIT, || {
                let backups = backups.clone();
                let finalizer = finalizer.clone();
                async move {
                    let b = backups.get("kept").await.map_err(|e| e.to_string())?;
                    (b.finalizers().contains(&finalizer) == want)
                        .then_some(())
                        .ok_or_else(|| format!("{:?}", b.finalizers()))
                }
            })
            .await
        }
    };
    has_finalizer(true).await;

    // The user asks to keep the data: the finished backup's finalizer goes, and back again.
    apply_yaml(&clusters, BACKUP_CLUSTER).await;
    has_finalizer(false).await;
    apply_yaml(&clusters, &deleting).await;
    has_finalizer(true).await;

    // Switched to Retain and deleted at once (as retention would): whichever comes first, the
    // refresh or the deletion, the data stays.
    apply_yaml(&clusters, BACKUP_CLUSTER).await;
    backups
        .delete("kept", &DeleteParams::default())
        .await
        .expect("delete backup");
    wait_gone(&backups, "kept").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    assert!(
        jobs.get_opt(&bulwark_operator::backup::job::delete_job_name("kept"))
            .await
            .unwrap()
            .is_none(),
        "no deletion Job for a backup whose cluster retains its data"
    );
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_backup_deleted_while_running_has_what_it_wrote_deleted_under_its_recorded_id() {
    let (client, ns) = setup("midway").await;
    let n = ns.name();
    deleting_vault_ready(&client, n).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: midway}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\n").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let job = wait_get(&jobs, "midway-backup").await;
    let id = backups
        .get("midway")
        .await
        .unwrap()
        .status
        .and_then(|s| s.backup_id)
        .expect("backup id recorded before the Job");
    let argv = argv_of(job_container(&job)).args;
    assert!(argv.contains(&format!("--backup-id={id}")), "{argv:?}");

    // Deleted mid-run: the run's result will never reach the status, yet what it wrote (or
    // commits while it is being stopped) is deleted under the id recorded beforehand.
    backups
        .delete("midway", &DeleteParams::default())
        .await
        .expect("delete backup");
    let del = wait_get(&jobs, "midway-delete").await;
    let argv = argv_of(job_container(&del));
    assert_eq!(
        (argv.args[1].as_str(), argv.args.last().map(String::as_str)),
        ("delete", Some(id.as_str()))
    );
    assert!(
        jobs.get_opt("midway-backup").await.unwrap().is_none(),
        "the deletion runs only once the backup's Job and pod are gone"
    );
    assert!(
        backups.get_opt("midway").await.unwrap().is_some(),
        "held by the finalizer"
    );
    end_job_pod(&client, n, "midway-delete", "delete", true, "").await;
    wait_gone(&backups, "midway").await;
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn where_a_backup_goes_is_decided_by_the_operator_not_by_its_author() {
    let (client, ns) = setup("forged").await;
    let n = ns.name();
    deleting_vault_ready(&client, n).await;
    // The author points the backup at a server of their own, in the annotation an earlier
    // version recorded the storage in, and in the status (which a create cannot set).
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata:\n  name: forged\n  annotations:\n    mysql.bulwark.dev/storage: '{\"storage\":{\"name\":\"nas\",\"nfs\":{\"server\":\"loot.example\",\"path\":\"/x\"}}}'\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\nstatus: {recordedStorage: {name: nas, nfs: {server: loot.example, path: /x}}}\n").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    let job = wait_get(&jobs, "forged-backup").await;
    let cluster_nas =
        json!({"name": "nas", "pvc": {"claimName": "dumps", "subPath": "mysql/vault"}});
    let recorded = backups
        .get("forged")
        .await
        .unwrap()
        .status
        .unwrap()
        .recorded_storage;
    assert_eq!(serde_json::to_value(recorded).unwrap(), cluster_nas);
    let uses_loot = |j: &Job| serde_json::to_string(j).unwrap().contains("loot.example");
    assert!(
        !uses_loot(&job),
        "the backup Job goes to the cluster's storage"
    );
    let vols = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert!(vols.iter().any(|v| v
        .persistent_volume_claim
        .as_ref()
        .is_some_and(|c| c.claim_name == "dumps")));

    // The deletion Job, too, targets the recorded storage only.
    end_job_pod(
        &client,
        n,
        "forged-backup",
        "backup",
        true,
        &result_json("20261122T030000Z-5eed"),
    )
    .await;
    backup_status(&backups, "forged", BackupPhase::Succeeded).await;
    backups
        .delete("forged", &DeleteParams::default())
        .await
        .expect("delete backup");
    let del = wait_get(&jobs, "forged-delete").await;
    assert!(
        !uses_loot(&del),
        "the deletion Job goes to the cluster's storage"
    );
    end_job_pod(&client, n, "forged-delete", "delete", true, "").await;
    wait_gone(&backups, "forged").await;
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn physical_work_for_a_series_no_backup_image_serves_is_refused_with_the_cause() {
    let (client, ns) = setup("series").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let unserved = BACKUP_CLUSTER.replace("version: \"11.4\"", "version: \"11.8\"");
    apply_yaml(&clusters, &unserved).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: copy}\nspec: {clusterRef: {name: vault}, storage: nas, method: physical}\n").await;
    let failed = backup_status(&backups, "copy", BackupPhase::Failed).await;
    let message = failed.status.unwrap().message.unwrap_or_default();
    assert!(
        message.starts_with("physical backups and restores of mariadb-11.8 need mariadb-backup 11.8, which no backup image of the operator has (images serve mariadb-10.11, mariadb-11.4, mysql-8.4;"),
        "{message}"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), n);
    assert!(
        jobs.get_opt("copy-backup").await.unwrap().is_none(),
        "no Job for a refused backup"
    );

    // A physical schedule is a spec the operator cannot honour.
    let scheduled = format!("{unserved}    schedules:\n      - {{name: nightly, schedule: '@daily', storage: nas, method: physical}}\n");
    apply_yaml(&clusters, &scheduled).await;
    let degraded = wait_for("Degraded condition", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            condition(&c, "Degraded")
                .filter(|d| d.0 == "True")
                .ok_or_else(|| format!("{:?}", condition(&c, "Degraded")))
        }
    })
    .await;
    assert!(
        degraded.2.contains("need mariadb-backup 11.8") && degraded.1 == "InvalidSpec",
        "{degraded:?}"
    );
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn a_cluster_bootstrapped_from_a_backup_restores_before_mysqld_starts() {
    let (client, ns) = setup("restore").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    apply_yaml(&secrets, "apiVersion: v1\nkind: Secret\nmetadata: {name: source-root}\nstringData: {root: source-password}\n").await;
    // A backup id may name a physical backup, whose accounts come from the source.
    let yaml = format!("{BACKUP_CLUSTER}  credentials:\n    root: {{name: source-root, key: root}}\n  bootstrap:\n    fromBackup: {{storage: offsite, backupId: 20261101T000000Z-0a0b}}\n");
    apply_yaml(&clusters, &yaml).await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    let set = wait_get(&sets, "vault").await;
    let pod = set.spec.clone().unwrap().template.spec.unwrap();
    let inits: Vec<&str> = pod
        .init_containers
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        inits,
        ["init", "seed", "restore"],
        "the restore runs after init and the seed (a member added later is copied from a \
         running member instead), and before mysqld"
    );
    let restore = &pod.init_containers.as_ref().unwrap()[2];
    let repository = command::Repository {
        url: "s3://vault-backups/prod/vault".into(),
        s3_endpoint: Some("http://127.0.0.1:9000".into()),
        s3_region: Some("eu-west-1".into()),
        s3_path_style: true,
        s3_credentials_dir: Some("/etc/bulwark/s3".into()),
        encryption_key_file: Some("/etc/bulwark/backup-key/master.key".into()),
    };
    assert_eq!(
        argv_of(restore),
        command::Restore::for_pod(repository.clone(), "20261101T000000Z-0a0b", None).argv()
    );
    // The agent finishes the restore (pending logical load, restored GTID history) from the same
    // repository and files.
    let agent = pod.containers.iter().find(|c| c.name == "agent").unwrap();
    assert_eq!(
        argv_of(agent),
        command::Agent::for_pod("vault-primary", 1, Some(repository)).argv()
    );
    // The source is recorded on the StatefulSet, not parsed back from the arguments.
    let recorded = set.annotations()["mysql.bulwark.dev/restore-source"].clone();
    let recorded: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(recorded["backupId"], "20261101T000000Z-0a0b");
    assert_eq!(recorded["storage"]["name"], "offsite");
    // Bootstrap is fixed at creation: it cannot be pointed at another backup later.
    let moved = yaml.replace("20261101T000000Z-0a0b", "20261102T000000Z-0c0d");
    let obj: MySQLCluster = serde_yaml::from_str(&moved).unwrap();
    let err = clusters
        .patch(
            "vault",
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .expect_err("bootstrap is immutable");
    assert!(err.to_string().contains("bootstrap is immutable"), "{err}");
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let metrics = Arc::new(Metrics::default());
    metrics.reconciled("cluster", 0.01);
    let listener = bulwark_operator::http::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(bulwark_operator::http::serve(
        listener,
        metrics,
        ready.clone(),
    ));
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }
    let m = get(addr, "/metrics").await;
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    assert!(
        m.contains("bulwark_reconciles_total{controller=\"cluster\"} 1"),
        "{m}"
    );
    assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
}

/// The binary as the chart runs it: `mysql-operator run` configured through the chart's
/// environment variables, against the control plane, serving its probes and metrics.
#[tokio::test]
async fn the_binary_runs_with_the_charts_settings_and_stops_on_sigterm() {
    let shared = bulwark_testenv::shared().await.expect("control plane");
    // Watching a namespace of its own: the controllers of this test binary act everywhere
    // else, and two operators must not share objects.
    let (_client, ns) = setup("binary").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysql-operator"))
        .arg("run")
        .env("KUBECONFIG", shared.kubeconfig_path())
        .env("MYSQL_OPERATOR_LISTEN", format!("127.0.0.1:{port}"))
        .env("MYSQL_OPERATOR_BACKUP_IMAGE", BACKUP_IMAGE)
        .env("MYSQL_OPERATOR_EXPORTER_IMAGE", EXPORTER_IMAGE)
        .env("MYSQL_OPERATOR_LOG_FORMAT", "json")
        .env("MYSQL_OPERATOR_LOG", "info")
        .env("MYSQL_OPERATOR_NAMESPACES", ns.name())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start mysql-operator");
    // Drained from the start: an operator watching a busy control plane logs more than a pipe
    // holds, and a child blocked writing its logs cannot act on SIGTERM.
    let mut pipe = child.stderr.take().expect("stderr piped");
    let stderr = tokio::spawn(async move {
        let mut out = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut out).await;
        out
    });
    async fn get(port: u16, path: &str) -> Result<String, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out)
            .await
            .map_err(|e| e.to_string())?;
        Ok(out)
    }
    wait_for("/readyz of the binary", WAIT, || async move {
        let r = get(port, "/readyz").await?;
        if r.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(r)
        }
    })
    .await;
    let metrics = get(port, "/metrics").await.unwrap();
    assert!(
        metrics.starts_with("HTTP/1.1 200")
            && metrics.contains("content-type: application/openmetrics-text; version=1.0.0")
            && metrics.ends_with("# EOF\n"),
        "{metrics}"
    );
    // SIGTERM (what the kubelet sends) stops it cleanly.
    let pid = child.id().expect("pid") as i32;
    // SAFETY: sends a signal to our own child process.
    unsafe { libc_kill(pid) };
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("stops on SIGTERM")
        .unwrap();
    let stderr = stderr.await.expect("stderr drained");
    assert!(status.success(), "exit {status:?}; stderr:\n{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("\"message\":\"controllers started\"")
                && l.contains(&format!("\"namespaces\":\"[\\\"{}\\\"]\"", ns.name()))),
        "JSON logs: {stderr}"
    );
    ns.delete().await.expect("delete namespace");
}

unsafe fn libc_kill(pid: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: plain syscall wrapper; 15 is SIGTERM.
    unsafe {
        kill(pid, 15);
    }
}

/// The cause of a status race seen on a loaded machine: a reconcile working from a stale copy
/// merged that copy's status into its write, and server-side apply dropped every field the
/// newer write of the same manager had recorded (a backup's `sourcePod` vanished). Status writes
/// now carry the version they were decided from, so such a write is refused and nothing drops.
#[tokio::test]
async fn a_status_write_from_a_stale_copy_is_refused_and_drops_nothing() {
    let (client, ns) = setup("stale").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    // A pod no controller looks after, so that only this test writes its status.
    let stale = apply_yaml(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: stale-copy}\nspec: {containers: [{name: c, image: i}]}\n",
    )
    .await;
    let manager = bulwark_operator::apply::BACKUP_MANAGER;
    bulwark_operator::apply::apply_status(
        &pods,
        &stale,
        json!({"reason": "First", "message": "recorded by the first write"}),
        manager,
    )
    .await
    .expect("a write over the current version is applied");
    let err =
        bulwark_operator::apply::apply_status(&pods, &stale, json!({"reason": "Second"}), manager)
            .await
            .expect_err("a write decided from a stale copy is refused");
    assert!(err.is_conflict(), "{err:?}");
    let now = pods.get("stale-copy").await.unwrap().status.unwrap();
    assert_eq!(
        (now.reason.as_deref(), now.message.as_deref()),
        (Some("First"), Some("recorded by the first write"))
    );
}

/// A schedule added to a cluster that has run for a while is not overdue at once: it counts
/// from when the operator first saw it, not from the cluster's creation.
#[tokio::test]
async fn a_schedule_added_later_is_not_overdue_at_once() {
    let (client, ns) = setup("late-schedule").await;
    let n = ns.name();
    backup_prerequisites(&client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let created = apply_yaml(&clusters, BACKUP_CLUSTER)
        .await
        .creation_timestamp()
        .expect("created")
        .0;
    // Let two runs of a 5-second schedule pass after the creation, so that, counted from the
    // creation, a schedule added now would have missed one.
    let period = chrono::Duration::seconds(5);
    wait_for(
        "two schedule periods since the creation",
        WAIT,
        || async move {
            let missed = chrono::Utc::now() - created > period * 2 + chrono::Duration::seconds(1);
            missed.then_some(()).ok_or_else(|| "too early".to_owned())
        },
    )
    .await;
    let yaml = format!(
        "{BACKUP_CLUSTER}    schedules:\n      - name: every5s\n        schedule: \"*/5 * * * * *\"\n        storage: nas\n"
    );
    apply_yaml(&clusters, &yaml).await;
    let health = wait_for("the schedule in the status", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let st = clusters
                .get("vault")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if !st.schedules.iter().any(|s| s.name == "every5s") {
                return Err(format!("{:?}", st.schedules));
            }
            st.conditions
                .into_iter()
                .find(|c| c.type_ == "BackupHealthy")
                .ok_or_else(|| "no BackupHealthy".to_owned())
        }
    })
    .await;
    assert_ne!(health.reason, "BackupOverdue", "{health:?}");
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn the_operators_identity_is_refused_what_the_chart_does_not_grant() {
    let shared = bulwark_testenv::shared().await.expect("control plane");
    let admin = shared.client().await.expect("admin client");
    let operator = bound_client(&admin, shared.kubeconfig(), None).await;
    let (_, ns) = setup("identity").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::all(operator.clone());
    clusters
        .list(&ListParams::default().limit(1))
        .await
        .expect("granted: list clusters");
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    let secrets: Api<Secret> = Api::namespaced(operator.clone(), n);
    forbidden(
        secrets.list(&ListParams::default()).await.map(drop),
        "list secrets",
    );
    forbidden(
        secrets
            .delete("anything", &DeleteParams::default())
            .await
            .map(drop),
        "delete secrets",
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(operator.clone());
    forbidden(
        nodes.list(&ListParams::default()).await.map(drop),
        "list nodes",
    );
    ns.delete().await.expect("delete namespace");
}

/// The admission policy narrows RBAC's pod patch to the role label, its pod deletes to server
/// pods and its secret writes to Secrets the operator labels as its own.
#[tokio::test]
async fn the_operator_may_change_only_role_labels_and_its_own_secrets() {
    let shared = bulwark_testenv::shared().await.expect("control plane");
    let admin = shared.client().await.expect("admin client");
    let operator = bound_client(&admin, shared.kubeconfig(), None).await;
    let (_, ns) = setup("admission").await;
    let n = ns.name();
    let pp = PatchParams::apply("admission-test").force();
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), n);
    apply_yaml(
        &admin_pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: db-0, labels: {app: db}}\n\
         spec: {containers: [{name: mysqld, image: registry.test/mariadb:11.4}]}\n",
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(operator.clone(), n);
    let refused = |r: Result<(), kube::Error>, what: &str, cause: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(cause) => Ok(()),
        other => Err(format!(
            "{what}: expected 403 naming {cause:?}, got {other:?}"
        )),
    };
    let secrets: Api<Secret> = Api::namespaced(operator.clone(), n);
    let write = |name: &str, labelled: bool| {
        let labels = if labelled {
            json!({"app.kubernetes.io/managed-by": "bulwark-operator"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels}, "stringData": {"password": "new"}})
    };
    // The policy takes effect once the API server has loaded it; a refused write changes nothing,
    // so probing with one is harmless.
    wait_for("an unlabelled Secret to be refused", WAIT, || {
        let secrets = secrets.clone();
        let body = write("unlabelled", false);
        let pp = pp.clone();
        async move {
            let r = secrets
                .patch("unlabelled", &pp, &Patch::Apply(&body))
                .await
                .map(drop);
            refused(r, "create an unlabelled Secret", "only Secrets labelled")
        }
    })
    .await;
    let image = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0"},
        "spec": {"containers": [{"name": "mysqld", "image": "evil.test/shell:1"}]}});
    refused(
        pods.patch("db-0", &pp, &Patch::Apply(&image))
            .await
            .map(drop),
        "change a pod's image",
        "may not change a pod's spec",
    )
    .unwrap();
    let other_label = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "labels": {"app": "web"}}});
    refused(
        pods.patch("db-0", &pp, &Patch::Apply(&other_label))
            .await
            .map(drop),
        "change another label",
        "only the mysql.bulwark.dev/role and",
    )
    .unwrap();
    let annotation = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "annotations": {"x": "y"}}});
    refused(
        pods.patch("db-0", &pp, &Patch::Apply(&annotation))
            .await
            .map(drop),
        "annotate a pod",
        "only the mysql.bulwark.dev/role and",
    )
    .unwrap();
    let role = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "labels": {"mysql.bulwark.dev/role": "primary"}}});
    pods.patch("db-0", &pp, &Patch::Apply(&role))
        .await
        .expect("the role label may change");
    let pod = admin_pods.get("db-0").await.expect("pod");
    assert_eq!(pod.labels()["app"], "db");
    assert_eq!(pod.labels()["mysql.bulwark.dev/role"], "primary");

    // Deletes (a rolling change restarts server pods) reach only the clusters' server pods.
    refused(
        pods.delete("db-0", &Default::default()).await.map(drop),
        "delete a user's pod",
        "may delete only the server pods",
    )
    .unwrap();
    apply_yaml(
        &admin_pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: quay-0, labels: {app.kubernetes.io/managed-by: \
         bulwark-operator, app.kubernetes.io/component: database}}\n\
         spec: {containers: [{name: mysqld, image: registry.test/mariadb:11.4}]}\n",
    )
    .await;
    pods.delete("quay-0", &Default::default())
        .await
        .expect("a server pod may be deleted");

    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), n);
    apply_yaml(
        &admin_secrets,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: users-own}\nstringData: {password: kept}\n",
    )
    .await;
    refused(
        secrets
            .patch("users-own", &pp, &Patch::Apply(&write("users-own", false)))
            .await
            .map(drop),
        "overwrite a user's Secret",
        "only Secrets labelled",
    )
    .unwrap();
    refused(
        secrets
            .patch("users-own", &pp, &Patch::Apply(&write("users-own", true)))
            .await
            .map(drop),
        "label a user's Secret as its own",
        "may not take over a Secret",
    )
    .unwrap();
    secrets
        .patch("generated", &pp, &Patch::Apply(&write("generated", true)))
        .await
        .expect("a Secret of its own may be created");
    secrets
        .patch("generated", &pp, &Patch::Apply(&write("generated", true)))
        .await
        .expect("and written again");
    let kept = admin_secrets.get("users-own").await.expect("secret");
    assert_eq!(
        kept.data.unwrap_or_default()["password"].0,
        b"kept".to_vec()
    );
    ns.delete().await.expect("delete namespace");
}

/// The namespaced install: an operator watching one namespace, allowed there by a Role and
/// nowhere else, builds a cluster, reports its status, schedules and starts backups. On a control
/// plane of its own, where no cluster-wide operator runs.
#[tokio::test]
async fn a_namespaced_operator_works_with_a_role_in_its_namespace_only() {
    let plane = bulwark_testenv::ControlPlane::start(bulwark_testenv::Options::default())
        .await
        .expect("a control plane of its own");
    let admin = plane.client().await.expect("admin client");
    let ns = TestNamespace::create(&admin, "scoped")
        .await
        .expect("namespace");
    let n = ns.name().to_owned();
    let operator = bound_client(&admin, plane.kubeconfig(), Some(&n)).await;
    let config = Config {
        backup_images: BackupImages::parse(BACKUP_IMAGE, "mariadb-11.4", "").unwrap(),
        exporter_image: EXPORTER_IMAGE.to_owned(),
        namespaces: vec![n.clone()],
    };
    let metrics = Arc::new(Metrics::default());
    let ctx = Context::new(operator, config, metrics.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(bulwark_operator::run::controllers(ctx, async move {
        let _ = stop_rx.await;
    }));

    backup_prerequisites(&admin, &n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), &n);
    let scheduled = format!(
        "{BACKUP_CLUSTER}    deletionPolicy: Delete\n    schedules:\n      - {{name: nightly, schedule: '@daily', storage: nas}}\n"
    );
    apply_yaml(&clusters, &scheduled).await;
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), &n);
    wait_get(&sets, "vault").await;
    wait_for("cluster status with its schedule", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            let st = c.status.clone().unwrap_or_default();
            let scheduled = st.schedules.iter().any(|s| s.next_schedule_time.is_some());
            (condition(&c, "Ready").is_some() && scheduled)
                .then_some(())
                .ok_or_else(|| format!("{st:?}"))
        }
    })
    .await;
    let backups: Api<MySQLBackup> = Api::namespaced(admin.clone(), &n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: scoped}\nspec: {clusterRef: {name: vault}, storage: nas, method: logical}\n").await;
    let pending = backup_status(&backups, "scoped", BackupPhase::Pending).await;
    assert!(
        pending
            .finalizers()
            .contains(&"mysql.bulwark.dev/backup-data".to_owned()),
        "{:?}",
        pending.finalizers()
    );
    // Events are recorded (events.k8s.io, in the namespace).
    wait_for("an event about the cluster", WAIT, || {
        let admin = admin.clone();
        let n = n.clone();
        async move {
            let ev = events_for(&admin, &n, "vault").await;
            (!ev.is_empty())
                .then_some(())
                .ok_or("no event yet".to_owned())
        }
    })
    .await;

    // Not one reconcile failed for want of a permission.
    let text = metrics.render();
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("bulwark_reconcile_errors_total{")),
        "{text}"
    );
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(WAIT, running).await;
}
