//! The operator killed in the middle of what it does: its process is killed (`SIGKILL`, as a
//! crash or an OOM kill ends it) and its container restarted by the kubelet, while a
//! switchover it took on runs, or as its failover decision has just been recorded; the watch
//! and the kill the cases share.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_name, processes_of, StoppedNode};
use bulwark_e2e::{kubectl_ok, wait_ready, writer};

use super::cluster::*;

/// What a line of the cluster's watched status means for the kill.
pub(crate) enum Watched {
    Wait,
    Kill,
    TooLate(String),
}

/// `kubectl get --watch` of `object` (the cluster, its StatefulSet), one line of `jsonpath` per
/// change of it (the first for it as it is), stopped and reaped when dropped, whatever ends the
/// case.
pub(crate) struct StatusWatch {
    child: Child,
    pub(crate) lines: Option<Lines<BufReader<ChildStdout>>>,
}

impl StatusWatch {
    pub(crate) fn start(n: &str, object: &str, jsonpath: &str) -> StatusWatch {
        let mut child = bulwark_e2e::kubectl(&[
            "get",
            "-n",
            n,
            object,
            "--watch",
            "--output-watch-events=false",
            "-o",
            &format!("jsonpath={jsonpath}{{\"\\n\"}}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
        let lines = BufReader::new(child.stdout.take().expect("its output")).lines();
        StatusWatch {
            child,
            lines: Some(lines),
        }
    }
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `lines` until one says to kill, then kills the operator's process (its container's
/// processes, found on the host): within moments of the status write the line shows. The
/// line that said so.
pub(crate) fn kill_operator_when(
    lines: Lines<BufReader<ChildStdout>>,
    uid: &str,
    on: impl Fn(&str) -> Watched,
) -> Result<String, String> {
    let mut said = None;
    for line in lines {
        let line = line.map_err(|e| format!("reading the watch: {e}"))?;
        match on(&line) {
            Watched::Wait => {}
            Watched::Kill => {
                said = Some(line);
                break;
            }
            Watched::TooLate(why) => return Err(format!("too late to kill the operator: {why}")),
        }
    }
    let said = said.ok_or("the watch ended before the moment to kill the operator")?;
    let pids = processes_of(uid, "mysql-operator");
    if pids.is_empty() {
        return Err("no mysql-operator process in the operator's pod".to_owned());
    }
    for pid in pids {
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !killed {
            return Err(format!("kill -KILL {pid} failed"));
        }
    }
    Ok(said)
}

/// The operator container's restart count and whether it runs.
pub(crate) fn operator_container() -> (u64, bool) {
    let count = bulwark_e2e::operator_pod("{.status.containerStatuses[0].restartCount}");
    let started =
        bulwark_e2e::operator_pod("{.status.containerStatuses[0].state.running.startedAt}");
    (count.parse().unwrap_or(0), !started.is_empty())
}

/// Notes when the operator runs again after a kill: `restarts` counted before it, `back` set
/// to the seconds since `began` at the first sample that sees it (the kubelet restarts a
/// killed container at once the first time, then after a back-off of 10 s, 20 s, ...).
pub(crate) fn note_operator_back(restarts: u64, back: &mut Option<f64>, began: Instant) {
    if back.is_none() {
        let (count, running) = operator_container();
        if count > restarts && running {
            *back = Some(began.elapsed().as_secs_f64());
        }
    }
}

#[test]
fn the_operator_killed_mid_switchover_completes_it_after_its_restart() {
    three_nodes();
    let _one_at_a_time = serial();
    let (ns, password, old) = three_member_cluster("e2e-chaos-opkill");
    let n = ns.name();
    let service = format!("{CLUSTER}-primary");
    writer::create_table(n, &old, &password, &service);
    let child = writer::start_in_client_on(n, &password, &service, (240, 5), &node_name(1));
    std::thread::sleep(Duration::from_secs(5));

    // The replica off node 1, so that the switchover keeps the primary off the control
    // plane's node.
    let to = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| *p != old && node_of(n, p) != node_name(1))
        .expect("a replica off node 1");
    let request = format!("{to}@operator-killed");
    let restarts = operator_container().0;
    let mut back = None;
    let uid = bulwark_e2e::operator_pod("{.metadata.uid}");
    let jsonpath = "{.status.lastSwitchover.request}|{.status.lastSwitchover.result}";
    let mut watch = StatusWatch::start(n, &format!("mysqlcluster/{CLUSTER}"), jsonpath);
    let began = Instant::now();
    kubectl_ok(&[
        "annotate",
        "-n",
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        &format!("mysql.bulwark.dev/switchover={request}"),
    ]);
    let lines = watch.lines.take().expect("the watch's lines");
    let killed = kill_operator_when(lines, &uid, |line| match line.split_once('|') {
        Some((r, "")) if r == request => Watched::Kill,
        Some((r, result)) if r == request => Watched::TooLate(format!("it ended {result}")),
        _ => Watched::Wait,
    });
    let killed_at = began.elapsed().as_secs_f64();
    drop(watch);
    if let Err(e) = killed {
        bulwark_e2e::dump(n);
        panic!("{e}");
    }

    // The restarted operator finds the switchover in the status and carries it through:
    // never two writable members, and in the end `to` alone takes writes.
    let mut before: Vec<String> = Vec::new();
    loop {
        let writable = writable_members(n, &password, None);
        let both: Vec<&String> = writable.iter().filter(|p| before.contains(p)).collect();
        if both.len() > 1 {
            bulwark_e2e::dump(n);
            panic!(
                "two members writable in two samples running, at {:.1}s: {both:?}",
                began.elapsed().as_secs_f64()
            );
        }
        before = writable.clone();
        note_operator_back(restarts, &mut back, began);
        let status = cluster_status(n).unwrap_or_default();
        let record = &status["lastSwitchover"];
        if record["request"].as_str() == Some(request.as_str())
            && record["result"].is_string()
            && writable.as_slice() == [status["currentPrimary"].as_str().unwrap_or_default()]
        {
            assert_eq!(
                (record["result"].as_str(), record["to"].as_str()),
                (Some("Completed"), Some(to.as_str())),
                "the switchover interrupted by the operator's death did not complete: {record}"
            );
            break;
        }
        if began.elapsed() > Duration::from_secs(150) {
            bulwark_e2e::dump(n);
            panic!("the switchover to {to} did not end within 150s: {record}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let completed = began.elapsed().as_secs_f64();
    assert!(
        cluster_status(n).expect("the cluster")["lastFailover"].is_null(),
        "a failover followed the operator's death"
    );
    wait_ready(n, CLUSTER, 3, "the cluster Ready after the switchover");
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &to, &password, &service);
    bulwark_e2e::figure!(
        "chaos, operator killed mid-switchover: killed {killed_at:.1}s after the request, \
         running again at {:.1}s, the switchover {old} -> {to} completed at {completed:.1}s; \
         writes paused {:.1}s at most, {} acknowledged, none lost, {} refused",
        back.unwrap_or(f64::NAN),
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}

#[test]
fn the_operator_killed_mid_failover_completes_it_after_its_restart() {
    three_nodes();
    let _one_at_a_time = serial();
    let (ns, password, old) = three_member_cluster("e2e-chaos-opfail");
    let n = ns.name();
    let service = format!("{CLUSTER}-primary");
    writer::create_table(n, &old, &password, &service);
    let child = writer::start_in_client_on(n, &password, &service, (240, 5), &node_name(1));
    std::thread::sleep(Duration::from_secs(5));

    // The primary's node stops; the operator is killed the moment its failover decision is in
    // the status, before the orders that carry it out have gone (or been acted on). The watch
    // starts first and stops first (declared after the node's guard), so that a failing case
    // never kills the operator during its teardown.
    let restarts = operator_container().0;
    let mut back = None;
    let uid = bulwark_e2e::operator_pod("{.metadata.uid}");
    let stopped: StoppedNode;
    let mut watch = StatusWatch::start(
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        "{.status.lastFailover.to}",
    );
    let lines = watch.lines.take().expect("the watch's lines");
    let began = Instant::now();
    stopped = StoppedNode::stop(&node_of(n, &old));
    let mut killer = Some(std::thread::spawn({
        let (n, password) = (n.to_owned(), password.clone());
        move || {
            let killed = kill_operator_when(lines, &uid, |to| {
                if to.is_empty() {
                    Watched::Wait
                } else {
                    Watched::Kill
                }
            });
            let at = Instant::now();
            // Whether the chosen replica already took writes: it must not have, or the kill
            // came after the failover rather than in it.
            let to_read_only = killed
                .as_ref()
                .ok()
                .and_then(|to| read_only(&n, to, &password));
            (killed, at, to_read_only)
        }
    }));
    let mut decided: Option<(String, f64)> = None;
    let new = loop {
        let writable = writable_members(n, &password, Some(&old));
        assert!(
            writable.len() <= 1,
            "two writable members at {:.1}s: {writable:?}",
            began.elapsed().as_secs_f64()
        );
        if killer.as_ref().is_some_and(|k| k.is_finished()) {
            let (killed, at, to_read_only) = killer
                .take()
                .expect("the killing thread")
                .join()
                .expect("the killing thread");
            let to = killed.unwrap_or_else(|e| {
                bulwark_e2e::dump(n);
                panic!("{e}")
            });
            if to_read_only == Some(false) {
                bulwark_e2e::dump(n);
                panic!("{to} already took writes when the operator was killed: too late");
            }
            decided = Some((to, at.duration_since(began).as_secs_f64()));
        }
        if let Some((to, _)) = &decided {
            note_operator_back(restarts, &mut back, began);
            if writable.as_slice() == [to.clone()] && current_primary(n).as_deref() == Some(to) {
                break to.clone();
            }
        }
        if began.elapsed() > Duration::from_secs(240) {
            bulwark_e2e::dump(n);
            panic!("no member took writes within 240s after {old}'s node stopped");
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    drop(watch);
    let (_, killed_at) = decided.expect("the kill");
    let writable_again = began.elapsed().as_secs_f64();
    let outcome = writer::stop(n, child);
    assert!(outcome.resumed(), "writes never resumed: {}", outcome.lines);
    outcome.assert_none_lost(n, &new, &password, &service);
    bulwark_e2e::figure!(
        "chaos, operator killed mid-failover: killed {killed_at:.1}s after {old}'s node stopped, \
         as its failover to {new} was decided, running again at {:.1}s; {new} alone writable \
         at {writable_again:.1}s; writes paused {:.1}s at most, {} acknowledged, none lost, {} \
         refused",
        back.unwrap_or(f64::NAN),
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
    stopped.start();
}
