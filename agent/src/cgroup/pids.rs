//! The run's task limit ([`crate::policy::TaskLimit`]): the cgroup pids
//! controller's `pids.max` over every process and thread of the run. A
//! `fork` or `clone` beyond it gets `EAGAIN`; the kernel counts each in
//! `pids.events` (`max N`), which lockrun reads at the end and shows.
//!
//! Where the controller is:
//! - **cgroup v2** (pure v2 hosts, where systemd enables `pids` at the
//!   root): lockrun enables it in `lockrun/` and the build's parent
//!   (`+pids` in their `cgroup.subtree_control`; neither holds a process),
//!   and sets the run cgroup's own `pids.max`. The command is forked
//!   straight into that cgroup, so it is counted from its first
//!   instruction. The run's watchdog, in a cgroup beneath, is counted too:
//!   the limit written is one more than the policy's.
//! - **a v1 pids hierarchy** (hybrid hosts, as this VM: the controller is
//!   bound there, not to the unified hierarchy): `<cgroup>/lockrun/<run-id>`,
//!   beneath the cgroup lockrun is in there (so that its limit holds the
//!   run too), which the command's process joins before it runs anything
//!   ([`super::v1`]).
//!
//! With neither, a run with a limit is refused (exit 125): the policy's
//! `max_tasks = "unlimited"` is the one way to run without.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::v1::{self, Hierarchy, V1Cgroup};
use super::{CgroupError, RanOut, RunCgroup};
use crate::policy::TaskLimit;

/// The run's task limit, set.
#[derive(Debug)]
pub struct TaskCap {
    /// The policy's limit: what the run's own tasks may number.
    limit: u32,
    place: Place,
}

#[derive(Debug)]
enum Place {
    /// The run cgroup's `pids.events`, in the unified hierarchy.
    Unified { events: PathBuf },
    /// A cgroup of the run's own in a v1 pids hierarchy.
    V1(V1Cgroup),
}

impl TaskCap {
    /// Limit `run`'s tasks to `limit`, in whichever hierarchy has the pids
    /// controller. `None` for [`TaskLimit::Unlimited`].
    pub fn set(
        run: &RunCgroup,
        run_id: &str,
        limit: TaskLimit,
    ) -> Result<Option<Self>, CgroupError> {
        let TaskLimit::At(limit) = limit else {
            return Ok(None);
        };
        if let Some(cap) = Self::unified(run, limit)? {
            return Ok(Some(cap));
        }
        Self::v1(run_id, limit).map(Some)
    }

    /// In the unified hierarchy, if the controller is there for lockrun:
    /// enabled in `lockrun/` and the build's parent (once; the run cgroup
    /// then has `pids.max` from its mkdir).
    fn unified(run: &RunCgroup, limit: u32) -> Result<Option<Self>, CgroupError> {
        if !super::enable_in_unified(run, "pids", "pids.max")? {
            return Ok(None);
        }
        // One more than the policy's: the watchdog, beneath, counts here.
        let max = run.path().join("pids.max");
        super::write_file(&max, (u64::from(limit) + 1).to_string().as_bytes())?;
        Ok(Some(Self {
            limit,
            place: Place::Unified {
                events: run.path().join("pids.events"),
            },
        }))
    }

    fn v1(run_id: &str, limit: u32) -> Result<Self, CgroupError> {
        let cg = V1Cgroup::create(Hierarchy::Pids, run_id, &[("pids.max", limit.to_string())])?;
        Ok(Self {
            limit,
            place: Place::V1(cg),
        })
    }

    /// The policy's limit.
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The `tasks` file the command's process writes `0` to, before it
    /// runs anything (v1 only; in v2 it is forked into the limited cgroup).
    pub fn take_join(&mut self) -> Option<OwnedFd> {
        match &mut self.place {
            Place::V1(cg) => cg.take_join(),
            Place::Unified { .. } => None,
        }
    }

    /// The forks and clones refused so far (`pids.events`), and where the
    /// tasks ran out. In the unified hierarchy the run's `max` counts the
    /// refusals at its own limit only. A v1 cgroup's counts every fork of
    /// the run refused, at its limit or at a cgroup's above it (lockrun's
    /// caller's); the run's `pids.peak` (Linux 6.13) below its limit tells
    /// the second.
    pub fn refused(&self) -> Result<(u64, RanOut), CgroupError> {
        let (events, peak) = match &self.place {
            Place::Unified { events } => (events.clone(), None),
            Place::V1(cg) => (
                cg.path().join("pids.events"),
                Some(cg.path().join("pids.peak")),
            ),
        };
        let text = fs::read_to_string(&events).map_err(|source| CgroupError::Read {
            path: events.clone(),
            source,
        })?;
        let peak = peak.and_then(|p| fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
        Ok((max_events(&text), RanOut::from_task_peak(peak, self.limit)))
    }

    /// Left as it is, to `lockrun gc` ([`v1::reap_orphans`]), with the run's cgroup.
    pub fn leave(self) {
        if let Place::V1(cg) = self.place {
            cg.leave();
        }
    }

    /// Teardown, once the run's cgroup is empty: the v1 cgroup removed (the
    /// unified one goes with the run's cgroup).
    pub fn remove(self) -> Result<(), CgroupError> {
        match self.place {
            Place::V1(cg) => cg.remove(),
            Place::Unified { .. } => Ok(()),
        }
    }

    /// The v1 cgroup, where the limit is one (the memory limit shares it
    /// where one hierarchy has both controllers).
    pub(super) fn v1_path(&self) -> Option<&Path> {
        match &self.place {
            Place::V1(cg) => Some(cg.path()),
            Place::Unified { .. } => None,
        }
    }
}

/// `lockrun doctor`: where a run's task limit would be, said.
pub fn available() -> Result<String, CgroupError> {
    v1::available(Hierarchy::Pids, "pids.max")
}

impl RanOut {
    /// From a run's v1 `pids.peak`: a refused fork while the run had
    /// fewer tasks than its limit was refused above it. Without a peak
    /// (before Linux 6.13), at the limit, as before.
    #[must_use]
    pub fn from_task_peak(peak: Option<u64>, limit: u32) -> Self {
        match peak {
            Some(p) if p < u64::from(limit) => Self::AboveTheRun,
            _ => Self::AtTheRunsLimit,
        }
    }
}

/// `max N` of a `pids.events` text: the forks refused.
fn max_events(text: &str) -> u64 {
    super::counter(text, "max")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_below_the_limit_means_the_tasks_ran_out_above_the_run() {
        assert_eq!(RanOut::from_task_peak(Some(16), 16), RanOut::AtTheRunsLimit);
        assert_eq!(RanOut::from_task_peak(Some(15), 16), RanOut::AboveTheRun);
        assert_eq!(RanOut::from_task_peak(Some(0), 16), RanOut::AboveTheRun);
        assert_eq!(RanOut::from_task_peak(None, 16), RanOut::AtTheRunsLimit);
    }

    #[test]
    fn counts_refusals_from_pids_events() {
        assert_eq!(max_events("max 0\n"), 0);
        assert_eq!(max_events("max 37\n"), 37);
        assert_eq!(max_events(""), 0);
    }
}
