//! `verify`, `restore` and `cat`: reading a backup back.

use std::path::PathBuf;

use bulwark_cli::args::{
    absolute, parse_archive_name, shutdown_signal, BackupSelector, ConnArgs, KeyArgs, ProgressArgs,
    RepoArgs,
};
use bulwark_cli::output::{human_bytes, peak_child_rss_bytes, peak_rss_bytes, print_json};
use bulwark_cli::progress::Reporter;
use bulwark_engine::progress::Progress;
use bulwark_engine::restore::{self, Destination};
use bulwark_engine::Error;
use clap::Args;
use serde_json::json;

use super::pitr;

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Backup id or `latest`.
    #[arg(required_unless_present = "archive", conflicts_with = "archive")]
    pub id: Option<String>,
    /// Verify this binlog archive instead, without a server: every segment read back in full
    /// (digests; with the key, its manifest's MAC and the chunks' authentication), its binary
    /// log parsed event by event, and what it holds compared with its manifest.
    #[arg(long, value_parser = parse_archive_name)]
    pub archive: Option<String>,
    /// Chunks read and decoded in parallel (default: number of CPUs + 2, fewer when the
    /// memory limit of the process's cgroup cannot hold that many chunks in flight).
    #[arg(long, env = "MYSQL_BACKUP_WORKERS")]
    pub workers: Option<usize>,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
    /// Directory to create the datadir in (physical backups).
    #[arg(long, env = "MYSQL_BACKUP_TARGET_DIR")]
    pub target_dir: Option<PathBuf>,
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Replace a non-empty --target-dir.
    #[arg(long)]
    pub force: bool,
    /// Extract only; do not run --prepare.
    #[arg(long)]
    pub skip_prepare: bool,
    /// Logical restores: load without verifying the whole backup first.
    #[arg(long)]
    pub skip_preverify: bool,
    /// Tool for --prepare or the SQL client, instead of the detected one.
    #[arg(long, env = "MYSQL_BACKUP_TOOL")]
    pub tool: Option<String>,
    #[command(flatten)]
    pub until: bulwark_cli::args::UntilArgs,
    /// With --until into a running server: under which GTIDs it logs the replayed
    /// transactions.
    #[arg(long, value_enum, default_value_t = pitr::ReplayGtids::Archived, env = "MYSQL_BACKUP_REPLAY_GTIDS")]
    pub replay_gtids: pitr::ReplayGtids,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub progress: ProgressArgs,
}

#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
}

pub async fn cmd_verify(a: VerifyArgs) -> anyhow::Result<()> {
    let VerifyArgs {
        repo,
        key,
        id,
        archive,
        workers,
        json,
        progress: progress_args,
    } = a;
    if let Some(archive) = archive {
        return pitr::verify_archive(&repo, &key, &archive, json).await;
    }
    let selector = BackupSelector {
        repo,
        key,
        id: id.expect("clap requires an id without --archive"),
        workers,
    };
    let (repo, backup, key) = selector.open_to_verify().await?;
    // Held, so that a prune meanwhile is not reported as damage.
    let hold = repo.hold_for_restore(&backup.manifest.id).await?;
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "verify", progress_args.display());
    let result = restore::verify(&repo, &backup, key.as_ref(), selector.parallel(), progress).await;
    hold.release().await;
    reporter.finish().await;
    let summary = result?;
    let full = summary.depth == bulwark_engine::reader::Depth::Full;
    if json {
        print_json(&json!({
            "id": backup.manifest.id,
            "ok": true,
            "depth": if full { "full" } else { "stored-digests" },
            "chunks": summary.chunks,
            "storedBytes": summary.stored_bytes,
            "plaintextBytes": summary.plaintext_bytes,
        }));
    } else if full {
        println!(
            "backup {} OK: {} chunks, {} stored and {} plaintext checked (digests, {}decompression, plaintext SHA-256)",
            backup.manifest.id,
            summary.chunks,
            human_bytes(summary.stored_bytes),
            human_bytes(summary.plaintext_bytes),
            if backup.manifest.encryption.is_some() { "authentication, " } else { "" }
        );
    } else {
        println!(
            "backup {} stored digests OK: {} chunks, {} checked; it is encrypted and no key was given, so it was not decrypted or decompressed",
            backup.manifest.id,
            summary.chunks,
            human_bytes(summary.stored_bytes)
        );
    }
    Ok(())
}

pub async fn cmd_restore(a: RestoreArgs) -> anyhow::Result<()> {
    let until = a.until.target()?;
    if a.replay_gtids != pitr::ReplayGtids::Archived && (until.is_none() || a.target_dir.is_some())
    {
        return Err(Error::InvalidArgument(
            "--replay-gtids applies to a replay into a running server (--until/--until-gtid with --mysql-socket/--mysql-host)".into(),
        )
        .into());
    }
    if until.is_some() && a.skip_prepare {
        return Err(Error::InvalidArgument(
            "--until/--until-gtid replay binary logs into the prepared datadir; drop --skip-prepare".into(),
        )
        .into());
    }
    let target = match (&a.target_dir, a.conn.given()) {
        (Some(dir), false) => Destination::Directory {
            path: absolute(dir)?,
            force: a.force,
            prepare: !a.skip_prepare,
        },
        (None, true) => Destination::Server {
            connection: a.conn.connection()?,
            verify_first: !a.skip_preverify,
            binlogged: false,
        },
        (Some(_), true) => {
            return Err(Error::InvalidArgument(
                "give either --target-dir or a server (--mysql-socket/--mysql-host), not both"
                    .into(),
            )
            .into())
        }
        (None, false) => {
            return Err(Error::InvalidArgument(
                "give --target-dir (physical) or --mysql-socket/--mysql-host (logical)".into(),
            )
            .into())
        }
    };
    let (repo, backup, key) = a.backup.open().await?;
    if let Some(until) = &until {
        // Refuse a target outside the window before anything is loaded.
        bulwark_pitr::archive::recover::window(&repo, &backup, until)
            .await?
            .check(until)
            .map_err(bulwark_pitr::Error::PointInTime)?;
    }
    // Held against deletion (prune, delete, retention) until the restore is done.
    let hold = repo.hold_for_restore(&backup.manifest.id).await?;
    let progress = Progress::new();
    let reporter = Reporter::start(progress.clone(), "restore", a.progress.display());
    let parallel = a.backup.parallel();
    let work = async {
        match (&until, target) {
            // Into a directory to a point in time: the replay runs on the staged datadir, and
            // the target is replaced only once it succeeded.
            (
                Some(until),
                Destination::Directory {
                    path,
                    force,
                    prepare,
                    ..
                },
            ) => {
                let dk = restore::data_key(&backup, key.as_ref())?;
                let (staged, staging) = restore::stage_restore(
                    &repo,
                    &backup,
                    dk,
                    &path,
                    force,
                    prepare,
                    a.tool.as_deref(),
                    parallel,
                    progress,
                )
                .await?;
                let into = pitr::ReplayInto::Datadir(staging.path().to_path_buf());
                let replayed = pitr::replay(&repo, &backup, key.as_ref(), until, into).await?;
                staging.commit()?;
                Ok::<_, anyhow::Error>((staged.outcome(&path), Some(replayed)))
            }
            (until, target) => {
                let outcome = restore::restore(
                    &repo,
                    &backup,
                    key.as_ref(),
                    target,
                    a.tool.as_deref(),
                    parallel,
                    progress,
                )
                .await?;
                let replayed = match until {
                    Some(until) => {
                        let into = a.replay_gtids.into_server(a.conn.connection()?, true);
                        Some(pitr::replay(&repo, &backup, key.as_ref(), until, into).await?)
                    }
                    None => {
                        record_loaded(&a, &backup).await;
                        None
                    }
                };
                Ok((outcome, replayed))
            }
        }
    };
    let result = tokio::select! {
        r = work => r,
        _ = shutdown_signal() => Err(Error::Interrupted.into()),
    };
    hold.release().await;
    reporter.finish().await;
    let (outcome, replayed) = result?;
    if a.json {
        let mut v = serde_json::to_value(&outcome)?;
        if let Some(r) = &replayed {
            v["replay"] = serde_json::to_value(r)?;
        }
        v["peakRssBytes"] = peak_rss_bytes().into();
        v["peakChildRssBytes"] = peak_child_rss_bytes().into();
        print_json(&v);
    } else {
        println!(
            "restored backup {} into {}: {}{}{}",
            outcome.backup_id,
            outcome.target,
            human_bytes(outcome.plaintext_bytes),
            outcome
                .files
                .map(|f| format!(", {f} files"))
                .unwrap_or_default(),
            if outcome.prepared { ", prepared" } else { "" }
        );
        if let Some(r) = &replayed {
            pitr::print_outcome(r, false);
        }
    }
    Ok(())
}

/// After a logical backup of MariaDB was loaded into a server: records the backup's point as
/// its replica position, so a later `replay` starts there whatever the position said before.
/// Not being able to is a warning: the load itself succeeded.
async fn record_loaded(a: &RestoreArgs, backup: &bulwark_engine::repo::CompleteBackup) {
    let m = &backup.manifest;
    let archived = a.replay_gtids == pitr::ReplayGtids::Archived;
    if !a.conn.given()
        || !archived
        || m.source.engine != bulwark_contract::Engine::MariaDb
        || m.consistent_point.gtid_set.is_none()
    {
        return;
    }
    let recorded = match a.conn.connection() {
        Ok(conn) => bulwark_pitr::archive::positions::record_restored(&conn, backup)
            .await
            .map(|_| ()),
        Err(e) => Err(bulwark_pitr::Error::Engine(e)),
    };
    if let Err(e) = recorded {
        tracing::warn!(
            error = %bulwark_pitr::error::chain(&e),
            "do not run `replay` into this server: it cannot tell what the server holds; use `restore --until`"
        );
    }
}

pub async fn cmd_cat(a: CatArgs) -> anyhow::Result<()> {
    let (repo, backup, key) = a.backup.open().await?;
    let hold = repo.hold_for_restore(&backup.manifest.id).await?;
    let streamed = restore::cat(
        &repo,
        &backup,
        key.as_ref(),
        a.backup.parallel(),
        tokio::io::stdout(),
    )
    .await;
    hold.release().await;
    streamed?;
    Ok(())
}
