//! A steady writer for failure tests: run in a server pod (so that it outlives another pod) or
//! in a client pod of its own (so that it outlives them all), one INSERT every 200 ms through a
//! Service, each acknowledged id printed with its time; and what its output says about
//! acknowledged rows and refused writes.

use std::process::{Child, Stdio};

/// Creates `ledger.acks`, the writer's table, through `host` from `pod`: retried while the
/// Service does not route yet (kube-proxy follows a new endpoint a moment after the pod's
/// readiness).
pub fn create_table(namespace: &str, pod: &str, password: &str, host: &str) {
    crate::wait_for(
        namespace,
        &format!("the writer's table created through {host}"),
        std::time::Duration::from_secs(60),
        || {
            crate::sql(
                namespace,
                pod,
                password,
                host,
                "CREATE DATABASE IF NOT EXISTS ledger; \
                 CREATE TABLE IF NOT EXISTS ledger.acks (id INT PRIMARY KEY)",
            )
        },
    );
}

/// Starts the writer in `pod` for `seconds`: ids 1, 2, ... into `ledger.acks` through `host`.
pub fn start(namespace: &str, pod: &str, password: &str, host: &str, seconds: u32) -> Child {
    start_in(namespace, pod, "mysqld", password, host, seconds, None)
}

/// The client pod's name.
const CLIENT_POD: &str = "writer";

/// Starts the writer as [`start`] does, in a client pod of its own (the server image, running
/// nothing but the writer), so that no server pod's restart stops it.
pub fn start_in_client(namespace: &str, password: &str, host: &str, seconds: u32) -> Child {
    start_client(namespace, password, host, seconds, None, None)
}

/// [`start_in_client`] with each insert given up after `timeout` seconds (counted refused): a
/// primary cut off the network never answers, and its client would wait for ever.
pub fn start_in_client_bounded(
    namespace: &str,
    password: &str,
    host: &str,
    seconds: u32,
    timeout: u32,
) -> Child {
    start_client(namespace, password, host, seconds, Some(timeout), None)
}

/// [`start_in_client_bounded`] with the client pod on `node`: a chaos test keeps the writer
/// off the nodes it stops or cuts.
pub fn start_in_client_on(
    namespace: &str,
    password: &str,
    host: &str,
    (seconds, timeout): (u32, u32),
    node: &str,
) -> Child {
    start_client(
        namespace,
        password,
        host,
        seconds,
        Some(timeout),
        Some(node),
    )
}

fn start_client(
    namespace: &str,
    password: &str,
    host: &str,
    seconds: u32,
    timeout: Option<u32>,
    node: Option<&str>,
) -> Child {
    let placement = node.map_or(String::new(), |n| format!("  nodeName: {n}\n"));
    crate::apply(
        namespace,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {CLIENT_POD}}}\nspec:\n{placement}  \
             terminationGracePeriodSeconds: 5\n  \
             securityContext: {{runAsNonRoot: true, runAsUser: 999, seccompProfile: {{type: RuntimeDefault}}}}\n  \
             containers:\n  - name: client\n    image: {image}\n    imagePullPolicy: Never\n    \
             command: [sh, -c, 'trap \"exit 0\" TERM; sleep infinity & wait']\n    \
             securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}\n",
            image = crate::node::MARIADB_IMAGE,
        ),
    );
    crate::kubectl_ok(&[
        "wait",
        "-n",
        namespace,
        "--for=condition=Ready",
        "--timeout=120s",
        &format!("pod/{CLIENT_POD}"),
    ]);
    start_in(
        namespace, CLIENT_POD, "client", password, host, seconds, timeout,
    )
}

fn start_in(
    namespace: &str,
    pod: &str,
    container: &str,
    password: &str,
    host: &str,
    seconds: u32,
    timeout: Option<u32>,
) -> Child {
    let bound = timeout.map_or(String::new(), |t| format!("timeout {t} "));
    let script = format!(
        "end=$(( $(date +%s) + {seconds} )); i=0; rm -f {STOP_FILE} {LOG_FILE}; \
         while [ $(date +%s) -lt $end ] && [ ! -e {STOP_FILE} ]; do i=$((i+1)); \
         if MYSQL_PWD='{password}' {bound}mariadb --connect-timeout=2 -h {host} -u root \
            -e \"INSERT INTO ledger.acks VALUES ($i)\" 2>/dev/null; \
         then line=\"ack $i $(date +%s.%N)\"; else line=\"refused $i $(date +%s.%N)\"; fi; \
         echo \"$line\"; echo \"$line\" >> {LOG_FILE}; sleep 0.2; done"
    );
    crate::kubectl(&[
        "exec", "-n", namespace, pod, "-c", container, "--", "sh", "-c", &script,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .expect("writer")
}

/// Now, in seconds since the Unix epoch: the writer's clock (the test node's pods share the
/// host's).
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What a writer saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Acknowledged ids.
    pub acked: Vec<u64>,
    /// Refused attempts.
    pub refused: usize,
    /// Seconds from the last acknowledgement before the first refusal to the first after it.
    pub refused_for: Option<f64>,
    /// The longest time between two consecutive acknowledgements, in seconds (the writer
    /// tries every 200 ms): how long writes paused, whether refused or held.
    pub longest_gap: f64,
    /// The output, for messages.
    pub lines: String,
}

/// The file whose presence ends a writer's loop: killing `kubectl exec` does not end the shell
/// in the pod, which would go on writing after the test stopped it.
const STOP_FILE: &str = "/tmp/bulwark-writer-stop";

/// A copy of the writer's lines inside its pod, read while it runs.
const LOG_FILE: &str = "/tmp/bulwark-writer.log";

/// Stops the writer started by [`start_in_client`] in `namespace` and reads its output, once
/// the loop has ended: after this no further row is written, and every acknowledgement the
/// shell saw is counted. A writer whose last attempt was refused is given up to a minute to
/// be acknowledged again first: the test's own probe of a healed primary goes through its
/// own node's kube-proxy, and the writer's node may route to the primary a moment later.
pub fn stop(namespace: &str, child: Child) -> Outcome {
    let last_line = || {
        crate::try_kubectl(&[
            "exec", "-n", namespace, CLIENT_POD, "-c", "client", "--", "tail", "-n", "1", LOG_FILE,
        ])
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        match last_line() {
            Ok(line) if line.starts_with("ack ") => break,
            _ => std::thread::sleep(std::time::Duration::from_millis(300)),
        }
    }
    crate::kubectl_ok(&[
        "exec", "-n", namespace, CLIENT_POD, "-c", "client", "--", "touch", STOP_FILE,
    ]);
    finish(child)
}

/// Waits for the writer to end and reads its output.
pub fn finish(child: Child) -> Outcome {
    let out = child.wait_with_output().expect("writer output");
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut o = Outcome::default();
    let mut last_ack_before: Option<f64> = None;
    let mut first_ack_after: Option<f64> = None;
    let mut last_ack: Option<f64> = None;
    for line in lines.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [kind, id, at] = f.as_slice() else {
            continue;
        };
        let at: f64 = at.parse().unwrap_or_default();
        match *kind {
            "ack" => {
                o.acked.push(id.parse().unwrap_or_default());
                if let Some(prev) = last_ack {
                    o.longest_gap = o.longest_gap.max(at - prev);
                }
                last_ack = Some(at);
                if o.refused == 0 {
                    last_ack_before = Some(at);
                } else if first_ack_after.is_none() {
                    first_ack_after = Some(at);
                }
            }
            _ => o.refused += 1,
        }
    }
    if let (Some(before), Some(after)) = (last_ack_before, first_ack_after) {
        o.refused_for = Some(after - before);
    }
    o.lines = lines;
    o
}

impl Outcome {
    /// Acknowledged ids missing from `stored` (one id per line).
    pub fn lost(&self, stored: &str) -> Vec<u64> {
        let stored: std::collections::BTreeSet<u64> = stored
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        self.acked
            .iter()
            .filter(|id| !stored.contains(id))
            .copied()
            .collect()
    }

    /// Reads the rows through `host` from `pod` and fails (with the namespace dumped) if an
    /// acknowledged one is missing; returns the ids stored, one per line.
    pub fn assert_none_lost(
        &self,
        namespace: &str,
        pod: &str,
        password: &str,
        host: &str,
    ) -> String {
        let stored = crate::sql(namespace, pod, password, host, "SELECT id FROM ledger.acks")
            .unwrap_or_else(|e| {
                crate::dump(namespace);
                panic!("{e}")
            });
        let lost = self.lost(&stored);
        if !lost.is_empty() {
            crate::dump(namespace);
            panic!("acknowledged rows lost: {lost:?}");
        }
        crate::figure!("{} acknowledged rows, none lost", self.acked.len());
        stored
    }

    /// Between `from` and `to` (seconds since the Unix epoch, by the host's clock, which the
    /// test node's pods share): the longest time without an acknowledgement, counting from
    /// `from` and up to `to`, and the attempts refused.
    pub fn within(&self, from: f64, to: f64) -> (f64, usize) {
        let mut last = from;
        let (mut longest, mut refused) = (0f64, 0);
        for line in self.lines.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [kind, _, at] = f.as_slice() else {
                continue;
            };
            let Ok(at) = at.parse::<f64>() else { continue };
            if at < from || at > to {
                continue;
            }
            match *kind {
                "ack" => {
                    longest = longest.max(at - last);
                    last = at;
                }
                _ => refused += 1,
            }
        }
        (longest.max(to - last), refused)
    }

    /// The longest pause of writes from `from` to the last acknowledgement (the writer's end
    /// is no pause).
    pub fn paused_after(&self, from: f64) -> f64 {
        let last = self
            .lines
            .lines()
            .filter_map(
                |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                    ["ack", _, at] => at.parse::<f64>().ok(),
                    _ => None,
                },
            )
            .fold(from, f64::max);
        self.within(from, last).0
    }

    /// When the first acknowledgement at or after `from` came (seconds, as [`now`] counts).
    pub fn first_ack_after(&self, from: f64) -> Option<f64> {
        self.lines.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ["ack", _, at] = f.as_slice() else {
                return None;
            };
            at.parse::<f64>().ok().filter(|at| *at >= from)
        })
    }

    /// Writes resumed after the refusals (or none were refused).
    pub fn resumed(&self) -> bool {
        self.refused == 0 || self.refused_for.is_some()
    }
}
