//! Filesystem repository (local disk, PVC, NFS): writes go to a temporary name, are fsynced,
//! renamed into place, and the directory is fsynced, so a crash never leaves a partial object
//! under a final name.

use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::{ObjectInfo, ObjectWriter, Store, StoreError};

/// A repository rooted at a directory.
#[derive(Debug, Clone)]
pub struct FsStore {
    root: PathBuf,
}

fn io<'a>(action: &'static str, key: &'a str) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound && (action == "read" || action == "open") {
            StoreError::NotFound {
                key: key.to_string(),
            }
        } else {
            StoreError::Io {
                action,
                key: key.to_string(),
                source,
            }
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking filesystem task panicked")
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing parents, fsyncing each parent whose entries changed.
fn create_dir_durable(dir: &Path) -> std::io::Result<()> {
    // A relative path's last ancestor is "", the current directory.
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        }
    });
    if let Some(parent) = parent {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    if let Some(parent) = parent {
        fsync_dir(parent)?;
    }
    Ok(())
}

impl FsStore {
    /// Opens (creating if needed) a repository directory.
    pub async fn open(root: &Path) -> Result<Self, StoreError> {
        let root = root.to_path_buf();
        let key = root.display().to_string();
        let r = root.clone();
        blocking(move || create_dir_durable(&r))
            .await
            .map_err(|source| StoreError::Io {
                action: "create repository directory",
                key,
                source,
            })?;
        Ok(Self { root })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }
}

#[async_trait]
impl Store for FsStore {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), StoreError> {
        let path = self.path(key);
        let k = key.to_string();
        blocking(move || -> Result<(), StoreError> {
            let dir = path.parent().expect("keys have a parent").to_path_buf();
            let mut again = 3;
            loop {
                create_dir_durable(&dir).map_err(io("create directory for", &k))?;
                match crate::outfile::replace_durably(&path, &data, 0o666) {
                    // A deletion of the directory's last object removed it between its creation
                    // and the write (holds come and go in one directory): created again.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && again > 0 => again -= 1,
                    written => return written.map_err(io("write", &k)),
                }
            }
        })
        .await
    }

    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool, StoreError> {
        let path = self.path(key);
        let k = key.to_string();
        blocking(move || -> Result<bool, StoreError> {
            let dir = path.parent().expect("keys have a parent").to_path_buf();
            create_dir_durable(&dir).map_err(io("create directory for", &k))?;
            crate::outfile::create_durably(&path, &data, 0o666).map_err(io("create", &k))
        })
        .await
    }

    async fn create(&self, key: &str) -> Result<Box<dyn ObjectWriter>, StoreError> {
        let path = self.path(key);
        let k = key.to_string();
        blocking(move || -> Result<Box<dyn ObjectWriter>, StoreError> {
            let dir = path.parent().expect("keys have a parent").to_path_buf();
            create_dir_durable(&dir).map_err(io("create directory for", &k))?;
            let tmp = crate::outfile::temp_path(&path);
            let file = std::fs::File::create(&tmp).map_err(io("create", &k))?;
            Ok(Box::new(FsWriter {
                file: Some(file),
                tmp,
                path,
                dir,
                key: k,
            }))
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let path = self.path(key);
        let k = key.to_string();
        blocking(move || {
            std::fs::read(&path)
                .map(Bytes::from)
                .map_err(io("read", &k))
        })
        .await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let path = self.path(key);
        let k = key.to_string();
        blocking(move || -> Result<Bytes, StoreError> {
            let file = std::fs::File::open(&path).map_err(io("open", &k))?;
            let len = (range.end - range.start) as usize;
            let mut buf = vec![0u8; len];
            let mut done = 0;
            while done < len {
                let n = file
                    .read_at(&mut buf[done..], range.start + done as u64)
                    .map_err(io("read", &k))?;
                if n == 0 {
                    return Err(StoreError::ShortRead {
                        key: k,
                        start: range.start,
                        end: range.end,
                        got: done as u64,
                    });
                }
                done += n;
            }
            Ok(Bytes::from(buf))
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, StoreError> {
        let root = self.root.clone();
        let prefix = prefix.to_string();
        blocking(move || -> Result<Vec<ObjectInfo>, StoreError> {
            // Walk only the directory that can hold matches.
            let start_rel = match prefix.rfind('/') {
                Some(i) => &prefix[..i],
                None => "",
            };
            let mut out = Vec::new();
            let mut stack = vec![(root.join(start_rel), start_rel.to_string())];
            while let Some((dir, rel)) = stack.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io("list", &rel)(e)),
                };
                for entry in entries {
                    let entry = entry.map_err(io("list", &rel))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let key = if rel.is_empty() {
                        name
                    } else {
                        format!("{rel}/{name}")
                    };
                    let meta = match entry.metadata() {
                        Ok(m) => m,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(io("list", &key)(e)),
                    };
                    if meta.is_dir() {
                        if format!("{key}/").starts_with(&prefix)
                            || prefix.starts_with(&format!("{key}/"))
                        {
                            stack.push((entry.path(), key));
                        }
                    } else if key.starts_with(&prefix) {
                        let last_modified: DateTime<Utc> = meta
                            .modified()
                            .map(DateTime::<Utc>::from)
                            .unwrap_or_else(|_| Utc::now());
                        out.push(ObjectInfo {
                            key,
                            size: meta.len(),
                            last_modified,
                        });
                    }
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path(key);
        let k = key.to_string();
        blocking(move || -> Result<(), StoreError> {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("delete", &k)(e)),
            }
            let dir = path.parent().expect("keys have a parent");
            // Removing the backup's directory once empty keeps listings clean; it fails harmlessly
            // while other objects remain.
            if std::fs::remove_dir(dir).is_ok() {
                if let Some(parent) = dir.parent() {
                    let _ = fsync_dir(parent);
                }
            } else {
                let _ = fsync_dir(dir);
            }
            Ok(())
        })
        .await
    }
}

struct FsWriter {
    file: Option<std::fs::File>,
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    key: String,
}

#[async_trait]
impl ObjectWriter for FsWriter {
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError> {
        let mut file = self.file.take().expect("writer used after failure");
        let key = self.key.clone();
        let (file, result) = blocking(move || {
            let r = file.write_all(&data);
            (file, r)
        })
        .await;
        self.file = Some(file);
        result.map_err(io("write", &key))
    }

    async fn finish(mut self: Box<Self>) -> Result<(), StoreError> {
        let file = self.file.take().expect("writer used after failure");
        let (tmp, path, dir, key) = (
            self.tmp.clone(),
            self.path.clone(),
            self.dir.clone(),
            self.key.clone(),
        );
        let result = blocking(move || -> std::io::Result<()> {
            file.sync_all()?;
            drop(file);
            std::fs::rename(&tmp, &path)?;
            fsync_dir(&dir)
        })
        .await;
        if result.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        result.map_err(io("commit", &key))
    }

    async fn abort(mut self: Box<Self>) {
        self.file.take();
        let tmp = self.tmp.clone();
        blocking(move || {
            let _ = std::fs::remove_file(&tmp);
        })
        .await;
    }
}
