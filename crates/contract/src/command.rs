//! Command lines of the programs in the operator's pods, as the operator writes them. Each
//! builder yields an [`Argv`]; the binaries' tests parse every builder's output with their real
//! argument parsers, so both sides cannot drift apart.

use crate::{paths, Account, Engine};

/// The backup tool (backup and delete Jobs).
pub const BACKUP_PROGRAM: &str = "mysql-backup";
/// The in-pod agent (the server pods' init, restore and agent containers).
pub const AGENT_PROGRAM: &str = "bulwark-agent";

/// A program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    pub program: &'static str,
    pub args: Vec<String>,
}

impl Argv {
    fn new(program: &'static str) -> Self {
        Argv {
            program,
            args: Vec::new(),
        }
    }

    fn arg(&mut self, a: impl Into<String>) -> &mut Self {
        self.args.push(a.into());
        self
    }

    fn flag(&mut self, name: &str, value: impl std::fmt::Display) -> &mut Self {
        self.args.push(format!("--{name}={value}"));
        self
    }

    fn opt(&mut self, name: &str, value: Option<impl std::fmt::Display>) -> &mut Self {
        if let Some(v) = value {
            self.flag(name, v);
        }
        self
    }

    fn switch(&mut self, name: &str, on: bool) -> &mut Self {
        if on {
            self.args.push(format!("--{name}"));
        }
        self
    }

    /// The whole command line, program first (what an argument parser takes).
    pub fn to_vec(&self) -> Vec<String> {
        std::iter::once(self.program.to_owned())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// Backup method, as `--method` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Physical,
    Logical,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Physical => "physical",
            Method::Logical => "logical",
        }
    }
}

/// A backup repository and how to reach it. Credentials are not part of it: they reach the
/// program through its environment or files, never its command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repository {
    /// A path, `file:///path` or `s3://bucket/prefix`.
    pub url: String,
    pub s3_endpoint: Option<String>,
    pub s3_region: Option<String>,
    pub s3_path_style: bool,
    /// The directory of S3 credential files (a mounted Secret), for S3 repositories.
    pub s3_credentials_dir: Option<String>,
    /// The master key file, when backups are encrypted.
    pub encryption_key_file: Option<String>,
}

impl Repository {
    fn push(&self, argv: &mut Argv) {
        argv.flag("repo", &self.url)
            .opt("s3-endpoint", self.s3_endpoint.as_deref())
            .opt("s3-region", self.s3_region.as_deref())
            .switch("s3-path-style", self.s3_path_style)
            .opt("s3-credentials-dir", self.s3_credentials_dir.as_deref())
            .opt("encryption-key-file", self.encryption_key_file.as_deref());
    }
}

/// `mysql-backup backup`, as a backup Job runs it: from a server over TCP, reporting its result
/// line into the termination log and its progress as JSON log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub repository: Repository,
    pub method: Method,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password_file: String,
    /// The source's datadir as mounted in the Job (physical backups).
    pub datadir: Option<String>,
    pub result_file: String,
    /// Seconds between progress log lines.
    pub progress_interval_seconds: u32,
    /// The id the backup is stored under, assigned (and recorded) by the operator beforehand.
    pub backup_id: String,
    /// The binlog archive that continues the backup (the cluster's name).
    pub binlog_archive: String,
}

impl Backup {
    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(BACKUP_PROGRAM);
        a.flag("log-format", "json").arg("backup");
        self.repository.push(&mut a);
        a.flag("method", self.method.as_str())
            .flag("mysql-host", &self.host)
            .flag("mysql-port", self.port)
            .flag("mysql-user", &self.user)
            .flag("mysql-password-file", &self.password_file)
            .opt("datadir", self.datadir.as_deref())
            .flag("result-file", &self.result_file)
            .flag("backup-id", &self.backup_id)
            .flag("binlog-archive", &self.binlog_archive)
            .flag("progress", "log")
            .flag(
                "progress-interval",
                format!("{}s", self.progress_interval_seconds),
            );
        a
    }
}

/// `mysql-backup archive`: streams the primary's binary logs into the repository until stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    pub repository: Repository,
    /// The archive written (the cluster's name).
    pub archive: String,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password_file: String,
    /// Seconds between commits of the archive.
    pub flush_every_seconds: u32,
    /// The server id the archiver registers with (unlike every member's).
    pub server_id: u32,
    /// Where the archiver serves its `/status` (all addresses, [`crate::ports::ARCHIVER`]).
    pub status_listen: String,
    /// Delete the segments no backup can use (they follow the backups' retention).
    pub prune_unneeded: bool,
    /// Start a new timeline when the primary lacks archived transactions (after a failover)
    /// instead of stopping.
    pub branch_on_divergence: bool,
}

/// The archiver's server id: above any member's (members take small ids from their ordinal).
pub const ARCHIVER_SERVER_ID: u32 = 4_000_000_001;

impl Archive {
    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(BACKUP_PROGRAM);
        a.flag("log-format", "json").arg("archive");
        self.repository.push(&mut a);
        a.flag("archive", &self.archive)
            .flag("mysql-host", &self.host)
            .flag("mysql-port", self.port)
            .flag("mysql-user", &self.user)
            .flag("mysql-password-file", &self.password_file)
            .flag("flush-every", format!("{}s", self.flush_every_seconds))
            .flag("server-id", self.server_id)
            .flag("status-listen", &self.status_listen);
        if self.prune_unneeded {
            a.arg("--prune-unneeded");
        }
        if self.branch_on_divergence {
            a.arg("--branch-on-divergence");
        }
        a
    }
}

/// `mysql-backup delete`: removes one backup's data (succeeds when it is already gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    pub repository: Repository,
    pub backup_id: String,
}

impl Delete {
    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(BACKUP_PROGRAM);
        a.flag("log-format", "json").arg("delete");
        self.repository.push(&mut a);
        a.arg("--").arg(&self.backup_id);
        a
    }
}

/// `mysql-backup drill`, as a drill Job runs it: restores one backup into a scratch server
/// inside the Job, checks it, and reports its result line into the termination log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drill {
    pub repository: Repository,
    pub backup_id: String,
    /// Where the scratch datadir is made (the Job's scratch volume).
    pub scratch_dir: String,
    /// SQL that must each return one row with a non-zero first column.
    pub assertions: Vec<String>,
    /// Replay the backup's binlog archive to its end before the checks.
    pub point_in_time: bool,
    pub result_file: String,
    /// Seconds between progress log lines.
    pub progress_interval_seconds: u32,
}

impl Drill {
    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(BACKUP_PROGRAM);
        a.flag("log-format", "json").arg("drill");
        self.repository.push(&mut a);
        a.flag("scratch-dir", &self.scratch_dir);
        for sql in &self.assertions {
            a.flag("assert", sql);
        }
        if self.point_in_time {
            a.flag("until", "latest");
        }
        a.flag("result-file", &self.result_file)
            .flag("progress", "log")
            .flag(
                "progress-interval",
                format!("{}s", self.progress_interval_seconds),
            );
        a.arg("--").arg(&self.backup_id);
        a
    }
}

/// `bulwark-agent init`: writes the per-pod server configuration before mysqld starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Init {
    /// The pod's name; `$(POD_NAME)` lets the kubelet fill it in from the downward API.
    pub pod_name: String,
    pub cluster: String,
    pub engine: Engine,
    pub config_file: String,
    pub conf_dir: String,
    /// The data directory to create when absent, on the whole data volume.
    pub datadir: String,
    /// With metrics: the exporter's option file to write, and the metrics password file it
    /// is written from.
    pub exporter: Option<(String, String)>,
}

impl Init {
    /// The command of the server pods' `init` container.
    pub fn for_pod(cluster: &str, engine: Engine, metrics: bool) -> Init {
        Init {
            pod_name: "$(POD_NAME)".to_owned(),
            cluster: cluster.to_owned(),
            engine,
            config_file: paths::CONFIG_FILE.to_owned(),
            conf_dir: paths::CONF_DIR.to_owned(),
            datadir: paths::DATADIR_ON_VOLUME.to_owned(),
            exporter: metrics.then(|| {
                (
                    paths::EXPORTER_CONFIG.to_owned(),
                    format!("{}/{}", paths::CREDENTIALS_DIR, Account::Metrics.key()),
                )
            }),
        }
    }

    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(AGENT_PROGRAM);
        a.flag("log-format", "json")
            .arg("init")
            .flag("pod-name", &self.pod_name)
            .flag("cluster", &self.cluster)
            .flag("engine", self.engine.as_str())
            .flag("config-file", &self.config_file)
            .flag("conf-dir", &self.conf_dir)
            .flag("datadir", &self.datadir);
        if let Some((config, password)) = &self.exporter {
            a.flag("exporter-config", config)
                .flag("exporter-password-file", password);
        }
        a
    }
}

/// `bulwark-agent restore`: bootstraps an empty datadir from a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    pub repository: Repository,
    pub backup_id: String,
    pub datadir: String,
    /// Where a logical backup's id is left for the agent.
    pub pending_file: String,
    /// Where a physical restore leaves its GTID position for the agent.
    pub gtid_file: String,
    /// The point in time to bring the data to from the binlog archive.
    pub until: Option<PointInTime>,
    /// Set in the server pods: with `latest` and a physical backup only the first member
    /// restores, and the others copy its data, so every member starts at the same position
    /// (each resolving `latest` at its own moment would not).
    pub first_member: Option<FirstMember>,
}

/// How a member that does not restore finds the first member to copy from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstMember {
    /// This pod.
    pub pod_name: String,
    /// Where the members' agents are found (the headless Service's name and the agent port).
    pub peers: String,
    /// Holds the order key that signs the copy request.
    pub credentials_dir: String,
}

/// A point-in-time target, as `--until` / `--until-gtid` take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointInTime {
    /// `latest`, or a UTC time in whole seconds (`2026-11-25T03:15:00Z`).
    Until(String),
    /// A MariaDB GTID position.
    UntilGtid(String),
}

impl Restore {
    /// The command of the server pods' `restore` container.
    pub fn for_pod(repository: Repository, backup_id: &str, until: Option<PointInTime>) -> Restore {
        Restore {
            repository,
            backup_id: backup_id.to_owned(),
            datadir: paths::DATADIR.to_owned(),
            pending_file: paths::PENDING_LOGICAL_RESTORE.to_owned(),
            gtid_file: paths::RESTORED_GTID.to_owned(),
            until,
            first_member: None,
        }
    }

    /// The command of a pod of the cluster whose headless Service is `headless`: a member
    /// other than the first copies the first member's data when `latest` is the target.
    pub fn in_cluster(mut self, headless: &str) -> Restore {
        self.first_member = Some(FirstMember {
            pod_name: "$(POD_NAME)".to_owned(),
            peers: format!("{headless}:{}", crate::ports::AGENT),
            credentials_dir: paths::CREDENTIALS_DIR.to_owned(),
        });
        self
    }

    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(AGENT_PROGRAM);
        a.flag("log-format", "json").arg("restore");
        self.repository.push(&mut a);
        a.flag("datadir", &self.datadir)
            .flag("pending-file", &self.pending_file)
            .flag("gtid-file", &self.gtid_file);
        match &self.until {
            Some(PointInTime::Until(t)) => {
                a.flag("until", t);
            }
            Some(PointInTime::UntilGtid(g)) => {
                a.flag("until-gtid", g);
            }
            None => {}
        }
        if let Some(f) = &self.first_member {
            a.flag("pod-name", &f.pod_name)
                .flag("peers", &f.peers)
                .flag("credentials-dir", &f.credentials_dir);
        }
        a.arg("--").arg(&self.backup_id);
        a
    }
}

/// What the agent of a bootstrapped cluster finishes after the restore container: loading a
/// pending logical backup, continuing a physical backup's GTID history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRestore {
    pub repository: Repository,
    pub pending_logical_restore: String,
}

/// `bulwark-agent run`: the sidecar next to mysqld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// The pod's name (role orders name the member they are for); `$(POD_NAME)` as in `Init`.
    pub pod_name: String,
    /// Where the last accepted role order is kept.
    pub order_file: String,
    pub socket: String,
    pub listen: String,
    pub labels_file: String,
    pub credentials_dir: String,
    /// Host replicas replicate from (the cluster's primary Service).
    pub primary_host: String,
    pub primary_port: u16,
    /// Replicas that must acknowledge each commit (semi-sync); 0: asynchronous.
    pub semi_sync_acks: u32,
    /// Where a restore or a seed leaves the GTID position the server continues from.
    pub gtid_file: String,
    /// Where copies of this member's data are served to new members (`seed`).
    pub clone_listen: String,
    /// The data directory as the agent sees it (copies are taken from it).
    pub datadir: String,
    pub restore: Option<AgentRestore>,
    /// Serve the exporter's `/metrics` (when the cluster has metrics on).
    pub metrics: Option<AgentMetrics>,
    /// As the primary, take writes only while holding a lease the operator renews
    /// (`crate::lease`): on when automatic failover is.
    pub primary_lease: bool,
}

/// Where the agent serves `/metrics`, and the exporter it reads them from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMetrics {
    pub listen: String,
    /// The exporter's loopback address.
    pub upstream: String,
}

impl Agent {
    /// The command of the server pods' `agent` container.
    pub fn for_pod(
        primary_host: &str,
        semi_sync_acks: u32,
        restore: Option<Repository>,
        metrics: bool,
        primary_lease: bool,
    ) -> Agent {
        Agent {
            pod_name: "$(POD_NAME)".to_owned(),
            order_file: paths::ROLE_ORDER.to_owned(),
            socket: paths::SOCKET.to_owned(),
            listen: format!("0.0.0.0:{}", crate::ports::AGENT),
            labels_file: paths::LABELS_FILE.to_owned(),
            credentials_dir: paths::CREDENTIALS_DIR.to_owned(),
            primary_host: primary_host.to_owned(),
            primary_port: crate::ports::MYSQL,
            semi_sync_acks,
            gtid_file: paths::RESTORED_GTID.to_owned(),
            clone_listen: format!("0.0.0.0:{}", crate::ports::CLONE),
            datadir: paths::DATADIR.to_owned(),
            restore: restore.map(|repository| AgentRestore {
                repository,
                pending_logical_restore: paths::PENDING_LOGICAL_RESTORE.to_owned(),
            }),
            metrics: metrics.then(|| AgentMetrics {
                listen: format!("0.0.0.0:{}", crate::ports::EXPORTER),
                upstream: format!("127.0.0.1:{}", crate::ports::EXPORTER_LOOPBACK),
            }),
            primary_lease,
        }
    }

    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(AGENT_PROGRAM);
        a.flag("log-format", "json")
            .arg("run")
            .flag("pod-name", &self.pod_name)
            .flag("order-file", &self.order_file)
            .flag("socket", &self.socket)
            .flag("listen", &self.listen)
            .flag("labels-file", &self.labels_file)
            .flag("credentials-dir", &self.credentials_dir)
            .flag("primary-host", &self.primary_host)
            .flag("primary-port", self.primary_port)
            .flag("semi-sync-acks", self.semi_sync_acks)
            .flag("gtid-file", &self.gtid_file)
            .flag("clone-listen", &self.clone_listen)
            .flag("datadir", &self.datadir);
        if let Some(r) = &self.restore {
            r.repository.push(&mut a);
            a.flag("pending-logical-restore", &r.pending_logical_restore);
        }
        if let Some(m) = &self.metrics {
            a.flag("metrics-listen", &m.listen)
                .flag("metrics-upstream", &m.upstream);
        }
        a.switch("primary-lease", self.primary_lease);
        a
    }
}

/// `bulwark-agent seed`: copies a running member's data into an empty datadir, so that a member
/// added to a cluster that has data (a scale-up, a lost volume) starts from a recent copy and
/// replicates only what followed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    pub pod_name: String,
    /// Where the members' agents are found (the headless Service's name and the agent port).
    pub peers: String,
    pub datadir: String,
    pub gtid_file: String,
    pub pending_file: String,
    pub credentials_dir: String,
}

impl Seed {
    /// The command of the server pods' `seed` container; `headless`: the cluster's headless
    /// Service.
    pub fn for_pod(headless: &str) -> Seed {
        Seed {
            pod_name: "$(POD_NAME)".to_owned(),
            peers: format!("{headless}:{}", crate::ports::AGENT),
            datadir: paths::DATADIR.to_owned(),
            gtid_file: paths::RESTORED_GTID.to_owned(),
            pending_file: paths::PENDING_LOGICAL_RESTORE.to_owned(),
            credentials_dir: paths::CREDENTIALS_DIR.to_owned(),
        }
    }

    pub fn argv(&self) -> Argv {
        let mut a = Argv::new(AGENT_PROGRAM);
        a.flag("log-format", "json")
            .arg("seed")
            .flag("pod-name", &self.pod_name)
            .flag("peers", &self.peers)
            .flag("datadir", &self.datadir)
            .flag("gtid-file", &self.gtid_file)
            .flag("pending-file", &self.pending_file)
            .flag("credentials-dir", &self.credentials_dir);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_attached_to_their_flags() {
        // `--flag=value` keeps values that start with a dash from being read as flags.
        let argv = Delete {
            repository: Repository {
                url: "-odd".into(),
                ..Repository::default()
            },
            backup_id: "-id".into(),
        }
        .argv()
        .to_vec();
        assert_eq!(
            argv,
            [
                "mysql-backup",
                "--log-format=json",
                "delete",
                "--repo=-odd",
                "--",
                "-id"
            ]
        );
    }
}
