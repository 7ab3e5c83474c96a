//! How the agent sidecar runs: what `bulwark-agent agent` was told on its command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::metrics::MetricsConfig;
use super::pending::PendingRestoreConfig;
use crate::decide::sql::Source;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// mysqld's unix socket.
    pub socket: PathBuf,
    /// Address of the probe server.
    pub listen: SocketAddr,
    /// The downward API labels file.
    pub labels_file: PathBuf,
    /// This pod's name: role orders name the member they are for (`None`: orders refused).
    pub pod_name: Option<String>,
    /// Where accepted role orders are kept (`None`: in memory only).
    pub order_file: Option<PathBuf>,
    /// Directory with the `root`, `replication`, `backup` and `metrics` password files.
    pub credentials_dir: PathBuf,
    /// Where replicas replicate from.
    pub source: Source,
    /// Largest replica lag that is still ready.
    pub max_replica_lag: Duration,
    /// Replicas that must acknowledge each commit once the primary waits (0: asynchronous).
    pub semi_sync_acks: u32,
    /// As the primary, take writes only while holding the operator's lease.
    pub primary_lease: bool,
    /// Time between passes.
    pub interval: Duration,
    /// Time mysqld has to answer a health check.
    pub health_timeout: Duration,
    /// A logical backup to load once the pod is primary.
    pub pending: Option<PendingRestoreConfig>,
    /// The GTID position a physical restore left (`bulwark-agent restore --gtid-file`).
    pub gtid_file: Option<PathBuf>,
    /// Where copies of this member's data are served to new members, and the server's data
    /// directory they are taken from (`None`: no copies served).
    pub clone: Option<(SocketAddr, PathBuf)>,
    /// Where the exporter's `/metrics` are served (`None`: the cluster has no metrics).
    pub metrics: Option<MetricsConfig>,
}
