//! The GTID position a physical restore (or a seed's copy) ended at, as the restore leaves it
//! for the agent, and the parsing of what the backup tools record. Pure: the agent's decision
//! (`topology`) reads it; `bootstrap` and `seed` write it.

/// The GTID position a physical restore ended at, left for the agent (a small JSON file).
/// An empty `gtid_set` means the backup has none (binary logging was off at the source): the
/// new servers then start from an empty GTID history, consistently.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoredGtid {
    /// The backup restored.
    pub backup_id: String,
    /// Its GTID position (MariaDB, `domain-server-seq,...`) or GTID set (MySQL), without
    /// whitespace.
    pub gtid_set: String,
    /// A seed's: the donor's binary log history (`gtid_binlog_state`) reported before the
    /// copy, which the new server's history continues (MariaDB; empty otherwise).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gtid_history: String,
}

/// A GTID set without the whitespace servers put in it (MySQL breaks long sets over lines).
pub fn normalize_gtid_set(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Whether `s` holds only what a GTID position or set can (digits, letters of UUIDs and
/// MySQL tags, `-`, `:`, `,`, `_`).
pub fn plausible_gtid_set(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | ',' | '_'))
}

/// The GTID in a binary log coordinates file (`file<TAB>position<TAB>gtid`, the GTID part
/// possibly spread over lines); `None` when there is no such file or no GTID in it.
pub fn parse_binlog_info(text: &str) -> Option<String> {
    let mut fields = text.splitn(3, '\t');
    let (_file, _pos) = (fields.next()?, fields.next()?);
    let gtid = normalize_gtid_set(fields.next()?);
    (!gtid.is_empty()).then_some(gtid)
}
