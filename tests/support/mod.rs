//! What the test binaries share, each declaring it once as `mod support;`.
//! The probes a run executes live beside this code (`*.py`, `*.c`).
//!
//! - [`world`]: a fresh worktree, state dir, home and outside dir per test,
//!   the real binary with the Python probe, and the judges from outside;
//!   a process outside, a lockrun in the background.
//! - [`net`]: a run built at the library level (cgroup, hooks, audit log),
//!   probes that join it, and sinks that judge from outside.
//! - [`net_world`]: a world per network test through the real binary, with
//!   the audit log's `kernel_network` events and what must be gone after.
//! - [`proxy`]: scratch dirs and test hosts in network namespaces.
//! - [`build`]: a lockrun build of a test's own.
//! - [`limits`]: what the task and memory limit tests read of a run.
//! - [`refused`]: a lockrun that must refuse, run so it cannot hurt.
//! - [`scratch_cli`]: a scratch dir for tests of the command line.
//! - [`watchdog`]: the run's watchdog, seen from outside.
//! - [`python`]: the interpreter the tests run.
//! - [`skip`]: a loud skip, refused under `CI=true`.
//! - [`slow`]: waits for what is bound to happen, stretched where tests run
//!   slower than natively.

// Every test binary compiles the whole module and uses the part its
// subject needs: what one binary leaves unused, another uses.
#![allow(dead_code, unused_imports)]
// Tests: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod build;
pub mod limits;
pub mod net;
pub mod net_world;
pub mod proxy;
pub mod python;
pub mod refused;
pub mod scratch_cli;
pub mod skip;
pub mod slow;
pub mod watchdog;
pub mod world;
