//! Statements that switch a server's role: read-only and writable, the semi-sync wait,
//! replication set-up and teardown, a restored GTID position adopted, and the fence's lock and
//! session ends.

use bulwark_contract::Engine;

use super::accounts::REPLICATION_USER;
use super::{quote, Statement, LIFT_SUPER_READ_ONLY, RESTORE_SUPER_READ_ONLY};

/// Seconds between a replica's attempts to reach its source: short, because after a change of
/// primary the Service reaches the new one within a second or two, and until a replica is
/// back the new primary's commits wait for its acknowledgement.
pub const CONNECT_RETRY_SECONDS: u32 = 1;

/// Lets the server take writes (a primary).
pub fn set_writable(engine: Engine) -> Vec<Statement> {
    match engine {
        Engine::MariaDb => vec![Statement::plain("SET GLOBAL read_only = OFF")],
        Engine::MySql => vec![
            Statement::plain(LIFT_SUPER_READ_ONLY),
            Statement::plain("SET GLOBAL read_only = OFF"),
        ],
    }
}

/// Stops writes from anyone but replication (a replica).
pub fn set_read_only(engine: Engine) -> Vec<Statement> {
    match engine {
        Engine::MariaDb => vec![Statement::plain("SET GLOBAL read_only = ON")],
        // super_read_only ON implies read_only ON.
        Engine::MySql => vec![
            Statement::plain("SET GLOBAL read_only = ON"),
            Statement::plain(RESTORE_SUPER_READ_ONLY),
        ],
    }
}

/// The primary starts (or stops) waiting for replicas' acknowledgements of its commits.
pub fn set_semi_sync_wait(engine: Engine, on: bool) -> Vec<Statement> {
    let name = match engine {
        Engine::MariaDb => "rpl_semi_sync_master_enabled",
        Engine::MySql => "rpl_semi_sync_source_enabled",
    };
    let value = if on { "ON" } else { "OFF" };
    vec![Statement::plain(format!("SET GLOBAL {name} = {value}"))]
}

fn replica_word(engine: Engine) -> &'static str {
    match engine {
        Engine::MariaDb => "SLAVE",
        Engine::MySql => "REPLICA",
    }
}

/// Stops receiving (the first step of a promotion: the relay log is applied before the rest).
pub fn stop_replication_io(engine: Engine) -> Vec<Statement> {
    vec![Statement::plain(format!(
        "STOP {} IO_THREAD",
        replica_word(engine)
    ))]
}

/// Stops both replication threads.
pub fn stop_replication(engine: Engine) -> Vec<Statement> {
    vec![Statement::plain(format!("STOP {}", replica_word(engine)))]
}

/// Forgets the replication source (a primary has none).
pub fn reset_replication(engine: Engine) -> Vec<Statement> {
    vec![Statement::plain(format!(
        "RESET {} ALL",
        replica_word(engine)
    ))]
}

/// Starts the applier only: a promoted replica applies what it received, from nobody.
pub fn start_replication_sql(engine: Engine) -> Vec<Statement> {
    vec![Statement::plain(format!(
        "START {} SQL_THREAD",
        replica_word(engine)
    ))]
}

pub fn start_replication(engine: Engine) -> Vec<Statement> {
    vec![Statement::plain(format!("START {}", replica_word(engine)))]
}

/// Starts both replication threads.
pub fn restart_replication_io(engine: Engine) -> Vec<Statement> {
    let w = replica_word(engine);
    vec![
        Statement::plain(format!("STOP {w} IO_THREAD")),
        Statement::plain(format!("START {w} IO_THREAD")),
    ]
}

/// Ends a promotion once everything received is applied: both threads stopped and the source
/// forgotten, in one step (a transaction cut short by the stopped receiver stays in the relay
/// log unapplied, so a stopped applier could not tell that it is done).
pub fn finish_promotion(engine: Engine) -> Vec<Statement> {
    let mut out = stop_replication(engine);
    out.extend(reset_replication(engine));
    out
}

/// Where a replica replicates from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Host (the cluster's primary Service).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Points replication at `source` with the replication account, by GTID. `adopt_gtid_pos`
/// (MariaDB) first sets the replica position to what this server has itself logged, which a
/// demoted primary needs: its own transactions are in its binary log, not in its
/// gtid_slave_pos. MySQL's auto-position works from gtid_executed and needs nothing.
pub fn change_source(
    engine: Engine,
    source: &Source,
    password: &str,
    adopt_gtid_pos: Option<&str>,
) -> Vec<Statement> {
    let mut out = Vec::new();
    match engine {
        Engine::MariaDb => {
            if let Some(pos) = adopt_gtid_pos {
                out.push(Statement::plain(format!(
                    "SET GLOBAL gtid_slave_pos = {}",
                    quote(pos)
                )));
            }
            out.push(Statement::with_secret(
                &format!(
                    "CHANGE MASTER TO MASTER_HOST = {}, MASTER_PORT = {}, MASTER_USER = {}, \
                     MASTER_PASSWORD = {{secret}}, MASTER_USE_GTID = slave_pos, \
                     MASTER_CONNECT_RETRY = {CONNECT_RETRY_SECONDS}",
                    quote(&source.host),
                    source.port,
                    quote(REPLICATION_USER)
                ),
                password,
            ));
        }
        Engine::MySql => out.push(Statement::with_secret(
            &format!(
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST = {}, SOURCE_PORT = {}, \
                 SOURCE_USER = {}, SOURCE_PASSWORD = {{secret}}, SOURCE_AUTO_POSITION = 1, \
                 GET_SOURCE_PUBLIC_KEY = 1, SOURCE_CONNECT_RETRY = {CONNECT_RETRY_SECONDS}",
                quote(&source.host),
                source.port,
                quote(REPLICATION_USER)
            ),
            password,
        )),
    }
    out
}

/// MySQL's statement that empties the binary log and the GTID history: `RESET BINARY LOGS AND
/// GTIDS` from 8.2 (8.4 no longer knows `RESET MASTER`), `RESET MASTER` before.
pub fn mysql_reset_binary_logs(server_version: &str) -> &'static str {
    if bulwark_engine::source::parse_version(server_version) >= (8, 2, 0) {
        "RESET BINARY LOGS AND GTIDS"
    } else {
        "RESET MASTER"
    }
}

/// Makes a server freshly restored from a physical backup continue from the backup's GTID
/// position `gtid_set` (empty: the backup has none), whatever its role: a restored datadir has
/// no binary log, so without this the primary's new transactions would restart the sequence
/// and replicas would ask for a position no binary log holds. Any replication configuration
/// that came with the backup (`stop_replication`) is removed first. The same on both roles, so
/// that a replica promoted later serves the others from a binary log that starts at the
/// backup's position.
///
/// MariaDB: `RESET MASTER`, `gtid_binlog_state` set to the position (for a seeded member, with
/// its donor's `history` up to it before: `gtid::seeded_history`) and `gtid_slave_pos` to the
/// position.
/// MySQL: the binary logs and GTID history reset, `gtid_purged` set to the set
/// (`super_read_only`, which would refuse that, lifted around it).
pub fn adopt_restored_gtid(
    engine: Engine,
    server_version: &str,
    gtid_set: &str,
    history: &str,
    stop_replication: bool,
    super_read_only: bool,
) -> Vec<Statement> {
    let mut out = Vec::new();
    let lift = engine == Engine::MySql && super_read_only;
    if lift {
        out.push(Statement::plain(LIFT_SUPER_READ_ONLY));
    }
    if stop_replication {
        out.extend(self::stop_replication(engine));
        out.extend(reset_replication(engine));
    }
    let gtid = quote(gtid_set);
    match engine {
        Engine::MariaDb => out.extend([
            Statement::plain("RESET MASTER"),
            Statement::plain(format!(
                "SET GLOBAL gtid_binlog_state = {}",
                quote(
                    &bulwark_contract::gtid::seeded_history(gtid_set, history)
                        .unwrap_or_else(|| gtid_set.to_owned())
                )
            )),
            Statement::plain(format!("SET GLOBAL gtid_slave_pos = {gtid}")),
        ]),
        Engine::MySql => {
            out.push(Statement::plain(mysql_reset_binary_logs(server_version)));
            if !gtid_set.is_empty() {
                out.push(Statement::plain(format!("SET GLOBAL gtid_purged = {gtid}")));
            }
        }
    }
    if lift {
        out.push(Statement::plain(RESTORE_SUPER_READ_ONLY));
    }
    out
}

/// Seconds a statement that needs the global read lock (read_only, the fence's lock) waits for
/// the commits in progress before the agent ends the client sessions and tries again. A commit
/// waiting for a semi-sync acknowledgement holds that lock until a replica answers, which after
/// a failover none may ever do; its session, once ended, is told it lost its connection, never
/// that it committed.
pub const LOCK_WAIT_SECONDS: u32 = 1;

/// The agent's session waits at most [`LOCK_WAIT_SECONDS`] for a lock.
pub fn short_lock_wait() -> Statement {
    Statement::plain(format!(
        "SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"
    ))
}

/// The agent's session waits for locks as the server's setting says again.
pub fn default_lock_wait() -> Statement {
    Statement::plain("SET SESSION lock_wait_timeout = DEFAULT")
}

/// The error of a statement whose lock did not come within `lock_wait_timeout` (both engines).
pub const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;

/// Holds every commit on the server, whatever the account's privileges, for as long as the
/// session that ran it lives (a demoted MariaDB primary, until its clients have moved).
pub const HOLD_WRITES: &str = "FLUSH TABLES WITH READ LOCK";

/// The error of `KILL` for a session that no longer exists.
pub const ER_NO_SUCH_THREAD: u16 = 1094;

/// Ends session `id` (its open transaction is rolled back).
pub fn kill_session(id: u64) -> Statement {
    Statement::plain(format!("KILL CONNECTION {id}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::sql::test_text::sql;

    #[test]
    fn role_statements_per_engine() {
        type Build = fn(Engine) -> Vec<Statement>;
        let cases: &[(Build, Engine, &[&str])] = &[
            (
                set_writable,
                Engine::MariaDb,
                &["SET GLOBAL read_only = OFF"],
            ),
            (
                set_writable,
                Engine::MySql,
                &[
                    "SET GLOBAL super_read_only = OFF",
                    "SET GLOBAL read_only = OFF",
                ],
            ),
            (
                set_read_only,
                Engine::MariaDb,
                &["SET GLOBAL read_only = ON"],
            ),
            (
                set_read_only,
                Engine::MySql,
                &[
                    "SET GLOBAL read_only = ON",
                    "SET GLOBAL super_read_only = ON",
                ],
            ),
            (
                stop_replication_io,
                Engine::MariaDb,
                &["STOP SLAVE IO_THREAD"],
            ),
            (
                stop_replication_io,
                Engine::MySql,
                &["STOP REPLICA IO_THREAD"],
            ),
            (stop_replication, Engine::MariaDb, &["STOP SLAVE"]),
            (stop_replication, Engine::MySql, &["STOP REPLICA"]),
            (reset_replication, Engine::MariaDb, &["RESET SLAVE ALL"]),
            (reset_replication, Engine::MySql, &["RESET REPLICA ALL"]),
            (start_replication, Engine::MariaDb, &["START SLAVE"]),
            (start_replication, Engine::MySql, &["START REPLICA"]),
        ];
        for (build, engine, want) in cases {
            assert_eq!(sql(&build(*engine)), *want, "{engine}");
        }
    }

    #[test]
    fn change_source_per_engine() {
        let source = Source {
            host: "harbor-primary".into(),
            port: 3306,
        };
        let maria = change_source(Engine::MariaDb, &source, "s3cr'et", None);
        assert_eq!(
            sql(&maria),
            [
                "CHANGE MASTER TO MASTER_HOST = 'harbor-primary', MASTER_PORT = 3306, \
              MASTER_USER = 'bulwark_replication', MASTER_PASSWORD = 's3cr\\'et', \
              MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1"
            ]
        );
        assert!(!maria[0].shown.contains("s3cr") && maria[0].shown.contains("<redacted>"));
        assert_eq!(format!("{:?}", maria[0]), maria[0].shown);
        let demoted = change_source(Engine::MariaDb, &source, "pw", Some("0-101-42"));
        assert_eq!(sql(&demoted)[0], "SET GLOBAL gtid_slave_pos = '0-101-42'");
        assert_eq!(demoted.len(), 2);
        let mysql = change_source(Engine::MySql, &source, "pw", Some("ignored"));
        assert_eq!(
            sql(&mysql),
            [
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'harbor-primary', SOURCE_PORT = 3306, \
              SOURCE_USER = 'bulwark_replication', SOURCE_PASSWORD = 'pw', \
              SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1, SOURCE_CONNECT_RETRY = 1"
            ]
        );
    }

    #[test]
    fn restored_gtid_adoption_per_engine_and_version() {
        let maria_set = "0-101-42,1-102-7";
        let mysql_set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5";
        type Case<'a> = (Engine, &'a str, &'a str, bool, bool, &'a [&'a str]);
        let cases: &[Case<'_>] = &[
            (
                Engine::MariaDb,
                "10.11.6-MariaDB",
                maria_set,
                false,
                false,
                &[
                    "RESET MASTER",
                    "SET GLOBAL gtid_binlog_state = '0-101-42,1-102-7'",
                    "SET GLOBAL gtid_slave_pos = '0-101-42,1-102-7'",
                ],
            ),
            (
                Engine::MariaDb,
                "11.4.2-MariaDB",
                "",
                true,
                true,
                &[
                    "STOP SLAVE",
                    "RESET SLAVE ALL",
                    "RESET MASTER",
                    "SET GLOBAL gtid_binlog_state = ''",
                    "SET GLOBAL gtid_slave_pos = ''",
                ],
            ),
            (
                Engine::MySql,
                "8.0.36",
                mysql_set,
                false,
                false,
                &[
                    "RESET MASTER",
                    "SET GLOBAL gtid_purged = '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'",
                ],
            ),
            (
                Engine::MySql,
                "8.4.3",
                mysql_set,
                true,
                true,
                &[
                    "SET GLOBAL super_read_only = OFF",
                    "STOP REPLICA",
                    "RESET REPLICA ALL",
                    "RESET BINARY LOGS AND GTIDS",
                    "SET GLOBAL gtid_purged = '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'",
                    "SET GLOBAL super_read_only = ON",
                ],
            ),
            (
                Engine::MySql,
                "8.2.0",
                "",
                false,
                false,
                &["RESET BINARY LOGS AND GTIDS"],
            ),
            (
                Engine::MySql,
                "8.1.0-commercial",
                "",
                false,
                false,
                &["RESET MASTER"],
            ),
        ];
        for (engine, version, gtid, stop, sro, want) in cases {
            assert_eq!(
                sql(&adopt_restored_gtid(
                    *engine, version, gtid, "", *stop, *sro
                )),
                *want,
                "{engine} {version}"
            );
        }
    }
}
