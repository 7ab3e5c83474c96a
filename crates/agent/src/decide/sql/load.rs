//! The statements of a logical load: its start over (what lists the databases, and what drops
//! every one the server does not own), and the mark that replicates with the load, so that a
//! member holding part of it (a copy of a replica taken mid-load) is known for one.

/// Lists the server's databases.
pub const DATABASES_QUERY: &str = "SHOW DATABASES";

/// Databases a server has of its own: never dropped.
const SYSTEM_SCHEMAS: &[&str] = &["mysql", "information_schema", "performance_schema", "sys"];

/// Statements that drop every database but the server's own (the start over of a
/// point-in-time load), from the answer to [`DATABASES_QUERY`].
pub fn drop_user_databases(schemas: &[String]) -> Vec<String> {
    schemas
        .iter()
        .filter(|s| {
            let s = s.to_ascii_lowercase();
            !SYSTEM_SCHEMAS.contains(&s.as_str()) && s != PARTIAL_LOAD_SCHEMA
        })
        .map(|s| format!("DROP DATABASE `{}`", s.replace('`', "``")))
        .collect()
}

/// The database holding the partial-load mark; it exists only while a load runs, and a start
/// over leaves it (the mark goes first, the data it covers after).
const PARTIAL_LOAD_SCHEMA: &str = "bulwark_bootstrap";

/// What the mark says (the pending restore being loaded, as JSON, in the table's comment): one
/// row when there is a mark, none when not (never an error).
pub const PARTIAL_LOAD_QUERY: &str = "SELECT TABLE_COMMENT FROM information_schema.TABLES \
     WHERE TABLE_SCHEMA = 'bulwark_bootstrap' AND TABLE_NAME = 'partial_load'";

/// Statements that mark a load as begun, naming `pending` (the pending restore's JSON). The
/// mark is one table created with its comment in one statement, plain DDL that every engine
/// version replicates alike: a member has the whole mark or none, and no row of the load
/// replicates before it. A mark already there (a load begun before) is left as it is: it names
/// the same load.
pub fn mark_partial_load(pending: &str) -> [String; 2] {
    [
        "CREATE DATABASE IF NOT EXISTS bulwark_bootstrap".to_owned(),
        format!(
            "CREATE TABLE IF NOT EXISTS bulwark_bootstrap.partial_load (id INT PRIMARY KEY) \
             ENGINE=InnoDB COMMENT={}",
            super::quote(pending)
        ),
    ]
}

/// Ends the mark once the load (and its replay) is whole.
pub const UNMARK_PARTIAL_LOAD: &str = "DROP DATABASE IF EXISTS bulwark_bootstrap";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_start_drops_every_database_but_the_servers_own_and_the_mark() {
        let schemas: Vec<String> = [
            "information_schema",
            "mysql",
            "performance_schema",
            "sys",
            "shop",
            "bulwark_bootstrap",
            "we`ird",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            drop_user_databases(&schemas),
            ["DROP DATABASE `shop`", "DROP DATABASE `we``ird`"]
        );
    }

    #[test]
    fn the_mark_quotes_what_it_names() {
        let [schema, table] = mark_partial_load(r#"{"a":"x'y"}"#);
        assert_eq!(schema, "CREATE DATABASE IF NOT EXISTS bulwark_bootstrap");
        assert_eq!(
            table,
            r#"CREATE TABLE IF NOT EXISTS bulwark_bootstrap.partial_load (id INT PRIMARY KEY) ENGINE=InnoDB COMMENT='{"a":"x\'y"}'"#
        );
    }
}
