//! The `mysql-backup` command line: argument parsing, output formatting and exit codes over the
//! engine (`bulwark-engine`) and point-in-time recovery (`bulwark-pitr`).

use bulwark_cli::output::{init_logging, LogFormat};
use clap::{Parser, Subcommand};

mod cmd;
use cmd::{backup::*, drill::*, list::*, pitr, prune::*, restore::*};

#[derive(Parser)]
#[command(
    name = "mysql-backup",
    version,
    about = "Streaming, compressed, encrypted, verifiable MySQL/MariaDB backups to a filesystem or S3"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "MYSQL_BACKUP_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// Log filter (tracing syntax), e.g. `info` or `bulwark_engine=debug,bulwark_pitr=debug`.
    #[arg(long, global = true, default_value = "info", env = "MYSQL_BACKUP_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take a backup and commit it to the repository.
    Backup(BackupArgs),
    /// List backups (complete ones; with --all also incomplete and damaged ones).
    List(ListArgs),
    /// Re-read a backup and check every digest (and, with the key, decrypt and decompress).
    Verify(VerifyArgs),
    /// Restore a physical backup into a directory or a logical one into a server.
    Restore(RestoreArgs),
    /// Write a backup's plaintext (xbstream or SQL) to stdout, verifying as it goes.
    Cat(CatArgs),
    /// Prove a backup restorable: restore it into a scratch server (optionally to a point in
    /// time), check every table, run --assert queries, and remove it all.
    Drill(DrillArgs),
    /// Apply retention rules and remove stale incomplete backups.
    Prune(PruneArgs),
    /// Rotate the master key: re-wrap the data keys of backups encrypted with the old key
    /// (manifests only; the data is not rewritten).
    Rewrap(RewrapArgs),
    /// Delete one backup (manifest first, then its data); succeeds when it is already gone.
    Delete(DeleteArgs),
    /// Stream the server's binary logs into the repository until stopped (point-in-time
    /// recovery); resumes where the archive ends.
    Archive(pitr::ArchiveArgs),
    /// Apply the binlog archive after a backup to a running server (after restoring that
    /// backup), up to --until or --until-gtid (default: latest).
    Replay(pitr::ReplayArgs),
}

fn main() -> std::process::ExitCode {
    // Chunk buffers of a few MiB are allocated and freed continuously. Keeping them on one heap
    // arena (instead of a fresh mmap each, which the kernel must fault in and zero) removed
    // about a third of a restore's wall time in bench/run.sh; a single arena keeps peak RSS
    // at the pipeline's live set (about 100 MiB at the default chunk size) rather than one
    // such set per arena.
    // SAFETY: called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Backup(a) => cmd_backup(a).await,
            Command::List(a) => cmd_list(a).await,
            Command::Verify(a) => cmd_verify(a).await,
            Command::Restore(a) => cmd_restore(a).await,
            Command::Cat(a) => cmd_cat(a).await,
            Command::Drill(a) => cmd_drill(a).await,
            Command::Prune(a) => cmd_prune(a).await,
            Command::Rewrap(a) => cmd_rewrap(a).await,
            Command::Delete(a) => cmd_delete(a).await,
            Command::Archive(a) => pitr::cmd_archive(a).await,
            Command::Replay(a) => pitr::cmd_replay(a).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", bulwark_cli::output::failure_line(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command};
    use bulwark_contract::command::{self, Method, Repository};
    use clap::Parser;

    fn repository() -> Repository {
        Repository {
            url: "s3://bucket/prefix".into(),
            s3_endpoint: Some("http://minio:9000".into()),
            s3_region: Some("eu-1".into()),
            s3_path_style: true,
            s3_credentials_dir: Some("/etc/bulwark/s3".into()),
            encryption_key_file: Some("/etc/bulwark/backup-key/master.key".into()),
        }
    }

    fn parse(argv: command::Argv) -> Cli {
        assert_eq!(argv.program, "mysql-backup");
        Cli::try_parse_from(argv.to_vec()).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
    }

    /// What the operator's archiver runs is what this binary parses.
    #[test]
    fn the_operators_archive_command_parses() {
        let built = command::Archive {
            repository: repository(),
            archive: "ledger".into(),
            host: "ledger-primary".into(),
            port: 3306,
            user: "bulwark_backup".into(),
            password_file: "/etc/bulwark/backup-credentials/password".into(),
            flush_every_seconds: 5,
            server_id: command::ARCHIVER_SERVER_ID,
            status_listen: "0.0.0.0:9083".into(),
            prune_unneeded: true,
            branch_on_divergence: true,
        };
        let cli = parse(built.argv());
        let Command::Archive(a) = cli.command else {
            panic!("not archive")
        };
        assert_eq!(a.repo.repo, "s3://bucket/prefix");
        assert_eq!(
            a.key.encryption_key_file.unwrap().to_str(),
            Some("/etc/bulwark/backup-key/master.key")
        );
        assert_eq!(a.conn.mysql_host.as_deref(), Some("ledger-primary"));
        assert_eq!(a.conn.mysql_port, Some(3306));
        assert_eq!(a.conn.mysql_user, "bulwark_backup");
        assert_eq!(
            a.conn
                .mysql_password_file
                .as_deref()
                .and_then(|p| p.to_str()),
            Some("/etc/bulwark/backup-credentials/password")
        );
        assert_eq!(a.archive, "ledger");
        assert_eq!(a.flush_every, std::time::Duration::from_secs(5));
        assert_eq!(a.server_id, command::ARCHIVER_SERVER_ID);
        assert_eq!(a.status_listen, Some("0.0.0.0:9083".parse().unwrap()));
        assert!(a.prune_unneeded);
        assert!(a.branch_on_divergence);
    }

    /// What the operator's backup Job runs is what this binary parses.
    #[test]
    fn the_operators_backup_command_parses() {
        for (method, datadir) in [
            (Method::Physical, Some("/var/lib/mysql")),
            (Method::Logical, None),
        ] {
            let built = command::Backup {
                repository: repository(),
                method,
                host: "db-1.db-headless".into(),
                port: 3306,
                user: "bulwark_backup".into(),
                password_file: "/etc/bulwark/backup-credentials/password".into(),
                datadir: datadir.map(str::to_owned),
                result_file: "/dev/termination-log".into(),
                progress_interval_seconds: 5,
                backup_id: "20261122T031633Z-4a0760".into(),
                binlog_archive: "db".into(),
            };
            let cli = parse(built.argv());
            assert!(matches!(cli.log_format, super::LogFormat::Json));
            let Command::Backup(a) = cli.command else {
                panic!("not a backup")
            };
            assert_eq!(a.binlog_archive.as_deref(), Some("db"));
            assert_eq!(a.repo.repo, "s3://bucket/prefix");
            assert_eq!(a.repo.s3.s3_endpoint.as_deref(), Some("http://minio:9000"));
            assert_eq!(a.repo.s3.s3_region.as_deref(), Some("eu-1"));
            assert!(a.repo.s3.s3_path_style);
            assert_eq!(
                a.repo
                    .s3
                    .s3_credentials_dir
                    .as_deref()
                    .and_then(|p| p.to_str()),
                Some("/etc/bulwark/s3")
            );
            assert_eq!(
                a.key.encryption_key_file.unwrap().to_str(),
                Some("/etc/bulwark/backup-key/master.key")
            );
            assert_eq!(a.method.to_string(), method.as_str());
            assert_eq!(a.conn.mysql_host.as_deref(), Some("db-1.db-headless"));
            assert_eq!(a.conn.mysql_port, Some(3306));
            assert_eq!(a.conn.mysql_user, "bulwark_backup");
            assert_eq!(
                a.conn.mysql_password_file.unwrap().to_str(),
                Some("/etc/bulwark/backup-credentials/password")
            );
            assert_eq!(a.datadir.as_deref(), datadir);
            assert_eq!(
                a.result_file.unwrap().to_str(),
                Some("/dev/termination-log")
            );
            assert!(matches!(
                a.progress.progress,
                bulwark_cli::args::ProgressMode::Log
            ));
            assert_eq!(a.progress.progress_interval.as_secs(), 5);
            assert_eq!(a.backup_id.as_deref(), Some("20261122T031633Z-4a0760"));
        }
    }

    #[test]
    fn the_operators_delete_command_parses() {
        let built = command::Delete {
            repository: Repository {
                url: "/backup-storage".into(),
                ..Repository::default()
            },
            backup_id: "20261122T031633Z-4a0760".into(),
        };
        let Command::Delete(a) = parse(built.argv()).command else {
            panic!("not a delete")
        };
        assert_eq!(a.repo.repo, "/backup-storage");
        assert_eq!(a.id, "20261122T031633Z-4a0760");
        assert!(!a.repo.s3.s3_path_style);
    }

    #[test]
    fn the_operators_drill_command_parses() {
        for point_in_time in [false, true] {
            let built = command::Drill {
                repository: repository(),
                backup_id: "20261122T031633Z-4a0760".into(),
                scratch_dir: "/scratch".into(),
                assertions: vec![
                    "SELECT COUNT(*) > 0 FROM shop.orders".into(),
                    "--not a flag".into(),
                ],
                point_in_time,
                result_file: "/dev/termination-log".into(),
                progress_interval_seconds: 5,
            };
            let cli = parse(built.argv());
            assert!(matches!(cli.log_format, super::LogFormat::Json));
            let Command::Drill(a) = cli.command else {
                panic!("not a drill")
            };
            assert_eq!(a.backup.repo.repo, "s3://bucket/prefix");
            assert_eq!(a.backup.id, "20261122T031633Z-4a0760");
            assert_eq!(
                a.scratch_dir.as_deref().and_then(|p| p.to_str()),
                Some("/scratch")
            );
            assert_eq!(a.assertions, built.assertions);
            assert_eq!(a.until.until.as_deref(), point_in_time.then_some("latest"));
            assert_eq!(
                a.result_file.as_deref().and_then(|p| p.to_str()),
                Some("/dev/termination-log")
            );
            assert!(matches!(
                a.progress.progress,
                bulwark_cli::args::ProgressMode::Log
            ));
        }
    }
}
