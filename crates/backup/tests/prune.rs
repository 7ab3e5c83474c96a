//! Retention on a real repository: only the backups the rules drop are deleted (manifest
//! first), dry runs delete nothing, and the newest backup always survives.

mod common;

use common::*;

#[test]
fn prune_keeps_exactly_what_the_rules_say() {
    let Scenario { work, source, repo } = Scenario::new(50);
    let repo = repo.as_str();
    let ids: Vec<String> = (0..4)
        .map(|_| {
            let b = backup(repo, &source, &["--method", "logical"], &[]);
            // Ids carry whole seconds; spread them so every backup has its own.
            std::thread::sleep(std::time::Duration::from_millis(1100));
            b["id"].as_str().unwrap().to_string()
        })
        .collect();

    let plan: serde_json::Value = serde_json::from_str(&ok(cli(&[
        "prune",
        "--repo",
        repo,
        "--keep-last",
        "2",
        "--dry-run",
        "--json",
    ])))
    .unwrap();
    let keep: Vec<&str> = plan["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["keep"] == true)
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(keep, vec![ids[3].as_str(), ids[2].as_str()]);
    assert_eq!(
        complete_ids(&list(repo, &[])).len(),
        4,
        "a dry run deletes nothing"
    );

    let human = ok(cli(&["prune", "--repo", repo, "--keep-last", "2"]));
    assert!(
        human.contains("removed") && human.contains("last"),
        "{human}"
    );
    assert_eq!(
        complete_ids(&list(repo, &[])),
        vec![ids[2].clone(), ids[3].clone()]
    );
    for gone in &ids[..2] {
        assert!(
            !work.path().join("repo/backups").join(gone).exists(),
            "{gone} data must be gone"
        );
    }
    // Rules that match nothing still keep the newest backup.
    ok(cli(&["prune", "--repo", repo, "--keep-within", "0s"]));
    assert_eq!(complete_ids(&list(repo, &[])), vec![ids[3].clone()]);
    // No rules: nothing is deleted, and it says so.
    let out = run(cli(&["prune", "--repo", repo]));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("every complete backup is kept"));
    assert_eq!(complete_ids(&list(repo, &[])).len(), 1);
}
