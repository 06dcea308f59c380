//! No other process's state, IPC or terminal: a run reaches no process
//! outside it, driving the real binary, each attempt judged from outside
//! (the process alive and untraced, the object unchanged) beside a control.
//!
//! - `others`: signals, tracing, `/proc`, limits, scheduling, ports, leases, CPUs.
//! - `ipc`: abstract unix sockets, System V objects, shared memory.
//! - `terminals`: the caller's terminal as it was; the run's own terminals.
//! - `scope`: signals and abstract sockets, on a kernel with and without
//!   Landlock's scoping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_wrap)]

mod support;

// The subjects, one file each in tests/processes/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod processes {
    mod ipc;
    mod others;
    mod scope;
    mod terminals;
}
