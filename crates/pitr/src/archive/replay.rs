//! Point-in-time replay: the archived transactions after a backup's consistent point, up to a
//! target, written as one binary log and applied through `mariadb-binlog - | mariadb`, so the
//! server logs them under their original GTIDs. Selection is pure ([`Selector`], in
//! [`super::select`]); running the tools is the thin edge ([`apply`]).

use bulwark_engine::Error as EngineError;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::io::AsyncWriteExt;

use super::feed::{Fed, Feed};
use super::manifest::SegmentManifest;
pub use super::select::Selector;
use super::window::{self, RecoveryTarget, Window};
use crate::binlog::event::BINLOG_MAGIC;
use crate::binlog::{GtidPos, Rebase};
use crate::error::{Error, Result};
use crate::spool::{SpillRules, SpoolWriter, SEGMENT_MEMORY};
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::repo::CompleteBackup;
use bulwark_engine::source::{self, Connection, DefaultsFile};

/// What a replay applied.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplayOutcome {
    /// Backup whose consistent point the replay started from.
    pub backup_id: String,
    /// Segments read.
    pub segments: usize,
    /// Transactions applied.
    pub transactions: u64,
    /// Transactions passed over because the server already held them (an earlier or
    /// interrupted replay applied them).
    pub already_held: u64,
    /// Binlog bytes applied.
    pub bytes: u64,
    /// GTID position after the replay.
    pub reached: String,
    /// Commit stamp of the last transaction applied.
    pub last_commit: Option<DateTime<Utc>>,
    /// For `latest`: where the archive goes on after a gap this backup's history cannot cross
    /// (transactions archived later that this restore does not hold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumes_past_gap: Option<String>,
}

/// Why a replay failed, when it did: the cause, not its echoes. A damaged segment stops the
/// feed; a client that fails (a statement the server refuses) closes its input, so the decoder
/// dies of SIGPIPE and the feed of a broken pipe after it; a decoder that fails leaves the
/// client a cut stream.
fn cause(
    fed: Result<()>,
    decoder: (&Path, &std::process::Output),
    client: (&Path, &std::process::Output),
) -> Result<()> {
    use std::os::unix::process::ExitStatusExt;
    let failed = |(tool, out): (&Path, &std::process::Output)| {
        Error::from(EngineError::ToolFailed {
            tool: tool.display().to_string(),
            status: out.status.to_string(),
            stderr_tail: String::from_utf8_lossy(&out.stderr)
                .trim()
                .chars()
                .take(2000)
                .collect(),
        })
    };
    let fed_feed_error = matches!(
        &fed,
        Err(Error::Engine(EngineError::LocalIo { action: "feed", .. }))
    );
    if !(fed.is_ok() || fed_feed_error) {
        return fed;
    }
    let decoder_echo = decoder.1.status.signal() == Some(libc::SIGPIPE);
    if !client.1.status.success() && (decoder.1.status.success() || decoder_echo) {
        return Err(failed(client));
    }
    if !decoder.1.status.success() {
        return Err(failed(decoder));
    }
    if !client.1.status.success() {
        return Err(failed(client));
    }
    fed
}

/// The recovery window of `backup` and the segments of its chain, along the newest history.
pub fn window_of(
    backup: &CompleteBackup,
    segments: &[SegmentManifest],
) -> Result<(Window, Vec<usize>)> {
    window_toward(backup, segments, &RecoveryTarget::Latest)
}

/// The recovery window of `backup` and the segments of its chain, along the history of the
/// timeline it recorded and the branch that holds `target` when it is a GTID position
/// ([`window::chain_for`]).
pub fn window_toward(
    backup: &CompleteBackup,
    segments: &[SegmentManifest],
    target: &RecoveryTarget,
) -> Result<(Window, Vec<usize>)> {
    let m = &backup.manifest;
    let start = backup_point(backup)?;
    let chain = window::chain_for(segments, &start, m.binlog_timeline, target.gtid());
    // A GTID target within the chain's numbers must be one of its transactions exactly:
    // refused here, before anything is loaded, rather than by the replay halfway.
    for g in target.gtid().into_iter().flat_map(GtidPos::gtids) {
        let within = chain.reached.includes(g) && !start.includes(g);
        if within && !super::chain::holds(segments, &chain, &start, g) {
            return Err(Error::PointInTime(format!(
                "GTID {g} is not in the history backup {} continues: the archive holds \
                 that number from another server, on another branch of history, or not at all",
                m.id
            )));
        }
    }
    Ok((Window::of(start, m.finished_at, &chain), chain.segments))
}

/// The GTID position of `backup`'s consistent point: where a replay continues it.
pub fn backup_point(backup: &CompleteBackup) -> Result<GtidPos> {
    let m = &backup.manifest;
    m.consistent_point
        .gtid_set
        .as_deref()
        .map(GtidPos::parse)
        .transpose()
        .map_err(Error::PointInTime)?
        .ok_or_else(|| {
            Error::PointInTime(format!(
                "backup {} recorded no GTID position, so no archive can continue it",
                m.id
            ))
        })
}

/// The programs a replay runs.
#[derive(Debug, Clone)]
pub struct ReplayTools {
    /// `mariadb-binlog`: turns the binlog into SQL.
    pub decoder: std::path::PathBuf,
    /// `mariadb`: sends the SQL to the server.
    pub client: std::path::PathBuf,
}

/// How the replayed transactions are logged by the server they go into.
#[derive(Debug, Clone)]
pub enum Logged {
    /// Under the archived GTIDs, by a server whose replica position is `known` (what it holds
    /// of this history is passed over) and whose binary log holds `logged_by_others` under
    /// other servers' ids ([`super::resume::logged_by_others`]; a replay cut off before it
    /// recorded its end shows there, and is refused).
    Archived {
        known: GtidPos,
        logged_by_others: Vec<crate::binlog::Gtid>,
    },
    /// Under the GTIDs of the server `Rebase` describes.
    Rebased(Rebase),
}

/// Replays the archive after `backup` up to `target` into the server at `conn`, logged as
/// `logged` says.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    store: &Arc<dyn bulwark_engine::store::Store>,
    key: Option<&MasterKey>,
    backup: &CompleteBackup,
    segments: &[SegmentManifest],
    target: &RecoveryTarget,
    conn: &Connection,
    tools: &ReplayTools,
    logged: Logged,
    coverage: Option<&super::coverage::Coverage>,
) -> Result<ReplayOutcome> {
    let (binlog_tool, client_tool) = (tools.decoder.as_path(), tools.client.as_path());
    let (window, chain) = window_toward(backup, segments, target)?;
    let window = window.covered(coverage);
    window.check(target).map_err(Error::PointInTime)?;
    let resumes_past_gap = match target {
        RecoveryTarget::Latest => past_gap(segments, &chain, backup.manifest.finished_at),
        _ => None,
    };
    if let Some(resumed) = &resumes_past_gap {
        tracing::warn!(backup_id = %backup.manifest.id, reached = %window.to, %resumed, "`latest` from this backup ends at a gap in the archive: the archive goes on from a later position no chain from this backup reaches; a backup taken after the gap restores past it");
    }
    let mut selector =
        Selector::new(window.from.clone(), target.clone()).started_by(backup.manifest.finished_at);
    match logged {
        Logged::Rebased(rebase) => selector = selector.rebased(rebase),
        Logged::Archived {
            known,
            logged_by_others,
        } => {
            let on_history = |g| {
                window.from.ends_with(g)
                    || chain
                        .iter()
                        .any(|i| super::history::held(&segments[*i]).holds(g))
            };
            let held = super::resume::already_held(&window.from, &window.to, &known, on_history)
                .map_err(Error::PointInTime)?;
            let mut from = window.from.clone();
            for g in held.iter().flat_map(GtidPos::gtids) {
                from.advance(g);
            }
            super::resume::check_not_interrupted(&from, &window.to, &logged_by_others, on_history)
                .map_err(Error::PointInTime)?;
            if let (Some(held), RecoveryTarget::Gtid(to)) = (&held, target) {
                if !to.covers(held) {
                    return Err(Error::PointInTime(format!(
                        "the server already holds the archived history up to {held}, past the \
                         target {to}: it was restored to a later point; nothing was applied"
                    )));
                }
            }
            if let Some(held) = &held {
                tracing::info!(backup_id = %backup.manifest.id, %held, "the server already holds part of the history; those transactions are passed over");
            }
            selector = selector.resuming(held);
        }
    }
    let defaults = DefaultsFile::create(conn)?;
    let mut client_args: Vec<String> = defaults.iter().map(|d| d.arg()).collect();
    client_args.extend(conn.tool_args());
    let io = |action: &'static str, tool: &Path| {
        let path = tool.display().to_string();
        move |source| EngineError::LocalIo {
            action,
            path,
            source,
        }
    };
    let mut client = source::dies_with_parent(&mut tokio::process::Command::new(client_tool))
        .args(&client_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io("start", client_tool))?;
    let client_in: Stdio = client
        .stdin
        .take()
        .expect("piped stdin")
        .try_into()
        .map_err(io("connect to", client_tool))?;
    let mut decoder = source::dies_with_parent(&mut tokio::process::Command::new(binlog_tool))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(client_in)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io("start", binlog_tool))?;
    let mut to_decoder = decoder.stdin.take().expect("piped stdin");
    let tool_name = |tool: &Path| tool.display().to_string();
    let client_stderr = source::drain_stderr(
        client.stderr.take().expect("piped stderr"),
        tool_name(client_tool),
    );
    let decoder_stderr = source::drain_stderr(
        decoder.stderr.take().expect("piped stderr"),
        tool_name(binlog_tool),
    );
    let mut bytes = 0u64;
    let mut read = 0usize;
    // The next segment is fetched and verified while the tools apply the current one.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Fed>(1);
    let archive = super::manifest::archive_of(&backup.manifest);
    let chain: Vec<SegmentManifest> = chain.iter().map(|i| segments[*i].clone()).collect();
    let mut feed = Feed::new(
        store,
        key,
        archive,
        chain,
        window.from.clone(),
        target.gtid().cloned(),
    )
    .on_timeline(backup.manifest.binlog_timeline);
    let producer = async move {
        while let Some(fed) = feed.next().await {
            let failed = fed.plain.is_err();
            if tx.send(fed).await.is_err() || failed {
                return;
            }
        }
    };
    let consumer = async {
        let mut block = vec![0u8; 1 << 20];
        while let Some(fed) = rx.recv().await {
            read += 1;
            let mut out = SpoolWriter::new(SpillRules::memory(SEGMENT_MEMORY));
            if bytes == 0 {
                out.write(&BINLOG_MAGIC).map_err(Error::spool)?;
            }
            // The segment's plaintext is dropped once taken: a large one's file goes with it,
            // the transactions taken from it share theirs with `out`.
            selector.take(&fed.id, &fed.after, &fed.plain?, &mut out)?;
            if !selector.done() {
                selector.check_end(&fed.id, &fed.through)?;
            }
            let out = out.finish().map_err(Error::spool)?;
            let mut reader = out.reader();
            loop {
                let n = std::io::Read::read(&mut reader, &mut block).map_err(Error::spool)?;
                if n == 0 {
                    break;
                }
                to_decoder
                    .write_all(&block[..n])
                    .await
                    .map_err(|source| EngineError::LocalIo {
                        action: "feed",
                        path: binlog_tool.display().to_string(),
                        source,
                    })?;
            }
            bytes += out.len();
            if selector.done() {
                break;
            }
        }
        // Stops the producer when the target came before the end of the chain.
        drop(rx);
        Ok::<(), Error>(())
    };
    let ((), fed) = futures::future::join(producer, consumer).await;
    let fed_feed_error = matches!(
        &fed,
        Err(Error::Engine(EngineError::LocalIo { action: "feed", .. }))
    );
    let fed = match fed {
        // The feed stopped mid-stream (a damaged segment, a temporary file that failed): the
        // tools are killed, not given an end of input that would apply half a transaction.
        Err(e) if !fed_feed_error => {
            let _ = decoder.kill().await;
            let _ = client.kill().await;
            return Err(e);
        }
        fed => fed,
    };
    drop(to_decoder);
    if fed.is_ok() && bytes <= BINLOG_MAGIC.len() as u64 {
        // Nothing after the backup (it is at the archive's end): the tools were given no event,
        // and mariadb-binlog refuses a stream without one. They are stopped unused.
        let _ = decoder.kill().await;
        let _ = client.kill().await;
    } else {
        let output =
            |status, report: std::result::Result<source::StderrReport, _>| std::process::Output {
                status,
                stdout: Vec::new(),
                stderr: report.unwrap_or_default().summary().into_bytes(),
            };
        let decoded = decoder.wait().await.map_err(io("wait for", binlog_tool))?;
        let decoded = output(decoded, decoder_stderr.await);
        let applied = client.wait().await.map_err(io("wait for", client_tool))?;
        let applied = output(applied, client_stderr.await);
        cause(fed, (binlog_tool, &decoded), (client_tool, &applied))?;
    }
    selector.finish()?;
    Ok(ReplayOutcome {
        backup_id: backup.manifest.id.clone(),
        segments: read,
        transactions: selector.transactions,
        already_held: selector.already_held,
        bytes,
        reached: selector.reached().to_string(),
        last_commit: selector.last_commit,
        resumes_past_gap,
    })
}

/// Where the archive resumes after a gap, when segments were received after the last of
/// `chain` (or after the backup finished, for an empty chain) beyond one: what `latest` from
/// its start does not reach.
fn past_gap(
    segments: &[SegmentManifest],
    chain: &[usize],
    finished: DateTime<Utc>,
) -> Option<String> {
    let last = chain
        .iter()
        .map(|i| segments[*i].received_at)
        .max()
        .unwrap_or(finished);
    window::gaps(segments)
        .into_iter()
        .filter(|g| g.resumed_received > last)
        .max_by_key(|g| g.resumed_received)
        .map(|g| g.resumed_at.to_string())
}

#[cfg(test)]
mod cause_tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Output};

    fn out(status: ExitStatus, stderr: &str) -> Output {
        Output {
            status,
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn the_cause_of_a_failed_replay_is_named_not_its_echoes() {
        let ok = out(ExitStatus::from_raw(0), "");
        let exit1 = |e: &str| out(ExitStatus::from_raw(1 << 8), e);
        let sigpipe = out(ExitStatus::from_raw(libc::SIGPIPE), "");
        let broken_pipe = || {
            Err(EngineError::LocalIo {
                action: "feed",
                path: "mariadb-binlog".into(),
                source: std::io::ErrorKind::BrokenPipe.into(),
            }
            .into())
        };
        let damaged = || {
            Err(Error::DamagedSegment {
                id: "s1".into(),
                reason: "cut".into(),
            })
        };
        let refused = exit1("ERROR 1950 (HY000): out-of-order");
        let (unknown, syntax) = (exit1("unknown event"), exit1("syntax"));
        let cases: Vec<(Result<()>, &Output, &Output, &str)> = vec![
            (Ok(()), &ok, &ok, "ok"),
            // The server refused a statement: the client's error, however the decoder ended.
            (Ok(()), &sigpipe, &refused, "out-of-order"),
            (broken_pipe(), &sigpipe, &refused, "out-of-order"),
            (Ok(()), &ok, &refused, "out-of-order"),
            // The decoder failed: its error, not the client's complaint about a cut stream.
            (Ok(()), &unknown, &syntax, "unknown event"),
            // A damaged segment stopped the feed: that is the cause.
            (damaged(), &ok, &syntax, "s1"),
            (broken_pipe(), &ok, &ok, "feed"),
        ];
        for (fed, decoder, client, want) in cases {
            let got = cause(
                fed,
                (Path::new("mariadb-binlog"), decoder),
                (Path::new("mariadb"), client),
            );
            let shown = match &got {
                Ok(()) => "ok".to_owned(),
                Err(e) => crate::error::chain(e),
            };
            assert!(shown.contains(want), "{shown} lacks {want}");
        }
    }
}
