//! Bulwark's Kubernetes operator: controllers for `MySQLCluster` and `MySQLBackup`, the backup
//! scheduler and the metrics they report.

pub mod admission;
pub mod apply;
pub mod backup;
pub mod cluster;
pub mod conditions;
pub mod context;
pub mod credentials;
pub mod drill;
pub mod error;
pub mod hash;
pub mod http;
pub mod images;
pub mod leases;
pub mod members;
pub mod metrics;
pub mod names;
pub mod ownership;
pub mod podspec;
pub mod rbac;
pub mod run;
pub mod schedule;
pub mod server_images;
pub mod storage;
