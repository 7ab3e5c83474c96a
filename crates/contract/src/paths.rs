//! Where things are inside the operator's pods. The operator mounts volumes at these paths and
//! passes them on command lines; the programs in the pods find their files there.

/// The server's data directory: the `mysql` subdirectory of the `data` volume, so that the
/// server never sees the volume root (and a filesystem's `lost+found`).
pub const DATADIR: &str = "/var/lib/mysql";
/// Subdirectory of the `data` volume that is the data directory.
pub const DATADIR_SUBPATH: &str = "mysql";
/// The root of the `data` volume, for the operator's own files next to the data directory
/// (they survive pod restarts but are not part of the server's data).
pub const VOLUME_ROOT: &str = "/var/lib/bulwark";
/// The data directory as seen where the whole `data` volume is mounted at [`VOLUME_ROOT`] (the
/// `init` container, which creates it with the server's owner before mysqld first starts).
pub const DATADIR_ON_VOLUME: &str = "/var/lib/bulwark/mysql";
/// File on the data volume telling the agent to load a logical backup once the server runs.
pub const PENDING_LOGICAL_RESTORE: &str = "/var/lib/bulwark/pending-logical-restore";
/// File on the data volume with the GTID set a physical restore ended at; the agent continues
/// replication from it.
pub const RESTORED_GTID: &str = "/var/lib/bulwark/restored-gtid";
/// File on the data volume with the last role order the agent accepted (`order`): it outlives
/// agent restarts, so a stale labels file cannot undo an order.
pub const ROLE_ORDER: &str = "/var/lib/bulwark/role-order";
/// Directory the server reads extra option files from (both official images include it).
pub const CONF_DIR: &str = "/etc/mysql/conf.d";
/// Where the rendered my.cnf ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/bulwark/config";
/// The cluster's my.cnf, in [`CONFIG_DIR`].
pub const CONFIG_FILE: &str = "/etc/bulwark/config/my.cnf";
/// Key of the my.cnf in the ConfigMap (its file name in [`CONFIG_DIR`]).
pub const CONFIG_KEY: &str = "my.cnf";
/// Password files of the server pods, one per account (named by `Account::key`), and the
/// order key: the agent's and the tools'.
pub const CREDENTIALS_DIR: &str = "/etc/bulwark/credentials";
/// What the server container itself mounts of them: root's password file alone, which the
/// image reads to initialize a datadir.
pub const SERVER_CREDENTIALS_DIR: &str = "/etc/bulwark/server-credentials";
/// The one directory the server reads and writes files in for clients (`secure_file_priv`):
/// `LOAD_FILE`, `LOAD DATA INFILE` and `SELECT … INTO OUTFILE` reach nothing else.
pub const SERVER_FILES_DIR: &str = "/var/lib/mysql-files";
/// The pod's labels (downward API), from which the agent learns the pod's role.
pub const PODINFO_DIR: &str = "/etc/podinfo";
/// The labels file in [`PODINFO_DIR`].
pub const LABELS_FILE: &str = "/etc/podinfo/labels";
/// The server's socket directory, shared with the agent.
pub const RUN_DIR: &str = "/run/mysqld";
/// The server's socket.
pub const SOCKET: &str = "/run/mysqld/mysqld.sock";
/// Present, beside the socket, while the agent's server is a primary that replicas read from
/// (or a demoted one still holding its writes): the pod's preStop hooks wait while it is, so
/// that a deleted primary pod stops only once its role has been handed over.
pub const HANDOVER_FILE: &str = "handover-pending";
/// The primary's lease as the agent last took it, beside [`HANDOVER_FILE`]: the run directory
/// outlives a restart of the agent's container (not of the pod), so a restarted agent keeps
/// what is left of its lease instead of fencing a primary the operator still renews.
pub const LEASE_FILE: &str = "lease";
/// How long a preStop hook waits for [`HANDOVER_FILE`] to go: longer than a switchover takes,
/// shorter than the pod's grace period; after it the pod stops and a failover follows.
pub const HANDOVER_WAIT_SECONDS: u32 = 60;
/// The in-memory directory holding the exporter's option file, written by `init`.
pub const EXPORTER_CONFIG_DIR: &str = "/run/bulwark-exporter";
/// The exporter's option file (`--config.my-cnf`), in [`EXPORTER_CONFIG_DIR`].
pub const EXPORTER_CONFIG: &str = "/run/bulwark-exporter/my.cnf";
/// Where the S3 credentials Secret of a storage is mounted (its keys are the file names).
pub const S3_CREDENTIALS_DIR: &str = "/etc/bulwark/s3";
/// Where a backup storage (PVC or NFS) is mounted in Job and restore containers.
pub const STORAGE_MOUNT: &str = "/backup-storage";
/// Where the backup encryption key is mounted.
pub const KEY_DIR: &str = "/etc/bulwark/backup-key";
/// The master key file in [`KEY_DIR`].
pub const KEY_FILE: &str = "/etc/bulwark/backup-key/master.key";
/// Where a backup Job finds the backup account's password.
pub const BACKUP_PASSWORD_DIR: &str = "/etc/bulwark/backup-credentials";
/// The password file in [`BACKUP_PASSWORD_DIR`].
pub const BACKUP_PASSWORD_FILE: &str = "/etc/bulwark/backup-credentials/password";
/// Kubernetes' termination message file: a backup Job's result line goes there.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// Where a drill Job's scratch volume is mounted (the restored datadir and scratch server).
pub const DRILL_SCRATCH: &str = "/var/lib/bulwark-drill";

/// `dir`'s file `name`, for tests comparing the constants above.
#[cfg(test)]
fn join(dir: &str, name: &str) -> String {
    format!("{dir}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_live_in_their_directories() {
        assert_eq!(CONFIG_FILE, join(CONFIG_DIR, CONFIG_KEY));
        assert_eq!(LABELS_FILE, join(PODINFO_DIR, "labels"));
        assert_eq!(SOCKET, join(RUN_DIR, "mysqld.sock"));
        assert_eq!(KEY_FILE, join(KEY_DIR, "master.key"));
        assert_eq!(BACKUP_PASSWORD_FILE, join(BACKUP_PASSWORD_DIR, "password"));
        assert_eq!(
            PENDING_LOGICAL_RESTORE,
            join(VOLUME_ROOT, "pending-logical-restore")
        );
        assert_eq!(RESTORED_GTID, join(VOLUME_ROOT, "restored-gtid"));
        assert_eq!(ROLE_ORDER, join(VOLUME_ROOT, "role-order"));
        assert_eq!(DATADIR_SUBPATH, "mysql");
        assert_eq!(DATADIR_ON_VOLUME, join(VOLUME_ROOT, DATADIR_SUBPATH));
    }
}
