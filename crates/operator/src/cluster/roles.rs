//! Whether the pod meant to be the primary may be labelled so: a pod whose agent would make its
//! server writable is first compared, by GTID, with every member that reports; one that lacks
//! transactions another member has (a replaced volume, a pod restored from an old backup) is
//! never made the primary. Pure; the members' reports are read by `members`.

use bulwark_contract::Engine;
use bulwark_contract::Role;

pub use crate::members::MemberView;

/// What to do with the primary's label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrimaryLabel {
    /// Label `candidate` primary (and every other pod replica).
    Assign,
    /// Leave `candidate` without the primary label, for `reason`.
    Withhold(String),
}

/// Decides for `candidate` at `epoch`. `had_primary`: a primary of the cluster has been ready
/// (`status.primarySince`); a new cluster's first primary holds no data to compare.
/// `replaces`: the lost primary a failover chose `candidate` to replace, which is not compared
/// when the choice was lossless (what it alone holds was never acknowledged: `failover::decide`
/// saw every acknowledged commit on a reporting replica) or forced by a human who accepted the
/// loss; waiting for it would keep the cluster without a primary. The others are then compared by what each will hold once it has applied
/// all it received, since a promotion applies the candidate's relay log first, and a replica
/// re-pointed to it keeps what it received only by applying it.
pub fn primary_label(
    engine: Engine,
    candidate: &str,
    epoch: u64,
    had_primary: bool,
    replaces: Option<&str>,
    members: &[MemberView],
) -> PrimaryLabel {
    let Some(me) = members.iter().find(|m| m.pod == candidate) else {
        return PrimaryLabel::Withhold(format!("pod {candidate} does not exist"));
    };
    // Labelled before, by this check or as the first primary; its agent has acted on it.
    if (me.labelled == Some(Role::Primary) && me.labelled_epoch == Some(epoch)) || !had_primary {
        return PrimaryLabel::Assign;
    }
    let mine = match &me.report {
        Ok(r) => r,
        Err(why) => {
            return PrimaryLabel::Withhold(format!(
            "waiting for {candidate}'s agent to report its data before it is made primary: {why}"
        ))
        }
    };
    let mine_held = match replaces.map(|_| mine.holding(engine)) {
        Some(None) => {
            return PrimaryLabel::Withhold(format!(
                "what {candidate} reports it holds does not parse ({}): it is not made primary",
                shown(&mine.gtid_executed)
            ))
        }
        held => held.flatten(),
    };
    for other in members
        .iter()
        .filter(|m| m.pod != candidate && Some(m.pod.as_str()) != replaces)
    {
        let Ok(theirs) = &other.report else { continue };
        let (has_all, theirs_shown, mine_shown) = match &mine_held {
            None => (
                mine.has_all_of(engine, theirs),
                theirs.gtid_executed.clone(),
                mine.gtid_executed.clone(),
            ),
            Some((position, history)) => {
                let held = theirs.holding(engine).map(|(held, _)| held);
                (
                    held.as_ref().is_some_and(|held| {
                        bulwark_contract::gtid::within_history(engine, held, position, history)
                    }),
                    held.unwrap_or_else(|| theirs.gtid_executed.clone()),
                    position.clone(),
                )
            }
        };
        if !has_all {
            return PrimaryLabel::Withhold(format!(
                "{candidate} is not made primary: {} has transactions it lacks ({} has {}, {candidate} has {})",
                other.pod,
                other.pod,
                shown(&theirs_shown),
                shown(&mine_shown),
            ));
        }
    }
    PrimaryLabel::Assign
}

/// Members whose replication stopped on an error, each on one line for the status; one holding
/// transactions the primary lacks (an old primary that committed after it was cut off) is
/// named so: it stays out of the Services (its agent is not ready) and is never made primary
/// over the one that has the cluster's later writes.
pub fn broken_members(engine: Engine, primary: &str, members: &[MemberView]) -> Vec<String> {
    let primary_report = members
        .iter()
        .find(|m| m.pod == primary)
        .and_then(|m| m.report.as_ref().ok());
    members
        .iter()
        .filter(|m| m.pod != primary)
        .filter_map(|m| {
            let r = m.report.as_ref().ok().filter(|r| !r.ready)?;
            let rep = r.replication.as_ref()?;
            let errno = if rep.io_errno != 0 {
                rep.io_errno
            } else {
                rep.sql_errno
            };
            if errno == 0 {
                return None;
            }
            Some(match primary_report {
                Some(p) if !p.has_all_of(engine, r) => format!(
                    "{} has transactions {primary} lacks ({} has {}, {primary} has {}): its \
                     replication stopped with error {errno}; rebuild it from {primary} (delete \
                     its claim and pod)",
                    m.pod,
                    m.pod,
                    shown(&r.gtid_executed),
                    shown(&p.gtid_executed)
                ),
                _ => format!("{}: replication stopped with error {errno}", m.pod),
            })
        })
        .collect()
}

/// A GTID set for a message: `none` when empty.
pub(super) fn shown(gtid: &str) -> &str {
    if gtid.is_empty() {
        "none"
    } else {
        gtid
    }
}

/// A read-only member's report with `gtid`, for the tests of the decisions on reports.
#[cfg(test)]
pub(super) fn sample_report(gtid: &str) -> bulwark_contract::member::MemberStatus {
    bulwark_contract::member::MemberStatus {
        role: None,
        epoch: 0,
        ready: false,
        reason: "role unknown".into(),
        engine: Engine::MariaDb,
        read_only: true,
        super_read_only: false,
        gtid_executed: gtid.into(),
        gtid_history: String::new(),
        semi_sync_wait: false,
        semi_sync_clients: 0,
        replication: None,
        writes_held: false,
        handover_pending: false,
        clone_port: 0,
        age_ms: 0,
        takes_follows: false,
        followed_ms: None,
    }
}

/// A ready member's view, `lag`: a replica that many seconds behind (`None`: no replication),
/// for the tests of the decisions on reports.
#[cfg(test)]
pub(super) fn sample_view(
    pod: &str,
    role: Role,
    epoch: u64,
    read_only: bool,
    lag: Option<u64>,
) -> MemberView {
    let mut r = sample_report("0-1-9");
    r.role = Some(role);
    r.epoch = epoch;
    r.read_only = read_only;
    r.ready = true;
    r.reason = "replica: replicating".into();
    r.replication = lag.map(|l| bulwark_contract::member::MemberReplication {
        source_host: "quay-primary".into(),
        source_port: 3306,
        io: bulwark_contract::member::IoState::Running,
        sql_running: true,
        relay_applied: true,
        sql_caught_up: true,
        io_errno: 0,
        sql_errno: 0,
        lag_seconds: Some(l),
        received: String::new(),
        source_unreachable_seconds: None,
        source_heard_ms: None,
    });
    MemberView {
        pod: pod.into(),
        labelled: Some(role),
        labelled_epoch: Some(epoch),
        report: Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_contract::member::{IoState, MemberReplication, MemberStatus};

    #[test]
    fn members_whose_replication_broke_are_named_with_what_they_have_extra() {
        let replicating = |io_errno: u32, sql_errno: u32| MemberReplication {
            source_host: "db-1.db-headless".into(),
            source_port: 3306,
            io: if io_errno == 0 {
                IoState::Running
            } else {
                IoState::Connecting
            },
            sql_running: sql_errno == 0,
            relay_applied: true,
            sql_caught_up: true,
            io_errno,
            sql_errno,
            lag_seconds: None,
            received: String::new(),
            source_unreachable_seconds: None,
            source_heard_ms: None,
        };
        let view = |pod: &str, gtid: &str, ready: bool, rep: Option<MemberReplication>| {
            let mut r = sample_report(gtid);
            r.ready = ready;
            r.replication = rep;
            member(pod, Some(Role::Replica), Ok(r))
        };
        let mut primary = view("db-1", "0-101-90", true, None);
        if let Ok(r) = &mut primary.report {
            r.gtid_history = "0-100-39,0-101-90".into();
        }
        let members = vec![
            primary,
            // The old primary: its own later transactions, refused by the new primary.
            view("db-0", "0-100-95", false, Some(replicating(1236, 0))),
            view("db-2", "0-101-80", false, Some(replicating(0, 1062))),
            view("db-3", "0-101-90", true, Some(replicating(0, 0))),
            member("db-4", Some(Role::Replica), Err("no answer".into())),
            // An old primary whose one unacknowledged commit is behind the new primary's
            // position: only the new primary's history shows it lacks it.
            view("db-5", "0-100-40", false, Some(replicating(1236, 0))),
            view("db-6", "0-100-39", false, Some(replicating(1236, 0))),
        ];
        let broken = broken_members(Engine::MariaDb, "db-1", &members);
        assert_eq!(broken.len(), 4, "{broken:?}");
        assert!(broken[0].starts_with("db-0 has transactions db-1 lacks (db-0 has 0-100-95, db-1 has 0-101-90): its replication stopped with error 1236"), "{}", broken[0]);
        assert_eq!(broken[1], "db-2: replication stopped with error 1062");
        assert!(
            broken[2].starts_with(
                "db-5 has transactions db-1 lacks (db-5 has 0-100-40, db-1 has 0-101-90)"
            ),
            "{}",
            broken[2]
        );
        assert_eq!(broken[3], "db-6: replication stopped with error 1236");
    }

    fn report(gtid: &str) -> Result<MemberStatus, String> {
        Ok(sample_report(gtid))
    }

    fn member(
        pod: &str,
        labelled: Option<Role>,
        report: Result<MemberStatus, String>,
    ) -> MemberView {
        MemberView {
            pod: pod.into(),
            labelled,
            labelled_epoch: Some(0),
            report,
        }
    }

    /// What a case expects of the primary's label.
    #[derive(Debug)]
    enum Expect {
        Assign,
        /// Withheld, with a reason that contains this.
        Withhold(&'static str),
    }

    /// Name, whether the cluster had a primary, the members, and what is expected.
    type Case = (&'static str, bool, Vec<MemberView>, Expect);

    #[test]
    fn decisions() {
        use PrimaryLabel::*;
        let unreachable = || Err("connection refused".to_owned());
        let cases: Vec<Case> = vec![
            (
                "a new cluster's first primary",
                false,
                vec![member("db-0", None, unreachable())],
                Expect::Assign,
            ),
            (
                "a primary that carries its label keeps it",
                true,
                vec![
                    member("db-0", Some(Role::Primary), unreachable()),
                    member("db-1", Some(Role::Replica), report("0-100-9")),
                ],
                Expect::Assign,
            ),
            (
                "a recreated primary pod with all the data",
                true,
                vec![
                    member("db-0", None, report("0-100-9")),
                    member("db-1", Some(Role::Replica), report("0-100-9")),
                    member("db-2", Some(Role::Replica), report("0-100-7")),
                ],
                Expect::Assign,
            ),
            (
                "a replaced volume comes back empty",
                true,
                vec![
                    member("db-0", None, report("")),
                    member("db-1", Some(Role::Replica), report("0-100-9")),
                ],
                Expect::Withhold(
                    "db-1 has transactions it lacks (db-1 has 0-100-9, db-0 has none)",
                ),
            ),
            (
                "a pod restored from an older backup",
                true,
                vec![
                    member("db-0", None, report("0-100-5")),
                    member("db-1", Some(Role::Replica), unreachable()),
                    member("db-2", Some(Role::Replica), report("0-100-9")),
                ],
                Expect::Withhold("db-2 has transactions it lacks"),
            ),
            (
                "no report from the candidate",
                true,
                vec![
                    member("db-0", None, unreachable()),
                    member("db-1", Some(Role::Replica), report("0-100-9")),
                ],
                Expect::Withhold("waiting for db-0's agent to report its data"),
            ),
            (
                "members that do not report are not compared",
                true,
                vec![
                    member("db-0", None, report("0-100-9")),
                    member("db-1", Some(Role::Replica), unreachable()),
                ],
                Expect::Assign,
            ),
            (
                "a candidate without a pod",
                true,
                vec![member("db-1", Some(Role::Replica), report("0-100-9"))],
                Expect::Withhold("pod db-0 does not exist"),
            ),
        ];
        for (name, had_primary, members, want) in cases {
            let got = primary_label(Engine::MariaDb, "db-0", 0, had_primary, None, &members);
            match (want, &got) {
                (Expect::Assign, Assign) => {}
                (Expect::Withhold(needle), Withhold(reason)) if reason.contains(needle) => {}
                _ => panic!("{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_failovers_choice_is_not_compared_with_the_primary_it_replaces() {
        // db-2 was lost and came back with a commit no replica received (never acknowledged).
        let members = vec![
            member("db-0", Some(Role::Replica), report("0-100-9")),
            member("db-1", Some(Role::Replica), report("0-100-9")),
            member("db-2", Some(Role::Replica), report("0-100-10")),
        ];
        assert_eq!(
            primary_label(Engine::MariaDb, "db-0", 3, true, Some("db-2"), &members),
            PrimaryLabel::Assign
        );
        // What a replica received but has not applied counts: db-0 waits for it.
        let mut received = members.clone();
        if let Ok(r) = &mut received[1].report {
            r.replication = sample_view("db-1", Role::Replica, 0, true, Some(0))
                .report
                .unwrap()
                .replication
                .map(|mut rep| {
                    rep.received = "0-100-11".into();
                    rep
                });
        }
        assert!(matches!(
            primary_label(Engine::MariaDb, "db-0", 3, true, Some("db-2"), &received),
            PrimaryLabel::Withhold(reason) if reason.contains("db-1 has transactions it lacks")
        ));
        // Any other member still counts, and so does db-2 when no failover replaced it.
        assert!(matches!(
            primary_label(Engine::MariaDb, "db-0", 3, true, Some("db-1"), &members),
            PrimaryLabel::Withhold(reason) if reason.contains("db-2 has transactions it lacks")
        ));
        assert!(matches!(
            primary_label(Engine::MariaDb, "db-0", 3, true, None, &members),
            PrimaryLabel::Withhold(_)
        ));
    }

    #[test]
    fn mysql_sets_are_compared_as_sets() {
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let members = vec![
            member("db-0", None, report(&format!("{uuid}:1-10"))),
            member("db-1", None, report(&format!("{uuid}:1-8:10"))),
        ];
        assert_eq!(
            primary_label(Engine::MySql, "db-0", 0, true, None, &members),
            PrimaryLabel::Assign
        );
        let behind = vec![
            member("db-0", None, report(&format!("{uuid}:1-8"))),
            member("db-1", None, report(&format!("{uuid}:1-9"))),
        ];
        assert!(matches!(
            primary_label(Engine::MySql, "db-0", 0, true, None, &behind),
            PrimaryLabel::Withhold(_)
        ));
    }
}
