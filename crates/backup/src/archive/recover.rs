//! The one entry point of a point-in-time replay, for the CLI and the agent alike: checks the
//! backup's engine, finds the tools, lists the archive that continues the backup, and replays
//! into a running server or a restored datadir.

use std::path::PathBuf;

use super::replay::{self, ReplayOutcome, ReplayTools};
use super::{manifest, offline, store, Target};
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::format::Flavor;
use crate::repo::{CompleteBackup, Repository};
use crate::source::{self, Connection, ToolJob};

/// Where a replay goes.
pub enum ReplayInto {
    /// A running server that holds the restored backup.
    Server(Connection),
    /// A restored, prepared datadir (a temporary server is started on it).
    Datadir(PathBuf),
}

/// Replays the archive after `backup` up to `target`.
pub async fn replay_after(
    repo: &Repository,
    backup: &CompleteBackup,
    key: Option<&MasterKey>,
    target: &Target,
    into: &ReplayInto,
) -> Result<ReplayOutcome> {
    let flavor = backup.manifest.source.flavor;
    if flavor != Flavor::Mariadb {
        return Err(Error::ArchiveUnsupported(format!(
            "a MariaDB backup; {} is from MySQL",
            backup.manifest.id
        )));
    }
    let tools = ReplayTools {
        decoder: source::find_tool(flavor, ToolJob::BinlogDecoder, None)?,
        client: source::find_tool(flavor, ToolJob::Client, None)?,
    };
    let archive = manifest::archive_of(&backup.manifest);
    let segments = store::list(repo.store(), archive).await?.segments;
    let store = repo.store();
    match into {
        ReplayInto::Server(conn) => {
            replay::apply(store, key, backup, &segments, target, conn, &tools).await
        }
        ReplayInto::Datadir(dir) => {
            let server = offline::find_server()?;
            offline::replay_into_datadir(
                store, key, backup, &segments, target, dir, &server, &tools,
            )
            .await
        }
    }
}
