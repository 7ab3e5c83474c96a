//! The partial-load mark: what a logical bootstrap's load writes on the new primary before it
//! loads anything (and so on every member that replicates it), and removes once the load is
//! whole. The agent reads it to load again what a member holds only part of; `mysql-backup
//! backup` refuses a source that holds it, since a backup of it would be partial.

/// The schema holding the mark; it exists only while a load runs.
pub const PARTIAL_LOAD_SCHEMA: &str = "bulwark_bootstrap";

/// The mark's table, in [`PARTIAL_LOAD_SCHEMA`]; its comment names the load (the pending
/// restore, as JSON).
pub const PARTIAL_LOAD_TABLE: &str = "partial_load";
