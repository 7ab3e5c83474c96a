//! The engine's error type: one variant per action that can fail, plus a helper that renders a
//! whole cause chain on one line.

pub use crate::chain::chain;
use crate::crypto::KeyError;
use crate::format::Method;
use crate::store::StoreError;

/// Errors of backup, restore, verify and prune.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to open repository")]
    OpenRepository(#[source] StoreError),
    #[error("failed to list repository")]
    ListRepository(#[source] StoreError),
    #[error("failed to read {key}")]
    ReadObject {
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("failed to read the manifest of backup {id}")]
    ReadManifest {
        id: String,
        #[source]
        source: StoreError,
    },
    #[error("manifest of backup {id} is damaged: {reason}")]
    DamagedManifest { id: String, reason: String },
    #[error("backup {0} does not exist (no manifest)")]
    NoSuchBackup(String),
    #[error("the repository holds no complete backup")]
    NoBackups,
    #[error(
        "backup {id} uses format version {version}, newer than this build reads ({supported})"
    )]
    UnsupportedFormat {
        id: String,
        version: u32,
        supported: u32,
    },
    #[error("failed to use encryption key")]
    Key(#[from] KeyError),
    #[error(transparent)]
    KeyCheck(#[from] crate::authenticate::KeyCheckError),
    /// `evidence`: how the repository is known to be encrypted.
    #[error("the repository is encrypted ({evidence}), and no key was given")]
    KeyRequiredByRepository { key_id: String, evidence: String },
    #[error("backup {id} is encrypted and no key was given")]
    KeyRequired { id: String },
    #[error("failed to connect to the MySQL server at {target}")]
    ConnectServer {
        target: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to query the MySQL server")]
    QueryServer(#[source] Box<mysql_async::Error>),
    #[error("failed to find {wanted} on PATH")]
    ToolNotFound { wanted: String },
    #[error("backup id {0} is already used in the repository; give another one or none")]
    BackupIdTaken(String),
    #[error("refused to run the physical tool: {0}")]
    ToolSeries(String),
    #[error("refused to back up {host}: {when} part of a bootstrap load (schema bulwark_bootstrap), which a backup would take for the data; back it up once the load is over (or, if that schema is not a bootstrap mark, rename it)")]
    PartialLoad { host: String, when: &'static str },
    #[error("the copy was complete, but whether a bootstrap load began on the server meanwhile could not be checked, so it is not kept")]
    CheckPartialLoad(#[source] Box<Error>),
    #[error("failed to start {tool}")]
    StartTool {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the output of {tool}")]
    ReadSource {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{tool} failed ({status}): {stderr_tail}")]
    ToolFailed {
        tool: String,
        status: String,
        stderr_tail: String,
    },
    #[error("{tool} exited without its completion line ({expected:?}): {stderr_tail}")]
    ToolIncomplete {
        tool: String,
        expected: String,
        stderr_tail: String,
    },
    #[error("failed to write segment {segment} of backup {id}")]
    WriteSegment {
        id: String,
        segment: String,
        #[source]
        source: StoreError,
    },
    #[error("failed to write the manifest of backup {id}")]
    WriteManifest {
        id: String,
        #[source]
        source: StoreError,
    },
    #[error("failed to read segment {segment} of backup {id}")]
    ReadSegment {
        id: String,
        segment: String,
        #[source]
        source: StoreError,
    },
    #[error("backup {id} is corrupt: {detail}")]
    Corrupt { id: String, detail: String },
    #[error("failed to extract the xbstream of backup {id}: {detail}")]
    Extract { id: String, detail: String },
    #[error("failed to restore into {target}: {reason}")]
    RestoreTarget { target: String, reason: String },
    #[error("failed to restore into {target}: it is not empty")]
    TargetNotEmpty { target: String },
    #[error("backup {id} is {method}: {}", match method {
        Method::Physical => "it restores into a directory, not into a server",
        Method::Logical => "it restores into a server, not into a directory",
    })]
    WrongRestoreTarget { id: String, method: Method },
    #[error("failed to {action} {path}")]
    LocalIo {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to delete {key}")]
    Delete {
        key: String,
        #[source]
        source: StoreError,
    },
    /// `what`: "backup ID" or "binlog segment ID".
    #[error("{what} is held by {by}: it is left alone")]
    Held { what: String, by: String },
    #[error("{what} is being deleted by {by}")]
    BeingDeleted { what: String, by: String },
    #[error("failed to read the hold {key}")]
    ReadHold {
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("failed to write the hold {key}")]
    WriteHold {
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("interrupted by signal")]
    Interrupted,
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
