//! Reading the files the agent is handed (what a restore leaves, mounted secrets): absent is
//! an answer, not an error.

use std::path::Path;

use zeroize::Zeroizing;

/// A file the restore leaves for the agent, or `None` when it is not there.
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
