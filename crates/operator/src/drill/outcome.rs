//! What a drill Job's state means: still running, passed with the result the tool reported in
//! its termination message, or failed with the cause; and the record a backup's status keeps of
//! it. Pure.

use bulwark_api::cluster::{DrillPhase, DrillRecord};
use bulwark_contract::result::{self, DrillReport, DrillResult};
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::backup::outcome::{job_end, termination_message, JobEnd};

/// The container of a drill Job's pod.
pub const CONTAINER: &str = "drill";

/// The state of a drill Job.
#[derive(Debug, Clone, PartialEq)]
pub enum DrillOutcome {
    /// Still going (or not started yet).
    Running,
    /// The backup was restored and every check held.
    Passed(Box<DrillResult>),
    /// The drill failed; the message says why.
    Failed {
        message: String,
        finished: Option<DateTime<Utc>>,
    },
}

/// Interprets a drill Job and the pod it ran (if still there).
pub fn drill_outcome(job: &Job, pod: Option<&Pod>) -> DrillOutcome {
    let report = pod
        .and_then(|p| termination_message(p, CONTAINER))
        .and_then(result::parse_drill_line);
    match (job_end(job), report) {
        (JobEnd::Complete { .. }, Some(DrillReport::Passed(r))) => DrillOutcome::Passed(r),
        // Never a pass without the tool's own account of what it proved.
        (JobEnd::Complete { finished }, _) => DrillOutcome::Failed {
            message: "the drill job completed without reporting a result".to_owned(),
            finished,
        },
        (JobEnd::Failed { finished, .. }, Some(DrillReport::Failed(e))) => DrillOutcome::Failed {
            message: e,
            finished,
        },
        (JobEnd::Failed { why, finished }, _) => DrillOutcome::Failed {
            message: format!("drill job failed: {why}"),
            finished,
        },
        (JobEnd::Open, _) => DrillOutcome::Running,
    }
}

/// The record of a drill that started: running, answering `request` if a user asked for it.
pub fn started(job: &str, request: Option<String>, at: DateTime<Utc>) -> DrillRecord {
    DrillRecord {
        job: job.to_owned(),
        request,
        result: DrillPhase::Running,
        start_time: Some(Time(at)),
        completion_time: None,
        restore_seconds: None,
        total_seconds: None,
        restored_bytes: None,
        tables_checked: None,
        assertions: None,
        reached_gtid: None,
        replayed_transactions: None,
        message: None,
    }
}

/// The record of a finished drill, from the record of its start.
pub fn finished(start: &DrillRecord, outcome: &DrillOutcome, now: DateTime<Utc>) -> DrillRecord {
    match outcome {
        DrillOutcome::Running => start.clone(),
        DrillOutcome::Passed(r) => DrillRecord {
            result: DrillPhase::Succeeded,
            start_time: Some(Time(r.started_at)),
            completion_time: Some(Time(r.finished_at)),
            restore_seconds: Some(round_ms(r.restore_seconds)),
            total_seconds: Some(round_ms(r.total_seconds)),
            restored_bytes: Some(i64::try_from(r.plaintext_bytes).unwrap_or(i64::MAX)),
            tables_checked: Some(i64::try_from(r.tables_checked).unwrap_or(i64::MAX)),
            assertions: Some(i32::try_from(r.assertions).unwrap_or(i32::MAX)),
            reached_gtid: r.reached_gtid.clone(),
            replayed_transactions: r
                .replayed_transactions
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            message: Some(passed_message(r)),
            ..start.clone()
        },
        DrillOutcome::Failed { message, finished } => DrillRecord {
            result: DrillPhase::Failed,
            completion_time: Some(Time(finished.unwrap_or(now))),
            message: Some(message.clone()),
            ..start.clone()
        },
    }
}

/// Durations in the status to the millisecond: a float's last digits are noise.
fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// What a drill that passed proved, in one line.
pub fn passed_message(r: &DrillResult) -> String {
    let replay = match (&r.reached_gtid, r.replayed_transactions) {
        (Some(g), Some(0)) => format!(", nothing after it in the binlog archive (at {g})"),
        (Some(g), Some(n)) => format!(", replayed {n} transactions of the binlog archive to {g}"),
        (Some(g), None) => format!(", replayed the binlog archive to {g}"),
        (None, _) => String::new(),
    };
    // The tool names a few tables and counts the rest as `and N more`.
    let unchecked: usize = r
        .tables_unchecked
        .iter()
        .map(|t| {
            t.strip_prefix("and ")
                .and_then(|rest| rest.strip_suffix(" more"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(1)
        })
        .sum();
    let unchecked = if unchecked == 0 {
        String::new()
    } else {
        format!(" ({unchecked} its engine cannot check)")
    };
    format!(
        "restored {} bytes in {:.1} s{replay}; {} tables checked{unchecked}, {} assertions held",
        r.plaintext_bytes, r.restore_seconds, r.tables_checked, r.assertions
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(conditions: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j"},
            "status": {"startTime": "2026-11-22T04:00:00Z", "completionTime": "2026-11-22T04:02:00Z", "conditions": conditions}
        }))
        .unwrap()
    }

    fn pod(message: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"containerStatuses": [{
                "name": "drill", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "message": message}}
            }]}
        }))
        .unwrap()
    }

    fn passed() -> DrillResult {
        DrillResult {
            backup_id: "20261122T030000Z-ab12".into(),
            method: "physical".into(),
            started_at: "2026-11-22T04:00:01Z".parse().unwrap(),
            finished_at: "2026-11-22T04:01:59Z".parse().unwrap(),
            plaintext_bytes: 2048,
            restore_seconds: 61.23456,
            total_seconds: 118.0,
            tables_checked: 9,
            tables_unchecked: vec![],
            assertions: 2,
            reached_gtid: Some("0-100-42".into()),
            replayed_transactions: Some(5),
        }
    }

    #[test]
    fn outcomes_come_from_the_tools_line_and_the_jobs_conditions() {
        let complete = job(serde_json::json!([{"type": "Complete", "status": "True"}]));
        let failed = job(
            serde_json::json!([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}]),
        );
        let running = job(serde_json::json!([]));
        let cases: Vec<(&str, &Job, Option<Pod>, DrillOutcome)> = vec![
            (
                "passed",
                &complete,
                Some(pod(&passed().to_line())),
                DrillOutcome::Passed(Box::new(passed())),
            ),
            (
                "complete without a line",
                &complete,
                None,
                DrillOutcome::Failed {
                    message: "the drill job completed without reporting a result".into(),
                    finished: Some("2026-11-22T04:02:00Z".parse().unwrap()),
                },
            ),
            (
                "a backup's line is no drill's",
                &complete,
                Some(pod("{\"id\": \"x\"}")),
                DrillOutcome::Failed {
                    message: "the drill job completed without reporting a result".into(),
                    finished: Some("2026-11-22T04:02:00Z".parse().unwrap()),
                },
            ),
            (
                "the tool's cause",
                &failed,
                Some(pod(&result::error_line(
                    "drill of backup b failed: CHECK TABLE found 1 damaged table(s)",
                ))),
                DrillOutcome::Failed {
                    message: "drill of backup b failed: CHECK TABLE found 1 damaged table(s)"
                        .into(),
                    finished: Some("2026-11-22T04:02:00Z".parse().unwrap()),
                },
            ),
            (
                "the job's cause when the tool said nothing",
                &failed,
                None,
                DrillOutcome::Failed {
                    message: "drill job failed: Job was active longer than specified deadline"
                        .into(),
                    finished: Some("2026-11-22T04:02:00Z".parse().unwrap()),
                },
            ),
            ("running", &running, None, DrillOutcome::Running),
        ];
        for (name, job, pod, want) in cases {
            assert_eq!(drill_outcome(job, pod.as_ref()), want, "{name}");
        }
    }

    #[test]
    fn records_keep_the_start_and_add_the_result() {
        let now: DateTime<Utc> = "2026-11-22T05:00:00Z".parse().unwrap();
        let start = started("b-drill-1", Some("r1".into()), now);
        assert_eq!(start.result, DrillPhase::Running);
        let done = finished(&start, &DrillOutcome::Passed(Box::new(passed())), now);
        assert_eq!(done.result, DrillPhase::Succeeded);
        assert_eq!(done.job, "b-drill-1");
        assert_eq!(done.request.as_deref(), Some("r1"));
        assert_eq!(done.restore_seconds, Some(61.235));
        assert_eq!(done.restored_bytes, Some(2048));
        assert_eq!(
            done.message.as_deref(),
            Some("restored 2048 bytes in 61.2 s, replayed 5 transactions of the binlog archive to 0-100-42; 9 tables checked, 2 assertions held")
        );
        let mut quiet = passed();
        quiet.replayed_transactions = Some(0);
        quiet.tables_unchecked = vec!["`a`.`b`".into(), "and 11 more".into()];
        assert_eq!(
            passed_message(&quiet),
            "restored 2048 bytes in 61.2 s, nothing after it in the binlog archive (at 0-100-42); 9 tables checked (12 its engine cannot check), 2 assertions held"
        );
        let failed = finished(
            &start,
            &DrillOutcome::Failed {
                message: "boom".into(),
                finished: None,
            },
            now,
        );
        assert_eq!(failed.result, DrillPhase::Failed);
        assert_eq!(failed.completion_time, Some(Time(now)));
        assert_eq!(failed.message.as_deref(), Some("boom"));
        assert_eq!(failed.restore_seconds, None);
    }
}
