//! A primary whose agent hangs while the primary is cut off from everyone: nothing of the agent
//! fences it, so the server's own watchdog must (read-only within the lease and a second of
//! its last renewal), before any replica is promoted. Every acknowledged row is on the new
//! primary, and once the agent runs again and the cut heals, the old primary rejoins as a
//! replica.

use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_name, processes_of, Isolated};
use bulwark_e2e::{wait_ready, wait_takes_writes, writer};

use super::cluster::*;

/// The lease of `failoverAfterSeconds: 10` (`bulwark_contract::lease::lease_for`).
const LEASE_SECONDS: f64 = 6.0;

/// Processes stopped (`SIGSTOP`) until dropped: a hung agent, which neither answers nor acts.
struct Frozen(Vec<i32>);

impl Frozen {
    fn stop(pids: Vec<i32>) -> Frozen {
        let frozen = Frozen(pids);
        frozen.signal("-STOP");
        frozen
    }

    fn signal(&self, signal: &str) {
        for pid in &self.0 {
            let sent = std::process::Command::new("kill")
                .args([signal, &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(sent, "kill {signal} {pid}");
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.signal("-CONT");
    }
}

#[test]
fn a_cut_off_primary_whose_agent_hangs_is_fenced_by_its_own_server() {
    let case = Case::start("e2e-chaos-hung-agent");
    let (n, password, old, service) = case.parts();
    let child = case.writer_on(&node_name(1));
    let uid = bulwark_e2e::pod_uid(n, old);
    let agents = processes_of(&uid, "bulwark-agent");
    assert!(!agents.is_empty(), "no agent process of {old} seen");
    let old_ip = pod_ip(n, old);

    let began = Instant::now();
    let frozen = Frozen::stop(agents);
    let cut = Isolated::pod(&old_ip);
    // Sampled until a new primary takes writes: never two writable members, and the old one
    // read-only before anyone else is writable.
    let mut samples = WritableSamples::default();
    let mut fenced_at = None;
    let mut promoted_at = None;
    let new = loop {
        let writable = samples.take(n, password, began);
        let at = began.elapsed().as_secs_f64();
        if fenced_at.is_none() && read_only(n, old, password) == Some(true) {
            fenced_at = Some(at);
        }
        if let Some(p) = current_primary(n).filter(|p| p != old) {
            promoted_at.get_or_insert((p.clone(), at));
            if writable.as_slice() == [p.clone()] {
                break p;
            }
        }
        assert!(
            !writable.iter().any(|p| p != old) || fenced_at.is_some(),
            "{writable:?} writable at {at:.1}s while {old} was not seen read-only"
        );
        if began.elapsed() > Duration::from_secs(120) {
            bulwark_e2e::dump(n);
            panic!("no member took writes within 120s after {old} was cut off");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let fenced = fenced_at.expect("fenced before the promotion");
    let chosen = promoted_at.map_or(f64::NAN, |(_, at)| at);
    wait_takes_writes(n, &new, password, service);
    let writes_back = began.elapsed().as_secs_f64();
    // The lease ran out at most LEASE_SECONDS after the cut (its last renewal came before), the
    // event runs every second, and a sample of three members takes about a second.
    assert!(
        fenced < LEASE_SECONDS + 3.0,
        "{old} seen read-only only {fenced:.1}s after its agent hung and it was cut off"
    );
    // The old server stays fenced with its agent still hung (the event goes on ending client
    // sessions and keeping read_only).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(read_only(n, old, password), Some(true));

    // The agent runs again and the cut heals: the old primary rejoins as a replica.
    drop(frozen);
    drop(cut);
    wait_ready(n, CLUSTER, 3, "the cluster Ready with the old primary back");
    assert_eq!(current_primary(n).as_deref(), Some(new.as_str()));
    let writable = writable_members(n, password, None);
    assert_eq!(
        writable,
        std::slice::from_ref(&new),
        "writable after the heal"
    );
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &new, password, service);
    wait_replicas_hold_primary_rows(n, password, &new);
    bulwark_e2e::figure!(
        "chaos, primary's agent hung and the primary cut off: {old}'s own server seen \
         read-only at {fenced:.1}s ({LEASE_SECONDS}s lease), {new} chosen at {chosen:.1}s, \
         writes through {service} land on it at {writes_back:.1}s; writes paused {:.1}s at \
         most, {} acknowledged, none lost, {} refused",
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}
