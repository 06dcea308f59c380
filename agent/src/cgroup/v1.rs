//! A run's cgroups in the v1 hierarchies of hybrid hosts (as this VM),
//! where the pids and memory controllers are bound to v1 hierarchies, not
//! to the unified one: `<hierarchy>/lockrun/<run-id>`, which the command's
//! process joins itself, before it is confined or runs anything, by
//! writing `0` to its `tasks` ([`V1Cgroup::take_join`]).
//!
//! That moves the calling thread alone, which takes no global lock; a write
//! to `cgroup.procs` moves a whole thread group and waits out an RCU grace
//! period (~5 ms here). Every process the command starts is born there.
//! Nothing of the run can leave: moving needs write access to another
//! `tasks` file, which Landlock refuses.
//!
//! A run makes its unified cgroup before its v1 ones and removes it first:
//! a v1 cgroup whose run has no unified cgroup is an orphan
//! ([`reap_orphans`]).

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::{CgroupError, PARENT};

/// A v1 hierarchy lockrun uses, by the controller bound to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    Pids,
    Memory,
}

impl Hierarchy {
    pub const ALL: [Self; 2] = [Self::Pids, Self::Memory];

    /// The controller's name, as mount options and `/proc/<pid>/cgroup` say it.
    #[must_use]
    pub fn controller(self) -> &'static str {
        match self {
            Self::Pids => "pids",
            Self::Memory => "memory",
        }
    }

    /// What the controller limits of a run.
    #[must_use]
    pub fn limits(self) -> &'static str {
        match self {
            Self::Pids => "tasks",
            Self::Memory => "memory",
        }
    }

    /// The policy's `[run]` key for the limit.
    #[must_use]
    pub fn policy_key(self) -> &'static str {
        match self {
            Self::Pids => "max_tasks",
            Self::Memory => "max_memory",
        }
    }

    /// What a run's cgroup there holds, for gc's lines.
    #[must_use]
    pub fn what(self) -> &'static str {
        match self {
            Self::Pids => "task-limit",
            Self::Memory => "memory-limit",
        }
    }

    /// Where hybrid hosts mount it.
    fn usual(self) -> &'static Path {
        Path::new(match self {
            Self::Pids => "/sys/fs/cgroup/pids",
            Self::Memory => "/sys/fs/cgroup/memory",
        })
    }

    /// A file only a cgroup of this hierarchy has.
    fn own_file(self) -> &'static str {
        match self {
            Self::Pids => "pids.max",
            Self::Memory => "memory.limit_in_bytes",
        }
    }
}

/// Where `h` is mounted, if it is (found once per process). Every run on a
/// hybrid host asks: where an earlier run made `lockrun/` at the usual
/// place, a `stat` of a file only a cgroup of that hierarchy has says so;
/// else `/proc/self/mountinfo` is read (~0.1 ms here: the kernel formats
/// every mount for it).
pub fn mount(h: Hierarchy) -> Option<PathBuf> {
    static FOUND: [std::sync::OnceLock<Option<PathBuf>>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    FOUND[h as usize]
        .get_or_init(|| {
            let usual = h.usual();
            let made_before = nix::sys::statfs::statfs(usual)
                .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP_SUPER_MAGIC)
                && usual.join(PARENT).join(h.own_file()).exists();
            if made_before {
                return Some(usual.to_path_buf());
            }
            let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
            parse_mount(&info, h.controller())
        })
        .clone()
}

/// `lockrun doctor`: where a run's limit by `h`'s controller would be:
/// the run cgroup's own `limit_file`, where the unified hierarchy's root
/// delegates the controller, else a cgroup of `h`'s; an error where
/// neither is.
pub fn available(h: Hierarchy, limit_file: &str) -> Result<String, CgroupError> {
    let c = h.controller();
    let root = super::cgroup2_mount()?;
    let delegated = fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
    if delegated.split_whitespace().any(|d| d == c) {
        return Ok(format!(
            "the {c} controller of the unified hierarchy ({}): each run's cgroup has its {limit_file}",
            root.display()
        ));
    }
    let m = mount(h).ok_or(CgroupError::NoController(h))?;
    Ok(format!(
        "a v1 {c} hierarchy at {}: each run joins {}/{PARENT}/<run-id> before exec",
        m.display(),
        m.display()
    ))
}

/// The first mount of a v1 cgroup hierarchy whose super options name
/// `controller`.
fn parse_mount(info: &str, controller: &str) -> Option<PathBuf> {
    super::mounts(info).find_map(|(at, fstype, options)| {
        (fstype == "cgroup" && options.split(',').any(|o| o == controller)).then_some(at)
    })
}

/// A run's cgroup in a v1 hierarchy, and its `tasks` opened for the
/// command to join (until handed to it). Dropped before
/// [`Self::remove`] or [`Self::leave`], it is removed (an early error).
#[derive(Debug)]
pub struct V1Cgroup {
    dir: PathBuf,
    join: Option<OwnedFd>,
    removed: bool,
}

impl V1Cgroup {
    /// `<mount>/lockrun/<run_id>`, made, with each `(file, value)` of
    /// `settings` written in order.
    pub fn create(
        mount: &Path,
        run_id: &str,
        settings: &[(&str, String)],
    ) -> Result<Self, CgroupError> {
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
        let mut cg = Self {
            dir,
            join: None,
            removed: false,
        };
        for (file, value) in settings {
            super::write_file(&cg.dir.join(file), value.as_bytes())?;
        }
        let tasks = cg.dir.join("tasks");
        let join = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tasks)
            .map_err(|source| CgroupError::Open {
                path: tasks,
                source,
            })?;
        cg.join = Some(join.into());
        Ok(cg)
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The `tasks` file the command's process writes `0` to, before it
    /// runs anything.
    pub fn take_join(&mut self) -> Option<OwnedFd> {
        self.join.take()
    }

    /// Left as it is, to `lockrun gc` ([`reap_orphans`]), with the run's
    /// cgroup.
    pub fn leave(mut self) {
        self.removed = true;
    }

    /// Teardown, once the run's cgroup is empty.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        super::remove_tree(&self.dir)
    }
}

/// On an early error, after the run's cgroup was killed and removed (a
/// field of [`super::RunCgroup`], it drops after it).
impl Drop for V1Cgroup {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = super::remove_tree(&self.dir) {
                tracing::warn!("cleaning up {}: {e}", self.dir.display());
            }
        }
    }
}

/// gc, and a run reaped: the v1 cgroups of `run_id`, where there are
/// some, removed (once its run's cgroup is gone, so is every process of it).
pub fn remove_run(run_id: &str) -> Result<(), CgroupError> {
    super::check_run_id(run_id)?;
    for h in Hierarchy::ALL {
        if let Some(m) = mount(h) {
            super::remove_tree(&m.join(PARENT).join(run_id))?;
        }
    }
    Ok(())
}

/// A v1 cgroup `lockrun gc` found without its run.
#[derive(Debug)]
pub struct Orphan {
    pub hierarchy: Hierarchy,
    pub run_id: String,
    /// Why it could not be removed (a process still in it); `None` once
    /// removed.
    pub kept: Option<io::Error>,
}

/// gc: the v1 cgroups (`<hierarchy>/lockrun/<run-id>`) whose run has no
/// cgroup in the unified hierarchy, removed: left by a lockrun killed
/// between removing the one and the other. One whose unified cgroup
/// exists is never touched.
#[must_use]
pub fn reap_orphans() -> Vec<Orphan> {
    let mut found = Vec::new();
    for hierarchy in Hierarchy::ALL {
        let Some(mount) = mount(hierarchy) else {
            continue;
        };
        let top = mount.join(PARENT);
        for run_id in crate::bpf::list_dir(&top) {
            if !matches!(super::find_run(&run_id), Ok(None)) {
                continue;
            }
            let kept = match fs::remove_dir(top.join(&run_id)) {
                Ok(()) => None,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => Some(e),
            };
            found.push(Orphan {
                hierarchy,
                run_id,
                kept,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_controller_names_its_limit_and_the_way_out() {
        let pids = CgroupError::NoController(Hierarchy::Pids).to_string();
        assert!(
            pids.starts_with("no cgroup pids controller for lockrun, which limits a run's tasks (run.max_tasks in the policy)")
                && pids.contains("echo +pids > <cgroup2>/cgroup.subtree_control")
                && pids.contains("set max_tasks = \"unlimited\""),
            "{pids}"
        );
        let memory = CgroupError::NoController(Hierarchy::Memory).to_string();
        assert!(
            memory.starts_with("no cgroup memory controller for lockrun, which limits a run's memory (run.max_memory in the policy)")
                && memory.contains("no v1 memory hierarchy is mounted")
                && memory.contains("set max_memory = \"unlimited\""),
            "{memory}"
        );
    }

    #[test]
    fn finds_a_v1_hierarchy_by_its_controller_only() {
        let hybrid = "25 24 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                      30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                      31 25 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                      32 25 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        assert_eq!(
            parse_mount(hybrid, "pids"),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            parse_mount(hybrid, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
        let pure = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(parse_mount(pure, "pids"), None);
        // A hierarchy named like the controller is not it.
        let named = "27 25 0:24 / /sys/fs/cgroup/x rw - cgroup cgroup rw,name=pids\n";
        assert_eq!(parse_mount(named, "pids"), None);
        let shared = "31 25 0:28 / /mnt/cg\\040pids rw - cgroup cgroup rw,pids,memory\n";
        assert_eq!(
            parse_mount(shared, "memory"),
            Some(PathBuf::from("/mnt/cg pids"))
        );
    }
}
