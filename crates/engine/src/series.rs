//! Release series (`major.minor`) of servers and physical backup tools. `mariadb-backup` only
//! handles the data files of its own MariaDB series, and XtraBackup 8.0 and 8.4 each only their
//! MySQL series: a tool of another series fails late and obscurely or, worse, copies files it
//! cannot prepare. Physical backups and prepares are refused up front instead.

use bulwark_contract::Engine;

/// A `major.minor` release series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The series a version string starts with: `10.11.6-MariaDB-1:10.11.6+maria~deb12` → 10.11.
pub fn of_version(version: &str) -> Option<Series> {
    let mut parts = version.trim().splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor_text = parts.next()?;
    let digits: String = minor_text
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some(Series {
        major,
        minor: digits.parse().ok()?,
    })
}

/// The server series a physical tool was built from, read from its `--version` line:
/// `mariadb-backup based on MariaDB server 10.11.6-MariaDB debian-linux-gnu (x86_64)` or
/// `xtrabackup version 8.0.35-30 based on MySQL server 8.0.35 Linux (x86_64) ...`.
pub fn of_tool(version_line: &str) -> Option<Series> {
    let words: Vec<&str> = version_line.split_whitespace().collect();
    let after = |word: &str| {
        words
            .iter()
            .position(|w| *w == word)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| of_version(v))
    };
    after("server").or_else(|| after("version"))
}

/// Why a physical tool cannot handle a server's data files, if it cannot. A tool whose
/// version line cannot be read is not refused (the tool itself then decides).
pub fn mismatch(engine: Engine, tool_line: &str, server_version: &str) -> Option<String> {
    let tool = of_tool(tool_line)?;
    let server = of_version(server_version)?;
    if tool == server {
        return None;
    }
    let (product, tool_name) = match engine {
        Engine::MariaDb => ("MariaDB", "mariadb-backup"),
        Engine::MySql => ("MySQL", "xtrabackup"),
    };
    Some(format!(
        "{tool_name} {tool} cannot handle the data files of {product} {server} (server {}): physical backups and restores need the {tool_name} of the server's release series; use a backup image or tool built for {product} {server}, or a logical backup",
        server_version.trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_tool_lines() {
        let s = |major, minor| Some(Series { major, minor });
        for (text, want) in [
            ("10.11.6-MariaDB-0+deb12u1-log", s(10, 11)),
            ("11.4.2-MariaDB", s(11, 4)),
            ("8.0.36", s(8, 0)),
            ("8.4.0-commercial", s(8, 4)),
            ("10", None),
            ("", None),
            ("x.y", None),
        ] {
            assert_eq!(of_version(text), want, "{text}");
        }
        for (line, want) in [
            (
                "mariadb-backup based on MariaDB server 10.11.6-MariaDB debian-linux-gnu (x86_64)",
                s(10, 11),
            ),
            (
                "mariabackup based on MariaDB server 11.4.2-MariaDB Linux (x86_64)",
                s(11, 4),
            ),
            (
                "xtrabackup version 8.0.35-30 based on MySQL server 8.0.35 Linux (x86_64) (revision id: 6beb4b49)",
                s(8, 0),
            ),
            ("xtrabackup version 8.4.0-1", s(8, 4)),
            ("", None),
            ("something else entirely", None),
        ] {
            assert_eq!(of_tool(line), want, "{line}");
        }
    }

    #[test]
    fn only_the_server_series_tool_is_accepted() {
        let maria =
            "mariadb-backup based on MariaDB server 10.11.6-MariaDB debian-linux-gnu (x86_64)";
        let xtra = "xtrabackup version 8.4.0-1 based on MySQL server 8.4.0 Linux (x86_64)";
        // (engine, tool line, server version, refused)
        let cases = [
            (Engine::MariaDb, maria, "10.11.9-MariaDB-log", false),
            (Engine::MariaDb, maria, "11.4.2-MariaDB", true),
            (Engine::MariaDb, maria, "10.6.18-MariaDB", true),
            (Engine::MySql, xtra, "8.4.2", false),
            (Engine::MySql, xtra, "8.0.36", true),
            // Unreadable versions are left to the tool.
            (Engine::MariaDb, "mariadb-backup ?", "11.4.2-MariaDB", false),
            (Engine::MySql, xtra, "", false),
        ];
        for (engine, tool, server, refused) in cases {
            let got = mismatch(engine, tool, server);
            assert_eq!(got.is_some(), refused, "{tool} / {server}: {got:?}");
        }
        assert_eq!(
            mismatch(Engine::MariaDb, maria, "11.4.2-MariaDB").unwrap(),
            "mariadb-backup 10.11 cannot handle the data files of MariaDB 11.4 (server 11.4.2-MariaDB): physical backups and restores need the mariadb-backup of the server's release series; use a backup image or tool built for MariaDB 11.4, or a logical backup"
        );
    }
}
