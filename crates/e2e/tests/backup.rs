//! Backups as real Jobs in the backup image built here: a physical and a logical backup of a
//! MariaDB cluster to a claim (bound on first use by local-path), encrypted, reach `Succeeded`
//! with sizes and GTID in their status, and pass `mysql-backup verify` run from outside the
//! cluster against the same repository (the claim's directory on the node's disk).

use bulwark_e2e::take_backup;
use bulwark_e2e::{
    apply, claim_dir, dump, operator, secret_value, sql, verify_from_outside, wait_ready, Namespace,
};

/// The base64 master key of the test cluster (32 bytes).
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

#[test]
fn physical_and_logical_backups_to_a_claim_succeed_and_verify_from_outside() {
    operator();
    let ns = Namespace::create("e2e-backup");
    let n = ns.0.as_str();
    apply(
        n,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: vault-key}}\nstringData: {{master: {KEY}}}\n---\n\
             apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: dumps}}\n\
             spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n---\n\
             apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: vault}}\n\
             spec:\n  engine: mariadb\n  version: \"10.11\"\n  replicas: 2\n  storage: {{size: 1Gi}}\n\
             \x20 backup:\n    encryption: {{keySecretRef: {{name: vault-key, key: master}}}}\n\
             \x20   storages: [{{name: shelf, pvc: {{claimName: dumps, subPath: vault}}}}]\n",
        ),
    );
    wait_ready(n, "vault", 2, "the cluster to become Ready");

    // Something to back up, and a GTID position for the backups to report.
    let password = secret_value(n, "vault-credentials", "root");
    if let Err(e) = sql(
        n,
        "vault-0",
        &password,
        "vault-primary",
        "CREATE DATABASE ledger; CREATE TABLE ledger.entries (id INT PRIMARY KEY); \
         INSERT INTO ledger.entries VALUES (1), (2), (3)",
    ) {
        dump(n);
        panic!("write through vault-primary: {e}");
    }

    for method in ["physical", "logical"] {
        let name = format!("{method}-now");
        let status = take_backup(n, "vault", &name, "shelf", method);
        let id = status["backupId"].as_str().expect("backupId").to_owned();
        // From outside the cluster: the same repository, read where the claim keeps it.
        verify_from_outside(&claim_dir(n, "dumps").join("vault"), KEY, &id);
    }
}
