//! A replica's renewals of this primary's lease (`bulwark_contract::follow`), the primary's
//! side: the `POST /lease/follow` handler, and what it takes. A renewal is taken only for the
//! epoch of the operator's last heartbeat, when that heartbeat asked for renewals, within
//! `MAX_FOLLOWED_FOR` of it, and only while the lease is held: a lapsed lease (a fenced
//! primary) is lifted by the operator alone, which is what makes a replica that reconnects after
//! a failover was decided harmless.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use bulwark_contract::follow::Follow;
use bulwark_contract::order::ORDER_KEY;

use crate::run::http::Response;
use crate::run::lease::{order_key, Lease, Refusal, Renewed};
use crate::run::orders::Answer;

impl Lease {
    /// Takes a replica's renewal verified under `key`: only for the epoch of the operator's
    /// last heartbeat, when it asked for renewals, within `MAX_FOLLOWED_FOR` of it, and only
    /// while the lease is held (a lapsed lease is lifted by the operator alone). `Ok(true)`
    /// the first time since the last heartbeat that renewals keep a lease whose heartbeat ran
    /// out.
    pub(super) fn take_follow(&self, line: &str, key: &[u8]) -> Result<(Follow, bool), Refusal> {
        let pod = self.pod_name.as_deref().ok_or(Refusal::NoPodName)?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        // The heartbeat's lock first, as everywhere: a heartbeat and a renewal are taken one
        // after the other.
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let f = {
            let renewed = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
            Follow::accept(line, key, pod, now_ms, |replica| {
                renewed.get(replica).map(|r| r.sent_ms)
            })?
        };
        let t = (*taken)
            .filter(|t| t.followers > 0)
            .ok_or(Refusal::NotAsked)?;
        if f.epoch != t.epoch {
            return Err(Refusal::OtherEpoch {
                got: f.epoch,
                have: t.epoch,
            });
        }
        let now = Instant::now();
        if now >= t.follow_until {
            return Err(Refusal::HeartbeatTooOld);
        }
        let before = self.ends(&t);
        if now >= before {
            return Err(Refusal::Lapsed);
        }
        let at = now.checked_sub(f.travelled(now_ms)).unwrap_or(now);
        self.renewed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                f.replica.clone(),
                Renewed {
                    epoch: f.epoch,
                    at,
                    sent_ms: f.sent_ms,
                },
            );
        let after = self.ends(&t);
        if after > before {
            // Under the heartbeat's lock: a newer heartbeat's write is never overwritten.
            self.keep(&t, now_ms);
        }
        drop(taken);
        // Once per heartbeat taken, when the renewals are what keeps the lease: the operator's
        // heartbeat has run out.
        let kept = now >= t.at + t.lease
            && !self
                .kept_logged
                .swap(true, std::sync::atomic::Ordering::Relaxed);
        Ok((f, kept))
    }
}

/// The `POST /lease/follow` handler: 200 once a replica's renewal is taken, 4xx/5xx with the
/// cause when refused (logged once per cause and replica, not every second).
pub(crate) fn follow_handler(
    lease: Arc<Lease>,
    credentials_dir: PathBuf,
) -> impl Fn(Bytes) -> Answer + Clone + Send + Sync + 'static {
    let logged: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    move |body: Bytes| {
        let lease = lease.clone();
        let key_file = credentials_dir.join(ORDER_KEY);
        let logged = logged.clone();
        Box::pin(async move {
            let outcome = match order_key(&key_file) {
                Ok(key) => lease.take_follow(&String::from_utf8_lossy(&body), key.as_bytes()),
                Err(r) => Err(r),
            };
            match outcome {
                Ok((f, outlasts)) => {
                    if outlasts {
                        tracing::info!(replica = %f.replica, epoch = f.epoch, "the replicas' renewals keep the lease past the operator's last heartbeat");
                    }
                    logged
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&f.replica);
                    Response::new(200, format!("renewal taken at epoch {}", f.epoch))
                }
                Err(r) => {
                    // Logged once per replica and kind of refusal (a stamp's offset changes
                    // every second); the name is read unverified, for the log only.
                    let replica = named(&body);
                    let kind = r.kind();
                    let mut logged = logged.lock().unwrap_or_else(|e| e.into_inner());
                    if logged.get(&replica).map(String::as_str) != Some(kind) {
                        tracing::info!(replica = %replica, reason = %r, "a replica's lease renewal refused");
                        logged.insert(replica, kind.to_owned());
                    }
                    Response::new(r.status(), format!("renewal refused: {r}"))
                }
            }
        })
    }
}

/// The replica a renewal's body names, unverified (for the log only).
fn named(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["replica"].as_str().map(|r| r.chars().take(63).collect()))
        .unwrap_or_default()
}
