//! The suite as a list of commands for a guest, and what came back.
//!
//! [`collect`] runs the very `cargo test` of the native run with this
//! binary as cargo's runner (`kernel-record`): cargo builds what the native
//! run builds, then, instead of running each test binary, hands it to the
//! recorder with the exact argv, working directory and environment it would
//! have run it with (`CARGO_MANIFEST_DIR`, `OUT_DIR`, `LD_LIBRARY_PATH`, the
//! filter arguments, …). The guest runs those records, with `CI=true`.
//!
//! [`Results`] reads the guest's output as it comes: libtest's per-test
//! lines and summaries, the tests' skip lines; and writes them out as JSON
//! (binary → test → passed/failed/ignored/skipped) for a later step to
//! render.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};

use crate::tally::Tally;

/// One test binary as cargo would run it.
pub struct TestBinary {
    /// An integration test's name (`net`); `lib:<crate>` and `bin:<name>`
    /// for unit tests.
    pub label: String,
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
}

/// `cargo kernel-record FILE EXE ARGS…`, cargo's runner during [`collect`]:
/// append one JSON line to FILE with EXE, ARGS, the working dir and the
/// environment, and run nothing.
pub fn record(file: &Path, argv: &[OsString]) -> Result<()> {
    let text = |s: &OsStr| {
        s.to_str()
            .map(str::to_owned)
            .with_context(|| format!("{} is not UTF-8", s.display()))
    };
    let mut env = Vec::new();
    for (k, v) in std::env::vars_os() {
        match (k.to_str(), v.to_str()) {
            (Some(k), Some(v)) => env.push(json!([k, v])),
            _ => eprintln!(
                "xtask: warning: {} is not UTF-8; the test runs without it",
                k.display()
            ),
        }
    }
    let line = json!({
        "argv": argv.iter().map(|a| text(a)).collect::<Result<Vec<_>>>()?,
        "cwd": text(std::env::current_dir()?.as_os_str())?,
        "env": env,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    writeln!(f, "{line}")?;
    Ok(())
}

/// The test binaries of `cargo` (the native run's `cargo test`, without its
/// `-- args`), each recorded with `test_args`. Cargo's unit and integration test
/// binaries only: doc-tests need no kernel.
pub fn collect(
    mut cargo: Command,
    test_args: &[String],
    records: &Path,
) -> Result<Vec<TestBinary>> {
    let _ = std::fs::remove_file(records);
    let runner = format!(
        "{} kernel-record {}",
        std::env::current_exe()?.display(),
        records.display()
    );
    if runner.split_whitespace().count() != 3 {
        bail!("cargo splits its runner at spaces, and a path in `{runner}` has one");
    }
    let runner_var = format!(
        "CARGO_TARGET_{}_RUNNER",
        crate::host_target().to_uppercase().replace('-', "_")
    );
    cargo
        .args([
            "--lib",
            "--bins",
            "--tests",
            "--message-format=json-render-diagnostics",
        ])
        .env(&runner_var, &runner)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !test_args.is_empty() {
        cargo.arg("--").args(test_args);
    }
    eprintln!("xtask: building the suite and listing its test binaries");
    let mut child = cargo.spawn().context("running cargo test")?;
    let err = child.stderr.take().context("cargo's stderr")?;
    // cargo's `Running` lines only name what the recorder listed here.
    let echo = std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let t = l.trim_start();
            if !t.starts_with("Running ") && !t.starts_with("Doc-tests ") {
                eprintln!("{l}");
            }
        }
    });
    let out = BufReader::new(child.stdout.take().context("cargo's stdout")?);
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for l in out.lines() {
        let Ok(v) = serde_json::from_str::<Value>(&l?) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(name)) = (v["executable"].as_str(), v["target"]["name"].as_str())
        else {
            continue;
        };
        let kind = v["target"]["kind"][0].as_str().unwrap_or("lib");
        let label = match kind {
            "test" => name.to_owned(),
            "bin" => format!("bin:{name}"),
            _ => format!("lib:{name}"),
        };
        labels.insert(exe.to_owned(), label);
    }
    let status = child.wait()?;
    let _ = echo.join();
    if !status.success() {
        bail!("cargo test (building the suite) failed ({status})");
    }
    let text = std::fs::read_to_string(records).unwrap_or_default();
    let mut binaries = Vec::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l)?;
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let argv = strings(&v["argv"]);
        let exe = argv.first().context("a record without a binary")?;
        let label = labels
            .get(exe)
            .cloned()
            .unwrap_or_else(|| exe.rsplit('/').next().unwrap_or(exe).to_owned());
        let env = v["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|kv| Some((kv[0].as_str()?.into(), kv[1].as_str()?.into())))
            .filter(|(k, _): &(OsString, OsString)| k != runner_var.as_str())
            .collect();
        binaries.push(TestBinary {
            label,
            argv: argv.into_iter().map(OsString::from).collect(),
            cwd: v["cwd"].as_str().unwrap_or("/").into(),
            env,
        });
    }
    if binaries.is_empty() {
        bail!("cargo test ran no test binary through the recorder");
    }
    Ok(binaries)
}

/// Keep the binaries named in `only` (all when empty) but those named in
/// `except`.
pub fn select(
    binaries: Vec<TestBinary>,
    only: &[String],
    except: &[String],
) -> Result<Vec<TestBinary>> {
    let unknown: Vec<&String> = only
        .iter()
        .chain(except)
        .filter(|o| !binaries.iter().any(|b| &b.label == *o))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = binaries.iter().map(|b| b.label.as_str()).collect();
        bail!(
            "no test binary {}; there are: {}",
            unknown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        );
    }
    Ok(binaries
        .into_iter()
        .filter(|b| (only.is_empty() || only.contains(&b.label)) && !except.contains(&b.label))
        .collect())
}

/// `s` as one bash word (single-quoted).
pub fn sh_quote(s: &OsStr) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in s.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// The guest's plan (bash, sourced by stage 2): for each binary, its
/// environment `E`, its argv `A`, then `run LABEL CWD`.
pub fn plan(binaries: &[TestBinary]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in binaries {
        out.extend_from_slice(b"E=(");
        for (k, v) in &b.env {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            out.extend(sh_quote(&kv));
            out.push(b' ');
        }
        out.extend_from_slice(b")\nA=(");
        for a in &b.argv {
            out.extend(sh_quote(a));
            out.push(b' ');
        }
        out.extend_from_slice(b")\nrun ");
        out.extend(sh_quote(OsStr::new(&b.label)));
        out.push(b' ');
        out.extend(sh_quote(b.cwd.as_os_str()));
        out.push(b'\n');
    }
    out
}

/// A test's outcome.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Ignored,
    Skipped,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Ignored => "ignored",
            Outcome::Skipped => "skipped",
        }
    }
}

/// A test that could not run here, and said why.
pub struct Skip {
    pub test: String,
    pub reason: String,
    /// Under `CI=true` the skip failed the test instead.
    pub failed: bool,
}

/// What one binary did.
#[derive(Default)]
pub struct BinaryResult {
    pub tests: BTreeMap<String, Outcome>,
    /// Each finished test's time, as libtest's `--report-time` gives it.
    pub seconds_per_test: BTreeMap<String, f64>,
    pub skips: Vec<Skip>,
    /// Its exit status; `None` when it never ended (the VM stopped).
    pub exit: Option<i32>,
    /// From its start to its end, in the guest's time.
    pub seconds: Option<f64>,
}

impl BinaryResult {
    /// A test ended with `outcome`; `result` is the rest of its line, with
    /// its time when reported.
    fn finished(&mut self, name: String, outcome: Outcome, result: &str) {
        if let Some(t) = reported_time(result) {
            self.seconds_per_test.insert(name.clone(), t);
        }
        self.tests.insert(name, outcome);
    }
}

/// The guest's output, read as it comes.
pub struct Results {
    pub labels: Vec<String>,
    pub binaries: Vec<BinaryResult>,
    pub tally: Tally,
    current: Option<usize>,
    /// A test whose `test x ... ` line was cut by a skip line: its result
    /// comes on a line of its own.
    pending: Option<String>,
}

impl Results {
    pub fn new(binaries: &[TestBinary]) -> Self {
        Self {
            labels: binaries.iter().map(|b| b.label.clone()).collect(),
            binaries: binaries.iter().map(|_| BinaryResult::default()).collect(),
            tally: Tally::default(),
            current: None,
            pending: None,
        }
    }

    /// One line of the guest's output.
    pub fn line(&mut self, l: &str) {
        self.tally.line(l);
        if let Some(rest) = l.strip_prefix("xtask: running ") {
            // `<label> (<n>/<total>)`
            self.current = rest
                .rsplit_once(" (")
                .and_then(|(_, n)| n.split('/').next()?.parse::<usize>().ok())
                .and_then(|n| n.checked_sub(1));
            return;
        }
        let Some(b) = self.current.and_then(|i| self.binaries.get_mut(i)) else {
            return;
        };
        if let Some((test, reason)) = crate::tally::skip(l) {
            b.skips.push(Skip {
                test: test.to_owned(),
                reason: reason.to_owned(),
                failed: false,
            });
        }
        // tests/support/skip.rs's panic under CI=true.
        if let Some(rest) = l.strip_prefix("kernel test ") {
            if let Some((test, reason)) = rest.split_once(" may not skip under CI=true: ") {
                b.skips.push(Skip {
                    test: test.to_owned(),
                    reason: reason.to_owned(),
                    failed: true,
                });
            }
        }
        let outcome = |result: &str| match result.split([' ', ',']).next() {
            Some("ok") => Some(Outcome::Passed),
            Some("FAILED") => Some(Outcome::Failed),
            Some("ignored") => Some(Outcome::Ignored),
            _ => None,
        };
        if let Some((name, result)) = l.strip_prefix("test ").and_then(|r| r.split_once(" ... ")) {
            // A skip line of another test may follow the result on its line.
            let result = result.split("skipped: ").next().unwrap_or(result);
            match outcome(result) {
                Some(o) => b.finished(name.to_owned(), o, result),
                None => self.pending = Some(name.to_owned()),
            }
        } else if let Some(o) = outcome(l.trim()) {
            if let Some(name) = self.pending.take() {
                b.finished(name, o, l);
            }
        }
    }

    /// The `n` slowest tests of all binaries, slowest first, as
    /// `binary: test seconds`.
    pub fn slowest(&self, n: usize) -> Vec<String> {
        let mut all: Vec<(f64, String)> = self
            .labels
            .iter()
            .zip(&self.binaries)
            .flat_map(|(l, b)| {
                b.seconds_per_test
                    .iter()
                    .map(move |(t, s)| (*s, format!("{l}: {t} {s:.1}")))
            })
            .collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0));
        all.into_iter().take(n).map(|(_, s)| s).collect()
    }

    /// Read the guest's status file: each binary's exit status and time.
    pub fn status(&mut self, text: &str) {
        let mut started: BTreeMap<usize, f64> = BTreeMap::new();
        for l in text.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| w.get(i).and_then(|s| s.parse::<usize>().ok());
            let t = |i: usize| w.get(i).and_then(|s| s.parse::<f64>().ok());
            match w.first() {
                Some(&"start") => {
                    if let (Some(n), Some(t)) = (n(1), t(2)) {
                        started.insert(n, t);
                    }
                }
                Some(&"end") => {
                    let (Some(n), Some(rc), Some(t)) =
                        (n(1), w.get(2).and_then(|s| s.parse().ok()), t(3))
                    else {
                        continue;
                    };
                    if let Some(b) = n.checked_sub(1).and_then(|i| self.binaries.get_mut(i)) {
                        b.exit = Some(rc);
                        b.seconds = started.get(&n).map(|s| t - s);
                    }
                }
                _ => {}
            }
        }
        // A skipped test is one whose skip line names it (by its name or
        // the last part of its path).
        for b in &mut self.binaries {
            for skip in b.skips.iter().filter(|s| !s.failed) {
                for (name, outcome) in &mut b.tests {
                    let named = *name == skip.test || name.ends_with(&format!("::{}", skip.test));
                    if named && *outcome == Outcome::Passed {
                        *outcome = Outcome::Skipped;
                    }
                }
            }
        }
    }

    /// The binaries that failed: a non-zero exit, or no end at all.
    pub fn failed(&self) -> Vec<String> {
        self.labels
            .iter()
            .zip(&self.binaries)
            .filter_map(|(l, b)| match b.exit {
                Some(0) => None,
                Some(124) => Some(format!("{l} (timed out)")),
                Some(rc) => Some(format!("{l} (exit {rc})")),
                None => Some(format!("{l} (did not finish)")),
            })
            .collect()
    }

    /// The results as JSON, for a later step (the README's kernel table).
    pub fn to_json(
        &self,
        kernel: &str,
        source: &Path,
        boot: Option<f64>,
        args: &[String],
    ) -> Value {
        let binaries: Vec<Value> = self
            .labels
            .iter()
            .zip(&self.binaries)
            .map(|(l, b)| {
                let per_test: serde_json::Map<String, Value> = b
                    .seconds_per_test
                    .iter()
                    .map(|(n, s)| (n.clone(), json!(tenths(*s))))
                    .collect();
                json!({"name": l, "exit": b.exit, "seconds": b.seconds.map(tenths), "seconds_per_test": per_test})
            })
            .collect();
        let tests: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .zip(&self.binaries)
            .map(|(l, b)| {
                let t: serde_json::Map<String, Value> = b
                    .tests
                    .iter()
                    .map(|(n, o)| (n.clone(), json!(o.name())))
                    .collect();
                (l.clone(), Value::Object(t))
            })
            .collect();
        let skips: Vec<Value> = self
            .labels
            .iter()
            .zip(&self.binaries)
            .flat_map(|(l, b)| {
                b.skips.iter().map(move |s| {
                    json!({"binary": l, "test": s.test, "reason": s.reason, "failed_under_ci": s.failed})
                })
            })
            .collect();
        json!({
            "kernel": kernel,
            "source": source.display().to_string(),
            "boot_seconds": boot.map(tenths),
            "test_args": args,
            "passed": self.tally.passed,
            "failed": self.tally.failed,
            "skipped": self.tally.skipped,
            "binaries": binaries,
            "tests": tests,
            "skips": skips,
        })
    }
}

/// The time at the end of a result (`ok <12.345s>`), if reported.
fn reported_time(result: &str) -> Option<f64> {
    let (_, t) = result.trim_end().strip_suffix("s>")?.rsplit_once('<')?;
    t.parse().ok()
}

/// Seconds to a tenth.
fn tenths(s: f64) -> f64 {
    (s * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_newlines() {
        assert_eq!(sh_quote(OsStr::new("a'b\nc")), b"'a'\\''b\nc'".to_vec());
    }

    #[test]
    fn lines_land_in_their_binary() {
        let bins = ["net", "filesystem"].map(|l| TestBinary {
            label: l.into(),
            argv: vec![],
            cwd: "/".into(),
            env: vec![],
        });
        let mut r = Results::new(&bins);
        for l in [
            "xtask: running net (1/2)",
            "test a::b ... ok <12.345s>",
            "test c ... FAILED",
            "xtask: running filesystem (2/2)",
            "test d ... skipped: d: no bpffs",
            "ok",
            "test f ... okskipped: g: no Landlock records",
            "test g ... ok",
            "test e ... ignored, slow",
            "test result: ok. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out",
        ] {
            r.line(l);
        }
        r.status("boot 1.0\nstart 1 2.0\nend 1 101 5.5\nstart 2 5.5\n");
        assert!(r.binaries[1].tests["d"] == Outcome::Skipped);
        assert!(r.binaries[1].tests["f"] == Outcome::Passed);
        assert!(r.binaries[1].tests["g"] == Outcome::Skipped);
        assert_eq!(r.tally.skipped, 2);
        assert!(r.binaries[0].tests["a::b"] == Outcome::Passed);
        assert!(r.binaries[0].tests["c"] == Outcome::Failed);
        assert_eq!(r.binaries[0].exit, Some(101));
        assert_eq!(r.binaries[0].seconds, Some(3.5));
        assert_eq!(r.binaries[1].skips[0].reason, "no bpffs");
        assert!(r.binaries[1].tests["e"] == Outcome::Ignored);
        assert!((r.binaries[0].seconds_per_test["a::b"] - 12.345).abs() < 1e-9);
        assert!(!r.binaries[0].seconds_per_test.contains_key("c"));
        assert_eq!(r.slowest(5), ["net: a::b 12.3"]);
        assert_eq!(
            r.failed(),
            ["net (exit 101)", "filesystem (did not finish)"]
        );
    }
}
