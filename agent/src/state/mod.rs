//! What tells whose a thing is and how old: the run dirs beneath the state
//! dir ([`run_dir`]), the lockrun that owns a run dir or a run's cgroup
//! ([`owner`]), and the age by which `lockrun gc` judges what it may reap.
//!
//! A leaf room: the mechanisms (the cgroup, the hooks) record and read
//! owners through it, and `run` and `lockrun gc` build on it.

pub mod membership;
pub mod owner;
pub mod run_dir;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use membership::{membership, unified, Membership};
pub use owner::{CgroupOwner, Owner};
pub use run_dir::{remove_old_spares, RunDir, RunDirError, SPARES, SPARES_KEPT};

/// A run id: unique and sortable by start time (`<secs>-<nanos>-<pid>; no dot: bpffs refuses names with one`).
#[must_use]
pub fn new_run_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{:012}-{:09}-{}",
        now.as_secs(),
        now.subsec_nanos(),
        std::process::id()
    )
}

/// How long ago `md`'s file was modified (zero if in the future).
#[must_use]
pub fn age(md: &std::fs::Metadata, now: SystemTime) -> Duration {
    md.modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_sort_by_start_time() {
        let a = new_run_id();
        std::thread::sleep(Duration::from_millis(2));
        let b = new_run_id();
        assert!(a < b, "{a} {b}");
        assert!(!a.contains('/'));
    }
}
