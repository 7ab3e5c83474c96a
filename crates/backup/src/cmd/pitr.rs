//! The binary's point-in-time commands: `archive` (stream binary logs into the repository
//! until stopped), `replay` (apply the archive after a backup to a running server), and the
//! `--until`/`--until-gtid` options `restore` shares with `replay`.

use bulwark_cli::args::{
    create_repo, open_repo, parse_size, shutdown_signal, BackupSelector, ConnArgs, KeyArgs,
    RepoArgs, UntilArgs,
};
use bulwark_cli::output::{human_bytes, print_json};
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::format;
use bulwark_engine::repo::{CompleteBackup, Repository};
use bulwark_engine::writer::WriteOptions;
use bulwark_engine::Error as EngineError;
use bulwark_pitr::archive::archiver::{self, ArchiveOptions};
use bulwark_pitr::archive::compact::CompactRules;
pub use bulwark_pitr::archive::recover::ReplayInto;
use bulwark_pitr::archive::replay::{self, ReplayOutcome};
use bulwark_pitr::archive::status::{self, ArchiverRecord};
use bulwark_pitr::archive::{history, manifest, recover, segments, window, RecoveryTarget, Window};
use bulwark_pitr::binlog::GtidPos;
use bulwark_pitr::Error;
use clap::Args;

#[derive(Args)]
pub struct ArchiveArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub key: KeyArgs,
    /// The archive to write: one per source server or cluster in a repository; backups name
    /// theirs with `backup --binlog-archive`.
    #[arg(long, default_value = manifest::DEFAULT_ARCHIVE, value_parser = bulwark_cli::args::parse_archive_name, env = "MYSQL_BACKUP_ARCHIVE")]
    pub archive: String,
    /// Commit a segment at least this often while transactions arrive.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, env = "MYSQL_BACKUP_ARCHIVE_FLUSH_EVERY")]
    pub flush_every: std::time::Duration,
    /// ... and as soon as it holds this much binlog.
    #[arg(long, default_value = "16MiB", value_parser = parse_size, env = "MYSQL_BACKUP_ARCHIVE_SEGMENT_SIZE")]
    pub segment_size: u64,
    /// Server id to register with; must differ from every server's and replica's.
    #[arg(
        long,
        default_value_t = 4_000_000_001,
        env = "MYSQL_BACKUP_ARCHIVE_SERVER_ID"
    )]
    pub server_id: u32,
    /// Where to start when the repository holds no archive yet (default: the newest
    /// backup's consistent point, else the server's current position).
    #[arg(long, env = "MYSQL_BACKUP_ARCHIVE_START_GTID")]
    pub start_gtid: Option<String>,
    /// Serve the archiver's report (`GET /status`, one JSON line) and `/healthz` here, e.g.
    /// 0.0.0.0:9083.
    #[arg(long, env = "MYSQL_BACKUP_ARCHIVE_STATUS_LISTEN")]
    pub status_listen: Option<std::net::SocketAddr>,
    /// Delete the archive's segments that no backup in the repository can use (before the
    /// oldest backup's position, or after a gap and before the next backup), as retention
    /// removes backups.
    #[arg(long, env = "MYSQL_BACKUP_ARCHIVE_PRUNE_UNNEEDED")]
    pub prune_unneeded: bool,
    /// Merge the small segments received within each span of this length (aligned to whole
    /// hours for 1h) once it is over, into segments of up to twice --segment-size; `0s` never
    /// merges. Keeps a quiet server's archive at tens of objects a day.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration, env = "MYSQL_BACKUP_ARCHIVE_COMPACT_SPAN")]
    pub compact_span: std::time::Duration,
    /// How long the segments a compaction replaced stay readable (for replays that listed
    /// them) before they are deleted.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration, env = "MYSQL_BACKUP_ARCHIVE_COMPACT_GRACE")]
    pub compact_grace: std::time::Duration,
    /// When the server lacks archived transactions (a new primary after a failover that lost
    /// the old one's last ones), archive its history as a new timeline from the newest
    /// archived position it has; without it the archiver stops with the reason. The lost
    /// transactions stay archived on their own branch: a restore to one of their GTIDs
    /// recovers them.
    #[arg(long, env = "MYSQL_BACKUP_ARCHIVE_BRANCH_ON_DIVERGENCE")]
    pub branch_on_divergence: bool,
    /// Heartbeat the server sends while idle; three missed ones mean reconnect.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub heartbeat: std::time::Duration,
}

/// The compaction rules the options give (`None` for a zero span).
fn compact_rules(
    span: std::time::Duration,
    grace: std::time::Duration,
    segment_size: u64,
) -> Result<Option<CompactRules>, EngineError> {
    if span.is_zero() {
        return Ok(None);
    }
    let whole = |d: std::time::Duration, what: &str| {
        chrono::Duration::from_std(d)
            .ok()
            .filter(|d| d.num_seconds() >= 1 && d.subsec_nanos() == 0)
            .ok_or_else(|| {
                EngineError::InvalidArgument(format!("{what} must be whole seconds, at least 1s"))
            })
    };
    Ok(Some(CompactRules {
        span: whole(span, "--compact-span")?,
        grace: whole(grace, "--compact-grace")?,
        max_bytes: segment_size.saturating_mul(2),
    }))
}

#[derive(Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub backup: BackupSelector,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub until: UntilArgs,
    #[arg(long, value_enum, default_value_t = ReplayGtids::Archived, env = "MYSQL_BACKUP_REPLAY_GTIDS")]
    pub replay_gtids: ReplayGtids,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Under which GTIDs the server logs the replayed transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayGtids {
    /// The archived ones: the server continues the source's history (it holds the backup's
    /// data and no transactions of its own).
    Archived,
    /// The server's own: its server_id and domain, numbered after its last. For a server whose
    /// binary log has a history of its own (a logical load it logged): with gtid_strict_mode
    /// it refuses archived numbers below its own.
    Server,
}

impl ReplayGtids {
    /// Where a replay into the running server at `conn` goes; `restored` when the backup was
    /// just loaded into it.
    pub fn into_server(
        self,
        conn: bulwark_engine::source::Connection,
        restored: bool,
    ) -> ReplayInto {
        match (self, restored) {
            (ReplayGtids::Archived, false) => ReplayInto::Server(conn),
            (ReplayGtids::Archived, true) => ReplayInto::RestoredServer(conn),
            (ReplayGtids::Server, _) => ReplayInto::ServerOwnHistory(conn),
        }
    }
}

pub async fn cmd_archive(a: ArchiveArgs) -> anyhow::Result<()> {
    let key = a.key.load()?;
    if !a.conn.given() {
        return Err(EngineError::InvalidArgument(
            "archive needs the server: --mysql-socket or --mysql-host".into(),
        )
        .into());
    }
    let conn = a.conn.connection()?;
    let start = a
        .start_gtid
        .as_deref()
        .map(GtidPos::parse)
        .transpose()
        .map_err(EngineError::InvalidArgument)?;
    // The archiver's housekeeping reads backups' manifests under the key it writes with.
    let repo = create_repo(&a.repo, a.segment_size)
        .await?
        .under_key(key.clone());
    let opts = ArchiveOptions {
        archive: a.archive,
        prune_unneeded: a.prune_unneeded,
        branch_on_divergence: a.branch_on_divergence,
        flush_every: a.flush_every,
        segment_bytes: a.segment_size,
        server_id: a.server_id,
        start,
        heartbeat: a.heartbeat,
        compact: compact_rules(a.compact_span, a.compact_grace, a.segment_size)?,
        write: WriteOptions {
            chunk_size: format::DEFAULT_CHUNK_SIZE,
            level: 1,
            workers: 1,
            segment_size: format::DEFAULT_SEGMENT_SIZE,
        },
    };
    let record = ArchiverRecord::new(&opts.archive);
    if let Some(addr) = a.status_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| EngineError::LocalIo {
                action: "listen on",
                path: addr.to_string(),
                source,
            })?;
        tokio::spawn(status::serve(
            listener,
            record.clone(),
            std::future::pending(),
        ));
    }
    let report =
        archiver::run(&repo, &conn, key.as_ref(), &opts, record, shutdown_signal()).await?;
    println!(
        "archived {} transactions in {} segments; the archive reaches {}",
        report.transactions, report.segments, report.through
    );
    Ok(())
}

pub async fn cmd_replay(a: ReplayArgs) -> anyhow::Result<()> {
    let target = a.until.target()?.unwrap_or(RecoveryTarget::Latest);
    if !a.conn.given() {
        return Err(EngineError::InvalidArgument(
            "replay needs the server to apply to: --mysql-socket or --mysql-host".into(),
        )
        .into());
    }
    let conn = a.conn.connection()?;
    let (repo, backup, key) = a.backup.open().await?;
    let into = a.replay_gtids.into_server(conn, false);
    let hold = repo.hold_for_restore(&backup.manifest.id).await?;
    let outcome = replay(&repo, &backup, key.as_ref(), &target, into).await;
    hold.release().await;
    let outcome = outcome?;
    print_outcome(&outcome, a.json);
    Ok(())
}

/// Replays the archive after `backup` up to `target`; SIGINT/SIGTERM stop it.
pub async fn replay(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    target: &RecoveryTarget,
    into: ReplayInto,
) -> Result<ReplayOutcome, Error> {
    tokio::select! {
        r = recover::replay_after(repo, backup, key, target, &into) => r,
        _ = shutdown_signal() => Err(EngineError::Interrupted.into()),
    }
}

pub fn print_outcome(o: &ReplayOutcome, json: bool) {
    if json {
        print_json(&serde_json::to_value(o).expect("outcome serializes"));
    } else {
        println!(
            "replayed {} transactions ({}) from {} archived segments after backup {}{}; the data is at GTID position {}{}",
            o.transactions,
            human_bytes(o.bytes),
            o.segments,
            o.backup_id,
            if o.already_held > 0 {
                format!(", passing over {} the server already held", o.already_held)
            } else {
                String::new()
            },
            o.reached,
            o.last_commit
                .map(|t| format!(", last commit stamped {}", t.format("%Y-%m-%dT%H:%M:%SZ")))
                .unwrap_or_default()
        );
        if let Some(resumed) = &o.resumes_past_gap {
            println!(
                "the archive has a gap after {}: it goes on from {resumed}, which no history from backup {} reaches; restore a backup taken after the gap for later transactions",
                o.reached, o.backup_id
            );
        }
    }
}

/// The archives as `list` shows them: totals and gaps per archive, and each backup's
/// recovery window in its own archive.
pub struct ArchiveView {
    /// By archive name.
    pub json: serde_json::Value,
    /// Per backup id: its window, when its archive continues it.
    pub windows: std::collections::BTreeMap<String, Window>,
    /// Per backup id: the timeline its window follows to its end (the branch `latest` takes).
    pub timelines: std::collections::BTreeMap<String, u32>,
    pub lines: Vec<String>,
}

pub async fn archive_view(
    repo: &Repository,
    backups: &[CompleteBackup],
) -> Result<ArchiveView, Error> {
    let named: Vec<&str> = backups
        .iter()
        .map(|b| manifest::archive_of(&b.manifest))
        .collect();
    let all = segments::list_all(repo.store(), repo.key()).await?;
    let mut windows = std::collections::BTreeMap::new();
    let mut timelines_of = std::collections::BTreeMap::new();
    for (b, archive) in backups.iter().zip(&named) {
        let Some(listing) = all.get(*archive) else {
            continue;
        };
        if let Ok((w, chain)) = replay::window_of(b, &listing.segments) {
            if !chain.is_empty() {
                windows.insert(b.manifest.id.clone(), w.covered(listing.coverage.as_ref()));
                if let Some(&last) = chain.last() {
                    timelines_of.insert(b.manifest.id.clone(), listing.segments[last].timeline);
                }
            }
        }
    }
    let mut json = serde_json::Map::new();
    let mut lines = Vec::new();
    for (name, listing) in &all {
        let segments = &listing.segments;
        let gaps = window::gaps(segments);
        let timelines = history::timelines(segments);
        let newest = segments
            .iter()
            .max_by_key(|s| (s.received_at, s.id.clone()));
        let transactions: u64 = segments.iter().map(|s| s.transactions).sum();
        let stored: u64 = segments.iter().map(|s| s.stored_bytes).sum();
        json.insert(name.clone(), serde_json::json!({
            "segments": segments.len(),
            "transactions": transactions,
            "storedBytes": stored,
            "through": newest.map(|s| s.through.to_string()),
            "lastCommit": newest.map(|s| s.last_commit),
            "lastReceived": newest.map(|s| s.received_at),
            "superseded": listing.superseded.len(),
            "incomplete": listing.incomplete.iter().map(|i| serde_json::json!({"id": i.id, "reason": i.reason, "damaged": i.damaged})).collect::<Vec<_>>(),
            "timelines": timelines.iter().map(|t| serde_json::json!({
                "timeline": t.timeline,
                "beganAt": t.began_at.to_string(),
                "parent": t.parent,
                "leftBehind": t.left_behind.as_ref().map(|(from, end)| serde_json::json!({
                    "timeline": from,
                    "through": end.to_string(),
                })),
                "through": t.through.to_string(),
                "segments": t.segments,
                "serverIds": t.server_ids,
                "firstReceived": t.first_received,
                "lastReceived": t.last_received,
            })).collect::<Vec<_>>(),
            "gaps": gaps.iter().map(|g| serde_json::json!({
                "after": g.after.as_ref().map(ToString::to_string),
                "resumedAt": g.resumed_at.to_string(),
                "resumedReceived": g.resumed_received,
            })).collect::<Vec<_>>(),
        }));
        if let Some(n) = newest {
            lines.push(format!(
                "binlog archive {name}: {} segments, {} transactions, {} stored; reaches {} (last commit {}, received {})",
                segments.len(),
                transactions,
                human_bytes(stored),
                n.through,
                n.last_commit.format("%Y-%m-%d %H:%M:%S"),
                n.received_at.format("%Y-%m-%d %H:%M:%S"),
            ));
        }
        if timelines.len() > 1 {
            for t in &timelines {
                lines.push(format!(
                    "binlog archive {name} timeline {}: {} .. {}{}, {} segments from server {}",
                    t.timeline,
                    t.began_at,
                    t.through,
                    match (t.parent, &t.left_behind) {
                        (_, Some((other, end))) => format!(
                            " (branched where timeline {other} goes on to {end}: \
                             transactions this history lacks)"
                        ),
                        (Some(p), None) => format!(" (continues timeline {p})"),
                        _ => String::new(),
                    },
                    t.segments,
                    t.server_ids
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                ));
            }
        }
        for g in &gaps {
            lines.push(format!(
                "binlog archive {name} GAP: continuous up to {}, resumed at {} (received {}); windows restart at the next backup",
                g.after.as_ref().map_or("(nothing)".into(), ToString::to_string),
                g.resumed_at,
                g.resumed_received.format("%Y-%m-%d %H:%M:%S"),
            ));
        }
        if !listing.incomplete.is_empty() {
            lines.push(format!(
                "binlog archive {name}: {} segment(s) without a valid manifest (never replayed)",
                listing.incomplete.len()
            ));
        }
    }
    Ok(ArchiveView {
        json: serde_json::Value::Object(json),
        windows,
        timelines: timelines_of,
        lines,
    })
}

/// A backup's window for JSON.
pub fn window_json(w: &Window) -> serde_json::Value {
    serde_json::json!({
        "from": w.from.to_string(),
        "fromTime": w.from_time,
        "to": w.to.to_string(),
        "toTime": w.to_time,
    })
}

/// `verify --archive NAME`: every segment read back and checked against its manifest; exits 1
/// when a segment or a manifest is wrong (a gap is reported, not an error).
pub async fn verify_archive(
    repo_args: &RepoArgs,
    key_args: &KeyArgs,
    archive: &str,
    json: bool,
) -> anyhow::Result<()> {
    let key = key_args.load()?;
    let repo = open_repo(repo_args, 0)
        .await?
        .under_key(key)
        .check_key()
        .await?;
    let verdict =
        bulwark_pitr::archive::audit::verify_archive(repo.store(), repo.key(), archive).await?;
    let bad: Vec<&bulwark_pitr::archive::audit::SegmentVerdict> = verdict
        .segments
        .iter()
        .filter(|s| s.problem.is_some())
        .collect();
    if json {
        print_json(&serde_json::json!({
            "archive": archive,
            "ok": !verdict.failed(),
            "segments": verdict.segments.len(),
            "problems": bad.iter().map(|s| serde_json::json!({"id": s.id, "problem": s.problem})).collect::<Vec<_>>(),
            "unusable": verdict.unusable.iter().map(|(id, why)| serde_json::json!({"id": id, "reason": why})).collect::<Vec<_>>(),
            "gaps": verdict.gaps.iter().map(|g| serde_json::json!({
                "after": g.after.as_ref().map(ToString::to_string),
                "resumedAt": g.resumed_at.to_string(),
            })).collect::<Vec<_>>(),
        }));
    } else {
        for s in &bad {
            println!(
                "segment {}: {}",
                s.id,
                s.problem.as_deref().unwrap_or_default()
            );
        }
        for (id, why) in &verdict.unusable {
            println!("segment {id}: unusable: {why}");
        }
        for g in &verdict.gaps {
            println!(
                "gap: continuous up to {}, resumed at {}",
                g.after
                    .as_ref()
                    .map_or("(nothing)".into(), ToString::to_string),
                g.resumed_at
            );
        }
        println!(
            "binlog archive {archive}: {} segments read back, {} wrong, {} unusable, {} gaps",
            verdict.segments.len(),
            bad.len(),
            verdict.unusable.len(),
            verdict.gaps.len()
        );
    }
    if verdict.failed() {
        anyhow::bail!(
            "binlog archive {archive} has {} segment(s) that do not hold what their manifests say and {} without a usable manifest",
            bad.len(),
            verdict.unusable.len()
        );
    }
    Ok(())
}
