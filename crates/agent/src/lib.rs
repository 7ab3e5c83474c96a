//! `bulwark-agent`: what runs inside each MySQL pod of a cluster. `init` writes the per-pod
//! server settings, `bootstrap` restores a new cluster's datadir from a backup, and the `agent`
//! sidecar serves the health endpoints and keeps accounts, role and replication as the pod's
//! labels say. Backups and restores go through the engine (`bulwark-engine`) and point-in-time
//! recovery (`bulwark-pitr`); what the operator and this crate must agree on lives in
//! `bulwark-contract`.

pub mod agent;
pub mod bootstrap;
pub mod cli;
pub mod clone;
pub mod exporter;
pub mod fence;
pub mod files;
pub mod http;
pub mod init;
pub mod labels;
pub mod orders;
pub mod pending;
pub mod restored;
pub mod seed;
pub mod sql;
pub mod topology;
