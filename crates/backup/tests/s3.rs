//! Round trips through a real S3 server (moto, on loopback) and through a fault-injecting proxy
//! that answers 500s, drops connections and resets responses: retries must hide transient
//! faults, and a persistent outage must fail cleanly with nothing committed.

mod common;

use common::*;

const BUCKET: &str = "bulwark-test";

fn s3_env(server: &S3Server, endpoint: &str) -> Vec<(String, String)> {
    let mut env = server.env_with_endpoint(endpoint);
    env.push(("MYSQL_BACKUP_S3_ENDPOINT".into(), endpoint.into()));
    env.push(("MYSQL_BACKUP_S3_PATH_STYLE".into(), "true".into()));
    env
}

fn with_env(mut c: std::process::Command, env: &[(String, String)]) -> std::process::Command {
    c.envs(env.iter().cloned());
    c
}

#[test]
fn physical_and_logical_round_trips_with_transient_faults() {
    let Scenario { work, source, .. } = Scenario::new(ROWS);
    let s3 = S3Server::start().unwrap();
    s3.create_bucket(BUCKET).unwrap();
    let proxy = FaultProxy::start(&format!("127.0.0.1:{}", s3.port())).unwrap();
    let env = s3_env(&s3, &proxy.endpoint());
    let repo = format!("s3://{BUCKET}/prod/db1");
    let key = key_file(work.path(), "key");
    let key = key.to_str().unwrap();

    // Incompressible rows, so each segment needs several multipart parts.
    source
        .sql("CREATE DATABASE noise; CREATE TABLE noise.bytes (id INT PRIMARY KEY, b BLOB) ENGINE=InnoDB; INSERT INTO noise.bytes SELECT seq, RANDOM_BYTES(1024) FROM noise.seq_1_to_12000;")
        .unwrap();
    let before = snapshot(&source).unwrap();

    // Every 4th request fails in one of three ways; part size 5MiB so segments use several parts.
    for fault in [
        Fault::Status500,
        Fault::DropConnection,
        Fault::ResetMidResponse,
    ] {
        proxy.set_mode(FaultMode::EveryNth { n: 4, fault });
        let b = backup(
            &repo,
            &source,
            &[
                "--encryption-key-file",
                key,
                "--chunk-size",
                "1MiB",
                "--segment-size",
                "8MiB",
                "--s3-part-size",
                "5MiB",
            ],
            &env,
        );
        assert!(
            b["storedBytes"].as_u64().unwrap() > 10 << 20 && b["segments"].as_u64().unwrap() >= 2,
            "several parts and segments expected: {b}"
        );
    }
    assert!(
        proxy.injected() >= 3,
        "faults were injected: {}",
        proxy.injected()
    );
    let keys = s3.list_keys(BUCKET, "prod/db1/backups/").unwrap();
    assert!(
        keys.iter().any(|(k, _)| k.ends_with("seg-000001.zst.aes")),
        "{keys:?}"
    );

    proxy.set_mode(FaultMode::EveryNth {
        n: 3,
        fault: Fault::ResetMidResponse,
    });
    let listing = list(&repo, &env);
    let ids = complete_ids(&listing);
    assert_eq!(ids.len(), 3, "{listing}");
    ok(with_env(
        cli(&[
            "verify",
            "--repo",
            &repo,
            "--encryption-key-file",
            key,
            "latest",
        ]),
        &env,
    ));
    let target = work.path().join("restored");
    ok(with_env(
        cli(&[
            "restore",
            "--repo",
            &repo,
            "--encryption-key-file",
            key,
            &ids[0],
            "--target-dir",
            target.to_str().unwrap(),
        ]),
        &env,
    ));

    // Logical, unencrypted, through the same faulty path (into a repository of its own: an
    // encrypted one takes no unencrypted backup).
    proxy.set_mode(FaultMode::EveryNth {
        n: 5,
        fault: Fault::Status500,
    });
    let plain_repo = format!("s3://{BUCKET}/prod/plain");
    backup(&plain_repo, &source, &["--method", "logical"], &env);
    let fresh = MariaDb::start().unwrap();
    let conn = fresh.cli_args();
    let mut args = vec!["restore", "--repo", plain_repo.as_str(), "latest"];
    args.extend(conn.iter().map(String::as_str));
    ok(with_env(cli(&args), &env));
    assert_same(&before, &snapshot(&fresh).unwrap());
    drop(fresh);
    drop(source);
    let restored = MariaDb::start_with_datadir(&target).unwrap();
    assert_same(&before, &snapshot(&restored).unwrap());
}

#[test]
fn persistent_outage_and_tampering_fail_cleanly() {
    let Scenario { work, source, .. } = Scenario::new(300);
    let s3 = S3Server::start().unwrap();
    s3.create_bucket(BUCKET).unwrap();
    let proxy = FaultProxy::start(&format!("127.0.0.1:{}", s3.port())).unwrap();
    let env = s3_env(&s3, &proxy.endpoint());
    let direct = s3_env(&s3, &s3.endpoint());
    let repo = format!("s3://{BUCKET}/r");

    // The server goes away for good: the backup fails with the HTTP cause, commits nothing.
    proxy.set_mode(FaultMode::All(Fault::Status500));
    let mut args = vec!["backup", "--repo", repo.as_str(), "--s3-max-retries", "2"];
    let conn = source.cli_args();
    args.extend(conn.iter().map(String::as_str));
    fails(with_env(cli(&args), &env), &["failed to", "500"]);
    let listing = list(&repo, &direct);
    assert!(complete_ids(&listing).is_empty(), "{listing}");
    assert!(s3
        .list_keys(BUCKET, "r/")
        .unwrap()
        .iter()
        .all(|(k, _)| !k.ends_with("manifest.json")));

    // A bucket that does not exist is a clear error too.
    fails(
        with_env(cli(&["list", "--repo", "s3://no-such-bucket/x"]), &direct),
        &["failed to list"],
    );

    // Tampering with a stored segment through the S3 API is caught.
    proxy.set_mode(FaultMode::PassThrough);
    let b = backup(&repo, &source, &["--chunk-size", "256KiB"], &env);
    let id = b["id"].as_str().unwrap();
    let seg = format!("r/backups/{id}/seg-000000.zst");
    s3.flip_byte(BUCKET, &seg, 1000).unwrap();
    fails(
        with_env(cli(&["verify", "--repo", &repo, id]), &direct),
        &["is corrupt", "SHA-256"],
    );
    s3.delete_object(BUCKET, &seg).unwrap();
    fails(
        with_env(cli(&["verify", "--repo", &repo, id]), &direct),
        &["does not exist"],
    );
    s3.truncate_object(BUCKET, &format!("r/backups/{id}/manifest.json"), 10)
        .unwrap();
    let listing = list(&repo, &direct);
    assert!(complete_ids(&listing).is_empty(), "{listing}");
    assert_eq!(listing["incomplete"][0]["state"], "damaged");
    drop(work);
}

/// Credentials as files (a mounted Secret), with none in the environment: the operator's Jobs
/// run this way. A directory missing a file is a one-line error naming the file.
#[test]
fn credentials_can_come_from_a_directory_of_files() {
    let server = S3Server::start().unwrap();
    server.create_bucket(BUCKET).unwrap();
    let f = Scenario::new(50);
    let creds = f.work.path().join("s3");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(creds.join("AWS_ACCESS_KEY_ID"), "testing\n").unwrap();
    let repo = format!("s3://{BUCKET}/files");
    let env: Vec<(String, String)> = s3_env(&server, &server.endpoint())
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS_KEY") && !k.starts_with("AWS_SECRET"))
        .collect();
    let dir = creds.to_str().unwrap();
    let line = fails(
        with_env(
            cli(&["list", "--repo", &repo, "--s3-credentials-dir", dir]),
            &env,
        ),
        &["AWS_SECRET_ACCESS_KEY"],
    );
    assert!(
        !line.contains("testing"),
        "no credential in the error: {line}"
    );
    std::fs::write(creds.join("AWS_SECRET_ACCESS_KEY"), "testing\n").unwrap();
    let conn = f.source.cli_args();
    let mut args = vec![
        "backup",
        "--repo",
        &repo,
        "--method",
        "logical",
        "--s3-credentials-dir",
        dir,
        "--json",
    ];
    args.extend(conn.iter().map(String::as_str));
    let mut c = with_env(cli(&args), &env);
    c.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    let out: serde_json::Value = serde_json::from_str(&ok(c)).unwrap();
    let id = out["id"].as_str().unwrap();
    let mut c = with_env(
        cli(&["verify", "--repo", &repo, "--s3-credentials-dir", dir, id]),
        &env,
    );
    c.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY");
    ok(c);
}
