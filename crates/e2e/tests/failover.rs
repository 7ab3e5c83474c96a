//! Automatic failover on the real node, in a test binary of its own that runs alone
//! (`scripts/e2e.sh`: it cordons the primary's node, which would hold the pods of any test
//! running beside it): under a steady writer the primary's pod is
//! force-deleted (no grace, as on a lost node) and cannot come back; a replica is promoted, writes
//! resume through the primary Service, and every acknowledged row is on the new primary. Once the
//! node takes pods again, the old primary's pod returns as a replica of the new one, with every
//! row.

use std::time::{Duration, Instant};

use bulwark_e2e::{
    apply, get_json, kubectl_ok, operator, secret_value, sql, wait_for, wait_promoted, wait_ready,
    wait_takes_writes, writer, Namespace,
};

/// Cordons a node for its lifetime.
struct Cordoned(String);

impl Cordoned {
    /// The node `pod` runs on (its volume is bound there, so its pod can come back nowhere else).
    fn node_of(n: &str, pod: &str) -> Cordoned {
        let node = get_json(n, &format!("pod/{pod}")).expect("the pod")["spec"]["nodeName"]
            .as_str()
            .expect("a node")
            .to_owned();
        kubectl_ok(&["cordon", &node]);
        Cordoned(node)
    }
}

impl Drop for Cordoned {
    fn drop(&mut self) {
        let _ = bulwark_e2e::try_kubectl(&["uncordon", &self.0]);
    }
}

fn status_field(n: &str, field: &str) -> serde_json::Value {
    get_json(n, "mysqlcluster/surge")
        .map(|c| c["status"][field].clone())
        .unwrap_or_default()
}

#[test]
fn a_lost_primary_is_replaced_by_a_replica_and_no_acknowledged_row_is_lost() {
    operator();
    let ns = Namespace::create("e2e-failover");
    let n = ns.0.as_str();
    apply(
        n,
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: surge}\n\
         spec: {engine: mariadb, version: \"10.11\", replicas: 3, storage: {size: 1Gi}, \
         replication: {failoverAfterSeconds: 10}}\n",
    );
    wait_ready(n, "surge", 3, "the cluster to become Ready");
    let password = secret_value(n, "surge-credentials", "root");
    writer::create_table(n, "surge-0", &password, "surge-primary");

    let child = writer::start(n, "surge-2", &password, "surge-primary", 90);
    std::thread::sleep(Duration::from_secs(10));
    // The node takes no new pod: the primary's pod, once deleted, stays away (a lost node).
    // Deleted at once, without the grace in which a deleted primary hands its role over.
    let cordon = Cordoned::node_of(n, "surge-0");
    let lost = Instant::now();
    kubectl_ok(&[
        "delete",
        "pod",
        "-n",
        n,
        "surge-0",
        "--grace-period=0",
        "--force",
        "--wait=false",
    ]);
    let new_primary = wait_promoted(n, "surge", "surge-0");
    bulwark_e2e::figure!(
        "{new_primary} promoted {:.1}s after the primary's pod was deleted",
        lost.elapsed().as_secs_f64()
    );
    let record = status_field(n, "lastFailover");
    assert_eq!(record["from"], "surge-0", "{record}");
    assert_eq!(record["to"], new_primary.as_str(), "{record}");
    wait_takes_writes(n, &new_primary, &password, "surge-primary");
    bulwark_e2e::figure!(
        "writes through surge-primary land on {new_primary} {:.1}s after the pod was deleted",
        lost.elapsed().as_secs_f64()
    );

    let outcome = writer::finish(child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    bulwark_e2e::figure!(
        "writes paused {:.1}s at most (writer tries every 0.2s), {} attempts refused",
        outcome.longest_gap,
        outcome.refused
    );
    let stored = outcome.assert_none_lost(n, &new_primary, &password, "surge-primary");

    // The node takes pods again: the old primary's pod returns as a replica, with every row.
    drop(cordon);
    wait_ready(n, "surge", 3, "the old primary back as a replica");
    let pod = get_json(n, "pod/surge-0").expect("pod 0");
    assert_eq!(
        pod["metadata"]["labels"]["mysql.bulwark.dev/role"],
        "replica"
    );
    let total = stored.lines().count().to_string();
    wait_for(
        n,
        "every row on the old primary",
        Duration::from_secs(60),
        || {
            sql(
                n,
                "surge-0",
                &password,
                "localhost",
                "SELECT COUNT(*), @@read_only FROM ledger.acks",
            )
            .and_then(|out| {
                let f: Vec<&str> = out.split_whitespace().collect();
                (f.first() == Some(&total.as_str()))
                    .then_some(())
                    .ok_or(out)
            })
        },
    );
}
