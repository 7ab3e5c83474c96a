//! Shows the engine's progress counters (`bulwark_engine::progress::Progress`) while an
//! operation runs: a bar on a terminal, periodic structured log lines otherwise; and a log
//! writer that keeps log lines above the bar.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bulwark_engine::progress::Progress;

/// The bar on screen, if any: log lines are written while it is suspended (cleared, then
/// redrawn below them), so that no stale bar line is left between log lines.
static ACTIVE_BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// A log writer for stderr that keeps log lines above the progress bar.
pub struct StderrAboveBar;

impl std::io::Write for StderrAboveBar {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_above_bar(active_bar().as_ref(), || {
            std::io::stderr().lock().write_all(buf)
        })?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn active_bar() -> Option<indicatif::ProgressBar> {
    ACTIVE_BAR.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Runs `write` with `bar` (if any) taken off the screen, then redraws it.
fn write_above_bar<T>(bar: Option<&indicatif::ProgressBar>, write: impl FnOnce() -> T) -> T {
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

/// Makes `bar` the one log lines are written above, until it is dropped from the slot.
struct ActiveBar;

impl ActiveBar {
    fn set(bar: &indicatif::ProgressBar) -> ActiveBar {
        *ACTIVE_BAR.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar.clone());
        ActiveBar
    }
}

impl Drop for ActiveBar {
    fn drop(&mut self) {
        *ACTIVE_BAR.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// A bar on stderr.
    Bar,
    /// A log line every `interval`.
    Log(Duration),
    /// Nothing.
    Quiet,
}

impl Display {
    /// A bar when stderr is a terminal, log lines otherwise.
    pub fn auto(interval: Duration) -> Self {
        if std::io::stderr().is_terminal() {
            Display::Bar
        } else {
            Display::Log(interval)
        }
    }
}

/// Stops the display when dropped.
pub struct Reporter {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Reporter {
    /// Starts showing `progress` for an operation called `what`.
    pub fn start(progress: Arc<Progress>, what: &'static str, display: Display) -> Self {
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let task = match display {
            Display::Quiet => None,
            Display::Bar => Some(tokio::spawn(async move {
                let bar = indicatif::ProgressBar::with_draw_target(
                    None,
                    indicatif::ProgressDrawTarget::stderr(),
                );
                let with_total = "{prefix} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}";
                let without_total =
                    "{prefix} [{elapsed_precise}] {spinner} {bytes} {binary_bytes_per_sec}";
                bar.set_prefix(what);
                let slot = ActiveBar::set(&bar);
                let mut has_total = None;
                loop {
                    let total = progress.total_hint.load(Ordering::Relaxed);
                    let done = progress.plain_bytes.load(Ordering::Relaxed);
                    // An estimate that the stream has outgrown is no basis for an ETA.
                    let known = total > done;
                    if has_total != Some(known) {
                        has_total = Some(known);
                        let template = if known { with_total } else { without_total };
                        bar.set_style(
                            indicatif::ProgressStyle::with_template(template)
                                .expect("valid template"),
                        );
                    }
                    if known {
                        bar.set_length(total);
                    }
                    bar.set_position(done);
                    tokio::select! {
                        _ = &mut rx => break,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                }
                drop(slot);
                bar.finish_and_clear();
            })),
            Display::Log(interval) => Some(tokio::spawn(async move {
                let start = Instant::now();
                loop {
                    tokio::select! {
                        _ = &mut rx => break,
                        _ = tokio::time::sleep(interval) => {}
                    }
                    let done = progress.plain_bytes.load(Ordering::Relaxed);
                    let stored = progress.stored_bytes.load(Ordering::Relaxed);
                    let total = progress.total_hint.load(Ordering::Relaxed);
                    let secs = start.elapsed().as_secs_f64().max(0.001);
                    let rate = (done as f64 / secs) as u64;
                    let eta = (total > done && rate > 0).then(|| (total - done) / rate);
                    tracing::info!(
                        operation = what,
                        bytes_done = done,
                        stored_bytes = stored,
                        total_bytes_estimate = total,
                        bytes_per_second = rate,
                        eta_seconds = eta,
                        "progress"
                    );
                }
            })),
        };
        Self {
            stop: Some(tx),
            task,
        }
    }

    /// Stops the display and waits until it has cleared.
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::{InMemoryTerm, ProgressBar, ProgressDrawTarget, TermLike};

    #[test]
    fn log_lines_go_above_the_bar() {
        let term = InMemoryTerm::new(10, 60);
        let bar = ProgressBar::with_draw_target(
            Some(100),
            ProgressDrawTarget::term_like(Box::new(term.clone())),
        );
        bar.set_style(indicatif::ProgressStyle::with_template("BAR {pos}/{len}").unwrap());
        bar.set_position(10);
        bar.tick();
        assert_eq!(term.contents(), "BAR 10/100");
        // Without suspending, the line would be written over the bar's line.
        write_above_bar(Some(&bar), || term.write_line("log line one").unwrap());
        bar.set_position(20);
        write_above_bar(Some(&bar), || term.write_line("log line two").unwrap());
        bar.tick();
        assert_eq!(term.contents(), "log line one\nlog line two\nBAR 20/100");
    }
}
