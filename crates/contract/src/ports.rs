//! Ports the server pods listen on.

/// The MySQL protocol (mysqld; the Services' `mysql` port).
pub const MYSQL: u16 = 3306;
/// The agent sidecar: `/healthz`, `/readyz`.
pub const AGENT: u16 = 9081;
/// The agent's clone stream: a new member's `seed` container copies a running member's data
/// from it (`clone`).
pub const CLONE: u16 = 9082;
/// The binlog archiver's `/status`.
pub const ARCHIVER: u16 = 9083;
/// The mysqld exporter sidecar's metrics.
pub const EXPORTER: u16 = 9104;
