//! `mysql-operator`: runs Bulwark's controllers with the metrics and health endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use bulwark_operator::context::{Config, Context};
use bulwark_operator::images::BackupImages;
use bulwark_operator::metrics::Metrics;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "mysql-operator",
    version,
    about = "Kubernetes operator for MySQL and MariaDB clusters with scheduled, verifiable backups"
)]
struct Cli {
    /// Log line format.
    #[arg(
        long,
        value_enum,
        default_value = "json",
        env = "MYSQL_OPERATOR_LOG_FORMAT",
        global = true
    )]
    log_format: LogFormat,
    /// Log filter, such as `info` or `bulwark_operator=debug,info`.
    #[arg(
        long,
        default_value = "info",
        env = "MYSQL_OPERATOR_LOG",
        global = true
    )]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the controllers until SIGTERM or Ctrl-C.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, default_value = "0.0.0.0:8080", env = "MYSQL_OPERATOR_LISTEN")]
    listen: SocketAddr,
    /// Image with mysql-backup and the backup tools (backup Jobs, init and agent containers).
    #[arg(long, default_value = concat!("ghcr.io/bulwark-dev/mysql-backup:", env!("CARGO_PKG_VERSION")), env = "MYSQL_OPERATOR_BACKUP_IMAGE")]
    backup_image: String,
    /// The engine release series whose physical backups the default backup image's tools
    /// handle, comma-separated (`<engine>-<major>.<minor>`).
    #[arg(long, default_value = bulwark_operator::images::DEFAULT_SERVES, env = "MYSQL_OPERATOR_BACKUP_IMAGE_SERVES")]
    backup_image_serves: String,
    /// Backup images for further series, comma-separated `<series>=<image>` pairs, e.g.
    /// `mariadb-11.4=ghcr.io/bulwark-dev/mysql-backup:0.1.0-mariadb-11.4`.
    #[arg(long, default_value = "", env = "MYSQL_OPERATOR_BACKUP_IMAGES")]
    backup_images: String,
    /// Namespaces to watch, comma-separated; empty: every namespace. With a list, the operator
    /// needs permissions in those namespaces only (the chart's namespaced mode).
    #[arg(long, default_value = "", env = "MYSQL_OPERATOR_NAMESPACES")]
    namespaces: String,
    /// Image of the mysqld exporter sidecar.
    #[arg(
        long,
        default_value = "docker.io/prom/mysqld-exporter:v0.17.2",
        env = "MYSQL_OPERATOR_EXPORTER_IMAGE"
    )]
    exporter_image: String,
    /// Repositories a cluster's `spec.image` may name, comma-separated (registry/path, no tag
    /// or digest), or `*` for any image.
    #[arg(
        long,
        default_value = bulwark_operator::server_images::DEFAULT_REPOSITORIES,
        env = "MYSQL_OPERATOR_SERVER_IMAGE_REPOSITORIES"
    )]
    server_image_repositories: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

fn init_logging(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).context("invalid log filter")?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal, never in a pod's log.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("signal handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("signal received; stopping");
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let backup_images = BackupImages::parse(
        &args.backup_image,
        &args.backup_image_serves,
        &args.backup_images,
    )
    .map_err(|e| anyhow::anyhow!("invalid backup image settings: {e}"))?;
    let server_images =
        bulwark_operator::server_images::ServerImages::parse(&args.server_image_repositories)
            .map_err(|e| anyhow::anyhow!("invalid server image settings: {e}"))?;
    let listener = bulwark_operator::http::bind(args.listen)
        .await
        .with_context(|| format!("failed to listen on {}", args.listen))?;
    let client = kube::Client::try_default()
        .await
        .context("failed to configure the Kubernetes client")?;
    let metrics = Arc::new(Metrics::default());
    let config = Config {
        backup_images,
        exporter_image: args.exporter_image,
        server_images,
        namespaces: args
            .namespaces
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect(),
    };
    let ctx = Context::new(client, config, metrics.clone());
    // `/readyz` fails until the controllers run and the API server has answered.
    tokio::spawn(bulwark_operator::http::serve(
        listener,
        metrics,
        ctx.readiness.clone(),
    ));
    // The controllers stop gracefully (in-flight reconciles finish), but a controller still
    // waiting for its first listing (an unreachable API server) never does: after the grace,
    // the process exits anyway rather than waiting for the kubelet's SIGKILL.
    let (signalled_tx, mut signalled) = tokio::sync::watch::channel(false);
    let controllers = bulwark_operator::run::controllers(ctx, async move {
        shutdown_signal().await;
        let _ = signalled_tx.send(true);
    });
    tokio::select! {
        _ = controllers => {}
        _ = async {
            let _ = signalled.wait_for(|s| *s).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!(grace_seconds = SHUTDOWN_GRACE.as_secs(), "controllers did not stop in time; exiting"),
    }
    Ok(())
}

/// How long the controllers have to stop after SIGTERM (a pod has 30 s by default).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_logging(cli.log_format, &cli.log) {
        eprintln!("error: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Run(a) => run(a).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
