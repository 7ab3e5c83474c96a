//! Semi-synchronous replication: the server options that make a primary return a commit only
//! once enough replicas have it (in their relay logs, written after the primary's binary log is
//! synced: the after-sync wait point), so that a promoted replica has every acknowledged write.
//! The operator writes them into the cluster's configuration; the agent's tests start real
//! servers with the same options.

use std::time::Duration;

use crate::Engine;

/// What the cluster's spec asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemiSync {
    /// Replicas that must acknowledge a commit; 0: asynchronous replication.
    pub acks: u32,
    /// How long a commit waits before the primary gives up and continues asynchronously;
    /// `None`: as long as it takes (a commit never returns unacknowledged).
    pub timeout: Option<Duration>,
    /// Members of the cluster: a single server has nobody to wait for.
    pub members: u32,
}

/// The largest wait both engines accept, in milliseconds: `None` becomes this (about 49 days),
/// which in practice never expires.
pub const WAIT_FOREVER_MS: u64 = u32::MAX as u64;

impl SemiSync {
    /// The primary waits for acknowledgements.
    pub fn waits(&self) -> bool {
        self.acks > 0 && self.members > 1
    }

    fn timeout_ms(&self) -> u64 {
        self.timeout
            .map(|t| (t.as_millis() as u64).clamp(1, WAIT_FOREVER_MS))
            .unwrap_or(WAIT_FOREVER_MS)
    }

    /// Replicas the agent of each member is told to wait for (`--semi-sync-acks`): 0 when
    /// the primary never waits.
    pub fn agent_acks(&self) -> u32 {
        if self.waits() {
            self.acks
        } else {
            0
        }
    }

    /// The `[mysqld]` options, in a stable order. Every member gets both sides: a replica
    /// acknowledges what it receives, and a primary's agent turns the wait on before it lifts
    /// `read_only` (it starts off: a server starts read-only, and the setting does not survive a
    /// restart). MySQL's are plugin options: its plugins are loaded with `plugin_load_add`
    /// (merged with a user's own list by the caller).
    pub fn server_options(&self, engine: Engine) -> Vec<(&'static str, String)> {
        let on_off = |b: bool| if b { "ON" } else { "OFF" }.to_owned();
        let timeout = self.timeout_ms().to_string();
        match engine {
            Engine::MariaDb => vec![
                ("rpl_semi_sync_master_enabled", on_off(false)),
                ("rpl_semi_sync_master_timeout", timeout),
                ("rpl_semi_sync_master_wait_no_slave", on_off(true)),
                ("rpl_semi_sync_master_wait_point", "AFTER_SYNC".to_owned()),
                ("rpl_semi_sync_slave_enabled", on_off(self.acks > 0)),
            ],
            Engine::MySql => vec![
                ("rpl_semi_sync_replica_enabled", on_off(self.acks > 0)),
                ("rpl_semi_sync_source_enabled", on_off(false)),
                ("rpl_semi_sync_source_timeout", timeout),
                (
                    "rpl_semi_sync_source_wait_for_replica_count",
                    self.acks.max(1).to_string(),
                ),
                ("rpl_semi_sync_source_wait_no_replica", on_off(true)),
                ("rpl_semi_sync_source_wait_point", "AFTER_SYNC".to_owned()),
            ],
        }
    }

    /// MySQL's semi-sync plugins (8.0.26 and later names), for `plugin_load_add`.
    pub const MYSQL_PLUGINS: &'static str = "semisync_source.so;semisync_replica.so";
}

/// Why a server of `engine` at `version` must not run a primary under these settings, if it
/// must not. MariaDB before the fix of MDEV-33465 (10.6.19, 10.11.9, 11.1.6, 11.2.5, 11.4.3)
/// truncates its binary log on crash recovery whenever `rpl_semi_sync_slave_enabled` is on,
/// which every member has: a primary that restarts after a crash drops transactions its
/// replicas already hold, and the cluster diverges silently. Fixed servers truncate only when
/// started as a replica (`init_rpl_role`).
pub fn lossy_crash_recovery(engine: Engine, version: &str) -> Option<String> {
    if engine != Engine::MariaDb {
        return None;
    }
    let v = crate::engine::parse_version(version);
    let floor = match (v.0, v.1) {
        (10, 6) => (10, 6, 19),
        (10, 11) => (10, 11, 9),
        (11, 1) => (11, 1, 6),
        (11, 2) => (11, 2, 5),
        (11, 4) => (11, 4, 3),
        (major, minor) if (major, minor) > (11, 4) => return None,
        // Series without the fix (10.7-10.10, 11.0, 11.3, older).
        _ => (11, 4, 3),
    };
    (v < floor).then(|| {
        format!(
            "MariaDB {version} truncates its binary log on crash recovery under semi-synchronous \
             replication (MDEV-33465), so a primary that crashed could drop acknowledged \
             transactions its replicas hold; it is not made writable: run {}.{}.{} or later",
            floor.0, floor.1, floor.2
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_with_lossy_crash_recovery_is_named() {
        for (version, lossy) in [
            ("10.11.8-MariaDB-log", true),
            ("10.11.9-MariaDB", false),
            ("10.11.19-MariaDB-0+deb12u1", false),
            ("10.6.18-MariaDB", true),
            ("10.6.19-MariaDB", false),
            ("11.4.2-MariaDB", true),
            ("11.4.3-MariaDB", false),
            ("11.0.6-MariaDB", true),
            ("11.3.2-MariaDB", true),
            ("11.8.1-MariaDB", false),
        ] {
            assert_eq!(
                lossy_crash_recovery(Engine::MariaDb, version).is_some(),
                lossy,
                "{version}"
            );
        }
        assert!(lossy_crash_recovery(Engine::MySql, "8.0.1").is_none());
        assert!(lossy_crash_recovery(Engine::MariaDb, "10.11.8")
            .unwrap()
            .contains("run 10.11.9 or later"));
    }

    fn options(s: SemiSync, engine: Engine) -> String {
        s.server_options(engine)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn options_per_engine_and_spec() {
        let lossless = SemiSync {
            acks: 1,
            timeout: None,
            members: 3,
        };
        assert_eq!(
            options(lossless, Engine::MariaDb),
            "rpl_semi_sync_master_enabled=OFF rpl_semi_sync_master_timeout=4294967295 \
             rpl_semi_sync_master_wait_no_slave=ON rpl_semi_sync_master_wait_point=AFTER_SYNC \
             rpl_semi_sync_slave_enabled=ON"
        );
        let mysql = SemiSync {
            acks: 2,
            timeout: Some(Duration::from_secs(10)),
            members: 5,
        };
        assert_eq!(
            options(mysql, Engine::MySql),
            "rpl_semi_sync_replica_enabled=ON rpl_semi_sync_source_enabled=OFF \
             rpl_semi_sync_source_timeout=10000 rpl_semi_sync_source_wait_for_replica_count=2 \
             rpl_semi_sync_source_wait_no_replica=ON rpl_semi_sync_source_wait_point=AFTER_SYNC"
        );
        // One member: nobody to wait for. No acknowledgements: asynchronous.
        for s in [
            SemiSync {
                members: 1,
                ..lossless
            },
            SemiSync {
                acks: 0,
                ..lossless
            },
        ] {
            assert!(!s.waits());
            assert_eq!(s.agent_acks(), 0);
        }
        assert_eq!(lossless.agent_acks(), 1);
        assert!(options(
            SemiSync {
                acks: 0,
                ..lossless
            },
            Engine::MariaDb
        )
        .contains("rpl_semi_sync_slave_enabled=OFF"));
    }
}
