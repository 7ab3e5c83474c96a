//! `bulwark-agent`: what runs inside each MySQL pod of a cluster. `init` writes the per-pod
//! server settings, `restore` bootstraps a new cluster's datadir from a backup, `seed` copies a
//! running member's data into a new one, and the `agent` sidecar serves the health endpoints
//! and keeps accounts, role and replication as the pod's labels and the operator's orders say.
//!
//! [`decide`] is the pure core (what to do, and the SQL of it), [`run`] every edge that does
//! I/O, [`cli`] the command line. Backups and restores go through the engine
//! (`bulwark-engine`) and point-in-time recovery (`bulwark-pitr`); what the operator and this
//! crate must agree on lives in `bulwark-contract`.

pub mod cli;
pub mod decide;
pub mod run;
