//! The policy: every shipped file loads, `policy show` tells it, and what a
//! policy cannot hold or a bad one is refused with one line before anything
//! runs.
//!
//! - `shipped`: every policy in `policies/` loads.
//! - `cli`: the policy as people meet it (`policy show`, `--rules`).
//! - `refusals`: what a policy cannot hold is refused when it loads.
//! - `bad`: every bad policy is refused the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod support;

// The subjects, one file each in tests/policy/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod policy {
    mod bad;
    mod cli;
    mod refusals;
    mod shipped;
}
