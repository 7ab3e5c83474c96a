//! The cluster manager's report of a pass, decided without I/O: the conditions (Ready,
//! Progressing, Degraded and, when the cluster archives, the archive's), how many instances
//! serve, whether the primary does, and the events the change from the previous status calls
//! for. The reconcile reads the archiver, then emits and writes what this decides.

use bulwark_api::common::condition;
use bulwark_api::{MySQLCluster, MySQLClusterSpec};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Resource, ResourceExt};

use super::archive;
use super::plan::{Plan, Transition};
use super::primary::Settled;
use super::rollout::is_ready;
use crate::conditions::{self, Desired, Status};
use crate::context::Reason;

/// What a pass reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Ready, Progressing, Degraded, WritesProtected, then the archive's condition if it
    /// archives.
    pub conditions: Vec<Desired>,
    /// Instances that serve.
    pub ready: i32,
    /// The primary serves (and no change of primary is under way).
    pub primary_ready: bool,
    /// Ready is True.
    pub ready_now: bool,
    /// Events, in order.
    pub events: Vec<(Reason, String)>,
}

/// Decides the report of a valid cluster's pass from the applied StatefulSet, what the pass
/// settled, and the archive's observation.
pub fn of_pass(
    cluster: &MySQLCluster,
    set: &StatefulSet,
    settled: &Settled,
    archive: Option<&archive::Observed>,
) -> Report {
    let plan = &settled.plan;
    let primary = plan.primary.as_str();
    let pods = settled.pods.as_slice();
    let hold = plan.hold();
    let not_primary = not_primary(plan, settled.withheld.as_deref());
    let (ready, desired) = observe(
        cluster.spec.replicas,
        set,
        primary,
        pods,
        &settled.unready,
        not_primary.as_ref().map(|(r, m)| (*r, m.as_str())),
    );
    let mut desired = desired.to_vec();
    if let Some(step) = hold.and_then(|h| h.rollout.progress()) {
        if desired[1].reason == "RollingOut" {
            desired[1].message = format!("{}; {step}", desired[1].message);
        }
    }
    let previous = previous_conditions(cluster);
    let mut events = Vec::new();
    if !settled.broken.is_empty() {
        let broken = settled.broken.join("; ");
        let known = previous
            .iter()
            .any(|c| c.type_ == condition::READY && c.message.contains(&broken));
        if !known {
            events.push((Reason::ReplicationBroken, broken.clone()));
        }
        desired[0].message = format!("{}; {broken}", desired[0].message);
    }
    if !settled.foreign.is_empty() {
        let foreign = format!(
            "pods {} carry the cluster's labels but its StatefulSet did not create them: they \
             are no members (never read, ordered, promoted or copied from); check and delete \
             them",
            settled.foreign.join(", ")
        );
        let known = previous
            .iter()
            .any(|c| c.type_ == condition::READY && c.message.contains(&foreign));
        if !known {
            events.push((Reason::ForeignPods, foreign.clone()));
        }
        desired[0].message = format!("{}; {foreign}", desired[0].message);
    }
    let ready_cond = desired[0].clone();
    // The first observation of a new cluster is not news, whichever conditions other writers
    // (validation, backups) put in its status before.
    let first = !previous.iter().any(|c| c.type_ == condition::READY);
    if conditions::flipped(&ready_cond, &previous) && !(first && ready_cond.status == Status::False)
    {
        let reason = if ready_cond.status == Status::True {
            Reason::ClusterReady
        } else {
            Reason::ClusterNotReady
        };
        events.push((reason, ready_cond.message.clone()));
    }
    if previous
        .iter()
        .any(|c| c.type_ == condition::DEGRADED && c.status == "True")
    {
        events.push((Reason::SpecValid, "the spec is valid again".to_owned()));
    }
    let lost_known = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.primary_lost_since.is_some());
    if let (Some(waiting), false) = (hold.and_then(|h| h.waiting.as_ref()), lost_known) {
        events.push((Reason::PrimaryLost, waiting.clone()));
    }
    desired.push(writes_protected(&cluster.spec));
    if let Some(observed) = archive {
        if let Some(gap) = &observed.new_gap {
            events.push((Reason::BinlogArchiveGap, gap.clone()));
        }
        if let Some(branch) = &observed.new_branch {
            events.push((Reason::BinlogArchiveBranched, branch.clone()));
        }
        desired.push(observed.condition.clone());
    }
    let primary_ready = not_primary.is_none()
        && pods
            .iter()
            .any(|p| p.name_any() == primary && serving(p, &settled.unready));
    Report {
        conditions: desired,
        ready,
        primary_ready,
        ready_now: ready_cond.status == Status::True,
        events,
    }
}

/// Whether the spec keeps every acknowledged commit through the loss of the primary, and if
/// not, why: the condition stands as long as the spec says so.
pub fn writes_protected(spec: &MySQLClusterSpec) -> Desired {
    let semi = &spec.replication.semi_sync;
    let failover = spec.replication.failover_after_seconds > 0;
    let (status, reason, message) = if spec.replicas <= 1 {
        (
            Status::False,
            "SingleServer",
            "one server: a commit is on its volume alone (and in backups once taken)".to_owned(),
        )
    } else if semi.acks == 0 && failover {
        (
            Status::False,
            "AsynchronousReplication",
            "semiSync.acks is 0 with automatic failover: a failover may lose the commits the \
             primary acknowledged last"
                .to_owned(),
        )
    } else if let (Some(t), true) = (semi.timeout_seconds, failover) {
        (
            Status::False,
            "SemiSyncTimeout",
            format!(
                "semiSync.timeoutSeconds is {t} with automatic failover: a commit answered after \
                 its wait timed out may be on the primary alone, and a failover may lose it"
            ),
        )
    } else if semi.acks == 0 {
        (
            Status::True,
            "NoAutomaticFailover",
            "asynchronous replication without automatic failover: the primary is replaced \
             only by a switchover, which waits for the replica"
                .to_owned(),
        )
    } else {
        (
            Status::True,
            "SemiSynchronous",
            format!(
                "every commit waits for {} replica{}; a failover promotes only a replica that \
                 holds every acknowledged commit",
                semi.acks,
                if semi.acks == 1 { "" } else { "s" }
            ),
        )
    };
    Desired::new(condition::WRITES_PROTECTED, status, reason, message)
}

/// Why the primary does not serve in this pass, if something the plan knows stops it: the
/// reason and message of the Ready condition.
fn not_primary(plan: &Plan, withheld: Option<&str>) -> Option<(&'static str, String)> {
    match (&plan.transition, plan.switching()) {
        (
            Transition::Failover {
                from, to, reason, ..
            },
            _,
        ) => Some((
            "FailingOver",
            format!("promoting {to} in place of {from}: {reason}"),
        )),
        (_, Some((from, to))) => Some((
            "SwitchingOver",
            match withheld {
                Some(w) => format!("switching over from {from} to {to}: {w}"),
                None => format!("switching over from {from} to {to}"),
            },
        )),
        (_, None) => plan.hold().and_then(|h| {
            h.stale
                .clone()
                .map(|w| ("StatusBehind", w))
                .or_else(|| h.waiting.clone().map(|w| ("PrimaryLost", w)))
                .or_else(|| withheld.map(|w| ("PrimaryWithheld", w.to_owned())))
                .or_else(|| {
                    h.scale_down_blocked
                        .clone()
                        .map(|w| ("ScaleDownWaiting", w))
                })
        }),
    }
}

/// The conditions the status holds.
pub(super) fn previous_conditions(cluster: &MySQLCluster) -> Vec<Condition> {
    cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// A pod counts as ready when its Ready condition says so and its agent, if it answered in this
/// pass, does not say otherwise: the condition follows the agent's readiness only after the
/// probe's period (a member demoted or held in this pass is not ready yet by its report).
fn serving(pod: &Pod, unready: &[(String, String)]) -> bool {
    is_ready(pod) && !unready.iter().any(|(u, _)| *u == pod.name_any())
}

/// The status conditions of a valid cluster, from the applied StatefulSet and the pods;
/// `unready`: members whose agent reports them not ready, and why (the primary's reason goes
/// into the Ready message).
pub fn observe(
    replicas: i32,
    set: &StatefulSet,
    primary: &str,
    pods: &[Pod],
    unready: &[(String, String)],
    not_primary: Option<(&'static str, &str)>,
) -> (i32, [Desired; 3]) {
    let primary_unready = unready
        .iter()
        .find(|(pod, _)| pod == primary)
        .map(|(_, why)| why);
    let st = set.status.clone().unwrap_or_default();
    // The StatefulSet's count trails the pods' conditions, which trail the agents' reports.
    let serving_pods = i32::try_from(pods.iter().filter(|p| serving(p, unready)).count());
    let ready = st
        .ready_replicas
        .unwrap_or(0)
        .min(serving_pods.unwrap_or(0));
    let primary_ready = pods
        .iter()
        .any(|p| p.name_any() == primary && serving(p, unready));
    let ready_cond = if let Some((reason, message)) = not_primary {
        Desired::new(
            condition::READY,
            Status::False,
            reason,
            format!("{ready} of {replicas} instances ready; {message}"),
        )
    } else if ready >= replicas && primary_ready {
        Desired::new(
            condition::READY,
            Status::True,
            "AllInstancesReady",
            format!("{ready} of {replicas} instances ready; primary {primary}"),
        )
    } else if !primary_ready {
        Desired::new(
            condition::READY,
            Status::False,
            "PrimaryNotReady",
            match primary_unready {
                Some(why) => format!(
                    "{ready} of {replicas} instances ready; primary {primary} is not ready: {why}"
                ),
                None => {
                    format!("{ready} of {replicas} instances ready; primary {primary} is not ready")
                }
            },
        )
    } else {
        Desired::new(
            condition::READY,
            Status::False,
            "InstancesNotReady",
            format!("{ready} of {replicas} instances ready"),
        )
    };
    let generation_seen = st.observed_generation >= set.metadata.generation;
    let updated = st.updated_replicas.unwrap_or(0);
    let progressing = if !generation_seen || updated < replicas || st.replicas != replicas {
        Desired::new(
            condition::PROGRESSING,
            Status::True,
            "RollingOut",
            format!("{updated} of {replicas} instances run the current spec"),
        )
    } else if ready < replicas {
        Desired::new(
            condition::PROGRESSING,
            Status::True,
            "WaitingForInstances",
            format!("{ready} of {replicas} instances ready"),
        )
    } else {
        Desired::new(
            condition::PROGRESSING,
            Status::False,
            "Reconciled",
            "the cluster matches its spec",
        )
    };
    let degraded = Desired::new(
        condition::DEGRADED,
        Status::False,
        "Reconciled",
        "the spec is valid",
    );
    (ready, [ready_cond, progressing, degraded])
}

/// `desired`, stamped for this generation over the conditions the status holds.
pub(super) fn stamp(
    cluster: &MySQLCluster,
    desired: &[Desired],
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let now = Time(now);
    let generation = cluster.meta().generation;
    let previous = previous_conditions(cluster);
    desired
        .iter()
        .map(|d| conditions::stamp(d, generation, &previous, &now))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::Hold;
    use serde_json::json;

    /// A three-member cluster `quay` whose status holds `conditions` (type, status, message)
    /// and, with `lost`, a primary lost since some time.
    fn cluster(conditions: &[(&str, &str, &str)], lost: bool) -> MySQLCluster {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s, m)| {
                json!({"type": t, "status": s, "reason": "Earlier", "message": m,
                       "lastTransitionTime": "2026-11-01T00:00:00Z"})
            })
            .collect();
        let mut status = json!({"conditions": conditions});
        if lost {
            status["primaryLostSince"] = json!("2026-11-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "mysql.bulwark.dev/v1alpha1", "kind": "MySQLCluster",
            "metadata": {"name": "quay", "namespace": "db", "generation": 2},
            "spec": {"engine": "mariadb", "version": "11.4", "replicas": 3,
                     "storage": {"size": "1Gi"}},
            "status": status,
        }))
        .unwrap()
    }

    /// The StatefulSet after it rolled out, with `ready` ready replicas.
    fn set(ready: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "quay", "generation": 1},
            "status": {"replicas": 3, "readyReplicas": ready, "updatedReplicas": 3,
                       "observedGeneration": 1},
        }))
        .unwrap()
    }

    fn pod(name: &str, ready: bool) -> Pod {
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": status}]},
        }))
        .unwrap()
    }

    /// A pass that holds `quay-0` as primary with `hold`; pods ready as `ready` says.
    fn settled(ready: [bool; 3], hold: Hold, broken: &[&str]) -> Settled {
        Settled {
            plan: Plan {
                primary: "quay-0".into(),
                epoch: 1,
                lost_since: None,
                transition: Transition::Hold(hold),
            },
            pods: (0..3)
                .map(|i| pod(&format!("quay-{i}"), ready[i]))
                .collect(),
            withheld: None,
            broken: broken.iter().map(|b| (*b).to_owned()).collect(),
            foreign: Vec::new(),
            unready: Vec::new(),
            primary_silent: false,
            lease_outstanding: std::time::Duration::ZERO,
            renewal_wait: std::time::Duration::ZERO,
            unacted: None,
        }
    }

    fn reasons(r: &Report) -> Vec<Reason> {
        r.events.iter().map(|(reason, _)| *reason).collect()
    }

    #[test]
    fn a_cluster_that_becomes_ready_says_so_once() {
        let before = cluster(&[("Ready", "False", "2 of 3 instances ready")], false);
        let r = of_pass(
            &before,
            &set(3),
            &settled([true; 3], Hold::default(), &[]),
            None,
        );
        assert_eq!(r.conditions[0].status, Status::True);
        assert_eq!(
            r.conditions[0].message,
            "3 of 3 instances ready; primary quay-0"
        );
        assert!(r.primary_ready && r.ready_now);
        assert_eq!(reasons(&r), [Reason::ClusterReady]);

        let after = cluster(&[("Ready", "True", "3 of 3 instances ready")], false);
        let again = of_pass(
            &after,
            &set(3),
            &settled([true; 3], Hold::default(), &[]),
            None,
        );
        assert_eq!(reasons(&again), []);
    }

    #[test]
    fn the_first_observation_of_a_new_cluster_is_not_news() {
        let new = cluster(&[], false);
        let r = of_pass(
            &new,
            &set(0),
            &settled([false; 3], Hold::default(), &[]),
            None,
        );
        assert_eq!(r.conditions[0].reason, "PrimaryNotReady");
        assert_eq!(reasons(&r), []);
        // Nor after another writer put a condition of its own there first.
        let backups_first = cluster(&[("BackupsHealthy", "True", "no backup due yet")], false);
        let r = of_pass(
            &backups_first,
            &set(0),
            &settled([false; 3], Hold::default(), &[]),
            None,
        );
        assert_eq!(reasons(&r), []);
    }

    #[test]
    fn foreign_pods_are_an_event_once_and_stay_in_ready() {
        let before = cluster(&[("Ready", "True", "3 of 3 instances ready")], false);
        let mut with_foreign = settled([true; 3], Hold::default(), &[]);
        with_foreign.foreign = vec!["quay-7".into()];
        let r = of_pass(&before, &set(3), &with_foreign, None);
        assert_eq!(reasons(&r), [Reason::ForeignPods]);
        assert_eq!(r.conditions[0].status, Status::True);
        assert_eq!(
            r.conditions[0].message,
            "3 of 3 instances ready; primary quay-0; pods quay-7 carry the cluster's labels but \
             its StatefulSet did not create them: they are no members (never read, ordered, \
             promoted or copied from); check and delete them"
        );
        let known = cluster(&[("Ready", "True", &r.conditions[0].message)], false);
        assert_eq!(reasons(&of_pass(&known, &set(3), &with_foreign, None)), []);
    }

    #[test]
    fn broken_replication_is_an_event_once_and_stays_in_ready() {
        let broken = ["quay-2: replication stopped on error 1062"];
        let before = cluster(&[("Ready", "True", "3 of 3 instances ready")], false);
        let r = of_pass(
            &before,
            &set(3),
            &settled([true; 3], Hold::default(), &broken),
            None,
        );
        assert_eq!(reasons(&r), [Reason::ReplicationBroken]);
        assert!(r.conditions[0].message.ends_with(broken[0]));

        let known = cluster(&[("Ready", "True", &r.conditions[0].message)], false);
        let again = of_pass(
            &known,
            &set(3),
            &settled([true; 3], Hold::default(), &broken),
            None,
        );
        assert_eq!(reasons(&again), []);
    }

    #[test]
    fn a_lost_primary_is_announced_when_first_seen() {
        let hold = Hold {
            waiting: Some("quay-0 does not report".into()),
            ..Hold::default()
        };
        let before = cluster(&[("Ready", "True", "3 of 3 instances ready")], false);
        let r = of_pass(
            &before,
            &set(2),
            &settled([false, true, true], hold.clone(), &[]),
            None,
        );
        assert_eq!(
            (r.conditions[0].reason, r.conditions[0].message.as_str()),
            (
                "PrimaryLost",
                "2 of 3 instances ready; quay-0 does not report"
            )
        );
        assert!(!r.primary_ready);
        assert_eq!(reasons(&r), [Reason::ClusterNotReady, Reason::PrimaryLost]);

        let known = cluster(&[("Ready", "False", "earlier")], true);
        let again = of_pass(
            &known,
            &set(2),
            &settled([false, true, true], hold, &[]),
            None,
        );
        assert_eq!(reasons(&again), []);
    }

    #[test]
    fn a_spec_that_gives_up_acknowledged_writes_says_so() {
        let with = |replicas: i32, acks: i32, timeout: Option<i64>, after: i64| {
            let mut c = cluster(&[], false);
            c.spec.replicas = replicas;
            c.spec.replication.semi_sync.acks = acks;
            c.spec.replication.semi_sync.timeout_seconds = timeout;
            c.spec.replication.failover_after_seconds = after;
            let d = writes_protected(&c.spec);
            (d.status, d.reason)
        };
        for (name, got, want) in [
            (
                "the default",
                with(3, 1, None, 30),
                (Status::True, "SemiSynchronous"),
            ),
            (
                "asynchronous with failover",
                with(3, 0, None, 30),
                (Status::False, "AsynchronousReplication"),
            ),
            (
                "asynchronous, no failover",
                with(3, 0, None, 0),
                (Status::True, "NoAutomaticFailover"),
            ),
            (
                "a semi-sync timeout with failover",
                with(3, 1, Some(10), 30),
                (Status::False, "SemiSyncTimeout"),
            ),
            (
                "a semi-sync timeout, no failover",
                with(3, 1, Some(10), 0),
                (Status::True, "SemiSynchronous"),
            ),
            (
                "one server",
                with(1, 1, None, 30),
                (Status::False, "SingleServer"),
            ),
        ] {
            assert_eq!(got, want, "{name}");
        }
        let before = cluster(&[], false);
        let r = of_pass(
            &before,
            &set(3),
            &settled([true; 3], Hold::default(), &[]),
            None,
        );
        assert_eq!(r.conditions[3].type_, condition::WRITES_PROTECTED);
    }

    #[test]
    fn a_primary_not_ready_by_its_agent_says_why() {
        let before = cluster(&[("Ready", "True", "3 of 3 instances ready")], false);
        let mut pass = settled([true; 3], Hold::default(), &[]);
        pass.unready = vec![(
            "quay-0".into(),
            "MariaDB 10.11.8 truncates its binary log".into(),
        )];
        let r = of_pass(&before, &set(3), &pass, None);
        assert_eq!(
            r.conditions[0].message,
            "2 of 3 instances ready; primary quay-0 is not ready: MariaDB 10.11.8 truncates its \
             binary log"
        );
    }

    #[test]
    fn a_spec_valid_again_is_an_event() {
        let before = cluster(
            &[
                ("Ready", "True", "3 of 3 instances ready"),
                ("Degraded", "True", "the Secret x does not exist"),
            ],
            false,
        );
        let r = of_pass(
            &before,
            &set(3),
            &settled([true; 3], Hold::default(), &[]),
            None,
        );
        assert_eq!(reasons(&r), [Reason::SpecValid]);
        assert_eq!(
            (r.conditions[2].status, r.conditions[2].reason),
            (Status::False, "Reconciled")
        );
    }
}
