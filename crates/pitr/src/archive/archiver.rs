//! The archiver: streams binary log events from the server as a replica would (GTID
//! positioning, heartbeats), gathers whole transactions and commits a segment every few
//! seconds or at a size bound. It resumes from the repository's newest segment, reconnects
//! after any failure (following whichever server now answers at the address, e.g. a primary
//! Service after a failover), steps back to the last archived position a new server has when
//! the archive ran ahead of it, and records a gap when the server no longer holds the position.

use bulwark_engine::Error as EngineError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::BinlogStreamRequest;

use super::connect::connect;
use super::follow;
use super::gathering::{Added, Gathering};
use super::history::FIRST_TIMELINE;
use super::housekeeping::{self, Housekeeping};
use super::manifest::{self, ArchiveSource, SegmentManifest};
pub use super::options::ArchiveOptions;
use super::segments;
use super::status::ArchiverRecord;
use super::vouching::Vouching;
use crate::binlog::{Assembler, GtidPos, Step};
use crate::error::{Error, Result};
use bulwark_contract::Engine;
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::progress::Progress;
use bulwark_engine::repo::Repository;
use bulwark_engine::source::{self, Connection};

/// MariaDB's "could not find the requested position" replication error.
pub(super) const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;
/// MariaDB replication capability with GTID support (`MARIA_SLAVE_CAPABILITY_GTID`).
const SLAVE_CAPABILITY_GTID: u32 = 4;

/// What one run did.
#[derive(Debug, Default, Clone)]
pub struct ArchiveReport {
    /// Segments committed.
    pub segments: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// Position after the last committed transaction.
    pub through: GtidPos,
}

/// Why a replication session ended.
enum SessionEnd {
    /// Stop asked for.
    Shutdown,
    /// Reconnect from the given position (a new branch or a gap), after logging why.
    Restart(follow::Resume),
    /// Reconnect from where the archive is.
    Retry(String),
}

/// The archiver's state across connections.
struct Archive<'a> {
    store: Arc<dyn bulwark_engine::store::Store>,
    key: Option<&'a MasterKey>,
    opts: &'a ArchiveOptions,
    /// Committed segments, the ones found at start and those written since.
    segments: Vec<SegmentManifest>,
    gathering: Gathering,
    report: ArchiveReport,
    /// Nothing says where to start: the first session starts at the server's position.
    start_at_server: bool,
    /// What `/status` reports.
    record: Arc<ArchiverRecord>,
    /// Backups listed again, segments pruned and compacted.
    housekeeping: Housekeeping<'a>,
    /// Records the archive's quiet periods.
    vouching: Vouching,
}

/// Runs until `shutdown` resolves, then commits what it holds and returns.
pub async fn run(
    repo: &Repository,
    conn: &Connection,
    key: Option<&MasterKey>,
    opts: &ArchiveOptions,
    record: Arc<ArchiverRecord>,
    mut shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<ArchiveReport> {
    let store = repo.store().clone();
    // Another key than the repository's, or none for an encrypted repository: refused before
    // anything is written.
    // From here on the key is bound to the repository: segments are signed and read for it.
    let bound = match key {
        Some(key) => Some(repo.ensure_key_check(key).await?),
        None => {
            repo.clone().under_key(None).check_key().await?;
            None
        }
    };
    let key = bound.as_ref();
    let bound_repo = repo.clone().under_key(bound.clone());
    let repo = &bound_repo;
    let listing = segments::list(&store, &opts.archive, key).await?;
    // Segments written before manifests were authenticated are refused under the key until
    // they are signed; resuming without them would archive past them and leave a hole.
    let unsigned = listing.incomplete.iter().filter(|i| i.unsigned).count();
    if unsigned > 0 {
        return Err(Error::ArchiveUnsigned {
            archive: opts.archive.clone(),
            count: unsigned,
        });
    }
    housekeeping::remove_incomplete(&store, &listing.incomplete).await;
    let segments = listing.segments;
    let start = resume_point(repo, &segments, opts).await?;
    let start_at_server = start.is_none();
    let start = start.unwrap_or_default();
    let mut archive = Archive {
        store,
        key,
        opts,
        segments,
        report: ArchiveReport {
            through: start.clone(),
            ..Default::default()
        },
        gathering: Gathering::new(start),
        start_at_server,
        record,
        housekeeping: Housekeeping::new(repo, key, opts, listing.superseded),
        vouching: Vouching::default(),
    };
    // Resuming continues the newest segment's timeline.
    if let Some(newest) = archive
        .segments
        .iter()
        .max_by_key(|s| (s.received_at, s.id.clone()))
    {
        archive.gathering.timeline = newest.timeline;
        archive.gathering.source = Some(newest.source.clone());
    }
    // Also shows the archive found at start (windows, gaps) in the record.
    archive.housekeep().await;
    let mut backoff = Duration::from_millis(500);
    loop {
        archive.record.turned();
        match archive.session(conn, &mut shutdown).await {
            Ok(SessionEnd::Shutdown) => break,
            Ok(SessionEnd::Restart(resume)) => {
                archive.flush_until_done().await;
                let (at, timeline) = match resume {
                    follow::Resume::Gap(at) => (at, archive.gathering.timeline),
                    follow::Resume::Branch { at, server_at } => {
                        let timeline = archive.next_timeline();
                        tracing::warn!(from = %archive.gathering.through, to = %at, server_position = %server_at, timeline, "the server lacks archived transactions: a new timeline starts from the newest archived position it has; the lost ones stay archived on their own branch");
                        (at, timeline)
                    }
                };
                // The server stays known: another one answering next starts a timeline too.
                let source = archive.gathering.source.take();
                archive.gathering = Gathering::new(at);
                archive.gathering.timeline = timeline;
                archive.gathering.source = source;
                backoff = Duration::from_millis(500);
            }
            Ok(SessionEnd::Retry(why)) => {
                tracing::warn!(reason = %why, through = %archive.gathering.through, "binlog stream ended; reconnecting");
                archive.record.stream(Some(why));
            }
            // Not a MariaDB server, or not the archive's history: no retry changes that.
            Err(e @ (Error::ArchiveUnsupported(_) | Error::Diverged { .. })) => {
                archive.flush_until_done().await;
                return Err(e);
            }
            Err(e) => {
                let cause = crate::error::chain(&e);
                tracing::warn!(error = %cause, through = %archive.gathering.through, retry_in = ?backoff, "binlog archiving interrupted; reconnecting");
                archive.record.stream(Some(cause));
            }
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    archive.flush_until_done().await;
    Ok(archive.report)
}

/// Where archiving continues: after the newest committed segment; with none, the given start,
/// else the newest backup's consistent point; `None`: at the server's current position, read
/// once it answers.
async fn resume_point(
    repo: &Repository,
    segments: &[SegmentManifest],
    opts: &ArchiveOptions,
) -> Result<Option<GtidPos>> {
    if let Some(last) = segments
        .iter()
        .max_by_key(|s| (s.received_at, s.id.clone()))
    {
        tracing::info!(segment = %last.id, through = %last.through, "resuming after the newest archived segment");
        return Ok(Some(last.through.clone()));
    }
    if let Some(start) = &opts.start {
        return Ok(Some(start.clone()));
    }
    let catalog = repo.catalog().await?;
    let newest = catalog
        .complete
        .iter()
        .rev()
        .find(|b| manifest::archive_of(&b.manifest) == opts.archive);
    if let Some(b) = newest {
        if let Some(p) = b.manifest.consistent_point.gtid_set.as_deref() {
            if let Ok(pos) = GtidPos::parse(p) {
                tracing::info!(backup_id = %b.manifest.id, position = %pos, "archive starts at the newest backup's consistent point");
                return Ok(Some(pos));
            }
        }
    }
    Ok(None)
}

impl Archive<'_> {
    /// A timeline number no segment has yet: the one being gathered when nothing was
    /// committed on it (a new server that turned out to lack archived transactions starts one
    /// timeline, not two).
    fn next_timeline(&self) -> u32 {
        let used = self.segments.iter().map(|s| s.timeline).max().unwrap_or(0);
        if self.gathering.timeline > used {
            self.gathering.timeline
        } else {
            used.max(FIRST_TIMELINE) + 1
        }
    }

    async fn housekeep(&mut self) {
        let opened = self.gathering.opened();
        self.housekeeping
            .run(&mut self.segments, &self.record, opened)
            .await;
    }

    /// One replication connection, from `self.gathering.through` until it fails, ends or is stopped.
    async fn session(
        &mut self,
        conn: &Connection,
        shutdown: &mut Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> Result<SessionEnd> {
        let opts = self.opts;
        let mut c = connect(conn).await?;
        let row: Option<(String, String, String, u32)> = c
            .query_first("SELECT @@version, @@version_comment, @@hostname, @@server_id")
            .await
            .map_err(|e| EngineError::QueryServer(Box::new(e)))?;
        let (version, comment, host, server_id) = row.ok_or_else(|| {
            EngineError::QueryServer(Box::new(mysql_async::Error::Other("no row".into())))
        })?;
        if source::engine_of(&version, &comment) != Engine::MariaDb {
            return Err(Error::ArchiveUnsupported(format!(
                "a MariaDB server; {} at {} is MySQL, whose archiving is not built yet",
                version,
                conn.describe()
            )));
        }
        let source = ArchiveSource {
            host,
            server_id,
            server_version: version,
        };
        if self.start_at_server {
            let pos: Option<String> = c
                .query_first("SELECT @@gtid_binlog_pos")
                .await
                .map_err(|e| EngineError::QueryServer(Box::new(e)))?;
            let pos =
                GtidPos::parse(&pos.unwrap_or_default()).map_err(EngineError::InvalidArgument)?;
            tracing::warn!(position = %pos, "no backup and no archive: archiving starts at the server's current position; the recovery window begins with the next backup");
            self.gathering = Gathering::new(pos.clone());
            self.report.through = pos;
            self.start_at_server = false;
        }
        if self.gathering.source.as_ref() != Some(&source) && !self.gathering.is_empty() {
            // One segment, one source: what came from the previous server is committed first.
            self.flush().await?;
        }
        let previous = self.gathering.source.as_ref().map(|s| s.server_id);
        if previous.is_some_and(|id| id != server_id) {
            // Another server (a switchover or a failover): its history starts a new timeline,
            // so `list` shows where each server took over.
            self.gathering.timeline = self.next_timeline();
            tracing::info!(timeline = self.gathering.timeline, from = %self.gathering.through, server_id, "another server answers: a new timeline starts");
        }
        self.gathering.source = Some(source.clone());
        let from = self.gathering.through.to_string();
        for set in [
            format!("SET @mariadb_slave_capability = {SLAVE_CAPABILITY_GTID}"),
            format!("SET @slave_connect_state = '{from}'"),
            "SET @slave_gtid_strict_mode = 1".to_string(),
            "SET @slave_gtid_ignore_duplicates = 0".to_string(),
            format!(
                "SET @master_heartbeat_period = {}",
                opts.heartbeat.as_nanos()
            ),
        ] {
            c.query_drop(set)
                .await
                .map_err(|e| EngineError::QueryServer(Box::new(e)))?;
        }
        let mut stream = c
            .get_binlog_stream(BinlogStreamRequest::new(opts.server_id))
            .await
            .map_err(|source| Error::StreamBinlog {
                target: conn.describe(),
                source: Box::new(source),
            })?;
        tracing::info!(server = %source.host, server_id, from = %from, "streaming binary logs");
        self.record.stream(None);
        self.vouching.new_session();
        let mut assembler = Assembler::default();
        let silence = opts.heartbeat * 3 + Duration::from_secs(2);
        loop {
            self.record.turned();
            if self
                .gathering
                .due(Instant::now(), opts.flush_every, opts.segment_bytes)
            {
                self.flush().await?;
            }
            // A heartbeat a second keeps this loop turning while the server is idle.
            if self.housekeeping.due() {
                self.housekeep().await;
            }
            let deadline = self
                .gathering
                .deadline(opts.flush_every)
                .unwrap_or_else(|| Instant::now() + silence);
            let next = tokio::select! {
                _ = &mut *shutdown => {
                    self.flush().await?;
                    return Ok(SessionEnd::Shutdown);
                }
                _ = tokio::time::sleep_until(deadline.into()), if !self.gathering.is_empty() => continue,
                next = tokio::time::timeout(silence, stream.next()) => next,
            };
            let event = match next {
                Err(_) => {
                    return Ok(SessionEnd::Retry(format!(
                        "nothing from the server for {silence:?}"
                    )))
                }
                Ok(None) => return Ok(SessionEnd::Retry("the server closed the stream".into())),
                // Any other error 1236 (a damaged binary log on the server) is reported and
                // retried like any failure: the archive neither steps back nor records a gap.
                Ok(Some(Err(mysql_async::Error::Server(e))))
                    if e.code == ER_MASTER_FATAL_ERROR_READING_BINLOG
                        && follow::position_unavailable(&e.message) =>
                {
                    tracing::warn!(server = %source.host, error = %e.message, "the server cannot continue the archive from its position");
                    drop(stream);
                    let resume =
                        follow::step_back(conn, &self.segments, &self.gathering.through).await?;
                    if let follow::Resume::Branch { at, server_at } = &resume {
                        if !opts.branch_on_divergence {
                            return Err(Error::Diverged {
                                server: source.host.clone(),
                                archived: self.gathering.through.to_string(),
                                server_at: server_at.clone(),
                                branch_at: at.to_string(),
                            });
                        }
                    }
                    return Ok(SessionEnd::Restart(resume));
                }
                Ok(Some(Err(source))) => {
                    return Err(Error::StreamBinlog {
                        target: conn.describe(),
                        source: Box::new(source),
                    })
                }
                Ok(Some(Ok(event))) => event,
            };
            let raw = follow::exact_bytes(&event).map_err(|reason| Error::ArchiveStream {
                target: conn.describe(),
                source: reason,
            })?;
            let step = assembler.push(raw).map_err(|reason| Error::ArchiveStream {
                target: conn.describe(),
                source: reason,
            })?;
            match step {
                Step::Nothing => {}
                Step::Heartbeat => {
                    self.record.current(self.gathering.opened());
                    self.vouching
                        .heartbeat(
                            &self.opts.archive,
                            conn,
                            &self.gathering,
                            &self.store,
                            self.key,
                            &self.record,
                        )
                        .await;
                }
                Step::Format(fde) => {
                    if self.gathering.format_changes(fde.bytes()) && !self.gathering.is_empty() {
                        self.flush().await?;
                    }
                    self.gathering.set_format(fde.bytes().to_vec());
                }
                Step::Transaction(trx) => {
                    if !self.gathering.has_format() {
                        return Err(Error::ArchiveStream {
                            target: conn.describe(),
                            source: crate::binlog::assemble::AssembleError::NoFormat(trx.gtid),
                        });
                    }
                    let gtid = trx.gtid;
                    self.vouching.arrived(gtid, trx.committed);
                    match self.gathering.add(trx, Utc::now(), Instant::now()) {
                        Ok(Added::Appended) => {}
                        Ok(Added::Duplicate) => {
                            tracing::debug!(%gtid, "transaction already archived; skipped")
                        }
                        Err(e) => {
                            // Part of it may be held: the segment is streamed again.
                            tracing::error!(after = %self.gathering.after, through = %self.gathering.through, "a temporary file failed: the transactions received since the last segment are dropped and streamed again");
                            self.gathering.discard();
                            return Err(Error::spool(e));
                        }
                    }
                    self.record.current(self.gathering.opened());
                }
            }
        }
    }

    /// Commits the segment being gathered, if it holds anything, and starts the next one.
    async fn flush(&mut self) -> Result<()> {
        let (opts, gathering) = (self.opts, &mut self.gathering);
        if gathering.is_empty() {
            return Ok(());
        }
        let id = manifest::new_segment_id(&opts.archive, Utc::now());
        let (plain, draft) = match gathering.seal(
            id,
            opts.write.chunk_size as u64,
            opts.write.level,
        ) {
            Ok(sealed) => sealed,
            Err(e) => {
                tracing::error!(after = %gathering.after, through = %gathering.through, "a temporary file failed: the transactions received since the last segment are dropped and streamed again");
                gathering.discard();
                return Err(Error::spool(e));
            }
        };
        let progress = Progress::new();
        let commit = segments::commit(
            &self.store,
            plain,
            self.key,
            &opts.write,
            draft,
            progress.clone(),
        );
        let committed = while_moving(commit, &progress, &self.record).await?;
        let lag = (Utc::now() - committed.last_commit).num_milliseconds() as f64 / 1000.0;
        tracing::info!(
            segment = %committed.id,
            first = %committed.first_gtid,
            last = %committed.last_gtid,
            transactions = committed.transactions,
            stored_bytes = committed.stored_bytes,
            lag_seconds = lag,
            "binlog segment archived"
        );
        self.report.segments += 1;
        self.report.transactions += committed.transactions;
        self.report.through = committed.through.clone();
        self.gathering = self.gathering.next();
        let extended = self.record.advanced(&committed);
        self.segments.push(committed);
        if !extended {
            self.record
                .reviewed(&self.segments, &self.housekeeping.backups, None);
        }
        Ok(())
    }

    /// Commits the segment being gathered, retrying while the repository fails, until it is stored or a stop
    /// is asked for (what is lost then is re-read from the server on the next start).
    async fn flush_until_done(&mut self) {
        if self.gathering.is_empty() {
            return;
        }
        for attempt in 1..=10 {
            match self.flush().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(attempt, error = %crate::error::chain(&e), "failed to commit binlog segment; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

/// Awaits `work`, telling `record` the loop turns while `progress` moves: the commit of a
/// large transaction's segment may outlast the stall limit without being stuck.
async fn while_moving<T>(
    work: impl Future<Output = T>,
    progress: &Progress,
    record: &ArchiverRecord,
) -> T {
    use std::sync::atomic::Ordering::Relaxed;
    tokio::pin!(work);
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut seen = None;
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                let now = progress.plain_bytes.load(Relaxed) + progress.stored_bytes.load(Relaxed);
                if seen.is_some_and(|s| s != now) {
                    record.turned();
                }
                seen = Some(now);
            }
        }
    }
}
