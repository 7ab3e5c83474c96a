//! The backup write pipeline: cuts the source stream into fixed plaintext chunks, encodes them on
//! all cores, and appends them in order to size-capped segment objects, each closed by its chunk
//! index. Memory is bounded by (workers + 3) chunks plus the store's parts in flight.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::codec::{self, EncodedChunk};
use crate::crypto::DataKey;
use crate::error::{Error, Result};
use crate::format::{self, ChunkEntry, SegmentIndex, SegmentInfo};
use crate::progress::Progress;
use crate::store::{ObjectWriter, Store};

/// Bytes of the stream's start kept for parsing a dump's header.
const HEAD_BYTES: usize = 1 << 20;
/// Bytes of the stream's end kept for checking a dump's completion line.
const TAIL_BYTES: usize = 64 << 10;

/// Tuning of the write pipeline.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Plaintext bytes per chunk.
    pub chunk_size: usize,
    /// zstd level.
    pub level: i32,
    /// Chunks encoded in parallel.
    pub workers: usize,
    /// Cap on a segment's stored size.
    pub segment_size: u64,
}

/// What the pipeline wrote.
#[derive(Debug)]
pub struct WrittenStream {
    /// Plaintext length.
    pub plaintext_bytes: u64,
    /// Number of chunks.
    pub chunks: u64,
    /// Hex SHA-256 of the plaintext.
    pub plaintext_sha256: String,
    /// Sum of segment sizes.
    pub stored_bytes: u64,
    /// Segments in order.
    pub segments: Vec<SegmentInfo>,
    /// First bytes of the plaintext.
    pub head: Vec<u8>,
    /// Last bytes of the plaintext.
    pub tail: Vec<u8>,
}

struct PlainChunk {
    index: u64,
    buf: Vec<u8>,
    len: usize,
    last: bool,
}

/// Reads until `buf` is full or the source ends; returns the bytes read.
async fn fill<R: AsyncRead + Unpin>(src: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match src.read(&mut buf[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

struct ReaderOutcome {
    bytes: u64,
    chunks: u64,
    sha256: String,
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// Reads chunks with one chunk of lookahead, so the last chunk is known when it is sent.
async fn read_chunks<R: AsyncRead + Unpin>(
    mut src: R,
    chunk_size: usize,
    tx: tokio::sync::mpsc::Sender<PlainChunk>,
    mut pool: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    progress: Arc<Progress>,
) -> std::io::Result<ReaderOutcome> {
    let mut take_buf = move || pool.try_recv().unwrap_or_else(|_| vec![0u8; chunk_size]);
    let mut hasher = Sha256::new();
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let mut total = 0u64;
    let mut index = 0u64;
    let mut pending: Option<(Vec<u8>, usize)> = None;
    loop {
        let mut buf = take_buf();
        let n = fill(&mut src, &mut buf).await?;
        if n > 0 {
            let data = &buf[..n];
            hasher.update(data);
            total += n as u64;
            progress.plain_bytes.fetch_add(n as u64, Ordering::Relaxed);
            if head.len() < HEAD_BYTES {
                let take = (HEAD_BYTES - head.len()).min(n);
                head.extend_from_slice(&data[..take]);
            }
            if n >= TAIL_BYTES {
                tail.clear();
                tail.extend_from_slice(&data[n - TAIL_BYTES..]);
            } else {
                tail.extend_from_slice(data);
                if tail.len() > TAIL_BYTES {
                    tail.drain(..tail.len() - TAIL_BYTES);
                }
            }
        }
        let at_end = n == 0;
        if let Some((pbuf, plen)) = pending.take() {
            let chunk = PlainChunk {
                index,
                buf: pbuf,
                len: plen,
                last: at_end,
            };
            index += 1;
            if tx.send(chunk).await.is_err() {
                // The consumer failed; its error is the one reported.
                return Ok(ReaderOutcome {
                    bytes: total,
                    chunks: index,
                    sha256: String::new(),
                    head,
                    tail,
                });
            }
        } else if at_end {
            // An empty stream still gets one (empty, last) chunk so truncation to nothing is detectable.
            let chunk = PlainChunk {
                index,
                buf,
                len: 0,
                last: true,
            };
            index += 1;
            let _ = tx.send(chunk).await;
            break;
        }
        if at_end {
            break;
        }
        pending = Some((buf, n));
    }
    Ok(ReaderOutcome {
        bytes: total,
        chunks: index,
        sha256: hex::encode(hasher.finalize()),
        head,
        tail,
    })
}

struct OpenSegment {
    number: u64,
    name: String,
    writer: Box<dyn ObjectWriter>,
    offset: u64,
    first_chunk: u64,
    entries: Vec<ChunkEntry>,
}

/// Appends encoded chunks to segments in order, rolling to a new segment at the size cap.
struct SegmentSink<'a> {
    store: &'a Arc<dyn Store>,
    backup_id: &'a str,
    encrypted: bool,
    cap: u64,
    open: Option<OpenSegment>,
    closed: Vec<SegmentInfo>,
    progress: Arc<Progress>,
}

impl SegmentSink<'_> {
    fn write_error(&self, name: &str, source: crate::store::StoreError) -> Error {
        Error::WriteSegment {
            id: self.backup_id.to_string(),
            segment: name.to_string(),
            source,
        }
    }

    async fn append(&mut self, chunk: EncodedChunk) -> Result<()> {
        let len = chunk.stored.len() as u64;
        if self
            .open
            .as_ref()
            .is_some_and(|s| !s.entries.is_empty() && s.offset + len > self.cap)
        {
            self.close().await?;
        }
        if self.open.is_none() {
            let number = self.closed.len() as u64;
            let name = format::segment_name(number, self.encrypted);
            let writer = self
                .store
                .create(&format::object_key(self.backup_id, &name))
                .await
                .map_err(|e| self.write_error(&name, e))?;
            self.open = Some(OpenSegment {
                number,
                name,
                writer,
                offset: 0,
                first_chunk: chunk.index,
                entries: Vec::new(),
            });
        }
        let seg = self.open.as_mut().expect("opened above");
        seg.entries.push(ChunkEntry {
            offset: seg.offset,
            stored: len,
            plain: chunk.plain_len,
            sha256: hex::encode(chunk.sha256),
        });
        seg.offset += len;
        let name = seg.name.clone();
        if let Err(e) = seg.writer.write(Bytes::from(chunk.stored)).await {
            return Err(self.write_error(&name, e));
        }
        self.progress.stored_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        let Some(mut seg) = self.open.take() else {
            return Ok(());
        };
        let index = SegmentIndex {
            backup_id: self.backup_id.to_string(),
            segment: seg.number,
            first_chunk: seg.first_chunk,
            chunks: std::mem::take(&mut seg.entries),
        };
        let frame = format::index_frame(&index);
        let info = SegmentInfo {
            name: seg.name.clone(),
            size: seg.offset + frame.len() as u64,
            first_chunk: seg.first_chunk,
            chunks: index.chunks.len() as u64,
            index_offset: seg.offset,
            index_length: frame.len() as u64,
            index_sha256: hex::encode(Sha256::digest(&frame)),
        };
        if let Err(e) = seg.writer.write(Bytes::from(frame)).await {
            seg.writer.abort().await;
            return Err(self.write_error(&info.name, e));
        }
        seg.writer
            .finish()
            .await
            .map_err(|e| self.write_error(&info.name, e))?;
        self.progress
            .stored_bytes
            .fetch_add(info.index_length, Ordering::Relaxed);
        self.closed.push(info);
        Ok(())
    }

    async fn abort(&mut self) {
        if let Some(seg) = self.open.take() {
            seg.writer.abort().await;
        }
    }
}

/// Streams `source` into segments of backup `backup_id`. On error, segments already written stay
/// behind as an orphan; the caller discards them.
pub async fn write_stream<R: AsyncRead + Unpin + Send + 'static>(
    store: &Arc<dyn Store>,
    backup_id: &str,
    source: R,
    tool: &str,
    opts: &WriteOptions,
    key: Option<Arc<DataKey>>,
    progress: Arc<Progress>,
) -> Result<WrittenStream> {
    let workers = opts.workers.max(1);
    let (tx, rx) = tokio::sync::mpsc::channel::<PlainChunk>(1);
    let (pool_tx, pool_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let reader = tokio::spawn(read_chunks(
        source,
        opts.chunk_size,
        tx,
        pool_rx,
        progress.clone(),
    ));

    let mut sink = SegmentSink {
        store,
        backup_id,
        encrypted: key.is_some(),
        cap: opts.segment_size,
        open: None,
        closed: Vec::new(),
        progress,
    };
    let level = opts.level;
    let id: Arc<str> = Arc::from(backup_id);
    let mut encoded = tokio_stream_from(rx)
        .map(|chunk| {
            let key = key.clone();
            let id = id.clone();
            tokio::task::spawn_blocking(move || {
                let k = key.as_deref().map(|k| (k, &*id));
                let r = codec::encode(&chunk.buf[..chunk.len], chunk.index, chunk.last, level, k);
                (r, chunk.buf)
            })
        })
        .buffered(workers + 1);

    let mut failure = None;
    while let Some(joined) = encoded.next().await {
        let (result, buf) = joined.expect("encode task panicked");
        let _ = pool_tx.send(buf);
        let step = match result {
            Ok(chunk) => sink.append(chunk).await,
            Err(source) => Err(Error::LocalIo {
                action: "compress chunk of",
                path: backup_id.to_string(),
                source,
            }),
        };
        if let Err(e) = step {
            failure = Some(e);
            break;
        }
    }
    drop(encoded);
    if let Some(e) = failure {
        // The reader may be waiting on a stalled tool; it has nothing left to contribute.
        reader.abort();
        sink.abort().await;
        return Err(e);
    }
    let read = match reader.await.expect("reader task panicked") {
        Ok(r) => r,
        Err(source) => {
            sink.abort().await;
            return Err(Error::ReadSource {
                tool: tool.to_string(),
                source,
            });
        }
    };
    sink.close().await?;
    let stored_bytes = sink.closed.iter().map(|s| s.size).sum();
    Ok(WrittenStream {
        plaintext_bytes: read.bytes,
        chunks: read.chunks,
        plaintext_sha256: read.sha256,
        stored_bytes,
        segments: sink.closed,
        head: read.head,
        tail: read.tail,
    })
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
