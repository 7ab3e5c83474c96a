//! The primary's lease as this agent holds it: the `POST /lease` handler takes the operator's
//! signed heartbeats (`bulwark_contract::lease`) and the passes read what was last taken. A
//! lease counts from the heartbeat's receipt on this agent's monotonic clock (less the time it
//! spent on the way), so a clock that jumps while it runs cannot stretch it. What is left of it
//! is kept beside the socket, so that a restart of the agent's container alone does not fence
//! a primary the operator still renews.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use bulwark_contract::lease::{Heartbeat, HeartbeatRefusal, LastTaken};
use bulwark_contract::order::{OrderError, ORDER_KEY};

use crate::decide::lease::Granted;
use crate::run::files::read_secret;
use crate::run::http::Response;
use crate::run::orders::Answer;

/// The last heartbeat taken.
#[derive(Debug, Clone, Copy)]
struct Taken {
    epoch: u64,
    at: Instant,
    lease: std::time::Duration,
    sent_ms: i64,
}

/// The lease of this member.
pub struct Lease {
    pod_name: Option<String>,
    /// Where what is left of the lease is kept across restarts of the agent.
    file: Option<PathBuf>,
    taken: Mutex<Option<Taken>>,
    /// The last refusal since a heartbeat was taken: its line (logged once however often it
    /// repeats) and its kind (for the readiness reason).
    refused: Mutex<Option<(String, &'static str)>>,
}

/// What is kept in the file: the lease's epoch and stamp, and when it ends by this clock.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    epoch: u64,
    sent_ms: i64,
    lease_ms: u64,
    ends_ms: i64,
}

impl Lease {
    /// The lease of `pod_name`, kept in `file`: what is left of one kept there is taken again.
    pub fn new(pod_name: Option<String>, file: Option<PathBuf>) -> Lease {
        let taken = file.as_deref().and_then(load);
        if let Some(t) = &taken {
            tracing::info!(
                epoch = t.epoch,
                left_ms = t.lease.as_millis() as u64,
                "kept lease taken again"
            );
        }
        Lease {
            pod_name,
            file,
            taken: Mutex::new(taken),
            refused: Mutex::new(None),
        }
    }

    /// The last lease taken, as of now.
    pub fn granted(&self) -> Option<Granted> {
        self.lock().map(|t| Granted {
            epoch: t.epoch,
            age: t.at.elapsed(),
            lease: t.lease,
        })
    }

    /// When the last lease taken runs out.
    pub fn deadline(&self) -> Option<Instant> {
        self.lock().map(|t| t.at + t.lease)
    }

    fn lock(&self) -> Option<Taken> {
        *self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a heartbeat line verified under `key`; `Ok(true)` when it renews a lease that had
    /// lapsed or was for another epoch (a pass should run at once).
    fn take(&self, line: &str, key: &[u8]) -> Result<(Heartbeat, bool), Refusal> {
        let pod = self.pod_name.as_deref().ok_or(Refusal::NoPodName)?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let last = *taken;
        let taken_last = last.map(|t| LastTaken {
            sent_ms: t.sent_ms,
            epoch: t.epoch,
        });
        let h = Heartbeat::accept(line, key, pod, now_ms, taken_last)?;
        let now = Instant::now();
        let renews = last.is_none_or(|t| t.epoch != h.epoch || now >= t.at + t.lease);
        let left = h.left_at(now_ms);
        *taken = Some(Taken {
            epoch: h.epoch,
            at: now,
            lease: left,
            sent_ms: h.sent_ms,
        });
        if let Some(file) = &self.file {
            keep(file, &h, now_ms, left);
        }
        Ok((h, renews))
    }

    /// Why the last heartbeat was refused, in words that do not change every second, while no
    /// heartbeat has been taken since.
    pub fn refused_since(&self) -> Option<&'static str> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, kind)| *kind)
    }

    fn log_refusal(&self, r: &Refusal) {
        let line = r.to_string();
        let mut last = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref().map(|(l, _)| l) != Some(&line) {
            tracing::warn!(reason = %line, "lease heartbeat refused");
        }
        *last = Some((line, r.kind()));
    }
}

/// Why a heartbeat was refused, with the HTTP status it is answered with.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Heartbeat(#[from] HeartbeatRefusal),
    #[error("the order key cannot be read: {0}")]
    NoKey(String),
    #[error("this agent was started without --pod-name and takes no heartbeats")]
    NoPodName,
}

impl Refusal {
    /// What went wrong, in words that stay the same from one heartbeat to the next.
    fn kind(&self) -> &'static str {
        match self {
            Refusal::Heartbeat(h) => h.kind(),
            Refusal::NoKey(_) => "the order key could not be read",
            Refusal::NoPodName => "this agent has no pod name",
        }
    }

    fn status(&self) -> u16 {
        match self {
            Refusal::Heartbeat(HeartbeatRefusal::Invalid(OrderError::Unreadable(_))) => 400,
            Refusal::Heartbeat(HeartbeatRefusal::Invalid(OrderError::BadSignature))
            | Refusal::Heartbeat(HeartbeatRefusal::OtherMember(_)) => 403,
            Refusal::Heartbeat(_) => 409,
            Refusal::NoKey(_) | Refusal::NoPodName => 500,
        }
    }
}

/// The `POST /lease` handler: 200 once the heartbeat is taken (a pass starts at once when it
/// lifts a lapse), 4xx/5xx with the cause when refused.
pub(crate) fn handler(
    lease: Arc<Lease>,
    credentials_dir: PathBuf,
    wake: Arc<tokio::sync::Notify>,
) -> impl Fn(Bytes) -> Answer + Clone + Send + Sync + 'static {
    move |body: Bytes| {
        let lease = lease.clone();
        let key_file = credentials_dir.join(ORDER_KEY);
        let wake = wake.clone();
        Box::pin(async move {
            let key = match read_secret(&key_file) {
                Ok(Some(k)) if !k.is_empty() => k,
                Ok(_) => {
                    let why = format!("{} is missing or empty", key_file.display());
                    return refused(&lease, Refusal::NoKey(why));
                }
                Err(e) => {
                    let why = bulwark_engine::error::chain(&e);
                    return refused(&lease, Refusal::NoKey(why));
                }
            };
            match lease.take(&String::from_utf8_lossy(&body), key.as_bytes()) {
                Ok((h, renews)) => {
                    if renews {
                        tracing::info!(epoch = h.epoch, lease_ms = h.lease_ms, "lease taken");
                        wake.notify_one();
                    }
                    lease
                        .refused
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take();
                    Response::new(
                        200,
                        format!("lease held for {} ms at epoch {}", h.lease_ms, h.epoch),
                    )
                }
                Err(r) => refused(&lease, r),
            }
        })
    }
}

/// The lease kept in `file`, with what is left of it now; none when it ran out or cannot be
/// read (the primary then waits for the next heartbeat, a second away).
fn load(file: &Path) -> Option<Taken> {
    let text = std::fs::read_to_string(file).ok()?;
    let k: Kept = serde_json::from_str(&text).ok()?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let left = u64::try_from(k.ends_ms.saturating_sub(now_ms)).ok()?;
    // A clock set back since cannot make it longer than it was granted.
    let left = std::time::Duration::from_millis(left.min(k.lease_ms));
    (!left.is_zero()).then(|| Taken {
        epoch: k.epoch,
        at: Instant::now(),
        lease: left,
        sent_ms: k.sent_ms,
    })
}

/// Keeps the lease just taken. The run directory lives in memory or on the node's disk for the
/// pod's life, so no sync: only a restart of the container must find it. A failure only costs
/// a fence after such a restart, and is logged.
fn keep(file: &Path, h: &Heartbeat, now_ms: i64, left: std::time::Duration) {
    let kept = Kept {
        epoch: h.epoch,
        sent_ms: h.sent_ms,
        lease_ms: h.lease_ms,
        ends_ms: now_ms.saturating_add(left.as_millis() as i64),
    };
    let tmp = file.with_extension("tmp");
    let written = serde_json::to_vec(&kept)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        tracing::debug!(file = %file.display(), error = %e, "lease not kept");
    }
}

fn refused(lease: &Lease, r: Refusal) -> Response {
    lease.log_refusal(&r);
    Response::new(r.status(), format!("heartbeat refused: {r}"))
}
