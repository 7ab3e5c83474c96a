//! What a pass reads from the server, each query beside the parser of its answer: the global
//! variables a decision needs, the replication status row (either engine's column names), and
//! the client sessions a fence ends.

use std::collections::BTreeMap;

use bulwark_contract::Engine;

use super::accounts::{BACKUP_USER, EXPORTER_USER, REPLICATION_USER};
use super::quote;

/// The server's version and its comment, from which its engine is told (`(String, String)`).
pub const VERSION_QUERY: &str = "SELECT @@version, @@version_comment";

/// MySQL's `@@super_read_only` (an integer, 0 or 1).
pub const SUPER_READ_ONLY_QUERY: &str = "SELECT @@GLOBAL.super_read_only";

/// What a health check asks: that the server answers at all.
pub const HEALTH_QUERY: &str = "SELECT 1";

/// What a replica reads from its primary to know how far behind it is: the position and the
/// history (MariaDB), or the whole set twice (MySQL). Global variables: the replication account
/// needs no privilege for them.
pub fn primary_position_query(engine: Engine) -> &'static str {
    match engine {
        Engine::MariaDb => "SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.gtid_binlog_state",
        Engine::MySql => "SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_executed",
    }
}

/// The server's global state the agent decides on.
///
/// The semi-sync columns come from the variable tables, so that a server without them (a MySQL
/// whose plugins are not loaded) answers NULL instead of failing the whole query.
pub fn variables_query(engine: Engine) -> String {
    // Replicas only: the binlog archiver reads the binary log too, as the backup account.
    let replicas = format!(
        "(SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE COMMAND IN ('Binlog Dump', 'Binlog Dump GTID') AND USER = {})",
        quote(REPLICATION_USER)
    );
    match engine {
        Engine::MariaDb => format!(
            "SELECT @@GLOBAL.read_only, 0, @@GLOBAL.gtid_binlog_pos, \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES \
              WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_ENABLED'), \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
              WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'), \
             @@GLOBAL.gtid_binlog_state, {replicas}"
        ),
        Engine::MySql => format!(
            "SELECT @@GLOBAL.read_only, @@GLOBAL.super_read_only, @@GLOBAL.gtid_executed, \
             (SELECT VARIABLE_VALUE FROM performance_schema.global_variables \
              WHERE VARIABLE_NAME = 'rpl_semi_sync_source_enabled'), \
             (SELECT VARIABLE_VALUE FROM performance_schema.global_status \
              WHERE VARIABLE_NAME = 'Rpl_semi_sync_source_clients'), \
             '', {replicas}"
        ),
    }
}

/// The answer of [`variables_query`], by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerVariables {
    pub read_only: bool,
    /// MySQL only (the query answers 0 on MariaDB).
    pub super_read_only: bool,
    /// `gtid_binlog_pos` (MariaDB) or `gtid_executed` (MySQL).
    pub gtid_logged: String,
    /// The primary waits for semi-sync acknowledgements.
    pub semi_sync_wait: bool,
    /// Replicas connected with semi-sync.
    pub semi_sync_clients: u32,
    /// `gtid_binlog_state` (MariaDB; empty on MySQL).
    pub gtid_history: String,
    /// Replicas reading its binary log (semi-sync or not; not the binlog archiver).
    pub replicas_attached: u32,
}

/// Reads the row [`variables_query`] answers (its columns in the order it selects them; a
/// missing or NULL column reads as off, empty or zero).
pub fn parse_variables(row: &[Option<String>]) -> ServerVariables {
    let text = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    let flag = |i: usize| {
        row.get(i)
            .cloned()
            .flatten()
            .is_some_and(|v| !matches!(v.as_str(), "0" | "OFF" | "off"))
    };
    ServerVariables {
        read_only: flag(0),
        super_read_only: flag(1),
        gtid_logged: text(2),
        semi_sync_wait: flag(3),
        semi_sync_clients: text(4).parse().unwrap_or(0),
        gtid_history: text(5),
        replicas_attached: text(6).parse().unwrap_or(0),
    }
}

/// The query that shows replication's state.
pub fn replication_status_query(engine: Engine) -> &'static str {
    match engine {
        Engine::MariaDb => "SHOW SLAVE STATUS",
        Engine::MySql => "SHOW REPLICA STATUS",
    }
}

/// State of the receiving thread (the contract's: the operator reads it in reports).
pub use bulwark_contract::member::IoState;

/// One replica status row, with the column names of either engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Source host.
    pub source_host: String,
    /// Source port.
    pub source_port: u16,
    /// Replication user.
    pub source_user: String,
    /// Receiving thread.
    pub io: IoState,
    /// Applying thread running.
    pub sql_running: bool,
    /// Seconds behind the source (unknown while not connected).
    pub lag_seconds: Option<u64>,
    /// Positions by GTID (MariaDB `Using_Gtid` = Slave_Pos/Current_Pos, MySQL auto-position).
    pub gtid: bool,
    /// Everything received has been applied (the positions read and executed are equal).
    pub relay_applied: bool,
    /// The applier runs and reports that it has read the whole relay log: everything complete
    /// that was received is applied, even when a transaction cut short remains.
    pub sql_caught_up: bool,
    /// Error number of the receiving thread (0: none).
    pub io_errno: u32,
    /// Error number of the applier (0: none).
    pub sql_errno: u32,
    /// Last error of either thread, for messages.
    pub last_error: String,
    /// What the receiver has written to the relay log (MariaDB `Gtid_IO_Pos`, MySQL
    /// `Retrieved_Gtid_Set`), applied or not.
    pub received: String,
}

/// Parses a replica status row given as column name → value (NULL as `None`); MariaDB's and
/// MySQL's column names (Master_*/Source_*, Slave_*/Replica_*) are both understood.
pub fn parse_replica_status(row: &BTreeMap<String, Option<String>>) -> ReplicaStatus {
    let get = |names: &[&str]| -> Option<String> {
        names
            .iter()
            .find_map(|n| row.get(*n).cloned().flatten())
            .filter(|v| !v.is_empty())
    };
    let text = |names: &[&str]| get(names).unwrap_or_default();
    let io = match text(&["Slave_IO_Running", "Replica_IO_Running"]).as_str() {
        "Yes" => IoState::Running,
        "Connecting" => IoState::Connecting,
        _ => IoState::Stopped,
    };
    let using_gtid = text(&["Using_Gtid"]).to_ascii_lowercase();
    let gtid = matches!(using_gtid.as_str(), "slave_pos" | "current_pos")
        || text(&["Auto_Position"]) == "1";
    let read_file = text(&["Master_Log_File", "Source_Log_File"]);
    let exec_file = text(&["Relay_Master_Log_File", "Relay_Source_Log_File"]);
    let read_pos = text(&["Read_Master_Log_Pos", "Read_Source_Log_Pos"]);
    let exec_pos = text(&["Exec_Master_Log_Pos", "Exec_Source_Log_Pos"]);
    let last_error = [text(&["Last_IO_Error"]), text(&["Last_SQL_Error"])]
        .into_iter()
        .filter(|e| !e.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    ReplicaStatus {
        source_host: text(&["Master_Host", "Source_Host"]),
        source_port: text(&["Master_Port", "Source_Port"]).parse().unwrap_or(0),
        source_user: text(&["Master_User", "Source_User"]),
        io,
        sql_running: text(&["Slave_SQL_Running", "Replica_SQL_Running"]) == "Yes",
        lag_seconds: get(&["Seconds_Behind_Master", "Seconds_Behind_Source"])
            .and_then(|v| v.parse().ok()),
        gtid,
        relay_applied: read_file == exec_file && read_pos == exec_pos,
        sql_caught_up: text(&["Slave_SQL_Running_State", "Replica_SQL_Running_State"])
            .contains("has read all relay log"),
        io_errno: text(&["Last_IO_Errno"]).parse().unwrap_or(0),
        sql_errno: text(&["Last_SQL_Errno"]).parse().unwrap_or(0),
        last_error,
        received: text(&["Gtid_IO_Pos", "Retrieved_Gtid_Set"]),
    }
}

/// Every binlog dump thread and its client's address (`ip:port`): replicas' and the binlog
/// archiver's alike, since any of them can be cut off (`crate::decide::stale_dumps`).
pub const DUMP_THREADS_QUERY: &str = "SELECT ID, HOST FROM information_schema.PROCESSLIST \
     WHERE COMMAND IN ('Binlog Dump', 'Binlog Dump GTID')";

/// Client sessions a fenced server ends: every one but the agent's own, the server's threads
/// and the operator's accounts (replicas' binlog dumps, backups, the exporter). MariaDB's
/// `read_only` does not stop accounts holding READ ONLY ADMIN (root, and any `GRANT ALL ON
/// *.*`): their open transactions must not commit on a demoted primary. `keep`: the agent's
/// own other session (the one holding the fence).
pub fn fenced_sessions_query(keep: Option<u64>) -> String {
    format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND ID <> {} \
         AND USER NOT IN ('system user', 'event_scheduler', 'unauthenticated user', {}, {}, {}) \
         AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID', 'Killed')",
        keep.unwrap_or(0),
        quote(REPLICATION_USER),
        quote(BACKUP_USER),
        quote(EXPORTER_USER)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_row_is_read_by_the_columns_its_query_selects() {
        let row = |v: &[Option<&str>]| v.iter().map(|c| c.map(str::to_owned)).collect::<Vec<_>>();
        let mariadb = parse_variables(&row(&[
            Some("1"),
            Some("0"),
            Some("0-100-42"),
            Some("ON"),
            Some("2"),
            Some("0-100-42,0-101-7"),
            Some("2"),
        ]));
        assert_eq!(
            mariadb,
            ServerVariables {
                read_only: true,
                super_read_only: false,
                gtid_logged: "0-100-42".into(),
                semi_sync_wait: true,
                semi_sync_clients: 2,
                gtid_history: "0-100-42,0-101-7".into(),
                replicas_attached: 2,
            }
        );
        // A MySQL without the semi-sync plugins answers NULL there.
        let mysql = parse_variables(&row(&[
            Some("0"),
            Some("1"),
            Some("uuid:1-5"),
            None,
            None,
            Some(""),
        ]));
        assert!(!mysql.read_only && mysql.super_read_only && !mysql.semi_sync_wait);
        assert_eq!(
            (mysql.semi_sync_clients, mysql.gtid_history.as_str()),
            (0, "")
        );
        for engine in Engine::ALL {
            let columns = variables_query(engine).matches("@@GLOBAL.").count()
                + variables_query(engine).matches("(SELECT").count()
                + variables_query(engine).matches(", 0,").count()
                + variables_query(engine).matches("''").count();
            assert_eq!(
                columns, 7,
                "{engine}: the query selects what parse_variables reads"
            );
        }
    }

    fn row(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn replica_status_rows_of_both_engines() {
        let maria = row(&[
            ("Master_Host", Some("10.0.0.5")),
            ("Master_User", Some("bulwark_replication")),
            ("Master_Port", Some("3306")),
            ("Master_Log_File", Some("mysql-bin.000002")),
            ("Read_Master_Log_Pos", Some("900")),
            ("Relay_Master_Log_File", Some("mysql-bin.000002")),
            ("Exec_Master_Log_Pos", Some("800")),
            ("Slave_IO_Running", Some("Yes")),
            ("Slave_SQL_Running", Some("Yes")),
            ("Seconds_Behind_Master", Some("3")),
            ("Last_IO_Errno", Some("0")),
            ("Last_IO_Error", Some("")),
            ("Last_SQL_Error", Some("")),
            ("Using_Gtid", Some("Slave_Pos")),
            (
                "Slave_SQL_Running_State",
                Some("Slave has read all relay log; waiting for more updates"),
            ),
            ("Last_SQL_Errno", Some("0")),
            ("Gtid_IO_Pos", Some("0-100-42")),
        ]);
        let s = parse_replica_status(&maria);
        assert_eq!(
            s,
            ReplicaStatus {
                source_host: "10.0.0.5".into(),
                source_port: 3306,
                source_user: "bulwark_replication".into(),
                io: IoState::Running,
                sql_running: true,
                lag_seconds: Some(3),
                gtid: true,
                relay_applied: false,
                sql_caught_up: true,
                io_errno: 0,
                sql_errno: 0,
                last_error: String::new(),
                received: "0-100-42".into(),
            }
        );
        let mysql = row(&[
            ("Source_Host", Some("harbor-primary")),
            ("Source_User", Some("bulwark_replication")),
            ("Source_Port", Some("3306")),
            ("Source_Log_File", Some("binlog.000003")),
            ("Read_Source_Log_Pos", Some("157")),
            ("Relay_Source_Log_File", Some("binlog.000003")),
            ("Exec_Source_Log_Pos", Some("157")),
            ("Replica_IO_Running", Some("Connecting")),
            ("Replica_SQL_Running", Some("Yes")),
            ("Seconds_Behind_Source", None),
            ("Last_IO_Errno", Some("1045")),
            ("Last_IO_Error", Some("Access denied")),
            ("Auto_Position", Some("1")),
            (
                "Replica_SQL_Running_State",
                Some("Waiting for dependent transaction to commit"),
            ),
            ("Last_SQL_Errno", Some("1062")),
            (
                "Retrieved_Gtid_Set",
                Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:1"),
            ),
        ]);
        let s = parse_replica_status(&mysql);
        assert_eq!(
            (s.io, s.lag_seconds, s.gtid, s.relay_applied, s.io_errno),
            (IoState::Connecting, None, true, true, 1045)
        );
        assert_eq!((s.sql_caught_up, s.sql_errno), (false, 1062));
        assert_eq!(s.last_error, "Access denied");
        assert!(s
            .received
            .starts_with("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7,"));
        let positional = parse_replica_status(&row(&[
            ("Using_Gtid", Some("No")),
            ("Slave_IO_Running", Some("No")),
        ]));
        assert_eq!((positional.gtid, positional.io), (false, IoState::Stopped));
    }
}
