//! Continuous binlog archiving for point-in-time recovery: segments of whole transactions
//! streamed from the server over the replication protocol and stored like backups
//! ([`manifest`]), the chains and recovery windows they give ([`window`]), the archiver loop
//! ([`archiver`]) and the replay of a chain into a server ([`replay`]).

pub mod archiver;
pub mod audit;
pub mod belonging;
pub mod chain;
pub mod compact;
mod connect;
pub mod coverage;
pub mod feed;
mod follow;
pub mod gathering;
pub mod history;
mod housekeeping;
pub mod manifest;
pub mod options;
pub mod positions;
pub mod quiet;
pub mod recover;
pub mod replay;
pub mod resume;
pub mod retain;
pub mod segments;
pub mod select;
pub mod status;
mod vouching;
pub mod window;

pub use manifest::SegmentManifest;
pub use window::{Chain, RecoveryTarget, Window};
