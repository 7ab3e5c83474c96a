//! The permissions the operator needs, derived from the API calls its controllers make; the
//! Helm chart's ClusterRole must grant exactly these (a test compares them).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// One rule: API group, resources and verbs.
struct Rule {
    group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
}

/// Every call the operator makes, grouped by API group and the verbs the calls need.
const RULES: &[Rule] = &[
    // Watched and read by the controllers.
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlclusters"],
        verbs: &["get", "list", "watch"],
    },
    // Watched and read; created and deleted by the scheduler; finalizer and storage record patched.
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlbackups"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // Status written by server-side apply.
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlclusters/status", "mysqlbackups/status"],
        verbs: &["patch"],
    },
    // Owner references with blockOwnerDeletion need update on the owner's finalizers.
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlclusters/finalizers", "mysqlbackups/finalizers"],
        verbs: &["update"],
    },
    // Referenced Secrets are read; the generated credentials Secret is created.
    Rule {
        group: "",
        resources: &["secrets"],
        verbs: &["get", "create", "patch"],
    },
    // my.cnf ConfigMaps: applied, watched, and old ones deleted after a rollout.
    Rule {
        group: "",
        resources: &["configmaps"],
        verbs: &["list", "watch", "create", "patch", "delete"],
    },
    // The headless, primary and replica Services.
    Rule {
        group: "",
        resources: &["services"],
        verbs: &["list", "watch", "create", "patch"],
    },
    // Server pods: role labels, readiness, restarts of a rolling change (the admission policy
    // limits deletes to server pods); backup Job pods: termination messages.
    Rule {
        group: "",
        resources: &["pods"],
        verbs: &["list", "watch", "patch", "delete"],
    },
    // Progress lines of running backups.
    Rule {
        group: "",
        resources: &["pods/log"],
        verbs: &["get"],
    },
    // Claims named by pvc storages must exist.
    Rule {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["get"],
    },
    // The server StatefulSet.
    Rule {
        group: "apps",
        resources: &["statefulsets"],
        verbs: &["get", "list", "watch", "create", "patch"],
    },
    // The binlog archiver.
    Rule {
        group: "apps",
        resources: &["deployments"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // Which pods are the archiver's: those of its Deployment's ReplicaSets.
    Rule {
        group: "apps",
        resources: &["replicasets"],
        verbs: &["list"],
    },
    // Backup and data deletion Jobs.
    Rule {
        group: "batch",
        resources: &["jobs"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // The server PodDisruptionBudget.
    Rule {
        group: "policy",
        resources: &["poddisruptionbudgets"],
        verbs: &["list", "watch", "create", "patch"],
    },
    // Events about clusters and backups.
    Rule {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
    },
];

/// The ClusterRole rules the operator needs, in a stable order.
pub fn cluster_role_rules() -> Vec<PolicyRule> {
    RULES
        .iter()
        .map(|r| PolicyRule {
            api_groups: Some(vec![r.group.to_owned()]),
            resources: Some(r.resources.iter().map(|s| (*s).to_owned()).collect()),
            verbs: r.verbs.iter().map(|s| (*s).to_owned()).collect(),
            ..PolicyRule::default()
        })
        .collect()
}
