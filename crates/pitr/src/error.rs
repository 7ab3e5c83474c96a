//! Errors of archiving, replay, prune and rewrap: the engine's, and those only point-in-time
//! recovery has. Each names what failed; the reporter prints the chain (`chain`).

pub use bulwark_engine::error::chain;

use crate::binlog::assemble::AssembleError;

/// Errors of point-in-time recovery and the repository-wide operations.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine failed (storage, keys, servers, tools).
    #[error(transparent)]
    Engine(#[from] bulwark_engine::Error),
    #[error("failed to stream binary logs from {target}")]
    StreamBinlog {
        target: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to archive the binlog stream of {target}")]
    ArchiveStream {
        target: String,
        #[source]
        source: AssembleError,
    },
    #[error("binlog archiving needs {0}")]
    ArchiveUnsupported(String),
    #[error("archived binlog segment {id} is damaged: {reason}")]
    DamagedSegment { id: String, reason: String },
    #[error(
        "archived binlog segment {id} is damaged: {}",
        bulwark_engine::authenticate::ManifestRefusal::Unsigned
    )]
    UnsignedSegment { id: String },
    #[error("server {server} lacks archived transactions up to {archived} (it is at {server_at}): its history is not the archive's; archive it as a new timeline from {branch_at} with --branch-on-divergence, or into another archive")]
    Diverged {
        server: String,
        archived: String,
        server_at: String,
        branch_at: String,
    },
    #[error("archived binlog segment {id} is on another branch of history than the one being restored: {reason}")]
    OtherBranch { id: String, reason: String },
    #[error("archive {archive} has {count} segment(s) written before manifests were authenticated: sign them by re-wrapping the repository with the same key, then start the archiver again")]
    ArchiveUnsigned { archive: String, count: usize },
    #[error("failed to restore to a point in time: {0}")]
    PointInTime(String),
    #[error("failed to hold binary logs in a temporary file under {dir}")]
    Spool {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A temporary file of the spool failed.
    pub fn spool(source: std::io::Error) -> Error {
        Error::Spool {
            dir: std::env::temp_dir().display().to_string(),
            source,
        }
    }
}

impl From<bulwark_engine::crypto::KeyError> for Error {
    fn from(e: bulwark_engine::crypto::KeyError) -> Self {
        Error::Engine(e.into())
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
