//! Why a refusal happened, in the audit log's own words: types its
//! producers fill in and it records. Where a run's processes met a limit
//! ([`crate::cgroup`] reads it), and a writable dir Landlock could grant
//! only in part ([`crate::fs`] plans it).

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a run's processes met a limit: the run's own, or one above the
/// run (a cgroup's lockrun is in; for memory, the machine's too). What
/// tells a user whether a higher limit of the run's would help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RanOut {
    /// At the run's own limit.
    #[default]
    AtTheRunsLimit,
    /// Above the run, which had not reached its own limit: a higher one
    /// would not have helped. For memory the run's processes were the
    /// kernel's first pick ([`crate::sys::OOM_SCORE_ADJ`]).
    AboveTheRun,
}

/// A writable dir that Landlock cannot grant whole, because a denied path
/// lies beneath it. Landlock only grants, and a right on a dir holds for
/// everything beneath, so the dir's entries are granted one by one instead:
/// they stay writable, but creating, removing or renaming an entry
/// directly in the dir needs a right on the dir itself, which it lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Narrowed {
    #[serde(serialize_with = "crate::shown::lossy::path")]
    pub dir: PathBuf,
    /// The denied paths beneath it.
    #[serde(serialize_with = "crate::shown::lossy::paths")]
    pub denied: Vec<PathBuf>,
}

/// `paths`, shown and joined with `, `.
fn joined(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

impl fmt::Display for Narrowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{dir} is writable but holds the denied {denied}: Landlock only grants, so nothing \
             can be created, removed or renamed directly in {dir} (what is in it stays writable); \
             keep what must not be read out of writable dirs",
            dir = self.dir.display(),
            denied = joined(&self.denied)
        )
    }
}
