//! MariaDB binary log events as the archive handles them: raw event framing and checksums
//! ([`event`]), GTID positions ([`position`]), the grouping of a replication stream into whole
//! transactions ([`assemble`]), their rewriting to another server's GTIDs ([`rebase`]) and
//! into one statement per row event for replay ([`split`]).
//! Pure but for one edge: a transaction too large for memory waits in a temporary file
//! ([`crate::spool`]); every rule is table-tested.

pub mod assemble;
pub mod event;
pub mod position;
pub mod rebase;
pub mod runs;
pub mod split;

pub use assemble::{Assembler, Step, Transaction};
pub use event::{EventError, RawEvent};
pub use position::{Gtid, GtidPos};
pub use rebase::Rebase;
pub use runs::GtidRun;
