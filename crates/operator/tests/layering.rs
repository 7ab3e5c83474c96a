//! The walls between the parts: the operator's modules import each other without a cycle, and
//! the crates below the operator (the backup engine, the agent, the contract) know nothing of
//! Kubernetes. Read from the sources and manifests, so a new import that breaks a wall fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Top-level module of the operator's library → the top-level modules it names as `crate::x`.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "main" || module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            // Doc comments may mention paths; only code counts.
            let line_start = text[..i].rfind('\n').map_or(0, |n| n + 1);
            if text[line_start..i].trim_start().starts_with("//") {
                continue;
            }
            let name: String = text[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                deps.insert(name);
            }
        }
    }
    graph
}

/// A cycle through `start`, if any (depth-first).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = path.iter().position(|p| p == node) {
            let mut c = path[pos..].to_vec();
            c.push(node.to_owned());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in g.get(node).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|k| visit(graph, k, &mut Vec::new(), &mut done))
}

#[test]
fn the_operators_modules_import_each_other_without_a_cycle() {
    let graph = module_graph();
    assert!(graph.contains_key("cluster") && graph.contains_key("backup"));
    assert_eq!(cycle(&graph), None, "{graph:#?}");
    // The controllers share storage, credentials and names, never each other.
    for (a, b) in [("cluster", "backup"), ("backup", "cluster")] {
        assert!(!graph[a].contains(b), "{a} imports {b}");
    }
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycle(&g).map(|c| c.len()), Some(4));
}

/// The path dependencies of a crate and theirs, with every dependency name met on the way.
fn dependency_names(krate: &str, seen: &mut BTreeSet<String>, names: &mut BTreeSet<String>) {
    if !seen.insert(krate.to_owned()) {
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section != "[dependencies]" || line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name = line.split(['=', '.']).next().unwrap().trim().to_owned();
        if let Some(path) = line
            .split("path = \"../")
            .nth(1)
            .and_then(|p| p.split('"').next())
        {
            dependency_names(path, seen, names);
        }
        names.insert(name);
    }
}

#[test]
fn the_engine_the_agent_and_the_contract_know_nothing_of_kubernetes() {
    for krate in ["contract", "backup", "agent"] {
        let mut names = BTreeSet::new();
        dependency_names(krate, &mut BTreeSet::new(), &mut names);
        assert!(
            names.contains("serde"),
            "{krate}: dependencies not read: {names:?}"
        );
        for forbidden in ["kube", "k8s-openapi", "bulwark-api", "mysql-operator"] {
            assert!(!names.contains(forbidden), "{krate} depends on {forbidden}");
        }
    }
    // The contract stays small: no async runtime either.
    let mut names = BTreeSet::new();
    dependency_names("contract", &mut BTreeSet::new(), &mut names);
    assert!(!names.contains("tokio"), "{names:?}");
}

#[test]
fn the_backup_image_runs_as_the_user_the_pods_run_as() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile.backup")).unwrap();
    let uid = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG UID="))
        .expect("Dockerfile.backup declares ARG UID=");
    assert_eq!(
        uid.trim().parse::<i64>().ok(),
        Some(bulwark_operator::podspec::SERVER_UID),
        "Dockerfile.backup's user is not the pods' (podspec::SERVER_UID)"
    );
}
