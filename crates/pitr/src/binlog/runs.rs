//! Runs of GTIDs: consecutive sequence numbers of one domain written by one server. A segment
//! records the runs it holds, so which GTIDs it holds is known exactly, servers included (two
//! branches of history reuse the same numbers). Pure; table-tested.

use serde::{Deserialize, Serialize};

use super::Gtid;

/// Consecutive transactions of one domain, all written first by one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GtidRun {
    pub domain: u32,
    pub server: u32,
    /// Sequence number of the first transaction.
    pub first: u64,
    /// Sequence number of the last transaction.
    pub last: u64,
}

impl GtidRun {
    fn holds(&self, gtid: Gtid) -> bool {
        self.domain == gtid.domain
            && self.server == gtid.server
            && (self.first..=self.last).contains(&gtid.seq)
    }
}

/// Appends `gtid`, the next transaction of a segment, to its runs.
pub fn record(runs: &mut Vec<GtidRun>, gtid: Gtid) {
    if let Some(run) = runs.iter_mut().rev().find(|r| r.domain == gtid.domain) {
        if run.server == gtid.server && run.last.checked_add(1) == Some(gtid.seq) {
            run.last = gtid.seq;
            return;
        }
    }
    runs.push(GtidRun {
        domain: gtid.domain,
        server: gtid.server,
        first: gtid.seq,
        last: gtid.seq,
    });
}

/// Whether `gtid` is exactly one of the transactions of runs `runs`.
pub fn holds(runs: &[GtidRun], gtid: Gtid) -> bool {
    runs.iter().any(|r| r.holds(gtid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Gtid {
        s.parse().unwrap()
    }

    #[test]
    fn runs_follow_servers_and_numbers() {
        let mut runs = Vec::new();
        for gtid in [
            "0-1-5", "0-1-6", "1-3-1", "0-1-7", "0-2-8", "0-2-10", "1-3-2",
        ] {
            record(&mut runs, g(gtid));
        }
        let shown: Vec<(u32, u32, u64, u64)> = runs
            .iter()
            .map(|r| (r.domain, r.server, r.first, r.last))
            .collect();
        assert_eq!(
            shown,
            vec![(0, 1, 5, 7), (1, 3, 1, 2), (0, 2, 8, 8), (0, 2, 10, 10)]
        );
        let cases = [
            ("0-1-6", true),
            ("0-2-6", false),
            ("0-2-9", false),
            ("0-2-10", true),
            ("1-3-2", true),
            ("2-1-1", false),
        ];
        for (gtid, held) in cases {
            assert_eq!(holds(&runs, g(gtid)), held, "{gtid}");
        }
    }
}
