//! Reading backups back: verify, cat, and restore (physical into a directory, logical into a
//! server). A restore never leaves anything that looks restored unless every check passed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use tokio::io::AsyncWriteExt;

use crate::crypto::{DataKey, MasterKey};
use crate::dumphead::BinloggedLoad;
use crate::error::{Error, Result};
use crate::format::Method;
use crate::progress::Progress;
use crate::reader::{self, ChunkSink, Depth, Discard, ReadSummary, WriteSink};
use crate::repo::{CompleteBackup, Repository};
use crate::source::{self, Connection, DefaultsFile, ToolIo, ToolJob};
pub use crate::staging::StagingDir;
use crate::xbstream;

/// Unwraps the data key when the backup is encrypted and a key is given.
pub fn data_key(backup: &CompleteBackup, key: Option<&MasterKey>) -> Result<Option<Arc<DataKey>>> {
    match (&backup.manifest.encryption, key) {
        (Some(info), Some(master)) => Ok(Some(Arc::new(master.unwrap(&backup.manifest.id, info)?))),
        _ => Ok(None),
    }
}

/// Re-reads a backup and checks it as deeply as the key allows.
pub async fn verify(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<ReadSummary> {
    let dk = data_key(backup, key)?;
    let depth = if backup.manifest.encryption.is_some() && dk.is_none() {
        Depth::StoredDigests
    } else {
        Depth::Full
    };
    reader::read_backup(
        repo.store(),
        &backup.manifest,
        dk,
        depth,
        parallel,
        progress,
        &mut Discard,
    )
    .await
}

/// Writes the verified plaintext to `out`.
pub async fn cat<W: tokio::io::AsyncWrite + Unpin + Send>(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    parallel: usize,
    out: W,
) -> Result<ReadSummary> {
    let dk = data_key(backup, key)?;
    let mut sink = WriteSink {
        out,
        what: "stdout",
    };
    let summary = reader::read_backup(
        repo.store(),
        &backup.manifest,
        dk,
        Depth::Full,
        parallel,
        Progress::new(),
        &mut sink,
    )
    .await?;
    sink.out.flush().await.map_err(|source| Error::LocalIo {
        action: "write to",
        path: "stdout".into(),
        source,
    })?;
    Ok(summary)
}

/// Hands chunks to the extractor thread; a closed channel means the extractor stopped, and its
/// own error is the one reported.
struct ChannelSink {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    backup_id: String,
    closed: bool,
}

#[async_trait::async_trait]
impl ChunkSink for ChannelSink {
    async fn accept(&mut self, chunk: Bytes) -> Result<()> {
        if self.tx.send(chunk).await.is_err() {
            // Stop reading: the extractor has failed, and its own error replaces this one.
            self.closed = true;
            return Err(Error::Extract {
                id: self.backup_id.clone(),
                detail: "the extractor stopped early".into(),
            });
        }
        Ok(())
    }
}

/// Where to restore.
#[derive(Debug)]
pub enum Destination {
    /// A datadir to create from a physical backup.
    Directory {
        /// The directory.
        path: PathBuf,
        /// Replace a non-empty directory.
        force: bool,
        /// Run `--prepare` after extraction.
        prepare: bool,
    },
    /// A running server to load a logical backup into.
    Server {
        /// Connection.
        connection: Connection,
        /// Verify the whole backup before sending any SQL.
        verify_first: bool,
        /// Binary-log the whole load (a new cluster's primary, whose replicas get the data by
        /// replication): the session logs (`sql_log_bin = 1`), and what a MySQL dump's head
        /// says against it is left out ([`crate::dumphead`]).
        binlogged: bool,
    },
}

/// What a restore did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RestoreOutcome {
    /// Backup restored.
    pub backup_id: String,
    /// Plaintext bytes processed.
    pub plaintext_bytes: u64,
    /// Files extracted (physical).
    pub files: Option<u64>,
    /// Where it went.
    pub target: String,
    /// Whether `--prepare` ran.
    pub prepared: bool,
}

/// Restores `backup` into `destination`.
pub async fn restore(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    destination: Destination,
    tool: Option<&str>,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<RestoreOutcome> {
    let m = &backup.manifest;
    let dk = data_key(backup, key)?;
    if m.encryption.is_some() && dk.is_none() {
        return Err(Error::KeyRequired { id: m.id.clone() });
    }
    match (m.method, destination) {
        (
            Method::Physical,
            Destination::Directory {
                path,
                force,
                prepare,
            },
        ) => {
            let (staged, staging) = stage_restore(
                repo, backup, dk, &path, force, prepare, tool, parallel, progress,
            )
            .await?;
            staging.commit()?;
            Ok(staged.outcome(&path))
        }
        (
            Method::Logical,
            Destination::Server {
                connection,
                verify_first,
                binlogged,
            },
        ) => {
            restore_logical(
                repo,
                backup,
                dk,
                &connection,
                verify_first,
                binlogged,
                tool,
                parallel,
                progress,
            )
            .await
        }
        (Method::Physical, Destination::Server { .. })
        | (Method::Logical, Destination::Directory { .. }) => Err(Error::WrongRestoreTarget {
            id: m.id.clone(),
            method: m.method,
        }),
    }
}

fn local<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::LocalIo {
        action,
        path: path.display().to_string(),
        source,
    }
}

/// Checks the target before any work, so a refusal costs nothing.
fn check_target(path: &Path, force: bool) -> Result<()> {
    let target = path.display().to_string();
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(local("inspect", path)(e)),
        Ok(meta) if !meta.is_dir() => Err(Error::RestoreTarget {
            target,
            reason: "it exists and is not a directory".into(),
        }),
        Ok(_) => {
            let non_empty = std::fs::read_dir(path)
                .map_err(local("read", path))?
                .next()
                .is_some();
            if non_empty && !force {
                Err(Error::TargetNotEmpty { target })
            } else {
                Ok(())
            }
        }
    }
}

/// Presents a channel of chunks as a blocking reader for the extractor thread.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => self.current = b,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

/// Extracts (and prepares) a physical backup into a locked staging directory beside `path`,
/// after checking the target; the caller may work on the staged datadir (a point-in-time
/// replay) before [`StagingDir::commit`] puts it in place. Dropping the staging directory
/// leaves the target as it was.
#[allow(clippy::too_many_arguments)]
pub async fn stage_restore(
    repo: &Repository,
    backup: &CompleteBackup,
    dk: Option<Arc<DataKey>>,
    path: &Path,
    force: bool,
    prepare: bool,
    tool: Option<&str>,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<(Staged, StagingDir)> {
    let m = &backup.manifest;
    if m.encryption.is_some() && dk.is_none() {
        return Err(Error::KeyRequired { id: m.id.clone() });
    }
    if m.method != Method::Physical {
        return Err(Error::WrongRestoreTarget {
            id: m.id.clone(),
            method: m.method,
        });
    }
    let prepare_tool = if prepare {
        let t = source::find_tool(m.source.engine, ToolJob::Physical, tool)?;
        let line = source::tool_version(&t).await;
        if let Some(why) = crate::series::mismatch(m.source.engine, &line, &m.source.server_version)
        {
            return Err(Error::ToolSeries(why));
        }
        Some(t)
    } else {
        None
    };
    // Clears what an interrupted restore left first: a target it moved aside is back before
    // the target is judged.
    let staging = StagingDir::create(path)?;
    check_target(path, force)?;
    let staged = stage_physical(
        repo,
        backup,
        dk,
        staging.path(),
        prepare_tool.as_deref(),
        parallel,
        progress,
    )
    .await?;
    Ok((staged, staging))
}

/// A physical backup extracted (and prepared) into a staging directory.
#[derive(Debug, Clone)]
pub struct Staged {
    /// Backup restored.
    pub backup_id: String,
    /// Plaintext bytes read.
    pub plaintext_bytes: u64,
    /// Files extracted.
    pub files: u64,
    /// Whether `--prepare` ran.
    pub prepared: bool,
}

impl Staged {
    /// The outcome once the staged files are in place at `target`.
    pub fn outcome(&self, target: &Path) -> RestoreOutcome {
        RestoreOutcome {
            backup_id: self.backup_id.clone(),
            plaintext_bytes: self.plaintext_bytes,
            files: Some(self.files),
            target: target.display().to_string(),
            prepared: self.prepared,
        }
    }
}

/// Extracts a physical backup into `staging` (an existing, empty directory), checking every
/// chunk on the way, prepares it when a `prepare_tool` is given (`--prepare`), and syncs the
/// filesystem. The caller puts the staged files in place.
pub async fn stage_physical(
    repo: &Repository,
    backup: &CompleteBackup,
    dk: Option<Arc<DataKey>>,
    staging: &Path,
    prepare_tool: Option<&Path>,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<Staged> {
    let m = &backup.manifest;
    if m.method != Method::Physical {
        return Err(Error::InvalidArgument(format!(
            "backup {} is {}, not physical",
            m.id, m.method
        )));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    let dest = staging.to_path_buf();
    let extractor = tokio::task::spawn_blocking(move || {
        xbstream::extract(
            ChannelReader {
                rx,
                current: Bytes::new(),
            },
            &dest,
        )
    });
    let mut sink = ChannelSink {
        tx,
        backup_id: m.id.clone(),
        closed: false,
    };
    let read = reader::read_backup(
        repo.store(),
        m,
        dk,
        Depth::Full,
        parallel,
        progress,
        &mut sink,
    )
    .await;
    let extractor_failed_first = sink.closed;
    drop(sink);
    let extracted = extractor.await.expect("extractor panicked");
    if extractor_failed_first {
        if let Err(detail) = extracted {
            return Err(Error::Extract {
                id: m.id.clone(),
                detail,
            });
        }
    }
    let read = read?;
    let extracted = extracted.map_err(|detail| Error::Extract {
        id: m.id.clone(),
        detail,
    })?;
    tracing::info!(backup_id = %m.id, files = extracted.files, bytes = extracted.bytes, "extracted");

    if let Some(tool) = prepare_tool {
        let target_arg = format!("--target-dir={}", staging.display());
        let proc = source::spawn(
            tool,
            &["--prepare".to_string(), target_arg],
            ToolIo::Neither,
        )?;
        tracing::info!(tool = %proc.name, "preparing");
        proc.finish(Some(source::PHYSICAL_COMPLETION)).await?;
    }
    sync_filesystem(staging)?;
    Ok(Staged {
        backup_id: m.id.clone(),
        plaintext_bytes: read.plaintext_bytes,
        files: extracted.files,
        prepared: prepare_tool.is_some(),
    })
}

/// Flushes the filesystem holding `dir`, so a restored datadir survives a crash.
fn sync_filesystem(dir: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir).map_err(local("open", dir))?;
    // SAFETY: syncfs only reads the descriptor, which `d` keeps open for the call.
    let rc = unsafe { libc::syncfs(d.as_raw_fd()) };
    if rc != 0 {
        return Err(local("sync", dir)(std::io::Error::last_os_error()));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn restore_logical(
    repo: &Repository,
    backup: &CompleteBackup,
    dk: Option<Arc<DataKey>>,
    conn: &Connection,
    verify_first: bool,
    binlogged: bool,
    tool: Option<&str>,
    parallel: usize,
    progress: Arc<Progress>,
) -> Result<RestoreOutcome> {
    let m = &backup.manifest;
    let client = source::find_tool(m.source.engine, ToolJob::Client, tool)?;
    // Reach the server before anything else, so a wrong address fails fast.
    source::probe(conn).await?;
    if verify_first {
        tracing::info!(backup_id = %m.id, "verifying before loading");
        reader::read_backup(
            repo.store(),
            m,
            dk.clone(),
            Depth::Full,
            parallel,
            Progress::new(),
            &mut Discard,
        )
        .await?;
    }
    let defaults = DefaultsFile::create(conn)?;
    let mut args: Vec<String> = defaults.iter().map(DefaultsFile::arg).collect();
    args.push("--binary-mode".into());
    if binlogged {
        args.push("--init-command=SET SESSION sql_log_bin = 1".into());
    }
    args.extend(conn.tool_args());
    let mut proc = source::spawn(&client, &args, ToolIo::WriteStdin)?;
    let out = WriteSink {
        out: proc.take_stdin(),
        what: "the mysql client",
    };
    let mut sink = if binlogged {
        BinloggedLoad::new(out)
    } else {
        BinloggedLoad::as_dumped(out)
    };
    let read = match reader::read_backup(
        repo.store(),
        m,
        dk,
        Depth::Full,
        parallel,
        progress,
        &mut sink,
    )
    .await
    {
        Ok(read) => sink.finish().await.map(|()| read),
        Err(e) => Err(e),
    };
    drop(sink);
    match read {
        Ok(read) => {
            proc.finish(None).await?;
            Ok(RestoreOutcome {
                backup_id: m.id.clone(),
                plaintext_bytes: read.plaintext_bytes,
                files: None,
                target: conn.describe(),
                prepared: false,
            })
        }
        Err(e @ Error::LocalIo { .. }) => {
            // The client went away: its own complaint is the real cause.
            proc.finish(None).await?;
            Err(e)
        }
        Err(e) => {
            let _ = proc.kill().await;
            Err(e)
        }
    }
}
