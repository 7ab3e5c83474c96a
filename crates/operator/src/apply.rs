//! Thin I/O helpers: server-side apply with a named field manager, and reads that treat 404 as
//! absence.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{is_conflict, is_not_found, Error, Result};

/// Field manager of the cluster controller (children and cluster status).
pub const CLUSTER_MANAGER: &str = "bulwark-cluster";
/// Field manager of the role labels on server pods.
pub const ROLE_MANAGER: &str = "bulwark-roles";
/// Field manager of the scheduler (scheduled MySQLBackups, schedule status).
pub const SCHEDULER_MANAGER: &str = "bulwark-scheduler";
/// Field manager of the backup controller (Jobs, backup status).
pub const BACKUP_MANAGER: &str = "bulwark-backup";
/// Field manager of the restore drills (their Jobs and each backup's `status.lastDrill`).
pub const DRILL_MANAGER: &str = "bulwark-drill";

/// Applies `obj` (a complete desired object with apiVersion and kind) as `manager`, taking over
/// conflicting fields.
pub async fn apply<K>(api: &Api<K>, name: &str, obj: &K, manager: &str) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let kind = kind_of::<K>();
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|source| Error::Apply {
        kind,
        name: name.to_owned(),
        source,
    })
}

/// Applies `status` as `manager`'s part of the status of `read`, only over the version it was
/// decided from. Status writers merge what they decide into what they read; a write from a
/// stale copy would drop fields a newer write recorded, so it is refused with a conflict
/// ([`Error::is_conflict`]) and the reconcile runs again on fresh data.
pub async fn apply_status<K, S>(api: &Api<K>, read: &K, status: S, manager: &str) -> Result<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    let kind = kind_of::<K>();
    let name = read.meta().name.clone().unwrap_or_default();
    let doc = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {
            "name": name,
            "resourceVersion": read.meta().resource_version,
        },
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(doc),
    )
    .await
    .map_err(|source| Error::UpdateStatus { kind, name, source })
}

/// Reads an object; `None` when it does not exist.
pub async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api.get(name).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(source) => Err(Error::Read {
            kind: kind_of::<K>(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// Deletes an object; absence is success.
pub async fn delete_opt<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    delete_with(api, name, kube::api::DeleteParams::background()).await
}

/// Deletes an object once its dependents are gone (foreground propagation): until then it
/// stays, with a deletion timestamp. A Job deleted so outlives its pods, so no pod of it can
/// still be writing once it is gone.
pub async fn delete_foreground<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    delete_with(api, name, kube::api::DeleteParams::foreground()).await
}

/// Deletes the object named `name` only while it is the one with `uid` (a recreated one is
/// left alone); gone counts as deleted.
pub async fn delete_uid<K>(api: &Api<K>, name: &str, uid: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let dp = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::background()
    };
    match delete_with(api, name, dp).await {
        // A failed precondition: the pod was already replaced.
        Err(Error::Delete { source, .. }) if is_conflict(&source) => Ok(()),
        other => other,
    }
}

async fn delete_with<K>(api: &Api<K>, name: &str, dp: kube::api::DeleteParams) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(source) => Err(Error::Delete {
            kind: kind_of::<K>(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// Lists objects matching a label selector.
pub async fn list<K>(api: &Api<K>, selector: &str) -> Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    api.list(&kube::api::ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .map_err(|source| Error::List {
            kind: kind_of::<K>(),
            source,
        })
}

/// The MySQLBackup objects of one cluster (by `spec.clusterRef`), in its namespace.
pub async fn backups_of(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
) -> Result<Vec<bulwark_api::MySQLBackup>> {
    let api: Api<bulwark_api::MySQLBackup> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|source| Error::List {
            kind: "MySQLBackup",
            source,
        })?
        .items
        .into_iter()
        .filter(|b| b.spec.cluster_ref.name == cluster)
        .collect())
}

/// The kind of `K`, for error messages.
fn kind_of<K: Resource<DynamicType = ()>>() -> &'static str {
    // Static types name their kind with a string constant.
    match K::kind(&()) {
        std::borrow::Cow::Borrowed(kind) => kind,
        std::borrow::Cow::Owned(_) => "object",
    }
}
