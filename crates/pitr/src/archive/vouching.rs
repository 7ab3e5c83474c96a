//! The archiver's record of quiet periods: on a heartbeat with nothing gathered it asks the
//! streamed server how quiet it is ([`super::quiet`]) every [`COVER_EVERY`] and writes the
//! archive's coverage ([`super::coverage`]); a transaction that lands inside a period already
//! recorded is reported. Failures only delay the next record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::connect::connect;
use super::coverage::{self, Coverage};
use super::gathering::Gathering;
use super::quiet::{self, Unvouched};
use super::status::ArchiverRecord;
use crate::binlog::{Gtid, GtidPos};
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::source::Connection;
use bulwark_engine::store::Store;

/// How long asking the server how quiet it is, or recording the answer, may take.
const COVER_TIMEOUT: Duration = Duration::from_secs(5);

/// How often an idle archive's coverage is written again: a time target in a quiet period is
/// recoverable once the coverage passes it, at the cost of one small object written this often.
pub const COVER_EVERY: Duration = Duration::from_secs(10);

/// What the archiver keeps to record quiet periods.
#[derive(Default)]
pub struct Vouching {
    /// When the coverage was last attempted, and of which end.
    attempted: Option<(Instant, GtidPos)>,
    /// The connection that asks the server how quiet it is (not the stream's); a new one for
    /// each session, so it never asks another server than the one streamed.
    prober: Option<mysql_async::Conn>,
    /// The server cannot vouch for its quiet (why is said once): no coverage is written.
    refused: bool,
    /// Until when the coverage last written vouched for the archive's end, while it still
    /// ends there.
    vouched: Option<DateTime<Utc>>,
}

impl Vouching {
    /// A new replication session (perhaps with another server): the prober goes.
    pub fn new_session(&mut self) {
        self.prober = None;
    }

    /// A transaction arrived (the archive's end moves on): one stamped inside the period last
    /// recorded came from a session that set its own timestamp.
    pub fn arrived(&mut self, gtid: Gtid, committed: u32) {
        if let Some(until) = self.vouched.take() {
            if i64::from(committed) <= until.timestamp() {
                tracing::error!(%gtid, committed, covered_until = %until, "a transaction stamped inside a quiet period arrived after the period was recorded (a session set its own timestamp): a restore to a time in between made meanwhile missed it");
            }
        }
    }

    /// On a heartbeat: records the quiet period when nothing is gathered and the last record
    /// is older than [`COVER_EVERY`].
    pub async fn heartbeat(
        &mut self,
        archive: &str,
        conn: &Connection,
        gathering: &Gathering,
        store: &Arc<dyn Store>,
        key: Option<&MasterKey>,
        record: &ArchiverRecord,
    ) {
        let through = gathering.through.clone();
        if !gathering.is_empty() || through.is_empty() || self.refused {
            return;
        }
        let fresh = self
            .attempted
            .as_ref()
            .is_some_and(|(at, end)| *end == through && at.elapsed() < COVER_EVERY);
        if fresh {
            return;
        }
        // Whatever happens, not again before the next period.
        self.attempted = Some((Instant::now(), through.clone()));
        let Some(quiet) = self.ask(conn).await else {
            return;
        };
        let streamed = gathering.source.as_ref().map(|s| s.server_id);
        if streamed != Some(quiet.server_id) {
            self.prober = None;
            return;
        }
        let Some(covered_until) = coverage::covered_until(&through, &quiet) else {
            return;
        };
        let coverage = Coverage {
            archive: archive.to_owned(),
            timeline: gathering.timeline,
            through,
            covered_until,
        };
        let written =
            tokio::time::timeout(COVER_TIMEOUT, coverage::write(store, key, &coverage)).await;
        match written {
            Ok(Ok(())) => {
                record.covered(&coverage.through, coverage.covered_until);
                self.vouched = Some(coverage.covered_until);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::error::chain(&e), "cannot record the archive's coverage");
            }
            Err(_) => tracing::warn!("recording the archive's coverage took too long"),
        }
    }

    async fn ask(&mut self, conn: &Connection) -> Option<coverage::Quiet> {
        let prober = self.prober.take();
        let asked = tokio::time::timeout(COVER_TIMEOUT, async {
            let mut prober = match prober {
                Some(c) => c,
                None => connect(conn)
                    .await
                    .map_err(|e| Unvouched::Query(crate::error::chain(&e)))?,
            };
            let quiet = quiet::probe(&mut prober).await;
            Ok::<_, Unvouched>((prober, quiet?))
        })
        .await;
        match asked {
            Ok(Ok((prober, quiet))) => {
                self.prober = Some(prober);
                Some(quiet)
            }
            Ok(Err(why)) => {
                if why.lasting() {
                    tracing::info!(reason = %why, "quiet periods are not recorded");
                    self.refused = true;
                } else {
                    tracing::debug!(reason = %why, "cannot ask the server how quiet it is");
                }
                None
            }
            Err(_) => {
                tracing::debug!("the server did not say how quiet it is in time");
                None
            }
        }
    }
}
