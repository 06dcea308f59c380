//! The run's cgroup v2: `<cgroup2>/lockrun/<run-id>`.
//!
//! CONTRACT (filled in by the cgroup/eBPF work).

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("not implemented yet")]
    Todo,
}

/// The run's own cgroup. The command joins it before its first instruction.
pub struct RunCgroup {
    path: PathBuf,
}

impl RunCgroup {
    pub fn create(run_id: &str) -> Result<Self, CgroupError> {
        let _ = run_id;
        Err(CgroupError::Todo)
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}
