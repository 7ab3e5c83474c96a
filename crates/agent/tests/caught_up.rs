//! A replica is served only while it provably holds what its primary logged: the primary's own
//! position, read by the replica's agent each pass, against real MariaDB servers. Its receiver's
//! stream is silenced by a relay that keeps the connection open, the way a dead route or a
//! stale NAT entry leaves it: the replica then says it is 0 s behind, and must not be ready.
//! Out of reach altogether, the primary is reported so by the replica's agent within seconds,
//! while the receiver still says it runs.

mod common;

use bulwark_contract::order::RoleOrder;
use bulwark_contract::Role;
use bulwark_mysql_testkit::StallProxy;
use common::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

#[test]
fn a_replica_whose_stream_went_silent_is_not_ready_though_it_reports_0s_behind() {
    let pair = Pair::new();
    let w = pair.work.path();
    let a_port = pair.a_db.port().to_string();
    // The primary's "pod" is 127.0.0.2, reached through the relay; the "primary Service"
    // (`--primary-host`) is 127.0.0.1 on the relay's port, where nothing listens. The order
    // names the pod, as the operator's orders do after any change of primary.
    let relay = StallProxy::start_on(
        Ipv4Addr::new(127, 0, 0, 2),
        SocketAddr::from(([127, 0, 0, 1], pair.a_db.port())),
    )
    .unwrap();
    let a = member_agent(
        "quay-0",
        w,
        &pair.a_db,
        &pair.a_labels,
        &pair.creds,
        &a_port,
        &[],
    );
    // The receiver gives a silent stream up after slave_net_timeout (10 s as `init` renders
    // it, 60 s by default); a longer one keeps the window open for as long as the test looks.
    pair.b_db
        .sql("SET GLOBAL slave_net_timeout = 3600")
        .unwrap();
    let order_file = w.join("order-quay-1");
    let b = member_agent(
        "quay-1",
        w,
        &pair.b_db,
        &pair.b_labels,
        &pair.creds,
        &relay.port().to_string(),
        &[
            "--max-replica-lag",
            "3s",
            "--pod-name",
            "quay-1",
            "--order-file",
            order_file.to_str().unwrap(),
        ],
    );
    let named = RoleOrder {
        member: "quay-1".into(),
        role: Role::Replica,
        epoch: 1,
        source: Some("127.0.0.2".into()),
    }
    .sign(b"order-key");
    let (code, answer) = b.post("/role", &named);
    assert!(code == 200 || code == 202, "{code} {answer}");
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    pair.a_db
        .sql("CREATE DATABASE ledger; CREATE TABLE ledger.acks (id INT PRIMARY KEY)")
        .unwrap();
    pair.a_db.sql("INSERT INTO ledger.acks VALUES (1)").unwrap();
    wait_status(&b, &[&a], "/readyz", 200, "replicating from 127.0.0.2");
    wait_for("the first row on the replica", &[&a, &b], || {
        (scalar(&pair.b_db, "SELECT COUNT(*) FROM ledger.acks") == "1").then_some(())
    });

    relay.stall();
    let stalled = Instant::now();
    let mut id = 1;
    let mut not_ready = None;
    while stalled.elapsed() < Duration::from_secs(12) {
        id += 1;
        pair.a_db
            .sql(&format!("INSERT INTO ledger.acks VALUES ({id})"))
            .unwrap();
        let (code, body) = b.get("/readyz");
        if code == 503 && not_ready.is_none() {
            not_ready = Some((stalled.elapsed(), body));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The premise: by its own account the replica is current.
    let status = replica_status(&pair.b_db);
    assert_eq!(status["Slave_IO_Running"], "Yes", "{status:?}");
    assert_eq!(status["Slave_SQL_Running"], "Yes", "{status:?}");
    assert_eq!(status["Seconds_Behind_Master"], "0", "{status:?}");
    // (A row in flight when the relay went silent may have got through.)
    let held: u32 = scalar(&pair.b_db, "SELECT COUNT(*) FROM ledger.acks")
        .parse()
        .unwrap();
    assert!(held <= 2, "{held} rows of {id} reached the replica");
    let (after, reason) = not_ready.unwrap_or_else(|| {
        panic!(
            "the replica stayed ready while {} rows behind\n{}",
            id - 1,
            b.logs()
        )
    });
    // Three seconds of lag allowed, a pass every 200 ms.
    assert!(
        after < Duration::from_secs(6),
        "not ready only after {after:?}"
    );
    assert!(
        reason.contains("holds only what the primary had logged")
            && reason.contains("(at most 3s), though it reports 0s behind"),
        "{reason}"
    );
    // It stays out while the stream is silent.
    let (code, body) = b.get("/readyz");
    assert_eq!(code, 503, "{body}");

    // The primary's server out of reach altogether (its route dead): the receiver still says
    // it runs, and the replica's agent reports for how long it has failed to reach the
    // primary, which the operator weighs against the receiver's word.
    relay.cut();
    let status = wait_for(
        "the primary reported out of reach for 4s",
        &[&a, &b],
        || {
            let (_, body) = b.get("/status");
            let status: serde_json::Value = serde_json::from_str(&body).ok()?;
            let replication = &status["replication"];
            (replication["sourceUnreachableSeconds"].as_u64()? >= 4).then_some(status)
        },
    );
    assert_eq!(status["replication"]["io"], "running", "{status}");
}
