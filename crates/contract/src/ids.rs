//! Backup ids: `<UTC time, %Y%m%dT%H%M%SZ>-<6 hex digits>`, e.g. `20261122T031633Z-4a0760`.
//! They sort by time, and name the repository's directory of a backup. `mysql-backup` makes
//! one when it is not given one; the operator gives one, recorded before its Job starts, so
//! that a backup cut short (its object deleted mid-run) can always be found and deleted.

use chrono::{DateTime, Utc};

/// The id of a backup started at `at`; `random`'s low 24 bits tell apart backups started in the
/// same second.
pub fn backup_id(at: DateTime<Utc>, random: u32) -> String {
    format!(
        "{}-{:06x}",
        at.format("%Y%m%dT%H%M%SZ"),
        random & 0x00ff_ffff
    )
}

/// Whether `s` has the shape of a backup id (guards paths built from user input).
pub fn is_backup_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 23
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[16] == b'-'
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[17..].iter().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_made_and_recognised() {
        let at = "2026-11-22T03:16:33Z".parse().unwrap();
        assert_eq!(backup_id(at, 0xff4a_0760), "20261122T031633Z-4a0760");
        assert!(is_backup_id(&backup_id(at, 7)));
        for bad in [
            "",
            "latest",
            "20261122T031633Z-4a076",
            "20261122T031633Z-4a0760/..",
            "../../etc/passwd-xxxxxx",
            "20261122X031633Z-4a0760",
        ] {
            assert!(!is_backup_id(bad), "{bad}");
        }
    }
}
