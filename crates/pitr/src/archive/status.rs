//! The archiver's report for `GET /status`: how far the archive reaches, how far behind the
//! server it may be, its gaps and the current recovery window. The archiver loop records what
//! happens in an [`ArchiverRecord`]; the figures are derived by pure functions, table-tested.

use crate::binlog::GtidPos;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulwark_contract::archive::{ArchiveStatus, LostBranch, MAX_LOST_BRANCHES};
use chrono::{DateTime, SecondsFormat, Utc};

use super::manifest::SegmentManifest;
use super::retain;
use super::window;
use bulwark_engine::repo::CompleteBackup;

/// Seconds the archive may be behind: 0 while streaming with nothing uncommitted; since the
/// oldest uncommitted transaction arrived; or, while not streaming, since the stream was last
/// known to be current (else since the archiver started).
pub fn lag(
    streaming: bool,
    oldest_pending: Option<Instant>,
    last_current: Option<Instant>,
    started: Instant,
    now: Instant,
) -> Duration {
    let since = |t: Instant| now.saturating_duration_since(t);
    match (streaming, oldest_pending) {
        (true, Some(p)) => since(p),
        (true, None) => Duration::ZERO,
        (false, p) => since(
            [p, last_current]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(started),
        ),
    }
}

/// The current recovery window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentWindow {
    /// The finish time of the oldest backup whose chain reaches the archive's end.
    pub from: DateTime<Utc>,
    /// That backup.
    pub from_backup: String,
    /// The last archived commit.
    pub to: DateTime<Utc>,
    /// The newest backup whose chain reaches the end: retention never removes it
    /// ([`super::retain::window_base`]).
    pub base_backup: String,
}

/// The current recovery window; `None` when no backup reaches the archive's end.
pub fn window(backups: &[CompleteBackup], segments: &[SegmentManifest]) -> Option<CurrentWindow> {
    let newest = segments
        .iter()
        .max_by_key(|s| (s.received_at, s.id.clone()))?;
    let reaching: Vec<(&CompleteBackup, window::Window)> = backups
        .iter()
        .filter_map(|b| {
            let (w, _) = super::replay::window_of(b, segments).ok()?;
            (w.to == newest.through).then_some((b, w))
        })
        .collect();
    let (oldest, w) = reaching
        .iter()
        .min_by_key(|(b, w)| (w.from_time, b.manifest.id.clone()))?;
    let base = retain::newest_of(
        reaching
            .iter()
            .map(|(b, w)| ((b.manifest.finished_at, b.manifest.id.as_str()), b, &w.from)),
    )?;
    Some(CurrentWindow {
        from: w.from_time,
        from_backup: oldest.manifest.id.clone(),
        to: w.to_time,
        base_backup: base.manifest.id.clone(),
    })
}

/// What the archiver has seen, shared between its loop and its endpoint.
#[derive(Debug)]
pub struct ArchiverRecord {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    report: ArchiveStatus,
    oldest_pending: Option<Instant>,
    last_current: Option<Instant>,
    started: Instant,
    /// When the archiver's loop last turned (`None` before it first did: reading a large
    /// archive at start is not a stall).
    last_turn: Option<Instant>,
    /// The archive's end and until when it is covered while idle.
    covered: Option<(String, DateTime<Utc>)>,
}

/// `/healthz` fails when the archiver's loop has not turned for this long (it turns at least on
/// every heartbeat, and every few seconds while reconnecting): a commit or a listing hangs.
pub const STALL_LIMIT: Duration = Duration::from_secs(120);

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl ArchiverRecord {
    pub fn new(archive: &str) -> Arc<ArchiverRecord> {
        Arc::new(ArchiverRecord {
            state: Mutex::new(State {
                report: ArchiveStatus {
                    archive: archive.to_owned(),
                    ..ArchiveStatus::default()
                },
                oldest_pending: None,
                last_current: None,
                started: Instant::now(),
                last_turn: None,
                covered: None,
            }),
        })
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.state.lock().expect("archiver record lock"));
    }

    /// The archiver's loop turned.
    pub fn turned(&self) {
        self.with(|s| s.last_turn = Some(Instant::now()));
    }

    /// How long the loop has not turned, when that is longer than `limit`.
    pub fn stalled(&self, limit: Duration) -> Option<Duration> {
        let idle = self
            .state
            .lock()
            .expect("archiver record lock")
            .last_turn?
            .elapsed();
        (idle > limit).then_some(idle)
    }

    /// The stream opened (`None`) or failed (`Some(cause)`).
    pub fn stream(&self, failure: Option<String>) {
        self.with(|s| {
            s.report.streaming = failure.is_none();
            s.report.error = failure;
            if s.report.streaming {
                s.last_current = Some(Instant::now());
            }
        });
    }

    /// The archive ending at `through` is known complete until `until`: a recovery window that
    /// ends there reaches that time.
    pub fn covered(&self, through: &GtidPos, until: DateTime<Utc>) {
        self.with(|s| s.covered = Some((through.to_string(), until)));
    }

    /// The server said it has nothing newer (a heartbeat), or sent an event.
    pub fn current(&self, uncommitted_since: Option<Instant>) {
        self.with(|s| {
            s.oldest_pending = uncommitted_since;
            if uncommitted_since.is_none() {
                s.last_current = Some(Instant::now());
            }
        });
    }

    /// A segment was committed: the archive reaches further, and so does the recovery window
    /// when there is one and the segment continues the archive's end. Returns false when that
    /// is not so and the caller must [`Self::reviewed`] (which walks every segment: too much for
    /// each commit of a steady archive).
    pub fn advanced(&self, segment: &SegmentManifest) -> bool {
        let mut extended = false;
        self.with(|s| {
            s.oldest_pending = None;
            let continues = s.report.through == segment.after.to_string()
                && s.report.timeline.is_none_or(|t| t == segment.timeline);
            s.report.through = segment.through.to_string();
            s.report.last_commit = Some(stamp(segment.last_commit));
            if continues && s.report.recoverable_to.is_some() {
                s.report.recoverable_to = Some(stamp(segment.last_commit));
                extended = true;
            }
        });
        extended
    }

    /// Windows and gaps recomputed from every segment; `backups` are the archive's backups as
    /// last listed.
    pub fn reviewed(
        &self,
        segments: &[SegmentManifest],
        backups: &[CompleteBackup],
        uncommitted_since: Option<Instant>,
    ) {
        let gaps = window::gaps(segments);
        let newest = segments
            .iter()
            .max_by_key(|s| (s.received_at, s.id.clone()));
        let current = window(backups, segments);
        let timelines = super::history::timelines(segments);
        let timeline = newest.and_then(|n| timelines.iter().find(|t| t.timeline == n.timeline));
        let lost: Vec<LostBranch> = timelines
            .iter()
            .filter_map(|t| {
                let (from, end) = t.left_behind.as_ref()?;
                Some(LostBranch {
                    timeline: t.timeline,
                    began_at: t.began_at.to_string(),
                    branched_from: *from,
                    through: end.to_string(),
                })
            })
            .collect();
        let lost = lost[lost.len().saturating_sub(MAX_LOST_BRANCHES)..].to_vec();
        self.with(|s| {
            s.oldest_pending = uncommitted_since;
            if let Some(n) = newest {
                s.report.through = n.through.to_string();
                s.report.last_commit = Some(stamp(n.last_commit));
            }
            s.report.gaps = gaps.len() as u32;
            s.report.last_gap_resumed_at = gaps.last().map(|g| g.resumed_at.to_string());
            s.report.recoverable_from = current.as_ref().map(|c| stamp(c.from));
            s.report.recoverable_from_backup = current.as_ref().map(|c| c.from_backup.clone());
            s.report.recoverable_to = current.as_ref().map(|c| stamp(c.to));
            s.report.window_base_backup = current.map(|c| c.base_backup);
            s.report.timeline = timeline.map(|t| t.timeline);
            s.report.timeline_began_at = timeline.map(|t| t.began_at.to_string());
            s.report.lost_branches = lost;
            let left = timeline.and_then(|t| t.left_behind.as_ref());
            s.report.branched_from = left.map(|(from, _)| *from);
            s.report.left_behind_through = left.map(|(_, end)| end.to_string());
        });
    }

    /// The report as of now.
    pub fn report(&self) -> ArchiveStatus {
        let s = self.state.lock().expect("archiver record lock");
        let mut r = s.report.clone();
        if let Some((through, until)) = &s.covered {
            let later = r
                .recoverable_to
                .as_deref()
                .is_some_and(|to| DateTime::parse_from_rfc3339(to).is_ok_and(|to| *until > to));
            if *through == r.through && later {
                r.recoverable_to = Some(stamp(*until));
            }
        }
        let lag = lag(
            r.streaming,
            s.oldest_pending,
            s.last_current,
            s.started,
            Instant::now(),
        );
        r.lag_seconds = (lag.as_secs_f64() * 10.0).round() / 10.0;
        r
    }
}

/// Serves `GET /status` (the report as one JSON line) and `GET /healthz` (503 once the
/// archiver's loop has stalled for [`STALL_LIMIT`]) on `listener`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    record: Arc<ArchiverRecord>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use axum::http::StatusCode;
    use axum::routing::get;
    let health = record.clone();
    let healthz = move || {
        let record = health.clone();
        async move {
            match record.stalled(STALL_LIMIT) {
                None => bulwark_http::text(StatusCode::OK, "ok"),
                Some(idle) => bulwark_http::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("the archiver's loop has not turned for {}s", idle.as_secs()),
                ),
            }
        }
    };
    let status = move || {
        let record = record.clone();
        async move {
            let line = serde_json::to_string(&record.report()).expect("report serializes");
            bulwark_http::text(StatusCode::OK, &line)
        }
    };
    let app = bulwark_http::get_only(
        axum::Router::new()
            .route(bulwark_contract::archive::STATUS_PATH, get(status))
            .route("/healthz", get(healthz)),
        "not found; try /status or /healthz",
    );
    let limits = bulwark_http::Limits {
        header: Duration::from_secs(5),
        connection: Duration::from_secs(10),
        max_connections: 8,
        max_per_peer: 4,
    };
    bulwark_http::serve(listener, app, limits, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_turning_is_a_stall_but_one_not_yet_started_is_not() {
        let record = ArchiverRecord::new("a");
        assert_eq!(record.stalled(Duration::ZERO), None);
        record.turned();
        std::thread::sleep(Duration::from_millis(5));
        assert!(record.stalled(Duration::ZERO).is_some());
        assert_eq!(record.stalled(STALL_LIMIT), None);
    }

    #[test]
    fn lag_counts_what_may_be_missing() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let cases = [
            // (streaming, oldest pending, last current, now, lag)
            (true, None, Some(at(5)), at(100), 0),
            (true, Some(at(97)), Some(at(5)), at(100), 3),
            (false, None, Some(at(40)), at(100), 60),
            (false, Some(at(30)), Some(at(40)), at(100), 70),
            (false, None, None, at(100), 100),
        ];
        for (streaming, pending, current, now, want) in cases {
            let got = lag(streaming, pending, current, t0, now);
            assert_eq!(
                got,
                Duration::from_secs(want),
                "{streaming} {pending:?} {current:?}"
            );
        }
    }
}
