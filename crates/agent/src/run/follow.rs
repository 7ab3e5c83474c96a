//! A replica's renewals of its primary's lease (`bulwark_contract::follow`): every second, the
//! renewal the last pass calls for ([`crate::decide::follow`]) goes to the primary's agent,
//! signed with the order key. The time of each is recorded under the lock the passes publish
//! their reports under, before it is sent, so every report says when this replica last renewed
//! (`followedMs`), including a renewal still on the way. A replica that receives again after
//! reporting that it did not renews again; that cannot undo a failover decided meanwhile,
//! since the lease had lapsed by then and the primary takes renewals only while it holds it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulwark_contract::follow::{Follow, FOLLOW_INTERVAL, FOLLOW_PATH};
use bulwark_contract::order::ORDER_KEY;

use crate::decide::follow::renewal;
use crate::run::files::read_secret;
use crate::run::http::Readiness;

/// Time to connect to the primary's agent: a renewal that cannot go out within its interval
/// is the next one's business.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(800);

/// Renews, as `pod`, the lease of the primary the passes in `readiness` follow, for ever.
pub(super) async fn run(pod: String, credentials_dir: PathBuf, readiness: Arc<Mutex<Readiness>>) {
    let mut ticker = tokio::time::interval(FOLLOW_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last failure's kind (its code), logged once: the answer's text may change every
    // second (a clock offset).
    let mut failing: Option<u16> = None;
    loop {
        ticker.tick().await;
        let due = {
            let mut r = readiness.lock().unwrap_or_else(|e| e.into_inner());
            let due = renewal(r.member.as_ref(), r.at.elapsed());
            if due.is_some() {
                r.followed = Instant::now();
            }
            due
        };
        let Some(due) = due else {
            failing = None;
            continue;
        };
        let outcome = send(&pod, &credentials_dir, &due).await;
        match outcome {
            Ok(()) => {
                if failing.take().is_some() {
                    tracing::info!(primary = %due.primary, epoch = due.epoch, "renewing the primary's lease again");
                }
            }
            Err((code, e)) => {
                if failing != Some(code) {
                    tracing::info!(primary = %due.primary, epoch = due.epoch, error = %e, "the primary's lease not renewed");
                    failing = Some(code);
                }
            }
        }
    }
}

/// Sends `due`; on failure the answer's status code (0 when there was none) and why.
async fn send(
    pod: &str,
    credentials_dir: &std::path::Path,
    due: &crate::decide::follow::Renewal,
) -> Result<(), (u16, String)> {
    let key = read_secret(&credentials_dir.join(ORDER_KEY))
        .map_err(|e| (0, format!("the order key cannot be read: {e}")))?
        .filter(|k| !k.is_empty())
        .ok_or((0, "no order key".to_owned()))?;
    let line = Follow {
        primary: due.primary.clone(),
        replica: pod.to_owned(),
        epoch: due.epoch,
        sent_ms: chrono::Utc::now().timestamp_millis(),
    }
    .sign(key.as_bytes());
    let request = bulwark_http::client::post(FOLLOW_PATH, &line);
    let exchange = bulwark_http::client::exchange(&due.addr, &request, CONNECT_TIMEOUT);
    let (code, body) = tokio::time::timeout(FOLLOW_INTERVAL, exchange)
        .await
        .map_err(|_| {
            let why = format!("{} did not answer within {FOLLOW_INTERVAL:?}", due.addr);
            (0, why)
        })?
        .map_err(|e| (0, e.to_string()))?;
    match code {
        200 => Ok(()),
        _ => Err((
            code,
            format!("{} answered {code}: {}", due.addr, body.trim()),
        )),
    }
}
