//! MariaDB GTIDs and GTID positions (`0-1-500,1-2-7`: the last transaction of each replication
//! domain). With `gtid_strict_mode`, sequence numbers only grow within a domain, so a position
//! orders the transactions of every domain it names.

use std::collections::BTreeMap;
use std::fmt;

/// One transaction's global id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

impl std::str::FromStr for Gtid {
    type Err = String;

    fn from_str(s: &str) -> Result<Gtid, String> {
        let mut parts = s.trim().splitn(3, '-');
        let mut next = || parts.next().unwrap_or_default();
        let (d, srv, seq) = (next(), next(), next());
        match (d.parse(), srv.parse(), seq.parse()) {
            (Ok(domain), Ok(server), Ok(seq)) => Ok(Gtid {
                domain,
                server,
                seq,
            }),
            _ => Err(format!(
                "{s:?} is not a MariaDB GTID (domain-server-sequence)"
            )),
        }
    }
}

/// A GTID position: per domain, the last transaction applied. Empty means "nothing yet".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GtidPos {
    domains: BTreeMap<u32, Gtid>,
}

impl GtidPos {
    /// Parses `@@gtid_binlog_pos`-style text; a domain named twice keeps its highest number.
    pub fn parse(s: &str) -> Result<GtidPos, String> {
        let mut pos = GtidPos::default();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let gtid: Gtid = entry.parse()?;
            if !pos.includes(gtid) {
                pos.domains.insert(gtid.domain, gtid);
            }
        }
        Ok(pos)
    }

    /// Whether `gtid` is at or before this position in its domain.
    pub fn includes(&self, gtid: Gtid) -> bool {
        self.domains
            .get(&gtid.domain)
            .is_some_and(|last| gtid.seq <= last.seq)
    }

    /// Whether every domain of `other` is at or before this position.
    pub fn covers(&self, other: &GtidPos) -> bool {
        other.domains.values().all(|g| self.includes(*g))
    }

    /// Moves this position past `gtid`.
    pub fn advance(&mut self, gtid: Gtid) {
        self.domains.insert(gtid.domain, gtid);
    }

    /// Whether `gtid` is the next transaction of its domain after this position (a domain the
    /// position does not name accepts any first transaction).
    pub fn is_next(&self, gtid: Gtid) -> bool {
        self.domains
            .get(&gtid.domain)
            .is_none_or(|last| gtid.seq == last.seq + 1)
    }

    /// The last GTID of `domain`, if the position names it.
    pub fn get(&self, domain: u32) -> Option<Gtid> {
        self.domains.get(&domain).copied()
    }

    /// Whether `gtid` is exactly the last transaction of its domain here: the same number
    /// from the same server (numbers alone repeat across branches of history).
    pub fn ends_with(&self, gtid: Gtid) -> bool {
        self.get(gtid.domain) == Some(gtid)
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The last GTID of each domain.
    pub fn gtids(&self) -> impl Iterator<Item = Gtid> + '_ {
        self.domains.values().copied()
    }
}

impl fmt::Display for GtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for g in self.domains.values() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

impl serde::Serialize for GtidPos {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GtidPos {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<GtidPos, D::Error> {
        let s = String::deserialize(d)?;
        GtidPos::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Gtid {
        s.parse().unwrap()
    }

    #[test]
    fn positions_parse_and_print() {
        let cases = [
            ("", ""),
            ("0-1-5", "0-1-5"),
            (" 1-2-7 , 0-1-5 ", "0-1-5,1-2-7"),
            ("0-1-5,0-2-9", "0-2-9"),
            ("0-2-9,0-1-5", "0-2-9"),
        ];
        for (input, printed) in cases {
            assert_eq!(
                GtidPos::parse(input).unwrap().to_string(),
                printed,
                "{input}"
            );
        }
        for bad in ["0-1", "x-1-2", "0-1-2,", "0-1-2-3"] {
            let r = GtidPos::parse(bad);
            assert!(bad == "0-1-2," || r.is_err(), "{bad} parsed as {r:?}");
        }
    }

    #[test]
    fn inclusion_order_and_succession() {
        let pos = GtidPos::parse("0-1-10,1-5-3").unwrap();
        let cases = [
            ("0-1-10", true, false),
            ("0-2-10", true, false),
            ("0-9-11", false, true),
            ("0-1-12", false, false),
            ("1-5-4", false, true),
            ("2-1-1", false, true),
        ];
        for (gtid, included, next) in cases {
            assert_eq!(pos.includes(g(gtid)), included, "includes {gtid}");
            assert_eq!(pos.is_next(g(gtid)), next, "is_next {gtid}");
        }
        assert!(pos.covers(&GtidPos::parse("0-3-9").unwrap()));
        assert!(!pos.covers(&GtidPos::parse("0-3-9,2-1-1").unwrap()));
        assert!(pos.covers(&GtidPos::default()));
    }
}
