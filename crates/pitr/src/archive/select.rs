//! Which archived transactions a replay applies: those after the backup's consistent point, up
//! to the target, on the one branch of history being restored (checked transaction by
//! transaction, servers included). Pure; table-tested.

use chrono::{DateTime, Utc};

use super::window::RecoveryTarget;
use crate::binlog::assemble::AssembleError;
use crate::binlog::split::statement_per_row_event;
use crate::binlog::{Assembler, GtidPos, Rebase, Step};
use crate::error::{Error, Result};
use crate::spool::{SpillRules, Spool, SpoolWriter, TRANSACTION_MEMORY};

/// Picks the transactions to replay from segment plaintexts given in chain order: those after
/// `start`, up to the target. A time target takes the longest run of transactions stamped at or
/// before it (stamps are not ordered under concurrent commits, and a replay must be a prefix of
/// the log, never a selection from it).
#[derive(Debug)]
pub struct Selector {
    target: RecoveryTarget,
    reached: GtidPos,
    format: Option<Vec<u8>>,
    done: bool,
    rebase: Option<Rebase>,
    /// When the backup the replay continues had finished: its own last transactions were
    /// committed by then.
    started_by: Option<DateTime<Utc>>,
    /// Whether a transaction was passed over for the target (the segment's end is then not
    /// where the replay is).
    passed_over: bool,
    /// What the server being replayed into already holds of this history
    /// ([`super::resume::already_held`]): passed over, not applied again.
    held: Option<GtidPos>,
    /// Transactions selected.
    pub transactions: u64,
    /// Transactions passed over because the server already held them.
    pub already_held: u64,
    /// Commit stamp of the last selected transaction.
    pub last_commit: Option<DateTime<Utc>>,
}

impl Selector {
    pub fn new(start: GtidPos, target: RecoveryTarget) -> Selector {
        Selector {
            reached: start,
            target,
            format: None,
            done: false,
            rebase: None,
            started_by: None,
            passed_over: false,
            held: None,
            transactions: 0,
            already_held: 0,
            last_commit: None,
        }
    }

    /// Writes the selected transactions under the GTIDs of the server `rebase` describes
    /// instead of the archived ones.
    pub fn rebased(mut self, rebase: Rebase) -> Selector {
        self.rebase = Some(rebase);
        self
    }

    /// The server being replayed into already holds this history up to `held` (checked to be on
    /// it): those transactions are checked like any other and passed over.
    pub fn resuming(mut self, held: Option<GtidPos>) -> Selector {
        self.held = held;
        self
    }

    /// The replay continues a backup that finished at `finished`. A transaction at the start
    /// position committed well after that is not the backup's: another history reused the
    /// same GTIDs (an old primary rebuilt and made primary again writes its old server id's
    /// numbers anew), and the replay stops rather than mix them.
    pub fn started_by(mut self, finished: DateTime<Utc>) -> Selector {
        self.started_by = Some(finished);
        self
    }

    /// The position after the selected transactions (in the archive's GTIDs).
    pub fn reached(&self) -> &GtidPos {
        &self.reached
    }

    /// Whether the target has been passed (later segments add nothing).
    pub fn done(&self) -> bool {
        self.done
    }

    /// Appends the selected events of one segment's plaintext to `out` (the body of a binlog
    /// whose magic the caller wrote); `after` is where the segment's manifest says it starts.
    ///
    /// The history is checked transaction by transaction, servers included: in each domain the
    /// segment must start exactly where the replay is, or hold the replay's last transaction
    /// itself before anything after it is taken; a transaction with the number the replay is
    /// at but from another server is another branch of history and stops the replay.
    pub fn take(
        &mut self,
        id: &str,
        after: &GtidPos,
        plain: &Spool,
        out: &mut SpoolWriter,
    ) -> Result<()> {
        let damaged = |reason: String| Error::DamagedSegment {
            id: id.to_string(),
            reason,
        };
        let other_branch = |reason: String| Error::OtherBranch {
            id: id.to_string(),
            reason,
        };
        // Domains in which this segment is known to continue the replay.
        let mut placed: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let mut assembler = Assembler::default();
        for event in crate::binlog::event::file_events(plain).map_err(damaged)? {
            if self.done {
                break;
            }
            let event = event.map_err(damaged)?;
            let step = match assembler.push(event) {
                Ok(step) => step,
                Err(AssembleError::Spill { reason, .. }) => {
                    return Err(Error::spool(std::io::Error::other(reason)))
                }
                Err(e) => return Err(damaged(e.to_string())),
            };
            match step {
                Step::Format(fde) => {
                    if self.format.as_deref() != Some(fde.bytes()) {
                        self.format = Some(fde.bytes().to_vec());
                        out.write(fde.bytes()).map_err(Error::spool)?;
                    }
                }
                Step::Transaction(trx) => {
                    // Also what an earlier segment gave: a chain listed again after a segment
                    // was compacted may continue inside a segment.
                    let domain = trx.gtid.domain;
                    if let Some(at) = self
                        .reached
                        .get(domain)
                        .filter(|_| self.reached.includes(trx.gtid))
                    {
                        if at.seq == trx.gtid.seq {
                            if at != trx.gtid {
                                return Err(other_branch(format!(
                                    "it holds {} where the history being restored holds {at}",
                                    trx.gtid
                                )));
                            }
                            if let Some(finished) =
                                self.started_by.filter(|_| self.transactions == 0)
                            {
                                let committed = i64::from(trx.committed);
                                if committed > finished.timestamp() + START_STAMP_SLACK_SECONDS {
                                    return Err(other_branch(format!(
                                        "it holds {at} committed at {}, after the backup being \
                                         continued finished ({}): another history with the same \
                                         GTIDs",
                                        stamp(committed),
                                        finished.format("%Y-%m-%dT%H:%M:%SZ")
                                    )));
                                }
                            }
                            placed.insert(domain);
                        }
                        continue;
                    }
                    if !placed.contains(&domain) {
                        if self.reached.get(domain) != after.get(domain) {
                            return Err(other_branch(format!(
                                "it starts at {after} and does not hold {}, where the history \
                                 being restored is, before {}",
                                show_domain(&self.reached, domain),
                                trx.gtid
                            )));
                        }
                        placed.insert(domain);
                    }
                    if let RecoveryTarget::Gtid(p) = &self.target {
                        if let Some(want) = p.get(domain).filter(|w| w.seq == trx.gtid.seq) {
                            if want != trx.gtid {
                                return Err(other_branch(format!(
                                    "the target names {want} but this history holds {} at that \
                                     number",
                                    trx.gtid
                                )));
                            }
                        }
                    }
                    let wanted = match &self.target {
                        RecoveryTarget::Latest => true,
                        RecoveryTarget::Gtid(p) => p.includes(trx.gtid),
                        RecoveryTarget::Time(t) => i64::from(trx.committed) <= t.timestamp(),
                    };
                    if !wanted {
                        self.passed_over = true;
                        // One domain is a single sequence: nothing after the first transaction
                        // beyond the target is wanted. Other domains' may still be.
                        if !matches!(&self.target, RecoveryTarget::Gtid(p) if p.gtids().count() > 1)
                        {
                            self.done = true;
                        }
                        continue;
                    }
                    if let Some(have) = self.held.as_ref().and_then(|h| h.get(domain)) {
                        if trx.gtid.seq <= have.seq {
                            if trx.gtid.seq == have.seq && trx.gtid != have {
                                return Err(other_branch(format!(
                                    "it holds {} where the server being replayed into is at {have}",
                                    trx.gtid
                                )));
                            }
                            self.reached.advance(trx.gtid);
                            self.already_held += 1;
                            self.last_commit =
                                DateTime::from_timestamp(i64::from(trx.committed), 0);
                            continue;
                        }
                    }
                    let split = self
                        .format
                        .as_deref()
                        .filter(|_| trx.events.len() > SPLIT_ABOVE);
                    match (&mut self.rebase, split) {
                        (Some(rebase), Some(fde)) => {
                            let mut rebased =
                                SpoolWriter::new(SpillRules::memory(TRANSACTION_MEMORY));
                            rebase
                                .transaction(&trx.events, &mut rebased)
                                .map_err(damaged)?;
                            let rebased = rebased.finish().map_err(Error::spool)?;
                            statement_per_row_event(fde, &rebased, out).map_err(damaged)?;
                        }
                        (Some(rebase), None) => {
                            rebase.transaction(&trx.events, out).map_err(damaged)?
                        }
                        (None, Some(fde)) => {
                            statement_per_row_event(fde, &trx.events, out).map_err(damaged)?
                        }
                        (None, None) => out.append(&trx.events).map_err(Error::spool)?,
                    }
                    self.reached.advance(trx.gtid);
                    self.transactions += 1;
                    self.last_commit = DateTime::from_timestamp(i64::from(trx.committed), 0);
                }
                Step::Nothing | Step::Heartbeat => {}
            }
        }
        if assembler.in_transaction() {
            return Err(damaged("it ends inside a transaction".into()));
        }
        Ok(())
    }

    /// [`Selector::take`] of a plaintext in memory, into memory.
    #[cfg(test)]
    pub fn take_bytes(
        &mut self,
        id: &str,
        after: &GtidPos,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let mut w = SpoolWriter::new(crate::spool::SpillRules::memory(usize::MAX));
        let taken = self.take(id, after, &Spool::from_bytes(plain.to_vec()), &mut w);
        out.extend(
            w.finish()
                .map_err(Error::spool)?
                .to_vec()
                .map_err(Error::spool)?,
        );
        taken
    }

    /// After a segment taken whole: checks that its transactions end where its manifest says
    /// (`through`), so a segment whose data and manifest disagree stops the replay instead of
    /// letting the chain go on from a position the data never reached.
    pub fn check_end(&self, id: &str, through: &GtidPos) -> Result<()> {
        if self.passed_over {
            return Ok(());
        }
        let ends_there = through.gtids().all(|g| {
            self.reached
                .get(g.domain)
                .is_some_and(|r| r == g || r.seq > g.seq)
        });
        if ends_there {
            Ok(())
        } else {
            Err(Error::DamagedSegment {
                id: id.to_string(),
                reason: format!(
                    "its transactions end at {}, its manifest says {through}",
                    self.reached
                ),
            })
        }
    }

    /// Checks that a GTID target was reached in full, exactly, and that the server being
    /// replayed into held nothing beyond where the replay stopped.
    pub fn finish(&self) -> Result<()> {
        if let Some(held) = &self.held {
            if !self.reached.covers(held) {
                return Err(Error::PointInTime(format!(
                    "the server already holds the archived history up to {held}, past where the \
                     target stops ({}): it was restored to a later point ({} transactions \
                     applied)",
                    self.reached, self.transactions
                )));
            }
        }
        if let RecoveryTarget::Gtid(p) = &self.target {
            let exact = p.gtids().all(|g| {
                self.reached
                    .get(g.domain)
                    .is_some_and(|r| r == g || r.seq > g.seq)
            });
            if !exact {
                return Err(Error::PointInTime(format!(
                    "the archive reaches {} but not all of GTID {p}",
                    self.reached
                )));
            }
        }
        Ok(())
    }
}

/// A transaction larger than this is replayed with one statement per row event
/// ([`statement_per_row_event`]): far below any `max_allowed_packet`, base64 included.
const SPLIT_ABOVE: u64 = 1 << 20;

/// How much later than a backup's finish its last transaction may be stamped: the source's
/// clock and the backup tool's may disagree by this much.
const START_STAMP_SLACK_SECONDS: i64 = 60;

fn stamp(secs: i64) -> String {
    DateTime::from_timestamp(secs, 0).map_or_else(
        || secs.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// The last transaction of `domain` in `pos`, for messages.
fn show_domain(pos: &GtidPos, domain: u32) -> String {
    pos.get(domain)
        .map_or_else(|| format!("nothing of domain {domain}"), |g| g.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::window::tests_support::{plain, pos};

    #[test]
    fn a_replay_stays_on_one_branch_of_history() {
        let lost = plain(&[(1, 101), (1, 102), (1, 103)]);
        let survivor = plain(&[(2, 101), (2, 102)]);
        let beyond = plain(&[(1, 103)]);
        // (start, target, the segment's `after`, its plaintext, reached or the error)
        type Case<'a> = (
            &'a str,
            RecoveryTarget,
            &'a str,
            &'a [u8],
            Result<&'a str, &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                "0-1-100",
                RecoveryTarget::Latest,
                "0-1-100",
                &survivor,
                Ok("0-2-102"),
            ),
            // Starting inside the segment, at one of its own transactions.
            (
                "0-1-101",
                RecoveryTarget::Latest,
                "0-1-100",
                &lost,
                Ok("0-1-103"),
            ),
            // The survivor's position, read against the lost tail's segment.
            (
                "0-2-101",
                RecoveryTarget::Latest,
                "0-1-100",
                &lost,
                Err("it holds 0-1-101 where the history being restored holds 0-2-101"),
            ),
            // A segment that starts elsewhere and never holds the replay's position.
            (
                "0-2-102",
                RecoveryTarget::Latest,
                "0-1-102",
                &beyond,
                Err("it starts at 0-1-102 and does not hold 0-2-102"),
            ),
            (
                "0-1-100",
                RecoveryTarget::Gtid(pos("0-1-102")),
                "0-1-100",
                &survivor,
                Err("the target names 0-1-102 but this history holds 0-2-102"),
            ),
            (
                "0-1-100",
                RecoveryTarget::Gtid(pos("0-1-102")),
                "0-1-100",
                &lost,
                Ok("0-1-102"),
            ),
        ];
        for (start, target, after, plain, want) in cases {
            let mut sel = Selector::new(pos(start), target.clone());
            let got = sel
                .take_bytes("s", &pos(after), plain, &mut Vec::new())
                .and_then(|()| sel.finish())
                .map(|()| sel.reached().to_string());
            match (got, want) {
                (Ok(reached), Ok(w)) => assert_eq!(reached, w, "from {start} to {target}"),
                (Err(e), Err(w)) => {
                    let e = e.to_string();
                    assert!(e.contains(w), "from {start} to {target}: {e}");
                    assert!(e.contains("another branch of history"), "{e}");
                }
                (got, _) => panic!("from {start} to {target}: {got:?}"),
            }
        }
        // The start's own transaction, stamped after the backup finished: the same GTIDs
        // written anew by another history.
        let finished = |secs: i64| DateTime::from_timestamp(secs, 0).unwrap();
        let mut sel =
            Selector::new(pos("0-1-101"), RecoveryTarget::Latest).started_by(finished(-100));
        let e = sel
            .take_bytes("s", &pos("0-1-100"), &lost, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("it holds 0-1-101 committed at 1970-01-01T00:00:05Z, after the backup"),
            "{e}"
        );
        let mut sel = Selector::new(pos("0-1-101"), RecoveryTarget::Latest).started_by(finished(0));
        sel.take_bytes("s", &pos("0-1-100"), &lost, &mut Vec::new())
            .unwrap();
        assert_eq!(sel.reached().to_string(), "0-1-103");

        // A segment whose data ends short of what its manifest says.
        let mut sel = Selector::new(pos("0-1-100"), RecoveryTarget::Latest);
        sel.take_bytes("s", &pos("0-1-100"), &lost, &mut Vec::new())
            .unwrap();
        assert!(sel.check_end("s", &pos("0-1-103")).is_ok());
        let e = sel.check_end("s", &pos("0-1-104")).unwrap_err().to_string();
        assert!(
            e.contains("end at 0-1-103, its manifest says 0-1-104"),
            "{e}"
        );

        // A GTID target beyond the end, or on a number this history never had.
        let mut sel = Selector::new(pos("0-1-100"), RecoveryTarget::Gtid(pos("0-1-105")));
        sel.take_bytes("s", &pos("0-1-100"), &lost, &mut Vec::new())
            .unwrap();
        let e = sel.finish().unwrap_err().to_string();
        assert!(
            e.contains("reaches 0-1-103 but not all of GTID 0-1-105"),
            "{e}"
        );
    }
}
