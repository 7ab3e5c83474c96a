//! The primaries' leases (`bulwark_contract::lease`), the operator's side: each pass names the
//! member its cluster's lease goes to (or stops it once the primary is lost), a loop renews it
//! every [`HEARTBEAT_INTERVAL`] with a signed, time-stamped heartbeat, and a failover asks how
//! long any lease it may have granted could still run. What was sent is kept in memory: after
//! a restart the operator counts as if it had renewed every lease just before it started.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bulwark_contract::follow::MAX_FOLLOWED_FOR;
use bulwark_contract::lease::{Heartbeat, HEARTBEAT_INTERVAL, LEASE_MARGIN};

use crate::cluster::failover::RenewalTerms;
use crate::members::Members;

/// Heartbeats that go unanswered this long stop (a deleted cluster's, or a primary that
/// was replaced long ago).
const FORGET_AFTER: Duration = Duration::from_secs(300);

/// Who a cluster's lease goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pod: String,
    /// The agent's address (`ip:port`).
    pub addr: String,
    pub epoch: u64,
    pub lease: Duration,
    /// Replicas whose renewals keep the lease past the heartbeats (0: none).
    pub followers: u32,
}

struct Renewal {
    holder: Holder,
    key: Vec<u8>,
    /// No heartbeat goes out: the primary is lost, and a failover may be counting.
    stopped: bool,
}

/// The leases of every cluster this operator runs, by `namespace/name`.
pub struct Leases {
    started: Instant,
    renewals: Mutex<HashMap<String, Renewal>>,
    /// By `namespace/name/pod`: when the longest lease sent to that pod runs out, by the send
    /// time (the agent counts from the receipt, at most [`LEASE_MARGIN`] later).
    granted: Mutex<HashMap<String, Instant>>,
    /// By `namespace/name`: what this operator's heartbeats asked of the replicas, each with
    /// until when renewals may keep a lease so granted ([`MAX_FOLLOWED_FOR`] after the last
    /// such heartbeat was sent, and the lease).
    asked: Mutex<HashMap<String, Vec<Asked>>>,
    /// Where a cluster whose primary stopped answering its heartbeats is announced (its
    /// lease key), for its controller to look at it at once: nothing else announces a lost
    /// node until its replicas' network timeouts or the node controller's grace period.
    /// One sender per subscriber (a controller per watched namespace).
    unanswered: Mutex<Vec<tokio::sync::mpsc::UnboundedSender<String>>>,
}

/// Renewals asked for by heartbeats: how many replicas, for leases of what length, and until
/// when they may keep one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Asked {
    followers: u32,
    length: Duration,
    until: Instant,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            started: Instant::now(),
            renewals: Mutex::default(),
            granted: Mutex::default(),
            asked: Mutex::default(),
            unanswered: Mutex::default(),
        }
    }
}

/// The cluster a lease key (`namespace/name/uid`) names: `(namespace, name)`.
pub fn cluster_of(lease_key: &str) -> Option<(&str, &str)> {
    let mut parts = lease_key.splitn(3, '/');
    let (ns, name) = (parts.next()?, parts.next()?);
    (!ns.is_empty() && !name.is_empty()).then_some((ns, name))
}

impl Leases {
    /// Leases kept by an operator that started at `started` (an earlier start makes it assume
    /// nothing of a process before it, once that is long enough ago).
    pub fn started_at(started: Instant) -> Leases {
        Leases {
            started,
            ..Leases::default()
        }
    }

    /// The lease keys of clusters whose primary's heartbeats stopped being answered, each at
    /// the start of a streak of failures; every subscriber gets every one.
    pub fn unanswered(&self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.unanswered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        rx
    }

    fn announce_unanswered(&self, cluster: &str) {
        // A subscriber that is gone (its controller stopped) is forgotten.
        self.unanswered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|tx| tx.send(cluster.to_owned()).is_ok());
    }

    /// Renews `holder`'s lease from now on (signed with `key`), in place of whoever held the
    /// cluster's.
    pub fn renew(&self, cluster: &str, holder: Holder, key: Vec<u8>) {
        let mut r = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        // Epochs only grow: a pass from an older copy of the status renews nobody.
        if r.get(cluster)
            .is_some_and(|old| old.holder.epoch > holder.epoch)
        {
            return;
        }
        if r.get(cluster)
            .is_none_or(|old| old.holder != holder || old.stopped)
        {
            tracing::info!(cluster, pod = %holder.pod, epoch = holder.epoch, lease_ms = holder.lease.as_millis() as u64, "renewing the primary's lease");
        }
        r.insert(
            cluster.to_owned(),
            Renewal {
                holder,
                key,
                stopped: false,
            },
        );
    }

    /// Sends no more heartbeats for `cluster` (its primary is lost).
    pub fn stop(&self, cluster: &str) {
        let mut r = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(renewal) = r.get_mut(cluster).filter(|r| !r.stopped) {
            tracing::info!(cluster, pod = %renewal.holder.pod, "no longer renewing the lost primary's lease");
            renewal.stopped = true;
        }
    }

    /// Stops renewing `cluster`'s lease unless it goes to `pod` at `epoch`.
    pub fn keep_only(&self, cluster: &str, pod: &str, epoch: u64) {
        if !self.renews(cluster, pod, epoch) {
            self.stop(cluster);
        }
    }

    /// Whether `cluster`'s lease is renewed for `pod` at `epoch`.
    pub fn renews(&self, cluster: &str, pod: &str, epoch: u64) -> bool {
        self.renewals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .is_some_and(|r| !r.stopped && r.holder.pod == pod && r.holder.epoch == epoch)
    }

    /// Forgets `cluster` (deleted, or its primary needs no lease).
    pub fn forget(&self, cluster: &str) {
        self.renewals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
    }

    /// How long any member of `cluster` may still hold a lease this operator sent it (of at
    /// most `lease` when it sent none since it started), plus the margin for the clocks and for
    /// the agent to fence itself: zero once a failover may promote another member.
    pub fn outstanding_any(&self, cluster: &str, lease: Duration) -> Duration {
        let prefix = format!("{cluster}/");
        let floor = self.started + lease;
        let ends = self
            .granted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, ends)| *ends)
            .fold(floor, Instant::max);
        (ends + LEASE_MARGIN).saturating_duration_since(Instant::now())
    }

    /// What replicas' renewals may still keep of a lease this operator sent `cluster`'s members
    /// asking for them, for a failover to wait out ([`RenewalTerms`]). Right after a start,
    /// the process before is taken to have asked for `followers` (the spec's number now) with
    /// leases of `length`: it may have asked, and this one cannot know.
    pub fn renewals(&self, cluster: &str, length: Duration, followers: u32) -> RenewalTerms {
        let now = Instant::now();
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let live = asked.entry(cluster.to_owned()).or_default();
        live.retain(|a| a.until + LEASE_MARGIN > now);
        let before = Asked {
            followers,
            length,
            until: self.started + MAX_FOLLOWED_FOR + length,
        };
        let terms = live
            .iter()
            .copied()
            .chain((followers > 0 && before.until + LEASE_MARGIN > now).then_some(before))
            .fold(None::<RenewalTerms>, |terms, a| {
                let outstanding = (a.until + LEASE_MARGIN).saturating_duration_since(now);
                Some(match terms {
                    None => RenewalTerms {
                        outstanding,
                        fewest: a.followers,
                        longest: a.length,
                    },
                    Some(t) => RenewalTerms {
                        outstanding: t.outstanding.max(outstanding),
                        fewest: t.fewest.min(a.followers),
                        longest: t.longest.max(a.length),
                    },
                })
            });
        if live.is_empty() {
            asked.remove(cluster);
        }
        terms.unwrap_or_default()
    }

    /// Sends one heartbeat now to `cluster`'s holder, if that is `pod` at `epoch`.
    pub async fn beat(
        &self,
        cluster: &str,
        pod: &str,
        epoch: u64,
        members: &dyn Members,
    ) -> Result<(), String> {
        if !self.renews(cluster, pod, epoch) {
            return Ok(());
        }
        self.send(cluster, members).await
    }

    /// Sends one heartbeat to `cluster`'s holder now, if it has one: the lease counts before
    /// the answer, since the agent may take it even when the answer is lost.
    async fn send(&self, cluster: &str, members: &dyn Members) -> Result<(), String> {
        let Some((holder, line)) = self.prepare(cluster) else {
            return Ok(());
        };
        members.send_heartbeat(&holder.addr, &line).await
    }

    fn prepare(&self, cluster: &str) -> Option<(Holder, String)> {
        // Counted under the renewals' lock, before it is sent: a failover that reads
        // `outstanding_any` after a stop sees every heartbeat that may still go out.
        let r = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        let renewal = r.get(cluster).filter(|r| !r.stopped)?;
        let holder = renewal.holder.clone();
        let ends = Instant::now() + holder.lease;
        self.granted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(format!("{cluster}/{}", holder.pod))
            .and_modify(|e| *e = (*e).max(ends))
            .or_insert(ends);
        if holder.followers > 0 {
            let until = ends + MAX_FOLLOWED_FOR;
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            let live = asked.entry(cluster.to_owned()).or_default();
            match live
                .iter_mut()
                .find(|a| a.followers == holder.followers && a.length == holder.lease)
            {
                Some(a) => a.until = a.until.max(until),
                None => live.push(Asked {
                    followers: holder.followers,
                    length: holder.lease,
                    until,
                }),
            }
        }
        let line = Heartbeat {
            member: holder.pod.clone(),
            epoch: holder.epoch,
            lease_ms: holder.lease.as_millis() as u64,
            sent_ms: chrono::Utc::now().timestamp_millis(),
            followers: holder.followers,
        }
        .sign(&renewal.key);
        Some((holder, line))
    }

    /// Renews every lease every [`HEARTBEAT_INTERVAL`], for ever, while `in_charge` says this
    /// operator still reaches the API server: one cut off from it may have been replaced by
    /// another, which counts on the leases running out. A heartbeat that fails is logged once
    /// per failure streak; the next one goes out on time regardless.
    pub async fn run(&self, members: &dyn Members, in_charge: &(dyn Fn() -> bool + Send + Sync)) {
        let mut ticker = tokio::time::interval(HEARTBEAT_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing: HashMap<String, Instant> = HashMap::new();
        let mut paused = false;
        loop {
            ticker.tick().await;
            if !in_charge() {
                if !paused {
                    tracing::warn!("the API server is out of reach: no lease is renewed until it answers again");
                    paused = true;
                }
                continue;
            }
            paused = false;
            let clusters: Vec<String> = self
                .renewals
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned()
                .collect();
            // Each within the interval: one unreachable agent must not delay the others.
            let results = futures::future::join_all(clusters.iter().map(|c| async move {
                let sent = tokio::time::timeout(HEARTBEAT_INTERVAL, self.send(c, members)).await;
                let late = || format!("no answer within {HEARTBEAT_INTERVAL:?}");
                (c, sent.unwrap_or_else(|_| Err(late())))
            }))
            .await;
            for (cluster, result) in results {
                match result {
                    Ok(()) => {
                        if failing.remove(cluster).is_some() {
                            tracing::info!(cluster = %cluster, "lease heartbeats answered again");
                        }
                    }
                    Err(e) => {
                        let since = *failing.entry(cluster.clone()).or_insert_with(|| {
                            tracing::warn!(cluster = %cluster, error = %e, "lease heartbeat not answered");
                            self.announce_unanswered(cluster);
                            Instant::now()
                        });
                        // A deleted cluster's: its next pass, if it has one, names the holder
                        // again.
                        if since.elapsed() > FORGET_AFTER {
                            tracing::info!(cluster = %cluster, unanswered_for = ?FORGET_AFTER, "lease heartbeats unanswered for long: no longer sent");
                            self.forget(cluster);
                            failing.remove(cluster);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subscriber_hears_of_every_unanswered_cluster() {
        let leases = Leases::default();
        let (mut a, b) = (leases.unanswered(), leases.unanswered());
        drop(b);
        let mut c = leases.unanswered();
        leases.announce_unanswered("shop/atoll/1");
        assert_eq!(a.try_recv().ok().as_deref(), Some("shop/atoll/1"));
        assert_eq!(c.try_recv().ok().as_deref(), Some("shop/atoll/1"));
        assert_eq!(
            leases.unanswered.lock().unwrap().len(),
            2,
            "the dropped one is forgotten"
        );
    }

    #[test]
    fn lease_keys_name_their_cluster() {
        let cases = [
            ("a key", "shop/atoll/9c6c829b", Some(("shop", "atoll"))),
            ("no uid yet", "shop/atoll/", Some(("shop", "atoll"))),
            ("no name", "shop//x", None),
            ("no namespace", "/atoll/x", None),
            ("not a key", "atoll", None),
        ];
        for (name, key, want) in cases {
            assert_eq!(cluster_of(key), want, "{name}");
        }
    }

    fn holder(pod: &str, lease: u64) -> Holder {
        Holder {
            pod: pod.into(),
            addr: "10.0.0.1:9081".into(),
            epoch: 2,
            lease: Duration::from_secs(lease),
            followers: 0,
        }
    }

    #[test]
    fn a_lease_is_outstanding_until_the_last_one_sent_ran_out_plus_the_margin() {
        let six = Duration::from_secs(6);
        let leases = Leases::default();
        // Nothing sent since the start: as if renewed just before it.
        let before = leases.outstanding_any("ns/quay", six);
        assert!(before > Duration::from_secs(9) && before <= Duration::from_secs(10));
        leases.renew("ns/quay", holder("quay-0", 20), b"k".to_vec());
        let (sent_to, line) = leases.prepare("ns/quay").unwrap();
        assert_eq!(sent_to.pod, "quay-0");
        let taken = Heartbeat::verify(&line, b"k").unwrap();
        assert_eq!((taken.epoch, taken.lease_ms), (2, 20_000));
        let left = leases.outstanding_any("ns/quay", six);
        assert!(left > Duration::from_secs(23) && left <= Duration::from_secs(24));
        // The lease goes to another member: the first one's still counts.
        leases.renew("ns/quay", holder("quay-1", 6), b"k".to_vec());
        assert_eq!(leases.prepare("ns/quay").unwrap().0.pod, "quay-1");
        assert!(leases.outstanding_any("ns/quay", six) > Duration::from_secs(23));
        // Another cluster's do not.
        assert!(leases.outstanding_any("ns/other", six) <= Duration::from_secs(10));
    }

    #[test]
    fn renewals_asked_for_are_waited_out_with_the_fewest_and_the_longest() {
        let six = Duration::from_secs(6);
        let leases = Leases {
            // An operator started long ago: nothing is assumed of a process before.
            started: Instant::now() - MAX_FOLLOWED_FOR - Duration::from_secs(60),
            ..Leases::default()
        };
        assert_eq!(leases.renewals("ns/quay", six, 1), RenewalTerms::default());
        leases.renew("ns/quay", holder("quay-0", 6), b"k".to_vec());
        leases.prepare("ns/quay").unwrap();
        assert_eq!(
            leases.renewals("ns/quay", six, 1),
            RenewalTerms::default(),
            "no renewals asked for"
        );
        let asking = |followers, lease| Holder {
            followers,
            ..holder("quay-0", lease)
        };
        leases.renew("ns/quay", asking(2, 6), b"k".to_vec());
        let (_, line) = leases.prepare("ns/quay").unwrap();
        assert_eq!(Heartbeat::verify(&line, b"k").unwrap().followers, 2);
        // The spec changes: fewer asked of, with longer leases. Both count until they expire.
        leases.renew("ns/quay", asking(1, 20), b"k".to_vec());
        leases.prepare("ns/quay").unwrap();
        let terms = leases.renewals("ns/quay", six, 2);
        let most = MAX_FOLLOWED_FOR + Duration::from_secs(20) + LEASE_MARGIN;
        assert!(
            terms.outstanding > most - Duration::from_secs(1) && terms.outstanding <= most,
            "{terms:?}"
        );
        assert_eq!((terms.fewest, terms.longest), (1, Duration::from_secs(20)));
        assert_eq!(leases.renewals("ns/other", six, 1), RenewalTerms::default());
        // Just started: the process before may have asked for what the spec says now.
        let fresh = Leases::default();
        let terms = fresh.renewals("ns/quay", six, 1);
        assert!(terms.outstanding > MAX_FOLLOWED_FOR, "{terms:?}");
        assert_eq!((terms.fewest, terms.longest), (1, six));
        assert_eq!(fresh.renewals("ns/quay", six, 0), RenewalTerms::default());
    }

    #[test]
    fn a_pass_from_an_older_status_renews_nobody() {
        let leases = Leases::default();
        leases.renew("ns/quay", holder("quay-1", 6), b"k".to_vec());
        let older = Holder {
            epoch: 1,
            ..holder("quay-0", 6)
        };
        leases.renew("ns/quay", older, b"k".to_vec());
        assert!(leases.renews("ns/quay", "quay-1", 2));
        leases.keep_only("ns/quay", "quay-0", 1);
        assert!(leases.prepare("ns/quay").is_none());
    }

    #[test]
    fn a_stopped_or_forgotten_lease_sends_nothing() {
        let leases = Leases::default();
        leases.renew("ns/quay", holder("quay-0", 6), b"k".to_vec());
        leases.stop("ns/quay");
        assert!(leases.prepare("ns/quay").is_none());
        leases.renew("ns/quay", holder("quay-1", 6), b"k".to_vec());
        assert_eq!(leases.prepare("ns/quay").unwrap().0.pod, "quay-1");
        leases.forget("ns/quay");
        assert!(leases.prepare("ns/quay").is_none());
    }
}
