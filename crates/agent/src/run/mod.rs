//! The agent's I/O side: the sidecar ([`server`] runs [`pass`]es that [`observe`] the server
//! and [`apply`] what [`crate::decide`] names, [`fence`] a demoted primary, take [`orders`]
//! and serve [`http`] endpoints and [`clone`]s), and the subcommands that prepare a datadir
//! before mysqld starts ([`init`], [`bootstrap`], [`seed`]). Files the agent keeps go through
//! [`files`].

mod apply;
pub mod bootstrap;
pub mod clone;
mod config;
mod credentials;
mod error;
pub mod exporter;
pub mod fence;
pub mod files;
pub mod http;
pub mod init;
mod observe;
pub mod orders;
mod pass;
pub mod pending;
mod restoring;
pub mod seed;
mod server;

pub use config::AgentConfig;
pub use credentials::read_secret;
pub use error::AgentError;
pub use server::run;
