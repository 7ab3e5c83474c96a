//! Checks that need no API server: the checked-in CRDs match the types, and the example
//! manifests deserialize into the typed resources.

use std::path::{Path, PathBuf};

use bulwark_api::{crd_file_name, crd_yaml, crds, MySQLBackup, MySQLCluster};

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn checked_in_crds_match_the_types() {
    let dir = repository_root().join("crds");
    let mut stale = Vec::new();
    let mut expected_files = Vec::new();
    for crd in crds() {
        let name = crd_file_name(&crd);
        let generated = crd_yaml(&crd).expect("render CRD");
        let path = dir.join(&name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != generated {
            stale.push(path.display().to_string());
        }
        expected_files.push(name);
    }
    let mut unexpected = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("crds/ exists") {
        let name = entry
            .expect("dir entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".yaml") && !expected_files.contains(&name) {
            unexpected.push(name);
        }
    }
    assert!(
        stale.is_empty() && unexpected.is_empty(),
        "crds/ is out of date with crates/api (stale: {stale:?}, not generated: {unexpected:?}).\n\
         Regenerate with: cargo run -p bulwark-api --bin crdgen -- crds/"
    );
}

#[test]
fn crds_are_namespaced_with_status_and_short_names() {
    for crd in crds() {
        assert_eq!(crd.spec.group, bulwark_api::GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert!(crd
            .spec
            .names
            .short_names
            .as_ref()
            .is_some_and(|s| !s.is_empty()));
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, bulwark_api::VERSION);
        assert!(version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()));
        assert!(version
            .additional_printer_columns
            .as_ref()
            .is_some_and(|c| c.len() >= 5));
    }
}

#[test]
fn every_schema_property_has_a_description() {
    fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>) {
        let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
            if let Some(items) = schema.get("items") {
                walk(&format!("{path}[]"), items, missing);
            }
            return;
        };
        for (name, property) in properties {
            let child = format!("{path}.{name}");
            if property.get("description").is_none()
                && !matches!(name.as_str(), "apiVersion" | "kind" | "metadata")
            {
                missing.push(child.clone());
            }
            walk(&child, property, missing);
        }
    }
    let mut missing = Vec::new();
    for crd in crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
        walk(
            &crd.spec.names.kind,
            &schema["openAPIV3Schema"],
            &mut missing,
        );
    }
    assert!(
        missing.is_empty(),
        "properties without description: {missing:#?}"
    );
}

fn documents(path: &Path) -> Vec<serde_yaml::Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).expect("read manifest");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("valid YAML"))
        .collect()
}

#[test]
fn examples_deserialize_into_the_typed_resources() {
    let mut typed = 0;
    let dir = repository_root().join("deploy/examples");
    for entry in std::fs::read_dir(&dir).expect("deploy/examples exists") {
        let path = entry.expect("dir entry").path();
        for doc in documents(&path) {
            match doc["kind"].as_str() {
                Some("MySQLCluster") => {
                    let cluster: MySQLCluster = serde_yaml::from_value(doc)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    assert!(cluster.spec.version.is_some() || cluster.spec.image.is_some());
                    typed += 1;
                }
                Some("MySQLBackup") => {
                    let backup: MySQLBackup = serde_yaml::from_value(doc)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    assert!(!backup.spec.storage.is_empty());
                    typed += 1;
                }
                _ => {}
            }
        }
    }
    assert!(
        typed >= 3,
        "expected at least three example resources, found {typed}"
    );
}
