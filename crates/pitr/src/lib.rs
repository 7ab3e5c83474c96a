//! Point-in-time recovery on top of the backup engine (`bulwark-engine`): MariaDB binary log
//! events as the archive handles them (`binlog`, pure), the binlog archive itself, streamed over
//! the replication protocol into segments stored like backups, with its recovery windows,
//! replay and housekeeping (`archive`), and the repository-wide operations that must see both
//! backups and segments: retention (`prune`) and key rotation (`rotate`). Transactions and segments of any size wait
//! in temporary files beyond a memory bound (`spool`).

pub mod archive;
pub mod binlog;
pub mod error;
pub mod prune;
pub mod rotate;
pub mod spool;

pub use bulwark_retention as retention;
pub use error::{Error, Result};
