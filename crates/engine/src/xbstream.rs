//! Native xbstream extraction (payload, sparse and end-of-file chunks, CRC-32 checked), so a
//! physical restore needs neither a pipe to `xbstream -x` / `mbstream -x` nor their single thread.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

const MAGIC: &[u8; 8] = b"XBSTCK01";
const FLAG_IGNORABLE: u8 = 0x01;
/// Largest path xbstream writers emit (FN_REFLEN).
const MAX_PATH: u32 = 512;
/// Refuse payloads larger than this: real writers use at most a few MiB.
const MAX_PAYLOAD: u64 = 1 << 30;

/// What was extracted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Extracted {
    /// Files written.
    pub files: u64,
    /// Payload bytes written.
    pub bytes: u64,
}

/// Reads an xbstream from `input` and writes its files below `dest` (which must exist).
pub fn extract<R: Read>(mut input: R, dest: &Path) -> Result<Extracted, String> {
    let mut open: HashMap<Vec<u8>, File> = HashMap::new();
    let mut seen: std::collections::HashSet<Vec<u8>> = Default::default();
    let mut stats = Extracted::default();
    let mut payload = Vec::new();
    let mut offset_in_stream = 0u64;
    loop {
        let mut header = [0u8; 14];
        if !read_header(&mut input, &mut header)
            .map_err(|e| format!("failed to read chunk header at offset {offset_in_stream}: {e}"))?
        {
            break;
        }
        let at = offset_in_stream;
        offset_in_stream += 14;
        if &header[..8] != MAGIC {
            return Err(format!("wrong chunk magic at offset {at}"));
        }
        let flags = header[8];
        let kind = header[9];
        let path_len = u32::from_le_bytes(header[10..14].try_into().expect("4 bytes"));
        if path_len == 0 || path_len > MAX_PATH {
            return Err(format!("path length {path_len} is invalid at offset {at}"));
        }
        let mut path = vec![0u8; path_len as usize];
        read_exact(&mut input, &mut path, at)?;
        offset_in_stream += u64::from(path_len);
        match kind {
            b'E' => {
                if let Some(f) = open.remove(&path) {
                    drop(f);
                } else if !seen.contains(&path) {
                    // An empty file is announced only by its end-of-file chunk.
                    create(dest, &path)?;
                    seen.insert(path.clone());
                    stats.files += 1;
                }
                continue;
            }
            b'P' | b'S' => {}
            _ if flags & FLAG_IGNORABLE != 0 => {}
            other => return Err(format!("unknown chunk type 0x{other:02x} at offset {at}")),
        }
        let sparse_entries = if kind == b'S' {
            let mut n = [0u8; 4];
            read_exact(&mut input, &mut n, at)?;
            offset_in_stream += 4;
            u32::from_le_bytes(n)
        } else {
            0
        };
        let mut fixed = [0u8; 20];
        read_exact(&mut input, &mut fixed, at)?;
        offset_in_stream += 20;
        let length = u64::from_le_bytes(fixed[..8].try_into().expect("8 bytes"));
        let offset = u64::from_le_bytes(fixed[8..16].try_into().expect("8 bytes"));
        let checksum = u32::from_le_bytes(fixed[16..20].try_into().expect("4 bytes"));
        if length > MAX_PAYLOAD {
            return Err(format!(
                "chunk at offset {at} declares {length} payload bytes"
            ));
        }
        let map_len = sparse_entries as usize * 8;
        payload.resize(map_len + length as usize, 0);
        read_exact(&mut input, &mut payload, at)?;
        offset_in_stream += payload.len() as u64;
        if crc32fast::hash(&payload) != checksum {
            return Err(format!("checksum mismatch in chunk at offset {at}"));
        }
        if kind != b'P' && kind != b'S' {
            continue;
        }
        if !open.contains_key(&path) {
            if seen.contains(&path) {
                return Err(format!(
                    "file {} reappears after its end-of-file chunk",
                    String::from_utf8_lossy(&path)
                ));
            }
            let f = create(dest, &path)?;
            seen.insert(path.clone());
            stats.files += 1;
            open.insert(path.clone(), f);
        }
        let file = open.get(&path).expect("opened above");
        let write_err =
            |e: std::io::Error| format!("failed to write {}: {e}", String::from_utf8_lossy(&path));
        let (map, data) = payload.split_at(map_len);
        if kind == b'P' {
            file.write_all_at(data, offset).map_err(write_err)?;
        } else {
            let mut pos = offset;
            let mut used = 0usize;
            for entry in map.chunks_exact(8) {
                let skip = u64::from(u32::from_le_bytes(entry[..4].try_into().expect("4 bytes")));
                let len = u32::from_le_bytes(entry[4..].try_into().expect("4 bytes")) as usize;
                if used + len > data.len() {
                    return Err(format!(
                        "sparse map of chunk at offset {at} exceeds its payload"
                    ));
                }
                pos += skip;
                file.write_all_at(&data[used..used + len], pos)
                    .map_err(write_err)?;
                pos += len as u64;
                used += len;
            }
            if file.metadata().map_err(write_err)?.len() < pos {
                file.set_len(pos).map_err(write_err)?;
            }
        }
        stats.bytes += length;
    }
    if let Some(path) = open.keys().next() {
        return Err(format!(
            "stream ended with {} file(s) unfinished, e.g. {}",
            open.len(),
            String::from_utf8_lossy(path)
        ));
    }
    if stats.files == 0 {
        return Err("stream holds no files".into());
    }
    Ok(stats)
}

/// Fills `buf` unless the stream ends cleanly before its first byte.
fn read_header<R: Read>(input: &mut R, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "stream truncated inside a chunk header",
                ))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn read_exact<R: Read>(input: &mut R, buf: &mut [u8], chunk_at: u64) -> Result<(), String> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => {
            format!("stream truncated inside the chunk at offset {chunk_at}")
        }
        _ => format!("failed to read the chunk at offset {chunk_at}: {e}"),
    })
}

/// Creates `dest/path` after checking that `path` stays inside `dest`.
fn create(dest: &Path, path: &[u8]) -> Result<File, String> {
    let rel = Path::new(std::ffi::OsStr::from_bytes(path));
    let safe = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !safe {
        return Err(format!(
            "refusing path {} that leaves the target directory",
            rel.display()
        ));
    }
    let full: PathBuf = dest.join(rel);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("failed to create directory {}: {e}", parent.display()))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&full)
        .map_err(|e| format!("failed to create {}: {e}", full.display()))
}

/// Writes xbstream chunks (test support and documentation of the format).
#[cfg(test)]
pub(crate) fn chunk(
    kind: u8,
    path: &str,
    offset: u64,
    data: &[u8],
    sparse: &[(u32, u32)],
) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(0);
    out.push(kind);
    out.extend_from_slice(&(path.len() as u32).to_le_bytes());
    out.extend_from_slice(path.as_bytes());
    if kind == b'E' {
        return out;
    }
    if kind == b'S' {
        out.extend_from_slice(&(sparse.len() as u32).to_le_bytes());
    }
    let mut body = Vec::new();
    for (skip, len) in sparse {
        body.extend_from_slice(&skip.to_le_bytes());
        body.extend_from_slice(&len.to_le_bytes());
    }
    body.extend_from_slice(data);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stream: &[u8]) -> (tempfile::TempDir, Result<Extracted, String>) {
        let dir = tempfile::tempdir().unwrap();
        let r = extract(stream, dir.path());
        (dir, r)
    }

    #[test]
    fn payload_sparse_and_empty_files() {
        let mut s = chunk(b'P', "db/t.ibd", 0, b"hello ", &[]);
        s.extend(chunk(b'P', "ibdata1", 0, b"IB", &[]));
        s.extend(chunk(b'P', "db/t.ibd", 6, b"world", &[]));
        s.extend(chunk(b'E', "db/t.ibd", 0, b"", &[]));
        s.extend(chunk(b'S', "sp.ibd", 0, b"abcdef", &[(0, 2), (10, 4)]));
        s.extend(chunk(b'E', "sp.ibd", 0, b"", &[]));
        s.extend(chunk(b'E', "ibdata1", 0, b"", &[]));
        s.extend(chunk(b'E', "empty.flag", 0, b"", &[]));
        let (dir, r) = run(&s);
        assert_eq!(
            r.unwrap(),
            Extracted {
                files: 4,
                bytes: 19
            }
        );
        assert_eq!(
            std::fs::read(dir.path().join("db/t.ibd")).unwrap(),
            b"hello world"
        );
        let mut sparse = b"ab".to_vec();
        sparse.extend([0u8; 10]);
        sparse.extend(b"cdef");
        assert_eq!(std::fs::read(dir.path().join("sp.ibd")).unwrap(), sparse);
        assert_eq!(std::fs::read(dir.path().join("empty.flag")).unwrap(), b"");
    }

    #[test]
    fn damage_truncation_and_escapes_are_errors() {
        let mut s = chunk(b'P', "a", 0, b"data", &[]);
        s.extend(chunk(b'E', "a", 0, b"", &[]));
        let mut bad = s.clone();
        let last_data = s.len() - chunk(b'E', "a", 0, b"", &[]).len() - 1;
        bad[last_data] ^= 1;
        assert!(run(&bad).1.unwrap_err().contains("checksum"));
        assert!(run(&s[..s.len() - 3]).1.unwrap_err().contains("truncated"));
        let open_only = chunk(b'P', "a", 0, b"data", &[]);
        assert!(run(&open_only).1.unwrap_err().contains("unfinished"));
        let escape = chunk(b'P', "../x", 0, b"data", &[]);
        assert!(run(&escape).1.unwrap_err().contains("leaves the target"));
        let abs = chunk(b'P', "/etc/x", 0, b"data", &[]);
        assert!(run(&abs).1.unwrap_err().contains("leaves the target"));
        assert!(run(b"").1.unwrap_err().contains("no files"));
        assert!(run(b"XBSTCK02\0P\x01\0\0\0a")
            .1
            .unwrap_err()
            .contains("magic"));
    }
}
