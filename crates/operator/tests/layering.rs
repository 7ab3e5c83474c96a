//! The walls between the parts, read from the sources and manifests so that a new import that
//! breaks one fails here: each crate depends only on the workspace crates `docs/architecture.md`
//! allows it, the engine carries no command line or HTTP, nothing below the operator knows
//! Kubernetes, and within every crate the files import each other without a cycle (`crate::`,
//! `super::`, `self::` and child-module paths, grouped imports included).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every crate of the workspace (its directory name).
fn workspace_crates() -> Vec<String> {
    let mut crates: Vec<String> = std::fs::read_dir(crates_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    crates
}

/// A crate's `[dependencies]`: name → the workspace crate directory when it is a path one.
fn dependencies(krate: &str) -> BTreeMap<String, Option<String>> {
    let manifest = crates_dir().join(krate).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut section = String::new();
    let mut deps = BTreeMap::new();
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
        let path = line
            .split("path = \"../")
            .nth(1)
            .and_then(|p| p.split('"').next())
            .map(str::to_owned);
        deps.insert(name, path);
    }
    deps
}

/// The path dependencies of a crate and theirs, with every dependency name met on the way.
fn dependency_names(krate: &str, seen: &mut BTreeSet<String>, names: &mut BTreeSet<String>) {
    if !seen.insert(krate.to_owned()) {
        return;
    }
    for (name, path) in dependencies(krate) {
        if let Some(path) = path {
            dependency_names(&path, seen, names);
        }
        names.insert(name);
    }
}

fn transitive(krate: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    dependency_names(krate, &mut BTreeSet::new(), &mut names);
    names
}

const KUBERNETES: [&str; 4] = ["kube", "k8s-openapi", "bulwark-api", "mysql-operator"];

/// Each crate: the workspace crates it may depend on directly, and what must not be among
/// its dependencies or theirs.
fn rules() -> BTreeMap<&'static str, (Vec<&'static str>, Vec<&'static str>)> {
    let command_line = ["clap", "indicatif", "tracing-subscriber"];
    let k8s = KUBERNETES.to_vec();
    let with = |extra: &[&'static str]| k8s.iter().chain(extra).copied().collect::<Vec<_>>();
    [
        ("contract", (vec![], with(&["tokio"]))),
        ("retention", (vec![], with(&["tokio"]))),
        ("http", (vec![], with(&[]))),
        (
            "engine",
            (
                vec!["contract"],
                with(&[&command_line[..], &["axum"]].concat()),
            ),
        ),
        (
            "pitr",
            (
                vec!["engine", "contract", "retention", "http"],
                with(&command_line),
            ),
        ),
        ("cli", (vec!["engine", "pitr", "contract"], with(&[]))),
        (
            "backup",
            (
                vec!["engine", "pitr", "cli", "retention", "contract"],
                with(&[]),
            ),
        ),
        (
            "agent",
            (vec!["contract", "engine", "pitr", "cli", "http"], with(&[])),
        ),
        ("api", (vec!["contract"], vec!["tokio"])),
        (
            "operator",
            (
                vec!["api", "contract", "retention", "http"],
                vec![
                    "bulwark-engine",
                    "bulwark-pitr",
                    "bulwark-cli",
                    "bulwark-agent",
                ],
            ),
        ),
        ("testenv", (vec![], vec![])),
        ("mysql-testkit", (vec![], vec![])),
        ("e2e", (vec!["mysql-testkit"], vec![])),
    ]
    .into_iter()
    .collect()
}

#[test]
fn every_crate_depends_only_on_what_its_layer_allows() {
    let rules = rules();
    for krate in workspace_crates() {
        let Some((allowed, forbidden)) = rules.get(krate.as_str()) else {
            panic!("crate {krate} has no layering rule: add it here and to docs/architecture.md");
        };
        for (name, path) in dependencies(&krate) {
            if let Some(path) = path {
                assert!(
                    allowed.contains(&path.as_str()),
                    "{krate} depends on the workspace crate {path} ({name}), which its layer does not allow"
                );
            }
        }
        let names = transitive(&krate);
        for f in forbidden {
            assert!(
                !names.contains(*f),
                "{krate} depends on {f}, directly or through a crate it uses"
            );
        }
    }
    // Read for real: the engine's dependencies were found.
    assert!(transitive("engine").contains("zstd"));
}

/// The files of a crate's library (or its binary, when it has no library) by module path
/// (`archive::archiver`; the root is ""), without `*_tests.rs` files (test modules of a file).
fn modules(krate: &str) -> BTreeMap<String, PathBuf> {
    let src = crates_dir().join(krate).join("src");
    let root = if src.join("lib.rs").is_file() {
        "lib"
    } else {
        "main"
    };
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let last = parts.last().cloned().unwrap_or_default();
        if parts[0] == "bin" || last.ends_with("_tests") {
            continue;
        }
        if parts.len() == 1 && (last == "lib" || last == "main") && last != root {
            continue;
        }
        if last == "mod" || (parts.len() == 1 && last == root) {
            parts.pop();
        }
        modules.insert(parts.join("::"), f);
    }
    modules
}

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

/// The code of a file without comments and without its test module (at its end).
fn code(text: &str) -> String {
    let mut text = text.to_owned();
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]").map(|i| i + from) {
        let mut rest = text[i + "#[cfg(test)]".len()..].trim_start();
        while rest.starts_with("#[") {
            rest = rest[rest.find(']').map_or(rest.len(), |e| e + 1)..].trim_start();
        }
        let is_mod = rest.strip_prefix("mod ").is_some_and(|r| {
            let r = r.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_');
            let r = r.trim_start();
            r.starts_with('{') || r.starts_with(';')
        });
        if is_mod {
            text.truncate(i);
            break;
        }
        from = i + 1;
    }
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths named after position `at` (just past `prefix::`): one, or several for a group
/// `{a, b::{c, d}}`.
fn paths_at(text: &str, at: usize) -> Vec<Vec<String>> {
    fn read(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let s = s.trim_start();
        if let Some(inner) = s.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        read(&inner[start..i], prefix.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        read(&inner[start..i], prefix.clone(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(s.len());
        let head = &s[..end];
        let mut path = prefix;
        path.extend(
            head.split("::")
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
        );
        if head.ends_with("::") && s[end..].starts_with('{') {
            read(&s[end..], path, out);
        } else if !path.is_empty() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    read(&text[at..], Vec::new(), &mut out);
    out
}

/// The module `module` (a file; `is_dir_module`: a `mod.rs` or crate root) names with `path`,
/// resolved from the part of the path a keyword or child name starts at: the longest prefix
/// that is a file of the crate.
fn resolve(base: &[String], path: &[String], files: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let candidate: Vec<&str> = base.iter().chain(&path[..n]).map(String::as_str).collect();
        let key = candidate.join("::");
        files.contains_key(&key).then_some(key)
    })
}

/// Which files of a crate import which (an edge to an ancestor module does not count: a child
/// naming its parent's items is how a module is built).
fn file_graph(krate: &str) -> Graph {
    let files = modules(krate);
    let mut graph = Graph::new();
    for (module, file) in &files {
        let own: Vec<String> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").map(str::to_owned).collect()
        };
        let name = file.file_name().unwrap().to_string_lossy();
        let dir_module = name == "mod.rs" || own.is_empty();
        let parent: Vec<String> = own[..own.len().saturating_sub(1)].to_vec();
        let children: Vec<String> = files
            .keys()
            .filter_map(|k| {
                let rest = if own.is_empty() {
                    Some(k.as_str())
                } else {
                    k.strip_prefix(module.as_str())?.strip_prefix("::")
                };
                rest.filter(|r| !r.is_empty() && !r.contains("::"))
                    .map(str::to_owned)
            })
            .collect();
        let text = code(&std::fs::read_to_string(file).unwrap());
        let mut targets = BTreeSet::new();
        let bytes = text.as_bytes();
        for (i, _) in text.match_indices("::") {
            // The segment that ends here, if it starts a path.
            let start = text[..i]
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            if start >= 2 && &bytes[start - 2..start] == b"::" {
                continue;
            }
            let word = &text[start..i];
            let paths = paths_at(&text, i + 2);
            let base: Vec<String> = match word {
                "crate" => Vec::new(),
                "self" if dir_module => own.clone(),
                "self" => own.clone(),
                "super" => parent.clone(),
                w if children.iter().any(|c| c == w) => {
                    let mut b = own.clone();
                    b.push(w.to_owned());
                    b
                }
                _ => continue,
            };
            for mut path in paths {
                let mut base = base.clone();
                while path.first().is_some_and(|p| p == "super") {
                    path.remove(0);
                    base.pop();
                }
                let target = if path.is_empty() {
                    Some(base.join("::")).filter(|k| files.contains_key(k))
                } else {
                    resolve(&base, &path, &files)
                        .or_else(|| Some(base.join("::")).filter(|k| files.contains_key(k)))
                };
                if let Some(t) = target {
                    let ancestor =
                        t.is_empty() || *module == t || module.starts_with(&format!("{t}::"));
                    if !ancestor {
                        targets.insert(t);
                    }
                }
            }
        }
        graph.insert(
            if module.is_empty() {
                "(root)".into()
            } else {
                module.clone()
            },
            targets,
        );
    }
    graph
}

/// A cycle in `graph`, if any (depth-first).
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
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
fn no_crate_has_an_import_cycle_between_its_files() {
    let mut found = Vec::new();
    for krate in workspace_crates() {
        if let Some(c) = cycle(&file_graph(&krate)) {
            found.push(format!("{krate}: {}", c.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn imports_are_read_through_groups_super_and_child_paths() {
    let text = "use crate::{alpha::One, beta::{gamma, delta::Two}};\nuse super::super::epsilon;";
    let at = text.find("crate::").unwrap() + "crate::".len();
    assert_eq!(
        paths_at(text, at),
        [
            vec!["alpha", "One"],
            vec!["beta", "gamma"],
            vec!["beta", "delta", "Two"]
        ]
    );
    // Read for real: known edges of the sources are found.
    let pitr = file_graph("pitr");
    assert!(
        pitr["archive::follow"].contains("archive::connect"),
        "{pitr:#?}"
    );
    assert!(pitr["archive::archiver"].contains("binlog"), "{pitr:#?}");
    let engine = file_graph("engine");
    assert!(
        engine["store"].contains("store::fs"),
        "child paths: {engine:#?}"
    );
    assert!(engine["error"].contains("store"), "{engine:#?}");
    let agent = file_graph("agent");
    assert!(
        agent["decide::topology"].contains("decide::restored"),
        "{agent:#?}"
    );
    let operator = file_graph("operator");
    assert!(
        operator["cluster::plan"].contains("cluster::failover"),
        "super paths: {operator:#?}"
    );
    assert!(
        !operator["cluster::plan"].contains("cluster"),
        "a child naming its parent is no edge"
    );
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let g: Graph = [
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

#[test]
fn the_agents_decisions_do_no_io() {
    let graph = file_graph("agent");
    let decide: Vec<_> = graph.keys().filter(|m| m.starts_with("decide")).collect();
    assert!(decide.len() >= 5, "the agent's decide modules: {decide:?}");
    for m in decide {
        for t in &graph[m] {
            assert!(
                t.starts_with("decide"),
                "{m} imports {t}: decisions stay pure"
            );
        }
    }
}

#[test]
fn the_operators_controllers_share_helpers_never_each_other() {
    let graph = file_graph("operator");
    let imports = |from: &str, to: &str| {
        graph
            .iter()
            .filter(|(m, _)| *m == from || m.starts_with(&format!("{from}::")))
            .any(|(_, t)| {
                t.iter()
                    .any(|t| t == to || t.starts_with(&format!("{to}::")))
            })
    };
    for (a, b) in [("cluster", "backup"), ("backup", "cluster")] {
        assert!(!imports(a, b), "{a} imports {b}");
    }
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
