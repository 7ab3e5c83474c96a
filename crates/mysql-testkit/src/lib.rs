//! Real-parts test harness for Bulwark's backup engine: throwaway MariaDB servers
//! ([`MariaDb`]), a realistic fixture ([`load_fixture`]), comparable database snapshots
//! ([`snapshot`], [`assert_same`]), a moto S3 server ([`S3Server`]) and an HTTP proxy that
//! injects faults between an S3 client and the server ([`FaultProxy`]), and a TCP relay that
//! silences the connections it carries ([`StallProxy`]).
//!
//! Synchronous by design (std threads, processes and sockets): integration tests drive the
//! `mysql-backup` binary as a subprocess and need no async runtime. The external programs come
//! from `scripts/install-test-deps.sh`; every server binds 127.0.0.1 only.
//!
//! A typical round-trip test of the CLI:
//!
//! ```no_run
//! use std::process::Command;
//! use bulwark_mysql_testkit::{assert_same, load_fixture, snapshot, MariaDb, S3Server};
//!
//! # fn main() -> anyhow::Result<()> {
//! let source = MariaDb::start()?;
//! load_fixture(&source, 10_000)?;
//! let before = snapshot(&source)?;
//!
//! let s3 = S3Server::start()?;
//! s3.create_bucket("harbor")?;
//! // In crates/backup's integration tests: env!("CARGO_BIN_EXE_mysql-backup").
//! let status = Command::new("mysql-backup")
//!     .args(["backup", "--repo", "s3://harbor/nightly", "--method", "physical"])
//!     .args(source.cli_args())
//!     .envs(s3.env())
//!     .status()?;
//! assert!(status.success());
//! // ... restore into a directory, then:
//! let restored = MariaDb::start_with_datadir(std::path::Path::new("/tmp/restored"))?;
//! assert_same(&before, &snapshot(&restored)?);
//! # Ok(())
//! # }
//! ```

pub mod cli;
mod fault_proxy;
mod fixture;
mod mariadb;
mod s3;
mod snapshot;
mod stall_proxy;
mod util;

pub use fault_proxy::{Fault, FaultMode, FaultProxy};
pub use fixture::{load_fixture, FIXTURE_DATABASES};
pub use mariadb::MariaDb;
pub use s3::{venv_dir, S3Client, S3Server, MOTO_VERSION};
pub use snapshot::{assert_same, snapshot, DbSnapshot, TableState};
pub use stall_proxy::StallProxy;
pub use util::cache_dir;
