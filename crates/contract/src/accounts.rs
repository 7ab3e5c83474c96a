//! The accounts the operator provides passwords for and the agent keeps on every server.

/// An account whose password the operator provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Account {
    /// The server's administrator; only the agent uses it, over the local socket.
    Root,
    /// Replicas replicate with it.
    Replication,
    /// Backup Jobs read the server with it.
    Backup,
    /// The metrics exporter reads status with it.
    Metrics,
}

impl Account {
    /// Every account, in the order the operator builds and the agent reads them.
    pub const ALL: [Account; 4] = [
        Account::Root,
        Account::Replication,
        Account::Backup,
        Account::Metrics,
    ];

    /// The MySQL user name.
    pub const fn user(self) -> &'static str {
        match self {
            Account::Root => "root",
            Account::Replication => "bulwark_replication",
            Account::Backup => "bulwark_backup",
            Account::Metrics => "bulwark_exporter",
        }
    }

    /// The password's key in the generated Secret, and its file name in the credentials
    /// directory of the server pods.
    pub const fn key(self) -> &'static str {
        match self {
            Account::Root => "root",
            Account::Replication => "replication",
            Account::Backup => "backup",
            Account::Metrics => "metrics",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_keys_are_distinct() {
        let users: std::collections::BTreeSet<_> = Account::ALL.iter().map(|a| a.user()).collect();
        let keys: std::collections::BTreeSet<_> = Account::ALL.iter().map(|a| a.key()).collect();
        assert_eq!((users.len(), keys.len()), (4, 4));
    }
}
