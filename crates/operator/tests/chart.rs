//! The Helm chart (`charts/mysql-operator`) and the plain manifests rendered from it
//! (`deploy/mysql-operator.yaml`): `helm lint`, the values schema, the rendered objects against
//! the real API server (server-side dry-run, Pod Security "restricted"), the ClusterRole against
//! the operator's own rules, and the copies that must not drift (CRDs, plain manifests).
//!
//! helm comes from `BULWARK_HELM_BIN` (a directory, exported by `scripts/test.sh`) or else from
//! `tests/helm/build.sh`, which builds it once into a cache outside the clone.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use bulwark_testenv::TestNamespace;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::discovery::Scope;
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::json;

const FIELD_MANAGER: &str = "bulwark-chart-tests";
const CHART: &str = "charts/mysql-operator";
const RELEASE: &str = "mysql-operator";

mod tools;

use tools::{helm_dir, repository_root};

fn helm(args: &[&str]) -> Output {
    let helm = helm_dir().join("helm");
    Command::new(&helm)
        .args(args)
        .current_dir(repository_root())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", helm.display()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `helm template mysql-operator charts/mysql-operator <args>`, which must succeed.
fn render(args: &[&str]) -> String {
    let mut all = vec!["template", RELEASE, CHART];
    all.extend_from_slice(args);
    let output = helm(&all);
    assert!(
        output.status.success(),
        "helm {} failed: {}",
        all.join(" "),
        text(&output.stderr)
    );
    text(&output.stdout)
}

fn documents(yaml: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("helm output is valid YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn kind_of(doc: &serde_yaml::Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

/// The one document of `kind`, as its typed resource.
fn only<T: serde::de::DeserializeOwned>(docs: &[serde_yaml::Value], kind: &str) -> T {
    let matching: Vec<_> = docs.iter().filter(|d| kind_of(d) == kind).collect();
    assert_eq!(matching.len(), 1, "expected one {kind}, found {matching:?}");
    serde_yaml::from_value(matching[0].clone()).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

fn env_of(deployment: &Deployment) -> BTreeMap<String, String> {
    let container = &deployment_pod(deployment).containers[0];
    container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn deployment_pod(deployment: &Deployment) -> &PodSpec {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod template spec")
}

#[test]
fn chart_passes_helm_lint() {
    for args in [
        &["lint", CHART][..],
        &["lint", "--strict", CHART],
        &[
            "lint",
            "--strict",
            CHART,
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.scrapeAnnotations=true",
        ],
    ] {
        let output = helm(args);
        assert!(
            output.status.success(),
            "helm {} failed:\n{}{}",
            args.join(" "),
            text(&output.stdout),
            text(&output.stderr)
        );
        assert!(
            text(&output.stdout).contains("0 chart(s) failed"),
            "{}",
            text(&output.stdout)
        );
    }
}

#[test]
fn values_schema_rejects_bad_values() {
    let cases = [
        ("logFormat=xml", "logFormat"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("unknownSetting=1", "unknownSetting"),
        ("image.registry=example.org", "registry"),
        ("serviceAccount.create=false", "serviceAccount/name"),
        ("metrics.serviceMonitor.interval=soon", "interval"),
        ("resources.requests.memory=lots", "memory"),
        ("backupImage.serves={mariadb-11}", "serves"),
        ("backupImages.percona-8\\.0=x", "percona-8.0"),
    ];
    for (set, named) in cases {
        let output = helm(&["template", RELEASE, CHART, "--set", set]);
        let stderr = text(&output.stderr);
        assert!(
            !output.status.success(),
            "--set {set} was accepted:\n{}",
            text(&output.stdout)
        );
        assert!(
            stderr.contains("schema") && stderr.contains(named),
            "--set {set}: the error does not name {named}: {stderr}"
        );
    }
    // A service account of one's own is fine once named.
    render(&[
        "--set",
        "serviceAccount.create=false,serviceAccount.name=ops",
    ]);
}

#[test]
fn deployment_runs_the_operator_with_the_configured_images() {
    let docs = documents(&render(&["--namespace", "ops"]));
    let deployment: Deployment = only(&docs, "Deployment");
    let spec = deployment.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("Recreate")
    );
    let pod = deployment_pod(&deployment);
    assert_eq!(pod.service_account_name.as_deref(), Some(RELEASE));
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("ghcr.io/bulwark-dev/mysql-operator:0.1.0")
    );
    assert_eq!(container.args, Some(vec!["run".to_owned()]));
    let env = env_of(&deployment);
    let expected: BTreeMap<String, String> = [
        ("MYSQL_OPERATOR_LISTEN", "0.0.0.0:8080"),
        (
            "MYSQL_OPERATOR_BACKUP_IMAGE",
            "ghcr.io/bulwark-dev/mysql-backup:0.1.0",
        ),
        (
            "MYSQL_OPERATOR_BACKUP_IMAGE_SERVES",
            "mariadb-10.11,mysql-8.4",
        ),
        (
            "MYSQL_OPERATOR_EXPORTER_IMAGE",
            "docker.io/prom/mysqld-exporter:v0.17.2",
        ),
        // The chart's default is the operator's own.
        (
            "MYSQL_OPERATOR_SERVER_IMAGE_REPOSITORIES",
            bulwark_operator::server_images::DEFAULT_REPOSITORIES,
        ),
        ("MYSQL_OPERATOR_LOG_FORMAT", "json"),
        ("MYSQL_OPERATOR_LOG", "info"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(env, expected);

    let port = &container.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("http"), 8080)
    );
    for (probe, path) in [
        (&container.liveness_probe, "/healthz"),
        (&container.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("httpGet probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into())
        );
    }
    let security = container
        .security_context
        .as_ref()
        .expect("securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    let pod_security = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(
        pod_security
            .seccomp_profile
            .as_ref()
            .map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );

    // The metrics Service reaches the pod's http port.
    let service: Service = only(&docs, "Service");
    let service_spec = service.spec.expect("service spec");
    let port = &service_spec.ports.expect("ports")[0];
    assert_eq!(port.name.as_deref(), Some("http-metrics"));
    assert_eq!(port.port, 8080);
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into()))
    );
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    for (key, value) in service_spec.selector.expect("selector") {
        assert_eq!(
            pod_labels.as_ref().and_then(|l| l.get(&key)),
            Some(&value),
            "the Service selects {key}={value}, which the pod does not carry"
        );
    }
    assert!(
        !docs.iter().any(|d| kind_of(d) == "ServiceMonitor"),
        "ServiceMonitor is off by default"
    );

    // Values reach the container.
    let docs = documents(&render(&[
        "--set",
        "image.tag=1.2.3,backupImage.repository=registry.example/backup,backupImage.tag=9.9.9,\
         exporterImage=registry.example/exporter:1,logFormat=text,logLevel=debug,\
         backupImage.serves={mariadb-10.11},backupImages.mariadb-11\\.4=registry.example/backup:9.9.9-mariadb-11.4,\
         backupImages.mysql-8\\.0=registry.example/backup:9.9.9-xtrabackup-8.0",
    ]));
    let deployment: Deployment = only(&docs, "Deployment");
    assert_eq!(
        deployment_pod(&deployment).containers[0].image.as_deref(),
        Some("ghcr.io/bulwark-dev/mysql-operator:1.2.3")
    );
    let env = env_of(&deployment);
    assert_eq!(
        env["MYSQL_OPERATOR_BACKUP_IMAGE"],
        "registry.example/backup:9.9.9"
    );
    assert_eq!(
        env["MYSQL_OPERATOR_EXPORTER_IMAGE"],
        "registry.example/exporter:1"
    );
    assert_eq!(env["MYSQL_OPERATOR_BACKUP_IMAGE_SERVES"], "mariadb-10.11");
    assert_eq!(
        env["MYSQL_OPERATOR_BACKUP_IMAGES"],
        "mariadb-11.4=registry.example/backup:9.9.9-mariadb-11.4,mysql-8.0=registry.example/backup:9.9.9-xtrabackup-8.0"
    );
    assert_eq!(env["MYSQL_OPERATOR_LOG_FORMAT"], "text");
    assert_eq!(env["MYSQL_OPERATOR_LOG"], "debug");
}

#[test]
fn service_monitor_selects_the_metrics_service() {
    let docs = documents(&render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.labels.release=prom,\
         metrics.scrapeAnnotations=true",
    ]));
    let monitor = docs
        .iter()
        .find(|d| kind_of(d) == "ServiceMonitor")
        .expect("ServiceMonitor rendered when enabled");
    assert_eq!(
        monitor["metadata"]["labels"]["release"].as_str(),
        Some("prom")
    );
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"].as_str(),
        Some("http-metrics")
    );
    let service: Service = only(&docs, "Service");
    let service_labels = service.metadata.labels.clone().unwrap_or_default();
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("matchLabels");
    for (key, value) in selector {
        let (key, value) = (key.as_str().expect("key"), value.as_str().expect("value"));
        assert_eq!(
            service_labels.get(key).map(String::as_str),
            Some(value),
            "the ServiceMonitor selects {key}={value}, which the Service does not carry"
        );
    }
    let annotations = service.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("prometheus.io/scrape").map(String::as_str),
        Some("true")
    );
}

#[test]
fn cluster_role_grants_exactly_the_operators_rules() {
    let docs = documents(&render(&["--namespace", "ops"]));
    let role: ClusterRole = only(&docs, "ClusterRole");
    assert_eq!(
        role.rules.unwrap_or_default(),
        bulwark_operator::rbac::cluster_role_rules(),
        "charts/mysql-operator/templates/clusterrole.yaml must list \
         bulwark_operator::rbac::cluster_role_rules() (crates/operator/src/rbac.rs), in order"
    );
    let binding: ClusterRoleBinding = only(&docs, "ClusterRoleBinding");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    let subjects = binding.subjects.expect("subjects");
    assert_eq!(subjects.len(), 1);
    let account: ServiceAccount = only(&docs, "ServiceAccount");
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(Some(&subjects[0].name), account.metadata.name.as_ref());
    assert_eq!(subjects[0].namespace.as_deref(), Some("ops"));
}

#[test]
fn a_namespaced_install_grants_the_same_rules_in_each_watched_namespace_only() {
    let docs = documents(&render(&[
        "--namespace",
        "ops",
        "--set",
        "watchNamespaces={shop,billing}",
    ]));
    assert!(
        !docs
            .iter()
            .any(|d| kind_of(d) == "ClusterRole" || kind_of(d) == "ClusterRoleBinding"),
        "no cluster-wide permission in namespaced mode"
    );
    let of_kind = |kind: &str| -> Vec<serde_yaml::Value> {
        docs.iter()
            .filter(|d| kind_of(d) == kind)
            .cloned()
            .collect()
    };
    let roles: Vec<Role> = of_kind("Role")
        .into_iter()
        .map(|d| serde_yaml::from_value(d).unwrap())
        .collect();
    let bindings: Vec<RoleBinding> = of_kind("RoleBinding")
        .into_iter()
        .map(|d| serde_yaml::from_value(d).unwrap())
        .collect();
    let namespaces = |metas: Vec<Option<String>>| -> Vec<String> {
        metas.into_iter().map(Option::unwrap_or_default).collect()
    };
    assert_eq!(
        namespaces(roles.iter().map(|r| r.metadata.namespace.clone()).collect()),
        ["shop", "billing"]
    );
    assert_eq!(
        namespaces(
            bindings
                .iter()
                .map(|b| b.metadata.namespace.clone())
                .collect()
        ),
        ["shop", "billing"]
    );
    let account: ServiceAccount = only(&docs, "ServiceAccount");
    for (role, binding) in roles.iter().zip(&bindings) {
        assert_eq!(
            role.rules.clone().unwrap_or_default(),
            bulwark_operator::rbac::cluster_role_rules()
        );
        assert_eq!(
            (binding.role_ref.kind.as_str(), Some(&binding.role_ref.name)),
            ("Role", role.metadata.name.as_ref())
        );
        let subjects = binding.subjects.clone().expect("subjects");
        assert_eq!(
            (Some(&subjects[0].name), subjects[0].namespace.as_deref()),
            (account.metadata.name.as_ref(), Some("ops"))
        );
    }
    let deployment: Deployment = only(&docs, "Deployment");
    assert_eq!(
        env_of(&deployment)["MYSQL_OPERATOR_NAMESPACES"],
        "shop,billing"
    );
}

#[test]
fn the_admission_policy_is_the_operators_for_its_service_account() {
    for args in [
        &["--namespace", "ops"][..],
        &["--namespace", "ops", "--set", "watchNamespaces={shop}"][..],
    ] {
        let docs = documents(&render(args));
        let account: ServiceAccount = only(&docs, "ServiceAccount");
        let user = bulwark_operator::admission::service_account_user(
            "ops",
            account.metadata.name.as_deref().unwrap(),
        );
        let policy: ValidatingAdmissionPolicy = only(&docs, "ValidatingAdmissionPolicy");
        let binding: ValidatingAdmissionPolicyBinding =
            only(&docs, "ValidatingAdmissionPolicyBinding");
        let name = policy.metadata.name.clone().unwrap();
        assert_eq!(name, "mysql-operator-ops");
        let (expected, expected_binding) = bulwark_operator::admission::policy(&name, &user);
        assert_eq!(
            policy.spec, expected.spec,
            "charts/mysql-operator/templates/admissionpolicy.yaml must be \
             bulwark_operator::admission::policy() (crates/operator/src/admission.rs)"
        );
        assert_eq!(binding.spec, expected_binding.spec);
    }
    let docs = documents(&render(&[
        "--namespace",
        "ops",
        "--set",
        "admissionPolicy.enabled=false",
    ]));
    assert!(!docs
        .iter()
        .any(|d| kind_of(d).starts_with("ValidatingAdmissionPolicy")));
}

fn yaml_file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    names.sort();
    names
}

#[test]
fn chart_crds_are_the_generated_ones() {
    let root = repository_root();
    let generated = root.join("crds");
    let chart = root.join(CHART).join("crds");
    let names = yaml_file_names(&generated);
    assert!(!names.is_empty(), "no CRDs in {}", generated.display());
    let mut stale = Vec::new();
    for name in &names {
        let want = std::fs::read(generated.join(name)).expect("read generated CRD");
        if std::fs::read(chart.join(name)).ok().as_ref() != Some(&want) {
            stale.push(name.clone());
        }
    }
    assert!(
        stale.is_empty() && yaml_file_names(&chart) == names,
        "{CHART}/crds/ differs from crds/ (stale or missing: {stale:?}; chart has {:?}).\n\
         Update with: scripts/render-deploy.sh (copies crds/ into the chart, then re-renders \
         deploy/mysql-operator.yaml)",
        yaml_file_names(&chart)
    );
}

#[test]
fn plain_manifests_are_a_fresh_render() {
    let root = repository_root();
    let output = Command::new("bash")
        .arg(root.join("scripts/render-deploy.sh"))
        .arg("-")
        .env("BULWARK_HELM_BIN", helm_dir())
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/render-deploy.sh");
    assert!(
        output.status.success(),
        "scripts/render-deploy.sh failed: {}",
        text(&output.stderr)
    );
    let on_disk =
        std::fs::read_to_string(root.join("deploy/mysql-operator.yaml")).unwrap_or_default();
    assert!(
        on_disk == text(&output.stdout),
        "deploy/mysql-operator.yaml is out of date with {CHART}.\n\
         Regenerate with: scripts/render-deploy.sh"
    );
    // What it installs: its namespace first, then the CRDs, then the chart's objects.
    let docs = documents(&on_disk);
    let kinds: Vec<&str> = docs.iter().map(kind_of).collect();
    assert_eq!(kinds.first(), Some(&"Namespace"));
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "CustomResourceDefinition")
            .count(),
        yaml_file_names(&root.join("crds")).len()
    );
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Service",
        "Deployment",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
}

async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = bulwark_testenv::client().await.expect("control plane");
    let namespace = TestNamespace::create(&client, prefix)
        .await
        .expect("test namespace");
    (client, namespace)
}

/// The rendered objects other than CRDs (which the test environment has installed already).
fn rendered_objects(namespace: &str) -> Vec<DynamicObject> {
    documents(&render(&["--namespace", namespace]))
        .into_iter()
        .filter(|doc| kind_of(doc) != "CustomResourceDefinition")
        .map(|doc| serde_yaml::from_value(doc).expect("a Kubernetes object"))
        .collect()
}

/// An API for `object`'s kind, namespaced or cluster-wide as the API server says.
async fn api_for(client: &Client, namespace: &str, object: &DynamicObject) -> Api<DynamicObject> {
    let types = object.types.as_ref().expect("apiVersion and kind");
    let gvk = GroupVersionKind::try_from(types).expect("valid apiVersion");
    let (resource, capabilities): (ApiResource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discover {}: {e}", types.kind));
    match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
    }
}

#[tokio::test]
async fn rendered_objects_pass_server_side_dry_run() {
    let (client, namespace) = setup("chart-dry-run").await;
    let objects = rendered_objects(namespace.name());
    let mut applied = Vec::new();
    for object in &objects {
        let name = object.metadata.name.clone().expect("metadata.name");
        let kind = object
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let result = api_for(&client, namespace.name(), object)
            .await
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).dry_run(),
                &Patch::Apply(object),
            )
            .await;
        match result {
            Ok(_) => applied.push(kind),
            Err(e) => panic!("server-side dry-run apply of {kind} {name} failed: {e}"),
        }
    }
    applied.sort();
    assert_eq!(
        applied,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    namespace.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn operator_pod_is_admitted_under_restricted_pod_security() {
    let (client, namespace) = setup("chart-pod-security").await;
    let ns = namespace.name();
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": ns,
                    "labels": { "pod-security.kubernetes.io/enforce": "restricted" },
                },
            })),
        )
        .await
        .expect("label namespace restricted");

    let docs = documents(&render(&["--namespace", ns]));
    // Pod admission looks the service account up, so this one is created for real.
    let account: ServiceAccount = only(&docs, "ServiceAccount");
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("create the operator's ServiceAccount");
    let deployment: Deployment = only(&docs, "Deployment");
    let template = deployment.spec.expect("spec").template;
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("operator".to_owned()),
            labels: template.metadata.and_then(|m| m.labels),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        ..Pod::default()
    };
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    if let Err(e) = pods.create(&dry_run, &pod).await {
        panic!("the operator pod is not admitted under Pod Security \"restricted\": {e}");
    }

    // The same pod without its hardening is refused, so the check above is real.
    let mut weakened = pod.clone();
    if let Some(spec) = weakened.spec.as_mut() {
        spec.security_context = None;
        for container in &mut spec.containers {
            container.security_context = None;
        }
    }
    let err = pods
        .create(&dry_run, &weakened)
        .await
        .expect_err("a pod without securityContext violates restricted");
    assert!(
        err.to_string().contains("restricted"),
        "unexpected rejection: {err}"
    );
    namespace.delete().await.expect("delete namespace");
}
