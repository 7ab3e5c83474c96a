//! Holds on real MariaDB: a backup being restored and a backup being written are left alone by
//! `prune` and `delete` (which say why), a rewrap during a restore changes the manifest under
//! it and nothing the restore reads, and a rewrap never writes back the manifest of a backup a
//! deletion has marked. Processes are paused with SIGSTOP to hold them mid-way.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

/// Waits for `what` to hold, for up to a minute.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn finish(mut child: Child, what: &str) -> String {
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{what} failed: {err}");
    err
}

/// A restore of backup `id` into `target` (with `extra` arguments) whose server is paused, so
/// that it waits mid-way holding the backup: the restore, the paused server's pid, and the
/// backup's hold directory, which holds the restore's hold once this returns.
fn paused_restore(
    repo: &str,
    id: &str,
    target: &MariaDb,
    extra: &[&str],
) -> (Child, u32, std::path::PathBuf) {
    let mut args = vec!["restore", "--repo", repo];
    args.extend_from_slice(extra);
    args.push(id);
    let conn = target.cli_args();
    args.extend(conn.iter().map(String::as_str));
    let mut restore = cli(&args);
    restore.stdout(Stdio::null()).stderr(Stdio::piped());
    let pid = server_pid(target);
    signal(pid, "-STOP");
    let restore = restore.spawn().unwrap();
    let held = Path::new(repo).join("holds").join(id);
    wait_for("the restore's hold", || {
        std::fs::read_dir(&held).is_ok_and(|mut d| d.next().is_some())
    });
    (restore, pid, held)
}

fn prune_keeping_one(repo: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["prune", "--repo", repo, "--keep-last", "1", "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(cli(&args))).unwrap()
}

#[test]
fn a_backup_being_restored_is_kept_by_prune_and_delete_until_the_restore_ends() {
    let s = Scenario::new(ROWS);
    let (first, _) = s.backup(&["--method", "logical", "--chunk-size", "64KiB"]);
    s.backup(&["--method", "logical", "--chunk-size", "64KiB"]);
    // The restore's server is paused, so the restore waits mid-way holding the backup.
    let mut target = MariaDb::start().unwrap();
    let (restore, server_pid, held) = paused_restore(&s.repo, &first, &target, &[]);

    let pruned = prune_keeping_one(&s.repo, &[]);
    let decision = pruned["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == first.as_str())
        .unwrap()
        .clone();
    assert_eq!(decision["keep"], true, "{pruned}");
    let reasons = decision["reasons"].to_string();
    assert!(reasons.contains("held by a restore on"), "{reasons}");
    fails(
        cli(&["delete", "--repo", &s.repo, &first]),
        &[&format!("backup {first} is held by a restore on")],
    );
    let listed = list(&s.repo, &[]);
    assert_eq!(listed["holds"][0]["backup"], first.as_str(), "{listed}");

    signal(server_pid, "-CONT");
    finish(restore, "the restore");
    assert_same(&snapshot(&s.source).unwrap(), &snapshot(&target).unwrap());
    assert!(
        std::fs::read_dir(&held).map_or(true, |mut d| d.next().is_none()),
        "the restore left its hold"
    );
    let pruned = prune_keeping_one(&s.repo, &[]);
    assert_eq!(pruned["removed"][0], first.as_str(), "{pruned}");
    target.stop().unwrap();
}

/// A restore to the archive's latest point holds its backup, and so the archived segments
/// its replay reads: `prune` keeping only a newer backup removes neither while it runs, the
/// replay finds every segment, and once it is over the same prune removes both.
#[test]
fn segments_a_restore_to_a_point_in_time_reads_are_kept_while_it_runs() {
    use common::pitr::*;
    let a = archived_source(&[], "", "a");
    let k = a.key.to_str().unwrap();
    let first: Vec<Row> = (0..3).map(|_| write_row(&a.source)).collect();
    wait_archived_at(&a.repo, &first[2].gtid, &a.archiver);
    backup(
        &a.repo,
        &a.source,
        &["--method", "logical", "--encryption-key-file", k],
        &[],
    );
    let last = write_row(&a.source);
    wait_archived_at(&a.repo, &last.gtid, &a.archiver);
    let segments = |repo: &str| list(repo, &[])["archives"]["default"]["segments"].clone();
    let before = segments(&a.repo);

    let mut target = MariaDb::start().unwrap();
    let (restore, server_pid, _) = paused_restore(
        &a.repo,
        &a.backup_id,
        &target,
        &["--encryption-key-file", k, "--until", "latest"],
    );
    let pruned = prune_keeping_one(&a.repo, &["--encryption-key-file", k]);
    assert!(pruned["removed"].as_array().unwrap().is_empty(), "{pruned}");
    assert_eq!(segments(&a.repo), before, "{pruned}");
    signal(server_pid, "-CONT");
    finish(restore, "the restore");
    assert_eq!(ids(&target), ids(&a.source));

    let pruned = prune_keeping_one(&a.repo, &["--encryption-key-file", k]);
    assert_eq!(pruned["removed"][0], a.backup_id.as_str(), "{pruned}");
    assert_ne!(segments(&a.repo), before, "{pruned}");
    a.archiver.stop();
    target.stop().unwrap();
}

/// A key rotation while a restore reads the backup: the rewrap replaces the manifest (the
/// restore read it and unwrapped its data key at the start) and never the data, so the restore
/// finishes whole, and the backup is on the new key afterwards.
#[test]
fn a_rewrap_during_a_restore_changes_only_the_manifest_under_it() {
    let s = Scenario::new(ROWS);
    let work = tempfile::tempdir().unwrap();
    let (old, new) = (key_file(work.path(), "old"), key_file(work.path(), "new"));
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    let (id, _) = s.backup(&[
        "--method",
        "logical",
        "--chunk-size",
        "64KiB",
        "--encryption-key-file",
        old,
    ]);
    let mut target = MariaDb::start().unwrap();
    let (restore, server_pid, _) =
        paused_restore(&s.repo, &id, &target, &["--encryption-key-file", old]);
    let rotated = ok(cli(&[
        "rewrap",
        "--repo",
        &s.repo,
        "--encryption-key-file",
        old,
        "--new-encryption-key-file",
        new,
    ]));
    assert!(rotated.contains("re-wrapped"), "{rotated}");
    signal(server_pid, "-CONT");
    finish(restore, "the restore");
    assert_same(&snapshot(&s.source).unwrap(), &snapshot(&target).unwrap());
    ok(cli(&[
        "verify",
        "--repo",
        &s.repo,
        "--encryption-key-file",
        new,
        &id,
    ]));
    target.stop().unwrap();
}

#[test]
fn a_backup_being_written_is_not_taken_for_an_abandoned_one() {
    // Enough data that the backup is still running, seconds after its first chunk, when the
    // test pauses it.
    let s = Scenario::new(ROWS * 10);
    let mut args = vec![
        "backup",
        "--repo",
        &s.repo,
        "--json",
        "--method",
        "logical",
        "--chunk-size",
        "16KiB",
    ];
    let conn = s.source.cli_args();
    args.extend(conn.iter().map(String::as_str));
    let mut running = cli(&args);
    running.stdout(Stdio::piped()).stderr(Stdio::piped());
    let running = running.spawn().unwrap();
    // Paused once its first chunks are stored: an incomplete backup, to a prune's eyes.
    let backups = Path::new(&s.repo).join("backups");
    let chunks = || {
        std::fs::read_dir(&backups)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|b| std::fs::read_dir(b.path()).into_iter().flatten().flatten())
            .count()
    };
    wait_for("the backup's first chunks", || chunks() > 0);
    signal(running.id(), "-STOP");
    let listed = list(&s.repo, &[]);
    assert_eq!(
        listed["backups"].as_array().unwrap().len(),
        0,
        "the backup finished before it could be paused; give it more data: {listed}"
    );
    let pruned = prune_keeping_one(&s.repo, &["--orphan-grace", "0s"]);
    assert_eq!(
        pruned["incompleteRemoved"],
        serde_json::json!([]),
        "{pruned}"
    );
    signal(running.id(), "-CONT");
    let out = running.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    ok(cli(&[
        "verify",
        "--repo",
        &s.repo,
        b["id"].as_str().unwrap(),
    ]));
}

#[test]
fn a_rewrap_never_writes_back_a_manifest_a_deletion_has_marked() {
    let s = Scenario::new(100);
    let old = key_file(s.work.path(), "old");
    let new = key_file(s.work.path(), "new");
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    let (marked, _) = s.backup(&["--method", "logical", "--encryption-key-file", old]);
    let (other, _) = s.backup(&["--method", "logical", "--encryption-key-file", old]);
    // A deletion that has marked the backup and not yet removed it (its process paused).
    let mark_dir = Path::new(&s.repo).join("holds").join(&marked);
    std::fs::create_dir_all(&mark_dir).unwrap();
    let now = chrono::Utc::now();
    let mark = serde_json::json!({
        "backup": marked,
        "kind": "delete",
        "holder": "a paused prune",
        "since": now,
        "expires": now + chrono::Duration::minutes(10),
    });
    std::fs::write(mark_dir.join("delete-0.json"), mark.to_string()).unwrap();
    let manifest = Path::new(&s.repo)
        .join("backups")
        .join(&marked)
        .join("manifest.json");
    let before = std::fs::read(&manifest).unwrap();
    // Left as it is, and reported: the rotation is not complete until it is run again.
    let rewrap = run(cli(&[
        "rewrap",
        "--repo",
        &s.repo,
        "--encryption-key-file",
        old,
        "--new-encryption-key-file",
        new,
        "--json",
    ]));
    let out = String::from_utf8_lossy(&rewrap.stdout).to_string();
    assert_eq!(rewrap.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("\"{marked}\""))
            && out.contains("being deleted by a deletion on a paused prune"),
        "{out}"
    );
    assert_eq!(std::fs::read(&manifest).unwrap(), before);
    assert!(out.contains(&other), "{out}");
}

/// The pid of a test server, from its pid file.
fn server_pid(db: &MariaDb) -> u32 {
    let rows = db.query("SELECT @@pid_file").unwrap();
    std::fs::read_to_string(&rows[0][0])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Makes a directory immutable (`chattr +i`: even root cannot create files in it) until dropped:
/// a repository mounted read-only, as the operator's drills mount it.
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn new(dir: std::path::PathBuf) -> Immutable {
        std::fs::create_dir_all(&dir).unwrap();
        assert!(Command::new("chattr")
            .arg("+i")
            .arg(&dir)
            .status()
            .unwrap()
            .success());
        Immutable(dir)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn a_repository_that_cannot_be_written_is_restored_without_a_hold() {
    let s = Scenario::new(100);
    let (id, _) = s.backup(&["--method", "logical"]);
    let _read_only = Immutable::new(Path::new(&s.repo).join("holds"));
    let target = MariaDb::start().unwrap();
    let mut args = vec!["restore", "--repo", &s.repo, id.as_str()];
    let conn = target.cli_args();
    args.extend(conn.iter().map(String::as_str));
    let out = run(cli(&args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("read without a hold"), "{stderr}");
    assert_same(&snapshot(&s.source).unwrap(), &snapshot(&target).unwrap());
}
