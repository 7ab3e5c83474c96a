//! The binary's `instance` subcommands (what runs inside each MySQL pod): argument parsing
//! and output over `mysql_backup::instance`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use mysql_backup::format::Flavor;
use mysql_backup::instance::init::{self, InitRequest};

#[derive(Subcommand)]
pub(crate) enum InstanceCommand {
    /// Write the per-pod server configuration (an init container, before mysqld starts).
    Init(InitArgs),
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

pub(crate) async fn run(command: InstanceCommand) -> anyhow::Result<()> {
    match command {
        InstanceCommand::Init(a) => cmd_init(a),
    }
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
