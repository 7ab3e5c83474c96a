//! `bulwark-agent init`: the per-pod server settings (server id, report host, binary log and GTID
//! replication), written into mysqld's include directory before it starts.

use std::path::PathBuf;

use bulwark_contract::Engine;
use bulwark_engine::outfile::OutfileError;

use crate::run::files;

/// Name of the copied cluster configuration in the include directory. It sorts before
/// [`INSTANCE_CONFIG_NAME`]: MariaDB reads an include directory in name order and the last
/// value of an option wins, so the per-pod settings prevail (the operator also refuses
/// `mysqldConfig` keys that set them, which is what protects MySQL, whose order is unspecified).
pub const CLUSTER_CONFIG_NAME: &str = "bulwark-cluster.cnf";
/// Name of the generated per-pod configuration in the include directory.
pub const INSTANCE_CONFIG_NAME: &str = "bulwark-instance.cnf";
/// Server ids start here, so that no pod gets 0 (which disables replication) or 1 (the
/// default of a server configured by hand).
pub const SERVER_ID_BASE: u32 = 100;

/// Errors of `bulwark-agent init`.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("failed to parse pod name {0:?}: expected <statefulset>-<ordinal>, e.g. db-0")]
    ParsePodName(String),
    #[error("failed to parse cluster name {0:?}: expected a DNS label (a-z, 0-9, -)")]
    ParseClusterName(String),
    #[error("failed to read the configuration file {path}")]
    ReadConfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to create the include directory {path}")]
    CreateConfDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to create the data directory {path}")]
    CreateDatadir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write the server configuration")]
    WriteConfig(#[from] OutfileError),
    #[error("failed to write the exporter's configuration")]
    ExporterConfig(#[from] crate::run::exporter::ExporterConfigError),
}

/// What `bulwark-agent init` is asked to do.
#[derive(Debug, Clone)]
pub struct InitRequest {
    /// `$POD_NAME`, `<statefulset>-<ordinal>`.
    pub pod_name: String,
    /// Cluster (StatefulSet) name; the headless Service is `<cluster>-headless`.
    pub cluster: String,
    /// Server family.
    pub engine: Engine,
    /// The cluster's configuration file, copied as is.
    pub config_file: PathBuf,
    /// mysqld's include directory (`!includedir`).
    pub conf_dir: PathBuf,
    /// A data directory to create (owned by this process's user) when it does not exist: a
    /// subdirectory of the data volume, so that the server never sees the volume root and
    /// its `lost+found`.
    pub datadir: Option<PathBuf>,
    /// The exporter's option file to write, with metrics.
    pub exporter: Option<crate::run::exporter::ExporterConfig>,
}

/// What `bulwark-agent init` wrote.
#[derive(Debug, Clone)]
pub struct InitOutcome {
    /// The pod's server id.
    pub server_id: u32,
    /// The copy of the cluster configuration.
    pub cluster_config: PathBuf,
    /// The generated per-pod configuration.
    pub instance_config: PathBuf,
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The ordinal of a StatefulSet pod name (`db-2` → 2).
pub fn pod_ordinal(pod: &str) -> Result<u32, InitError> {
    let bad = || InitError::ParsePodName(pod.to_string());
    if !is_dns_label(pod) {
        return Err(bad());
    }
    let (prefix, ordinal) = pod.rsplit_once('-').ok_or_else(bad)?;
    if prefix.is_empty()
        || ordinal.is_empty()
        || !ordinal.bytes().all(|b| b.is_ascii_digit())
        || (ordinal.len() > 1 && ordinal.starts_with('0'))
    {
        return Err(bad());
    }
    let n: u32 = ordinal.parse().map_err(|_| bad())?;
    n.checked_add(SERVER_ID_BASE).ok_or_else(bad)?;
    Ok(n)
}

/// How long a replica waits for its source to answer a connection or send anything (a
/// heartbeat comes every half of it). The servers' 60 s default held a replica of a restarted
/// primary for a minute: the first reconnection went to the old pod's address (still in DNS),
/// which no longer answers, and with semi-sync the primary's commits waited that long.
pub const REPLICA_NET_TIMEOUT_SECONDS: u32 = 10;

/// How long a MariaDB semi-synchronous replica's `STOP SLAVE` tries to reach its source to end
/// its dump thread there (the server's default is 5 s, cut short after 2 s by the stop's own
/// retry): a source that answers does so in milliseconds, and a dead one held every stop.
pub const KILL_CONNECTION_TIMEOUT_SECONDS: u32 = 1;

/// The per-pod `[mysqld]` settings. `read_only` starts ON: the agent lifts it once the pod is
/// labelled primary, so a restarted pod never takes writes before its role is known.
pub fn instance_config(pod: &str, cluster: &str, engine: Engine, ordinal: u32) -> String {
    let mut settings: Vec<(&str, String)> = vec![
        ("server_id", (SERVER_ID_BASE + ordinal).to_string()),
        ("report_host", format!("{pod}.{cluster}-headless")),
        ("read_only", "ON".into()),
        ("log_bin", "mysql-bin".into()),
        ("relay_log", "relay-bin".into()),
    ];
    match engine {
        // Replication starts when the agent says so, never by itself at server start: a
        // restored datadir or a demoted primary may hold a configuration the agent must check
        // (or replace) first.
        Engine::MariaDb => settings.extend([
            ("skip_slave_start", "ON".to_string()),
            ("log_slave_updates", "ON".to_string()),
            ("binlog_format", "ROW".to_string()),
            ("gtid_strict_mode", "ON".to_string()),
            ("slave_net_timeout", REPLICA_NET_TIMEOUT_SECONDS.to_string()),
            // A semi-synchronous replica's `STOP SLAVE` first connects to its source to end
            // the dump thread there: to a lost source, that held a promotion (and every
            // replica's move to the new primary) 2 s by the default; measured 1 s with this.
            (
                "rpl_semi_sync_slave_kill_conn_timeout",
                KILL_CONNECTION_TIMEOUT_SECONDS.to_string(),
            ),
        ]),
        // binlog_format is ROW by default and deprecated in 8.4; replicas log what they
        // apply by default (log_replica_updates).
        Engine::MySql => settings.extend([
            ("skip_replica_start", "ON".to_string()),
            ("gtid_mode", "ON".to_string()),
            ("enforce_gtid_consistency", "ON".to_string()),
            (
                "replica_net_timeout",
                REPLICA_NET_TIMEOUT_SECONDS.to_string(),
            ),
        ]),
    }
    let mut out = format!(
        "# Written by `bulwark-agent init` for pod {pod} of cluster {cluster} ({engine}),\n\
         # again at every start of the pod: do not edit.\n[mysqld]\n"
    );
    for (k, v) in settings {
        out.push_str(&format!("{k} = {v}\n"));
    }
    out
}

/// Copies the cluster configuration and writes the per-pod one, each atomically.
pub fn run(req: &InitRequest) -> Result<InitOutcome, InitError> {
    let ordinal = pod_ordinal(&req.pod_name)?;
    if !is_dns_label(&req.cluster) {
        return Err(InitError::ParseClusterName(req.cluster.clone()));
    }
    let config = std::fs::read(&req.config_file).map_err(|source| InitError::ReadConfig {
        path: req.config_file.display().to_string(),
        source,
    })?;
    std::fs::create_dir_all(&req.conf_dir).map_err(|source| InitError::CreateConfDir {
        path: req.conf_dir.display().to_string(),
        source,
    })?;
    if let Some(d) = &req.datadir {
        use std::os::unix::fs::DirBuilderExt;
        if !d.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(d)
                .map_err(|source| InitError::CreateDatadir {
                    path: d.display().to_string(),
                    source,
                })?;
        }
    }
    let cluster_config = req.conf_dir.join(CLUSTER_CONFIG_NAME);
    let instance_path = req.conf_dir.join(INSTANCE_CONFIG_NAME);
    files::replace(&cluster_config, &config, 0o644)?;
    let instance = instance_config(&req.pod_name, &req.cluster, req.engine, ordinal);
    files::replace(&instance_path, instance.as_bytes(), 0o644)?;
    if let Some(exporter) = &req.exporter {
        crate::run::exporter::write(exporter)?;
    }
    Ok(InitOutcome {
        server_id: SERVER_ID_BASE + ordinal,
        cluster_config,
        instance_config: instance_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_from_pod_names() {
        let cases: &[(&str, Option<u32>)] = &[
            ("harbor-0", Some(0)),
            ("harbor-12", Some(12)),
            ("tide-pool-3", Some(3)),
            ("harbor", None),
            ("harbor-", None),
            ("-3", None),
            ("harbor-01", None),
            ("harbor-x", None),
            ("Harbor-1", None),
            ("harbor-1\n[mysqld]", None),
            ("harbor-99999999999", None),
            ("harbor-4294967295", None),
            ("harbor-4294967195", Some(4_294_967_195)),
        ];
        for (pod, want) in cases {
            assert_eq!(pod_ordinal(pod).ok(), *want, "{pod:?}");
        }
    }

    #[test]
    fn the_per_pod_settings_are_read_after_the_clusters() {
        assert!(CLUSTER_CONFIG_NAME < INSTANCE_CONFIG_NAME);
    }

    #[test]
    fn mariadb_settings() {
        assert_eq!(
            instance_config("harbor-2", "harbor", Engine::MariaDb, 2),
            "# Written by `bulwark-agent init` for pod harbor-2 of cluster harbor (mariadb),\n\
             # again at every start of the pod: do not edit.\n\
             [mysqld]\n\
             server_id = 102\n\
             report_host = harbor-2.harbor-headless\n\
             read_only = ON\n\
             log_bin = mysql-bin\n\
             relay_log = relay-bin\n\
             skip_slave_start = ON\n\
             log_slave_updates = ON\n\
             binlog_format = ROW\n\
             gtid_strict_mode = ON\n\
             slave_net_timeout = 10\n\
             rpl_semi_sync_slave_kill_conn_timeout = 1\n"
        );
    }

    #[test]
    fn mysql_settings_leave_binlog_format_alone() {
        let c = instance_config("harbor-0", "harbor", Engine::MySql, 0);
        assert!(c.contains("server_id = 100\n"), "{c}");
        assert!(
            c.contains("report_host = harbor-0.harbor-headless\n"),
            "{c}"
        );
        assert!(
            c.contains("gtid_mode = ON\nenforce_gtid_consistency = ON\nreplica_net_timeout = 10\n"),
            "{c}"
        );
        assert!(c.contains("log_bin = mysql-bin\n"), "{c}");
        assert!(c.contains("skip_replica_start = ON\n"), "{c}");
        for absent in ["binlog_format", "gtid_strict_mode", "log_slave_updates"] {
            assert!(!c.contains(absent), "{absent} in {c}");
        }
    }

    #[test]
    fn run_writes_both_files_and_rejects_bad_names() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("my.cnf");
        std::fs::write(&cfg, "[mysqld]\nmax_connections = 50\n").unwrap();
        let mut req = InitRequest {
            pod_name: "harbor-1".into(),
            cluster: "harbor".into(),
            engine: Engine::MariaDb,
            config_file: cfg,
            conf_dir: dir.path().join("conf.d"),
            datadir: Some(dir.path().join("volume/mysql")),
            exporter: None,
        };
        let out = run(&req).unwrap();
        assert_eq!(out.server_id, 101);
        assert!(dir.path().join("volume/mysql").is_dir());
        // An existing data directory is left as it is.
        std::fs::write(dir.path().join("volume/mysql/ibdata1"), b"x").unwrap();
        run(&req).unwrap();
        assert!(dir.path().join("volume/mysql/ibdata1").exists());
        assert_eq!(
            std::fs::read_to_string(&out.cluster_config).unwrap(),
            "[mysqld]\nmax_connections = 50\n"
        );
        assert!(std::fs::read_to_string(&out.instance_config)
            .unwrap()
            .contains("server_id = 101\n"));
        req.cluster = "Harbor\n".into();
        assert!(matches!(run(&req), Err(InitError::ParseClusterName(_))));
        req.cluster = "harbor".into();
        req.config_file = dir.path().join("missing.cnf");
        assert!(matches!(run(&req), Err(InitError::ReadConfig { .. })));
    }
}
