//! Semi-synchronous replication under the `bulwark-agent run` sidecar against real MariaDB
//! servers: a commit answered only once a replica has it, held while none can take it (also
//! across a crash of the primary), and a primary demoted while a commit waits for an
//! acknowledgement no replica will give.

mod common;

use bulwark_contract::semisync::SemiSync;
use bulwark_contract::Engine;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A server of a two-member cluster with one semi-sync acknowledgement, as the operator
/// configures it, its binary log reset.
fn semi_sync_server(work: &Path, pod: &str) -> MariaDb {
    let semi = SemiSync {
        acks: 1,
        timeout: None,
        members: 2,
    };
    let mut args = instance_args(work, pod);
    args.extend(
        semi.server_options(Engine::MariaDb)
            .into_iter()
            .map(|(k, v)| format!("--{k}={v}")),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let db = MariaDb::start_with_args(&args).unwrap();
    db.sql("RESET MASTER").unwrap();
    db
}

/// Semi-synchronous replication as the operator configures it: the primary answers a commit
/// only once a replica has it, and holds it (however long) while no replica can take it.
#[test]
fn with_semi_sync_a_commit_returns_only_once_a_replica_has_it() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = |pod: &str| semi_sync_server(w, pod);
    let mut a_db = server("quay-0");
    let b_db = server("quay-1");
    let creds = credentials(w, "");
    let creds_s = creds.to_str().unwrap().to_owned();
    let mut a_labels = Labels::new(w.join("podinfo-a"));
    let mut b_labels = Labels::new(w.join("podinfo-b"));
    a_labels.set(Some("primary"));
    b_labels.set(Some("replica"));
    let a_port = a_db.port().to_string();
    let start = |name: &str, db: &MariaDb, labels: &Labels| {
        member_agent(
            name,
            w,
            db,
            labels,
            &creds_s,
            &a_port,
            &["--semi-sync-acks", "1"],
        )
    };
    let a = start("a", &a_db, &a_labels);
    // Alone, the primary waits from its first commit: nothing is answered that no replica has.
    wait_status(
        &a,
        &[],
        "/readyz",
        200,
        "commits wait for 1 replica acknowledgement(s) (0 connected)",
    );
    let early = held_commit(&a_db, "CREATE DATABASE early");
    let b = start("b", &b_db, &b_labels);
    wait_status(&b, &[&a], "/readyz", 200, "replica: replicating");
    wait_status(
        &a,
        &[&b],
        "/readyz",
        200,
        "commits wait for 1 replica acknowledgement(s) (1 connected)",
    );
    answered(early, "the first commit, once the replica connected");
    let status = |db: &MariaDb, name: &str| {
        scalar(
            db,
            &format!("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{name}'"),
        )
    };
    wait_for(
        "the primary to run semi-sync with the replica",
        &[&a, &b],
        || {
            (status(&a_db, "RPL_SEMI_SYNC_MASTER_STATUS") == "ON"
                && status(&a_db, "RPL_SEMI_SYNC_MASTER_CLIENTS") == "1")
                .then_some(())
        },
    );
    assert_eq!(status(&b_db, "RPL_SEMI_SYNC_SLAVE_STATUS"), "ON");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();
    let acknowledged = status(&a_db, "RPL_SEMI_SYNC_MASTER_YES_TX");
    assert_ne!(acknowledged, "0");

    // The replica stops receiving: a commit on the primary is held, not answered.
    drop(b);
    b_db.sql("STOP SLAVE IO_THREAD").unwrap();
    let insert = held_commit(&a_db, "INSERT INTO harbor.ships VALUES (1)");
    assert_eq!(status(&a_db, "RPL_SEMI_SYNC_MASTER_WAIT_SESSIONS"), "1");
    assert_eq!(status(&a_db, "RPL_SEMI_SYNC_MASTER_STATUS"), "ON");

    // The replica receives again: the commit is acknowledged and answered.
    b_db.sql("START SLAVE IO_THREAD").unwrap();
    answered(insert, "the commit, once the replica received again");
    assert_eq!(status(&a_db, "RPL_SEMI_SYNC_MASTER_NO_TX"), "0");
    wait_for("the row on the replica", &[&a], || {
        (b_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "1").then_some(())
    });

    // The primary's server crashes and restarts (the wait is not a persistent setting) while
    // the replica, which could take over, is not receiving: the restarted primary takes
    // writes only waiting again, so no commit is answered that the replica lacks.
    b_db.sql("STOP SLAVE IO_THREAD").unwrap();
    a_db.kill9();
    wait_status(&a, &[], "/status", 503, "no observation");
    a_db.restart().unwrap();
    wait_status(
        &a,
        &[],
        "/readyz",
        200,
        "commits wait for 1 replica acknowledgement(s) (0 connected)",
    );
    let after_crash = held_commit(&a_db, "INSERT INTO harbor.ships VALUES (2)");
    b_db.sql("START SLAVE IO_THREAD").unwrap();
    answered(
        after_crash,
        "the restarted primary's commit, once the replica received",
    );
    wait_for("the second row on the replica", &[&a], || {
        (b_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "2").then_some(())
    });
}

/// A primary demoted while a commit waits for a semi-sync acknowledgement that no replica will
/// give (they stopped receiving, as after a failover) still turns read-only: the waiting
/// session is ended (its client told the connection was lost, never that it committed), where
/// `SET GLOBAL read_only` alone would wait for that commit for ever.
#[test]
fn a_primary_with_a_commit_waiting_for_an_acknowledgement_is_demoted() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let server = |pod: &str| semi_sync_server(w, pod);
    let a_db = server("quay-0");
    let b_db = server("quay-1");
    let creds = credentials(w, "");
    let creds_s = creds.to_str().unwrap().to_owned();
    let mut a_labels = Labels::new(w.join("podinfo-a"));
    let mut b_labels = Labels::new(w.join("podinfo-b"));
    a_labels.set(Some("primary"));
    b_labels.set(Some("replica"));
    let (a_port, b_port) = (a_db.port().to_string(), b_db.port().to_string());
    let start = |name: &str, db: &MariaDb, labels: &Labels, source: &str| {
        member_agent(
            name,
            w,
            db,
            labels,
            &creds_s,
            source,
            &["--semi-sync-acks", "1"],
        )
    };
    let a = start("a", &a_db, &a_labels, &b_port);
    let b = start("b", &b_db, &b_labels, &a_port);
    wait_status(&b, &[&a], "/readyz", 200, "replica: replicating");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();
    // A primary that a replica reads from marks its pod's stop as waiting for a hand-over.
    let marked = |db: &MariaDb| {
        db.socket()
            .with_file_name(bulwark_contract::paths::HANDOVER_FILE)
            .exists()
    };
    wait_for("the primary's hand-over mark", &[&a, &b], || {
        marked(&a_db).then_some(())
    });
    assert!(!marked(&b_db), "a replica marked a hand-over");

    // The replica stops receiving and its agent is gone: a commit on the primary waits.
    drop(b);
    b_db.sql("STOP SLAVE IO_THREAD").unwrap();
    let mut held = held_commit(&a_db, "INSERT INTO harbor.ships VALUES (1)");

    // The primary is demoted.
    a_labels.set(Some("replica"));
    wait_for("the demoted primary to turn read-only", &[&a], || {
        (read_only(&a_db) == "1").then_some(())
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = held.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting commit's session was not ended: {}",
            a.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        !exit.success(),
        "the waiting commit was answered as committed though no replica acknowledged it"
    );
    // Demoted, and its hold on writes over: the pod may stop.
    wait_for("the hand-over mark gone after the demotion", &[&a], || {
        (!marked(&a_db)).then_some(())
    });
}

/// Starts `sql` as root on `db` and checks that it is still unanswered 3 s later.
fn held_commit(db: &MariaDb, sql: &str) -> std::process::Child {
    let mut client = Command::new("mariadb")
        .args(["--no-defaults", "--user=root"])
        .arg(format!("--socket={}", db.socket().display()))
        .args(["-e", sql])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        client.try_wait().unwrap().is_none(),
        "{sql} was answered with no replica to acknowledge it"
    );
    client
}

/// Waits up to 30 s for a held commit to be answered, successfully.
fn answered(mut client: std::process::Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = client.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "{what} was never answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(exit.success(), "{what} failed");
}
