//! The operator killed in the middle of what it does: its process is killed (`SIGKILL`, as a
//! crash or an OOM kill ends it) and its pod replaced by a new one, while a
//! switchover it took on runs, or as its failover decision has just been recorded; the watch
//! and the kill the cases share.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bulwark_e2e::node::{node_name, processes_in, processes_of, StoppedNode};
use bulwark_e2e::{kubectl_ok, wait_ready, writer};

use super::cluster::*;

/// What a line of the cluster's watched status means for the kill.
pub(crate) enum Watched {
    Wait,
    Kill,
    TooLate(String),
}

/// `kubectl get --watch` of `object` (the cluster, its StatefulSet, a backup), one line of
/// `jsonpath` per change of it (the first for it as it is), for at most 3 minutes; stopped and
/// reaped when dropped, whatever ends the case, and marked ended first, so that a kill not yet
/// made is not made after the case.
pub(crate) struct StatusWatch {
    child: Child,
    lines: Option<Lines<BufReader<ChildStdout>>>,
    ended: Arc<AtomicBool>,
}

/// A watch's lines, and whether its case has ended.
pub(crate) struct WatchLines {
    lines: Lines<BufReader<ChildStdout>>,
    ended: Arc<AtomicBool>,
}

impl StatusWatch {
    pub(crate) fn start(n: &str, object: &str, jsonpath: &str) -> StatusWatch {
        let mut child = bulwark_e2e::kubectl(&[
            "get",
            "-n",
            n,
            object,
            "--watch",
            "--request-timeout=180s",
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
            ended: Arc::new(AtomicBool::new(false)),
        }
    }

    pub(crate) fn lines(&mut self) -> WatchLines {
        WatchLines {
            lines: self.lines.take().expect("the watch's lines, taken once"),
            ended: self.ended.clone(),
        }
    }
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::SeqCst);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The operator's pod, as it was before a kill.
#[derive(Clone)]
pub(crate) struct OperatorPod {
    uid: String,
    name: String,
}

impl OperatorPod {
    pub(crate) fn current() -> OperatorPod {
        OperatorPod {
            uid: bulwark_e2e::operator_pod("{.metadata.uid}"),
            name: bulwark_e2e::operator_pod("{.metadata.name}"),
        }
    }

    /// Notes when another operator pod runs, `back` set to the seconds since `began` at the
    /// first sample that sees it (none may show for a moment after the kill: not yet).
    pub(crate) fn note_replaced(&self, back: &mut Option<f64>, began: Instant) {
        if back.is_some() {
            return;
        }
        let pods = bulwark_e2e::operator_pods(
            "{range .items[*]}{.metadata.uid}|{.status.containerStatuses[0].state.running.startedAt}{\"\\n\"}{end}",
        )
        .unwrap_or_default();
        let replaced = pods.lines().any(|pod| {
            pod.split_once('|')
                .is_some_and(|(uid, started)| uid != self.uid && !started.is_empty())
        });
        if replaced {
            *back = Some(began.elapsed().as_secs_f64());
        }
    }
}

/// Reads the watch's lines until one says to kill, then kills the operator's process (its
/// container's processes, found on the host: within moments of the status write the line
/// shows) and deletes its pod at once, so that a new one starts without the kubelet's restart
/// back-off (10 s, 20 s, 40 s, ... after each further kill of one container), which would
/// make the cases' timing depend on their order. Until the old pod is torn down (no process of
/// it left, its sandbox's included), an operator the kubelet restarted in it meanwhile is
/// killed again: never two operators at once. The line that said so.
pub(crate) fn kill_operator_when(
    watch: WatchLines,
    pod: &OperatorPod,
    on: impl Fn(&str) -> Watched,
) -> Result<String, String> {
    let mut said = None;
    for line in watch.lines {
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
    let said = said.ok_or("the watch ended (3 minutes, or the case) before the moment to kill")?;
    if watch.ended.load(Ordering::SeqCst) {
        return Err("the case ended before the kill".to_owned());
    }
    let kill_all = || {
        for pid in processes_of(&pod.uid, "mysql-operator") {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    };
    if processes_of(&pod.uid, "mysql-operator").is_empty() {
        return Err("no mysql-operator process in the operator's pod".to_owned());
    }
    kill_all();
    bulwark_e2e::try_kubectl(&[
        "delete",
        "pod",
        "-n",
        "bulwark-system",
        &pod.name,
        "--grace-period=0",
        "--force",
        "--wait=false",
    ])
    .map_err(|e| format!("deleting the killed operator's pod: {e}"))?;
    let since = Instant::now();
    while !processes_in(&pod.uid, None).is_empty() {
        if since.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "the killed operator's pod {} still runs after 60s",
                pod.name
            ));
        }
        kill_all();
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(said)
}

/// [`kill_operator_when`] on `watch`, which ends with it; a failure to kill (too late, the
/// watch ended, no process) fails the case.
pub(crate) fn kill_operator_or_fail(
    n: &str,
    mut watch: StatusWatch,
    pod: &OperatorPod,
    on: impl Fn(&str) -> Watched,
) {
    let killed = kill_operator_when(watch.lines(), pod, on);
    drop(watch);
    if let Err(e) = killed {
        bulwark_e2e::dump(n);
        panic!("{e}");
    }
}

#[test]
fn the_operator_killed_mid_switchover_completes_it_after_its_restart() {
    let case = Case::start("e2e-chaos-opkill");
    let (n, password, old, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    // The replica off node 1, so that the switchover keeps the primary off the control
    // plane's node.
    let to = (0..3)
        .map(|i| format!("{CLUSTER}-{i}"))
        .find(|p| *p != old && node_of(n, p) != node_name(1))
        .expect("a replica off node 1");
    let request = format!("{to}@operator-killed");
    let mut back = None;
    let operator = OperatorPod::current();
    let jsonpath = "{.status.lastSwitchover.request}|{.status.lastSwitchover.result}";
    let watch = StatusWatch::start(n, &format!("mysqlcluster/{CLUSTER}"), jsonpath);
    let began = Instant::now();
    kubectl_ok(&[
        "annotate",
        "-n",
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        &format!("mysql.bulwark.dev/switchover={request}"),
    ]);
    kill_operator_or_fail(n, watch, &operator, |line| match line.split_once('|') {
        Some((r, "")) if r == request => Watched::Kill,
        Some((r, result)) if r == request => Watched::TooLate(format!("it ended {result}")),
        _ => Watched::Wait,
    });
    let killed_at = began.elapsed().as_secs_f64();

    // The restarted operator finds the switchover in the status and carries it through:
    // never two writable members, and in the end `to` alone takes writes.
    let mut samples = WritableSamples::default();
    loop {
        let writable = samples.take(n, password, began);
        operator.note_replaced(&mut back, began);
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
    outcome.assert_none_lost(n, &to, password, service);
    bulwark_e2e::figure!(
        "chaos, operator killed mid-switchover: killed {killed_at:.1}s after the request, \
         a new one running at {:.1}s, the switchover {old} -> {to} completed at {completed:.1}s; \
         writes paused {:.1}s at most, {} acknowledged, none lost, {} refused",
        back.unwrap_or(f64::NAN),
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
}

#[test]
fn the_operator_killed_mid_failover_completes_it_after_its_restart() {
    let case = Case::start("e2e-chaos-opfail");
    let (n, password, old, service) = case.parts();
    let child = case.writer_on(&node_name(1));

    // The primary's node stops; the operator is killed the moment its failover decision is in
    // the status, before the orders that carry it out have gone (or been acted on). The watch
    // starts first and stops first (declared after the node's guard), so that a failing case
    // never kills the operator during its teardown.
    let mut back = None;
    let operator = OperatorPod::current();
    let stopped: StoppedNode;
    let mut watch = StatusWatch::start(
        n,
        &format!("mysqlcluster/{CLUSTER}"),
        "{.status.lastFailover.to}",
    );
    let lines = watch.lines();
    let began = Instant::now();
    stopped = StoppedNode::stop(&node_of(n, old));
    let mut killer = Some(std::thread::spawn({
        let (n, password, operator) = (n.to_owned(), password.to_owned(), operator.clone());
        move || {
            let killed = kill_operator_when(lines, &operator, |to| {
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
        let writable = writable_members(n, password, Some(old));
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
            operator.note_replaced(&mut back, began);
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
    outcome.assert_none_lost(n, &new, password, service);
    bulwark_e2e::figure!(
        "chaos, operator killed mid-failover: killed {killed_at:.1}s after {old}'s node stopped, \
         as its failover to {new} was decided, a new one running at {:.1}s; {new} alone writable \
         at {writable_again:.1}s; writes paused {:.1}s at most, {} acknowledged, none lost, {} \
         refused",
        back.unwrap_or(f64::NAN),
        outcome.longest_gap,
        outcome.acked.len(),
        outcome.refused
    );
    stopped.start();
}
