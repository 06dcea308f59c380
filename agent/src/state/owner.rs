//! Who owns a run dir or a run's cgroup: a lockrun process, named by its
//! pid and start time so that a reused pid is not mistaken for it.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Who owns a run dir: a lockrun pid and its start time (clock ticks after
/// boot, field 22 of `/proc/<pid>/stat`), so a reused pid is not mistaken
/// for the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub start: u64,
}

impl Owner {
    /// This process (read once: the run dir's owner file and the run
    /// cgroup's attribute both name it).
    #[must_use]
    pub fn current() -> Self {
        static CURRENT: std::sync::OnceLock<Owner> = std::sync::OnceLock::new();
        *CURRENT.get_or_init(|| {
            let pid = std::process::id();
            Self {
                pid,
                start: start_time(pid).unwrap_or(0),
            }
        })
    }

    #[must_use]
    pub fn to_line(self) -> String {
        format!("{} {}\n", self.pid, self.start)
    }

    /// What a run cgroup records of its lockrun: the owner line with the
    /// pid namespace the pid belongs to, since the cgroup, unlike a run dir,
    /// is seen by every lockrun on the machine (`<pid> <start> <pidns>`).
    #[must_use]
    pub fn cgroup_tag(self) -> String {
        format!(
            "{} {} {}\n",
            self.pid,
            self.start,
            pid_namespace().unwrap_or(0)
        )
    }

    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.split_whitespace();
        Some(Self {
            pid: it.next()?.parse().ok()?,
            start: it.next()?.parse().ok()?,
        })
    }

    /// The owner a run dir names: its `owner` symlink's target.
    #[must_use]
    pub fn of_run_dir(dir: &Path) -> Option<Self> {
        std::fs::read_link(dir.join("owner"))
            .ok()
            .and_then(|target| target.to_str().and_then(Self::parse))
    }

    /// Whether this very process is still running.
    #[must_use]
    pub fn alive(self) -> bool {
        start_time(self.pid) == Some(self.start)
    }
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields after the comm start at field 3 (state); starttime is field 22.
    after.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// What a run cgroup's recorded owner ([`Owner::cgroup_tag`]) says, seen
/// from this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupOwner {
    Alive,
    Gone,
    /// Recorded by a lockrun in another pid namespace: its pid and start
    /// time cannot be checked from here, and it is never reaped from here.
    OtherPidNamespace,
    /// Not an owner tag.
    Unknown,
}

impl CgroupOwner {
    #[must_use]
    pub fn judge(tag: &str) -> Self {
        let Some(owner) = Owner::parse(tag) else {
            return Self::Unknown;
        };
        let Some(ns) = tag.split_whitespace().nth(2).and_then(|n| n.parse().ok()) else {
            return Self::Unknown;
        };
        if pid_namespace() != Some(ns) {
            Self::OtherPidNamespace
        } else if owner.alive() {
            Self::Alive
        } else {
            Self::Gone
        }
    }
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`).
fn pid_namespace() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_round_trips_and_is_alive() {
        let me = Owner::current();
        assert_eq!(Owner::parse(&me.to_line()), Some(me));
        assert!(me.alive());
        assert!(!Owner {
            start: me.start + 1,
            ..me
        }
        .alive());
    }

    #[test]
    fn a_cgroup_owner_is_judged_only_in_its_own_pid_namespace() {
        let me = Owner::current();
        let ns = pid_namespace().unwrap();
        assert_eq!(CgroupOwner::judge(&me.cgroup_tag()), CgroupOwner::Alive);
        let gone = Owner {
            start: me.start + 1,
            ..me
        };
        assert_eq!(CgroupOwner::judge(&gone.cgroup_tag()), CgroupOwner::Gone);
        // The same dead-looking owner, recorded in another namespace.
        let elsewhere = format!("{} {} {}\n", gone.pid, gone.start, ns + 1);
        assert_eq!(
            CgroupOwner::judge(&elsewhere),
            CgroupOwner::OtherPidNamespace
        );
        // A bare owner line (no namespace) and junk say nothing.
        assert_eq!(CgroupOwner::judge(&gone.to_line()), CgroupOwner::Unknown);
        assert_eq!(CgroupOwner::judge("x"), CgroupOwner::Unknown);
    }
}
