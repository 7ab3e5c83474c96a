//! The database engine a cluster runs and a backup was taken from: one type for the API (the
//! `schema` feature gives it a JSON schema for the CRDs), the operator's command lines, the
//! repository's manifests and the agent.

use std::fmt;
use std::str::FromStr;

/// Server family, which decides the tools, statements and GTID forms used.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Engine {
    /// Oracle MySQL (or Percona Server, which the same tools serve).
    #[serde(rename = "mysql")]
    MySql,
    /// MariaDB.
    #[serde(rename = "mariadb")]
    MariaDb,
}

impl Engine {
    /// Every engine, for tables and tests.
    pub const ALL: [Engine; 2] = [Engine::MySql, Engine::MariaDb];

    /// The name in specs, manifests, reports and `--engine`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Engine::MySql => "mysql",
            Engine::MariaDb => "mariadb",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> Result<Engine, String> {
        Engine::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not an engine (mysql, mariadb)"))
    }
}

/// `(major, minor, patch)` of a server version string (`8.0.36-log` → `(8, 0, 36)`).
pub fn parse_version(v: &str) -> (u32, u32, u32) {
    let mut it = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for e in Engine::ALL {
            assert_eq!(e.as_str().parse::<Engine>(), Ok(e));
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{e}\""));
            assert_eq!(serde_json::from_str::<Engine>(&json).unwrap(), e);
        }
        assert!("MariaDB".parse::<Engine>().is_err());
    }
}
