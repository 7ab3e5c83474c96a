//! Scale-up on a real node: a member added after the primary purged the binary logs that hold
//! the cluster's start is seeded with a copy of a running member's data (its `seed` container)
//! and replicates only what followed, so it becomes ready with every row. Replicating from
//! nothing, as new members did before, it stops with error 1236 and never becomes ready.

use std::time::{Duration, Instant};

use bulwark_e2e::{
    apply, dump, kubectl_ok, operator, secret_value, sql, try_kubectl, wait_for, wait_ready,
    Namespace,
};

#[test]
fn a_member_added_after_the_binary_logs_were_purged_is_seeded_and_joins() {
    operator();
    let ns = Namespace::create("e2e-scale");
    let n = ns.0.as_str();
    apply(
        n,
        "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: tern}\nspec: {engine: mariadb, version: \"10.11\", replicas: 2, storage: {size: 1Gi}}\n",
    );
    wait_ready(n, "tern", 2, "the two-member cluster to become Ready");
    let password = secret_value(n, "tern-credentials", "root");
    let primary_sql = |statement: &str| {
        sql(n, "tern-0", &password, "tern-primary", statement).unwrap_or_else(|e| {
            dump(n);
            panic!("{e}")
        })
    };
    primary_sql(
        "CREATE DATABASE ledger; CREATE TABLE ledger.entries (id INT PRIMARY KEY, note TEXT); \
         INSERT INTO ledger.entries WITH RECURSIVE s(i) AS \
         (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000) SELECT i, REPEAT('x', 200) FROM s",
    );
    // The binary log that holds the cluster's start is purged on the primary.
    let current = primary_sql("FLUSH BINARY LOGS; SHOW MASTER STATUS");
    let current = current.split_whitespace().next().expect("a binlog file");
    // A log a replica's dump thread still reads is kept: purge until it has moved on.
    wait_for(
        n,
        "the first binary log purged",
        Duration::from_secs(30),
        || {
            let first = sql(
                n,
                "tern-0",
                &password,
                "tern-primary",
                &format!("PURGE BINARY LOGS TO '{current}'; SHOW BINARY LOGS"),
            )?;
            first.starts_with(current).then_some(()).ok_or(first)
        },
    );

    let started = Instant::now();
    kubectl_ok(&[
        "patch",
        "-n",
        n,
        "mysqlcluster/tern",
        "--type=merge",
        "-p",
        "{\"spec\":{\"replicas\":3}}",
    ]);
    wait_ready(n, "tern", 3, "the third member seeded and ready");
    bulwark_e2e::figure!(
        "third member ready {:.1}s after the scale-up",
        started.elapsed().as_secs_f64()
    );
    let seeded = try_kubectl(&["logs", "-n", n, "tern-2", "-c", "seed"]).unwrap_or_default();
    assert!(
        seeded.contains("copied") && seeded.contains("the server continues from GTID"),
        "tern-2 was not seeded:\n{seeded}"
    );
    // Every row, and what follows.
    primary_sql("INSERT INTO ledger.entries VALUES (1001, 'after the scale-up')");
    wait_for(
        n,
        "every row on the new member",
        Duration::from_secs(60),
        || {
            let out = sql(
                n,
                "tern-2",
                &password,
                "localhost",
                // A scalar subquery: MariaDB 10.11 reports @@read_only as 0 next to an
                // aggregate over a table in the same SELECT.
                "SELECT (SELECT COUNT(*) FROM ledger.entries), @@global.read_only",
            )?;
            (out.split_whitespace().collect::<Vec<_>>() == ["1001", "1"])
                .then_some(())
                .ok_or(out)
        },
    );
}
