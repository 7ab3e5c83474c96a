//! Whose lease a replica renews (`bulwark_contract::follow`): the primary it receives from, as
//! its last pass saw it. Only a replica whose receiver runs and whose agent reaches the
//! primary's server (the operator's own test of "receiving") renews, only a member's pod (a
//! replica still pointed at the primary Service knows no member to name), and only from a
//! fresh pass: an agent whose passes are stuck says nothing rather than something old.

use std::time::Duration;

use bulwark_contract::member::MemberStatus;
use bulwark_contract::Role;

/// Oldest pass a renewal is sent on: three intervals, as a report is.
pub const FRESH: Duration = Duration::from_secs(3);

/// A renewal to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The primary's pod.
    pub primary: String,
    /// Its agent's address (`host:port`).
    pub addr: String,
    pub epoch: u64,
}

/// The renewal this member sends, if any, given its last report and that report's age.
pub fn renewal(report: Option<&MemberStatus>, age: Duration) -> Option<Renewal> {
    let r = report.filter(|_| age <= FRESH)?;
    if r.role != Some(Role::Replica) {
        return None;
    }
    let rep = r.replication.as_ref().filter(|rep| rep.receiving())?;
    // A member's pod is `<pod>.<cluster>-headless` (the operator's role orders name it so);
    // the primary Service's name, or an address, names no member.
    let (pod, service) = rep.source_host.split_once('.')?;
    let headless = service
        .split('.')
        .next()
        .is_some_and(|s| s.ends_with("-headless"));
    (!pod.is_empty() && headless).then(|| Renewal {
        primary: pod.to_owned(),
        addr: format!("{}:{}", rep.source_host, bulwark_contract::ports::AGENT),
        epoch: r.epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_contract::member::{IoState, MemberReplication};
    use bulwark_contract::Engine;

    fn report(role: Role, host: &str, io: IoState, unreachable: Option<u64>) -> MemberStatus {
        MemberStatus {
            role: Some(role),
            epoch: 4,
            ready: true,
            reason: String::new(),
            engine: Engine::MariaDb,
            read_only: true,
            super_read_only: false,
            gtid_executed: "0-1-5".into(),
            gtid_history: String::new(),
            semi_sync_wait: false,
            semi_sync_clients: 0,
            replication: Some(MemberReplication {
                source_host: host.into(),
                source_port: 3306,
                io,
                sql_running: true,
                relay_applied: true,
                sql_caught_up: true,
                io_errno: 0,
                sql_errno: 0,
                lag_seconds: Some(0),
                received: String::new(),
                source_unreachable_seconds: unreachable,
                source_heard_ms: None,
            }),
            writes_held: false,
            handover_pending: false,
            clone_port: 0,
            age_ms: 0,
            takes_follows: true,
            followed_ms: None,
        }
    }

    #[test]
    fn only_a_fresh_receiving_replica_renews_the_pod_it_follows() {
        use IoState::*;
        let pod = "quay-0.quay-headless";
        let now = Duration::ZERO;
        let want = Some(Renewal {
            primary: "quay-0".into(),
            addr: "quay-0.quay-headless:9081".into(),
            epoch: 4,
        });
        let cases = [
            (
                "receiving",
                Some(report(Role::Replica, pod, Running, None)),
                now,
                want.clone(),
            ),
            (
                "the primary's server failed once from its agent",
                Some(report(Role::Replica, pod, Running, Some(2))),
                now,
                want,
            ),
            (
                "its agent has not reached the primary's server for a while",
                Some(report(Role::Replica, pod, Running, Some(4))),
                now,
                None,
            ),
            (
                "connecting",
                Some(report(Role::Replica, pod, Connecting, None)),
                now,
                None,
            ),
            (
                "through the primary Service",
                Some(report(Role::Replica, "quay-primary", Running, None)),
                now,
                None,
            ),
            (
                "an address",
                Some(report(Role::Replica, "10.244.1.3", Running, None)),
                now,
                None,
            ),
            (
                "a primary renews nobody",
                Some(report(Role::Primary, pod, Running, None)),
                now,
                None,
            ),
            (
                "an old pass",
                Some(report(Role::Replica, pod, Running, None)),
                Duration::from_secs(4),
                None,
            ),
            ("no report", None, now, None),
        ];
        for (name, report, age, want) in cases {
            assert_eq!(renewal(report.as_ref(), age), want, "{name}");
        }
    }
}
