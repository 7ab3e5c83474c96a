//! How the operator reaches its members' agents: each pod's report (`GET /status` on the agent
//! port) and role orders (`POST /role`), the I/O edge of the role decisions in `roles`,
//! `fencing` and `failover`. [`AgentMembers`] speaks HTTP over the pod network; controller
//! tests script members through the same [`Members`] trait.

use std::time::Duration;

use futures::future::BoxFuture;

use bulwark_contract::labels::{Role, ROLE};
use bulwark_contract::member::{MemberStatus, FRESH_QUERY, STATUS_PATH};
use bulwark_contract::order::{epoch_from_label, EPOCH_LABEL, ORDER_PATH};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::names;

/// Time to connect and to read a whole answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Time for a fresh report (the agent waits up to 3 s for a new pass).
const FRESH_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest answer read.
const MAX_ANSWER: u64 = 64 * 1024;

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

fn agent_addr(pod: &Pod) -> Result<String, String> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| "the pod has no IP address yet".to_owned())?;
    Ok(format!("{ip}:{}", names::AGENT_PORT))
}

async fn send_order(pod: &Pod, signed: &str) -> Result<Option<MemberStatus>, String> {
    let addr = agent_addr(pod)?;
    let request = format!(
        "POST {ORDER_PATH} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{signed}",
        signed.len()
    );
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
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("cannot send to {addr}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .await
        .map_err(|e| format!("cannot read from {addr}: {e}"))?;
    parse(&String::from_utf8_lossy(&raw)).ok_or_else(|| format!("{addr} sent no HTTP answer"))
}

/// Status code and body of an HTTP/1.1 answer without chunked encoding (the agent's).
fn parse(raw: &str) -> Option<(u16, String)> {
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed() {
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n{\"a\":1}\n"),
            Some((200, "{\"a\":1}\n".to_owned()))
        );
        assert_eq!(
            parse("HTTP/1.1 503 x\r\n\r\nno observation\n").unwrap().0,
            503
        );
        assert_eq!(parse("garbage"), None);
    }
}
