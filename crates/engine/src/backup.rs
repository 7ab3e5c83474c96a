//! Taking a backup: probe the server, run the tool, stream its output into the repository, check
//! the tool's exit and completion line, and only then commit the manifest.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bulwark_contract::Engine;
use chrono::{DateTime, Utc};

use crate::crypto::{DataKey, MasterKey};
use crate::error::{Error, Result};
use crate::format::{
    self, Chunking, ConsistentPoint, EncryptionInfo, Manifest, Method, PlaintextInfo, SourceInfo,
};
use crate::progress::Progress;
use crate::repo::Repository;
use crate::series;
use crate::source::{self, Connection, DefaultsFile, ToolJob};
use crate::writer::{self, WriteOptions};

/// Everything a backup needs besides the repository.
#[derive(Debug)]
pub struct BackupRequest {
    /// Physical or logical.
    pub method: Method,
    /// Server connection.
    pub connection: Connection,
    /// Tool to run instead of the detected one.
    pub tool: Option<String>,
    /// Datadir as seen from this host, when it differs from the server's `@@datadir`.
    pub datadir: Option<String>,
    /// Extra arguments appended to the tool's command line.
    pub extra_args: Vec<String>,
    /// Pipeline tuning.
    pub write: WriteOptions,
    /// Master key; `None` stores chunks unencrypted.
    pub key: Option<MasterKey>,
    /// The id to store the backup under, chosen by the caller (who can then find and delete
    /// it whatever happens to this run); `None` makes one from the start time.
    pub id: Option<String>,
    /// The binlog archive that continues this backup (`None`: the repository's default one).
    pub binlog_archive: Option<String>,
    /// Asked, once the copy is complete, which timeline of that archive its consistent point
    /// belongs to (`None`: nothing is recorded).
    pub timeline: Option<TimelineProbe>,
}

/// The longest a [`TimelineProbe`] may take.
const TIMELINE_PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(45);

/// What a timeline probe answers: the timeline, or `None` when the archive cannot say.
pub type TimelineAnswer = std::pin::Pin<Box<dyn std::future::Future<Output = Option<u32>> + Send>>;

/// Given the consistent point, when the backup started and the key manifests are checked
/// under (bound to the repository), the timeline of the binlog archive it belongs to. The
/// engine knows no archive; the caller that does answers.
pub struct TimelineProbe(pub Box<TimelineAsk>);

/// The question a [`TimelineProbe`] answers.
pub type TimelineAsk =
    dyn FnOnce(ConsistentPoint, DateTime<Utc>, Option<MasterKey>) -> TimelineAnswer + Send;

impl std::fmt::Debug for TimelineProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TimelineProbe")
    }
}

/// A committed backup.
#[derive(Debug, Clone)]
pub struct BackupOutcome {
    /// Its manifest.
    pub manifest: Manifest,
    /// Hex SHA-256 of the stored manifest.
    pub manifest_sha256: String,
}

/// Runs a backup end to end. On any failure the data written so far is deleted and nothing is
/// committed.
pub async fn run(
    repo: &Repository,
    mut req: BackupRequest,
    progress: Arc<Progress>,
    mut shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> Result<BackupOutcome> {
    let timeline_probe = req.timeline.take();
    // A key other than the repository's, or none for an encrypted repository, is refused
    // before anything is streamed.
    // The key signs the manifest bound to this repository.
    let key = match &req.key {
        Some(key) => Some(repo.ensure_key_check(key).await?),
        None => {
            repo.clone().under_key(None).check_key().await?;
            None
        }
    };
    let server = source::probe(&req.connection).await?;
    if source::holds_partial_load(&req.connection).await? {
        return Err(Error::PartialLoad {
            host: server.hostname,
            when: "it holds",
        });
    }
    tracing::info!(engine = %server.engine, version = %server.version, host = %server.hostname, method = %req.method, "server probed");
    // A physical stream copies the datadir's files; when they are visible here their sizes are
    // a far better estimate than the tables' data sizes.
    let estimate = match req.method {
        Method::Physical => {
            let dir = req
                .datadir
                .as_deref()
                .unwrap_or(&server.datadir)
                .to_string();
            tokio::task::spawn_blocking(move || dir_size(std::path::Path::new(&dir)))
                .await
                .ok()
                .flatten()
                .unwrap_or(server.data_bytes)
        }
        Method::Logical => server.data_bytes,
    };
    progress.total_hint.store(estimate, Ordering::Relaxed);
    let tool_path = source::find_tool(
        server.engine,
        ToolJob::from(req.method),
        req.tool.as_deref(),
    )?;
    let tool_version = source::tool_version(&tool_path).await;
    if matches!(req.method, Method::Physical) {
        if let Some(why) = series::mismatch(server.engine, &tool_version, &server.version) {
            return Err(Error::ToolSeries(why));
        }
    }
    let defaults = DefaultsFile::create(&req.connection)?;
    let work_dir = tempfile::Builder::new()
        .prefix("mysql-backup-work-")
        .tempdir()
        .map_err(|source| Error::LocalIo {
            action: "create work directory in",
            path: std::env::temp_dir().display().to_string(),
            source,
        })?;
    let mut args: Vec<String> = defaults.iter().map(DefaultsFile::arg).collect();
    args.extend(match req.method {
        Method::Physical => source::physical_args(
            &req.connection,
            work_dir.path(),
            req.datadir.as_deref(),
            &req.extra_args,
        ),
        Method::Logical => source::logical_args(
            &req.connection,
            server.engine,
            &server.version,
            server.log_bin,
            &req.extra_args,
        ),
    });

    let started_at = Utc::now();
    let id = match &req.id {
        Some(id) => {
            // Never written into: a retried run with the same id must not mix with, or delete,
            // what an earlier one left.
            let existing = repo
                .store()
                .list(&format::object_key(id, ""))
                .await
                .map_err(Error::ListRepository)?;
            if !existing.is_empty() {
                return Err(Error::BackupIdTaken(id.clone()));
            }
            id.clone()
        }
        None => format::new_backup_id(started_at),
    };
    // Marks the backup as being written, so `prune` never takes it for an abandoned one
    // (an upload in progress is not listed until it completes).
    let writing = crate::holds::take(repo.store(), &id, crate::holds::HoldKind::Backup).await?;
    let data_key = req.key.as_ref().map(|_| Arc::new(DataKey::generate()));
    let mut tool = source::spawn(&tool_path, &args, source::ToolIo::ReadStdout)?;
    let tool_name = tool.name.clone();
    tracing::info!(backup_id = %id, tool = %tool_name, tool_version = %tool_version, "backup started");
    let stdout = tool.take_stdout();
    let store = repo.store().clone();

    // Everything from here on writes to the repository; any failure deletes what was written.
    let committed = async {
        let stream = writer::write_stream(
            &store,
            &id,
            stdout,
            &tool_name,
            &req.write,
            data_key.clone(),
            progress,
        );
        let written = tokio::select! {
            w = stream => w,
            _ = &mut shutdown => Err(Error::Interrupted),
        };
        let written = match written {
            Ok(w) => w,
            Err(e) => {
                let report = tool.kill().await;
                tracing::debug!(stderr = %report.summary(), "tool stopped after pipeline failure");
                return Err(e);
            }
        };
        let completion = match req.method {
            Method::Physical => Some(source::PHYSICAL_COMPLETION),
            Method::Logical => None,
        };
        let report = tool.finish(completion).await?;
        let consistent_point = match req.method {
            Method::Physical => report.point.clone().unwrap_or_default(),
            Method::Logical => {
                if !String::from_utf8_lossy(&written.tail).contains(source::DUMP_COMPLETION) {
                    return Err(Error::ToolIncomplete {
                        tool: tool_name.clone(),
                        expected: source::DUMP_COMPLETION.to_string(),
                        stderr_tail: report.summary(),
                    });
                }
                source::parse_dump_point(&written.head, &written.tail)
            }
        };
        if req.method == Method::Physical
            && server.engine == Engine::MariaDb
            && server.log_bin
            && consistent_point.binlog_file.is_none()
        {
            tracing::warn!(backup_id = %id, "binary logging is on but the tool reported no binlog position");
        }
        let encryption = match (&req.key, &data_key) {
            (Some(master), Some(dk)) => Some(EncryptionInfo {
                algorithm: "AES-256-GCM".into(),
                key_id: master.id().to_string(),
                wrapped_data_key: master.wrap(&id, dk),
            }),
            _ => None,
        };
        // The copy is durably stored now; the probe's wait is no part of it.
        let finished_at = Utc::now();
        // Bounded, and stopped with the backup: a slow listing never holds a finished copy.
        let binlog_timeline = match timeline_probe {
            Some(probe) => {
                let asked = (probe.0)(consistent_point.clone(), started_at, key.clone());
                tokio::select! {
                    t = tokio::time::timeout(TIMELINE_PROBE_LIMIT, asked) => t.unwrap_or_else(|_| {
                        tracing::warn!(backup_id = %id, "the binlog archive did not say in time which timeline the backup belongs to; none is recorded");
                        None
                    }),
                    _ = &mut shutdown => return Err(Error::Interrupted),
                }
            }
            None => None,
        };
        let manifest = Manifest {
            format: format::FORMAT_NAME.into(),
            format_version: format::FORMAT_VERSION,
            id: id.clone(),
            method: req.method,
            started_at,
            finished_at,
            source: SourceInfo {
                host: server.hostname.clone(),
                engine: server.engine,
                server_version: server.version.clone(),
                tool: tool_name.clone(),
                tool_version,
            },
            consistent_point,
            binlog_archive: req.binlog_archive.clone(),
            binlog_timeline,
            chunking: Chunking {
                chunk_size: req.write.chunk_size as u64,
                compression: "zstd".into(),
                compression_level: req.write.level,
            },
            encryption,
            plaintext: PlaintextInfo {
                bytes: written.plaintext_bytes,
                chunks: written.chunks,
                sha256: written.plaintext_sha256,
            },
            stored_bytes: written.stored_bytes,
            segments: written.segments,
        };
        // A load that began while the copy ran, and holds the server at its end: what was
        // copied may be part of it. Asked again a few times before a finished copy is given up
        // for want of an answer.
        let mut asked = 0;
        let marked = loop {
            asked += 1;
            match source::holds_partial_load(&req.connection).await {
                Ok(marked) => break marked,
                Err(e) if asked < 3 => {
                    tracing::warn!(backup_id = %id, error = %crate::chain::chain(&e), "failed to ask the server whether a bootstrap load began during the backup; asking again");
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
                Err(e) => return Err(Error::CheckPartialLoad(Box::new(e))),
            }
        };
        if marked {
            return Err(Error::PartialLoad {
                host: server.hostname.clone(),
                when: "when the backup ended, it held",
            });
        }
        let manifest_sha256 = repo.commit(&manifest, key.as_ref()).await?;
        Ok(BackupOutcome {
            manifest,
            manifest_sha256,
        })
    }
    .await;
    match &committed {
        Ok(o) => {
            tracing::info!(backup_id = %id, plaintext_bytes = o.manifest.plaintext.bytes, stored_bytes = o.manifest.stored_bytes, "backup committed")
        }
        Err(_) => repo.discard(&id).await,
    }
    writing.release().await;
    committed
}

/// Total size of the files below `dir`, or `None` when it cannot be read from here (a remote
/// server, or a datadir mounted elsewhere).
fn dir_size(dir: &std::path::Path) -> Option<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()?.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    (total > 0).then_some(total)
}
