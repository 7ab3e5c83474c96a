//! The pod-side commands on real MariaDB: `instance init` writes settings a real server
//! accepts, and `instance restore` bootstraps an empty datadir from physical and logical
//! backups, never touches an initialized one, and redoes an interrupted restore.

mod common;

use common::*;

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
    let mut c = cli(&["instance", "init"]);
    c.env("MYSQL_BACKUP_INSTANCE_POD_NAME", "quay-3")
        .env("MYSQL_BACKUP_INSTANCE_CLUSTER", "quay")
        .env("MYSQL_BACKUP_INSTANCE_ENGINE", "mariadb")
        .env("MYSQL_BACKUP_INSTANCE_CONFIG_FILE", &config)
        .env("MYSQL_BACKUP_INSTANCE_CONF_DIR", &conf_dir);
    let out = ok(c);
    assert!(out.contains("server_id 103"), "{out}");
    assert_eq!(
        std::fs::read_to_string(conf_dir.join("bulwark.cnf")).unwrap(),
        "[mysqld]\nmax_connections = 77\n"
    );
    let instance = std::fs::read_to_string(conf_dir.join("bulwark-instance.cnf")).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&conf_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["bulwark-instance.cnf", "bulwark.cnf"]);

    // Run again (every pod start does): same result.
    let mut again = cli(&[
        "instance",
        "init",
        "--pod-name",
        "quay-3",
        "--cluster",
        "quay",
    ]);
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
        let mut c = cli(&["instance", "init", "--pod-name", pod, "--cluster", "quay"]);
        c.args(["--engine", "mariadb", "--config-file"])
            .arg(&config)
            .arg("--conf-dir")
            .arg(work.path().join("other"));
        fails(c, &[needle]);
    }
    assert!(!work.path().join("other").exists());
    let mut c = cli(&[
        "instance",
        "init",
        "--pod-name",
        "quay-0",
        "--cluster",
        "quay",
    ]);
    c.args(["--engine", "mysql", "--config-file"])
        .arg(work.path().join("absent.cnf"))
        .arg("--conf-dir")
        .arg(&conf_dir);
    fails(c, &["failed to read the configuration file", "absent.cnf"]);
}
