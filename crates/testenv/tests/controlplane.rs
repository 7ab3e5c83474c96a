//! Tests of the test environment itself, against the real control plane.

use std::path::Path;

use bulwark_testenv::{ControlPlane, Options, TestNamespace};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

#[tokio::test]
async fn shared_control_plane_reports_the_pinned_release() {
    let client = bulwark_testenv::client().await.expect("control plane");
    let version = client.apiserver_version().await.expect("version");
    let versions = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/controlplane/versions.env"),
    )
    .expect("versions.env");
    let pinned = versions
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .expect("K8S_VERSION in versions.env");
    assert_eq!(version.git_version, pinned);
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn crds_of_the_repository_are_established() {
    let client = bulwark_testenv::client().await.expect("control plane");
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for name in [
        "mysqlclusters.mysql.bulwark.dev",
        "mysqlbackups.mysql.bulwark.dev",
    ] {
        let crd = crds.get(name).await.expect("CRD installed");
        assert!(bulwark_testenv::crds::is_established(&crd), "{name}");
    }
}

#[tokio::test]
async fn namespaces_are_unique_and_usable() {
    let client = bulwark_testenv::client().await.expect("control plane");
    let first = TestNamespace::create(&client, "ns-check")
        .await
        .expect("namespace");
    let second = TestNamespace::create(&client, "ns-check")
        .await
        .expect("namespace");
    assert_ne!(first.name(), second.name());

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), first.name());
    let created = config_maps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("probe".to_owned()),
                    ..ObjectMeta::default()
                },
                data: Some([("k".to_owned(), "v".to_owned())].into()),
                ..ConfigMap::default()
            },
        )
        .await
        .expect("create config map");
    assert_eq!(created.metadata.namespace.as_deref(), Some(first.name()));
    first.delete().await.expect("delete namespace");
    second.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn dropping_a_control_plane_stops_it_and_removes_its_directory() {
    let control_plane = ControlPlane::start(Options::default())
        .await
        .expect("second control plane");
    let client = control_plane.client().await.expect("client");
    client.apiserver_version().await.expect("serving");
    let pids = control_plane.pids();
    let dir = control_plane.work_dir().to_path_buf();
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver, kube-controller-manager"
    );
    assert!(dir.join("kube-apiserver.log").is_file());

    drop(control_plane);

    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} still exists"
        );
    }
    assert!(!dir.exists(), "{} still exists", dir.display());
}

#[tokio::test]
async fn a_component_that_exits_fails_the_start_with_its_name() {
    use std::os::unix::fs::PermissionsExt;

    let bin = tempfile::tempdir().expect("tempdir");
    for name in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        let path = bin.path().join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"{name}: refusing to start\" >&2\nexit 3\n"),
        )
        .expect("write fake binary");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let err = ControlPlane::start(Options {
        bin_dir: Some(bin.path().to_path_buf()),
        crds_dir: None,
    })
    .await
    .expect_err("etcd exits at once");
    match err {
        bulwark_testenv::Error::Exited {
            component, status, ..
        } => {
            assert_eq!(component, "etcd");
            assert!(status.contains('3'), "{status}");
        }
        other => panic!("unexpected error: {other}"),
    }
}
