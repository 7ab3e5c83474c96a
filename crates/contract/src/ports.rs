//! Ports the server pods listen on.

/// The MySQL protocol (mysqld; the Services' `mysql` port).
pub const MYSQL: u16 = 3306;
/// The agent sidecar: `/healthz`, `/readyz`.
pub const AGENT: u16 = 9081;
/// The mysqld exporter sidecar's metrics.
pub const EXPORTER: u16 = 9104;
