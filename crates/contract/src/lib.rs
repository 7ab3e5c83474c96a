//! The contract between the operator and the programs its pods run (`mysql-backup` in backup
//! Jobs, `bulwark-agent` in the server pods): everything both sides must spell the same way.
//! The operator builds command lines with [`command`]; the binaries' own argument parsers are
//! tested against these builders, so a renamed flag fails a test instead of a pod.
//!
//! No Kubernetes and no async runtime here: this crate sits at the bottom of the workspace.

pub mod accounts;
pub mod archive;
pub mod bootstrap;
pub mod clone;
pub mod command;
pub mod drill;
pub mod engine;
pub mod follow;
pub mod gtid;
pub mod ids;
pub mod labels;
pub mod lease;
pub mod member;
pub mod order;
pub mod paths;
pub mod ports;
pub mod result;
pub mod semisync;

pub use accounts::Account;
pub use engine::Engine;
pub use labels::Role;
