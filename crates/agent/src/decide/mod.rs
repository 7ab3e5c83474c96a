//! The agent's pure core: from what a pass read (labels, orders, the server's variables and
//! replication row) to the one action it takes, the SQL of each action, and the report the
//! operator reads. Nothing here does I/O, and nothing imports [`crate::run`] (the layering test
//! checks the imports), so every rule is a table test.

pub mod caught_up;
pub mod follow;
pub mod handover;
pub mod labels;
pub mod lease;
pub mod report;
pub mod restored;
pub mod sql;
pub mod stale_dumps;
pub mod topology;
pub mod watchdog;
