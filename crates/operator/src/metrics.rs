//! The operator's metrics, kept and encoded by `prometheus-client` (OpenMetrics text):
//! reconciles, errors by category and durations per controller; per cluster the last
//! successful backup's time, duration and size, and failed backups; the latest restore drill's
//! time and result, drill restore durations (the measured recovery time) and failed drills.
//! Label sets are bounded:
//! controllers and categories are static, clusters are forgotten when deleted.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the reconcile duration histogram, in seconds.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Upper bounds of the drill restore duration histogram, in seconds (10 s to 8 h).
const DRILL_BUCKETS: [f64; 10] = [
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 28800.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

impl ClusterLabels {
    fn new(ns: &str, cluster: &str) -> Self {
        ClusterLabels {
            namespace: ns.to_owned(),
            cluster: cluster.to_owned(),
        }
    }
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// What a cluster pass found, for the cluster's state gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterState {
    pub ready: bool,
    pub primary_lost: bool,
    /// Members whose replication broke, when the pass read the members (else left as it was).
    pub broken_members: Option<usize>,
    /// The binlog archive, when the cluster archives its binary logs.
    pub archive: Option<ArchiveState>,
}

/// The binlog archive as a cluster pass found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveState {
    /// The `BinlogArchiveHealthy` condition is True.
    pub healthy: bool,
    /// Gaps the archiver last reported.
    pub gaps: u32,
}

/// The operator's metrics.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_durations: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    last_success: Family<ClusterLabels, FloatGauge>,
    last_duration: Family<ClusterLabels, FloatGauge>,
    last_stored: Family<ClusterLabels, Gauge<u64, AtomicU64>>,
    backups_failed: Family<ClusterLabels, Counter>,
    failovers: Family<ClusterLabels, Counter>,
    switchovers: Family<ClusterLabels, Counter>,
    archive_lag: Family<ClusterLabels, FloatGauge>,
    archive_gaps: Family<ClusterLabels, Gauge>,
    archive_healthy: Family<ClusterLabels, Gauge>,
    archive_new_gaps: Family<ClusterLabels, Counter>,
    backup_schedules: Family<ClusterLabels, Gauge>,
    drills_scheduled: Family<ClusterLabels, Gauge>,
    ready: Family<ClusterLabels, Gauge>,
    primary_lost: Family<ClusterLabels, Gauge>,
    replication_broken: Family<ClusterLabels, Gauge>,
    backups_healthy: Family<ClusterLabels, Gauge>,
    drill_last: Family<ClusterLabels, FloatGauge>,
    drill_last_success: Family<ClusterLabels, Gauge>,
    drill_restore_durations: Family<ClusterLabels, Histogram, fn() -> Histogram>,
    drills_failed: Family<ClusterLabels, Counter>,
    /// Clusters that have series. The families cannot be iterated, and the three "last" gauges
    /// change together: holding this lock makes a record and a forget of a cluster atomic.
    clusters: Mutex<BTreeSet<ClusterLabels>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_durations: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            last_success: Family::default(),
            last_duration: Family::default(),
            last_stored: Family::default(),
            backups_failed: Family::default(),
            failovers: Family::default(),
            switchovers: Family::default(),
            archive_lag: Family::default(),
            archive_gaps: Family::default(),
            archive_healthy: Family::default(),
            archive_new_gaps: Family::default(),
            backup_schedules: Family::default(),
            drills_scheduled: Family::default(),
            ready: Family::default(),
            primary_lost: Family::default(),
            replication_broken: Family::default(),
            backups_healthy: Family::default(),
            drill_last: Family::default(),
            drill_last_success: Family::default(),
            drill_restore_durations: Family::new_with_constructor(|| Histogram::new(DRILL_BUCKETS)),
            drills_failed: Family::default(),
            clusters: Mutex::default(),
        };
        let mut registry = Registry::default();
        // Counters are registered without `_total`: the encoder appends it to the samples.
        // Help texts get their final period from the registry.
        registry.register(
            "bulwark_reconciles",
            "Reconciles run, by controller",
            m.reconciles.clone(),
        );
        registry.register(
            "bulwark_reconcile_errors",
            "Failed reconciles, by controller and error category",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "bulwark_reconcile_duration_seconds",
            "Duration of reconciles, by controller",
            m.reconcile_durations.clone(),
        );
        registry.register(
            "bulwark_backup_last_success_timestamp_seconds",
            "Completion time of the cluster's latest successful backup",
            m.last_success.clone(),
        );
        registry.register(
            "bulwark_backup_last_duration_seconds",
            "Duration of the cluster's latest successful backup",
            m.last_duration.clone(),
        );
        registry.register(
            "bulwark_backup_last_stored_bytes",
            "Bytes stored by the cluster's latest successful backup",
            m.last_stored.clone(),
        );
        registry.register(
            "bulwark_backups_failed",
            "Failed backups of the cluster since the operator started",
            m.backups_failed.clone(),
        );
        registry.register(
            "bulwark_cluster_failovers",
            "Automatic failovers of the cluster since the operator started",
            m.failovers.clone(),
        );
        registry.register(
            "bulwark_cluster_switchovers",
            "Completed planned switchovers of the cluster since the operator started",
            m.switchovers.clone(),
        );
        registry.register(
            "bulwark_binlog_archive_lag_seconds",
            "Seconds the cluster's binlog archive may be behind its primary, as its archiver last reported",
            m.archive_lag.clone(),
        );
        registry.register(
            "bulwark_binlog_archive_gaps",
            "Gaps in the cluster's binlog archive (binary logs purged before they were archived), as its archiver last reported",
            m.archive_gaps.clone(),
        );
        registry.register(
            "bulwark_binlog_archive_healthy",
            "Whether the cluster's BinlogArchiveHealthy condition is True (1) or not (0)",
            m.archive_healthy.clone(),
        );
        registry.register(
            "bulwark_binlog_archive_new_gaps",
            "New gaps found in the cluster's binlog archive since the operator started",
            m.archive_new_gaps.clone(),
        );
        registry.register(
            "bulwark_cluster_backup_schedules",
            "Backup schedules of the cluster that are not suspended",
            m.backup_schedules.clone(),
        );
        registry.register(
            "bulwark_cluster_drills_scheduled",
            "Whether the cluster has a drill schedule that is not suspended (1) or not (0)",
            m.drills_scheduled.clone(),
        );
        registry.register(
            "bulwark_cluster_ready",
            "Whether the cluster's Ready condition is True (1) or not (0)",
            m.ready.clone(),
        );
        registry.register(
            "bulwark_cluster_primary_lost",
            "Whether the cluster's primary is lost (1) or not (0)",
            m.primary_lost.clone(),
        );
        registry.register(
            "bulwark_cluster_replication_broken_members",
            "Members of the cluster whose replication stopped on an error",
            m.replication_broken.clone(),
        );
        registry.register(
            "bulwark_cluster_backups_healthy",
            "Whether the cluster's BackupHealthy condition is True (1) or False (0); absent while unknown",
            m.backups_healthy.clone(),
        );
        registry.register(
            "bulwark_drill_last_timestamp_seconds",
            "Completion time of the cluster's latest finished restore drill",
            m.drill_last.clone(),
        );
        registry.register(
            "bulwark_drill_last_success",
            "Whether the cluster's latest finished restore drill succeeded (1) or failed (0)",
            m.drill_last_success.clone(),
        );
        registry.register(
            "bulwark_drill_restore_duration_seconds",
            "Restore durations of the cluster's successful drills: the measured recovery time",
            m.drill_restore_durations.clone(),
        );
        registry.register(
            "bulwark_drills_failed",
            "Failed restore drills of the cluster since the operator started",
            m.drills_failed.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    fn clusters(&self) -> std::sync::MutexGuard<'_, BTreeSet<ClusterLabels>> {
        self.clusters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one reconcile of `controller` that took `seconds`.
    pub fn reconciled(&self, controller: &'static str, seconds: f64) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_durations
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// Records a failed reconcile of `controller` in an error `category`.
    pub fn reconcile_failed(&self, controller: &'static str, category: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                controller,
                category,
            })
            .inc();
    }

    /// Records a successful backup of a cluster; an older backup reported late changes nothing.
    pub fn backup_succeeded(
        &self,
        ns: &str,
        cluster: &str,
        finished: DateTime<Utc>,
        seconds: f64,
        stored: u64,
    ) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        let t = finished.timestamp_millis() as f64 / 1000.0;
        if self
            .last_success
            .get(&labels)
            .is_some_and(|prev| t < prev.get())
        {
            return;
        }
        self.last_success.get_or_create(&labels).set(t);
        self.last_duration.get_or_create(&labels).set(seconds);
        self.last_stored.get_or_create(&labels).set(stored);
        // The failure counter exists from the first backup on, so that its first increase shows.
        let _ = self.backups_failed.get_or_create(&labels);
        clusters.insert(labels);
    }

    /// Records a failed backup of a cluster.
    pub fn backup_failed(&self, ns: &str, cluster: &str) {
        self.count(&self.backups_failed, ns, cluster);
    }

    /// Records an automatic failover of a cluster.
    pub fn failed_over(&self, ns: &str, cluster: &str) {
        self.count(&self.failovers, ns, cluster);
    }

    /// Records a completed planned switchover of a cluster.
    pub fn switched_over(&self, ns: &str, cluster: &str) {
        self.count(&self.switchovers, ns, cluster);
    }

    /// Records how far behind the cluster's binlog archive may be.
    pub fn archive_lag(&self, ns: &str, cluster: &str, seconds: f64) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        self.archive_lag.get_or_create(&labels).set(seconds);
        clusters.insert(labels);
    }

    /// Sets the latest finished drill of a cluster (from its status, on every pass); an older
    /// drill reported late changes nothing.
    pub fn drill_latest(&self, ns: &str, cluster: &str, finished: DateTime<Utc>, succeeded: bool) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        let t = finished.timestamp_millis() as f64 / 1000.0;
        if self
            .drill_last
            .get(&labels)
            .is_some_and(|prev| t < prev.get())
        {
            return;
        }
        self.drill_last.get_or_create(&labels).set(t);
        self.drill_last_success
            .get_or_create(&labels)
            .set(i64::from(succeeded));
        // The failure counter exists from the first drill on, so that its first increase shows.
        let _ = self.drills_failed.get_or_create(&labels);
        clusters.insert(labels);
    }

    /// Records a drill that just finished: its restore duration when it succeeded, else one
    /// more failed drill.
    pub fn drill_finished(&self, ns: &str, cluster: &str, restore_seconds: Option<f64>) {
        match restore_seconds {
            Some(seconds) => {
                let labels = ClusterLabels::new(ns, cluster);
                let mut clusters = self.clusters();
                self.drill_restore_durations
                    .get_or_create(&labels)
                    .observe(seconds);
                clusters.insert(labels);
            }
            None => self.count(&self.drills_failed, ns, cluster),
        }
    }

    /// Records what a cluster pass found: the Ready condition, a lost primary, members whose
    /// replication broke, and the archive's gaps (when the cluster archives).
    pub fn cluster_state(&self, ns: &str, cluster: &str, state: ClusterState) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        self.ready
            .get_or_create(&labels)
            .set(i64::from(state.ready));
        self.primary_lost
            .get_or_create(&labels)
            .set(i64::from(state.primary_lost));
        if let Some(n) = state.broken_members {
            self.replication_broken
                .get_or_create(&labels)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        // Failure counters exist from the cluster's first pass, so that their first increase
        // shows (an `increase()` over a series that starts at 1 sees nothing).
        let _ = self.backups_failed.get_or_create(&labels);
        let _ = self.drills_failed.get_or_create(&labels);
        match state.archive {
            Some(a) => {
                self.archive_gaps
                    .get_or_create(&labels)
                    .set(i64::from(a.gaps));
                self.archive_healthy
                    .get_or_create(&labels)
                    .set(i64::from(a.healthy));
                let _ = self.archive_new_gaps.get_or_create(&labels);
            }
            None => {
                // Archiving is off: nothing of an archive remains to alert on.
                self.archive_gaps.remove(&labels);
                self.archive_healthy.remove(&labels);
                self.archive_lag.remove(&labels);
                self.archive_new_gaps.remove(&labels);
            }
        }
        clusters.insert(labels);
    }

    /// Records a new gap in the cluster's binlog archive.
    pub fn archive_gap(&self, ns: &str, cluster: &str) {
        self.count(&self.archive_new_gaps, ns, cluster);
    }

    /// Records what the cluster's spec asks of backups and drills: its unsuspended backup
    /// schedules, and whether drills are scheduled (the age alerts apply only then).
    pub fn scheduled(&self, ns: &str, cluster: &str, schedules: usize, drills: bool) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        self.backup_schedules
            .get_or_create(&labels)
            .set(i64::try_from(schedules).unwrap_or(i64::MAX));
        self.drills_scheduled
            .get_or_create(&labels)
            .set(i64::from(drills));
        clusters.insert(labels);
    }

    /// Records the cluster's BackupHealthy condition: `None` while it is unknown (no schedule).
    pub fn backups_healthy(&self, ns: &str, cluster: &str, healthy: Option<bool>) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        match healthy {
            Some(h) => {
                self.backups_healthy
                    .get_or_create(&labels)
                    .set(i64::from(h));
                clusters.insert(labels);
            }
            None => {
                self.backups_healthy.remove(&labels);
            }
        }
    }

    /// Adds one to a cluster's counter in `family`, remembering the cluster's series.
    fn count(&self, family: &Family<ClusterLabels, Counter>, ns: &str, cluster: &str) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        family.get_or_create(&labels).inc();
        clusters.insert(labels);
    }

    /// Forgets a deleted cluster's series.
    pub fn forget_cluster(&self, ns: &str, cluster: &str) {
        let labels = ClusterLabels::new(ns, cluster);
        let mut clusters = self.clusters();
        self.remove(&labels);
        clusters.remove(&labels);
    }

    /// Keeps the series of the given clusters only.
    pub fn retain_clusters(&self, live: &BTreeSet<(String, String)>) {
        let mut clusters = self.clusters();
        clusters.retain(|l| {
            let keep = live.contains(&(l.namespace.clone(), l.cluster.clone()));
            if !keep {
                self.remove(l);
            }
            keep
        });
    }

    fn remove(&self, labels: &ClusterLabels) {
        self.last_success.remove(labels);
        self.last_duration.remove(labels);
        self.last_stored.remove(labels);
        self.backups_failed.remove(labels);
        self.failovers.remove(labels);
        self.switchovers.remove(labels);
        self.archive_lag.remove(labels);
        self.archive_gaps.remove(labels);
        self.archive_healthy.remove(labels);
        self.archive_new_gaps.remove(labels);
        self.backup_schedules.remove(labels);
        self.drills_scheduled.remove(labels);
        self.ready.remove(labels);
        self.primary_lost.remove(labels);
        self.replication_broken.remove(labels);
        self.backups_healthy.remove(labels);
        self.drill_last.remove(labels);
        self.drill_last_success.remove(labels);
        self.drill_restore_durations.remove(labels);
        self.drills_failed.remove(labels);
    }

    /// The metrics in the OpenMetrics text format (see [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> Metrics {
        let m = Metrics::default();
        m.reconciled("cluster", 0.02);
        m.reconciled("cluster", 3.0);
        m.reconcile_failed("backup", "apply");
        let t = DateTime::parse_from_rfc3339("2026-11-22T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        m.backup_succeeded("shop", "orders", t, 12.5, 4096);
        m.backup_failed("shop", "orders");
        m.failed_over("shop", "orders");
        m.switched_over("shop", "orders");
        m.drill_latest("shop", "orders", t, true);
        m.archive_lag("shop", "orders", 2.5);
        m.backups_healthy("shop", "orders", Some(true));
        m.cluster_state(
            "shop",
            "orders",
            ClusterState {
                ready: true,
                primary_lost: false,
                broken_members: Some(0),
                archive: Some(ArchiveState {
                    healthy: true,
                    gaps: 0,
                }),
            },
        );
        m.archive_gap("shop", "orders");
        m.scheduled("shop", "orders", 1, true);
        m.drill_finished("shop", "orders", Some(42.0));
        m.drill_finished("shop", "orders", None);
        m
    }

    #[test]
    fn the_latest_drill_wins_and_durations_are_counted() {
        let m = recorded();
        let earlier = DateTime::parse_from_rfc3339("2026-11-21T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        m.drill_latest("shop", "orders", earlier, false);
        let out = m.render();
        for line in [
            "bulwark_drill_last_timestamp_seconds{namespace=\"shop\",cluster=\"orders\"} 1795316400.0",
            "bulwark_drill_last_success{namespace=\"shop\",cluster=\"orders\"} 1",
            "bulwark_drill_restore_duration_seconds_count{namespace=\"shop\",cluster=\"orders\"} 1",
            "bulwark_drill_restore_duration_seconds_bucket{le=\"60.0\",namespace=\"shop\",cluster=\"orders\"} 1",
            "bulwark_drill_restore_duration_seconds_bucket{le=\"30.0\",namespace=\"shop\",cluster=\"orders\"} 0",
            "bulwark_drills_failed_total{namespace=\"shop\",cluster=\"orders\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "missing {line} in\n{out}");
        }
    }

    #[test]
    fn renders_counters_histograms_and_cluster_series() {
        let m = recorded();
        let out = m.render();
        for line in [
            "bulwark_reconciles_total{controller=\"cluster\"} 2",
            "bulwark_reconcile_errors_total{controller=\"backup\",category=\"apply\"} 1",
            "bulwark_reconcile_duration_seconds_bucket{le=\"0.025\",controller=\"cluster\"} 1",
            "bulwark_reconcile_duration_seconds_bucket{le=\"+Inf\",controller=\"cluster\"} 2",
            // OpenMetrics writes float gauges with a fractional part.
            "bulwark_backup_last_success_timestamp_seconds{namespace=\"shop\",cluster=\"orders\"} 1795316400.0",
            "bulwark_backup_last_duration_seconds{namespace=\"shop\",cluster=\"orders\"} 12.5",
            "bulwark_backup_last_stored_bytes{namespace=\"shop\",cluster=\"orders\"} 4096",
            "bulwark_backups_failed_total{namespace=\"shop\",cluster=\"orders\"} 1",
            "bulwark_cluster_failovers_total{namespace=\"shop\",cluster=\"orders\"} 1",
            "bulwark_cluster_switchovers_total{namespace=\"shop\",cluster=\"orders\"} 1",
            "# HELP bulwark_reconciles Reconciles run, by controller.",
            "# EOF",
        ] {
            assert!(
                out.lines().any(|l| l == line),
                "missing line {line} in\n{out}"
            );
        }
        m.forget_cluster("shop", "orders");
        let out = m.render();
        assert!(!out.contains("orders"), "{out}");
        assert!(out.contains("controller=\"cluster\""), "{out}");
    }

    #[test]
    fn an_older_backup_reported_late_does_not_replace_the_latest() {
        let m = recorded();
        let earlier = DateTime::parse_from_rfc3339("2026-11-21T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        m.backup_succeeded("shop", "orders", earlier, 99.0, 1);
        let out = m.render();
        assert!(out.contains("cluster=\"orders\"} 1795316400.0"), "{out}");
        assert!(!out.contains("} 99.0"), "{out}");
    }

    #[test]
    fn retain_clusters_drops_every_series_of_the_others() {
        let m = recorded();
        m.backup_failed("shop", "carts");
        m.backup_failed("ops", "orders");
        let live = [("shop".to_owned(), "carts".to_owned())].into();
        m.retain_clusters(&live);
        let out = m.render();
        assert!(
            out.contains("namespace=\"shop\",cluster=\"carts\""),
            "{out}"
        );
        assert!(!out.contains("cluster=\"orders\""), "{out}");
        // A forgotten cluster starts again from nothing.
        m.backup_failed("shop", "orders");
        assert!(m
            .render()
            .contains("bulwark_backups_failed_total{namespace=\"shop\",cluster=\"orders\"} 1"));
    }

    /// Every family on the wire with its type, and every sample name with its label names in
    /// order: a renamed metric or label, or a changed type, fails here.
    #[test]
    fn names_types_and_labels_on_the_wire() {
        let out = recorded().render();
        let mut types = Vec::new();
        let mut samples = BTreeSet::new();
        for line in out.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                types.push(t.to_owned());
            } else if !line.starts_with('#') {
                let (name, rest) = line.split_once('{').expect("every sample has labels");
                let labels = rest.split_once('}').expect("labels end").0;
                let keys: Vec<&str> = labels
                    .split(',')
                    .map(|kv| kv.split_once('=').expect("key=value").0)
                    .collect();
                samples.insert(format!("{name}{{{}}}", keys.join(",")));
            }
        }
        assert_eq!(
            types,
            [
                "bulwark_reconciles counter",
                "bulwark_reconcile_errors counter",
                "bulwark_reconcile_duration_seconds histogram",
                "bulwark_backup_last_success_timestamp_seconds gauge",
                "bulwark_backup_last_duration_seconds gauge",
                "bulwark_backup_last_stored_bytes gauge",
                "bulwark_backups_failed counter",
                "bulwark_cluster_failovers counter",
                "bulwark_cluster_switchovers counter",
                "bulwark_binlog_archive_lag_seconds gauge",
                "bulwark_binlog_archive_gaps gauge",
                "bulwark_binlog_archive_healthy gauge",
                "bulwark_binlog_archive_new_gaps counter",
                "bulwark_cluster_backup_schedules gauge",
                "bulwark_cluster_drills_scheduled gauge",
                "bulwark_cluster_ready gauge",
                "bulwark_cluster_primary_lost gauge",
                "bulwark_cluster_replication_broken_members gauge",
                "bulwark_cluster_backups_healthy gauge",
                "bulwark_drill_last_timestamp_seconds gauge",
                "bulwark_drill_last_success gauge",
                "bulwark_drill_restore_duration_seconds histogram",
                "bulwark_drills_failed counter",
            ]
        );
        let want: BTreeSet<String> = [
            "bulwark_reconciles_total{controller}",
            "bulwark_reconcile_errors_total{controller,category}",
            "bulwark_reconcile_duration_seconds_bucket{le,controller}",
            "bulwark_reconcile_duration_seconds_sum{controller}",
            "bulwark_reconcile_duration_seconds_count{controller}",
            "bulwark_backup_last_success_timestamp_seconds{namespace,cluster}",
            "bulwark_backup_last_duration_seconds{namespace,cluster}",
            "bulwark_backup_last_stored_bytes{namespace,cluster}",
            "bulwark_backups_failed_total{namespace,cluster}",
            "bulwark_cluster_failovers_total{namespace,cluster}",
            "bulwark_cluster_switchovers_total{namespace,cluster}",
            "bulwark_binlog_archive_lag_seconds{namespace,cluster}",
            "bulwark_binlog_archive_gaps{namespace,cluster}",
            "bulwark_binlog_archive_healthy{namespace,cluster}",
            "bulwark_binlog_archive_new_gaps_total{namespace,cluster}",
            "bulwark_cluster_backup_schedules{namespace,cluster}",
            "bulwark_cluster_drills_scheduled{namespace,cluster}",
            "bulwark_cluster_ready{namespace,cluster}",
            "bulwark_cluster_primary_lost{namespace,cluster}",
            "bulwark_cluster_replication_broken_members{namespace,cluster}",
            "bulwark_cluster_backups_healthy{namespace,cluster}",
            "bulwark_drill_last_timestamp_seconds{namespace,cluster}",
            "bulwark_drill_last_success{namespace,cluster}",
            "bulwark_drill_restore_duration_seconds_bucket{le,namespace,cluster}",
            "bulwark_drill_restore_duration_seconds_sum{namespace,cluster}",
            "bulwark_drill_restore_duration_seconds_count{namespace,cluster}",
            "bulwark_drills_failed_total{namespace,cluster}",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(samples, want, "{out}");
    }

    /// Every operator metric the chart's alert rules and dashboard query is one the operator
    /// renders (each recorder called once): a renamed metric breaks the build, not the alerts.
    /// The e2e drill test checks the same against a running operator's scrape.
    #[test]
    fn the_charts_queries_name_served_metrics() {
        let out = recorded().render();
        let served: BTreeSet<&str> = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        let chart =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/mysql-operator");
        let mut queried = BTreeSet::new();
        for file in ["templates/prometheusrule.yaml", "files/dashboard.json"] {
            let text = std::fs::read_to_string(chart.join(file)).unwrap();
            queried.extend(
                text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|t| t.starts_with("bulwark_"))
                    .map(str::to_owned),
            );
        }
        assert!(queried.len() >= 10, "{queried:?}");
        for name in &queried {
            assert!(
                served.contains(name.as_str()),
                "the chart queries {name}, not served:\n{out}"
            );
        }
    }

    #[test]
    fn histogram_buckets_are_the_reconcile_buckets() {
        let out = recorded().render();
        let bounds: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("bulwark_reconcile_duration_seconds_bucket{"))
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(
            bounds,
            [
                "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "10.0",
                "+Inf"
            ]
        );
    }
}
