//! Which backup image serves which engine release series. Physical backups and restores need
//! the tool of the server's own series (`mariadb-backup` 10.11 handles MariaDB 10.11 only,
//! XtraBackup 8.4 MySQL 8.4 only), so the operator is given one default image, the series its
//! tools serve, and images for further series; a cluster whose series no image serves is
//! refused physical backups up front, with a message naming what is missing.

use std::collections::{BTreeMap, BTreeSet};

use bulwark_api::cluster::Engine;
use bulwark_api::{BackupMethod, MySQLBackup, MySQLCluster};

/// The default series of the published image: Debian bookworm's mariadb-backup and Percona
/// XtraBackup 8.4.
pub const DEFAULT_SERVES: &str = "mariadb-10.11,mysql-8.4";

/// The backup images the operator was configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupImages {
    default: String,
    serves: BTreeSet<String>,
    by_series: BTreeMap<String, String>,
}

/// A series key: `mariadb-10.11`, `mysql-8.4`.
fn parse_key(key: &str) -> Result<String, String> {
    let (engine, version) = key.split_once('-').ok_or_else(|| {
        format!("series {key:?} must read <engine>-<major>.<minor>, e.g. mariadb-11.4")
    })?;
    let engine_ok = engine.parse::<Engine>().is_ok();
    let version_ok = version
        .split_once('.')
        .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
    if engine_ok && version_ok {
        Ok(key.to_owned())
    } else {
        Err(format!(
            "series {key:?} must read <engine>-<major>.<minor> with engine mariadb or mysql, e.g. mariadb-11.4"
        ))
    }
}

impl BackupImages {
    /// From the operator's settings: the default image, the comma-separated series its tools
    /// serve, and comma-separated `series=image` pairs for further series.
    pub fn parse(default: &str, serves: &str, by_series: &str) -> Result<BackupImages, String> {
        let items = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|i| !i.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let serves = items(serves)
            .iter()
            .map(|k| parse_key(k))
            .collect::<Result<_, _>>()?;
        let mut map = BTreeMap::new();
        for pair in items(by_series) {
            let (key, image) = pair
                .split_once('=')
                .filter(|(_, i)| !i.trim().is_empty())
                .ok_or_else(|| format!("backup image {pair:?} must read <series>=<image>"))?;
            map.insert(parse_key(key.trim())?, image.trim().to_owned());
        }
        Ok(BackupImages {
            default: default.to_owned(),
            serves,
            by_series: map,
        })
    }

    /// The default image: deletion Jobs, and clusters whose series is not known.
    pub fn default_image(&self) -> &str {
        &self.default
    }

    /// The series physical backups can be taken of, in order.
    pub fn served(&self) -> Vec<&str> {
        let all: BTreeSet<&str> = self
            .serves
            .iter()
            .chain(self.by_series.keys())
            .map(String::as_str)
            .collect();
        all.into_iter().collect()
    }

    /// The image of a cluster's init, restore and agent containers and of its backup Jobs:
    /// the image for its series, else the default.
    pub fn for_cluster(&self, cluster: &MySQLCluster) -> &str {
        series_key(cluster)
            .and_then(|k| self.by_series.get(&k))
            .unwrap_or(&self.default)
    }

    /// Why physical backups or restores of this cluster cannot be served, if they cannot. A
    /// cluster given by image alone has no known series: the tool checks it at run time.
    pub fn physical_refusal(&self, cluster: &MySQLCluster) -> Option<String> {
        let key = series_key(cluster)?;
        if self.by_series.contains_key(&key) || self.serves.contains(&key) {
            return None;
        }
        let tool = match cluster.spec.engine {
            Engine::MariaDb => "mariadb-backup",
            Engine::MySql => "xtrabackup",
        };
        let version = key.split_once('-').map_or("", |(_, v)| v);
        Some(format!(
            "physical backups and restores of {key} need {tool} {version}, which no backup image of the operator has (images serve {}; see the chart's backupImages): use logical backups, or give the operator an image for {key}",
            self.served().join(", ")
        ))
    }

    /// The cluster's spec asks for physical backups, or a physical bootstrap from
    /// `bootstrap_backup` not yet done, that no image can serve: the problem to report, if any.
    pub fn check_cluster(
        &self,
        cluster: &MySQLCluster,
        bootstrap_backup: Option<&MySQLBackup>,
        bootstrapped: bool,
    ) -> Option<String> {
        let spec = &cluster.spec;
        let scheduled = spec
            .backup
            .iter()
            .flat_map(|b| &b.schedules)
            .any(|s| s.method == BackupMethod::Physical);
        let bootstrap = !bootstrapped
            && bootstrap_backup.is_some_and(|b| b.spec.method == BackupMethod::Physical);
        if scheduled || bootstrap {
            self.physical_refusal(cluster)
        } else {
            None
        }
    }
}

/// `<engine>-<major>.<minor>` of a cluster's `spec.version`.
pub fn series_key(cluster: &MySQLCluster) -> Option<String> {
    let version = cluster.spec.version.as_deref()?;
    let mut parts = version.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    Some(format!("{}-{major}.{minor}", cluster.spec.engine))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(engine: &str, version: &str, schedule_method: Option<&str>) -> MySQLCluster {
        let mut yaml = format!(
            "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {{name: quarry}}\n\
             spec:\n  engine: {engine}\n  {version}\n  storage: {{size: 1Gi}}\n"
        );
        if let Some(m) = schedule_method {
            yaml.push_str(&format!(
                "  backup:\n    storages: [{{name: nas, pvc: {{claimName: dumps}}}}]\n    schedules: [{{name: nightly, schedule: '@daily', storage: nas, method: {m}}}]\n"
            ));
        }
        serde_yaml::from_str(&yaml).unwrap()
    }

    #[test]
    fn settings_parse_or_say_what_is_wrong() {
        let images = BackupImages::parse(
            "img:1",
            " mariadb-10.11 , mysql-8.4",
            "mariadb-11.4=img:1-mariadb-11.4,mysql-8.0=img:1-xtrabackup-8.0",
        )
        .unwrap();
        assert_eq!(
            images.served(),
            ["mariadb-10.11", "mariadb-11.4", "mysql-8.0", "mysql-8.4"]
        );
        for (serves, by, err) in [
            ("maria-10.11", "", "engine mariadb or mysql"),
            ("mariadb-11", "", "<engine>-<major>.<minor>"),
            ("", "mariadb-11.4", "must read <series>=<image>"),
            ("", "mariadb-11.4=", "must read <series>=<image>"),
        ] {
            let got = BackupImages::parse("img", serves, by).unwrap_err();
            assert!(got.contains(err), "{serves} {by}: {got}");
        }
    }

    #[test]
    fn each_cluster_gets_the_image_of_its_series_or_a_refusal() {
        let images =
            BackupImages::parse("img:1", DEFAULT_SERVES, "mariadb-11.4=img:1-mariadb-11.4")
                .unwrap();
        // (engine, version line, image, physical refused)
        let cases = [
            ("mariadb", "version: \"10.11\"", "img:1", false),
            ("mariadb", "version: \"10.11.9\"", "img:1", false),
            ("mariadb", "version: \"11.4\"", "img:1-mariadb-11.4", false),
            ("mariadb", "version: \"11.8\"", "img:1", true),
            ("mysql", "version: \"8.4\"", "img:1", false),
            ("mysql", "version: \"8.0\"", "img:1", true),
            // Image only: the series is not known here; the tool checks it when it runs.
            (
                "mariadb",
                "image: registry.local/mariadb:11.8",
                "img:1",
                false,
            ),
        ];
        for (engine, version, image, refused) in cases {
            let c = cluster(engine, version, None);
            assert_eq!(images.for_cluster(&c), image, "{engine} {version}");
            assert_eq!(
                images.physical_refusal(&c).is_some(),
                refused,
                "{engine} {version}"
            );
        }
        assert_eq!(
            images.physical_refusal(&cluster("mysql", "version: \"8.0\"", None)).unwrap(),
            "physical backups and restores of mysql-8.0 need xtrabackup 8.0, which no backup image of the operator has (images serve mariadb-10.11, mariadb-11.4, mysql-8.4; see the chart's backupImages): use logical backups, or give the operator an image for mysql-8.0"
        );
    }

    #[test]
    fn only_specs_asking_for_physical_work_are_refused() {
        let images = BackupImages::parse("img:1", DEFAULT_SERVES, "").unwrap();
        let v = "version: \"11.8\"";
        assert!(images
            .check_cluster(&cluster("mariadb", v, None), None, false)
            .is_none());
        assert!(images
            .check_cluster(&cluster("mariadb", v, Some("logical")), None, false)
            .is_none());
        assert!(images
            .check_cluster(&cluster("mariadb", v, Some("physical")), None, false)
            .is_some());
    }
}
