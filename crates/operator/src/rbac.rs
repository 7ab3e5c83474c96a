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
    // Watched, read, and written by the controllers; finalizers on MySQLBackup for remote data;
    // MySQLBackup objects created and deleted by the scheduler.
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlclusters"],
        verbs: &["get", "list", "watch"],
    },
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlbackups"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlclusters/status", "mysqlbackups/status"],
        verbs: &["get", "patch"],
    },
    // Owner references with blockOwnerDeletion need update on the owner's finalizers.
    Rule {
        group: "mysql.bulwark.dev",
        resources: &["mysqlclusters/finalizers", "mysqlbackups/finalizers"],
        verbs: &["update"],
    },
    Rule {
        group: "",
        resources: &["configmaps", "secrets", "services"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // Pods: role labels; the backup controller reads Job pods' termination messages and logs.
    Rule {
        group: "",
        resources: &["pods"],
        verbs: &["get", "list", "watch", "patch"],
    },
    Rule {
        group: "",
        resources: &["pods/log"],
        verbs: &["get"],
    },
    Rule {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["get", "list", "watch"],
    },
    Rule {
        group: "apps",
        resources: &["statefulsets"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "batch",
        resources: &["jobs"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        group: "policy",
        resources: &["poddisruptionbudgets"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
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
