//! A run's cgroups in the v1 hierarchies of hybrid hosts (as this VM),
//! where the pids and memory controllers are bound to v1 hierarchies, not
//! to the unified one: `<cgroup>/lockrun/<run-id>`, beneath the cgroup
//! lockrun is in there ([`own`]), which the command's process joins
//! itself, before it is confined or runs anything, by writing `0` to its
//! `tasks` ([`V1Cgroup::take_join`]).
//!
//! Beneath lockrun's cgroup, not the hierarchy's root: the limits on
//! lockrun's caller and its ancestors (a service manager's, a CI job's)
//! hold the run too, and its memory and tasks count in their usage.
//!
//! That moves the calling thread alone, which takes no global lock; a write
//! to `cgroup.procs` moves a whole thread group and waits out an RCU grace
//! period. Every process the command starts is born there.
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
use crate::sys::dir_names;

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

/// Where `h` is mounted, and lockrun's own cgroup there (found once per
/// process).
#[derive(Debug, Clone)]
struct Found {
    mount: PathBuf,
    /// The directory of the cgroup lockrun is in (its caller's, as
    /// `/proc/self/cgroup` says it); the path it says where that is not
    /// within the part of the hierarchy mounted.
    own: Result<PathBuf, String>,
}

fn found(h: Hierarchy) -> Option<&'static Found> {
    static FOUND: [std::sync::OnceLock<Option<Found>>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    FOUND[h as usize].get_or_init(|| find(h)).as_ref()
}

/// Every run on a hybrid host asks. Where the hierarchy is at the usual
/// place, the cgroup `/proc/self/cgroup` names there having a file only a
/// cgroup of that hierarchy has (or its `lockrun/` one: the root's own
/// files are few) says so; else `/proc/self/mountinfo` is read (the
/// kernel formats every mount for it).
fn find(h: Hierarchy) -> Option<Found> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own = own_path(&cgroups, h.controller());
    let usual = h.usual();
    if let Some(dir) = own
        .as_deref()
        .and_then(|o| within(usual, Path::new("/"), o))
    {
        let at_usual = nix::sys::statfs::statfs(usual)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP_SUPER_MAGIC)
            && (dir.join(h.own_file()).exists() || dir.join(PARENT).join(h.own_file()).exists());
        if at_usual {
            return Some(Found {
                mount: usual.to_path_buf(),
                own: Ok(dir),
            });
        }
    }
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    from_mountinfo(&info, h.controller(), own)
}

/// The first mount of a v1 cgroup hierarchy whose super options name
/// `controller`, and where the cgroup `own` (as `/proc/self/cgroup` gives
/// it) is beneath it.
fn from_mountinfo(info: &str, controller: &str, own: Option<String>) -> Option<Found> {
    let m = super::mounts(info)
        .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == controller))?;
    let own = match own {
        Some(o) => within(&m.at, &m.root, &o).ok_or(o),
        None => Err("(none in /proc/self/cgroup)".to_owned()),
    };
    Some(Found { mount: m.at, own })
}

/// The path `/proc/self/cgroup`'s text gives the cgroup of the v1
/// hierarchy with `controller`.
fn own_path(cgroups: &str, controller: &str) -> Option<String> {
    cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_owned())
    })
}

/// The directory of cgroup `path` where the hierarchy's `root` is mounted
/// at `at`; `None` where it is not beneath `root`, or names a parent
/// (`..`: a cgroup outside lockrun's cgroup namespace).
fn within(at: &Path, root: &Path, path: &str) -> Option<PathBuf> {
    use std::path::Component;
    let rest = Path::new(path).strip_prefix(root).ok()?;
    let mut dir = at.to_path_buf();
    for c in rest.components() {
        let Component::Normal(name) = c else {
            return None;
        };
        dir.push(name);
    }
    Some(dir)
}

/// Where `h` is mounted, if it is.
#[must_use]
pub fn mount(h: Hierarchy) -> Option<PathBuf> {
    found(h).map(|f| f.mount.clone())
}

/// The cgroup lockrun is in, in `h`: where a run's cgroup goes, beneath
/// it, so that the limits on lockrun's caller hold the run too.
pub fn own(h: Hierarchy) -> Result<PathBuf, CgroupError> {
    let f = found(h).ok_or(CgroupError::NoController(h))?;
    f.own.clone().map_err(|own| CgroupError::OutsideTheMount {
        hierarchy: h,
        own,
        mount: f.mount.clone(),
    })
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
    let own = own(h)?;
    Ok(format!(
        "a v1 {c} hierarchy at {}: each run joins {}/{PARENT}/<run-id>, beneath lockrun's own, before exec",
        m.display(),
        own.display()
    ))
}

/// A run's cgroup in a v1 hierarchy, and its `tasks` opened for the
/// command to join (until handed to it). Dropped before
/// [`Self::remove`] or [`Self::leave`], it is removed (an early error).
#[derive(Debug)]
pub struct V1Cgroup {
    hierarchy: Hierarchy,
    dir: PathBuf,
    join: Option<OwnedFd>,
    removed: bool,
}

/// How many times a run's mkdir tries again after a run ending beside
/// removed the `lockrun/` it was to go in.
const MKDIR_TRIES: usize = 16;

impl V1Cgroup {
    /// `<own>/lockrun/<run_id>` in `h`, `<own>` the cgroup lockrun is in
    /// ([`own`]): made, with each `(file, value)` of `settings` written in
    /// order. Beneath lockrun's cgroup, the run is held by the limits on
    /// it and its ancestors too (a service's, a CI job's), and counted in
    /// their usage.
    pub fn create(
        h: Hierarchy,
        run_id: &str,
        settings: &[(&str, String)],
    ) -> Result<Self, CgroupError> {
        super::check_run_id(run_id)?;
        let own = own(h)?;
        let top = own.join(PARENT);
        let dir = top.join(run_id);
        let mut tries = 0;
        loop {
            match fs::create_dir(&top) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    return Err(CgroupError::Mkdir {
                        path: top,
                        source: e,
                    })
                }
                _ => {}
            }
            match fs::create_dir(&dir) {
                Ok(()) => break,
                // A run ending beside removed `lockrun/` as it was empty.
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < MKDIR_TRIES => {
                    tries += 1;
                }
                Err(source) if source.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(CgroupError::Exists(dir))
                }
                Err(source) => return Err(CgroupError::Mkdir { path: dir, source }),
            }
        }
        // From here on, Drop removes it.
        let mut cg = Self {
            hierarchy: h,
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
        self.take_down()
    }

    /// rmdir it, and its `lockrun/` once no run is in it.
    fn take_down(&mut self) -> Result<(), CgroupError> {
        self.removed = true;
        super::remove_tree(&self.dir)?;
        if let Some(top) = self.dir.parent() {
            remove_emptied_parent(self.hierarchy, top);
        }
        Ok(())
    }
}

/// On an early error, after the run's cgroup was killed and removed (a
/// field of [`super::RunCgroup`], it drops after it).
impl Drop for V1Cgroup {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = self.take_down() {
                tracing::warn!("cleaning up {}: {e}", self.dir.display());
            }
        }
    }
}

/// rmdir `top`, a `lockrun/` in `h`, where it is beneath another cgroup
/// than the hierarchy's root (so that whoever made that cgroup can remove
/// it), unless a run's cgroup is still in it (`EBUSY`), or another run's
/// teardown removed it first.
fn remove_emptied_parent(h: Hierarchy, top: &Path) {
    if mount(h).is_none_or(|m| top == m.join(PARENT)) {
        return;
    }
    match fs::remove_dir(top) {
        Ok(()) => {}
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                || matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENOTEMPTY)) => {}
        Err(e) => tracing::debug!("leaving {}: {e}", top.display()),
    }
}

/// Every `lockrun/` in `h`'s hierarchy that may hold runs' cgroups: at the
/// root, and beneath whichever cgroups lockrun ran in (gc's walk; a run's
/// cgroup is a leaf, not looked into).
fn parents(mount: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![(mount.to_path_buf(), 0)];
    while let Some((dir, depth)) = todo.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == PARENT {
                found.push(e.path());
            } else if depth < MAX_DEPTH {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// How deep gc looks for `lockrun/` in a v1 hierarchy.
const MAX_DEPTH: usize = 32;

/// Where `run_id`'s cgroup is in `h`'s hierarchy, if it is (gc's, and
/// tests': lockrun finds its own by [`own`]).
#[must_use]
pub fn find_run(h: Hierarchy, run_id: &str) -> Option<PathBuf> {
    super::check_run_id(run_id).ok()?;
    let mount = mount(h)?;
    parents(&mount)
        .into_iter()
        .map(|p| p.join(run_id))
        .find(|d| d.is_dir())
}

/// gc, and a run reaped: the v1 cgroups of `run_id`, where there are
/// some, removed (once its run's cgroup is gone, so is every process of it).
pub fn remove_run(run_id: &str) -> Result<(), CgroupError> {
    super::check_run_id(run_id)?;
    for h in Hierarchy::ALL {
        if let Some(dir) = find_run(h, run_id) {
            super::remove_tree(&dir)?;
            if let Some(top) = dir.parent() {
                remove_emptied_parent(h, top);
            }
        }
    }
    Ok(())
}

/// A v1 cgroup `lockrun gc` found without its run.
#[derive(Debug)]
pub struct Orphan {
    pub hierarchy: Hierarchy,
    /// Where it was.
    pub path: PathBuf,
    pub run_id: String,
    /// Why it could not be removed (a process still in it); `None` once
    /// removed.
    pub kept: Option<io::Error>,
}

/// gc: the v1 cgroups (`<cgroup>/lockrun/<run-id>`, beneath the cgroup
/// lockrun ran in) whose run has no cgroup in the unified hierarchy,
/// removed: left by a lockrun killed between removing the one and the
/// other. One whose unified cgroup exists is never touched.
#[must_use]
pub fn reap_orphans() -> Vec<Orphan> {
    let mut found = Vec::new();
    for hierarchy in Hierarchy::ALL {
        let Some(mount) = mount(hierarchy) else {
            continue;
        };
        for top in parents(&mount) {
            for run_id in dir_names(&top, |id| super::check_run_id(id).is_ok()) {
                if !matches!(super::find_run(&run_id), Ok(None)) {
                    continue;
                }
                let path = top.join(&run_id);
                let kept = match fs::remove_dir(&path) {
                    Ok(()) => None,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => Some(e),
                };
                found.push(Orphan {
                    hierarchy,
                    path,
                    run_id,
                    kept,
                });
            }
            remove_emptied_parent(hierarchy, &top);
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

    /// Where `from_mountinfo` finds the hierarchy, and lockrun's cgroup
    /// in it, or the path `/proc/self/cgroup` gave for it.
    fn place(
        info: &str,
        controller: &str,
        own: &str,
    ) -> Option<(PathBuf, Result<PathBuf, String>)> {
        from_mountinfo(info, controller, Some(own.to_owned())).map(|f| (f.mount, f.own))
    }

    #[test]
    fn finds_a_v1_hierarchy_by_its_controller_only() {
        let hybrid = "25 24 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                      30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                      31 25 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                      32 25 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        let pids = PathBuf::from("/sys/fs/cgroup/pids");
        let found = place(hybrid, "pids", "/");
        assert_eq!(found, Some((pids.clone(), Ok(pids.clone()))));
        // Shown as it is: no `/` after it.
        assert_eq!(found.unwrap().1.unwrap().as_os_str(), pids.as_os_str());
        let memory = PathBuf::from("/sys/fs/cgroup/memory");
        assert_eq!(
            place(hybrid, "memory", "/ci/job 7"),
            Some((memory.clone(), Ok(memory.join("ci/job 7"))))
        );
        let pure = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(place(pure, "pids", "/"), None);
        // A hierarchy named like the controller is not it.
        let named = "27 25 0:24 / /sys/fs/cgroup/x rw - cgroup cgroup rw,name=pids\n";
        assert_eq!(place(named, "pids", "/"), None);
        let shared = "31 25 0:28 / /mnt/cg\\040pids rw - cgroup cgroup rw,pids,memory\n";
        assert_eq!(
            place(shared, "memory", "/a").map(|p| p.1),
            Some(Ok(PathBuf::from("/mnt/cg pids/a")))
        );
    }

    #[test]
    fn lockruns_own_cgroup_is_found_only_within_the_part_mounted() {
        // A container's: its own cgroup's directory mounted, not the root.
        let part = "40 31 0:35 /docker/c1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let at = PathBuf::from("/sys/fs/cgroup/memory");
        assert_eq!(
            place(part, "memory", "/docker/c1").map(|p| p.1),
            Some(Ok(at.clone()))
        );
        assert_eq!(
            place(part, "memory", "/docker/c1/build").map(|p| p.1),
            Some(Ok(at.join("build")))
        );
        // Outside the part mounted, or outside lockrun's cgroup namespace
        // (`..`): nowhere to put a run's cgroup beneath it.
        assert_eq!(
            place(part, "memory", "/docker/c2").map(|p| p.1),
            Some(Err("/docker/c2".to_owned()))
        );
        assert_eq!(
            place(part, "memory", "/docker/c1/../c2").map(|p| p.1),
            Some(Err("/docker/c1/../c2".to_owned()))
        );
        let root = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            place(root, "memory", "/../../x").map(|p| p.1),
            Some(Err("/../../x".to_owned()))
        );
        let err = CgroupError::OutsideTheMount {
            hierarchy: Hierarchy::Memory,
            own: "/docker/c2".to_owned(),
            mount: at,
        }
        .to_string();
        assert!(
            err.starts_with("lockrun's own memory cgroup, /docker/c2, is not within the v1 memory hierarchy mounted at /sys/fs/cgroup/memory")
                && err.contains("set max_memory = \"unlimited\""),
            "{err}"
        );
    }

    #[test]
    fn reads_the_cgroup_of_a_controller_from_proc_self_cgroup() {
        let text = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/1653\n\
                    3:cpu,cpuacct:/a:b\n0::/\n";
        assert_eq!(
            own_path(text, "memory").as_deref(),
            Some("/process_api/1653")
        );
        assert_eq!(own_path(text, "pids").as_deref(), Some("/"));
        // A path may hold a colon; `name=` hierarchies and v2's line are
        // not a controller's.
        assert_eq!(own_path(text, "cpuacct").as_deref(), Some("/a:b"));
        assert_eq!(own_path(text, "systemd"), None);
    }
}
