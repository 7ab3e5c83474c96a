//! Throwaway MariaDB servers: a fresh datadir from `mariadb-install-db` (or an existing one,
//! e.g. a restored and prepared backup), `mariadbd` on a random loopback port and a unix
//! socket in a temporary directory, and the `mariadb` client to run SQL.
//!
//! Every server is started with `--no-defaults`, so nothing from `/etc/mysql` leaks in, and is
//! shut down and its temporary directory removed on drop. Set `BULWARK_TESTKIT_KEEP=1` to keep
//! the directories (the path is printed) for a post-mortem.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::util::{find_tool, free_port, is_root, keep_temp, poll_until, run_checked, tail};

/// How long a server may take to accept connections (crash recovery of a large datadir
/// included).
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a clean shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts at binding a random port that another process took in the meantime.
const PORT_ATTEMPTS: usize = 4;

/// Server options common to every start. The binary log is on (row format) because physical
/// and logical backups record their binlog position; the event scheduler stays off so that
/// events are only definitions and never change data between a snapshot and a restore.
const SERVER_ARGS: &[&str] = &[
    "--bind-address=127.0.0.1",
    "--log-bin=binlog",
    "--server-id=1",
    "--binlog-format=ROW",
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=64M",
    "--innodb-flush-log-at-trx-commit=2",
    "--event-scheduler=OFF",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_unicode_ci",
    "--max-connections=100",
    "--skip-name-resolve",
];

/// A running `mariadbd` that is stopped on drop. `root@localhost` has no password.
#[derive(Debug)]
pub struct MariaDb {
    /// Socket, pid file, error log, tmpdir and (for [`MariaDb::start`]) the datadir.
    run_dir: Option<TempDir>,
    datadir: PathBuf,
    socket: PathBuf,
    error_log: PathBuf,
    port: u16,
    extra_args: Vec<String>,
    child: Option<Child>,
    client: PathBuf,
}

impl MariaDb {
    /// Starts a server on a freshly initialised datadir inside a temporary directory.
    pub fn start() -> Result<MariaDb> {
        Self::start_with_args(&[])
    }

    /// Like [`MariaDb::start`], with extra `mariadbd` options (later options win, so these
    /// can override the defaults, e.g. `--binlog-format=MIXED`).
    ///
    /// Besides `root@localhost` (socket), `root@127.0.0.1` exists without a password for
    /// tests that connect over TCP (name resolution is off, so TCP clients are matched by IP).
    pub fn start_with_args(extra_args: &[&str]) -> Result<MariaDb> {
        let run_dir = new_run_dir()?;
        let datadir = run_dir.path().join("data");
        install_datadir(&datadir, &run_dir.path().join("tmp"))?;
        let db = Self::launch(run_dir, datadir, extra_args)?;
        db.sql(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
             GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;",
        )
        .context("failed to create root@127.0.0.1")?;
        Ok(db)
    }

    /// Starts a server on an existing datadir (for example a restored and prepared backup).
    /// The datadir is left in place on drop; only the socket, logs and tmpdir are removed.
    pub fn start_with_datadir(datadir: &Path) -> Result<MariaDb> {
        Self::start_with_datadir_and_args(datadir, &[])
    }

    /// Like [`MariaDb::start_with_datadir`], with extra `mariadbd` options (e.g. the settings a
    /// deployment would give the restored server).
    pub fn start_with_datadir_and_args(datadir: &Path, extra_args: &[&str]) -> Result<MariaDb> {
        let datadir = datadir
            .canonicalize()
            .with_context(|| format!("datadir {} does not exist", datadir.display()))?;
        if !datadir.join("mysql").is_dir() {
            bail!(
                "{} does not look like a MariaDB datadir (no mysql/ inside)",
                datadir.display()
            );
        }
        Self::launch(new_run_dir()?, datadir, extra_args)
    }

    fn launch(run_dir: TempDir, datadir: PathBuf, extra_args: &[&str]) -> Result<MariaDb> {
        let mut db = MariaDb {
            socket: run_dir.path().join("mysqld.sock"),
            error_log: run_dir.path().join("error.log"),
            run_dir: Some(run_dir),
            datadir,
            port: 0,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            child: None,
            client: find_tool(&["mariadb", "mysql"])?,
        };
        db.spawn_and_wait()?;
        Ok(db)
    }

    /// Starts `mariadbd` on this server's datadir and waits until it accepts connections,
    /// retrying with another port when the chosen one was taken meanwhile. A restart keeps
    /// the port when it can, as a restarted server in a pod does, so that its replicas and
    /// agent find it again.
    fn spawn_and_wait(&mut self) -> Result<()> {
        let mariadbd = find_tool(&["mariadbd", "mysqld"])?;
        let run_dir = self.run_dir().to_path_buf();
        let tmpdir = run_dir.join("tmp");
        fs::create_dir_all(&tmpdir)?;
        for attempt in 1..=PORT_ATTEMPTS {
            if self.port == 0 || attempt > 1 {
                self.port = free_port()?;
            }
            let log_start = fs::metadata(&self.error_log).map_or(0, |m| m.len());
            let log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.error_log)
                .context("failed to create the error log")?;
            let mut cmd = Command::new(&mariadbd);
            cmd.arg("--no-defaults")
                .arg(format!("--datadir={}", self.datadir.display()))
                .arg(format!("--socket={}", self.socket.display()))
                .arg(format!("--port={}", self.port))
                .arg(format!(
                    "--pid-file={}",
                    run_dir.join("mariadbd.pid").display()
                ))
                .arg(format!("--log-error={}", self.error_log.display()))
                .arg(format!("--tmpdir={}", tmpdir.display()))
                .args(SERVER_ARGS)
                .args(&self.extra_args);
            if is_root() {
                cmd.arg("--user=root");
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("failed to start {}", mariadbd.display()))?;
            self.child = Some(child);
            match self.wait_ready() {
                Ok(()) => return Ok(()),
                Err(err) => {
                    let exited = self.reap_if_exited();
                    let log_tail = tail(&self.error_log, 30);
                    let new_log = read_from(&self.error_log, log_start);
                    let port_taken =
                        new_log.contains("Address already in use") || new_log.contains("Bind on");
                    if exited && port_taken && attempt < PORT_ATTEMPTS {
                        continue;
                    }
                    self.kill9();
                    return Err(err.context(format!(
                        "mariadbd on {} did not start; tail of {}:\n{log_tail}",
                        self.datadir.display(),
                        self.error_log.display()
                    )));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Polls the unix socket for the server's handshake packet.
    fn wait_ready(&mut self) -> Result<()> {
        let socket = self.socket.clone();
        poll_until(START_TIMEOUT, "mariadbd to accept connections", || {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!("mariadbd exited during startup ({status})");
                }
            }
            Ok(handshake(&socket).then_some(()))
        })
    }

    /// Returns true if the child has exited (and reaps it).
    fn reap_if_exited(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(_))) | None => {
                self.child = None;
                true
            }
            _ => false,
        }
    }

    fn run_dir(&self) -> &Path {
        self.run_dir
            .as_ref()
            .expect("run dir lives until drop")
            .path()
    }

    /// The server's unix socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's datadir.
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The server's error log.
    pub fn error_log(&self) -> &Path {
        &self.error_log
    }

    /// Connection options for the `mysql-backup` CLI: socket and root user.
    pub fn cli_args(&self) -> Vec<String> {
        vec![
            "--mysql-socket".into(),
            self.socket.display().to_string(),
            "--mysql-user".into(),
            "root".into(),
        ]
    }

    /// Whether the server process is still alive.
    pub fn is_running(&mut self) -> bool {
        !self.reap_if_exited()
    }

    /// Runs SQL as root through the `mariadb` client (batch mode, no column names; statements
    /// may use `DELIMITER`) and returns its stdout. Fails with the client's stderr.
    pub fn sql(&self, sql: &str) -> Result<String> {
        self.sql_as("root", None, sql)
    }

    /// Runs SQL as `user` (with `password`, if any) over the unix socket.
    pub fn sql_as(&self, user: &str, password: Option<&str>, sql: &str) -> Result<String> {
        let mut cmd = Command::new(&self.client);
        cmd.arg("--no-defaults")
            .args(["-N", "-B", "--default-character-set=utf8mb4"])
            .arg(format!("--user={user}"))
            .arg(format!("--socket={}", self.socket.display()));
        if let Some(password) = password {
            // The environment keeps the password off the command line.
            cmd.env("MYSQL_PWD", password);
        }
        let output = run_checked(&mut cmd, Some(sql.as_bytes()))
            .with_context(|| format!("SQL failed: {}", abbreviate(sql)))?;
        String::from_utf8(output.stdout).context("the client printed invalid UTF-8")
    }

    /// Runs a query and splits its result into rows of unescaped column values (`NULL` is
    /// returned as the string `NULL`, as the client prints it).
    pub fn query(&self, sql: &str) -> Result<Vec<Vec<String>>> {
        Ok(self
            .sql(sql)?
            .lines()
            .map(|line| line.split('\t').map(unescape_batch).collect())
            .collect())
    }

    /// Creates `user` (at `localhost` and `%`) with `password` and the privileges a physical or
    /// logical backup needs, for tests of password authentication.
    pub fn create_user(&self, user: &str, password: &str) -> Result<()> {
        self.create_user_with_grants(
            user,
            password,
            "SELECT, SHOW VIEW, TRIGGER, EVENT, EXECUTE, LOCK TABLES, RELOAD, PROCESS, \
             SHOW DATABASES, BINLOG MONITOR, SLAVE MONITOR, CONNECTION ADMIN",
        )
    }

    /// Creates `user` (at `localhost` and `%`) with `password` and the given global grants
    /// (e.g. `"SELECT, RELOAD"`), to test what happens when a privilege is missing.
    pub fn create_user_with_grants(&self, user: &str, password: &str, grants: &str) -> Result<()> {
        let user = sql_string(user);
        let password = sql_string(password);
        let mut sql = String::new();
        for host in ["localhost", "%"] {
            sql.push_str(&format!(
                "CREATE USER {user}@'{host}' IDENTIFIED BY {password};\n\
                 GRANT {grants} ON *.* TO {user}@'{host}';\n"
            ));
        }
        self.sql(&sql).map(drop)
    }

    /// Shuts the server down cleanly (killing it if that takes too long), leaving the datadir
    /// consistent. Idempotent.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        let admin = find_tool(&["mariadb-admin", "mysqladmin"])?;
        let mut admin_child = Command::new(admin)
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--socket={}", self.socket.display()))
            .arg("shutdown")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("failed to start mariadb-admin")?;
        let stopped = poll_until(STOP_TIMEOUT, "mariadbd to shut down", || {
            Ok(child.try_wait()?.map(|_| ()))
        });
        let _ = admin_child.kill();
        let _ = admin_child.wait();
        if let Err(err) = stopped {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err.context("mariadbd was killed after a shutdown timeout"));
        }
        Ok(())
    }

    /// Stops the server if it runs (cleanly) and starts it again on the same datadir; after
    /// [`MariaDb::kill9`] this exercises crash recovery. The port may change.
    pub fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.spawn_and_wait()
    }

    /// Kills the server with SIGKILL (no shutdown), for fault tests.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Err(err) = self.stop() {
            eprintln!("testkit: {err:#}");
        }
        if let Some(dir) = self.run_dir.take() {
            if keep_temp() {
                eprintln!("testkit: keeping MariaDB run dir {}", dir.keep().display());
            }
        }
    }
}

fn new_run_dir() -> Result<TempDir> {
    // Short prefix: the unix socket path must stay under 108 bytes.
    tempfile::Builder::new()
        .prefix("bulwark-db.")
        .tempdir()
        .context("failed to create a temporary directory")
}

/// Initialises `datadir` with `mariadb-install-db`: root@localhost without a password, no
/// test database. The bootstrap gets its own `tmpdir`: parallel installs sharing `/tmp` collide
/// on internal temporary table names.
fn install_datadir(datadir: &Path, tmpdir: &Path) -> Result<()> {
    let install = find_tool(&["mariadb-install-db", "mysql_install_db"])?;
    fs::create_dir_all(tmpdir)?;
    let mut cmd = Command::new(install);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.display()))
        .arg(format!("--tmpdir={}", tmpdir.display()))
        .env("TMPDIR", tmpdir)
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            "--innodb-log-file-size=64M",
        ]);
    if is_root() {
        cmd.arg("--user=root");
    }
    run_checked(&mut cmd, None).context("mariadb-install-db failed")?;
    Ok(())
}

/// Whether a server answers on `socket` with a protocol-10 handshake packet.
fn handshake(socket: &Path) -> bool {
    let Ok(mut stream) = UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && head[4] == 10
}

/// Text appended to `path` after byte `offset`.
fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = File::open(path) {
        use std::io::{Seek, SeekFrom};
        let _ = file.seek(SeekFrom::Start(offset));
        let _ = file.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// A single-quoted SQL string literal.
pub(crate) fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// A backtick-quoted SQL identifier.
pub(crate) fn sql_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Undoes the escaping of `mariadb --batch` output (`\t`, `\n`, `\\`, `\0`).
pub(crate) fn unescape_batch(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('0') => out.push('\0'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn abbreviate(sql: &str) -> String {
    let one_line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 200 {
        format!("{}…", one_line.chars().take(200).collect::<String>())
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_batch_fields() {
        assert_eq!(unescape_batch(r"a\tb\nc\\d\0"), "a\tb\nc\\d\0");
        assert_eq!(unescape_batch("plain"), "plain");
    }

    #[test]
    fn quotes_sql() {
        assert_eq!(sql_string(r"it's \ ok"), r"'it''s \\ ok'");
        assert_eq!(sql_ident("we`ird"), "`we``ird`");
    }
}
