//! The primaries' leases (`bulwark_contract::lease`), the operator's side: each pass names the
//! member its cluster's lease goes to (or stops it once the primary is lost), a loop renews it
//! every [`HEARTBEAT_INTERVAL`] with a signed, time-stamped heartbeat, and a failover asks how
//! long any lease it may have granted could still run. A heartbeat counts from when it is
//! prepared, first as under way, then as granted once it may have been taken; one whose
//! connection was never made is dropped (no agent can have taken it: a lost node's lease runs
//! out from the last heartbeat it may have had, not from the last one tried).
//! What was sent is kept in memory: after a restart the operator counts as if it had renewed
//! every lease just before it started.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bulwark_contract::follow::MAX_FOLLOWED_FOR;
use bulwark_contract::lease::{Heartbeat, HEARTBEAT_INTERVAL, LEASE_MARGIN};

use crate::cluster::failover::RenewalTerms;
use crate::members::{HeartbeatError, Members};

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
    /// By `namespace/name`: the last heartbeat its holder answered, for a failover to count
    /// the primary's silence from.
    answered: Mutex<HashMap<String, Answer>>,
    /// Heartbeats under way, by number: counted as granted until they are settled (granted
    /// once they may have been taken, dropped when never delivered).
    under_way: Mutex<HashMap<u64, UnderWay>>,
    /// Numbers the heartbeats prepared.
    prepared: std::sync::atomic::AtomicU64,
}

/// A heartbeat under way: what it grants once it may have been taken.
#[derive(Debug, Clone)]
struct UnderWay {
    cluster: String,
    /// `granted`'s key, and until when.
    pod_key: String,
    until: Instant,
    /// The renewals it asks for.
    asked: Option<Asked>,
    /// When it was prepared: its connection is made, or it is dropped, within
    /// [`crate::members::HEARTBEAT_CONNECT_TIMEOUT`] of its sending, which follows at once.
    prepared: Instant,
}

/// A heartbeat answered.
#[derive(Debug, Clone)]
struct Answer {
    pod: String,
    epoch: u64,
    at: Instant,
}

/// A heartbeat being sent: settled as granted when dropped unsettled (a caller that gave up
/// waiting did so after the connection was made, [`crate::members::HEARTBEAT_CONNECT_TIMEOUT`]
/// being shorter than its bound).
struct Sending<'a> {
    leases: &'a Leases,
    number: u64,
    settled: bool,
}

impl Sending<'_> {
    fn settle(mut self, delivered: bool) {
        self.settled = true;
        self.leases.settle(self.number, delivered);
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.leases.settle(self.number, true);
        }
    }
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
            answered: Mutex::default(),
            under_way: Mutex::default(),
            prepared: std::sync::atomic::AtomicU64::new(0),
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

    /// Forgets `cluster` (deleted, or its primary needs no lease), and when its holder last
    /// answered.
    pub fn forget(&self, cluster: &str) {
        self.renewals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
        self.answered
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
        // Those under way first: one settled meanwhile is granted before it leaves them.
        let under_way = self
            .under_way_of(cluster)
            .iter()
            .map(|u| u.until)
            .fold(floor, Instant::max);
        let ends = self
            .granted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, ends)| *ends)
            .fold(under_way, Instant::max);
        (ends + LEASE_MARGIN).saturating_duration_since(Instant::now())
    }

    /// When every heartbeat to `cluster`'s members under way now has either connected or been
    /// dropped as never delivered, if one may still be connecting: a failover about to read
    /// the leases waits for that rather than count a heartbeat that will prove never
    /// delivered, and be put off by a whole poll.
    pub fn connecting_until(&self, cluster: &str) -> Option<Instant> {
        let now = Instant::now();
        self.under_way_of(cluster)
            .iter()
            .map(|u| u.prepared + crate::members::HEARTBEAT_CONNECT_TIMEOUT)
            .filter(|t| *t > now)
            .max()
    }

    /// The heartbeats to `cluster`'s members under way now.
    fn under_way_of(&self, cluster: &str) -> Vec<UnderWay> {
        self.under_way
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|u| u.cluster == cluster)
            .cloned()
            .collect()
    }

    /// What replicas' renewals may still keep of a lease this operator sent `cluster`'s members
    /// asking for them, for a failover to wait out ([`RenewalTerms`]). Right after a start,
    /// the process before is taken to have asked for `followers` (the spec's number now) with
    /// leases of `length`: it may have asked, and this one cannot know.
    pub fn renewals(&self, cluster: &str, length: Duration, followers: u32) -> RenewalTerms {
        let now = Instant::now();
        // Those under way first, as in `outstanding_any`.
        let under_way: Vec<Asked> = self
            .under_way_of(cluster)
            .iter()
            .filter_map(|u| u.asked)
            .collect();
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
            .chain(
                under_way
                    .into_iter()
                    .filter(|a| a.until + LEASE_MARGIN > now),
            )
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
    ) -> Result<(), HeartbeatError> {
        if !self.renews(cluster, pod, epoch) {
            return Ok(());
        }
        self.send(cluster, members).await.unwrap_or(Ok(()))
    }

    /// Sends one heartbeat to `cluster`'s holder now, if it has one: the lease counts before
    /// the answer, since the agent may take it even when the answer is lost, and stops
    /// counting only when no connection was made. A caller that gives up waiting does so after
    /// the connection's setup was bounded ([`crate::members::HEARTBEAT_CONNECT_TIMEOUT`]): the
    /// heartbeat then still counts. `None`: none is sent (stopped, or forgotten).
    async fn send(
        &self,
        cluster: &str,
        members: &dyn Members,
    ) -> Option<Result<(), HeartbeatError>> {
        let (holder, line, number) = self.prepare(cluster)?;
        let sending = Sending {
            leases: self,
            number,
            settled: false,
        };
        let sent = members.send_heartbeat(&holder.addr, &line).await;
        sending.settle(!matches!(sent, Err(HeartbeatError::NotDelivered(_))));
        if sent.is_ok() {
            self.answered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    cluster.to_owned(),
                    Answer {
                        pod: holder.pod,
                        epoch: holder.epoch,
                        at: Instant::now(),
                    },
                );
        }
        Some(sent)
    }

    /// When `pod`, the holder of `cluster`'s lease at `epoch`, last answered a heartbeat from
    /// this operator, if it did.
    pub fn last_answer(&self, cluster: &str, pod: &str, epoch: u64) -> Option<Instant> {
        self.answered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .filter(|a| a.pod == pod && a.epoch == epoch)
            .map(|a| a.at)
    }

    /// Settles heartbeat `number`: what it grants counts from now on as granted when it may
    /// have been delivered, and not at all when it was not. Granted while those under way are
    /// still locked, so that a reader (who reads those under way first) never misses it.
    fn settle(&self, number: u64, delivered: bool) {
        let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sent) = under_way.remove(&number) else {
            return;
        };
        if !delivered {
            return;
        }
        self.granted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(sent.pod_key)
            .and_modify(|e| *e = (*e).max(sent.until))
            .or_insert(sent.until);
        if let Some(a) = sent.asked {
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            let live = asked.entry(sent.cluster).or_default();
            match live
                .iter_mut()
                .find(|l| l.followers == a.followers && l.length == a.length)
            {
                Some(l) => l.until = l.until.max(a.until),
                None => live.push(a),
            }
        }
        drop(under_way);
    }

    fn prepare(&self, cluster: &str) -> Option<(Holder, String, u64)> {
        // Counted under the renewals' lock, before it is sent: a failover that reads
        // `outstanding_any` after a stop sees every heartbeat that may still go out.
        let r = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        let renewal = r.get(cluster).filter(|r| !r.stopped)?;
        let holder = renewal.holder.clone();
        let until = Instant::now() + holder.lease;
        let number = self
            .prepared
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let asked = (holder.followers > 0).then(|| Asked {
            followers: holder.followers,
            length: holder.lease,
            until: until + MAX_FOLLOWED_FOR,
        });
        self.under_way
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                number,
                UnderWay {
                    cluster: cluster.to_owned(),
                    pod_key: format!("{cluster}/{}", holder.pod),
                    until,
                    asked,
                    prepared: Instant::now(),
                },
            );
        let line = Heartbeat {
            member: holder.pod.clone(),
            epoch: holder.epoch,
            lease_ms: holder.lease.as_millis() as u64,
            sent_ms: chrono::Utc::now().timestamp_millis(),
            followers: holder.followers,
        }
        .sign(&renewal.key);
        Some((holder, line, number))
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
                // Connected (it may have been taken), or at worst counted as if: the connection's
                // setup is bounded shorter.
                let late = || {
                    HeartbeatError::Unanswered(format!("no answer within {HEARTBEAT_INTERVAL:?}"))
                };
                (c, sent.unwrap_or_else(|_| Some(Err(late()))))
            }))
            .await;
            for (cluster, result) in results {
                match result {
                    // Stopped (the primary is lost) or forgotten: nothing was asked.
                    None => {
                        failing.remove(cluster);
                    }
                    Some(Ok(())) => {
                        if failing.remove(cluster).is_some() {
                            tracing::info!(cluster = %cluster, "lease heartbeats answered again");
                        }
                    }
                    Some(Err(e)) => {
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
#[path = "leases_tests.rs"]
mod tests;
