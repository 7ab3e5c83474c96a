//! Prometheus metrics in the text exposition format: reconciles, errors by category and
//! durations per controller; per cluster the last successful backup's time, duration and size,
//! and failed backups. Label sets are bounded: controllers and categories are static, clusters
//! are forgotten when deleted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use chrono::{DateTime, Utc};

/// Upper bounds of the reconcile duration histogram, in seconds.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default, Clone, Copy)]
struct ClusterBackups {
    last_success_seconds: Option<f64>,
    last_duration_seconds: Option<f64>,
    last_stored_bytes: Option<u64>,
    failed_total: u64,
}

#[derive(Default)]
struct State {
    reconciles: BTreeMap<&'static str, u64>,
    errors: BTreeMap<(&'static str, &'static str), u64>,
    durations: BTreeMap<&'static str, Histogram>,
    clusters: BTreeMap<(String, String), ClusterBackups>,
}

/// The operator's metrics.
#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records one reconcile of `controller` that took `seconds`.
    pub fn reconciled(&self, controller: &'static str, seconds: f64) {
        self.with(|s| {
            *s.reconciles.entry(controller).or_default() += 1;
            let h = s.durations.entry(controller).or_default();
            for (i, b) in BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += seconds;
            h.count += 1;
        });
    }

    /// Records a failed reconcile of `controller` in an error `category`.
    pub fn reconcile_failed(&self, controller: &'static str, category: &'static str) {
        self.with(|s| *s.errors.entry((controller, category)).or_default() += 1);
    }

    /// Records a successful backup of a cluster.
    pub fn backup_succeeded(
        &self,
        ns: &str,
        cluster: &str,
        finished: DateTime<Utc>,
        seconds: f64,
        stored: u64,
    ) {
        self.with(|s| {
            let c = s
                .clusters
                .entry((ns.to_owned(), cluster.to_owned()))
                .or_default();
            let t = finished.timestamp_millis() as f64 / 1000.0;
            if c.last_success_seconds.is_none_or(|prev| t >= prev) {
                c.last_success_seconds = Some(t);
                c.last_duration_seconds = Some(seconds);
                c.last_stored_bytes = Some(stored);
            }
        });
    }

    /// Records a failed backup of a cluster.
    pub fn backup_failed(&self, ns: &str, cluster: &str) {
        self.with(|s| {
            s.clusters
                .entry((ns.to_owned(), cluster.to_owned()))
                .or_default()
                .failed_total += 1
        });
    }

    /// Forgets a deleted cluster's series.
    pub fn forget_cluster(&self, ns: &str, cluster: &str) {
        self.with(|s| s.clusters.remove(&(ns.to_owned(), cluster.to_owned())));
    }

    /// Keeps the series of the given clusters only.
    pub fn retain_clusters(&self, live: &std::collections::BTreeSet<(String, String)>) {
        self.with(|s| s.clusters.retain(|k, _| live.contains(k)));
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        self.with(|s| {
            let mut o = String::new();
            o.push_str("# HELP bulwark_reconciles_total Reconciles run, by controller.\n# TYPE bulwark_reconciles_total counter\n");
            for (c, n) in &s.reconciles {
                let _ = writeln!(o, "bulwark_reconciles_total{{controller=\"{c}\"}} {n}");
            }
            o.push_str("# HELP bulwark_reconcile_errors_total Failed reconciles, by controller and error category.\n# TYPE bulwark_reconcile_errors_total counter\n");
            for ((c, cat), n) in &s.errors {
                let _ = writeln!(o, "bulwark_reconcile_errors_total{{controller=\"{c}\",category=\"{cat}\"}} {n}");
            }
            o.push_str("# HELP bulwark_reconcile_duration_seconds Duration of reconciles, by controller.\n# TYPE bulwark_reconcile_duration_seconds histogram\n");
            for (c, h) in &s.durations {
                for (i, b) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(o, "bulwark_reconcile_duration_seconds_bucket{{controller=\"{c}\",le=\"{b}\"}} {}", h.counts[i]);
                }
                let _ = writeln!(o, "bulwark_reconcile_duration_seconds_bucket{{controller=\"{c}\",le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(o, "bulwark_reconcile_duration_seconds_sum{{controller=\"{c}\"}} {}", h.sum);
                let _ = writeln!(o, "bulwark_reconcile_duration_seconds_count{{controller=\"{c}\"}} {}", h.count);
            }
            type Get = fn(&ClusterBackups) -> Option<f64>;
            let gauges: [(&str, &str, &str, Get); 4] = [
                ("bulwark_backup_last_success_timestamp_seconds", "gauge", "Completion time of the cluster's latest successful backup.", |c| c.last_success_seconds),
                ("bulwark_backup_last_duration_seconds", "gauge", "Duration of the cluster's latest successful backup.", |c| c.last_duration_seconds),
                ("bulwark_backup_last_stored_bytes", "gauge", "Bytes stored by the cluster's latest successful backup.", |c| c.last_stored_bytes.map(|b| b as f64)),
                ("bulwark_backups_failed_total", "counter", "Failed backups of the cluster since the operator started.", |c| Some(c.failed_total as f64)),
            ];
            for (name, kind, help, get) in gauges {
                let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for ((ns, cl), c) in &s.clusters {
                    if let Some(v) = get(c) {
                        let _ = writeln!(o, "{name}{{namespace=\"{}\",cluster=\"{}\"}} {v}", escape(ns), escape(cl));
                    }
                }
            }
            o
        })
    }
}

/// Escapes a label value.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_cluster_series() {
        let m = Metrics::default();
        m.reconciled("cluster", 0.02);
        m.reconciled("cluster", 3.0);
        m.reconcile_failed("backup", "apply");
        let t = DateTime::parse_from_rfc3339("2026-11-22T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        m.backup_succeeded("shop", "orders", t, 12.5, 4096);
        m.backup_failed("shop", "orders");
        let out = m.render();
        for line in [
            "bulwark_reconciles_total{controller=\"cluster\"} 2",
            "bulwark_reconcile_errors_total{controller=\"backup\",category=\"apply\"} 1",
            "bulwark_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"0.025\"} 1",
            "bulwark_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"+Inf\"} 2",
            "bulwark_backup_last_success_timestamp_seconds{namespace=\"shop\",cluster=\"orders\"} 1795316400",
            "bulwark_backup_last_stored_bytes{namespace=\"shop\",cluster=\"orders\"} 4096",
            "bulwark_backups_failed_total{namespace=\"shop\",cluster=\"orders\"} 1",
        ] {
            assert!(out.contains(line), "missing {line} in\n{out}");
        }
        m.forget_cluster("shop", "orders");
        assert!(!m.render().contains("orders"));
    }
}
