//! `mysql-backup`: streaming, compressed, encrypted, verifiable MySQL and MariaDB backups to a
//! filesystem or S3 repository. The library is driven by its CLI (also in the operator's backup
//! Jobs) and by the in-pod agent; it knows nothing of Kubernetes.

pub mod archive;
pub mod backup;
pub mod binlog;
pub mod cli;
pub mod codec;
pub mod crypto;
pub mod dumphead;
pub mod error;
pub mod format;
pub mod outfile;
pub mod progress;
pub mod prune;
pub mod reader;
pub mod repo;
pub mod report;
pub mod restore;
pub mod rotate;
pub mod series;
pub mod source;
pub mod store;
pub mod writer;
pub mod xbstream;

pub use bulwark_retention as retention;
pub use error::{Error, Result};
