//! Rewrites archived transactions so that a server logs them under its own GTIDs: every
//! event's `server_id` becomes the server's, and each transaction's GTID event takes the
//! server's domain and the next sequence number of that domain. A cluster restored from a
//! logical backup has a history of its own (the load was logged under its GTIDs), which the
//! source's sequence numbers need not follow (strict mode refuses them out of order); and a
//! member of the new cluster whose `server_id` equals the source's would skip, as its own,
//! every event that kept the source's id. Checksums are computed again; nothing else changes.

use super::event::{kind, read_events, CRC_LEN, HEADER_LEN};
use crate::spool::{Spool, SpoolWriter};

/// The server's identity that replayed transactions are rewritten to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebase {
    /// The server's `gtid_domain_id`.
    pub domain: u32,
    /// The server's `server_id`.
    pub server_id: u32,
    /// The sequence number the next transaction takes (one past the domain's last).
    pub next_seq: u64,
}

impl Rebase {
    /// Appends one transaction's events (as archived: whole, checksummed) to `out`, rewritten
    /// one event at a time; the transaction takes `next_seq`, which then moves on by one.
    pub fn transaction(&mut self, trx: &Spool, out: &mut SpoolWriter) -> Result<(), String> {
        let mut gtids = 0;
        for event in read_events(trx.reader(), trx.len()) {
            let event = event?;
            let is_gtid = event.kind() == kind::GTID;
            if is_gtid {
                event.gtid().map_err(|e| e.to_string())?;
            }
            let mut bytes = event.into_bytes();
            bytes[5..9].copy_from_slice(&self.server_id.to_le_bytes());
            if is_gtid {
                let body = &mut bytes[HEADER_LEN..];
                body[0..8].copy_from_slice(&self.next_seq.to_le_bytes());
                body[8..12].copy_from_slice(&self.domain.to_le_bytes());
                gtids += 1;
            }
            let end = bytes.len() - CRC_LEN;
            let crc = crc32fast::hash(&bytes[..end]);
            bytes[end..].copy_from_slice(&crc.to_le_bytes());
            out.write(&bytes).map_err(|e| {
                format!("a rewritten transaction could not be held in a temporary file: {e}")
            })?;
        }
        if gtids != 1 {
            return Err(format!("a transaction holds {gtids} GTID events, not one"));
        }
        self.next_seq += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::event::events;
    use crate::binlog::event::{build, gtid_body, query_body};
    use crate::binlog::{Gtid, RawEvent};
    use crate::spool::SpillRules;

    /// Rewrites `trx` into a new buffer.
    fn rewritten(rebase: &mut Rebase, trx: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let mut w = SpoolWriter::new(SpillRules::memory(1 << 20));
        let result = rebase.transaction(&Spool::from_bytes(trx.to_vec()), &mut w);
        out.extend(w.finish().unwrap().to_vec().unwrap());
        result
    }

    fn trx(server: u32, domain: u32, seq: u64) -> Vec<u8> {
        let mut t = build(kind::GTID, 100, server, 0, &gtid_body(domain, seq, false));
        t.extend(build(
            kind::QUERY,
            101,
            server,
            0,
            &query_body("shop", "INSERT INTO t VALUES (1)"),
        ));
        t.extend(build(kind::XID, 102, server, 0, &[7u8; 8]));
        t
    }

    fn parsed(bytes: &[u8]) -> Vec<RawEvent> {
        events(bytes)
            .collect::<Result<_, _>>()
            .expect("checksums hold")
    }

    #[test]
    fn transactions_take_the_servers_identity_and_next_sequence_numbers() {
        let mut rebase = Rebase {
            domain: 3,
            server_id: 100,
            next_seq: 41,
        };
        let mut out = Vec::new();
        rewritten(&mut rebase, &trx(101, 0, 5012), &mut out).unwrap();
        rewritten(&mut rebase, &trx(102, 0, 5013), &mut out).unwrap();
        assert_eq!(rebase.next_seq, 43);
        let got = parsed(&out);
        assert_eq!(got.len(), 6);
        assert!(got.iter().all(|e| e.server_id() == 100));
        let gtids: Vec<Gtid> = got
            .iter()
            .filter(|e| e.kind() == kind::GTID)
            .map(|e| e.gtid().unwrap().0)
            .collect();
        assert_eq!(
            gtids.iter().map(|g| g.to_string()).collect::<Vec<_>>(),
            ["3-100-41", "3-100-42"]
        );
        // Everything else is as archived: timestamps, kinds, bodies.
        let original = parsed(&trx(101, 0, 5012));
        for (a, b) in original.iter().zip(&got) {
            assert_eq!(
                (a.timestamp(), a.kind(), a.size()),
                (b.timestamp(), b.kind(), b.size())
            );
            if a.kind() != kind::GTID {
                assert_eq!(a.body(), b.body());
            } else {
                assert_eq!(a.body()[12..], b.body()[12..], "flags and the rest stay");
            }
        }
    }

    #[test]
    fn damaged_or_odd_transactions_are_refused() {
        let mut rebase = Rebase {
            domain: 0,
            server_id: 1,
            next_seq: 1,
        };
        let mut damaged = trx(2, 0, 9);
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(rewritten(&mut rebase, &damaged, &mut Vec::new()).is_err());
        let two = [trx(2, 0, 9), trx(2, 0, 10)].concat();
        assert!(rewritten(&mut rebase, &two, &mut Vec::new())
            .unwrap_err()
            .contains("2 GTID events"));
        let no_gtid = build(kind::XID, 1, 2, 0, &[0u8; 8]);
        assert!(rewritten(&mut rebase, &no_gtid, &mut Vec::new()).is_err());
        assert_eq!(rebase.next_seq, 1, "a refused transaction takes no number");
    }
}
