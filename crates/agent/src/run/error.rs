//! The agent's errors. Only [`AgentError::Listen`] ends it; the others make a pass fail and
//! show in `/readyz`.

use std::net::SocketAddr;

use super::bootstrap;

/// Why a pass (or, for `Listen`, the agent) failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("failed to listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the labels file {path}")]
    ReadLabels {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the credentials file {path}")]
    ReadCredentials {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to connect to mysqld at {target}")]
    Connect {
        target: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to observe mysqld ({what})")]
    Observe {
        what: &'static str,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to send `{statement}`")]
    SendStatement {
        statement: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to run `{statement}`: error {code}: {message}")]
    RunStatement {
        statement: String,
        code: u16,
        message: String,
    },
    #[error("failed to resolve the primary's name {host}")]
    ResolvePrimary { host: String },
    #[error("failed to read the primary's GTID position at {target}: no answer within {seconds}s")]
    ReadPrimaryPositionTimedOut { target: String, seconds: u64 },
    #[error("failed to read the primary's GTID position at {target}")]
    ReadPrimaryPosition {
        target: String,
        #[source]
        source: Box<mysql_async::Error>,
    },
    #[error("failed to load backup {id}")]
    LoadPendingRestore {
        id: String,
        #[source]
        source: Box<bulwark_pitr::Error>,
    },
    #[error("failed to remove the pending logical restore {path}")]
    RemovePending {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to finish adopting the restored GTID position")]
    FinishGtidAdoption(#[source] bootstrap::BootstrapError),
}

impl AgentError {
    /// Whether the connection to mysqld is unusable after this error.
    pub(super) fn connection_lost(&self) -> bool {
        matches!(
            self,
            AgentError::Connect { .. }
                | AgentError::Observe { .. }
                | AgentError::SendStatement { .. }
        )
    }
}
