//! Following the server: the exact bytes of each streamed event (its checksum checked before
//! anything re-encodes it), and where the archive continues when a server cannot stream from
//! the archive's position (a step back to what a new primary has, or a gap past purged logs).

use bulwark_engine::Error as EngineError;
use mysql_async::binlog::{BinlogChecksumAlg, BinlogVersion};
use mysql_async::prelude::Queryable;

use super::connect::connect;
use super::manifest::SegmentManifest;
use crate::binlog::{GtidPos, RawEvent};
use crate::error::Result;
use bulwark_engine::source::Connection;

/// The event's bytes as the server sent them. mysql_async re-serializes events and computes a
/// fresh CRC32, so the checksum it received is compared first: a corrupted event is refused,
/// never re-sealed.
pub(super) fn exact_bytes(
    event: &mysql_async::binlog::events::Event,
) -> std::result::Result<RawEvent, crate::binlog::assemble::AssembleError> {
    let header = event.header();
    let corrupt = crate::binlog::EventError::Checksum {
        kind: header.event_type_raw(),
        log_pos: header.log_pos(),
    };
    match (event.footer().get_checksum_alg(), event.checksum()) {
        (Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)), Some(sent)) => {
            if u32::from_le_bytes(sent)
                != event.calc_checksum(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)
            {
                return Err(corrupt.into());
            }
        }
        // The stream always asks for CRC32 (`@master_binlog_checksum`); anything else cannot be
        // checked and is not archived.
        _ if header.event_type_raw() == crate::binlog::event::kind::ROTATE
            && header.log_pos() == 0 => {}
        _ => return Err(corrupt.into()),
    }
    let mut bytes = Vec::with_capacity(header.event_size() as usize);
    event
        .write(BinlogVersion::Version4, &mut bytes)
        .map_err(|_| crate::binlog::assemble::AssembleError::from(corrupt.clone()))?;
    Ok(RawEvent::checked(bytes)?)
}

/// Whether a replication error 1236 (`ER_MASTER_FATAL_ERROR_READING_BINLOG`) says the server
/// cannot serve the archive's position (purged past it, or it never had it): only then does the
/// archive step back or record a gap. The same number also reports a damaged binary log, an
/// event over `max_allowed_packet` or an I/O error; none of those moves the archive.
pub(super) fn position_unavailable(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "could not find gtid state requested by slave",
        "which is not in the master's binlog",
        "binlog on the master is missing the gtid",
    ]
    .iter()
    .any(|known| m.contains(known))
}

/// Where the archive continues when the server cannot stream from its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resume {
    /// The server lacks archived transactions (a primary that took over without the old one's
    /// last ones): a new branch of history starts at this archived position, the newest the
    /// server has, or, when it has none of the archive's history, at its oldest binary log.
    /// `server_at` is the server's own position.
    Branch { at: GtidPos, server_at: String },
    /// The server has the archive's history but purged the binary logs after it: the archive
    /// continues here, past a gap.
    Gap(GtidPos),
}

/// Where to continue when the server cannot stream from `through`. When the server has every
/// transaction up to `through` (by its binlog history), its binary logs were purged past it:
/// the archive continues from the oldest binlog it still has, and the gap is recorded by the
/// segments' positions. Otherwise the archive ran ahead of this server (a primary that took
/// over without the old one's last transactions): the newest archived segment boundary the
/// server has is where a new branch of history can start.
pub(super) async fn step_back(
    conn: &Connection,
    segments: &[SegmentManifest],
    through: &GtidPos,
) -> Result<Resume> {
    let mut c = connect(conn).await?;
    let q = |e| EngineError::QueryServer(Box::new(e));
    let row: Option<(String, String)> = c
        .query_first("SELECT @@gtid_binlog_pos, @@gtid_binlog_state")
        .await
        .map_err(q)?;
    let (pos, state) = row.unwrap_or_default();
    let has = |p: &GtidPos| {
        bulwark_contract::gtid::within_history(
            bulwark_contract::Engine::MariaDb,
            &p.to_string(),
            &pos,
            &state,
        )
    };
    let diverged = !has(through);
    if diverged {
        let mut known: Vec<&SegmentManifest> = segments.iter().collect();
        known.sort_by_key(|s| std::cmp::Reverse((s.received_at, s.id.clone())));
        let back = known
            .iter()
            .flat_map(|s| [&s.through, &s.after])
            .find(|p| has(p))
            .cloned();
        if let Some(at) = back {
            let _ = c.disconnect().await;
            return Ok(Resume::Branch { at, server_at: pos });
        }
    }
    let logs: Vec<(String, u64)> = c.query("SHOW BINARY LOGS").await.map_err(q)?;
    let first = logs
        .first()
        .map(|(name, _)| name.clone())
        .unwrap_or_default();
    let events: Vec<mysql_async::Row> = c
        .query(format!(
            "SHOW BINLOG EVENTS IN '{}' LIMIT 4",
            first.replace('\'', "")
        ))
        .await
        .map_err(q)?;
    let _ = c.disconnect().await;
    let oldest = events
        .iter()
        .filter(|r| r.get::<String, _>("Event_type").as_deref() == Some("Gtid_list"))
        .filter_map(|r| r.get::<String, _>("Info"))
        .next()
        .map(|info| info.trim_matches(|c| c == '[' || c == ']').to_string())
        .unwrap_or_default();
    let oldest = GtidPos::parse(&oldest).map_err(EngineError::InvalidArgument)?;
    if diverged {
        // None of the archive's history is the server's: a history of its own, from its
        // oldest binary log, never a gap in the archive's.
        return Ok(Resume::Branch {
            at: oldest,
            server_at: pos,
        });
    }
    tracing::error!(from = %through, resumed_at = %oldest, binlog = %first, "binary logs were purged before they were archived: the archive has a gap; the recovery window restarts at the next backup");
    Ok(Resume::Gap(oldest))
}

#[cfg(test)]
mod tests {
    use super::position_unavailable;

    #[test]
    fn only_a_position_the_server_cannot_serve_moves_the_archive() {
        // Messages of MariaDB 10.11 and 11.x (`sql_repl.cc`), as the dump thread sends them.
        let cases = [
            ("Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.", true),
            ("Error: connecting slave requested to start from GTID 0-1-110, which is not in the master's binlog", true),
            ("Error: connecting slave requested to start from GTID 0-1-110, which is not in the master's binlog. Since the master's binlog contains GTIDs with higher sequence numbers, it probably means that the slave has diverged due to executing extra erroneous transactions", true),
            ("The binlog on the master is missing the GTID 0-1-7 requested by the slave (even though a subsequent sequence number does exist), and GTID strict mode is enabled", true),
            ("bogus data in log event; the first event 'mariadb-bin.000001' at 4, the last event read from 'mariadb-bin.000001' at 812, the last byte read from 'mariadb-bin.000001' at 831.", false),
            ("binlog truncated in the middle of event; consider out of disk space on master", false),
            ("log event entry exceeded max_allowed_packet; Increase max_allowed_packet on master", false),
            ("I/O error reading log event", false),
            ("could not find next log", false),
            ("Could not find first log file name in binary log index file", false),
        ];
        for (message, moves) in cases {
            assert_eq!(position_unavailable(message), moves, "{message}");
        }
    }
}
