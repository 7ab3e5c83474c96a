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

#[path = "cli_restore.rs"]
mod restore;
use restore::cmd_restore;
pub use restore::RestoreArgs;

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
