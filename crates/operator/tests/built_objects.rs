//! Snapshots of every object the operator builds, from the small fixtures in `tests/fixtures/`
//! (names deliberately unlike the product's, so swapped names show). A change to a built
//! object changes a file under `tests/snapshots/` and is seen in review; CI fails on a
//! snapshot that was not updated (`cargo insta review`, or `INSTA_UPDATE=always` and a diff).

use std::collections::{BTreeMap, BTreeSet};

use bulwark_api::{MySQLBackup, MySQLCluster, SecretKeyReference};
use bulwark_contract::Account;
use bulwark_operator::backup::job::{self, BackupJobInput, SourcePod};
use bulwark_operator::cluster::bootstrap::RestoreSource;
use bulwark_operator::cluster::build::{self, Images};
use bulwark_operator::cluster::validate::{validate, Refs, Validated};
use bulwark_operator::credentials::credential_sources;
use bulwark_operator::names;
use bulwark_operator::storage::storage_access;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;

fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn secret(name: &str, data: &[(&str, &[u8])]) -> (String, Secret) {
    let data = data
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
        .collect();
    let s = Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(data),
        ..Secret::default()
    };
    (name.to_owned(), s)
}

/// What the full cluster refers to, present and well-formed.
fn refs() -> Refs {
    Refs {
        secrets: BTreeMap::from([
            secret("quarry-admin", &[("root-password", b"hunter2")]),
            secret(
                "quarry-key",
                &[("master", b"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")],
            ),
            secret(
                "quarry-s3",
                &[
                    ("AWS_ACCESS_KEY_ID", b"id"),
                    ("AWS_SECRET_ACCESS_KEY", b"key"),
                ],
            ),
        ]),
        claims: BTreeSet::from(["quarry-dumps".to_owned()]),
        ..Refs::default()
    }
}

fn images() -> Images {
    Images {
        agent: "registry.test/bulwark-agent:1.2.3".into(),
        exporter: "registry.test/mysqld-exporter:4.5.6".into(),
    }
}

fn validated(cluster: &MySQLCluster) -> Validated {
    validate(cluster, &refs()).unwrap_or_else(|e| panic!("fixture invalid: {e}"))
}

/// Every child of a cluster, with passwords generated deterministically.
fn children(cluster: &MySQLCluster, restore: Option<&RestoreSource>) -> Vec<serde_yaml::Value> {
    let v = validated(cluster);
    let mut n = 0;
    let secret = build::credentials_secret(cluster, &v, None, || {
        n += 1;
        format!("generated-password-{n}")
    });
    let cm = build::config_map(cluster, &v);
    let cm_name = cm.metadata.name.clone().unwrap();
    let mut out = vec![serde_yaml::to_value(&secret).unwrap()];
    out.push(serde_yaml::to_value(&cm).unwrap());
    out.push(serde_yaml::to_value(build::headless_service(cluster)).unwrap());
    for role in [names::ROLE_PRIMARY, names::ROLE_REPLICA] {
        out.push(serde_yaml::to_value(build::role_service(cluster, role)).unwrap());
    }
    out.push(serde_yaml::to_value(build::pod_disruption_budget(cluster)).unwrap());
    out.push(
        serde_yaml::to_value(build::stateful_set(
            cluster,
            &v,
            &cm_name,
            &images(),
            restore,
        ))
        .unwrap(),
    );
    out
}

#[test]
fn a_minimal_cluster() {
    let c: MySQLCluster = fixture("cluster-minimal.yaml");
    insta::assert_yaml_snapshot!(children(&c, None));
}

#[test]
fn a_full_cluster() {
    let c: MySQLCluster = fixture("cluster-full.yaml");
    insta::assert_yaml_snapshot!(children(&c, None));
}

#[test]
fn a_cluster_bootstrapped_from_a_backup() {
    let c: MySQLCluster = fixture("cluster-full.yaml");
    let backup = c.spec.backup.clone().unwrap();
    let source = RestoreSource {
        backup_id: "20261101T000000Z-0a0b0c".into(),
        storage: backup.storages[1].clone(),
        encryption: backup.encryption.clone(),
        until: None,
        until_gtid: Some("0-1-5012".into()),
    };
    let v = validated(&c);
    let set = build::stateful_set(&c, &v, "quarry-config-x", &images(), Some(&source));
    // The source is recorded, and read back whole.
    assert_eq!(
        RestoreSource::recorded(&set).as_ref(),
        Some(&source),
        "recorded restore source"
    );
    insta::assert_yaml_snapshot!(set);

    // To `latest`, a member other than the first copies the first one's data: the restore
    // container names this pod, the members and the order key's directory.
    let latest = RestoreSource {
        until: Some("latest".into()),
        until_gtid: None,
        ..source
    };
    let set = build::stateful_set(&c, &v, "quarry-config-x", &images(), Some(&latest));
    let pod = set.spec.unwrap().template.spec.unwrap();
    let restore = pod
        .init_containers
        .unwrap()
        .into_iter()
        .find(|c| c.name == "restore")
        .unwrap();
    let args = restore.args.unwrap_or_default().join(" ");
    assert!(
        args.contains("--until=latest")
            && args.contains("--pod-name=$(POD_NAME)")
            && args.contains("--peers=quarry-headless:9081")
            && args.contains("--credentials-dir=/etc/bulwark/credentials"),
        "{args}"
    );
    assert_eq!(restore.env.unwrap()[0].name, "POD_NAME");
    assert!(restore
        .volume_mounts
        .unwrap()
        .iter()
        .any(|m| m.name == "credentials" && m.read_only == Some(true)));
}

#[test]
fn the_binlog_archiver_of_a_cluster() {
    let c: MySQLCluster = fixture("cluster-archived.yaml");
    let v = validated(&c);
    let backup = c.spec.backup.clone().unwrap();
    let access = storage_access(&backup.storages[0], backup.encryption.as_ref()).unwrap();
    let d = build::binlog_archiver(
        &c,
        &v.credentials,
        &access,
        "registry.test/mysql-backup:1.2.3",
    )
    .expect("an archiving cluster has an archiver");
    insta::assert_yaml_snapshot!(d);
    let plain: MySQLCluster = fixture("cluster-minimal.yaml");
    assert!(
        build::binlog_archiver(&plain, &validated(&plain).credentials, &access, "x").is_none(),
        "no archiver without backup.binlogArchive"
    );
}

fn backup_job(fixture_name: &str) -> serde_yaml::Value {
    let c: MySQLCluster = fixture("cluster-full.yaml");
    let b: MySQLBackup = fixture(fixture_name);
    let spec = c.spec.backup.clone().unwrap();
    let storage = spec
        .storages
        .iter()
        .find(|s| s.name == b.spec.storage)
        .unwrap();
    let access = storage_access(storage, spec.encryption.as_ref()).unwrap();
    let credentials = credential_sources(&c);
    let password: &SecretKeyReference = credentials.source(Account::Backup);
    let job = job::backup_job(&BackupJobInput {
        backup: &b,
        cluster: &c,
        source: &SourcePod {
            name: "quarry-2".into(),
            node: "node-basalt".into(),
        },
        access: &access,
        password,
        image: "registry.test/mysql-backup:1.2.3",
        backup_id: "20261122T030000Z-9f3a1b",
    });
    let delete = job::delete_job(
        &b,
        "quarry",
        "20261122T030000Z-9f3a1b",
        &access,
        "registry.test/mysql-backup:1.2.3",
    );
    serde_yaml::to_value([
        serde_yaml::to_value(job).unwrap(),
        serde_yaml::to_value(delete).unwrap(),
    ])
    .unwrap()
}

#[test]
fn the_jobs_of_a_physical_backup_to_a_claim() {
    insta::assert_yaml_snapshot!(backup_job("backup-physical.yaml"));
}

#[test]
fn the_jobs_of_a_logical_backup_to_s3() {
    insta::assert_yaml_snapshot!(backup_job("backup-logical.yaml"));
}
