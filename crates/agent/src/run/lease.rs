//! The primary's lease as this agent holds it: the `POST /lease` handler takes the operator's
//! signed heartbeats (`bulwark_contract::lease`), `lease_follow` its replicas' renewals
//! (`bulwark_contract::follow`), and the passes read what was last taken. A
//! lease counts from the heartbeat's (or renewal's) receipt on this agent's monotonic clock
//! (less the time it spent on the way), so a clock that jumps while it runs cannot stretch it.
//! What is left of it is kept beside the socket, so that a restart of the agent's container
//! alone does not fence a primary the operator (or its replicas) still renew.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use bulwark_contract::follow::{FollowRefusal, MAX_FOLLOWED_FOR};
use bulwark_contract::lease::{Heartbeat, HeartbeatRefusal, LastTaken};
use bulwark_contract::order::{OrderError, ORDER_KEY};

use crate::decide::lease::{self, Granted};
use crate::run::files::read_secret;
use crate::run::http::Response;
use crate::run::orders::Answer;

/// The last heartbeat taken.
#[derive(Debug, Clone, Copy)]
pub(super) struct Taken {
    pub(super) epoch: u64,
    pub(super) at: Instant,
    /// What was left of it at `at`.
    pub(super) lease: Duration,
    sent_ms: i64,
    /// Its length, which each replica's renewal counts for.
    length: Duration,
    /// Replicas whose renewals keep it (0: none are taken).
    pub(super) followers: u32,
    /// Renewals are taken until then ([`MAX_FOLLOWED_FOR`] after the heartbeat was sent).
    pub(super) follow_until: Instant,
}

/// A replica's last renewal taken.
#[derive(Debug, Clone, Copy)]
pub(super) struct Renewed {
    pub(super) epoch: u64,
    /// When it was sent, by this clock.
    pub(super) at: Instant,
    pub(super) sent_ms: i64,
}

/// The lease of this member.
pub struct Lease {
    pub(super) pod_name: Option<String>,
    /// Where what is left of the lease is kept across restarts of the agent.
    file: Option<PathBuf>,
    pub(super) taken: Mutex<Option<Taken>>,
    /// By replica: the last renewal taken from it.
    pub(super) renewed: Mutex<HashMap<String, Renewed>>,
    /// Whether it was logged that renewals keep the lease since the last heartbeat.
    pub(super) kept_logged: std::sync::atomic::AtomicBool,
    /// The last refusal since a heartbeat was taken: its line (logged once however often it
    /// repeats) and its kind (for the readiness reason).
    refused: Mutex<Option<(String, &'static str)>>,
}

/// What is kept in the file: the lease's epoch and stamp, and when it ends by this clock (its
/// replicas' renewals included); and for how many replicas' renewals, until when.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    epoch: u64,
    sent_ms: i64,
    lease_ms: u64,
    ends_ms: i64,
    #[serde(default)]
    followers: u32,
    #[serde(default)]
    follow_until_ms: i64,
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
            renewed: Mutex::default(),
            kept_logged: Default::default(),
            refused: Mutex::new(None),
        }
    }

    /// The last lease taken, as of now.
    pub fn granted(&self) -> Option<Granted> {
        let t = self.lock()?;
        Some(Granted {
            epoch: t.epoch,
            left: self.ends(&t).saturating_duration_since(Instant::now()),
            length: t.length,
            followers: t.followers,
        })
    }

    /// When the last lease taken runs out.
    pub fn deadline(&self) -> Option<Instant> {
        self.lock().map(|t| self.ends(&t))
    }

    /// When `t` ends, with the renewals taken for its epoch.
    pub(super) fn ends(&self, t: &Taken) -> Instant {
        let renewed = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        let at_epoch = renewed
            .values()
            .filter(|r| r.epoch == t.epoch)
            .map(|r| r.at)
            .collect();
        lease::ends(t.at + t.lease, t.length, t.followers, at_epoch)
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
        let renews = last.is_none_or(|t| t.epoch != h.epoch || now >= self.ends(&t));
        let left = h.left_at(now_ms);
        // Renewals count for as long after the heartbeat was sent as the operator counts,
        // not from its (later) arrival.
        let sent = now.checked_sub(h.lease() - left).unwrap_or(now);
        let t = Taken {
            epoch: h.epoch,
            at: now,
            lease: left,
            sent_ms: h.sent_ms,
            length: h.lease(),
            followers: h.followers,
            follow_until: sent + MAX_FOLLOWED_FOR,
        };
        *taken = Some(t);
        self.kept_logged
            .store(false, std::sync::atomic::Ordering::Relaxed);
        // Under the lock: a renewal's write never overtakes this one's.
        self.keep(&t, now_ms);
        Ok((h, renews))
    }

    /// Keeps `t` (with the renewals taken) in the file, when there is one.
    pub(super) fn keep(&self, t: &Taken, now_ms: i64) {
        let Some(file) = &self.file else {
            return;
        };
        let now = Instant::now();
        let ms_from_now = |i: Instant| {
            let ahead = i.saturating_duration_since(now).as_millis() as i64;
            now_ms.saturating_add(ahead)
        };
        keep(
            file,
            &Kept {
                epoch: t.epoch,
                sent_ms: t.sent_ms,
                lease_ms: t.length.as_millis() as u64,
                ends_ms: ms_from_now(self.ends(t)),
                followers: t.followers,
                follow_until_ms: ms_from_now(t.follow_until),
            },
        );
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

/// Why a heartbeat or a replica's renewal was refused, with the HTTP status it is answered with.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Heartbeat(#[from] HeartbeatRefusal),
    #[error("the order key cannot be read: {0}")]
    NoKey(String),
    #[error("this agent was started without --pod-name and takes no heartbeats")]
    NoPodName,
    #[error(transparent)]
    Follow(#[from] FollowRefusal),
    #[error("the operator's last heartbeat asked for no renewals from the replicas")]
    NotAsked,
    #[error("the renewal is for epoch {got}, the lease for epoch {have}")]
    OtherEpoch { got: u64, have: u64 },
    #[error(
        "the operator's last heartbeat came more than {}s ago: renewals no longer keep the lease",
        MAX_FOLLOWED_FOR.as_secs()
    )]
    HeartbeatTooOld,
    #[error("the lease lapsed: only the operator's heartbeat renews it now")]
    Lapsed,
}

impl Refusal {
    /// What went wrong, in words that stay the same from one heartbeat to the next.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Refusal::Heartbeat(h) => h.kind(),
            Refusal::NoKey(_) => "the order key could not be read",
            Refusal::NoPodName => "this agent has no pod name",
            Refusal::Follow(FollowRefusal::Invalid(_)) => "the renewal was invalid",
            Refusal::Follow(FollowRefusal::OtherMember(_)) => "the renewal was for another pod",
            Refusal::Follow(FollowRefusal::Stale { .. }) => "the renewal's stamp was too far off",
            Refusal::Follow(FollowRefusal::Replayed(_)) => "the renewal was a replay",
            Refusal::NotAsked => "no renewals were asked for",
            Refusal::OtherEpoch { .. } => "the renewal was for another epoch",
            Refusal::HeartbeatTooOld => "the operator's heartbeat was too old",
            Refusal::Lapsed => "the lease had lapsed",
        }
    }

    pub(super) fn status(&self) -> u16 {
        match self {
            Refusal::Heartbeat(HeartbeatRefusal::Invalid(OrderError::Unreadable(_))) => 400,
            Refusal::Heartbeat(HeartbeatRefusal::Invalid(OrderError::BadSignature))
            | Refusal::Heartbeat(HeartbeatRefusal::OtherMember(_)) => 403,
            Refusal::Heartbeat(_) => 409,
            Refusal::Follow(FollowRefusal::Invalid(OrderError::Unreadable(_))) => 400,
            Refusal::Follow(FollowRefusal::Invalid(OrderError::BadSignature))
            | Refusal::Follow(FollowRefusal::OtherMember(_)) => 403,
            Refusal::Follow(_)
            | Refusal::NotAsked
            | Refusal::OtherEpoch { .. }
            | Refusal::HeartbeatTooOld
            | Refusal::Lapsed => 409,
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
            let key = match order_key(&key_file) {
                Ok(k) => k,
                Err(r) => return refused(&lease, r),
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

/// The order key, which signs heartbeats and renewals.
pub(super) fn order_key(key_file: &Path) -> Result<zeroize::Zeroizing<String>, Refusal> {
    match read_secret(key_file) {
        Ok(Some(k)) if !k.is_empty() => Ok(k),
        Ok(_) => Err(Refusal::NoKey(format!(
            "{} is missing or empty",
            key_file.display()
        ))),
        Err(e) => Err(Refusal::NoKey(bulwark_engine::error::chain(&e))),
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
    let left = Duration::from_millis(left.min(k.lease_ms));
    let now = Instant::now();
    let follow_for = u64::try_from(k.follow_until_ms.saturating_sub(now_ms)).unwrap_or(0);
    (!left.is_zero()).then(|| Taken {
        epoch: k.epoch,
        at: now,
        lease: left,
        sent_ms: k.sent_ms,
        length: Duration::from_millis(k.lease_ms),
        followers: k.followers,
        follow_until: now + Duration::from_millis(follow_for).min(MAX_FOLLOWED_FOR),
    })
}

/// Keeps the lease just taken. The run directory lives in memory or on the node's disk for the
/// pod's life, so no sync: only a restart of the container must find it. A failure only costs
/// a fence after such a restart, and is logged.
fn keep(file: &Path, kept: &Kept) {
    let tmp = file.with_extension("tmp");
    let written = serde_json::to_vec(kept)
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
