//! Reads each server pod's report from its agent (`GET /status` on the agent port, over the pod
//! network): the I/O edge of the role decisions in `roles`.

use std::time::Duration;

use bulwark_contract::labels::{Role, ROLE};
use bulwark_contract::member::{MemberStatus, STATUS_PATH};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::roles::MemberView;
use crate::names;

/// Time to connect and to read a whole answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Longest answer read.
const MAX_ANSWER: u64 = 64 * 1024;

/// The members' views, read concurrently.
pub async fn views(pods: &[Pod]) -> Vec<MemberView> {
    futures::future::join_all(pods.iter().map(|pod| async move {
        MemberView {
            pod: pod.name_any(),
            labelled: pod.labels().get(ROLE).and_then(|v| Role::from_label(v)),
            report: report(pod).await,
        }
    }))
    .await
}

async fn report(pod: &Pod) -> Result<MemberStatus, String> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| "the pod has no IP address yet".to_owned())?;
    let addr = format!("{ip}:{}", names::AGENT_PORT);
    let answer = tokio::time::timeout(TIMEOUT, get(&addr))
        .await
        .map_err(|_| format!("{addr} did not answer within {TIMEOUT:?}"))??;
    let (code, body) = answer;
    if code != 200 {
        return Err(format!("{addr} answered {code}: {}", body.trim()));
    }
    MemberStatus::from_line(&body).map_err(|e| format!("{addr} sent an unreadable report: {e}"))
}

/// One `GET /status`: status code and body.
async fn get(addr: &str) -> Result<(u16, String), String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let request = format!("GET {STATUS_PATH} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
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
