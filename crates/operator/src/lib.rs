//! Bulwark's Kubernetes operator: controllers for `MySQLCluster` and `MySQLBackup`, the backup
//! scheduler and the metrics they report.
pub mod rbac;
