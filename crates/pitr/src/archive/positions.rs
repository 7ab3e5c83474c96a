//! What a running MariaDB server records of the history it holds, for a replay under the
//! archived GTIDs: its replica position (`gtid_slave_pos`, which every restore and finished
//! replay sets, as replication does), the GTIDs its binary log holds under other servers' ids
//! (where a replay cut off before it recorded its end shows), and a named lock so two replays
//! never run into one server at once.

use bulwark_engine::repo::CompleteBackup;
use bulwark_engine::source::Connection;
use bulwark_engine::Error as EngineError;
use mysql_async::prelude::Queryable;

use crate::binlog::{Gtid, GtidPos};
use crate::error::{Error, Result};

/// The server's lock a replay holds while it runs.
const REPLAY_LOCK: &str = "bulwark-replay";

/// What a server records of the transactions it holds.
#[derive(Debug, Clone)]
pub struct ServerPosition {
    /// Its replica position.
    pub replica: GtidPos,
    /// Where its binary log ends, per domain.
    pub binlog: GtidPos,
    /// Every last GTID its binary log holds under another server's id (one per domain and
    /// server, so a later write of its own hides none).
    pub logged_by_others: Vec<Gtid>,
}

fn query_failed(e: mysql_async::Error) -> Error {
    EngineError::QueryServer(Box::new(e)).into()
}

/// Reads the server's [`ServerPosition`].
pub async fn read(conn: &Connection) -> Result<ServerPosition> {
    let mut c = super::connect::connect(conn).await?;
    let row: Option<(String, String, String, u32)> = c
        .query_first("SELECT @@gtid_binlog_state, @@gtid_slave_pos, @@gtid_binlog_pos, @@server_id")
        .await
        .map_err(query_failed)?;
    let _ = c.disconnect().await;
    let (state, replica, binlog, server_id) =
        row.ok_or_else(|| query_failed(mysql_async::Error::Other("no row".into())))?;
    let parse = |what: &str, text: &str| {
        GtidPos::parse(text).map_err(|e| Error::PointInTime(format!("the server's {what}: {e}")))
    };
    let mut logged_by_others = Vec::new();
    for entry in state.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let g: Gtid = entry
            .parse()
            .map_err(|e| Error::PointInTime(format!("the server's @@gtid_binlog_state: {e}")))?;
        if g.server != server_id {
            logged_by_others.push(g);
        }
    }
    Ok(ServerPosition {
        replica: parse("@@gtid_slave_pos", &replica)?,
        binlog: parse("@@gtid_binlog_pos", &binlog)?,
        logged_by_others,
    })
}

/// The replica position to record: `base` moved to `to` in the domains `to` names, and, for a
/// domain named by neither, the binary log's end there (under `gtid_strict_mode` MariaDB
/// refuses a position that leaves out a domain its binary log has).
pub fn to_record(base: &GtidPos, to: &GtidPos, binlog: &GtidPos) -> GtidPos {
    let mut position = base.clone();
    for g in to.gtids() {
        position.advance(g);
    }
    for g in binlog.gtids() {
        if position.get(g.domain).is_none() {
            position.advance(g);
        }
    }
    position
}

/// Sets the server's replica position to `position`; `failed` words the error.
pub async fn record(
    conn: &Connection,
    position: &GtidPos,
    failed: impl FnOnce(mysql_async::Error) -> Error,
) -> Result<()> {
    let mut c = super::connect::connect(conn).await?;
    let set = c
        .exec_drop("SET GLOBAL gtid_slave_pos = ?", (position.to_string(),))
        .await;
    let _ = c.disconnect().await;
    set.map_err(failed)
}

/// After a backup was restored into the server (it holds exactly the backup's point, whatever
/// its replica position said before): records that point, so a later replay starts there.
pub async fn record_restored(conn: &Connection, backup: &CompleteBackup) -> Result<GtidPos> {
    let m = &backup.manifest;
    let point = super::replay::backup_point(backup)?;
    let position = read(conn).await?;
    let recorded = to_record(&GtidPos::default(), &point, &position.binlog);
    record(conn, &recorded, |e| {
        Error::PointInTime(format!(
            "backup {} was restored, but the server's replica position could not be set to its \
             point {point} ({e}); a replay under the archived GTIDs cannot follow (with \
             gtid_strict_mode and the load logged in the same domain, replay under the \
             server's own GTIDs: --replay-gtids server)",
            m.id
        ))
    })
    .await?;
    Ok(recorded)
}

/// The server's replay lock, held as long as this value lives (its session keeps it).
pub struct ReplayLock(mysql_async::Conn);

impl ReplayLock {
    /// Takes the lock, or says that another replay into the server runs.
    pub async fn take(conn: &Connection) -> Result<ReplayLock> {
        let mut c = super::connect::connect(conn).await?;
        let got: Option<Option<i64>> = c
            .exec_first("SELECT GET_LOCK(?, 0)", (REPLAY_LOCK,))
            .await
            .map_err(query_failed)?;
        if got.flatten() != Some(1) {
            let _ = c.disconnect().await;
            return Err(Error::PointInTime(
                "another replay into this server is running (it holds the server's lock \
                 bulwark-replay)"
                    .into(),
            ));
        }
        Ok(ReplayLock(c))
    }

    /// Releases the lock.
    pub async fn release(self) {
        let mut c = self.0;
        let _ = c
            .query_drop(format!("DO RELEASE_LOCK('{REPLAY_LOCK}')"))
            .await;
        let _ = c.disconnect().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(s: &str) -> GtidPos {
        GtidPos::parse(s).unwrap()
    }

    #[test]
    fn the_recorded_position_names_every_domain_the_binary_log_has() {
        for (name, base, to, binlog, want) in [
            ("the point alone", "", "0-1-7", "", "0-1-7"),
            (
                "a load logged in another domain",
                "",
                "0-1-7",
                "5-2-138",
                "0-1-7,5-2-138",
            ),
            (
                "a load logged in the same domain",
                "",
                "0-1-7",
                "0-2-138",
                "0-1-7",
            ),
            (
                "a replay's end",
                "0-1-7,5-2-138",
                "0-1-20",
                "0-1-20,5-2-138",
                "0-1-20,5-2-138",
            ),
        ] {
            assert_eq!(
                to_record(&pos(base), &pos(to), &pos(binlog)),
                pos(want),
                "{name}"
            );
        }
    }
}
