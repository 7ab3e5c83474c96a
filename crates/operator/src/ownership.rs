//! Whose a pod is: its controller reference (kind and uid), not its labels. A label needs
//! nothing; a controller reference needs the owner's uid, which whoever may read the owner can
//! still copy: this keeps out pods made by mistake or by a neighbour without read access, not
//! someone trusted with the namespace's pods. Pure.

use kube::Resource;

/// Whether `owner` (a StatefulSet, a Job, a Deployment), as read from the API server, is the
/// controller of `owned` (a pod, a ReplicaSet).
pub fn controls<K: Resource<DynamicType = ()>, O: Resource>(owner: &K, owned: &O) -> bool {
    let Some(uid) = owner.meta().uid.as_deref() else {
        return false;
    };
    let kind = K::kind(&());
    owned
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == kind && o.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(owner: Option<(&str, &str, bool)>) -> Pod {
        let refs: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|(kind, uid, controller)| {
                serde_json::json!({"apiVersion": "batch/v1", "kind": kind, "name": "backup-x",
                    "uid": uid, "controller": controller})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "backup-x-abcde", "ownerReferences": refs}
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_belongs_to_its_controller_by_kind_and_uid() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "backup-x", "uid": "job-uid"}
        }))
        .unwrap();
        for (name, owner, controls_it) in [
            ("its own pod", Some(("Job", "job-uid", true)), true),
            ("only the labels", None, false),
            (
                "an earlier Job of the same name",
                Some(("Job", "old-uid", true)),
                false,
            ),
            (
                "owned, not controlled",
                Some(("Job", "job-uid", false)),
                false,
            ),
            (
                "another kind with the uid",
                Some(("StatefulSet", "job-uid", true)),
                false,
            ),
        ] {
            assert_eq!(controls(&job, &pod(owner)), controls_it, "{name}");
        }
        // An object not read back from the API server (no uid) controls nothing.
        assert!(!controls(&Job::default(), &pod(Some(("Job", "", true)))));
    }
}
