//! Small builders of pod spec pieces shared by the StatefulSet and the Jobs.

use bulwark_contract::command::Argv;
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, SeccompProfile,
    SecurityContext, Volume, VolumeMount, WeightedPodAffinityTerm,
};

/// uid and gid of the server in both official images; the operator's containers that touch the
/// data files run as it too.
pub const SERVER_UID: i64 = 999;

/// A mount of volume `name` at `path`.
pub fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// An environment variable with a literal value.
pub fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// `POD_NAME` from the downward API.
pub fn pod_name_env() -> EnvVar {
    EnvVar {
        name: "POD_NAME".to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.name".to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// Container security of every container the operator builds: no privilege escalation, no
/// capabilities, a read-only root filesystem (what a program writes goes to a volume: the data
/// volume, the socket directory, an emptyDir at `/tmp`).
pub fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        read_only_root_filesystem: Some(true),
        ..SecurityContext::default()
    }
}

/// Where programs write their temporary files under a read-only root filesystem.
pub const TMP_DIR: &str = "/tmp";

/// The emptyDir mounted at [`TMP_DIR`] (volume name `tmp`).
pub fn tmp_volume() -> Volume {
    Volume {
        name: "tmp".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// Pod security of pods that read or write the server's files: its uid, gid and fsGroup.
pub fn server_user() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(SERVER_UID),
        run_as_group: Some(SERVER_UID),
        fs_group: Some(SERVER_UID),
        // Ownership is fixed once, not walked through a large datadir at every start.
        fs_group_change_policy: Some("OnRootMismatch".to_owned()),
        run_as_non_root: Some(true),
        // What Pod Security `restricted` requires of every pod.
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// Pods near the cluster's server pods on different nodes where the scheduler can (preferred, so
/// a cluster larger than the node count still schedules): the members' default placement
/// (`spec.affinity` replaces it), and where drills prefer to stay off the servers' nodes.
pub fn spread_over_nodes(cluster: &str) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(
                            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                                match_labels: Some(crate::names::selector_labels(cluster)),
                                ..Default::default()
                            },
                        ),
                        topology_key: "kubernetes.io/hostname".to_owned(),
                        ..PodAffinityTerm::default()
                    },
                },
            ]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// A restricted container running `argv` (the image's entrypoint is not relied on).
pub fn command_container(name: &str, image: &str, argv: Argv) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image.to_owned()),
        command: Some(vec![argv.program.to_owned()]),
        args: Some(argv.args),
        security_context: Some(restricted()),
        ..Container::default()
    }
}
