//! A fork bomb stops at the run; one run cannot drive the machine out of
//! memory: the run's task and memory limits, judged from outside by the
//! kernel's own counters and the audit log, each beside a control.
//!
//! - `tasks`: the task limit (`run.max_tasks`).
//! - `memory`: the memory limit (`run.max_memory`) and the OOM killer's pick.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

// The subjects, one file each in tests/limits/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod limits {
    mod memory;
    mod tasks;
}
