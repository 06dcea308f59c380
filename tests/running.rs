//! A run as lockrun starts, confines and ends it, driving the real binary:
//! its command line and environment, refusals of a run that cannot be
//! confined, no way to widen the box from inside, and the run's end.
//!
//! - `command`: input, exit statuses, the command's path, environment and signals.
//! - `fail_closed`: a setup that cannot complete refuses the run (exit 125).
//! - `gaps`: a promise the kernel cannot hold refuses the run unless accepted.
//! - `no_widening`: no capabilities, `no_new_privs`, the seccomp deny list.
//! - `run_ends`: `lockrun gc` and each run's start reap what dead runs left.
//! - `stdio`: the caller's stdin, stdout and stderr, off the machine's writable mounts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_wrap)]

mod support;

// The subjects, one file each in tests/running/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod running {
    mod command;
    mod fail_closed;
    mod gaps;
    mod no_widening;
    mod run_ends;
    mod stdio;
}
