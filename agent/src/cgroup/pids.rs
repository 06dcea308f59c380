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
//!   bound there, not to the unified hierarchy): `<pids>/lockrun/<run-id>`,
//!   which the command's process joins itself, before it is confined or
//!   runs anything, by writing `0` to its `tasks` ([`TaskCap::take_join`]).
//!   That moves the calling thread alone, which takes no global lock; a
//!   write to `cgroup.procs` moves a whole thread group and waits out an
//!   RCU grace period (~5 ms here). Every process the command starts is
//!   born there. Nothing of the run can leave: moving needs write access
//!   to another `tasks` file, which Landlock refuses.
//!
//! With neither, a run with a limit is refused (exit 125): the policy's
//! `max_tasks = "unlimited"` is the one way to run without.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::{CgroupError, RunCgroup, PARENT};
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
    /// A cgroup of the run's own in a v1 pids hierarchy, and its `tasks`
    /// opened for the command to join (until handed to it).
    V1 {
        dir: PathBuf,
        join: Option<OwnedFd>,
        removed: bool,
    },
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
        let Some(mount) = v1_mount() else {
            return Err(CgroupError::NoPids);
        };
        Self::v1(&mount, run_id, limit).map(Some)
    }

    /// In the unified hierarchy, if the controller is there for lockrun:
    /// enabled in `lockrun/` and the build's parent (once; the run cgroup
    /// then has `pids.max` from its mkdir).
    fn unified(run: &RunCgroup, limit: u32) -> Result<Option<Self>, CgroupError> {
        let max = run.path().join("pids.max");
        if !max.exists() {
            // `lockrun/` and the build's parent, top down: never the root,
            // which is the machine's to delegate.
            let mount = super::cgroup2_mount()?;
            let mut between: Vec<&Path> = run
                .path()
                .ancestors()
                .skip(1)
                .take_while(|d| *d != mount && d.starts_with(&mount))
                .collect();
            between.reverse();
            let Some(top) = between.first() else {
                return Ok(None);
            };
            let offered = fs::read_to_string(top.join("cgroup.controllers")).unwrap_or_default();
            if !offered.split_whitespace().any(|c| c == "pids") {
                return Ok(None);
            }
            for dir in between {
                super::write_file(&dir.join("cgroup.subtree_control"), b"+pids")?;
            }
        }
        // One more than the policy's: the watchdog, beneath, counts here.
        super::write_file(&max, (u64::from(limit) + 1).to_string().as_bytes())?;
        Ok(Some(Self {
            limit,
            place: Place::Unified {
                events: run.path().join("pids.events"),
            },
        }))
    }

    fn v1(mount: &Path, run_id: &str, limit: u32) -> Result<Self, CgroupError> {
        super::check_run_id(run_id)?;
        let top = mount.join(PARENT);
        match fs::create_dir(&top) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(CgroupError::Mkdir {
                    path: top,
                    source: e,
                })
            }
            _ => {}
        }
        let dir = top.join(run_id);
        fs::create_dir(&dir).map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => CgroupError::Exists(dir.clone()),
            _ => CgroupError::Mkdir {
                path: dir.clone(),
                source,
            },
        })?;
        // From here on, Drop removes it.
        let mut cap = Self {
            limit,
            place: Place::V1 {
                dir: dir.clone(),
                join: None,
                removed: false,
            },
        };
        super::write_file(&dir.join("pids.max"), limit.to_string().as_bytes())?;
        let tasks = dir.join("tasks");
        let join = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tasks)
            .map_err(|source| CgroupError::Open {
                path: tasks,
                source,
            })?;
        cap.place = Place::V1 {
            dir,
            join: Some(join.into()),
            removed: false,
        };
        Ok(cap)
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
            Place::V1 { join, .. } => join.take(),
            Place::Unified { .. } => None,
        }
    }

    /// The forks and clones refused at the limit so far (`pids.events`).
    pub fn refused(&self) -> Result<u64, CgroupError> {
        let path = match &self.place {
            Place::Unified { events } => events.clone(),
            Place::V1 { dir, .. } => dir.join("pids.events"),
        };
        let text = fs::read_to_string(&path).map_err(|source| CgroupError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(max_events(&text))
    }

    /// Left as it is, to `lockrun gc` ([`reap_v1_orphans`]), with the run's cgroup.
    pub fn leave(mut self) {
        if let Place::V1 { removed, .. } = &mut self.place {
            *removed = true;
        }
    }

    /// Teardown, once the run's cgroup is empty: the v1 cgroup removed (the
    /// unified one goes with the run's cgroup).
    pub fn remove(mut self) -> Result<(), CgroupError> {
        match &mut self.place {
            Place::V1 { dir, removed, .. } => {
                *removed = true;
                super::remove_tree(dir)
            }
            Place::Unified { .. } => Ok(()),
        }
    }
}

/// On an early error, after the run's cgroup was killed and removed (a
/// field of [`RunCgroup`], it drops after it).
impl Drop for TaskCap {
    fn drop(&mut self) {
        if let Place::V1 {
            dir,
            removed: false,
            ..
        } = &self.place
        {
            if let Err(e) = super::remove_tree(dir) {
                tracing::warn!("cleaning up {}: {e}", dir.display());
            }
        }
    }
}

/// `lockrun doctor`: where a run's task limit would be, said.
pub fn available() -> Result<String, CgroupError> {
    let root = super::cgroup2_mount()?;
    let delegated = fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
    if delegated.split_whitespace().any(|c| c == "pids") {
        return Ok(format!(
            "the pids controller of the unified hierarchy ({}): each run's cgroup has its pids.max",
            root.display()
        ));
    }
    v1_mount()
        .map(|m| {
            format!(
                "a v1 pids hierarchy at {}: each run joins {}/{PARENT}/<run-id> before exec",
                m.display(),
                m.display()
            )
        })
        .ok_or(CgroupError::NoPids)
}

/// `max N` of a `pids.events` text: the forks refused at the limit.
fn max_events(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("max "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Where hybrid hosts mount the v1 pids hierarchy.
const USUAL_V1: &str = "/sys/fs/cgroup/pids";

/// Where a v1 hierarchy with the pids controller is mounted, if one is
/// (found once per process). Every run on a hybrid host asks: where an
/// earlier run made `lockrun/` at the usual place, a `stat` of its
/// `pids.max`, which only a cgroup of the pids hierarchy has, says so;
/// else `/proc/self/mountinfo` is read (~0.1 ms here: the kernel formats
/// every mount for it).
pub fn v1_mount() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let usual = Path::new(USUAL_V1);
            let made_before = nix::sys::statfs::statfs(usual)
                .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP_SUPER_MAGIC)
                && usual.join(PARENT).join("pids.max").exists();
            if made_before {
                return Some(usual.to_path_buf());
            }
            let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
            parse_v1_pids_mount(&info)
        })
        .clone()
}

/// The first mount of a v1 cgroup hierarchy whose super options name
/// `pids`.
fn parse_v1_pids_mount(info: &str) -> Option<PathBuf> {
    super::mounts(info).find_map(|(at, fstype, options)| {
        (fstype == "cgroup" && options.split(',').any(|o| o == "pids")).then_some(at)
    })
}

/// gc, and a run reaped: the v1 task cgroup of `run_id`, if there is one,
/// removed (once its run's cgroup is gone, so is every process of it).
pub fn remove_v1(run_id: &str) -> Result<(), CgroupError> {
    super::check_run_id(run_id)?;
    match v1_mount() {
        Some(mount) => super::remove_tree(&mount.join(PARENT).join(run_id)),
        None => Ok(()),
    }
}

/// gc: the v1 task cgroups (`<pids>/lockrun/<run-id>`) whose run has no
/// cgroup in the unified hierarchy, removed: left by a lockrun killed
/// between removing the one and the other. A run makes its unified cgroup
/// before its v1 one and removes it first, so one whose unified cgroup
/// exists is never touched. The run ids of those removed, and of those
/// that could not be (a process still in one), with why.
#[must_use]
pub fn reap_v1_orphans() -> (Vec<String>, Vec<(String, io::Error)>) {
    let Some(mount) = v1_mount() else {
        return (Vec::new(), Vec::new());
    };
    let top = mount.join(PARENT);
    let (mut reaped, mut kept) = (Vec::new(), Vec::new());
    for run_id in crate::bpf::list_dir(&top) {
        if !matches!(super::find_run(&run_id), Ok(None)) {
            continue;
        }
        match fs::remove_dir(top.join(&run_id)) {
            Ok(()) => reaped.push(run_id),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => kept.push((run_id, e)),
        }
    }
    (reaped, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_v1_pids_hierarchy_only() {
        let hybrid = "25 24 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                      30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                      31 25 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n";
        assert_eq!(
            parse_v1_pids_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        let pure = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(parse_v1_pids_mount(pure), None);
        // A hierarchy named like the controller is not it.
        let named = "27 25 0:24 / /sys/fs/cgroup/x rw - cgroup cgroup rw,name=pids\n";
        assert_eq!(parse_v1_pids_mount(named), None);
        let shared = "31 25 0:28 / /mnt/cg\\040pids rw - cgroup cgroup rw,pids,memory\n";
        assert_eq!(
            parse_v1_pids_mount(shared),
            Some(PathBuf::from("/mnt/cg pids"))
        );
    }

    #[test]
    fn counts_refusals_from_pids_events() {
        assert_eq!(max_events("max 0\n"), 0);
        assert_eq!(max_events("max 37\n"), 37);
        assert_eq!(max_events(""), 0);
    }
}
