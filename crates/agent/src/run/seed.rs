//! `bulwark-agent seed`: before mysqld first starts on an empty data volume of a cluster that
//! already has data (a scale-up, a replaced volume), copies a running member's data into it
//! (`clone`), prepared, with the copy's GTID position left for the agent, which makes the
//! server continue from it and replicate only what followed. Without this the new member would
//! replicate the cluster's whole history from the primary's binary logs, which fails once they
//! were purged, and a bootstrapped cluster's new pod would restore the original backup again.
//!
//! A datadir that holds a server is never touched. When no member answers with data (a new
//! cluster, whose members all start empty) nothing is copied. When members have data but none
//! can give a copy (none ready, no primary answering to vouch for one, or none the primary
//! agrees with), it waits: an empty server in a cluster that has data would replicate from
//! nothing. A donor that cannot prove it holds
//! the order key (a pod that only carries the cluster's labels, or a member whose agent
//! predates the proof) is passed over, but its data still counts: with only such donors it
//! waits too. A copy in progress is marked like a restore, so an interrupted one is cleared and
//! redone, never taken for a server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bulwark_contract::clone::CloneRequest;
use bulwark_contract::member::{MemberStatus, STATUS_PATH};
use bulwark_contract::order::ORDER_KEY;
use bulwark_contract::{Engine, Role};
use bulwark_engine::source::{self, ToolIo, ToolJob};

use crate::decide::restored::RestoredGtid;
use crate::run::bootstrap::{self, BootstrapError, DatadirState};
use crate::run::clone::{self, ReceiveError};

/// Time a member's agent has to answer for its report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause before the members are asked again while none can give a copy.
const DONOR_RETRY: Duration = Duration::from_secs(5);
/// Least time between two log lines saying why it still waits.
const WAIT_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// What `seed` works with.
#[derive(Debug, Clone)]
pub struct SeedConfig {
    /// This pod (named in the request, for the donor's log).
    pub pod_name: String,
    /// `host:port` of the members' agents; a name may stand for several (a headless Service).
    pub peers: Vec<String>,
    pub datadir: PathBuf,
    pub gtid_file: PathBuf,
    pub pending_file: PathBuf,
    /// Holds the order key that signs the request.
    pub credentials_dir: PathBuf,
    /// Tool for `--prepare` instead of the detected one.
    pub tool: Option<String>,
    /// Wait for a member with data even while none has any (the first member is restoring
    /// the cluster's data, which every other member copies).
    pub wait_for_data: bool,
}

/// What `seed` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedOutcome {
    /// The datadir holds a server (the entry named is the evidence).
    Skipped(String),
    /// Nothing to copy from, and why; the datadir stays empty.
    NoDonor(String),
    /// Copied from `donor`; the server continues from `gtid`.
    Seeded {
        donor: SocketAddr,
        gtid: RestoredGtid,
        bytes: u64,
        files: u64,
    },
}

/// Errors of `seed`.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error(transparent)]
    Datadir(#[from] BootstrapError),
    #[error("failed to read the order key {path}")]
    ReadKey {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Receive(#[from] ReceiveError),
    #[error("failed to prepare the copy")]
    Prepare(#[source] bulwark_engine::Error),
    #[error("failed to find the copy's GTID position: the copy has no binary log coordinates")]
    NoPosition,
    #[error("failed to receive the copy: the receiving task ended abnormally")]
    ReceiverTask(#[source] tokio::task::JoinError),
    #[error("failed to draw a clone request's nonce from /dev/urandom")]
    Nonce(#[source] std::io::Error),
}

/// Seeds the datadir when it is empty and a member has data.
pub async fn seed(cfg: &SeedConfig) -> Result<SeedOutcome, SeedError> {
    let datadir = &cfg.datadir;
    let mut interrupted = match bootstrap::inspect(datadir, &[&cfg.gtid_file, &cfg.pending_file])? {
        DatadirState::Initialized(evidence) => return Ok(SeedOutcome::Skipped(evidence)),
        DatadirState::Unexpected(entries) => {
            return Err(BootstrapError::AcceptDatadir {
                path: datadir.display().to_string(),
                entries: entries.join(", "),
            }
            .into())
        }
        DatadirState::Interrupted => true,
        DatadirState::Empty => false,
    };
    let mut logged: Option<std::time::Instant> = None;
    // Agents whose copy port did not prove it holds the order key: pods that only carry the
    // cluster's labels (or members with an older agent). No copy is asked of them again in
    // this run; what they report still counts as data, which makes the seed wait, never start
    // an empty server.
    let mut unproven: Vec<std::net::IpAddr> = Vec::new();
    let (report, addr, bytes, files, position) = 'attempt: loop {
        let (members, donor) = loop {
            let answered = reports(&cfg.peers).await;
            let rules = DonorRules {
                me: &cfg.pod_name,
                unproven: &unproven,
                restored_by_first: cfg.wait_for_data,
            };
            if let Some(donor) = choose_donor(&answered, &rules) {
                break (answered, donor);
            }
            let with_data = answered
                .iter()
                .filter(|(_, r)| !r.gtid_executed.is_empty())
                .count();
            if with_data > 0 || cfg.wait_for_data {
                if logged.is_none_or(|t| t.elapsed() >= WAIT_LOG_INTERVAL) {
                    if with_data == 0 {
                        tracing::info!(members = answered.len(), "waiting for the first member to restore the cluster's data, to copy it");
                    } else {
                        tracing::warn!(members = answered.len(), with_data, unproven = ?unproven, "the cluster has data but no member can give a copy (none ready, no primary answering to vouch for a copy, none the primary agrees with, or only addresses that could not prove they are members); waiting");
                    }
                    logged = Some(std::time::Instant::now());
                }
                tokio::time::sleep(DONOR_RETRY).await;
                continue;
            }
            if interrupted {
                // An earlier copy's remains, and nobody to copy from now: an empty datadir, not a
                // marker that would have the next run clear whatever the server writes meanwhile,
                // nor a GTID file that would have the empty server claim the copy's history.
                bootstrap::clear(datadir)?;
                bootstrap::remove_restored_gtid(&cfg.gtid_file)?;
                bootstrap::finish_marked(datadir)?;
            }
            let reason = if answered.is_empty() {
                "no member's agent answered".to_owned()
            } else {
                format!("none of {} members that answered has data", answered.len())
            };
            return Ok(SeedOutcome::NoDonor(reason));
        };
        let (at, report) = &members[donor];
        let addr = SocketAddr::new(at.ip(), report.clone_port);
        let key_path = cfg.credentials_dir.join(ORDER_KEY);
        let key = clone::read_key(&key_path).map_err(|source| SeedError::ReadKey {
            path: key_path.display().to_string(),
            source,
        })?;
        let engine = report.engine;
        tracing::info!(donor = %addr, donor_gtid = %report.gtid_executed, "copying a member's data into the empty datadir");
        bootstrap::mark(datadir, &format!("copying the data of {addr}"))?;
        bootstrap::remove_restored_gtid(&cfg.gtid_file)?;
        bootstrap::clear(datadir)?;
        let copied = copy(cfg, addr, &key, engine).await;
        let copied = match copied {
            Ok(done) => bootstrap::binlog_info_gtid(datadir)
                .map_err(SeedError::from)
                .and_then(|g| g.ok_or(SeedError::NoPosition))
                .map(|position| (done, position)),
            Err(e) => Err(e),
        };
        match copied {
            Ok(((bytes, files), position)) => break (report.clone(), addr, bytes, files, position),
            Err(e) => {
                if let Err(c) = bootstrap::clear(datadir) {
                    tracing::warn!(error = %bulwark_engine::error::chain(&c), "failed to clear the datadir after a failed copy");
                }
                if let SeedError::Receive(ReceiveError::Unproven { addr, reason }) = &e {
                    tracing::warn!(donor = %addr, reason = %reason, "not a member: choosing another donor");
                    unproven.push(at.ip());
                    // The marker stays: cleared below should nobody else have data.
                    interrupted = true;
                    continue 'attempt;
                }
                if let SeedError::Receive(ReceiveError::Refused { addr, reason }) = &e {
                    // A donor copies for one member at a time: the others ask again.
                    tracing::info!(donor = %addr, reason = %reason, "the donor refused the copy; asking again shortly");
                    interrupted = true;
                    tokio::time::sleep(DONOR_RETRY).await;
                    continue 'attempt;
                }
                return Err(e);
            }
        }
    };
    let gtid = RestoredGtid {
        backup_id: bulwark_engine::format::new_backup_id(chrono::Utc::now()),
        gtid_set: position,
        gtid_history: report.gtid_history.clone(),
    };
    bootstrap::write_restored_gtid(&cfg.gtid_file, &gtid)?;
    bootstrap::finish_marked(datadir)?;
    Ok(SeedOutcome::Seeded {
        donor: addr,
        gtid,
        bytes,
        files,
    })
}

/// Receives, prepares and moves the copy in; (bytes, files).
async fn copy(
    cfg: &SeedConfig,
    addr: SocketAddr,
    key: &[u8],
    engine: Engine,
) -> Result<(u64, u64), SeedError> {
    let staging = cfg.datadir.join(bootstrap::STAGING_NAME);
    std::fs::create_dir(&staging).map_err(|source| BootstrapError::CreateStaging {
        path: staging.display().to_string(),
        source,
    })?;
    let request = CloneRequest {
        member: cfg.pod_name.clone(),
        donor: addr.to_string(),
        issued_at: clone::unix_now(),
        nonce: clone::fresh_nonce().map_err(SeedError::Nonce)?,
    };
    let into = staging.clone();
    let key = key.to_vec();
    let received = tokio::task::spawn_blocking(move || clone::receive(addr, &request, &key, &into))
        .await
        .map_err(SeedError::ReceiverTask)??;
    tracing::info!(donor = %addr, bytes = received.bytes, files = received.files, "copy received; preparing");
    let tool = source::find_tool(engine, ToolJob::Physical, cfg.tool.as_deref())
        .map_err(SeedError::Prepare)?;
    let args = [
        "--prepare".to_owned(),
        format!("--target-dir={}", staging.display()),
    ];
    source::spawn(&tool, &args, ToolIo::Neither)
        .map_err(SeedError::Prepare)?
        .finish(Some(source::PHYSICAL_COMPLETION))
        .await
        .map_err(SeedError::Prepare)?;
    bootstrap::move_staged(&staging, &cfg.datadir)?;
    Ok((received.bytes, received.files))
}

/// The reports of the members whose agents answer at `peers`.
async fn reports(peers: &[String]) -> Vec<(SocketAddr, MemberStatus)> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for peer in peers {
        match tokio::net::lookup_host(peer.as_str()).await {
            Ok(found) => addrs.extend(found),
            // A headless Service with no ready member has no address.
            Err(e) => tracing::info!(peer = %peer, error = %e, "no member found"),
        }
    }
    addrs.sort();
    addrs.dedup();
    let mut out = Vec::new();
    for addr in addrs {
        match tokio::time::timeout(REPORT_TIMEOUT, report(addr)).await {
            Ok(Ok(r)) => out.push((addr, r)),
            Ok(Err(e)) => tracing::info!(member = %addr, error = %e, "no report"),
            Err(_) => tracing::info!(member = %addr, "no report in time"),
        }
    }
    out
}

async fn report(addr: SocketAddr) -> Result<MemberStatus, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(
        format!("GET {STATUS_PATH} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    s.take(64 << 10)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or("an answer without a body")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(head.lines().next().unwrap_or_default().to_owned());
    }
    MemberStatus::from_line(body).map_err(|e| e.to_string())
}

/// The member to copy from: a ready member with data that serves copies; a replica before the
/// primary (whose load the copy would add to), and only one whose transactions the primary all
/// has (never a member with transactions of its own); among those the one with every
/// transaction the others have. `None` when no such member has data, or when no primary
/// answers to vouch for a copy (unless this pod is the primary, below).
pub fn choose_donor(
    members: &[(SocketAddr, MemberStatus)],
    rules: &DonorRules<'_>,
) -> Option<usize> {
    let role_is = |i: usize, role: Role| members[i].1.role == Some(role);
    let proven = |i: usize| !rules.unproven.contains(&members[i].0.ip());
    let primary = (0..members.len())
        .filter(|&i| role_is(i, Role::Primary))
        .min_by_key(|&i| !proven(i));
    // No copy the primary cannot vouch for: one taken from a replica while the primary is
    // silent (lost, its node gone) would make a member that reports as a replica, and so counts
    // towards a failover's quorum, though the acknowledgements its lost volume gave are nowhere
    // but on that primary. It waits for the primary, or for a new one. Unless this pod is the
    // primary, whose volume was lost (the replicas replicate from it): no other primary will
    // answer, and the operator makes it the primary again only once its data was compared with
    // every member's (a bootstrap's load lost midway is taken up again so).
    let me = format!("{}.", rules.me);
    let mine = |r: &MemberStatus| {
        r.replication
            .as_ref()
            .is_some_and(|rep| rep.source_host.starts_with(&me))
    };
    if primary.is_none() && !members.iter().any(|(_, r)| mine(r)) {
        return None;
    }
    let serves = |i: usize| {
        let r = &members[i].1;
        proven(i) && r.ready && r.clone_port != 0 && !r.gtid_executed.is_empty()
    };
    let replicas: Vec<usize> = (0..members.len())
        .filter(|&i| serves(i) && role_is(i, Role::Replica))
        .filter(|&i| {
            primary.is_none_or(|p| {
                let p = &members[p].1;
                p.has_all_of(p.engine, &members[i].1)
            })
        })
        .collect();
    let most_complete = replicas.iter().copied().find(|&i| {
        let me = &members[i].1;
        replicas
            .iter()
            .all(|&j| me.has_all_of(me.engine, &members[j].1))
    });
    let serves_restored = |i: usize| {
        let r = &members[i].1;
        proven(i) && rules.restored_by_first && r.ready && r.clone_port != 0
    };
    most_complete.or_else(|| primary.filter(|&p| serves(p) || serves_restored(p)))
}

/// What [`choose_donor`] needs besides the members' reports.
#[derive(Debug, Clone, Copy)]
pub struct DonorRules<'a> {
    /// This pod's name.
    pub me: &'a str,
    /// Addresses that could not prove they hold the order key: never donors, though a primary
    /// among them still vouches for the replicas (an older agent's, during an upgrade; a
    /// proven primary first).
    pub unproven: &'a [std::net::IpAddr],
    /// The first member restored the cluster's data, which every other member copies; its
    /// primary is a donor even with no GTID (a backup of a server that never logged a
    /// transaction), where otherwise an empty primary is a new cluster's, with nothing to copy.
    pub restored_by_first: bool,
}

/// One line saying what `seed` did.
pub fn describe(outcome: &SeedOutcome, datadir: &Path) -> String {
    match outcome {
        SeedOutcome::Skipped(evidence) => format!(
            "datadir {} already initialized ({evidence} present); nothing copied",
            datadir.display()
        ),
        SeedOutcome::NoDonor(reason) => {
            format!("nothing copied into {}: {reason}", datadir.display())
        }
        SeedOutcome::Seeded {
            donor,
            gtid,
            bytes,
            files,
        } => format!(
            "copied {files} files ({bytes} bytes) from {donor} into {}; the server continues \
             from GTID {}",
            datadir.display(),
            if gtid.gtid_set.is_empty() {
                "none"
            } else {
                &gtid.gtid_set
            }
        ),
    }
}

#[cfg(test)]
#[path = "seed_tests.rs"]
mod tests;
