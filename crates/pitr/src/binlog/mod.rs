//! MariaDB binary log events as the archive handles them: raw event framing and checksums
//! ([`event`]), GTID positions ([`position`]), the grouping of a replication stream into whole
//! transactions ([`assemble`]) and their rewriting to another server's GTIDs ([`rebase`]).
//! Pure: no I/O, so every rule is table-tested.

pub mod assemble;
pub mod event;
pub mod position;
pub mod rebase;
pub mod runs;

pub use assemble::{Assembler, Step, Transaction};
pub use event::{EventError, RawEvent};
pub use position::{Gtid, GtidPos};
pub use rebase::Rebase;
pub use runs::GtidRun;
