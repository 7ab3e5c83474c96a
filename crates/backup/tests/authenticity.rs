//! An encrypted repository against someone who can write to the bucket but has no key, on real
//! MariaDB: a segment archived without a key from another server and planted in the archive is
//! never replayed; an edited manifest is damaged; a manifest without its MAC is refused until
//! `rewrap` signs it; another key, or none, is refused before anything is written or read; a
//! backup or segment copied in from another repository under the same key is refused, and a
//! repository from before manifests named their repository reads as before until `rewrap`
//! names it in each.

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
    // The archiver makes the repository once it has started: until then there is none to list.
    while !Path::new(repo).exists() || list(repo, &[])["archives"]["default"]["through"] != until {
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
    // Nor once the key check is deleted: the other manifests name the repository, so one
    // without a MAC was edited (or planted), not written before authentication.
    std::fs::remove_file(Path::new(&repo).join("repository.json")).unwrap();
    let refused = stdout_of_failure(sign(), "left as they are");
    assert!(refused.contains("manifests name it already"), "{refused}");
    std::fs::write(&manifest_path, &original).unwrap();
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

/// Backup ids in order: two taken within a second sort by their random tail, not their order.
fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Copies the files of directory `from` into `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// The one segment directory of `repo`'s default archive.
fn only_segment(repo: &str) -> String {
    let dirs: Vec<String> = std::fs::read_dir(Path::new(repo).join("binlogs/default"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

/// The reason `listing` gives for the incomplete backup or archive entry whose id ends in `id`.
fn reason_for(entries: &serde_json::Value, id: &str) -> String {
    entries
        .as_array()
        .unwrap_or_else(|| panic!("{entries}"))
        .iter()
        .find(|i| i["id"].as_str().unwrap().ends_with(id))
        .unwrap_or_else(|| panic!("{id} not among {entries}"))["reason"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A stored manifest as the release before authentication wrote it: no MAC, no repository.
fn as_before_authentication(path: &Path) {
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let map = value.as_object_mut().unwrap();
    map.remove("repository");
    map.remove("mac");
    std::fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
}

/// Re-signs a stored manifest (or key check) as the release before repository ids wrote it:
/// without `repository`, under the bare key.
fn sign_as_before_ids(path: &Path, key: &Path) {
    let key = bulwark_engine::crypto::MasterKey::from_file(key).unwrap();
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let map = value.as_object_mut().unwrap();
    map.remove("repository");
    map.remove("accepts_unbound");
    map.remove("mac");
    std::fs::write(
        path,
        bulwark_engine::authenticate::manifest_bytes(&value, Some(&key)),
    )
    .unwrap();
}

#[test]
fn a_manifest_copied_from_another_repository_under_the_same_key_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let key = key_file(work.path(), "key");
    let keyed = key_env(&key);
    let k = key.to_str().unwrap();
    let repo_at = |name: &str| work.path().join(name).display().to_string();
    let (repo_a, repo_b, repo_c) = (repo_at("a"), repo_at("b"), repo_at("c"));
    let source = MariaDb::start().unwrap();
    source.sql(SCHEMA).unwrap();
    write_row(&source);
    let logical = ["--method", "logical", "--encryption-key-file", k];
    let backup_id = |repo: &str| {
        backup(repo, &source, &logical, &[])["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let in_a = backup_id(&repo_a);
    let a = Archiver::start(&repo_a, &source, &key, work.path(), "archiver-a");
    write_row(&source);
    let head = source.query("SELECT @@gtid_binlog_pos").unwrap()[0][0].clone();
    wait_archived_at(&repo_a, &head, &a);
    a.stop();
    let in_b = backup_id(&repo_b);
    let (listing_a, listing_b) = (list(&repo_a, &keyed), list(&repo_b, &keyed));
    let id_a = listing_a["repository"].as_str().unwrap().to_string();
    assert_eq!(id_a.len(), 32, "{listing_a}");
    assert_ne!(
        listing_b["repository"], id_a,
        "each repository has its own id"
    );

    // A's backup and segment, copied into B: authentic under the key, but not B's.
    copy_dir(
        &Path::new(&repo_a).join("backups").join(&in_a),
        &Path::new(&repo_b).join("backups").join(&in_a),
    );
    let segment = only_segment(&repo_a);
    copy_dir(
        &Path::new(&repo_a).join("binlogs/default").join(&segment),
        &Path::new(&repo_b).join("binlogs/default").join(&segment),
    );
    let listing = list(&repo_b, &keyed);
    assert_eq!(complete_ids(&listing), vec![in_b.clone()], "{listing}");
    let copied = format!("written for repository {id_a}, not this one");
    assert!(
        reason_for(&listing["incomplete"], &in_a).contains(&copied),
        "{listing}"
    );
    let archived = &listing["archives"]["default"]["incomplete"];
    assert!(
        reason_for(archived, &segment).contains(&copied),
        "{listing}"
    );
    fails(
        into_server(
            "restore",
            &repo_b,
            &key,
            &in_a,
            &MariaDb::start().unwrap(),
            &[],
        ),
        &[&copied],
    );
    // `rewrap` never adopts them.
    let sign = |repo: &str| {
        cli(&[
            "rewrap",
            "--repo",
            repo,
            "--encryption-key-file",
            k,
            "--new-encryption-key-file",
            k,
            "--json",
        ])
    };
    let refused = stdout_of_failure(sign(&repo_b), "left as they are");
    assert!(refused.contains(&copied), "{refused}");
    std::fs::remove_dir_all(Path::new(&repo_b).join("backups").join(&in_a)).unwrap();
    std::fs::remove_dir_all(Path::new(&repo_b).join("binlogs")).unwrap();

    // A lost key check: readers go by the id the manifests name, and the next backup takes
    // it. A manifest planted meanwhile, naming no repository where none predates repository
    // ids, is refused; one naming another repository is a conflict that stops the backup.
    std::fs::remove_file(Path::new(&repo_b).join("repository.json")).unwrap();
    let planted = Path::new(&repo_b).join("backups").join(&in_a);
    copy_dir(&Path::new(&repo_a).join("backups").join(&in_a), &planted);
    sign_as_before_ids(&planted.join("manifest.json"), &key);
    let listing = list(&repo_b, &keyed);
    assert_eq!(listing["repository"], listing_b["repository"], "{listing}");
    assert!(
        reason_for(&listing["incomplete"], &in_a).contains("names no repository"),
        "{listing}"
    );
    copy_dir(&Path::new(&repo_a).join("backups").join(&in_a), &planted);
    let mut c = cli(&["backup", "--repo", &repo_b]);
    c.args(logical).args(source.cli_args());
    fails(c, &["name several"]);
    std::fs::remove_dir_all(&planted).unwrap();
    let again = backup_id(&repo_b);
    let listing = list(&repo_b, &keyed);
    assert_eq!(listing["repository"], listing_b["repository"], "{listing}");
    assert_eq!(
        sorted(complete_ids(&listing)),
        sorted(vec![in_b.clone(), again]),
        "{listing}"
    );

    // A repository written before manifests named their repository reads as it did.
    let in_c = backup_id(&repo_c);
    let c_manifest = Path::new(&repo_c)
        .join("backups")
        .join(&in_c)
        .join("manifest.json");
    sign_as_before_ids(&Path::new(&repo_c).join("repository.json"), &key);
    sign_as_before_ids(&c_manifest, &key);
    let before_ids = std::fs::read(&c_manifest).unwrap();
    let listing = list(&repo_c, &keyed);
    assert_eq!(listing["repository"], serde_json::Value::Null, "{listing}");
    assert_eq!(complete_ids(&listing), vec![in_c.clone()], "{listing}");
    // What names another repository is refused there too.
    copy_dir(
        &Path::new(&repo_a).join("backups").join(&in_a),
        &Path::new(&repo_c).join("backups").join(&in_a),
    );
    let listing = list(&repo_c, &keyed);
    assert!(
        reason_for(&listing["incomplete"], &in_a).contains("key check names none"),
        "{listing}"
    );
    std::fs::remove_dir_all(Path::new(&repo_c).join("backups").join(&in_a)).unwrap();
    // A backup taken meanwhile goes on signing as before (the archiver likewise).
    let meanwhile = backup_id(&repo_c);
    assert_eq!(
        sorted(complete_ids(&list(&repo_c, &keyed))),
        sorted(vec![in_c.clone(), meanwhile.clone()])
    );
    // `rewrap` with the same key names the repository in each manifest; from then on a
    // manifest naming none (like one copied from another such repository) is refused.
    let named = ok(sign(&repo_c));
    assert!(named.contains("bound to the repository"), "{named}");
    let listing = list(&repo_c, &keyed);
    let id_c = listing["repository"].as_str().unwrap().to_string();
    assert_eq!(
        sorted(complete_ids(&listing)),
        sorted(vec![in_c.clone(), meanwhile]),
        "{listing}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&c_manifest).unwrap()).unwrap();
    assert_eq!(manifest["repository"], id_c.as_str());
    std::fs::write(&c_manifest, before_ids).unwrap();
    let listing = list(&repo_c, &keyed);
    assert!(
        reason_for(&listing["incomplete"], &in_c).contains("names no repository"),
        "{listing}"
    );
    let rerun = stdout_of_failure(sign(&repo_c), "left as they are");
    assert!(rerun.contains("names no repository"), "{rerun}");

    // A repository from before authentication (no MAC, no key check): refused under the key
    // until the same-key rewrap signs each manifest, naming the repository.
    let repo_d = repo_at("d");
    let in_d = backup_id(&repo_d);
    std::fs::remove_file(Path::new(&repo_d).join("repository.json")).unwrap();
    let d_manifest = Path::new(&repo_d)
        .join("backups")
        .join(&in_d)
        .join("manifest.json");
    as_before_authentication(&d_manifest);
    let listing = list(&repo_d, &keyed);
    assert!(
        reason_for(&listing["incomplete"], &in_d).contains("carries no MAC"),
        "{listing}"
    );
    let signed = ok(sign(&repo_d));
    assert!(signed.contains("\"signed\""), "{signed}");
    let listing = list(&repo_d, &keyed);
    assert_eq!(complete_ids(&listing), vec![in_d.clone()], "{listing}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&d_manifest).unwrap()).unwrap();
    assert_eq!(manifest["repository"], listing["repository"], "{listing}");
    // A lost key check and a manifest planted without a MAC: rewrap never signs it.
    std::fs::remove_file(Path::new(&repo_d).join("repository.json")).unwrap();
    let planted = Path::new(&repo_d).join("backups").join(&in_a);
    copy_dir(&Path::new(&repo_a).join("backups").join(&in_a), &planted);
    as_before_authentication(&planted.join("manifest.json"));
    let refused = stdout_of_failure(sign(&repo_d), "left as they are");
    assert!(refused.contains("manifests name it already"), "{refused}");
    let listing = list(&repo_d, &keyed);
    assert_eq!(complete_ids(&listing), vec![in_d], "{listing}");

    // An archive before any backup, its key check lost: the archiver started again keeps the
    // id its segments name; one with another key claims nothing.
    let repo_e = repo_at("e");
    // Without a backup the archiver starts at the server's position when it starts: rows are
    // written until one is archived.
    let archive_once = |name: &str, key: &Path| {
        let a = Archiver::start(&repo_e, &source, key, work.path(), name);
        let deadline = Instant::now() + Duration::from_secs(30);
        let before = list(&repo_e, &keyed)["archives"]["default"]["through"].clone();
        loop {
            write_row(&source);
            std::thread::sleep(Duration::from_millis(500));
            let through = list(&repo_e, &keyed)["archives"]["default"]["through"].clone();
            if through.is_string() && through != before {
                break;
            }
            assert!(Instant::now() < deadline, "nothing archived: {}", a.log());
        }
        a.stop();
    };
    archive_once("e1", &key);
    let id_e = list(&repo_e, &keyed)["repository"].clone();
    assert!(id_e.is_string(), "{id_e}");
    std::fs::remove_file(Path::new(&repo_e).join("repository.json")).unwrap();
    // Without the key check, the newest segment keeps keyless runs out.
    let mut c = cli(&["archive", "--repo", &repo_e]);
    c.args(source.cli_args());
    fails(c, &["its newest archived segment", "no key was given"]);
    let other_key = key_file(work.path(), "other-e");
    let refused = Archiver::start(&repo_e, &source, &other_key, work.path(), "e-other");
    let (status, log) = refused.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("its newest manifest (binlogs/default/"),
        "{log}"
    );
    archive_once("e2", &key);
    let listing = list(&repo_e, &keyed);
    assert_eq!(listing["repository"], id_e, "{listing}");
    assert_eq!(
        listing["archives"]["default"]["incomplete"],
        serde_json::json!([]),
        "{listing}"
    );
}
