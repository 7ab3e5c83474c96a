//! Validation of a MySQLCluster beyond what the CRD's schema and CEL rules check: references to
//! Secrets, claims and backups, supported versions, schedules and configuration. Pure: the
//! referenced objects are read beforehand.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use bulwark_api::cluster::Engine;
use bulwark_api::common::BackupMethod;
use bulwark_api::{BackupPhase, MySQLBackup, MySQLCluster, SecretKeyReference};
use k8s_openapi::api::core::v1::Secret;

use crate::credentials::{self, credential_sources, Account, Credentials};
use crate::names;

/// Longest cluster name: `<name>-<ordinal>` pods carry a `controller-revision-hash` label of
/// `<name>-<10 characters>` that must fit in 63.
pub const MAX_NAME_LENGTH: usize = 45;

/// Objects a cluster refers to, read before validation. Deliberately not `Debug`: it holds
/// Secrets.
#[derive(Default, Clone)]
pub struct Refs {
    /// Referenced Secrets that exist, by name.
    pub secrets: BTreeMap<String, Secret>,
    /// Referenced PersistentVolumeClaims that exist.
    pub claims: BTreeSet<String>,
    /// The MySQLBackup named by `bootstrap.fromBackup.backupRef`, if it exists.
    pub bootstrap_backup: Option<MySQLBackup>,
    /// Whether the cluster's StatefulSet exists: its bootstrap source was resolved then and is
    /// kept from it, whatever happens to the backup object later.
    pub bootstrapped: bool,
    /// The Secret and key the existing StatefulSet takes root's password from: a copy may keep
    /// naming its source's generated Secret for it, and no other.
    pub built_root: Option<(String, String)>,
}

impl Refs {
    /// Names of the Secrets a cluster refers to.
    pub fn secret_names(cluster: &MySQLCluster) -> BTreeSet<String> {
        let spec = &cluster.spec;
        let mut names = BTreeSet::new();
        if let Some(c) = &spec.credentials {
            for r in [&c.root, &c.replication, &c.backup, &c.metrics]
                .into_iter()
                .flatten()
            {
                names.insert(r.name.clone());
            }
        }
        if let Some(b) = &spec.backup {
            if let Some(e) = &b.encryption {
                names.insert(e.key_secret_ref.name.clone());
            }
            for s in &b.storages {
                if let Some(c) = s.s3.as_ref().and_then(|s3| s3.credentials_secret.as_ref()) {
                    names.insert(c.name.clone());
                }
            }
        }
        names
    }

    /// Names of the PersistentVolumeClaims a cluster's backup storages refer to.
    pub fn claim_names(cluster: &MySQLCluster) -> BTreeSet<String> {
        cluster
            .spec
            .backup
            .iter()
            .flat_map(|b| &b.storages)
            .filter_map(|s| s.pvc.as_ref().map(|p| p.claim_name.clone()))
            .collect()
    }
}

/// A cluster that passed validation, with what was derived on the way.
#[derive(Debug, Clone)]
pub struct Validated {
    /// Image of the server container.
    pub server_image: String,
    /// Password sources.
    pub credentials: Credentials,
    /// Content of my.cnf.
    pub my_cnf: String,
}

/// Checks a cluster against the objects it refers to. The message of an invalid cluster lists
/// every problem, in a fixed order, joined by "; ".
pub fn validate(cluster: &MySQLCluster, refs: &Refs) -> Result<Validated, String> {
    let spec = &cluster.spec;
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let mut problems = Vec::new();

    // Every object name derives from the cluster's: Services need a DNS-1035 label, and pod
    // names plus the StatefulSet's revision label must stay within 63 characters.
    let dns1035 = name.len() <= MAX_NAME_LENGTH
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !dns1035 {
        problems.push(format!(
            "cluster name {name} must start with a letter, contain only a-z, 0-9 and '-', and be at most {MAX_NAME_LENGTH} characters"
        ));
    }

    if spec.image.as_deref().is_some_and(|i| i.trim().is_empty()) {
        problems.push(
            "spec.image is blank: name an image, or leave it unset for the official one".to_owned(),
        );
    }
    if let Some(v) = &spec.version {
        if spec.image.is_none() {
            if let Some(p) = check_version(spec.engine, v) {
                problems.push(p);
            }
        }
    }

    let credentials = credential_sources(cluster);
    // A copy of another cluster keeps that cluster's root password (a physical backup brings
    // its privilege tables): its root may come from the source's generated Secret, the one
    // borrowing allowed, and only from the cluster whose backup `backupRef` names (once the
    // copy was built, from what it was built with).
    let bootstrap_ref = spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.from_backup.backup_ref.as_ref());
    let root_source = match (&refs.bootstrap_backup, bootstrap_ref, refs.bootstrapped) {
        (_, Some(_), true) => refs.built_root.clone().map(Foreign::Built),
        (Some(b), Some(_), false) => Some(Foreign::Cluster(b.spec.cluster_ref.name.clone())),
        _ => None,
    };
    for account in Account::ALL {
        if let Some(r) = credentials::given(cluster, account) {
            let foreign = root_source.as_ref().filter(|_| account == Account::Root);
            let field = credentials::spec_field(account);
            if let Some(p) = check_secret_key(name, refs, r, field, foreign) {
                problems.push(p);
            }
        }
    }

    for (k, v) in spec.mysqld_config.iter().flatten() {
        if let Some(p) = super::config::check_option(k, v) {
            problems.push(p);
        }
    }
    if let Some(p) = super::config::check_semi_sync(spec) {
        problems.push(p);
    }

    if let Some(backup) = &spec.backup {
        if let Some(enc) = &backup.encryption {
            let r = &enc.key_secret_ref;
            let field = "backup.encryption.keySecretRef";
            // One message whether the key is missing or malformed: nothing about a Secret's
            // content is told beyond "not usable".
            let usable = check_secret_key(name, refs, r, field, None).is_none()
                && secret_value(refs, r).is_some_and(|raw| is_master_key(&raw));
            if !usable {
                problems.push(format!(
                    "{}; create the key with `openssl rand -base64 32`",
                    unusable(r, field, " (32 bytes, or their base64)")
                ));
            }
        }
        for s in &backup.storages {
            if let Some(secret) = s.s3.as_ref().and_then(|s3| s3.credentials_secret.as_ref()) {
                for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
                    let r = SecretKeyReference {
                        name: secret.name.clone(),
                        key: key.to_owned(),
                    };
                    let field = format!("backup.storages[{}].s3.credentialsSecret", s.name);
                    if let Some(p) = check_secret_key(name, refs, &r, &field, None) {
                        problems.push(p);
                    }
                }
            }
            if let Some(pvc) = &s.pvc {
                if !refs.claims.contains(&pvc.claim_name) {
                    problems.push(format!(
                        "persistentvolumeclaim {} of backup storage {} does not exist",
                        pvc.claim_name, s.name
                    ));
                }
            }
        }
        if backup.binlog_archive.is_some() && spec.engine == Engine::MySql {
            problems.push(
                "backup.binlogArchive needs engine MariaDB: archiving MySQL binary logs is not built yet"
                    .to_owned(),
            );
        }
        for sc in &backup.schedules {
            if let Err(e) =
                crate::schedule::plan::CronSchedule::parse(&sc.schedule, sc.time_zone.as_deref())
            {
                problems.push(format!("schedule {}: {e}", sc.name));
            }
        }
        if let Some(drills) = &backup.drills {
            if let Err(e) = crate::schedule::plan::CronSchedule::parse(
                &drills.schedule,
                drills.time_zone.as_deref(),
            ) {
                problems.push(format!("drills: {e}"));
            }
            if let Some(Err(e)) = drills
                .every_backup_within
                .as_deref()
                .map(bulwark_retention::parse_duration)
            {
                problems.push(format!("drills.everyBackupWithin: {e}"));
            }
        }
    }

    if let Some(from) = spec.bootstrap.as_ref().map(|b| &b.from_backup) {
        if let (Some(r), false) = (&from.backup_ref, refs.bootstrapped) {
            match &refs.bootstrap_backup {
                None => problems.push(format!(
                    "mysqlbackup {} named by bootstrap.fromBackup.backupRef does not exist",
                    r.name
                )),
                Some(b) => {
                    let st = b.status.clone().unwrap_or_default();
                    if st.phase != Some(BackupPhase::Succeeded) || st.backup_id.is_none() {
                        problems.push(format!(
                            "mysqlbackup {} named by bootstrap.fromBackup.backupRef has not succeeded",
                            r.name
                        ));
                    } else if b.spec.cluster_ref.name == name {
                        problems.push("bootstrap.fromBackup.backupRef names a backup of this cluster itself; restore into a new cluster".to_owned());
                    } else if st.recorded_storage.is_none() {
                        problems.push(format!(
                            "mysqlbackup {} named by bootstrap.fromBackup.backupRef does not record its storage",
                            r.name
                        ));
                    }
                }
            }
        }
        // A physical backup brings the source's privilege tables, root's password included:
        // the operator's agent could never log in with a generated one. A backup id may name a
        // physical backup, which is only known once it is read.
        let physical = match (&from.backup_ref, &refs.bootstrap_backup) {
            (Some(_), Some(b)) => b.spec.method == BackupMethod::Physical,
            (Some(_), None) => false,
            (None, _) => true,
        };
        if physical && !refs.bootstrapped && credentials::given(cluster, Account::Root).is_none() {
            problems.push(
                "bootstrap.fromBackup from a physical backup (or a backupId) keeps the source's root password: set credentials.root to a Secret holding it"
                    .to_owned(),
            );
        }
    }

    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(Validated {
        server_image: server_image(cluster),
        credentials,
        my_cnf: super::config::render(spec),
    })
}

/// The image of the server: `spec.image` fully qualified, else the engine's official image at
/// `spec.version`.
pub fn server_image(cluster: &MySQLCluster) -> String {
    let spec = &cluster.spec;
    if let Some(i) = &spec.image {
        return crate::server_images::qualified(i);
    }
    let version = spec.version.as_deref().unwrap_or("latest");
    match spec.engine {
        Engine::MariaDb => format!("docker.io/library/mariadb:{version}"),
        Engine::MySql => format!("docker.io/library/mysql:{version}"),
    }
}

fn check_version(engine: Engine, version: &str) -> Option<String> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let supported = match engine {
        Engine::MariaDb => (major, minor) >= (10, 11),
        Engine::MySql => (major, minor) == (8, 0) || (major, minor) == (8, 4),
    };
    (!supported).then(|| match engine {
        Engine::MariaDb => {
            format!("mariadb version {version} is not supported: use 10.11 or later")
        }
        Engine::MySql => format!("mysql version {version} is not supported: use 8.0 or 8.4"),
    })
}

fn secret_value(refs: &Refs, r: &SecretKeyReference) -> Option<Vec<u8>> {
    let s = refs.secrets.get(&r.name)?;
    if let Some(v) = s.data.as_ref().and_then(|d| d.get(&r.key)) {
        return Some(v.0.clone());
    }
    s.string_data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|v| v.as_bytes().to_vec())
}

/// Another cluster's generated Secret a reference may name, by its key for root's password
/// only.
enum Foreign {
    /// That of this cluster.
    Cluster(String),
    /// This Secret and key, which the cluster was built with.
    Built((String, String)),
}

/// Why the Secret key `r` cannot be used by cluster `cluster`, if it cannot: it must exist,
/// hold a non-empty value, and not be a Secret the operator generated for another cluster
/// (whose order key signs copy requests for that cluster's data) but `foreign`. The message
/// is the same whatever the reason, so that validation tells whoever edits a cluster nothing
/// about Secrets they may not read.
fn check_secret_key(
    cluster: &str,
    refs: &Refs,
    r: &SecretKeyReference,
    field: &str,
    foreign: Option<&Foreign>,
) -> Option<String> {
    let Some(secret) = refs.secrets.get(&r.name) else {
        return Some(unusable(r, field, ""));
    };
    let labels = secret.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let owner = label(names::INSTANCE_LABEL);
    let root_key = r.key == Account::Root.key();
    let allowed = match foreign {
        None => false,
        Some(Foreign::Cluster(c)) => root_key && owner == Some(c.as_str()),
        Some(Foreign::Built((name, key))) => root_key && r.name == *name && r.key == *key,
    };
    let another_clusters = label(names::MANAGED_BY_LABEL) == Some(names::MANAGED_BY)
        && owner != Some(cluster)
        && !allowed;
    let filled = secret_value(refs, r).is_some_and(|v| !v.iter().all(|b| b.is_ascii_whitespace()));
    (another_clusters || !filled).then(|| unusable(r, field, ""))
}

/// The one message for a Secret key that cannot be used, `what` saying what its value must be.
fn unusable(r: &SecretKeyReference, field: &str, what: &str) -> String {
    format!(
        "secret {} named by {field} cannot be used: it must be a Secret of this namespace, not one the operator generated for another cluster, holding a non-empty key {}{what}",
        r.name, r.key
    )
}

/// Whether `raw` is what `mysql-backup --encryption-key-file` accepts: 32 raw bytes or their
/// base64 form (surrounding whitespace ignored).
fn is_master_key(raw: &[u8]) -> bool {
    if raw.len() == 32 {
        return true;
    }
    let text = String::from_utf8_lossy(raw);
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map(|k| k.len() == 32)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn cluster(yaml: &str) -> MySQLCluster {
        serde_yaml::from_str(yaml).expect("fixture parses")
    }

    const BASE: &str = r#"
apiVersion: mysql.bulwark.dev/v1alpha1
kind: MySQLCluster
metadata: {name: ledger, namespace: accounts}
spec:
  engine: mariadb
  version: "11.4"
  storage: {size: 1Gi}
"#;

    fn secret(name: &str, kv: &[(&str, &[u8])]) -> (String, Secret) {
        let data = kv
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
            .collect();
        (
            name.to_owned(),
            Secret {
                data: Some(data),
                ..Secret::default()
            },
        )
    }

    #[test]
    fn a_plain_cluster_generates_every_password() {
        let v = validate(&cluster(BASE), &Refs::default()).unwrap();
        assert_eq!(v.server_image, "docker.io/library/mariadb:11.4");
        assert_eq!(v.credentials.generated("ledger").len(), 4);
        assert_eq!(
            v.credentials.source(Account::Backup).name,
            "ledger-credentials"
        );
    }

    #[test]
    fn problems_are_listed_in_a_fixed_order() {
        let c = cluster(&format!(
            "{BASE}  credentials:\n    root: {{name: vault, key: pw}}\n  mysqldConfig:\n    'bad key': x\n  backup:\n    encryption: {{keySecretRef: {{name: enc, key: k}}}}\n    storages:\n    - {{name: nas, pvc: {{claimName: dumps}}}}\n    schedules:\n    - {{name: nightly, schedule: '61 * * * *', storage: nas}}\n    drills: {{schedule: '0 4 * * *', timeZone: Mars/Olympus, everyBackupWithin: 3x}}\n"
        ));
        let err = validate(&c, &Refs::default()).unwrap_err();
        assert_eq!(
            err,
            "secret vault named by credentials.root cannot be used: it must be a Secret of this namespace, not one the operator generated for another cluster, holding a non-empty key pw; \
             mysqldConfig key \"bad key\" is not an option name (letters, digits, '_', '-', '.'); \
             secret enc named by backup.encryption.keySecretRef cannot be used: it must be a Secret of this namespace, not one the operator generated for another cluster, holding a non-empty key k (32 bytes, or their base64); create the key with `openssl rand -base64 32`; \
             persistentvolumeclaim dumps of backup storage nas does not exist; \
             schedule nightly: invalid cron expression \"61 * * * *\"; \
             drills: unknown time zone \"Mars/Olympus\"; \
             drills.everyBackupWithin: invalid duration \"3x\": unknown unit \"x\" (use y, m, w, d, h, min, s)"
        );
    }

    #[test]
    fn keys_and_versions_are_checked() {
        let c = cluster(&format!(
            "{BASE}  backup:\n    encryption: {{keySecretRef: {{name: enc, key: k}}}}\n    storages:\n    - {{name: nas, pvc: {{claimName: dumps}}}}\n"
        ));
        let mut refs = Refs::default();
        refs.claims.insert("dumps".into());
        refs.secrets.extend([secret("enc", &[("k", b"too short")])]);
        let err = validate(&c, &refs).unwrap_err();
        assert!(
            err.contains("holding a non-empty key k (32 bytes, or their base64)"),
            "{err}"
        );
        assert!(
            !err.contains("too short"),
            "secret values never appear: {err}"
        );
        refs.secrets.extend([secret(
            "enc",
            &[("k", b"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")],
        )]);
        assert!(validate(&c, &refs).is_ok());

        let old = cluster(
            &BASE
                .replace("engine: mariadb", "engine: mysql")
                .replace("11.4", "5.7"),
        );
        assert_eq!(
            validate(&old, &Refs::default()).unwrap_err(),
            "mysql version 5.7 is not supported: use 8.0 or 8.4"
        );
        let custom =
            cluster(&BASE.replace("version: \"11.4\"", "image: registry.local/mariadb:10.6"));
        assert_eq!(
            validate(&custom, &Refs::default()).unwrap().server_image,
            "registry.local/mariadb:10.6"
        );
    }

    #[test]
    fn a_secret_is_usable_or_not_and_the_message_never_says_why() {
        let c = cluster(&format!(
            "{BASE}  credentials:\n    root: {{name: vault, key: pw}}\n"
        ));
        let generated = |instance: &str| {
            let (name, mut s) = secret("vault", &[("pw", b"secret")]);
            s.metadata.labels = Some(
                [
                    (
                        names::MANAGED_BY_LABEL.to_owned(),
                        names::MANAGED_BY.to_owned(),
                    ),
                    (names::INSTANCE_LABEL.to_owned(), instance.to_owned()),
                ]
                .into(),
            );
            (name, s)
        };
        // (what, the Secret there, usable)
        let cases = [
            ("missing", None, false),
            (
                "no such key",
                Some(secret("vault", &[("other", b"x")])),
                false,
            ),
            ("empty", Some(secret("vault", &[("pw", b" \n")])), false),
            (
                "another cluster's generated one",
                Some(generated("quay")),
                false,
            ),
            (
                "a user's",
                Some(secret("vault", &[("pw", b"secret")])),
                true,
            ),
            ("its own generated one", Some(generated("ledger")), true),
        ];
        let mut messages = BTreeSet::new();
        for (what, present, usable) in cases {
            let mut refs = Refs::default();
            refs.secrets.extend(present);
            match validate(&c, &refs) {
                Ok(_) => assert!(usable, "{what}: accepted"),
                Err(e) => {
                    assert!(!usable, "{what}: {e}");
                    messages.insert(e);
                }
            }
        }
        assert_eq!(
            messages.len(),
            1,
            "one message for every reason: {messages:?}"
        );
        // A copy of cluster quay, from its backup: quay's root, and nothing else of quay's.
        let backup: MySQLBackup = serde_yaml::from_str(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: nightly}\nspec: {clusterRef: {name: quay}, storage: nas, method: logical}\nstatus: {phase: Succeeded, backupId: 20261101T000000Z-0a0b, recordedStorage: {name: nas, pvc: {claimName: dumps}}}\n",
        )
        .unwrap();
        let copy = |credentials: &str| {
            cluster(&format!(
                "{BASE}  credentials:\n{credentials}  bootstrap:\n    fromBackup: {{backupRef: {{name: nightly}}}}\n"
            ))
        };
        let quays = |backup: Option<MySQLBackup>, bootstrapped: bool| {
            let mut refs = Refs {
                bootstrap_backup: backup,
                bootstrapped,
                built_root: bootstrapped.then(|| ("vault".to_owned(), "root".to_owned())),
                ..Refs::default()
            };
            let (_, mut s) = generated("quay");
            s.data = Some(
                [
                    ("root".to_owned(), ByteString(b"secret".to_vec())),
                    ("orders".to_owned(), ByteString(b"key".to_vec())),
                ]
                .into(),
            );
            refs.secrets.insert("vault".to_owned(), s);
            refs
        };
        let root = "    root: {name: vault, key: root}\n";
        let orders_as_root = "    root: {name: vault, key: orders}\n";
        let backup_account = "    backup: {name: vault, key: orders}\n";
        // (what, credentials, the named backup, built already, usable)
        let cases = [
            ("its root", root, Some(backup.clone()), false, true),
            (
                "its order key as a password",
                backup_account,
                Some(backup.clone()),
                false,
                false,
            ),
            (
                "its order key as root",
                orders_as_root,
                Some(backup.clone()),
                false,
                false,
            ),
            ("its root, once built with it", root, None, true, true),
            (
                "its root, with no backup to say whose",
                root,
                None,
                false,
                false,
            ),
        ];
        for (what, credentials, named, bootstrapped, usable) in cases {
            let got = validate(&copy(credentials), &quays(named, bootstrapped));
            let refused = got
                .as_ref()
                .err()
                .is_some_and(|e| e.contains("cannot be used"));
            assert_eq!(refused, !usable, "{what}: {:?}", got.err());
        }
        // Built with quay's root, then switched to another generated Secret: refused.
        let mut built = quays(None, true);
        built.built_root = Some(("pier-credentials".to_owned(), "root".to_owned()));
        assert!(validate(&copy(root), &built)
            .unwrap_err()
            .contains("cannot be used"));
        // Another cluster's root than the backup's.
        let mut other = backup.clone();
        other.spec.cluster_ref.name = "pier".into();
        let got = validate(&copy(root), &quays(Some(other), false));
        assert!(got.unwrap_err().contains("cannot be used"));
    }

    #[test]
    fn a_bootstrap_keeping_the_source_accounts_needs_the_source_root_password() {
        let by_id = format!(
            "{BASE}  backup:\n    storages:\n    - {{name: nas, pvc: {{claimName: dumps}}}}\n  bootstrap:\n    fromBackup: {{storage: nas, backupId: 20261101T000000Z-0a0b}}\n"
        );
        let by_ref =
            format!("{BASE}  bootstrap:\n    fromBackup: {{backupRef: {{name: nightly}}}}\n");
        let root = "  credentials:\n    root: {name: source, key: root}\n";
        let backup = |method: &str| -> MySQLBackup {
            serde_yaml::from_str(&format!(
                "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {{name: nightly}}\nspec: {{clusterRef: {{name: source}}, storage: nas, method: {method}}}\nstatus: {{phase: Succeeded, backupId: 20261101T000000Z-0a0b, recordedStorage: {{name: nas, pvc: {{claimName: dumps}}}}}}\n"
            ))
            .unwrap()
        };
        let problem = "keeps the source's root password: set credentials.root";
        // (spec, method of the named backup, root given, bootstrapped already, refused)
        let cases = [
            (by_id.as_str(), None, false, false, true),
            (by_id.as_str(), None, true, false, false),
            (by_ref.as_str(), Some("physical"), false, false, true),
            (by_ref.as_str(), Some("physical"), true, false, false),
            (by_ref.as_str(), Some("logical"), false, false, false),
            // Resolved when the StatefulSet was built: nothing left to decide.
            (by_id.as_str(), None, false, true, false),
        ];
        for (spec, method, with_root, bootstrapped, refused) in cases {
            let yaml = if with_root {
                format!("{spec}{root}")
            } else {
                spec.to_owned()
            };
            let mut refs = Refs {
                bootstrap_backup: method.map(backup),
                bootstrapped,
                ..Refs::default()
            };
            refs.claims.insert("dumps".to_owned());
            refs.secrets.extend([secret("source", &[("root", b"pw")])]);
            let got = validate(&cluster(&yaml), &refs);
            assert_eq!(
                got.as_ref().err().is_some_and(|e| e.contains(problem)),
                refused,
                "{method:?} root={with_root} bootstrapped={bootstrapped}: {:?}",
                got.err()
            );
        }
    }
}
