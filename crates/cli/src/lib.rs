//! Command-line support shared by `mysql-backup` and `bulwark-agent`: clap argument groups
//! (repository, connection, key, progress, point-in-time target) and what they open
//! (`args`), logging and output formats (`output`), the progress display (`progress`). The
//! engine and PITR crates carry no command line; flag names live here and in the binaries.

pub mod args;
pub mod output;
pub mod progress;
