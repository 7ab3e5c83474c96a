//! What a backup Job's state means for its MySQLBackup: running, succeeded with the manifest
//! the tool reported in its termination message, or failed with the cause. Pure.

use bulwark_api::BackupProgress;
use bulwark_contract::result::{self, BackupResult, Report};
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

/// The state of a backup Job.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The Job exists but has not started a pod yet.
    Pending,
    /// The backup runs.
    Running { started: Option<DateTime<Utc>> },
    /// The backup was committed.
    Succeeded(Box<BackupResult>),
    /// No usable backup; the message says why.
    Failed {
        message: String,
        finished: Option<DateTime<Utc>>,
    },
}

/// The condition `type_` of a Job, when it is True.
pub fn job_condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The termination message of the `container` of `pod`, if it terminated with one.
pub fn termination_message<'a>(pod: &'a Pod, container: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
}

/// The last line a tool wrote before it failed, from a termination message that holds its
/// log's tail: the one-line cause (`error: …`, or a log line's message without its timestamp
/// and level, in text or JSON), at most 300 characters.
pub fn last_line(message: &str) -> Option<String> {
    let line = message.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    if let Ok(serde_json::Value::Object(logged)) = serde_json::from_str(line) {
        if let Some(m) = logged.get("message").and_then(|m| m.as_str()) {
            return Some(m.chars().take(300).collect());
        }
    }
    // A tracing line: `<RFC 3339 stamp> <level padded to 5> <message>`.
    let logged = line.split_once(' ').and_then(|(stamp, rest)| {
        chrono::DateTime::parse_from_rfc3339(stamp).ok()?;
        let (level, message) = rest.trim_start().split_once(' ')?;
        ["ERROR", "WARN", "INFO", "DEBUG"]
            .contains(&level)
            .then(|| message.trim())
    });
    let line = logged.unwrap_or(line);
    Some(line.chars().take(300).collect())
}

/// How a Job ended, as its conditions say (the tool's own account is in its pod).
#[derive(Debug, Clone, PartialEq)]
pub enum JobEnd {
    Complete {
        finished: Option<DateTime<Utc>>,
    },
    /// Failed; `why` is the Job's own message (or reason).
    Failed {
        why: String,
        finished: Option<DateTime<Utc>>,
    },
    /// Not ended yet.
    Open,
}

/// How `job` ended, if it did.
pub fn job_end(job: &Job) -> JobEnd {
    let finished = job
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref().map(|t| t.0));
    if job_condition(job, "Complete").is_some() {
        return JobEnd::Complete { finished };
    }
    match job_condition(job, "Failed") {
        Some(c) => JobEnd::Failed {
            why: c
                .message
                .clone()
                .or_else(|| c.reason.clone())
                .unwrap_or_else(|| "no reason given".to_owned()),
            finished: finished.or_else(|| c.last_transition_time.as_ref().map(|t| t.0)),
        },
        None => JobEnd::Open,
    }
}

/// Interprets a backup Job and the pod it ran (if still there).
pub fn backup_outcome(job: &Job, pod: Option<&Pod>) -> Outcome {
    let report = pod
        .and_then(|p| termination_message(p, "backup"))
        .and_then(result::parse_line);
    match (job_end(job), report) {
        (JobEnd::Complete { .. }, Some(Report::Committed(r))) => return Outcome::Succeeded(r),
        // Never report success without the tool's own account of the committed backup.
        (JobEnd::Complete { finished }, _) => {
            return Outcome::Failed {
                message: "backup job completed without reporting a committed backup".to_owned(),
                finished,
            }
        }
        (JobEnd::Failed { finished, .. }, Some(Report::Failed(e))) => {
            return Outcome::Failed {
                message: format!("backup failed: {e}"),
                finished,
            }
        }
        (JobEnd::Failed { why, finished }, _) => {
            return Outcome::Failed {
                message: format!("backup job failed: {why}"),
                finished,
            }
        }
        (JobEnd::Open, _) => {}
    }
    let started = job
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref().map(|t| t.0));
    match started {
        Some(_) => Outcome::Running { started },
        None => Outcome::Pending,
    }
}

/// Why a pod has not started its container `deadline` after it was created, if so: the
/// waiting reason of its container, else its phase.
pub fn stuck_before_start(
    pod: &Pod,
    now: DateTime<Utc>,
    deadline: chrono::Duration,
) -> Option<String> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0;
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if phase != "Pending" || now - created < deadline {
        return None;
    }
    let waiting = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find_map(|c| c.state.as_ref()?.waiting.clone()));
    Some(match waiting {
        Some(w) => match (w.reason, w.message) {
            (Some(r), Some(m)) => format!("{r}: {m}"),
            (Some(r), None) => r,
            (None, Some(m)) => m,
            (None, None) => "waiting".to_owned(),
        },
        None => match status.and_then(|s| s.conditions.as_ref()).and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message.clone())
        }) {
            Some(m) => format!("not scheduled: {m}"),
            None => "pod still pending".to_owned(),
        },
    })
}

/// The latest progress line in the tool's JSON log output.
pub fn parse_progress(log: &str) -> Option<BackupProgress> {
    log.lines().rev().find_map(|line| {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        // mysql-backup flattens event fields into the line; nested is tracing's default.
        let fields = v.get("fields").unwrap_or(&v);
        if fields.get("message")?.as_str()? != "progress" {
            return None;
        }
        Some(BackupProgress {
            bytes_done: fields.get("bytes_done")?.as_i64()?,
            bytes_per_second: fields.get("bytes_per_second")?.as_i64()?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_tool_is_known_by_its_last_line() {
        let cases = [
            (
                "a log's tail ending in the cause",
                "2026-11-28T11:00:00.1Z  INFO starting\nerror: backup 20261128T110000Z-aaaaaa is held by restore on db-0: it is left alone\n",
                Some("error: backup 20261128T110000Z-aaaaaa is held by restore on db-0: it is left alone"),
            ),
            (
                "a JSON log line",
                "{\"timestamp\":\"2026-11-28T11:00:00Z\",\"level\":\"ERROR\",\"message\":\"the bucket is gone\"}",
                Some("the bucket is gone"),
            ),
            (
                "a logged error line",
                "2026-11-28T11:00:00.123456Z ERROR failed to reach storage\n\n",
                Some("failed to reach storage"),
            ),
            (
                "a level padded to five",
                "2026-11-28T11:00:00.123456Z  WARN the data stays",
                Some("the data stays"),
            ),
            ("nothing", "  \n ", None),
        ];
        for (what, message, want) in cases {
            assert_eq!(last_line(message).as_deref(), want, "{what}");
        }
        assert_eq!(last_line(&"x".repeat(400)).map(|l| l.len()), Some(300));
    }

    fn job(conditions: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j"},
            "status": {"startTime": "2026-11-22T03:00:00Z", "conditions": conditions}
        }))
        .unwrap()
    }

    fn pod(message: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"containerStatuses": [{
                "name": "backup", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "message": message}}
            }]}
        }))
        .unwrap()
    }

    /// What `mysql-backup` reports for a committed backup, written by the producer's type.
    fn result_line() -> String {
        BackupResult {
            id: "20261122T030000Z-ab12".into(),
            method: "physical".into(),
            location: Some("/x".into()),
            started_at: "2026-11-22T03:00:01Z".parse().unwrap(),
            finished_at: "2026-11-22T03:04:00Z".parse().unwrap(),
            duration_seconds: 239.0,
            engine: bulwark_contract::Engine::MariaDb,
            server_version: "10.11.6-MariaDB".into(),
            source_host: Some("tide-1".into()),
            tool: "mariadb-backup".into(),
            tool_version: Some("10.11.6".into()),
            plaintext_bytes: 1000,
            plaintext_sha256: "bb".into(),
            stored_bytes: 400,
            chunks: 1,
            segments: 1,
            compression_level: 1,
            encrypted: false,
            key_id: None,
            binlog_file: Some("mysql-bin.000003".into()),
            binlog_position: Some(1234),
            gtid_set: Some("0-100-42".into()),
            manifest_sha256: "aa".into(),
            omitted: vec![],
        }
        .to_line()
    }

    #[test]
    fn success_needs_the_tools_result() {
        let complete = job(serde_json::json!([{"type": "Complete", "status": "True"}]));
        match backup_outcome(&complete, Some(&pod(&result_line()))) {
            Outcome::Succeeded(r) => {
                assert_eq!(r.id, "20261122T030000Z-ab12");
                assert_eq!(r.gtid_set.as_deref(), Some("0-100-42"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            backup_outcome(&complete, None),
            Outcome::Failed { ref message, .. } if message == "backup job completed without reporting a committed backup"
        ));
        assert!(matches!(
            backup_outcome(&complete, Some(&pod("garbage"))),
            Outcome::Failed { .. }
        ));
    }

    #[test]
    fn failures_carry_the_tools_cause_or_the_jobs() {
        let failed = job(
            serde_json::json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]),
        );
        assert!(matches!(
            backup_outcome(&failed, Some(&pod(&result::error_line("failed to connect to the server: access denied")))),
            Outcome::Failed { ref message, .. } if message == "backup failed: failed to connect to the server: access denied"
        ));
        assert!(matches!(
            backup_outcome(&failed, None),
            Outcome::Failed { ref message, .. } if message == "backup job failed: Job has reached the specified backoff limit"
        ));
        let running = job(serde_json::json!([]));
        assert!(matches!(
            backup_outcome(&running, None),
            Outcome::Running { .. }
        ));
    }

    #[test]
    fn a_pod_that_never_starts_is_reported_after_the_deadline() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-11-22T03:00:00Z"},
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "backup", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating", "message": "Multi-Attach error for volume data"}}
            }]}
        }))
        .unwrap();
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let ten = chrono::Duration::minutes(10);
        assert_eq!(
            stuck_before_start(&p, at("2026-11-22T03:05:00Z"), ten),
            None
        );
        assert_eq!(
            stuck_before_start(&p, at("2026-11-22T03:11:00Z"), ten).as_deref(),
            Some("ContainerCreating: Multi-Attach error for volume data")
        );
    }

    #[test]
    fn progress_comes_from_the_last_progress_line() {
        let log = concat!(
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"progress","operation":"backup","bytes_done":10,"bytes_per_second":5}}"#,
            "\n",
            r#"{"timestamp":"t","level":"INFO","message":"progress","operation":"backup","bytes_done":20,"bytes_per_second":6}"#,
            "\n",
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"other"}}"#,
            "\n",
            "not json\n"
        );
        assert_eq!(
            parse_progress(log),
            Some(BackupProgress {
                bytes_done: 20,
                bytes_per_second: 6
            })
        );
        assert_eq!(parse_progress("nothing"), None);
    }
}
