//! What a running server already holds of the history a replay continues: transactions an
//! earlier or interrupted replay applied (the server logged them under their archived GTIDs)
//! are passed over, never applied twice, and a server whose position is not on that history is
//! refused before anything is sent. Pure; table-tested.

use crate::binlog::{Gtid, GtidPos};

/// Refuses a replay when the server's binary log holds an archived transaction of the history
/// being replayed past what the server recorded (`from`: the backup's point, or what it
/// holds): an earlier replay was cut off before it recorded its end, and applying from `from`
/// would apply its transactions twice.
pub fn check_not_interrupted(
    from: &GtidPos,
    replayed_through: &GtidPos,
    logged_by_others: &[Gtid],
    on_history: impl Fn(Gtid) -> bool,
) -> Result<(), String> {
    for logged in logged_by_others {
        if !replayed_through
            .gtids()
            .any(|end| end.domain == logged.domain)
        {
            continue;
        }
        let recorded = from.get(logged.domain).map_or(0, |g| g.seq);
        if logged.seq > recorded && on_history(*logged) {
            return Err(format!(
                "the server's binary log holds archived transaction {logged}, past what it \
                 records holding ({}): an earlier replay was cut off before it recorded its \
                 end (or the server logged those transactions before its last restore), and \
                 replaying would apply them twice; restore afresh with `restore --until`, \
                 which loads the backup and replays in one run",
                show(from)
            ));
        }
    }
    Ok(())
}

/// The part of `known` (the server's replica position: what it records holding of a source's
/// history, as replication and every finished replay record it) that lies
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
    fn a_replay_cut_off_before_it_recorded_its_end_is_refused() {
        let on_history = |g: Gtid| g.domain == 0 && g.server == 1 && (11..=20).contains(&g.seq);
        let through = pos("0-1-20");
        let gtids = |s: &str| -> Vec<Gtid> {
            s.split(',')
                .filter(|e| !e.is_empty())
                .map(|e| e.parse().unwrap())
                .collect()
        };
        let cases = [
            ("nothing logged under another id", "0-1-10", "", Ok(())),
            ("a cut-off replay", "0-1-10", "0-1-15", Err("0-1-15")),
            (
                "a cut-off replay beside another server's later numbers",
                "0-1-10",
                "0-1-15,0-3-5000",
                Err("0-1-15"),
            ),
            ("a finished one it recorded", "0-1-15", "0-1-15", Ok(())),
            ("another history", "0-1-10", "0-9-15", Ok(())),
            ("another domain", "0-1-10", "4-1-15", Ok(())),
        ];
        for (name, from, others, want) in cases {
            let got = check_not_interrupted(&pos(from), &through, &gtids(others), on_history);
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(want)) => assert!(e.contains(want), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
