//! `list`: the repository's backups, their recovery windows and the binlog archives.

use bulwark_cli::args::{open_repo, KeyArgs, RepoArgs};
use bulwark_cli::output::{human_bytes, print_json, print_table};
use bulwark_engine::report;
use clap::Args;
use serde_json::json;

use super::pitr;

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Manifests are checked under this key (each must be authentic under it); without it they are
    /// shown unchecked.
    #[command(flatten)]
    pub key: KeyArgs,
    /// Also show incomplete (no manifest) and damaged backups.
    #[arg(long)]
    pub all: bool,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub async fn cmd_list(a: ListArgs) -> anyhow::Result<()> {
    let key = a.key.load()?;
    let keyed = key.is_some();
    let repo = open_repo(&a.repo, 0).await?.under_key(key);
    let (repo, unchecked) = match repo.clone().check_key().await {
        Ok(bound) => (bound, false),
        // Listing an encrypted repository without its key: shown, unchecked.
        Err(bulwark_engine::Error::KeyRequiredByRepository { .. }) if !keyed => (repo, true),
        Err(e) => return Err(e.into()),
    };
    if unchecked {
        tracing::warn!("the repository is encrypted: manifests are shown unchecked; give --encryption-key-file to check each one is authentic");
    }
    let catalog = repo.catalog().await?;
    let archive = pitr::archive_view(&repo, &catalog.complete).await?;
    let holds: Vec<_> = bulwark_engine::holds::live(repo.store(), chrono::Utc::now())
        .await?
        .into_values()
        .flatten()
        .collect();
    if a.json {
        let complete: Vec<_> = catalog
            .complete
            .iter()
            .map(|b| {
                let mut v =
                    serde_json::to_value(report::backup_result(b, None)).expect("serializes");
                if let Some(timeline) = b.manifest.binlog_timeline {
                    // The branch of history the backup's point is on, as recorded when it
                    // ended: the one a restore continues.
                    v["binlogTimeline"] = timeline.into();
                }
                if let Some(w) = archive.windows.get(&b.manifest.id) {
                    v["recoveryWindow"] = pitr::window_json(w);
                }
                if let Some(timeline) = archive.timelines.get(&b.manifest.id) {
                    // The branch of history `latest` follows from the backup.
                    v["recoveryWindow"]["timeline"] = (*timeline).into();
                }
                v
            })
            .collect();
        let mut out = json!({
            "backups": complete,
            "archives": archive.json,
            // Whether each manifest listed was checked under a key (authentic, encrypted).
            "manifestsChecked": keyed,
            // The id every manifest must name (under a key; none before repository ids).
            "repository": repo.key().and_then(|k| k.binding()).map(|b| &b.repository),
            // What running restores, backups and deletions hold.
            "holds": holds,
        });
        if a.all {
            out["incomplete"] = catalog
                .incomplete
                .iter()
                .map(|i| {
                    json!({
                        "id": i.id,
                        "state": i.state.label(),
                        "reason": i.state.reason(),
                        "objects": i.objects.len(),
                        "bytes": i.bytes(),
                        "lastModified": i.newest(),
                    })
                })
                .collect();
        }
        print_json(&out);
        return Ok(());
    }
    let mut rows: Vec<Vec<String>> = catalog
        .complete
        .iter()
        .map(|b| {
            let m = &b.manifest;
            vec![
                m.id.clone(),
                m.finished_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                m.method.to_string(),
                format!(
                    "{} {}",
                    m.source.engine,
                    m.source.server_version.split('-').next().unwrap_or("")
                ),
                human_bytes(m.plaintext.bytes),
                human_bytes(m.stored_bytes),
                if m.encryption.is_some() {
                    "yes".into()
                } else {
                    "no".into()
                },
                "complete".into(),
                archive
                    .windows
                    .get(&m.id)
                    .map(|w| w.to_time.format("%Y-%m-%d %H:%M:%S").to_string())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    if a.all {
        for i in &catalog.incomplete {
            rows.push(vec![
                i.id.clone(),
                i.newest()
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                    .unwrap_or_default(),
                "-".into(),
                "-".into(),
                "-".into(),
                human_bytes(i.bytes()),
                "-".into(),
                match i.state.reason() {
                    Some(r) => format!("{}: {r}", i.state.label()),
                    None => format!("{} (no manifest)", i.state.label()),
                },
                "-".into(),
            ]);
        }
    }
    if rows.is_empty() {
        println!("no backups in {}", repo.store().describe());
        for line in &archive.lines {
            println!("{line}");
        }
        return Ok(());
    }
    print_table(
        &[
            "ID",
            "FINISHED (UTC)",
            "METHOD",
            "SERVER",
            "SIZE",
            "STORED",
            "ENCRYPTED",
            "STATE",
            "RECOVERABLE TO",
        ],
        &rows,
    );
    for line in &archive.lines {
        println!("{line}");
    }
    for h in &holds {
        println!("{} is held by {h}", h.backup);
    }
    if !a.all && !catalog.incomplete.is_empty() {
        eprintln!(
            "note: {} incomplete or damaged backup(s) not shown; use --all",
            catalog.incomplete.len()
        );
    }
    Ok(())
}
