//! The hand-over mark on disk (`bulwark_contract::paths::HANDOVER_FILE`), which the pod's
//! preStop hooks wait on: shown while `decide::handover` says the server needs it, and a while
//! after. Written only when what it says changes; a stale one (an agent killed while its server
//! was primary) is removed at start, or the hooks would wait their whole bound.

use std::path::PathBuf;
use std::time::Instant;

use crate::decide::handover;

pub(super) struct HandoverMark {
    path: PathBuf,
    /// What the file says now (`None`: unknown, until the first write succeeds).
    shown: Option<bool>,
    /// When the server last needed the mark.
    last_needed: Option<Instant>,
}

impl HandoverMark {
    pub(super) fn new(path: PathBuf) -> HandoverMark {
        let mut mark = HandoverMark {
            path,
            shown: None,
            last_needed: None,
        };
        mark.show(false);
        mark
    }

    /// Records whether the server needs the mark after this pass; returns whether it shows.
    pub(super) fn update(&mut self, needed: bool, now: Instant) -> bool {
        if needed {
            self.last_needed = Some(now);
        }
        let shown = handover::shown(self.last_needed, now);
        self.show(shown);
        shown
    }

    /// Removes the mark: the agent stops.
    pub(super) fn clear(&mut self) {
        self.last_needed = None;
        self.show(false);
    }

    fn show(&mut self, pending: bool) {
        if self.shown == Some(pending) {
            return;
        }
        let done = if pending {
            super::files::replace(&self.path, b"", 0o644).map_err(std::io::Error::other)
        } else {
            super::files::remove(&self.path)
        };
        match done {
            Ok(()) => {
                tracing::info!(pending, "hand-over mark for the pod's preStop hooks");
                self.shown = Some(pending);
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot write the hand-over mark")
            }
        }
    }
}
