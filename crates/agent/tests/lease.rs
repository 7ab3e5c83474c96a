//! The primary's lease against a real MariaDB server and its agent: a primary started with
//! `--primary-lease` takes writes only once the operator's heartbeat comes, fences itself
//! (client sessions ended, read-only, every commit held, root's too) as soon as the lease runs
//! out, and takes writes again once it is renewed; a restart of the agent alone keeps what was
//! left of the lease; forged, replayed, misaddressed, late and other-epoch heartbeats renew
//! nothing. Renewals from as many replicas as the operator asked for keep the lease past the
//! operator's last heartbeat, never lift a lapsed one, and fewer, forged or other-epoch ones
//! keep nothing.

mod common;

use bulwark_contract::follow::{Follow, FOLLOW_PATH};
use bulwark_contract::lease::Heartbeat;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(3);

fn heartbeat(member: &str, epoch: u64, sent_ms: i64, key: &[u8]) -> String {
    heartbeat_asking(member, epoch, sent_ms, key, 0)
}

/// A heartbeat asking for `followers` replicas' renewals.
fn heartbeat_asking(member: &str, epoch: u64, sent_ms: i64, key: &[u8], followers: u32) -> String {
    Heartbeat {
        member: member.into(),
        epoch,
        lease_ms: LEASE.as_millis() as u64,
        sent_ms,
        followers,
    }
    .sign(key)
}

/// `replica`'s renewal of quay-0's lease at `epoch`, sent now.
fn renewal(replica: &str, epoch: u64, key: &[u8]) -> String {
    Follow {
        primary: "quay-0".into(),
        replica: replica.into(),
        epoch,
        sent_ms: now_ms(),
    }
    .sign(key)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A root write over the socket: `Ok` once committed.
fn root_write(db: &MariaDb, id: u32) -> Result<(), String> {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", db.socket().display()))
        .args(["-e", &format!("INSERT INTO harbor.ships VALUES ({id})")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// A root write over the socket fails (its session is ended, or it waits on the held lock
/// until it is).
fn root_write_refused(db: &MariaDb) {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", db.socket().display()))
        .args([
            "-e",
            "CREATE DATABASE IF NOT EXISTS fenced; CREATE TABLE fenced.t (id INT)",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "root wrote on a fenced primary");
}

#[test]
fn a_primary_takes_writes_only_while_it_holds_the_operators_lease() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let a_db = instance_server(w, "quay-0");
    let creds = credentials_with_order_key(w);
    let mut a_labels = Labels::new(w.join("podinfo-a"));
    a_labels.set(Some("primary"));
    let key = b"order-key";
    let start = |name: &str| {
        member_agent(
            name,
            w,
            &a_db,
            &a_labels,
            &creds,
            "3306",
            &["--pod-name", "quay-0", "--primary-lease"],
        )
    };
    let a = start("a");
    // No heartbeat yet: the primary is read-only and holds its writes (nothing else is done
    // meanwhile, the accounts included).
    wait_status(
        &a,
        &[],
        "/readyz",
        503,
        "primary, fenced: no lease from the operator yet",
    );
    root_write_refused(&a_db);

    let (code, body) = a.post("/lease", &heartbeat("quay-0", 0, now_ms(), key));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, "lease held for 3000 ms at epoch 0");
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();

    // Renewed every second, the lease holds: writes go on for longer than one lease.
    for id in 1..=5 {
        let (code, body) = a.post("/lease", &heartbeat("quay-0", 0, now_ms(), key));
        assert_eq!(code, 200, "{body}");
        root_write(&a_db, id).unwrap();
        std::thread::sleep(Duration::from_secs(1));
    }

    // A restart of the agent alone keeps what is left of the lease: the primary stays
    // writable without a heartbeat until it runs out.
    // (A longer lease, so that the new agent is up well before it runs out.)
    let long = Heartbeat {
        lease_ms: 10_000,
        ..Heartbeat::verify(&heartbeat("quay-0", 0, now_ms(), key), key).unwrap()
    };
    assert_eq!(a.post("/lease", &long.sign(key)).0, 200);
    drop(a);
    let a = start("a-again");
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    assert!(a.logs().contains("kept lease taken again"), "{}", a.logs());
    wait_status(&a, &[], "/readyz", 503, "primary, fenced: the lease lapsed");

    // Refused, and none renews: another key, another member, a replay, a late stamp, one from
    // the future, an unreadable body.
    let replay = heartbeat("quay-0", 0, now_ms(), key);
    assert_eq!(a.post("/lease", &replay).0, 200);
    let last = Instant::now();
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    let refusals = [
        (
            heartbeat("quay-0", 0, now_ms(), b"other"),
            403,
            "its signature does not match",
        ),
        (heartbeat("quay-1", 0, now_ms(), key), 403, "for quay-1"),
        (replay, 409, "not newer"),
        (
            heartbeat("quay-0", 0, now_ms() - 5000, key),
            409,
            "before this agent's clock",
        ),
        (
            heartbeat("quay-0", 0, now_ms() + 5000, key),
            409,
            "after this agent's clock",
        ),
        ("{".to_owned(), 400, "it is not readable"),
    ];
    for (line, want, says) in refusals {
        let (code, body) = a.post("/lease", &line);
        assert_eq!((code, body.contains(says)), (want, true), "{body}");
    }
    // A client that would write on is connected when the lease runs out.
    let mut idle = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", a_db.socket().display()))
        .args(["-e", "SELECT SLEEP(60)"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the primary to fence itself", &[&a], || {
        (read_only(&a_db) == "1").then_some(())
    });
    let fenced_after = last.elapsed();
    bulwark_e2e_figure(&format!(
        "primary read-only {:.2}s after its last heartbeat ({}s lease)",
        fenced_after.as_secs_f64(),
        LEASE.as_secs()
    ));
    assert!(
        fenced_after < LEASE + Duration::from_secs(2),
        "fenced {fenced_after:?} after the last heartbeat: {}",
        a.logs()
    );
    assert!(
        fenced_after >= LEASE - Duration::from_millis(100),
        "fenced before the lease ran out: {fenced_after:?}"
    );
    let idle = wait_for("the connected client's session to be ended", &[&a], || {
        idle.try_wait().unwrap()
    });
    assert!(!idle.success());
    wait_status(&a, &[], "/readyz", 503, "primary, fenced: the lease lapsed");
    // Root, whom MariaDB's read_only lets commit, cannot either.
    root_write_refused(&a_db);
    // Renewed: writes again, at once.
    let renewed = Instant::now();
    assert_eq!(
        a.post("/lease", &heartbeat("quay-0", 0, now_ms(), key)).0,
        200
    );
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    bulwark_e2e_figure(&format!(
        "writable again {:.2}s after the renewing heartbeat",
        renewed.elapsed().as_secs_f64()
    ));
    root_write(&a_db, 101).unwrap();
    // Nothing of the fenced time committed: the five rows before it and the one after.
    assert_eq!(scalar(&a_db, "SHOW DATABASES LIKE 'fenced'"), "");
    assert_eq!(
        scalar(
            &a_db,
            "SELECT GROUP_CONCAT(id ORDER BY id) FROM harbor.ships"
        ),
        "1,2,3,4,5,101"
    );

    // A heartbeat for a later epoch is taken, and is no lease for this one: fenced at once.
    // One for this epoch is then refused as older.
    assert_eq!(
        a.post("/lease", &heartbeat("quay-0", 1, now_ms(), key)).0,
        200
    );
    wait_status(&a, &[], "/readyz", 503, "no lease for epoch 0");
    assert_eq!(read_only(&a_db), "1");
    let (code, body) = a.post("/lease", &heartbeat("quay-0", 0, now_ms(), key));
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("older than the last one taken (1)"), "{body}");
    wait_status(
        &a,
        &[],
        "/readyz",
        503,
        "refused: it was for an older epoch",
    );
}

#[test]
fn a_primary_its_replicas_renew_outlasts_the_operators_heartbeat() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let db = instance_server(w, "quay-0");
    let creds = credentials_with_order_key(w);
    let mut labels = Labels::new(w.join("podinfo"));
    labels.set(Some("primary"));
    let key = b"order-key";
    let a = member_agent(
        "a",
        w,
        &db,
        &labels,
        &creds,
        "3306",
        &["--pod-name", "quay-0", "--primary-lease"],
    );
    // The operator asked for no renewals: none is taken.
    assert_eq!(
        a.post("/lease", &heartbeat("quay-0", 0, now_ms(), key)).0,
        200
    );
    let (code, body) = a.post(FOLLOW_PATH, &renewal("quay-1", 0, key));
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("asked for no renewals"), "{body}");
    // It asks for one replica's.
    assert_eq!(
        a.post("/lease", &heartbeat_asking("quay-0", 0, now_ms(), key, 1))
            .0,
        200
    );
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();
    // Refused, and none keeps the lease: another key, another primary, another epoch, a late
    // stamp, a replay, an unreadable body.
    let replay = renewal("quay-1", 0, key);
    assert_eq!(a.post(FOLLOW_PATH, &replay).0, 200);
    // The refusals below are stamped now: in the same millisecond as the one taken, a renewal
    // is "not newer" and refused as a replay before its own fault is looked at.
    std::thread::sleep(std::time::Duration::from_millis(2));
    let refusals = [
        (
            renewal("quay-1", 2, b"other"),
            403,
            "signature does not match",
        ),
        (
            Follow {
                primary: "quay-5".into(),
                replica: "quay-1".into(),
                epoch: 0,
                sent_ms: now_ms(),
            }
            .sign(key),
            403,
            "for quay-5",
        ),
        (
            renewal("quay-1", 1, key),
            409,
            "for epoch 1, the lease for epoch 0",
        ),
        (
            Follow {
                primary: "quay-0".into(),
                replica: "quay-1".into(),
                epoch: 0,
                sent_ms: now_ms() - 5000,
            }
            .sign(key),
            409,
            "before this agent's clock",
        ),
        (replay, 409, "not newer than the last one quay-1 sent"),
        ("{".to_owned(), 400, "not readable"),
    ];
    for (line, want, says) in refusals {
        let (code, body) = a.post(FOLLOW_PATH, &line);
        assert_eq!((code, body.contains(says)), (want, true), "{body}");
    }
    // No heartbeat from here on: one replica renewing every second keeps the primary writable
    // for three leases.
    let last_heartbeat = Instant::now();
    let mut last_renewal = Instant::now();
    for id in 1..=9 {
        let (code, body) = a.post(FOLLOW_PATH, &renewal("quay-1", 0, key));
        last_renewal = Instant::now();
        assert_eq!(code, 200, "{body}");
        root_write(&db, id).unwrap();
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(last_heartbeat.elapsed() > LEASE * 3);
    assert_eq!(read_only(&db), "0");
    assert!(
        a.logs()
            .contains("the replicas' renewals keep the lease past the operator's last heartbeat"),
        "{}",
        a.logs()
    );
    // The renewals stop: fenced a lease after the last one.
    wait_for("the primary to fence itself", &[&a], || {
        (read_only(&db) == "1").then_some(())
    });
    let fenced_after = last_renewal.elapsed();
    bulwark_e2e_figure(&format!(
        "primary kept by a replica's renewals read-only {:.2}s after the last renewal ({}s lease)",
        fenced_after.as_secs_f64(),
        LEASE.as_secs()
    ));
    assert!(
        fenced_after < LEASE + Duration::from_secs(2)
            && fenced_after >= LEASE - Duration::from_millis(100),
        "fenced {fenced_after:?} after the last renewal"
    );
    wait_status(
        &a,
        &[],
        "/readyz",
        503,
        "nor renewals from 1 of its replicas, within 3s",
    );
    root_write_refused(&db);
    // A replica that comes back does not lift the fence: only the operator does.
    let (code, body) = a.post(FOLLOW_PATH, &renewal("quay-1", 0, key));
    assert_eq!(code, 409, "{body}");
    assert!(
        body.contains("only the operator's heartbeat renews it"),
        "{body}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(read_only(&db), "1");
    // The operator asks for two: one replica renewing is not enough.
    assert_eq!(
        a.post("/lease", &heartbeat_asking("quay-0", 0, now_ms(), key, 2))
            .0,
        200
    );
    wait_status(&a, &[], "/readyz", 200, "primary: writable");
    let renewed = Instant::now();
    while renewed.elapsed() < LEASE + Duration::from_secs(2) {
        // Taken while the heartbeat's lease runs, refused once it lapsed.
        a.post(FOLLOW_PATH, &renewal("quay-1", 0, key));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(read_only(&db), "1", "one of two renewing kept the lease");
    assert_eq!(
        scalar(&db, "SELECT COUNT(*) FROM harbor.ships"),
        "9",
        "a row committed while fenced"
    );
}

/// Prints a measured figure for the note.
fn bulwark_e2e_figure(line: &str) {
    println!("figure: {line}");
}
