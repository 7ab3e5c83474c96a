//! Groups a replication stream's events into whole transactions: a GTID event opens one, and
//! it closes at its commit (XID, `COMMIT`/`ROLLBACK` query, XA prepare) or, for a lone
//! statement (DDL), after that statement. The archive only ever stores whole transactions, so
//! a segment boundary never splits one and a restore never applies half of one. A
//! transaction of any size is gathered: beyond [`TRANSACTION_MEMORY`] it waits in a
//! temporary file ([`crate::spool`]).

use super::event::{kind, RawEvent};
use super::Gtid;
use crate::spool::{SpillRules, Spool, SpoolWriter, TRANSACTION_MEMORY};

/// A complete transaction, as the events the server sent.
#[derive(Debug, Clone)]
pub struct Transaction {
    pub gtid: Gtid,
    /// Start second of the transaction's first statement (the GTID event's timestamp).
    pub started: u32,
    /// Timestamp of the closing event: MariaDB stamps it with the start second of the
    /// statement that wrote it, so it is the closest to a commit time the log holds.
    pub committed: u32,
    /// The events, concatenated.
    pub events: Spool,
}

/// What one event meant.
#[derive(Debug)]
pub enum Step {
    /// Part of a transaction still open, or bookkeeping of the stream.
    Nothing,
    /// A transaction closed.
    Transaction(Transaction),
    /// The server described its binlog format; transactions after it use this description.
    Format(RawEvent),
    /// The server has nothing newer: the stream is caught up.
    Heartbeat,
}

/// Why the stream cannot be archived as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    #[error("transaction {open} did not finish before {next} began")]
    Unfinished { open: Gtid, next: Gtid },
    #[error("the server logged an incident (lost events) at position {log_pos}")]
    Incident { log_pos: u32 },
    #[error("event of type {kind} at position {log_pos} is outside any transaction")]
    Stray { kind: u8, log_pos: u32 },
    #[error("transaction {0} arrived before the server described its binlog format")]
    NoFormat(Gtid),
    #[error("a format description arrived inside transaction {0}")]
    FormatInTransaction(Gtid),
    #[error(transparent)]
    Event(#[from] super::EventError),
    #[error("failed to hold transaction {gtid} in a temporary file: {reason}")]
    Spill { gtid: Gtid, reason: String },
}

/// A transaction partly received.
#[derive(Debug)]
struct Open {
    gtid: Gtid,
    started: u32,
    /// A statement outside BEGIN/COMMIT (DDL): it closes after that statement.
    standalone: bool,
    events: SpoolWriter,
}

/// Stream state: the transaction being gathered, if any.
#[derive(Debug)]
pub struct Assembler {
    open: Option<Open>,
    rules: SpillRules,
}

impl Default for Assembler {
    fn default() -> Self {
        Assembler::new(SpillRules::memory(TRANSACTION_MEMORY))
    }
}

impl Assembler {
    /// An assembler that holds a transaction in memory within `rules`, the rest in a file.
    pub fn new(rules: SpillRules) -> Assembler {
        Assembler { open: None, rules }
    }

    /// Whether a transaction is partly received.
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// Takes the next event of the stream.
    pub fn push(&mut self, event: RawEvent) -> Result<Step, AssembleError> {
        if event.kind() == kind::HEARTBEAT {
            return Ok(Step::Heartbeat);
        }
        if event.kind() == kind::GTID {
            let (gtid, standalone) = event.gtid()?;
            if let Some(open) = &self.open {
                return Err(AssembleError::Unfinished {
                    open: open.gtid,
                    next: gtid,
                });
            }
            let mut events = SpoolWriter::new(self.rules.clone());
            events.write(event.bytes()).map_err(|e| spill(gtid, e))?;
            self.open = Some(Open {
                gtid,
                started: event.timestamp(),
                standalone,
                events,
            });
            return Ok(Step::Nothing);
        }
        if let Some(open) = &mut self.open {
            if event.kind() == kind::FORMAT_DESCRIPTION {
                return Err(AssembleError::FormatInTransaction(open.gtid));
            }
            let gtid = open.gtid;
            open.events
                .write(event.bytes())
                .map_err(|e| spill(gtid, e))?;
            let closes = if open.standalone {
                event.kind() != kind::ANNOTATE_ROWS
            } else {
                event.ends_transaction()
            };
            if !closes {
                return Ok(Step::Nothing);
            }
            let open = self.open.take().expect("open transaction");
            return Ok(Step::Transaction(Transaction {
                gtid,
                started: open.started,
                committed: event.timestamp(),
                events: open.events.finish().map_err(|e| spill(gtid, e))?,
            }));
        }
        match event.kind() {
            kind::FORMAT_DESCRIPTION => Ok(Step::Format(event)),
            kind::INCIDENT => Err(AssembleError::Incident {
                log_pos: event.log_pos(),
            }),
            kind::ROTATE
            | kind::STOP
            | kind::GTID_LIST
            | kind::BINLOG_CHECKPOINT
            | kind::START_ENCRYPTION
            | kind::ANNOTATE_ROWS => Ok(Step::Nothing),
            _ if event.is_artificial() => Ok(Step::Nothing),
            other => Err(AssembleError::Stray {
                kind: other,
                log_pos: event.log_pos(),
            }),
        }
    }
}

fn spill(gtid: Gtid, e: std::io::Error) -> AssembleError {
    AssembleError::Spill {
        gtid,
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::event::{build, gtid_body, query_body};

    const TABLE_MAP: u8 = 19;
    const WRITE_ROWS: u8 = 23;

    fn ev(kind: u8, ts: u32, body: &[u8]) -> RawEvent {
        RawEvent::checked(build(kind, ts, 1, 100, body)).unwrap()
    }

    fn gtid(seq: u64, ts: u32, standalone: bool) -> RawEvent {
        ev(kind::GTID, ts, &gtid_body(0, seq, standalone))
    }

    fn query(ts: u32, text: &str) -> RawEvent {
        ev(kind::QUERY, ts, &query_body("t", text))
    }

    fn feed(events: Vec<RawEvent>) -> Result<Vec<(String, u32, u32, u64)>, AssembleError> {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        for e in events {
            if let Step::Transaction(t) = a.push(e)? {
                out.push((t.gtid.to_string(), t.started, t.committed, t.events.len()));
            }
        }
        assert!(!a.in_transaction(), "a transaction was left open");
        Ok(out)
    }

    #[test]
    fn row_transactions_close_at_their_xid() {
        let got = feed(vec![
            ev(kind::ROTATE, 0, &[0; 12]),
            ev(kind::GTID_LIST, 5, &[0; 4]),
            gtid(1, 10, false),
            ev(kind::ANNOTATE_ROWS, 10, b"insert"),
            ev(TABLE_MAP, 10, &[0; 8]),
            ev(WRITE_ROWS, 10, &[0; 8]),
            ev(kind::XID, 12, &[0; 8]),
            ev(kind::HEARTBEAT, 0, &[0; 8]),
        ])
        .unwrap();
        assert_eq!(got, vec![("0-1-1".into(), 10, 12, 42 + 29 + 31 + 31 + 31)]);
    }

    #[test]
    fn ddl_and_non_transactional_statements() {
        let got = feed(vec![
            gtid(7, 20, true),
            query(20, "CREATE TABLE a (id int)"),
            gtid(8, 21, false),
            query(21, "BEGIN"),
            query(21, "INSERT INTO myisam_t VALUES (1)"),
            query(22, "COMMIT"),
        ])
        .unwrap();
        let gtids: Vec<_> = got.iter().map(|t| (t.0.as_str(), t.2)).collect();
        assert_eq!(gtids, vec![("0-1-7", 20), ("0-1-8", 22)]);
    }

    #[test]
    fn broken_streams_are_refused() {
        let cases: Vec<(Vec<RawEvent>, &str)> = vec![
            (
                vec![
                    gtid(1, 1, false),
                    ev(TABLE_MAP, 1, &[0; 8]),
                    gtid(2, 1, false),
                ],
                "transaction 0-1-1 did not finish before 0-1-2 began",
            ),
            (vec![ev(kind::INCIDENT, 1, &[0; 4])], "logged an incident"),
            (
                vec![ev(WRITE_ROWS, 1, &[0; 8])],
                "event of type 23 at position 100 is outside any transaction",
            ),
            (
                vec![gtid(1, 1, false), ev(kind::FORMAT_DESCRIPTION, 1, &[0; 8])],
                "inside transaction 0-1-1",
            ),
        ];
        for (events, want) in cases {
            let err = feed(events).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn a_transaction_larger_than_its_memory_waits_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Assembler::new(SpillRules {
            memory: 100,
            dir: dir.path().to_path_buf(),
        });
        let mut events = vec![gtid(1, 10, false)];
        events.extend((0..50).map(|_| ev(WRITE_ROWS, 10, &[9; 40])));
        events.push(ev(kind::XID, 11, &[0; 8]));
        let whole: Vec<u8> = events.iter().flat_map(|e| e.bytes().to_vec()).collect();
        let mut closed = None;
        for e in events {
            if let Step::Transaction(t) = a.push(e).unwrap() {
                closed = Some(t);
            }
        }
        let t = closed.expect("the transaction closed");
        assert_eq!(
            (t.events.len(), t.events.in_memory()),
            (whole.len() as u64, 0)
        );
        assert_eq!(t.events.to_vec().unwrap(), whole);
    }

    #[test]
    fn format_descriptions_are_handed_out() {
        let mut a = Assembler::default();
        let fde = ev(kind::FORMAT_DESCRIPTION, 3, &[4; 20]);
        assert!(matches!(a.push(fde.clone()).unwrap(), Step::Format(f) if f == fde));
    }
}
