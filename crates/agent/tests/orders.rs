//! The operator's signed role orders against real MariaDB servers and their agents: a
//! switchover that fences the old primary before the new one writes, a demotion that reaches
//! an agent whose server is down, and an old primary's commit that nobody received, which the
//! new primary's report shows it lacks though its position is further along.

mod common;

use bulwark_contract::member::MemberStatus;
use bulwark_contract::order::RoleOrder;
use bulwark_contract::Engine;
use bulwark_contract::Role;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `role` at `epoch` for `member`, signed with `key`.
fn order(member: &str, role: Role, epoch: u64, key: &[u8]) -> String {
    RoleOrder {
        member: member.into(),
        role,
        epoch,
        source: None,
    }
    .sign(key)
}

/// A switchover by the operator's signed role orders, with the labels files left stale the
/// way a slow kubelet leaves them: the old primary is read-only, with its open client
/// sessions ended, before the new one takes writes; nothing acknowledged is lost; a stale
/// label does not undo an order, not even across an agent restart; forged, stale and
/// misaddressed orders are refused.
#[test]
fn a_switchover_by_orders_fences_the_old_primary_before_the_new_one_writes() {
    let Pair {
        work,
        a_db,
        mut b_db,
        creds: creds_s,
        mut a_labels,
        mut b_labels,
    } = Pair::new();
    let w = work.path();
    let (a_port, b_port) = (a_db.port().to_string(), b_db.port().to_string());
    let (a_orders, b_orders) = (w.join("order-a"), w.join("order-b"));
    let start = |name: &str, pod: &str, db: &MariaDb, labels: &Labels, port: &str, file: &Path| {
        let file = file.to_str().unwrap();
        member_agent(
            name,
            w,
            db,
            labels,
            &creds_s,
            port,
            &["--pod-name", pod, "--order-file", file],
        )
    };
    let a = start("a", "quay-0", &a_db, &a_labels, &b_port, &a_orders);
    let b = start("b", "quay-1", &b_db, &b_labels, &a_port, &b_orders);
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();
    for id in 1..=20 {
        a_db.sql(&format!("INSERT INTO harbor.ships VALUES ({id})"))
            .unwrap();
    }
    wait_status(&b, &[&a], "/readyz", 200, "replica: replicating");

    // Refused: another key, another member's order, an unreadable body, a GET.
    for (body, status, needle) in [
        (
            order("quay-0", Role::Replica, 1, b"other"),
            403,
            "signature",
        ),
        (
            order("quay-1", Role::Replica, 1, b"order-key"),
            403,
            "for quay-1",
        ),
        ("{".to_owned(), 400, "not readable"),
    ] {
        let (code, answer) = a.post("/role", &body);
        assert_eq!((code, answer.contains(needle)), (status, true), "{answer}");
    }
    assert_eq!(a.get("/role").0, 405);
    assert!(a_orders.metadata().is_err(), "a refused order was kept");

    // A client of the old primary holds an open transaction, as root (which MariaDB's
    // read_only does not stop).
    let mut held = Command::new("mariadb")
        .args(["--no-defaults", "--user=root", "-N", "-B", "--unbuffered"])
        .arg(format!("--socket={}", a_db.socket().display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut held_in = held.stdin.take().unwrap();
    writeln!(
        held_in,
        "BEGIN; INSERT INTO harbor.ships VALUES (1000); SELECT 'open';"
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(held.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "open");

    // Fence: the old primary is read-only and its client session is gone when it answers.
    let t = Instant::now();
    let (code, fenced) = a.post("/role", &order("quay-0", Role::Replica, 1, b"order-key"));
    let fence_time = t.elapsed();
    assert_eq!(code, 200, "{fenced}\n{}", a.logs());
    let fenced = MemberStatus::from_line(&fenced).unwrap();
    assert_eq!(
        (fenced.role, fenced.epoch, fenced.read_only),
        (Some(Role::Replica), 1, true),
        "{fenced:?}"
    );
    assert!(fenced.writes_held, "{fenced:?}");
    writeln!(held_in, "COMMIT;").unwrap();
    drop(held_in);
    let held = held.wait_with_output().unwrap();
    assert!(
        !held.status.success(),
        "the open transaction committed on the fenced primary"
    );
    assert_eq!(
        scalar(&a_db, "SELECT COUNT(*) FROM harbor.ships WHERE id = 1000"),
        "0"
    );
    // A new root session (which read_only does not stop) cannot commit while the hold lasts:
    // it waits on the lock and is ended.
    let mut late = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", a_db.socket().display()))
        .args(["-e", "INSERT INTO harbor.ships VALUES (2000)"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let fenced_at = scalar(&a_db, "SELECT @@gtid_binlog_pos");

    // Promote: the new primary has applied everything the old one logged when it answers.
    let t = Instant::now();
    let (code, promoted) = b.post("/role", &order("quay-1", Role::Primary, 1, b"order-key"));
    let promote_time = t.elapsed();
    assert_eq!(code, 200, "{promoted}\n{}", b.logs());
    let promoted = MemberStatus::from_line(&promoted).unwrap();
    assert_eq!(
        (promoted.role, promoted.epoch, promoted.read_only),
        (Some(Role::Primary), 1, false),
        "{promoted:?}"
    );
    assert!(
        bulwark_contract::gtid::within(Engine::MariaDb, &fenced_at, &promoted.gtid_executed),
        "{fenced_at} not in {}",
        promoted.gtid_executed
    );
    eprintln!("fenced in {fence_time:?}, promoted in {promote_time:?}");
    let late = wait_for("the held root write to be ended", &[&a, &b], || {
        late.try_wait().unwrap()
    });
    assert!(
        !late.success(),
        "a root write committed on the fenced primary"
    );
    assert_eq!(
        scalar(&a_db, "SELECT COUNT(*) FROM harbor.ships WHERE id = 2000"),
        "0"
    );
    assert_eq!(scalar(&b_db, "SELECT COUNT(*) FROM harbor.ships"), "20");
    b_db.sql("INSERT INTO harbor.ships VALUES (21)").unwrap();
    // The old primary follows the new one.
    wait_status(&a, &[&b], "/readyz", 200, "replica: replicating");
    wait_for(
        "the new primary's row on the old primary",
        &[&a, &b],
        || (a_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "21").then_some(()),
    );

    // An older order is refused; the labels, still saying the opposite at epoch 0, change
    // nothing, even once the old primary's agent restarts.
    let (code, answer) = a.post("/role", &order("quay-0", Role::Primary, 0, b"order-key"));
    assert_eq!(code, 409, "{answer}");
    drop(a);
    let a = start("a-again", "quay-0", &a_db, &a_labels, &b_port, &a_orders);
    wait_status(&a, &[&b], "/readyz", 200, "replica: replicating");
    assert_eq!(read_only(&a_db), "1");
    assert_eq!(scalar(&b_db, "SELECT @@read_only"), "0");
    let status = a.get("/status").1;
    assert!(status.contains("\"epoch\":1"), "{status}");
    // A newer label wins over an older order.
    a_labels.set_with_epoch("replica", 2);
    wait_for("the label's epoch", &[&a], || {
        a.get("/status").1.contains("\"epoch\":2").then_some(())
    });

    // The primary's server crashes and another member takes over: its demotion reaches the
    // agent while the server is down, is answered at once (not after the order wait), and is
    // what the server follows when it comes back, though its labels still say primary.
    b_labels.set_with_epoch("primary", 2);
    wait_for("the primary's label epoch", &[&b], || {
        b.get("/status").1.contains("\"epoch\":2").then_some(())
    });
    b_db.kill9();
    wait_status(&b, &[&a], "/status", 503, "no observation");
    let t = Instant::now();
    let (code, answer) = b.post("/role", &order("quay-1", Role::Replica, 3, b"order-key"));
    let answered = t.elapsed();
    assert_eq!(code, 202, "{answer}\n{}", b.logs());
    assert!(answer.contains("the server is down"), "{answer}");
    assert!(
        answered < bulwark_contract::order::ORDER_WAIT - Duration::from_secs(2),
        "answered after {answered:?}"
    );
    b_db.restart().unwrap();
    wait_for("the returned server to follow its order", &[&b], || {
        let status = b.get("/status").1;
        (status.contains("\"epoch\":3") && status.contains("\"role\":\"replica\"")).then_some(())
    });
    assert_eq!(read_only(&b_db), "1");
}

/// A demoted primary's pod is deleted while its writes are held (a rollout restarting it right
/// after the hand-over): the agent keeps the hold until its time is up instead of taking the
/// lock with it, so a root client still routed there cannot commit what no other member has.
#[test]
fn a_demoted_primary_asked_to_stop_keeps_its_writes_held_until_the_hold_ends() {
    let Pair {
        work,
        a_db,
        b_db,
        creds,
        a_labels,
        b_labels,
    } = Pair::new();
    let w = work.path();
    let (a_port, b_port) = (a_db.port().to_string(), b_db.port().to_string());
    let start = |name: &str, pod: &str, db: &MariaDb, labels: &Labels, port: &str| {
        let file = w.join(format!("order-{name}"));
        let file = file.to_str().unwrap().to_owned();
        member_agent(
            name,
            w,
            db,
            labels,
            &creds,
            port,
            &["--pod-name", pod, "--order-file", &file],
        )
    };
    let mut a = start("a", "quay-0", &a_db, &a_labels, &b_port);
    let b = start("b", "quay-1", &b_db, &b_labels, &a_port);
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();

    let (code, fenced) = a.post("/role", &order("quay-0", Role::Replica, 1, b"order-key"));
    assert_eq!(code, 200, "{fenced}\n{}", a.logs());
    assert!(
        MemberStatus::from_line(&fenced).unwrap().writes_held,
        "{fenced}"
    );
    a.terminate();
    // A root client (which read_only does not stop) writes right after the stop request.
    let mut late = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", a_db.socket().display()))
        .args(["-e", "INSERT INTO harbor.ships VALUES (3000)"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        a.exited(),
        None,
        "the agent stopped during the hold: {}",
        a.logs()
    );
    let stopped = wait_for("the agent to stop after the hold", &[&b], || a.exited());
    assert!(stopped.success(), "{stopped}: {}", a.logs());
    assert!(
        a.logs()
            .contains("stopping once the demoted primary's hold on writes is over"),
        "{}",
        a.logs()
    );
    let late = wait_for("the held root write to end", &[&b], || {
        late.try_wait().unwrap()
    });
    assert!(
        !late.success(),
        "a root write committed on the demoted primary"
    );
    assert_eq!(
        scalar(&a_db, "SELECT COUNT(*) FROM harbor.ships WHERE id = 3000"),
        "0"
    );
}

/// An old primary commits what no replica received, is demoted, and the new primary writes
/// on: its GTID position is then further along than the old primary's, so the positions alone
/// say it has everything. Its report's history (`gtid_binlog_state`) shows the old primary's
/// last commit missing, which is what the operator names; MariaDB refuses the old primary as
/// a replica (error 1236).
#[test]
fn an_old_primarys_commit_nobody_received_shows_in_the_new_primarys_history() {
    let Pair {
        work,
        a_db,
        b_db,
        creds: creds_s,
        a_labels,
        mut b_labels,
    } = Pair::new();
    let w = work.path();
    let (a_port, b_port) = (a_db.port().to_string(), b_db.port().to_string());
    let start = |name: &str, pod: &str, db: &MariaDb, labels: &Labels, port: &str| {
        let file = w.join(format!("order-{pod}"));
        let file = file.to_str().unwrap().to_owned();
        member_agent(
            name,
            w,
            db,
            labels,
            &creds_s,
            port,
            &["--pod-name", pod, "--order-file", &file],
        )
    };
    let a = start("a", "quay-0", &a_db, &a_labels, &b_port);
    let b = start("b", "quay-1", &b_db, &b_labels, &a_port);
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();
    for id in 1..=20 {
        a_db.sql(&format!("INSERT INTO harbor.ships VALUES ({id})"))
            .unwrap();
    }
    wait_for("the replica to have every row", &[&a, &b], || {
        (b_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "20").then_some(())
    });

    // The replica is cut off; the primary commits once more (no semi-sync here).
    drop(b);
    b_db.sql("STOP SLAVE").unwrap();
    a_db.sql("INSERT INTO harbor.ships VALUES (1000)").unwrap();
    let (code, answer) = a.post("/role", &order("quay-0", Role::Replica, 1, b"order-key"));
    assert_eq!(code, 200, "{answer}\n{}", a.logs());

    // The replica takes over (its label, newer than the old primary's) and writes on.
    b_labels.set_with_epoch("primary", 1);
    let b = start("b-promoted", "quay-1", &b_db, &b_labels, &a_port);
    wait_status(&b, &[&a], "/readyz", 200, "primary: writable");
    for id in 21..=50 {
        b_db.sql(&format!("INSERT INTO harbor.ships VALUES ({id})"))
            .unwrap();
    }
    let old = wait_for("the old primary's replication refused", &[&a, &b], || {
        let r = MemberStatus::from_line(&a.get("/status").1).ok()?;
        r.replication
            .as_ref()
            .is_some_and(|rep| rep.io_errno == 1236)
            .then_some(r)
    });
    let new = MemberStatus::from_line(&b.get("/status").1).unwrap();
    assert!(!old.ready, "{old:?}");
    assert!(
        bulwark_contract::gtid::within(Engine::MariaDb, &old.gtid_executed, &new.gtid_executed),
        "the positions alone should not show it: old {}, new {}",
        old.gtid_executed,
        new.gtid_executed
    );
    assert!(
        !new.has_all_of(Engine::MariaDb, &old),
        "the new primary's history {:?} hides the old primary's {}",
        new.gtid_history,
        old.gtid_executed
    );
    // A member with what the new primary has is within it.
    assert!(new.has_all_of(Engine::MariaDb, &new));
    assert_eq!(read_only(&a_db), "1");
    assert_eq!(
        scalar(&b_db, "SELECT COUNT(*) FROM harbor.ships WHERE id = 1000"),
        "0"
    );
}
