//! Kubernetes API of Bulwark: the `MySQLCluster` and `MySQLBackup` custom resources of the API
//! group `mysql.bulwark.dev`, version `v1alpha1`.
//!
//! This crate holds types only, with no client or runtime. The CustomResourceDefinitions in the
//! repository's `crds/` directory are generated from these types by
//! `cargo run -p bulwark-api --bin crdgen -- crds/`; a test fails when they drift apart.

pub mod backup;
pub mod cluster;
pub mod common;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use backup::{BackupPhase, BackupProgress, MySQLBackup, MySQLBackupSpec, MySQLBackupStatus};
pub use cluster::{MySQLCluster, MySQLClusterSpec, MySQLClusterStatus};
pub use common::{BackupMethod, DeletionPolicy, LocalObjectReference, SecretKeyReference};

/// API group of every Bulwark resource.
pub const GROUP: &str = "mysql.bulwark.dev";

/// API version of the resources in this crate.
pub const VERSION: &str = "v1alpha1";

/// The CustomResourceDefinitions of this API, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![MySQLCluster::crd(), MySQLBackup::crd()]
}

/// Name of the file under `crds/` that holds a CRD: `<group>_<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// Renders a CRD as the YAML document checked in under `crds/`, with a header naming the
/// command that generates it.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    let body = serde_yaml::to_string(crd)?;
    Ok(format!("{CRD_FILE_HEADER}{body}"))
}

/// Header of every generated CRD file.
pub const CRD_FILE_HEADER: &str = "# Generated from crates/api by `cargo run -p bulwark-api --bin crdgen -- crds/`.\n# Do not edit by hand.\n";
