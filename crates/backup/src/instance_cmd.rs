//! The binary's `instance` subcommands (what runs inside each MySQL pod): argument parsing
//! and output over `mysql_backup::instance`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use mysql_backup::format::{Flavor, Method};
use mysql_backup::instance::bootstrap::{self, DatadirState};
use mysql_backup::instance::init::{self, InitRequest};
use mysql_backup::progress::{Progress, Reporter};
use mysql_backup::Error;
use serde_json::json;

use super::{absolute, print_json, shutdown_signal, BackupSelector, ProgressArgs};

#[derive(Subcommand)]
pub(crate) enum InstanceCommand {
    /// Write the per-pod server configuration (an init container, before mysqld starts).
    Init(InitArgs),
    /// Bootstrap an empty datadir from a backup (an init container after `init`); a datadir
    /// that already holds a server is left alone.
    Restore(RestoreArgs),
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
    /// Tool for --prepare instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    tool: Option<String>,
    /// JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    progress: ProgressArgs,
}

pub(crate) async fn run(command: InstanceCommand) -> anyhow::Result<()> {
    match command {
        InstanceCommand::Init(a) => cmd_init(a),
        InstanceCommand::Restore(a) => cmd_restore(a).await,
    }
}

async fn cmd_restore(a: RestoreArgs) -> anyhow::Result<()> {
    let datadir = absolute(&a.datadir)?;
    let pending = match &a.pending_file {
        Some(p) => absolute(p)?,
        None => bootstrap::default_pending_file(&datadir),
    };
    // Decided before the repository is contacted: a routine restart of the pod must not
    // depend on the repository being reachable.
    match bootstrap::inspect(&datadir, &pending)? {
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
                entries: entries.join(", "),
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
        Some(outcome) => {
            tracing::info!(backup_id = %id, datadir = %datadir.display(), files = outcome.files, "datadir restored");
            if a.json {
                print_json(&json!({
                    "action": "restored",
                    "backupId": id,
                    "datadir": datadir,
                    "plaintextBytes": outcome.plaintext_bytes,
                    "files": outcome.files,
                }));
            } else {
                println!(
                    "restored backup {id} into {}: {} files, prepared",
                    datadir.display(),
                    outcome.files.unwrap_or(0)
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
