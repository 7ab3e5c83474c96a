//! A primary whose mysqld keeps crashing while its pod, and its agent, stay: under a steady
//! writer (in a client pod of its own) the primary's server is killed over and over from the
//! host, so that it is down for longer than the failover time; a replica is promoted, writes
//! resume through the primary Service, and every acknowledged row is on the new primary. The
//! old primary's agent was given its demotion while its server was down, so once the killing
//! stops its server comes back read-only: a replica of the new primary, or, when it had logged
//! a commit that no replica acknowledged before it died, named in the status as holding
//! transactions the primary lacks. Never writable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulwark_e2e::node::{keep_killing, server_pod};
use bulwark_e2e::{
    apply, get_json, operator, pod_uid, secret_value, sql, wait_for, wait_promoted, wait_ready,
    wait_takes_writes, writer, Namespace,
};

fn status(n: &str) -> serde_json::Value {
    get_json(n, "mysqlcluster/ember")
        .map(|c| c["status"].clone())
        .unwrap_or_default()
}

#[test]
fn a_primary_whose_server_keeps_crashing_is_replaced_and_comes_back_read_only() {
    operator();
    let ns = Namespace::create("e2e-crash");
    let n = ns.0.as_str();
    apply(
        n,
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: ember}\n\
         spec: {engine: mariadb, version: \"10.11\", replicas: 3, storage: {size: 1Gi}, \
         replication: {failoverAfterSeconds: 10}}\n",
    );
    wait_ready(n, "ember", 3, "the cluster to become Ready");
    let password = secret_value(n, "ember-credentials", "root");
    writer::create_table(n, "ember-0", &password, "ember-primary");
    let uid = server_pod(n, "ember-0");

    let child = writer::start_in_client(n, &password, "ember-primary", 300);
    std::thread::sleep(Duration::from_secs(8));
    let stop = Arc::new(AtomicBool::new(false));
    let killing = keep_killing(uid.clone(), stop.clone());
    let crashed = Instant::now();
    let new_primary = wait_promoted(n, "ember", "ember-0");
    bulwark_e2e::figure!(
        "{new_primary} promoted {:.1}s after the primary's server first crashed",
        crashed.elapsed().as_secs_f64()
    );
    let record = status(n)["lastFailover"].clone();
    assert_eq!(record["from"], "ember-0", "{record}");
    wait_takes_writes(n, &new_primary, &password, "ember-primary");
    // The demotion reaches the old primary's agent while its server is still down (and kept
    // killed): it is what keeps the server read-only when it returns, whatever the labels file
    // the kubelet refreshes later says.
    let epoch = status(n)["epoch"].as_u64().expect("an epoch");
    let accepted =
        format!("\"message\":\"role order accepted\",\"role\":\"replica\",\"epoch\":{epoch}");
    wait_for(
        n,
        "the old primary's agent to accept its demotion",
        Duration::from_secs(30),
        || {
            let logs = bulwark_e2e::try_kubectl(&["logs", "-n", n, "ember-0", "-c", "agent"])?;
            logs.contains(&accepted)
                .then_some(())
                .ok_or_else(|| format!("no {accepted} in the agent's log"))
        },
    );
    // A few more seconds down, then the server may come back (after the kubelet's back-off).
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let kills = killing.join().expect("killer");
    bulwark_e2e::figure!("the old primary's server was killed {kills} times");
    assert_eq!(pod_uid(n, "ember-0"), uid, "the pod itself was replaced");

    // The old primary's server returns read-only: a replica with every row, or named as
    // holding a commit that nobody acknowledged.
    let needle = format!("ember-0 has transactions {new_primary} lacks");
    let rejoined = wait_for(
        n,
        "the old primary back as a replica, or named as diverged",
        Duration::from_secs(300),
        || {
            let st = status(n);
            let ready = bulwark_e2e::condition(&st, "Ready");
            let message = ready["message"].as_str().unwrap_or_default();
            if message.contains(&needle) {
                return Ok(false);
            }
            (ready["status"] == "True" && st["readyReplicas"] == 3)
                .then_some(true)
                .ok_or_else(|| message.to_owned())
        },
    );
    let read_only = sql(n, "ember-0", &password, "localhost", "SELECT @@read_only")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read_only.trim(), "1", "the old primary is writable");
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    bulwark_e2e::figure!(
        "writes paused {:.1}s at most (writer tries every 0.2s), {} attempts refused",
        outcome.longest_gap,
        outcome.refused
    );
    outcome.assert_none_lost(n, &new_primary, &password, "ember-primary");
    if rejoined {
        wait_ready(
            n,
            "ember",
            3,
            "the cluster Ready with the old primary as a replica",
        );
        // The writer has stopped, so the two servers must come to hold the same rows. While
        // they differ, say how: the ids only one holds and both GTID histories.
        let rows = |pod: &str| -> Result<(std::collections::BTreeSet<u64>, String), String> {
            let ids = sql(n, pod, &password, "localhost", "SELECT id FROM ledger.acks")?;
            let state = sql(n, pod, &password, "localhost", "SELECT @@gtid_binlog_state")?;
            Ok((
                ids.lines().filter_map(|l| l.trim().parse().ok()).collect(),
                state.trim().to_owned(),
            ))
        };
        wait_for(
            n,
            "every row of the new primary on the old one",
            Duration::from_secs(60),
            || {
                let ((theirs, their_state), (ours, our_state)) =
                    (rows(&new_primary)?, rows("ember-0")?);
                if theirs == ours {
                    return Ok(());
                }
                Err(format!(
                    "{new_primary} {} rows (gtid_binlog_state {their_state}), ember-0 {} rows \
                     (gtid_binlog_state {our_state}); only on {new_primary}: {:?}; only on \
                     ember-0: {:?}",
                    theirs.len(),
                    ours.len(),
                    theirs.difference(&ours).collect::<Vec<_>>(),
                    ours.difference(&theirs).collect::<Vec<_>>(),
                ))
            },
        );
        bulwark_e2e::figure!("the old primary rejoined as a replica with every row");
    } else {
        bulwark_e2e::figure!(
            "the old primary holds a commit nobody acknowledged; it is named in the status"
        );
    }
}
