//! What a running server already holds of the history a replay continues: transactions an
//! earlier or interrupted replay applied (the server logged them under their archived GTIDs)
//! are passed over, never applied twice, and a server whose position is not on that history is
//! refused before anything is sent. Pure; table-tested.

use crate::binlog::{Gtid, GtidPos};

/// What the server records of transactions that are not its own: its replica position (which
/// a replay records at its end) and, in its binary log, the last GTIDs under another server's
/// id. Its own writes (a logical load binary-logged under its id) say nothing of the archive,
/// even when the source had the same id and the numbers meet.
pub fn not_its_own(replica: &GtidPos, binlog: &GtidPos, server_id: u32) -> GtidPos {
    let mut known = replica.clone();
    for g in binlog.gtids().filter(|g| g.server != server_id) {
        if !known.includes(g) {
            known.advance(g);
        }
    }
    known
}

/// The part of `known` (what the server holds of others' histories, [`not_its_own`]) that lies
/// on the history being replayed: in each domain the replay carries past `start`, the server's
/// last transaction when it is after `start`. Each must be a transaction of that history
/// exactly (`on_history`); one from another history is refused, as a replay would mix them.
pub fn already_held(
    start: &GtidPos,
    replayed_through: &GtidPos,
    known: &GtidPos,
    on_history: impl Fn(Gtid) -> bool,
) -> Result<Option<GtidPos>, String> {
    let mut held = GtidPos::default();
    for end in replayed_through.gtids() {
        if start.ends_with(end) {
            continue;
        }
        let Some(have) = known.get(end.domain) else {
            continue;
        };
        let from = start.get(end.domain).map_or(0, |g| g.seq);
        if have.seq <= from {
            continue;
        }
        if !on_history(have) {
            return Err(format!(
                "the server holds {have}, which is not in the archived history after the \
                 backup's point ({}): it has another history's transactions there, and a \
                 replay would mix the two (restore into a server afresh)",
                show(start)
            ));
        }
        held.advance(have);
    }
    Ok((!held.is_empty()).then_some(held))
}

fn show(pos: &GtidPos) -> String {
    if pos.is_empty() {
        "the start".into()
    } else {
        pos.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(s: &str) -> GtidPos {
        GtidPos::parse(s).unwrap()
    }

    #[test]
    fn a_server_resumes_only_on_the_history_being_replayed() {
        // The archive after the backup's point 0-1-10 holds 0-1-11..=0-1-20, and domain 1's
        // 1-1-1..=1-1-5.
        let on_history = |g: Gtid| {
            (g.domain == 0 && g.server == 1 && (11..=20).contains(&g.seq))
                || (g.domain == 1 && g.server == 1 && (1..=5).contains(&g.seq))
        };
        let (start, through) = (pos("0-1-10"), pos("0-1-20,1-1-5"));
        type Case<'a> = (&'a str, &'a str, Result<Option<&'a str>, &'a str>);
        let cases: [Case; 7] = [
            ("restored afresh: at the backup's point", "0-1-10", Ok(None)),
            ("nothing recorded", "", Ok(None)),
            ("behind the backup's point", "0-1-4", Ok(None)),
            ("an interrupted replay", "0-1-15", Ok(Some("0-1-15"))),
            (
                "a finished replay",
                "0-1-20,1-1-5",
                Ok(Some("0-1-20,1-1-5")),
            ),
            (
                "a domain the archive never wrote is no concern",
                "0-1-12,7-3-900",
                Ok(Some("0-1-12")),
            ),
            (
                "another history under the archive's numbers",
                "0-2-15",
                Err("the server holds 0-2-15"),
            ),
        ];
        for (name, known, want) in cases {
            let got = already_held(&start, &through, &pos(known), on_history);
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    assert_eq!(got, want.map(pos), "{name}")
                }
                (Err(e), Err(want)) => assert!(e.contains(want), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_servers_own_writes_say_nothing_of_the_archive() {
        let cases = [
            ("a load logged under its own id", "", "0-1-138", 1, ""),
            (
                "a replay logged under the source's id",
                "",
                "0-1-15",
                2,
                "0-1-15",
            ),
            (
                "the replica position a replay recorded",
                "0-1-15",
                "0-1-138",
                1,
                "0-1-15",
            ),
            ("the later of the two", "0-1-12", "0-3-15", 1, "0-3-15"),
        ];
        for (name, replica, binlog, server_id, want) in cases {
            assert_eq!(
                not_its_own(&pos(replica), &pos(binlog), server_id),
                pos(want),
                "{name}"
            );
        }
    }
}
