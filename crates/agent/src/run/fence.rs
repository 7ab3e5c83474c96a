//! A demoted MariaDB primary's hold on writes. MariaDB's `read_only` lets accounts with READ
//! ONLY ADMIN (root, any `GRANT ALL ON *.*`) commit, and a Service follows a label change only
//! after a moment, so clients can still reach the old primary. For a while after the demotion
//! a session of the agent's own holds the global read lock, which stops every commit whatever
//! the account, and ends every client session (those waiting on the lock included) every
//! fraction of a second: a client still routed here fails at once and retries, reaching the
//! new primary once the Service does, instead of committing here or hanging.
//!
//! A primary whose lease lapsed holds its writes the same way, but until it is released (the
//! lease renewed, or the member demoted).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::decide::sql;

/// Time between two rounds of ended sessions.
const ROUND: Duration = Duration::from_millis(200);
/// Attempts at the lock, each after the client sessions were ended.
const FENCE_LOCK_ROUNDS: u32 = 5;
/// How long a lapsed lease's hold is kept when the agent stops.
const SHUTDOWN_HOLD: Duration = Duration::from_secs(5);

/// A running hold.
pub struct Fence {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    /// The end of the hold; `None`: until released.
    until: Arc<Mutex<Option<Instant>>>,
    /// The agent's own session, which the hold spares (it changes when the agent reconnects).
    spared: Arc<AtomicU64>,
    /// The session holding the lock.
    pub session: u64,
}

impl Fence {
    /// Takes the lock on a new session and holds it for `hold` (`None`: until released),
    /// sparing the agent's own session `agent_session`.
    pub async fn hold(
        opts: mysql_async::Opts,
        agent_session: u64,
        hold: Option<Duration>,
    ) -> Result<Fence, mysql_async::Error> {
        let mut conn = mysql_async::Conn::new(opts).await?;
        conn.query_drop(sql::short_lock_wait().sql.as_str()).await?;
        // A commit hung waiting for a semi-sync acknowledgement holds the lock until its
        // session ends: end the sessions and try again, a few times.
        let mut round = 1;
        loop {
            match conn.query_drop(sql::HOLD_WRITES).await {
                Err(mysql_async::Error::Server(e))
                    if e.code == sql::ER_LOCK_WAIT_TIMEOUT && round < FENCE_LOCK_ROUNDS =>
                {
                    end_client_sessions(&mut conn, Some(agent_session)).await?;
                    round += 1;
                }
                other => break other?,
            }
        }
        let session = u64::from(conn.id());
        let until = Arc::new(Mutex::new(hold.map(|h| Instant::now() + h)));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let spared = Arc::new(AtomicU64::new(agent_session));
        let task = tokio::spawn(guard(conn, spared.clone(), until.clone(), stopped));
        match hold {
            Some(h) => tracing::info!(hold_seconds = h.as_secs(), "demoted primary's writes held"),
            None => tracing::info!("primary's writes held until its lease is renewed"),
        }
        Ok(Fence {
            stop: Some(stop),
            task,
            until,
            spared,
            session,
        })
    }

    fn until(&self) -> Option<Instant> {
        *self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time the hold has left; zero once over but not yet released; `None` once released.
    /// A hold until released has [`Duration::MAX`] left.
    pub fn remaining(&self) -> Option<Duration> {
        (!self.task.is_finished()).then(|| {
            self.until().map_or(Duration::MAX, |u| {
                u.saturating_duration_since(Instant::now())
            })
        })
    }

    /// The hold lasts until it is released (a lapsed lease's), not for a time.
    pub fn until_released(&self) -> bool {
        !self.task.is_finished() && self.until().is_none()
    }

    /// Spares the agent's new session from now on (it reconnected).
    pub fn spare(&self, agent_session: u64) {
        self.spared.store(agent_session, Ordering::Relaxed);
    }

    /// Makes a running hold last until it is released.
    pub fn keep_until_released(&self) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Makes a running hold end `hold` from now.
    pub fn end_after(&self, hold: Duration) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + hold);
    }

    /// Waits until the hold is over (its time is up, or its server went away), ending
    /// sessions as it goes: an agent asked to stop meanwhile must not take the lock with it
    /// while clients may still reach this server.
    pub async fn wait_out(mut self) {
        if self.until().is_none() {
            // A lapsed lease's hold: the server is stopping with the pod. It is kept as long
            // as a demotion's, or until the server closes it, not dropped at once for clients
            // that could still commit.
            self.end_after(SHUTDOWN_HOLD);
        }
        let until = self.until().unwrap_or_else(Instant::now);
        let left = until.saturating_duration_since(Instant::now());
        tracing::info!(
            remaining_ms = left.as_millis() as u64,
            "stopping once the demoted primary's hold on writes is over"
        );
        if tokio::time::timeout(left + Duration::from_secs(3), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }

    /// Ends the held sessions and releases the lock now.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if tokio::time::timeout(Duration::from_secs(5), &mut self.task)
            .await
            .is_err()
        {
            // Dropping the session releases the lock on the server too.
            self.task.abort();
        }
    }
}

async fn guard(
    mut conn: mysql_async::Conn,
    spared: Arc<AtomicU64>,
    until: Arc<Mutex<Option<Instant>>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let mut ended = 0;
    loop {
        match end_sessions(&mut conn, spared.load(Ordering::Relaxed)).await {
            Some(n) => ended += n,
            // The server went away (it is stopping): so did the lock.
            None => {
                tracing::info!(
                    sessions_ended = ended,
                    "demoted primary's server closed the hold's session"
                );
                return;
            }
        }
        let over = until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|u| Instant::now() >= u);
        if over {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(ROUND) => {}
            _ = &mut stopped => break,
        }
    }
    ended += end_sessions(&mut conn, spared.load(Ordering::Relaxed))
        .await
        .unwrap_or(0);
    let _ = conn.query_drop("UNLOCK TABLES").await;
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.disconnect()).await;
    tracing::info!(
        sessions_ended = ended,
        "demoted primary's hold on writes released"
    );
}

/// Ends, from `conn`, every client session but `conn`'s, `keep` and the operator's accounts'
/// (see `sql::fenced_sessions_query`); returns how many. Sessions that ended meanwhile are
/// skipped.
pub async fn end_client_sessions(
    conn: &mut mysql_async::Conn,
    keep: Option<u64>,
) -> Result<usize, mysql_async::Error> {
    let ids: Vec<u64> = conn.query(sql::fenced_sessions_query(keep)).await?;
    let mut ended = 0;
    for id in ids {
        match conn.query_drop(sql::kill_session(id).sql.as_str()).await {
            Ok(()) => ended += 1,
            Err(mysql_async::Error::Server(e)) if e.code == sql::ER_NO_SUCH_THREAD => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ended)
}

/// One round of the hold: how many sessions it ended; `None` once the hold's own session is
/// gone (the server closed it). Other failures are logged, and the hold goes on.
async fn end_sessions(conn: &mut mysql_async::Conn, agent_session: u64) -> Option<usize> {
    match end_client_sessions(conn, Some(agent_session)).await {
        Ok(n) => Some(n),
        Err(mysql_async::Error::Server(e)) => {
            tracing::warn!(error = %e, "cannot end the client sessions");
            Some(0)
        }
        Err(e) => {
            tracing::debug!(error = %e, "the hold's session is gone");
            None
        }
    }
}
