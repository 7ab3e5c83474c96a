//! The `bulwark-agent` command line (what runs inside each MySQL pod): argument parsing and
//! output over the crate's modules. In the library so that tests can parse exactly what the
//! operator builds (`bulwark_contract::command`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bulwark_cli::args::{
    absolute, read_parallel, s3_options, shutdown_signal, BackupSelector, KeyArgs, ProgressArgs,
    S3Args, UntilArgs,
};
use bulwark_cli::output::{print_json, LogFormat};
use bulwark_cli::progress::Reporter;
use bulwark_contract::Engine;
use bulwark_engine::format::Method;
use bulwark_engine::progress::Progress;
use bulwark_engine::Error;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::decide::sql::Source;
use crate::run::bootstrap::{self, DatadirState};
use crate::run::exporter::ExporterConfig;
use crate::run::init::{self, InitRequest};
use crate::run::metrics::MetricsConfig;
use crate::run::pending::PendingRestoreConfig;
use crate::run::{self, AgentConfig};

/// The in-pod agent of Bulwark's MySQL clusters.
#[derive(Parser)]
#[command(
    name = "bulwark-agent",
    version,
    about = "What runs inside each MySQL pod of a Bulwark cluster: configuration, bootstrap from a backup, the agent sidecar"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "BULWARK_AGENT_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// Log filter (tracing syntax), e.g. `info` or `bulwark_agent=debug`.
    #[arg(long, global = true, default_value = "info", env = "BULWARK_AGENT_LOG")]
    pub log: String,
    #[command(subcommand)]
    pub command: AgentCommand,
}

#[derive(Subcommand)]
pub enum AgentCommand {
    /// Write the per-pod server configuration (an init container, before mysqld starts).
    Init(InitArgs),
    /// Bootstrap an empty datadir from a backup (an init container after `init`); a datadir
    /// that already holds a server is left alone.
    Restore(Box<RestoreArgs>),
    /// Copy a running member's data into an empty datadir of a cluster that has data (an init
    /// container after `init`, before `restore`); a datadir that holds a server is left alone,
    /// and nothing is copied while no member has data.
    Seed(SeedArgs),
    /// The sidecar: health endpoints, accounts, role and replication for the mysqld beside
    /// it, and the pending logical restore.
    Run(Box<AgentArgs>),
}

#[derive(Args)]
pub struct InitArgs {
    /// This pod's name, `<statefulset>-<ordinal>` (from the downward API).
    #[arg(long, env = "BULWARK_AGENT_POD_NAME")]
    pub pod_name: String,
    /// Cluster name; the headless Service is `<cluster>-headless`.
    #[arg(long, env = "BULWARK_AGENT_CLUSTER")]
    pub cluster: String,
    /// Server family.
    #[arg(long, value_parser = bulwark_cli::args::engine_parser(), env = "BULWARK_AGENT_ENGINE")]
    pub engine: Engine,
    /// The cluster's configuration, copied into the include directory as bulwark-cluster.cnf.
    #[arg(
        long,
        env = "BULWARK_AGENT_CONFIG_FILE",
        default_value = "/etc/bulwark/config/my.cnf"
    )]
    pub config_file: PathBuf,
    /// mysqld's include directory; bulwark-instance.cnf is written there too.
    #[arg(
        long,
        env = "BULWARK_AGENT_CONF_DIR",
        default_value = "/etc/mysql/conf.d"
    )]
    pub conf_dir: PathBuf,
    /// Data directory to create when absent (a subdirectory of the data volume).
    #[arg(long, env = "BULWARK_AGENT_INIT_DATADIR")]
    pub datadir: Option<PathBuf>,
    /// The mysqld exporter's option file to write ([client] section of the metrics account).
    #[arg(long, requires = "exporter_password_file")]
    pub exporter_config: Option<PathBuf>,
    /// The metrics account's password file, for --exporter-config.
    #[arg(long, requires = "exporter_config")]
    pub exporter_password_file: Option<PathBuf>,
}

#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
    /// The datadir mysqld will use: existing and empty (a fresh volume), or already holding a
    /// server (then nothing happens).
    #[arg(long, env = "BULWARK_AGENT_DATADIR", default_value = "/var/lib/mysql")]
    pub datadir: PathBuf,
    /// Where a logical backup (its id and point-in-time target) is left for the agent
    /// [default: <datadir>/../bulwark-pending-logical-restore].
    #[arg(long, env = "BULWARK_AGENT_PENDING_FILE")]
    pub pending_file: Option<PathBuf>,
    /// Where a physical restore leaves the backup's GTID position for the agent (written only
    /// when a restore happened) [default: <datadir>/../bulwark-restored-gtid].
    #[arg(long, env = "BULWARK_AGENT_GTID_FILE")]
    pub gtid_file: Option<PathBuf>,
    /// Tool for --prepare instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    pub tool: Option<String>,
    /// A point in time to bring the restored data to, from the repository's binlog archive.
    #[command(flatten)]
    pub until: UntilArgs,
    /// This pod, in a cluster: with `--until latest` and a physical backup only the cluster's
    /// first member (ordinal 0) restores, and this one copies its data from the members at
    /// --peers once it runs, so every member starts at the same position.
    #[arg(long, requires = "peers")]
    pub pod_name: Option<String>,
    /// `host:port` of the members' agents (with --pod-name).
    #[arg(long)]
    pub peers: Vec<String>,
    /// Directory with the order key that signs a copy request (with --pod-name).
    #[arg(long, default_value = "/etc/bulwark/credentials")]
    pub credentials_dir: PathBuf,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args)]
pub struct SeedArgs {
    /// This pod's name (named in the request, for the donor's log).
    #[arg(long, env = "BULWARK_AGENT_POD_NAME")]
    pub pod_name: String,
    /// `host:port` of the members' agents; repeatable, and a name may stand for several
    /// members (the cluster's headless Service).
    #[arg(long, required = true)]
    pub peers: Vec<String>,
    /// The datadir mysqld will use.
    #[arg(long, env = "BULWARK_AGENT_DATADIR", default_value = "/var/lib/mysql")]
    pub datadir: PathBuf,
    /// Where the copy's GTID position is left for the agent
    /// [default: <datadir>/../bulwark-restored-gtid].
    #[arg(long, env = "BULWARK_AGENT_GTID_FILE")]
    pub gtid_file: Option<PathBuf>,
    /// The pending logical restore file (not data when kept in the datadir)
    /// [default: <datadir>/../bulwark-pending-logical-restore].
    #[arg(long, env = "BULWARK_AGENT_PENDING_FILE")]
    pub pending_file: Option<PathBuf>,
    /// Directory with the order key that signs the request.
    #[arg(
        long,
        env = "BULWARK_AGENT_CREDENTIALS_DIR",
        default_value = "/etc/bulwark/credentials"
    )]
    pub credentials_dir: PathBuf,
    /// Tool for --prepare instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    pub tool: Option<String>,
}

#[derive(Args)]
pub struct AgentArgs {
    /// mysqld's unix socket.
    #[arg(
        long,
        env = "BULWARK_AGENT_SOCKET",
        default_value = "/run/mysqld/mysqld.sock"
    )]
    pub socket: PathBuf,
    /// Address of the probe server (/healthz, /readyz).
    #[arg(long, env = "BULWARK_AGENT_LISTEN", default_value = "0.0.0.0:9081")]
    pub listen: SocketAddr,
    /// The pod's labels (downward API); the role label is read from it every pass.
    #[arg(
        long,
        env = "BULWARK_AGENT_LABELS_FILE",
        default_value = "/etc/podinfo/labels"
    )]
    pub labels_file: PathBuf,
    /// Directory with the password files root, replication, backup and metrics.
    #[arg(
        long,
        env = "BULWARK_AGENT_CREDENTIALS_DIR",
        default_value = "/etc/bulwark/credentials"
    )]
    pub credentials_dir: PathBuf,
    /// This pod's name: the operator's role orders name the pod they are for. Without it,
    /// orders are refused and the role comes from the labels file alone.
    #[arg(long, env = "BULWARK_AGENT_POD_NAME")]
    pub pod_name: Option<String>,
    /// File on the data volume where accepted role orders are kept across restarts.
    #[arg(long, env = "BULWARK_AGENT_ORDER_FILE")]
    pub order_file: Option<PathBuf>,
    /// Host replicas replicate from (the cluster's primary Service).
    #[arg(long, env = "BULWARK_AGENT_PRIMARY_HOST")]
    pub primary_host: String,
    /// Port replicas replicate from.
    #[arg(long, env = "BULWARK_AGENT_PRIMARY_PORT", default_value_t = 3306)]
    pub primary_port: u16,
    /// Largest replication lag at which a replica is still ready.
    #[arg(long, env = "BULWARK_AGENT_MAX_REPLICA_LAG", value_parser = humantime::parse_duration, default_value = "30s")]
    pub max_replica_lag: Duration,
    /// Replicas that must acknowledge each of the primary's commits (semi-synchronous
    /// replication, configured by the operator): the primary starts waiting for them once that
    /// many are connected. 0: asynchronous.
    #[arg(long, env = "BULWARK_AGENT_SEMI_SYNC_ACKS", default_value_t = 0)]
    pub semi_sync_acks: u32,
    /// Time between passes (labels read, server observed, one action taken).
    #[arg(long, env = "BULWARK_AGENT_INTERVAL", value_parser = humantime::parse_duration, default_value = "2s")]
    pub interval: Duration,
    /// Time mysqld has to answer a health check.
    #[arg(long, env = "BULWARK_AGENT_HEALTH_TIMEOUT", value_parser = humantime::parse_duration, default_value = "2s")]
    pub health_timeout: Duration,
    /// File naming a logical backup to load once this pod is primary (left by `bulwark-agent
    /// restore`); needs --repo.
    #[arg(long, env = "BULWARK_AGENT_PENDING_LOGICAL_RESTORE")]
    pub pending_logical_restore: Option<PathBuf>,
    /// File with the GTID position of a physical restore (left by `bulwark-agent restore
    /// --gtid-file`): adopted once, before replication or writes, then removed.
    #[arg(long, env = "BULWARK_AGENT_GTID_FILE")]
    pub gtid_file: Option<PathBuf>,
    /// Address to serve copies of this member's data on, for new members' `seed` (needs
    /// --datadir).
    #[arg(long, env = "BULWARK_AGENT_CLONE_LISTEN", requires = "datadir")]
    pub clone_listen: Option<SocketAddr>,
    /// The server's data directory as this container sees it (copies are taken from it).
    #[arg(long, env = "BULWARK_AGENT_DATADIR")]
    pub datadir: Option<PathBuf>,
    /// Address to serve the exporter's `/metrics` on (and nothing else of the exporter's;
    /// needs --metrics-upstream).
    #[arg(
        long,
        env = "BULWARK_AGENT_METRICS_LISTEN",
        requires = "metrics_upstream"
    )]
    pub metrics_listen: Option<SocketAddr>,
    /// The exporter's own address, on loopback.
    #[arg(
        long,
        env = "BULWARK_AGENT_METRICS_UPSTREAM",
        requires = "metrics_listen"
    )]
    pub metrics_upstream: Option<SocketAddr>,
    /// As the primary, take writes only while holding a lease the operator renews with signed
    /// heartbeats (`POST /lease`): once it lapses, client sessions are ended and the server is
    /// made read-only until a heartbeat comes again. The operator passes it when automatic
    /// failover is on, so that a primary cut off from it fences itself before a replica is
    /// promoted.
    #[arg(long, env = "BULWARK_AGENT_PRIMARY_LEASE", requires = "pod_name")]
    pub primary_lease: bool,
    /// Repository of the pending backup: a path, file:///path or s3://bucket/prefix.
    #[arg(long, env = "MYSQL_BACKUP_REPO")]
    pub repo: Option<String>,
    #[command(flatten)]
    s3: S3Args,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Chunks read and decoded in parallel while loading (default: number of CPUs + 2, fewer
    /// when the container's memory limit cannot hold that many chunks in flight).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    pub workers: Option<usize>,
    /// SQL client for the load instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    pub tool: Option<String>,
}

/// Runs one subcommand.
pub async fn run(command: AgentCommand) -> anyhow::Result<()> {
    match command {
        AgentCommand::Init(a) => cmd_init(a),
        AgentCommand::Restore(a) => cmd_restore(*a).await,
        AgentCommand::Seed(a) => cmd_seed(a).await,
        AgentCommand::Run(a) => cmd_agent(*a).await,
    }
}

async fn cmd_agent(a: AgentArgs) -> anyhow::Result<()> {
    if a.interval.is_zero() {
        return Err(Error::InvalidArgument("--interval must be positive".into()).into());
    }
    let pending = match &a.pending_logical_restore {
        Some(file) => {
            if a.repo.is_none() {
                tracing::warn!(pending_file = %file.display(), "no --repo given: a pending logical restore would fail");
            }
            Some(PendingRestoreConfig {
                file: absolute(file)?,
                repo_url: a.repo.clone(),
                s3: s3_options(&a.s3, 0),
                key_file: a
                    .key
                    .encryption_key_file
                    .as_deref()
                    .map(absolute)
                    .transpose()?,
                parallel: read_parallel(a.workers),
                tool: a.tool.clone(),
            })
        }
        None => None,
    };
    let config = AgentConfig {
        socket: absolute(&a.socket)?,
        listen: a.listen,
        labels_file: absolute(&a.labels_file)?,
        pod_name: a.pod_name.clone(),
        order_file: a.order_file.as_deref().map(absolute).transpose()?,
        credentials_dir: absolute(&a.credentials_dir)?,
        source: Source {
            host: a.primary_host,
            port: a.primary_port,
        },
        max_replica_lag: a.max_replica_lag,
        semi_sync_acks: a.semi_sync_acks,
        primary_lease: a.primary_lease,
        interval: a.interval,
        health_timeout: a.health_timeout,
        pending,
        gtid_file: a.gtid_file.as_deref().map(absolute).transpose()?,
        clone: match (a.clone_listen, &a.datadir) {
            (Some(addr), Some(datadir)) => Some((addr, absolute(datadir)?)),
            _ => None,
        },
        metrics: match (a.metrics_listen, a.metrics_upstream) {
            (Some(listen), Some(upstream)) => Some(MetricsConfig { listen, upstream }),
            _ => None,
        },
    };
    run::run(config, shutdown_signal()).await?;
    Ok(())
}

async fn cmd_seed(a: SeedArgs) -> anyhow::Result<()> {
    let datadir = absolute(&a.datadir)?;
    let cfg = crate::run::seed::SeedConfig {
        pod_name: a.pod_name,
        peers: a.peers,
        gtid_file: match &a.gtid_file {
            Some(p) => absolute(p)?,
            None => bootstrap::default_gtid_file(&datadir),
        },
        pending_file: match &a.pending_file {
            Some(p) => absolute(p)?,
            None => bootstrap::default_pending_file(&datadir),
        },
        datadir,
        credentials_dir: absolute(&a.credentials_dir)?,
        tool: a.tool,
        wait_for_data: false,
    };
    let outcome = crate::run::seed::seed(&cfg).await?;
    let line = crate::run::seed::describe(&outcome, &cfg.datadir);
    tracing::info!(outcome = %line, "seed finished");
    println!("{line}");
    Ok(())
}

async fn cmd_restore(a: RestoreArgs) -> anyhow::Result<()> {
    let datadir = absolute(&a.datadir)?;
    let pending = match &a.pending_file {
        Some(p) => absolute(p)?,
        None => bootstrap::default_pending_file(&datadir),
    };
    let gtid_file = match &a.gtid_file {
        Some(p) => absolute(p)?,
        None => bootstrap::default_gtid_file(&datadir),
    };
    // Decided before the repository is contacted: a routine restart of the pod must not
    // depend on the repository being reachable. A skipped restore leaves the GTID file alone:
    // the agent may not have adopted it yet.
    match bootstrap::inspect(&datadir, &[&pending, &gtid_file])? {
        DatadirState::Initialized(evidence) => {
            tracing::info!(datadir = %datadir.display(), evidence = %evidence, "datadir already initialized; restore skipped");
            if a.json {
                print_json(&json!({ "action": "skipped", "datadir": datadir }));
            } else {
                println!(
                    "datadir {} already initialized ({evidence} present); restore skipped",
                    datadir.display()
                );
            }
            return Ok(());
        }
        DatadirState::Unexpected(entries) => {
            return Err(bootstrap::BootstrapError::AcceptDatadir {
                path: datadir.display().to_string(),
                entries: match entries.len() {
                    n if n > 10 => format!("{} and {} more", entries[..10].join(", "), n - 10),
                    _ => entries.join(", "),
                },
            }
            .into())
        }
        DatadirState::Interrupted => {
            tracing::warn!(datadir = %datadir.display(), "an earlier restore was interrupted; starting over");
            bootstrap::clear(&datadir)?;
        }
        DatadirState::Empty => {}
    }
    let until = a.until.target()?;
    let (repo, backup, key) = a.backup.open().await?;
    let copies_first = backup.manifest.method == Method::Physical
        && matches!(until, Some(bulwark_pitr::archive::RecoveryTarget::Latest))
        && a.pod_name
            .as_deref()
            .is_some_and(|pod| !bootstrap::is_first_member(pod));
    if copies_first {
        tracing::info!(backup_id = %backup.manifest.id, "the first member restores to the archive's latest point; this member copies its data, so every member starts at the same position");
        let cfg = crate::run::seed::SeedConfig {
            pod_name: a.pod_name.clone().unwrap_or_default(),
            peers: a.peers.clone(),
            gtid_file,
            pending_file: pending,
            datadir,
            credentials_dir: absolute(&a.credentials_dir)?,
            tool: a.tool.clone(),
            wait_for_data: true,
        };
        let outcome = crate::run::seed::seed(&cfg).await?;
        let line = crate::run::seed::describe(&outcome, &cfg.datadir);
        tracing::info!(outcome = %line, "copied the first member's data");
        if a.json {
            print_json(&json!({ "action": "copied", "outcome": line }));
        } else {
            println!("{line}");
        }
        return Ok(());
    }
    // Held against deletion (retention, delete) until the restore is done.
    let hold = repo.hold_for_restore(&backup.manifest.id).await?;
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "restore", a.progress.display());
    let id = backup.manifest.id.clone();
    let work = async {
        match backup.manifest.method {
            Method::Physical => bootstrap::restore_physical(
                &repo,
                &backup,
                key.as_ref(),
                until.as_ref(),
                &datadir,
                &gtid_file,
                a.tool.as_deref(),
                a.backup.parallel(),
                progress,
            )
            .await
            .map(Some),
            Method::Logical => {
                // A physical attempt may have left its marker; a logical bootstrap leaves the
                // datadir empty for mysqld to initialize.
                let marker = datadir.join(bootstrap::MARKER_NAME);
                bootstrap::stage_logical(
                    &repo,
                    &backup,
                    key.as_ref(),
                    until.as_ref(),
                    &pending,
                    a.backup.parallel(),
                    progress,
                )
                .await?;
                if marker.exists() {
                    // A GTID file beside an interrupted physical attempt is stale too.
                    bootstrap::remove_restored_gtid(&gtid_file)?;
                    bootstrap::finish_marked(&datadir)?;
                }
                Ok(None)
            }
        }
    };
    let result = tokio::select! {
        r = work => r,
        _ = shutdown_signal() => Err(Error::Interrupted.into()),
    };
    match backup.manifest.method {
        // A staged logical backup is loaded once the server runs, by the agent, which takes a
        // hold of its own: this one stays until then (it lapses at its expiry).
        Method::Logical if result.is_ok() => hold.lapse(),
        _ => hold.release().await,
    }
    reporter.finish().await;
    match result? {
        Some(bootstrap::PhysicalBootstrap {
            outcome,
            gtid,
            replayed,
        }) => {
            tracing::info!(backup_id = %id, datadir = %datadir.display(), files = outcome.files, gtid_set = %gtid.gtid_set, gtid_file = %gtid_file.display(), "datadir restored");
            if a.json {
                print_json(&json!({
                    "action": "restored",
                    "backupId": id,
                    "datadir": datadir,
                    "plaintextBytes": outcome.plaintext_bytes,
                    "files": outcome.files,
                    "gtidSet": gtid.gtid_set,
                    "gtidFile": gtid_file,
                    "replay": replayed,
                }));
            } else {
                let at = match gtid.gtid_set.as_str() {
                    "" => "no GTID position".to_string(),
                    g => format!("GTID position {g}"),
                };
                println!(
                    "restored backup {id} into {}: {} files, prepared; {at} left in {}",
                    datadir.display(),
                    outcome.files.unwrap_or(0),
                    gtid_file.display()
                );
            }
        }
        None => {
            tracing::info!(backup_id = %id, pending_file = %pending.display(), "logical backup verified; left for the agent");
            if a.json {
                print_json(&json!({
                    "action": "pending",
                    "backupId": id,
                    "datadir": datadir,
                    "pendingFile": pending,
                }));
            } else {
                println!(
                    "logical backup {id} verified; the agent loads it once mysqld runs (pending file {})",
                    pending.display()
                );
            }
        }
    }
    Ok(())
}

fn cmd_init(a: InitArgs) -> anyhow::Result<()> {
    let outcome = init::run(&InitRequest {
        pod_name: a.pod_name,
        cluster: a.cluster,
        engine: a.engine,
        config_file: a.config_file,
        conf_dir: a.conf_dir,
        datadir: a.datadir,
        exporter: match (a.exporter_config, a.exporter_password_file) {
            (Some(config_file), Some(password_file)) => Some(ExporterConfig {
                config_file,
                password_file,
                user: bulwark_contract::Account::Metrics.user().to_owned(),
                port: bulwark_contract::ports::MYSQL,
            }),
            _ => None,
        },
    })?;
    tracing::info!(
        server_id = outcome.server_id,
        cluster_config = %outcome.cluster_config.display(),
        instance_config = %outcome.instance_config.display(),
        "server configuration written"
    );
    println!(
        "wrote {} and {} (server_id {})",
        outcome.cluster_config.display(),
        outcome.instance_config.display(),
        outcome.server_id
    );
    Ok(())
}

#[cfg(test)]
mod tests {
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
            let AgentCommand::Init(a) =
                parse(command::Init::for_pod("quay", engine, metrics).argv())
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
            let built =
                command::Restore::for_pod(repository(), "20261122T031633Z-4a0760", Some(pit));
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

        let bootstrapped =
            command::Agent::for_pod("quay-primary", 1, Some(repository()), true, true);
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
}
