//! Table tests of [`super::SourceSamples::judge`]: one case per way a replica can stand against
//! its primary's sampled positions.

use super::*;

const MAX_LAG: Duration = Duration::from_secs(30);
const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

/// A sample `offset_ms` after (or before, negative) the replica's observation.
type At = i64;

struct Case {
    name: &'static str,
    engine: Engine,
    /// (when, position, history) read from the primary, oldest first.
    samples: Vec<(At, String, &'static str)>,
    failure: Option<&'static str>,
    logged: String,
    history: String,
    /// Read through the primary Service rather than from the primary's pod.
    through_service: bool,
    /// Judged twice in a row with the same samples (divergence is said on the second).
    twice: bool,
    want: SourceLag,
}

fn maria(name: &'static str, samples: Vec<(At, &str, &'static str)>, logged: &str) -> Case {
    Case {
        name,
        engine: Engine::MariaDb,
        samples: samples
            .into_iter()
            .map(|(at, p, h)| (at, p.to_owned(), h))
            .collect(),
        failure: None,
        logged: logged.to_owned(),
        history: logged.to_owned(),
        through_service: false,
        twice: false,
        want: SourceLag::NotMeasured,
    }
}

fn mysql(name: &'static str, samples: Vec<(At, String)>, logged: String) -> Case {
    Case {
        engine: Engine::MySql,
        samples: samples.into_iter().map(|(at, p)| (at, p, "")).collect(),
        logged,
        history: String::new(),
        ..maria(name, vec![], "")
    }
}

impl Case {
    fn history(mut self, history: &str) -> Self {
        self.history = history.to_owned();
        self
    }
    fn through_service(mut self) -> Self {
        self.through_service = true;
        self
    }
    fn twice(mut self) -> Self {
        self.twice = true;
        self
    }
    fn failure(mut self, error: &'static str) -> Self {
        self.failure = Some(error);
        self
    }
    fn want(mut self, want: SourceLag) -> Self {
        self.want = want;
        self
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Samples every 2 s over the last `span` seconds, the primary moving 10 transactions each.
fn steady(span: i64, first_seq: u64) -> Vec<(At, String, &'static str)> {
    (0..=span / 2)
        .map(|i| {
            let at = -span * 1000 + i * 2000 + 100;
            let seq = first_seq + 10 * i as u64;
            (at, format!("0-101-{seq}"), "")
        })
        .collect()
}

#[test]
fn judge() {
    let behind = |at_least: u64, primary: &str, replica: &str| SourceLag::Behind {
        at_least: Duration::from_millis(at_least),
        primary: primary.to_owned(),
        replica: replica.to_owned(),
    };
    let cases = vec![
        maria(
            "holds the previous pass's sample",
            vec![(-2000, "0-101-10", ""), (100, "0-101-12", "")],
            "0-101-11",
        )
        .want(SourceLag::Within(secs(2))),
        maria(
            "level with a sample taken after it",
            vec![(100, "0-101-12", "0-101-12")],
            "0-101-12",
        )
        .want(SourceLag::Within(Duration::ZERO)),
        maria(
            "the first sample, not held yet",
            vec![(100, "0-101-12", "0-101-12")],
            "0-101-11",
        )
        .want(behind(0, "0-101-12", "0-101-11")),
        // What Seconds_Behind_Master calls 0 s behind: the receiver connected, nothing
        // arriving, the applier idle.
        Case {
            samples: steady(60, 100),
            ..maria("connected but receiving nothing", vec![], "0-100-24")
        }
        .history("0-100-24")
        .want(behind(59_900, "0-101-400", "0-100-24")),
        maria(
            "an old primary's commit nobody received, seen once: not said yet",
            vec![(100, "0-101-30", "0-100-24,0-101-30")],
            "0-101-30",
        )
        .history("0-100-25,0-101-30")
        .want(SourceLag::Within(Duration::ZERO)),
        maria(
            "an old primary's commit nobody received, seen twice",
            vec![(100, "0-101-30", "0-100-24,0-101-30")],
            "0-101-30",
        )
        .history("0-100-25,0-101-30")
        .twice()
        .want(SourceLag::Diverged {
            primary: "0-101-30".into(),
            replica: "0-100-25,0-101-30".into(),
        }),
        maria(
            "divergence judged only by a sample newer than the replica",
            vec![(-1000, "0-101-30", "0-100-24,0-101-30")],
            "0-101-31",
        )
        .history("0-100-24,0-101-31")
        .want(SourceLag::Within(secs(1))),
        maria(
            "a short failure to read the primary",
            vec![(-4000, "0-101-30", "")],
            "0-101-30",
        )
        .failure("connection refused")
        .want(SourceLag::Within(secs(4))),
        maria(
            "the primary unreadable for longer than the lag allowed",
            vec![(-40_000, "0-101-30", "")],
            "0-101-30",
        )
        .failure("connection refused")
        .want(SourceLag::Unreadable(
            "connection refused (last read 40s ago)".into(),
        )),
        maria("never read", vec![], "0-101-30")
            .failure("connection refused")
            .want(SourceLag::Unreadable("connection refused".into())),
        maria("never read through the Service", vec![], "0-101-30")
            .failure("connection refused")
            .through_service()
            .want(SourceLag::Unconfirmed("connection refused".into())),
        maria("not read yet", vec![], "0-101-30")
            .want(SourceLag::Unreadable("not read yet".into())),
        mysql(
            "MySQL sets",
            vec![
                (-2000, format!("{UUID}:1-10")),
                (100, format!("{UUID}:1-14")),
            ],
            format!("{UUID}:1-12"),
        )
        .want(SourceLag::Within(secs(2))),
        mysql(
            "MySQL: a transaction the primary lacks",
            vec![(100, format!("{UUID}:1-14"))],
            format!("{UUID}:1-14,4e11fa47-71ca-11e1-9e33-c80aa9429562:1"),
        )
        .twice()
        .want(SourceLag::Diverged {
            primary: format!("{UUID}:1-14"),
            replica: format!("{UUID}:1-14,4e11fa47-71ca-11e1-9e33-c80aa9429562:1"),
        }),
    ];
    for c in cases {
        let observed = Instant::now() + Duration::from_secs(3600);
        let mut samples = SourceSamples::default();
        samples.follow("quay-1.quay-headless", 1, c.through_service);
        for (at, position, history) in &c.samples {
            let at = if *at >= 0 {
                observed + Duration::from_millis(*at as u64)
            } else {
                observed - Duration::from_millis(at.unsigned_abs())
            };
            samples.record(at, at, position.clone(), (*history).to_owned());
        }
        if let Some(error) = c.failure {
            samples.failed(observed, observed, error.to_owned(), Reach::NoAnswer);
        }
        let replica = Holding {
            engine: c.engine,
            at: observed,
            logged: &c.logged,
            history: &c.history,
        };
        let mut got = samples.judge(&replica, MAX_LAG);
        if c.twice {
            got = samples.judge(&replica, MAX_LAG);
        }
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn a_new_primarys_samples_start_afresh_and_older_ones_are_dropped() {
    let t = Instant::now();
    let mut samples = SourceSamples::default();
    samples.follow("quay-0.quay-headless", 0, false);
    samples.record(t, t, "0-100-5".into(), String::new());
    samples.record(t + secs(2), t + secs(2), "0-100-9".into(), String::new());
    let replica = |at, logged: &'static str| Holding {
        engine: Engine::MariaDb,
        at,
        logged,
        history: logged,
    };
    assert_eq!(
        samples.judge(&replica(t + secs(3), "0-100-9"), MAX_LAG),
        SourceLag::Within(secs(1))
    );
    // The sample at t was dropped: only the one held proves anything.
    assert_eq!(samples.samples.len(), 1);
    samples.follow("quay-0.quay-headless", 0, false);
    assert_eq!(samples.samples.len(), 1, "same source, same epoch: kept");
    samples.follow("quay-1.quay-headless", 1, false);
    assert_eq!(
        samples.judge(&replica(t + secs(4), "0-100-9"), MAX_LAG),
        SourceLag::Unreadable("not read yet".into())
    );
}

#[test]
fn a_run_of_failed_reads_is_timed_from_its_first_unanswered_one() {
    let t = Instant::now();
    let mut samples = SourceSamples::default();
    samples.follow("quay-0.quay-headless", 0, false);
    assert_eq!(samples.unreachable_for(t), None);
    samples.failed(t, t, "timed out".into(), Reach::NoAnswer);
    samples.failed(
        t + secs(5),
        t + secs(5),
        "timed out".into(),
        Reach::NoAnswer,
    );
    assert_eq!(samples.unreachable_for(t + secs(8)), Some(secs(8)));
    // A name that does not resolve tells nothing either way.
    samples.failed(
        t + secs(8),
        t + secs(8),
        "no such host".into(),
        Reach::Unknown,
    );
    assert_eq!(samples.unreachable_for(t + secs(9)), Some(secs(9)));
    // A server that answers with an error runs.
    samples.failed(
        t + secs(9),
        t + secs(9),
        "too many connections".into(),
        Reach::Answered,
    );
    assert_eq!(samples.unreachable_for(t + secs(10)), None);
    samples.failed(
        t + secs(10),
        t + secs(10),
        "refused".into(),
        Reach::NoAnswer,
    );
    samples.record(t + secs(11), t + secs(11), "0-100-5".into(), String::new());
    assert_eq!(samples.unreachable_for(t + secs(12)), None);
    samples.failed(
        t + secs(13),
        t + secs(13),
        "refused".into(),
        Reach::NoAnswer,
    );
    assert_eq!(samples.unreachable_for(t + secs(14)), Some(secs(1)));
    samples.not_read();
    assert_eq!(samples.unreachable_for(t + secs(15)), None);
    // Through the primary Service, a primary that is merely not ready fails the same way.
    samples.follow("quay-primary", 0, true);
    samples.failed(
        t + secs(16),
        t + secs(16),
        "timed out".into(),
        Reach::NoAnswer,
    );
    assert_eq!(samples.unreachable_for(t + secs(30)), None);
}

#[test]
fn the_primary_was_last_heard_when_its_last_answer_came() {
    let t = Instant::now();
    let mut samples = SourceSamples::default();
    samples.follow("quay-0.quay-headless", 0, false);
    assert_eq!(samples.heard_ago(t), None, "nothing read yet");
    samples.record(t, t + secs(1), "0-100-5".into(), String::new());
    assert_eq!(
        samples.heard_ago(t + secs(3)),
        Some(secs(2)),
        "from the answer, not the ask"
    );
    // Failed reads leave the last answer standing, and time the run apart.
    samples.failed(
        t + secs(4),
        t + secs(4),
        "timed out".into(),
        Reach::NoAnswer,
    );
    assert_eq!(samples.heard_ago(t + secs(8)), Some(secs(7)));
    assert_eq!(samples.unreachable_for(t + secs(8)), Some(secs(4)));
    // A server that answers with an error runs: heard then.
    samples.failed(
        t + secs(9),
        t + secs(9),
        "too many connections".into(),
        Reach::Answered,
    );
    assert_eq!(samples.heard_ago(t + secs(10)), Some(secs(1)));
    // Reads that stop say nothing of the primary now.
    samples.not_read();
    assert_eq!(samples.heard_ago(t + secs(11)), None);
    // Nor does an answer from the primary before a change of primary.
    samples.record(t + secs(12), t + secs(12), "0-100-6".into(), String::new());
    samples.follow("quay-1.quay-headless", 1, false);
    assert_eq!(samples.heard_ago(t + secs(13)), None);
}

#[test]
fn a_read_long_without_an_answer_starts_a_run_of_failures_from_its_ask() {
    let t = Instant::now();
    let mut samples = SourceSamples::default();
    samples.follow("quay-0.quay-headless", 0, false);
    samples.unanswered(t, t + Duration::from_millis(300));
    assert_eq!(
        samples.unreachable_for(t + secs(1)),
        None,
        "a slow answer is no failure yet"
    );
    samples.unanswered(t, t + secs(2));
    assert_eq!(samples.unreachable_for(t + secs(3)), Some(secs(3)));
    // Its timeout later does not move the run's start.
    samples.failed(t, t + secs(3), "timed out".into(), Reach::NoAnswer);
    assert_eq!(samples.unreachable_for(t + secs(4)), Some(secs(4)));
    // An answer that comes after all ends it.
    samples.record(t + secs(4), t + secs(4), "0-100-5".into(), String::new());
    assert_eq!(samples.unreachable_for(t + secs(5)), None);
    // Through the primary Service a primary that is merely not ready is no failure.
    samples.follow("quay-primary", 0, true);
    samples.unanswered(t + secs(6), t + secs(9));
    assert_eq!(samples.unreachable_for(t + secs(9)), None);
}

#[test]
fn a_run_an_unanswered_read_began_is_undone_when_it_ends_saying_nothing() {
    let t = Instant::now();
    let mut samples = SourceSamples::default();
    samples.follow("quay-0.quay-headless", 0, false);
    samples.unanswered(t, t + secs(2));
    assert_eq!(samples.unreachable_for(t + secs(2)), Some(secs(2)));
    assert!(samples.provisional(), "until the read ends");
    samples.failed(t, t + secs(3), "connection closed".into(), Reach::Unknown);
    assert!(!samples.provisional());
    assert_eq!(samples.unreachable_for(t + secs(3)), None);
    // A run that a read with no answer began stays whatever a later one says.
    samples.failed(
        t + secs(4),
        t + secs(7),
        "timed out".into(),
        Reach::NoAnswer,
    );
    samples.unanswered(t + secs(8), t + secs(10));
    samples.failed(t + secs(8), t + secs(11), "closed".into(), Reach::Unknown);
    assert_eq!(samples.unreachable_for(t + secs(12)), Some(secs(8)));
    // An error answer is heard when it came, not when it was asked.
    samples.failed(
        t + secs(12),
        t + secs(14),
        "too many connections".into(),
        Reach::Answered,
    );
    assert_eq!(samples.heard_ago(t + secs(15)), Some(secs(1)));
}
