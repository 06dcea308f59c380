//! A build's hooks, shared by its runs, never fail one run for another's
//! sake. Each test uses a build of its own (`LOCKRUN_TEST_BUILD_ID`).
//!
//! - `ring_slots`: a run's ring slot outlives neither its lockrun nor its processes.
//! - `second_bpffs`: a lockrun that sees another bpffs is refused, attaching nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

// The subjects, one file each in tests/builds/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod builds {
    mod ring_slots;
    mod second_bpffs;
}
