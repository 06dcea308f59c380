//! The kernel matrix (issue 56): the suite run inside other Linux kernels,
//! booted under qemu on this machine's own root filesystem.
//!
//! - `cargo xtask kernels fetch [SERIES…]`: downloads Debian's packages of
//!   the matrix (6.1, 6.12, 6.16, 6.18; [`fetch`]).
//! - `cargo xtask test --kernel K [--only BIN,…] [-- ARGS]`: builds the suite
//!   as the native run does, boots K, asks `lockrun doctor --json` what holds
//!   each promise there, and runs the test binaries inside, as root with
//!   `CI=true` ([`suite`], [`vm`]); closes with the native run's line, the
//!   kernel named.
//! - `cargo xtask kernels run K -- COMMAND…`: one command inside K.
//! - `cargo xtask kernels table [--check]`: README's table of kernels ×
//!   promises from the results ([`table`]).
//!
//! Downloads and what is made of them live in the cache: `target/kernels/`
//! (or `$LOCKRUN_KERNELS_DIR`, for worktrees that share one). Everything a
//! run leaves is under `target/kernels/`: its results
//! (`results-<release>.json`), the guest's output and console log. A run's
//! temporary dir there is removed when it ends, or by the next run when the
//! process that made it is gone.

pub mod cpio;
pub mod fetch;
pub mod image;
pub mod suite;
pub mod table;
pub mod vm;

use std::fs::File;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize as _;
use serde_json::Value;

use image::Kernel;
use suite::{Results, TestBinary};

/// Stage 2 of the guest (bash on the host's root): see the file.
const STAGE2: &str = include_str!("stage2.sh");

/// Guest memory: the overlay's writes live in it too.
const MEMORY: &str = "4G";
/// Guest CPUs: this machine's two, which other work shares.
const CPUS: u32 = 2;
/// Kernels of one `cargo xtask test` booted at once.
const TOGETHER: usize = 2;

/// The variable that stretches the tests' waits for what is bound to
/// happen (tests/support/slow.rs).
const SLOWDOWN: &str = "LOCKRUN_TEST_SLOWDOWN";

/// Its factor in a guest: software emulation (TCG) runs the suite many
/// times slower than natively, the more so on a busy machine
/// (docs/kernels.md); above the slowest seen.
const TCG_SLOWDOWN: &str = "30";

/// Where kernel packages are downloaded and prepared.
pub struct Cache {
    pub dir: PathBuf,
}

impl Cache {
    /// `$LOCKRUN_KERNELS_DIR`, else `<root>/target/kernels`.
    pub fn open(root: &Path) -> Result<Self> {
        let dir =
            std::env::var_os("LOCKRUN_KERNELS_DIR").map_or_else(|| out_dir(root), PathBuf::from);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the kernel cache {}", dir.display()))?;
        Ok(Self { dir })
    }

    pub fn debs(&self) -> PathBuf {
        self.dir.join("debs")
    }

    /// Where each kernel is extracted and made bootable.
    pub fn kernels(&self) -> PathBuf {
        self.dir.join("kernels")
    }

    /// The prepared kernel of a downloaded package.
    pub fn work_of_deb(&self, deb: &Path) -> PathBuf {
        let stem = deb.file_stem().unwrap_or_default();
        self.kernels().join(stem)
    }

    /// Remove what was made of a package that is gone.
    pub fn forget(&self, deb: &Path) {
        let _ = std::fs::remove_dir_all(self.work_of_deb(deb));
    }

    /// The cache's lock (downloads, extraction), held until dropped.
    pub fn lock(&self) -> Result<File> {
        let f = File::create(self.dir.join("lock"))?;
        if f.try_lock().is_err() {
            eprintln!(
                "xtask: waiting for another xtask using {}",
                self.dir.display()
            );
            f.lock()?;
        }
        Ok(f)
    }
}

/// `<root>/target/kernels`: results, logs, run dirs.
fn out_dir(root: &Path) -> PathBuf {
    root.join("target/kernels")
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// `cargo xtask kernels fetch [SERIES…]` (all of the matrix when none).
pub fn fetch_cmd(root: &Path, names: &[String]) -> Result<()> {
    let cache = Cache::open(root)?;
    let wanted = if names.is_empty() {
        fetch::MATRIX.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                fetch::series(n).with_context(|| {
                    format!("{n}: not a kernel of the matrix ({})", series_names())
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    for deb in fetch::fetch(&cache, &wanted)? {
        println!("{}", deb.display());
    }
    Ok(())
}

fn series_names() -> String {
    fetch::MATRIX
        .iter()
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `--kernel` value made bootable: a series of the matrix (downloaded if
/// not cached), a `.deb`, or an extracted package's directory.
fn kernel_of(cache: &Cache, spec: &str) -> Result<(Kernel, PathBuf)> {
    let source = if let Some(series) = fetch::series(spec) {
        match fetch::cached(cache, series) {
            Some(deb) => deb,
            None => fetch::fetch(cache, &[series])?
                .pop()
                .context("fetch returned no package")?,
        }
    } else {
        let p = PathBuf::from(spec);
        if !p.exists() {
            bail!(
                "--kernel {spec}: neither a kernel of the matrix ({}) nor a file or directory",
                series_names()
            );
        }
        std::fs::canonicalize(p)?
    };
    Ok((image::prepare(cache, &source)?, source))
}

/// Which test binaries run (`--only`, `--except`: their labels).
pub struct Choice {
    pub only: Vec<String>,
    pub except: Vec<String>,
}

/// How a kernel run is bounded.
pub struct RunLimits {
    /// The whole boot.
    pub total: Duration,
    /// Each test binary (command) inside.
    pub each: Duration,
    /// The LSMs to boot (`lsm=`), if not [`vm::LSM`]: a kernel without
    /// Landlock is one booted without it.
    pub lsm: Option<String>,
}

/// How a kernel's run is named in its results and logs: its release, and
/// the LSMs it booted if not the usual ones (`6.12.117+deb13-amd64-lsm-yama`).
fn run_name(release: &str, limits: &RunLimits) -> String {
    match &limits.lsm {
        Some(lsm) => format!("{release}-lsm-{}", lsm.replace(',', "+")),
        None => release.to_owned(),
    }
}

/// What runs inside each kernel.
struct Plan<'a> {
    binaries: &'a [TestBinary],
    choice: &'a Choice,
    /// Arguments after `--`, for every test binary.
    args: &'a [String],
    /// The lockrun binary the suite built, whose `doctor --json` tells
    /// what holds each promise there.
    lockrun: &'a Path,
}

/// `cargo xtask test --kernel …`: `cargo` is the native run's `cargo test`
/// without its `-- args`; it builds `lockrun`.
pub fn test(
    root: &Path,
    cargo: Command,
    kernels: &[String],
    choice: &Choice,
    args: &[String],
    limits: &RunLimits,
    lockrun: &Path,
) -> Result<ExitCode> {
    fetch::ensure_host_tools()?;
    let cache = Cache::open(root)?;
    let prepared = kernels
        .iter()
        .map(|k| kernel_of(&cache, k))
        .collect::<Result<Vec<_>>>()?;
    let out = out_dir(root);
    sweep_runs(&out);
    std::fs::create_dir_all(out.join("runs"))?;
    let records = out
        .join("runs")
        .join(format!("{}-records.jsonl", std::process::id()));
    let binaries = suite::collect(cargo, args, &records);
    let _ = std::fs::remove_file(&records);
    let mut binaries = suite::select(binaries?, &choice.only, &choice.except)?;
    // As in CI: a kernel test may not skip (tests/support/skip.rs). And
    // under emulation the tests' waits for what is bound to happen stretch
    // (tests/support/slow.rs), unless the caller set the factor.
    let slowdown = std::env::var(SLOWDOWN).unwrap_or_else(|_| TCG_SLOWDOWN.to_owned());
    // Each test's time, to see where a kernel's run goes: libtest's
    // `--report-time`, which it takes at run time under `RUSTC_BOOTSTRAP`
    // (set for the test binaries in the guest only, not for any build).
    for b in &mut binaries {
        b.env
            .retain(|(k, _)| k != "CI" && k != SLOWDOWN && k != "RUSTC_BOOTSTRAP");
        b.env.push(("CI".into(), "true".into()));
        b.env.push((SLOWDOWN.into(), slowdown.clone().into()));
        b.env.push(("RUSTC_BOOTSTRAP".into(), "1".into()));
        b.argv
            .splice(1..1, ["-Zunstable-options".into(), "--report-time".into()]);
    }
    install_agent_clis(&binaries);
    let plan = Plan {
        binaries: &binaries,
        choice,
        args,
        lockrun,
    };
    // This run's VMs, and no other's: two at a time, side by side. A guest
    // waits much of its time (the tests' runs, timers, its own I/O), so two
    // take little more than the slower one; its time is stretched for the
    // tests' waits (SLOWDOWN) either way.
    let _vms = vm::lock()?;
    let mut ok = true;
    for two in prepared.chunks(TOGETHER) {
        let each = std::thread::scope(|s| {
            let runs: Vec<_> = two
                .iter()
                .map(|(kernel, source)| {
                    let prefix = (two.len() > 1).then(|| format!("[{}] ", kernel.release));
                    let (out, plan) = (&out, &plan);
                    s.spawn(move || run_suite(out, kernel, source, plan, limits, prefix.as_deref()))
                })
                .collect();
            runs.into_iter()
                .map(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a kernel's run panicked")))
                })
                .collect::<Vec<_>>()
        });
        for r in each {
            ok &= r?;
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The guest has no network, and the `agents` tests install their CLIs
/// with npm into the target dir, which the guest sees: run the binary's
/// `--version` tests natively first, which install each CLI (and judge
/// it). A failure here is shown and left to the guest's run to tell.
fn install_agent_clis(binaries: &[TestBinary]) {
    let Some(b) = binaries.iter().find(|b| b.label == "agents") else {
        return;
    };
    eprintln!("xtask: the agent CLIs, installed on the host (the guest has no network): agents' --version tests, natively");
    let mut c = Command::new(&b.argv[0]);
    c.args(&b.argv[1..])
        .arg("version_shows_nothing_of_lockrun")
        .current_dir(&b.cwd)
        .env_clear()
        .envs(b.env.iter().map(|(k, v)| (k, v)));
    match c.status() {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("xtask: agents' --version tests natively: {s}; the guest's run will tell");
        }
        Err(e) => {
            eprintln!("xtask: agents' --version tests natively: {e}; the guest's run will tell");
        }
    }
}

/// Boot `kernel`, run the plan's binaries in it, print the closing line and
/// write the results; whether every binary passed.
fn run_suite(
    out: &Path,
    kernel: &Kernel,
    source: &Path,
    plan: &Plan,
    limits: &RunLimits,
    prefix: Option<&str>,
) -> Result<bool> {
    let binaries = plan.binaries;
    let release = &run_name(&kernel.release, limits);
    eprintln!(
        "xtask: booting {} ({} test binaries, qemu TCG, {CPUS} CPUs, {MEMORY}, lsm={})",
        kernel.release,
        binaries.len(),
        limits.lsm.as_deref().unwrap_or(vm::LSM)
    );
    let run = RunDir::new(out, release)?;
    let mut results = Results::new(binaries);
    let outcome = boot(kernel, &run.0, binaries, Some(plan.lockrun), limits, |l| {
        println!("{}{l}", prefix.unwrap_or_default());
        results.line(l);
    })?;
    let status = std::fs::read_to_string(run.0.join("share/status")).unwrap_or_default();
    results.status(&status);
    keep_logs(&run.0, out, release);
    let boot_s = outcome.boot.map(|d| d.as_secs_f64());
    let times: Vec<String> = results
        .labels
        .iter()
        .zip(&results.binaries)
        .filter_map(|(label, b)| Some(format!("{label} {:.1}", b.seconds?)))
        .collect();
    eprintln!("xtask: {release}: seconds per binary: {}", times.join(", "));
    eprintln!(
        "xtask: {release}: slowest tests (seconds): {}",
        results.slowest(12).join(", ")
    );
    eprintln!(
        "xtask: {release}: booted in {}, {:.1} s in all",
        boot_s.map_or_else(|| "(never)".to_owned(), |s| format!("{s:.1} s")),
        outcome.total.as_secs_f64()
    );
    let failed = results.failed();
    let vm_failed = !status.lines().any(|l| l == "done");
    let mut json = results.to_json(&kernel.release, source, boot_s, plan.args);
    json["only"] = plan.choice.only.clone().into();
    json["except"] = plan.choice.except.clone().into();
    json["promises"] = promises(&run.0.join("share/promises.json"), release);
    json["lsm"] = limits.lsm.as_deref().unwrap_or(vm::LSM).into();
    json["complete"] = (!vm_failed).into();
    json["timed_out"] = outcome.timed_out.into();
    let file = out.join(format!("results-{release}.json"));
    std::fs::write(&file, serde_json::to_string_pretty(&json)? + "\n")?;
    if outcome.timed_out {
        eprintln!(
            "xtask: {release}: timed out after {} s; killed the VM",
            limits.total.as_secs()
        );
    } else if vm_failed {
        eprintln!("xtask: {release}: the VM stopped before the plan finished; its console's end:");
        console_tail(&out.join(format!("console-{release}.log")));
    }
    if !failed.is_empty() {
        eprintln!("xtask: {release}: failed: {}", failed.join(", "));
    }
    let failed_at_least = u64::try_from(failed.len()).unwrap_or(u64::MAX);
    println!(
        "{}",
        results
            .tally
            .closing_line(failed_at_least, &format!(" (kernel {release})"))
    );
    Ok(failed.is_empty() && !vm_failed)
}

/// What `lockrun doctor --json` wrote in the guest (`file`), if it is a
/// doctor's report; else `null`, and said.
fn promises(file: &Path, release: &str) -> Value {
    let report = std::fs::read_to_string(file)
        .map_err(|e| format!("no {} ({e})", file.display()))
        .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
        .and_then(|v| match table::Doctor::deserialize(&v) {
            Ok(_) => Ok(v),
            Err(e) => Err(e.to_string()),
        });
    report.unwrap_or_else(|e| {
        eprintln!(
            "xtask: {release}: no promises: lockrun doctor --json wrote no report: {e} (see the output log)"
        );
        Value::Null
    })
}

/// The entries of the host's `/tmp` that the plan's binaries, their
/// working dirs and `lockrun` lie in (`fresh` for `/tmp/fresh/agent`).
fn under_tmp(binaries: &[TestBinary], lockrun: Option<&Path>) -> Vec<std::ffi::OsString> {
    let paths = binaries
        .iter()
        .flat_map(|b| [Path::new(&b.argv[0]), b.cwd.as_path()])
        .chain(lockrun);
    let mut names: Vec<_> = paths
        .filter_map(|p| p.strip_prefix("/tmp").ok()?.iter().next())
        .map(std::ffi::OsStr::to_os_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Boot `kernel` to run `binaries` (the plan) in the run dir `run`, after
/// `lockrun doctor --json` if given `lockrun`.
fn boot(
    kernel: &Kernel,
    run: &Path,
    binaries: &[TestBinary],
    lockrun: Option<&Path>,
    limits: &RunLimits,
    on_line: impl FnMut(&str),
) -> Result<vm::Outcome> {
    let share = run.join("share");
    std::fs::create_dir_all(&share)?;
    std::fs::write(share.join("stage2.sh"), STAGE2)?;
    std::fs::write(share.join("plan.sh"), suite::plan(binaries))?;
    let mut conf = Vec::new();
    for (k, v) in [
        ("RELEASE", kernel.release.as_bytes()),
        ("MODULES", kernel.modules.as_os_str().as_bytes()),
        ("TOTAL", binaries.len().to_string().as_bytes()),
        ("LIMIT", limits.each.as_secs().to_string().as_bytes()),
        (
            "LOCKRUN",
            lockrun.map_or(&[][..], |p| p.as_os_str().as_bytes()),
        ),
    ] {
        conf.extend_from_slice(k.as_bytes());
        conf.push(b'=');
        conf.extend(suite::sh_quote(std::ffi::OsStr::from_bytes(v)));
        conf.push(b'\n');
    }
    // The guest's /tmp is a disk of its own, over the host's: what the plan
    // runs from there (a clone in /tmp, a target dir) stays in sight.
    conf.extend_from_slice(b"KEEP_TMP=(");
    for name in under_tmp(binaries, lockrun) {
        conf.extend(suite::sh_quote(&name));
        conf.push(b' ');
    }
    conf.extend_from_slice(b")\n");
    std::fs::write(share.join("guest.conf"), conf)?;
    let vm_limits = vm::Limits {
        memory: MEMORY.to_owned(),
        cpus: CPUS,
        timeout: limits.total,
        lsm: limits.lsm.clone().unwrap_or_else(|| vm::LSM.to_owned()),
    };
    vm::boot(kernel, run, &vm_limits, on_line)
}

/// `cargo xtask kernels run K -- COMMAND…`: COMMAND inside K, as root, in
/// the current dir, with this environment; its exit status.
pub fn run_cmd(root: &Path, spec: &str, command: &[String], limit: Duration) -> Result<ExitCode> {
    fetch::ensure_host_tools()?;
    let cache = Cache::open(root)?;
    let (kernel, _) = kernel_of(&cache, spec)?;
    let out = out_dir(root);
    sweep_runs(&out);
    let run = RunDir::new(&out, &kernel.release)?;
    let binaries = [TestBinary {
        label: "command".to_owned(),
        argv: command.iter().map(Into::into).collect(),
        cwd: std::env::current_dir()?,
        env: std::env::vars_os().collect(),
    }];
    let limits = RunLimits {
        total: limit,
        each: limit,
        lsm: None,
    };
    let _vm = vm::lock()?;
    // Stage 2's lines about the command go to stderr, its output to stdout.
    let outcome = boot(&kernel, &run.0, &binaries, None, &limits, |l| {
        if l.starts_with("xtask: running command") || l.starts_with("xtask: command: ") {
            eprintln!("{l}");
        } else {
            println!("{l}");
        }
    })?;
    let status = std::fs::read_to_string(run.0.join("share/status")).unwrap_or_default();
    keep_logs(&run.0, &out, &kernel.release);
    let mut results = Results::new(&binaries);
    results.status(&status);
    eprintln!(
        "xtask: {}: booted in {}, {:.1} s in all",
        kernel.release,
        outcome.boot.map_or_else(
            || "(never)".to_owned(),
            |d| format!("{:.1} s", d.as_secs_f64())
        ),
        outcome.total.as_secs_f64()
    );
    if let Some(rc) = results.binaries[0].exit {
        return Ok(ExitCode::from(u8::try_from(rc).unwrap_or(1)));
    }
    if outcome.timed_out {
        eprintln!(
            "xtask: timed out after {} s; killed the VM",
            limit.as_secs()
        );
        return Ok(ExitCode::from(124));
    }
    eprintln!("xtask: the VM stopped before the command ended; its console's end:");
    console_tail(&out.join(format!("console-{}.log", kernel.release)));
    Ok(ExitCode::from(125))
}

/// A run's temporary dir, `target/kernels/runs/<pid>`, removed when dropped.
struct RunDir(PathBuf);

impl RunDir {
    /// `runs/<pid>-<name>`: this process's, one per kernel booted at once.
    fn new(out: &Path, name: &str) -> Result<Self> {
        let dir = out
            .join("runs")
            .join(format!("{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Remove what xtask processes that are gone (killed) left in `runs/`:
/// each entry is named for its process (`<pid>-<kernel>`, `<pid>-records.jsonl`).
fn sweep_runs(out: &Path) {
    for e in std::fs::read_dir(out.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid: String = name.chars().take_while(char::is_ascii_digit).collect();
        if pid.is_empty() || Path::new("/proc").join(&pid).exists() {
            continue;
        }
        let p = e.path();
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
}

/// Keep the guest's output and console log of the last run of a kernel.
fn keep_logs(run: &Path, out: &Path, release: &str) {
    let _ = std::fs::copy(
        run.join("share/output"),
        out.join(format!("output-{release}.log")),
    );
    let _ = std::fs::copy(
        run.join("console.log"),
        out.join(format!("console-{release}.log")),
    );
}

fn console_tail(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    for l in &lines[lines.len().saturating_sub(25)..] {
        eprintln!("  {l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The doctor's report goes into the results as it was written; what is
    /// not one (no file, not JSON, another object) is `null`.
    #[test]
    fn promises_are_the_doctors_report_or_null() {
        let dir = std::env::temp_dir().join(format!("xtask-promises-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("promises.json");
        let report = serde_json::json!({
            "release": "6.12.117+deb13-amd64",
            "landlock_abi": 6,
            "checks": [],
            "promises": [{"promise": "p", "held_by": "h", "mechanism": "supervisor"}],
            "canary": null,
        });
        std::fs::write(&file, serde_json::to_string_pretty(&report).unwrap()).unwrap();
        assert_eq!(promises(&file, "r"), report);
        for text in ["", "{\"release\": \"6.12\"", "{\"release\": \"6.12\"}"] {
            std::fs::write(&file, text).unwrap();
            assert_eq!(promises(&file, "r"), Value::Null, "{text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(promises(&file, "r"), Value::Null);
    }
}
