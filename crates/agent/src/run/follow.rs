//! A replica's renewals of its primary's lease (`bulwark_contract::follow`): every second, the
//! renewal the last pass calls for ([`crate::decide::follow`]) goes to the primary's agent,
//! signed with the order key. The time of each is recorded under the lock the passes publish
//! their reports under, before it is sent, so every report says when this replica last renewed
//! (`followedMs`), including a renewal still on the way; one whose connection was never made
//! cannot have been taken, and the time before it is put back (a lost primary's renewals stop
//! counting when it went, not when this replica noticed). A replica that receives again after
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
const _: () = assert!(CONNECT_TIMEOUT.as_millis() < FOLLOW_INTERVAL.as_millis());

/// Renews, as `pod`, the lease of the primary the passes in `readiness` follow, for ever.
pub(super) async fn run(pod: String, credentials_dir: PathBuf, readiness: Arc<Mutex<Readiness>>) {
    let mut ticker = tokio::time::interval(FOLLOW_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last failure's kind (its code), logged once: the answer's text may change every
    // second (a clock offset).
    let mut failing: Option<u16> = None;
    loop {
        ticker.tick().await;
        let (due, before, now) = {
            let mut r = readiness.lock().unwrap_or_else(|e| e.into_inner());
            let due = renewal(r.member.as_ref(), r.at.elapsed());
            let (before, now) = (r.followed, Instant::now());
            if due.is_some() {
                r.followed = now;
            }
            (due, before, now)
        };
        let Some(due) = due else {
            failing = None;
            continue;
        };
        let outcome = send(&pod, &credentials_dir, &due).await;
        if let Err(Failure {
            delivered: false, ..
        }) = &outcome
        {
            // This loop alone renews: nothing else moved it meanwhile.
            let mut r = readiness.lock().unwrap_or_else(|e| e.into_inner());
            if r.followed == now {
                r.followed = before;
            }
        }
        match outcome {
            Ok(()) => {
                if failing.take().is_some() {
                    tracing::info!(primary = %due.primary, epoch = due.epoch, "renewing the primary's lease again");
                }
            }
            Err(Failure { code, why: e, .. }) => {
                if failing != Some(code) {
                    tracing::info!(primary = %due.primary, epoch = due.epoch, error = %e, "the primary's lease not renewed");
                    failing = Some(code);
                }
            }
        }
    }
}

/// Why a renewal was not taken: the answer's status code (0 when there was none), why, and
/// whether it may have reached the primary's agent (false: nothing was sent, or no connection
/// was made).
struct Failure {
    code: u16,
    why: String,
    delivered: bool,
}

impl Failure {
    fn unsent(why: String) -> Failure {
        Failure {
            code: 0,
            why,
            delivered: false,
        }
    }
}

/// Sends `due`.
async fn send(
    pod: &str,
    credentials_dir: &std::path::Path,
    due: &crate::decide::follow::Renewal,
) -> Result<(), Failure> {
    let key = read_secret(&credentials_dir.join(ORDER_KEY))
        .map_err(|e| Failure::unsent(format!("the order key cannot be read: {e}")))?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| Failure::unsent("no order key".to_owned()))?;
    let line = Follow {
        primary: due.primary.clone(),
        replica: pod.to_owned(),
        epoch: due.epoch,
        sent_ms: chrono::Utc::now().timestamp_millis(),
    }
    .sign(key.as_bytes());
    let request = bulwark_http::client::post(FOLLOW_PATH, &line);
    let exchange = bulwark_http::client::exchange(&due.addr, &request, CONNECT_TIMEOUT);
    // Connected when the interval runs out: the connection's setup is bounded shorter.
    let (code, body) = tokio::time::timeout(FOLLOW_INTERVAL, exchange)
        .await
        .map_err(|_| Failure {
            code: 0,
            why: format!("{} did not answer within {FOLLOW_INTERVAL:?}", due.addr),
            delivered: true,
        })?
        .map_err(|e| Failure {
            code: 0,
            delivered: !e.never_connected(),
            why: e.to_string(),
        })?;
    match code {
        200 => Ok(()),
        _ => Err(Failure {
            code,
            why: format!("{} answered {code}: {}", due.addr, body.trim()),
            delivered: true,
        }),
    }
}
