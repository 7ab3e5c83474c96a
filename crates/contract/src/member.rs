//! What a server pod's agent reports about its server at `GET /status`, for the operator's
//! clustering decisions: one line of JSON, from the agent's last pass. Nothing secret: GTID
//! sets, thread states and error numbers (not error texts, which can quote row values).

use serde::{Deserialize, Serialize};

use crate::gtid;
use crate::{Engine, Role};

/// Path of the report on the agent's port.
pub const STATUS_PATH: &str = "/status";
/// Query asking for a report from a pass that began after the request (`/status?fresh`).
pub const FRESH_QUERY: &str = "fresh";

/// One member's state.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The role the agent acts on (its pod's label or the operator's order, whichever is
    /// newer), `None` while unknown.
    pub role: Option<Role>,
    /// The epoch of that role (`order`).
    #[serde(default)]
    pub epoch: u64,
    /// The agent's readiness and its reason, as `/readyz` answers.
    pub ready: bool,
    pub reason: String,
    /// The server's engine (`flavor` on the wire).
    #[serde(rename = "flavor")]
    pub engine: Engine,
    pub read_only: bool,
    /// MySQL only; false on MariaDB.
    pub super_read_only: bool,
    /// What the server has logged by GTID (`gtid_binlog_pos` on MariaDB, `gtid_executed` on
    /// MySQL).
    pub gtid_executed: String,
    /// MariaDB's `gtid_binlog_state`: the last GTID of every server in every domain of its
    /// binary log, which shows a transaction another member has and it lacks where one
    /// position per domain cannot (empty on MySQL).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gtid_history: String,
    /// The server waits for semi-sync acknowledgements of its commits.
    pub semi_sync_wait: bool,
    /// Replicas connected to it with semi-sync.
    pub semi_sync_clients: u32,
    /// Its replication, `None` when none is configured.
    pub replication: Option<MemberReplication>,
    /// A demoted primary's agent holds every commit while clients move to the new primary:
    /// the pod must not stop now (its lock would go with the agent, and a client still routed
    /// here could commit what no other member has).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub writes_held: bool,
    /// Its pod's preStop hooks wait for its role to be handed over (the agent's mark,
    /// `paths::HANDOVER_FILE`): a deleted primary pod whose role the operator may hand over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handover_pending: bool,
    /// The port its agent serves copies of its data on (`clone`), 0 when it does not.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clone_port: u16,
    /// Milliseconds since the pass this report comes from.
    pub age_ms: u64,
    /// Its agent takes lease renewals from its replicas (`crate::follow`): the operator asks
    /// the primary's replicas for them only then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub takes_follows: bool,
    /// Milliseconds since this member's agent last renewed (or tried to renew) its primary's
    /// lease, as of the answer; counted from the agent's start when it has not since, since
    /// the process before may have. `None` from an agent that renews nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub followed_ms: Option<u64>,
}

/// State of a replica's receiving thread.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IoState {
    /// Connected and receiving.
    Running,
    /// Trying to connect.
    Connecting,
    /// Stopped.
    Stopped,
}

/// State of a member's replication.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MemberReplication {
    pub source_host: String,
    pub source_port: u16,
    /// Receiving thread.
    pub io: IoState,
    pub sql_running: bool,
    /// Everything received is applied.
    pub relay_applied: bool,
    /// The applier has read the whole relay log.
    pub sql_caught_up: bool,
    pub io_errno: u32,
    pub sql_errno: u32,
    pub lag_seconds: Option<u64>,
    /// What its receiver has written to the relay log, applied or not (MariaDB's
    /// `Gtid_IO_Pos`, MySQL's `Retrieved_Gtid_Set`): a failover compares what members
    /// received, since a promoted replica applies its relay log before it takes writes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub received: String,
    /// Seconds since this replica's agent began failing to reach its primary's server over a
    /// fresh connection (each pass it reads the primary's position, while its applier runs and
    /// its receiver runs or connects: from the start of the first read that got no answer, or
    /// none within a second), as of the answer; `None` while it reaches it, or when it does not
    /// look. A receiver whose
    /// stream died says it runs until
    /// `slave_net_timeout` has passed; a fresh connection that fails shows at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_unreachable_seconds: Option<u64>,
    /// Milliseconds since this replica's agent last had an answer from its primary's server
    /// (the end of its last read of the primary's position that the server answered, an error
    /// included), as of the answer;
    /// `None` while it does not look, or has had no answer from this primary at this epoch.
    /// The operator counts a lost primary's silence from the latest such answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_heard_ms: Option<u64>,
}

/// How long a replica's agent must have failed to reach its primary before the replica no
/// longer counts as receiving from it, whatever its receiver says: a read left unanswered for
/// the whole of its time (3 s), so that one lost connection setup (sent again after 1 s) does
/// not count.
pub const SOURCE_UNREACHABLE_AFTER_SECONDS: u64 = 3;

impl MemberReplication {
    /// Whether this replica receives from its primary: its receiver runs and, as far as its
    /// agent can tell, the primary's server is reachable from it.
    pub fn receiving(&self) -> bool {
        self.io == IoState::Running
            && self
                .source_unreachable_seconds
                .is_none_or(|s| s < SOURCE_UNREACHABLE_AFTER_SECONDS)
    }
}

fn is_zero(port: &u16) -> bool {
    *port == 0
}

impl MemberStatus {
    /// Whether this member has every transaction `other` has logged.
    pub fn has_all_of(&self, engine: Engine, other: &MemberStatus) -> bool {
        gtid::within_history(
            engine,
            &other.gtid_executed,
            &self.gtid_executed,
            &self.gtid_history,
        )
    }

    /// What this member holds once it has applied everything it received: its position (or
    /// set) and, on MariaDB, its history. `None` when what it reports does not parse.
    pub fn holding(&self, engine: Engine) -> Option<(String, String)> {
        let received = self
            .replication
            .as_ref()
            .map_or("", |r| r.received.as_str());
        Some((
            gtid::with_received(engine, &self.gtid_executed, received)?,
            gtid::history_with_received(engine, &self.gtid_history, received)?,
        ))
    }

    /// One line of JSON.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses what `/status` answered.
    pub fn from_line(line: &str) -> Result<MemberStatus, serde_json::Error> {
        serde_json::from_str(line.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_on_one_line() {
        let s = MemberStatus {
            role: Some(Role::Replica),
            epoch: 3,
            ready: true,
            reason: "replica: replicating from quay-primary:3306, 0s behind".into(),
            engine: Engine::MariaDb,
            read_only: true,
            super_read_only: false,
            gtid_executed: "0-100-42".into(),
            gtid_history: "0-100-42,0-101-7".into(),
            semi_sync_wait: false,
            semi_sync_clients: 0,
            replication: Some(MemberReplication {
                source_host: "quay-primary".into(),
                source_port: 3306,
                io: IoState::Running,
                sql_running: true,
                relay_applied: true,
                sql_caught_up: true,
                io_errno: 0,
                sql_errno: 0,
                lag_seconds: Some(0),
                received: String::new(),
                source_unreachable_seconds: None,
                source_heard_ms: None,
            }),
            writes_held: true,
            handover_pending: false,
            clone_port: 9082,
            age_ms: 150,
            takes_follows: false,
            followed_ms: None,
        };
        let line = s.to_line();
        assert!(line.contains("\"writesHeld\":true"), "{line}");
        assert!(!line.contains('\n'));
        assert!(line.contains("\"gtidExecuted\":\"0-100-42\""), "{line}");
        // The wire keeps the names every release has sent.
        for field in [
            "\"role\":\"replica\"",
            "\"flavor\":\"mariadb\"",
            "\"io\":\"running\"",
        ] {
            assert!(line.contains(field), "{field} in {line}");
        }
        assert_eq!(MemberStatus::from_line(&line).unwrap(), s);
    }
}
