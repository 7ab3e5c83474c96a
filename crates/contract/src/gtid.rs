//! GTID positions (MariaDB) and sets (MySQL) compared: before the agent adopts a restored
//! backup's GTID position, which resets the binary log, it checks that the server has logged
//! nothing beyond that position, so a reset never throws away transactions of its own; the
//! operator compares members before it lets one be the primary.

use std::collections::BTreeMap;

use crate::Engine;

/// Whether every transaction in `logged` (what the server reports: `@@gtid_binlog_pos` on
/// MariaDB, `@@gtid_executed` on MySQL) is within `restored`. Whitespace is ignored; text
/// that does not parse is never within.
pub fn within(engine: Engine, logged: &str, restored: &str) -> bool {
    match engine {
        Engine::MariaDb => mariadb_within(logged, restored),
        Engine::MySql => mysql_within(logged, restored),
    }
}

/// The `domain-server-seq` entries of a MariaDB GTID list (a position or a binlog state).
fn mariadb_gtids(s: &str) -> Option<Vec<(u32, u32, u64)>> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    s.split(',')
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let mut parts = entry.splitn(3, '-');
            Some((
                parts.next()?.parse().ok()?,
                parts.next()?.parse().ok()?,
                parts.next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// `domain → (server_id, seq_no)` of a MariaDB GTID position (`0-1-500,1-2-7`).
fn mariadb_position(s: &str) -> Option<BTreeMap<u32, (u32, u64)>> {
    let mut out = BTreeMap::new();
    for (domain, server, seq) in mariadb_gtids(s)? {
        // A position holds one GTID per domain; the highest counts.
        let e = out.entry(domain).or_insert((server, seq));
        if seq > e.1 {
            *e = (server, seq);
        }
    }
    Some(out)
}

/// Sequence numbers only grow within a domain (gtid_strict_mode), so a position is within
/// another when no domain of it is further along; at the same sequence number, only when it is
/// the same server's transaction (two servers' transactions at one number have diverged). A
/// position cannot show a divergence further back.
fn mariadb_within(logged: &str, restored: &str) -> bool {
    let (Some(logged), Some(restored)) = (mariadb_position(logged), mariadb_position(restored))
    else {
        return false;
    };
    logged
        .iter()
        .all(|(domain, (server, seq))| reaches(&restored, *domain, *server, *seq))
}

/// Whether MariaDB `position` has reached `domain-server-seq`: further along in the domain, or
/// at that very transaction (another server's at the same number has diverged).
fn reaches(position: &BTreeMap<u32, (u32, u64)>, domain: u32, server: u32, seq: u64) -> bool {
    position
        .get(&domain)
        .is_some_and(|(p_server, p_seq)| seq < *p_seq || (seq == *p_seq && server == *p_server))
}

/// Whether every transaction in `logged` is in a server whose own position is `position` and
/// whose binary log's history is `history` (`@@gtid_binlog_state` on MariaDB: the last
/// sequence number of every server in every domain; ignored on MySQL, whose set is whole).
///
/// A MariaDB position holds one GTID per domain, so it cannot show that an old primary's last
/// transaction (`0-100-40`, never replicated) is missing from a new primary that has since
/// written `0-101-41..200`; the history can: the new primary's last transaction from server
/// 100 is `0-100-39`. An empty history (a report without one) falls back to the positions.
pub fn within_history(engine: Engine, logged: &str, position: &str, history: &str) -> bool {
    if !within(engine, logged, position) {
        return false;
    }
    if engine == Engine::MySql || history.trim().is_empty() {
        return true;
    }
    let (Some(logged), Some(history)) = (mariadb_position(logged), mariadb_history(history)) else {
        return false;
    };
    logged.iter().all(|(domain, (server, seq))| {
        // A domain the history does not know was never written through this binary log
        // (a restored position): the positions decided.
        !history.keys().any(|(d, _)| d == domain)
            || history
                .get(&(*domain, *server))
                .is_some_and(|last| last >= seq)
    })
}

/// Whether a server holds nothing another lacks, as far as can be told: every transaction it
/// has `logged` (`@@gtid_binlog_pos` / `@@gtid_executed`) and every one of its `history` is in
/// the other, whose position is `position` and whose history is `other_history`. MySQL: the
/// logged set is whole, and the histories are not used. MariaDB: `history` is the server's
/// `@@gtid_binlog_state` (every server's last transaction in every domain); an
/// entry is beyond the other when the other's position has not reached its sequence number,
/// or when the other's history has fewer of that server's transactions in that domain (an old
/// primary's commit nobody received, which shows even after it replicated the new primary's
/// later ones). A server the other's history does not know in that domain says nothing: a
/// seeded or restored server may know fewer of the old ones.
pub fn holds_nothing_beyond(
    engine: Engine,
    logged: &str,
    history: &str,
    position: &str,
    other_history: &str,
) -> bool {
    match engine {
        Engine::MySql => within(engine, logged, position),
        Engine::MariaDb => {
            let (Some(entries), Some(position), Some(other)) = (
                mariadb_gtids(&format!("{logged},{history}")),
                mariadb_position(position),
                mariadb_history(other_history),
            ) else {
                return false;
            };
            entries.iter().all(|(domain, server, seq)| {
                reaches(&position, *domain, *server, *seq)
                    && other
                        .get(&(*domain, *server))
                        .is_none_or(|last| last >= seq)
            })
        }
    }
}

/// The `gtid_binlog_state` a server restored from a copy at MariaDB `position` takes, given
/// the history its donor reported before the copy began: the history's entries that are not
/// beyond the position (sequence numbers grow within a domain, so an entry at or below the
/// position's number is in the copy), then the position's own entries, which MariaDB takes as
/// each domain's last. Without the history, a seeded member would know only the position's
/// servers and look as if it lacked every other member's last transaction. `None` when either
/// does not parse.
pub fn seeded_history(position: &str, donor_history: &str) -> Option<String> {
    let position = mariadb_position(position)?;
    let history = mariadb_history(donor_history)?;
    let mut before: Vec<(u32, u64, u32)> = history
        .iter()
        .filter(|((domain, server), seq)| {
            position
                .get(domain)
                .is_some_and(|(p_server, p_seq)| *seq <= p_seq && server != p_server)
        })
        .map(|((domain, server), seq)| (*domain, *seq, *server))
        .collect();
    before.sort_unstable();
    let entries = before
        .into_iter()
        .map(|(domain, seq, server)| format!("{domain}-{server}-{seq}"))
        .chain(
            position
                .iter()
                .map(|(domain, (server, seq))| format!("{domain}-{server}-{seq}")),
        );
    Some(entries.collect::<Vec<_>>().join(","))
}

/// What a server holds once it applies what it received: its own `logged` transactions and
/// `received` ones (MariaDB: positions, the later GTID of each domain; MySQL: the union of
/// the sets). The parsers already keep a domain's highest GTID and merge a set's intervals, so
/// both lists are read as one. `None` when either does not parse.
pub fn with_received(engine: Engine, logged: &str, received: &str) -> Option<String> {
    let both = format!("{logged},{received}");
    Some(match engine {
        Engine::MariaDb => mariadb_text(
            mariadb_position(&both)?
                .into_iter()
                .map(|(domain, (server, seq))| ((domain, server), seq)),
        ),
        Engine::MySql => mysql_set(&both)?
            .into_iter()
            .map(|((uuid, tag), intervals)| {
                let tag = if tag.is_empty() {
                    tag
                } else {
                    format!(":{tag}")
                };
                let ranges: Vec<String> = intervals
                    .iter()
                    .map(|(a, b)| {
                        if a == b {
                            a.to_string()
                        } else {
                            format!("{a}-{b}")
                        }
                    })
                    .collect();
                format!("{uuid}{tag}:{}", ranges.join(":"))
            })
            .collect::<Vec<_>>()
            .join(","),
    })
}

/// A MariaDB `history` (`gtid_binlog_state`) with the GTIDs of a `received` position added:
/// what the history will be once the received transactions are applied and logged. Empty
/// when the history is (a report without one), and on MySQL.
pub fn history_with_received(engine: Engine, history: &str, received: &str) -> Option<String> {
    if engine == Engine::MySql || history.trim().is_empty() {
        return Some(String::new());
    }
    Some(mariadb_text(mariadb_history(&format!(
        "{history},{received}"
    ))?))
}

/// MariaDB GTID list text from `(domain, server_id) → seq_no` entries.
fn mariadb_text(entries: impl IntoIterator<Item = ((u32, u32), u64)>) -> String {
    entries
        .into_iter()
        .map(|((domain, server), seq)| format!("{domain}-{server}-{seq}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `(domain, server_id) → last seq_no` of a MariaDB `gtid_binlog_state`.
fn mariadb_history(s: &str) -> Option<BTreeMap<(u32, u32), u64>> {
    let mut out = BTreeMap::new();
    for (domain, server, seq) in mariadb_gtids(s)? {
        let last = out.entry((domain, server)).or_insert(seq);
        *last = (*last).max(seq);
    }
    Some(out)
}

/// `(uuid, tag) → sorted, merged intervals`.
type MysqlSet = BTreeMap<(String, String), Vec<(u64, u64)>>;

/// Parses a MySQL GTID set (`uuid:1-5:7,uuid2:tag:1-3`; 8.4 tags apply to the intervals
/// after them).
fn mysql_set(s: &str) -> Option<MysqlSet> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = MysqlSet::new();
    for entry in s.split(',').filter(|e| !e.is_empty()) {
        let mut parts = entry.split(':');
        let uuid = parts.next()?.to_ascii_lowercase();
        if uuid.len() != 36 || !uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return None;
        }
        let mut tag = String::new();
        for part in parts {
            if part.starts_with(|c: char| c.is_ascii_digit()) {
                let (start, end) = match part.split_once('-') {
                    Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                    None => {
                        let n = part.parse().ok()?;
                        (n, n)
                    }
                };
                if start > end {
                    return None;
                }
                out.entry((uuid.clone(), tag.clone()))
                    .or_default()
                    .push((start, end));
            } else if !part.is_empty()
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                tag = part.to_ascii_lowercase();
            } else {
                return None;
            }
        }
    }
    for intervals in out.values_mut() {
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
        for &(a, b) in intervals.iter() {
            match merged.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        *intervals = merged;
    }
    Some(out)
}

fn mysql_within(logged: &str, restored: &str) -> bool {
    let (Some(logged), Some(restored)) = (mysql_set(logged), mysql_set(restored)) else {
        return false;
    };
    logged.iter().all(|(key, intervals)| {
        let Some(have) = restored.get(key) else {
            return false;
        };
        intervals
            .iter()
            .all(|&(a, b)| have.iter().any(|&(c, d)| c <= a && b <= d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_positions() {
        let cases = [
            ("", "0-1-500", true),
            ("", "", true),
            ("0-1-500", "0-1-500", true),
            ("0-1-400", "0-1-500", true),
            // Adopted, then one more transaction: beyond.
            ("0-100-501", "0-1-500", false),
            ("0-1-500,1-2-3", "0-1-500", false),
            ("1-2-3", "0-1-500,1-2-3", true),
            ("0-1-500", "", false),
            ("garbage", "0-1-500", false),
            // The same number from another server: a transaction the other does not have.
            ("0-100-500", "0-101-500", false),
            ("0-100-499", "0-101-500", true),
        ];
        for (logged, restored, want) in cases {
            assert_eq!(
                within(Engine::MariaDb, logged, restored),
                want,
                "{logged:?} within {restored:?}"
            );
        }
    }

    #[test]
    fn mariadb_histories_show_what_positions_cannot() {
        let cases = [
            // An old primary's last commit, never replicated; the new primary wrote on.
            ("0-100-40", "0-101-200", "0-100-39,0-101-200", false),
            ("0-100-39", "0-101-200", "0-100-39,0-101-200", true),
            ("0-100-35", "0-101-200", "0-100-39,0-101-200", true),
            ("0-101-150", "0-101-200", "0-100-39,0-101-200", true),
            // A server the history never logged in a domain it knows.
            ("0-102-50", "0-101-200", "0-100-39,0-101-200", false),
            // A domain the history does not know (restored position): the positions decide.
            ("1-7-3", "0-101-200,1-7-3", "0-101-200", true),
            // No history reported: the positions decide.
            ("0-100-40", "0-101-200", "", true),
            // What the positions refuse stays refused.
            ("0-100-201", "0-101-200", "0-100-201,0-101-200", false),
            ("0-100-40", "0-101-200", "garbage", false),
        ];
        for (logged, position, history, want) in cases {
            assert_eq!(
                within_history(Engine::MariaDb, logged, position, history),
                want,
                "{logged:?} within {position:?} with history {history:?}"
            );
        }
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        assert!(within_history(
            Engine::MySql,
            &format!("{a}:1-5"),
            &format!("{a}:1-9"),
            "ignored"
        ));
    }

    #[test]
    fn a_member_holding_a_commit_its_primary_lacks_is_seen_by_its_history() {
        let cases = [
            // A replica behind, or level with, its primary.
            ("lagging", "0-100-39,0-101-150", true),
            ("level", "0-100-39,0-101-200", true),
            // An old primary's commit nobody received, then the new primary's writes
            // replicated after it: its position is within, its history is not.
            ("old primary caught up", "0-100-40,0-101-200", false),
            ("ahead of the primary", "0-100-39,0-101-201", false),
            (
                // The primary's history may know fewer old servers (seeded, restored).
                "a server the primary's history does not know",
                "0-100-39,0-102-7,0-101-150",
                true,
            ),
            (
                "a domain the primary never logged",
                "0-101-150,5-9-1",
                false,
            ),
            ("nothing logged", "", true),
            ("garbage", "0-100", false),
        ];
        for (name, history, want) in cases {
            assert_eq!(
                holds_nothing_beyond(
                    Engine::MariaDb,
                    "",
                    history,
                    "0-101-200",
                    "0-100-39,0-101-200"
                ),
                want,
                "{name}"
            );
        }
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let b = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
        let primary = format!("{a}:1-9");
        for (history, want) in [
            (format!("{a}:1-5"), true),
            (format!("{a}:1-9"), true),
            (format!("{a}:1-5,{b}:1"), false),
        ] {
            assert_eq!(
                holds_nothing_beyond(Engine::MySql, &history, "", &primary, ""),
                want,
                "{history}"
            );
        }
    }

    #[test]
    fn a_seeded_member_keeps_the_history_up_to_its_copy() {
        let cases = [
            // The donor's earlier servers, then the copy's position last.
            (
                "0-101-600",
                "0-100-500,0-101-590",
                Some("0-100-500,0-101-600"),
            ),
            // Entries beyond the position (the donor moved on) are left out.
            ("0-101-600", "0-100-650,0-101-640", Some("0-101-600")),
            (
                "0-101-600,1-7-3",
                "0-100-500,1-5-2,2-9-9",
                Some("0-100-500,1-5-2,0-101-600,1-7-3"),
            ),
            ("0-101-600", "", Some("0-101-600")),
            ("0-101-600", "garbage", None),
        ];
        for (position, history, want) in cases {
            assert_eq!(
                seeded_history(position, history).as_deref(),
                want,
                "{position:?} with {history:?}"
            );
        }
        // What a seeded member then says of a lagging replica whose last transaction is from
        // an earlier primary: it has it.
        let state = seeded_history("0-101-600", "0-100-500,0-101-590").unwrap();
        assert!(within_history(
            Engine::MariaDb,
            "0-100-500",
            "0-101-600",
            &state
        ));
        assert!(!within_history(
            Engine::MariaDb,
            "0-100-501",
            "0-101-600",
            &state
        ));
    }

    #[test]
    fn received_transactions_are_added_to_what_a_server_holds() {
        let cases: &[(&str, Engine, &str, &str, Option<&str>)] = &[
            (
                "nothing received",
                Engine::MariaDb,
                "0-1-5",
                "",
                Some("0-1-5"),
            ),
            (
                "received further along",
                Engine::MariaDb,
                "0-1-5",
                "0-1-9",
                Some("0-1-9"),
            ),
            (
                "received behind (already applied)",
                Engine::MariaDb,
                "0-1-9",
                "0-1-5",
                Some("0-1-9"),
            ),
            (
                "another domain received",
                Engine::MariaDb,
                "0-1-5",
                "1-2-3",
                Some("0-1-5,1-2-3"),
            ),
            (
                "nothing logged",
                Engine::MariaDb,
                "",
                "0-1-3",
                Some("0-1-3"),
            ),
            ("unreadable", Engine::MariaDb, "0-1-5", "zero", None),
            (
                "mysql sets joined",
                Engine::MySql,
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:6-9,\
                 4e11fa47-71ca-11e1-9e33-c80aa9429562:tag:1-2",
                Some(
                    "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9,\
                     4e11fa47-71ca-11e1-9e33-c80aa9429562:tag:1-2",
                ),
            ),
            (
                "mysql gap kept",
                Engine::MySql,
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:8",
                Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:8"),
            ),
        ];
        for (name, engine, logged, received, want) in cases {
            assert_eq!(
                with_received(*engine, logged, received).as_deref(),
                *want,
                "{name}"
            );
        }
        assert_eq!(
            history_with_received(Engine::MariaDb, "0-100-39,0-101-40", "0-101-45").as_deref(),
            Some("0-100-39,0-101-45")
        );
        assert_eq!(
            history_with_received(Engine::MariaDb, "", "0-101-45").as_deref(),
            Some("")
        );
    }

    #[test]
    fn mysql_sets() {
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let b = "5d4a2b10-1f2e-11ee-8f00-0242ac120002";
        let cases = [
            (String::new(), format!("{a}:1-5"), true),
            (format!("{a}:1-5"), format!("{a}:1-5"), true),
            (format!("{a}:2-3:5"), format!("{a}:1-5"), true),
            (format!("{a}:1-6"), format!("{a}:1-5"), false),
            // Adjacent intervals of the restored set cover a longer one.
            (format!("{a}:1-7"), format!("{a}:1-3:4-7"), true),
            // Case and line breaks as servers print them.
            (
                format!("{},\n{b}:1-2", a.to_uppercase() + ":1-5"),
                format!("{a}:1-5,{b}:1-9"),
                true,
            ),
            (format!("{b}:1"), format!("{a}:1-5"), false),
            // 8.4 tags.
            (format!("{a}:etl:1-2"), format!("{a}:1-5:etl:1-3"), true),
            (format!("{a}:etl:1-4"), format!("{a}:1-5:etl:1-3"), false),
            ("not-a-uuid:1-3".to_string(), format!("{a}:1-5"), false),
            (format!("{a}:3-1"), format!("{a}:1-5"), false),
        ];
        for (logged, restored, want) in cases {
            assert_eq!(
                within(Engine::MySql, &logged, &restored),
                want,
                "{logged:?} within {restored:?}"
            );
        }
    }
}
