//! The binary's `instance` subcommands (what runs inside each MySQL pod): argument parsing
//! and output over `mysql_backup::instance`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use mysql_backup::format::{Flavor, Method};
use mysql_backup::instance::agent::{self, AgentConfig, PendingRestoreConfig};
use mysql_backup::instance::bootstrap::{self, DatadirState};
use mysql_backup::instance::init::{self, InitRequest};
use mysql_backup::instance::sql::Source;
use mysql_backup::progress::{Progress, Reporter};
use mysql_backup::Error;
use serde_json::json;

use super::{
    absolute, print_json, s3_options, shutdown_signal, workers, BackupSelector, KeyArgs,
    ProgressArgs, S3Args,
};

#[derive(Subcommand)]
pub(crate) enum InstanceCommand {
    /// Write the per-pod server configuration (an init container, before mysqld starts).
    Init(InitArgs),
    /// Bootstrap an empty datadir from a backup (an init container after `init`); a datadir
    /// that already holds a server is left alone.
    Restore(RestoreArgs),
    /// The sidecar: health endpoints, accounts, role and replication for the mysqld beside
    /// it, and the pending logical restore.
    Agent(AgentArgs),
}

#[derive(Args)]
pub(crate) struct InitArgs {
    /// This pod's name, `<statefulset>-<ordinal>` (from the downward API).
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_POD_NAME")]
    pod_name: String,
    /// Cluster name; the headless Service is `<cluster>-headless`.
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_CLUSTER")]
    cluster: String,
    /// Server family.
    #[arg(long, value_enum, env = "MYSQL_BACKUP_INSTANCE_ENGINE")]
    engine: Flavor,
    /// The cluster's configuration, copied into the include directory as bulwark.cnf.
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_CONFIG_FILE",
        default_value = "/etc/bulwark/config/my.cnf"
    )]
    config_file: PathBuf,
    /// mysqld's include directory; bulwark-instance.cnf is written there too.
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_CONF_DIR",
        default_value = "/etc/mysql/conf.d"
    )]
    conf_dir: PathBuf,
    /// Data directory to create when absent (a subdirectory of the data volume).
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_INIT_DATADIR")]
    datadir: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct RestoreArgs {
    #[command(flatten)]
    backup: BackupSelector,
    /// The datadir mysqld will use: existing and empty (a fresh volume), or already holding a
    /// server (then nothing happens).
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_DATADIR",
        default_value = "/var/lib/mysql"
    )]
    datadir: PathBuf,
    /// Where a logical backup's id is left for the agent
    /// [default: <datadir>/../bulwark-pending-logical-restore].
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_PENDING_FILE")]
    pending_file: Option<PathBuf>,
    /// Where a physical restore leaves the backup's GTID position for the agent (written only
    /// when a restore happened) [default: <datadir>/../bulwark-restored-gtid].
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_GTID_FILE")]
    gtid_file: Option<PathBuf>,
    /// Tool for --prepare instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    tool: Option<String>,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    progress: ProgressArgs,
}

#[derive(Args)]
pub(crate) struct AgentArgs {
    /// mysqld's unix socket.
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_SOCKET",
        default_value = "/run/mysqld/mysqld.sock"
    )]
    socket: PathBuf,
    /// Address of the probe server (/healthz, /readyz).
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_LISTEN",
        default_value = "0.0.0.0:9081"
    )]
    listen: SocketAddr,
    /// The pod's labels (downward API); the role label is read from it every pass.
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_LABELS_FILE",
        default_value = "/etc/podinfo/labels"
    )]
    labels_file: PathBuf,
    /// Directory with the password files root, replication, backup and metrics.
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_CREDENTIALS_DIR",
        default_value = "/etc/bulwark/credentials"
    )]
    credentials_dir: PathBuf,
    /// Host replicas replicate from (the cluster's primary Service).
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_PRIMARY_HOST")]
    primary_host: String,
    /// Port replicas replicate from.
    #[arg(
        long,
        env = "MYSQL_BACKUP_INSTANCE_PRIMARY_PORT",
        default_value_t = 3306
    )]
    primary_port: u16,
    /// Largest replication lag at which a replica is still ready.
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_MAX_REPLICA_LAG", value_parser = humantime::parse_duration, default_value = "30s")]
    max_replica_lag: Duration,
    /// Time between passes (labels read, server observed, one action taken).
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_INTERVAL", value_parser = humantime::parse_duration, default_value = "2s")]
    interval: Duration,
    /// Time mysqld has to answer a health check.
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_HEALTH_TIMEOUT", value_parser = humantime::parse_duration, default_value = "2s")]
    health_timeout: Duration,
    /// File naming a logical backup to load once this pod is primary (left by `instance
    /// restore`); needs --repo.
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_PENDING_LOGICAL_RESTORE")]
    pending_logical_restore: Option<PathBuf>,
    /// File with the GTID position of a physical restore (left by `instance restore
    /// --gtid-file`): adopted once, before replication or writes, then removed.
    #[arg(long, env = "MYSQL_BACKUP_INSTANCE_GTID_FILE")]
    gtid_file: Option<PathBuf>,
    /// Repository of the pending backup: a path, file:///path or s3://bucket/prefix.
    #[arg(long, env = "MYSQL_BACKUP_REPO")]
    repo: Option<String>,
    #[command(flatten)]
    s3: S3Args,
    #[command(flatten)]
    key: KeyArgs,
    /// Chunks read and decoded in parallel while loading (default: number of CPUs + 2).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    workers: Option<usize>,
    /// SQL client for the load instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    tool: Option<String>,
}

pub(crate) async fn run(command: InstanceCommand) -> anyhow::Result<()> {
    match command {
        InstanceCommand::Init(a) => cmd_init(a),
        InstanceCommand::Restore(a) => cmd_restore(a).await,
        InstanceCommand::Agent(a) => cmd_agent(a).await,
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
                parallel: workers(a.workers) + 2,
                tool: a.tool.clone(),
            })
        }
        None => None,
    };
    let config = AgentConfig {
        socket: absolute(&a.socket)?,
        listen: a.listen,
        labels_file: absolute(&a.labels_file)?,
        credentials_dir: absolute(&a.credentials_dir)?,
        source: Source {
            host: a.primary_host,
            port: a.primary_port,
        },
        max_replica_lag: a.max_replica_lag,
        interval: a.interval,
        health_timeout: a.health_timeout,
        pending,
        gtid_file: a.gtid_file.as_deref().map(absolute).transpose()?,
    };
    agent::run(config, shutdown_signal()).await?;
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
    let (repo, backup, key) = a.backup.open().await?;
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "restore", a.progress.display());
    let id = backup.manifest.id.clone();
    let work = async {
        match backup.manifest.method {
            Method::Physical => bootstrap::restore_physical(
                &repo,
                &backup,
                key.as_ref(),
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
                    &pending,
                    a.backup.parallel(),
                    progress,
                )
                .await?;
                if marker.exists() {
                    // A GTID file beside an interrupted physical attempt is stale too.
                    bootstrap::remove_restored_gtid(&gtid_file)?;
                    std::fs::remove_file(&marker).map_err(|source| {
                        bootstrap::BootstrapError::CompleteRestore {
                            path: datadir.display().to_string(),
                            source,
                        }
                    })?;
                }
                Ok(None)
            }
        }
    };
    let result = tokio::select! {
        r = work => r,
        _ = shutdown_signal() => Err(Error::Interrupted.into()),
    };
    reporter.finish().await;
    match result? {
        Some(bootstrap::PhysicalBootstrap { outcome, gtid }) => {
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
