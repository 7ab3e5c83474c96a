//! Where each account's password comes from: a key of the user's Secret named in
//! `spec.credentials`, else the cluster's generated Secret. The accounts themselves are part of
//! the contract with the agent (`bulwark_contract::Account`).

use std::collections::BTreeMap;

use bulwark_api::{MySQLCluster, SecretKeyReference};
pub use bulwark_contract::Account;

use crate::names;

/// The spec field that names `account`'s Secret key, for messages.
pub fn spec_field(account: Account) -> &'static str {
    match account {
        Account::Root => "credentials.root",
        Account::Replication => "credentials.replication",
        Account::Backup => "credentials.backup",
        Account::Metrics => "credentials.metrics",
    }
}

/// Where each account's password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials(pub BTreeMap<Account, SecretKeyReference>);

impl Credentials {
    /// The Secret key holding `account`'s password.
    pub fn source(&self, account: Account) -> &SecretKeyReference {
        &self.0[&account]
    }

    /// Accounts whose password the operator generates.
    pub fn generated(&self, cluster: &str) -> Vec<Account> {
        let secret = names::credentials_secret(cluster);
        self.0
            .iter()
            .filter(|(a, r)| r.name == secret && r.key == a.key())
            .map(|(a, _)| *a)
            .collect()
    }
}

/// The Secret key the spec names for `account`, if any.
pub fn given(cluster: &MySQLCluster, account: Account) -> Option<&SecretKeyReference> {
    let user = cluster.spec.credentials.as_ref()?;
    match account {
        Account::Root => user.root.as_ref(),
        Account::Replication => user.replication.as_ref(),
        Account::Backup => user.backup.as_ref(),
        Account::Metrics => user.metrics.as_ref(),
    }
}

/// Where each account's password comes from: the user's Secret key, else the generated Secret.
pub fn credential_sources(cluster: &MySQLCluster) -> Credentials {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let map = Account::ALL
        .into_iter()
        .map(|account| {
            let source = given(cluster, account)
                .cloned()
                .unwrap_or_else(|| SecretKeyReference {
                    name: names::credentials_secret(name),
                    key: account.key().to_owned(),
                });
            (account, source)
        })
        .collect();
    Credentials(map)
}
