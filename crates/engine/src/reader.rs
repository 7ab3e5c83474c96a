//! The read pipeline: loads each segment's chunk index, fetches and decodes chunks on all cores
//! while keeping their order, and checks every digest, the chunk count and the plaintext digest.
//! Memory is bounded by the chunks in flight and one segment index.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};

use crate::codec;
use crate::crypto::DataKey;
use crate::error::{Error, Result};
use crate::format::{self, SegmentInfo, StoredStream};
use crate::progress::Progress;
use crate::store::Store;

/// How deeply chunks are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Stored digests only (no key needed).
    StoredDigests,
    /// Digests, authentication, decompression and the plaintext digest.
    Full,
}

/// What a read established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSummary {
    /// Chunks read.
    pub chunks: u64,
    /// Stored bytes read, index frames included.
    pub stored_bytes: u64,
    /// Plaintext bytes produced (0 for [`Depth::StoredDigests`]).
    pub plaintext_bytes: u64,
    /// Depth of the checks.
    pub depth: Depth,
}

struct ChunkJob {
    segment: Arc<str>,
    offset: u64,
    stored: u64,
    plain: u64,
    sha256: [u8; 32],
    index: u64,
    last: bool,
}

fn corrupt(id: &str, detail: String) -> Error {
    Error::Corrupt {
        id: id.to_string(),
        detail,
    }
}

/// Reads `len` bytes at `offset` of a backup's segment.
async fn read_segment(
    store: &Arc<dyn Store>,
    id: &str,
    segment: &str,
    offset: u64,
    len: u64,
) -> Result<Bytes> {
    store
        .get_range(&format::object_key(id, segment), offset..offset + len)
        .await
        .map_err(|source| Error::ReadSegment {
            id: id.to_string(),
            segment: segment.to_string(),
            source,
        })
}

async fn load_index(
    store: &Arc<dyn Store>,
    manifest: &dyn StoredStream,
    number: usize,
    seg: &SegmentInfo,
) -> Result<Vec<ChunkJob>> {
    let id = manifest.stream_id();
    let frame = read_segment(store, id, &seg.name, seg.index_offset, seg.index_length).await?;
    if hex::encode(Sha256::digest(&frame)) != seg.index_sha256 {
        return Err(corrupt(
            id,
            format!(
                "the chunk index of segment {} does not match its SHA-256",
                seg.name
            ),
        ));
    }
    let index = format::parse_index_frame(&frame)
        .map_err(|e| corrupt(id, format!("segment {}: {e}", seg.name)))?;
    if index.backup_id != *id
        || index.segment != number as u64
        || index.first_chunk != seg.first_chunk
        || index.chunks.len() as u64 != seg.chunks
    {
        return Err(corrupt(
            id,
            format!("the chunk index of segment {} belongs elsewhere", seg.name),
        ));
    }
    let segment: Arc<str> = Arc::from(seg.name.as_str());
    let total = manifest.plaintext().chunks;
    let mut expected_offset = 0;
    let mut jobs = Vec::with_capacity(index.chunks.len());
    for (i, c) in index.chunks.into_iter().enumerate() {
        let mut sha256 = [0u8; 32];
        if c.offset != expected_offset || hex::decode_to_slice(&c.sha256, &mut sha256).is_err() {
            return Err(corrupt(
                id,
                format!("the chunk index of segment {} is inconsistent", seg.name),
            ));
        }
        expected_offset += c.stored;
        let chunk_index = seg.first_chunk + i as u64;
        jobs.push(ChunkJob {
            segment: segment.clone(),
            offset: c.offset,
            stored: c.stored,
            plain: c.plain,
            sha256,
            index: chunk_index,
            last: chunk_index + 1 == total,
        });
    }
    if expected_offset != seg.index_offset {
        return Err(corrupt(
            id,
            format!(
                "chunks of segment {} do not end where its index starts",
                seg.name
            ),
        ));
    }
    Ok(jobs)
}

/// Streams the verified plaintext of a backup in order (empty items at [`Depth::StoredDigests`]).
fn chunk_stream<'a>(
    store: &'a Arc<dyn Store>,
    manifest: &'a dyn StoredStream,
    key: Option<Arc<DataKey>>,
    depth: Depth,
    parallel: usize,
    progress: Arc<Progress>,
) -> impl Stream<Item = Result<Option<Bytes>>> + 'a {
    let id: Arc<str> = Arc::from(manifest.stream_id());
    futures::stream::iter(manifest.segments().iter().enumerate())
        .then(move |(n, seg)| load_index(store, manifest, n, seg))
        .flat_map(|jobs| match jobs {
            Ok(jobs) => futures::stream::iter(jobs.into_iter().map(Ok)).left_stream(),
            Err(e) => futures::stream::iter(vec![Err(e)]).right_stream(),
        })
        .map(move |job: Result<ChunkJob>| {
            let key = key.clone();
            let id = id.clone();
            let progress = progress.clone();
            async move {
                let job = job?;
                let stored = read_segment(store, &id, &job.segment, job.offset, job.stored).await?;
                progress
                    .stored_bytes
                    .fetch_add(job.stored, Ordering::Relaxed);
                let digest_only = depth == Depth::StoredDigests;
                let decoded = tokio::task::spawn_blocking(move || {
                    let k = key.as_deref().map(|k| (k, &*id));
                    let r = codec::decode(
                        Vec::from(stored),
                        &job.sha256,
                        job.plain,
                        job.index,
                        job.last,
                        k,
                        digest_only,
                    );
                    (r, id, job)
                })
                .await
                .expect("decode task panicked");
                match decoded {
                    (Ok(plain), _, _) => Ok(plain.map(Bytes::from)),
                    (Err(e), id, job) => Err(corrupt(
                        &id,
                        format!("chunk {} in segment {}: {e}", job.index, job.segment),
                    )),
                }
            }
        })
        .buffered(parallel.max(1))
}

/// Receives verified plaintext in order.
#[async_trait::async_trait]
pub trait ChunkSink: Send {
    /// Takes the next chunk of plaintext.
    async fn accept(&mut self, chunk: Bytes) -> Result<()>;
}

/// A sink that drops everything (verification).
pub struct Discard;

#[async_trait::async_trait]
impl ChunkSink for Discard {
    async fn accept(&mut self, _chunk: Bytes) -> Result<()> {
        Ok(())
    }
}

/// A sink that writes to an async writer; `what` names it in errors.
pub struct WriteSink<W> {
    /// Destination.
    pub out: W,
    /// Its name in messages.
    pub what: &'static str,
}

#[async_trait::async_trait]
impl<W: tokio::io::AsyncWrite + Unpin + Send> ChunkSink for WriteSink<W> {
    async fn accept(&mut self, chunk: Bytes) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        self.out
            .write_all(&chunk)
            .await
            .map_err(|source| Error::LocalIo {
                action: "write to",
                path: self.what.to_string(),
                source,
            })
    }
}

/// Reads a whole backup, handing each plaintext chunk to `sink` in order, and checks the totals.
/// A failure in the data is reported before the sink sees any byte of the failing chunk.
pub async fn read_backup(
    store: &Arc<dyn Store>,
    manifest: &dyn StoredStream,
    key: Option<Arc<DataKey>>,
    depth: Depth,
    parallel: usize,
    progress: Arc<Progress>,
    sink: &mut dyn ChunkSink,
) -> Result<ReadSummary> {
    if depth == Depth::Full && manifest.encryption().is_some() && key.is_none() {
        return Err(Error::KeyRequired {
            id: manifest.stream_id().to_string(),
        });
    }
    progress
        .total_hint
        .store(manifest.plaintext().bytes, Ordering::Relaxed);
    let mut hasher = Sha256::new();
    let (mut chunks, mut plain_bytes) = (0u64, 0u64);
    let stream = chunk_stream(store, manifest, key, depth, parallel, progress.clone());
    futures::pin_mut!(stream);
    while let Some(item) = stream.next().await {
        chunks += 1;
        if let Some(plain) = item? {
            hasher.update(&plain);
            plain_bytes += plain.len() as u64;
            progress
                .plain_bytes
                .fetch_add(plain.len() as u64, Ordering::Relaxed);
            sink.accept(plain).await?;
        }
    }
    let id = manifest.stream_id();
    if chunks != manifest.plaintext().chunks {
        return Err(corrupt(
            id,
            format!(
                "read {chunks} chunks, the manifest lists {}",
                manifest.plaintext().chunks
            ),
        ));
    }
    if depth == Depth::Full {
        if plain_bytes != manifest.plaintext().bytes {
            return Err(corrupt(
                id,
                format!(
                    "plaintext is {plain_bytes} bytes, the manifest says {}",
                    manifest.plaintext().bytes
                ),
            ));
        }
        if hex::encode(hasher.finalize()) != manifest.plaintext().sha256 {
            return Err(corrupt(
                id,
                "the plaintext does not match its SHA-256".into(),
            ));
        }
    }
    Ok(ReadSummary {
        chunks,
        stored_bytes: manifest.stored_bytes(),
        plaintext_bytes: plain_bytes,
        depth,
    })
}
