//! `lockrun audit`: what was refused, the line that would allow it.
//!
//! - `crafted_log`: on a crafted log with one refusal of each layer.
//! - `real_run`: on a real run's log; its suggested lines make the run succeed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod support;

// The subjects, one file each in tests/audit/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod audit {
    mod crafted_log;
    mod real_run;
}
