//! Tests of the agent's command line: the operator's argv parses into each command.
use super::*;
use bulwark_contract::command::{self, Argv, Repository};
use bulwark_contract::paths;
use bulwark_contract::Engine;

/// Parses what the operator builds; every container logs JSON lines.
fn parse(argv: Argv) -> AgentCommand {
    assert_eq!(argv.program, "bulwark-agent");
    let cli = Cli::try_parse_from(argv.to_vec()).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(matches!(cli.log_format, LogFormat::Json), "{argv:?}");
    cli.command
}

fn repository() -> Repository {
    Repository {
        url: "s3://bucket/prefix".into(),
        s3_endpoint: Some("http://minio:9000".into()),
        s3_region: Some("eu-1".into()),
        s3_path_style: true,
        s3_credentials_dir: Some(paths::S3_CREDENTIALS_DIR.into()),
        encryption_key_file: Some(paths::KEY_FILE.into()),
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// What the operator's `init` container runs is what this binary parses.
#[test]
fn the_operators_init_command_parses() {
    for (engine, metrics) in [(Engine::MariaDb, true), (Engine::MySql, false)] {
        let AgentCommand::Init(a) = parse(command::Init::for_pod("quay", engine, metrics).argv())
        else {
            panic!("not init")
        };
        assert_eq!(
            (
                a.exporter_config.as_deref().map(path),
                a.exporter_password_file.as_deref().map(path)
            ),
            if metrics {
                (
                    Some(paths::EXPORTER_CONFIG),
                    Some("/etc/bulwark/credentials/metrics"),
                )
            } else {
                (None, None)
            }
        );
        assert_eq!(a.pod_name, "$(POD_NAME)");
        assert_eq!(a.cluster, "quay");
        assert_eq!(a.engine.to_string(), engine.as_str());
        assert_eq!(path(&a.config_file), paths::CONFIG_FILE);
        assert_eq!(path(&a.conf_dir), paths::CONF_DIR);
        assert_eq!(
            a.datadir.as_deref().map(path),
            Some(paths::DATADIR_ON_VOLUME)
        );
    }
}

#[test]
fn the_operators_restore_command_parses() {
    let built = command::Restore::for_pod(repository(), "20261122T031633Z-4a0760", None);
    let AgentCommand::Restore(a) = parse(built.argv()) else {
        panic!("not restore")
    };
    assert_eq!(a.backup.id, "20261122T031633Z-4a0760");
    assert_eq!(a.backup.repo.repo, "s3://bucket/prefix");
    assert_eq!(
        a.backup.repo.s3.s3_endpoint.as_deref(),
        Some("http://minio:9000")
    );
    assert_eq!(a.backup.repo.s3.s3_region.as_deref(), Some("eu-1"));
    assert!(a.backup.repo.s3.s3_path_style);
    assert_eq!(
        a.backup.repo.s3.s3_credentials_dir.as_deref().map(path),
        Some(paths::S3_CREDENTIALS_DIR)
    );
    assert_eq!(
        a.backup.key.encryption_key_file.as_deref().map(path),
        Some(paths::KEY_FILE)
    );
    assert_eq!(path(&a.datadir), paths::DATADIR);
    assert_eq!(
        a.pending_file.as_deref().map(path),
        Some(paths::PENDING_LOGICAL_RESTORE)
    );
    assert_eq!(a.gtid_file.as_deref().map(path), Some(paths::RESTORED_GTID));
    assert!(a.until.target().unwrap().is_none());

    // A point-in-time bootstrap: each kind of target reaches the parser as given.
    for (pit, shown) in [
        (
            command::PointInTime::Until("2026-11-25T03:15:00Z".into()),
            "2026-11-25T03:15:00Z",
        ),
        (
            command::PointInTime::Until("latest".into()),
            "the latest archived transaction",
        ),
        (
            command::PointInTime::UntilGtid("0-1-5012".into()),
            "GTID 0-1-5012",
        ),
    ] {
        let built = command::Restore::for_pod(repository(), "20261122T031633Z-4a0760", Some(pit));
        let AgentCommand::Restore(a) = parse(built.argv()) else {
            panic!("not restore")
        };
        assert_eq!(a.until.target().unwrap().unwrap().to_string(), shown);
        assert_eq!(a.backup.id, "20261122T031633Z-4a0760");
    }

    // In a cluster's pods: where the first member is found, for the others to copy it.
    let built = command::Restore::for_pod(repository(), "20261122T031633Z-4a0760", None)
        .in_cluster("quay-members");
    let AgentCommand::Restore(a) = parse(built.argv()) else {
        panic!("not restore")
    };
    assert_eq!(a.pod_name.as_deref(), Some("$(POD_NAME)"));
    assert_eq!(
        a.peers,
        [format!("quay-members:{}", bulwark_contract::ports::AGENT)]
    );
    assert_eq!(path(&a.credentials_dir), paths::CREDENTIALS_DIR);
    assert_eq!(a.backup.id, "20261122T031633Z-4a0760");
    for (pod, first) in [
        ("quay-0", true),
        ("quay-1", false),
        ("quay-10", false),
        ("quay", false),
    ] {
        assert_eq!(bootstrap::is_first_member(pod), first, "{pod}");
    }
}

#[test]
fn the_operators_agent_command_parses() {
    let AgentCommand::Run(a) =
        parse(command::Agent::for_pod("quay-primary", 1, None, false, false).argv())
    else {
        panic!("not run")
    };
    assert_eq!(path(&a.socket), paths::SOCKET);
    assert_eq!(a.listen.to_string(), "0.0.0.0:9081");
    assert_eq!(a.listen.port(), bulwark_contract::ports::AGENT);
    assert_eq!(path(&a.labels_file), paths::LABELS_FILE);
    assert_eq!(a.pod_name.as_deref(), Some("$(POD_NAME)"));
    assert_eq!(a.order_file.as_deref().map(path), Some(paths::ROLE_ORDER));
    assert_eq!(path(&a.credentials_dir), paths::CREDENTIALS_DIR);
    assert_eq!(a.primary_host, "quay-primary");
    assert_eq!(a.primary_port, bulwark_contract::ports::MYSQL);
    assert_eq!(a.semi_sync_acks, 1);
    assert_eq!((a.repo, a.pending_logical_restore), (None, None));
    // Every member continues from a seed's copy, and serves copies from its datadir.
    assert_eq!(a.gtid_file.as_deref().map(path), Some(paths::RESTORED_GTID));
    assert_eq!(
        a.clone_listen.map(|l| l.port()),
        Some(bulwark_contract::ports::CLONE)
    );
    assert_eq!(a.datadir.as_deref().map(path), Some(paths::DATADIR));
    assert_eq!((a.metrics_listen, a.metrics_upstream), (None, None));
    assert!(!a.primary_lease);

    let bootstrapped = command::Agent::for_pod("quay-primary", 1, Some(repository()), true, true);
    let AgentCommand::Run(a) = parse(bootstrapped.argv()) else {
        panic!("not run")
    };
    assert_eq!(a.repo.as_deref(), Some("s3://bucket/prefix"));
    // Metrics on: served on the public port, read from the exporter on loopback.
    assert_eq!(
        a.metrics_listen.map(|l| l.to_string()),
        Some(format!("0.0.0.0:{}", bulwark_contract::ports::EXPORTER))
    );
    assert_eq!(
        a.metrics_upstream.map(|l| l.to_string()),
        Some(format!(
            "127.0.0.1:{}",
            bulwark_contract::ports::EXPORTER_LOOPBACK
        ))
    );
    assert_eq!(a.s3.s3_endpoint.as_deref(), Some("http://minio:9000"));
    assert!(a.s3.s3_path_style);
    assert_eq!(
        a.s3.s3_credentials_dir.as_deref().map(path),
        Some(paths::S3_CREDENTIALS_DIR)
    );
    assert_eq!(
        a.key.encryption_key_file.as_deref().map(path),
        Some(paths::KEY_FILE)
    );
    assert_eq!(
        a.pending_logical_restore.as_deref().map(path),
        Some(paths::PENDING_LOGICAL_RESTORE)
    );
    assert_eq!(a.gtid_file.as_deref().map(path), Some(paths::RESTORED_GTID));
    assert!(a.primary_lease);
}

#[test]
fn the_operators_seed_command_parses() {
    let AgentCommand::Seed(a) = parse(command::Seed::for_pod("quay-headless").argv()) else {
        panic!("not seed")
    };
    assert_eq!(a.pod_name, "$(POD_NAME)");
    assert_eq!(a.peers, ["quay-headless:9081"]);
    assert_eq!(path(&a.datadir), paths::DATADIR);
    assert_eq!(a.gtid_file.as_deref().map(path), Some(paths::RESTORED_GTID));
    assert_eq!(
        a.pending_file.as_deref().map(path),
        Some(paths::PENDING_LOGICAL_RESTORE)
    );
    assert_eq!(path(&a.credentials_dir), paths::CREDENTIALS_DIR);
}
