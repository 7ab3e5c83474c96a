//! Whether a replica provably holds what its primary had logged a moment ago, and nothing the
//! primary lacks. `Seconds_Behind_Master` is 0 whenever the applier has applied all it
//! received, whether or not anything arrives, so a replica whose receiver is connected but gets
//! nothing looks current. Readiness therefore also rests on the primary's own position, read
//! from it directly (a read begun by each pass that has none under way) and kept as timed
//! samples, each stamped when its read was asked: a replica is within `d` of its
//! primary when it holds everything a sample taken `d` ago held. Pure: the pass records the
//! samples and the instants.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bulwark_contract::gtid;
use bulwark_contract::Engine;

/// Samples kept at most, whatever the interval: enough for a maximum lag of minutes at the
/// default 2 s interval.
const KEPT: usize = 1024;

/// How long a read of the primary's position may go unanswered before it counts as no answer.
pub const SLOW_ANSWER: Duration = Duration::from_secs(1);

/// What a failed read of the primary's position says of the way to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Nothing answered: no connection, or none within the time allowed.
    NoAnswer,
    /// The server answered, with an error (too many connections, a refused login): it runs.
    Answered,
    /// Nothing can be told (the name did not resolve, the request could not be made).
    Unknown,
}

/// The primary's position and history as read at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sample {
    at: Instant,
    /// `@@gtid_binlog_pos` (MariaDB) or `@@gtid_executed` (MySQL).
    position: String,
    /// `@@gtid_binlog_state` (MariaDB; empty on MySQL).
    history: String,
}

/// What the replica holds, as its pass observed it.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    /// Server family.
    pub engine: Engine,
    /// When the server was observed.
    pub at: Instant,
    /// What it has logged: `@@gtid_binlog_pos` (MariaDB) or `@@gtid_executed` (MySQL).
    pub logged: &'a str,
    /// Its history: `@@gtid_binlog_state` (MariaDB; empty on MySQL).
    pub history: &'a str,
}

/// How the replica stands against its primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceLag {
    /// Not measured: the member is no replica, or its replication is not running.
    NotMeasured,
    /// It holds everything the primary had logged this long ago (and perhaps more).
    Within(Duration),
    /// It lacks something the primary had logged at least this long ago.
    Behind {
        /// Age of the oldest sample kept: it holds none of them.
        at_least: Duration,
        /// The primary's newest position.
        primary: String,
        /// What the replica has logged.
        replica: String,
    },
    /// It holds transactions the primary lacks.
    Diverged {
        /// The primary's position.
        primary: String,
        /// The replica's history (MariaDB) or set (MySQL).
        replica: String,
    },
    /// The primary's position could not be read for longer than the replica may lag.
    Unreadable(String),
    /// The primary's position could not be read through the primary Service, which lists only
    /// a ready primary: one that fenced itself or loads a backup takes no client writes, and
    /// the receiver's own figure stands.
    Unconfirmed(String),
}

/// The primary's positions read by one replica, newest last, for one source.
#[derive(Debug, Default)]
pub struct SourceSamples {
    /// The source and epoch the samples are of; others' samples say nothing of this one.
    of: Option<(String, u64)>,
    /// The samples are read through the primary Service, which lists only a ready primary.
    through_service: bool,
    samples: VecDeque<Sample>,
    /// The last failed read, when it came after the newest sample.
    failure: Option<String>,
    /// When the reads that fail since the last one that succeeded began.
    failing_since: Option<Instant>,
    /// The run was begun by a read still unanswered ([`SourceSamples::unanswered`]), which
    /// has not ended yet: undone if it ends saying nothing of the server.
    provisional: bool,
    /// When the last read the server answered in any way got its answer, while reads go on.
    heard: Option<Instant>,
    /// The last judgment found the replica holding what the primary lacks: a second in a row
    /// says so (MySQL adds a GTID to its set only after a semi-sync replica acknowledged it).
    diverging: bool,
}

impl SourceSamples {
    /// Forgets the samples unless they are of `host` at `epoch`: after a change of primary, an
    /// old one's positions prove nothing. `through_service`: `host` is the primary Service (no
    /// order named the primary's pod).
    pub fn follow(&mut self, host: &str, epoch: u64, through_service: bool) {
        let now = Some((host.to_owned(), epoch));
        if self.of != now {
            *self = SourceSamples {
                of: now,
                ..SourceSamples::default()
            };
        }
        self.through_service = through_service;
    }

    /// Keeps a position read at `at`, whose answer came at `answered`.
    pub fn record(&mut self, at: Instant, answered: Instant, position: String, history: String) {
        self.failure = None;
        self.failing_since = None;
        self.provisional = false;
        self.heard = Some(answered);
        self.samples.push_back(Sample {
            at,
            position,
            history,
        });
        while self.samples.len() > KEPT {
            self.samples.pop_front();
        }
    }

    /// Notes a read begun at `at` that failed, its end at `ended`. Only a read of the
    /// primary's pod that nothing answered starts (or continues) a run of failures: through
    /// the Service a primary that is merely not ready (its agent dead, its server running)
    /// fails the same way, and a server that answers with an error runs (heard then).
    pub fn failed(&mut self, at: Instant, ended: Instant, error: String, reach: Reach) {
        self.failure = Some(error);
        self.diverging = false;
        let provisional = std::mem::replace(&mut self.provisional, false);
        match reach {
            Reach::NoAnswer if !self.through_service => {
                self.failing_since.get_or_insert(at);
            }
            Reach::Answered => {
                self.failing_since = None;
                self.heard = Some(ended);
            }
            // A run this read began while unanswered says nothing once it ends so.
            Reach::Unknown if provisional => self.failing_since = None,
            Reach::NoAnswer | Reach::Unknown => {}
        }
    }

    /// A read of the primary's pod whose connection began at `at` (once its name resolved: a
    /// slow name service says nothing of the server) still has no answer at `now`: a live
    /// server answers within milliseconds, so one that has not for [`SLOW_ANSWER`] starts (or
    /// continues) a run of failures as a read that got none would, without waiting out the
    /// read's own timeout. An answer that comes after all ends the run; an end that says
    /// nothing of the server undoes a run the read began.
    pub fn unanswered(&mut self, at: Instant, now: Instant) {
        if !self.through_service
            && self.failing_since.is_none()
            && now.saturating_duration_since(at) >= SLOW_ANSWER
        {
            self.failing_since = Some(at);
            self.provisional = true;
        }
    }

    /// Nothing was read this pass (the member is no replica whose receiver and applier run): a
    /// run of failures ends here, the samples stay (they still prove what the primary had),
    /// and when the primary last answered says nothing of it now.
    pub fn not_read(&mut self) {
        self.failure = None;
        self.failing_since = None;
        self.provisional = false;
        self.heard = None;
    }

    /// Whether the run of failures was begun by a read that has not ended yet.
    pub fn provisional(&self) -> bool {
        self.provisional && self.failing_since.is_some()
    }

    /// How long ago, as of `now`, the primary's server last answered a read; `None` when
    /// no read of this primary at this epoch succeeded, or reads stopped.
    pub fn heard_ago(&self, now: Instant) -> Option<Duration> {
        self.heard.map(|at| now.saturating_duration_since(at))
    }

    /// How long the reads have failed, as of `now`; `None` while the last one succeeded.
    pub fn unreachable_for(&self, now: Instant) -> Option<Duration> {
        self.failing_since
            .map(|since| now.saturating_duration_since(since))
    }

    /// How `replica` stands, given that it may lag `max_lag`. Samples older than the newest
    /// one it holds prove less and are dropped. Divergence is judged only against a sample
    /// taken after the replica was observed (an older one may rightly hold less than the
    /// replica has applied since), and said only when two passes in a row find it.
    pub fn judge(&mut self, replica: &Holding<'_>, max_lag: Duration) -> SourceLag {
        match self.lag(replica, max_lag) {
            SourceLag::Unreadable(why) if self.through_service => SourceLag::Unconfirmed(why),
            lag => lag,
        }
    }

    fn lag(&mut self, replica: &Holding<'_>, max_lag: Duration) -> SourceLag {
        let age = |s: &Sample| replica.at.saturating_duration_since(s.at);
        if let Some(newest) = self.samples.back().filter(|s| s.at >= replica.at) {
            let diverging = !gtid::holds_nothing_beyond(
                replica.engine,
                replica.logged,
                replica.history,
                &newest.position,
                &newest.history,
            );
            let again = std::mem::replace(&mut self.diverging, diverging);
            if diverging && again {
                let shown = match replica.history {
                    "" => replica.logged,
                    history => history,
                };
                return SourceLag::Diverged {
                    primary: newest.position.clone(),
                    replica: shown.to_owned(),
                };
            }
        }
        let held = self
            .samples
            .iter()
            .rposition(|s| gtid::within(replica.engine, &s.position, replica.logged));
        if let Some(i) = held {
            self.samples.drain(..i);
            let lag = age(&self.samples[0]);
            return match &self.failure {
                Some(error) if lag > max_lag => {
                    SourceLag::Unreadable(format!("{error} (last read {}s ago)", lag.as_secs()))
                }
                _ => SourceLag::Within(lag),
            };
        }
        match (self.samples.front(), self.samples.back(), &self.failure) {
            (Some(oldest), Some(newest), _) => SourceLag::Behind {
                at_least: age(oldest),
                primary: newest.position.clone(),
                replica: replica.logged.to_owned(),
            },
            (_, _, Some(error)) => SourceLag::Unreadable(error.clone()),
            _ => SourceLag::Unreadable("not read yet".to_owned()),
        }
    }
}

#[cfg(test)]
#[path = "caught_up_tests.rs"]
mod tests;
