//! What the operator's Jobs rely on: `delete` is idempotent and refuses malformed ids, and
//! `backup --result-file` leaves one line of JSON (the summary, or the error) within
//! Kubernetes' 4096-byte termination-message limit, also where the file cannot be renamed over.

mod common;

use common::*;
use std::path::Path;

#[test]
fn delete_is_idempotent_and_refuses_malformed_ids() {
    let Scenario { work, source, repo } = Scenario::new(50);
    let repo = repo.as_str();
    let first = backup(repo, &source, &["--method", "logical"], &[]);
    let first = first["id"].as_str().unwrap().to_string();
    // Ids carry whole seconds.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = backup(repo, &source, &["--method", "logical"], &[]);
    let second = second["id"].as_str().unwrap().to_string();

    let out: serde_json::Value =
        serde_json::from_str(&ok(cli(&["delete", "--repo", repo, &first, "--json"]))).unwrap();
    assert_eq!(out, serde_json::json!({ "id": first, "deleted": true }));
    assert!(!work.path().join("repo/backups").join(&first).exists());
    assert_eq!(complete_ids(&list(repo, &[])), vec![second.clone()]);

    // Again: nothing there, still a success, so a retried deletion Job completes.
    let again = ok(cli(&["delete", "--repo", repo, &first]));
    assert_eq!(again.trim(), format!("backup {first} already absent"));
    let out: serde_json::Value =
        serde_json::from_str(&ok(cli(&["delete", "--repo", repo, &first, "--json"]))).unwrap();
    assert_eq!(out, serde_json::json!({ "id": first, "deleted": false }));
    let never = "20200101T000000Z-000000";
    assert!(ok(cli(&["delete", "--repo", repo, never])).contains("already absent"));

    // An incomplete backup (data without a manifest) is deleted too.
    let orphan = "20200101T000001Z-00beef";
    let orphan_dir = work.path().join("repo/backups").join(orphan);
    std::fs::create_dir_all(&orphan_dir).unwrap();
    std::fs::write(orphan_dir.join("seg-000000.zst"), b"partial").unwrap();
    let out: serde_json::Value =
        serde_json::from_str(&ok(cli(&["delete", "--repo", repo, orphan, "--json"]))).unwrap();
    assert_eq!(out["deleted"], true);
    assert!(!orphan_dir.exists());

    for bad in ["latest", "../../etc", "20200101T000000Z-00000g", ""] {
        fails(cli(&["delete", "--repo", repo, bad]), &["not a backup id"]);
    }
    let listing = list(repo, &[]);
    assert_eq!(complete_ids(&listing), vec![second]);
    assert_eq!(incomplete_count(&listing), 0);
}

#[test]
fn a_backup_id_given_beforehand_is_used_once() {
    let Scenario { source, repo, .. } = Scenario::new(50);
    let repo = repo.as_str();
    let id = "20261122T031633Z-4a0760";
    let first = backup(
        repo,
        &source,
        &["--method", "logical", "--backup-id", id],
        &[],
    );
    assert_eq!(first["id"], id);
    assert_eq!(complete_ids(&list(repo, &[])), vec![id.to_owned()]);

    // Taken: refused before anything is written, and the backup under it is left whole.
    let conn = source.cli_args();
    let mut args = vec![
        "backup",
        "--repo",
        repo,
        "--method",
        "logical",
        "--backup-id",
        id,
    ];
    args.extend(conn.iter().map(String::as_str));
    fails(
        cli(&args),
        &["backup id 20261122T031633Z-4a0760 is already used"],
    );
    // Anything under the id counts, a run's leftovers too.
    let orphan = "20261122T031634Z-00beef";
    let orphan_dir = Path::new(repo).join("backups").join(orphan);
    std::fs::create_dir_all(&orphan_dir).unwrap();
    std::fs::write(orphan_dir.join("seg-000000.zst"), b"partial").unwrap();
    let mut args = vec![
        "backup",
        "--repo",
        repo,
        "--method",
        "logical",
        "--backup-id",
        orphan,
    ];
    args.extend(conn.iter().map(String::as_str));
    fails(cli(&args), &["is already used"]);
    assert_eq!(
        std::fs::read(orphan_dir.join("seg-000000.zst")).unwrap(),
        b"partial"
    );

    for bad in ["latest", "../x", "20261122T031633Z-4a07"] {
        let mut args = vec!["backup", "--repo", repo, "--backup-id", bad];
        args.extend(conn.iter().map(String::as_str));
        fails(cli(&args), &["is not a backup id"]);
    }
    let listing = list(repo, &[]);
    assert_eq!(complete_ids(&listing), vec![id.to_owned()]);
    let verified = ok(cli(&["verify", "--repo", repo, id]));
    assert!(!verified.is_empty());
}

#[test]
fn result_file_holds_the_summary_or_the_error() {
    let Scenario { work, source, repo } = Scenario::new(50);
    let result = work.path().join("result.json");
    let mut args = vec!["backup", "--repo", &repo, "--method", "logical", "--json"];
    let conn = source.cli_args();
    args.extend(conn.iter().map(String::as_str));
    let mut c = cli(&args);
    c.env("MYSQL_BACKUP_RESULT_FILE", &result);
    let printed: serde_json::Value = serde_json::from_str(&ok(c)).unwrap();
    let written = std::fs::read_to_string(&result).unwrap();
    assert!(
        written.ends_with('\n') && written.lines().count() == 1,
        "{written}"
    );
    assert!(written.len() <= 4096);
    let mut expected = printed.clone();
    expected.as_object_mut().unwrap().remove("peakRssBytes");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&written).unwrap(),
        expected
    );

    // A failure replaces it with the one-line cause printed on stderr.
    let missing = work.path().join("no-such.sock");
    let last = fails(
        cli(&[
            "backup",
            "--repo",
            &repo,
            "--mysql-socket",
            missing.to_str().unwrap(),
            "--result-file",
            result.to_str().unwrap(),
        ]),
        &["failed to connect"],
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    assert_eq!(
        written,
        serde_json::json!({ "error": last.trim_start_matches("error: ") })
    );
}

/// Makes a directory refuse new entries for this process, even as root, until dropped.
struct SealedDir<'a>(&'a Path);

impl<'a> SealedDir<'a> {
    fn seal(dir: &'a Path) -> Self {
        if is_root() {
            // Root ignores permission bits; the immutable attribute stops it too.
            let st = std::process::Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .status()
                .expect("chattr (e2fsprogs) is needed to seal a directory as root");
            assert!(st.success(), "chattr +i {} failed", dir.display());
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        let probe = dir.join("probe");
        assert!(std::fs::write(&probe, b"").is_err(), "directory not sealed");
        SealedDir(dir)
    }
}

impl Drop for SealedDir<'_> {
    fn drop(&mut self) {
        if is_root() {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(self.0)
                .status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(self.0, std::fs::Permissions::from_mode(0o755));
        }
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[test]
fn result_file_is_rewritten_in_place_where_it_cannot_be_renamed_over() {
    let Scenario { work, source, repo } = Scenario::new(20);
    // Like /dev/termination-log: an existing file in a directory the process cannot write.
    let dir = work.path().join("dev");
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("termination-log");
    std::fs::write(
        &log,
        "stale content from an earlier run, longer than the new one ".repeat(100),
    )
    .unwrap();
    {
        let _sealed = SealedDir::seal(&dir);
        let mut args = vec!["backup", "--repo", &repo, "--method", "logical"];
        let conn = source.cli_args();
        args.extend(conn.iter().map(String::as_str));
        args.extend(["--result-file", log.to_str().unwrap()]);
        ok(cli(&args));
        let written = std::fs::read_to_string(&log).unwrap();
        let v: serde_json::Value = serde_json::from_str(&written).expect("one JSON line");
        assert_eq!(v["method"], "logical");
        assert_eq!(v["id"], complete_ids(&list(&repo, &[]))[0]);

        let last = fails(
            cli(&[
                "backup",
                "--repo",
                &repo,
                "--mysql-socket",
                "/nonexistent/mysqld.sock",
                "--result-file",
                log.to_str().unwrap(),
            ]),
            &["failed to connect"],
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&log).unwrap()).unwrap();
        assert_eq!(v["error"], last.trim_start_matches("error: "));
    }
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, vec!["termination-log"], "no temporary files left");
}
