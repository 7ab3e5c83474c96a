//! Automatic failover as a pure decision: from the members' reports, whether the primary is
//! lost, and once it has been for the configured time, which replica takes over. A replica is
//! chosen only when every reporting replica has applied what it received and the chosen one
//! holds every transaction any of them has (by GTID); otherwise the cluster waits, and says why.

use std::time::Duration;

use bulwark_contract::member::IoState;
use bulwark_contract::Engine;
use bulwark_contract::Role;

use super::roles::MemberView;

/// What to do about the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failover {
    /// The primary is there (or nothing can be known about a takeover).
    Healthy,
    /// The primary is lost; nothing is done yet, for `reason`.
    Waiting(String),
    /// Promote `to`.
    Promote {
        /// The replica's pod.
        to: String,
        /// Why, for the event.
        reason: String,
    },
}

/// Why the primary counts as lost, if it does: its agent gives no report, and no reporting
/// replica is receiving (from it or anyone). A replica still receiving means the old primary's
/// server runs and serves it: only its agent or the path to it failed, and promoting another
/// member would make two primaries.
pub fn primary_lost(primary: &str, members: &[MemberView]) -> Option<String> {
    let why = match members.iter().find(|m| m.pod == primary) {
        None => format!("pod {primary} does not exist"),
        Some(m) => match &m.report {
            Ok(_) => return None,
            Err(e) => format!("{primary} does not report: {e}"),
        },
    };
    let replicas: Vec<_> = members
        .iter()
        .filter(|m| m.pod != primary)
        .filter_map(|m| m.report.as_ref().ok().map(|r| (m, r)))
        .collect();
    if replicas.is_empty() {
        return None;
    }
    if let Some((m, _)) = replicas.iter().find(|(_, r)| {
        r.replication
            .as_ref()
            .is_some_and(|rep| rep.io == IoState::Running)
    }) {
        tracing::debug!(primary, receiving = %m.pod, "primary unreachable but a replica still receives");
        return None;
    }
    Some(why)
}

/// Decides. `lost_for`: how long the primary has been lost (`None`: it is not); `after`: the
/// configured time before a takeover (zero: never).
pub fn decide(
    engine: Engine,
    primary: &str,
    members: &[MemberView],
    lost_for: Option<Duration>,
    after: Duration,
) -> Failover {
    let Some(lost_for) = lost_for else {
        return Failover::Healthy;
    };
    let Some(why) = primary_lost(primary, members) else {
        return Failover::Healthy;
    };
    if after.is_zero() {
        return Failover::Waiting(format!("{why}; automatic failover is off"));
    }
    if lost_for < after {
        // No running count in the message: the status would change every second, and every
        // change wakes the controller again.
        return Failover::Waiting(format!(
            "{why}; a replica takes over once it has been lost for {}s (status.primaryLostSince)",
            after.as_secs()
        ));
    }
    let replicas: Vec<_> = members
        .iter()
        .filter(|m| m.pod != primary && m.labelled == Some(Role::Replica))
        .filter_map(|m| m.report.as_ref().ok().map(|r| (m.pod.as_str(), r)))
        .collect();
    // What a replica received but has not applied is not in its GTID set yet: compare only
    // once every replica has applied all it has.
    if let Some((pod, _)) = replicas.iter().find(|(_, r)| {
        r.replication
            .as_ref()
            .is_some_and(|rep| !(rep.relay_applied || (rep.sql_running && rep.sql_caught_up)))
    }) {
        return Failover::Waiting(format!(
            "{why}; waiting for {pod} to apply what it received before choosing the new primary"
        ));
    }
    let best = replicas.iter().find(|(_, candidate)| {
        replicas
            .iter()
            .all(|(_, other)| candidate.has_all_of(engine, other))
    });
    match best {
        Some((pod, r)) => Failover::Promote {
            to: (*pod).to_owned(),
            reason: format!(
                "{why} for {}s; {pod} has every transaction the replicas have ({})",
                lost_for.as_secs(),
                if r.gtid_executed.is_empty() {
                    "none"
                } else {
                    r.gtid_executed.as_str()
                }
            ),
        },
        None if replicas.is_empty() => {
            Failover::Waiting(format!("{why}; no replica reports to take over"))
        }
        None => Failover::Waiting(format!(
            "{why}; the replicas' transactions diverge ({}): none is promoted",
            replicas
                .iter()
                .map(|(pod, r)| format!("{pod}: {}", r.gtid_executed))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_contract::member::MemberReplication;

    fn replica(pod: &str, gtid: &str, io: IoState, applied: bool) -> MemberView {
        let mut report = super::super::roles::sample_report(gtid);
        report.role = Some(Role::Replica);
        report.replication = Some(MemberReplication {
            source_host: "db-primary".into(),
            source_port: 3306,
            io,
            sql_running: true,
            relay_applied: applied,
            sql_caught_up: applied,
            io_errno: 0,
            sql_errno: 0,
            lag_seconds: None,
        });
        MemberView {
            pod: pod.into(),
            labelled: Some(Role::Replica),
            labelled_epoch: Some(0),
            report: Ok(report),
        }
    }

    fn with_history(mut member: MemberView, history: &str) -> MemberView {
        if let Ok(r) = &mut member.report {
            r.gtid_history = history.into();
        }
        member
    }

    fn gone(pod: &str) -> MemberView {
        MemberView {
            pod: pod.into(),
            labelled: Some(Role::Primary),
            labelled_epoch: Some(0),
            report: Err("connection refused".into()),
        }
    }

    const AFTER: Duration = Duration::from_secs(30);

    fn lost(secs: u64) -> Option<Duration> {
        Some(Duration::from_secs(secs))
    }

    /// What a case expects.
    #[derive(Debug)]
    enum Expect {
        Healthy,
        /// Waiting, with a reason that contains this.
        Waiting(&'static str),
        /// This pod is promoted.
        Promote(&'static str),
    }
    use Expect::*;

    /// Name, members, how long the primary has been lost, the time before a takeover, and the
    /// expected decision.
    type Case = (
        &'static str,
        Vec<MemberView>,
        Option<Duration>,
        Duration,
        Expect,
    );

    #[test]
    fn decisions() {
        let cases: Vec<Case> = vec![
            (
                "a primary that reports is healthy",
                vec![
                    MemberView {
                        report: replica("db-0", "0-100-9", IoState::Stopped, true).report,
                        ..gone("db-0")
                    },
                    replica("db-1", "0-100-9", IoState::Connecting, true),
                ],
                lost(300),
                AFTER,
                Healthy,
            ),
            (
                "not lost while a replica still receives",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-9", IoState::Running, true),
                ],
                lost(300),
                AFTER,
                Healthy,
            ),
            (
                "lost, within the grace",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-9", IoState::Connecting, true),
                ],
                lost(10),
                AFTER,
                Waiting("a replica takes over once it has been lost for 30s"),
            ),
            (
                "failover off",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-9", IoState::Connecting, true),
                ],
                lost(300),
                Duration::ZERO,
                Waiting("automatic failover is off"),
            ),
            (
                "the most advanced replica is promoted",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-7", IoState::Connecting, true),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                lost(31),
                AFTER,
                Promote("db-2"),
            ),
            (
                "a replica still applying makes the choice wait",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-7", IoState::Stopped, false),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                lost(31),
                AFTER,
                Waiting("waiting for db-1 to apply"),
            ),
            (
                "diverging replicas: nobody",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-7,1-101-3", IoState::Connecting, true),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                lost(31),
                AFTER,
                Waiting("diverge"),
            ),
            (
                "a rejoined old primary's unacknowledged commit, behind the position of a \
                 replica that never had it: nobody",
                vec![
                    gone("db-0"),
                    with_history(
                        replica("db-1", "0-101-200", IoState::Connecting, true),
                        "0-100-39,0-101-200",
                    ),
                    with_history(
                        replica("db-2", "0-100-40", IoState::Connecting, true),
                        "0-100-40",
                    ),
                ],
                lost(31),
                AFTER,
                Waiting("diverge"),
            ),
            (
                "histories that agree: the most advanced",
                vec![
                    gone("db-0"),
                    with_history(
                        replica("db-1", "0-101-200", IoState::Connecting, true),
                        "0-100-39,0-101-200",
                    ),
                    with_history(
                        replica("db-2", "0-101-150", IoState::Connecting, true),
                        "0-100-39,0-101-150",
                    ),
                ],
                lost(31),
                AFTER,
                Promote("db-1"),
            ),
            (
                "a deleted primary pod counts as lost",
                vec![replica("db-1", "0-100-9", IoState::Connecting, true)],
                lost(31),
                AFTER,
                Promote("db-1"),
            ),
            (
                "nothing known of the replicas: no takeover",
                vec![
                    gone("db-0"),
                    MemberView {
                        labelled: Some(Role::Replica),
                        labelled_epoch: Some(0),
                        ..gone("db-1")
                    },
                ],
                lost(300),
                AFTER,
                Healthy,
            ),
            (
                "not yet seen lost",
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-9", IoState::Connecting, true),
                ],
                None,
                AFTER,
                Healthy,
            ),
        ];
        for (name, members, lost_for, after, want) in cases {
            let got = decide(Engine::MariaDb, "db-0", &members, lost_for, after);
            match (&want, &got) {
                (Healthy, Failover::Healthy) => {}
                (Waiting(needle), Failover::Waiting(reason)) if reason.contains(needle) => {}
                (Promote(pod), Failover::Promote { to, .. }) if to == pod => {}
                _ => panic!("{name}: expected {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn lost_is_judged_from_the_reports() {
        assert!(
            primary_lost("db-0", &[gone("db-0")]).is_none(),
            "no replica reports"
        );
        assert!(primary_lost(
            "db-0",
            &[gone("db-0"), replica("db-1", "", IoState::Connecting, true)]
        )
        .is_some_and(|w| w.contains("db-0 does not report")));
    }
}
