//! The agent's one API for the small files it keeps on the data volume (orders, the restored
//! GTID, the pending restore) and the files it is handed (mounted secrets): absent is an
//! answer, not an error; a file is replaced whole or not at all (`outfile::replace_durably`:
//! a fresh temporary name, synced, renamed, the directory synced); a removal is made durable
//! by syncing the directory.

use std::path::Path;

use bulwark_engine::outfile::OutfileError;
use zeroize::Zeroizing;

/// A file's text, or `None` when it is not there.
pub fn read_if_present(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A password file's content without its trailing newline; `None` when the file is absent.
pub fn read_secret(path: &Path) -> std::io::Result<Option<Zeroizing<String>>> {
    match bulwark_engine::source::read_password_file(path) {
        Ok(secret) => Ok(Some(secret)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `contents`, whole or not at all, durably; the error names the path.
pub fn replace(path: &Path, contents: &[u8], mode: u32) -> Result<(), OutfileError> {
    bulwark_engine::outfile::write_atomic(path, contents, mode)
}

/// Removes `path` if it is there; the removal is durable once this returns.
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => sync_dir(dir),
        None => sync_dir(Path::new(".")),
    }
}

/// Makes the entries of `dir` (creations, renames, removals) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_replaced_whole_read_back_and_removed_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("order");
        assert_eq!(read_if_present(&path).unwrap(), None);
        replace(&path, b"first", 0o600).unwrap();
        replace(&path, b"second", 0o600).unwrap();
        assert_eq!(read_if_present(&path).unwrap().as_deref(), Some("second"));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["order"], "no temporary file is left beside it");
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert_eq!(read_if_present(&path).unwrap(), None);
        assert!(
            replace(&dir.path().join("missing/order"), b"x", 0o600).is_err(),
            "a directory that is not there is an error, not a silent success"
        );
    }
}
