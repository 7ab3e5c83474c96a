//! The StatefulSet of the server pods, one function per container and per part of the pod.
//!
//! Pod layout: an `init` container (`bulwark-agent init`) renders the option files into a
//! shared directory; a `seed` container (`bulwark-agent seed`) copies a running member's data
//! into an empty data volume when the cluster has data (a scale-up, a replaced volume); with
//! `bootstrap.fromBackup` a `restore` container (`bulwark-agent restore`) restores the backup
//! into a data volume still empty (a new cluster); `mysqld` runs the server with
//! probes answered by the `agent` sidecar (`bulwark-agent run`), which also manages accounts
//! and replication from the role label and serves the metrics of `exporter` (when enabled),
//! which listens on loopback only.

use std::collections::BTreeMap;

use bulwark_api::cluster::Engine;
use bulwark_api::MySQLCluster;
use bulwark_contract::command;
use bulwark_contract::order::ORDER_KEY;
use bulwark_contract::{paths, Account};
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, EmptyDirVolumeSource, EnvVar, ExecAction, HTTPGetAction, KeyToPath,
    Lifecycle, LifecycleHandler, ObjectFieldSelector, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource,
    ResourceRequirements, SecretProjection, SecretVolumeSource, Volume, VolumeMount,
    VolumeProjection, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{cluster_name, meta, Images};
use crate::cluster::bootstrap::RestoreSource;
use crate::cluster::validate::Validated;
use crate::names::{self, component};
use crate::podspec::{self, command_container, mount, pod_name_env, restricted};
use crate::storage::StorageAccess;

/// The StatefulSet of the server pods; `restore` is the backup a bootstrapping cluster's pods
/// restore (recorded on the StatefulSet, see [`RestoreSource`]).
pub fn stateful_set(
    cluster: &MySQLCluster,
    validated: &Validated,
    config_map_name: &str,
    images: &Images,
    restore: Option<&RestoreSource>,
) -> StatefulSet {
    let spec = &cluster.spec;
    let name = cluster_name(cluster);
    let access = restore.and_then(RestoreSource::access);
    let mut metadata = meta(cluster, name.to_owned(), component::DATABASE);
    if let Some(r) = restore {
        metadata.annotations = Some(BTreeMap::from([(
            names::RESTORE_SOURCE_ANNOTATION.to_owned(),
            r.to_annotation(),
        )]));
    }
    StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.replicas),
            service_name: Some(names::headless_service(name)),
            selector: LabelSelector {
                match_labels: Some(names::selector_labels(name)),
                ..LabelSelector::default()
            },
            pod_management_policy: Some("Parallel".to_owned()),
            // The operator restarts the pods itself, replicas first and the primary only after
            // a switchover (`cluster::rollout`).
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Retain".to_owned()),
                    when_scaled: Some("Retain".to_owned()),
                },
            ),
            template: pod_template(
                cluster,
                validated,
                config_map_name,
                images,
                restore.zip(access.as_ref()),
            ),
            volume_claim_templates: Some(vec![data_claim_template(cluster)]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

fn pod_template(
    cluster: &MySQLCluster,
    validated: &Validated,
    config_map_name: &str,
    images: &Images,
    restore: Option<(&RestoreSource, &StorageAccess)>,
) -> PodTemplateSpec {
    let spec = &cluster.spec;
    let name = cluster_name(cluster);
    let mut init_containers = vec![
        init_container(cluster, images),
        seed_container(cluster, images),
    ];
    let mut volumes = volumes(cluster, validated, config_map_name);
    if let Some((source, access)) = restore {
        init_containers.push(restore_container(cluster, source, access, images));
        volumes.extend(access.volumes.iter().cloned());
    }
    let mut containers = vec![
        mysqld_container(cluster, validated),
        agent_container(cluster, images, restore.map(|(_, a)| a)),
    ];
    if spec.metrics.enabled {
        containers.push(exporter_container(images));
        // The exporter's option file, password included: in memory, mounted by init (which
        // writes it) and the exporter only.
        volumes.push(Volume {
            name: "exporter-config".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(Quantity("1Mi".to_owned())),
            }),
            ..Volume::default()
        });
        // A third-party image too: not the agent's temporary directory, where option files
        // with passwords are written.
        volumes.push(empty_dir("exporter-tmp"));
    }
    let mut labels = names::labels(name, component::DATABASE);
    labels.extend(names::selector_labels(name));
    let mut annotations = BTreeMap::from([(
        super::POD_LAYOUT_ANNOTATION.to_owned(),
        super::POD_LAYOUT.to_owned(),
    )]);
    if spec.metrics.enabled {
        annotations.extend([
            ("prometheus.io/scrape".to_owned(), "true".to_owned()),
            (
                "prometheus.io/port".to_owned(),
                names::EXPORTER_PORT.to_string(),
            ),
        ]);
    }
    let annotations = Some(annotations);
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations,
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            init_containers: Some(init_containers),
            containers,
            volumes: Some(volumes),
            affinity: Some(
                spec.affinity
                    .clone()
                    .unwrap_or_else(|| podspec::spread_over_nodes(cluster_name(cluster))),
            ),
            tolerations: spec.tolerations.clone(),
            node_selector: spec.node_selector.clone(),
            security_context: Some(podspec::server_user()),
            termination_grace_period_seconds: Some(300),
            enable_service_links: Some(false),
            // Nothing in it talks to the Kubernetes API: no token to steal.
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
    }
}

/// The pod's volumes (the data volume comes from the claim template; a restore adds its
/// storage's).
fn volumes(cluster: &MySQLCluster, validated: &Validated, config_map_name: &str) -> Vec<Volume> {
    vec![
        Volume {
            name: "config".to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: config_map_name.to_owned(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        empty_dir("conf"),
        empty_dir("run"),
        empty_dir("tmp"),
        empty_dir("server-tmp"),
        Volume {
            name: "server-files".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity(SERVER_FILES_LIMIT.to_owned())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
        credentials_volume(cluster, validated),
        server_credentials_volume(validated),
        Volume {
            name: "podinfo".to_owned(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: "labels".to_owned(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.labels".to_owned(),
                        ..ObjectFieldSelector::default()
                    }),
                    ..DownwardAPIVolumeFile::default()
                }]),
                ..DownwardAPIVolumeSource::default()
            }),
            ..Volume::default()
        },
    ]
}

/// `bulwark-agent init`: the per-pod option files.
fn init_container(cluster: &MySQLCluster, images: &Images) -> Container {
    let metrics = cluster.spec.metrics.enabled;
    let argv = command::Init::for_pod(cluster_name(cluster), cluster.spec.engine, metrics).argv();
    let mut mounts = vec![
        mount("config", paths::CONFIG_DIR, true),
        mount("conf", paths::CONF_DIR, false),
        mount("data", paths::VOLUME_ROOT, false),
        mount("tmp", podspec::TMP_DIR, false),
    ];
    if metrics {
        mounts.push(mount("credentials", paths::CREDENTIALS_DIR, true));
        mounts.push(mount("exporter-config", paths::EXPORTER_CONFIG_DIR, false));
    }
    Container {
        env: Some(vec![pod_name_env()]),
        volume_mounts: Some(mounts),
        ..command_container("init", &images.agent, argv)
    }
}

/// `bulwark-agent seed`: a running member's data into an empty data volume, from the members
/// the headless Service names.
fn seed_container(cluster: &MySQLCluster, images: &Images) -> Container {
    let argv = command::Seed::for_pod(&names::headless_service(cluster_name(cluster))).argv();
    Container {
        env: Some(vec![pod_name_env()]),
        volume_mounts: Some(vec![
            datadir_mount(),
            mount("data", paths::VOLUME_ROOT, false),
            mount("credentials", paths::CREDENTIALS_DIR, true),
            mount("tmp", podspec::TMP_DIR, false),
        ]),
        ..command_container("seed", &images.agent, argv)
    }
}

/// `bulwark-agent restore`: the backup into an empty data volume; with `latest` as the target
/// of a physical backup, members other than the first copy the first member's data instead
/// (the credentials hold the order key that signs the request).
fn restore_container(
    cluster: &MySQLCluster,
    source: &RestoreSource,
    access: &StorageAccess,
    images: &Images,
) -> Container {
    let mut restore = command::Restore::for_pod(
        access.repository.clone(),
        &source.backup_id,
        source.point_in_time(),
    );
    let mut mounts = vec![
        datadir_mount(),
        mount("data", paths::VOLUME_ROOT, false),
        mount("tmp", podspec::TMP_DIR, false),
    ];
    // Only for `latest`: other targets keep the container as it was, so an upgrade of the
    // operator does not roll the pods of every cluster once bootstrapped from a backup.
    let to_latest = source.point_in_time() == Some(command::PointInTime::Until("latest".into()));
    let env = to_latest.then(|| {
        restore = restore
            .clone()
            .in_cluster(&names::headless_service(cluster_name(cluster)));
        mounts.push(mount("credentials", paths::CREDENTIALS_DIR, true));
        vec![pod_name_env()]
    });
    mounts.extend(access.mounts.iter().cloned());
    Container {
        env,
        volume_mounts: Some(mounts),
        ..command_container("restore", &images.agent, restore.argv())
    }
}

/// The server, from the validated image; its probes are answered by the agent.
fn mysqld_container(cluster: &MySQLCluster, validated: &Validated) -> Container {
    // Both official images read the first root password from the file `*_FILE` names: the
    // password never sits in the container's environment.
    let root_env = match cluster.spec.engine {
        Engine::MariaDb => "MARIADB_ROOT_PASSWORD_FILE",
        Engine::MySql => "MYSQL_ROOT_PASSWORD_FILE",
    };
    let root_file = format!("{}/{}", paths::SERVER_CREDENTIALS_DIR, Account::Root.key());
    Container {
        name: "mysqld".to_owned(),
        image: Some(validated.server_image.clone()),
        env: Some(vec![EnvVar {
            name: root_env.to_owned(),
            value: Some(root_file),
            ..EnvVar::default()
        }]),
        ports: Some(vec![port("mysql", names::MYSQL_PORT)]),
        // The agent answers /healthz with 200 while the server is not listening yet, so a long
        // crash recovery is never cut short; only a server that accepts connections and then
        // hangs fails it.
        liveness_probe: Some(http_probe("/healthz", 10, 5, 6)),
        // `/readyz` answers from the agent's last pass, at once: probed every second, a promoted
        // replica joins the primary Service within a second of taking writes, and a member
        // that stopped keeping up leaves the Services within two.
        readiness_probe: Some(http_probe("/readyz", 1, 1, 2)),
        resources: cluster.spec.resources.clone(),
        lifecycle: Some(wait_for_handover()),
        // Nothing of the agent's: not the other accounts' passwords nor the order key, and a
        // temporary directory of its own.
        volume_mounts: Some(vec![
            datadir_mount(),
            mount("conf", paths::CONF_DIR, true),
            mount("server-credentials", paths::SERVER_CREDENTIALS_DIR, true),
            mount("server-files", paths::SERVER_FILES_DIR, false),
            mount("run", paths::RUN_DIR, false),
            mount("server-tmp", podspec::TMP_DIR, false),
        ]),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

/// `bulwark-agent run`: probes, accounts, role and replication; in a bootstrapping cluster
/// also the pending logical load and the restored GTID history, from the restore's storage.
fn agent_container(
    cluster: &MySQLCluster,
    images: &Images,
    restore: Option<&StorageAccess>,
) -> Container {
    let primary = names::primary_service(cluster_name(cluster));
    let acks = crate::cluster::config::semi_sync(&cluster.spec).agent_acks();
    let metrics = cluster.spec.metrics.enabled;
    let argv = command::Agent::for_pod(
        &primary,
        acks,
        restore.map(|a| a.repository.clone()),
        metrics,
        // A primary that may be replaced without its word must be able to fence itself.
        cluster.spec.replication.failover_after_seconds > 0,
    )
    .argv();
    let mut mounts = vec![
        mount("run", paths::RUN_DIR, false),
        mount("credentials", paths::CREDENTIALS_DIR, true),
        mount("podinfo", paths::PODINFO_DIR, true),
        mount("data", paths::VOLUME_ROOT, false),
        mount("tmp", podspec::TMP_DIR, false),
        // Copies for new members are taken from the datadir where the server has it, read-only.
        VolumeMount {
            read_only: Some(true),
            ..datadir_mount()
        },
    ];
    if let Some(a) = restore {
        mounts.extend(a.mounts.iter().cloned());
    }
    let quantity = |q: &str| Quantity(q.to_owned());
    Container {
        ports: Some(
            [
                Some(port("agent", names::AGENT_PORT)),
                Some(port("clone", names::CLONE_PORT)),
                metrics.then(|| port("metrics", names::EXPORTER_PORT)),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), quantity("10m")),
                ("memory".to_owned(), quantity("32Mi")),
            ])),
            // The backup tool of a copy for a new member runs in this container too.
            limits: Some(BTreeMap::from([("memory".to_owned(), quantity("512Mi"))])),
            ..ResourceRequirements::default()
        }),
        env: Some(vec![pod_name_env()]),
        volume_mounts: Some(mounts),
        lifecycle: Some(wait_for_handover()),
        ..command_container("agent", &images.agent, argv)
    }
}

/// The preStop hook of the server and the agent: while the agent marks its server as a
/// primary that replicas read from (`paths::HANDOVER_FILE`), the container is not stopped, so
/// the operator can hand the role over by a switchover (`plan`'s `HandOver::Deleting`) while
/// the old primary still answers; after `paths::HANDOVER_WAIT_SECONDS` it stops anyway.
fn wait_for_handover() -> Lifecycle {
    let rounds = paths::HANDOVER_WAIT_SECONDS * 5;
    let script = format!(
        "i=0; while [ -e {dir}/{file} ] && [ $i -lt {rounds} ]; do sleep 0.2; i=$((i+1)); done",
        dir = paths::RUN_DIR,
        file = paths::HANDOVER_FILE,
    );
    Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["sh".to_owned(), "-c".to_owned(), script]),
            }),
            ..LifecycleHandler::default()
        }),
        ..Lifecycle::default()
    }
}

/// mysqld_exporter, reading the server over loopback with the metrics account, whose password
/// comes from the option file `init` wrote (both the 0.14 and the 0.15+ exporters read
/// `--config.my-cnf`; the address and user flags are the 0.15+ defaults the file overrides).
/// It listens on loopback only: 0.15+ also serves `/probe?target=`, which logs in with that
/// account to any server named, so any pod able to reach it could collect the password from a
/// server of its own. The agent serves its `/metrics`, and nothing else, on the `metrics` port.
fn exporter_container(images: &Images) -> Container {
    Container {
        name: "exporter".to_owned(),
        image: Some(images.exporter.clone()),
        args: Some(vec![
            format!("--config.my-cnf={}", paths::EXPORTER_CONFIG),
            format!("--mysqld.address=127.0.0.1:{}", names::MYSQL_PORT),
            format!("--mysqld.username={}", Account::Metrics.user()),
            format!(
                "--web.listen-address=127.0.0.1:{}",
                bulwark_contract::ports::EXPORTER_LOOPBACK
            ),
        ]),
        volume_mounts: Some(vec![
            mount("exporter-tmp", podspec::TMP_DIR, false),
            mount("exporter-config", paths::EXPORTER_CONFIG_DIR, true),
        ]),
        security_context: Some(restricted()),
        ..Container::default()
    }
}

fn data_claim_template(cluster: &MySQLCluster) -> PersistentVolumeClaim {
    let storage = &cluster.spec.storage;
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".to_owned()),
            labels: Some(names::labels(cluster_name(cluster), component::DATABASE)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    storage.size.clone(),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: number,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

fn http_probe(path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            // By number: a probe's named port is looked up in the probed container (mysqld),
            // and the name belongs to the agent's container.
            port: IntOrString::Int(names::AGENT_PORT),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// The projected volume of password files, `<account>` → the Secret key that holds it, and
/// the order key from the generated Secret.
fn credentials_volume(cluster: &MySQLCluster, validated: &Validated) -> Volume {
    let generated = names::credentials_secret(cluster_name(cluster));
    let mut by_secret: BTreeMap<&str, Vec<KeyToPath>> = BTreeMap::new();
    for account in Account::ALL {
        let src = validated.credentials.source(account);
        by_secret.entry(&src.name).or_default().push(KeyToPath {
            key: src.key.clone(),
            path: account.key().to_owned(),
            mode: Some(0o400),
        });
    }
    by_secret.entry(&generated).or_default().push(KeyToPath {
        key: ORDER_KEY.to_owned(),
        path: ORDER_KEY.to_owned(),
        mode: Some(0o400),
    });
    Volume {
        name: "credentials".to_owned(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o400),
            sources: Some(
                by_secret
                    .into_iter()
                    .map(|(name, items)| VolumeProjection {
                        secret: Some(SecretProjection {
                            name: name.to_owned(),
                            items: Some(items),
                            optional: Some(false),
                        }),
                        ..VolumeProjection::default()
                    })
                    .collect(),
            ),
        }),
        ..Volume::default()
    }
}

/// The Secret and key a built StatefulSet takes root's password from: its server's own volume,
/// or (built before there was one) the root item of the shared credentials volume.
pub fn root_password_source(set: &StatefulSet) -> Option<(String, String)> {
    let volumes = set
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .volumes
        .as_ref()?;
    let own = volumes
        .iter()
        .filter(|v| v.name == "server-credentials")
        .filter_map(|v| v.secret.as_ref())
        .find_map(|s| {
            Some((
                s.secret_name.clone()?,
                s.items.as_ref()?.first()?.key.clone(),
            ))
        });
    let shared = || {
        volumes
            .iter()
            .filter(|v| v.name == "credentials")
            .filter_map(|v| v.projected.as_ref()?.sources.as_ref())
            .flatten()
            .filter_map(|p| p.secret.as_ref())
            .find_map(|s| {
                let item = s
                    .items
                    .as_ref()?
                    .iter()
                    .find(|i| i.path == Account::Root.key())?;
                Some((s.name.clone(), item.key.clone()))
            })
    };
    own.or_else(shared)
}

/// Root's password file alone, for the server container.
fn server_credentials_volume(validated: &Validated) -> Volume {
    let src = validated.credentials.source(Account::Root);
    Volume {
        name: "server-credentials".to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(src.name.clone()),
            items: Some(vec![KeyToPath {
                key: src.key.clone(),
                path: Account::Root.key().to_owned(),
                mode: Some(0o400),
            }]),
            default_mode: Some(0o400),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// Room for the files clients read and write through the server (`SELECT … INTO OUTFILE`):
/// past it the pod is evicted rather than the node's disk filled.
const SERVER_FILES_LIMIT: &str = "1Gi";

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// The data directory: the `mysql` subdirectory of the data volume.
fn datadir_mount() -> VolumeMount {
    VolumeMount {
        sub_path: Some(paths::DATADIR_SUBPATH.to_owned()),
        ..mount("data", paths::DATADIR, false)
    }
}
