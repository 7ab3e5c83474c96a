//! Small files written whole: atomically (temporary file, fsync, rename, fsync of the
//! directory), or, for a target that cannot be renamed over (Kubernetes bind-mounts
//! `/dev/termination-log` as a single file), truncated and rewritten in place.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Errors of writing a small file.
#[derive(Debug, thiserror::Error)]
pub enum OutfileError {
    #[error("failed to write {path}")]
    WriteAtomically {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write {path} in place")]
    WriteInPlace {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// How a file was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Through a temporary file renamed over the target.
    Atomically,
    /// By truncating and rewriting the existing target.
    InPlace,
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh temporary name beside `path` (`.<name>.tmp-<random>`), for writing before a rename.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{:08x}", rand::random::<u32>()))
}

/// Creates `path` (which must not exist) holding `contents`, synced; `mode` less the umask.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

/// Replaces `path` with `contents` durably: written to a temporary file that is synced, renamed
/// over `path`, and the directory synced; the temporary file is removed on failure. `mode` (less
/// the umask) applies to the new file.
pub fn replace_durably(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    if path.file_name().is_none() {
        return Err(std::io::Error::other("the path has no file name"));
    }
    let tmp = temp_path(path);
    let written = (|| {
        write_new(&tmp, contents, mode)?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename is durable once the directory is synced.
    std::fs::File::open(dir_of(path))?.sync_all()
}

/// Creates `path` with `contents` durably unless it exists, atomically: readers see no file or
/// the whole one, and of two writers only one creates it (a hard link fails on an existing
/// name). Whether this call created it.
pub fn create_durably(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<bool> {
    if path.file_name().is_none() {
        return Err(std::io::Error::other("the path has no file name"));
    }
    let tmp = temp_path(path);
    let linked = (|| -> std::io::Result<Option<bool>> {
        write_new(&tmp, contents, mode)?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(Some(true)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Some(false)),
            // A filesystem without hard links (some FUSE, SMB and CSI drivers): below.
            Err(_) => Ok(None),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    let created = match linked? {
        Some(created) => created,
        // Created exclusively in place: still one creator, but a reader may see the file
        // while it is being written (a key check then reads as damaged for that moment).
        None => match write_new(path, contents, mode) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e),
        },
    };
    if created {
        std::fs::File::open(dir_of(path))?.sync_all()?;
    }
    Ok(created)
}

/// Replaces `path` with `contents` atomically: readers see the old or the new file, never a
/// part. `mode` applies to a newly written file (e.g. `0o644`).
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), OutfileError> {
    replace_durably(path, contents, mode).map_err(|source| OutfileError::WriteAtomically {
        path: path.display().to_string(),
        source,
    })
}

/// Writes `contents` to `path`, atomically where possible. An existing target that is not a
/// regular file (a device, a symlink) or that cannot be renamed over (its directory is not
/// writable, or it is a mount point) is truncated and rewritten in place instead.
pub fn write_replacing(path: &Path, contents: &[u8]) -> Result<Written, OutfileError> {
    let existing = std::fs::symlink_metadata(path).ok();
    let plain_file = existing.as_ref().map(|m| m.file_type().is_file());
    if plain_file == Some(false) {
        let special = existing.is_some_and(|m| {
            let t = m.file_type();
            t.is_char_device() || t.is_fifo() || t.is_symlink()
        });
        if special {
            return write_in_place(path, contents);
        }
    }
    match write_atomic(path, contents, 0o644) {
        Ok(()) => Ok(Written::Atomically),
        Err(atomic) if plain_file == Some(true) => {
            tracing::debug!(path = %path.display(), error = %crate::chain::chain(&atomic), "atomic write impossible; writing in place");
            write_in_place(path, contents)
        }
        Err(atomic) => Err(atomic),
    }
}

fn write_in_place(path: &Path, contents: &[u8]) -> Result<Written, OutfileError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(contents).map(|()| f))
        .map_err(|source| OutfileError::WriteInPlace {
            path: path.display().to_string(),
            source,
        })?;
    // Devices such as /dev/null cannot be synced; the content is what matters.
    let _ = f.flush();
    let _ = f.sync_all();
    Ok(Written::InPlace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        std::fs::write(&p, "old contents that are longer").unwrap();
        assert_eq!(write_replacing(&p, b"new").unwrap(), Written::Atomically);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn missing_directory_fails_with_the_path() {
        let e = write_atomic(Path::new("/nonexistent-bulwark/x/y"), b"z", 0o644).unwrap_err();
        assert!(crate::chain::chain(&e).starts_with("failed to write /nonexistent-bulwark/x/y"));
    }

    #[test]
    fn symlinks_are_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(
            write_replacing(&link, b"through").unwrap(),
            Written::InPlace
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"through");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
