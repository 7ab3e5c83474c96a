//! Automatic failover as a pure decision: from the members' reports, whether the primary is
//! lost, and once it has been for the configured time, which replica takes over.
//!
//! A commit the primary acknowledged is on at least `acks` replicas (semi-sync), so a choice is
//! lossless only when enough replicas report that no set of `acks` silent ones could hold a
//! commit the reporting ones lack: with R replicas, R - acks + 1 must report. Then the chosen
//! replica is one that received every transaction any of them received (by GTID, applied or
//! not: a promotion applies the relay log first), and whose applier has not failed. Otherwise
//! the cluster waits and says why; a human who knows the silent members are gone for good can
//! force the choice with [`FORCE_FAILOVER_ANNOTATION`], which is recorded.

use std::time::Duration;

use bulwark_contract::member::{IoState, MemberStatus};
use bulwark_contract::semisync::SemiSync;
use bulwark_contract::Engine;
use bulwark_contract::Role;

pub use bulwark_api::cluster::FORCE_FAILOVER_ANNOTATION;

use super::roles::{shown, MemberView};

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
        /// The force-failover annotation's value this failover answers, if one was pending
        /// (whether or not the reports alone allowed the choice): it is not taken again.
        request: Option<String>,
    },
}

/// Replicas that must report before a choice is lossless under `semi`: with fewer, `acks`
/// silent replicas could hold an acknowledged commit no reporting replica has. `None` under
/// asynchronous replication, where no number suffices (a commit may be on the primary alone).
pub fn reports_needed(semi: &SemiSync) -> Option<usize> {
    let replicas = semi.members.saturating_sub(1) as usize;
    (semi.waits()).then(|| replicas.saturating_sub(semi.acks as usize) + 1)
}

/// When fewer replicas report than `semi` needs for a lossless choice: that number, and which
/// are silent, as a message.
fn too_few_report(
    semi: &SemiSync,
    primary: &str,
    members: &[MemberView],
    reporting: &[(&str, &MemberStatus)],
) -> Option<(usize, String)> {
    let needed = reports_needed(semi).filter(|n| reporting.len() < *n)?;
    let silent: Vec<&str> = members
        .iter()
        .filter(|m| m.pod != primary && !reporting.iter().any(|(p, _)| *p == m.pod))
        .map(|m| m.pod.as_str())
        .collect();
    let acks = semi.acks;
    Some((
        needed,
        format!(
            "{} of {} replicas report ({} silent or missing), and a commit acknowledged by {acks} \
             replica{} may be on those alone",
            reporting.len(),
            semi.members.saturating_sub(1),
            if silent.is_empty() {
                "the others".to_owned()
            } else {
                silent.join(", ")
            },
            if acks == 1 { "" } else { "s" },
        ),
    ))
}

/// A force-failover request: the pod named by the annotation's value (before any `@suffix`),
/// unless that value already forced a failover (`status.lastFailover.request`).
pub fn forced_request<'a>(
    annotation: Option<&'a str>,
    taken: Option<&str>,
) -> Option<(&'a str, &'a str)> {
    let value = annotation.map(str::trim).filter(|v| !v.is_empty())?;
    if taken == Some(value) {
        return None;
    }
    let pod = value.split('@').next().unwrap_or(value);
    Some((value, pod))
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

/// What a failover decision is made under.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub engine: Engine,
    /// The cluster's semi-synchronous replication (members and acknowledgements).
    pub semi_sync: SemiSync,
    /// The configured time before a takeover (zero: never).
    pub after: Duration,
    /// A pending force-failover request: the annotation's value and the pod it names.
    pub forced: Option<(&'a str, &'a str)>,
}

/// Decides. `lost_for`: how long the primary has been lost (`None`: it is not).
pub fn decide(
    rules: &Rules<'_>,
    primary: &str,
    members: &[MemberView],
    lost_for: Option<Duration>,
) -> Failover {
    let (engine, after) = (rules.engine, rules.after);
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
    let mut forced = None;
    if let Some((needed, short)) = too_few_report(&rules.semi_sync, primary, members, &replicas) {
        let short = format!("{why}; {short}");
        match rules.forced {
            Some((value, pod)) if replicas.iter().any(|(p, _)| *p == pod) => {
                forced = Some((value, pod, short));
            }
            Some((_, pod)) => {
                return Failover::Waiting(format!(
                    "{short}: no replica is promoted until {needed} report; \
                     {FORCE_FAILOVER_ANNOTATION} names {pod}, which is not a reporting replica"
                ))
            }
            None => {
                return Failover::Waiting(format!(
                    "{short}: no replica is promoted until {needed} report, or a human who knows \
                     the silent ones are gone names one with the {FORCE_FAILOVER_ANNOTATION} \
                     annotation"
                ))
            }
        }
    }
    // A promoted replica applies all it received before it takes writes, so members are
    // compared by what they will hold once applied: nobody waits for the slowest applier, and a
    // replica whose applier failed still counts with all it received (it is only no candidate,
    // since it cannot apply). Only a replica that says nothing of what it received is waited
    // for, until its relay log is applied and its GTID set tells.
    if let Some((pod, _)) = replicas.iter().find(|(_, r)| {
        r.replication.as_ref().is_some_and(|rep| {
            rep.received.is_empty()
                && !(rep.relay_applied || (rep.sql_running && rep.sql_caught_up))
        })
    }) {
        return Failover::Waiting(format!(
            "{why}; waiting for {pod} to apply what it received before choosing the new primary"
        ));
    }
    if let Some((pod, r)) = replicas.iter().find(|(_, r)| r.holding(engine).is_none()) {
        return Failover::Waiting(format!(
            "{why}; what {pod} reports it holds does not parse ({}): none is promoted",
            shown(&r.gtid_executed)
        ));
    }
    let holding = |r: &MemberStatus| {
        r.holding(engine)
            .map(|(position, _)| position)
            .unwrap_or_default()
    };
    let applier_failed =
        |r: &MemberStatus| r.replication.as_ref().is_some_and(|rep| rep.sql_errno != 0);
    let complete: Vec<_> = replicas
        .iter()
        .filter(|(pod, _)| forced.as_ref().is_none_or(|(_, to, _)| to == pod))
        .filter(|(_, candidate)| {
            replicas
                .iter()
                .all(|(_, other)| candidate.will_have_all_of(engine, other))
        })
        .collect();
    let best = complete.iter().find(|(_, r)| !applier_failed(r));
    match best {
        Some((pod, r)) => Failover::Promote {
            to: (*pod).to_owned(),
            reason: match &forced {
                None => format!(
                    "{why} for {}s; {pod} has every transaction the replicas received ({})",
                    lost_for.as_secs(),
                    shown(&holding(r))
                ),
                Some((value, _, short)) => format!(
                    "forced by {FORCE_FAILOVER_ANNOTATION}={value}: {short}; {pod} has every \
                     transaction the reporting replicas received ({})",
                    shown(&holding(r))
                ),
            },
            request: rules.forced.map(|(value, _)| value.to_owned()),
        },
        None if !complete.is_empty() => Failover::Waiting(format!(
            "{why}; only {} received every transaction, and {} applier failed (error {}): \
             none is promoted until it applies again",
            complete
                .iter()
                .map(|(pod, _)| *pod)
                .collect::<Vec<_>>()
                .join(", "),
            if complete.len() == 1 { "its" } else { "their" },
            complete
                .iter()
                .filter_map(|(_, r)| r.replication.as_ref().map(|rep| rep.sql_errno))
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )),
        None if forced.is_some() => Failover::Waiting(format!(
            "{why}; {FORCE_FAILOVER_ANNOTATION} names {}, which lacks transactions another \
             reporting replica has: it is not promoted",
            forced.as_ref().map_or("", |(_, pod, _)| *pod)
        )),
        None if replicas.is_empty() => {
            Failover::Waiting(format!("{why}; no replica reports to take over"))
        }
        None => Failover::Waiting(format!(
            "{why}; the replicas' transactions diverge ({}): none is promoted",
            replicas
                .iter()
                .map(|(pod, r)| format!("{pod}: {}", holding(r)))
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
            received: String::new(),
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

    /// `member` having received up to `position`, its applier failed with `sql_errno` (0: not).
    fn received(mut member: MemberView, position: &str, sql_errno: u32) -> MemberView {
        if let Ok(r) = &mut member.report {
            let rep = r.replication.as_mut().expect("a replica");
            rep.received = position.into();
            rep.sql_errno = sql_errno;
            rep.sql_running = sql_errno == 0;
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
                "the replica that received the most is chosen, though another applied more",
                vec![
                    gone("db-0"),
                    received(
                        replica("db-1", "0-100-7", IoState::Connecting, false),
                        "0-100-12",
                        0,
                    ),
                    received(
                        replica("db-2", "0-100-9", IoState::Connecting, true),
                        "0-100-9",
                        0,
                    ),
                ],
                lost(31),
                AFTER,
                Promote("db-1"),
            ),
            (
                "a replica whose applier failed does not block a choice that has its transactions",
                vec![
                    gone("db-0"),
                    received(
                        replica("db-1", "0-100-7", IoState::Connecting, false),
                        "0-100-9",
                        1062,
                    ),
                    received(
                        replica("db-2", "0-100-9", IoState::Connecting, true),
                        "0-100-9",
                        0,
                    ),
                ],
                lost(31),
                AFTER,
                Promote("db-2"),
            ),
            (
                "the only replica that received everything cannot apply it: nobody",
                vec![
                    gone("db-0"),
                    received(
                        replica("db-1", "0-100-7", IoState::Connecting, false),
                        "0-100-12",
                        1062,
                    ),
                    received(
                        replica("db-2", "0-100-9", IoState::Connecting, true),
                        "0-100-9",
                        0,
                    ),
                ],
                lost(31),
                AFTER,
                Waiting(
                    "only db-1 received every transaction, and its applier failed (error 1062)",
                ),
            ),
            (
                "a replica that says nothing of what it received and whose applier failed with \
                 its relay log unapplied makes the choice wait (its relay log may hold the only \
                 copy)",
                vec![
                    gone("db-0"),
                    received(
                        replica("db-1", "0-100-7", IoState::Connecting, false),
                        "",
                        1062,
                    ),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                lost(31),
                AFTER,
                Waiting("waiting for db-1 to apply"),
            ),
            (
                "a received position that does not parse makes the choice wait",
                vec![
                    gone("db-0"),
                    received(
                        replica("db-1", "0-100-7", IoState::Connecting, false),
                        "0-100-x",
                        0,
                    ),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                lost(31),
                AFTER,
                Waiting("what db-1 reports it holds does not parse"),
            ),
            (
                "a replica still applying that says nothing of what it received makes the choice \
                 wait",
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
            // Every replica of these clusters is in the views, one acknowledgement each.
            let replicas = members.iter().filter(|m| m.pod != "db-0").count();
            let rules = Rules {
                after,
                ..rules(replicas, 1, None)
            };
            check(name, &decide(&rules, "db-0", &members, lost_for), &want);
        }
    }

    fn rules(
        replicas: usize,
        acks: u32,
        forced: Option<(&'static str, &'static str)>,
    ) -> Rules<'static> {
        Rules {
            engine: Engine::MariaDb,
            semi_sync: SemiSync {
                acks,
                timeout: None,
                members: replicas as u32 + 1,
            },
            after: AFTER,
            forced,
        }
    }

    fn check(name: &str, got: &Failover, want: &Expect) {
        match (want, got) {
            (Healthy, Failover::Healthy) => {}
            (Waiting(needle), Failover::Waiting(reason)) if reason.contains(needle) => {}
            (Promote(pod), Failover::Promote { to, .. }) if to == pod => {}
            _ => panic!("{name}: expected {want:?}, got {got:?}"),
        }
    }

    /// A member of the primary's side of a cut: no report reaches the operator.
    fn silent(pod: &str) -> MemberView {
        MemberView {
            labelled: Some(Role::Replica),
            ..gone(pod)
        }
    }

    #[test]
    fn a_choice_waits_until_no_silent_replica_can_hold_an_acknowledged_commit() {
        // Name, replicas in the spec, acknowledgements, a force request, the members, the
        // expected decision.
        type QuorumCase = (
            &'static str,
            usize,
            u32,
            Option<(&'static str, &'static str)>,
            Vec<MemberView>,
            Expect,
        );
        let cases: Vec<QuorumCase> = vec![
            (
                "{primary, db-1} cut from {operator, db-2}: db-1 may hold acknowledged commits",
                2,
                1,
                None,
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    replica("db-2", "0-100-129", IoState::Connecting, true),
                ],
                Waiting("1 of 2 replicas report (db-1 silent or missing)"),
            ),
            (
                "a replica whose pod is gone counts as silent",
                2,
                1,
                None,
                vec![
                    gone("db-0"),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                Waiting("1 of 2 replicas report (the others silent or missing)"),
            ),
            (
                "every replica reports: the most advanced",
                2,
                1,
                None,
                vec![
                    gone("db-0"),
                    replica("db-1", "0-100-485", IoState::Connecting, true),
                    replica("db-2", "0-100-129", IoState::Connecting, true),
                ],
                Promote("db-1"),
            ),
            (
                "four replicas, two acknowledgements: three reporting suffice",
                4,
                2,
                None,
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                    replica("db-3", "0-100-7", IoState::Connecting, true),
                    replica("db-4", "0-100-8", IoState::Connecting, true),
                ],
                Promote("db-2"),
            ),
            (
                "four replicas, two acknowledgements: two reporting do not",
                4,
                2,
                None,
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    silent("db-2"),
                    replica("db-3", "0-100-9", IoState::Connecting, true),
                    replica("db-4", "0-100-8", IoState::Connecting, true),
                ],
                Waiting("no replica is promoted until 3 report"),
            ),
            (
                "asynchronous replication: the reporting replicas decide (writes may be lost)",
                2,
                0,
                None,
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                Promote("db-2"),
            ),
            (
                "forced: the named reporting replica, recorded",
                2,
                1,
                Some(("db-2", "db-2")),
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                Promote("db-2"),
            ),
            (
                "forced to a silent replica: nothing",
                2,
                1,
                Some(("db-1", "db-1")),
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                ],
                Waiting("until 2 report; mysql.bulwark.dev/force-failover names db-1, which is not a reporting replica"),
            ),
            (
                "forced to a replica that lacks what another reporting one has: nothing",
                3,
                1,
                Some(("db-3@2", "db-3")),
                vec![
                    gone("db-0"),
                    silent("db-1"),
                    replica("db-2", "0-100-9", IoState::Connecting, true),
                    replica("db-3", "0-100-7", IoState::Connecting, true),
                ],
                Waiting("names db-3, which lacks transactions"),
            ),
        ];
        for (name, replicas, acks, forced, members, want) in cases {
            let got = decide(&rules(replicas, acks, forced), "db-0", &members, lost(31));
            check(name, &got, &want);
            if let (
                Some((value, _)),
                Failover::Promote {
                    request, reason, ..
                },
            ) = (forced, &got)
            {
                assert_eq!(request.as_deref(), Some(value), "{name}");
                assert!(reason.starts_with("forced by"), "{name}: {reason}");
            }
        }
    }

    #[test]
    fn a_force_request_is_taken_once() {
        assert_eq!(forced_request(Some("db-2"), None), Some(("db-2", "db-2")));
        assert_eq!(
            forced_request(Some("db-2@2"), Some("db-2")),
            Some(("db-2@2", "db-2"))
        );
        assert_eq!(forced_request(Some("db-2"), Some("db-2")), None);
        assert_eq!(forced_request(Some(" "), None), None);
        assert_eq!(forced_request(None, None), None);
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
