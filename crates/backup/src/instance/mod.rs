//! What runs inside each MySQL pod of a cluster: `init` writes the per-pod server settings,
//! `bootstrap` restores a new cluster's datadir from a backup, and the `agent` sidecar serves
//! the health endpoints and keeps accounts, role and replication as the pod's labels say.

pub mod agent;
pub mod bootstrap;
pub mod gtid;
pub mod http;
pub mod init;
pub mod labels;
pub mod sql;
pub mod topology;
