//! The subcommands, one module per family: arguments and how each runs over the engine and
//! PITR crates.

pub mod backup;
pub mod drill;
mod drill_checks;
pub mod list;
pub mod pitr;
pub mod prune;
pub mod restore;
