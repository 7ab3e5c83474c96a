//! Output shared by the `mysql-backup` and `bulwark-agent` command lines: logging (above the
//! progress bar on a terminal), JSON and tables on stdout, one-line errors.

use clap::ValueEnum;

/// Log format on stderr.
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Sets up logging on stderr; on a terminal, lines are written above the progress bar.
pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| crate::progress::StderrAboveBar)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// The one line a command prints for a failure: its cause chain, and, where the command line
/// can remedy it, the flag that does (the engine's errors name no flags).
pub fn failure_line(err: &(dyn std::error::Error + 'static)) -> String {
    let line = bulwark_engine::error::chain(err);
    match hint(err) {
        Some(hint) => format!("{line}; {hint}"),
        None => line,
    }
}

/// The remedy on the command line for the first engine error in `err`'s chain, if it has one.
fn hint(err: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    use bulwark_engine::format::Method;
    use bulwark_engine::Error;
    let mut cur = Some(err);
    while let Some(e) = cur {
        // PITR's wrapper is transparent: its source skips the engine error it holds.
        let engine = e.downcast_ref::<Error>().or(match e.downcast_ref() {
            Some(bulwark_pitr::Error::Engine(inner)) => Some(inner),
            _ => None,
        });
        if let Some(engine) = engine {
            return match engine {
                Error::NoSuchBackup(_) => {
                    Some("`mysql-backup list --all` shows incomplete backups")
                }
                Error::KeyRequired { .. } | Error::KeyRequiredByRepository { .. } => {
                    Some("pass --encryption-key-file")
                }
                Error::ToolNotFound { .. } => Some("install it or name it with --tool"),
                Error::TargetNotEmpty { .. } => Some("pass --force to replace it"),
                Error::WrongRestoreTarget {
                    method: Method::Physical,
                    ..
                } => Some("use --target-dir"),
                Error::WrongRestoreTarget {
                    method: Method::Logical,
                    ..
                } => Some("use --mysql-socket or --mysql-host"),
                _ => None,
            };
        }
        cur = e.source();
    }
    None
}

/// Prints a JSON value, pretty, on stdout.
pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON serializes")
    );
}

/// Prints rows as aligned columns.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|s| s.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

/// A byte count for people: `512 B`, `1.5 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Peak resident memory of this process (not of the tools it runs), in bytes.
pub fn peak_rss_bytes() -> u64 {
    max_rss(libc::RUSAGE_SELF)
}

/// Peak resident memory of the largest child process waited for (the tools a restore or
/// replay runs: `mariadb-binlog`, the client, a scratch server), in bytes: they share the
/// container's memory limit with this process.
pub fn peak_child_rss_bytes() -> u64 {
    max_rss(libc::RUSAGE_CHILDREN)
}

fn max_rss(who: libc::c_int) -> u64 {
    // SAFETY: getrusage fills the struct it is given and has no other effect.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return 0;
    }
    (usage.ru_maxrss as u64) * 1024
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_engine::Error;

    #[test]
    fn failures_the_command_line_remedies_name_the_flag() {
        let cases: [(Box<dyn std::error::Error + Send + Sync>, &str); 5] = [
            (
                Box::new(Error::KeyRequired { id: "b1".into() }),
                "backup b1 is encrypted and no key was given; pass --encryption-key-file",
            ),
            (
                Box::new(bulwark_pitr::Error::from(Error::TargetNotEmpty {
                    target: "/x".into(),
                })),
                "failed to restore into /x: it is not empty; pass --force to replace it",
            ),
            (
                Box::new(Error::WrongRestoreTarget {
                    id: "b2".into(),
                    method: bulwark_engine::format::Method::Logical,
                }),
                "backup b2 is logical: it restores into a server, not into a directory; use \
                 --mysql-socket or --mysql-host",
            ),
            (
                Box::new(Error::NoSuchBackup("b3".into())),
                "backup b3 does not exist (no manifest); `mysql-backup list --all` shows \
                 incomplete backups",
            ),
            (Box::new(Error::Interrupted), "interrupted by signal"),
        ];
        for (err, want) in cases {
            assert_eq!(failure_line(err.as_ref()), want);
        }
    }
}
