//! Bytes held in memory up to a bound and in unnamed temporary files beyond it, so that a
//! transaction, a segment or a replay's output of any size fits a fixed memory budget. A
//! [`Spool`] is written once ([`SpoolWriter`]) and read any number of times; cloning it
//! shares its parts, and its files vanish when the last clone is dropped.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

/// Memory a transaction being gathered holds before the rest of it goes to a file.
pub const TRANSACTION_MEMORY: usize = 8 << 20;
/// Memory a segment being gathered, read back or replayed holds before the rest of it goes to
/// a file: twice the default segment size, so ordinary segments never touch the disk.
pub const SEGMENT_MEMORY: usize = 32 << 20;
/// Writes to a file are gathered into blocks of this size.
const FILE_BLOCK: usize = 1 << 20;

/// Where and when bytes spill to disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillRules {
    /// Bytes held in memory before the rest goes to a file.
    pub memory: usize,
    /// Directory of the temporary files (`TMPDIR`, else `/tmp`).
    pub dir: PathBuf,
}

impl SpillRules {
    /// At most `memory` bytes in memory, the rest in the temporary directory.
    pub fn memory(memory: usize) -> SpillRules {
        SpillRules {
            memory,
            dir: std::env::temp_dir(),
        }
    }
}

/// One stretch of a spool's bytes.
#[derive(Debug, Clone)]
enum Part {
    Memory(Bytes),
    File { file: Arc<File>, len: u64 },
}

impl Part {
    fn len(&self) -> u64 {
        match self {
            Part::Memory(b) => b.len() as u64,
            Part::File { len, .. } => *len,
        }
    }
}

/// Bytes written once, read any number of times, in memory or in temporary files.
#[derive(Debug, Clone, Default)]
pub struct Spool {
    parts: Vec<Part>,
    len: u64,
}

impl Spool {
    /// A spool of bytes already in memory.
    pub fn from_bytes(bytes: impl Into<Bytes>) -> Spool {
        let bytes: Bytes = bytes.into();
        Spool {
            len: bytes.len() as u64,
            parts: vec![Part::Memory(bytes)],
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes it holds in memory (the rest is in files).
    pub fn in_memory(&self) -> u64 {
        self.parts
            .iter()
            .filter(|p| matches!(p, Part::Memory(_)))
            .map(Part::len)
            .sum()
    }

    /// A reader of its bytes from the start; blocking reads of local files, also offered to
    /// async writers (a temporary file just written is read from the page cache).
    pub fn reader(&self) -> SpoolReader {
        SpoolReader {
            parts: self.parts.clone(),
            index: 0,
            at: 0,
        }
    }

    /// Its bytes in one buffer: only for spools known to be small.
    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len as usize);
        self.reader().read_to_end(&mut out)?;
        Ok(out)
    }
}

/// Reads a spool's bytes in order.
#[derive(Debug)]
pub struct SpoolReader {
    parts: Vec<Part>,
    index: usize,
    /// Offset within the current part.
    at: u64,
}

impl Read for SpoolReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while let Some(part) = self.parts.get(self.index) {
            let left = part.len() - self.at;
            if left == 0 {
                self.index += 1;
                self.at = 0;
                continue;
            }
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = match part {
                Part::Memory(b) => {
                    let start = self.at as usize;
                    buf[..want].copy_from_slice(&b[start..start + want]);
                    want
                }
                Part::File { file, .. } => file.read_at(&mut buf[..want], self.at)?,
            };
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a temporary file is shorter than what was written to it",
                ));
            }
            self.at += n as u64;
            return Ok(n);
        }
        Ok(0)
    }
}

impl tokio::io::AsyncRead for SpoolReader {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = this.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// The stretch being written: in memory until it outgrows the rules, then in a file.
#[derive(Debug)]
enum Run {
    Memory(Vec<u8>),
    File {
        file: File,
        written: u64,
        block: Vec<u8>,
    },
}

/// Writes a spool: in memory while the bytes in memory stay within the rules, then into a new
/// unnamed temporary file.
#[derive(Debug)]
pub struct SpoolWriter {
    rules: SpillRules,
    parts: Vec<Part>,
    run: Run,
    len: u64,
    /// Bytes of the finished parts held in memory: counted against the rules with the run's.
    in_memory: usize,
}

impl SpoolWriter {
    pub fn new(rules: SpillRules) -> SpoolWriter {
        SpoolWriter {
            rules,
            parts: Vec::new(),
            run: Run::Memory(Vec::new()),
            len: 0,
            in_memory: 0,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `data`.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.len += data.len() as u64;
        match &mut self.run {
            Run::Memory(held) if self.in_memory + held.len() + data.len() <= self.rules.memory => {
                held.extend_from_slice(data);
            }
            Run::Memory(held) => {
                let mut file = tempfile::tempfile_in(&self.rules.dir)?;
                file.write_all(held)?;
                file.write_all(data)?;
                let written = (held.len() + data.len()) as u64;
                self.run = Run::File {
                    file,
                    written,
                    block: Vec::with_capacity(FILE_BLOCK),
                };
            }
            Run::File {
                file,
                written,
                block,
            } => {
                *written += data.len() as u64;
                if block.len() + data.len() <= FILE_BLOCK {
                    block.extend_from_slice(data);
                } else {
                    file.write_all(block)?;
                    block.clear();
                    file.write_all(data)?;
                }
            }
        }
        Ok(())
    }

    /// Appends the bytes of `spool`: its files are shared, not copied.
    pub fn append(&mut self, spool: &Spool) -> io::Result<()> {
        for part in &spool.parts {
            match part {
                Part::Memory(b) => self.write(b)?,
                Part::File { .. } => {
                    self.close_run()?;
                    self.len += part.len();
                    self.parts.push(part.clone());
                }
            }
        }
        Ok(())
    }

    /// The spool written.
    pub fn finish(mut self) -> io::Result<Spool> {
        self.close_run()?;
        Ok(Spool {
            parts: self.parts,
            len: self.len,
        })
    }

    /// Ends the stretch being written; the next write starts one in memory.
    fn close_run(&mut self) -> io::Result<()> {
        match std::mem::replace(&mut self.run, Run::Memory(Vec::new())) {
            Run::Memory(held) if held.is_empty() => {}
            Run::Memory(held) => {
                self.in_memory += held.len();
                self.parts.push(Part::Memory(held.into()));
            }
            Run::File {
                mut file,
                written,
                block,
            } => {
                file.write_all(&block)?;
                self.parts.push(Part::File {
                    file: Arc::new(file),
                    len: written,
                });
            }
        }
        Ok(())
    }
}

/// For callers that write through `std::io::Write`.
impl Write for SpoolWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        SpoolWriter::write(self, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(rules: &SpillRules, pieces: &[&[u8]]) -> Spool {
        let mut w = SpoolWriter::new(rules.clone());
        for p in pieces {
            SpoolWriter::write(&mut w, p).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn bytes_stay_in_memory_within_the_rules_and_spill_beyond_them() {
        let dir = tempfile::tempdir().unwrap();
        let rules = SpillRules {
            memory: 8,
            dir: dir.path().to_path_buf(),
        };
        let cases: [(&str, &[&[u8]], u64); 4] = [
            ("nothing", &[], 0),
            ("within the bound", &[b"abc", b"defgh"], 8),
            ("one byte beyond", &[b"abcdefgh", b"i"], 0),
            ("one large write", &[&[7u8; 3 << 20]], 0),
        ];
        for (name, pieces, in_memory) in cases {
            let s = written(&rules, pieces);
            let whole: Vec<u8> = pieces.concat();
            assert_eq!(s.len(), whole.len() as u64, "{name}");
            assert_eq!(s.in_memory(), in_memory, "{name}");
            assert_eq!(s.to_vec().unwrap(), whole, "{name}");
            // Read again, through small buffers, as the event reader does.
            let mut again = Vec::new();
            let mut r = s.reader();
            let mut buf = [0u8; 3];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                again.extend_from_slice(&buf[..n]);
            }
            assert_eq!(again, whole, "{name}");
        }
        // The files are unnamed: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn appending_shares_files_and_copies_memory() {
        let dir = tempfile::tempdir().unwrap();
        let rules = SpillRules {
            memory: 8,
            dir: dir.path().to_path_buf(),
        };
        // The bound holds across parts: memory before a shared file counts after it.
        let mut w = SpoolWriter::new(rules.clone());
        SpoolWriter::write(&mut w, b"abcdef").unwrap();
        w.append(&written(&rules, &[b"0123456789"])).unwrap();
        SpoolWriter::write(&mut w, b"xyz").unwrap();
        let s = w.finish().unwrap();
        assert_eq!(
            (s.in_memory(), s.to_vec().unwrap()),
            (6, b"abcdef0123456789xyz".to_vec())
        );
        let big = written(&rules, &[b"0123456789abcdef"]);
        let small = written(&rules, &[b"xy"]);
        let mut w = SpoolWriter::new(SpillRules {
            memory: 64,
            dir: dir.path().to_path_buf(),
        });
        SpoolWriter::write(&mut w, b"head").unwrap();
        w.append(&small).unwrap();
        w.append(&big).unwrap();
        w.append(&small).unwrap();
        let s = w.finish().unwrap();
        assert_eq!(s.to_vec().unwrap(), b"headxy0123456789abcdefxy");
        assert_eq!((s.len(), s.in_memory()), (24, 8));
        assert_eq!(s.parts.len(), 3);
        drop(big);
        // The shared file outlives the spool it was written for.
        assert_eq!(s.clone().to_vec().unwrap(), b"headxy0123456789abcdefxy");
    }

    #[test]
    fn a_spool_is_read_by_async_writers_too() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rules = SpillRules {
            memory: 4,
            dir: dir.path().to_path_buf(),
        };
        let s = written(&rules, &[b"ab", b"cdefghij"]);
        let mut out = Vec::new();
        rt.block_on(tokio::io::copy(&mut s.reader(), &mut out))
            .unwrap();
        assert_eq!(out, b"abcdefghij");
    }
}
