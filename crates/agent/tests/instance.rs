//! The pod-side commands on real MariaDB: `bulwark-agent init` writes settings a real server
//! accepts, and `bulwark-agent restore` bootstraps an empty datadir from physical and logical
//! backups, never touches an initialized one, and redoes an interrupted restore.

mod common;

use common::*;
use std::path::Path;

/// `key = value` lines of the `[mysqld]` section as server options.
fn as_server_args(cnf: &str) -> Vec<String> {
    cnf.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| format!("--{k}={v}"))
        .collect()
}

#[test]
fn init_writes_settings_a_real_server_accepts() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("my.cnf");
    std::fs::write(&config, "[mysqld]\nmax_connections = 77\n").unwrap();
    let conf_dir = work.path().join("conf.d");
    let mut c = cli(&["init"]);
    c.env("BULWARK_AGENT_POD_NAME", "quay-3")
        .env("BULWARK_AGENT_CLUSTER", "quay")
        .env("BULWARK_AGENT_ENGINE", "mariadb")
        .env("BULWARK_AGENT_CONFIG_FILE", &config)
        .env("BULWARK_AGENT_CONF_DIR", &conf_dir);
    let out = ok(c);
    assert!(out.contains("server_id 103"), "{out}");
    assert_eq!(
        std::fs::read_to_string(conf_dir.join("bulwark-cluster.cnf")).unwrap(),
        "[mysqld]\nmax_connections = 77\n"
    );
    let instance = std::fs::read_to_string(conf_dir.join("bulwark-instance.cnf")).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&conf_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bulwark-cluster.cnf", "bulwark-instance.cnf"]);

    // Run again (every pod start does): same result.
    let mut again = cli(&["init", "--pod-name", "quay-3", "--cluster", "quay"]);
    again
        .args(["--engine", "mariadb", "--config-file"])
        .arg(&config)
        .arg("--conf-dir")
        .arg(&conf_dir);
    ok(again);
    assert_eq!(
        std::fs::read_to_string(conf_dir.join("bulwark-instance.cnf")).unwrap(),
        instance
    );

    let args = as_server_args(&instance);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let db = MariaDb::start_with_args(&args).unwrap();
    let row = db
        .query(
            "SELECT @@server_id, @@report_host, @@read_only, @@log_bin, @@log_slave_updates, \
             @@binlog_format, @@gtid_strict_mode, @@relay_log",
        )
        .unwrap();
    assert_eq!(
        row[0],
        [
            "103",
            "quay-3.quay-headless",
            "1",
            "1",
            "1",
            "ROW",
            "1",
            "relay-bin"
        ]
    );

    for (pod, needle) in [
        ("quay", "failed to parse pod name \"quay\""),
        ("quay-x", "failed to parse pod name"),
    ] {
        let mut c = cli(&["init", "--pod-name", pod, "--cluster", "quay"]);
        c.args(["--engine", "mariadb", "--config-file"])
            .arg(&config)
            .arg("--conf-dir")
            .arg(work.path().join("other"));
        fails(c, &[needle]);
    }
    assert!(!work.path().join("other").exists());
    let mut c = cli(&["init", "--pod-name", "quay-0", "--cluster", "quay"]);
    c.args(["--engine", "mysql", "--config-file"])
        .arg(work.path().join("absent.cnf"))
        .arg("--conf-dir")
        .arg(&conf_dir);
    fails(c, &["failed to read the configuration file", "absent.cnf"]);
}

/// Names, sizes and modification times of everything under `dir`, to show it was not touched.
fn fingerprint(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    tree(dir)
        .into_iter()
        .map(|rel| {
            let m = std::fs::metadata(dir.join(&rel)).unwrap();
            (rel, m.len(), m.modified().unwrap())
        })
        .collect()
}

fn instance_restore(repo: &str, datadir: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = cli(&["restore", "--repo", repo, "--datadir"]);
    c.arg(datadir).args(extra);
    c
}

/// The entries of a datadir (top level).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

const MARKER: &str = ".bulwark-restore-incomplete";
const STAGING: &str = ".bulwark-restore-staging";

#[test]
fn physical_bootstrap_restores_once_and_redoes_an_interrupted_restore() {
    let Scenario { work, source, repo } = Scenario::new(400);
    let key = key_file(work.path(), "key");
    let key = key.to_str().unwrap();
    let b = backup(
        &repo,
        &source,
        &["--encryption-key-file", key, "--chunk-size", "256KiB"],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();
    let before = snapshot(&source).unwrap();
    drop(source);

    // A fresh volume: an existing, empty mount point (with lost+found, as ext4 makes it).
    let datadir = work.path().join("vol");
    std::fs::create_dir_all(datadir.join("lost+found")).unwrap();
    let out = ok(instance_restore(
        &repo,
        &datadir,
        &["--encryption-key-file", key, "latest"],
    ));
    assert!(out.contains(&format!("restored backup {id}")), "{out}");
    // The backup's GTID position, left beside the datadir for the agent.
    let gtid_set = b["gtidSet"].as_str().unwrap().to_string();
    assert!(gtid_set.starts_with("0-1-"), "{b}");
    assert!(
        out.contains(&format!("GTID position {gtid_set} left in")),
        "{out}"
    );
    let gtid_file = work.path().join("bulwark-restored-gtid");
    let recorded = std::fs::read_to_string(&gtid_file).unwrap();
    assert_eq!(
        recorded,
        format!("{{\"backupId\":\"{id}\",\"gtidSet\":\"{gtid_set}\"}}\n")
    );
    let left = entries(&datadir);
    assert!(left.contains(&"mysql".to_string()) && left.contains(&"lost+found".to_string()));
    assert!(
        !left.iter().any(|e| e == MARKER || e == STAGING),
        "{left:?}"
    );
    // MariaDB would list lost+found as a database (`#mysql50#lost+found`); it was only
    // there to show the restore keeps it.
    std::fs::remove_dir(datadir.join("lost+found")).unwrap();
    {
        let restored = MariaDb::start_with_datadir(&datadir).unwrap();
        assert_same(&before, &snapshot(&restored).unwrap());
    }

    // Again, now that it holds a server: skipped before the repository is even opened.
    let unchanged = fingerprint(&datadir);
    for repo in [repo.as_str(), "/nonexistent/repository"] {
        let out = ok(instance_restore(repo, &datadir, &["latest"]));
        assert!(
            out.contains("already initialized") && out.contains("restore skipped"),
            "{out}"
        );
    }
    assert_eq!(fingerprint(&datadir), unchanged);
    assert_eq!(std::fs::read_to_string(&gtid_file).unwrap(), recorded);
    let mut c = instance_restore(&repo, &datadir, &["latest"]);
    c.env("BULWARK_AGENT_LOG", "info");
    let out = run(c);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("datadir already initialized; restore skipped"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // An interrupted restore (its marker left behind with half-moved files) is redone from
    // scratch, never started as a server.
    let broken = work.path().join("broken");
    std::fs::create_dir_all(broken.join("mysql")).unwrap();
    std::fs::create_dir_all(broken.join(STAGING).join("orchard")).unwrap();
    std::fs::write(broken.join("mysql/half.frm"), "half").unwrap();
    std::fs::write(broken.join("ibdata1"), "not really").unwrap();
    std::fs::write(broken.join(MARKER), "restoring").unwrap();
    // A GTID file left by the interrupted attempt is replaced; this one lives inside the
    // datadir, given by the environment.
    let inside = broken.join("restored-gtid");
    std::fs::write(&inside, "stale").unwrap();
    let mut c = instance_restore(&repo, &broken, &["--encryption-key-file", key, &id]);
    c.env("BULWARK_AGENT_GTID_FILE", &inside);
    let out = ok(c);
    assert!(out.contains("restored backup"), "{out}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), recorded);
    let mut c = instance_restore(&repo, &broken, &["latest"]);
    c.env("BULWARK_AGENT_GTID_FILE", &inside);
    assert!(ok(c).contains("restore skipped"));
    assert!(!broken.join("mysql/half.frm").exists());
    assert!(!broken.join(MARKER).exists() && !broken.join(STAGING).exists());
    {
        let restored = MariaDb::start_with_datadir(&broken).unwrap();
        assert_same(&before, &snapshot(&restored).unwrap());
    }

    // A real kill mid-restore: whatever it had done, the next run ends with a correct datadir.
    let killed = work.path().join("killed");
    std::fs::create_dir(&killed).unwrap();
    let mut child = instance_restore(&repo, &killed, &["--encryption-key-file", key, &id])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        std::time::Duration::from_secs(60),
        "the restore to start",
        || killed.join(STAGING).exists() || child.try_wait().unwrap().is_some(),
    );
    child.kill().unwrap();
    let _ = child.wait();
    eprintln!("killed the restore; it left: {:?}", entries(&killed));
    let out = ok(instance_restore(
        &repo,
        &killed,
        &["--encryption-key-file", key, &id],
    ));
    assert!(
        out.contains("restored backup") || out.contains("restore skipped"),
        "{out}"
    );
    assert!(!killed.join(MARKER).exists());
    let restored = MariaDb::start_with_datadir(&killed).unwrap();
    assert_same(&before, &snapshot(&restored).unwrap());

    // Unknown files are not a server and not ours: refused, left alone.
    let odd = work.path().join("odd");
    std::fs::create_dir(&odd).unwrap();
    std::fs::write(odd.join("notes.txt"), "mine").unwrap();
    fails(
        instance_restore(&repo, &odd, &["--encryption-key-file", key, &id]),
        &["notes.txt", "refusing"],
    );
    assert_eq!(entries(&odd), ["notes.txt"]);
}

#[test]
fn logical_bootstrap_verifies_and_leaves_the_id_for_the_agent() {
    let Scenario { work, source, repo } = Scenario::new(50);
    let key = key_file(work.path(), "key");
    let key = key.to_str().unwrap();
    let b = backup(
        &repo,
        &source,
        &["--method", "logical", "--encryption-key-file", key],
        &[],
    );
    let id = b["id"].as_str().unwrap();
    let volume = work.path().join("volume");
    let datadir = volume.join("data");
    std::fs::create_dir_all(&datadir).unwrap();
    let pending = volume.join("bulwark-pending-logical-restore");

    // Without the key it cannot be verified (nor loaded later): refused, nothing left.
    fails(
        instance_restore(&repo, &datadir, &["latest"]),
        &["encrypted", "--encryption-key-file"],
    );
    assert!(!pending.exists());

    let out = ok(instance_restore(
        &repo,
        &datadir,
        &["--encryption-key-file", key, "latest", "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["action"], "pending");
    assert_eq!(v["backupId"], id);
    assert_eq!(
        std::fs::read_to_string(&pending).unwrap(),
        format!("{id}\n")
    );
    assert!(
        entries(&datadir).is_empty(),
        "the datadir is left for mysqld"
    );

    // A damaged backup is caught before anything is left for the agent.
    std::fs::remove_file(&pending).unwrap();
    let seg = Path::new(&repo)
        .join("backups")
        .join(id)
        .join("seg-000000.zst.aes");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x40;
    std::fs::write(&seg, bytes).unwrap();
    let custom = work.path().join("elsewhere/pending");
    std::fs::create_dir_all(custom.parent().unwrap()).unwrap();
    fails(
        instance_restore(
            &repo,
            &datadir,
            &[
                "--encryption-key-file",
                key,
                id,
                "--pending-file",
                custom.to_str().unwrap(),
            ],
        ),
        &["corrupt"],
    );
    assert!(!pending.exists() && !custom.exists());
}

/// Polls `done` until it holds, failing the test after `timeout`.
fn wait_for(timeout: std::time::Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
