//! Carries out the one action a pass decided: the action's statements (a failed change never
//! leaves super_read_only lifted), then what the agent must remember of it. One arm per
//! action.

use std::time::{Duration, Instant};

use bulwark_contract::Engine;

use super::credentials::Credentials;
use super::error::AgentError;
use super::fence::Fence;
use super::observe::{self, exec, STATEMENT_TIMEOUT};
use super::pass::Agent;
use super::restoring::remove_pending;
use crate::decide::restored::RestoredGtid;
use crate::decide::sql::{self, Statement};
use crate::decide::topology::Action;

/// How long a demoted MariaDB primary holds its writes ([`Agent::hold_writes`]): longer than a
/// Service takes to stop routing to it.
const FENCE_HOLD: Duration = Duration::from_secs(5);

/// Rounds of ended sessions and a short lock wait before a demotion gives up for this pass
/// ([`Agent::with_sessions_ended`]).
const DEMOTE_LOCK_ROUNDS: u32 = 10;

impl Agent {
    pub(super) async fn apply(
        &mut self,
        action: &Action,
        creds: &Credentials,
    ) -> Result<(), AgentError> {
        let engine = self.server().engine;
        match action {
            Action::EnsureAccounts => self.ensure_accounts(creds).await,
            Action::StopReplicationIo => {
                self.send(action, sql::stop_replication_io(engine), creds)
                    .await
            }
            Action::StopReplication => {
                self.send(action, sql::stop_replication(engine), creds)
                    .await
            }
            Action::ResetReplication => {
                self.send(action, sql::reset_replication(engine), creds)
                    .await
            }
            Action::StartReplicationSql => {
                self.send(action, sql::start_replication_sql(engine), creds)
                    .await
            }
            Action::SetSemiSyncWait(on) => {
                self.send(action, sql::set_semi_sync_wait(engine, *on), creds)
                    .await
            }
            Action::FinishPromotion => {
                self.send(action, sql::finish_promotion(engine), creds)
                    .await
            }
            Action::SetWritable => self.send(action, sql::set_writable(engine), creds).await,
            Action::SetReadOnly => self.demote(creds, Some(FENCE_HOLD)).await,
            Action::FenceUnleased => self.demote(creds, None).await,
            Action::EndFenceAfterHold => {
                if let Some(fence) = &self.fence {
                    fence.end_after(FENCE_HOLD);
                }
                Ok(())
            }
            Action::ReleaseFence => {
                if let Some(fence) = self.fence.take() {
                    fence.release().await;
                }
                Ok(())
            }
            Action::ChangeSource { adopt_gtid_pos } => {
                self.change_source(adopt_gtid_pos.as_deref(), creds).await
            }
            Action::StartReplication => {
                self.converged.last_start = Some(Instant::now());
                self.send(action, sql::start_replication(engine), creds)
                    .await?;
                self.converged.io_epoch = Some(self.role.epoch);
                Ok(())
            }
            Action::RestartReplicationIo => {
                self.send(action, sql::restart_replication_io(engine), creds)
                    .await?;
                self.converged.io_epoch = Some(self.role.epoch);
                Ok(())
            }
            Action::LoadPendingRestore { backup_id } => {
                let conn = creds.connection(&self.config.socket);
                self.restore
                    .start(self.config.pending.as_ref(), backup_id, conn);
                Ok(())
            }
            Action::DiscardPendingRestore { backup_id } => {
                if let Some(cfg) = &self.config.pending {
                    remove_pending(&cfg.file)?;
                    tracing::info!(backup_id = %backup_id, pending_file = %cfg.file.display(), "pending logical restore discarded: a replica gets the data by replication");
                }
                Ok(())
            }
            Action::AdoptRestoredGtid {
                restored,
                stop_replication,
            } => {
                self.adopt_restored_gtid(restored, *stop_replication, creds)
                    .await
            }
        }
    }

    /// Sends an action's statements and logs it applied.
    async fn send(
        &mut self,
        action: &Action,
        statements: Vec<Statement>,
        creds: &Credentials,
    ) -> Result<(), AgentError> {
        self.execute(&statements, creds).await?;
        tracing::info!(action = action.name(), "action applied");
        Ok(())
    }

    /// Sends `statements` in order; after a failure, what [`sql::after_failure`] names, so
    /// that a failed change never leaves a replica writable by privileged accounts.
    async fn execute(
        &mut self,
        statements: &[Statement],
        creds: &Credentials,
    ) -> Result<(), AgentError> {
        let secrets: Vec<&str> = [
            Some(creds.replication.as_str()),
            Some(creds.backup.as_str()),
            Some(creds.exporter.as_str()),
            creds.root.as_ref().map(|r| r.as_str()),
        ]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
        let conn = &mut self.server().conn;
        for (i, st) in statements.iter().enumerate() {
            if let Err(e) = exec(conn, st, &secrets).await {
                for undo in sql::after_failure(statements, i) {
                    if let Err(undo_error) = exec(conn, &undo, &secrets).await {
                        tracing::error!(statement = %undo.shown, error = %bulwark_engine::error::chain(&undo_error), "could not restore super_read_only after a failed change");
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether MySQL's super_read_only is on (and must be lifted around a change).
    async fn super_read_only_on(&mut self) -> Result<bool, AgentError> {
        let server = self.server();
        if server.engine != Engine::MySql {
            return Ok(false);
        }
        observe::super_read_only(&mut server.conn).await
    }

    async fn ensure_accounts(&mut self, creds: &Credentials) -> Result<(), AgentError> {
        let engine = self.server().engine;
        let passwords = sql::AccountPasswords {
            replication: &creds.replication,
            backup: &creds.backup,
            exporter: &creds.exporter,
        };
        let statements = if self.converged.accounts_after_load {
            // Only a primary loads a backup, so the server is writable here.
            let root = creds.root.as_ref().filter(|r| !r.is_empty());
            sql::converge_after_load(engine, &passwords, root.map(|r| r.as_str()))
        } else {
            let lift = self.super_read_only_on().await?;
            sql::ensure_accounts(engine, &passwords, lift)
        };
        self.execute(&statements, creds).await?;
        self.converged.accounts_digest = Some(creds.accounts_digest());
        self.converged.accounts_after_load = false;
        tracing::info!(
            accounts = ?[sql::REPLICATION_USER, sql::BACKUP_USER, sql::EXPORTER_USER],
            "accounts ensured"
        );
        Ok(())
    }

    /// Read-only, then no client session left that could still commit. On MariaDB writes are
    /// also held, for `hold` (a demotion) or until released (`None`: a lapsed lease).
    async fn demote(
        &mut self,
        creds: &Credentials,
        hold: Option<Duration>,
    ) -> Result<(), AgentError> {
        let engine = self.server().engine;
        self.with_sessions_ended(&sql::set_read_only(engine), creds)
            .await?;
        // MariaDB's read_only lets READ ONLY ADMIN accounts (root) commit; MySQL's
        // super_read_only stops everyone.
        if engine == Engine::MariaDb {
            // A hold already running is kept (one lock, one session ending the others).
            match (
                self.fence.as_ref().filter(|f| f.remaining().is_some()),
                hold,
            ) {
                (Some(running), None) => running.keep_until_released(),
                (Some(running), Some(hold)) => running.end_after(hold),
                (None, hold) => self.hold_writes(creds, hold).await,
            }
        }
        let keep = self.fence.as_ref().map(|f| f.session);
        observe::end_client_sessions(&mut self.server().conn, keep).await
    }

    /// Runs `statements`, which take the global read lock, with the client sessions ended
    /// first and again after each short lock wait: a commit hung waiting for a semi-sync
    /// acknowledgement that no replica will give holds that lock, and without this the demotion
    /// would wait for it for ever. Gives up after [`DEMOTE_LOCK_ROUNDS`] rounds (the next pass
    /// tries again).
    async fn with_sessions_ended(
        &mut self,
        statements: &[Statement],
        creds: &Credentials,
    ) -> Result<(), AgentError> {
        exec(&mut self.server().conn, &sql::short_lock_wait(), &[]).await?;
        let mut round = 1;
        let result = loop {
            let keep = self.fence.as_ref().map(|f| f.session);
            if let Err(e) = observe::end_client_sessions(&mut self.server().conn, keep).await {
                break Err(e);
            }
            match self.execute(statements, creds).await {
                Err(AgentError::RunStatement { code, .. })
                    if code == sql::ER_LOCK_WAIT_TIMEOUT && round < DEMOTE_LOCK_ROUNDS =>
                {
                    tracing::info!(
                        round,
                        "commits in progress hold the lock; ending sessions again"
                    );
                    round += 1;
                }
                other => break other,
            }
        };
        if let Err(e) = exec(&mut self.server().conn, &sql::default_lock_wait(), &[]).await {
            tracing::warn!(error = %bulwark_engine::error::chain(&e), "could not restore the session's lock wait");
        }
        result
    }

    /// Holds every commit of a demoted MariaDB primary for `hold` (`None`: until released;
    /// `fence`). Without it (the lock could not be taken) read_only and the ended sessions
    /// still fence, except against READ ONLY ADMIN accounts.
    async fn hold_writes(&mut self, creds: &Credentials, hold: Option<Duration>) {
        let opts = creds.connection(&self.config.socket).opts();
        let agent_session = u64::from(self.server().conn.id());
        match tokio::time::timeout(STATEMENT_TIMEOUT, Fence::hold(opts, agent_session, hold)).await
        {
            Ok(Ok(fence)) => self.fence = Some(fence),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not hold the demoted primary's writes"),
            Err(_) => tracing::warn!("could not hold the demoted primary's writes in time"),
        }
    }

    async fn change_source(
        &mut self,
        adopt_gtid_pos: Option<&str>,
        creds: &Credentials,
    ) -> Result<(), AgentError> {
        let engine = self.server().engine;
        let statements = sql::change_source(
            engine,
            &self.role.source,
            &creds.replication,
            adopt_gtid_pos,
        );
        self.execute(&statements, creds).await?;
        self.converged.io_epoch = Some(self.role.epoch);
        self.converged.source_digest = Some(creds.replication_digest());
        self.converged.last_change = Some(Instant::now());
        // A fresh configuration starts at once, not after the restart pause.
        self.converged.last_start = None;
        tracing::info!(
            host = %self.role.source.host,
            port = self.role.source.port,
            adopted_gtid_pos = adopt_gtid_pos.unwrap_or(""),
            "replication source changed"
        );
        Ok(())
    }

    async fn adopt_restored_gtid(
        &mut self,
        restored: &RestoredGtid,
        stop_replication: bool,
        creds: &Credentials,
    ) -> Result<(), AgentError> {
        let lift = self.super_read_only_on().await?;
        let server = self.server();
        let statements = sql::adopt_restored_gtid(
            server.engine,
            &server.version,
            &restored.gtid_set,
            &restored.gtid_history,
            stop_replication,
            lift,
        );
        self.execute(&statements, creds).await?;
        tracing::info!(backup_id = %restored.backup_id, gtid_set = %restored.gtid_set, "restored GTID position adopted");
        self.restore
            .finish_gtid_adoption(self.config.gtid_file.as_deref(), &restored.backup_id)
    }
}
