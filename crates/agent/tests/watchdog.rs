//! The server's own guard on the primary's lease, against a real MariaDB server: a primary
//! whose agent is killed while it holds the lease is fenced by the server itself once the
//! lease runs out (client sessions ended, read-only), stays fenced when the agent comes back
//! without a lease, and takes writes again once it is renewed. The stamp is never logged; a
//! stamp another server wrote (a copied datadir) fences nothing; a member with failover off
//! removes a leftover stamp rather than being fenced by it; a replica has no stamp and no
//! event scheduler running.

mod common;

use bulwark_contract::lease::Heartbeat;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(3);
const KEY: &[u8] = b"order-key";

fn heartbeat() -> String {
    Heartbeat {
        member: "quay-0".into(),
        epoch: 0,
        lease_ms: LEASE.as_millis() as u64,
        sent_ms: chrono::Utc::now().timestamp_millis(),
        followers: 0,
    }
    .sign(KEY)
}

/// An application's write over TCP, as an account without READ_ONLY ADMIN.
fn app_write(db: &MariaDb, id: u32) -> Result<String, String> {
    sql_tcp(
        db,
        "app",
        "app-pw",
        &format!("INSERT INTO harbor.ships VALUES ({id})"),
    )
}

/// Watches `read_only` until it is on; how long that took from `since`.
fn fenced_after(db: &MariaDb, since: Instant, agents: &[&Agent]) -> Duration {
    wait_for("the server to fence itself", agents, || {
        (read_only(db) == "1").then(|| since.elapsed())
    })
}

#[test]
fn a_primary_whose_agent_is_down_is_fenced_by_its_server_when_the_lease_runs_out() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let db = instance_server(w, "quay-0");
    let creds = credentials_with_order_key(w);
    let mut labels = Labels::new(w.join("podinfo"));
    labels.set(Some("primary"));
    let start = |name: &str, lease: bool| {
        let mut extra = vec!["--pod-name", "quay-0"];
        if lease {
            extra.push("--primary-lease");
        }
        member_agent(name, w, &db, &labels, &creds, "3306", &extra)
    };
    let a = start("a", true);
    assert_eq!(a.post("/lease", &heartbeat()).0, 200);
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    // Installed, stamped and the scheduler started, none of it logged (no transaction a
    // replica or the binlog archive would see).
    assert_eq!(scalar(&db, "SELECT @@GLOBAL.gtid_binlog_pos"), "");
    assert_eq!(scalar(&db, "SELECT @@GLOBAL.event_scheduler"), "ON");
    assert_eq!(
        scalar(
            &db,
            "SELECT CONCAT(STATUS, ' ', EVENT_COMMENT) FROM information_schema.EVENTS \
             WHERE EVENT_SCHEMA = 'mysql' AND EVENT_NAME = 'bulwark_lease_watchdog'"
        ),
        "ENABLED bulwark lease watchdog v2"
    );
    db.sql(
        "CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY); \
         CREATE USER app@'%' IDENTIFIED BY 'app-pw'; GRANT ALL ON harbor.* TO app@'%'",
    )
    .unwrap();

    // Renewed for a while: the stamp moves with the heartbeats, and nothing of it is logged.
    let logged = scalar(&db, "SELECT @@GLOBAL.gtid_binlog_pos");
    for _ in 0..4 {
        assert_eq!(a.post("/lease", &heartbeat()).0, 200);
        std::thread::sleep(Duration::from_millis(700));
    }
    assert_eq!(scalar(&db, "SELECT @@GLOBAL.gtid_binlog_pos"), logged);
    assert_eq!(
        scalar(
            &db,
            "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), ends) BETWEEN 1 AND 3 \
             FROM mysql.bulwark_lease"
        ),
        "1",
        "{}",
        a.logs()
    );

    // The agent dies holding the lease; an application stays connected and writes on.
    let mut idle = Command::new("mariadb")
        .args(["--no-defaults", "-h", "127.0.0.1", "--protocol=TCP"])
        .arg(format!("--port={}", db.port()))
        .args(["--user=app", "-e", "SELECT SLEEP(60)"])
        .env("MYSQL_PWD", "app-pw")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(a.post("/lease", &heartbeat()).0, 200);
    let last = Instant::now();
    // The stamp follows to this heartbeat's end (an agent killed before that leaves the stamp
    // of the heartbeat before: an earlier fence, never a later one).
    wait_for("the stamp at the last heartbeat's end", &[&a], || {
        let left = scalar(
            &db,
            "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), ends) FROM mysql.bulwark_lease",
        );
        let left: i128 = left.parse().unwrap_or(i128::MIN);
        let at_end = left + last.elapsed().as_micros() as i128;
        (at_end > LEASE.as_micros() as i128 - 250_000).then_some(())
    });
    drop(a);
    app_write(&db, 1).unwrap();
    let fenced = fenced_after(&db, last, &[]);
    println!(
        "figure: agent down: server read-only {:.2}s after the last heartbeat ({}s lease)",
        fenced.as_secs_f64(),
        LEASE.as_secs()
    );
    assert!(
        fenced >= LEASE - Duration::from_millis(100),
        "fenced before the lease ran out: {fenced:?}"
    );
    // The operator promotes nobody before the lease's end plus 4 s (1 s of it for the clocks).
    assert!(
        fenced < LEASE + Duration::from_millis(2_500),
        "fenced {fenced:?} after the last heartbeat"
    );
    let idle = wait_for("the application's session to be ended", &[], || {
        idle.try_wait().unwrap()
    });
    assert!(!idle.success());
    let refused = app_write(&db, 2).unwrap_err();
    assert!(refused.contains("read-only"), "{refused}");

    // The agent back without a lease: the server stays fenced. Renewed: writable again.
    let a = start("a-again", true);
    wait_status(&a, &[], "/readyz", 503, "primary, fenced");
    assert_eq!(read_only(&db), "1");
    assert_eq!(a.post("/lease", &heartbeat()).0, 200);
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    app_write(&db, 3).unwrap();

    // A stamp another server wrote (this datadir copied to it) fences nothing here.
    assert_eq!(a.post("/lease", &heartbeat()).0, 200);
    drop(a);
    db.sql(
        "SET SESSION sql_log_bin = 0; UPDATE mysql.bulwark_lease \
         SET report_host = 'quay-9.quay-headless', ends = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(read_only(&db), "0", "fenced by another server's stamp");
    app_write(&db, 4).unwrap();

    // Its own past stamp fences it; with failover turned off its agent removes the stamp
    // and the server stays writable.
    db.sql(
        "SET SESSION sql_log_bin = 0; UPDATE mysql.bulwark_lease \
         SET report_host = @@GLOBAL.report_host",
    )
    .unwrap();
    fenced_after(&db, Instant::now(), &[]);
    let a = start("a-without-failover", false);
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM mysql.bulwark_lease"), "0");
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(read_only(&db), "0", "{}", a.logs());
    app_write(&db, 5).unwrap();
    assert_eq!(
        scalar(&db, "SELECT GROUP_CONCAT(id ORDER BY id) FROM harbor.ships"),
        "1,3,4,5"
    );
    drop(a);

    // Labelled a replica with failover on: read-only, no stamp left behind, and the event
    // scheduler stopped (events a primary made would write beside replication).
    db.sql(
        "SET SESSION sql_log_bin = 0; REPLACE INTO mysql.bulwark_lease VALUES \
         (1, @@GLOBAL.report_host, @@GLOBAL.server_id, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
    )
    .unwrap();
    labels.set(Some("replica"));
    let extra = ["--pod-name", "quay-0", "--primary-lease"];
    let a = member_agent("a-replica", w, &db, &labels, &creds, "3306", &extra);
    // (The demotion's hold ends client sessions for a while, these reads' too: retried.)
    wait_for("the replica without stamp or scheduler", &[&a], || {
        let state = db
            .sql(
                "SELECT CONCAT(@@GLOBAL.read_only, ' ', @@GLOBAL.event_scheduler, ' ', \
                 (SELECT COUNT(*) FROM mysql.bulwark_lease))",
            )
            .ok()?;
        (state.trim() == "ON OFF 0").then_some(())
    });
}
