//! What `lockrun gc` reaps, and the sweep each run makes at its start:
//! the one place that orders the reapers. Each mechanism keeps the reaper
//! of what it made; `lockrun gc` ([`crate::commands::gc`]) calls them in
//! this order:
//!
//! 1. run dirs whose lockrun is gone ([`gc`]), each with its run's cgroup
//!    ([`crate::cgroup::reap`]), then the run's entries in the hooks'
//!    shared maps ([`crate::bpf::registry::forget_runs`], [`crate::bpf::registry::forget_gone_runs`]);
//! 2. run cgroups no run dir accounts for ([`reap_orphan_cgroups`]);
//! 3. the kernel audit rules of runs whose cgroup is gone
//!    ([`crate::audit::syscalls::reap_stale`]);
//! 4. the v1 limit cgroups whose run's cgroup is gone
//!    ([`crate::cgroup::v1::reap_orphans`]);
//! 5. spare run dirs older than the grace period
//!    ([`crate::state::remove_old_spares`]);
//! 6. other builds' parent cgroups and pinned programs
//!    ([`crate::bpf::reap::reap_other_builds`]);
//! 7. worktree locks no run holds ([`crate::worktree_lock::sweep`]).
//!
//! A run's start sweeps too ([`sweep_at_start`]): step 1 alone, without
//! reading the owners of dirs within the grace period.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::chain;
use crate::shown::say;
use crate::state::{age, run_dir::remove_tree, CgroupOwner, Owner};
use crate::{bpf, cgroup};

/// What `gc` did.
#[derive(Debug, Default)]
pub struct GcReport {
    pub reaped: Vec<PathBuf>,
    pub kept_alive: usize,
    pub kept_young: usize,
}

/// Reap run dirs under `runs_dir` whose lockrun is gone, once older than
/// `grace` (by the dir's modification time). A missing `runs_dir` is empty.
/// Each dir's owner is read, to count the runs still going apart from the
/// young ones left alone (`lockrun gc` reports both).
pub fn gc(runs_dir: &Path, grace: Duration) -> std::io::Result<GcReport> {
    sweep(runs_dir, grace, true)
}

/// [`gc`] as a run's start makes it: a dir within the grace period is left
/// without reading its owner (two files per run going, which on a machine
/// running many agents every start would pay). Its report counts such a
/// dir as young, whether or not its lockrun is alive.
pub fn sweep_at_start(runs_dir: &Path, grace: Duration) -> std::io::Result<GcReport> {
    sweep(runs_dir, grace, false)
}

fn sweep(runs_dir: &Path, grace: Duration, owners_of_young: bool) -> std::io::Result<GcReport> {
    let mut report = GcReport::default();
    let entries = match std::fs::read_dir(runs_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now();
    let mut reaped_cgroups = Vec::new();
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let Ok(md) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !md.is_dir() {
            continue;
        }
        let young = age(&md, now) < grace;
        if young && !owners_of_young {
            report.kept_young += 1;
            continue;
        }
        let owner = Owner::of_run_dir(&path);
        if owner.is_some_and(Owner::alive) {
            report.kept_alive += 1;
            continue;
        }
        if young {
            report.kept_young += 1;
            continue;
        }
        // The run's processes and hooks first, then its files.
        if let Some(id) = path.file_name().and_then(|n| n.to_str()) {
            if !reap_run(id, &mut reaped_cgroups) {
                continue;
            }
        }
        remove_tree(&path);
        report.reaped.push(path);
    }
    // Their entries in the kernel's shared maps, exactly those.
    if let Err(e) = bpf::registry::forget_runs(&reaped_cgroups) {
        say!("lockrun: warning: gc: the shared hook maps: {}", chain(&e));
    }
    Ok(report)
}

/// A dead run's cgroup, removed (its processes killed first); its id goes
/// to `cgroup_ids`, for the shared maps (forgotten once for all the runs
/// reaped). `false`, with a warning said, when it could not be removed: a
/// later gc tries again.
fn reap_run(run_id: &str, cgroup_ids: &mut Vec<u64>) -> bool {
    match cgroup::reap(run_id) {
        Ok(id) => {
            cgroup_ids.extend(id);
            true
        }
        Err(e) => {
            say!(
                "lockrun: warning: gc: the cgroup of run {run_id}: {}",
                chain(&e)
            );
            false
        }
    }
}

/// What [`reap_orphan_cgroups`] did.
#[derive(Debug, Default)]
pub struct OrphanReport {
    /// Run ids whose cgroup was removed (its processes killed first).
    pub reaped: Vec<String>,
    /// Run cgroups with processes in them and no recorded owner (made by a
    /// lockrun before owners were recorded): left, they may be running.
    pub kept_unknown: Vec<String>,
    /// Run cgroups whose lockrun is in another pid namespace: left.
    pub kept_elsewhere: Vec<String>,
}

/// `lockrun gc`, after the run dirs: run cgroups that no run dir under this
/// state dir accounts for (the run's state dir is another, or was deleted,
/// or lockrun was killed before its teardown). One older than `grace` is
/// reaped when the lockrun recorded on it ([`crate::cgroup::Found::owner`])
/// is gone, or, with no owner recorded, when it is empty. A run's cgroup
/// is briefly empty at its start and at its end, so emptiness alone is not
/// enough for a cgroup whose owner is known, and for one whose owner is
/// not, only age makes it safe.
pub fn reap_orphan_cgroups(grace: Duration) -> std::io::Result<OrphanReport> {
    let mut report = OrphanReport::default();
    let found = cgroup::run_cgroups().map_err(std::io::Error::other)?;
    let mut reaped_ids = Vec::new();
    for cg in found {
        if cg.age < grace {
            continue;
        }
        match cg.owner.as_deref().map(CgroupOwner::judge) {
            Some(CgroupOwner::Alive) => continue,
            // Its pid means nothing here; whether it runs cannot be told.
            Some(CgroupOwner::OtherPidNamespace) => {
                report.kept_elsewhere.push(cg.run_id);
                continue;
            }
            // No owner recorded (or unreadable): only an empty cgroup.
            Some(CgroupOwner::Unknown) | None if cg.populated => {
                report.kept_unknown.push(cg.run_id);
                continue;
            }
            Some(CgroupOwner::Gone | CgroupOwner::Unknown) | None => {}
        }
        if reap_run(&cg.run_id, &mut reaped_ids) {
            report.reaped.push(cg.run_id);
        }
    }
    if let Err(e) = bpf::registry::forget_runs(&reaped_ids) {
        say!("lockrun: warning: gc: the shared hook maps: {}", chain(&e));
    }
    Ok(report)
}

/// `lockrun gc`: also forget registered runs whose cgroup is gone by other
/// means (see [`crate::bpf::registry::forget_gone_runs`]).
pub fn forget_gone_runs() {
    if let Err(e) = bpf::registry::forget_gone_runs() {
        say!("lockrun: warning: gc: the shared hook maps: {}", chain(&e));
    }
}
