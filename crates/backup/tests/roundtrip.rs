//! Round trips on real MariaDB through a filesystem repository: physical (encrypted, many chunks
//! and segments) and logical backups restored into fresh servers and compared table by table,
//! plus the documented standard-tools recipe and password authentication.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn physical_encrypted_backup_restores_into_a_fresh_server() {
    let Scenario { work, source, repo } = Scenario::new(ROWS);
    let repo = repo.as_str();
    let key = key_file(work.path(), "key");
    let key = key.to_str().unwrap();
    let before = snapshot(&source).unwrap();

    let b = backup(
        repo,
        &source,
        &[
            "--encryption-key-file",
            key,
            "--chunk-size",
            "256KiB",
            "--segment-size",
            "512KiB",
        ],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();
    assert_eq!(b["encrypted"], true);
    assert!(
        b["segments"].as_u64().unwrap() > 1,
        "several segments expected: {b}"
    );
    assert!(
        b["binlogFile"].as_str().unwrap().starts_with("binlog."),
        "{b}"
    );
    assert!(b["gtidSet"].as_str().is_some(), "{b}");
    assert_eq!(complete_ids(&list(repo, &[])), vec![id.clone()]);

    // Full verification with the key; digest-only without, and it says so.
    let full = ok(cli(&[
        "verify",
        "--repo",
        repo,
        "--encryption-key-file",
        key,
        &id,
    ]));
    assert!(
        full.contains("OK") && full.contains("authentication"),
        "{full}"
    );
    let shallow = ok(cli(&["verify", "--repo", repo, "latest"]));
    assert!(
        shallow.contains("stored digests OK") && shallow.contains("not decrypted"),
        "{shallow}"
    );

    // Without the key neither cat nor restore can proceed.
    fails(
        cli(&["cat", "--repo", repo, &id]),
        &["encrypted", "--encryption-key-file"],
    );

    let target = work.path().join("restored");
    let out = ok(cli(&[
        "restore",
        "--repo",
        repo,
        "--encryption-key-file",
        key,
        "latest",
        "--target-dir",
        target.to_str().unwrap(),
    ]));
    assert!(out.contains("prepared"), "{out}");
    // A second restore into the now non-empty directory is refused without --force.
    fails(
        cli(&[
            "restore",
            "--repo",
            repo,
            "--encryption-key-file",
            key,
            &id,
            "--target-dir",
            target.to_str().unwrap(),
        ]),
        &["not empty", "--force"],
    );
    drop(source);
    let restored = MariaDb::start_with_datadir(&target).unwrap();
    assert_same(&before, &snapshot(&restored).unwrap());
    // Nothing but the target and its restore lock is left beside it (no staging directories,
    // no data moved aside).
    let siblings: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        siblings
            .iter()
            .all(|n| !n.starts_with('.') || n == ".restored.restore.lock"),
        "{siblings:?}"
    );
}

#[test]
fn logical_backup_restores_views_routines_triggers_and_events() {
    let Scenario {
        work: _work,
        source,
        repo,
    } = Scenario::new(ROWS);
    let repo = repo.as_str();
    let before = snapshot(&source).unwrap();
    let b = backup(
        repo,
        &source,
        &["--method", "logical", "--chunk-size", "64KiB"],
        &[],
    );
    assert_eq!(b["method"], "logical");
    assert!(
        b["binlogPosition"].as_u64().is_some() && b["gtidSet"].as_str().is_some(),
        "{b}"
    );
    assert!(b["chunks"].as_u64().unwrap() > 4, "{b}");

    let target = MariaDb::start().unwrap();
    let conn = target.cli_args();
    let mut args = vec!["restore", "--repo", repo, "latest"];
    args.extend(conn.iter().map(String::as_str));
    let out = ok(cli(&args));
    assert!(out.contains("restored backup"), "{out}");
    assert_same(&before, &snapshot(&target).unwrap());
}

#[test]
fn unencrypted_backups_are_readable_with_zstd_and_mbstream() {
    let Scenario { work, source, repo } = Scenario::new(500);
    let repo = Path::new(&repo);
    let b = backup(
        repo.to_str().unwrap(),
        &source,
        &["--chunk-size", "512KiB", "--segment-size", "1MiB"],
        &[],
    );
    let id = b["id"].as_str().unwrap();
    let dir = repo.join("backups").join(id);
    // The README recipe, verbatim in shape: cat the segments in order, zstd -d, mbstream -x.
    let script = format!(
        "set -euo pipefail; cat {d}/seg-*.zst | zstd -d | tee >(sha256sum > {w}/sum) | mbstream -x -C {w}/x",
        d = dir.display(),
        w = work.path().display()
    );
    std::fs::create_dir(work.path().join("x")).unwrap();
    let st = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .status()
        .unwrap();
    assert!(st.success());
    // tee's process substitution may finish just after bash; wait for the digest file to fill.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let sum = loop {
        let s = std::fs::read_to_string(work.path().join("sum")).unwrap_or_default();
        if s.len() >= 64 || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(&sum[..64], b["plaintextSha256"].as_str().unwrap());
    assert!(
        work.path().join("x/xtrabackup_checkpoints").exists()
            || work.path().join("x/mariadb_backup_checkpoints").exists()
    );
    // `cat` produces the same bytes.
    let out = run(cli(&["cat", "--repo", repo.to_str().unwrap(), id]));
    assert!(out.status.success());
    let digest = sha256_hex(&out.stdout);
    assert_eq!(digest, b["plaintextSha256"].as_str().unwrap());
}

#[test]
fn password_authentication_and_bad_credentials() {
    let Scenario { work, source, repo } = Scenario::new(200);
    let repo = repo.as_str();
    let secret = "s3cr\"et with spaces\\";
    source.create_user("backup_bot", secret).unwrap();
    let socket = source.socket().display().to_string();
    for method in ["physical", "logical"] {
        let mut c = cli(&[
            "backup",
            "--repo",
            repo,
            "--method",
            method,
            "--mysql-socket",
            &socket,
            "--mysql-user",
            "backup_bot",
        ]);
        c.env("MYSQL_PWD", secret);
        let out = ok(c);
        assert!(out.contains("committed"), "{out}");
    }
    let pwfile = work.path().join("pw");
    std::fs::write(&pwfile, format!("{secret}\n")).unwrap();
    ok(cli(&[
        "backup",
        "--repo",
        repo,
        "--method",
        "logical",
        "--mysql-socket",
        &socket,
        "--mysql-user",
        "backup_bot",
        "--mysql-password-file",
        pwfile.to_str().unwrap(),
    ]));
    assert_eq!(complete_ids(&list(repo, &[])).len(), 3);

    // A relative repository path, nested, resolved against the working directory.
    let mut c = cli(&[
        "backup",
        "--repo",
        "rel/nested/repo",
        "--method",
        "logical",
        "--mysql-socket",
        &socket,
        "--mysql-user",
        "backup_bot",
    ]);
    c.env("MYSQL_PWD", secret).current_dir(work.path());
    ok(c);
    let mut c = cli(&["verify", "--repo", "rel/nested/repo", "latest"]);
    c.current_dir(work.path());
    assert!(ok(c).contains("OK"));

    let mut c = cli(&[
        "backup",
        "--repo",
        repo,
        "--mysql-socket",
        &socket,
        "--mysql-user",
        "backup_bot",
    ]);
    c.env("MYSQL_PWD", "wrong-password-123");
    let line = fails(c, &["failed to connect", "Access denied"]);
    assert!(!line.contains("wrong-password-123") && !line.contains(secret));
    let listing = list(repo, &[]);
    assert_eq!(complete_ids(&listing).len(), 3);
    assert_eq!(incomplete_count(&listing), 0);
}

#[test]
fn bad_arguments_fail_with_one_line_causes() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    // An empty repository: a backup's first run would have made it.
    std::fs::create_dir(&repo).unwrap();
    let repo = repo.to_str().unwrap();
    let short = work.path().join("short.key");
    std::fs::write(&short, "c2hvcnQ=\n").unwrap();
    fails(
        cli(&[
            "verify",
            "--repo",
            repo,
            "--encryption-key-file",
            short.to_str().unwrap(),
            "latest",
        ]),
        &["must hold 32 bytes", "base64 of 5 bytes"],
    );
    fails(
        cli(&[
            "verify",
            "--repo",
            repo,
            "--encryption-key-file",
            "/nonexistent/key",
            "latest",
        ]),
        &["failed to read encryption key file"],
    );
    fails(
        cli(&["verify", "--repo", repo, "latest"]),
        &["no complete backup"],
    );
    fails(
        cli(&["verify", "--repo", repo, "20260101T000000Z-abcdef"]),
        &["does not exist"],
    );
    fails(
        cli(&["verify", "--repo", repo, "../../etc"]),
        &["does not exist"],
    );
    fails(
        cli(&["list", "--repo", "ftp://x/y"]),
        &["unsupported scheme"],
    );
    // A mistyped path is not an empty repository, and reading it makes nothing.
    let missing = format!("{repo}-mistyped/repo");
    for command in ["list", "verify", "prune"] {
        let mut args = vec![command, "--repo", missing.as_str()];
        if command == "verify" {
            args.push("latest");
        }
        if command == "prune" {
            args.extend(["--keep-last", "1"]);
        }
        fails(
            cli(&args),
            &["failed to open repository", "no such directory"],
        );
    }
    assert!(
        !std::path::Path::new(&format!("{repo}-mistyped")).exists(),
        "a read made the mistyped repository's directory"
    );
    let file = format!("{repo}/../not-a-repository");
    std::fs::write(&file, b"").unwrap();
    fails(
        cli(&["list", "--repo", file.as_str()]),
        &["not a directory"],
    );
    fails(
        cli(&["restore", "--repo", repo, "latest"]),
        &["--target-dir"],
    );
    fails(
        cli(&[
            "backup",
            "--repo",
            repo,
            "--mysql-host",
            "127.0.0.1",
            "--mysql-port",
            "1",
        ]),
        &["failed to connect", "127.0.0.1:1"],
    );
    assert_eq!(complete_ids(&list(repo, &[])).len(), 0);
}

#[test]
fn key_rotation_rewraps_manifests_and_leaves_data_alone() {
    let Scenario { work, source, repo } = Scenario::new(100);
    let repo = repo.as_str();
    let (old, new) = (key_file(work.path(), "old"), key_file(work.path(), "new"));
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    // An unencrypted backup first: once the repository is encrypted, none is taken into it.
    let plain = backup(repo, &source, &["--method", "logical"], &[]);
    let a = backup(
        repo,
        &source,
        &["--method", "logical", "--encryption-key-file", old],
        &[],
    );
    let id = a["id"].as_str().unwrap();
    let segment = |id: &str| {
        std::fs::read(
            work.path()
                .join("repo/backups")
                .join(id)
                .join("seg-000000.zst.aes"),
        )
        .unwrap()
    };
    let data_before = segment(id);

    // The same key old and new only signs what is not signed yet: here, nothing.
    let signed = ok(cli(&[
        "rewrap",
        "--repo",
        repo,
        "--encryption-key-file",
        old,
        "--new-encryption-key-file",
        old,
    ]));
    assert!(signed.contains("already on the new key"), "{signed}");
    let out = ok(cli(&[
        "rewrap",
        "--repo",
        repo,
        "--encryption-key-file",
        old,
        "--new-encryption-key-file",
        new,
    ]));
    assert!(
        out.contains("re-wrapped") && out.contains("not encrypted"),
        "{out}"
    );
    assert_eq!(segment(id), data_before, "rotation must not rewrite data");
    ok(cli(&[
        "verify",
        "--repo",
        repo,
        "--encryption-key-file",
        new,
        id,
    ]));
    fails(
        cli(&["verify", "--repo", repo, "--encryption-key-file", old, id]),
        &[
            "the repository's key check names key",
            "but the key given is",
        ],
    );
    // Running it again finishes nothing twice.
    let again = ok(cli(&[
        "rewrap",
        "--repo",
        repo,
        "--encryption-key-file",
        old,
        "--new-encryption-key-file",
        new,
    ]));
    assert!(again.contains("already on the new key"), "{again}");
    assert_eq!(complete_ids(&list(repo, &[])).len(), 2, "{}", plain["id"]);
}
