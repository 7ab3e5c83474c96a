//! The agent's I/O side. The sidecar: `server` (configured by `config`) runs passes (`pass`)
//! that `observe` the server and `apply` what [`crate::decide`] names, with the passwords of
//! `credentials`, what a bootstrap left (`restoring`) and its failures as `error`; it
//! [`fence`]s a demoted primary (or one whose [`lease`] lapsed), takes [`orders`], and serves
//! [`http`] endpoints, the exporter's [`metrics`] and [`clone`]s; a replica reads its
//! `primary_position` (a pass waits briefly for each read), and `stale_dumps` ends the dump
//! threads of replicas cut off, and `watchdog` keeps the server's own guard on the lease (its stamp moved between passes by
//! `stamp_keeper`). The subcommands that prepare a datadir before mysqld starts: [`init`] (with the exporter's option file, [`exporter`]),
//! [`bootstrap`] (restore), [`seed`], and [`pending`] (the logical load a bootstrap leaves).
//! Files the agent keeps go through [`files`].

mod apply;
pub mod bootstrap;
pub mod clone;
mod config;
mod credentials;
mod error;
pub mod exporter;
pub mod fence;
pub mod files;
mod follow;
mod handover;
pub mod http;
pub mod init;
pub mod lease;
mod lease_follow;
pub mod metrics;
mod observe;
pub mod orders;
mod pass;
pub mod pending;
mod primary_position;
mod restoring;
pub mod seed;
mod server;
mod stale_dumps;
mod stamp_keeper;
mod watchdog;

pub use config::AgentConfig;
pub use credentials::read_secret;
pub use error::AgentError;
pub use server::run;
