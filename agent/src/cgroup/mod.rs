//! The run's cgroup v2: `<cgroup2>/lockrun/build-<build-id>/<run-id>`.
//!
//! The eBPF network hooks ([`crate::bpf`]) are attached once per lockrun
//! build to the parent, `build-<build-id>` ([`build_parent_of`]; the id is
//! the hooks', `crate::bpf::shared::build_id`, handed in by the caller), and judge every
//! run cgroup inside it; every process of the run must be in its cgroup from
//! its first instruction: the command
//! is forked straight into it (`clone3` with `CLONE_INTO_CGROUP` on
//! [`RunCgroup::dir_fd`], see [`crate::sys::spawn`]) — there is no window in
//! which it runs outside, and no migration through `cgroup.procs` (which
//! would wait for an RCU grace period).
//!
//! Kernel: cgroup v2 (4.5); `CLONE_INTO_CGROUP` (5.7); `cgroup.kill` (5.14) for teardown. The cgroup2
//! mount is found in `/proc/self/mountinfo`: `/sys/fs/cgroup` on pure v2 hosts,
//! `/sys/fs/cgroup/unified` on hybrid ones.
//!
//! The run cannot move itself out: moving a process needs write access to the
//! destination's `cgroup.procs`, which Landlock refuses (it is outside the
//! worktree), and lockrun never chowns or chmods anything here.

use std::ffi::CStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::state::{age, Owner};
use crate::sys::dir_names;
pub use mount::cgroup2_mount;
use mount::mounts;

pub mod memory;
mod mount;
pub mod pids;
pub mod v1;

/// The directory under the cgroup2 root that holds every build's parent
/// (and, from earlier builds, runs directly).
pub const PARENT: &str = "lockrun";

/// The prefix of a build's parent cgroup under [`PARENT`].
pub const BUILD_PREFIX: &str = "build-";

/// The cgroup beneath a run's that holds the run's watchdog
/// ([`crate::sys::watchdog`]): `<run>/watchdog`. Beneath the run's, so it
/// goes wherever the run's cgroup goes (teardown, `lockrun gc` of any
/// build, which remove nested cgroups) and a kill of the run takes it too;
/// outside the caller's cgroup, so a service manager or runner that kills
/// every process of lockrun's cgroup (systemd's `KillMode=control-group`,
/// a container's `cgroup.kill`) does not take the watchdog with lockrun.
/// Not the run's own cgroup: its `cgroup.procs` lists the run's processes
/// alone, and the hooks know the watchdog by no run.
pub const WATCHDOG: &str = "watchdog";

/// Build `id`'s parent cgroup, `<cgroup2>/lockrun/build-<id>`, where that
/// build's hooks are attached and each of its runs' cgroups is made.
pub fn build_parent_of(id: &str) -> Result<PathBuf, CgroupError> {
    Ok(cgroup2_mount()?
        .join(PARENT)
        .join(format!("{BUILD_PREFIX}{id}")))
}

/// Every build's parent cgroup that exists: (build id, path).
pub fn build_parents() -> Result<Vec<(String, PathBuf)>, CgroupError> {
    let top = cgroup2_mount()?.join(PARENT);
    let Ok(entries) = fs::read_dir(&top) else {
        return Ok(Vec::new());
    };
    Ok(entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_prefix(BUILD_PREFIX)?.to_owned();
            Some((id, e.path()))
        })
        .collect())
}

/// A run's cgroup as `/proc/<pid>/cgroup` shows it: `/lockrun/build-<build_id>/<run_id>`.
#[must_use]
pub fn relative_path(build_id: &str, run_id: &str) -> String {
    format!("/{PARENT}/{BUILD_PREFIX}{build_id}/{run_id}")
}

/// The directories that may hold run cgroups: every build's parent, and
/// `lockrun/` itself (runs of builds before the parents).
fn run_parents() -> Result<Vec<PathBuf>, CgroupError> {
    let mut parents = vec![cgroup2_mount()?.join(PARENT)];
    parents.extend(build_parents()?.into_iter().map(|(_, p)| p));
    Ok(parents)
}

/// Where a run's cgroup is, in any build's parent, if it exists.
pub fn find_run(run_id: &str) -> Result<Option<PathBuf>, CgroupError> {
    check_run_id(run_id)?;
    if run_id.starts_with(BUILD_PREFIX) {
        return Ok(None);
    }
    Ok(run_parents()?
        .into_iter()
        .map(|p| p.join(run_id))
        .find(|p| p.is_dir()))
}

/// Where a run's processes met a limit, in the audit log's words.
pub use crate::audit::RanOut;

/// How long teardown waits for a killed cgroup to empty.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read /proc/self/mountinfo: {0}")]
    MountInfo(#[source] io::Error),
    #[error(
        "no cgroup2 filesystem is mounted (looked in /proc/self/mountinfo); \
         mount one (mount -t cgroup2 none /sys/fs/cgroup) — lockrun will not run the command without its network hooks"
    )]
    NoCgroup2,
    #[error("invalid run id {0:?}: it must be one path component of [A-Za-z0-9._-], not . or ..")]
    InvalidRunId(String),
    #[error("mkdir {path} failed")]
    Mkdir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the run cgroup {0} already exists (a run id was reused?)")]
    Exists(PathBuf),
    #[error("open {path} failed")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("stat {path} failed")]
    Stat {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("write {path} failed")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("read {path} failed")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "no cgroup {c} controller for lockrun, which limits a run's {what} (run.{key} in the policy): \
         none is enabled in the unified hierarchy's root (echo +{c} > <cgroup2>/cgroup.subtree_control) \
         and no v1 {c} hierarchy is mounted; enable one, or set {key} = \"unlimited\" in the policy's [run] \
         to run without a limit",
        c = .0.controller(),
        what = .0.limits(),
        key = .0.policy_key()
    )]
    NoController(v1::Hierarchy),
    #[error(
        "lockrun's own {c} cgroup, {own}, is not within the v1 {c} hierarchy mounted at {mount}, \
         so a run's {what} limit cannot be put beneath it, where the limits on lockrun's caller hold \
         the run too; mount the hierarchy's root, or set {key} = \"unlimited\" in the policy's [run] \
         to run without a limit",
        c = .hierarchy.controller(),
        what = .hierarchy.limits(),
        key = .hierarchy.policy_key(),
        mount = .mount.display()
    )]
    OutsideTheMount {
        hierarchy: v1::Hierarchy,
        own: String,
        mount: PathBuf,
    },
    #[error("cgroup {0} still has processes {1:?} after cgroup.kill")]
    StillPopulated(PathBuf, Duration),
    #[error("rmdir {path} failed")]
    Rmdir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A run id is one harmless path component.
pub fn check_run_id(run_id: &str) -> Result<(), CgroupError> {
    let ok = !run_id.is_empty()
        && run_id != "."
        && run_id != ".."
        && run_id.len() <= 128
        && run_id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidRunId(run_id.to_owned()))
    }
}

/// The run's own cgroup. The command is born in it.
///
/// Dropping it without [`RunCgroup::remove`] kills and removes it too (best
/// effort), so an early error leaves nothing behind.
#[derive(Debug)]
pub struct RunCgroup {
    path: PathBuf,
    id: u64,
    dir: File,
    removed: bool,
    /// The run's task limit, once set ([`Self::limit_tasks`]); where it
    /// is a cgroup of a v1 hierarchy, removed after this one is emptied.
    tasks: Option<pids::TaskCap>,
    /// The run's memory limit, once set ([`Self::limit_memory`]); the
    /// same, for a cgroup of a v1 memory hierarchy.
    memory: Option<memory::MemoryCap>,
}

impl RunCgroup {
    /// Create `<cgroup2>/lockrun/build-<build_id>/<run_id>`
    /// ([`build_parent_of`]).
    pub fn create(build_id: &str, run_id: &str) -> Result<Self, CgroupError> {
        Self::create_in(&build_parent_of(build_id)?, run_id)
    }

    /// TEST BUILDS ONLY (`weaken-for-tests`): a run cgroup outside the
    /// build's parent, `<cgroup2>/lockrun/<run_id>`, where no hook judges it —
    /// what `lockrun doctor`'s canary must catch.
    #[cfg(feature = "weaken-for-tests")]
    pub fn create_outside_the_hooks(run_id: &str) -> Result<Self, CgroupError> {
        Self::create_in(&cgroup2_mount()?.join(PARENT), run_id)
    }

    fn create_in(parent: &Path, run_id: &str) -> Result<Self, CgroupError> {
        check_run_id(run_id)?;
        let parent = parent.to_path_buf();
        let path = parent.join(run_id);
        // `lockrun gc` removes an empty parent of another build
        // (`crate::bpf::reap::reap_other_builds`): made again if it went between
        // the two mkdirs.
        let mut attempts = 0;
        loop {
            for dir in [parent.parent().unwrap_or(&parent), &parent] {
                match fs::create_dir(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(source) => {
                        return Err(CgroupError::Mkdir {
                            path: dir.to_path_buf(),
                            source,
                        })
                    }
                }
            }
            attempts += 1;
            match fs::create_dir(&path) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(CgroupError::Exists(path))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempts < 3 => {}
                Err(source) => return Err(CgroupError::Mkdir { path, source }),
            }
        }
        // From here on, Drop cleans up.
        let dir = match File::open(&path) {
            Ok(f) => f,
            Err(source) => {
                let _ = fs::remove_dir(&path);
                return Err(CgroupError::Open { path, source });
            }
        };
        let id = match dir.metadata() {
            Ok(m) => m.ino(),
            Err(source) => {
                let _ = fs::remove_dir(&path);
                return Err(CgroupError::Stat { path, source });
            }
        };
        // Bookkeeping for `lockrun gc`, not confinement: without it the
        // cgroup is only reaped once empty (see `run_cgroups`).
        let owner = Owner::current().cgroup_tag();
        if let Err(e) = crate::sys::fsetxattr(dir.as_fd(), OWNER_XATTR, owner.as_bytes()) {
            tracing::debug!("recording the owner of {}: {e}", path.display());
        }
        Ok(Self {
            path,
            id,
            dir,
            removed: false,
            tasks: None,
            memory: None,
        })
    }

    /// Limit the run's tasks ([`pids`]). Where that is a cgroup of a v1
    /// pids hierarchy, the command's process must join it first: its
    /// `tasks` file, open, is returned for that.
    pub fn limit_tasks(
        &mut self,
        run_id: &str,
        limit: crate::policy::TaskLimit,
    ) -> Result<Option<std::os::fd::OwnedFd>, CgroupError> {
        self.tasks = pids::TaskCap::set(self, run_id, limit)?;
        Ok(self.tasks.as_mut().and_then(pids::TaskCap::take_join))
    }

    /// Limit the run's memory ([`memory`]), after its tasks (where one v1
    /// hierarchy has both controllers, the task limit's cgroup has the
    /// memory limit too). Where that is a cgroup of a v1 memory hierarchy
    /// of its own, the command's process must join it first: its `tasks`
    /// file, open, is returned for that.
    pub fn limit_memory(
        &mut self,
        run_id: &str,
        limit: crate::policy::MemoryLimit,
    ) -> Result<Option<std::os::fd::OwnedFd>, CgroupError> {
        self.memory = memory::MemoryCap::set(self, run_id, limit)?;
        Ok(self.memory.as_mut().and_then(memory::MemoryCap::take_join))
    }

    /// The task limit's cgroup, where it is one of a v1 hierarchy.
    fn tasks_v1(&self) -> Option<&Path> {
        self.tasks.as_ref().and_then(pids::TaskCap::v1_path)
    }

    /// What the kernel counted of the run's memory (read it before
    /// [`Self::remove`]); `None` without a limit.
    #[must_use]
    pub fn memory_report(&self) -> Option<Result<memory::MemoryReport, CgroupError>> {
        self.memory.as_ref().map(memory::MemoryCap::report)
    }

    /// The run's task limit, the forks and clones refused so far, and
    /// where the tasks ran out (read it before [`Self::remove`]); `None`
    /// without a limit.
    #[must_use]
    pub fn tasks_refused(&self) -> Option<Result<(u32, u64, RanOut), CgroupError>> {
        let t = self.tasks.as_ref()?;
        Some(t.refused().map(|(n, ran_out)| (t.limit(), n, ran_out)))
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cgroup as `/proc/<pid>/cgroup` shows it to lockrun
    /// (`/lockrun/build-<id>/<run-id>`): its path below the cgroup2 mount.
    #[must_use]
    pub fn seen_in_proc(&self) -> Option<String> {
        let below = self.path.strip_prefix(cgroup2_mount().ok()?).ok()?;
        Some(format!("/{}", below.to_str()?))
    }

    /// The cgroup id, as `bpf_get_current_cgroup_id()` reports it (the
    /// cgroup2 directory's inode number).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The cgroup directory, opened: what the eBPF programs attach to and
    /// what `clone3` forks the command into.
    #[must_use]
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Make the cgroup that holds the run's watchdog ([`WATCHDOG`]) and
    /// open it, for `clone3` to fork the watchdog straight into.
    pub fn watchdog_home(&self) -> Result<File, CgroupError> {
        let path = self.path.join(WATCHDOG);
        fs::create_dir(&path).map_err(|source| CgroupError::Mkdir {
            path: path.clone(),
            source,
        })?;
        File::open(&path).map_err(|source| CgroupError::Open { path, source })
    }

    /// Put a process (by pid) into the cgroup. For tests and for processes
    /// the parent starts itself; the run's child is forked into it.
    pub fn add_pid(&self, pid: u32) -> Result<(), CgroupError> {
        let path = self.path.join("cgroup.procs");
        write_file(&path, pid.to_string().as_bytes())
    }

    /// Whether any process is in the cgroup (or a descendant), from `cgroup.events`.
    pub fn populated(&self) -> Result<bool, CgroupError> {
        populated(&self.path)
    }

    /// Kill every process of the run's cgroup and of those beneath it (the
    /// watchdog's), in one instant (`cgroup.kill`). They die a moment later.
    pub fn kill(&self) -> Result<(), CgroupError> {
        kill(&self.path)
    }

    /// Until no process is left in the cgroup or beneath it (after
    /// [`Self::kill`]), or `DRAIN_TIMEOUT` has passed (an error).
    pub fn wait_empty(&self) -> Result<(), CgroupError> {
        drain(&self.path)
    }

    /// Left as it is, to `lockrun gc`: after a [`Self::kill`] or
    /// [`Self::wait_empty`] that failed, not tried again when dropped (a
    /// second wait of `DRAIN_TIMEOUT`).
    pub fn leave(mut self) {
        self.removed = true;
        self.leave_limits();
    }

    /// The limits' v1 cgroups, left to `lockrun gc` with the run's.
    fn leave_limits(&mut self) {
        if let Some(m) = self.memory.take() {
            m.leave();
        }
        if let Some(t) = self.tasks.take() {
            t.leave();
        }
    }

    /// Teardown: `cgroup.kill`, wait until `cgroup.events` says `populated 0`,
    /// rmdir. The limits' v1 cgroups, empty with it, are for the caller to
    /// remove after it ([`Limits::remove`]; beside the rest of teardown).
    pub fn remove(mut self) -> Result<Limits, CgroupError> {
        self.removed = true;
        if let Err(e) = kill_and_remove(&self.path) {
            // Still populated: the v1 ones are too, and left with it.
            self.leave_limits();
            return Err(e);
        }
        Ok(Limits {
            memory: self.memory.take(),
            tasks: self.tasks.take(),
        })
    }
}

/// A run's limits' v1 cgroups, once the run's cgroup is gone (so is every
/// process of it). Dropped before [`Self::remove`], they are removed.
#[derive(Debug)]
#[must_use]
pub struct Limits {
    memory: Option<memory::MemoryCap>,
    tasks: Option<pids::TaskCap>,
}

impl Limits {
    /// rmdir each: the memory limit's first, which may be in the task
    /// limit's.
    pub fn remove(self) -> Result<(), CgroupError> {
        let memory = self.memory.map_or(Ok(()), memory::MemoryCap::remove);
        let tasks = self.tasks.map_or(Ok(()), pids::TaskCap::remove);
        memory.and(tasks)
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = kill_and_remove(&self.path) {
                tracing::warn!("cleaning up {}: {e}", self.path.display());
                self.leave_limits();
            }
        }
    }
}

/// Where a run cgroup stands, found by its id ([`occupancy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occupancy {
    /// No cgroup of that id is there (removed, or never there).
    Gone,
    /// It is there, with no process in it or beneath it.
    Empty,
    /// Processes are in it or beneath it.
    Populated,
}

/// The child of `parent` whose cgroup id (inode) is `id`: whether it is
/// there, and whether any process is in it (`cgroup.events`). A parent
/// that is gone holds nothing.
pub fn occupancy(parent: &Path, id: u64) -> Result<Occupancy, CgroupError> {
    let entries = match fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Occupancy::Gone),
        Err(source) => {
            return Err(CgroupError::Read {
                path: parent.to_path_buf(),
                source,
            })
        }
    };
    for e in entries.flatten() {
        if !e.metadata().is_ok_and(|m| m.is_dir() && m.ino() == id) {
            continue;
        }
        return match populated(&e.path()) {
            Ok(true) => Ok(Occupancy::Populated),
            Ok(false) => Ok(Occupancy::Empty),
            // Removed since it was listed.
            Err(CgroupError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(Occupancy::Gone)
            }
            Err(e) => Err(e),
        };
    }
    Ok(Occupancy::Gone)
}

/// The cgroup id of a run's cgroup, if it exists.
#[must_use]
pub fn run_cgroup_id(run_id: &str) -> Option<u64> {
    let path = find_run(run_id).ok()??;
    fs::metadata(path).ok().map(|m| m.ino())
}

/// The cgroup ids (directory inode numbers) of every run cgroup that exists
/// now, in any build's parent.
pub fn live_run_cgroup_ids() -> Result<Vec<u64>, CgroupError> {
    let mut ids = Vec::new();
    for parent in run_parents()? {
        let Ok(entries) = fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(BUILD_PREFIX) {
                continue;
            }
            if let Ok(m) = e.metadata() {
                if m.is_dir() {
                    ids.push(m.ino());
                }
            }
        }
    }
    Ok(ids)
}

/// The extended attribute of a run cgroup naming its lockrun
/// ([`Owner::cgroup_tag`]), set at creation: what tells
/// `lockrun gc` whether a run cgroup is still someone's when no run dir says
/// so (the run's state dir is another, or was deleted).
const OWNER_XATTR: &CStr = c"trusted.lockrun.owner";

/// A run cgroup as `lockrun gc` judges it ([`run_cgroups`]).
#[derive(Debug)]
pub struct Found {
    pub run_id: String,
    /// Since its `mkdir` (the directory's modification time, which nothing
    /// a run does changes).
    pub age: Duration,
    /// The owner line recorded at creation; `None` for a cgroup made before
    /// lockrun recorded owners, or one whose attribute cannot be read.
    pub owner: Option<String>,
    pub populated: bool,
}

/// gc: every run cgroup, in any build's parent.
pub fn run_cgroups() -> Result<Vec<Found>, CgroupError> {
    let now = std::time::SystemTime::now();
    let mut found = Vec::new();
    for parent in run_parents()? {
        for run_id in dir_names(&parent, |id| check_run_id(id).is_ok()) {
            if run_id.starts_with(BUILD_PREFIX) {
                continue;
            }
            let path = parent.join(&run_id);
            let Ok(dir) = File::open(&path) else { continue };
            let Ok(md) = dir.metadata() else { continue };
            if !md.is_dir() {
                continue;
            }
            let age = age(&md, now);
            let owner = crate::sys::fgetxattr(dir.as_fd(), OWNER_XATTR, 64)
                .ok()
                .and_then(|v| String::from_utf8(v).ok());
            let populated = populated(&path)?;
            found.push(Found {
                run_id,
                age,
                owner,
                populated,
            });
        }
    }
    Ok(found)
}

/// gc: kill and remove a stale run's cgroup. Its cgroup id (what the shared
/// maps know the run by), or `None` when there was none.
pub fn reap(run_id: &str) -> Result<Option<u64>, CgroupError> {
    let Some(path) = find_run(run_id)? else {
        return Ok(None);
    };
    let id = match fs::metadata(&path) {
        Ok(m) => m.ino(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(CgroupError::Stat { path, source }),
    };
    kill_and_remove(&path)?;
    v1::remove_run(run_id)?;
    Ok(Some(id))
}

/// gc: the run ids that have a cgroup, in any build's parent.
pub fn runs() -> Result<Vec<String>, CgroupError> {
    let mut ids: Vec<String> = run_parents()?
        .iter()
        .flat_map(|p| dir_names(p, |id| check_run_id(id).is_ok()))
        .filter(|id| !id.starts_with(BUILD_PREFIX))
        .collect();
    ids.sort();
    Ok(ids)
}

/// Enable `controller` for the run's cgroup in the unified hierarchy, if
/// the machine offers it there: `+<controller>` in `lockrun/` and the
/// build's parent, top down (once: after, the run's cgroup has
/// `own_file` from its mkdir). Never the root's, which is the machine's to
/// delegate. Whether the run's cgroup has it now.
fn enable_in_unified(
    run: &RunCgroup,
    controller: &str,
    own_file: &str,
) -> Result<bool, CgroupError> {
    if run.path().join(own_file).exists() {
        return Ok(true);
    }
    let mount = cgroup2_mount()?;
    let mut between: Vec<&Path> = run
        .path()
        .ancestors()
        .skip(1)
        .take_while(|d| *d != mount && d.starts_with(&mount))
        .collect();
    between.reverse();
    let Some(top) = between.first() else {
        return Ok(false);
    };
    let offered = fs::read_to_string(top.join("cgroup.controllers")).unwrap_or_default();
    if !offered.split_whitespace().any(|c| c == controller) {
        return Ok(false);
    }
    let enable = format!("+{controller}");
    for dir in between {
        write_file(&dir.join("cgroup.subtree_control"), enable.as_bytes())?;
    }
    Ok(true)
}

/// The count after `key` in a flat-keyed cgroup file's text (`max 3`,
/// `oom_kill 1`); 0 where the key is not there.
fn counter(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn write_file(path: &Path, data: &[u8]) -> Result<(), CgroupError> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|source| CgroupError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    f.write_all(data).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn populated(cg: &Path) -> Result<bool, CgroupError> {
    let path = cg.join("cgroup.events");
    let text = fs::read_to_string(&path).map_err(|source| CgroupError::Read {
        path: path.clone(),
        source,
    })?;
    Ok(text
        .lines()
        .any(|l| l.split_whitespace().eq(["populated", "1"])))
}

/// Waits that start short (a cgroup usually empties within microseconds of
/// the kill, and every run's teardown waits here) and grow to 5 ms.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Duration::from_micros(100))
    }
}

impl Backoff {
    fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_millis(5));
    }
}

fn kill_and_remove(cg: &Path) -> Result<(), CgroupError> {
    if !cg.exists() {
        return Ok(());
    }
    // One kill for the whole tree (`cgroup.kill` takes every descendant
    // cgroup's processes too, and `populated` counts them): the run and its
    // watchdog ([`WATCHDOG`]) die in the same instant, so there is no moment
    // in which the run lives on without its watchdog.
    if populated(cg)? {
        kill(cg)?;
        drain(cg)?;
    }
    remove_tree(cg)
}

/// Kill every process of `cg` and beneath it (`cgroup.kill`, Linux 5.14).
fn kill(cg: &Path) -> Result<(), CgroupError> {
    write_file(&cg.join("cgroup.kill"), b"1")
}

/// Wait until `cg` has no process, nor any cgroup beneath it.
fn drain(cg: &Path) -> Result<(), CgroupError> {
    let start = Instant::now();
    let mut pause = Backoff::default();
    while populated(cg)? {
        if start.elapsed() > DRAIN_TIMEOUT {
            return Err(CgroupError::StillPopulated(cg.to_path_buf(), DRAIN_TIMEOUT));
        }
        pause.sleep();
    }
    Ok(())
}

/// rmdir an emptied cgroup, nested ones first (the watchdog's, and any the
/// run made itself, which it cannot: Landlock).
fn remove_tree(cg: &Path) -> Result<(), CgroupError> {
    if let Ok(entries) = fs::read_dir(cg) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path())?;
            }
        }
    }
    // A just-emptied cgroup can briefly refuse rmdir with EBUSY.
    let start = Instant::now();
    let mut pause = Backoff::default();
    loop {
        match fs::remove_dir(cg) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < DRAIN_TIMEOUT => {
                pause.sleep();
            }
            Err(source) => {
                return Err(CgroupError::Rmdir {
                    path: cg.to_path_buf(),
                    source,
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_one_component() {
        for bad in ["", ".", "..", "a/b", "../x", "a b", "x\0"] {
            assert!(check_run_id(bad).is_err(), "{bad:?}");
        }
        for good in ["r-20261129-abc", "a.b_c"] {
            assert!(check_run_id(good).is_ok(), "{good:?}");
        }
    }
}
