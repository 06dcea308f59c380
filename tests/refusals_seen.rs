//! Every refusal is seen: in the audit log and the summary, also where the
//! kernel's Landlock logs none (below ABI 7).
//!
//! - `filesystem`: filesystem refusals.
//! - `scope`: reaches outside the run (signals, abstract sockets, `/proc`).
//! - `read_only`: calls a read-only mount refuses (`EROFS`), which neither
//!   Landlock nor kernel audit's rules see.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod support;

// The subjects, one file each in tests/refusals_seen/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod refusals_seen {
    mod filesystem;
    mod read_only;
    mod scope;
}
