//! Installing CustomResourceDefinitions from a directory of YAML files and waiting until the API
//! server serves them (condition `Established`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::error::{Error, Result};

/// Field manager of the objects the test environment applies.
pub const FIELD_MANAGER: &str = "bulwark-testenv";

/// How long a CRD may take to become established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads every `*.yaml` file of `dir` (one CRD each), in name order.
pub fn read_crds(dir: &Path) -> Result<Vec<(PathBuf, CustomResourceDefinition)>> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = entry.map_err(io_err(dir))?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
            let crd = serde_yaml::from_str(&text).map_err(|source| Error::ParseCrd {
                path: path.clone(),
                source,
            })?;
            Ok((path, crd))
        })
        .collect()
}

/// Applies (server-side) every CRD of `dir` and waits until each one is established.
pub async fn install_crds(client: &Client, dir: &Path) -> Result<()> {
    let crds = read_crds(dir)?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for (path, crd) in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|source| Error::Api {
                action: format!("apply CRD {name} from {}", path.display()),
                source: Box::new(source),
            })?;
        names.push(name);
    }
    for name in &names {
        wait_established(&api, name).await?;
    }
    Ok(())
}

async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    let deadline = Instant::now() + ESTABLISH_TIMEOUT;
    loop {
        let crd = api.get(name).await.map_err(|source| Error::Api {
            action: format!("read CRD {name}"),
            source: Box::new(source),
        })?;
        if is_established(&crd) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("CRD {name} (condition Established)"),
                timeout: ESTABLISH_TIMEOUT,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the CRD reports `Established=True`.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}
