//! A scratch server: `mariadbd` (or `mysqld`) started on a datadir with no network, no grant
//! checks and no binary log, its socket, logs and temporary files in a directory of its own,
//! stopped cleanly afterwards and killed with the process that started it. Point-in-time
//! replays into a restored datadir and restore drills run their statements against it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::source::{self, Connection};

/// How long a scratch server may take to start (crash recovery of a large redo log).
const START_TIMEOUT: Duration = Duration::from_secs(600);
/// How long it may take to shut down.
const STOP_TIMEOUT: Duration = Duration::from_secs(600);

/// A running scratch server.
pub struct ScratchServer {
    child: tokio::process::Child,
    admin: mysql_async::Conn,
    connection: Connection,
    datadir: PathBuf,
    error_log: PathBuf,
    server: PathBuf,
    /// Socket, pid file, error log, temporary files; removed on drop.
    _run: tempfile::TempDir,
}

/// Longest socket path a Unix socket address holds.
const SOCKET_PATH_MAX: usize = 107;
/// What a run directory adds to its parent's path: `/mysql-backup-scratch-XXXXXX/mysqld.sock`.
const RUN_SOCKET_SUFFIX: usize = "/mysql-backup-scratch-XXXXXX/mysqld.sock".len();

/// The server binary: `mariadbd` (or `mysqld`) on PATH or in the usual sbin directories.
pub fn find_server() -> Result<PathBuf> {
    find_in_sbin(&["mariadbd", "mysqld"], "mariadbd or mysqld")
}

/// The server binary for a backup of `engine`: a MariaDB server for MariaDB, a MySQL one for
/// MySQL (never the other engine's, which could not start on the data).
pub async fn find_server_for(engine: bulwark_contract::Engine) -> Result<PathBuf> {
    use bulwark_contract::Engine;
    match engine {
        Engine::MariaDb => find_server(),
        Engine::MySql => {
            let server = find_in_sbin(&["mysqld"], "mysqld (a MySQL server)")?;
            let version = source::tool_version(&server).await;
            if version.contains("MariaDB") {
                return Err(Error::ToolNotFound {
                    wanted: format!(
                        "a MySQL server to start a MySQL backup on ({} is {version})",
                        server.display()
                    ),
                });
            }
            Ok(server)
        }
    }
}

/// Refuses, before any work, a run directory parent whose socket path would not fit a Unix
/// socket address (the server would stop at start, after a whole restore).
pub fn check_run_parent(parent: Option<&Path>) -> Result<()> {
    let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let len = parent.as_os_str().len() + RUN_SOCKET_SUFFIX;
    if len > SOCKET_PATH_MAX {
        return Err(Error::InvalidArgument(format!(
            "a scratch server's socket under {} would be {len} bytes long, more than a Unix \
             socket holds ({SOCKET_PATH_MAX}); set TMPDIR to a shorter directory",
            parent.display()
        )));
    }
    Ok(())
}

fn find_in_sbin(names: &[&str], wanted: &str) -> Result<PathBuf> {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/libexec", "/usr/bin"].map(PathBuf::from));
    let dirs: Vec<PathBuf> = dirs.collect();
    for name in names {
        if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            return Ok(p);
        }
    }
    Err(Error::ToolNotFound {
        wanted: format!("{wanted} (a scratch server runs replays into a directory and drills)"),
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn run_dir(action: &'static str, parent: Option<&Path>) -> Result<tempfile::TempDir> {
    let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
    tempfile::Builder::new()
        .prefix("mysql-backup-scratch-")
        .tempdir_in(&parent)
        .map_err(|source| Error::LocalIo {
            action,
            path: parent.display().to_string(),
            source,
        })
}

/// Creates an empty datadir for a scratch server (`mariadb-install-db`): root on the local
/// socket only, no test database.
pub async fn initialize(datadir: &Path) -> Result<()> {
    let install = find_in_sbin(
        &["mariadb-install-db", "mysql_install_db"],
        "mariadb-install-db",
    )?;
    let mut args = vec![
        "--no-defaults".to_string(),
        format!("--datadir={}", datadir.display()),
        "--auth-root-authentication-method=normal".into(),
        "--skip-test-db".into(),
        "--skip-name-resolve".into(),
    ];
    if is_root() {
        args.push("--user=root".into());
    }
    // The script starts a bootstrap server of its own: it runs in a process group of its own,
    // which is killed whole if this is dropped before it ends (a stopped drill), so nothing
    // goes on writing into a directory about to be removed.
    let mut command = tokio::process::Command::new(&install);
    command
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    source::dies_with_parent(&mut command);
    let child = command.spawn().map_err(|source| Error::StartTool {
        tool: install.display().to_string(),
        source,
    })?;
    let group = GroupKill(child.id());
    let out = child
        .wait_with_output()
        .await
        .map_err(|source| Error::LocalIo {
            action: "wait for",
            path: install.display().to_string(),
            source,
        })?;
    std::mem::forget(group);
    if out.status.success() {
        return Ok(());
    }
    Err(Error::ToolFailed {
        tool: install.display().to_string(),
        status: out.status.to_string(),
        stderr_tail: String::from_utf8_lossy(&out.stderr)
            .trim()
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect(),
    })
}

/// Kills a process group when dropped.
struct GroupKill(Option<u32>);

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: killpg only sends a signal to the group the child leads.
            unsafe { libc::killpg(pid, libc::SIGKILL) };
        }
    }
}

impl ScratchServer {
    /// Starts `server` on `datadir`, with its run directory under `run_parent` (the system's
    /// temporary directory when `None`), and waits until it answers. With `grant_tables` it
    /// checks privileges (a datadir [`initialize`] made, whose root logs in on the socket
    /// without a password: a dump's `DROP EVENT` needs them); without, anyone is root (a
    /// restored datadir, whose accounts are the source's). Events never run either way.
    pub async fn start(
        server: &Path,
        datadir: &Path,
        run_parent: Option<&Path>,
        grant_tables: bool,
    ) -> Result<ScratchServer> {
        check_run_parent(run_parent)?;
        let run = run_dir("create a directory in", run_parent)?;
        let socket = run.path().join("mysqld.sock");
        let error_log = run.path().join("error.log");
        // A physical backup's own settings (page size, undo tablespaces, …) that the server
        // must start with; nothing else of any configuration.
        let settings = datadir.join("backup-my.cnf");
        let defaults = if settings.is_file() {
            format!("--defaults-file={}", settings.display())
        } else {
            "--no-defaults".into()
        };
        let mut args: Vec<String> = vec![
            defaults,
            format!("--datadir={}", datadir.display()),
            format!("--socket={}", socket.display()),
            format!("--pid-file={}", run.path().join("mysqld.pid").display()),
            format!("--log-error={}", error_log.display()),
            format!("--tmpdir={}", run.path().display()),
            "--skip-networking".into(),
            "--event-scheduler=OFF".into(),
            "--skip-log-bin".into(),
            "--skip-slave-start".into(),
            "--innodb-buffer-pool-size=256M".into(),
        ];
        if !grant_tables {
            args.push("--skip-grant-tables".into());
        }
        if is_root() {
            args.push("--user=root".into());
        }
        let mut command = tokio::process::Command::new(server);
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // A killed restore or drill must not leave a server running on a directory the next
        // one removes.
        source::dies_with_parent(&mut command);
        let mut child = command.spawn().map_err(|source| Error::StartTool {
            tool: server.display().to_string(),
            source,
        })?;
        let connection = Connection {
            socket: Some(socket),
            user: Some("root".into()),
            ..Default::default()
        };
        let failed = |reason: String| Error::RestoreTarget {
            target: datadir.display().to_string(),
            reason,
        };
        let started = Instant::now();
        let admin = loop {
            if let Ok(Ok(c)) = tokio::time::timeout(
                Duration::from_secs(5),
                mysql_async::Conn::new(connection.opts()),
            )
            .await
            {
                break c;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(failed(format!(
                    "the scratch server exited ({status}): {}",
                    log_tail(&error_log)
                )));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(failed(format!(
                    "the scratch server did not start in {START_TIMEOUT:?}: {}",
                    log_tail(&error_log)
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        tracing::info!(datadir = %datadir.display(), "scratch server started");
        Ok(ScratchServer {
            child,
            admin,
            connection,
            datadir: datadir.to_path_buf(),
            error_log,
            server: server.to_path_buf(),
            _run: run,
        })
    }

    /// How to reach it (root on its socket).
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Shuts it down cleanly, so the datadir is left with its redo log applied.
    pub async fn stop(mut self) -> Result<()> {
        use mysql_async::prelude::Queryable;
        let failed = |reason: String| Error::RestoreTarget {
            target: self.datadir.display().to_string(),
            reason,
        };
        self.admin.query_drop("SHUTDOWN").await.ok();
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(failed(format!(
                "the scratch server stopped with {status}: {}",
                log_tail(&self.error_log)
            ))),
            Ok(Err(source)) => Err(Error::LocalIo {
                action: "wait for",
                path: self.server.display().to_string(),
                source,
            }),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(failed(format!(
                    "the scratch server did not stop in {STOP_TIMEOUT:?}"
                )))
            }
        }
    }
}

/// The last lines of the scratch server's error log, on one line.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}
