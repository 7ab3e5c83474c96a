//! The statements of a logical load: its start over (what lists the databases, and what drops
//! every one the server does not own), and the mark that replicates with the load, so that a
//! member holding part of it (a copy of a replica taken mid-load) is known for one.

use bulwark_contract::bootstrap::{PARTIAL_LOAD_SCHEMA, PARTIAL_LOAD_TABLE};

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

/// What the mark says: one row per mark schema, with the table's comment (the pending restore
/// being loaded, as JSON) or NULL when the schema holds no mark table (a copy taken between
/// the mark's two statements, before anything was loaded); no row when there is no mark.
pub fn partial_load_query() -> String {
    format!(
        "SELECT t.TABLE_COMMENT FROM information_schema.SCHEMATA s \
         LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME \
         AND t.TABLE_NAME = '{PARTIAL_LOAD_TABLE}' WHERE s.SCHEMA_NAME = '{PARTIAL_LOAD_SCHEMA}'"
    )
}

/// Statements that mark a load as begun, naming `pending` (the pending restore's JSON): the
/// schema, then a table created with its comment in one statement, plain DDL that every engine
/// version replicates alike; no row of the load replicates before them. A copy taken between
/// the two holds the schema alone, and nothing loaded: a mark naming no load, which keeps that
/// member from serving. A mark already there (a load begun before) is left as it is: it names
/// the same load.
pub fn mark_partial_load(pending: &str) -> [String; 2] {
    [
        format!("CREATE DATABASE IF NOT EXISTS {PARTIAL_LOAD_SCHEMA}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {PARTIAL_LOAD_SCHEMA}.{PARTIAL_LOAD_TABLE} \
             (id INT PRIMARY KEY) ENGINE=InnoDB COMMENT={}",
            super::quote(pending)
        ),
    ]
}

/// Ends the mark once the load (and its replay) is whole.
pub fn unmark_partial_load() -> String {
    format!("DROP DATABASE IF EXISTS {PARTIAL_LOAD_SCHEMA}")
}

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
