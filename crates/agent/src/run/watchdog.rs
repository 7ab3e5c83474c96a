//! Keeps the server's own guard on the primary's lease each pass (`decide::watchdog` says what
//! to change, `sql::watchdog` how): read where it stands, install it, move or remove the
//! stamp, switch the event scheduler. A failure is the reason a primary stays read-only, not a
//! lost pass, and no statement waits more than a second for a lock. A pass comes to move the
//! stamp before it runs out, whatever the pass interval.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::error::AgentError;
use super::observe::{exec, row_texts, timed};
use super::pass::Agent;
use crate::decide::labels::Role;
use crate::decide::lease::LeaseState;
use crate::decide::sql::{self, WatchdogState, ER_NO_SUCH_TABLE, WATCHDOG_STATE_QUERY};
use crate::decide::topology::Observed;
use crate::decide::watchdog::{self, StampChange, WatchdogInput, WatchdogPlan, RESTAMP_LEAD};

impl Agent {
    /// Brings the watchdog where this pass wants it. `Ok(Some(why))`: a member that needs it
    /// (failover on) does not have it in place; `Err` only when the connection is lost.
    pub(super) async fn keep_watchdog(
        &mut self,
        role: Option<Role>,
        lease: &LeaseState,
        observed: &Observed,
    ) -> Result<Option<String>, AgentError> {
        let fenced = self.fence.as_ref().is_some_and(|f| f.remaining().is_some());
        if !watchdog::looked_at(observed.engine, role, lease, fenced) {
            return Ok(None);
        }
        let lease_required = self.config.primary_lease;
        let conn = &mut self.server().conn;
        let read_at = Instant::now();
        let state = match timed(conn.query_first::<mysql_async::Row, _>(WATCHDOG_STATE_QUERY)).await
        {
            Ok(row) => row.map_or(WatchdogState::ABSENT, |r| {
                WatchdogState::parse(&row_texts(&r))
            }),
            Err(mysql_async::Error::Server(e)) if e.code == ER_NO_SUCH_TABLE => {
                WatchdogState::ABSENT
            }
            Err(mysql_async::Error::Server(e)) => {
                let why = format!(
                    "failed to read the lease watchdog: error {}: {}",
                    e.code, e.message
                );
                return Ok(self.watchdog_failed(why).filter(|_| lease_required));
            }
            Err(source) => {
                return Err(AgentError::Observe {
                    what: "the lease watchdog",
                    source: Box::new(source),
                })
            }
        };
        self.converged.stamp_end = state
            .stamp
            .filter(|(us, ours)| *ours && *us > 0)
            .map(|(us, _)| read_at + Duration::from_micros(us as u64));
        let plan = watchdog::plan(&WatchdogInput {
            engine: observed.engine,
            lease_required,
            role,
            lease,
            read_only: observed.read_only,
            fenced,
            state: &state,
        });
        if let Err(why) = self.carry_out_watchdog(&plan).await? {
            return Ok(self.watchdog_failed(why).filter(|_| lease_required));
        }
        if plan.install {
            tracing::info!("lease watchdog installed in the server");
        }
        if plan.stamp == StampChange::Clear {
            tracing::info!("lease watchdog's stamp removed: this member needs none");
        }
        if let Some(on) = plan.scheduler {
            tracing::info!(on, "event scheduler switched for the lease watchdog");
        }
        self.converged.watchdog_failure = None;
        Ok(None)
    }

    /// Sends the plan's statements: the table first, the stamp (its end read again from the
    /// lease just before, so that the time spent since the pass began does not stretch it),
    /// the scheduler, then the event. The inner `Err` is a statement's failure, on one line.
    async fn carry_out_watchdog(
        &mut self,
        plan: &WatchdogPlan,
    ) -> Result<Result<(), String>, AgentError> {
        let mut statements = Vec::new();
        if plan.install {
            statements.push(sql::create_watchdog_table());
        }
        match plan.stamp {
            StampChange::Set(_) => {
                let Some(end) = self.lease.deadline().filter(|d| *d > Instant::now()) else {
                    // Run out meanwhile: the pass's decision fences.
                    return Ok(Ok(()));
                };
                let left = end.saturating_duration_since(Instant::now());
                statements.push(sql::stamp_watchdog(left.as_micros() as u64));
                self.converged.stamp_end = Some(end);
            }
            StampChange::Clear => {
                statements.push(sql::clear_watchdog());
                self.converged.stamp_end = None;
            }
            StampChange::Keep => {}
        }
        if let Some(on) = plan.scheduler {
            statements.push(sql::set_event_scheduler(on));
        }
        if plan.install {
            statements.extend(sql::install_watchdog_event());
        }
        let conn = &mut self.server().conn;
        for st in &statements {
            if let Err(e) = exec(conn, st, &[]).await {
                if e.connection_lost() {
                    return Err(e);
                }
                self.converged.stamp_end = None;
                return Ok(Err(bulwark_engine::error::chain(&e)));
            }
        }
        Ok(Ok(()))
    }

    /// When a pass should come to move the stamp before it runs out, however long the pass
    /// interval: [`RESTAMP_LEAD`] before its end, while that is ahead.
    pub(super) fn restamp_due(&self) -> Option<Instant> {
        self.converged
            .stamp_end
            .and_then(|end| end.checked_sub(RESTAMP_LEAD))
            .filter(|at| *at > Instant::now())
    }

    /// Logs a failure once however often it repeats, and gives it as the reason (which holds
    /// a primary read-only only where failover needs the watchdog).
    fn watchdog_failed(&mut self, why: String) -> Option<String> {
        if self.converged.watchdog_failure.as_ref() != Some(&why) {
            tracing::warn!(error = %why, "cannot keep the lease watchdog");
            self.converged.watchdog_failure = Some(why.clone());
        }
        Some(why)
    }
}
