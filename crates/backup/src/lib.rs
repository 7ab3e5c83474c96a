//! `mysql-backup`: streaming, compressed, encrypted, verifiable MySQL and MariaDB backups to a
//! filesystem or S3 repository. The library is driven by the CLI and by the operator's Jobs.

pub mod backup;
pub mod codec;
pub mod crypto;
pub mod dumphead;
pub mod error;
pub mod format;
pub mod instance;
pub mod outfile;
pub mod progress;
pub mod reader;
pub mod repo;
pub mod restore;
pub mod source;
pub mod store;
pub mod writer;
pub mod xbstream;

pub use bulwark_retention as retention;
pub use error::{Error, Result};
