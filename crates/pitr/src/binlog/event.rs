//! One raw binary log event: the 19-byte common header, the CRC32 trailer MariaDB appends when
//! `binlog_checksum=CRC32`, and the few bodies the archive must read (GTID, query text).
//! Events are kept byte for byte as the server sent them; nothing is re-encoded.

/// Length of the common event header.
pub const HEADER_LEN: usize = 19;
/// Length of the CRC32 trailer.
pub const CRC_LEN: usize = 4;
/// The four bytes that start every binary log file.
pub const BINLOG_MAGIC: [u8; 4] = [0xfe, b'b', b'i', b'n'];

/// Event type codes the archive acts on (MariaDB `log_event.h`).
pub mod kind {
    pub const QUERY: u8 = 2;
    pub const STOP: u8 = 3;
    pub const ROTATE: u8 = 4;
    pub const FORMAT_DESCRIPTION: u8 = 15;
    pub const XID: u8 = 16;
    pub const INCIDENT: u8 = 26;
    pub const HEARTBEAT: u8 = 27;
    pub const ANNOTATE_ROWS: u8 = 160;
    pub const BINLOG_CHECKPOINT: u8 = 161;
    pub const GTID: u8 = 162;
    pub const GTID_LIST: u8 = 163;
    pub const START_ENCRYPTION: u8 = 164;
    /// MariaDB `XA_PREPARE_LOG_EVENT`: ends the first half of an XA transaction.
    pub const XA_PREPARE: u8 = 38;
}

/// `LOG_EVENT_ARTIFICIAL_F`: an event the server made up for the stream, not in any binlog.
const FLAG_ARTIFICIAL: u16 = 0x20;
/// GTID event flag: the transaction is a single statement with no BEGIN/COMMIT (DDL).
const GTID_STANDALONE: u8 = 0x01;

/// Why an event could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("event is {len} bytes, shorter than its {need}-byte header and trailer")]
    Short { len: usize, need: usize },
    #[error("event header says {said} bytes, {got} arrived")]
    SizeMismatch { said: u32, got: usize },
    #[error("event of type {kind} at position {log_pos} fails its CRC32 check")]
    Checksum { kind: u8, log_pos: u32 },
    #[error("GTID event body is {0} bytes, too short")]
    ShortGtid(usize),
}

/// One event, header and body and trailer, exactly as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    bytes: Vec<u8>,
}

impl RawEvent {
    /// Takes `bytes` as one checksummed event: the length must match the header and the CRC32
    /// must match the rest, so a corrupted event is never archived.
    pub fn checked(bytes: Vec<u8>) -> Result<RawEvent, EventError> {
        let need = HEADER_LEN + CRC_LEN;
        if bytes.len() < need {
            return Err(EventError::Short {
                len: bytes.len(),
                need,
            });
        }
        let event = RawEvent { bytes };
        if event.size() as usize != event.bytes.len() {
            return Err(EventError::SizeMismatch {
                said: event.size(),
                got: event.bytes.len(),
            });
        }
        let (body, crc) = event.bytes.split_at(event.bytes.len() - CRC_LEN);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(EventError::Checksum {
                kind: event.kind(),
                log_pos: event.log_pos(),
            });
        }
        Ok(event)
    }

    /// Seconds since the epoch at which the statement that logged this event started.
    pub fn timestamp(&self) -> u32 {
        u32::from_le_bytes(self.bytes[0..4].try_into().expect("4 bytes"))
    }

    /// Event type code (see [`kind`]).
    pub fn kind(&self) -> u8 {
        self.bytes[4]
    }

    /// `server_id` of the server that wrote the event first.
    pub fn server_id(&self) -> u32 {
        u32::from_le_bytes(self.bytes[5..9].try_into().expect("4 bytes"))
    }

    /// Total length in bytes, header and trailer included.
    pub fn size(&self) -> u32 {
        u32::from_le_bytes(self.bytes[9..13].try_into().expect("4 bytes"))
    }

    /// Offset just past this event in the source server's binlog file.
    pub fn log_pos(&self) -> u32 {
        u32::from_le_bytes(self.bytes[13..17].try_into().expect("4 bytes"))
    }

    /// Header flags.
    pub fn flags(&self) -> u16 {
        u16::from_le_bytes(self.bytes[17..19].try_into().expect("2 bytes"))
    }

    /// Whether the server made this event up for the stream (never part of the data).
    pub fn is_artificial(&self) -> bool {
        self.flags() & FLAG_ARTIFICIAL != 0
    }

    /// Between header and trailer.
    pub fn body(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..self.bytes.len() - CRC_LEN]
    }

    /// The whole event.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The event's bytes, taken.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// For a GTID event: the GTID and whether the transaction is a lone statement.
    pub fn gtid(&self) -> Result<(super::Gtid, bool), EventError> {
        let body = self.body();
        if body.len() < 13 {
            return Err(EventError::ShortGtid(body.len()));
        }
        let seq = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
        let domain = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        let standalone = body[12] & GTID_STANDALONE != 0;
        Ok((
            super::Gtid {
                domain,
                server: self.server_id(),
                seq,
            },
            standalone,
        ))
    }

    /// For a query event: the statement text (status variables and schema skipped), if the
    /// body is well formed.
    pub fn query_text(&self) -> Option<&[u8]> {
        // thread id 4, exec time 4, schema length 1, error code 2, status vars length 2.
        let body = self.body();
        let schema_len = *body.get(8)? as usize;
        let vars_len = u16::from_le_bytes(body.get(11..13)?.try_into().ok()?) as usize;
        let start = 13 + vars_len + schema_len + 1;
        body.get(start..)
    }

    /// Whether this event ends the transaction it belongs to: an XID (InnoDB commit), a
    /// `COMMIT` or `ROLLBACK` query (non-transactional engines), or an XA prepare.
    pub fn ends_transaction(&self) -> bool {
        match self.kind() {
            kind::XID | kind::XA_PREPARE => true,
            kind::QUERY => self.query_text().is_some_and(|q| {
                let q = q.trim_ascii();
                q.eq_ignore_ascii_case(b"COMMIT") || q.eq_ignore_ascii_case(b"ROLLBACK")
            }),
            _ => false,
        }
    }
}

/// The events of a binlog file's body (what follows the magic), each checked (length, CRC);
/// the error says where the body is cut or damaged.
pub fn events(body: &[u8]) -> impl Iterator<Item = Result<RawEvent, String>> + '_ {
    read_events(body, body.len() as u64)
}

/// The events of a binlog file held in `file` (a segment's plaintext): its magic checked, then
/// its body read one event at a time ([`read_events`]).
pub fn file_events(
    file: &crate::spool::Spool,
) -> Result<impl Iterator<Item = Result<RawEvent, String>>, String> {
    use std::io::Read;
    let mut reader = file.reader();
    let mut magic = [0u8; BINLOG_MAGIC.len()];
    if reader.read_exact(&mut magic).is_err() || magic != BINLOG_MAGIC {
        return Err("it does not start with the binlog magic".into());
    }
    Ok(read_events(reader, file.len() - BINLOG_MAGIC.len() as u64))
}

/// [`events`] of a body of `len` bytes read from `reader`: only one event is held at a time,
/// so a body of any size is read within the memory of its largest event.
pub fn read_events<R: std::io::Read>(
    reader: R,
    len: u64,
) -> impl Iterator<Item = Result<RawEvent, String>> {
    use std::io::Read;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, reader);
    let mut remain = len;
    std::iter::from_fn(move || {
        if remain == 0 {
            return None;
        }
        let mut next = || -> Result<RawEvent, String> {
            let unreadable = |e: std::io::Error| format!("it could not be read: {e}");
            if remain < 13 {
                return Err("it ends inside an event header".to_string());
            }
            let mut header = [0u8; HEADER_LEN];
            let got = HEADER_LEN.min(remain as usize);
            reader.read_exact(&mut header[..got]).map_err(unreadable)?;
            let size = u32::from_le_bytes(header[9..13].try_into().expect("4 bytes")) as usize;
            if size as u64 > remain || size < HEADER_LEN {
                return Err(format!("an event says {size} bytes, {remain} remain"));
            }
            let mut bytes = vec![0u8; size];
            bytes[..HEADER_LEN].copy_from_slice(&header);
            reader
                .read_exact(&mut bytes[HEADER_LEN..])
                .map_err(unreadable)?;
            remain -= size as u64;
            RawEvent::checked(bytes).map_err(|e| e.to_string())
        };
        let event = next();
        if event.is_err() {
            remain = 0;
        }
        Some(event)
    })
}

/// Builds a checksummed event; for tests and for the archive's own synthesized headers.
pub fn build(kind: u8, timestamp: u32, server_id: u32, log_pos: u32, body: &[u8]) -> Vec<u8> {
    let size = (HEADER_LEN + body.len() + CRC_LEN) as u32;
    let mut out = Vec::with_capacity(size as usize);
    out.extend_from_slice(&timestamp.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&server_id.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&log_pos.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Body of a MariaDB GTID event (for tests).
pub fn gtid_body(domain: u32, seq: u64, standalone: bool) -> Vec<u8> {
    let mut body = seq.to_le_bytes().to_vec();
    body.extend_from_slice(&domain.to_le_bytes());
    body.push(if standalone { GTID_STANDALONE } else { 0 });
    body.extend_from_slice(&[0u8; 6]);
    body
}

/// Body of a query event with `text` (for tests).
pub fn query_body(schema: &str, text: &str) -> Vec<u8> {
    let mut body = vec![0u8; 8];
    body.push(schema.len() as u8);
    body.extend_from_slice(&[0, 0, 0, 0]);
    body.extend_from_slice(schema.as_bytes());
    body.push(0);
    body.extend_from_slice(text.as_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checked_event_exposes_its_header() {
        let raw = build(kind::GTID, 1_795_574_104, 7, 367, &gtid_body(0, 42, false));
        let e = RawEvent::checked(raw.clone()).unwrap();
        assert_eq!(e.timestamp(), 1_795_574_104);
        assert_eq!(e.kind(), kind::GTID);
        assert_eq!(e.server_id(), 7);
        assert_eq!(e.size() as usize, raw.len());
        assert_eq!(e.log_pos(), 367);
        assert!(!e.is_artificial());
        let (gtid, standalone) = e.gtid().unwrap();
        assert_eq!(gtid.to_string(), "0-7-42");
        assert!(!standalone);
    }

    #[test]
    fn damaged_events_are_refused() {
        let good = build(kind::XID, 1, 1, 10, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut flipped = good.clone();
        flipped[HEADER_LEN + 2] ^= 0x40;
        let mut cut = good.clone();
        cut.truncate(good.len() - 1);
        let cases = [
            (flipped, "fails its CRC32 check"),
            (cut, "header says 31 bytes, 30 arrived"),
            (vec![0; 10], "shorter than its 23-byte header"),
        ];
        for (bytes, want) in cases {
            let err = RawEvent::checked(bytes).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn transaction_ends_are_recognised() {
        let cases = [
            (build(kind::XID, 1, 1, 1, &[0; 8]), true),
            (
                build(kind::QUERY, 1, 1, 1, &query_body("t", "COMMIT")),
                true,
            ),
            (
                build(kind::QUERY, 1, 1, 1, &query_body("", "rollback")),
                true,
            ),
            (
                build(kind::QUERY, 1, 1, 1, &query_body("t", "BEGIN")),
                false,
            ),
            (
                build(
                    kind::QUERY,
                    1,
                    1,
                    1,
                    &query_body("t", "insert into a values (1)"),
                ),
                false,
            ),
            // XA_PREPARE as a MariaDB 10.11 binary log carries it (type 38, read from a real
            // server's file); 169 is WRITE_ROWS_COMPRESSED, which ends nothing.
            (build(38, 1, 1, 1, &[0; 8]), true),
            (build(169, 1, 1, 1, &[0; 8]), false),
            (build(19, 1, 1, 1, &[0; 8]), false),
        ];
        for (bytes, ends) in cases {
            let e = RawEvent::checked(bytes).unwrap();
            assert_eq!(e.ends_transaction(), ends, "kind {}", e.kind());
        }
    }
}
