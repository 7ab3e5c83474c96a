//! The server's own guard on the primary's lease (MariaDB): a stamp the agent keeps in the
//! server (`mysql.bulwark_lease`, never logged) says until when this server may take writes,
//! and an event the server runs every second ends the client sessions and sets `read_only`
//! once the stamp is past. It fences a primary cut off from the operator whose agent is down
//! (crash-looping, killed), which nothing else would.
//!
//! The stamp names the server that wrote it (`report_host` and `server_id`), so a copy of
//! the datadir or a dump restored elsewhere never fences the server it lands on; it is in UTC,
//! so no time zone setting moves it. The event spares what the agent's own fence spares, and
//! root over the socket (the agent itself, whose fence session holds the global read lock).
//! Every statement here waits at most a second for a lock: a pass must never stall on the
//! watchdog behind a backup's or a client's lock (the agent's own fence comes first).

use super::accounts::{BACKUP_USER, EXPORTER_USER, REPLICATION_USER};
use super::{quote, Statement};

pub use bulwark_contract::lease::WATCHDOG_TABLE;

/// The event, in the same schema as its table.
pub const WATCHDOG_EVENT: &str = "mysql.bulwark_lease_watchdog";

/// The event's comment: a different one (an older agent's, or a hand-edited event) means the
/// event is created again.
pub const WATCHDOG_VERSION: &str = "bulwark lease watchdog v2";

/// How often the event looks at the stamp: a server is fenced within this after it is past.
pub const WATCHDOG_PERIOD_SECONDS: u32 = 1;

/// MariaDB's "table doesn't exist": no watchdog was ever installed on this server.
pub const ER_NO_SUCH_TABLE: u16 = 1146;

/// Where the watchdog stands on the server: `@@event_scheduler`, the event's status and
/// comment, and the stamp (microseconds until it is past, and whether this server wrote it).
pub const WATCHDOG_STATE_QUERY: &str = "SET STATEMENT lock_wait_timeout = 1, \
     max_statement_time = 2 FOR SELECT @@GLOBAL.event_scheduler, \
     (SELECT CONCAT(STATUS, ' ', EVENT_COMMENT) FROM information_schema.EVENTS \
      WHERE EVENT_SCHEMA = 'mysql' AND EVENT_NAME = 'bulwark_lease_watchdog'), \
     (SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), ends) FROM mysql.bulwark_lease WHERE id = 1), \
     (SELECT report_host = @@GLOBAL.report_host AND server_id = @@GLOBAL.server_id \
      FROM mysql.bulwark_lease WHERE id = 1)";

/// `@@event_scheduler` alone, on a server without the stamp's table.
pub const EVENT_SCHEDULER_QUERY: &str = "SELECT @@GLOBAL.event_scheduler";

/// What [`WATCHDOG_STATE_QUERY`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchdogState {
    /// The event scheduler runs.
    pub scheduler_on: bool,
    /// The event is there, enabled, and this agent's version.
    pub event_current: bool,
    /// The stamp: microseconds until it is past (negative once past), and whether it names
    /// this server; `None` without one.
    pub stamp: Option<(i64, bool)>,
}

impl WatchdogState {
    /// No table: nothing was ever installed.
    pub const ABSENT: WatchdogState = WatchdogState {
        scheduler_on: false,
        event_current: false,
        stamp: None,
    };

    /// A server without the stamp's table, whose scheduler is `scheduler` (as
    /// [`EVENT_SCHEDULER_QUERY`] reads it).
    pub fn without_table(scheduler: Option<&str>) -> WatchdogState {
        WatchdogState {
            scheduler_on: scheduler.is_some_and(|v| v.eq_ignore_ascii_case("ON")),
            ..WatchdogState::ABSENT
        }
    }

    /// Reads the row of [`WATCHDOG_STATE_QUERY`].
    pub fn parse(row: &[Option<String>]) -> WatchdogState {
        let col = |i: usize| row.get(i).cloned().flatten();
        WatchdogState {
            scheduler_on: col(0).is_some_and(|v| v.eq_ignore_ascii_case("ON")),
            event_current: col(1).is_some_and(|v| v == format!("ENABLED {WATCHDOG_VERSION}")),
            stamp: col(2)
                .and_then(|us| us.parse().ok())
                .map(|us| (us, col(3).as_deref() == Some("1"))),
        }
    }

    /// The event is in place (it runs while the scheduler does).
    pub fn installed(&self) -> bool {
        self.event_current
    }
}

/// The statement under a one-second lock wait.
fn briefly(sql: String) -> Statement {
    Statement::plain(format!(
        "SET STATEMENT lock_wait_timeout = 1, innodb_lock_wait_timeout = 1 FOR {sql}"
    ))
}

/// Creates the stamp's table if missing. Run on the agent's session, which logs nothing, as
/// everything here: no member replicates another's watchdog.
pub fn create_watchdog_table() -> Statement {
    briefly(format!(
        "CREATE TABLE IF NOT EXISTS {WATCHDOG_TABLE} (\
             id TINYINT UNSIGNED NOT NULL PRIMARY KEY, \
             report_host VARCHAR(255) NOT NULL, \
             server_id INT UNSIGNED NOT NULL, \
             ends DATETIME(6) NOT NULL\
             ) ENGINE=InnoDB COMMENT='bulwark: until when this server may take writes (UTC)'"
    ))
}

/// Creates the event (again, when another version is there).
pub fn install_watchdog_event() -> Vec<Statement> {
    vec![
        briefly(format!("DROP EVENT IF EXISTS {WATCHDOG_EVENT}")),
        briefly(watchdog_event()),
    ]
}

/// Starts or stops the event scheduler: on at a primary, which the watchdog guards; off at a
/// replica, where events copied from a primary (a seed, a former primary's own) would write
/// beside replication.
pub fn set_event_scheduler(on: bool) -> Statement {
    Statement::plain(format!(
        "SET GLOBAL event_scheduler = {}",
        if on { "ON" } else { "OFF" }
    ))
}

/// The event. Sessions are ended before `read_only` is set: a commit waiting for a semi-sync
/// acknowledgement no replica can give would hold `SET GLOBAL read_only` for ever. A session
/// that ended meanwhile is skipped; any other failure (a lock wait) ends the run, and the next
/// one, a second later, tries again. The stamp is
/// read again just before `read_only` is set, so that a run that began before the agent
/// renewed the stamp and made the server writable does not undo that.
fn watchdog_event() -> String {
    format!(
        "CREATE DEFINER = CURRENT_USER EVENT {WATCHDOG_EVENT} \
         ON SCHEDULE EVERY {WATCHDOG_PERIOD_SECONDS} SECOND ON COMPLETION PRESERVE ENABLE \
         COMMENT {version} DO BEGIN \
           DECLARE done INT DEFAULT 0; \
           DECLARE victim BIGINT UNSIGNED; \
           DECLARE sessions CURSOR FOR SELECT ID FROM information_schema.PROCESSLIST \
             WHERE ID <> CONNECTION_ID() AND NOT (USER = 'root' AND HOST = 'localhost') \
             AND USER NOT IN ('system user', 'event_scheduler', 'unauthenticated user', \
               {repl}, {backup}, {exporter}) \
             AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID', 'Killed'); \
           DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1; \
           DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN END; \
           IF EXISTS ({past}) THEN \
             SET SESSION lock_wait_timeout = 1; \
             OPEN sessions; \
             ending: LOOP \
               FETCH sessions INTO victim; \
               IF done OR victim IS NULL THEN LEAVE ending; END IF; \
               BEGIN \
                 DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END; \
                 KILL CONNECTION victim; \
               END; \
             END LOOP; \
             CLOSE sessions; \
             IF EXISTS ({past}) THEN SET GLOBAL read_only = ON; END IF; \
           END IF; \
         END",
        past = format!(
            "SELECT 1 FROM {WATCHDOG_TABLE} WHERE id = 1 AND ends < UTC_TIMESTAMP(6) \
             AND report_host = @@GLOBAL.report_host AND server_id = @@GLOBAL.server_id"
        ),
        version = quote(WATCHDOG_VERSION),
        repl = quote(REPLICATION_USER),
        backup = quote(BACKUP_USER),
        exporter = quote(EXPORTER_USER),
    )
}

/// Stamps this server writable for `left_us` microseconds from now. Messages show the
/// statement without the number, so that a failure repeated with another one reads the same.
pub fn stamp_watchdog(left_us: u64) -> Statement {
    let stamp = |left: &str| {
        briefly(format!(
            "REPLACE INTO {WATCHDOG_TABLE} (id, report_host, server_id, ends) VALUES \
             (1, @@GLOBAL.report_host, @@GLOBAL.server_id, \
             UTC_TIMESTAMP(6) + INTERVAL {left} MICROSECOND)"
        ))
    };
    Statement {
        shown: stamp("<the lease's remainder>").shown,
        sql: stamp(&left_us.to_string()).sql,
    }
}

/// Removes the stamp: the server is not a primary that needs one.
pub fn clear_watchdog() -> Statement {
    briefly(format!("DELETE FROM {WATCHDOG_TABLE} WHERE id = 1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &[Option<&str>]) -> Vec<Option<String>> {
        v.iter().map(|c| c.map(str::to_owned)).collect()
    }

    #[test]
    fn the_state_row_is_read_by_its_columns() {
        let current = format!("ENABLED {WATCHDOG_VERSION}");
        let cases = [
            (
                "installed, stamped by this server",
                row(&[Some("ON"), Some(&current), Some("2500000"), Some("1")]),
                WatchdogState {
                    scheduler_on: true,
                    event_current: true,
                    stamp: Some((2_500_000, true)),
                },
            ),
            (
                "a past stamp from another server",
                row(&[Some("ON"), Some(&current), Some("-40"), Some("0")]),
                WatchdogState {
                    scheduler_on: true,
                    event_current: true,
                    stamp: Some((-40, false)),
                },
            ),
            (
                "scheduler off, an older event disabled, no stamp",
                row(&[
                    Some("OFF"),
                    Some("DISABLED bulwark lease watchdog v0"),
                    None,
                    None,
                ]),
                WatchdogState::ABSENT,
            ),
            (
                "the event disabled by hand",
                row(&[
                    Some("ON"),
                    Some(&format!("DISABLED {WATCHDOG_VERSION}")),
                    None,
                    None,
                ]),
                WatchdogState {
                    scheduler_on: true,
                    event_current: false,
                    stamp: None,
                },
            ),
        ];
        for (name, r, want) in cases {
            assert_eq!(WatchdogState::parse(&r), want, "{name}");
        }
    }

    #[test]
    fn nothing_the_watchdog_sends_is_logged_or_names_a_secret() {
        let all: Vec<String> = install_watchdog_event()
            .into_iter()
            .chain([create_watchdog_table(), stamp_watchdog(1), clear_watchdog()])
            .map(|s| s.sql.to_string())
            .collect();
        // None waits long for a lock, and time is UTC throughout.
        for s in &all {
            assert!(s.starts_with("SET STATEMENT lock_wait_timeout = 1,"), "{s}");
            assert!(!s.contains("NOW("), "{s}");
        }
        // The event spares the accounts the agent's fence spares, and its own table is the
        // one the state query reads.
        let event = watchdog_event();
        for user in [REPLICATION_USER, BACKUP_USER, EXPORTER_USER] {
            assert!(event.contains(&quote(user)), "{user}");
        }
        assert!(WATCHDOG_STATE_QUERY.contains(WATCHDOG_TABLE));
        assert!(WATCHDOG_STATE_QUERY.starts_with("SET STATEMENT lock_wait_timeout = 1,"));
        assert_eq!(
            WatchdogState::without_table(Some("ON")),
            WatchdogState {
                scheduler_on: true,
                ..WatchdogState::ABSENT
            }
        );
        // A failed KILL (the session ended meanwhile) goes on; any other failure ends the
        // run rather than loop.
        assert!(event.contains("DECLARE EXIT HANDLER FOR SQLEXCEPTION"));
        assert!(event.contains("IF done OR victim IS NULL THEN LEAVE ending"));
        assert!(WATCHDOG_EVENT.ends_with("bulwark_lease_watchdog"));
        assert!(WATCHDOG_STATE_QUERY.contains("'bulwark_lease_watchdog'"));
        // Sessions end before read_only is set (a commit waiting for an acknowledgement would
        // hold it).
        assert!(event.find("KILL CONNECTION") < event.find("SET GLOBAL read_only = ON"));
        assert_eq!(event.matches("ends < UTC_TIMESTAMP(6)").count(), 2);
    }
}
