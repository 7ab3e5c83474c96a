//! The controllers against a real control plane (etcd, kube-apiserver, kube-controller-manager
//! from bulwark-testenv; no kubelet, so tests play the kubelet's part where needed: binding
//! pods to nodes, marking them ready, ending Job pods with a termination message).
//! One operator runs for each test binary (one per controller: cluster, backups, schedules,
//! operator); each test works in its own namespace. The members' agents are scripted
//! (`members`). Shared fixtures and helpers.
#![allow(dead_code, unused_imports)]

pub mod members;

pub use std::collections::BTreeMap;
pub use std::future::Future;
pub use std::sync::{Arc, OnceLock};
pub use std::time::{Duration, Instant};

pub use bulwark_api::{BackupPhase, MySQLBackup, MySQLCluster};
pub use bulwark_contract::command;
pub use bulwark_contract::result::{error_line, BackupResult};
pub use bulwark_operator::context::{Config, Context};
pub use bulwark_operator::images::BackupImages;
pub use bulwark_operator::metrics::Metrics;
pub use bulwark_testenv::TestNamespace;
pub use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
pub use k8s_openapi::api::apps::v1::StatefulSet;
pub use k8s_openapi::api::batch::v1::Job;
pub use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Event, PersistentVolumeClaim, Pod, Secret, Service,
};
pub use k8s_openapi::api::policy::v1::PodDisruptionBudget;
pub use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
pub use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
pub use kube::{Client, ResourceExt};
pub use serde_json::json;

pub const BACKUP_IMAGE: &str = "registry.test/mysql-backup:test";
pub const EXPORTER_IMAGE: &str = "registry.test/mysqld-exporter:test";
pub const TEST_MANAGER: &str = "bulwark-operator-tests";
pub const ADMISSION_POLICY: &str = "mysql-operator-limits";

/// The operator's identity in these tests: a service account that holds exactly the rules the
/// chart grants (`rbac::cluster_role_rules()`, which `tests/chart.rs` checks against the chart),
/// cluster-wide, or with a Role in `namespace` only, under the chart's admission policy
/// (`admission::policy`). A call the rules do not allow fails the
/// reconcile, and with it the test that needs it.
pub async fn bound_client(
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

/// The members' agents of this test binary's operator.
pub fn members() -> Arc<members::ScriptedMembers> {
    static MEMBERS: OnceLock<Arc<members::ScriptedMembers>> = OnceLock::new();
    MEMBERS.get_or_init(Default::default).clone()
}

/// Starts the operator once per test binary, on its own runtime so that it outlives each test's.
pub fn operator() {
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
                    server_images: Default::default(),
                    namespaces: Vec::new(),
                };
                // As an operator that has run for long: right after a start, a forced failover
                // waits out renewals a process before it may have asked for (unit-tested in
                // `leases.rs` and `failover_tests.rs`), minutes these tests do not wait.
                let long_ago = Instant::now()
                    .checked_sub(
                        bulwark_contract::follow::MAX_FOLLOWED_FOR + Duration::from_secs(120),
                    )
                    .unwrap_or_else(Instant::now);
                let ctx = Context::with_leases(
                    client,
                    config,
                    Arc::new(Metrics::default()),
                    members(),
                    bulwark_operator::leases::Leases::started_at(long_ago),
                );
                tx.send(()).expect("test waits");
                bulwark_operator::run::controllers(ctx, std::future::pending()).await;
            });
        });
        rx.recv().expect("operator started");
    });
}

pub async fn setup(prefix: &str) -> (Client, TestNamespace) {
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

pub fn tracing_subscriber_init() -> Option<()> {
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
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
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

pub const WAIT: Duration = Duration::from_secs(30);

pub async fn apply_yaml<K>(api: &Api<K>, yaml: &str) -> K
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

pub fn condition(c: &MySQLCluster, type_: &str) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone(), x.message.clone()))
}

pub async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
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
pub async fn wait_event(
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
pub async fn wait_get<K>(api: &Api<K>, name: &str) -> K
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
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
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
pub async fn make_ready(client: &Client, ns: &str, pod: &str, node: &str) {
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
            "podIP": pod_ip(pod),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]
        }})),
    )
    .await
    .expect("pod status");
}

/// The address a ready pod is given: `10.1.0.<ordinal + 1>` (scripted members are found by name,
/// not by address, so namespaces may share them).
pub fn pod_ip(pod: &str) -> String {
    let ordinal = pod.rsplit('-').next().and_then(|o| o.parse::<u8>().ok());
    format!("10.1.0.{}", ordinal.map_or(250, |o| o.saturating_add(1)))
}

/// Marks a running pod not ready, as a kubelet would when its readiness probe fails.
pub async fn make_unready(client: &Client, ns: &str, pod: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    pods.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}]
        }})),
    )
    .await
    .expect("pod status");
}

/// Ends a Job's pod as the kubelet would, with `message` as the container's termination message.
pub async fn end_job_pod(
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
            // The Job's own pod, not one that only carries its label.
            l.items
                .into_iter()
                .find(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "Job" && o.controller == Some(true))
                })
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

/// A pod that is not `job`'s but carries its label, created (a second after the Job's own, so
/// it is the newest) and ended as if it had committed the backup `message` reports.
pub async fn impersonate_job_pod(client: &Client, ns: &str, job: &str, message: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("job-name={job}");
    wait_for(&format!("pod of job {job}"), WAIT, || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move {
            let l = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            (!l.items.is_empty())
                .then_some(())
                .ok_or_else(|| "no pod yet".to_owned())
        }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let name = format!("{job}-forged");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"job-name": job}},
        "spec": {"containers": [{"name": "backup", "image": BACKUP_IMAGE}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("forged pod");
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Succeeded",
            "containerStatuses": [{
                "name": "backup", "image": BACKUP_IMAGE, "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}}
            }]
        }})),
    )
    .await
    .expect("forged pod status");
}

/// The result line `mysql-backup` writes for a committed backup, built with the producer's type.
pub fn result_json(id: &str) -> String {
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

pub const CLUSTER: &str = r#"
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

pub const BACKUP_CLUSTER: &str = r#"
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

pub async fn backup_prerequisites(client: &Client, n: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    apply_yaml(&secrets, "apiVersion: v1\nkind: Secret\nmetadata: {name: vault-backup-key}\nstringData: {master-key: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=}\n").await;
    apply_yaml(&secrets, "apiVersion: v1\nkind: Secret\nmetadata: {name: vault-s3}\nstringData: {AWS_ACCESS_KEY_ID: test, AWS_SECRET_ACCESS_KEY: test}\n").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), n);
    apply_yaml(&claims, "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: dumps}\nspec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 10Gi}}}\n").await;
}

/// The backup cluster `vault` with deletion policy Delete and both members ready (replica on
/// node-b, primary on node-a); its spec, for later edits.
pub async fn deleting_vault_ready(client: &Client, n: &str) -> String {
    backup_prerequisites(client, n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    let spec = format!("{BACKUP_CLUSTER}    deletionPolicy: Delete\n");
    apply_yaml(&clusters, &spec).await;
    wait_pods(client, n, "vault", 2).await;
    make_ready(client, n, "vault-1", "node-b").await;
    make_ready(client, n, "vault-0", "node-a").await;
    spec
}

pub async fn wait_pods(client: &Client, n: &str, cluster: &str, count: usize) {
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

pub async fn backup_status(api: &Api<MySQLBackup>, name: &str, phase: BackupPhase) -> MySQLBackup {
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
pub fn argv_of(c: &Container) -> command::Argv {
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

pub fn job_container(job: &Job) -> &Container {
    &job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}
