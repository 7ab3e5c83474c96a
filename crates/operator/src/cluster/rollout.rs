//! Rolling changes of the server pods (image, configuration, resources) one member at a time,
//! in the order a primary needs: the StatefulSet's `OnDelete` strategy leaves every pod alone,
//! and this plan says which one the operator restarts next. Replicas go first (highest ordinal
//! first, each only once every member is ready again), then the primary is handed to an
//! updated replica by a switchover, then the old primary restarts as a replica. A change that
//! makes pods fail stops at the first replica: the primary keeps running the old spec. A member
//! a running backup reads from is not restarted until the backup ends. Pure.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;

use super::roles::MemberView;
use super::switchover;
use crate::names;

/// The label the StatefulSet controller gives each pod: the revision it was created from.
const REVISION_LABEL: &str = "controller-revision-hash";

/// One server pod as the rollout sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub ordinal: i32,
    /// It runs the StatefulSet's update revision.
    pub updated: bool,
    /// Its Ready condition (the agent's readiness: a replica replicating within the lag limit,
    /// a writable primary).
    pub ready: bool,
    /// It is being deleted.
    pub terminating: bool,
}

/// The server pods of cluster `cluster` as the rollout sees them against `set`'s update
/// revision; `None` while the StatefulSet controller has not taken the latest spec in.
pub fn pods_of(
    cluster: &str,
    set: &StatefulSet,
    pods: &[k8s_openapi::api::core::v1::Pod],
) -> Option<Vec<Pod>> {
    let status = set.status.as_ref()?;
    if status.observed_generation < set.metadata.generation {
        return None;
    }
    let revision = status.update_revision.as_deref()?;
    Some(
        pods.iter()
            .filter_map(|p| {
                let name = p.name_any();
                Some(Pod {
                    ordinal: names::pod_ordinal(cluster, &name)?,
                    updated: p.labels().get(REVISION_LABEL).map(String::as_str) == Some(revision),
                    ready: is_ready(p),
                    terminating: p.metadata.deletion_timestamp.is_some(),
                    name,
                })
            })
            .collect(),
    )
}

/// The next step of a rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Step {
    /// Every member runs the update revision (or the revision is not known yet).
    #[default]
    Done,
    /// Nothing may be restarted now, for the reason given.
    Wait(String),
    /// Delete this pod: the StatefulSet recreates it from the update revision.
    Restart(String),
    /// Every replica is updated: switch over to this one, then restart the old primary.
    HandOver(String),
}

/// Decides the next step. `members`: the spec's member count; `pods`: the server pods that
/// exist; `views`: the members' reports (for the hand-over's lag); `busy`: why the primary must
/// not move now (a failover, a switchover running), if it must not; `read`: members a running
/// backup reads from (restarting one would fail the backup).
pub fn next(
    members: i32,
    primary: &str,
    pods: &[Pod],
    views: &[MemberView],
    busy: Option<&str>,
    read: &[String],
    max_lag: Duration,
) -> Step {
    let outdated: Vec<&Pod> = pods.iter().filter(|p| !p.updated).collect();
    if outdated.is_empty() {
        return Step::Done;
    }
    if let Some(p) = pods.iter().find(|p| p.terminating) {
        return Step::Wait(format!("{} is restarting", p.name));
    }
    if let Some(missing) = (0..members).find(|o| !pods.iter().any(|p| p.ordinal == *o)) {
        return Step::Wait(format!("member {missing} has no pod yet"));
    }
    // A former primary holds its commits for a moment after the hand-over while clients move
    // to the new primary; stopping its pod then would release the hold with the agent while a
    // client still routed there may commit what no other member has.
    let holding = |pod: &str| {
        views
            .iter()
            .any(|v| v.pod == pod && v.report.as_ref().is_ok_and(|r| r.writes_held))
    };
    if let Some(p) = outdated.iter().find(|p| holding(&p.name)) {
        return Step::Wait(format!(
            "{} holds its writes while clients move to the new primary",
            p.name
        ));
    }
    let highest = |filter: &dyn Fn(&Pod) -> bool| {
        outdated
            .iter()
            .filter(|p| p.name != primary && filter(p))
            .max_by_key(|p| p.ordinal)
            .map(|p| match read.iter().find(|r| **r == p.name) {
                Some(pod) => Step::Wait(format!("a backup is reading from {pod}")),
                None => Step::Restart(p.name.clone()),
            })
    };
    // An outdated replica that is not ready serves nothing, and may be failing precisely
    // because of the spec being replaced: it goes first.
    if let Some(step) = highest(&|p| !p.ready) {
        return step;
    }
    if let Some(p) = pods.iter().find(|p| !p.ready) {
        return Step::Wait(format!("{} is not ready", p.name));
    }
    if let Some(step) = highest(&|_| true) {
        return step;
    }
    // Only the primary is left.
    if pods.len() == 1 {
        // Nobody to hand writes to: a single server restarts in place, once no backup reads it.
        return match read.iter().find(|r| *r == primary) {
            Some(pod) => Step::Wait(format!("a backup is reading from {pod}")),
            None => Step::Restart(primary.to_owned()),
        };
    }
    if let Some(why) = busy {
        return Step::Wait(format!("the primary is not handed over now: {why}"));
    }
    let updated = |pod: &str| pods.iter().any(|p| p.name == pod && p.updated);
    match switchover::handover_target(updated, views, max_lag) {
        Some(to) => Step::HandOver(to),
        None => Step::Wait(format!(
            "no updated replica is in step to take over from {primary}"
        )),
    }
}

impl Step {
    /// What the Progressing condition adds while the rollout runs.
    pub fn progress(&self) -> Option<String> {
        match self {
            Step::Done => None,
            Step::Wait(why) => Some(format!("rolling out: {why}")),
            Step::Restart(pod) => Some(format!("rolling out: restarting {pod}")),
            Step::HandOver(to) => Some(format!("rolling out: handing the primary over to {to}")),
        }
    }
}

/// The pod's Ready condition is True.
pub fn is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::roles::sample_view;
    use bulwark_contract::Role;

    /// `spec`: one letter a pod, `o` outdated / `u` updated, uppercase when ready, `x` (or
    /// `X`) terminating, `-` no pod.
    fn pods(spec: &str) -> Vec<Pod> {
        spec.chars()
            .enumerate()
            .filter(|(_, c)| *c != '-')
            .map(|(i, c)| Pod {
                name: format!("reef-{i}"),
                ordinal: i32::try_from(i).unwrap(),
                updated: c.eq_ignore_ascii_case(&'u'),
                ready: c.is_ascii_uppercase(),
                terminating: c.eq_ignore_ascii_case(&'x'),
            })
            .collect()
    }

    /// Ready members, `None` the primary, `Some(lag)` a replica that far behind.
    fn views(lags: &[(&str, Option<u64>)]) -> Vec<MemberView> {
        lags.iter()
            .map(|(pod, lag)| {
                let role = if lag.is_some() {
                    Role::Replica
                } else {
                    Role::Primary
                };
                sample_view(pod, role, 1, lag.is_some(), *lag)
            })
            .collect()
    }

    #[test]
    fn replicas_first_highest_ordinal_first_then_a_hand_over_then_the_old_primary() {
        let in_step = views(&[("reef-0", None), ("reef-1", Some(0)), ("reef-2", Some(3))]);
        let lag = Duration::from_secs(10);
        let step = |members: i32, primary: &str, spec: &str, busy: Option<&str>| {
            next(members, primary, &pods(spec), &in_step, busy, &[], lag)
        };
        use Step::*;
        let cases: &[(i32, &str, &str, Option<&str>, Step)] = &[
            (3, "reef-0", "UUU", None, Done),
            (3, "reef-0", "OOO", None, Restart("reef-2".into())),
            // One at a time: the restarted replica must be ready (caught up) first.
            (3, "reef-0", "OOu", None, Wait("reef-2 is not ready".into())),
            (
                3,
                "reef-0",
                "OOx",
                None,
                Wait("reef-2 is restarting".into()),
            ),
            (
                3,
                "reef-0",
                "OO-",
                None,
                Wait("member 2 has no pod yet".into()),
            ),
            (3, "reef-0", "OOU", None, Restart("reef-1".into())),
            // The primary is never restarted in place while replicas exist: handed over to
            // the updated replica least behind.
            (3, "reef-0", "OUU", None, HandOver("reef-1".into())),
            (
                3,
                "reef-0",
                "OUU",
                Some("a failover is under way"),
                Wait("the primary is not handed over now: a failover is under way".into()),
            ),
            // After the hand-over the old primary is an outdated replica.
            (3, "reef-1", "OUU", None, Restart("reef-0".into())),
            // A primary elsewhere: the replicas around it first.
            (3, "reef-2", "OOO", None, Restart("reef-1".into())),
            // An outdated replica that is failing is replaced even while others are not
            // ready (it may fail because of the spec being replaced).
            (3, "reef-0", "OoU", None, Restart("reef-1".into())),
            (3, "reef-0", "oOU", None, Wait("reef-0 is not ready".into())),
            // A new replica that fails on the new spec stops the rollout there.
            (3, "reef-0", "OOu", None, Wait("reef-2 is not ready".into())),
            // A single server restarts in place.
            (1, "reef-0", "O", None, Restart("reef-0".into())),
            (1, "reef-0", "U", None, Done),
        ];
        for (members, primary, spec, busy, want) in cases {
            assert_eq!(
                &step(*members, primary, spec, *busy),
                want,
                "{members} members, primary {primary}, pods {spec}, busy {busy:?}"
            );
        }
    }

    #[test]
    fn a_former_primary_holding_its_writes_is_not_restarted_until_it_lets_go() {
        let mut after_hand_over =
            views(&[("reef-0", Some(0)), ("reef-1", None), ("reef-2", Some(0))]);
        if let Ok(r) = &mut after_hand_over[0].report {
            r.writes_held = true;
        }
        let lag = Duration::from_secs(10);
        assert_eq!(
            next(3, "reef-1", &pods("oUU"), &after_hand_over, None, &[], lag),
            Step::Wait("reef-0 holds its writes while clients move to the new primary".into())
        );
        if let Ok(r) = &mut after_hand_over[0].report {
            r.writes_held = false;
        }
        assert_eq!(
            next(3, "reef-1", &pods("oUU"), &after_hand_over, None, &[], lag),
            Step::Restart("reef-0".into())
        );
    }

    #[test]
    fn no_hand_over_to_a_replica_out_of_step() {
        let behind = views(&[("reef-0", None), ("reef-1", Some(60)), ("reef-2", Some(45))]);
        assert_eq!(
            next(
                3,
                "reef-0",
                &pods("OUU"),
                &behind,
                None,
                &[],
                Duration::from_secs(10)
            ),
            Step::Wait("no updated replica is in step to take over from reef-0".into())
        );
        // Only updated replicas take over: an outdated one in step is not chosen.
        let mixed = views(&[("reef-0", None), ("reef-1", Some(0)), ("reef-2", Some(2))]);
        assert_eq!(
            next(
                3,
                "reef-2",
                &pods("UOU"),
                &mixed,
                None,
                &[],
                Duration::from_secs(10)
            ),
            Step::Restart("reef-1".into())
        );
    }

    #[test]
    fn a_member_a_backup_reads_from_is_not_restarted() {
        let in_step = views(&[("reef-0", None), ("reef-1", Some(0)), ("reef-2", Some(0))]);
        let lag = Duration::from_secs(10);
        let reading = ["reef-2".to_owned()];
        assert_eq!(
            next(3, "reef-0", &pods("OOO"), &in_step, None, &reading, lag),
            Step::Wait("a backup is reading from reef-2".into())
        );
        // Another member's backup holds nothing up.
        assert_eq!(
            next(3, "reef-0", &pods("OOU"), &in_step, None, &reading, lag),
            Step::Restart("reef-1".into())
        );
        let alone = views(&[("reef-0", None)]);
        assert_eq!(
            next(
                1,
                "reef-0",
                &pods("O"),
                &alone,
                None,
                &["reef-0".into()],
                lag
            ),
            Step::Wait("a backup is reading from reef-0".into())
        );
    }

    #[test]
    fn progress_messages_name_the_step() {
        assert_eq!(Step::Done.progress(), None);
        assert_eq!(
            Step::HandOver("reef-1".into()).progress().unwrap(),
            "rolling out: handing the primary over to reef-1"
        );
        assert_eq!(
            Step::Wait("reef-2 is not ready".into()).progress().unwrap(),
            "rolling out: reef-2 is not ready"
        );
    }
}
