//! Scripted members: the operator's [`Members`] seam answered by the tests instead of agents
//! (there is no kubelet, so no agent runs). Each member has a report the test sets, answers
//! or stays silent, and takes role orders by the agent's rules (`run/orders.rs`): signed with
//! the cluster's order key, for this member, never older than the one it holds, a different
//! role at the same epoch refused and the same one ignored (the first order's source stays).
//! An accepted order moves the member's role, epoch, read-only state and replication source.
//! Members nobody scripted give no report. Unlike an agent, a scripted member answers
//! whether or not its pod has an IP address, and always answers with a report (never
//! "accepted, still being carried out").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use bulwark_contract::lease::Heartbeat;

use bulwark_contract::member::{IoState, MemberReplication, MemberStatus};
use bulwark_contract::order::RoleOrder;
use bulwark_contract::{Engine, Role};
use bulwark_operator::members::{HeartbeatError, Members};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// One scripted member.
#[derive(Debug, Clone)]
pub struct Member {
    /// What it reports.
    pub report: MemberStatus,
    /// Whether its agent answers at all (reports and orders).
    pub answers: bool,
    /// Whether a connection to its agent can be made at all (false: its node is gone, and
    /// nothing sent to it arrives, heartbeats included).
    pub reachable: bool,
    /// The cluster's order key, which its orders must be signed with.
    pub order_key: Vec<u8>,
    /// The orders it accepted, oldest first, with when.
    pub orders: Vec<RoleOrder>,
    pub order_times: Vec<Instant>,
    /// The lease heartbeats sent to it (signed with its key), with when, answered or not.
    pub heartbeats: Vec<(Instant, Heartbeat)>,
}

/// Every scripted member of a test binary, by namespace and pod.
#[derive(Default)]
pub struct ScriptedMembers {
    members: Mutex<HashMap<(String, String), Member>>,
}

/// What a fresh agent reports before it knows its role: a read-only server with no data.
pub fn fresh_report() -> MemberStatus {
    MemberStatus {
        role: None,
        epoch: 0,
        ready: false,
        reason: "role unknown".into(),
        engine: Engine::MariaDb,
        read_only: true,
        super_read_only: false,
        gtid_executed: String::new(),
        gtid_history: String::new(),
        semi_sync_wait: false,
        semi_sync_clients: 0,
        replication: None,
        writes_held: false,
        handover_pending: false,
        clone_port: 0,
        age_ms: 0,
        takes_follows: false,
        followed_ms: None,
    }
}

impl ScriptedMembers {
    /// Scripts `pod` of namespace `ns` with a fresh agent's report.
    pub fn add(&self, ns: &str, pod: &str, order_key: &[u8]) {
        self.lock().insert(
            (ns.to_owned(), pod.to_owned()),
            Member {
                report: fresh_report(),
                answers: true,
                reachable: true,
                order_key: order_key.to_owned(),
                orders: Vec::new(),
                order_times: Vec::new(),
                heartbeats: Vec::new(),
            },
        );
    }

    /// Changes a scripted member.
    pub fn update(&self, ns: &str, pod: &str, change: impl FnOnce(&mut Member)) {
        let mut members = self.lock();
        let m = members
            .get_mut(&(ns.to_owned(), pod.to_owned()))
            .unwrap_or_else(|| panic!("{ns}/{pod} is not scripted"));
        change(m);
    }

    /// A scripted member as it is now.
    pub fn get(&self, ns: &str, pod: &str) -> Member {
        self.lock()
            .get(&(ns.to_owned(), pod.to_owned()))
            .cloned()
            .unwrap_or_else(|| panic!("{ns}/{pod} is not scripted"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Member>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn answering(&self, pod: &Pod) -> Result<Member, String> {
        let key = (pod.namespace().unwrap_or_default(), pod.name_any());
        match self.lock().get(&key) {
            None => Err(format!("{} is not scripted", key.1)),
            Some(m) if !m.reachable => Err(format!("cannot connect to {} (scripted)", key.1)),
            Some(m) if !m.answers => Err(format!("{} does not answer (scripted)", key.1)),
            Some(m) => Ok(m.clone()),
        }
    }
}

/// What an agent's report becomes once it has carried out `order`.
pub fn obey(report: &mut MemberStatus, order: &RoleOrder) {
    report.role = Some(order.role);
    report.epoch = order.epoch;
    report.ready = true;
    report.reason = format!("{} at epoch {}", order.role, order.epoch);
    match order.role {
        Role::Primary => {
            report.read_only = false;
            report.replication = None;
        }
        Role::Replica => {
            report.read_only = true;
            report.replication = Some(MemberReplication {
                source_host: order.source.clone().unwrap_or_default(),
                source_port: 3306,
                io: IoState::Running,
                sql_running: true,
                relay_applied: true,
                sql_caught_up: true,
                io_errno: 0,
                sql_errno: 0,
                lag_seconds: Some(0),
                received: String::new(),
                source_unreachable_seconds: None,
                source_heard_ms: None,
            });
        }
    }
}

impl Members for ScriptedMembers {
    fn report<'a>(
        &'a self,
        pod: &'a Pod,
        _fresh: bool,
    ) -> BoxFuture<'a, Result<MemberStatus, String>> {
        Box::pin(async move { self.answering(pod).map(|m| m.report) })
    }

    fn send_order<'a>(
        &'a self,
        pod: &'a Pod,
        signed: &'a str,
    ) -> BoxFuture<'a, Result<Option<MemberStatus>, String>> {
        Box::pin(async move {
            let member = self.answering(pod)?;
            let order = RoleOrder::verify(signed, &member.order_key).map_err(|e| e.to_string())?;
            if order.member != pod.name_any() {
                return Err(format!(
                    "an order for {} reached {}",
                    order.member,
                    pod.name_any()
                ));
            }
            if let Some(have) = member.orders.last() {
                if order.epoch < have.epoch {
                    return Err(format!(
                        "epoch {} is older than the accepted {}",
                        order.epoch, have.epoch
                    ));
                }
                if order.epoch == have.epoch {
                    if order.role != have.role {
                        return Err(format!(
                            "a {} order at epoch {}, which made this member {}",
                            order.role, order.epoch, have.role
                        ));
                    }
                    return Ok(Some(member.report));
                }
            }
            let ns = pod.namespace().unwrap_or_default();
            let mut report = None;
            self.update(&ns, &pod.name_any(), |m| {
                obey(&mut m.report, &order);
                m.orders.push(order);
                m.order_times.push(Instant::now());
                report = Some(m.report.clone());
            });
            Ok(report)
        })
    }

    /// Kept by the member whose name it carries and whose key signed it (the same pod names
    /// run in several namespaces at once); answered as its agent would when it answers.
    fn send_heartbeat<'a>(
        &'a self,
        addr: &'a str,
        signed: &'a str,
    ) -> BoxFuture<'a, Result<(), HeartbeatError>> {
        let mut members = self.lock();
        let taken = members.iter_mut().find_map(|((_, pod), m)| {
            let h = Heartbeat::verify(signed, &m.order_key).ok()?;
            (h.member == *pod).then(|| {
                if m.reachable {
                    m.heartbeats.push((Instant::now(), h));
                }
                (m.reachable, m.answers)
            })
        });
        let answer = match taken {
            Some((true, true)) => Ok(()),
            Some((false, _)) => Err(HeartbeatError::NotDelivered(format!(
                "cannot connect to {addr} (scripted)"
            ))),
            Some((true, false)) => Err(HeartbeatError::Unanswered(format!(
                "{addr} does not answer (scripted)"
            ))),
            None => Err(HeartbeatError::Unanswered(format!(
                "{addr}: no scripted member takes {signed}"
            ))),
        };
        Box::pin(async move { answer })
    }
}
