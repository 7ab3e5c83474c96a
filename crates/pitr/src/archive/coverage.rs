//! How far in time an idle archive is known complete. While the server writes nothing, the
//! archiver asks it, now and then, for its clock, the oldest statement running and then where
//! its binary log ends ([`super::quiet`]); when the log ends exactly where the archive does,
//! every transaction stamped before the earlier of those moments is archived, and that is
//! recorded as the archive's coverage (signed under the key). A time target after the last
//! commit but inside the quiet period is then recoverable (it restores everything archived).
//! A coverage holds only while the archive still ends exactly where it was written.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::binlog::GtidPos;
use crate::error::{Error, Result};
use bulwark_engine::crypto::MasterKey;
use bulwark_engine::format;
use bulwark_engine::store::Store;
use bulwark_engine::Error as EngineError;

/// The object, beside the archive's segments (a segment listing never takes it for one).
const COVERAGE_NAME: &str = "coverage.json";

/// What the server says of its quiet: who it is, its clock and when the oldest statement
/// still running started (`None`: none runs), then where its binary log ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Quiet {
    pub server_id: u32,
    pub now: f64,
    pub oldest_running: Option<f64>,
    pub binlog_end: GtidPos,
}

/// Until when an archive ending at `through` is complete, from what the server said: `None`
/// unless its binary log ends exactly there. A transaction's stamp is the whole second its
/// last statement started; one committed before the server answered is archived, one whose
/// last statement runs started at or after the oldest running one, and one that starts later
/// at or after the server's now: the second before the earlier of those is covered.
pub fn covered_until(through: &GtidPos, quiet: &Quiet) -> Option<DateTime<Utc>> {
    if quiet.binlog_end != *through || through.is_empty() {
        return None;
    }
    let first_uncovered = quiet
        .oldest_running
        .map_or(quiet.now, |s| s.min(quiet.now))
        .floor() as i64;
    DateTime::from_timestamp(first_uncovered - 1, 0)
}

/// An idle archive's coverage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Coverage {
    /// The archive.
    pub archive: String,
    /// The timeline the archive's end is on.
    pub timeline: u32,
    /// Where the archive ended when nothing followed.
    pub through: GtidPos,
    /// Until when the server was known to have written nothing after `through`.
    pub covered_until: DateTime<Utc>,
}

impl Coverage {
    /// Until when a chain that ends at `reached` is complete in time, when this coverage is
    /// of that very end.
    pub fn extends(&self, reached: &GtidPos) -> Option<DateTime<Utc>> {
        (self.through == *reached && !reached.is_empty()).then_some(self.covered_until)
    }
}

fn object_key(archive: &str) -> String {
    format!("{}{archive}/{COVERAGE_NAME}", format::BINLOGS_PREFIX)
}

/// Records `coverage`, signed under `key`.
pub async fn write(
    store: &Arc<dyn Store>,
    key: Option<&MasterKey>,
    coverage: &Coverage,
) -> Result<()> {
    // Signed for the repository as its key check binds it now, like segments.
    let key = match key {
        Some(key) => Some(bulwark_engine::authenticate::signing_key(store, key).await),
        None => None,
    };
    let body = bulwark_engine::authenticate::manifest_bytes(coverage, key.as_ref());
    store
        .put(&object_key(&coverage.archive), Bytes::from(body))
        .await
        .map_err(|source| {
            Error::from(EngineError::WriteManifest {
                id: object_key(&coverage.archive),
                source,
            })
        })
}

/// The archive's coverage; `None` when there is none, or when it cannot be trusted (not
/// authentic under `key`, unreadable, another archive's), which only narrows a window.
pub async fn read(
    store: &Arc<dyn Store>,
    archive: &str,
    key: Option<&MasterKey>,
) -> Option<Coverage> {
    let raw = store.get(&object_key(archive)).await.ok()?;
    let checked = bulwark_engine::authenticate::check_mac(&raw, key);
    let value = match checked {
        Ok(v) => v,
        Err(refusal) => {
            tracing::warn!(%archive, %refusal, "the archive's coverage is ignored");
            return None;
        }
    };
    let coverage: Coverage = match serde_json::from_value(value) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%archive, error = %e, "the archive's coverage is unreadable and ignored");
            return None;
        }
    };
    (coverage.archive == archive).then_some(coverage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_server_covers_the_second_before_its_oldest_running_statement() {
        let through = GtidPos::parse("0-1-20").unwrap();
        let quiet = |end: &str, now: f64, oldest: Option<f64>| Quiet {
            server_id: 1,
            now,
            oldest_running: oldest,
            binlog_end: GtidPos::parse(end).unwrap(),
        };
        let t = |s: i64| DateTime::from_timestamp(s, 0);
        for (name, q, want) in [
            ("nothing runs", quiet("0-1-20", 1000.7, None), t(999)),
            (
                "a statement runs",
                quiet("0-1-20", 1000.7, Some(990.2)),
                t(989),
            ),
            (
                "it began this second",
                quiet("0-1-20", 1000.7, Some(1000.1)),
                t(999),
            ),
            ("the log went on", quiet("0-1-21", 1000.7, None), None),
            (
                "another server's number",
                quiet("0-2-20", 1000.7, None),
                None,
            ),
        ] {
            assert_eq!(covered_until(&through, &q), want, "{name}");
        }
    }

    #[test]
    fn a_coverage_extends_only_the_end_it_was_written_at() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let c = Coverage {
            archive: "default".into(),
            timeline: 1,
            through: GtidPos::parse("0-1-20").unwrap(),
            covered_until: at,
        };
        for (name, reached, want) in [
            ("its end", "0-1-20", Some(at)),
            ("a later end", "0-1-21", None),
            ("another server's same number", "0-2-20", None),
            ("an end with another domain", "0-1-20,1-1-3", None),
        ] {
            assert_eq!(c.extends(&GtidPos::parse(reached).unwrap()), want, "{name}");
        }
    }
}
