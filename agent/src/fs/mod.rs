//! Filesystem confinement with Landlock (ABI 7 pinned; kernel 6.x).
//!
//! CONTRACT (filled in by the fs work): prepared in the parent, applied in the
//! child after fork, before exec, without allocating.

use std::path::{Path, PathBuf};

use crate::policy::Policy;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("not implemented yet")]
    Todo,
    #[error("{path}: {source}")]
    Path {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A Landlock ruleset built in the parent, ready for `restrict_self` in the child.
pub struct FsSandbox {}

impl FsSandbox {
    /// Build the ruleset for `policy`, with `run_tmp` writable and every other
    /// run under `runs_dir` unreadable.
    pub fn prepare(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Result<Self, FsError> {
        let _ = (policy, run_tmp, runs_dir);
        Err(FsError::Todo)
    }
}
