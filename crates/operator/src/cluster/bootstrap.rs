//! The backup a bootstrapping cluster's pods restore. It is resolved once, when the cluster is
//! created (from `bootstrap.fromBackup`), and recorded on the StatefulSet as an annotation: the
//! backup object may be pruned and the storage renamed later, and new pods must still find it.

use bulwark_api::cluster::{BackupEncryption, BackupStorage};
use bulwark_api::MySQLCluster;
use bulwark_contract::command::PointInTime;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use super::validate::Refs;
use crate::names;
use crate::storage::{storage_access, StorageAccess};

/// A backup to restore and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSource {
    pub backup_id: String,
    pub storage: BackupStorage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,
    /// The point in time to bring the data to (`bootstrap.fromBackup.until`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The GTID position to bring the data to (`bootstrap.fromBackup.untilGtid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_gtid: Option<String>,
}

impl RestoreSource {
    /// How the restore reaches the storage; `None` for a storage of no kind.
    pub fn access(&self) -> Option<StorageAccess> {
        storage_access(&self.storage, self.encryption.as_ref())
    }

    /// The point in time the restore container is given.
    pub fn point_in_time(&self) -> Option<PointInTime> {
        match (&self.until, &self.until_gtid) {
            (_, Some(g)) => Some(PointInTime::UntilGtid(g.clone())),
            (Some(t), None) => Some(PointInTime::Until(t.clone())),
            (None, None) => None,
        }
    }

    /// The annotation value recording this source.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a restore source serializes")
    }

    /// The source recorded on a StatefulSet, if it was built with one.
    pub fn recorded(set: &StatefulSet) -> Option<RestoreSource> {
        let raw = set.annotations().get(names::RESTORE_SOURCE_ANNOTATION)?;
        match serde_json::from_str(raw) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(statefulset = %set.name_any(), error = %e, "unreadable restore source annotation ignored");
                None
            }
        }
    }

    /// The source the spec names: a succeeded MySQLBackup (read into `refs`), or a backup id in
    /// one of the cluster's storages.
    pub fn from_spec(cluster: &MySQLCluster, refs: &Refs) -> Option<RestoreSource> {
        let from = &cluster.spec.bootstrap.as_ref()?.from_backup;
        let encryption = cluster
            .spec
            .backup
            .as_ref()
            .and_then(|b| b.encryption.clone());
        if let Some(b) = &refs.bootstrap_backup {
            let status = b.status.as_ref()?;
            return Some(RestoreSource {
                backup_id: status.backup_id.clone()?,
                storage: status.recorded_storage.clone()?,
                encryption,
                until: from.until.clone(),
                until_gtid: from.until_gtid.clone(),
            });
        }
        let storage = cluster
            .spec
            .backup
            .as_ref()?
            .storages
            .iter()
            .find(|s| Some(&s.name) == from.storage.as_ref())?;
        Some(RestoreSource {
            backup_id: from.backup_id.clone()?,
            storage: storage.clone(),
            encryption,
            until: from.until.clone(),
            until_gtid: from.until_gtid.clone(),
        })
    }
}
