//! Where a task is against a run's cgroup, read from its
//! `/proc/<pid>/cgroup`: what tells a task of the run from one outside.
//! Pure reading, shared by the supervisor, the filesystem's lease checks,
//! the worktree lock and the audit of refused reaches.

/// Where a task is, against a run's cgroup, from its `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// In the run's cgroup, where its command and everything it starts are.
    InRun,
    /// In a cgroup beneath it (the watchdog's, lockrun's own).
    Beneath,
    /// Anywhere else, or nowhere in the unified hierarchy.
    Outside,
}

/// The cgroup v2 path in `proc_cgroup`, a `/proc/<pid>/cgroup` text: its
/// unified hierarchy's line (`0::`). A hybrid machine's v1 lines name
/// other hierarchies.
#[must_use]
pub fn unified(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// `proc_cgroup`, a `/proc/<pid>/cgroup` text, against `run`, the run's
/// cgroup as that file shows it (`/lockrun/build-<id>/<run-id>`,
/// `cgroup::RunCgroup::seen_in_proc`), by its [`unified`] line alone.
#[must_use]
pub fn membership(proc_cgroup: &str, run: &str) -> Membership {
    match unified(proc_cgroup) {
        Some(c) if c == run => Membership::InRun,
        Some(c) if c.strip_prefix(run).is_some_and(|r| r.starts_with('/')) => Membership::Beneath,
        _ => Membership::Outside,
    }
}

#[cfg(test)]
mod tests {
    use super::{membership, unified, Membership};

    #[test]
    fn membership_is_read_from_the_unified_line_alone() {
        let run = "/lockrun/build-1/r";
        let hybrid =
            "12:pids:/user.slice\n1:name=systemd:/lockrun/build-1/r\n0::/lockrun/build-1/r\n";
        assert_eq!(unified(hybrid), Some(run));
        assert_eq!(unified("1:name=systemd:/x\n"), None);
        assert_eq!(unified("0::/\n"), Some("/"));
        assert_eq!(membership(hybrid, run), Membership::InRun);
        assert_eq!(
            membership("0::/lockrun/build-1/r/watchdog\n", run),
            Membership::Beneath
        );
        // A prefix of the run's path is another cgroup.
        assert_eq!(
            membership("0::/lockrun/build-1/r2\n", run),
            Membership::Outside
        );
        assert_eq!(
            membership("1:name=systemd:/lockrun/build-1/r\n", run),
            Membership::Outside
        );
        assert_eq!(membership("0::/\n", run), Membership::Outside);
    }
}
