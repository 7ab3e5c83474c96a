//! Gives each row event of a large transaction a statement of its own, so that it replays
//! through `mariadb-binlog | mariadb` within any `max_allowed_packet`. The decoder prints a
//! statement's row events as one `BINLOG` statement: a statement that changed a gibibyte of
//! rows becomes a `BINLOG` of more than a gibibyte, which no server accepts and which the
//! client holds whole. Rewritten, every row event carries `STMT_END_F` and follows its
//! statement's table maps, so each `BINLOG` holds one event. What is applied is unchanged
//! (row events carry whole row images) and the transaction stays one transaction.

use super::event::{read_events, RawEvent, CRC_LEN, HEADER_LEN};
use crate::spool::{Spool, SpoolWriter};

/// `TABLE_MAP_EVENT`.
const TABLE_MAP: u8 = 19;
/// Row event types: MariaDB's v1 and their compressed forms, and the v2 forms.
const ROW_EVENTS: [u8; 12] = [23, 24, 25, 30, 31, 32, 166, 167, 168, 169, 170, 171];
/// The row event flag that ends a statement.
const STMT_END_F: u16 = 1;
/// Where a format description's post-header lengths start in its body: binlog version (2),
/// server version (50), creation time (4), common header length (1).
const POST_HEADER_LENGTHS: usize = 57;

/// Where a row event of `kind` keeps its flags in its body, read from the format description
/// `fde` (a 6-byte table id unless its post-header is 6 bytes long, the old 4-byte id).
fn flags_offset(fde: &[u8], kind: u8) -> Option<usize> {
    let lengths = fde.get(HEADER_LEN + POST_HEADER_LENGTHS..fde.len().checked_sub(CRC_LEN + 1)?)?;
    match lengths.get(usize::from(kind).checked_sub(1)?)? {
        6 => Some(4),
        8 | 10 => Some(6),
        _ => None,
    }
}

/// Appends `trx` to `out` with every row event a statement of its own, after all the table
/// maps of its statement. When the format description `fde` does not say where every kind of
/// row event keeps its flags, the transaction is appended as it is: a row event written
/// without its table maps would be skipped by the server without an error.
pub fn statement_per_row_event(
    fde: &[u8],
    trx: &Spool,
    out: &mut SpoolWriter,
) -> Result<(), String> {
    let write = |out: &mut SpoolWriter, bytes: &[u8]| {
        out.write(bytes)
            .map_err(|e| format!("a split transaction could not be held in a temporary file: {e}"))
    };
    if !ROW_EVENTS.iter().all(|k| flags_offset(fde, *k).is_some()) {
        return out
            .append(trx)
            .map_err(|e| format!("a transaction could not be held in a temporary file: {e}"));
    }
    // The table maps of the statement being read: written before each of its row events.
    let mut maps: Vec<Vec<u8>> = Vec::new();
    let mut statement_ended = false;
    for event in read_events(trx.reader(), trx.len()) {
        let event = event?;
        let kind = event.kind();
        if kind == TABLE_MAP {
            if statement_ended {
                maps.clear();
                statement_ended = false;
            }
            maps.push(event.into_bytes());
            continue;
        }
        if !ROW_EVENTS.contains(&kind) {
            write(out, event.bytes())?;
            continue;
        }
        let at = flags_offset(fde, kind).expect("checked above");
        if HEADER_LEN + at + 2 > event.bytes().len() - CRC_LEN {
            return Err(format!(
                "a row event of type {kind} is too short for its flags"
            ));
        }
        for map in &maps {
            write(out, map)?;
        }
        let (rewritten, ended) = ending_statement(event, HEADER_LEN + at);
        write(out, &rewritten)?;
        statement_ended |= ended;
    }
    Ok(())
}

/// The row event with `STMT_END_F` set (flags at byte `at`), checksummed again, and whether
/// it already ended its statement.
fn ending_statement(event: RawEvent, at: usize) -> (Vec<u8>, bool) {
    let mut bytes = event.into_bytes();
    let flags = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    bytes[at..at + 2].copy_from_slice(&(flags | STMT_END_F).to_le_bytes());
    let end = bytes.len() - CRC_LEN;
    let crc = crc32fast::hash(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
    (bytes, flags & STMT_END_F != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::event::{build, events, gtid_body, kind};
    use crate::spool::SpillRules;

    /// A format description whose post-header lengths say 8 for every row event.
    fn fde() -> Vec<u8> {
        let mut body = vec![0u8; POST_HEADER_LENGTHS];
        body[56] = HEADER_LEN as u8;
        body.extend(vec![8u8; 171]);
        body.push(1); // checksum algorithm: CRC32
        build(kind::FORMAT_DESCRIPTION, 1, 1, 0, &body)
    }

    fn rows(kind: u8, table: u8, end: bool) -> Vec<u8> {
        let mut body = vec![table, 0, 0, 0, 0, 0];
        body.extend_from_slice(&u16::from(end).to_le_bytes());
        body.extend_from_slice(&[0xaa; 12]);
        build(kind, 5, 1, 0, &body)
    }

    fn map(table: u8) -> Vec<u8> {
        build(TABLE_MAP, 5, 1, 0, &[table, 0, 0, 0, 0, 0, 0, 0, 1, b't'])
    }

    /// Each event of the rewritten transaction as (kind, table, ends a statement).
    fn shape(bytes: &[u8]) -> Vec<(u8, u8, bool)> {
        events(bytes)
            .map(|e| {
                let e = e.unwrap();
                let body = e.body();
                let ends = ROW_EVENTS.contains(&e.kind()) && body[6] & 1 == 1;
                (e.kind(), body.first().copied().unwrap_or(0), ends)
            })
            .collect()
    }

    #[test]
    fn each_row_event_becomes_a_statement_after_its_table_maps() {
        let trx = [
            build(kind::GTID, 5, 1, 0, &gtid_body(0, 1, false)),
            map(1),
            map(2),
            rows(23, 1, false),
            rows(24, 2, false),
            rows(23, 1, true),
            map(3),
            rows(169, 3, false),
            rows(169, 3, true),
            build(kind::XID, 5, 1, 0, &[0; 8]),
        ]
        .concat();
        let mut out = SpoolWriter::new(SpillRules::memory(1 << 20));
        statement_per_row_event(&fde(), &Spool::from_bytes(trx), &mut out).unwrap();
        let got = shape(&out.finish().unwrap().to_vec().unwrap());
        let want = vec![
            (kind::GTID, 1, false),
            (TABLE_MAP, 1, false),
            (TABLE_MAP, 2, false),
            (23, 1, true),
            (TABLE_MAP, 1, false),
            (TABLE_MAP, 2, false),
            (24, 2, true),
            (TABLE_MAP, 1, false),
            (TABLE_MAP, 2, false),
            (23, 1, true),
            (TABLE_MAP, 3, false),
            (169, 3, true),
            (TABLE_MAP, 3, false),
            (169, 3, true),
            (kind::XID, 0, false),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_format_description_that_does_not_say_where_flags_are_leaves_events_alone() {
        let trx = [map(1), rows(23, 1, false), rows(23, 1, true)].concat();
        let mut odd = fde();
        let at = HEADER_LEN + POST_HEADER_LENGTHS + 22;
        odd[at] = 12;
        let end = odd.len() - CRC_LEN;
        let crc = crc32fast::hash(&odd[..end]);
        odd[end..].copy_from_slice(&crc.to_le_bytes());
        let mut out = SpoolWriter::new(SpillRules::memory(1 << 20));
        statement_per_row_event(&odd, &Spool::from_bytes(trx.clone()), &mut out).unwrap();
        assert_eq!(out.finish().unwrap().to_vec().unwrap(), trx);
        assert_eq!(flags_offset(&[0; 10], 23), None);
    }
}
