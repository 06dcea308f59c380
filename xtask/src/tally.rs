//! What a test run printed, counted: libtest's `test result:` summaries and
//! the tests' loud `skipped: <test>: <reason>` lines (tests/support/skip.rs).
//! One tally for the native run and for a run inside another kernel, so both
//! close with the same line.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context as _, Result};

/// Tests passed, failed and skipped so far.
#[derive(Default)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Tally {
    /// Count one line of a test run's output (stdout or stderr).
    pub fn line(&mut self, l: &str) {
        if let Some(rest) = l.trim().strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let n: u64 = n.parse().unwrap_or(0);
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    _ => {}
                }
            }
        } else if skip(l).is_some() {
            self.skipped += 1;
        }
    }

    /// The one closing line, e.g. `xtask: 3 passed, 0 failed, 0 skipped`.
    /// `failed_at_least` raises the failed count where a run failed without
    /// a summary naming a failed test (a crash, a build error, a timeout).
    pub fn closing_line(&self, failed_at_least: u64, suffix: &str) -> String {
        format!(
            "xtask: {} passed, {} failed, {} skipped{suffix}",
            self.passed,
            self.failed.max(failed_at_least),
            self.skipped
        )
    }
}

/// The test and reason of a loud skip line, `skipped: <test>: <reason>`:
/// at the line's start, or after another test's `test x ... ` (or its
/// result), where the harness writing to fd 2 directly may land it.
pub fn skip(l: &str) -> Option<(&str, &str)> {
    let rest = match l.strip_prefix("skipped: ") {
        Some(rest) => rest,
        None if l.starts_with("test ") && l.contains(" ... ") => l.split_once("skipped: ")?.1,
        None => return None,
    };
    rest.split_once(": ")
}

/// Run `c`, echoing its output as it comes, and tally the test summaries.
pub fn run_tallied(c: &mut Command) -> Result<(ExitStatus, Tally)> {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let out = child.stdout.take().context("cargo test stdout")?;
    let err = child.stderr.take().context("cargo test stderr")?;
    let t1 = {
        let tally = Arc::clone(&tally);
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(std::io::stdout(), "{l}");
                tally
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .line(&l);
            }
        })
    };
    let t2 = {
        let tally = Arc::clone(&tally);
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = writeln!(std::io::stderr(), "{l}");
                tally
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .line(&l);
            }
        })
    };
    let status = child.wait().context("waiting for cargo test")?;
    let _ = t1.join();
    let _ = t2.join();
    let tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    Ok((status, tally))
}
