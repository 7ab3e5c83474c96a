//! How a backup storage is reached from a pod: the repository on the command line, volumes and
//! mounts for PVC and NFS storages, Secrets for S3 credentials and the encryption key. Used by
//! the backup and deletion Jobs and by a bootstrapping cluster's restore container. Pure.

use bulwark_api::cluster::{BackupEncryption, BackupStorage};
use bulwark_api::SecretKeyReference;
use bulwark_contract::command::Repository;
use bulwark_contract::paths;
use k8s_openapi::api::core::v1::{
    KeyToPath, NFSVolumeSource, PersistentVolumeClaimVolumeSource, SecretVolumeSource, Volume,
    VolumeMount,
};

use crate::podspec::mount;

/// What a container needs to reach a storage: the repository arguments, the volumes and mounts
/// (the storage itself, and Secrets as files: S3 credentials, the master key), and the
/// human-readable location. No credential travels in an environment variable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StorageAccess {
    pub repository: Repository,
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    pub location: String,
}

/// A volume holding one key of a Secret as the file `file`, readable by its owner only.
pub fn secret_file_volume(name: &str, secret: &SecretKeyReference, file: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.name.clone()),
            items: Some(vec![KeyToPath {
                key: secret.key.clone(),
                path: file.to_owned(),
                mode: Some(0o400),
            }]),
            default_mode: Some(0o400),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// How to reach `storage` (and decrypt with `encryption`) from a pod; `None` when the storage
/// sets none of its kinds (possible only in an edited storage record).
pub fn storage_access(
    storage: &BackupStorage,
    encryption: Option<&BackupEncryption>,
) -> Option<StorageAccess> {
    let mut a = StorageAccess::default();
    if let Some(s3) = &storage.s3 {
        let prefix = s3.prefix.as_deref().unwrap_or("").trim_matches('/');
        let url = if prefix.is_empty() {
            format!("s3://{}", s3.bucket)
        } else {
            format!("s3://{}/{prefix}", s3.bucket)
        };
        a.location = url.clone();
        a.repository = Repository {
            url,
            s3_endpoint: s3.endpoint.clone(),
            s3_region: s3.region.clone(),
            s3_path_style: s3.force_path_style,
            s3_credentials_dir: None,
            encryption_key_file: None,
        };
        // The Secret's keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optionally
        // AWS_SESSION_TOKEN) become files that mysql-backup reads.
        if let Some(c) = &s3.credentials_secret {
            a.volumes.push(Volume {
                name: "s3-credentials".to_owned(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(c.name.clone()),
                    default_mode: Some(0o400),
                    optional: Some(false),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            });
            a.mounts
                .push(mount("s3-credentials", paths::S3_CREDENTIALS_DIR, true));
            a.repository.s3_credentials_dir = Some(paths::S3_CREDENTIALS_DIR.to_owned());
        }
    } else {
        let (volume, location, sub_path) = if let Some(p) = &storage.pvc {
            (
                Volume {
                    name: "backup-storage".to_owned(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: p.claim_name.clone(),
                        read_only: None,
                    }),
                    ..Volume::default()
                },
                format!(
                    "pvc://{}/{}",
                    p.claim_name,
                    p.sub_path.as_deref().unwrap_or("")
                ),
                p.sub_path.clone(),
            )
        } else {
            let n = storage.nfs.as_ref()?;
            (
                Volume {
                    name: "backup-storage".to_owned(),
                    nfs: Some(NFSVolumeSource {
                        server: n.server.clone(),
                        path: n.path.clone(),
                        read_only: None,
                    }),
                    ..Volume::default()
                },
                format!("nfs://{}{}", n.server, n.path),
                None,
            )
        };
        a.location = location.trim_end_matches('/').to_owned();
        a.volumes.push(volume);
        let mut m = mount("backup-storage", paths::STORAGE_MOUNT, false);
        m.sub_path = sub_path;
        a.mounts.push(m);
        a.repository.url = paths::STORAGE_MOUNT.to_owned();
    }
    if let Some(e) = encryption {
        a.volumes.push(secret_file_volume(
            "backup-key",
            &e.key_secret_ref,
            "master.key",
        ));
        a.mounts.push(mount("backup-key", paths::KEY_DIR, true));
        a.repository.encryption_key_file = Some(paths::KEY_FILE.to_owned());
    }
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storages_are_reached_by_mount_or_by_url() {
        let s3: BackupStorage = serde_json::from_value(serde_json::json!({
            "name": "off", "s3": {"bucket": "b", "prefix": "/p/q/", "region": "r",
                                  "endpoint": "http://minio:9000", "forcePathStyle": true}
        }))
        .unwrap();
        let a = storage_access(&s3, None).unwrap();
        assert_eq!(a.location, "s3://b/p/q");
        assert_eq!(
            a.repository,
            Repository {
                url: "s3://b/p/q".into(),
                s3_endpoint: Some("http://minio:9000".into()),
                s3_region: Some("r".into()),
                s3_path_style: true,
                s3_credentials_dir: None,
                encryption_key_file: None,
            }
        );
        assert!(a.volumes.is_empty() && a.mounts.is_empty());
        let nfs: BackupStorage = serde_json::from_value(serde_json::json!({
            "name": "nas", "nfs": {"server": "10.1.2.3", "path": "/exports/db"}
        }))
        .unwrap();
        let key: BackupEncryption = serde_json::from_value(serde_json::json!({
            "keySecretRef": {"name": "k", "key": "master"}
        }))
        .unwrap();
        let a = storage_access(&nfs, Some(&key)).unwrap();
        assert_eq!(a.location, "nfs://10.1.2.3/exports/db");
        assert_eq!(a.mounts[0].mount_path, paths::STORAGE_MOUNT);
        assert_eq!(a.repository.url, paths::STORAGE_MOUNT);
        assert_eq!(
            a.repository.encryption_key_file.as_deref(),
            Some(paths::KEY_FILE)
        );
        let none: BackupStorage = serde_json::from_value(serde_json::json!({"name": "x"})).unwrap();
        assert!(storage_access(&none, None).is_none());
    }
}
