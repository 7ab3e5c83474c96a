//! Control-plane processes: started with their output in a log file, stopped with SIGTERM then
//! SIGKILL, and killed by the kernel if the test binary dies without cleaning up.
//!
//! Every child is spawned from one long-lived thread and asks the kernel for SIGKILL when that
//! thread ends (`PR_SET_PDEATHSIG`). Spawning from the thread of a `#[tokio::test]` would kill the
//! shared control plane as soon as that test's runtime shuts down.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a process gets to exit after SIGTERM before it is killed.
const TERMINATE_GRACE: Duration = Duration::from_secs(5);

/// A running control-plane component.
#[derive(Debug)]
pub struct Process {
    component: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `command` as `component`, with stdout and stderr appended to `log`.
    pub fn spawn(component: &'static str, mut command: Command, log: &Path) -> Result<Self> {
        let io_err = |source| Error::Io {
            path: log.to_path_buf(),
            source,
        };
        let out = File::create(log).map_err(io_err)?;
        let err = out.try_clone().map_err(io_err)?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
        // which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = spawn_from_keeper_thread(command)
            .map_err(|source| Error::Spawn { component, source })?;
        Ok(Self {
            component,
            child,
            log: log.to_path_buf(),
        })
    }

    /// Name of the component.
    pub fn component(&self) -> &'static str {
        self.component
    }

    /// Path of the component's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with [`Error::Exited`] when the process is no longer running.
    pub fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::Exited {
                component: self.component,
                status: status.to_string(),
                log: self.log.clone(),
            }),
            Err(e) => Err(Error::Exited {
                component: self.component,
                status: format!("unknown: {e}"),
                log: self.log.clone(),
            }),
        }
    }

    /// The last `lines` lines of the component's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Stops the process: SIGTERM, then SIGKILL after a grace period. Waits for it to exit.
    pub fn terminate(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on the pid of our own unreaped child, which cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + TERMINATE_GRACE;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// The last `lines` lines of the file at `path` (at most the last 64 KiB are read).
pub fn tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_BYTES {
        let _ = file.seek(SeekFrom::Start(len - MAX_BYTES));
    }
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `command` from a thread that lives as long as the test binary, so that
/// `PR_SET_PDEATHSIG` fires only when the whole binary goes away.
fn spawn_from_keeper_thread(command: Command) -> std::io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("bulwark-testenv-spawner".to_owned())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("failed to start the process spawner thread");
        Mutex::new(requests)
    });
    let (reply, response) = mpsc::channel();
    let sent = keeper
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((command, reply));
    if sent.is_err() {
        return Err(std::io::Error::other("process spawner thread is gone"));
    }
    response
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("process spawner thread is gone")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_returns_the_last_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        std::fs::write(&path, "one\ntwo\nthree\nfour\n").expect("write");
        assert_eq!(tail(&path, 2), "three\nfour");
        assert_eq!(tail(&path, 10), "one\ntwo\nthree\nfour");
    }

    #[test]
    fn terminate_stops_a_running_process_and_captures_its_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("sleep.log");
        let mut command = Command::new("sh");
        command.args(["-c", "echo started; exec sleep 600"]);
        let mut process = Process::spawn("sleeper", command, &log).expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(10);
        while process.log_tail(1) != "started" {
            assert!(Instant::now() < deadline, "no output from the child");
            std::thread::sleep(Duration::from_millis(10));
        }
        process.ensure_running().expect("running");
        process.terminate();
        assert!(matches!(
            process.ensure_running(),
            Err(Error::Exited {
                component: "sleeper",
                ..
            })
        ));
        assert_eq!(process.log_tail(5), "started");
    }
}
