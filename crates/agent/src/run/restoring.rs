//! What a bootstrap left for the agent, as each pass sees it: the pending logical backup (its
//! load runs in the background while passes go on; a failed one is tried again after a pause)
//! and the GTID position of a physical restore, whose file is removed once adopted.

use std::path::Path;
use std::time::{Duration, Instant};

use bulwark_engine::source::Connection;

use super::bootstrap;
use super::error::AgentError;
use super::pending;
use super::pending::PendingRestoreConfig;
use crate::decide::topology::{GtidAdoption, LoadState};

/// Pause before a failed logical restore is tried again.
const RESTORE_RETRY: Duration = Duration::from_secs(30);

/// The logical restore running in the background, how the last one ended, and a restored
/// GTID position adopted but not yet cleared away.
#[derive(Default)]
pub(super) struct RestoreState {
    running: Option<(String, tokio::task::JoinHandle<Result<(), AgentError>>)>,
    failed: Option<(String, String, Instant)>,
    /// Loaded by this agent but the pending file could not be removed: never loaded again.
    loaded: Option<String>,
    /// The pending file as this pass read it: what a load started in the pass loads.
    staged: Option<pending::PendingRestore>,
    /// Backup whose GTID position was adopted but whose file could not be removed yet: the
    /// file is removed, never applied again, and nothing else happens until it is gone.
    gtid_adopted: Option<String>,
    /// The server was found to hold no partial-load mark: it never gets one but from a load of
    /// this agent's, so it is not looked for again.
    no_partial_load: bool,
}

impl RestoreState {
    /// The restored GTID file's state; first retries the removal of an adopted one.
    pub(super) fn gtid_adoption(&mut self, gtid_file: Option<&Path>) -> GtidAdoption {
        let Some(path) = gtid_file else {
            return GtidAdoption::Nothing;
        };
        if let Some(id) = &self.gtid_adopted {
            return match bootstrap::remove_restored_gtid(path) {
                Ok(()) => {
                    tracing::info!(backup_id = %id, gtid_file = %path.display(), "restored GTID file removed");
                    self.gtid_adopted = None;
                    GtidAdoption::Nothing
                }
                Err(e) => GtidAdoption::Failed(format!(
                    "adopted for backup {id}, but {}",
                    bulwark_engine::error::chain(&e)
                )),
            };
        }
        match bootstrap::read_restored_gtid(path) {
            Ok(None) => GtidAdoption::Nothing,
            Ok(Some(r)) => GtidAdoption::Waiting(r),
            Err(e) => GtidAdoption::Failed(bulwark_engine::error::chain(&e)),
        }
    }

    /// Removes the restored GTID file of an adopted position before anything else happens: a
    /// file still there after a crash means the server has not been written to since, so
    /// adopting again is harmless.
    pub(super) fn finish_gtid_adoption(
        &mut self,
        gtid_file: Option<&Path>,
        backup_id: &str,
    ) -> Result<(), AgentError> {
        if let Some(path) = gtid_file {
            if let Err(e) = bootstrap::remove_restored_gtid(path) {
                self.gtid_adopted = Some(backup_id.to_owned());
                return Err(AgentError::FinishGtidAdoption(e));
            }
            tracing::info!(gtid_file = %path.display(), "restored GTID file removed");
        }
        Ok(())
    }

    /// Reaps a finished load and reads the pending file. `privileges_replaced` is set when a
    /// load has just finished: the dump replaced the privilege tables, so accounts and root
    /// are converged again.
    pub(super) fn load_state(
        &mut self,
        pending: Option<&PendingRestoreConfig>,
        privileges_replaced: &mut bool,
    ) -> LoadState {
        let Some(cfg) = pending else {
            return LoadState::Nothing;
        };
        if let Some((id, handle)) = &self.running {
            if !handle.is_finished() {
                return LoadState::Loading(id.clone());
            }
            let (id, handle) = self.running.take().expect("running");
            let result = futures::FutureExt::now_or_never(handle)
                .expect("finished")
                .unwrap_or_else(|join| {
                    Err(AgentError::LoadPendingRestore {
                        id: id.clone(),
                        source: Box::new(
                            bulwark_engine::Error::InvalidArgument(format!(
                                "restore task ended: {join}"
                            ))
                            .into(),
                        ),
                    })
                })
                .and_then(|()| remove_pending(&cfg.file));
            match result {
                Ok(()) => {
                    tracing::info!(backup_id = %id, "pending logical restore loaded");
                    self.failed = None;
                    *privileges_replaced = true;
                }
                Err(e @ AgentError::RemovePending { .. }) => {
                    tracing::error!(backup_id = %id, error = %bulwark_engine::error::chain(&e), "backup loaded but the pending file remains; it will not be loaded again by this agent");
                    self.loaded = Some(id.clone());
                    self.failed = Some((id, bulwark_engine::error::chain(&e), Instant::now()));
                }
                Err(e) => {
                    let msg = bulwark_engine::error::chain(&e);
                    tracing::warn!(backup_id = %id, error = %msg, retry_in_seconds = RESTORE_RETRY.as_secs(), "pending logical restore failed; retrying later");
                    self.failed = Some((id, msg, Instant::now()));
                }
            }
        }
        self.staged = None;
        let id = match pending::read(&cfg.file) {
            Ok(None) => return LoadState::Nothing,
            Ok(Some(p)) => {
                let id = p.backup_id.clone();
                self.staged = Some(p);
                id
            }
            Err(e) => {
                return LoadState::Failed {
                    id: "?".into(),
                    error: bulwark_engine::error::chain(&e),
                }
            }
        };
        if let Some((failed_id, error, at)) = &self.failed {
            if *failed_id == id
                && (self.loaded.as_deref() == Some(&id) || at.elapsed() < RESTORE_RETRY)
            {
                return LoadState::Failed {
                    id,
                    error: error.clone(),
                };
            }
        }
        LoadState::Waiting(id)
    }

    /// On a primary with nothing to load: whether its data holds part of a bootstrap load (a
    /// copy of a member taken mid-load, after the loading member's volume was lost). Such a
    /// member is never served: the load its mark names is staged again, as the loading
    /// member's pending file had it, and loaded over what is there.
    pub(super) async fn partial_load(
        &mut self,
        pending: Option<&PendingRestoreConfig>,
        conn: &mut mysql_async::Conn,
        privileges_replaced: &mut bool,
    ) -> Result<LoadState, AgentError> {
        if self.no_partial_load {
            return Ok(LoadState::Nothing);
        }
        let Some(text) = super::observe::partial_load_mark(conn).await? else {
            self.no_partial_load = true;
            return Ok(LoadState::Nothing);
        };
        // Never served as it is; a human who wants it served anyway drops the mark.
        let give_up = "DROP DATABASE bulwark_bootstrap serves it as it is";
        let Some(staged) = text.as_deref().and_then(pending::from_mark) else {
            let error = match text {
                None => format!(
                    "this server holds the start of a bootstrap load, but no mark naming it: \
                     the loading primary was lost before it named the load; copy a member that \
                     holds the whole mark, delete the cluster's volumes to bootstrap it again, \
                     or {give_up}"
                ),
                Some(text) => format!(
                    "this server holds part of a bootstrap load whose mark this agent cannot \
                     read ({:?}); copy a member whose mark it reads, or {give_up}",
                    text.chars().take(64).collect::<String>()
                ),
            };
            return Ok(LoadState::Failed {
                id: "?".into(),
                error,
            });
        };
        let Some(cfg) = pending else {
            return Ok(LoadState::Failed {
                id: staged.backup_id,
                error: format!(
                    "this server holds part of a bootstrap load, but the agent has no \
                     --pending-logical-restore to load it again with; {give_up}"
                ),
            });
        };
        tracing::warn!(backup_id = %staged.backup_id, "this server holds part of a bootstrap load (copied from a member while it loaded): loading the backup again");
        if let Err(e) = pending::write(&cfg.file, &staged) {
            return Ok(LoadState::Failed {
                id: staged.backup_id,
                error: bulwark_engine::error::chain(&e),
            });
        }
        Ok(self.load_state(Some(cfg), privileges_replaced))
    }

    /// Starts loading backup `id` over `conn`, as this pass's [`RestoreState::load_state`]
    /// read it.
    pub(super) fn start(
        &mut self,
        pending: Option<&PendingRestoreConfig>,
        id: &str,
        conn: Connection,
    ) {
        let Some(cfg) = pending.cloned() else {
            return;
        };
        let Some(staged) = self.staged.take().filter(|p| p.backup_id == id) else {
            return;
        };
        tracing::info!(backup_id = %id, until = ?staged.until, until_gtid = ?staged.until_gtid, "loading pending logical restore");
        let task_id = id.to_string();
        let handle = tokio::spawn(async move {
            pending::load(&cfg, &staged, conn).await.map_err(|source| {
                AgentError::LoadPendingRestore {
                    id: task_id,
                    source: Box::new(source),
                }
            })
        });
        self.running = Some((id.to_string(), handle));
    }
}

pub(super) fn remove_pending(path: &Path) -> Result<(), AgentError> {
    super::files::remove(path).map_err(|source| AgentError::RemovePending {
        path: path.display().to_string(),
        source,
    })
}
