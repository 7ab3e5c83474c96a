//! A physical restore's staging directory beside its target: locked while a restore uses it,
//! swapped into place only once everything that belongs to the restore (extraction, prepare, a
//! point-in-time replay) is done, and the left-overs of an interrupted restore cleared by the
//! next one, so a killed restore never leaves a plausible datadir at an unknown point.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const STAGING_TAG: &str = "restore-";
const REPLACED_TAG: &str = "replaced-";
const LOCK_SUFFIX: &str = "restore.lock";

/// A staging directory, held under the target's exclusive restore lock (a file beside it)
/// from before the left-overs are judged until it is committed or dropped (dropping removes
/// it).
#[derive(Debug)]
pub struct StagingDir {
    path: PathBuf,
    target: PathBuf,
    parent: PathBuf,
    name: String,
    /// Keeps the target's lock: another restore into it sees it held.
    _lock: File,
    committed: bool,
}

fn local<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::LocalIo {
        action,
        path: path.display().to_string(),
        source,
    }
}

/// Takes the exclusive lock on the file `path` (created if missing) without waiting; `None`
/// when another process holds it. The lock lasts as long as the returned file is open.
pub fn try_lock(path: &Path) -> Result<Option<File>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(local("open", path))?;
    // SAFETY: flock only reads the descriptor, which `f` keeps open for the call.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(Some(f));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(local("lock", path)(e))
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(local("sync", dir))
}

/// What an earlier restore into the same target left beside it.
#[derive(Debug, Default, PartialEq, Eq)]
struct LeftOvers {
    staging: Vec<PathBuf>,
    replaced: Vec<PathBuf>,
}

fn left_overs(parent: &Path, name: &str) -> Result<LeftOvers> {
    let (staging_prefix, replaced_prefix) = (
        format!(".{name}.{STAGING_TAG}"),
        format!(".{name}.{REPLACED_TAG}"),
    );
    let mut found = LeftOvers::default();
    // Exactly the names this module gives (8 hex digits), so the left-overs of a target named
    // like another's never count.
    let ours = |file_name: &str, prefix: &str| {
        file_name
            .strip_prefix(prefix)
            .is_some_and(|tail| tail.len() == 8 && tail.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    for entry in std::fs::read_dir(parent).map_err(local("read", parent))? {
        let entry = entry.map_err(local("read", parent))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if ours(&file_name, &staging_prefix) {
            found.staging.push(entry.path());
        } else if ours(&file_name, &replaced_prefix) {
            found.replaced.push(entry.path());
        }
    }
    found.staging.sort();
    found.replaced.sort();
    Ok(found)
}

impl StagingDir {
    /// Creates the staging directory for `target` (an absolute path whose checks the caller
    /// made), after clearing what an interrupted restore into it left: a staging directory no
    /// process holds is removed; a target moved aside by a swap that was cut short is moved
    /// back (it was never replaced), or removed when the swap had finished. Refused while
    /// another restore into the same target runs.
    pub fn create(target: &Path) -> Result<StagingDir> {
        let name = target
            .file_name()
            .ok_or_else(|| {
                Error::InvalidArgument(format!("target {} has no directory name", target.display()))
            })?
            .to_string_lossy()
            .into_owned();
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(local("create", &parent))?;
        let lock_path = parent.join(format!(".{name}.{LOCK_SUFFIX}"));
        let lock = try_lock(&lock_path)?.ok_or_else(|| Error::RestoreTarget {
            target: target.display().to_string(),
            reason: format!(
                "another restore into it is running (it holds {})",
                lock_path.display()
            ),
        })?;
        // Under the lock, whatever an earlier restore left is abandoned.
        let found = left_overs(&parent, &name)?;
        let list = |dirs: &[PathBuf]| {
            dirs.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let refused = |reason: String| Error::RestoreTarget {
            target: target.display().to_string(),
            reason,
        };
        match (
            target.exists(),
            found.staging.is_empty(),
            found.replaced.as_slice(),
        ) {
            (_, _, []) => {}
            // Moved aside and never swapped: the old data goes back.
            (false, _, [aside]) => {
                std::fs::rename(aside, target).map_err(local("move back", aside))?;
                tracing::warn!(target = %target.display(), from = %aside.display(), "moved back the directory an interrupted restore had moved aside");
            }
            // The swap happened (its staging directory became the target): the old data goes.
            (true, true, asides) => {
                for aside in asides {
                    std::fs::remove_dir_all(aside).map_err(local("remove", aside))?;
                    tracing::warn!(path = %aside.display(), "removed the directory an earlier restore replaced");
                }
            }
            // Moved aside and never swapped, and something made the target again: the user
            // chooses which is the data.
            (true, false, asides) => {
                return Err(refused(format!(
                    "an interrupted restore moved the old data aside ({}) before it put its own \
                     in place, and the target was made again since; keep the right one as the \
                     target and remove the other",
                    list(asides)
                )))
            }
            (false, _, asides) => {
                return Err(refused(format!(
                    "it is missing and {} directories moved aside by interrupted restores are \
                     beside it ({}); keep the right one as the target and remove the others",
                    asides.len(),
                    list(asides)
                )))
            }
        }
        for dir in &found.staging {
            std::fs::remove_dir_all(dir).map_err(local("remove", dir))?;
            tracing::warn!(path = %dir.display(), "removed the staging directory of an interrupted restore");
        }
        let path = parent.join(format!(
            ".{name}.{STAGING_TAG}{:08x}",
            rand::random::<u32>()
        ));
        std::fs::create_dir(&path).map_err(local("create", &path))?;
        Ok(StagingDir {
            path,
            target: target.to_path_buf(),
            parent,
            name,
            _lock: lock,
            committed: false,
        })
    }

    /// Where the restore writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts the staged directory in place of the target: an empty or absent target is replaced
    /// directly; a non-empty one (the caller was told to replace it) is moved aside first and
    /// removed only after the new data is in place.
    pub fn commit(mut self) -> Result<()> {
        let (path, target) = (self.path.clone(), self.target.clone());
        let mut replaced = None;
        if target.exists() {
            let empty = std::fs::read_dir(&target)
                .map_err(local("read", &target))?
                .next()
                .is_none();
            if empty {
                std::fs::remove_dir(&target).map_err(local("remove", &target))?;
            } else {
                let aside = self.parent.join(format!(
                    ".{}.{REPLACED_TAG}{:08x}",
                    self.name,
                    rand::random::<u32>()
                ));
                std::fs::rename(&target, &aside).map_err(local("move aside", &target))?;
                replaced = Some(aside);
            }
        }
        if let Err(e) = std::fs::rename(&path, &target) {
            if let Some(aside) = &replaced {
                let _ = std::fs::rename(aside, &target);
            }
            return Err(local("move into place", &target)(e));
        }
        self.committed = true;
        sync_dir(&self.parent)?;
        if let Some(aside) = replaced {
            std::fs::remove_dir_all(&aside).map_err(local("remove replaced directory", &aside))?;
        }
        Ok(())
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "failed to remove staging directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
    }

    fn read(dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap()
    }

    /// What is in `dir`, but the restore lock (which stays beside the target).
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(LOCK_SUFFIX))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_committed_staging_directory_replaces_the_target_and_leaves_nothing_beside_it() {
        let work = tempfile::tempdir().unwrap();
        let target = work.path().join("data");
        fill(&target, "old", "old");
        let staging = StagingDir::create(&target).unwrap();
        fill(staging.path(), "new", "new");
        staging.commit().unwrap();
        assert_eq!(names(&target), ["new"]);
        assert_eq!(names(work.path()), ["data"]);
    }

    #[test]
    fn a_dropped_staging_directory_leaves_the_target_as_it_was() {
        let work = tempfile::tempdir().unwrap();
        let target = work.path().join("data");
        fill(&target, "old", "old");
        let staging = StagingDir::create(&target).unwrap();
        fill(staging.path(), "new", "new");
        drop(staging);
        assert_eq!(names(&target), ["old"]);
        assert_eq!(names(work.path()), ["data"]);
    }

    #[test]
    fn a_second_restore_into_the_same_target_is_refused_while_the_first_runs() {
        let work = tempfile::tempdir().unwrap();
        let target = work.path().join("data");
        let first = StagingDir::create(&target).unwrap();
        let e = StagingDir::create(&target).unwrap_err().to_string();
        assert!(e.contains("another restore into it is running"), "{e}");
        drop(first);
        StagingDir::create(&target).unwrap();
    }

    #[test]
    fn what_an_interrupted_restore_left_is_cleared_by_the_next() {
        struct Case {
            name: &'static str,
            target: Option<&'static str>,
            staging: bool,
            replaced: &'static [&'static str],
            /// The target's file after `create`, or the start of the refusal.
            want: std::result::Result<Option<&'static str>, &'static str>,
        }
        let cases = [
            Case {
                name: "killed while staging: the staging directory goes",
                target: Some("old"),
                staging: true,
                replaced: &[],
                want: Ok(Some("old")),
            },
            Case {
                name: "killed between moving the target aside and the swap: moved back",
                target: None,
                staging: true,
                replaced: &["old"],
                want: Ok(Some("old")),
            },
            Case {
                name: "killed after the swap, before the old data was removed",
                target: Some("new"),
                staging: false,
                replaced: &["old"],
                want: Ok(Some("new")),
            },
            Case {
                name: "moved aside, never swapped, and the target made again: the user chooses",
                target: Some("made again"),
                staging: true,
                replaced: &["old"],
                want: Err("an interrupted restore moved the old data aside"),
            },
            Case {
                name: "two directories moved aside and no target: the user chooses",
                target: None,
                staging: false,
                replaced: &["a", "b"],
                want: Err("it is missing and 2 directories moved aside"),
            },
        ];
        for case in cases {
            let work = tempfile::tempdir().unwrap();
            let target = work.path().join("data");
            if let Some(t) = case.target {
                fill(&target, "f", t);
            }
            if case.staging {
                fill(&work.path().join(".data.restore-0000abcd"), "f", "half");
            }
            for (i, r) in case.replaced.iter().enumerate() {
                fill(
                    &work.path().join(format!(".data.replaced-0000000{i}")),
                    "f",
                    r,
                );
            }
            match (StagingDir::create(&target), case.want) {
                (Ok(staging), Ok(want)) => {
                    assert_eq!(
                        want.map(str::to_owned),
                        target.exists().then(|| read(&target, "f")),
                        "{}",
                        case.name
                    );
                    let staging_name = staging.path().file_name().unwrap().to_string_lossy();
                    let mut left = names(work.path());
                    left.retain(|n| *n != staging_name);
                    assert_eq!(left, ["data"], "{}", case.name);
                }
                (Err(e), Err(want)) => {
                    assert!(e.to_string().contains(want), "{}: {e}", case.name)
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
            }
        }
    }
}
