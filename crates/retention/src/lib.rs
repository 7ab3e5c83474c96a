//! Retention planning in the manner of restic's `forget`: keep-last, calendar buckets (hourly,
//! daily, weekly, monthly, yearly) and keep-within, ORed; the newest backup is always kept.
//! Pure: decides from ids and times, touches nothing.

use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use serde::Serialize;

/// Keep rules; `None` means the rule is not used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeepPolicy {
    /// Keep the N most recent backups.
    pub last: Option<u32>,
    /// Keep the most recent backup of each of the last N hours that have one.
    pub hourly: Option<u32>,
    /// Same per day.
    pub daily: Option<u32>,
    /// Same per ISO week.
    pub weekly: Option<u32>,
    /// Same per month.
    pub monthly: Option<u32>,
    /// Same per year.
    pub yearly: Option<u32>,
    /// Keep everything newer than the newest backup minus this.
    #[serde(skip)]
    pub within: Option<Duration>,
}

impl KeepPolicy {
    /// Whether no rule is set (then every backup is kept).
    pub fn is_empty(&self) -> bool {
        *self == KeepPolicy::default()
    }
}

/// A backup to decide about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Backup id.
    pub id: String,
    /// The time rules are applied to (when the backup finished).
    pub time: DateTime<Utc>,
}

/// The decision about one backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Backup id.
    pub id: String,
    /// Its time.
    pub time: DateTime<Utc>,
    /// Whether it stays.
    pub keep: bool,
    /// Which rules keep it (`last`, `daily 2026-11-20`, `within`, `newest`, `no policy`).
    pub reasons: Vec<String>,
}

#[derive(Clone, Copy)]
enum Bucket {
    Hourly,
    Daily,
    Weekly,
    Monthly,
    Yearly,
}

impl Bucket {
    fn key(self, t: DateTime<Utc>) -> String {
        match self {
            Bucket::Hourly => format!(
                "hourly {}-{:02}-{:02} {:02}h",
                t.year(),
                t.month(),
                t.day(),
                t.hour()
            ),
            Bucket::Daily => format!("daily {}-{:02}-{:02}", t.year(), t.month(), t.day()),
            Bucket::Weekly => {
                let w = t.iso_week();
                format!("weekly {}-W{:02}", w.year(), w.week())
            }
            Bucket::Monthly => format!("monthly {}-{:02}", t.year(), t.month()),
            Bucket::Yearly => format!("yearly {}", t.year()),
        }
    }
}

/// Decides which backups to keep. The result is ordered newest first.
pub fn plan(policy: &KeepPolicy, candidates: &[Candidate]) -> Vec<Decision> {
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| (b.time, &b.id).cmp(&(a.time, &a.id)));
    let newest_time = sorted.first().map(|c| c.time);
    let mut buckets: Vec<(Bucket, u32, Option<String>)> = [
        (Bucket::Hourly, policy.hourly),
        (Bucket::Daily, policy.daily),
        (Bucket::Weekly, policy.weekly),
        (Bucket::Monthly, policy.monthly),
        (Bucket::Yearly, policy.yearly),
    ]
    .into_iter()
    .filter_map(|(b, n)| n.filter(|n| *n > 0).map(|n| (b, n, None)))
    .collect();
    let mut last_left = policy.last.unwrap_or(0);
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mut reasons = Vec::new();
            if policy.is_empty() {
                reasons.push("no policy".to_string());
            }
            if i == 0 {
                reasons.push("newest".to_string());
            }
            if last_left > 0 {
                last_left -= 1;
                reasons.push("last".to_string());
            }
            for (bucket, left, seen) in buckets.iter_mut() {
                let key = bucket.key(c.time);
                if *left > 0 && seen.as_deref() != Some(key.as_str()) {
                    *left -= 1;
                    reasons.push(key.clone());
                    *seen = Some(key);
                }
            }
            if let (Some(within), Some(newest)) = (policy.within, newest_time) {
                if c.time > newest - within {
                    reasons.push("within".to_string());
                }
            }
            Decision {
                id: c.id.clone(),
                time: c.time,
                keep: !reasons.is_empty(),
                reasons,
            }
        })
        .collect()
}

/// Parses durations such as `30d`, `2w`, `1y6m`, `12h`, `90m` (m = months when before d/h, as
/// restic does; use `min` for minutes).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let mut total = Duration::zero();
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        while let Some(n) = chars.peek() {
            if n.is_ascii_alphabetic() {
                unit.push(*n);
                chars.next();
            } else {
                break;
            }
        }
        let n: i64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: a unit without a number"))?;
        num.clear();
        total += match unit.as_str() {
            "y" => Duration::days(365 * n),
            "m" => Duration::days(30 * n),
            "w" => Duration::weeks(n),
            "d" => Duration::days(n),
            "h" => Duration::hours(n),
            "min" => Duration::minutes(n),
            "s" => Duration::seconds(n),
            other => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {other:?} (use y, m, w, d, h, min, s)"
                ))
            }
        };
        any = true;
    }
    if !num.is_empty() || !any {
        return Err(format!(
            "invalid duration {s:?}: expected e.g. 30d, 2w, 1y6m, 12h"
        ));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn cands(times: &[&str]) -> Vec<Candidate> {
        times
            .iter()
            .enumerate()
            .map(|(i, t)| Candidate {
                id: format!("b{i:02}"),
                time: at(t),
            })
            .collect()
    }

    fn kept(policy: &KeepPolicy, c: &[Candidate]) -> Vec<String> {
        let mut k: Vec<String> = plan(policy, c)
            .into_iter()
            .filter(|d| d.keep)
            .map(|d| d.id)
            .collect();
        k.sort();
        k
    }

    #[test]
    fn table_of_policies() {
        // Two backups a day for five days, 00:00 and 12:00.
        let times: Vec<String> = (1..=5)
            .flat_map(|d| {
                [
                    format!("2026-11-{d:02}T00:00:00Z"),
                    format!("2026-11-{d:02}T12:00:00Z"),
                ]
            })
            .collect();
        let c = cands(&times.iter().map(String::as_str).collect::<Vec<_>>());
        let cases: Vec<(KeepPolicy, Vec<&str>)> = vec![
            (
                KeepPolicy::default(),
                vec![
                    "b00", "b01", "b02", "b03", "b04", "b05", "b06", "b07", "b08", "b09",
                ],
            ),
            (
                KeepPolicy {
                    last: Some(3),
                    ..Default::default()
                },
                vec!["b07", "b08", "b09"],
            ),
            (
                KeepPolicy {
                    daily: Some(3),
                    ..Default::default()
                },
                vec!["b05", "b07", "b09"],
            ),
            (
                KeepPolicy {
                    last: Some(1),
                    daily: Some(2),
                    ..Default::default()
                },
                vec!["b07", "b09"],
            ),
            (
                KeepPolicy {
                    hourly: Some(2),
                    ..Default::default()
                },
                vec!["b08", "b09"],
            ),
            (
                KeepPolicy {
                    weekly: Some(2),
                    ..Default::default()
                },
                vec!["b01", "b09"],
            ),
            (
                KeepPolicy {
                    monthly: Some(5),
                    ..Default::default()
                },
                vec!["b09"],
            ),
            (
                KeepPolicy {
                    yearly: Some(1),
                    ..Default::default()
                },
                vec!["b09"],
            ),
            (
                KeepPolicy {
                    within: Some(Duration::days(1)),
                    ..Default::default()
                },
                vec!["b08", "b09"],
            ),
            (
                KeepPolicy {
                    last: Some(0),
                    ..Default::default()
                },
                vec!["b09"],
            ),
        ];
        for (policy, want) in cases {
            assert_eq!(kept(&policy, &c), want, "{policy:?}");
        }
    }

    #[test]
    fn newest_is_always_kept_and_reasons_are_given() {
        let c = cands(&["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]);
        let d = plan(
            &KeepPolicy {
                within: Some(Duration::hours(1)),
                ..Default::default()
            },
            &c,
        );
        assert_eq!(d[0].reasons, vec!["newest", "within"]);
        assert!(!d[1].keep && d[1].reasons.is_empty());
        assert!(plan(&KeepPolicy::default(), &[]).is_empty());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d").unwrap(), Duration::days(30));
        assert_eq!(parse_duration("1y6m").unwrap(), Duration::days(365 + 180));
        assert_eq!(
            parse_duration("2w12h").unwrap(),
            Duration::weeks(2) + Duration::hours(12)
        );
        assert_eq!(parse_duration("90min").unwrap(), Duration::minutes(90));
        for bad in ["", "10", "d", "5x", "3 days"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
