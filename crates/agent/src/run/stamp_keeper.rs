//! The lease watchdog's stamp between passes: a task on a connection of its own moves it to
//! the lease's end every half second while the last pass said this member is a primary holding
//! its lease, so a pass stuck in a statement never lets the stamp of a healthy primary run out.
//! It stops with the agent's process: a hung or stopped agent leaves the stamp to run out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::credentials::Credentials;
use super::lease::Lease;
use super::observe::{self, exec};
use crate::decide::sql;
use crate::decide::watchdog::stamp_current;

/// How often the keeper looks at the lease.
const KEEPER_PERIOD: Duration = Duration::from_millis(500);
/// A stamp is not moved this close to the lease's end (it is running out).
const KEEPER_LAST: Duration = Duration::from_millis(300);

/// Whether the keeper moves the stamp: set by each pass from the lease alone
/// ([`crate::decide::watchdog::keeps_stamp`]), before it reads the watchdog.
#[derive(Default)]
pub(super) struct StampKeeper {
    on: AtomicBool,
}

impl StampKeeper {
    pub(super) fn keep(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }
}

/// Moves the stamp to the lease's end every [`KEEPER_PERIOD`] while the pass says so, on a
/// connection of its own: a pass that waits on a statement never lets the stamp of a primary
/// that holds its lease run out. It stops with the agent's process, so a hung or stopped agent
/// leaves the stamp to run out.
pub(super) async fn keep_stamp(
    socket: PathBuf,
    credentials_dir: PathBuf,
    lease: Arc<Lease>,
    keeper: Arc<StampKeeper>,
) {
    let mut conn: Option<mysql_async::Conn> = None;
    let mut written: Option<Instant> = None;
    let mut failure: Option<String> = None;
    loop {
        tokio::time::sleep(KEEPER_PERIOD).await;
        if !keeper.on.load(Ordering::Relaxed) {
            conn = None;
            written = None;
            continue;
        }
        let now = Instant::now();
        let Some(end) = lease.deadline().filter(|d| *d > now + KEEPER_LAST) else {
            continue;
        };
        // Never later than the lease: a stamp past its end (the end moved back) is rewritten.
        let current = written.is_some_and(|w| {
            stamp_current(
                w.saturating_duration_since(now),
                end.saturating_duration_since(now),
            )
        });
        if current {
            continue;
        }
        match stamp_once(&mut conn, &socket, &credentials_dir, end).await {
            Ok(()) => {
                written = Some(end);
                failure = None;
            }
            Err(Refused { why, lost }) => {
                // A server's refusal (a lock wait) keeps the connection; only a lost or
                // hung one is made again.
                if lost {
                    conn = None;
                }
                written = None;
                if failure.as_ref() != Some(&why) {
                    tracing::warn!(error = %why, "cannot move the lease watchdog's stamp");
                    failure = Some(why);
                }
            }
        }
    }
}

/// Why a stamp was not written, and whether the connection is lost with it.
struct Refused {
    why: String,
    lost: bool,
}

/// One stamp at `end`, connecting first when needed.
async fn stamp_once(
    conn: &mut Option<mysql_async::Conn>,
    socket: &Path,
    credentials_dir: &Path,
    end: Instant,
) -> Result<(), Refused> {
    let lost = |why: String| Refused { why, lost: true };
    if conn.is_none() {
        let creds = Credentials::read(credentials_dir)
            .map_err(|e| lost(bulwark_engine::error::chain(&e)))?;
        let server = observe::connect(socket, &creds)
            .await
            .map_err(|e| lost(bulwark_engine::error::chain(&e)))?;
        *conn = Some(server.conn);
    }
    let c = conn.as_mut().expect("connected");
    let left = end.saturating_duration_since(Instant::now());
    let st = sql::stamp_watchdog(left.as_micros() as u64);
    tokio::time::timeout(KEEPER_PERIOD * 4, exec(c, &st, &[]))
        .await
        .map_err(|_| lost("the stamp took over 2s".to_owned()))?
        .map_err(|e| Refused {
            why: bulwark_engine::error::chain(&e),
            lost: e.connection_lost(),
        })
}
