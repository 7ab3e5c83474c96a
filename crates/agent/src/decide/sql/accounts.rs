//! The accounts the agent keeps on every member (replication, backup, metrics): their
//! privileges and the statements that create them or bring their passwords up to date.

use bulwark_contract::{Account, Engine};

use super::{quote, session_setup, Statement, LIFT_SUPER_READ_ONLY, RESTORE_SUPER_READ_ONLY};

/// Replication account (REPLICATION SLAVE).
pub const REPLICATION_USER: &str = Account::Replication.user();

/// Backup account: what mariabackup/xtrabackup and mariadb-dump/mysqldump need.
pub const BACKUP_USER: &str = Account::Backup.user();

/// Metrics exporter account.
pub const EXPORTER_USER: &str = Account::Metrics.user();

/// Where each account may connect from. Replication and backups come from other pods; the
/// exporter only from its own pod's loopback, so its password is worth nothing elsewhere.
pub fn account_host(user: &str) -> &'static str {
    match user {
        EXPORTER_USER => "127.0.0.1",
        _ => "%",
    }
}

/// Connection cap of the exporter account.
pub const EXPORTER_MAX_CONNECTIONS: u32 = 3;

/// Passwords of the accounts the agent keeps.
pub struct AccountPasswords<'a> {
    /// For [`REPLICATION_USER`].
    pub replication: &'a str,
    /// For [`BACKUP_USER`].
    pub backup: &'a str,
    /// For [`EXPORTER_USER`].
    pub exporter: &'a str,
}

/// Global privileges of each account.
pub fn grants(engine: Engine, user: &str) -> &'static str {
    match (engine, user) {
        (_, REPLICATION_USER) => "REPLICATION SLAVE",
        // REPLICATION SLAVE: the binlog archiver streams the binary logs with this account.
        (Engine::MariaDb, BACKUP_USER) => {
            "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR, CONNECTION ADMIN, \
             REPLICATION SLAVE, SELECT, SHOW VIEW, EVENT, TRIGGER, EXECUTE, SHOW DATABASES"
        }
        (Engine::MySql, BACKUP_USER) => {
            "RELOAD, PROCESS, LOCK TABLES, REPLICATION CLIENT, BACKUP_ADMIN, \
             SELECT, SHOW VIEW, EVENT, TRIGGER, EXECUTE, SHOW DATABASES"
        }
        // The exporter's default collectors read status, variables, replication and
        // information_schema's InnoDB tables: no table data, so no SELECT. MariaDB 10.5.9+
        // wants SLAVE MONITOR for SHOW SLAVE STATUS (replication metrics).
        (Engine::MariaDb, _) => "PROCESS, REPLICATION CLIENT, SLAVE MONITOR",
        (Engine::MySql, _) => "PROCESS, REPLICATION CLIENT",
    }
}

/// Creates the three accounts if missing and converges their passwords and privileges, with
/// binary logging off for the session (the statements stay local, and work on replicas).
/// `super_read_only` (MySQL) blocks even root, so it is lifted around the change; read_only
/// stays on meanwhile.
pub fn ensure_accounts(
    engine: Engine,
    passwords: &AccountPasswords<'_>,
    super_read_only: bool,
) -> Vec<Statement> {
    let mut out = session_setup();
    let lift = engine == Engine::MySql && super_read_only;
    if lift {
        out.push(Statement::plain(LIFT_SUPER_READ_ONLY));
    }
    out.extend(account_statements(engine, passwords));
    if lift {
        out.push(Statement::plain(RESTORE_SUPER_READ_ONLY));
    }
    out
}

fn account_statements(engine: Engine, passwords: &AccountPasswords<'_>) -> Vec<Statement> {
    let mut out = Vec::new();
    let exporter_limits = format!(" WITH MAX_USER_CONNECTIONS {EXPORTER_MAX_CONNECTIONS}");
    let accounts = [
        (REPLICATION_USER, passwords.replication, ""),
        (BACKUP_USER, passwords.backup, ""),
        (EXPORTER_USER, passwords.exporter, exporter_limits.as_str()),
    ];
    // Earlier releases let the exporter's account connect from anywhere and read every table.
    out.push(Statement::plain(format!(
        "DROP USER IF EXISTS {}@'%'",
        quote(EXPORTER_USER)
    )));
    for (user, password, limits) in accounts {
        let account = format!("{}@'{}'", quote(user), account_host(user));
        out.push(Statement::with_secret(
            &format!("CREATE USER IF NOT EXISTS {account} IDENTIFIED BY {{secret}}{limits}"),
            password,
        ));
        out.push(Statement::with_secret(
            &format!("ALTER USER {account} IDENTIFIED BY {{secret}}{limits}"),
            password,
        ));
        out.push(Statement::plain(format!(
            "GRANT {} ON *.* TO {account}",
            grants(engine, user)
        )));
    }
    out
}

/// After a logical restore replaced the privilege tables on the primary: the accounts and
/// root's password back to the cluster's, with binary logging on. The dump's privilege tables
/// reached the replicas through the binary log; these statements follow them there, so that
/// every member ends with this cluster's passwords, not the backup's source's.
pub fn converge_after_load(
    engine: Engine,
    passwords: &AccountPasswords<'_>,
    root_password: Option<&str>,
) -> Vec<Statement> {
    let mut out = vec![
        Statement::plain("SET SESSION sql_mode = ''"),
        Statement::plain("SET SESSION sql_log_bin = 1"),
    ];
    out.extend(account_statements(engine, passwords));
    for host in ["localhost", "%"] {
        if let Some(root) = root_password {
            out.push(Statement::with_secret(
                &format!("ALTER USER IF EXISTS 'root'@'{host}' IDENTIFIED BY {{secret}}"),
                root,
            ));
        }
    }
    // The agent's later statements on this connection stay local again.
    out.push(Statement::plain("SET SESSION sql_log_bin = 0"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::sql::test_text::{shown, sql};

    #[test]
    fn accounts_after_a_load_are_converged_through_the_binary_log() {
        let passwords = AccountPasswords {
            replication: "r-pw",
            backup: "b-pw",
            exporter: "e-pw",
        };
        let st = converge_after_load(Engine::MariaDb, &passwords, Some("root-pw"));
        let text = sql(&st);
        assert_eq!(text[1], "SET SESSION sql_log_bin = 1");
        assert_eq!(text.last().unwrap(), "SET SESSION sql_log_bin = 0");
        for (user, host) in [
            (REPLICATION_USER, "%"),
            (BACKUP_USER, "%"),
            (EXPORTER_USER, "127.0.0.1"),
        ] {
            assert!(
                text.iter()
                    .any(|t| t.starts_with(&format!("ALTER USER '{user}'@'{host}'"))),
                "{user}: {text:?}"
            );
        }
        assert!(text
            .iter()
            .any(|t| t == "ALTER USER IF EXISTS 'root'@'%' IDENTIFIED BY 'root-pw'"));
        let shown = shown(&st).join("\n");
        for secret in ["r-pw", "b-pw", "e-pw", "root-pw"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        // Without a root password, root is left as the backup had it.
        let text = sql(&converge_after_load(Engine::MariaDb, &passwords, None));
        assert!(!text.iter().any(|t| t.contains("'root'")), "{text:?}");
    }

    #[test]
    fn accounts_per_engine() {
        let pw = AccountPasswords {
            replication: "r-pw",
            backup: "b-pw",
            exporter: "e-pw",
        };
        let maria = ensure_accounts(Engine::MariaDb, &pw, true);
        let text = sql(&maria);
        assert_eq!(text[1], "SET SESSION sql_log_bin = 0");
        assert!(text.contains(
            &"CREATE USER IF NOT EXISTS 'bulwark_replication'@'%' IDENTIFIED BY 'r-pw'".to_string()
        ));
        assert!(text.contains(
            &"ALTER USER 'bulwark_exporter'@'127.0.0.1' IDENTIFIED BY 'e-pw' WITH MAX_USER_CONNECTIONS 3"
                .to_string()
        ));
        assert!(text.contains(&"DROP USER IF EXISTS 'bulwark_exporter'@'%'".to_string()));
        assert!(text.contains(
            &"GRANT PROCESS, REPLICATION CLIENT, SLAVE MONITOR ON *.* TO 'bulwark_exporter'@'127.0.0.1'"
                .to_string()
        ));
        assert!(text
            .contains(&"GRANT REPLICATION SLAVE ON *.* TO 'bulwark_replication'@'%'".to_string()));
        assert!(text
            .iter()
            .any(|s| s.starts_with("GRANT RELOAD") && s.contains("BINLOG MONITOR")));
        assert!(
            !text.iter().any(|s| s.contains("super_read_only")),
            "MariaDB has none"
        );
        for s in shown(&maria) {
            assert!(!s.contains("-pw"), "password in {s}");
        }

        let mysql = sql(&ensure_accounts(Engine::MySql, &pw, true));
        assert_eq!(mysql[2], "SET GLOBAL super_read_only = OFF");
        assert_eq!(mysql.last().unwrap(), "SET GLOBAL super_read_only = ON");
        assert!(mysql.iter().any(|s| s.starts_with("GRANT RELOAD")
            && s.contains("BACKUP_ADMIN")
            && s.contains("REPLICATION CLIENT")));
        let writable = sql(&ensure_accounts(Engine::MySql, &pw, false));
        assert!(!writable.iter().any(|s| s.contains("super_read_only")));
        assert!(writable.contains(
            &"GRANT PROCESS, REPLICATION CLIENT ON *.* TO 'bulwark_exporter'@'127.0.0.1'"
                .to_string()
        ));
    }
}
