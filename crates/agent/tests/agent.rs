//! The `bulwark-agent run` sidecar against real MariaDB servers: accounts, roles from a labels
//! file swapped the way the kubelet does it, GTID replication and a switchover, the probe
//! endpoints (including a frozen mysqld), a promotion that applies the received relay log, a
//! logical bootstrap loaded into a new primary, and a physical bootstrap whose servers continue
//! the backup's GTID history. Role orders: `orders.rs`; semi-synchronous commits and the
//! demotion of a primary with commits waiting for them: `semisync.rs`.

mod common;

use bulwark_contract::member::IoState;
use bulwark_contract::{Engine, Role};
use common::*;
use std::time::Instant;

fn mariadbd_pid(db: &MariaDb) -> i32 {
    let pid_file = db.socket().parent().unwrap().join("mariadbd.pid");
    std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Resumes a stopped process when dropped, so a failing test never leaves it frozen.
struct Frozen(i32);

impl Frozen {
    fn freeze(pid: i32) -> Self {
        // SAFETY: kill only sends a signal to the given process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[test]
fn agents_replicate_switch_over_and_answer_probes() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let a_db = instance_server(w, "quay-0");
    let b_db = instance_server(w, "quay-1");
    let creds = credentials(w, "");
    let creds_s = creds.to_str().unwrap();
    let mut a_labels = Labels::new(w.join("podinfo-a"));
    let mut b_labels = Labels::new(w.join("podinfo-b"));
    b_labels.set(Some("replica"));
    let a_port = a_db.port().to_string();
    let b_port = b_db.port().to_string();
    let common = |labels: &Labels, port: &str| -> Vec<String> {
        [
            "--labels-file",
            labels.file().to_str().unwrap(),
            "--credentials-dir",
            creds_s,
            "--primary-host",
            "127.0.0.1",
            "--primary-port",
            port,
            "--health-timeout",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // Each agent's "primary" is the other server: what it replicates from once a replica.
    let a_args = common(&a_labels, &b_port);
    let b_args = common(&b_labels, &a_port);
    let a = Agent::start(
        "a",
        w,
        &a_db,
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    let b = Agent::start(
        "b",
        w,
        &b_db,
        &b_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );

    // No labels yet: alive, not ready, and nothing changed but the accounts.
    assert_eq!(a.get("/healthz"), (200, "mysqld answers".to_string()));
    wait_status(&a, &[], "/readyz", 503, "role unknown");
    assert_eq!(scalar(&a_db, "SELECT @@read_only"), "1");
    assert_eq!(a.get("/nowhere").0, 404);

    a_labels.set(Some("primary"));
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    let body = wait_status(
        &b,
        &[&a],
        "/readyz",
        200,
        "replica: replicating from 127.0.0.1:",
    );
    assert!(body.contains(&a_port), "{body}");
    assert_eq!(scalar(&a_db, "SELECT @@read_only"), "0");
    assert_eq!(scalar(&b_db, "SELECT @@read_only"), "1");

    // The accounts: on both servers (each agent made its own, nothing replicated), with the
    // passwords from the files and the exporter's connection cap.
    for db in [&a_db, &b_db] {
        assert_eq!(
            scalar(
                db,
                "SELECT GROUP_CONCAT(CONCAT(user, '@', host, ':', max_user_connections) ORDER BY user) \
                 FROM mysql.user WHERE user LIKE 'bulwark%'"
            ),
            "bulwark_backup@%:0,bulwark_exporter@127.0.0.1:3,bulwark_replication@%:0"
        );
        // The exporter's account logs in from its pod's loopback address only, and reads no
        // table: a password the exporter is tricked into sending elsewhere opens nothing.
        login_from(db, "127.0.0.1", "bulwark_exporter", "m3trics-secret").unwrap();
        let elsewhere = login_from(db, "127.0.0.2", "bulwark_exporter", "m3trics-secret")
            .expect_err("the exporter's account logs in from another address");
        assert!(elsewhere.contains("Access denied"), "{elsewhere}");
        login_from(db, "127.0.0.2", "bulwark_backup", "b4ckup-secret").unwrap();
        let data = sql_tcp(
            db,
            "bulwark_exporter",
            "m3trics-secret",
            "SELECT COUNT(*) FROM mysql.global_priv",
        )
        .expect_err("the exporter's account reads a table");
        assert!(data.contains("denied"), "{data}");
        assert_eq!(
            sql_tcp(db, "bulwark_exporter", "m3trics-secret", "SELECT 1").unwrap(),
            "1"
        );
        assert!(sql_tcp(db, "bulwark_exporter", "wrong", "SELECT 1").is_err());
        // What mysqld_exporter reads, replication status included.
        sql_tcp(
            db,
            "bulwark_exporter",
            "m3trics-secret",
            "SHOW SLAVE STATUS; SHOW GLOBAL STATUS LIKE 'Uptime'; SELECT COUNT(*) FROM information_schema.processlist",
        )
        .unwrap();
    }
    let binlog = a_db.sql("SHOW BINLOG EVENTS").unwrap();
    assert!(
        !binlog.contains("bulwark_"),
        "account changes were binlogged: {binlog}"
    );
    // The backup account can take both kinds of backup.
    let repo = w.join("repo").display().to_string();
    let pw_file = w.join("backup-password");
    std::fs::write(&pw_file, "b4ckup-secret\n").unwrap();
    for method in ["logical", "physical"] {
        let mut c = backup_cli(&["backup", "--repo", &repo, "--method", method]);
        c.args(["--mysql-host", "127.0.0.1", "--mysql-port", &a_port])
            .args(["--mysql-user", "bulwark_backup", "--mysql-password-file"])
            .arg(&pw_file);
        ok(c);
    }
    assert!(
        !a.logs().contains("r3pl-") && !a.logs().contains("b4ckup-") && !b.logs().contains("r3pl-"),
        "a password reached a log"
    );

    // Writes on the primary reach the replica.
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY, name TEXT); INSERT INTO harbor.ships VALUES (1, 'Argo'), (2, 'Nautilus')")
        .unwrap();
    wait_for("rows on the replica", &[&a, &b], || {
        (b_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "2").then_some(())
    });

    // `/status`: what the operator reads of each member, as of the agent's last pass.
    let logged = scalar(&a_db, "SELECT @@gtid_binlog_pos");
    let member = |agent: &Agent| {
        let (code, body) = agent.get("/status");
        assert_eq!(code, 200, "{body}");
        bulwark_contract::member::MemberStatus::from_line(&body).unwrap()
    };
    let replica = wait_for("the replica's report of the rows", &[&a, &b], || {
        let m = member(&b);
        (m.replication.as_ref()?.relay_applied && m.gtid_executed == logged).then_some(m)
    });
    assert_eq!(replica.role, Some(Role::Replica));
    assert!(replica.read_only && replica.ready, "{replica:?}");
    let r = replica.replication.unwrap();
    assert_eq!(
        (r.io, r.sql_running, r.source_port),
        (IoState::Running, true, a_db.port())
    );
    let primary = member(&a);
    assert_eq!(primary.role, Some(Role::Primary));
    assert!(
        !primary.read_only && primary.replication.is_none(),
        "{primary:?}"
    );
    assert_eq!(primary.engine, Engine::MariaDb);
    assert!(primary.age_ms < 10_000, "{primary:?}");

    // Switchover: the old primary is made a replica first, then the new primary promoted.
    a_labels.set(Some("replica"));
    let body = wait_status(
        &a,
        &[&b],
        "/readyz",
        200,
        "replica: replicating from 127.0.0.1:",
    );
    assert!(body.contains(&b_port), "{body}");
    assert_eq!(read_only(&a_db), "1");
    b_labels.set(Some("primary"));
    wait_status(&b, &[&a], "/readyz", 200, "primary: writable");
    assert_eq!(scalar(&b_db, "SELECT @@read_only"), "0");
    assert_eq!(
        scalar(
            &b_db,
            "SELECT COUNT(*) FROM information_schema.processlist WHERE command LIKE 'Slave%'"
        ),
        "0",
        "the new primary no longer replicates"
    );
    b_db.sql("INSERT INTO harbor.ships VALUES (3, 'Endurance')")
        .unwrap();
    wait_for("the new primary's rows on the old one", &[&a, &b], || {
        (a_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "3").then_some(())
    });
    wait_status(&a, &[&b], "/readyz", 200, "replicating");
    let status = a_db.query("SHOW SLAVE STATUS").unwrap();
    assert!(!status.is_empty());
    assert!(
        a.logs().contains("replication source changed"),
        "{}",
        a.logs()
    );

    // A rotated replication password: both agents converge the account, and the replica
    // re-points replication with the new one.
    std::fs::write(creds.join("replication"), "n3w-repl-secret\n").unwrap();
    wait_for(
        "the new replication password on the primary",
        &[&a, &b],
        || sql_tcp(&b_db, "bulwark_replication", "n3w-repl-secret", "SELECT 1").ok(),
    );
    wait_for(
        "the replica to re-point with the new password",
        &[&a, &b],
        || (a.logs().matches("replication source changed").count() >= 2).then_some(()),
    );
    b_db.sql("INSERT INTO harbor.ships VALUES (4, 'Fram')")
        .unwrap();
    wait_for("rows after the rotation", &[&a, &b], || {
        (a_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "4").then_some(())
    });
    wait_status(&a, &[&b], "/readyz", 200, "replicating");

    // A frozen mysqld accepts connections but does not answer: liveness fails, and recovers.
    let frozen = Frozen::freeze(mariadbd_pid(&a_db));
    let (code, body) = a.get("/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("did not answer within 1s"), "{body}");
    drop(frozen);
    wait_status(&a, &[], "/healthz", 200, "mysqld answers");
}

/// A replica promoted while transactions it received are not yet applied (its applier was
/// stopped) applies them before it takes writes: nothing the old primary sent is discarded.
#[test]
fn promotion_applies_the_received_relay_log_before_taking_writes() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let a_db = instance_server(w, "quay-0");
    let b_db = instance_server(w, "quay-1");
    let creds = credentials(w, "");
    let creds_s = creds.to_str().unwrap().to_owned();
    let mut a_labels = Labels::new(w.join("podinfo-a"));
    let mut b_labels = Labels::new(w.join("podinfo-b"));
    a_labels.set(Some("primary"));
    b_labels.set(Some("replica"));
    let a_port = a_db.port().to_string();
    let b_port = b_db.port().to_string();
    let start = |name: &str, db: &MariaDb, labels: &Labels, primary_port: &str| {
        member_agent(name, w, db, labels, &creds_s, primary_port, &[])
    };
    let a = start("a", &a_db, &a_labels, &b_port);
    let b = start("b", &b_db, &b_labels, &a_port);
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    a_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY)")
        .unwrap();
    a_db.sql("INSERT INTO harbor.ships VALUES (0)").unwrap();
    wait_for("the first row on the replica", &[&a, &b], || {
        (b_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "1").then_some(())
    });

    // The replica's agent is gone (its pod restarts); its applier stops, its receiver goes on.
    drop(b);
    b_db.sql("STOP SLAVE SQL_THREAD").unwrap();
    for id in 1..=50 {
        a_db.sql(&format!("INSERT INTO harbor.ships VALUES ({id})"))
            .unwrap();
    }
    let sent = scalar(&a_db, "SELECT @@gtid_binlog_pos");
    wait_for("the replica to receive everything", &[&a], || {
        (replica_status(&b_db).get("Gtid_IO_Pos")? == &sent).then_some(())
    });
    assert_eq!(scalar(&b_db, "SELECT COUNT(*) FROM harbor.ships"), "1");

    // The primary is lost; the replica is promoted, by a new agent.
    drop(a);
    drop(a_db);
    b_labels.set(Some("primary"));
    let b = start("b-promoted", &b_db, &b_labels, &a_port);
    wait_status(&b, &[], "/readyz", 200, "primary: writable");
    assert_eq!(
        scalar(&b_db, "SELECT COUNT(*) FROM harbor.ships"),
        "51",
        "received transactions were discarded by the promotion: {}",
        b.logs()
    );
    assert_eq!(scalar(&b_db, "SELECT @@gtid_slave_pos"), sent);
    assert!(b.logs().contains("start-replication-sql"), "{}", b.logs());
    b_db.sql("INSERT INTO harbor.ships VALUES (51)").unwrap();
    assert!(b_db.query("SHOW SLAVE STATUS").unwrap().is_empty());
}

#[test]
fn a_pending_logical_restore_is_loaded_into_the_new_primary() {
    let Scenario { work, source, repo } = Scenario::new(200);
    let w = work.path();
    let key = key_file(w, "key");
    let key = key.to_str().unwrap();
    let before = snapshot(&source).unwrap();
    let b = backup(
        &repo,
        &source,
        &["--method", "logical", "--encryption-key-file", key],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();
    drop(source);

    // Bootstrap: the restore init container verifies and leaves the id beside the datadir.
    let datadir = w.join("volume/data");
    std::fs::create_dir_all(&datadir).unwrap();
    let mut c = cli(&["restore", "--repo", &repo, "--datadir"]);
    c.arg(&datadir)
        .args(["--encryption-key-file", key, "latest"]);
    ok(c);
    let pending = w.join("volume/bulwark-pending-logical-restore");
    assert_eq!(std::fs::read_to_string(&pending).unwrap().trim(), id);

    // mysqld's entrypoint initializes an empty server; the agent loads the backup into it
    // once the pod is primary. A bogus id first: not ready, and says why.
    let target = MariaDb::start().unwrap();
    std::fs::write(&pending, "20200101T000000Z-000000\n").unwrap();
    let agent = loading_primary("primary", w, &target, &pending, &repo, key);
    wait_status(
        &agent,
        &[],
        "/readyz",
        503,
        "loading backup 20200101T000000Z-000000 failed (retrying)",
    );
    std::fs::write(&pending, format!("{id}\n")).unwrap();
    wait_status(&agent, &[], "/readyz", 200, "primary: writable");
    assert!(!pending.exists(), "the pending file is removed once loaded");
    assert_same(&before, &snapshot(&target).unwrap());
    // Through the binary log, the partial-load mark before the dump's first statement and its
    // removal after its last: a copy of a replica taken at any point mid-load holds the mark.
    let binlog: Vec<String> = target
        .query("SHOW BINARY LOGS")
        .unwrap()
        .iter()
        .flat_map(|log| {
            target
                .query(&format!("SHOW BINLOG EVENTS IN '{}'", log[0]))
                .unwrap()
        })
        .map(|event| event[5].clone())
        .collect();
    let at = |what: &str| binlog.iter().position(|info| info.contains(what));
    let mark = at("CREATE TABLE IF NOT EXISTS bulwark_bootstrap.partial_load");
    let first_dump = at("DROP TABLE IF EXISTS");
    let unmark = binlog
        .iter()
        .rposition(|info| info.contains("DROP DATABASE IF EXISTS bulwark_bootstrap"));
    let last_dump = binlog
        .iter()
        .rposition(|info| info.contains("INSERT INTO") || info.contains("CREATE TABLE `"));
    assert!(
        mark.is_some() && first_dump.is_some() && mark < first_dump && last_dump < unmark,
        "mark {mark:?}, dump {first_dump:?}..{last_dump:?}, unmark {unmark:?}: {binlog:#?}"
    );
    // The dump replaced the privilege tables; the agent put its accounts back.
    wait_for("the accounts after the load", &[&agent], || {
        sql_tcp(&target, "bulwark_backup", "b4ckup-secret", "SELECT 1").ok()
    });
    assert!(
        agent.logs().contains("pending logical restore loaded"),
        "{}",
        agent.logs()
    );
}

/// A new cluster bootstrapped from a physical backup of a server that was itself a replica
/// (its `gtid_slave_pos` is in the backup): every pod restores the same backup, and the
/// agents make the binary logs continue after the backup's GTID position and the replicas
/// start from it. A replica joins after the primary has taken writes; then the primary is
/// lost, the replica promoted, and a pod whose volume was restored from the same backup joins
/// the new primary, which must serve it from the backup's position (without the adoption:
/// error 1236, the position is in neither its binary log nor its replica position).
#[test]
fn a_physical_bootstrap_continues_the_backups_gtid_history() {
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = w.join("repo").display().to_string();

    // The source: a server of another cluster (server_id 105) with binlog and GTIDs as
    // `bulwark-agent init` sets them, loaded, and with a replica's position of its own.
    let source = instance_server(w, "harbor-5");
    source.sql("SET GLOBAL read_only = OFF").unwrap();
    load_fixture(&source, 300).unwrap();
    let position = scalar(&source, "SELECT @@gtid_binlog_pos");
    assert!(position.starts_with("0-105-"), "{position}");
    source
        .sql(&format!("SET GLOBAL gtid_slave_pos = '{position}'"))
        .unwrap();
    let seq: u64 = position.rsplit('-').next().unwrap().parse().unwrap();
    let before = snapshot(&source).unwrap();
    let b = backup(&repo, &source, &["--method", "physical"], &[]);
    assert_eq!(b["gtidSet"].as_str(), Some(position.as_str()), "{b}");
    drop(source);
    eprintln!("source loaded and backed up after {:?}", started.elapsed());

    // Every pod's restore init container: the same backup into an empty data volume, and the
    // position beside the datadir.
    let mut pods = Vec::new();
    for ordinal in 0..3 {
        let volume = w.join(format!("volume-{ordinal}"));
        let datadir = volume.join("data");
        std::fs::create_dir_all(&datadir).unwrap();
        let mut c = cli(&["restore", "--repo", &repo, "--json", "--datadir"]);
        c.arg(&datadir).arg("latest");
        let out: serde_json::Value = serde_json::from_str(&ok(c)).unwrap();
        assert_eq!(out["action"], "restored", "{out}");
        assert_eq!(out["gtidSet"].as_str(), Some(position.as_str()), "{out}");
        let gtid_file = volume.join("bulwark-restored-gtid");
        let recorded: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&gtid_file).unwrap()).unwrap();
        assert_eq!(recorded["gtidSet"].as_str(), Some(position.as_str()));
        assert_eq!(recorded["backupId"], b["id"]);
        pods.push((datadir, gtid_file));
    }
    // A restart of the pod before the agent adopted it: the restore is skipped (without the
    // repository) and the position stays for the agent.
    let left = std::fs::read(&pods[0].1).unwrap();
    let mut again = cli(&["restore", "--repo", "/nonexistent", "--datadir"]);
    again.arg(&pods[0].0).arg("latest");
    assert!(ok(again).contains("restore skipped"));
    assert_eq!(std::fs::read(&pods[0].1).unwrap(), left);
    eprintln!("datadirs restored after {:?}", started.elapsed());

    // mysqld with the settings `bulwark-agent init` writes for the pods of `quay`.
    let server = |ordinal: usize| {
        let args = instance_args(w, &format!("quay-{ordinal}"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        MariaDb::start_with_datadir_and_args(&pods[ordinal].0, &args).unwrap()
    };
    let p_db = server(0);
    let r_db = server(1);
    // What the agents start from: no binary log, and the source's replica position.
    assert_eq!(scalar(&p_db, "SELECT @@gtid_binlog_pos"), "");
    assert_eq!(scalar(&r_db, "SELECT @@gtid_slave_pos"), position);

    let creds = credentials(w, "");
    let creds_s = creds.to_str().unwrap();
    let agent = |ordinal: usize, db: &MariaDb, labels: &Labels, primary: &MariaDb| {
        Agent::start(
            &format!("quay-{ordinal}"),
            w,
            db,
            &[
                "--labels-file",
                labels.file().to_str().unwrap(),
                "--credentials-dir",
                creds_s,
                "--primary-host",
                "127.0.0.1",
                "--primary-port",
                &primary.port().to_string(),
                "--gtid-file",
                pods[ordinal].1.to_str().unwrap(),
            ],
            &[],
        )
    };
    let mut p_labels = Labels::new(w.join("podinfo-0"));
    let mut r_labels = Labels::new(w.join("podinfo-1"));
    p_labels.set(Some("primary"));
    let r = agent(1, &r_db, &r_labels, &p_db);
    let p = agent(0, &p_db, &p_labels, &p_db);

    wait_status(&p, &[&r], "/readyz", 200, "primary: writable");
    assert!(!pods[0].1.exists(), "the primary's GTID file is left");
    assert_eq!(scalar(&p_db, "SELECT @@gtid_binlog_state"), position);
    assert_same(&before, &snapshot(&p_db).unwrap());
    assert!(
        p.logs().contains("restored GTID position adopted"),
        "{}",
        p.logs()
    );
    // New writes continue the history after the backup's position.
    p_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY, name TEXT); INSERT INTO harbor.ships VALUES (1, 'Argo'), (2, 'Nautilus')")
        .unwrap();
    let now = scalar(&p_db, "SELECT @@gtid_binlog_pos");
    assert_eq!(
        now,
        format!("0-100-{}", seq + 3),
        "continues after {position}"
    );

    // The replica had no role so far: its position waited. Now it joins.
    let (code, body) = r.get("/readyz");
    assert!(
        code == 503 && body.contains("role unknown"),
        "{code} {body}"
    );
    assert!(pods[1].1.exists(), "adopted before the role was known");
    assert_eq!(scalar(&r_db, "SELECT @@gtid_binlog_pos"), "");
    r_labels.set(Some("replica"));
    wait_status(
        &r,
        &[&p],
        "/readyz",
        200,
        "replica: replicating from 127.0.0.1:",
    );
    eprintln!("primary and replica ready after {:?}", started.elapsed());
    assert!(!pods[1].1.exists(), "the replica's GTID file is left");
    assert!(
        r.logs().contains("restored GTID position adopted"),
        "{}",
        r.logs()
    );
    wait_for("the new rows on the replica", &[&p, &r], || {
        (r_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "2").then_some(())
    });
    wait_for("the replica at the primary's position", &[&p, &r], || {
        (scalar(&r_db, "SELECT @@gtid_slave_pos") == now).then_some(())
    });
    let status = replica_status(&r_db);
    for (column, want) in [
        ("Slave_IO_Running", "Yes"),
        ("Slave_SQL_Running", "Yes"),
        ("Using_Gtid", "Slave_Pos"),
        ("Last_IO_Errno", "0"),
        ("Last_SQL_Errno", "0"),
    ] {
        assert_eq!(status[column], want, "{column}: {status:?}");
    }
    assert_same(&snapshot(&p_db).unwrap(), &snapshot(&r_db).unwrap());
    let mut restored_part = snapshot(&r_db).unwrap();
    restored_part.databases.retain(|k, _| k != "`harbor`");
    restored_part
        .tables
        .retain(|k, _| !k.starts_with("`harbor`."));
    assert_same(&before, &restored_part);
    // The replica logged what it applied after the backup's position.
    let replica_state = format!("0-105-{seq},0-100-{}", seq + 3);
    assert_eq!(scalar(&r_db, "SELECT @@gtid_binlog_state"), replica_state);

    // The primary is lost; the replica is promoted and takes writes.
    drop(p);
    drop(p_db);
    r_labels.set(Some("primary"));
    wait_status(&r, &[], "/readyz", 200, "primary: writable");
    r_db.sql("INSERT INTO harbor.ships VALUES (3, 'Endurance')")
        .unwrap();
    let now = scalar(&r_db, "SELECT @@gtid_binlog_pos");
    assert_eq!(now, format!("0-101-{}", seq + 4));

    // A pod whose volume holds the same backup joins the new primary.
    let q_db = server(2);
    let mut q_labels = Labels::new(w.join("podinfo-2"));
    q_labels.set(Some("replica"));
    let q = agent(2, &q_db, &q_labels, &r_db);
    wait_status(
        &q,
        &[&r],
        "/readyz",
        200,
        "replica: replicating from 127.0.0.1:",
    );
    assert!(!pods[2].1.exists(), "the third pod's GTID file is left");
    wait_for("every row on the third pod", &[&r, &q], || {
        (q_db.sql("SELECT COUNT(*) FROM harbor.ships").ok()?.trim() == "3").then_some(())
    });
    wait_for("the third pod at the primary's position", &[&r, &q], || {
        (scalar(&q_db, "SELECT @@gtid_slave_pos") == now).then_some(())
    });
    assert_same(&snapshot(&r_db).unwrap(), &snapshot(&q_db).unwrap());
    eprintln!("third pod replicated after {:?}", started.elapsed());
}

/// A new cluster bootstrapped from a logical backup: every pod's restore leaves the pending
/// load, the primary's agent loads it through the binary log, and the replica's agent drops
/// its own (a replica must never load it, even once promoted) and gets the data by
/// replication, the dump's `mysql` schema (with the source's `gtid_slave_pos` rows) included.
#[test]
fn a_logical_bootstrap_reaches_the_replicas_through_the_binary_log() {
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let repo = w.join("repo").display().to_string();
    let source = instance_server(w, "harbor-5");
    source.sql("SET GLOBAL read_only = OFF").unwrap();
    // The source is another cluster: the same accounts, with its own passwords.
    for user in ["bulwark_replication", "bulwark_backup", "bulwark_exporter"] {
        source
            .sql(&format!(
                "CREATE USER '{user}'@'%' IDENTIFIED BY 'the-source-clusters'; \
                 GRANT SELECT ON *.* TO '{user}'@'%'"
            ))
            .unwrap();
    }
    load_fixture(&source, 200).unwrap();
    source
        .sql("SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos")
        .unwrap();
    let before = snapshot(&source).unwrap();
    let b = backup(&repo, &source, &["--method", "logical"], &[]);
    drop(source);

    let mut pending = Vec::new();
    for ordinal in 0..2 {
        let datadir = w.join(format!("volume-{ordinal}/data"));
        std::fs::create_dir_all(&datadir).unwrap();
        let mut c = cli(&["restore", "--repo", &repo, "--datadir"]);
        c.arg(&datadir).arg("latest");
        assert!(ok(c).contains("the agent loads it"));
        let file = w.join(format!("volume-{ordinal}/bulwark-pending-logical-restore"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap().trim(),
            b["id"].as_str().unwrap()
        );
        assert!(!w
            .join(format!("volume-{ordinal}/bulwark-restored-gtid"))
            .exists());
        pending.push(file);
    }
    // mysqld's entrypoint initializes the empty datadirs.
    let p_db = instance_server(w, "quay-0");
    let mut r_db = instance_server(w, "quay-1");
    let pair = BootstrappedPair::start(w, &p_db, &r_db, &pending, &repo);
    let (p, r) = (&pair.primary, &pair.replica);

    wait_status(p, &[r], "/readyz", 200, "primary: writable");
    assert!(!pending[0].exists());
    assert_same(&before, &snapshot(&p_db).unwrap());
    assert!(
        p_db.sql("SHOW BINLOG EVENTS").unwrap().contains("orchard"),
        "the load is not in the primary's binary log"
    );
    wait_for("the replica to drop its pending load", &[p, r], || {
        (!pending[1].exists()).then_some(())
    });
    assert!(
        r.logs().contains("pending logical restore discarded"),
        "{}",
        r.logs()
    );
    wait_status(
        r,
        &[p],
        "/readyz",
        200,
        "replica: replicating from 127.0.0.1:",
    );
    let loaded = scalar(&p_db, "SELECT @@gtid_binlog_pos");
    wait_for("the replica at the primary's position", &[p, r], || {
        (scalar(&r_db, "SELECT @@gtid_slave_pos") == loaded).then_some(())
    });
    assert_same(&before, &replica_snapshot(&r_db));
    eprintln!("replica has the load after {:?}", started.elapsed());

    // The dump's privilege tables replicated, and so did the primary's convergence after
    // them: every member has this cluster's passwords, not the source's.
    for (db, member) in [(&p_db, "primary"), (&r_db, "replica")] {
        sql_tcp(db, "bulwark_backup", "b4ckup-secret", "SELECT 1")
            .unwrap_or_else(|e| panic!("{member}: the cluster's backup password: {e}"));
        assert!(
            sql_tcp(db, "bulwark_backup", "the-source-clusters", "SELECT 1").is_err(),
            "{member} still takes the source's backup password"
        );
        // The source's exporter account (from anywhere, reading every table) went too.
        assert_eq!(
            scalar(
                db,
                "SELECT GROUP_CONCAT(host) FROM mysql.user WHERE user = 'bulwark_exporter'"
            ),
            "127.0.0.1",
            "{member}"
        );
    }

    // Replication keeps running after the dump's `mysql` schema went through it.
    p_db.sql("CREATE DATABASE harbor; CREATE TABLE harbor.ships (id INT PRIMARY KEY); INSERT INTO harbor.ships VALUES (1)")
        .unwrap();
    let now = scalar(&p_db, "SELECT @@gtid_binlog_pos");
    wait_for("the replica at the primary's position", &[p, r], || {
        (scalar(&r_db, "SELECT @@gtid_slave_pos") == now).then_some(())
    });
    let status = replica_status(&r_db);
    for (column, want) in [
        ("Slave_IO_Running", "Yes"),
        ("Slave_SQL_Running", "Yes"),
        ("Last_SQL_Errno", "0"),
    ] {
        assert_eq!(status[column], want, "{column}: {status:?}");
    }
    assert_same(&snapshot(&p_db).unwrap(), &replica_snapshot(&r_db));

    // The replica's position survives a restart (it is read back from mysql.gtid_slave_pos,
    // which the load replaced).
    r_db.restart().unwrap();
    p_db.sql("INSERT INTO harbor.ships VALUES (2)").unwrap();
    let now = scalar(&p_db, "SELECT @@gtid_binlog_pos");
    wait_for(
        "the restarted replica at the primary's position",
        &[p, r],
        || (scalar(&r_db, "SELECT @@gtid_slave_pos") == now).then_some(()),
    );
    wait_status(r, &[p], "/readyz", 200, "replicating");
    assert_same(&snapshot(&p_db).unwrap(), &replica_snapshot(&r_db));
    eprintln!("replicated after {:?}", started.elapsed());
}
