//! Progress of a running backup or restore: counters the pipelines update as they go. How
//! they are shown (a bar, log lines) is the caller's (`bulwark-cli`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Counters updated by the pipelines.
#[derive(Debug, Default)]
pub struct Progress {
    /// Plaintext bytes processed.
    pub plain_bytes: AtomicU64,
    /// Stored bytes written or read.
    pub stored_bytes: AtomicU64,
    /// Expected plaintext total, 0 when unknown.
    pub total_hint: AtomicU64,
}

impl Progress {
    /// New shared counters.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}
