//! What the binlog archiver reports at `GET /status` (port [`crate::ports::ARCHIVER`]) for the
//! operator's cluster status, condition and metric: how far the archive reaches, how far behind
//! it is, its gaps and the recovery window of the newest continuous run. Nothing secret.

use serde::{Deserialize, Serialize};

/// Path of the report on the archiver's port.
pub const STATUS_PATH: &str = "/status";

/// The archiver's state.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    /// The archive written.
    pub archive: String,
    /// Whether a replication stream is open to the server.
    pub streaming: bool,
    /// Why not, when it is not (one line, no secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// GTID position after the last committed transaction.
    pub through: String,
    /// Commit stamp of the last committed transaction (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
    /// Seconds the archive may be behind the server: 0 while it holds everything the server
    /// sent; else since the oldest transaction received but not yet committed, or since the
    /// stream was last known to be current.
    pub lag_seconds: f64,
    /// Number of gaps in the archive.
    pub gaps: u32,
    /// Where the newest gap resumed (GTID position), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap_resumed_at: Option<String>,
    /// The earliest point a restore can reach continuously up to [`Self::recoverable_to`]:
    /// the consistent point (RFC 3339 time) of the oldest backup whose window reaches the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from: Option<String>,
    /// The backup that point belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_from_backup: Option<String>,
    /// The newest backup the archive continues to its end: the base of the current window,
    /// which retention never removes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_base_backup: Option<String>,
    /// The latest point a restore can reach (the last committed transaction's stamp), when a
    /// backup's window reaches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_to: Option<String>,
    /// The timeline the archive follows now: a new one each time another server answers or a
    /// failover left archived transactions behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<u32>,
    /// Where that timeline began (GTID position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_began_at: Option<String>,
    /// The timeline it branched from, when that one went on past where this one began: its
    /// transactions after that point are not in the history restored now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branched_from: Option<u32>,
    /// How far the branch left behind reaches (GTID position): its transactions stay
    /// archived, restorable by their GTIDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_behind_through: Option<String>,
    /// Every branch a timeline left behind, oldest first (the newest [`MAX_LOST_BRANCHES`]):
    /// what earlier failovers lost stays findable after later ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_branches: Vec<LostBranch>,
}

/// How many lost branches a report names.
pub const MAX_LOST_BRANCHES: usize = 10;

/// Transactions archived on one timeline that the next one did not take (a failover lost them).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LostBranch {
    /// The timeline that went on without them.
    pub timeline: u32,
    /// Where it began (GTID position): the point the branches share.
    pub began_at: String,
    /// The timeline holding them.
    pub branched_from: u32,
    /// How far they reach (GTID position): restoring to it recovers them.
    pub through: String,
}
