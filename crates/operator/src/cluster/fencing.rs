//! The order in which a pass moves the members to the status' primary and epoch, so that two
//! members are never writable at once: every other member is made a replica first (its labels,
//! and a signed order to its agent, whose answer says whether it is read-only now); the primary
//! is given its role only once no other member that reports is writable and the former primary
//! of a switchover has confirmed it is read-only. The data comparison before a promotion is
//! `roles`'. Pure.

use bulwark_contract::member::MemberStatus;
use bulwark_contract::order::Standing;
use bulwark_contract::Role;

use super::roles::MemberView;

/// One member to move: its labels set to `standing`, and an order to its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub pod: String,
    pub standing: Standing,
    /// Set the pod's labels.
    pub label: bool,
    /// Send the order to its agent.
    pub order: bool,
    /// The member's role changes (or it is writable): a demotion that must come before the
    /// primary's promotion. Otherwise only its epoch moves (a replica told of a new primary),
    /// which comes after.
    pub fence: bool,
}

/// `service`: for a replica, the primary Service's host.
fn step(m: &MemberView, role: Role, epoch: u64, service: Option<&str>) -> Option<Step> {
    let standing = Standing { role, epoch };
    let label = m.labelled != Some(role) || m.labelled_epoch != Some(epoch);
    // A replica that replicates through the primary Service (a new cluster's replicas do,
    // their roles given by labels alone) is sent the order that names the primary's own
    // address: its agent then tells a lost primary from a Service without endpoints, and
    // reports it unreachable seconds before its receiver notices. A replica still at another
    // pod is left to its agent, which acts on the order it keeps.
    let through_service = |r: &MemberStatus| {
        service.is_some_and(|host| {
            r.replication
                .as_ref()
                .is_some_and(|rep| rep.source_host == host)
        })
    };
    // A member that gives no report may still have its agent running while its server is
    // down: the order is kept there and acted on before the server can take writes again.
    let order = m.report.as_ref().map_or(true, |r| {
        r.epoch < epoch || r.role != Some(role) || through_service(r)
    });
    let fence = m.labelled != Some(role)
        || m.report
            .as_ref()
            .is_ok_and(|r| r.role != Some(role) || (role == Role::Replica && !r.read_only));
    (label || order).then(|| Step {
        pod: m.pod.clone(),
        standing,
        label,
        order,
        fence,
    })
}

/// Every member but `primary` that is not a replica at `epoch` in its labels or by its agent's
/// report, or that replicates through `service` (the primary Service's host); writable members
/// first.
pub fn demotions(primary: &str, service: &str, epoch: u64, members: &[MemberView]) -> Vec<Step> {
    let mut others: Vec<&MemberView> = members.iter().filter(|m| m.pod != primary).collect();
    others.sort_by_key(|m| m.report.as_ref().map_or(true, |r| r.read_only));
    others
        .into_iter()
        .filter_map(|m| step(m, Role::Replica, epoch, Some(service)))
        .collect()
}

/// The primary's step, if its labels or its agent are not at `(primary, epoch)` yet.
pub fn promotion(primary: &str, epoch: u64, members: &[MemberView]) -> Option<Step> {
    members
        .iter()
        .find(|m| m.pod == primary)
        .and_then(|m| step(m, Role::Primary, epoch, None))
}

/// Whether `primary` may take writes at `epoch`: no other reporting member is writable, and
/// `confirm` (the primary a running switchover replaces) reports read-only at `epoch`.
pub fn fenced(
    primary: &str,
    epoch: u64,
    members: &[MemberView],
    confirm: Option<&str>,
) -> Result<(), String> {
    for m in members.iter().filter(|m| m.pod != primary) {
        if let Ok(r) = &m.report {
            if !r.read_only {
                return Err(format!(
                    "{} is still writable; {primary} takes writes only once it is read-only",
                    m.pod
                ));
            }
        }
    }
    let Some(old) = confirm.filter(|old| *old != primary) else {
        return Ok(());
    };
    match members.iter().find(|m| m.pod == old).map(|m| &m.report) {
        Some(Ok(r)) if r.epoch >= epoch && r.read_only => Ok(()),
        Some(Ok(_)) => Err(format!(
            "waiting for {old} to confirm it is read-only at epoch {epoch}"
        )),
        Some(Err(why)) => Err(format!(
            "waiting for {old} to confirm it is read-only: {why}"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::roles::{sample_report, sample_view};

    fn member(
        pod: &str,
        label: Option<(Role, u64)>,
        report: Option<(Role, u64, bool)>,
    ) -> MemberView {
        MemberView {
            pod: pod.into(),
            labelled: label.map(|l| l.0),
            labelled_epoch: label.map(|l| l.1),
            report: match report {
                Some((role, epoch, read_only)) => {
                    let mut r = sample_report("0-1-5");
                    r.role = Some(role);
                    r.epoch = epoch;
                    r.read_only = read_only;
                    Ok(r)
                }
                None => Err("no answer".into()),
            },
        }
    }

    /// The primary Service's host.
    const SERVICE: &str = "quay-primary";

    fn at(role: Role, epoch: u64) -> Standing {
        Standing { role, epoch }
    }

    #[test]
    fn a_switchover_demotes_the_old_primary_first_and_promotes_once_it_is_read_only() {
        use Role::{Primary, Replica};
        // Epoch 3 names quay-1; quay-0 still writable, quay-2 a replica at epoch 2.
        let before = [
            member("quay-0", Some((Primary, 2)), Some((Primary, 2, false))),
            member("quay-1", Some((Replica, 2)), Some((Replica, 2, true))),
            member("quay-2", Some((Replica, 2)), Some((Replica, 2, true))),
        ];
        let d = demotions("quay-1", SERVICE, 3, &before);
        assert_eq!(
            d.iter()
                .map(|s| (s.pod.as_str(), s.standing, s.label, s.order))
                .collect::<Vec<_>>(),
            [
                ("quay-0", at(Replica, 3), true, true),
                ("quay-2", at(Replica, 3), true, true),
            ]
        );
        let waiting = fenced("quay-1", 3, &before, Some("quay-0")).unwrap_err();
        assert!(waiting.contains("quay-0 is still writable"), "{waiting}");
        // quay-0 answered its order: read-only at epoch 3.
        let after = [
            member("quay-0", Some((Replica, 3)), Some((Replica, 3, true))),
            member("quay-1", Some((Replica, 2)), Some((Replica, 2, true))),
            member("quay-2", Some((Replica, 3)), Some((Replica, 3, true))),
        ];
        assert_eq!(fenced("quay-1", 3, &after, Some("quay-0")), Ok(()));
        assert_eq!(
            promotion("quay-1", 3, &after),
            Some(Step {
                pod: "quay-1".into(),
                standing: at(Primary, 3),
                label: true,
                order: true,
                fence: true
            })
        );
        assert!(demotions("quay-1", SERVICE, 3, &after).is_empty());
    }

    #[test]
    fn a_silent_former_primary_blocks_a_switchover_but_not_a_failover() {
        use Role::Replica;
        let members = [
            member("quay-0", Some((Replica, 3)), None),
            member("quay-1", Some((Replica, 2)), Some((Replica, 2, true))),
        ];
        let waiting = fenced("quay-1", 3, &members, Some("quay-0")).unwrap_err();
        assert!(
            waiting.contains("confirm it is read-only: no answer"),
            "{waiting}"
        );
        // A failover decided quay-0 is lost: nobody to confirm.
        assert_eq!(fenced("quay-1", 3, &members, None), Ok(()));
        // Its labels are set already; its server does not answer, but its agent may still run
        // and keep the order for when the server is back (a crashed mysqld restarting).
        assert_eq!(
            demotions("quay-1", SERVICE, 3, &members),
            [Step {
                pod: "quay-0".into(),
                standing: at(Replica, 3),
                label: false,
                order: true,
                fence: false
            }]
        );
        // An answer at an older epoch is no confirmation.
        let stale = [
            member("quay-0", Some((Replica, 3)), Some((Replica, 2, true))),
            member("quay-1", Some((Replica, 2)), Some((Replica, 2, true))),
        ];
        assert!(fenced("quay-1", 3, &stale, Some("quay-0"))
            .unwrap_err()
            .contains("at epoch 3"));
    }

    #[test]
    fn a_settled_cluster_needs_no_step() {
        use Role::{Primary, Replica};
        let members = [
            member("quay-0", Some((Primary, 0)), Some((Primary, 0, false))),
            member("quay-1", Some((Replica, 0)), Some((Replica, 0, true))),
            member("quay-2", None, None),
        ];
        assert_eq!(promotion("quay-0", 0, &members), None);
        // Only the unlabelled pod gets its labels, and its role in an order in case its agent
        // runs already.
        assert_eq!(
            demotions("quay-0", SERVICE, 0, &members),
            [Step {
                pod: "quay-2".into(),
                standing: at(Replica, 0),
                label: true,
                order: true,
                fence: true
            }]
        );
        // A new pod's label without an epoch is epoch 0 (`members` reads it so).
        assert_eq!(fenced("quay-0", 0, &members, None), Ok(()));
    }

    #[test]
    fn replicas_through_the_service_are_told_the_primarys_own_address() {
        use Role::{Primary, Replica};
        let replicating_from = |pod: &str, host: &str| {
            let mut m = sample_view(pod, Replica, 0, true, Some(0));
            if let Some(rep) = m.report.as_mut().ok().and_then(|r| r.replication.as_mut()) {
                rep.source_host = host.into();
            }
            m
        };
        let primary = member("quay-1", Some((Primary, 0)), Some((Primary, 0, false)));
        let cases = [
            (
                "a new cluster's replica, through the primary Service: its order, after the \
                 promotion, labels untouched",
                replicating_from("quay-0", SERVICE),
                vec![Step {
                    pod: "quay-0".into(),
                    standing: at(Replica, 0),
                    label: false,
                    order: true,
                    fence: false,
                }],
            ),
            (
                "from the primary's own address: nothing to send",
                replicating_from("quay-0", "quay-1.quay-members"),
                vec![],
            ),
            (
                "still at a former primary's address: its agent acts on the order it keeps",
                replicating_from("quay-0", "quay-2.quay-members"),
                vec![],
            ),
            (
                "no replication configured yet (a member being seeded): its agent chooses",
                member("quay-0", Some((Replica, 0)), Some((Replica, 0, true))),
                vec![],
            ),
        ];
        for (name, replica, want) in cases {
            let members = [primary.clone(), replica];
            assert_eq!(demotions("quay-1", SERVICE, 0, &members), want, "{name}");
        }
    }
}
