//! The binlog archiver in the cluster's status: its report (read from its pod's `/status`)
//! becomes `status.binlogArchive`, the `BinlogArchiveHealthy` condition and a lag metric; a
//! new gap is announced by an event. The decision is pure; reading the report is the thin edge.

use bulwark_api::cluster::{BinlogArchiveStatus, LostBranchStatus};
use bulwark_contract::archive::{ArchiveStatus, STATUS_PATH};
use bulwark_contract::ports;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use crate::conditions::{Desired, Status};
use crate::names::{self, component};
use crate::ownership;

/// Type of the condition.
pub const CONDITION: &str = "BinlogArchiveHealthy";
/// Lag tolerated besides a few flush intervals.
const LAG_MARGIN_SECONDS: f64 = 30.0;

/// What the cluster's status shows of the archive.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub condition: Desired,
    /// `status.binlogArchive` (`None` while no report was read).
    pub status: Option<BinlogArchiveStatus>,
    /// A gap appeared since the last status: the event's message.
    pub new_gap: Option<String>,
    /// The archive took a branch that leaves archived transactions behind since the last
    /// status: the event's message.
    pub new_branch: Option<String>,
    /// Seconds the archive may be behind, for the metric.
    pub lag_seconds: Option<f64>,
}

/// Decides the archive's part of the status from the report (or why there is none), the flush
/// interval and what the last status recorded of the archive.
pub fn observe(
    report: Result<&ArchiveStatus, &str>,
    flush_every: i32,
    previous: Option<&BinlogArchiveStatus>,
    archive: &str,
) -> Observed {
    let previous_gaps = previous.map_or(0, |a| a.gaps);
    let previous_timeline = previous.and_then(|a| a.timeline);
    let report = match report {
        Ok(r) => r,
        Err(why) => {
            return Observed {
                condition: Desired::new(
                    CONDITION,
                    Status::False,
                    "ArchiverUnreachable",
                    format!("no report from the binlog archiver: {why}"),
                ),
                status: None,
                new_gap: None,
                new_branch: None,
                lag_seconds: None,
            }
        }
    };
    let lag = report.lag_seconds;
    let tolerated = 3.0 * f64::from(flush_every.max(1)) + LAG_MARGIN_SECONDS;
    let window = match (&report.recoverable_from, &report.recoverable_to, &report.recoverable_from_backup) {
        (Some(from), Some(to), Some(backup)) => format!("recoverable from {from} (backup {backup}) to {to}"),
        _ => "no backup is continued by the archive yet, so nothing is recoverable to a point in time".to_owned(),
    };
    let at = if report.through.is_empty() {
        "(nothing yet)"
    } else {
        report.through.as_str()
    };
    let condition = if !report.streaming {
        Desired::new(
            CONDITION,
            Status::False,
            "NotStreaming",
            format!(
                "not streaming from the primary ({}); the archive reaches {at}, up to {lag:.0}s behind",
                report.error.as_deref().unwrap_or("connecting")
            ),
        )
    } else if report.gaps > 0 && report.recoverable_to.is_none() {
        Desired::new(
            CONDITION,
            Status::False,
            "Gap",
            format!(
                "the archive has a gap (resumed at {}): binary logs were purged before they were archived; a new backup starts a new recovery window",
                report.last_gap_resumed_at.as_deref().unwrap_or("?")
            ),
        )
    } else if lag > tolerated {
        Desired::new(
            CONDITION,
            Status::False,
            "Lagging",
            format!("the archive is {lag:.0}s behind the primary (tolerated {tolerated:.0}s); it reaches {at}"),
        )
    } else {
        Desired::new(
            CONDITION,
            Status::True,
            "Archiving",
            format!("the archive reaches {at}; {window}"),
        )
    };
    let new_gap = (report.gaps > previous_gaps).then(|| {
        format!(
            "the binlog archive has a new gap (resumed at {}): binary logs were purged before they were archived; the recovery window restarts at the next backup",
            report.last_gap_resumed_at.as_deref().unwrap_or("?")
        )
    });
    // An archiver that just started reports no timeline until it has read the archive: what
    // the status showed stands until then.
    let (timeline, began_at, branched_from, left_behind, lost_branches) = match report.timeline {
        Some(t) => (
            Some(i64::from(t)),
            report.timeline_began_at.clone(),
            report.branched_from.map(i64::from),
            report.left_behind_through.clone(),
            report
                .lost_branches
                .iter()
                .map(|b| LostBranchStatus {
                    timeline: i64::from(b.timeline),
                    began_at: b.began_at.clone(),
                    branched_from: i64::from(b.branched_from),
                    through: b.through.clone(),
                })
                .collect(),
        ),
        None => (
            previous_timeline,
            previous.and_then(|a| a.timeline_began_at.clone()),
            previous.and_then(|a| a.branched_from),
            previous.and_then(|a| a.left_behind_through.clone()),
            previous
                .map(|a| a.lost_branches.clone())
                .unwrap_or_default(),
        ),
    };
    let changed = previous_timeline.is_some_and(|p| timeline.is_some_and(|t| t != p));
    let new_branch = match (timeline, branched_from, &left_behind) {
        (Some(t), Some(parent), Some(left)) if changed => Some(format!(
            "the binlog archive follows timeline {t} from {}: timeline {parent}, archived up to {left}, holds transactions the primary lacks (lost by a failover); latest and time restores leave them out, and they stay archived, restorable by their GTIDs",
            began_at.as_deref().unwrap_or("?")
        )),
        _ => None,
    };
    Observed {
        condition,
        status: Some(BinlogArchiveStatus {
            archive: Some(archive.to_owned()),
            streaming: report.streaming,
            through: report.through.clone(),
            last_commit: report.last_commit.clone(),
            lag_seconds: lag.round() as i64,
            gaps: report.gaps,
            last_gap_resumed_at: report.last_gap_resumed_at.clone(),
            recoverable_from: report.recoverable_from.clone(),
            recoverable_from_backup: report.recoverable_from_backup.clone(),
            recoverable_to: report.recoverable_to.clone(),
            window_base_backup: report.window_base_backup.clone(),
            timeline,
            timeline_began_at: began_at,
            branched_from,
            left_behind_through: left_behind,
            lost_branches,
        }),
        new_gap,
        new_branch,
        lag_seconds: Some(lag),
    }
}

/// The archiver's running pods: those a ReplicaSet of the archiver's Deployment controls, by
/// uid at each step. A pod that only carries the archiver's labels is never read: its report
/// would stand in the cluster's status.
pub fn archiver_pods<'a>(
    deployment: &Deployment,
    replica_sets: &[ReplicaSet],
    pods: &'a [Pod],
) -> Vec<&'a Pod> {
    let sets: Vec<&ReplicaSet> = replica_sets
        .iter()
        .filter(|r| ownership::controls(deployment, *r))
        .collect();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| sets.iter().any(|r| ownership::controls(*r, *p)))
        .collect()
}

/// Reads the report of the cluster's archiver pod.
pub async fn read(client: &kube::Client, ns: &str, cluster: &str) -> Result<ArchiveStatus, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = deployments
        .get_opt(&names::binlog_archiver(cluster))
        .await
        .map_err(|e| format!("cannot read the archiver's Deployment: {e}"))?
        .ok_or_else(|| "the archiver's Deployment does not exist".to_owned())?;
    let selector = names::selector_string(&names::labels(cluster, component::ARCHIVER));
    let params = ListParams::default().labels(&selector);
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .list(&params)
        .await
        .map_err(|e| format!("cannot list the archiver's ReplicaSets: {e}"))?
        .items;
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&params)
        .await
        .map_err(|e| format!("cannot list the archiver's pods: {e}"))?
        .items;
    let pod = archiver_pods(&deployment, &replica_sets, &pods)
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
        .ok_or_else(|| "no archiver pod is running".to_owned())?;
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    let addr = format!("{ip}:{}", ports::ARCHIVER);
    let request =
        format!("GET {STATUS_PATH} HTTP/1.1\r\nHost: archiver\r\nConnection: close\r\n\r\n");
    let (code, body) = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        crate::members::exchange(&addr, &request),
    )
    .await
    .map_err(|_| format!("{} did not answer within 3s", pod.name_any()))??;
    if code != 200 {
        return Err(format!("{} answered {code}", pod.name_any()));
    }
    serde_json::from_str(body.trim())
        .map_err(|e| format!("{} sent an unreadable report: {e}", pod.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controlled<T: serde::de::DeserializeOwned>(
        name: &str,
        uid: &str,
        by: Option<(&str, &str)>,
        deleting: bool,
    ) -> T {
        let refs: Vec<serde_json::Value> = by
            .into_iter()
            .map(|(kind, uid)| {
                serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "name": "x",
                    "uid": uid, "controller": true})
            })
            .collect();
        let mut meta = serde_json::json!({"name": name, "uid": uid, "ownerReferences": refs});
        if deleting {
            meta["deletionTimestamp"] = "2026-11-26T00:00:00Z".into();
        }
        serde_json::from_value(serde_json::json!({ "metadata": meta })).unwrap()
    }

    #[test]
    fn only_the_pods_of_the_archivers_own_replica_sets_are_read() {
        let deployment: Deployment = controlled("ledger-binlog-archiver", "d1", None, false);
        let sets: Vec<ReplicaSet> = vec![
            controlled("ours", "r1", Some(("Deployment", "d1")), false),
            controlled("another", "r2", Some(("Deployment", "d2")), false),
        ];
        let pods: Vec<Pod> = vec![
            controlled("its-pod", "p1", Some(("ReplicaSet", "r1")), false),
            controlled("another-set", "p2", Some(("ReplicaSet", "r2")), false),
            controlled("labels-only", "p3", None, false),
            controlled("leaving", "p4", Some(("ReplicaSet", "r1")), true),
            controlled("the-uid-as-another-kind", "p5", Some(("Job", "r1")), false),
        ];
        let names: Vec<String> = archiver_pods(&deployment, &sets, &pods)
            .into_iter()
            .map(|p| p.name_any())
            .collect();
        assert_eq!(names, ["its-pod"]);
    }

    fn report(streaming: bool, lag: f64, gaps: u32, window: bool) -> ArchiveStatus {
        ArchiveStatus {
            archive: "ledger".into(),
            streaming,
            error: (!streaming).then(|| "connection refused".into()),
            through: "0-101-500".into(),
            last_commit: Some("2026-11-25T03:00:00Z".into()),
            lag_seconds: lag,
            gaps,
            last_gap_resumed_at: (gaps > 0).then(|| "0-101-400".into()),
            recoverable_from: window.then(|| "2026-11-24T00:00:00Z".into()),
            recoverable_from_backup: window.then(|| "20261124T000000Z-0a0b0c".into()),
            recoverable_to: window.then(|| "2026-11-25T03:00:00Z".into()),
            window_base_backup: window.then(|| "20261125T000000Z-0d0e0f".into()),
            timeline: Some(1),
            timeline_began_at: Some("0-101-1".into()),
            branched_from: None,
            left_behind_through: None,
            lost_branches: Vec::new(),
        }
    }

    /// What the last status recorded: `gaps` gaps, on `timeline`.
    fn previous(gaps: u32, timeline: i64) -> BinlogArchiveStatus {
        BinlogArchiveStatus {
            gaps,
            timeline: Some(timeline),
            ..Default::default()
        }
    }

    #[test]
    fn the_condition_says_what_is_wrong_first() {
        let cases = [
            (report(true, 1.0, 0, true), 0, Status::True, "Archiving", "recoverable from 2026-11-24T00:00:00Z (backup 20261124T000000Z-0a0b0c) to 2026-11-25T03:00:00Z"),
            (report(true, 1.0, 0, false), 0, Status::True, "Archiving", "no backup is continued"),
            (report(false, 80.0, 0, true), 0, Status::False, "NotStreaming", "connection refused"),
            (report(true, 1.0, 1, false), 0, Status::False, "Gap", "resumed at 0-101-400"),
            // A gap behind a newer backup's window: healthy again.
            (report(true, 1.0, 1, true), 1, Status::True, "Archiving", "recoverable from"),
            (report(true, 50.0, 0, true), 0, Status::False, "Lagging", "50s behind the primary (tolerated 45s)"),
        ];
        for (r, previous_gaps, status, reason, message) in cases {
            let o = observe(
                Ok(&r),
                5,
                Some(&previous(previous_gaps, 1)),
                "ledger-0a1b2c3d",
            );
            assert_eq!(
                (o.condition.status, o.condition.reason),
                (status, reason),
                "{r:?}"
            );
            assert!(
                o.condition.message.contains(message),
                "{}",
                o.condition.message
            );
            let status = o.status.expect("a report is shown");
            assert_eq!(status.through, "0-101-500");
            assert_eq!(status.archive.as_deref(), Some("ledger-0a1b2c3d"));
            assert_eq!(
                status.window_base_backup, r.window_base_backup,
                "the retention's protection is carried"
            );
        }
        let o = observe(Err("no archiver pod is running"), 5, None, "ledger");
        assert_eq!(o.condition.reason, "ArchiverUnreachable");
        assert!(o.status.is_none() && o.lag_seconds.is_none());
    }

    #[test]
    fn a_new_gap_is_announced_once() {
        let r = report(true, 1.0, 2, true);
        assert!(observe(Ok(&r), 5, Some(&previous(1, 1)), "ledger")
            .new_gap
            .unwrap()
            .contains("0-101-400"));
        assert!(observe(Ok(&r), 5, Some(&previous(2, 1)), "ledger")
            .new_gap
            .is_none());
    }

    #[test]
    fn a_branch_that_leaves_transactions_behind_is_announced_once() {
        let mut r = report(true, 1.0, 0, true);
        r.timeline = Some(3);
        r.timeline_began_at = Some("0-101-450".into());
        // A switchover: a new timeline, nothing left behind, no event.
        assert!(observe(Ok(&r), 5, Some(&previous(0, 2)), "ledger")
            .new_branch
            .is_none());
        r.branched_from = Some(2);
        r.left_behind_through = Some("0-101-460".into());
        // An earlier failover's loss, and this one's.
        r.lost_branches = vec![
            bulwark_contract::archive::LostBranch {
                timeline: 2,
                began_at: "0-101-300".into(),
                branched_from: 1,
                through: "0-101-320".into(),
            },
            bulwark_contract::archive::LostBranch {
                timeline: 3,
                began_at: "0-101-450".into(),
                branched_from: 2,
                through: "0-101-460".into(),
            },
        ];
        let o = observe(Ok(&r), 5, Some(&previous(0, 2)), "ledger");
        let message = o.new_branch.expect("announced");
        assert!(
            message.contains(
                "follows timeline 3 from 0-101-450: timeline 2, archived up to 0-101-460"
            ),
            "{message}"
        );
        let shown = o.status.clone().unwrap();
        assert_eq!(
            (
                shown.timeline,
                shown.branched_from,
                shown.left_behind_through.as_deref()
            ),
            (Some(3), Some(2), Some("0-101-460"))
        );
        let lost: Vec<_> = shown
            .lost_branches
            .iter()
            .map(|b| (b.timeline, b.branched_from, b.through.as_str()))
            .collect();
        assert_eq!(lost, [(2, 1, "0-101-320"), (3, 2, "0-101-460")]);
        assert!(observe(Ok(&r), 5, Some(&previous(0, 3)), "ledger")
            .new_branch
            .is_none());
        // An archiver that restarted has not read the archive yet: the status keeps what it
        // showed, and nothing is announced again when the report comes back.
        let mut fresh = r.clone();
        fresh.timeline = None;
        fresh.branched_from = None;
        fresh.left_behind_through = None;
        fresh.lost_branches.clear();
        let kept = observe(Ok(&fresh), 5, o.status.as_ref(), "ledger");
        assert_eq!(kept.status.as_ref().unwrap().timeline, Some(3));
        assert_eq!(kept.status.as_ref().unwrap().lost_branches.len(), 2);
        assert!(kept.new_branch.is_none());
        assert!(observe(Ok(&r), 5, kept.status.as_ref(), "ledger")
            .new_branch
            .is_none());
    }
}
