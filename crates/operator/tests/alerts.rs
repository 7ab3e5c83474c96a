//! The chart's alert rules (`templates/prometheusrule.yaml`) as Prometheus reads them:
//! rendered by helm, checked by `promtool check rules`, and run against the unit tests in
//! `tests/fixtures/alerts/tests.yaml` by `promtool test rules` (each alert fires on its case and
//! stays quiet before it and on a healthy cluster). That the metrics they query exist is checked
//! against what the operator renders (`metrics.rs`) and against real scrapes: a running
//! operator's in the e2e drill test, a replica's exporter's in the e2e cluster test. The
//! dashboard is valid JSON whose panels all query something.
//!
//! promtool comes from `BULWARK_PROMTOOL_BIN` (a directory, exported by `scripts/test.sh`) or
//! else from `tests/promtool/build.sh`, which builds it once into a cache outside the clone.

mod tools;

use std::process::{Command, Stdio};

use tools::{helm_dir, promtool_dir, repository_root};

/// The chart rendered with its alert rules and dashboard on.
fn rendered() -> Vec<serde_yaml::Value> {
    let output = Command::new(helm_dir().join("helm"))
        .args([
            "template",
            "mysql-operator",
            "charts/mysql-operator",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "grafanaDashboard.enabled=true",
        ])
        .current_dir(repository_root())
        .stdin(Stdio::null())
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
        .filter(|d: &serde_yaml::Value| !d.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [serde_yaml::Value], kind: &str) -> &'a serde_yaml::Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

fn promtool(dir: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(promtool_dir().join("promtool"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {}: {said}",
        args.join(" ")
    );
    said
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let docs = rendered();
    let rule = of_kind(&docs, "PrometheusRule");
    let work = tempfile::tempdir().unwrap();
    let rules = serde_yaml::to_string(&rule["spec"]).unwrap();
    std::fs::write(work.path().join("rules.yaml"), rules).unwrap();
    std::fs::copy(
        repository_root().join("crates/operator/tests/fixtures/alerts/tests.yaml"),
        work.path().join("tests.yaml"),
    )
    .unwrap();
    let checked = promtool(work.path(), &["check", "rules", "rules.yaml"]);
    assert!(checked.contains("SUCCESS: 12 rules found"), "{checked}");
    promtool(work.path(), &["test", "rules", "tests.yaml"]);
    // Every alert of the chart has a unit test.
    let tests = std::fs::read_to_string(work.path().join("tests.yaml")).unwrap();
    for group in rule["spec"]["groups"].as_sequence().unwrap() {
        for r in group["rules"].as_sequence().unwrap() {
            let name = r["alert"].as_str().unwrap();
            assert!(
                tests.contains(&format!("alertname: {name}\n")),
                "{name} has no test"
            );
        }
    }
}

#[test]
fn the_dashboard_is_json_whose_panels_all_query() {
    let docs = rendered();
    let cm = of_kind(&docs, "ConfigMap");
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    let json: serde_json::Value =
        serde_json::from_str(cm["data"]["bulwark.json"].as_str().unwrap()).unwrap();
    let panels = json["panels"].as_array().unwrap();
    let queried: Vec<_> = panels
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let exprs: Vec<&str> = p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["expr"].as_str())
                .collect();
            assert!(!exprs.is_empty(), "panel {} queries nothing", p["title"]);
            exprs
        })
        .collect();
    assert!(queried.len() >= 10, "{queried:?}");
}
