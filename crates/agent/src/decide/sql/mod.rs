//! The SQL the agent sends and the queries it observes with, per engine, as pure functions: no
//! connection is made here. `accounts` converges the operator's accounts, `role` switches a
//! server between primary and replica (read-only, semi-sync, replication, a restored GTID
//! position, fencing), `watchdog` keeps the server's own guard on the primary's lease,
//! `observe` holds each query beside the parser of its answer, and `load` the start over of a
//! logical load.
//! Statements carrying a password keep a redacted form for messages.

mod accounts;
mod load;
mod observe;
mod role;
mod watchdog;

pub use accounts::*;
pub use load::*;
pub use observe::*;
pub use role::*;
pub use watchdog::*;

use zeroize::Zeroizing;

/// One statement; `shown` is what logs and errors may print (passwords replaced).
pub struct Statement {
    /// The SQL sent.
    pub sql: Zeroizing<String>,
    /// The SQL with secrets replaced by `<redacted>`.
    pub shown: String,
}

impl Statement {
    fn plain(sql: impl Into<String>) -> Self {
        let sql = sql.into();
        Statement {
            shown: sql.clone(),
            sql: Zeroizing::new(sql),
        }
    }

    /// Builds a statement from a template where `{secret}` stands for a quoted password.
    fn with_secret(template: &str, secret: &str) -> Self {
        Statement {
            sql: Zeroizing::new(template.replace("{secret}", &quote(secret))),
            shown: template.replace("{secret}", "<redacted>"),
        }
    }
}

impl std::fmt::Debug for Statement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// A single-quoted SQL string literal (backslash escapes: the agent's session clears
/// sql_mode, so NO_BACKSLASH_ESCAPES is off).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x1a' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Makes the agent's session predictable: no sql_mode (so backslash escapes work in
/// [`quote`]d literals; nothing the agent sends depends on a mode), nothing it does replicated.
pub fn session_setup() -> Vec<Statement> {
    vec![
        Statement::plain("SET SESSION sql_mode = ''"),
        Statement::plain("SET SESSION sql_log_bin = 0"),
    ]
}

/// Lifts MySQL's super_read_only around a change on a read-only server.
pub const LIFT_SUPER_READ_ONLY: &str = "SET GLOBAL super_read_only = OFF";

/// Puts it back.
pub const RESTORE_SUPER_READ_ONLY: &str = "SET GLOBAL super_read_only = ON";

/// What to send after statement `failed` of `statements` failed: when the list had lifted
/// super_read_only and its restoring statement was not reached, that statement, so that a
/// failed change never leaves a replica writable by privileged accounts.
pub fn after_failure(statements: &[Statement], failed: usize) -> Vec<Statement> {
    let executed = &statements[..failed.min(statements.len())];
    let lifted = executed
        .iter()
        .rposition(|s| s.sql.as_str() == LIFT_SUPER_READ_ONLY);
    let restored = executed
        .iter()
        .rposition(|s| s.sql.as_str() == RESTORE_SUPER_READ_ONLY);
    match (lifted, restored) {
        (Some(l), r) if r.is_none_or(|r| r < l) => {
            vec![Statement::plain(RESTORE_SUPER_READ_ONLY)]
        }
        _ => Vec::new(),
    }
}

/// The SQL and the printable form of statements, for the tests of each kind.
#[cfg(test)]
mod test_text {
    use super::Statement;

    pub(super) fn sql(statements: &[Statement]) -> Vec<String> {
        statements.iter().map(|s| s.sql.to_string()).collect()
    }

    pub(super) fn shown(statements: &[Statement]) -> Vec<String> {
        statements.iter().map(|s| s.shown.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_text::sql;
    use super::*;
    use bulwark_contract::Engine;

    #[test]
    fn quoting_escapes_what_could_end_the_literal() {
        let cases = [
            ("plain", "'plain'"),
            ("it's", "'it\\'s'"),
            ("back\\slash", "'back\\\\slash'"),
            ("nl\nnul\0", "'nl\\nnul\\0'"),
        ];
        for (raw, quoted) in cases {
            assert_eq!(quote(raw), quoted, "{raw:?}");
        }
    }

    #[test]
    fn a_failure_after_lifting_super_read_only_restores_it() {
        let passwords = AccountPasswords {
            replication: "r",
            backup: "b",
            exporter: "e",
        };
        let lifted = ensure_accounts(Engine::MySql, &passwords, true);
        let lift_at = lifted
            .iter()
            .position(|s| s.sql.as_str() == LIFT_SUPER_READ_ONLY)
            .unwrap();
        // Failing before the lift ran: nothing to restore.
        assert!(after_failure(&lifted, lift_at).is_empty());
        // Failing on any statement after it: super_read_only goes back on.
        for failed in lift_at + 1..lifted.len() - 1 {
            assert_eq!(
                sql(&after_failure(&lifted, failed)),
                [RESTORE_SUPER_READ_ONLY],
                "{failed}"
            );
        }
        // Nothing lifted (MariaDB, or already writable): nothing to restore.
        let plain = ensure_accounts(Engine::MariaDb, &passwords, true);
        assert!(after_failure(&plain, plain.len() - 1).is_empty());
        // A seeded member's history continues its donor's up to the copy's position.
        let seeded = adopt_restored_gtid(
            Engine::MariaDb,
            "10.11.9-MariaDB",
            "0-101-600",
            "0-100-500,0-101-590",
            false,
            false,
        );
        assert_eq!(
            sql(&seeded)[1],
            "SET GLOBAL gtid_binlog_state = '0-100-500,0-101-600'"
        );
        let adopt = adopt_restored_gtid(Engine::MySql, "8.4.3", "u:1-5", "", true, true);
        assert_eq!(sql(&after_failure(&adopt, 2)), [RESTORE_SUPER_READ_ONLY]);
    }
}
