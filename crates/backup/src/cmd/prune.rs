//! `prune`, `delete` and `rewrap`: retention, deletion and master key rotation.

use std::path::PathBuf;

use bulwark_cli::args::{open_repo, KeyArgs, RepoArgs};
use bulwark_cli::output::{print_json, print_table};
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::Error;
use bulwark_pitr::{prune, rotate};
use bulwark_retention::{self as retention, KeepPolicy};
use chrono::Utc;
use clap::Args;
use serde_json::json;

#[derive(Args)]
pub struct PruneArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Manifests are checked under this key (each must be authentic under it) and nothing
    /// an unauthentic manifest describes is deleted; required for an encrypted repository.
    #[command(flatten)]
    pub key: KeyArgs,
    /// Keep the N most recent backups.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_LAST")]
    pub keep_last: Option<u32>,
    /// Keep the newest backup of each of the last N hours.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_HOURLY")]
    pub keep_hourly: Option<u32>,
    /// Keep the newest backup of each of the last N days.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_DAILY")]
    pub keep_daily: Option<u32>,
    /// Keep the newest backup of each of the last N ISO weeks.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_WEEKLY")]
    pub keep_weekly: Option<u32>,
    /// Keep the newest backup of each of the last N months.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_MONTHLY")]
    pub keep_monthly: Option<u32>,
    /// Keep the newest backup of each of the last N years.
    #[arg(long, env = "MYSQL_BACKUP_KEEP_YEARLY")]
    pub keep_yearly: Option<u32>,
    /// Keep every backup younger than this relative to the newest (e.g. 7d, 2w, 1y6m).
    #[arg(long, env = "MYSQL_BACKUP_KEEP_WITHIN", value_parser = retention::parse_duration)]
    pub keep_within: Option<chrono::Duration>,
    /// Remove incomplete backups (no manifest) untouched for this long.
    #[arg(long, env = "MYSQL_BACKUP_ORPHAN_GRACE", value_parser = retention::parse_duration, default_value = "1d")]
    pub orphan_grace: chrono::Duration,
    /// Print the plan without deleting anything.
    #[arg(long)]
    pub dry_run: bool,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Backup id (`latest` is refused: deletion names what it deletes).
    pub id: String,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RewrapArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The current master key.
    #[arg(long, env = "MYSQL_BACKUP_ENCRYPTION_KEY_FILE")]
    pub encryption_key_file: PathBuf,
    /// The new master key.
    #[arg(long, env = "MYSQL_BACKUP_NEW_ENCRYPTION_KEY_FILE")]
    pub new_encryption_key_file: PathBuf,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub async fn cmd_prune(a: PruneArgs) -> anyhow::Result<()> {
    let policy = KeepPolicy {
        last: a.keep_last,
        hourly: a.keep_hourly,
        daily: a.keep_daily,
        weekly: a.keep_weekly,
        monthly: a.keep_monthly,
        yearly: a.keep_yearly,
        within: a.keep_within,
    };
    let repo = open_repo(&a.repo, 0)
        .await?
        .under_key(a.key.load()?)
        .check_key()
        .await?;
    let catalog = repo.catalog().await?;
    let archives = bulwark_pitr::archive::segments::list_all(repo.store(), repo.key()).await?;
    let holds = bulwark_engine::holds::live(repo.store(), Utc::now()).await?;
    let plan = prune::plan(
        &catalog,
        &archives,
        &holds,
        &policy,
        a.orphan_grace,
        Utc::now(),
    );
    if !plan.damaged.is_empty() {
        tracing::warn!("while a damaged backup is in the repository no archived binlog segment is removed: it may need them");
    }
    for d in &plan.damaged {
        tracing::warn!(backup_id = %d.id, "damaged backup left alone; inspect it and delete it by hand if it is unwanted");
    }
    let pruned = if a.dry_run {
        prune::Pruned::default()
    } else {
        let pruned = prune::execute(&repo, &catalog, &plan).await?;
        match bulwark_engine::holds::remove_expired(repo.store(), Utc::now()).await {
            Ok(0) => {}
            Ok(lapsed) => {
                tracing::info!(
                    holds = lapsed,
                    "lapsed holds removed (their holders stopped)"
                )
            }
            Err(e) => {
                tracing::warn!(error = %bulwark_engine::error::chain(&e), "failed to remove lapsed holds; the next prune tries again")
            }
        }
        pruned
    };
    let held_since = |id: &str| pruned.held.iter().find(|(h, _)| h == id).map(|(_, by)| by);
    let removed = |id: &str| pruned.removed.iter().any(|r| r == id);
    let segments_left = pruned.segments_left;
    let (decisions, stale) = (&plan.decisions, &plan.stale);
    if a.json {
        print_json(&json!({
            "dryRun": a.dry_run,
            "policy": policy,
            "keepWithin": a.keep_within.map(|d| d.num_seconds()),
            "decisions": decisions.iter().map(|d| {
                let mut v = serde_json::to_value(d).expect("a decision serializes");
                if let Some(by) = held_since(&d.id) {
                    v["keep"] = true.into();
                    v["reasons"] = json!([format!("held by {by}")]);
                }
                v
            }).collect::<Vec<_>>(),
            "incompleteRemoved": stale.iter().map(|o| o.id.clone()).filter(|id| held_since(id).is_none()).chain(plan.stale_segments.iter().map(|s| s.id.clone()).filter(|id| !segments_left || removed(id))).collect::<Vec<_>>(),
            "segmentsRemoved": plan.replaced.iter().chain(&plan.segments).map(|s| s.id.clone()).filter(|id| !segments_left || removed(id)).collect::<Vec<_>>(),
            "removed": pruned.removed,
            "heldSincePlanned": pruned.held.iter().map(|(id, by)| json!({"id": id, "heldBy": by})).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    let grace = humantime::format_duration(a.orphan_grace.to_std().unwrap_or_default());
    let removal = |id: &str, at: Option<chrono::DateTime<Utc>>, reason: String| {
        let (action, reason) = match held_since(id) {
            Some(by) => ("kept".to_owned(), format!("held by {by}")),
            None if segments_left
                && id.starts_with(bulwark_engine::format::ARCHIVE_ID_PREFIX)
                && !removed(id) =>
            {
                (
                    "kept".to_owned(),
                    "left for the next prune: something was held meanwhile".to_owned(),
                )
            }
            None if a.dry_run => ("would remove".to_owned(), reason),
            None => ("removed".to_owned(), reason),
        };
        vec![
            id.to_owned(),
            at.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default(),
            action,
            reason,
        ]
    };
    let rows: Vec<Vec<String>> = decisions
        .iter()
        .map(|d| {
            let held = held_since(&d.id).map(|by| format!("held by {by}"));
            vec![
                d.id.clone(),
                d.time.format("%Y-%m-%d %H:%M:%S").to_string(),
                if d.keep || held.is_some() {
                    "keep".into()
                } else if a.dry_run {
                    "would remove".into()
                } else {
                    "removed".into()
                },
                held.unwrap_or_else(|| d.reasons.join(", ")),
            ]
        })
        .chain(stale.iter().map(|o| {
            removal(
                &o.id,
                o.newest(),
                format!("incomplete for more than {grace}"),
            )
        }))
        .chain(plan.segments.iter().map(|s| {
            removal(
                &s.id,
                Some(s.received_at),
                format!(
                    "binlog {}..{}, needed by no retained backup",
                    s.first_gtid, s.last_gtid
                ),
            )
        }))
        .chain(plan.replaced.iter().map(|s| {
            removal(
                &s.id,
                Some(s.received_at),
                "binlog segment a compacted segment replaced".into(),
            )
        }))
        .chain(plan.stale_segments.iter().map(|s| {
            removal(
                &s.id,
                s.newest,
                format!("incomplete binlog segment for more than {grace}"),
            )
        }))
        .collect();
    if rows.is_empty() {
        println!("nothing to prune in {}", repo.store().describe());
    } else {
        print_table(&["ID", "TIME (UTC)", "ACTION", "REASONS"], &rows);
    }
    if policy.is_empty() {
        eprintln!("note: no --keep-* rule given, so every complete backup is kept");
    }
    Ok(())
}

pub async fn cmd_delete(a: DeleteArgs) -> anyhow::Result<()> {
    let repo = open_repo(&a.repo, 0).await?;
    let deleted = repo.delete(&a.id).await?;
    if deleted {
        tracing::info!(backup_id = %a.id, "backup deleted");
    }
    if a.json {
        print_json(&json!({ "id": a.id, "deleted": deleted }));
    } else if deleted {
        println!("backup {} deleted", a.id);
    } else {
        println!("backup {} already absent", a.id);
    }
    Ok(())
}

pub async fn cmd_rewrap(a: RewrapArgs) -> anyhow::Result<()> {
    let old = MasterKey::from_file(&a.encryption_key_file).map_err(Error::from)?;
    let new = MasterKey::from_file(&a.new_encryption_key_file).map_err(Error::from)?;
    let repo = open_repo(&a.repo, 0).await?;
    let outcomes = rotate::rewrap_all(&repo, &old, &new).await?;
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|(id, o)| vec![id.clone(), o.to_string()])
        .collect();
    let results: Vec<_> = outcomes
        .iter()
        .map(|(id, o)| json!({ "id": id, "result": o.to_string() }))
        .collect();
    if a.json {
        print_json(&json!({ "oldKeyId": old.id(), "newKeyId": new.id(), "backups": results }));
    } else if rows.is_empty() {
        println!("no complete backups in {}", repo.store().describe());
    } else {
        print_table(&["ID", "RESULT"], &rows);
    }
    let left = outcomes.iter().filter(|(_, o)| o.unfinished()).count();
    if left > 0 {
        anyhow::bail!(
            "{left} manifest(s) were left as they are (on another key, not authentic, or unreadable: see each one's result)"
        );
    }
    Ok(())
}
