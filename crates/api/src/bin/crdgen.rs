//! Writes the CustomResourceDefinitions of the Bulwark API, one YAML file per CRD, into the
//! directory given as the only argument (normally the repository's `crds/`):
//!
//! ```text
//! cargo run -p bulwark-api --bin crdgen -- crds/
//! ```
//!
//! YAML files in that directory that no CRD produces any more are removed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: crdgen <output-dir>");
        return ExitCode::from(2);
    };
    match generate(Path::new(&dir)) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("crdgen: {err}");
            ExitCode::FAILURE
        }
    }
}

fn generate(dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("failed to create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    let mut names = BTreeSet::new();
    for crd in bulwark_api::crds() {
        let name = bulwark_api::crd_file_name(&crd);
        let yaml =
            bulwark_api::crd_yaml(&crd).map_err(|e| format!("failed to render {name}: {e}"))?;
        let path = dir.join(&name);
        std::fs::write(&path, yaml)
            .map_err(|e| format!("failed to write {}: {e}", path.display()))?;
        names.insert(name);
        written.push(path);
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("failed to list {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("failed to list {}: {e}", dir.display()))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.ends_with(".yaml") && !names.contains(&file_name) {
            std::fs::remove_file(entry.path())
                .map_err(|e| format!("failed to remove stale {}: {e}", entry.path().display()))?;
        }
    }
    Ok(written)
}
