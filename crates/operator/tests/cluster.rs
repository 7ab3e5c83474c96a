//! The MySQLCluster controller against a real control plane: the children it builds and
//! patches, the role labels, the status it writes (valid and invalid specs), bootstraps.

mod common;

use common::*;

/// CLUSTER without its NodePort Service: node ports are unique in the whole cluster, so only
/// one test at a time may ask for them.
fn plain_cluster() -> String {
    let plain = CLUSTER.replace(
        "  service:\n    type: NodePort\n    nodePorts: {write: 31406, read: 31407}\n",
        "",
    );
    assert!(!plain.contains("NodePort"), "the fixture changed: {plain}");
    plain
}

/// The server pods' template of the StatefulSet `ledger`.
fn pod_template(set: &StatefulSet) -> k8s_openapi::api::core::v1::PodSpec {
    set.spec.clone().unwrap().template.spec.unwrap()
}

/// The name of the ConfigMap the pod template mounts as its configuration.
fn config_map_of(set: &StatefulSet) -> String {
    pod_template(set)
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "config")
        .unwrap()
        .config_map
        .unwrap()
        .name
}

#[tokio::test]
async fn a_cluster_gets_owned_labelled_children() {
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
    let first_cm = config_map_of(&set);
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
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn the_server_pod_takes_secrets_from_files_never_from_its_environment() {
    let (client, ns) = setup("podspec").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    apply_yaml(&clusters, &plain_cluster()).await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    let pod = pod_template(&wait_get(&sets, "ledger").await);
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
    // The root password reaches the server as a file of a volume of its own (root's alone,
    // never the other accounts' or the order key), never as an environment value.
    let root_env = &mysqld.env.as_ref().unwrap()[0];
    assert_eq!(
        (root_env.name.as_str(), root_env.value.as_deref()),
        (
            "MARIADB_ROOT_PASSWORD_FILE",
            Some("/etc/bulwark/server-credentials/root")
        )
    );
    let server_secrets = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "server-credentials")
        .and_then(|v| v.secret.as_ref())
        .unwrap();
    let items: Vec<(&str, &str)> = server_secrets
        .items
        .iter()
        .flatten()
        .map(|i| (i.key.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        (server_secrets.secret_name.as_deref(), items),
        (Some("ledger-credentials"), vec![("root", "root")])
    );
    let mysqld_volumes: Vec<&str> = mysqld
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.name.as_str())
        .collect();
    assert!(
        !mysqld_volumes.contains(&"credentials") && !mysqld_volumes.contains(&"tmp"),
        "{mysqld_volumes:?}"
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
        command::Agent::for_pod("ledger-primary", 1, None, true, true).argv()
    );
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn members_get_role_labels_and_the_status_names_the_primary() {
    let (client, ns) = setup("roles").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    apply_yaml(&clusters, &plain_cluster()).await;
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
    ns.delete().await.expect("delete namespace");
}

#[tokio::test]
async fn spec_changes_patch_the_children_in_place() {
    let (client, ns) = setup("patch").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::namespaced(client.clone(), n);
    apply_yaml(&clusters, &plain_cluster()).await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    let set = wait_get(&sets, "ledger").await;
    let first_cm = config_map_of(&set);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    let creds = wait_get(&secrets, "ledger-credentials").await;
    // A spec change that concerns no pod (a backup storage) is reconciled without touching the
    // pod template; an operator restart or upgrade re-applies identical objects the same way.
    let generation = sets.get("ledger").await.unwrap().metadata.generation;
    let with_storage = format!(
        "{}  backup:\n    storages: [{{name: offsite, s3: {{bucket: ledger-backups}}}}]\n",
        plain_cluster()
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
    let changed = plain_cluster()
        .replace("replicas: 3", "replicas: 2")
        .replace("256M", "512M");
    apply_yaml(&clusters, &changed).await;
    let set2 = wait_for("patched statefulset", WAIT, || {
        let sets = sets.clone();
        let first_cm = first_cm.clone();
        async move {
            let s = sets.get("ledger").await.map_err(|e| e.to_string())?;
            let replicas = s.spec.as_ref().and_then(|spec| spec.replicas);
            let cm = config_map_of(&s);
            if replicas == Some(2) && cm != first_cm {
                Ok(s)
            } else {
                Err(format!("replicas {replicas:?}, config {cm}"))
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
    let new_cm = config_map_of(&set2);
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
            "secret vault named by credentials.root cannot be used: it must be a Secret of this namespace, not one the operator generated for another cluster, holding a non-empty key root-password".to_owned()
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

/// The cluster `ledger` once its Degraded condition has `status`.
async fn degraded(clusters: &Api<MySQLCluster>, status: &'static str) -> MySQLCluster {
    wait_for(&format!("Degraded={status}"), WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("ledger").await.map_err(|e| e.to_string())?;
            match condition(&c, "Degraded") {
                Some(d) if d.0 == status => Ok(c),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await
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
    degraded(&clusters, "False").await;
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
    let c = degraded(&clusters, "True").await;
    assert_eq!(owned(&c), recorded, "the invalid spec's write keeps them");
    apply_yaml(&clusters, valid).await;
    let c = degraded(&clusters, "False").await;
    assert_eq!(owned(&c), recorded, "a valid pass carries them on");
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
        command::Agent::for_pod("vault-primary", 1, Some(repository), false, true).argv()
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
