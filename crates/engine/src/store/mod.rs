//! Object storage behind a small trait: whole-object put/get, ranged reads, streaming writes,
//! listing and deletion, with a filesystem and an S3 implementation.

mod fs;
mod s3;

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

pub use fs::FsStore;
pub use s3::{S3Options, S3Store};

/// Errors of the storage layer; `key` is relative to the repository root.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("object {key} does not exist")]
    NotFound { key: String },
    #[error("failed to {action} {key}")]
    Io {
        action: &'static str,
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to {action} {key}")]
    Remote {
        action: &'static str,
        key: String,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error("{url}: {reason}")]
    Open { url: String, reason: String },
    #[error("object {key} is shorter than expected: wanted bytes {start}..{end}, got {got}")]
    ShortRead {
        key: String,
        start: u64,
        end: u64,
        got: u64,
    },
}

impl StoreError {
    /// Whether a write was refused for want of permission (a read-only mount or read-only
    /// credentials), not failed.
    pub fn is_refused_write(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::PermissionDenied
                    || source.kind() == std::io::ErrorKind::ReadOnlyFilesystem
            }
            StoreError::Remote { source, .. } => matches!(
                **source,
                object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
            ),
            _ => false,
        }
    }
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key relative to the repository root, `/`-separated.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time.
    pub last_modified: DateTime<Utc>,
}

/// A repository's storage.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Human description without secrets, e.g. `s3://bucket/prefix`.
    fn describe(&self) -> String;
    /// Stores a small object atomically: readers see all of it or none.
    async fn put(&self, key: &str, data: Bytes) -> Result<(), StoreError>;
    /// Stores a small object only if none is stored under `key`, atomically: of two writers
    /// only one creates it. Whether this call created it.
    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool, StoreError>;
    /// Starts a streamed object that becomes visible only on [`ObjectWriter::finish`].
    async fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StoreError>;
    /// Reads a whole object.
    async fn get(&self, key: &str) -> Result<Bytes, StoreError>;
    /// Reads `range` of an object; a short object is an error.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError>;
    /// Lists objects whose key starts with `prefix`.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, StoreError>;
    /// Deletes an object; an object already gone is not an error.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
}

/// An object being written.
#[async_trait]
pub trait ObjectWriter: Send {
    /// Appends bytes; may wait for earlier uploads to make room (bounded memory).
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError>;
    /// Makes the object durable and visible under its key.
    async fn finish(self: Box<Self>) -> Result<(), StoreError>;
    /// Discards everything written so far.
    async fn abort(self: Box<Self>);
}

/// Whether opening a filesystem repository may create its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Commands that write a backup or the archive: the directory is made when missing.
    Create,
    /// Commands that read (or prune) what is there: a missing directory is a mistyped path,
    /// refused, rather than an empty repository made on the spot.
    Existing,
}

/// Opens a repository given as a path, `file:///path` or `s3://bucket/prefix`.
pub async fn open(
    url: &str,
    s3: &S3Options,
    opening: Opening,
) -> Result<Arc<dyn Store>, StoreError> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(StoreError::Open {
                url: url.into(),
                reason: "no bucket name".into(),
            });
        }
        return Ok(Arc::new(S3Store::new(bucket, prefix, s3)?));
    }
    let path = if let Some(rest) = url.strip_prefix("file://") {
        if !rest.starts_with('/') {
            return Err(StoreError::Open {
                url: url.into(),
                reason: "file:// URLs need an absolute path".into(),
            });
        }
        rest
    } else if url.contains("://") {
        return Err(StoreError::Open {
            url: url.into(),
            reason: "unsupported scheme; use a path, file:///path or s3://bucket/prefix".into(),
        });
    } else {
        url
    };
    if path.is_empty() {
        return Err(StoreError::Open {
            url: url.into(),
            reason: "empty path".into(),
        });
    }
    let path = std::path::Path::new(path);
    if opening == Opening::Existing {
        let refused = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => None,
            Ok(_) => Some("not a directory".to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some("no such directory (a backup or `archive` makes it)".to_owned())
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(reason) = refused {
            return Err(StoreError::Open {
                url: url.into(),
                reason,
            });
        }
    }
    Ok(Arc::new(FsStore::open(path).await?))
}
