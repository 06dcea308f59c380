//! The run's memory limit ([`crate::policy::MemoryLimit`]): the cgroup
//! memory controller's limit over every process of the run together. At
//! the limit the kernel reclaims the run's own cache first, then kills a
//! process of the run (SIGKILL), never one outside; it counts each kill
//! (`oom_kill N`), which lockrun reads at the end and shows.
//!
//! Where the controller is:
//! - **cgroup v2** (pure v2 hosts, where systemd enables `memory` at the
//!   root): lockrun enables it in `lockrun/` and the build's parent and
//!   sets the run cgroup's `memory.max`, and `memory.swap.max` to 0 (so
//!   the run's memory and swap together stay within the limit). The
//!   command is forked straight into that cgroup.
//! - **a v1 memory hierarchy** (hybrid hosts, as this VM):
//!   `<cgroup>/lockrun/<run-id>`, beneath the cgroup lockrun is in there
//!   (so that its limits hold the run too), with `memory.limit_in_bytes` and, where
//!   swap is accounted, `memory.memsw.limit_in_bytes` (memory and swap
//!   together), both the limit; the command's process joins it before it
//!   runs anything ([`super::v1`]). Its memory is charged there from its
//!   `exec` on: before, it shares lockrun's (it is cloned with `CLONE_VM`),
//!   and what `exec` maps is the command's own.
//!
//! With neither, a run with a limit is refused (exit 125): the policy's
//! `max_memory = "unlimited"` is the one way to run without.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::v1::{self, Hierarchy, V1Cgroup};
use super::{CgroupError, RanOut, RunCgroup};
use crate::policy::MemoryLimit;

/// The run's memory limit, set.
#[derive(Debug)]
pub struct MemoryCap {
    /// In bytes, as written.
    limit: u64,
    place: Place,
}

#[derive(Debug)]
enum Place {
    /// The run's own cgroup, in the unified hierarchy.
    Unified(PathBuf),
    /// A cgroup of the run's own in a v1 memory hierarchy.
    V1(V1Cgroup),
    /// The run's task-limit cgroup, where one v1 hierarchy has both the
    /// pids and the memory controllers: removed with the task limit.
    WithTasks(PathBuf),
}

/// What the kernel counted of the run's memory, once it is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReport {
    /// The limit, in bytes.
    pub limit: u64,
    /// Processes of the run the kernel killed out of memory, wherever it
    /// ran out.
    pub oom_kills: u64,
    /// Where the memory ran out: at the run's limit, or above the run
    /// (the machine's memory, or a cgroup's lockrun is in).
    pub ran_out: RanOut,
    /// The most the run used at once, in bytes, where the kernel says.
    pub peak: Option<u64>,
}

impl RanOut {
    /// The most a v1 peak may lie below the limit when the kernel ran out
    /// at it: the charge that failed (a batch of 64 pages, or a 2 MiB huge
    /// page), and some.
    pub const V1_NEAR: u64 = 4 << 20;

    /// From v2's `memory.events`: its `oom` counts the times the cgroup's
    /// usage was at its `memory.max` and an allocation was about to fail
    /// (the kernel's own count; kills out of memory elsewhere leave it 0).
    #[must_use]
    pub fn from_v2_events(events: &str) -> Self {
        if super::counter(events, "oom") > 0 {
            Self::AtTheRunsLimit
        } else {
            Self::AboveTheRun
        }
    }

    /// From a v1 cgroup's peak (`max_usage_in_bytes`, of memory and swap
    /// where accounted): v1 keeps no count of the times the limit was hit
    /// where memory and swap are limited together (its `failcnt`s stay 0),
    /// so a peak within [`Self::V1_NEAR`] of the limit tells it. A kill
    /// out of memory elsewhere while the run was that near its limit reads
    /// as at it.
    #[must_use]
    pub fn from_v1_peak(peak: u64, limit: u64) -> Self {
        if peak.saturating_add(Self::V1_NEAR) >= limit {
            Self::AtTheRunsLimit
        } else {
            Self::AboveTheRun
        }
    }
}

impl MemoryCap {
    /// Limit `run`'s memory to `limit`, in whichever hierarchy has the
    /// memory controller. `None` for [`MemoryLimit::Unlimited`].
    pub fn set(
        run: &RunCgroup,
        run_id: &str,
        limit: MemoryLimit,
    ) -> Result<Option<Self>, CgroupError> {
        let total = nix::sys::sysinfo::sysinfo()
            .map_err(|e| CgroupError::Read {
                path: PathBuf::from("sysinfo(2)"),
                source: e.into(),
            })?
            .ram_total();
        let Some(bytes) = limit.bytes(total) else {
            return Ok(None);
        };
        if super::enable_in_unified(run, "memory", "memory.max")? {
            let dir = run.path().to_path_buf();
            super::write_file(&dir.join("memory.max"), bytes.to_string().as_bytes())?;
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                super::write_file(&swap, b"0")?;
            }
            return Ok(Some(Self {
                limit: bytes,
                place: Place::Unified(dir),
            }));
        }
        let Some(mount) = v1::mount(Hierarchy::Memory) else {
            return Err(CgroupError::NoController(Hierarchy::Memory));
        };
        let mut settings = vec![("memory.limit_in_bytes", bytes.to_string())];
        // Memory and swap together: without it, the run could go on in swap.
        // After the memory limit: the kernel keeps memsw at or above it.
        if mount.join("memory.memsw.limit_in_bytes").exists() {
            settings.push(("memory.memsw.limit_in_bytes", bytes.to_string()));
        }
        let place = match run.tasks_v1().filter(|p| p.starts_with(&mount)) {
            Some(shared) => {
                for (file, value) in &settings {
                    super::write_file(&shared.join(file), value.as_bytes())?;
                }
                Place::WithTasks(shared.to_path_buf())
            }
            None => Place::V1(V1Cgroup::create(Hierarchy::Memory, run_id, &settings)?),
        };
        Ok(Some(Self {
            limit: bytes,
            place,
        }))
    }

    /// The `tasks` file the command's process writes `0` to, before it
    /// runs anything (a v1 cgroup of its own only).
    pub fn take_join(&mut self) -> Option<OwnedFd> {
        match &mut self.place {
            Place::V1(cg) => cg.take_join(),
            Place::Unified(_) | Place::WithTasks(_) => None,
        }
    }

    /// What the kernel counted: the processes it killed at the limit, and
    /// the peak (read it once the run is over, before [`Self::remove`]).
    pub fn report(&self) -> Result<MemoryReport, CgroupError> {
        let read = |path: PathBuf| {
            fs::read_to_string(&path).map_err(|source| CgroupError::Read { path, source })
        };
        let (dir, v1) = match &self.place {
            Place::Unified(dir) => (dir.as_path(), false),
            Place::V1(cg) => (cg.path(), true),
            Place::WithTasks(dir) => (dir.as_path(), true),
        };
        let read_u64 =
            |file: &str| -> Option<u64> { read(dir.join(file)).ok()?.trim().parse().ok() };
        let (events, peak, ran_out) = if v1 {
            let events = read(dir.join("memory.oom_control"))?;
            let peak = read_u64("memory.max_usage_in_bytes");
            // Memory and swap together, where accounted: at least memory's.
            let both = read_u64("memory.memsw.max_usage_in_bytes");
            let highest = peak.max(both).unwrap_or(0);
            (events, peak, RanOut::from_v1_peak(highest, self.limit))
        } else {
            let events = read(dir.join("memory.events"))?;
            // memory.peak: Linux 5.19.
            let ran_out = RanOut::from_v2_events(&events);
            (events, read_u64("memory.peak"), ran_out)
        };
        Ok(MemoryReport {
            limit: self.limit,
            oom_kills: oom_kills(&events),
            ran_out,
            peak,
        })
    }

    /// Left as it is, to `lockrun gc` ([`v1::reap_orphans`]), with the run's cgroup.
    pub fn leave(self) {
        if let Place::V1(cg) = self.place {
            cg.leave();
        }
    }

    /// Teardown, once the run's cgroup is empty: a v1 cgroup of its own
    /// removed (the others go with the run's cgroup, or its task limit's).
    pub fn remove(self) -> Result<(), CgroupError> {
        match self.place {
            Place::V1(cg) => cg.remove(),
            Place::Unified(_) | Place::WithTasks(_) => Ok(()),
        }
    }
}

/// `lockrun doctor`: where a run's memory limit would be, said.
pub fn available() -> Result<String, CgroupError> {
    v1::available(Hierarchy::Memory, "memory.max")
}

/// `oom_kill N` of a `memory.events` (v2) or `memory.oom_control` (v1)
/// text: the processes of the cgroup the kernel killed out of memory,
/// wherever it ran out.
fn oom_kills(text: &str) -> u64 {
    super::counter(text, "oom_kill")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_oom_kills_in_either_hierarchys_file() {
        let v2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kills(v2), 2);
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(oom_kills(v1), 3);
        // `oom_group_kill` is not `oom_kill`.
        assert_eq!(oom_kills("oom_group_kill 4\n"), 0);
        assert_eq!(oom_kills(""), 0);
    }

    #[test]
    fn tells_the_runs_limit_from_memory_run_out_above_the_run() {
        let v2_at = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(RanOut::from_v2_events(v2_at), RanOut::AtTheRunsLimit);
        // Killed, the run never out of memory at its limit (`max`, its
        // usage reaching it, is reclaim's, not an OOM's).
        let v2_above = "low 0\nhigh 0\nmax 3\noom 0\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(RanOut::from_v2_events(v2_above), RanOut::AboveTheRun);
        assert_eq!(oom_kills(v2_above), 2);
        // `oom_kill` and `oom_group_kill` are not `oom`.
        assert_eq!(
            RanOut::from_v2_events("oom_kill 1\noom_group_kill 1\n"),
            RanOut::AboveTheRun
        );
        let limit = 64 << 20;
        assert_eq!(RanOut::from_v1_peak(limit, limit), RanOut::AtTheRunsLimit);
        assert_eq!(
            RanOut::from_v1_peak(limit - RanOut::V1_NEAR, limit),
            RanOut::AtTheRunsLimit
        );
        assert_eq!(
            RanOut::from_v1_peak(limit - RanOut::V1_NEAR - 4096, limit),
            RanOut::AboveTheRun
        );
        assert_eq!(RanOut::from_v1_peak(0, limit), RanOut::AboveTheRun);
    }
}
