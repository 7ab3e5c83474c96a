//! Real-parts test harness for Bulwark's backup engine: throwaway MariaDB servers
//! ([`MariaDb`]), a realistic fixture ([`load_fixture`]), comparable database snapshots
//! ([`snapshot`], [`assert_same`]), a moto S3 server ([`S3Server`]) and an HTTP proxy that
//! injects faults between an S3 client and the server ([`FaultProxy`]).
//!
//! Synchronous by design (std threads, processes and sockets): integration tests drive the
//! `mysql-backup` binary as a subprocess and need no async runtime. The external programs come
//! from `scripts/install-test-deps.sh`; every server binds 127.0.0.1 only.

mod fault_proxy;
mod fixture;
mod mariadb;
mod s3;
mod snapshot;
mod util;

pub use fault_proxy::{Fault, FaultMode, FaultProxy};
pub use fixture::{load_fixture, FIXTURE_DATABASES};
pub use mariadb::MariaDb;
pub use s3::{venv_dir, S3Client, S3Server, MOTO_VERSION};
pub use snapshot::{assert_same, snapshot, DbSnapshot, TableState};
pub use util::cache_dir;
