//! `bulwark-agent restore`: a backup into an empty data volume before mysqld first starts, or,
//! to the archive's latest point on a member other than the first, a copy of the first member.

use super::*;

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

pub(super) async fn cmd_restore(a: RestoreArgs) -> anyhow::Result<()> {
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
