//! `bulwark-agent seed` against real MariaDB servers and their agents: a member added after
//! the primary purged the binary logs that hold the cluster's start is seeded with a copy of a
//! replica's data and replicates only what followed; a datadir that holds a server is left
//! alone; a forged request is refused; with nobody to copy from, nothing is written; a pod
//! that is no member (it lacks the order key) is never copied from, and the copy comes from a
//! member instead.

mod common;

use bulwark_contract::member::MemberStatus;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// An agent serving copies of `db`'s data, for `pod`, replicating from 127.0.0.1:`port`.
fn donor_agent(
    name: &str,
    w: &Path,
    db: &MariaDb,
    labels: &Labels,
    creds: &str,
    port: &str,
) -> Agent {
    let datadir = db.datadir().to_str().unwrap().to_owned();
    member_agent(
        name,
        w,
        db,
        labels,
        creds,
        port,
        &["--clone-listen", "127.0.0.1:0", "--datadir", &datadir],
    )
}

fn seed(w: &Path, peers: &[String], datadir: &Path) -> std::process::Command {
    let mut c = cli(&["seed", "--pod-name", "quay-2", "--credentials-dir"]);
    c.arg(w.join("credentials")).arg("--datadir").arg(datadir);
    c.arg("--gtid-file").arg(w.join("gtid-quay-2"));
    for p in peers {
        c.arg("--peers").arg(p);
    }
    c
}

#[test]
fn a_member_added_after_the_binary_logs_were_purged_is_seeded_from_a_replica() {
    let Pair {
        work,
        a_db,
        b_db,
        creds: creds_s,
        a_labels,
        b_labels,
    } = Pair::new();
    let w = work.path();
    let a_port = a_db.port().to_string();
    let a = donor_agent("a", w, &a_db, &a_labels, &creds_s, &a_port);
    let b = donor_agent("b", w, &b_db, &b_labels, &creds_s, &a_port);
    wait_status(&a, &[&b], "/readyz", 200, "primary: writable");
    load_fixture(&a_db, 500).unwrap();
    let loaded = scalar(&a_db, "SELECT @@gtid_binlog_pos");
    wait_for("the replica at the primary's position", &[&a, &b], || {
        (scalar(&b_db, "SELECT @@gtid_slave_pos") == loaded).then_some(())
    });
    wait_status(&b, &[&a], "/readyz", 200, "replica: replicating");
    // The binary log that holds the cluster's start is gone: a member replicating from
    // nothing would stop with error 1236.
    a_db.sql("FLUSH BINARY LOGS").unwrap();
    let current = scalar(&a_db, "SHOW MASTER STATUS");
    let current = current.split('\t').next().unwrap().to_owned();
    // A log a replica's dump thread still reads is kept: purge until it has moved on.
    wait_for("the first binary log purged", &[&a, &b], || {
        a_db.sql(&format!("PURGE BINARY LOGS TO '{current}'"))
            .unwrap();
        scalar(&a_db, "SHOW BINARY LOGS")
            .starts_with(&current)
            .then_some(())
    });

    let peers = [a.addr.to_string(), b.addr.to_string()];
    let b_report = MemberStatus::from_line(&b.get("/status").1).unwrap();
    assert_ne!(b_report.clone_port, 0, "{b_report:?}");

    // A forged request, and one made for another donor, are refused before anything is
    // copied.
    let b_clone = format!("127.0.0.1:{}", b_report.clone_port);
    let a_report = MemberStatus::from_line(&a.get("/status").1).unwrap();
    let a_clone = format!("127.0.0.1:{}", a_report.clone_port);
    for (donor, key, refusal) in [
        (
            b_clone.as_str(),
            b"not-the-key".as_slice(),
            "refused: the clone request's signature does not match".to_owned(),
        ),
        (
            a_clone.as_str(),
            b"order-key".as_slice(),
            format!("refused: the clone request is for {a_clone}, not this donor ({b_clone})"),
        ),
    ] {
        let mut asked = std::net::TcpStream::connect(b_clone.as_str()).unwrap();
        let request = bulwark_contract::clone::CloneRequest {
            member: "intruder".into(),
            donor: donor.into(),
            issued_at: bulwark_agent::run::clone::unix_now(),
            nonce: bulwark_agent::run::clone::fresh_nonce().unwrap(),
        };
        writeln!(asked, "{}", request.sign(key)).unwrap();
        let mut answer = String::new();
        BufReader::new(asked).read_line(&mut answer).unwrap();
        assert_eq!(answer.trim(), refusal);
    }
    // A request served once (its copy begins, and the receiver goes) is refused when sent
    // again: one captured on the network gives nobody a copy.
    let request = bulwark_contract::clone::CloneRequest {
        member: "quay-9".into(),
        donor: a_clone.clone(),
        issued_at: bulwark_agent::run::clone::unix_now(),
        nonce: bulwark_agent::run::clone::fresh_nonce().unwrap(),
    };
    let line = request.sign(b"order-key");
    let first_line = |line: &str| {
        let mut asked = std::net::TcpStream::connect(a_clone.as_str()).unwrap();
        writeln!(asked, "{line}").unwrap();
        let mut answer = String::new();
        BufReader::new(asked).read_line(&mut answer).unwrap();
        answer
    };
    assert!(first_line(&line).starts_with("streaming "), "served once");
    assert_eq!(
        first_line(&line).trim(),
        "refused: the clone request was served before: a replay"
    );

    // The new member: an empty volume, seeded from the replica, or from the primary when the
    // replica's report did not come in time (a loaded machine; the preference is in the
    // donor table of `seed::choose_donor`'s unit test).
    let volume = w.join("volume-2");
    let datadir = volume.join("data");
    std::fs::create_dir_all(&datadir).unwrap();
    let out = ok(seed(w, &peers, &datadir));
    let donor = [(&b, &b_clone), (&a, &a_clone)]
        .into_iter()
        .find(|(_, addr)| out.contains(&format!("from {addr} ")))
        .unwrap_or_else(|| panic!("no member named as the donor: {out}"))
        .0;
    eprintln!("{out}");
    let gtid: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(w.join("gtid-quay-2")).unwrap()).unwrap();
    assert_eq!(gtid["gtidSet"].as_str(), Some(loaded.as_str()), "{gtid}");
    assert!(
        donor.logs().contains("copy for a new member complete"),
        "{}",
        donor.logs()
    );
    // Run again (a restarted pod): the server's datadir is left alone.
    let again = ok(seed(w, &peers, &datadir));
    assert!(again.contains("already initialized"), "{again}");

    // Its server continues from the copy's position and replicates what followed.
    let args = instance_args(w, "quay-2");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c_db = MariaDb::start_with_datadir_and_args(&datadir, &args).unwrap();
    let c_labels = {
        let mut l = Labels::new(w.join("podinfo-c"));
        l.set(Some("replica"));
        l
    };
    let gtid_file = w.join("gtid-quay-2");
    let c = member_agent(
        "c",
        w,
        &c_db,
        &c_labels,
        &creds_s,
        &a_port,
        &["--gtid-file", gtid_file.to_str().unwrap()],
    );
    wait_status(&c, &[&a, &b], "/readyz", 200, "replica: replicating");
    assert!(!gtid_file.exists(), "the copy's position was not adopted");
    a_db.sql("CREATE DATABASE later; CREATE TABLE later.t (id INT PRIMARY KEY); INSERT INTO later.t VALUES (1)")
        .unwrap();
    let now = scalar(&a_db, "SELECT @@gtid_binlog_pos");
    wait_for(
        "the new member at the primary's position",
        &[&a, &c],
        || (scalar(&c_db, "SELECT @@gtid_slave_pos") == now).then_some(()),
    );
    assert_same(&snapshot(&a_db).unwrap(), &replica_snapshot(&c_db));
    // Compared by GTID, the seeded member and the others agree: each has all the other has.
    let engine = bulwark_contract::Engine::MariaDb;
    let reports = wait_for(
        "the members' reports at the same position",
        &[&a, &b, &c],
        || {
            let r: Vec<MemberStatus> = [&a, &b, &c]
                .iter()
                .map(|x| MemberStatus::from_line(&x.get("/status").1).ok())
                .collect::<Option<_>>()?;
            r.iter().all(|x| x.gtid_executed == now).then_some(r)
        },
    );
    for x in &reports {
        for y in &reports {
            assert!(x.has_all_of(engine, y), "{x:?} lacks what {y:?} has");
        }
    }
    let status = replica_status(&c_db);
    assert_eq!(
        (
            status["Slave_IO_Running"].as_str(),
            status["Last_IO_Errno"].as_str()
        ),
        ("Yes", "0"),
        "{status:?}"
    );

    // Nobody to copy from: nothing is written, the datadir stays empty.
    let lonely = volume.join("lonely");
    std::fs::create_dir_all(&lonely).unwrap();
    let out = ok(seed(w, &["127.0.0.1:1".to_owned()], &lonely));
    assert!(out.contains("no member's agent answered"), "{out}");
    assert_eq!(std::fs::read_dir(&lonely).unwrap().count(), 0);

    // A pod that only carries the cluster's labels stands behind its headless Service: it
    // reports like the replica every new member prefers and streams a datadir of its own.
    // Without the order key it cannot prove it is a member: nothing is taken from it, and the
    // copy comes from a member.
    let impostor_copy = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let mut forged = b_report.clone();
    forged.clone_port = impostor_copy.local_addr().unwrap().port();
    let forged = forged.to_line();
    let impostor_agent = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let impostor = impostor_agent.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in impostor_agent.incoming().flatten() {
            let mut head = String::new();
            let mut reader = BufReader::new(&stream);
            while reader.read_line(&mut head).is_ok_and(|n| n > 2) {}
            let _ = write!(
                &stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{forged}",
                forged.len()
            );
        }
    });
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = asked.clone();
    std::thread::spawn(move || {
        for stream in impostor_copy.incoming().flatten() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut request = String::new();
            let _ = BufReader::new(&stream).read_line(&mut request);
            // "streaming", then one frame of a planted file and the end.
            let _ = (&stream).write_all(b"streaming\n\0\0\0\x04XBST\0\0\0\0complete\n");
        }
    });
    // With nobody else to copy from, the seed waits: what the impostor reports might be the
    // cluster's data, and an empty server must never start in a cluster that has data. Nor is
    // a copy asked of it: no primary answers to vouch for one.
    let waiting = volume.join("waiting");
    std::fs::create_dir_all(&waiting).unwrap();
    let mut alone = seed(w, std::slice::from_ref(&impostor), &waiting)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(8));
    let still = alone.try_wait().unwrap();
    let _ = alone.kill();
    let _ = alone.wait();
    assert!(
        still.is_none(),
        "the seed ended ({still:?}) instead of waiting"
    );
    assert_eq!(
        asked.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a copy was asked with no primary answering"
    );
    let planted = volume.join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    let out = ok(seed(w, &[impostor, a.addr.to_string()], &planted));
    assert!(
        asked.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the impostor was never asked: {out}"
    );
    assert!(out.contains(&format!("from {a_clone} ")), "{out}");
    let gtid: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(w.join("gtid-quay-2")).unwrap()).unwrap();
    assert_eq!(gtid["gtidSet"].as_str(), Some(now.as_str()), "{gtid}");
}
