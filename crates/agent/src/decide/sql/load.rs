//! The statements of a logical load's start over: what lists the databases, and what drops
//! every one the server does not own.

/// Lists the server's databases.
pub const DATABASES_QUERY: &str = "SHOW DATABASES";

/// Databases a server has of its own: never dropped.
const SYSTEM_SCHEMAS: &[&str] = &["mysql", "information_schema", "performance_schema", "sys"];

/// Statements that drop every database but the server's own (the start over of a
/// point-in-time load), from the answer to [`DATABASES_QUERY`].
pub fn drop_user_databases(schemas: &[String]) -> Vec<String> {
    schemas
        .iter()
        .filter(|s| !SYSTEM_SCHEMAS.contains(&s.to_ascii_lowercase().as_str()))
        .map(|s| format!("DROP DATABASE `{}`", s.replace('`', "``")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_start_drops_every_database_but_the_servers_own() {
        let schemas: Vec<String> = [
            "information_schema",
            "mysql",
            "performance_schema",
            "sys",
            "shop",
            "we`ird",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            drop_user_databases(&schemas),
            ["DROP DATABASE `shop`", "DROP DATABASE `we``ird`"]
        );
    }
}
