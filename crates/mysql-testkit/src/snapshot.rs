//! Comparable snapshots of everything a backup must carry over: per base table its definition,
//! row count and `CHECKSUM TABLE ... EXTENDED`; the definitions of databases, views,
//! procedures, functions, triggers and events, including definers, SQL modes and character
//! sets. System schemas (`mysql`, `sys`, `information_schema`, `performance_schema`) are left
//! out.
//!
//! One normalisation: the `AUTO_INCREMENT=N` table option is removed, because the counter is
//! not data (InnoDB may reserve values that were never used) and logical restores legitimately
//! recompute it. Trigger creation times are dropped for the same reason. Everything else must
//! match exactly.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Context, Result};

use crate::mariadb::{sql_ident, sql_string, MariaDb};

const SYSTEM_SCHEMAS: &str = "'mysql', 'sys', 'information_schema', 'performance_schema'";

/// The state of one base table (or sequence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableState {
    /// `SHOW CREATE TABLE`, without `AUTO_INCREMENT=N`.
    pub create: String,
    /// `COUNT(*)`.
    pub rows: u64,
    /// `CHECKSUM TABLE ... EXTENDED`.
    pub checksum: String,
}

/// Everything [`snapshot`] captured, keyed by quoted `` `db`.`name` `` (databases by `` `db` ``).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbSnapshot {
    /// `SHOW CREATE DATABASE`.
    pub databases: BTreeMap<String, String>,
    /// Base tables and sequences.
    pub tables: BTreeMap<String, TableState>,
    /// `SHOW CREATE VIEW` plus the client character set and collation.
    pub views: BTreeMap<String, String>,
    /// `SHOW CREATE PROCEDURE` plus SQL mode and character sets.
    pub procedures: BTreeMap<String, String>,
    /// `SHOW CREATE FUNCTION` plus SQL mode and character sets.
    pub functions: BTreeMap<String, String>,
    /// `SHOW CREATE TRIGGER` (no creation time) plus SQL mode, character sets and action order.
    pub triggers: BTreeMap<String, String>,
    /// `SHOW CREATE EVENT` plus SQL mode, time zone and character sets.
    pub events: BTreeMap<String, String>,
}

impl DbSnapshot {
    /// Number of base tables with their total row count, for sanity checks in tests.
    pub fn total_rows(&self) -> u64 {
        self.tables.values().map(|t| t.rows).sum()
    }

    /// Every captured fact as `"kind name [aspect]" -> value`, the basis of [`DbSnapshot::diff`].
    pub fn entries(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (name, create) in &self.databases {
            out.insert(format!("database {name}"), create.clone());
        }
        for (name, table) in &self.tables {
            out.insert(format!("table {name} definition"), table.create.clone());
            out.insert(format!("table {name} rows"), table.rows.to_string());
            out.insert(format!("table {name} checksum"), table.checksum.clone());
        }
        let kinds = [
            ("view", &self.views),
            ("procedure", &self.procedures),
            ("function", &self.functions),
            ("trigger", &self.triggers),
            ("event", &self.events),
        ];
        for (kind, map) in kinds {
            for (name, definition) in map {
                out.insert(format!("{kind} {name}"), definition.clone());
            }
        }
        out
    }

    /// Human-readable differences from `self` (left) to `other` (right); empty when equal.
    pub fn diff(&self, other: &DbSnapshot) -> Vec<String> {
        let left = self.entries();
        let right = other.entries();
        let mut out = Vec::new();
        for (key, value) in &left {
            match right.get(key) {
                None => out.push(format!("only in left:  {key}")),
                Some(other) if other != value => out.push(describe_change(key, value, other)),
                Some(_) => {}
            }
        }
        for key in right.keys().filter(|k| !left.contains_key(*k)) {
            out.push(format!("only in right: {key}"));
        }
        out
    }
}

/// Panics with a readable list of differences unless `a` and `b` are equal.
#[track_caller]
pub fn assert_same(a: &DbSnapshot, b: &DbSnapshot) {
    let diff = a.diff(b);
    if !diff.is_empty() {
        panic!(
            "database snapshots differ ({} difference(s), left = first argument):\n{}",
            diff.len(),
            diff.join("\n")
        );
    }
}

fn describe_change(key: &str, left: &str, right: &str) -> String {
    if !left.contains('\n') && !right.contains('\n') && left.len() + right.len() < 160 {
        return format!("changed:       {key}: {left:?} -> {right:?}");
    }
    let mut out = format!("changed:       {key}:");
    for line in line_diff(left, right) {
        let _ = write!(out, "\n    {line}");
    }
    out
}

/// A minimal LCS line diff: unchanged lines prefixed with two spaces, removed with `-`, added
/// with `+`. Definitions are short, so quadratic is fine.
fn line_diff(left: &str, right: &str) -> Vec<String> {
    let a: Vec<&str> = left.lines().collect();
    let b: Vec<&str> = right.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(format!("- {}", a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    out
}

/// Captures the state of every non-system database of `db`.
pub fn snapshot(db: &MariaDb) -> Result<DbSnapshot> {
    let mut snap = DbSnapshot::default();

    let schemas = db.query(&format!(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
         WHERE SCHEMA_NAME NOT IN ({SYSTEM_SCHEMAS}) ORDER BY SCHEMA_NAME"
    ))?;
    let names: Vec<String> = schemas.into_iter().map(|r| r[0].clone()).collect();
    let statements: Vec<String> = names
        .iter()
        .map(|s| format!("SHOW CREATE DATABASE {}", sql_ident(s)))
        .collect();
    for (name, row) in names.iter().zip(batch(db, &statements)?) {
        snap.databases.insert(sql_ident(name), field(&row, 1)?);
    }

    let objects = db.query(&format!(
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES
         WHERE TABLE_SCHEMA NOT IN ({SYSTEM_SCHEMAS}) ORDER BY TABLE_SCHEMA, TABLE_NAME"
    ))?;
    let mut tables = Vec::new();
    let mut views = Vec::new();
    for row in objects {
        let name = format!("{}.{}", sql_ident(&row[0]), sql_ident(&row[1]));
        match row[2].as_str() {
            "VIEW" => views.push(name),
            "BASE TABLE" | "SEQUENCE" => tables.push(name),
            other => bail!("unexpected table type {other} for {name}"),
        }
    }

    let creates = batch(
        db,
        &tables
            .iter()
            .map(|t| format!("SHOW CREATE TABLE {t}"))
            .collect::<Vec<_>>(),
    )?;
    let counts = batch(
        db,
        &tables
            .iter()
            .map(|t| format!("SELECT COUNT(*) FROM {t}"))
            .collect::<Vec<_>>(),
    )?;
    let checksums = batch(
        db,
        &tables
            .iter()
            .map(|t| format!("CHECKSUM TABLE {t} EXTENDED"))
            .collect::<Vec<_>>(),
    )?;
    for (((name, create), count), checksum) in
        tables.into_iter().zip(creates).zip(counts).zip(checksums)
    {
        let rows = field(&count, 0)?
            .parse()
            .with_context(|| format!("bad row count for {name}"))?;
        snap.tables.insert(
            name,
            TableState {
                create: strip_auto_increment(&field(&create, 1)?),
                rows,
                checksum: field(&checksum, 1)?,
            },
        );
    }

    let view_rows = batch(
        db,
        &views
            .iter()
            .map(|v| format!("SHOW CREATE VIEW {v}"))
            .collect::<Vec<_>>(),
    )?;
    for (name, row) in views.into_iter().zip(view_rows) {
        let definition = format!(
            "{}\n-- character_set_client={} collation_connection={}",
            field(&row, 1)?,
            field(&row, 2)?,
            field(&row, 3)?
        );
        snap.views.insert(name, definition);
    }

    let routines = db.query(&format!(
        "SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES
         WHERE ROUTINE_SCHEMA NOT IN ({SYSTEM_SCHEMAS}) ORDER BY 1, 2, 3"
    ))?;
    let routine_rows = batch(
        db,
        &routines
            .iter()
            .map(|r| {
                format!(
                    "SHOW CREATE {} {}.{}",
                    r[2],
                    sql_ident(&r[0]),
                    sql_ident(&r[1])
                )
            })
            .collect::<Vec<_>>(),
    )?;
    for (routine, row) in routines.iter().zip(routine_rows) {
        let name = format!("{}.{}", sql_ident(&routine[0]), sql_ident(&routine[1]));
        // Procedure|Function, sql_mode, Create ..., character_set_client,
        // collation_connection, Database Collation
        let definition = format!(
            "{}\n-- sql_mode={} character_set_client={} collation_connection={} database_collation={}",
            field(&row, 2)?,
            field(&row, 1)?,
            field(&row, 3)?,
            field(&row, 4)?,
            field(&row, 5)?
        );
        let map = match routine[2].as_str() {
            "PROCEDURE" => &mut snap.procedures,
            "FUNCTION" => &mut snap.functions,
            other => bail!("unexpected routine type {other} for {name}"),
        };
        map.insert(name, definition);
    }

    let triggers = db.query(&format!(
        "SELECT TRIGGER_SCHEMA, TRIGGER_NAME, ACTION_ORDER FROM information_schema.TRIGGERS
         WHERE TRIGGER_SCHEMA NOT IN ({SYSTEM_SCHEMAS}) ORDER BY 1, 2"
    ))?;
    let trigger_rows = batch(
        db,
        &triggers
            .iter()
            .map(|t| {
                format!(
                    "SHOW CREATE TRIGGER {}.{}",
                    sql_ident(&t[0]),
                    sql_ident(&t[1])
                )
            })
            .collect::<Vec<_>>(),
    )?;
    for (trigger, row) in triggers.iter().zip(trigger_rows) {
        // Trigger, sql_mode, SQL Original Statement, character_set_client,
        // collation_connection, Database Collation, Created (dropped)
        let definition = format!(
            "{}\n-- sql_mode={} character_set_client={} collation_connection={} database_collation={} action_order={}",
            field(&row, 2)?,
            field(&row, 1)?,
            field(&row, 3)?,
            field(&row, 4)?,
            field(&row, 5)?,
            trigger[2]
        );
        snap.triggers.insert(
            format!("{}.{}", sql_ident(&trigger[0]), sql_ident(&trigger[1])),
            definition,
        );
    }

    let events = db.query(&format!(
        "SELECT EVENT_SCHEMA, EVENT_NAME FROM information_schema.EVENTS
         WHERE EVENT_SCHEMA NOT IN ({SYSTEM_SCHEMAS}) ORDER BY 1, 2"
    ))?;
    let event_rows = batch(
        db,
        &events
            .iter()
            .map(|e| {
                format!(
                    "SHOW CREATE EVENT {}.{}",
                    sql_ident(&e[0]),
                    sql_ident(&e[1])
                )
            })
            .collect::<Vec<_>>(),
    )?;
    for (event, row) in events.iter().zip(event_rows) {
        // Event, sql_mode, time_zone, Create Event, character_set_client,
        // collation_connection, Database Collation
        let definition = format!(
            "{}\n-- sql_mode={} time_zone={} character_set_client={} collation_connection={} database_collation={}",
            field(&row, 3)?,
            field(&row, 1)?,
            field(&row, 2)?,
            field(&row, 4)?,
            field(&row, 5)?,
            field(&row, 6)?
        );
        snap.events.insert(
            format!("{}.{}", sql_ident(&event[0]), sql_ident(&event[1])),
            definition,
        );
    }
    Ok(snap)
}

/// Runs statements that each return exactly one row in one client call, returning the rows in
/// order. A marker row between statements guards against a statement returning no row.
fn batch(db: &MariaDb, statements: &[String]) -> Result<Vec<Vec<String>>> {
    if statements.is_empty() {
        return Ok(Vec::new());
    }
    const MARK: &str = "--bulwark-testkit-mark--";
    let mut script = String::new();
    for statement in statements {
        let _ = writeln!(script, "{statement};\nSELECT {};", sql_string(MARK));
    }
    let rows = db.query(&script)?;
    let mut out = Vec::with_capacity(statements.len());
    let mut current: Option<Vec<String>> = None;
    let mut index = 0;
    for row in rows {
        if row.len() == 1 && row[0] == MARK {
            let Some(result) = current.take() else {
                bail!("`{}` returned no row", statements[index]);
            };
            out.push(result);
            index += 1;
        } else if current.replace(row).is_some() {
            bail!("`{}` returned more than one row", statements[index]);
        }
    }
    if out.len() != statements.len() {
        bail!("expected {} results, got {}", statements.len(), out.len());
    }
    Ok(out)
}

fn field(row: &[String], index: usize) -> Result<String> {
    row.get(index)
        .cloned()
        .with_context(|| format!("result row has no column {index}: {row:?}"))
}

/// Removes the ` AUTO_INCREMENT=N` table option from a `CREATE TABLE` statement.
fn strip_auto_increment(create: &str) -> String {
    let Some(close) = create.rfind(") ENGINE=") else {
        return create.to_string();
    };
    let (head, options) = create.split_at(close);
    let mut out = String::from(head);
    let mut rest = options;
    while let Some(at) = rest.find(" AUTO_INCREMENT=") {
        out.push_str(&rest[..at]);
        let after = &rest[at + " AUTO_INCREMENT=".len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_the_table_option() {
        let create = "CREATE TABLE `t` (\n  `id` int NOT NULL AUTO_INCREMENT,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB AUTO_INCREMENT=42 DEFAULT CHARSET=utf8mb4";
        assert_eq!(
            strip_auto_increment(create),
            "CREATE TABLE `t` (\n  `id` int NOT NULL AUTO_INCREMENT,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        );
    }

    #[test]
    fn diff_names_what_changed() {
        let mut a = DbSnapshot::default();
        a.tables.insert(
            "`d`.`t`".into(),
            TableState {
                create: "CREATE TABLE t (\n a int\n)".into(),
                rows: 2,
                checksum: "1".into(),
            },
        );
        a.views.insert("`d`.`v`".into(), "CREATE VIEW v".into());
        let mut b = a.clone();
        assert!(a.diff(&b).is_empty());
        b.tables.get_mut("`d`.`t`").unwrap().checksum = "2".into();
        b.tables.get_mut("`d`.`t`").unwrap().create = "CREATE TABLE t (\n b int\n)".into();
        b.views.clear();
        b.events.insert("`d`.`e`".into(), "CREATE EVENT e".into());
        let diff = a.diff(&b).join("\n");
        assert!(
            diff.contains("table `d`.`t` checksum: \"1\" -> \"2\""),
            "{diff}"
        );
        assert!(diff.contains("-  a int\n    +  b int"), "{diff}");
        assert!(diff.contains("only in left:  view `d`.`v`"), "{diff}");
        assert!(diff.contains("only in right: event `d`.`e`"), "{diff}");
    }
}
