//! How the operator reaches its members' agents: each pod's report (`GET /status` on the agent
//! port), role orders (`POST /role`) and the primary's lease heartbeats (`POST /lease`), the
//! I/O edge of the role decisions in `roles`, `fencing` and `failover`. [`AgentMembers`]
//! speaks HTTP over the pod network; controller tests script members through the same
//! [`Members`] trait.

use std::time::Duration;

use futures::future::BoxFuture;

use bulwark_contract::labels::{Role, ROLE};
use bulwark_contract::lease::LEASE_PATH;
use bulwark_contract::member::{MemberStatus, FRESH_QUERY, STATUS_PATH};
use bulwark_contract::order::{epoch_from_label, EPOCH_LABEL, ORDER_PATH};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::names;

/// Time to connect and to read a whole answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Time to connect (a lost SYN is sent again after 1 s): an agent cut off the network never
/// refuses, and an order to it must not hold a failover's pass for the whole answer's wait.
/// Shorter than [`TIMEOUT`], so that a report from an agent never reached says so
/// ([`never_reached`]) rather than that the whole read timed out.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Time for a fresh report (the agent waits up to 3 s for a new pass).
const FRESH_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to connect for a heartbeat: shorter than the interval the heartbeat loop gives each
/// one, so that a heartbeat cut short by that bound was always connected (it may have been
/// taken) and one that never connected says so ([`HeartbeatError::NotDelivered`]).
pub const HEARTBEAT_CONNECT_TIMEOUT: Duration = Duration::from_millis(700);
const _: () = assert!(
    HEARTBEAT_CONNECT_TIMEOUT.as_millis() < bulwark_contract::lease::HEARTBEAT_INTERVAL.as_millis()
);

/// Why a heartbeat was not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// No connection was made (refused, or no answer to the connection's setup): the agent
    /// cannot have taken it, so the lease it would have granted does not count.
    #[error("{0}")]
    NotDelivered(String),
    /// Sent, or maybe sent, with no good answer: the agent may have taken it.
    #[error("{0}")]
    Unanswered(String),
}

/// One server pod as the operator sees it.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// Pod name.
    pub pod: String,
    /// The role label the pod carries now.
    pub labelled: Option<Role>,
    /// Its epoch label (0 when absent; `None` when unreadable).
    pub labelled_epoch: Option<u64>,
    /// Its agent's report, or why there is none.
    pub report: Result<MemberStatus, String>,
}

/// What the operator asks of a member's agent.
pub trait Members: Send + Sync {
    /// `pod`'s report; with `fresh`, from an agent pass that began after this request (not up
    /// to an interval old).
    fn report<'a>(
        &'a self,
        pod: &'a Pod,
        fresh: bool,
    ) -> BoxFuture<'a, Result<MemberStatus, String>>;

    /// Sends a signed order to `pod`'s agent. `Ok(Some(report))`: the agent acted on it and
    /// reports this; `Ok(None)`: accepted, still being carried out.
    fn send_order<'a>(
        &'a self,
        pod: &'a Pod,
        signed: &'a str,
    ) -> BoxFuture<'a, Result<Option<MemberStatus>, String>>;

    /// Sends a signed lease heartbeat to the agent at `addr` (`ip:port`), connecting within
    /// [`HEARTBEAT_CONNECT_TIMEOUT`].
    fn send_heartbeat<'a>(
        &'a self,
        addr: &'a str,
        signed: &'a str,
    ) -> BoxFuture<'a, Result<(), HeartbeatError>>;
}

/// The members' agents over the pod network.
pub struct AgentMembers;

impl Members for AgentMembers {
    fn report<'a>(
        &'a self,
        pod: &'a Pod,
        fresh: bool,
    ) -> BoxFuture<'a, Result<MemberStatus, String>> {
        Box::pin(async move {
            if fresh {
                read_report(pod, format!("{STATUS_PATH}?{FRESH_QUERY}"), FRESH_TIMEOUT).await
            } else {
                read_report(pod, STATUS_PATH.to_owned(), TIMEOUT).await
            }
        })
    }

    fn send_order<'a>(
        &'a self,
        pod: &'a Pod,
        signed: &'a str,
    ) -> BoxFuture<'a, Result<Option<MemberStatus>, String>> {
        Box::pin(send_order(pod, signed))
    }

    fn send_heartbeat<'a>(
        &'a self,
        addr: &'a str,
        signed: &'a str,
    ) -> BoxFuture<'a, Result<(), HeartbeatError>> {
        Box::pin(send_heartbeat(addr, signed))
    }
}

/// Whether a failed report (`MemberView::report`'s error) means the agent was never reached:
/// no address, or no connection made. An order sent to it in the same pass would wait out the
/// same connection timeout for nothing, and a failover's pass must not wait on a lost node.
pub fn never_reached(report_error: &str) -> bool {
    report_error.starts_with("cannot connect to ") || report_error == NO_ADDRESS
}

/// Why a pod's agent has no address.
const NO_ADDRESS: &str = "the pod has no IP address yet";

/// The address of `pod`'s agent (`ip:port`).
pub fn agent_address(pod: &Pod) -> Result<String, String> {
    agent_addr(pod)
}

async fn send_heartbeat(addr: &str, signed: &str) -> Result<(), HeartbeatError> {
    let request = bulwark_http::client::post(LEASE_PATH, signed);
    let exchanged = bulwark_http::client::exchange(addr, &request, HEARTBEAT_CONNECT_TIMEOUT);
    let (code, body) = match tokio::time::timeout(TIMEOUT, exchanged).await {
        Err(_) => {
            return Err(HeartbeatError::Unanswered(format!(
                "{addr} did not answer the heartbeat within {TIMEOUT:?}"
            )))
        }
        Ok(Err(e)) if e.never_connected() => {
            return Err(HeartbeatError::NotDelivered(e.to_string()))
        }
        Ok(Err(e)) => return Err(HeartbeatError::Unanswered(e.to_string())),
        Ok(Ok(answer)) => answer,
    };
    match code {
        200 => Ok(()),
        _ => Err(HeartbeatError::Unanswered(format!(
            "{addr} answered {code}: {}",
            body.trim()
        ))),
    }
}

/// The pods `set` controls (its controller reference, by uid), and the names of the others
/// that are not being deleted (an earlier StatefulSet's, on their way out): a pod that only
/// carries the cluster's labels (anyone who may create pods in the namespace can give it them)
/// is no member. Its report is never read, so it cannot steer a failover; it
/// gets no order, and it is never chosen as the primary or a backup's source.
pub fn controlled_by(set: &StatefulSet, pods: Vec<Pod>) -> (Vec<Pod>, Vec<String>) {
    let (members, others): (Vec<Pod>, Vec<Pod>) = pods
        .into_iter()
        .partition(|p| crate::ownership::controls(set, p));
    let others = others
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect();
    (members, others)
}

/// The members' views, read concurrently.
pub async fn views(members: &dyn Members, pods: &[Pod]) -> Vec<MemberView> {
    futures::future::join_all(pods.iter().map(|pod| async move {
        MemberView {
            pod: pod.name_any(),
            labelled: pod.labels().get(ROLE).and_then(|v| Role::from_label(v)),
            labelled_epoch: epoch_from_label(pod.labels().get(EPOCH_LABEL).map(String::as_str)),
            report: members.report(pod, false).await,
        }
    }))
    .await
}

/// The views read again for the members that reported in them, concurrently; the others keep
/// their failure (a member silent a moment ago is not waited on again).
pub async fn reread(members: &dyn Members, pods: &[Pod], views: &mut [MemberView]) {
    let fresh = futures::future::join_all(views.iter().map(|v| async move {
        let pod = pods.iter().find(|p| p.name_any() == v.pod);
        match (&v.report, pod) {
            (Ok(_), Some(pod)) => Some(members.report(pod, false).await),
            _ => None,
        }
    }))
    .await;
    for (view, report) in views.iter_mut().zip(fresh) {
        if let Some(report) = report {
            view.report = report;
        }
    }
}

/// The views as they stand `by` after they were read: the ages their reports give (of the
/// report, of the last renewal, of the last answer from the primary) grow by it, so that a
/// decision made later with them still dates those events right. What a report says in whole
/// seconds (how long reads have failed) is left as read: smaller, it only holds a failover
/// back.
pub fn aged(views: &mut [MemberView], by: Duration) {
    let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
    for report in views.iter_mut().filter_map(|v| v.report.as_mut().ok()) {
        report.age_ms = report.age_ms.saturating_add(by_ms);
        report.followed_ms = report.followed_ms.map(|ms| ms.saturating_add(by_ms));
        if let Some(rep) = report.replication.as_mut() {
            rep.source_heard_ms = rep.source_heard_ms.map(|ms| ms.saturating_add(by_ms));
        }
    }
}

fn agent_addr(pod: &Pod) -> Result<String, String> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| NO_ADDRESS.to_owned())?;
    Ok(format!("{ip}:{}", names::AGENT_PORT))
}

async fn send_order(pod: &Pod, signed: &str) -> Result<Option<MemberStatus>, String> {
    let addr = agent_addr(pod)?;
    let request = bulwark_http::client::post(ORDER_PATH, signed);
    // The agent answers once it has acted, or after its own wait.
    let limit = bulwark_contract::order::ORDER_WAIT + TIMEOUT;
    let (code, body) = tokio::time::timeout(limit, exchange(&addr, &request))
        .await
        .map_err(|_| format!("{addr} did not answer the order within {limit:?}"))??;
    match code {
        200 => MemberStatus::from_line(&body)
            .map(Some)
            .map_err(|e| format!("{addr} sent an unreadable report: {e}")),
        202 => Ok(None),
        _ => Err(format!("{addr} answered {code}: {}", body.trim())),
    }
}

async fn read_report(pod: &Pod, path: String, limit: Duration) -> Result<MemberStatus, String> {
    let addr = agent_addr(pod)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
    let answer = tokio::time::timeout(limit, exchange(&addr, &request))
        .await
        .map_err(|_| format!("{addr} did not answer within {limit:?}"))??;
    let (code, body) = answer;
    if code != 200 {
        return Err(format!("{addr} answered {code}: {}", body.trim()));
    }
    MemberStatus::from_line(&body).map_err(|e| format!("{addr} sent an unreadable report: {e}"))
}

/// One request: status code and body.
pub(crate) async fn exchange(addr: &str, request: &str) -> Result<(u16, String), String> {
    bulwark_http::client::exchange(addr, request, CONNECT_TIMEOUT)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reports_that_never_reached_the_agent_say_so() {
        use bulwark_http::client::ExchangeError;
        let addr = "10.0.0.9:9081".to_owned();
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let cases = [
            (
                "connect timed out",
                ExchangeError::ConnectTimedOut {
                    addr: addr.clone(),
                    timeout: CONNECT_TIMEOUT,
                }
                .to_string(),
                true,
            ),
            (
                "connection refused",
                ExchangeError::Connect {
                    addr: addr.clone(),
                    source: io(),
                }
                .to_string(),
                true,
            ),
            ("no address", NO_ADDRESS.to_owned(), true),
            (
                "a connection that broke while reading",
                ExchangeError::Read {
                    addr: addr.clone(),
                    source: io(),
                }
                .to_string(),
                false,
            ),
            (
                "an answer too late",
                format!("{addr} did not answer within {TIMEOUT:?}"),
                false,
            ),
            (
                "an error answered",
                format!("{addr} answered 503: starting"),
                false,
            ),
        ];
        for (name, error, want) in cases {
            assert_eq!(never_reached(&error), want, "{name}: {error}");
        }
    }

    #[test]
    fn only_pods_the_statefulset_controls_are_members() {
        let set: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "quay", "uid": "set-uid"}
        }))
        .unwrap();
        let pod = |name: &str, owner: Option<(&str, &str, bool)>| -> Pod {
            let refs: Vec<serde_json::Value> = owner
                .into_iter()
                .map(|(kind, uid, controller)| {
                    serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "name": "quay",
                        "uid": uid, "controller": controller})
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "ownerReferences": refs}
            }))
            .unwrap()
        };
        let (members, others) = controlled_by(
            &set,
            vec![
                pod("quay-0", Some(("StatefulSet", "set-uid", true))),
                pod("quay-1", Some(("StatefulSet", "set-uid", true))),
                // Only the labels: made by someone else.
                pod("quay-2", None),
                // Another StatefulSet of the same name, an earlier incarnation's.
                pod("quay-3", Some(("StatefulSet", "old-uid", true))),
                // Owned, but not as its controller.
                pod("quay-4", Some(("StatefulSet", "set-uid", false))),
                // An earlier incarnation's, being deleted: no member, and not news.
                {
                    let mut p = pod("quay-6", Some(("StatefulSet", "old-uid", true)));
                    p.metadata.deletion_timestamp = Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(chrono::Utc::now()),
                    );
                    p
                },
                pod("quay-5", Some(("ReplicaSet", "set-uid", true))),
            ],
        );
        let names: Vec<String> = members.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["quay-0", "quay-1"]);
        assert_eq!(others, ["quay-2", "quay-3", "quay-4", "quay-5"]);
        // A StatefulSet not read back from the API server (no uid) controls nothing.
        let (none, _) = controlled_by(&StatefulSet::default(), vec![pod("quay-0", None)]);
        assert!(none.is_empty());
    }
}
