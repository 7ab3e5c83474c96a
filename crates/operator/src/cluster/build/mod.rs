//! The desired children of a MySQLCluster, built from the validated spec alone (plus the images
//! already in use, so that an operator upgrade that lays the pod out as before leaves a
//! running pod template alone). Pure.

pub mod archiver;
mod pod;

use bulwark_contract::order::ORDER_KEY;
use std::collections::BTreeMap;

use bulwark_api::cluster::ServiceType;
use bulwark_api::MySQLCluster;
use bulwark_contract::paths;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::Resource;

pub use archiver::binlog_archiver;
pub use pod::{root_password_source, stateful_set};

use super::validate::Validated;
use crate::names::{self, component};

/// Images of the containers the operator adds next to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// `bulwark-agent`: init, restore and agent containers.
    pub agent: String,
    /// mysqld exporter sidecar.
    pub exporter: String,
}

/// Annotation of the server pods' template naming [`POD_LAYOUT`].
pub const POD_LAYOUT_ANNOTATION: &str = "mysql.bulwark.dev/pod-layout";

/// The version of the server pods' layout: raised when the pods must run the operator's own
/// images even though no command changed (mounts an older agent would not expect, fixes an
/// existing cluster must get, as when the server container lost the agent's secrets and the
/// agent began to refuse replayed copy requests).
pub const POD_LAYOUT: &str = "2";

/// The StatefulSet `build` makes, with the images of the running one (`existing`) when its
/// containers' commands, the server's image and the pod layout ([`POD_LAYOUT`]) stay as they
/// are: an operator upgrade then restarts no server. When an operator lays the pod out differently (flags an older agent
/// would refuse, as when the agent began to serve the exporter's metrics), or the spec changes
/// a command or the server's image (another series needs its own backup tool), the pods
/// restart anyway and run the operator's `defaults`, the images made for them. Commands and
/// images are compared rather than whole templates, which the API server fills with defaults;
/// a layout change must therefore show in a command line.
pub fn keeping_running_images(
    existing: Option<&StatefulSet>,
    defaults: &Images,
    build: impl Fn(&Images) -> StatefulSet,
) -> StatefulSet {
    let running = Images::pinned(existing, defaults);
    let kept = build(&running);
    let same = |e: &StatefulSet| commands(e) == commands(&kept) && layout(e) == layout(&kept);
    if running == *defaults || existing.is_some_and(same) {
        kept
    } else {
        build(defaults)
    }
}

/// The layout version a StatefulSet's pod template names (`None` before there was one).
fn layout(set: &StatefulSet) -> Option<String> {
    set.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(POD_LAYOUT_ANNOTATION)
        .cloned()
}

/// A container's name, image, command and arguments.
type ContainerCommand = (
    String,
    Option<String>,
    Option<Vec<String>>,
    Option<Vec<String>>,
);

/// Each container's image and command, init containers included (the kept build has the
/// running images of the operator's own containers, so only the server's can differ).
fn commands(set: &StatefulSet) -> Vec<ContainerCommand> {
    let Some(pod) = set.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return Vec::new();
    };
    pod.init_containers
        .iter()
        .flatten()
        .chain(&pod.containers)
        .map(|c| {
            (
                c.name.clone(),
                c.image.clone(),
                c.command.clone(),
                c.args.clone(),
            )
        })
        .collect()
}

impl Images {
    /// The images of the existing StatefulSet's template where it has the container, else
    /// the operator's defaults.
    pub fn pinned(existing: Option<&StatefulSet>, defaults: &Images) -> Images {
        let find = |name: &str| container_image(existing?, name);
        Images {
            agent: find("agent").unwrap_or_else(|| defaults.agent.clone()),
            exporter: find("exporter").unwrap_or_else(|| defaults.exporter.clone()),
        }
    }
}

/// The image of `set`'s container (or init container) `name`, as its template has it.
pub fn container_image(set: &StatefulSet, name: &str) -> Option<String> {
    let pod = set.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .and_then(|c| c.image.clone())
}

/// Owner reference making `cluster` the controller of a child.
pub fn owner(cluster: &MySQLCluster) -> OwnerReference {
    cluster
        .controller_owner_ref(&())
        .expect("a stored cluster has a name and uid")
}

pub(super) fn meta(cluster: &MySQLCluster, name: String, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.metadata.namespace.clone(),
        labels: Some(names::labels(cluster_name(cluster), component)),
        owner_references: Some(vec![owner(cluster)]),
        ..ObjectMeta::default()
    }
}

pub(super) fn cluster_name(cluster: &MySQLCluster) -> &str {
    cluster.metadata.name.as_deref().unwrap_or_default()
}

/// The Secret of generated values: the passwords no user's Secret gives, and the key that signs
/// the operator's role orders to the agents (always generated). Existing values are kept,
/// missing ones are generated by `generate`. Deliberately without an owner reference: the
/// volumes outlive the cluster, and a recreated cluster must still be able to log in to them.
pub fn credentials_secret(
    cluster: &MySQLCluster,
    validated: &Validated,
    existing: Option<&Secret>,
    mut generate: impl FnMut() -> String,
) -> Secret {
    let name = cluster_name(cluster);
    let keys = validated
        .credentials
        .generated(name)
        .into_iter()
        .map(|a| a.key())
        .chain([ORDER_KEY]);
    let old = existing.and_then(|s| s.data.as_ref());
    let data = keys
        .map(|key| {
            let value = old
                .and_then(|d| d.get(key))
                .filter(|v| !v.0.is_empty())
                .cloned()
                .unwrap_or_else(|| ByteString(generate().into_bytes()));
            (key.to_owned(), value)
        })
        .collect();
    let mut m = meta(
        cluster,
        names::credentials_secret(name),
        component::CREDENTIALS,
    );
    m.owner_references = None;
    Secret {
        metadata: m,
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// The my.cnf ConfigMap, named by the hash of its content.
pub fn config_map(cluster: &MySQLCluster, validated: &Validated) -> ConfigMap {
    let hash = crate::hash::short(validated.my_cnf.as_bytes());
    ConfigMap {
        metadata: meta(
            cluster,
            names::config_map(cluster_name(cluster), &hash),
            component::CONFIG,
        ),
        data: Some(BTreeMap::from([(
            paths::CONFIG_KEY.to_owned(),
            validated.my_cnf.clone(),
        )])),
        immutable: Some(true),
        ..ConfigMap::default()
    }
}

fn mysql_port() -> ServicePort {
    ServicePort {
        name: Some("mysql".to_owned()),
        port: names::MYSQL_PORT,
        target_port: Some(IntOrString::String("mysql".to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    }
}

/// The headless Service that gives each pod a DNS name, including pods that are not ready
/// (replicas must reach the primary while starting).
pub fn headless_service(cluster: &MySQLCluster) -> Service {
    let name = cluster_name(cluster);
    Service {
        metadata: meta(cluster, names::headless_service(name), component::DATABASE),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(names::selector_labels(name)),
            ports: Some(vec![mysql_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The Service of one role: `primary` (writes) or `replica` (reads).
pub fn role_service(cluster: &MySQLCluster, role: &str) -> Service {
    let name = cluster_name(cluster);
    let spec = &cluster.spec.service;
    let (svc_name, node_port) = if role == names::ROLE_PRIMARY {
        (
            names::primary_service(name),
            spec.node_ports.unwrap_or_default().write,
        )
    } else {
        (
            names::replicas_service(name),
            spec.node_ports.unwrap_or_default().read,
        )
    };
    let mut selector = names::selector_labels(name);
    selector.insert(names::ROLE_LABEL.to_owned(), role.to_owned());
    let mut port = mysql_port();
    let type_ = match spec.type_ {
        ServiceType::ClusterIP => "ClusterIP",
        ServiceType::NodePort => {
            port.node_port = Some(node_port);
            "NodePort"
        }
        ServiceType::LoadBalancer => "LoadBalancer",
    };
    let mut m = meta(cluster, svc_name, component::DATABASE);
    m.annotations = spec.annotations.clone();
    Service {
        metadata: m,
        spec: Some(ServiceSpec {
            type_: Some(type_.to_owned()),
            selector: Some(selector),
            ports: Some(vec![port]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The PodDisruptionBudget of the server pods.
pub fn pod_disruption_budget(cluster: &MySQLCluster) -> PodDisruptionBudget {
    let name = cluster_name(cluster);
    PodDisruptionBudget {
        metadata: meta(cluster, name.to_owned(), component::DATABASE),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(cluster.spec.pod_disruption_budget.max_unavailable.clone()),
            selector: Some(LabelSelector {
                match_labels: Some(names::selector_labels(name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::validate::{validate, Refs};

    fn cluster() -> MySQLCluster {
        let mut c: MySQLCluster = serde_yaml::from_str(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: ledger, namespace: accounts, uid: 1a2b}\nspec: {engine: mysql, version: '8.4', replicas: 3, storage: {size: 1Gi}, metrics: {enabled: true}}\n",
        )
        .unwrap();
        c.metadata.uid = Some("1a2b".into());
        c
    }

    /// The operator's images at an agent version and an exporter version.
    fn images(agent: &str, exporter: &str) -> Images {
        Images {
            agent: format!("bulwark/mysql-backup:{agent}"),
            exporter: format!("exporter:{exporter}"),
        }
    }

    /// `set` with `change` made to its container `name`.
    fn with_container(
        set: &StatefulSet,
        name: &str,
        change: impl Fn(&mut k8s_openapi::api::core::v1::Container),
    ) -> StatefulSet {
        let mut changed = set.clone();
        let pod = changed.spec.as_mut().and_then(|s| s.template.spec.as_mut());
        for container in pod.into_iter().flat_map(|p| p.containers.iter_mut()) {
            if container.name == name {
                change(container);
            }
        }
        changed
    }

    #[test]
    fn an_operator_upgrade_keeps_the_pod_template_of_a_running_cluster() {
        let c = cluster();
        let v = validate(&c, &Refs::default()).unwrap();
        let (old, new) = (images("0.1.0", "1"), images("0.2.0", "2"));
        let running = stateful_set(&c, &v, "ledger-config-x", &old, None);
        // The upgraded operator, with new defaults, rebuilds the same template.
        let pinned = Images::pinned(Some(&running), &new);
        assert_eq!(pinned, old);
        assert_eq!(
            stateful_set(&c, &v, "ledger-config-x", &pinned, None),
            running
        );
        // A new cluster gets the new defaults.
        assert_eq!(Images::pinned(None, &new), new);
    }

    #[test]
    fn a_template_that_changes_anyway_gets_the_operators_images() {
        let c = cluster();
        let v = validate(&c, &Refs::default()).unwrap();
        let (old, new) = (images("0.1.0", "1"), images("0.2.0", "2"));
        let build = |images: &Images| stateful_set(&c, &v, "ledger-config-x", images, None);
        let running = build(&old);
        let template_images = |s: &StatefulSet| Images::pinned(Some(s), &images("", ""));
        // Unchanged: the running images stay, nothing restarts.
        assert_eq!(keeping_running_images(Some(&running), &new, build), running);
        // A new configuration leaves the commands: the pods restart with the images they run.
        let reconfigured = |images: &Images| stateful_set(&c, &v, "ledger-config-y", images, None);
        let rebuilt = keeping_running_images(Some(&running), &new, reconfigured);
        assert_eq!(template_images(&rebuilt), old);
        // An older operator laid the pod out differently (here: no agent flags at all): the new
        // layout is not run with the old agent, which would refuse flags it does not know.
        let older_layout = with_container(&running, "agent", |c| c.args = Some(Vec::new()));
        let upgraded = keeping_running_images(Some(&older_layout), &new, build);
        assert_eq!(template_images(&upgraded), new);
        // An older layout version (here: none, as before there was one) with the same
        // commands: the pods must run the fixes of the operator's own images.
        let mut older_version = running.clone();
        if let Some(meta) = older_version
            .spec
            .as_mut()
            .and_then(|s| s.template.metadata.as_mut())
        {
            meta.annotations
                .get_or_insert_with(Default::default)
                .remove(POD_LAYOUT_ANNOTATION);
        }
        let upgraded = keeping_running_images(Some(&older_version), &new, build);
        assert_eq!(template_images(&upgraded), new);
        // The server's image changes (another version): the backup tool in the agent's image
        // must match it, so the operator's image for the series is taken.
        let older_server =
            with_container(&running, "mysqld", |c| c.image = Some("mysql:8.0".into()));
        let moved = keeping_running_images(Some(&older_server), &new, build);
        assert_eq!(template_images(&moved), new);
        // A new cluster is built with the defaults.
        assert_eq!(
            template_images(&keeping_running_images(None, &new, build)),
            new
        );
    }

    #[test]
    fn the_root_password_source_of_a_built_set_is_found_in_either_layout() {
        let c = cluster();
        let v = validate(&c, &Refs::default()).unwrap();
        let set = stateful_set(&c, &v, "ledger-config-x", &images("0.1.0", "1"), None);
        let want = Some(("ledger-credentials".to_owned(), "root".to_owned()));
        assert_eq!(root_password_source(&set), want);
        // Built before the server had a volume of its own: the shared one's root item.
        let mut older = set.clone();
        if let Some(pod) = older.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
            pod.volumes
                .get_or_insert_with(Vec::new)
                .retain(|v| v.name != "server-credentials");
        }
        assert_eq!(root_password_source(&older), want);
    }

    #[test]
    fn the_config_map_name_follows_its_content() {
        let mut c = cluster();
        let v = validate(&c, &Refs::default()).unwrap();
        let a = config_map(&c, &v).metadata.name.unwrap();
        assert_eq!(a, config_map(&c, &v).metadata.name.unwrap());
        c.spec.mysqld_config = Some([("max_connections".to_owned(), "50".to_owned())].into());
        let v2 = validate(&c, &Refs::default()).unwrap();
        assert_ne!(a, config_map(&c, &v2).metadata.name.unwrap());
    }

    #[test]
    fn mysql_pods_get_mysql_settings() {
        let c = cluster();
        let v = validate(&c, &Refs::default()).unwrap();
        let images = Images {
            agent: "a".into(),
            exporter: "e".into(),
        };
        let s = stateful_set(&c, &v, "cm", &images, None);
        let pod = s.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("docker.io/library/mysql:8.4")
        );
        assert_eq!(
            pod.containers[0].env.as_ref().unwrap()[0].name,
            "MYSQL_ROOT_PASSWORD_FILE"
        );
        let init = pod.init_containers.unwrap()[0]
            .args
            .clone()
            .unwrap()
            .join(" ");
        assert!(init.contains("--engine=mysql"), "{init}");
        assert_eq!(pod.containers[2].name, "exporter");
    }

    #[test]
    fn members_spread_over_nodes_unless_the_spec_places_them() {
        let images = Images {
            agent: "a".into(),
            exporter: "e".into(),
        };
        let affinity_of = |c: &MySQLCluster| {
            let v = validate(c, &Refs::default()).unwrap();
            stateful_set(c, &v, "cm", &images, None)
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .affinity
                .unwrap()
        };
        let spread = affinity_of(&cluster());
        let terms = spread
            .pod_anti_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(
            terms[0].pod_affinity_term.topology_key,
            "kubernetes.io/hostname"
        );
        assert_eq!(
            terms[0]
                .pod_affinity_term
                .label_selector
                .clone()
                .unwrap()
                .match_labels,
            Some(names::selector_labels("ledger"))
        );
        let mut placed = cluster();
        placed.spec.affinity = Some(serde_yaml::from_str(
            "nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: disk, operator: In, values: [ssd]}]}]}}",
        ).unwrap());
        assert_eq!(Some(affinity_of(&placed)), placed.spec.affinity);
    }

    /// The kubelet resolves a probe's named port in the probed container only: a name declared
    /// by another container leaves the probe erroring and the pod never ready.
    #[test]
    fn every_probe_port_is_one_its_container_has() {
        let c = cluster();
        let v = validate(&c, &Refs::default()).unwrap();
        let images = Images {
            agent: "a".into(),
            exporter: "e".into(),
        };
        let pod = stateful_set(&c, &v, "cm", &images, None)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let mut probes = 0;
        for container in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let declared: Vec<_> = container
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.clone(), p.container_port))
                .collect();
            for probe in [
                &container.liveness_probe,
                &container.readiness_probe,
                &container.startup_probe,
            ]
            .into_iter()
            .flatten()
            {
                probes += 1;
                let port = &probe.http_get.as_ref().expect("HTTP probe").port;
                if let IntOrString::String(name) = port {
                    assert!(
                        declared.iter().any(|(n, _)| n.as_deref() == Some(name)),
                        "{}: probe port {name} is not one of {declared:?}",
                        container.name
                    );
                }
            }
        }
        assert_eq!(probes, 2, "mysqld's liveness and readiness probes");
        let mysqld = &pod.containers[0];
        let port = &mysqld
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .port;
        assert_eq!(port, &IntOrString::Int(names::AGENT_PORT));
    }
}
