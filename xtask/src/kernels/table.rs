//! `cargo xtask kernels table [--check] [--results DIR]`: the README's table
//! of kernels × promises, made from the suite's results.
//!
//! Each `results-<run>.json` of `cargo xtask test --kernel` holds what
//! `lockrun doctor --json --no-canary` said inside that kernel before the
//! suite ran (`promises`: each promise, the mechanism holding it or its
//! gap) and the suite's tally. Of the runs booted with the usual LSMs, that
//! ran the whole suite to its end, the newest kernel of each series of the
//! matrix makes a column: a cell per promise, the mechanism in a few words,
//! and a last row with what the suite did under it. The table goes into
//! README.md between [`BEGIN`] and [`END`]; `--check` only compares.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

use super::fetch::MATRIX;
use super::vm;

/// The README's markers; the table is what lies between them.
pub const BEGIN: &str = "<!-- kernels:begin -->";
pub const END: &str = "<!-- kernels:end -->";

/// What the table reads of a results file (`Results::to_json`, and what
/// `run_suite` adds).
#[derive(Debug, Deserialize)]
pub struct RunResults {
    /// The kernel's release.
    pub kernel: String,
    /// The LSMs booted; runs from before it was recorded booted the usual.
    #[serde(default)]
    pub lsm: Option<String>,
    #[serde(default)]
    pub complete: bool,
    #[serde(default)]
    pub test_args: Vec<String>,
    #[serde(default)]
    pub only: Vec<String>,
    #[serde(default)]
    pub except: Vec<String>,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    #[serde(default)]
    pub binaries: Vec<BinaryExit>,
    /// `lockrun doctor --json` inside that kernel; `null` when it said
    /// nothing usable, absent in runs from before it was asked.
    #[serde(default)]
    pub promises: Option<Doctor>,
}

#[derive(Debug, Deserialize)]
pub struct BinaryExit {
    /// `None`: it never ended.
    pub exit: Option<i32>,
}

/// What `lockrun doctor --json` prints, as far as the table needs it.
#[derive(Debug, Deserialize)]
pub struct Doctor {
    pub release: String,
    /// 0 without Landlock.
    pub landlock_abi: u8,
    pub promises: Vec<PromiseJson>,
}

/// One promise as `doctor --json` tells it: `held_by` and `mechanism`, or
/// `gap` and `lacks`, or `no_landlock`.
#[derive(Debug, Deserialize)]
pub struct PromiseJson {
    pub promise: String,
    #[serde(default)]
    pub mechanism: Option<Mechanism>,
    #[serde(default)]
    pub gap: Option<String>,
    #[serde(default)]
    pub no_landlock: Option<String>,
}

/// The kinds of mechanism lockrun names (agent/src/kernel.rs's
/// `Mechanism`, by the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    Landlock,
    Supervisor,
    SupervisorAndUnixHooks,
    SupervisorAndUnixGuard,
    NodevMounts,
    ReadOnlyMounts,
    SyscallAudit,
}

/// What holds one promise under one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Held(Mechanism),
    Gap(String),
    NoLandlock,
}

impl Cell {
    fn of(p: &PromiseJson) -> Result<Self> {
        match (&p.mechanism, &p.gap, &p.no_landlock) {
            (Some(m), None, None) => Ok(Self::Held(*m)),
            (None, Some(g), None) => Ok(Self::Gap(g.clone())),
            (None, None, Some(_)) => Ok(Self::NoLandlock),
            _ => bail!(
                "promise {:?}: not exactly one of mechanism, gap, no_landlock",
                p.promise
            ),
        }
    }

    /// The cell's words: the same mechanism is said the same way everywhere.
    fn words(&self, abi: u8) -> String {
        match self {
            Self::Held(Mechanism::Landlock) => format!("Landlock (ABI {abi})"),
            Self::Held(Mechanism::Supervisor) => "supervisor".to_owned(),
            Self::Held(Mechanism::SupervisorAndUnixHooks) => {
                "supervisor + cgroup unix hooks".to_owned()
            }
            Self::Held(Mechanism::SupervisorAndUnixGuard) => "supervisor + unix guard".to_owned(),
            Self::Held(Mechanism::NodevMounts) => "`nodev` mounts".to_owned(),
            Self::Held(Mechanism::ReadOnlyMounts) => "read-only mounts".to_owned(),
            Self::Held(Mechanism::SyscallAudit) => "kernel audit records".to_owned(),
            Self::Gap(name) => format!("GAP: `{name}`"),
            Self::NoLandlock => "no Landlock: no run".to_owned(),
        }
    }
}

/// What the suite did under a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    AllPassed {
        passed: u64,
    },
    Skipped {
        passed: u64,
        skipped: u64,
    },
    Failed {
        failed: u64,
    },
    /// Test binaries that failed with no test failed (a crash, a time
    /// limit, no end).
    BinariesFailed {
        binaries: usize,
    },
}

impl Suite {
    fn of(r: &RunResults) -> Self {
        let binaries = r.binaries.iter().filter(|b| b.exit != Some(0)).count();
        if r.failed > 0 {
            Self::Failed { failed: r.failed }
        } else if binaries > 0 {
            Self::BinariesFailed { binaries }
        } else if r.skipped > 0 {
            Self::Skipped {
                passed: r.passed,
                skipped: r.skipped,
            }
        } else {
            Self::AllPassed { passed: r.passed }
        }
    }

    fn words(self) -> String {
        match self {
            Self::AllPassed { passed } => format!("all {passed} passed"),
            Self::Skipped { passed, skipped } => format!("{passed} passed, {skipped} skipped"),
            Self::Failed { failed } => format!("{failed} failed"),
            Self::BinariesFailed { binaries } => format!("{binaries} test binaries failed"),
        }
    }
}

/// Why a results file makes no column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unused {
    OtherLsm(String),
    Incomplete,
    /// `--only`, `--except` or test arguments: not the whole suite.
    Partial,
    NoPromises,
    /// The doctor's kernel is not the run's.
    OtherRelease(String),
    NotInMatrix,
}

impl std::fmt::Display for Unused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OtherLsm(lsm) => write!(f, "booted with lsm={lsm}, not {}", vm::LSM),
            Self::Incomplete => f.write_str("the VM stopped before the suite's end"),
            Self::Partial => {
                f.write_str("not the whole suite (--only, --except or arguments after --)")
            }
            Self::NoPromises => f.write_str(
                "no promises (lockrun doctor --json said nothing usable, or the run predates it)",
            ),
            Self::OtherRelease(r) => write!(f, "its promises are of another kernel, {r}"),
            Self::NotInMatrix => write!(
                f,
                "not a series of the matrix ({})",
                MATRIX.map(|s| s.name).join(", ")
            ),
        }
    }
}

/// One kernel's column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub series: &'static str,
    pub release: String,
    pub abi: u8,
    /// Each promise in the doctor's order.
    pub cells: Vec<(String, Cell)>,
    pub suite: Suite,
}

impl Column {
    /// The column a run makes, or why it makes none.
    pub fn of(r: &RunResults) -> Result<std::result::Result<Self, Unused>> {
        let lsm = r.lsm.as_deref().unwrap_or(vm::LSM);
        if lsm != vm::LSM {
            return Ok(Err(Unused::OtherLsm(lsm.to_owned())));
        }
        if !r.complete {
            return Ok(Err(Unused::Incomplete));
        }
        if !(r.only.is_empty() && r.except.is_empty() && r.test_args.is_empty()) {
            return Ok(Err(Unused::Partial));
        }
        let Some(doctor) = &r.promises else {
            return Ok(Err(Unused::NoPromises));
        };
        if doctor.release != r.kernel {
            return Ok(Err(Unused::OtherRelease(doctor.release.clone())));
        }
        let Some(series) = series_of(&r.kernel) else {
            return Ok(Err(Unused::NotInMatrix));
        };
        let cells = doctor
            .promises
            .iter()
            .map(|p| Ok((p.promise.clone(), Cell::of(p)?)))
            .collect::<Result<_>>()?;
        Ok(Ok(Self {
            series,
            release: r.kernel.clone(),
            abi: doctor.landlock_abi,
            cells,
            suite: Suite::of(r),
        }))
    }
}

/// The series of the matrix a release belongs to: its major and minor
/// (`6.12.117+deb13-amd64` → 6.12).
fn series_of(release: &str) -> Option<&'static str> {
    let v = version(release);
    let (major, minor) = (v.first()?, v.get(1)?);
    MATRIX
        .iter()
        .map(|s| s.name)
        .find(|name| *name == format!("{major}.{minor}"))
}

/// A release's numbers, in order (`6.1.0-57-amd64` → 6, 1, 0, 57): the
/// newer of a series is the greater.
fn version(release: &str) -> Vec<u64> {
    release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap_or(u64::MAX))
        .collect()
}

/// The newest column of each series, oldest series first.
pub fn newest(columns: Vec<Column>) -> Vec<Column> {
    let mut by_series: BTreeMap<usize, Column> = BTreeMap::new();
    for c in columns {
        let Some(at) = MATRIX.iter().position(|s| s.name == c.series) else {
            continue;
        };
        match by_series.get(&at) {
            Some(kept) if version(&kept.release) >= version(&c.release) => {}
            _ => {
                by_series.insert(at, c);
            }
        }
    }
    by_series.into_values().collect()
}

/// `s` safe in a Markdown table cell.
fn cell_text(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The table in Markdown: a row per promise (in the order the columns tell
/// them), a column per kernel, and the suite's row.
pub fn render(columns: &[Column]) -> String {
    let mut promises: Vec<&str> = Vec::new();
    for c in columns {
        for (p, _) in &c.cells {
            if !promises.contains(&p.as_str()) {
                promises.push(p);
            }
        }
    }
    let mut out = String::from("| promise |");
    for c in columns {
        let _ = write!(out, " {} (ABI {}) |", c.series, c.abi);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
    for p in promises {
        let _ = write!(out, "| {} |", cell_text(p));
        for c in columns {
            let words = c
                .cells
                .iter()
                .find(|(q, _)| q == p)
                .map_or_else(|| "(not told)".to_owned(), |(_, cell)| cell.words(c.abi));
            let _ = write!(out, " {words} |");
        }
        out.push('\n');
    }
    out.push_str("| suite under it |");
    for c in columns {
        let _ = write!(out, " {} |", c.suite.words());
    }
    out.push('\n');
    out
}

/// `readme` cut at the markers: before and with [`BEGIN`], between, and
/// from [`END`] on.
fn cut(readme: &str) -> Result<(&str, &str, &str)> {
    let begin = readme
        .find(BEGIN)
        .with_context(|| format!("README.md has no {BEGIN}"))?
        + BEGIN.len();
    let end = readme[begin..]
        .find(END)
        .with_context(|| format!("README.md has no {END} after {BEGIN}"))?
        + begin;
    Ok((&readme[..begin], &readme[begin..end], &readme[end..]))
}

/// `readme` with the text between the markers replaced by `table`.
pub fn with_table(readme: &str, table: &str) -> Result<String> {
    let (before, _, after) = cut(readme)?;
    Ok(format!("{before}\n{table}{after}"))
}

/// How two tables differ, briefly: `-` each line only `old` has, `+`
/// each line only `new` has.
pub fn difference(old: &str, new: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let mut out = String::new();
    for o in old.iter().filter(|l| !new.contains(l)) {
        let _ = writeln!(out, "- {o}");
    }
    for n in new.iter().filter(|l| !old.contains(l)) {
        let _ = writeln!(out, "+ {n}");
    }
    out
}

/// `cargo xtask kernels table`: the table of `results` (default
/// `target/kernels`) into README.md, or with `check`, whether it is there
/// (exit 1 when not).
pub fn table_cmd(root: &Path, results: Option<PathBuf>, check: bool) -> Result<ExitCode> {
    let dir = results.unwrap_or_else(|| super::out_dir(root));
    let mut columns = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("results-"))
        })
        .collect();
    files.sort();
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        let run: RunResults = serde_json::from_str(&text)
            .with_context(|| format!("{}: not the results of a kernel run", f.display()))?;
        match Column::of(&run).with_context(|| f.display().to_string())? {
            Ok(c) => columns.push(c),
            Err(why) => eprintln!("xtask: {}: left out: {why}", f.display()),
        }
    }
    let columns = newest(columns);
    if columns.is_empty() {
        bail!(
            "no results in {} make a column (see above); run `cargo xtask test --kernel SERIES` first",
            dir.display()
        );
    }
    for c in &columns {
        eprintln!("xtask: {}: {}", c.series, c.release);
    }
    let table = render(&columns);
    let path = root.join("README.md");
    let readme = std::fs::read_to_string(&path)?;
    let updated = with_table(&readme, &table)?;
    if updated == readme {
        eprintln!("xtask: README.md's kernel table is the results'");
        return Ok(ExitCode::SUCCESS);
    }
    if check {
        eprintln!("xtask: README.md's kernel table is not the results' (`cargo xtask kernels table` writes it):");
        eprint!("{}", difference(cut(&readme)?.1, cut(&updated)?.1));
        return Ok(ExitCode::FAILURE);
    }
    std::fs::write(&path, updated)?;
    eprintln!("xtask: wrote the kernel table into README.md");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests;
