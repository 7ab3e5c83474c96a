//! What a restore drill's scratch space must hold: the rule `mysql-backup drill` refuses a
//! scratch directory by, and the operator sizes a drill Job's scratch volume by.

/// Bytes a drill's scratch directory needs for a backup of `plaintext_bytes`: the restored data
/// and, for a logical backup, the indexes and logs a load builds beside it, plus the server's
/// own files (system tables, redo and undo logs).
pub fn scratch_bytes(plaintext_bytes: u64, logical: bool) -> u64 {
    let data = if logical {
        plaintext_bytes.saturating_mul(2)
    } else {
        plaintext_bytes
    };
    data.saturating_add(512 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logical_restore_needs_room_for_what_the_load_builds() {
        assert_eq!(scratch_bytes(1 << 30, false), (1 << 30) + (512 << 20));
        assert_eq!(scratch_bytes(1 << 30, true), (2 << 30) + (512 << 20));
        assert_eq!(scratch_bytes(u64::MAX, true), u64::MAX);
    }
}
