//! What a restore drill judges, apart from running it: the answer of `CHECK TABLE` per table
//! and a user's assertion. Pure; table-tested.

/// One row of `CHECK TABLE`: `Table`, `Op`, `Msg_type`, `Msg_text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRow {
    pub table: String,
    pub msg_type: String,
    pub msg_text: String,
}

/// What `CHECK TABLE` said of the tables it was given.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CheckVerdict {
    /// Tables the engine checked and found sound.
    pub sound: Vec<String>,
    /// Tables whose engine cannot check them (MEMORY, views, …): not judged.
    pub unchecked: Vec<String>,
    /// Tables found damaged, with what the server said.
    pub damaged: Vec<(String, String)>,
}

/// Judges the rows `CHECK TABLE` answered, table by table in the order they came: a table is
/// sound when its last status says `OK` with no error before it; an engine that cannot check
/// leaves it unchecked; anything else is damage, told in the server's words.
pub fn judge_check(rows: &[CheckRow]) -> CheckVerdict {
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        if !order.contains(&r.table.as_str()) {
            order.push(&r.table);
        }
    }
    let mut verdict = CheckVerdict::default();
    for table in order {
        let mine: Vec<&CheckRow> = rows.iter().filter(|r| r.table == table).collect();
        let errors: Vec<&str> = mine
            .iter()
            .filter(|r| r.msg_type.eq_ignore_ascii_case("error"))
            .map(|r| r.msg_text.as_str())
            .collect();
        let last_status = mine
            .iter()
            .rev()
            .find(|r| r.msg_type.eq_ignore_ascii_case("status"))
            .map(|r| r.msg_text.as_str());
        let cannot_check = mine
            .iter()
            .any(|r| r.msg_text.contains("doesn't support check"));
        match (errors.is_empty(), last_status) {
            (true, Some(s)) if s.eq_ignore_ascii_case("OK") => verdict.sound.push(table.into()),
            (true, _) if cannot_check => verdict.unchecked.push(table.into()),
            _ => {
                let mut said: Vec<&str> = errors;
                said.extend(last_status);
                if said.is_empty() {
                    said.push("no status");
                }
                verdict.damaged.push((table.into(), said.join("; ")));
            }
        }
    }
    verdict
}

/// Judges what an assertion query returned (rows of columns, NULL as `None`): it holds when
/// it returned exactly one row whose first column is a non-zero number.
pub fn judge_assertion(rows: &[Vec<Option<String>>]) -> Result<(), String> {
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "NULL".into());
    match rows {
        [] => Err("it returned no row".into()),
        [row] => match row.first() {
            None => Err("it returned a row without columns".into()),
            Some(v) => {
                let truthy = v
                    .as_deref()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .is_some_and(|n| n.is_finite() && n != 0.0);
                if truthy {
                    Ok(())
                } else {
                    Err(format!("it returned {}, not a true value", shown(v)))
                }
            }
        },
        more => Err(format!("it returned {} rows, not one", more.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(table: &str, msg_type: &str, msg_text: &str) -> CheckRow {
        CheckRow {
            table: table.into(),
            msg_type: msg_type.into(),
            msg_text: msg_text.into(),
        }
    }

    #[test]
    fn check_table_answers_are_judged_table_by_table() {
        let rows = [
            row("shop.orders", "status", "OK"),
            row(
                "shop.cache",
                "note",
                "The storage engine for the table doesn't support check",
            ),
            row("shop.items", "error", "Found 3 keys of 4"),
            row("shop.items", "status", "Corrupt"),
            row(
                "shop.log",
                "warning",
                "1 client is using or hasn't closed the table properly",
            ),
            row("shop.log", "status", "OK"),
            row("shop.gone", "Error", "Table 'shop.gone' doesn't exist"),
            row("shop.gone", "status", "Operation failed"),
        ];
        let v = judge_check(&rows);
        assert_eq!(v.sound, ["shop.orders", "shop.log"]);
        assert_eq!(v.unchecked, ["shop.cache"]);
        assert_eq!(
            v.damaged,
            [
                (
                    "shop.items".to_string(),
                    "Found 3 keys of 4; Corrupt".to_string()
                ),
                (
                    "shop.gone".to_string(),
                    "Table 'shop.gone' doesn't exist; Operation failed".to_string()
                ),
            ]
        );
    }

    #[test]
    fn an_assertion_holds_only_for_one_row_with_a_true_first_column() {
        let one = |v: Option<&str>| vec![vec![v.map(str::to_owned)]];
        type Rows = Vec<Vec<Option<String>>>;
        let cases: Vec<(&str, Rows, Result<(), &str>)> = vec![
            ("true", one(Some("1")), Ok(())),
            ("a count", one(Some("42")), Ok(())),
            ("a decimal", one(Some("0.5")), Ok(())),
            (
                "false",
                one(Some("0")),
                Err("it returned 0, not a true value"),
            ),
            ("NULL", one(None), Err("it returned NULL")),
            ("text", one(Some("yes")), Err("it returned yes")),
            ("not a number", one(Some("NaN")), Err("it returned NaN")),
            ("infinite", one(Some("inf")), Err("it returned inf")),
            ("no row", vec![], Err("no row")),
            (
                "two rows",
                [one(Some("1")), one(Some("1"))].concat(),
                Err("2 rows"),
            ),
        ];
        for (name, rows, want) in cases {
            match (judge_assertion(&rows), want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.contains(w), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
