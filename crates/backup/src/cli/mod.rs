//! What the `mysql-backup` and `bulwark-agent` command lines share: argument groups, logging
//! and output helpers. The commands themselves live in the binaries.

pub mod args;
pub mod output;
