//! The passwords the agent reads from the mounted credentials directory on every pass (a
//! rotated Secret is seen without a restart), digests that tell whether the accounts carry
//! them, and the root connection to the local server.

use std::path::Path;

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use bulwark_contract::Account;
use bulwark_engine::source::Connection;

use super::error::AgentError;

/// Passwords from the credentials directory.
pub(super) struct Credentials {
    pub(super) root: Option<Zeroizing<String>>,
    pub(super) replication: Zeroizing<String>,
    pub(super) backup: Zeroizing<String>,
    pub(super) exporter: Zeroizing<String>,
}

impl Credentials {
    pub(super) fn read(dir: &Path) -> Result<Self, AgentError> {
        let required = |name: &str| -> Result<Zeroizing<String>, AgentError> {
            let path = dir.join(name);
            read_secret(&path)?.ok_or_else(|| AgentError::ReadCredentials {
                path: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the file does not exist",
                ),
            })
        };
        Ok(Credentials {
            root: read_secret(&dir.join(Account::Root.key()))?,
            replication: required(Account::Replication.key())?,
            backup: required(Account::Backup.key())?,
            exporter: required(Account::Metrics.key())?,
        })
    }

    /// Identifies the account passwords (not reversible; only compared).
    pub(super) fn accounts_digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for p in [&self.replication, &self.backup, &self.exporter] {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        h.finalize().into()
    }

    pub(super) fn replication_digest(&self) -> [u8; 32] {
        Sha256::digest(self.replication.as_bytes()).into()
    }

    pub(super) fn connection(&self, socket: &Path) -> Connection {
        connection(socket, self.root.clone())
    }
}

pub(super) fn connection(socket: &Path, root: Option<Zeroizing<String>>) -> Connection {
    Connection {
        socket: Some(socket.to_path_buf()),
        host: None,
        port: None,
        user: Some(Account::Root.user().into()),
        password: root,
    }
}

/// A password file's content without its trailing newline; `None` when the file is absent.
pub fn read_secret(path: &Path) -> Result<Option<Zeroizing<String>>, AgentError> {
    crate::run::files::read_secret(path).map_err(|source| AgentError::ReadCredentials {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_lose_their_trailing_newline_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("root");
        assert!(read_secret(&p).unwrap().is_none());
        for (content, want) in [
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            (" pw \n\n", " pw "),
            ("", ""),
        ] {
            std::fs::write(&p, content).unwrap();
            assert_eq!(
                read_secret(&p).unwrap().unwrap().as_str(),
                want,
                "{content:?}"
            );
        }
    }
}
