//! The CRDs against a real API server (started by bulwark-testenv): the examples are accepted,
//! the invalid fixtures are rejected with their message, both kinds round-trip, the status
//! subresource works and immutable fields stay immutable.

use std::path::{Path, PathBuf};

use bulwark_api::cluster::ServiceType;
use bulwark_api::{BackupPhase, BackupProgress, MySQLBackup, MySQLBackupStatus, MySQLCluster};
use bulwark_testenv::TestNamespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::json;

const FIELD_MANAGER: &str = "bulwark-api-tests";

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn documents(path: &Path) -> Vec<DynamicObject> {
    let text = std::fs::read_to_string(path).expect("read manifest");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            DynamicObject::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} is not a Kubernetes object: {e}", path.display()))
        })
        .collect()
}

fn dynamic_api(client: &Client, namespace: &str, object: &DynamicObject) -> Api<DynamicObject> {
    let types = object.types.as_ref().expect("apiVersion and kind");
    let gvk = GroupVersionKind::try_from(types).expect("valid apiVersion");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

async fn dry_run_apply(
    client: &Client,
    namespace: &str,
    object: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    let name = object.metadata.name.clone().expect("metadata.name");
    dynamic_api(client, namespace, object)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).dry_run(),
            &Patch::Apply(object),
        )
        .await
}

async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = bulwark_testenv::client().await.expect("control plane");
    let namespace = TestNamespace::create(&client, prefix)
        .await
        .expect("test namespace");
    (client, namespace)
}

fn example<T: serde::de::DeserializeOwned>(file: &str, kind: &str) -> T {
    let path = repository_root().join("deploy/examples").join(file);
    let text = std::fs::read_to_string(&path).expect("read example");
    let doc = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("valid YAML"))
        .find(|doc| doc["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in {}", path.display()));
    serde_yaml::from_value(doc).expect("typed example")
}

fn api_message(result: Result<impl std::fmt::Debug, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(response)) => {
            assert_eq!(response.code, 422, "{response:?}");
            response.message
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
}

#[tokio::test]
async fn examples_pass_server_side_dry_run() {
    let (client, namespace) = setup("examples").await;
    let files = yaml_files(&repository_root().join("deploy/examples"));
    assert!(!files.is_empty(), "no examples found");
    for path in files {
        for object in documents(&path) {
            let applied = dry_run_apply(&client, namespace.name(), &object).await;
            assert!(
                applied.is_ok(),
                "{} ({:?}) was rejected: {:?}",
                path.display(),
                object.metadata.name,
                applied.err()
            );
        }
    }
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn invalid_fixtures_are_rejected_with_a_readable_message() {
    let (client, namespace) = setup("invalid").await;
    let files = yaml_files(&repository_root().join("tests/fixtures/invalid"));
    assert!(
        files.len() >= 10,
        "expected the invalid fixtures, found {files:?}"
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read fixture");
        let expected = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} has no '# expect: ' line", path.display()));
        let objects = documents(path);
        assert_eq!(
            objects.len(),
            1,
            "{}: one object per fixture",
            path.display()
        );
        match dry_run_apply(&client, namespace.name(), &objects[0]).await {
            Ok(_) => failures.push(format!("{}: accepted", path.display())),
            Err(kube::Error::Api(response)) if response.message.contains(expected) => {}
            Err(err) => failures.push(format!(
                "{}: expected a message containing {expected:?}, got {err}",
                path.display()
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn both_kinds_round_trip_with_server_side_defaults() {
    let (client, namespace) = setup("roundtrip").await;
    let ns = namespace.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), ns);
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), ns);

    let full: MySQLCluster = example("mysqlcluster.yaml", "MySQLCluster");
    clusters
        .create(&PostParams::default(), &full)
        .await
        .expect("create the example cluster");
    let read = clusters.get("orders").await.expect("read back the cluster");
    assert_eq!(read.spec, full.spec);

    // Fields left out are defaulted by the API server from the schema, not by serde.
    let minimal = json!({
        "apiVersion": "mysql.bulwark.dev/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": { "name": "minimal" },
        "spec": { "engine": "mariadb", "version": "11.4", "storage": { "size": "1Gi" } }
    });
    let minimal: DynamicObject = serde_json::from_value(minimal).expect("object");
    let raw = dynamic_api(&client, ns, &minimal)
        .create(&PostParams::default(), &minimal)
        .await
        .expect("create a minimal cluster");
    assert_eq!(raw.data["spec"]["replicas"], json!(3));
    assert_eq!(raw.data["spec"]["service"]["type"], json!("ClusterIP"));
    assert_eq!(
        raw.data["spec"]["podDisruptionBudget"]["maxUnavailable"],
        json!(1)
    );
    assert_eq!(raw.data["spec"]["metrics"]["enabled"], json!(false));
    let node_ports = json!({
        "apiVersion": "mysql.bulwark.dev/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": { "name": "node-ports" },
        "spec": {
            "engine": "mysql", "version": "8.4", "storage": { "size": "1Gi" },
            "service": { "type": "NodePort", "nodePorts": {} }
        }
    });
    let node_ports: DynamicObject = serde_json::from_value(node_ports).expect("object");
    let raw = dynamic_api(&client, ns, &node_ports)
        .create(&PostParams::default(), &node_ports)
        .await
        .expect("create a NodePort cluster");
    assert_eq!(
        raw.data["spec"]["service"]["nodePorts"],
        json!({ "write": 30306, "read": 30307 })
    );
    let typed = clusters.get("minimal").await.expect("read typed");
    assert_eq!(typed.spec.service.type_, ServiceType::ClusterIP);
    assert_eq!(
        typed.spec.pod_disruption_budget.max_unavailable,
        IntOrString::Int(1)
    );

    let backup: MySQLBackup = example("mysqlbackup.yaml", "MySQLBackup");
    backups
        .create(&PostParams::default(), &backup)
        .await
        .expect("create the example backup");
    let read = backups
        .get(backup.metadata.name.as_deref().expect("name"))
        .await
        .expect("read");
    assert_eq!(read.spec, backup.spec);
    assert!(read.status.is_none());

    let no_method = json!({
        "apiVersion": "mysql.bulwark.dev/v1alpha1",
        "kind": "MySQLBackup",
        "metadata": { "name": "no-method" },
        "spec": { "clusterRef": { "name": "orders" }, "storage": "offsite" }
    });
    let no_method: DynamicObject = serde_json::from_value(no_method).expect("object");
    let raw = dynamic_api(&client, ns, &no_method)
        .create(&PostParams::default(), &no_method)
        .await
        .expect("create a backup without method");
    assert_eq!(raw.data["spec"]["method"], json!("physical"));

    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn status_is_written_through_the_status_subresource_only() {
    let (client, namespace) = setup("status").await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), namespace.name());
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), namespace.name());
    let backup: MySQLBackup = example("mysqlbackup.yaml", "MySQLBackup");
    let name = backup.metadata.name.clone().expect("name");
    let created = backups
        .create(&PostParams::default(), &backup)
        .await
        .expect("create backup");
    let generation = created.metadata.generation;

    let status = MySQLBackupStatus {
        phase: Some(BackupPhase::Running),
        start_time: Some(at(1_750_000_000)),
        backup_id: Some("20250615T151320Z-orders".to_owned()),
        progress: Some(BackupProgress {
            bytes_done: 1 << 30,
            bytes_per_second: 200 << 20,
        }),
        conditions: vec![Condition {
            type_: bulwark_api::common::condition::COMPLETE.to_owned(),
            status: "False".to_owned(),
            reason: "Running".to_owned(),
            message: "copying data files".to_owned(),
            last_transition_time: at(1_750_000_000),
            observed_generation: generation,
        }],
        ..MySQLBackupStatus::default()
    };
    let patched = backups
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .expect("patch status");
    assert_eq!(patched.status.as_ref(), Some(&status));
    assert_eq!(
        patched.metadata.generation, generation,
        "status must not bump generation"
    );

    // The main endpoint ignores status.
    let mut overwrite = backups.get(&name).await.expect("read");
    overwrite.status = Some(MySQLBackupStatus {
        phase: Some(BackupPhase::Failed),
        ..MySQLBackupStatus::default()
    });
    let replaced = backups
        .replace(&name, &PostParams::default(), &overwrite)
        .await
        .expect("replace through the main endpoint");
    assert_eq!(replaced.status.as_ref(), Some(&status));

    // A status that breaks the schema is rejected.
    let invalid = backups
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": "Exploded" } })),
        )
        .await;
    assert!(api_message(invalid).contains("Unsupported value: \"Exploded\""));

    let cluster: MySQLCluster = example("mysqlcluster.yaml", "MySQLCluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create cluster");
    let patched = clusters
        .patch_status(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": {
                "readyReplicas": 2,
                "currentPrimary": "orders-0",
                "schedules": [{ "name": "hourly", "nextScheduleTime": "2025-06-15T16:15:00Z" }]
            }})),
        )
        .await
        .expect("patch cluster status");
    let status = patched.status.expect("status");
    assert_eq!(status.ready_replicas, Some(2));
    assert_eq!(status.current_primary.as_deref(), Some("orders-0"));
    assert_eq!(status.schedules[0].name, "hourly");

    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn immutable_fields_cannot_change() {
    let (client, namespace) = setup("immutable").await;
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), namespace.name());
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), namespace.name());
    let cluster: MySQLCluster = example("mysqlcluster.yaml", "MySQLCluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create cluster");

    let patch = |spec: serde_json::Value| Patch::Merge(json!({ "spec": spec }));
    let params = PatchParams::default();
    let engine = clusters
        .patch("orders", &params, &patch(json!({ "engine": "mariadb" })))
        .await;
    assert!(api_message(engine).contains("engine is immutable"));

    let size = clusters
        .patch(
            "orders",
            &params,
            &patch(json!({ "storage": { "size": "100Gi" } })),
        )
        .await;
    assert!(api_message(size).contains("storage is immutable"));

    let class = clusters
        .patch(
            "orders",
            &params,
            &patch(json!({ "storage": { "storageClassName": null } })),
        )
        .await;
    assert!(api_message(class).contains("storage is immutable"));

    let bootstrap = clusters
        .patch(
            "orders",
            &params,
            &patch(json!({ "bootstrap": { "fromBackup": { "backupRef": { "name": "x" } } } })),
        )
        .await;
    assert!(api_message(bootstrap).contains("bootstrap cannot be added or removed after creation"));

    // Mutable fields still change.
    let scaled = clusters
        .patch("orders", &params, &patch(json!({ "replicas": 5 })))
        .await
        .expect("replicas can change");
    assert_eq!(scaled.spec.replicas, 5);

    let backup: MySQLBackup = example("mysqlbackup.yaml", "MySQLBackup");
    let name = backup.metadata.name.clone().expect("name");
    backups
        .create(&PostParams::default(), &backup)
        .await
        .expect("create backup");
    let storage = backups
        .patch(&name, &params, &patch(json!({ "storage": "local" })))
        .await;
    assert!(api_message(storage).contains("MySQLBackup spec is immutable"));
    let policy = backups
        .patch(
            &name,
            &params,
            &patch(json!({ "deletionPolicy": "Retain" })),
        )
        .await;
    assert!(api_message(policy).contains("MySQLBackup spec is immutable"));

    namespace.delete().await.expect("delete namespace");
}

fn at(seconds: i64) -> Time {
    Time(k8s_openapi::chrono::DateTime::from_timestamp(seconds, 0).expect("valid timestamp"))
}
