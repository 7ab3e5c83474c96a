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
/// Server metrics (the `metrics` port): the agent answers `/metrics` on it with what the
/// exporter sidecar gives it over loopback, and answers nothing else.
pub const EXPORTER: u16 = 9104;
/// The mysqld exporter itself, on the pod's loopback address only: it also serves `/probe`,
/// which logs in with its account to any server a caller names, so no other pod may reach it.
pub const EXPORTER_LOOPBACK: u16 = 9105;
