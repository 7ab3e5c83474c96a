//! An encrypted repository against someone who can write to the bucket but has no key, on real
//! MariaDB: a segment archived without a key from another server and planted in the archive is
//! never replayed; an edited manifest is damaged; a manifest without its MAC is refused until
//! `rewrap` signs it; another key, or none, is refused before anything is written or read.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::pitr::*;
use common::*;

fn key_env(key: &Path) -> Vec<(String, String)> {
    vec![(
        "MYSQL_BACKUP_ENCRYPTION_KEY_FILE".into(),
        key.display().to_string(),
    )]
}

/// The directory of a segment in a filesystem repository.
fn segment_dir(repo: &str, id: &str) -> std::path::PathBuf {
    let (archive, stamp) = id
        .strip_prefix("binlog-")
        .and_then(|rest| rest.split_once('/'))
        .unwrap();
    Path::new(repo).join("binlogs").join(archive).join(stamp)
}

/// Archives `db` without a key into `repo` from `start` until it reaches `until`.
fn archive_unencrypted(repo: &str, db: &MariaDb, start: &str, until: &str) {
    let mut args = vec![
        "archive".to_string(),
        "--repo".into(),
        repo.into(),
        "--flush-every".into(),
        "1s".into(),
        "--start-gtid".into(),
        start.into(),
    ];
    args.extend(db.cli_args());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = cli(&argv)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while list(repo, &[])["archives"]["default"]["through"] != until {
        assert!(Instant::now() < deadline, "{}", list(repo, &[]));
        std::thread::sleep(Duration::from_millis(200));
    }
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
}

/// Runs `c`, which must fail with `cause` in its one-line error; its stdout.
fn stdout_of_failure(c: std::process::Command, cause: &str) -> String {
    let out = run(c);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains(cause),
        "{stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_encrypted_repository_replays_only_what_its_key_signed() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo").display().to_string();
    let key = key_file(work.path(), "key");
    let keyed = key_env(&key);
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    for _ in 0..3 {
        write_row(&source);
    }
    let b = backup(
        &repo,
        &source,
        &[
            "--method",
            "logical",
            "--encryption-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();
    let a = Archiver::start(&repo, &source, &key, work.path(), "archiver");
    for _ in 0..2 {
        write_row(&source);
    }
    let head = source.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();
    wait_archived_at(&repo, &head, &a);
    a.stop();
    let rows = |db: &MariaDb| db.query("SELECT id, at FROM pitr.w ORDER BY id").unwrap();

    // A server that replicated the source, then committed a row of its own, archived without
    // a key into another repository from the archive's head: a segment continuing it exactly.
    let other = MariaDb::start_with_args(&["--server-id=3", "--log-slave-updates"]).unwrap();
    other
        .sql(&format!(
            "CHANGE MASTER TO master_host='127.0.0.1', master_port={}, master_user='root', \
             master_use_gtid=slave_pos; START SLAVE;",
            source.port()
        ))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while other.query("SELECT @@gtid_binlog_pos").unwrap()[0][0] != head {
        assert!(Instant::now() < deadline, "the replica did not catch up");
        std::thread::sleep(Duration::from_millis(100));
    }
    other.sql("STOP SLAVE; RESET SLAVE ALL").unwrap();
    let planted = write_row(&other);
    let forged_repo = work.path().join("forged").display().to_string();
    archive_unencrypted(&forged_repo, &other, &head, &planted.gtid);
    let forged = list(&forged_repo, &[])["archives"]["default"].clone();
    assert_eq!(forged["segments"], 1, "{forged}");
    let forged_id = std::fs::read_dir(Path::new(&forged_repo).join("binlogs/default"))
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .unwrap();
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    };
    copy(
        &Path::new(&forged_repo)
            .join("binlogs/default")
            .join(&forged_id),
        &Path::new(&repo).join("binlogs/default").join(&forged_id),
    );

    // Under the key the planted segment is damaged and never replayed.
    let listing = list(&repo, &keyed);
    let incomplete = &listing["archives"]["default"]["incomplete"];
    let planted_entry = incomplete
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"].as_str().unwrap().ends_with(&forged_id))
        .unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(planted_entry["damaged"], true, "{listing}");
    assert!(
        planted_entry["reason"].as_str().unwrap().contains("no MAC"),
        "{listing}"
    );
    let (restored, out) = restore_until(&repo, &key, &id, &["--until", "latest"]);
    assert_eq!(rows(&restored), rows(&source), "{out}");
    assert_eq!(
        restored.query("SELECT @@gtid_binlog_pos").unwrap()[0][0],
        head,
        "{out}"
    );
    let k = key.to_str().unwrap();
    let verify_archive = |repo: &str, key: Option<&str>| {
        let mut args = vec!["verify", "--repo", repo, "--archive", "default"];
        if let Some(k) = key {
            args.extend(["--encryption-key-file", k]);
        }
        cli(&args)
    };
    let out = stdout_of_failure(verify_archive(&repo, Some(k)), "without a usable manifest");
    assert!(out.contains(&forged_id) && out.contains("no MAC"), "{out}");
    std::fs::remove_dir_all(segment_dir(&repo, &format!("binlog-default/{forged_id}"))).unwrap();
    let out = ok(verify_archive(&repo, Some(k)));
    assert!(out.contains("0 wrong, 0 unusable, 0 gaps"), "{out}");

    // Without a key nothing stops an edit of an unencrypted archive's manifest, but reading the
    // segment back shows it does not hold what the manifest says.
    let forged_manifest = Path::new(&forged_repo)
        .join("binlogs/default")
        .join(&forged_id)
        .join("manifest.json");
    let mut edited: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&forged_manifest).unwrap()).unwrap();
    edited["last_gtid"] = "0-3-99".into();
    std::fs::write(&forged_manifest, serde_json::to_vec(&edited).unwrap()).unwrap();
    let out = stdout_of_failure(verify_archive(&forged_repo, None), "do not hold what");
    assert!(out.contains("its manifest says 0-3-99"), "{out}");

    // An edited manifest: damaged under the key; its transactions are out of reach.
    let real: Vec<String> = std::fs::read_dir(Path::new(&repo).join("binlogs/default"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    let last = real.iter().max().unwrap().clone();
    let manifest_path = Path::new(&repo)
        .join("binlogs/default")
        .join(&last)
        .join("manifest.json");
    let original = std::fs::read(&manifest_path).unwrap();
    let mut edited: serde_json::Value = serde_json::from_slice(&original).unwrap();
    edited["received_at"] = "2099-01-01T00:00:00Z".into();
    std::fs::write(&manifest_path, serde_json::to_vec(&edited).unwrap()).unwrap();
    let listing = list(&repo, &keyed);
    let reasons = listing["archives"]["default"]["incomplete"].to_string();
    assert!(reasons.contains("does not match"), "{listing}");
    fails(
        into_server(
            "restore",
            &repo,
            &key,
            &id,
            &MariaDb::start().unwrap(),
            &["--until-gtid", &head],
        ),
        &["outside the recovery window"],
    );

    // Without its MAC: refused, saying it may predate authentication. Written after the key
    // check, it was edited to drop it: `rewrap` never signs it.
    let mut unsigned: serde_json::Value = serde_json::from_slice(&original).unwrap();
    unsigned.as_object_mut().unwrap().remove("mac");
    std::fs::write(&manifest_path, serde_json::to_vec(&unsigned).unwrap()).unwrap();
    let reasons = list(&repo, &keyed)["archives"]["default"]["incomplete"].to_string();
    assert!(
        reasons.contains("written before manifests were authenticated"),
        "{reasons}"
    );
    let sign = || {
        cli(&[
            "rewrap",
            "--repo",
            &repo,
            "--encryption-key-file",
            k,
            "--new-encryption-key-file",
            k,
            "--json",
        ])
    };
    let refused = stdout_of_failure(sign(), "left as they are");
    assert!(
        refused.contains("written after manifests were authenticated"),
        "{refused}"
    );
    // The archiver does not start on an archive with unsigned segments: it would archive past
    // them and leave a hole.
    let a = Archiver::start(&repo, &source, &key, work.path(), "unsigned");
    let (status, log) = a.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("written before manifests were authenticated"),
        "{log}"
    );
    // A repository from before authentication (no key check): the same-key run signs what it
    // holds, and the restore works again.
    std::fs::remove_file(Path::new(&repo).join("repository.json")).unwrap();
    let signed = ok(sign());
    assert!(signed.contains("\"signed\""), "{signed}");
    ok(verify_archive(&repo, Some(k)));
    let (restored, out) = restore_until(&repo, &key, &id, &["--until", "latest"]);
    assert_eq!(rows(&restored), rows(&source), "{out}");

    // Another key, or none, is refused before anything is written or read.
    let other_key = key_file(work.path(), "other");
    let mut c = cli(&[
        "backup",
        "--repo",
        &repo,
        "--method",
        "logical",
        "--encryption-key-file",
        other_key.to_str().unwrap(),
    ]);
    c.args(source.cli_args());
    fails(c, &["the repository's key check names key"]);
    let mut c = cli(&["restore", "--repo", &repo, &id]);
    c.args(MariaDb::start().unwrap().cli_args());
    fails(c, &["the repository is encrypted", "no key was given"]);
    let listing = list(&repo, &[]);
    assert_eq!(complete_ids(&listing), vec![id.clone()], "listed unchecked");

    // A deleted key check does not open the repository to keyless writes: its newest backup
    // says it is encrypted.
    std::fs::remove_file(Path::new(&repo).join("repository.json")).unwrap();
    let mut c = cli(&["backup", "--repo", &repo, "--method", "logical"]);
    c.args(source.cli_args());
    fails(
        c,
        &[
            "is encrypted with key",
            "its key check repository.json is missing",
            "no key was given",
        ],
    );
    assert_eq!(
        complete_ids(&list(&repo, &[])),
        vec![id.clone()],
        "nothing written"
    );
}
