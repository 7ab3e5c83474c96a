//! The streaming backup engine: MySQL and MariaDB backups read from the standard tools
//! (`source`), cut into fixed-size chunks, compressed with parallel zstd (`codec`), sealed with
//! AES-256-GCM under envelope keys (`crypto`), digested with SHA-256 and written to a
//! repository on a filesystem or S3 (`store`, `writer`, `repo`) in the format `docs/format.md`
//! describes (`format`); read back, verified and restored (`reader`, `restore`). A backup
//! exists only once its manifest, written last, does.
//!
//! No command line, no HTTP and no Kubernetes here: `mysql-backup` (crate `crates/backup`) and
//! `bulwark-agent` drive it, `bulwark-pitr` builds point-in-time recovery on it, and its errors
//! name what failed, not which flag to pass.

pub mod authenticate;
pub mod backup;
mod chain;
pub mod codec;
pub mod crypto;
pub mod dumphead;
pub mod error;
pub mod format;
pub mod holds;
pub mod outfile;
pub mod progress;
pub mod reader;
pub mod repo;
pub mod report;
pub mod restore;
pub mod scratch;
pub mod series;
pub mod source;
pub mod staging;
pub mod store;
pub mod writer;
pub mod xbstream;

pub use error::{Error, Result};
