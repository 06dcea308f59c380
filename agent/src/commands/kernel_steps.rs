//! `lockrun __kernel_steps --tmp DIR [policy options]`: the kernel's part of
//! a run on this machine, as plain lines, for the bench's floor
//! (`xtask/src/bench_floor.c`), which makes the same calls and nothing else:
//! the Landlock rules (built exactly as a run builds them, with `DIR` as the
//! temp dir), the run's own filesystems, the kernel filesystems hidden, the
//! machine's secrets masked, and the seccomp program a run loads.
//!
//! ```text
//! handled <fs rights>
//! rule <rights> <path>
//! own <rights> <path>    (a filesystem of the run's own, mounted there)
//! queues <rights>        (the run's mqueue fs, always made)
//! hide <path>
//! mask <dir|file> <path>
//! bpf <code> <jt> <jf> <k>
//! ```
//! Rights are Landlock access bits in hex; a path is the rest of its line.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use crate::cli::KernelStepsArgs;
use crate::exit;
use crate::fs::{
    grant_rights, handled_rights, hidden_mounts, machine_secrets, masks, FsSandbox, Mask, OwnFs,
};
use crate::seccomp::combined;
use crate::shown::say;

/// Print the steps; returns the exit status.
#[must_use]
pub fn run(args: &KernelStepsArgs) -> i32 {
    match steps(args) {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => {
            say!("lockrun: {e}");
            exit::SETUP
        }
    }
}

fn steps(args: &KernelStepsArgs) -> anyhow::Result<String> {
    let policy = super::run::load(&args.policy)?;
    let fs = FsSandbox::prepare(&policy, &args.tmp, &policy.runs_dir())?;
    let mut out = String::new();
    // A path with a newline cannot be a line; the bench's paths have none.
    let line = |p: &Path| !p.as_os_str().as_bytes().contains(&b'\n');
    writeln!(out, "handled {:#x}", handled_rights())?;
    for (path, grant) in fs.grants().iter().filter(|(p, _)| line(p)) {
        writeln!(out, "rule {:#x} {}", grant_rights(*grant), path.display())?;
    }
    for own in fs.own_filesystems() {
        writeln!(out, "own {:#x} {}", own.rights(), own.path().display())?;
    }
    writeln!(out, "queues {:#x}", OwnFs::MessageQueues.rights())?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    for hidden in hidden_mounts(&mountinfo).iter().filter(|p| line(p)) {
        writeln!(out, "hide {}", hidden.display())?;
    }
    for mask in masks(machine_secrets(), fs.writable_roots()) {
        let (kind, path) = match &mask {
            Mask::Dir(p) => ("dir", p),
            Mask::File(p) => ("file", p),
        };
        if line(path) {
            writeln!(out, "mask {kind} {}", path.display())?;
        }
    }
    for i in combined(crate::run::kernel().fallbacks())? {
        writeln!(out, "bpf {} {} {} {}", i.code, i.jt, i.jf, i.k)?;
    }
    Ok(out)
}
