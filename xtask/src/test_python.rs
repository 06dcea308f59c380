//! The tests' Python: a virtual environment of the machine's `python3`
//! (`target/<host>/tmp/python`, made once), first on the tests' `PATH`.
//!
//! What the machine installed into its Python never runs in a test's
//! interpreter start-up: a venv leaves the base's `site-packages` out, and
//! with them its `.pth` files (on this project's machines one imports
//! `certifi` at every start: 1.1 s of Python's 1.9 s under emulation, where
//! the probes start Python thousands of times). Nor does a version
//! manager's shim (pyenv's is a bash script of a dozen processes) run for a
//! `python3` a test's shell script names. The venv has pip (the package
//! manager tests install through it) and nothing else.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};

/// The `PATH` the tests get: the venv's `bin` first. Where no venv can be
/// made (a Python without `venv` or `ensurepip`), the machine's `PATH` as
/// it is, said once.
pub fn tests_path(tmp: &Path) -> Option<OsString> {
    let bin = match ensure(&tmp.join("python")) {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("xtask: the tests run the machine's python3 as it is: {e:#}");
            return None;
        }
    };
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).ok()
}

/// `dir` made a venv of the machine's `python3` unless it is one of the
/// same interpreter already; its `bin`.
fn ensure(dir: &Path) -> Result<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys; print(sys.executable); print(sys.version)",
        ])
        .output()
        .context("running python3")?;
    if !out.status.success() {
        bail!(
            "python3 -c failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let base = String::from_utf8_lossy(&out.stdout).into_owned();
    let made = dir.join(".made");
    let bin = dir.join("bin");
    if std::fs::read_to_string(&made).is_ok_and(|m| m == base) && bin.join("python3").exists() {
        return Ok(bin);
    }
    let exe = base.lines().next().unwrap_or_default();
    eprintln!(
        "xtask: making the tests' Python, a venv of {exe}, in {}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);
    let status = Command::new(exe)
        .args(["-I", "-m", "venv"])
        .arg(dir)
        .status()
        .with_context(|| format!("running {exe} -m venv"))?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(dir);
        bail!("{exe} -m venv {} failed ({status})", dir.display());
    }
    // Written last: a venv half made is made again.
    std::fs::write(&made, &base)?;
    Ok(bin)
}
