//! Pod Security `restricted` on the real node: in a namespace that enforces it, a cluster (with
//! its exporter), a physical backup Job and a cluster bootstrapped from that backup are all
//! admitted and run: every pod the operator creates is non-root with the runtime's seccomp
//! profile, no capability, no privilege escalation and a read-only root filesystem.

use bulwark_e2e::{
    apply, dump, kubectl_ok, operator, secret_value, sql, take_backup, wait_ready, Namespace,
};

const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

fn cluster(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: {name}}}\n\
         spec:\n  engine: mariadb\n  version: \"10.11\"\n  replicas: 2\n  storage: {{size: 1Gi}}\n\
         \x20 metrics: {{enabled: true}}\n\
         \x20 backup:\n    encryption: {{keySecretRef: {{name: fort-key, key: master}}}}\n\
         \x20   storages: [{{name: shelf, pvc: {{claimName: dumps, subPath: fort}}}}]\n{extra}"
    )
}

#[test]
fn a_restricted_namespace_runs_a_cluster_a_backup_and_a_bootstrap() {
    operator();
    let ns = Namespace::create("e2e-restricted");
    let n = ns.0.as_str();
    kubectl_ok(&[
        "label",
        "namespace",
        n,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ]);
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: fort-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: dumps}}\n\
             spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n---\n{}",
            cluster("fort", "")
        ),
    );
    wait_ready(n, "fort", 2, "the cluster to become Ready under restricted");
    let password = secret_value(n, "fort-credentials", "root");
    sql(
        n,
        "fort-0",
        &password,
        "fort-primary",
        "CREATE DATABASE keep; CREATE TABLE keep.walls (id INT PRIMARY KEY); \
         INSERT INTO keep.walls VALUES (1), (2), (3)",
    )
    .unwrap_or_else(|e| {
        dump(n);
        panic!("write: {e}")
    });

    take_backup(n, "fort", "walls", "shelf", "physical");

    apply(
        n,
        &cluster(
            "fort-copy",
            "  credentials:\n    root: {name: fort-credentials, key: root}\n\
             \x20 bootstrap:\n    fromBackup: {backupRef: {name: walls}}\n",
        ),
    );
    wait_ready(
        n,
        "fort-copy",
        2,
        "the bootstrapped cluster to become Ready under restricted",
    );
    let rows = sql(
        n,
        "fort-copy-0",
        &password,
        "fort-copy-primary",
        "SELECT COUNT(*) FROM keep.walls",
    )
    .unwrap();
    assert_eq!(rows.trim(), "3");

    // Every pod of the namespace (servers and the Job's) runs with a read-only root.
    let pods: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["get", "pods", "-n", n, "-o", "json"])).unwrap();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            pod["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        let containers = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(
                pod["spec"]["initContainers"]
                    .as_array()
                    .into_iter()
                    .flatten(),
            );
        for c in containers {
            assert_eq!(
                c["securityContext"]["readOnlyRootFilesystem"], true,
                "{name}/{}",
                c["name"]
            );
        }
    }
}
