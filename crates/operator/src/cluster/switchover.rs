//! Planned switchovers as pure decisions: whether a request (the `mysql.bulwark.dev/switchover`
//! annotation) is taken on or refused, and whether a running switchover has completed or must
//! be aborted because the chosen replica did not catch up with the fenced primary in time. The
//! moves themselves are the epoch's (`fencing`, `roles`): a switchover only raises the epoch
//! with the new primary in the status.

use std::time::Duration;

use bulwark_api::cluster::SwitchoverRecord;
use bulwark_contract::member::IoState;
use bulwark_contract::Role;

use super::roles::MemberView;

/// Results recorded in `status.lastSwitchover.result`.
pub const COMPLETED: &str = "Completed";
pub const REFUSED: &str = "Refused";
pub const ABORTED: &str = "Aborted";

/// What to do about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// No new request, or one that must wait.
    Nothing,
    /// Make `to` the primary.
    Start { request: String, to: String },
    /// Refused, for `message`.
    Refuse {
        request: String,
        to: String,
        message: String,
    },
}

/// The pod a request names: the annotation's value up to an optional `@suffix`.
pub fn target(value: &str) -> &str {
    value.split('@').next().unwrap_or_default().trim()
}

/// Decides on the annotation's `value`. `handled`: the request of the last switchover; `busy`:
/// why no switchover can start now (a failover, a running switchover, a primary not yet
/// settled), in which case the request waits; `members`: the cluster's member pods (by spec).
pub fn evaluate(
    value: Option<&str>,
    handled: Option<&str>,
    primary: &str,
    busy: bool,
    member_pods: &[String],
    views: &[MemberView],
    max_lag: Duration,
) -> Request {
    let Some(value) = value.filter(|v| Some(*v) != handled) else {
        return Request::Nothing;
    };
    if busy {
        return Request::Nothing;
    }
    let to = target(value);
    let refuse = |message: String| Request::Refuse {
        request: value.to_owned(),
        to: to.to_owned(),
        message,
    };
    if to == primary {
        return refuse(format!("{to} is already the primary"));
    }
    if !member_pods.iter().any(|p| p == to) {
        return refuse(format!(
            "{to:?} is not a member of the cluster ({})",
            member_pods.join(", ")
        ));
    }
    let report = match views.iter().find(|m| m.pod == to).map(|m| &m.report) {
        Some(Ok(r)) => r,
        Some(Err(why)) => return refuse(format!("{to} does not report: {why}")),
        None => return refuse(format!("pod {to} does not exist")),
    };
    let healthy = report.replication.as_ref().is_some_and(|r| {
        r.io == IoState::Running
            && r.sql_running
            && r.lag_seconds.is_some_and(|l| l <= max_lag.as_secs())
    });
    if !healthy || !report.ready {
        return refuse(format!(
            "{to} is not a replica in step with the primary: {}",
            report.reason
        ));
    }
    Request::Start {
        request: value.to_owned(),
        to: to.to_owned(),
    }
}

/// Members the StatefulSet keeps: the spec's, but never fewer than the primary needs to stay
/// (a scale-down that would remove the primary waits for a switchover first).
pub fn members_kept(spec_replicas: i32, primary_ordinal: Option<i32>) -> i32 {
    primary_ordinal.map_or(spec_replicas, |o| spec_replicas.max(o + 1))
}

/// The member a hand-over (a scale-down, a rollout) gives the primary to: a ready replica
/// that `eligible` accepts, replicating and within `max_lag`, the least behind (then the lowest
/// ordinal: names of one cluster differ only in it, so shorter sorts first); `None` when none is.
pub fn handover_target(
    eligible: impl Fn(&str) -> bool,
    views: &[MemberView],
    max_lag: Duration,
) -> Option<String> {
    views
        .iter()
        .filter(|m| eligible(&m.pod))
        .filter_map(|m| {
            let r = m.report.as_ref().ok().filter(|r| r.ready)?;
            let rep = r.replication.as_ref()?;
            let lag = rep.lag_seconds?;
            (rep.io == IoState::Running && rep.sql_running && lag <= max_lag.as_secs())
                .then(|| (lag, m.pod.len(), m.pod.clone()))
        })
        .min()
        .map(|(_, _, pod)| pod)
}

/// The state of a running switchover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Still under way.
    Running,
    /// `to` reports primary, writable, at the epoch.
    Completed,
    /// `to` did not take over within the time: the old primary is given writes back.
    Aborted(String),
}

/// Where `running` (started `elapsed` ago, epoch `epoch`) stands.
pub fn progress(
    running: &SwitchoverRecord,
    epoch: u64,
    views: &[MemberView],
    elapsed: Duration,
    timeout: Duration,
) -> Progress {
    let to = views
        .iter()
        .find(|m| m.pod == running.to)
        .and_then(|m| m.report.as_ref().ok());
    let promoted = to.is_some_and(|r| r.role == Some(Role::Primary) && r.epoch >= epoch);
    if promoted && to.is_some_and(|r| !r.read_only) {
        return Progress::Completed;
    }
    if !promoted && elapsed >= timeout {
        return Progress::Aborted(format!(
            "{} did not take over within {}s; {} takes writes again",
            running.to,
            timeout.as_secs(),
            running.from
        ));
    }
    Progress::Running
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::roles::sample_view as view;
    use bulwark_contract::Role;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn requests() {
        let pods: Vec<String> = ["quay-0", "quay-1", "quay-2"].map(String::from).to_vec();
        let views = vec![
            view("quay-0", Role::Primary, 4, false, None),
            view("quay-1", Role::Replica, 4, true, Some(0)),
            view("quay-2", Role::Replica, 4, true, Some(90)),
        ];
        let lag = Duration::from_secs(10);
        let eval = |value: Option<&str>, handled: Option<&str>, busy: bool| {
            evaluate(value, handled, "quay-0", busy, &pods, &views, lag)
        };
        let refused = |r: Request| match r {
            Request::Refuse { message, .. } => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(eval(None, None, false), Request::Nothing);
        assert_eq!(
            eval(Some("quay-1"), Some("quay-1"), false),
            Request::Nothing
        );
        assert_eq!(eval(Some("quay-1"), None, true), Request::Nothing);
        assert_eq!(
            eval(Some("quay-1@2"), Some("quay-1"), false),
            Request::Start {
                request: "quay-1@2".into(),
                to: "quay-1".into()
            }
        );
        assert!(refused(eval(Some("quay-0"), None, false)).contains("already the primary"));
        assert!(refused(eval(Some("quay-9"), None, false))
            .contains("\"quay-9\" is not a member of the cluster (quay-0, quay-1, quay-2)"));
        assert!(refused(eval(Some("quay-2"), None, false)).contains("not a replica in step"));
    }

    #[test]
    fn a_scale_down_keeps_the_primary_until_it_is_handed_over() {
        assert_eq!(members_kept(2, Some(2)), 3);
        assert_eq!(members_kept(2, Some(1)), 2);
        assert_eq!(members_kept(5, None), 5);
        let views = vec![
            view("quay-0", Role::Replica, 4, true, Some(3)),
            view("quay-1", Role::Replica, 4, true, Some(0)),
            view("quay-2", Role::Primary, 4, false, None),
            view("quay-3", Role::Replica, 4, true, Some(0)),
        ];
        let ordinal = |p: &str| p.strip_prefix("quay-")?.parse().ok();
        let lag = Duration::from_secs(10);
        assert_eq!(
            handover_target(|p| ordinal(p).is_some_and(|o: i32| o < 2), &views, lag).as_deref(),
            Some("quay-1")
        );
        assert_eq!(
            handover_target(|p| ordinal(p).is_some_and(|o: i32| o < 1), &views, lag).as_deref(),
            Some("quay-0")
        );
        let mut far = views.clone();
        far[0] = view("quay-0", Role::Replica, 4, true, Some(60));
        assert_eq!(
            handover_target(|p| ordinal(p).is_some_and(|o: i32| o < 1), &far, lag),
            None
        );
    }

    #[test]
    fn a_running_switchover_completes_or_is_aborted_in_time() {
        let record = SwitchoverRecord {
            request: "quay-1".into(),
            from: "quay-0".into(),
            to: "quay-1".into(),
            started: Time(chrono::Utc::now()),
            finished: None,
            result: None,
            message: None,
        };
        let timeout = Duration::from_secs(30);
        let fenced_old = view("quay-0", Role::Replica, 5, true, None);
        let waiting = [
            fenced_old.clone(),
            view("quay-1", Role::Replica, 4, true, Some(3)),
        ];
        let done = [
            fenced_old.clone(),
            view("quay-1", Role::Primary, 5, false, None),
        ];
        let s = Duration::from_secs;
        assert_eq!(
            progress(&record, 5, &waiting, s(2), timeout),
            Progress::Running
        );
        assert_eq!(
            progress(&record, 5, &done, s(2), timeout),
            Progress::Completed
        );
        // Late but promoted: completed, not aborted.
        assert_eq!(
            progress(&record, 5, &done, s(40), timeout),
            Progress::Completed
        );
        match progress(&record, 5, &waiting, s(30), timeout) {
            Progress::Aborted(m) => assert_eq!(
                m,
                "quay-1 did not take over within 30s; quay-0 takes writes again"
            ),
            other => panic!("{other:?}"),
        }
    }
}
