//! An error and its causes on one line, as every command and log line shows a failure. Apart
//! from `error` so that the modules `error` names (storage, files) can use it too.

/// Renders an error and its sources as `outer: cause: root cause`, skipping repeats.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.last().is_some_and(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ").replace('\n', " ")
}
