//! Writes, reads, the machine's secrets, metadata and crashes: the
//! filesystem promises, driving the real binary. Each escape is judged from
//! outside (file absent, canary unchanged) and asserts the errno the probe
//! got inside; a control beside it must succeed.
//!
//! - `writes`: only in the worktree, the temp dir and `--allow-write` paths.
//! - `reads`: everywhere but deny-read paths.
//! - `listing`: every readable dir listable, above a denied path too.
//! - `machine`: the machine's secrets, the kernel's log and filesystems, devices.
//! - `metadata`: changed only inside the writable roots.
//! - `crash`: a crash writes nothing outside.
//! - `git`: the worktree's git hooks and config put back; its lock.
//! - `fallbacks`: what an older kernel holds by another mechanism.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_wrap)]

mod support;

// The subjects, one file each in tests/filesystem/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod filesystem {
    mod crash;
    mod fallbacks;
    mod git;
    mod listing;
    mod machine;
    mod metadata;
    mod reads;
    mod writes;
}

use std::process::Command;

use support::world;

/// The probe's `op` outside any sandbox, in a process without capabilities
/// (as a run's command is, and any local user's process): it must succeed.
fn probe_without_caps(op: &[&str]) {
    let argv = world::probe_argv(&[op]);
    let control = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-all", "--"])
        .args(&argv)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&control.stdout),
        "ok\n",
        "{control:?}"
    );
}
