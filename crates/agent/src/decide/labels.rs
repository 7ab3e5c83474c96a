//! The pod's labels as the downward API writes them (`key="value"` per line, values quoted
//! the way Go's `%q` does), and the role label the operator sets.

use std::collections::BTreeMap;

pub use bulwark_contract::labels::ROLE as ROLE_LABEL;
use bulwark_contract::order::{epoch_from_label, Standing, EPOCH_LABEL};
pub use bulwark_contract::Role;

/// Parses the labels file; lines that are not `key="value"` are skipped.
pub fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let value = unquote(value.trim_end_matches('\r'))?;
            Some((key.trim().to_string(), value))
        })
        .collect()
}

/// The role the labels give, or why there is none.
pub fn role(labels: &BTreeMap<String, String>) -> Result<Role, String> {
    match labels.get(ROLE_LABEL).map(String::as_str) {
        Some(value) => Role::from_label(value).ok_or_else(|| {
            format!(
                "role unknown: label {ROLE_LABEL} is {:?}",
                value.chars().take(40).collect::<String>()
            )
        }),
        None => Err(format!("role unknown: no label {ROLE_LABEL}")),
    }
}

/// The role and its epoch the labels give (`bulwark_contract::order`), or why there is none.
pub fn standing(labels: &BTreeMap<String, String>) -> Result<Standing, String> {
    let role = role(labels)?;
    let value = labels.get(EPOCH_LABEL).map(String::as_str);
    let epoch = epoch_from_label(value).ok_or_else(|| {
        format!(
            "role unknown: label {EPOCH_LABEL} is {:?}",
            value
                .unwrap_or_default()
                .chars()
                .take(40)
                .collect::<String>()
        )
    })?;
    Ok(Standing { role, epoch })
}

/// Undoes Go's double-quoted string syntax (`strconv.Unquote`).
fn unquote(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    let hex = |chars: &mut std::str::Chars<'_>, n: usize| -> Option<u32> {
        let digits: String = chars.by_ref().take(n).collect();
        (digits.len() == n)
            .then(|| u32::from_str_radix(&digits, 16).ok())
            .flatten()
    };
    let push_char = |out: &mut Vec<u8>, c: char| {
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    };
    while let Some(c) = chars.next() {
        if c == '"' {
            return None;
        }
        if c != '\\' {
            push_char(&mut out, c);
            continue;
        }
        match chars.next()? {
            'a' => out.push(0x07),
            'b' => out.push(0x08),
            'f' => out.push(0x0c),
            'n' => out.push(b'\n'),
            'r' => out.push(b'\r'),
            't' => out.push(b'\t'),
            'v' => out.push(0x0b),
            '\\' => out.push(b'\\'),
            '"' => out.push(b'"'),
            '\'' => out.push(b'\''),
            'x' => out.push(u8::try_from(hex(&mut chars, 2)?).ok()?),
            'u' => push_char(&mut out, char::from_u32(hex(&mut chars, 4)?)?),
            'U' => push_char(&mut out, char::from_u32(hex(&mut chars, 8)?)?),
            d @ '0'..='7' => {
                let rest: String = chars.by_ref().take(2).collect();
                let v = u32::from_str_radix(&format!("{d}{rest}"), 8).ok()?;
                out.push(u8::try_from(v).ok()?);
            }
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downward_api_labels() {
        let text = "app.kubernetes.io/name=\"quay\"\n\
                    mysql.bulwark.dev/role=\"replica\"\n\
                    note=\"a \\\"quoted\\\" \\\\ value\\n\\u00e9\\x41\\101\"\n\
                    broken=unquoted\n\
                    statefulset.kubernetes.io/pod-name=\"quay-1\"";
        let labels = parse_labels(text);
        assert_eq!(labels.len(), 4, "{labels:?}");
        assert_eq!(labels["app.kubernetes.io/name"], "quay");
        assert_eq!(labels["note"], "a \"quoted\" \\ value\néAA");
        assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "quay-1");
        assert_eq!(role(&labels), Ok(Role::Replica));
    }

    #[test]
    fn roles() {
        let cases: &[(&str, Result<Role, &str>)] = &[
            ("mysql.bulwark.dev/role=\"primary\"\n", Ok(Role::Primary)),
            ("mysql.bulwark.dev/role=\"replica\"", Ok(Role::Replica)),
            ("mysql.bulwark.dev/role=\"Primary\"", Err("is \"Primary\"")),
            ("mysql.bulwark.dev/role=\"\"", Err("is \"\"")),
            ("other=\"primary\"", Err("no label")),
            ("", Err("no label")),
            ("mysql.bulwark.dev/role=primary", Err("no label")),
        ];
        for (text, want) in cases {
            let got = role(&parse_labels(text));
            match (want, &got) {
                (Ok(r), Ok(g)) => assert_eq!(r, g, "{text:?}"),
                (Err(needle), Err(reason)) => {
                    assert!(reason.contains(needle), "{text:?}: {reason}")
                }
                _ => panic!("{text:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn epochs() {
        let with = |epoch: &str| {
            standing(&parse_labels(&format!(
                "mysql.bulwark.dev/role=\"primary\"\n{epoch}"
            )))
        };
        let at = |epoch| {
            Ok(Standing {
                role: Role::Primary,
                epoch,
            })
        };
        assert_eq!(with(""), at(0));
        assert_eq!(with("mysql.bulwark.dev/epoch=\"4\""), at(4));
        assert!(with("mysql.bulwark.dev/epoch=\"x\"")
            .unwrap_err()
            .contains("is \"x\""));
        assert!(standing(&parse_labels("")).is_err());
    }

    #[test]
    fn malformed_quoting_is_rejected() {
        for bad in [
            "\"open",
            "\"bad \\q escape\"",
            "\"inner \" quote\"",
            "\"\\x4\"",
        ] {
            assert_eq!(unquote(bad), None, "{bad:?}");
        }
    }
}
