//! The one place that orders the steps of a run, and `gc`.
//!
//! [`execute`] runs these steps, in this order; any setup failure refuses the
//! run (exit 125, one line naming what failed), and nothing runs:
//!
//! 1. the run dir `<state>/runs/<id>` with `tmp/` (0700) and `owner`;
//! 2. sweep stale run dirs (best effort, grace period respected);
//! 3. the Landlock ruleset ([`crate::fs`]) and seccomp filters ([`crate::seccomp`]);
//!    the ruleset's walk from `/` starts before step 1 (it needs the temp
//!    dir's path, not the dir), on another CPU (`beside`); its writable
//!    roots follow there once step 1 is done, and it is waited for after
//!    step 7;
//! 4. the run's cgroup ([`crate::cgroup`]) → its open `cgroup.procs` fd;
//! 5. the proxy ([`crate::proxy`]), when any host is allowed → its endpoint and `*_PROXY`;
//! 6. the eBPF hooks ([`crate::bpf`]): the build's, attached once to the
//!    cgroup's parent; the run registered in their maps, allowing only the
//!    proxy endpoint and the policy's loopback endpoints;
//! 7. the kernel audit reader for Landlock's denials ([`crate::audit::kernel`]),
//!    and, below Landlock ABI 7, the run's audit rule for its refused calls
//!    ([`crate::audit::syscalls`], once the ruleset is in: the rule names
//!    the run's cgroup);
//!    then an IPC namespace of the run's own ([`own_ipc_namespace`]), and
//!    the run's watchdog ([`crate::sys::watchdog`]: should lockrun die, it
//!    kills what is in the run's cgroup), made while the walk finishes;
//! 8. the child's environment, built explicitly;
//! 9. spawn with the child-side confinement ([`crate::sys`]) as `pre_exec`
//!    (it joins the cgroup first, so no instruction runs outside), receive
//!    the supervised filter's listener and start the seccomp supervisor
//!    ([`crate::supervise`]), then supervise: forward SIGINT/SIGTERM/SIGHUP,
//!    wait;
//! 10. teardown, in reverse, on every path: the cgroup killed and removed,
//!     the seccomp supervisor stopped (after the cgroup: until then a
//!     descendant may still call), the hooks drained and the run unregistered, the proxy stopped, the kernel audit
//!     read to its end (the run's audit rule removed on a thread of its own);
//!     the run dir is removed and the watchdog reaped
//!     beside the rest, once the cgroup is gone (the cgroup's kill took
//!     the watchdog too, in its cgroup beneath the run's).
//!
//! Each layer's handle also tears itself down in `Drop` (like [`RunDir`]):
//! bound in setup order inside `run`, they are dropped in reverse on every
//! path — a `?` during setup, the command's exit, or lockrun being signalled
//! (signals are caught from before step 1 and forwarded to the command, so
//! lockrun always reaches its teardown unless killed with `SIGKILL`; then the
//! watchdog kills every process of the run, the build's hooks keep judging
//! the registered run, and `gc` reaps its cgroup and run dir).

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt as _, OpenOptionsExt as _, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::exit;
use crate::fs::{FsError, FsSandbox};
use crate::policy::Policy;
use crate::seccomp::SeccompError;
use crate::shown::say;

pub mod audit_log;
mod beside;
pub mod core_dumps;
pub mod nested;

/// Why a run could not be set up. Every variant maps to exit 125.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "creating run dir {path}: mkdir: {source} (check that --state-dir is a writable directory)"
    )]
    RunDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source} (check that --state-dir is writable)")]
    Owner {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("filesystem sandbox: {0}")]
    Fs(#[from] FsError),
    #[error("{}", gaps_refused(.0))]
    Gaps(Vec<crate::kernel::Gap>),
    #[error("{}", refusals_unseen(.0))]
    RefusalsUnseen(String),
    #[error("seccomp: {0}")]
    Seccomp(#[from] SeccompError),
    #[error("preparing the child: {what}: {source}")]
    Child {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("confining the command: {} failed: {source} (the kernel refused a restriction; see `lockrun doctor`)", step.describe())]
    Confine {
        step: crate::sys::Step,
        source: std::io::Error,
    },
    #[error("the worktree {} is in use by {}: its git hooks and config are put back at the end of each run, and two runs at once would each put back what the other changed; wait for it, or give each run its own worktree", worktree.display(), holder.map_or_else(|| "another run".to_owned(), |p| format!("another run (process {p})")))]
    WorktreeBusy {
        worktree: PathBuf,
        holder: Option<u32>,
    },
    #[error("reading the worktree's git hooks and config to keep them: {path}: {source} (lockrun puts them back after the run; it will not run without a copy)")]
    GitGuard {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("an IPC namespace of the run's own: unshare(CLONE_NEWIPC): {0} (without one, the command could write into other processes' SysV shared memory; a kernel needs CONFIG_IPC_NS)")]
    IpcNamespace(#[source] std::io::Error),
    #[error("the run's cgroup: {}", chain(.0))]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("the kernel network hooks: {}", chain(.0))]
    Hooks(#[from] crate::bpf::BpfError),
    #[error("the proxy: {}", chain(.0))]
    Proxy(#[from] crate::proxy::ProxyError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("installing signal handlers: sigaction: {0}")]
    Signals(#[source] std::io::Error),
    #[error("waiting for the command: wait4: {0}")]
    Wait(#[source] std::io::Error),
    #[error("the run's watchdog, which ends the run should lockrun die: {0}")]
    Watchdog(#[source] std::io::Error),
}

/// The refusal of a run whose filesystem refusals kernel audit's syscall
/// records were to show, which could not be set up (`why`), one line.
fn refusals_unseen(why: &str) -> String {
    let gap = crate::kernel::Gap::FilesystemRefusalsUnseen;
    format!(
        "this kernel cannot hold one of lockrun's promises: {}: {gap} (this kernel lacks {}, and \
         kernel audit's syscall records, which stand in for it, could not be set up: {why}); \
         lockrun will not run the command with less. Run it on a newer kernel, or accept exactly \
         what is lost: --accept-gap {0}, or run.accept_gaps = [\"{0}\"] in the policy",
        gap.name(),
        gap.lacks()
    )
}

/// The refusal of a run on a kernel that cannot hold `gaps`, one line.
fn gaps_refused(gaps: &[crate::kernel::Gap]) -> String {
    let each: Vec<String> = gaps
        .iter()
        .map(|g| {
            format!(
                "{}: {g} (this kernel lacks {})",
                g.name(),
                crate::kernel::Kernel::get().lacks(*g)
            )
        })
        .collect();
    let names: Vec<&str> = gaps.iter().map(|g| g.name()).collect();
    format!(
        "this kernel cannot hold {} of lockrun's promises: {}; lockrun will not run the command \
         with less. Run it on a newer kernel, or accept exactly what is lost: --accept-gap NAME, \
         or run.accept_gaps = [\"{}\"] in the policy",
        if gaps.len() == 1 {
            "one".to_owned()
        } else {
            gaps.len().to_string()
        },
        each.join("; "),
        names.join("\", \"")
    )
}

/// An error and its sources, one line: `a: b: c`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

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

/// The run's directory; removed when dropped (every path, incl. a panic).
///
/// Or kept for a later run, when the run ended with its temp dir as it got
/// it: nothing made, removed or changed in it (its `ctime` unchanged, which
/// any such change moves), and no process of the run left
/// ([`RunDir::ended`]). Most commands an agent runs (`git status`, `rg`,
/// `ls`) leave their temp dir so. Then the dir, its `owner` removed, goes to
/// `<state>/spare/` ([`SPARES`], at most [`SPARES_KEPT`]), and a run that
/// starts there takes it by a rename instead of making two directories. On
/// this VM's ext4 (no journal, mounted with `discard`) each directory made
/// costs ~0.1 ms of a run's start and each one removed ~0.1–0.3 ms of its
/// end: its inode, found past the recently freed ones, and its data
/// block, freed and discarded at once. Only a spare younger than half the
/// grace period is taken: renamed into `runs/` it has no `owner` for a few
/// µs, and a sweep leaves a dir that young alone without reading it
/// ([`sweep_at_start`], [`gc`]). `lockrun gc` removes spares older than the
/// grace period. A run cannot reach `<state>/spare` (the state dir is
/// denied to it), and a temp dir it touched is never kept.
pub struct RunDir {
    root: PathBuf,
    tmp: PathBuf,
    id: String,
    /// `<state>/spare`.
    spares: PathBuf,
    /// The temp dir as the run got it: inode, `ctime` (s, ns).
    tmp_was: (u64, i64, i64),
    /// Set by [`RunDir::ended`]: no process of the run is left.
    ended: bool,
}

/// Where ended runs' dirs wait for later runs ([`RunDir`]): `<state>/spare`.
pub const SPARES: &str = "spare";

/// At most this many spare run dirs are kept.
pub const SPARES_KEPT: usize = 16;

impl RunDir {
    /// Create `<runs>/<id>/tmp` (0700, parents created) and `<runs>/<id>/owner`.
    pub fn create(runs_dir: &Path) -> Result<Self, RunError> {
        let id = new_run_id();
        let runs_dir = Self::make_runs_dir(runs_dir, &id)?;
        Self::create_as(&runs_dir, id, Duration::ZERO)
    }

    /// `runs_dir`, made (0700, parents too) where it is missing, and
    /// canonical: where run `id`'s dir is to go (named in the error).
    pub fn make_runs_dir(runs_dir: &Path, id: &str) -> Result<PathBuf, RunError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(runs_dir)
            .and_then(|()| runs_dir.canonicalize())
            .map_err(|source| RunError::RunDir {
                path: runs_dir.join(id),
                source,
            })
    }

    /// The temp dir run `id` gets beneath `runs_dir` (canonical, from
    /// [`Self::make_runs_dir`]), before [`Self::create_as`] makes it: its
    /// canonical path too, every component beneath being a new directory.
    #[must_use]
    pub fn tmp_path(runs_dir: &Path, id: &str) -> PathBuf {
        runs_dir.join(id).join("tmp")
    }

    /// Create `<runs>/<id>/tmp` (0700) and `<runs>/<id>/owner` in the
    /// canonical `runs_dir` ([`Self::make_runs_dir`]), or take a spare one
    /// younger than half of `grace` for them (see [`RunDir`]).
    pub fn create_as(runs_dir: &Path, id: String, grace: Duration) -> Result<Self, RunError> {
        let root = runs_dir.join(&id);
        let tmp = Self::tmp_path(runs_dir, &id);
        let spares = runs_dir.with_file_name(SPARES);
        let spare = take_spare(&spares, &root, grace);
        if !spare {
            make_private(&root)?;
        }
        // From here on the guard removes what was made.
        let mut dir = Self {
            root: root.clone(),
            tmp: tmp.clone(),
            id,
            spares,
            tmp_was: (0, 0, 0),
            ended: false,
        };
        // A symlink whose target is the owner line: kept in the inode, it
        // costs no data block to write and none to free, where a file's
        // write and removal cost ~0.15 ms on this VM's ext4 (mounted with
        // `discard`). Read by `Owner::of_run_dir`.
        let owner = root.join("owner");
        std::os::unix::fs::symlink(Owner::current().to_line().trim_end(), &owner).map_err(
            |source| RunError::Owner {
                path: owner.clone(),
                source,
            },
        )?;
        if !spare {
            make_private(&tmp)?;
        }
        let md = std::fs::symlink_metadata(&tmp).map_err(|source| RunError::RunDir {
            path: tmp.clone(),
            source,
        })?;
        dir.tmp_was = (md.ino(), md.ctime(), md.ctime_nsec());
        Ok(dir)
    }

    /// No process of the run is left (its cgroup is empty): from now on,
    /// nothing but lockrun can change the temp dir, and the dir may be
    /// kept for a later run (see [`RunDir`]).
    pub fn ended(&mut self) {
        self.ended = true;
    }

    /// Move the run dir to the spares, when the run ended with its temp dir
    /// as it got it and there is room; `false` (the dir left for removal)
    /// otherwise.
    fn keep_for_later(&self) -> bool {
        let pristine = || {
            std::fs::symlink_metadata(&self.tmp).is_ok_and(|m| {
                m.is_dir() && m.nlink() == 2 && (m.ino(), m.ctime(), m.ctime_nsec()) == self.tmp_was
            })
        };
        if !self.ended || !pristine() {
            return false;
        }
        let kept = match std::fs::read_dir(&self.spares) {
            Ok(d) => d.count(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if make_private(&self.spares).is_err() {
                    return false;
                }
                0
            }
            Err(_) => return false,
        };
        kept < SPARES_KEPT
            && std::fs::remove_file(self.root.join("owner")).is_ok()
            && crate::sys::rename_noreplace(&self.root, &self.spares.join(&self.id)).is_ok()
    }

    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    #[must_use]
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }
}

/// `<state>/sealed-file` and `<state>/sealed-dir`: an empty file and dir
/// of mode 0000 whose binds mask the machine's secrets
/// ([`crate::fs::Mask`]). Made by the first run that needs them and kept:
/// made and removed per run on this VM's ext4, they cost ~0.3 ms. Each
/// run checks their type and mode (which only root outside could have
/// changed) and puts the mode back to 0000. Beneath the state dir, which a
/// run cannot read; a bind shows one at the masked path only, where its
/// mode refuses a command without capabilities to read, list or enter it
/// (`EACCES`).
struct Sealed {
    file: PathBuf,
    dir: PathBuf,
}

impl Sealed {
    fn in_state_dir(state_dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: sealed(state_dir, false)?,
            dir: sealed(state_dir, true)?,
        })
    }

    /// What masks `mask`.
    fn over(&self, mask: &crate::fs::Mask) -> &Path {
        match mask {
            crate::fs::Mask::File(_) => &self.file,
            crate::fs::Mask::Dir(_) => &self.dir,
        }
    }
}

/// One of [`Sealed`]'s two, made or checked.
fn sealed(state_dir: &Path, dir: bool) -> std::io::Result<PathBuf> {
    let at = state_dir.join(if dir { "sealed-dir" } else { "sealed-file" });
    let made = if dir {
        std::fs::DirBuilder::new().mode(0o000).create(&at)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&at)
            .map(drop)
    };
    match made {
        Ok(()) => return Ok(at),
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        Err(_) => {}
    }
    let md = std::fs::symlink_metadata(&at)?;
    if md.is_dir() != dir || !(md.is_dir() || md.is_file()) {
        return Err(std::io::Error::other(format!(
            "{} is not a {}: remove it",
            at.display(),
            if dir { "directory" } else { "file" }
        )));
    }
    if md.permissions().mode() & 0o7777 != 0 {
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o000))?;
    }
    Ok(at)
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep_for_later() {
            remove_tree(&self.root);
        }
    }
}

/// `path` made, 0700 (its parent exists): a run dir, its temp dir, the
/// spares' dir.
fn make_private(path: &Path) -> Result<(), RunError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|source| RunError::RunDir {
            path: path.to_path_buf(),
            source,
        })
}

/// Take a spare run dir for `root` (see [`RunDir`]): the first in `spares`
/// younger than half of `grace` whose temp dir is as lockrun leaves one
/// (0700, lockrun's uid, empty) and which no other run took first.
fn take_spare(spares: &Path, root: &Path, grace: Duration) -> bool {
    let Ok(entries) = std::fs::read_dir(spares) else {
        return false;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let spare = entry.path();
        let young =
            std::fs::symlink_metadata(&spare).is_ok_and(|m| m.is_dir() && age(&m, now) < grace / 2);
        let tmp_as_left = std::fs::symlink_metadata(spare.join("tmp")).is_ok_and(|m| {
            m.is_dir()
                && m.nlink() == 2
                && m.mode() & 0o7777 == 0o700
                && m.uid() == nix::unistd::geteuid().as_raw()
        });
        if young && tmp_as_left && crate::sys::rename_noreplace(&spare, root).is_ok() {
            return true;
        }
    }
    false
}

/// Remove the spare run dirs (see [`RunDir`]) older than `grace` beneath
/// `spares`; how many.
#[must_use]
pub fn remove_old_spares(spares: &Path, grace: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(spares) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| age(&m, now) >= grace) {
            remove_tree(&path);
            removed += 1;
        }
    }
    removed
}

/// Make every dir beneath `p` writable again (0700), not following symlinks.
fn open_up(p: &Path) {
    if let Ok(md) = std::fs::symlink_metadata(p) {
        if md.is_dir() {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    open_up(&e.path());
                }
            }
        }
    }
}

/// Remove a tree the command may have made unwritable (mode 000 dirs).
fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() {
        return;
    }
    open_up(path);
    if let Err(e) = std::fs::remove_dir_all(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            say!("lockrun: warning: removing {}: {e}", path.display());
        }
    }
}

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

    /// The owner a run dir names: its `owner` symlink's target, or, in a
    /// run dir of an earlier build, its `owner` file's line.
    #[must_use]
    pub fn of_run_dir(dir: &Path) -> Option<Self> {
        let at = dir.join("owner");
        match std::fs::read_link(&at) {
            Ok(target) => target.to_str().and_then(Self::parse),
            Err(_) => std::fs::read_to_string(&at)
                .ok()
                .and_then(|s| Self::parse(&s)),
        }
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
/// without reading its owner (two files per run going; on a machine
/// running fifty agents, ~0.8 ms of every start). Its report counts such a
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
    if let Err(e) = crate::bpf::forget_runs(&reaped_cgroups) {
        say!("lockrun: warning: gc: the shared hook maps: {}", chain(&e));
    }
    Ok(report)
}

/// A dead run's cgroup (its processes killed first) and its per-run pins of
/// earlier builds, removed; the cgroup's id goes to `cgroup_ids`, for the
/// shared maps (forgotten once for all the runs reaped). `false`, with a
/// warning said, when either could not be removed: a later gc tries again.
fn reap_run(run_id: &str, cgroup_ids: &mut Vec<u64>) -> bool {
    match crate::cgroup::reap(run_id) {
        Ok(id) => cgroup_ids.extend(id),
        Err(e) => {
            say!(
                "lockrun: warning: gc: the cgroup of run {run_id}: {}",
                chain(&e)
            );
            return false;
        }
    }
    if let Err(e) = crate::bpf::unpin(run_id) {
        say!(
            "lockrun: warning: gc: the per-run pins of run {run_id} (earlier builds): {}",
            chain(&e)
        );
        return false;
    }
    true
}

/// How long ago `md`'s file was modified (zero if in the future).
pub(crate) fn age(md: &std::fs::Metadata, now: SystemTime) -> Duration {
    md.modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .unwrap_or_default()
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
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
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
    let found = crate::cgroup::run_cgroups().map_err(std::io::Error::other)?;
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
    if let Err(e) = crate::bpf::forget_runs(&reaped_ids) {
        say!("lockrun: warning: gc: the shared hook maps: {}", chain(&e));
    }
    Ok(report)
}

/// `lockrun gc`: also forget registered runs whose cgroup is gone by other
/// means (see [`crate::bpf::forget_gone_runs`]).
pub fn forget_gone_runs() {
    if let Err(e) = crate::bpf::forget_gone_runs() {
        say!("lockrun: warning: gc: the shared hook maps: {}", chain(&e));
    }
}

/// Writable paths beneath the state dir (e.g. a preset's
/// `{state}/agents/<harness>`) are lockrun's own: create them (0700) so the
/// harness finds its home. A writable path elsewhere that does not exist is
/// not granted; say so once.
fn prepare_writable(policy: &Policy, tmp: &Path) {
    for spec in &policy.fs.writable {
        let path = spec.resolve(tmp);
        if path.exists() {
            continue;
        }
        if path.starts_with(&policy.run.state_dir) && !path.starts_with(policy.runs_dir()) {
            if let Err(e) = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
            {
                say!(
                    "lockrun: warning: creating {}: {e}; it is not writable in this run",
                    path.display()
                );
            }
        } else {
            say!(
                "lockrun: warning: writable path {} does not exist; it is not granted in this run",
                path.display()
            );
        }
    }
}

/// The child's environment: the caller's, then TMPDIR/TMP/TEMP, the
/// policy's `[env]`, the proxy's variables, and the run's id
/// ([`nested::RUN_ID_VAR`]) — later entries win.
#[must_use]
pub fn child_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &Policy,
    run_id: &str,
    tmp: &Path,
    proxy_env: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = inherited.into_iter().collect();
    for k in ["TMPDIR", "TMP", "TEMP"] {
        env.insert(k.into(), tmp.as_os_str().to_owned());
    }
    for (k, v) in &policy.env {
        env.insert(k.into(), v.render(tmp).into());
    }
    for (k, v) in proxy_env {
        env.insert(k.clone(), v.clone());
    }
    env.insert(nested::RUN_ID_VAR.into(), run_id.into());
    env.into_iter().collect()
}

/// The exit status lockrun reports for the command's status.
#[must_use]
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(exit::SETUP)
}

/// Run `argv` under `policy`; returns lockrun's exit status. Prints one line
/// on stderr for any failure of its own.
#[must_use]
pub fn execute(policy: &Policy, argv: &[OsString], audit_log: Option<&Path>) -> i32 {
    let run_id = new_run_id();
    let audit = match audit_log.map(|path| audit_log::open(policy, path, &run_id)) {
        None => std::sync::Arc::new(crate::audit::AuditLog::unkept()),
        Some(Ok(a)) => std::sync::Arc::new(a),
        Some(Err(e)) => {
            say!("lockrun: {e}");
            return e.exit();
        }
    };
    // Before any descriptor is opened: the proxy and the ruleset walk get
    // the hard limit, the command the caller's.
    let nofile = crate::sys::raise_nofile().unwrap_or_else(|e| {
        say!("lockrun: warning: the descriptor limit could not be raised ({e}); the proxy keeps the caller's");
        None
    });
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return refuse(&RunError::Runtime(e)),
    };
    tracing::debug!("audit log open, runtime built");
    let (code, told) = match rt.block_on(run(policy, argv, &audit, nofile, run_id)) {
        Ok(code) => (code, false),
        Err(e) => (refuse(&e), matches!(e, RunError::Audit(_))),
    };
    for line in audit.summary() {
        say!("{line}");
    }
    // Lines the log lacks, unless that is why nothing ran.
    if let Some(lost) = audit.write_failure().filter(|_| !told) {
        say!("lockrun: warning: {lost}");
    }
    tracing::debug!("12. summary written");
    code
}

fn refuse(e: &RunError) -> i32 {
    say!("lockrun: {e}");
    exit::SETUP
}

/// How the command ended, or why it never started.
enum Started {
    Exited(ExitStatus),
    NotFound(std::io::Error),
    NotExecutable(std::io::Error),
}

#[allow(clippy::too_many_lines)] // the steps of a run, in order, in one place (see the module docs)
async fn run(
    policy: &Policy,
    argv: &[OsString],
    audit: &std::sync::Arc<crate::audit::AuditLog>,
    nofile: Option<libc::rlimit>,
    run_id: String,
) -> Result<i32, RunError> {
    use crate::audit::Event;

    // The thread for the side work (see `beside`), started first: it takes
    // a moment to be running.
    let beside = beside::Beside::start();
    // Signals are caught from here on, so that lockrun is never killed
    // between creating the run dir and removing it.
    let mut signals = Signals::new().map_err(RunError::Signals)?;

    let runs_dir = RunDir::make_runs_dir(&policy.runs_dir(), &run_id)?;
    let tmp = RunDir::tmp_path(&runs_dir, &run_id);
    // A policy asking for more Landlock than the kernel has, or a kernel
    // that cannot hold a promise the policy does not let go, is refused
    // first, before any kernel object exists.
    prepare_writable(policy, &tmp);
    crate::fs::check_abi(policy)?;
    let accepted_gaps = gaps_accepted(policy)?;

    // 3. the Landlock ruleset: its walk from `/` (~0.5–1 ms here, about as
    //    long as steps 1, 2 and 4–6 together) starts first, on another CPU
    //    (see `beside`); it needs the temp dir's path, not the dir. Its
    //    writable roots are added once the run dir is made (below).
    let read_walk = {
        let (policy, tmp, runs_dir) = (policy.clone(), tmp.clone(), runs_dir.clone());
        beside.run(move || FsSandbox::begin(&policy, &tmp, &runs_dir))
    };

    // 1. run dir (removed when `dir` drops, on every path below)
    let mut dir = RunDir::create_as(&runs_dir, run_id, policy.run.gc_grace)?;
    tracing::debug!("1. run dir {}", dir.id());

    // The walk's writable roots, then what follows it beside.
    let walk = {
        let policy = policy.clone();
        beside.run(move || {
            let fs = read_walk
                .wait()
                .ok_or(FsError::WalkPanicked)
                .and_then(|r| r)
                .and_then(|begun| begun.finish(&policy));
            tracing::debug!("3. Landlock ruleset prepared");
            let made = fs.as_ref().ok().map(made_filesystems);
            tracing::debug!("3. the run's own filesystems made");
            // The denied files' other names (see crate::fs::links).
            let fs = fs.and_then(|fs| {
                let state = policy.run.state_dir.canonicalize();
                let state = state.as_deref().unwrap_or(&policy.run.state_dir);
                let linked = crate::fs::links::mark(fs.denied_found(), state, fs.writable_roots())?;
                Ok((fs, linked))
            });
            tracing::debug!("3. the denied files' other names marked");
            (fs, made)
        })
    };
    // The machine's secrets to mask, and what masks them: a few `lstat`s,
    // queued after the walk, and, like the kernel audit reader's start
    // below, taken back by the main thread should it be done with steps
    // 4–7 first (`beside`): whichever thread is free first does them.
    let secrets = {
        let state_dir = policy.run.state_dir.clone();
        beside.run(move || {
            let secrets = crate::fs::machine_secrets();
            let sealed = if secrets.is_empty() {
                Ok(None)
            } else {
                Sealed::in_state_dir(&state_dir).map(Some)
            };
            tracing::debug!("3. the machine's secrets found");
            (secrets, sealed)
        })
    };
    // 7. filesystem refusals: Landlock reports them to kernel audit. Its
    //    reader starts beside, after the walk: it then has until the spawn
    //    to take its baseline (the audit's lost count), which the spawn
    //    waits for.
    let kernel_audit = {
        let (audit, run_id) = (audit.clone(), dir.id().to_owned());
        beside.run(move || {
            let started = crate::audit::kernel::KernelAudit::start(audit, &run_id);
            tracing::debug!("7. kernel audit reader started");
            started
        })
    };

    // 2. sweep stale runs (after the run dir, so a bad state dir is reported once, by step 1)
    if let Err(e) = sweep_at_start(&runs_dir, policy.run.gc_grace) {
        say!("lockrun: warning: sweeping {}: {e}", runs_dir.display());
    }
    tracing::debug!("2. stale runs swept");
    audit.record(Event::RunStart {
        run_id: dir.id().to_owned(),
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        policy: policy.sources.clone(),
        worktree: policy.worktree.clone(),
        seal_key: audit.key_id(),
    });
    // A log that cannot be written from the start is not kept: nothing has
    // run yet, and a run without the log asked for is refused.
    audit.check_written()?;

    // A writable root that reaches where code runs later (the user's shell
    // start-up, git's config, ~/.cargo, the system's programs): the policy
    // may say so, but never silently.
    // A promise this kernel cannot hold, which the policy lets go: said
    // on every run.
    for gap in accepted_gaps {
        let message = format!(
            "this kernel cannot hold a promise, which the policy accepts ({}): {gap} (this kernel lacks {})",
            gap.name(),
            crate::kernel::Kernel::get().lacks(gap)
        );
        say!("lockrun: warning: {message}");
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Filesystem,
            message,
        });
    }
    for reach in crate::policy::later::reached_by(policy) {
        let message = reach.to_string();
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Filesystem,
            message,
        });
    }

    // The worktree's git hooks and config, read now, put back after the
    // run (see crate::gitguard): git runs them outside the sandbox.
    let locks = policy.run.state_dir.join(crate::worktree_lock::LOCKS_DIR);
    let git_guard =
        crate::gitguard::GitGuard::take(&policy.worktree, &locks).map_err(|e| match e {
            crate::gitguard::TakeError::Busy { holder } => RunError::WorktreeBusy {
                worktree: policy.worktree.clone(),
                holder,
            },
            crate::gitguard::TakeError::Io(source) => RunError::GitGuard {
                path: policy.worktree.join(".git"),
                source,
            },
        })?;
    // The caller's terminal settings, read now, put back after the run
    // (see crate::terminal).
    let terminals = crate::terminal::Terminals::save();
    for h in git_guard.iter().flat_map(|g| g.lock().held_by_runs()) {
        let message = format!(
            "the worktree {} is also locked by process {} ({}) of lockrun run {}: a command of a \
             run, not a lockrun, so this run goes on (lockrun's own lock is in its state dir, \
             which no run can open)",
            policy.worktree.display(),
            h.pid,
            h.comm,
            h.run
        );
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Filesystem,
            message,
        });
    }

    // 3–7, beside the walk. Should both fail, the walk's error is the one
    // told (a deny list that cannot be built, before what the kernel
    // refused later); either way nothing ran.
    let kernel = kernel_side(policy, &dir, audit).and_then(|k| {
        own_ipc_namespace()?;
        let queues = own_message_queues()?;
        tracing::debug!("7. the run's IPC namespace and message queues made");
        // The watchdog: should lockrun die from here on, it kills what is
        // in the run's cgroup.
        let home = k.cgroup.watchdog_home().map_err(|e| {
            RunError::Watchdog(std::io::Error::other(format!(
                "its cgroup beneath the run's: {} (a limit on nested cgroups, \
                     cgroup.max.depth or cgroup.max.descendants above it?)",
                chain(&e)
            )))
        })?;
        let watchdog = crate::sys::watchdog::Watchdog::start(k.cgroup.dir_fd(), home.as_fd())
            .map_err(RunError::Watchdog)?;
        drop(home);
        tracing::debug!("7. watchdog started (pid {})", watchdog.pid());
        Ok((k, watchdog, queues))
    });
    let kernel_audit_started = kernel_audit.wait();
    let Some((secrets, sealed)) = secrets.wait() else {
        return Err(FsError::WalkPanicked.into());
    };
    let Some((fs, made)) = walk.wait() else {
        return Err(FsError::WalkPanicked.into());
    };
    let ((kernel, watchdog, queues), (fs, linked)) = match (kernel, fs) {
        (Ok(kernel), Ok(fs)) => (kernel, fs),
        (_, Err(e)) => return Err(e.into()),
        (Err(e), Ok(_)) => return Err(e),
    };
    // In setup order, so that they drop in reverse.
    let KernelSide {
        seccomp,
        listener_rx,
        listener_tx,
        cgroup,
        join_v1,
        proxy,
        proxy_env,
        mut hooks,
    } = kernel;
    // Last, so that it drops first, as the last step set up.
    let started = kernel_audit_started.map_or_else(
        || Err("starting the kernel audit reader panicked".to_owned()),
        |r| r.map_err(|e| e.to_string()),
    );
    let kernel_audit = match started {
        Ok(k) => Some(k),
        Err(why) => {
            audit.record(Event::Notice {
                layer: crate::audit::Layer::Filesystem,
                message: format!("filesystem refusals are not collected: {why}"),
            });
            None
        }
    };
    // A denied path inside a writable dir: the dir cannot be granted whole,
    // and the refusals it brings are explained before they happen.
    for n in fs.narrowed() {
        tracing::warn!("{n}");
        audit.record(Event::Narrowed(n.clone()));
    }
    // Denied trees the walk for other names did not finish: a file there
    // with a name outside is not guarded.
    for (dir, why) in &linked.unwalked {
        let message = format!(
            "other names (hard links) of the files beneath {} not looked for: {why}; a file \
             there with a name outside the denied paths is readable by that name",
            dir.display()
        );
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Filesystem,
            message,
        });
    }
    // A denied path among thousands of siblings: a cost of every run, said
    // so that it can be moved rather than paid unexplained.
    for c in fs.crowded() {
        let message = c.to_string();
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Filesystem,
            message,
        });
    }
    // What the supervisor judges by, taken before the ruleset goes to the child.
    // The run's own /dev/shm is writable as its tmp is; the supervisor
    // opens it from the command's root, in the command's mount namespace.
    let own = fs.own_filesystems().to_vec();
    let supervise = crate::supervise::Config {
        writable: (fs.writable_roots().iter().cloned())
            .chain(
                own.iter()
                    .filter(|o| o.writable())
                    .map(|o| o.path().to_path_buf()),
            )
            .collect(),
        denied: fs.denied().to_vec(),
        written_outside: fs.written_outside().to_vec(),
        unix: vec![policy.worktree.clone(), dir.tmp().to_path_buf()],
        cgroup_id: cgroup.id(),
        cgroup_path: cgroup.seen_in_proc(),
        audit: audit.clone(),
        fallbacks: crate::kernel::Kernel::get().fallbacks(),
    };
    tracing::debug!("3. Landlock ruleset received");
    // 7. below Landlock ABI 7, the run's refused calls from kernel audit
    //    (removed when this drops, on every path).
    let refused_calls = refused_calls_seen(
        policy,
        &cgroup,
        kernel_audit.as_ref(),
        (&supervise.writable, &fs),
        audit,
    )?;
    // The denied files' other names, judged from here on: the command has
    // not started.
    linked.arm(crate::fs::links::Judge {
        run_cgroup: supervise.cgroup_path.clone(),
        writable: supervise.writable.clone(),
        audit: audit.clone(),
    });
    // Each of the run's own filesystems, made and granted beside
    // ([`made_filesystems`]) and moved by the child onto its path, which
    // hides the machine's; the run's message queues, made in this thread's
    // IPC namespace, are granted here.
    let ruleset = fs.into_fd();
    let mq = crate::fs::OwnFs::MessageQueues;
    let mut mounts = queues
        .as_ref()
        .map_or(Ok(()), |q| {
            crate::sys::grant_beneath(ruleset.as_fd(), q.as_fd(), mq.rights())
        })
        .and_then(|()| {
            let mut m = Vec::new();
            if let (Some(q), true) = (&queues, own.contains(&mq)) {
                m.push(crate::sys::OwnMount::made(q.try_clone()?, mq.path())?);
            }
            // The others, and those hiding the machine's kernel filesystems.
            for (at, fs) in made.unwrap_or_else(|| Ok(Vec::new()))? {
                m.push(crate::sys::OwnMount::made(fs, &at)?);
            }
            // The machine's own secrets, masked.
            if let Some(sealed) = sealed? {
                for mask in crate::fs::masks(secrets, &supervise.writable) {
                    m.push(crate::sys::OwnMount::bind(sealed.over(&mask), mask.path())?);
                }
            }
            Ok(m)
        });
    // The caller's terminal is on the machine's /dev/pts, out of sight
    // inside: it keeps a name there as /dev/console (as under bubblewrap),
    // which `ttyname` finds when it looks through /dev. Bound by its name,
    // before the run's own /dev/pts hides it: a descriptor keeps the mount
    // of lockrun's namespace, which the child's cannot bind from.
    if let (Ok(m), Some(tty)) = (&mut mounts, callers_terminal(&own)) {
        match crate::sys::OwnMount::bind(&tty, Path::new(CONSOLE)) {
            Ok(b) => m.insert(0, b),
            Err(e) => mounts = Err(e),
        }
    }
    let mounts = mounts.map_err(|source| RunError::Child {
        what: "the run's own /dev/shm, /dev/pts, /dev/mqueue and /proc, the hidden kernel filesystems and the masked machine secrets",
        source,
    })?;
    // A crash must not start a program outside the sandbox (see core_dumps).
    let core_dumps = core_dumps::CoreDumps::of_machine();
    if core_dumps.off() {
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Filesystem,
            message: core_dumps.to_string(),
        });
    }
    let (mut plan, report) = crate::sys::ChildPlan::new(
        crate::sys::Restrict {
            ruleset,
            log_denials: crate::kernel::Kernel::get().landlock_abi() >= 7,
        },
        seccomp,
        listener_tx,
        nofile,
        core_dumps.off(),
        mounts,
        join_v1,
        refused_calls
            .as_ref()
            .map(|r| crate::sys::LoginUid::new(r.login_uid())),
    )
    .map_err(|source| RunError::Child {
        what: "report pipe",
        source,
    })?;
    // Without Landlock's device ioctl right: device files only under /dev.
    if crate::kernel::Kernel::get().devices_only_in_dev() {
        plan.keep_devices_in_dev();
    }

    // 8. environment
    let env = child_env(std::env::vars_os(), policy, dir.id(), dir.tmp(), &proxy_env);

    // A signal that arrived during setup cancels the run before anything starts.
    tokio::select! {
        biased;
        sig = signals.recv() => {
            say!("lockrun: {sig} during setup: the command was not started");
            return Ok(128 + sig as i32);
        }
        () = std::future::ready(()) => {}
    }

    // 9. spawn and supervise
    let (started, supervisor, mount_namespace) = spawn_and_wait(
        argv,
        &env,
        cgroup.dir_fd(),
        plan,
        report,
        (listener_rx, supervise),
        &mut signals,
        kernel_audit.as_ref(),
    )
    .await?;

    tracing::debug!("9. the command ended");

    // 10. teardown, in reverse: what is left of the run is killed, the hooks
    //     drained and the run unregistered, the proxy stopped, the kernel audit read to
    //     its end; the run dir is removed beside, once the cgroup is empty.
    let mut teardown_errors = Vec::new();
    // The command's mount namespace, which lockrun held so that the
    // command's exit, which lockrun waited for, did not tear it down
    // (see `Child::mount_namespace`): its teardown, an RCU grace period,
    // passes beside, now.
    let namespace_dropped = beside.run(move || drop(mount_namespace));
    // What is left of the run dies with its watchdog, in one instant; the
    // watchdog is reaped the moment it is dead (its exit is reported to
    // lockrun, its parent, at once), which is most often all that the
    // wait for the cgroup to empty then waits for: it finds it empty,
    // rather than waking from its first sleep to see so.
    let killed = cgroup.kill();
    drop(watchdog);
    let emptied = killed.and_then(|()| cgroup.wait_empty());
    // No task of the run is left (or none that `lockrun gc` will not
    // kill): the audit stream's end can be marked now, and the kernel
    // queues it while the rest is torn down. Nor a call of the run to
    // record: its audit rule goes, after the mark, on a thread of its own
    // (the kernel waits out an RCU grace period to delete it, holding its
    // audit lock, which the mark would wait for; on its own thread it
    // overlaps the namespace's beside). With processes of the run left, the
    // rule stays for them, and `lockrun gc` removes it once their cgroup
    // is gone.
    let mut kernel_audit = kernel_audit;
    if let Some(k) = kernel_audit.as_mut() {
        k.send_marker();
    }
    let rules_removed = match (&emptied, refused_calls) {
        (Ok(()), Some(rules)) => crate::audit::syscalls::remove_beside(rules),
        (Err(_), Some(rules)) => {
            rules.leave();
            None
        }
        (_, None) => None,
    };
    // No process of the run is left (or none that `lockrun gc` will not
    // kill): the run dir goes now, beside the rest of the teardown (kept
    // for a later run only once the run's cgroup is known empty).
    let run_id = dir.id().to_owned();
    if emptied.is_ok() {
        dir.ended();
    }
    let dir_removed = beside.run(move || drop(dir));
    let removed = match emptied {
        Ok(()) => {
            // The forks refused at the run's task limit, counted by the
            // kernel until the last task of the run was gone.
            match cgroup.tasks_refused() {
                Some(Ok((limit, refused, ran_out))) if refused > 0 => {
                    audit.record(Event::TaskLimit {
                        limit,
                        refused,
                        ran_out,
                    });
                }
                Some(Err(e)) => teardown_errors.push(format!(
                    "reading the forks refused at the run's task limit: {}",
                    chain(&e)
                )),
                _ => {}
            }
            // The processes killed out of memory, likewise.
            match cgroup.memory_report() {
                Some(Ok(r)) if r.oom_kills > 0 => audit.record(Event::MemoryLimit {
                    limit: r.limit,
                    killed: r.oom_kills,
                    peak: r.peak,
                    ran_out: r.ran_out,
                }),
                Some(Err(e)) => teardown_errors.push(format!(
                    "reading the processes killed out of memory: {}",
                    chain(&e)
                )),
                _ => {}
            }
            cgroup.remove()
        }
        // Not killed, or not emptied in time: left to `lockrun gc`, not
        // killed and waited for again.
        Err(e) => {
            cgroup.leave();
            Err(e)
        }
    };
    // Its limits' v1 cgroups, empty with it, go beside (an rmdir of a
    // memory cgroup takes ~40 µs here, and one beneath the caller's, its
    // `lockrun/` too).
    let limits_removed = match removed {
        Ok(limits) => Some(beside.run(move || limits.remove())),
        Err(e) => {
            teardown_errors.push(format!("removing the run's cgroup: {}", chain(&e)));
            None
        }
    };
    if let Some(s) = supervisor {
        s.finish();
    }
    linked.finish();
    if let Some(h) = hooks.take() {
        if let Err(e) = h.finish(audit) {
            teardown_errors.push(format!(
                "unregistering the run from the hooks: {}",
                chain(&e)
            ));
        }
    }
    // No process of the run is left to race it: the worktree's git files
    // go back as they were.
    if let Some(g) = &git_guard {
        for change in g.restore(&run_id) {
            let message = change.to_string();
            say!("lockrun: git: {message}");
            audit.record(Event::Notice {
                layer: crate::audit::Layer::Filesystem,
                message,
            });
        }
    }
    // Nor to change the terminal again: its settings go back as they were.
    for restored in terminals.restore() {
        let message = restored.to_string();
        say!("lockrun: {message}");
        audit.record(Event::Notice {
            layer: crate::audit::Layer::Scope,
            message,
        });
    }
    if let Some(p) = proxy {
        p.shutdown().await;
    }
    if let Some(k) = kernel_audit {
        k.finish();
    }
    if let Some(Some(Err(e))) = limits_removed.map(beside::Pending::wait) {
        teardown_errors.push(format!("removing the run's limits' cgroups: {}", chain(&e)));
    }
    tracing::debug!("10. torn down");
    for e in &teardown_errors {
        say!("lockrun: warning: {e} (`lockrun gc` will retry)");
    }

    let code = match started {
        Started::Exited(status) => {
            match status.signal() {
                Some(sig) if core_dumps.off() && core_dumps::dumps(sig) => say!(
                    "lockrun: the command died of signal {sig} and left no core dump: {core_dumps}"
                ),
                _ => {}
            }
            exit_code(status)
        }
        Started::NotFound(e) => {
            say!("lockrun: {}: {e}", argv[0].to_string_lossy());
            exit::NOT_FOUND
        }
        Started::NotExecutable(e) => {
            say!("lockrun: {}: {e}", argv[0].to_string_lossy());
            exit::NOT_EXECUTABLE
        }
    };
    audit.record(Event::RunEnd {
        run_id,
        exit: code,
        refused: audit.refused(),
        unwritten: 0,
    });
    // The message queues' mount: detached where the machine has no
    // /dev/mqueue, its last close waits out an RCU grace period, in step
    // with the namespace's beside, while this thread has nothing else to do.
    drop(queues);
    // A panic there left what it had not removed to `lockrun gc`.
    let _ = namespace_dropped.wait();
    let _ = dir_removed.wait();
    if let Some(t) = rules_removed {
        let _ = t.join();
    }
    tracing::debug!("11. run dir removed");
    Ok(code)
}

/// What the run's Landlock ruleset grants, by path: the rule of each path
/// the walk granted, and of each filesystem of the run's own, granted
/// where the child mounts it.
fn granted(fs: &crate::fs::FsSandbox) -> crate::audit::syscalls::refer::Granted {
    let rules = fs
        .grants()
        .iter()
        .map(|(p, g)| (p.clone(), crate::fs::grant_rights(*g)));
    let own = (fs.own_filesystems().iter()).map(|o| (o.path().to_path_buf(), o.rights()));
    crate::audit::syscalls::refer::Granted {
        handled: crate::fs::handled_rights(),
        rules: rules.chain(own).collect(),
    }
}

/// What no mechanism records below Landlock ABI 7, said in the notice of
/// every run whose refusals kernel audit shows there
/// ([`crate::audit::syscalls::reach`]).
const PROC_UNSEEN: &str = "Processes outside the run hidden from its /proc (Landlock's ptrace \
     scoping) are not recorded: a lookup of one fails as any missing path does (ENOENT), and a \
     listing leaves it out, with no record naming it";

/// Below Landlock ABI 7, kernel audit's records of the run's refused calls
/// show its filesystem refusals ([`crate::audit::syscalls`]): the run's
/// login uid from its cgroup, its rules loaded (removed when the guard
/// drops), and the reader told whose calls to take, with the run's
/// `writable` paths and what its ruleset `fs` grants. `None` where
/// Landlock logs them itself, or where they cannot be shown and the policy
/// accepts that gap; a refusal of the run where it does not.
fn refused_calls_seen(
    policy: &Policy,
    cgroup: &crate::cgroup::RunCgroup,
    reader: Option<&crate::audit::kernel::KernelAudit>,
    (writable, fs): (&[PathBuf], &crate::fs::FsSandbox),
    audit: &crate::audit::AuditLog,
) -> Result<Option<crate::audit::syscalls::RunRules>, RunError> {
    use crate::audit::{syscalls, Event, Layer};
    let kernel = crate::kernel::Kernel::get();
    let Some(probe) = kernel.refusals_by_syscall_audit() else {
        // Landlock logs them itself; or they cannot be shown, which the
        // policy accepts or (a caller that may not ask) is refused here.
        return match kernel.syscall_audit {
            Some(Err(why))
                if !policy
                    .run
                    .accept_gaps
                    .contains(&crate::kernel::Gap::FilesystemRefusalsUnseen) =>
            {
                Err(RunError::RefusalsUnseen(why.to_string()))
            }
            _ => Ok(None),
        };
    };
    let reach = syscalls::Reach::below_abi_7(kernel.landlock_abi(), kernel.fallbacks());
    let notice = |message: String| {
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    };
    let set_up = reader
        .ok_or_else(|| "the kernel audit reader did not start".to_owned())
        .and_then(|reader| {
            let (rules, turned_on) = syscalls::login_uid_of(cgroup.id())
                .and_then(|uid| syscalls::RunRules::add(uid, probe, &reach.rules()))
                .map_err(|e| e.to_string())?;
            reader.watch_calls(syscalls::Watch {
                login_uid: rules.login_uid(),
                writable: writable.to_vec(),
                granted: granted(fs),
                cgroup: cgroup.seen_in_proc(),
                reach,
            });
            Ok((rules, turned_on))
        });
    match set_up {
        Ok((rules, turned_on)) => {
            if turned_on {
                notice(
                    "kernel audit was off; lockrun turned it on (audit_enabled=1) so that the \
                     kernel records the run's refused calls"
                        .into(),
                );
            }
            let reaches = if reach.rules().contains(&syscalls::Refused::Reach) {
                "; signals to processes outside the run and connects and sends to abstract \
                 sockets bound outside it, from its signal and socket calls refused with EPERM"
            } else {
                ""
            };
            notice(format!(
                "Landlock logs no refusal below ABI 7 (this kernel's is {}): filesystem refusals \
                 are taken from kernel audit's records of the calls of the run's login uid {} \
                 refused with EACCES, their access derived from the call (refusals by permission \
                 bits are among them), and of its links and renames refused with EXDEV where \
                 Landlock refused them (not a move across mounts){reaches}. {PROC_UNSEEN}",
                kernel.landlock_abi(),
                rules.login_uid(),
            ));
            Ok(Some(rules))
        }
        Err(why) => {
            let gap = crate::kernel::Gap::FilesystemRefusalsUnseen;
            if !policy.run.accept_gaps.contains(&gap) {
                return Err(RunError::RefusalsUnseen(why));
            }
            let message = format!(
                "this kernel cannot hold a promise, which the policy accepts ({}): {gap} (kernel \
                 audit's syscall records, which stand in for Landlock's denial logging, could not \
                 be set up: {why})",
                gap.name()
            );
            say!("lockrun: warning: {message}");
            notice(message);
            Ok(None)
        }
    }
}

/// `CAP_SYS_ADMIN`'s number.
const CAP_SYS_ADMIN: u32 = 21;

/// The promises this kernel cannot hold ([`crate::kernel::Gap`]), each of
/// which the policy accepts; or the refusal naming those it does not.
///
/// A caller without `CAP_SYS_ADMIN`, which every run needs (its mount
/// namespace, its cgroup, its eBPF hooks), is not judged here: what the
/// kernel was asked (a BPF program loaded, kernel audit's rules) was
/// refused for the caller's want of privileges, not for the kernel's lack,
/// and such a run is refused at its first privileged step, naming it. (A
/// run that got past that without kernel audit's records is refused where
/// its audit rule is added: [`refused_calls_seen`].)
fn gaps_accepted(policy: &Policy) -> Result<Vec<crate::kernel::Gap>, RunError> {
    if !crate::sys::has_effective_cap(CAP_SYS_ADMIN).unwrap_or(true) {
        return Ok(Vec::new());
    }
    let (accepted, refused): (Vec<_>, Vec<_>) = crate::kernel::Kernel::get()
        .gaps()
        .into_iter()
        .partition(|g| policy.run.accept_gaps.contains(g));
    if refused.is_empty() {
        Ok(accepted)
    } else {
        Err(RunError::Gaps(refused))
    }
}

/// System V IPC objects (shared memory, message queues, semaphores) are
/// not files: Landlock does not see them, and a command, often
/// uid 0 like the objects' owners, could attach another process's shared
/// memory and write into it, or send to its queue. So the run gets an IPC
/// namespace of its own, where only the objects its processes make exist;
/// those outside are not there to name (`ENOENT`, `EINVAL`). The command
/// cannot leave it: `setns` and `unshare` are on the seccomp deny list.
///
/// lockrun's own thread moves into it (`unshare(CLONE_NEWIPC)`; the
/// command is cloned from this thread and starts there), so the ~0.1 ms the
/// kernel takes to make one is spent while the Landlock walk finishes
/// beside. lockrun uses no IPC object itself. A kernel without IPC
/// namespaces refuses the run: nothing else keeps those objects apart.
fn own_ipc_namespace() -> Result<(), RunError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWIPC)
        .map_err(|e| RunError::IpcNamespace(e.into()))
}

/// The run's POSIX message queues: the mqueue filesystem of its IPC
/// namespace, which this thread is in ([`own_ipc_namespace`]), where
/// `mq_open` opens them. Made here (`fsopen`, `fsmount`), a detached
/// mount that lockrun holds until the run has ended and closes beside: the
/// last close of a detached mount waits out an RCU grace period, ~0.2 ms
/// here, which the child would pay before the command starts. `None` on a
/// kernel without POSIX message queues (`ENODEV`): there are none to keep
/// apart, nor to grant.
fn own_message_queues() -> Result<Option<std::os::fd::OwnedFd>, RunError> {
    match crate::sys::make_fs(&crate::fs::OwnFs::MessageQueues.new_fs()) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            tracing::debug!("no POSIX message queues in this kernel (fsopen mqueue: ENODEV)");
            Ok(None)
        }
        Err(source) => Err(RunError::Child {
            what: "the run's own message queues (fsopen and fsmount of mqueue)",
            source,
        }),
    }
}

/// The run's own filesystems ([`crate::fs::OwnFs`]) but its message queues
/// (made by [`own_message_queues`], in lockrun's IPC namespace), each made
/// and granted in the ruleset, and an empty read-only filesystem for each
/// of the machine's kernel filesystems to hide (`HIDDEN_FS`): detached
/// mounts, with the path each goes onto. Made beside, once the walk is
/// done, while lockrun's thread sets up the rest; the child only moves
/// them onto their paths (a `move_mount` each, where making one took it
/// ~40 µs of the command's start).
fn made_filesystems(fs: &FsSandbox) -> std::io::Result<Vec<(PathBuf, std::os::fd::OwnedFd)>> {
    use std::os::fd::AsFd as _;
    let mut made = Vec::new();
    for &o in fs.own_filesystems() {
        if o.reached_without_path() {
            continue;
        }
        let m = crate::sys::make_fs(&o.new_fs())?;
        crate::sys::grant_beneath(fs.ruleset_fd().as_fd(), m.as_fd(), o.rights())?;
        made.push((o.path().to_path_buf(), m));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    for at in crate::fs::hidden_mounts(&mountinfo) {
        made.push((at, crate::sys::make_fs(&crate::fs::empty_fs())?));
    }
    Ok(made)
}

/// Where the caller's terminal is named inside a run.
const CONSOLE: &str = "/dev/console";

/// The name of the first of lockrun's stdin, stdout and stderr that is a
/// terminal on the machine's `/dev/pts`, when the run has terminals of its
/// own (and there is a `/dev/console` to bind it on).
fn callers_terminal(own: &[crate::fs::OwnFs]) -> Option<PathBuf> {
    if !own.contains(&crate::fs::OwnFs::Terminals) || std::fs::symlink_metadata(CONSOLE).is_err() {
        return None;
    }
    (0..=2).find_map(|fd| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .ok()
            .filter(|p| p.starts_with(crate::fs::OwnFs::Terminals.path()))
    })
}

/// What steps 3–6 made, in setup order: the seccomp filter, the listener's
/// socketpair, the cgroup, the proxy and its variables, the hooks'
/// registration (step 7's kernel audit reader starts beside). Each tears
/// itself down on drop.
struct KernelSide {
    seccomp: seccompiler::BpfProgram,
    listener_rx: std::os::fd::OwnedFd,
    listener_tx: std::os::fd::OwnedFd,
    cgroup: crate::cgroup::RunCgroup,
    /// Where the run's task or memory limit is a cgroup of a v1
    /// hierarchy: its `tasks` file, which the command's process joins
    /// first, with the step that names it.
    join_v1: Vec<(crate::sys::Step, std::os::fd::OwnedFd)>,
    proxy: Option<crate::proxy::RunningProxy>,
    proxy_env: Vec<(OsString, OsString)>,
    hooks: Option<crate::bpf::NetworkHooks>,
}

/// Steps 3 (seccomp) to 6, run while the Landlock walk goes on beside.
fn kernel_side(
    policy: &Policy,
    dir: &RunDir,
    audit: &std::sync::Arc<crate::audit::AuditLog>,
) -> Result<KernelSide, RunError> {
    // 3. the seccomp filters (the Landlock ruleset is on its way, above).
    let seccomp = crate::seccomp::combined(crate::kernel::Kernel::get().fallbacks())?;
    tracing::debug!("3. seccomp filter compiled");
    // The supervised filter's listener travels from the child to lockrun
    // through this socketpair (SCM_RIGHTS), after the child loaded it.
    let (listener_rx, listener_tx) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| RunError::Child {
        what: "socketpair for the seccomp listener",
        source: e.into(),
    })?;

    // 4. the run's cgroup; the child is born in it (clone3 CLONE_INTO_CGROUP).
    //    Dropped (killed and removed) on every path after this.
    #[cfg(feature = "weaken-for-tests")]
    let weaken_hooks = std::env::var_os("LOCKRUN_TEST_WEAKEN").is_some_and(|v| v == "hooks");
    #[cfg(not(feature = "weaken-for-tests"))]
    let weaken_hooks = false;
    #[cfg(feature = "weaken-for-tests")]
    let cgroup = if weaken_hooks {
        crate::cgroup::RunCgroup::create_outside_the_hooks(dir.id())
    } else {
        crate::cgroup::RunCgroup::create(dir.id())
    };
    #[cfg(not(feature = "weaken-for-tests"))]
    let cgroup = crate::cgroup::RunCgroup::create(dir.id());
    let mut cgroup = cgroup?;
    // Its task limit: a fork bomb stops there, not at the machine's pids;
    // its memory limit: the kernel's OOM killer acts in the run, not on
    // the machine.
    let join_tasks = cgroup.limit_tasks(dir.id(), policy.run.max_tasks)?;
    let join_memory = cgroup.limit_memory(dir.id(), policy.run.max_memory)?;
    let join_v1: Vec<_> = [
        join_tasks.map(|fd| (crate::sys::Step::JoinTasks, fd)),
        join_memory.map(|fd| (crate::sys::Step::JoinMemory, fd)),
    ]
    .into_iter()
    .flatten()
    .collect();
    tracing::debug!("4. cgroup created, its tasks and memory limited");

    // 5. the proxy, when the policy allows any host; its endpoint is the one
    //    way out the hooks allow, beside the policy's loopback endpoints.
    let proxy = if policy.network.needs_proxy() {
        let config = crate::proxy::ProxyConfig::from_policy(
            policy,
            audit.clone(),
            std::sync::Arc::new(crate::proxy::SystemResolver),
        );
        Some(crate::proxy::RunningProxy::start(config)?)
    } else {
        None
    };
    tracing::debug!(
        "5. proxy: {}",
        if proxy.is_some() { "started" } else { "none" }
    );
    let mut allowed: Vec<std::net::SocketAddr> =
        proxy.iter().map(crate::proxy::RunningProxy::addr).collect();
    allowed.extend(policy.network.local.iter().copied());
    let proxy_env: Vec<(OsString, OsString)> = proxy
        .iter()
        .flat_map(crate::proxy::RunningProxy::env_vars)
        .map(|(k, v)| (k.into(), v.into()))
        .collect();

    // 6. the kernel network hooks: the run registered in the build's hooks,
    //    which judge its cgroup from its parent; their refusals stream
    //    into the audit log while the run goes on.
    let hooks = if weaken_hooks {
        say!("lockrun: TEST BUILD: the run's cgroup is deliberately outside the network hooks (LOCKRUN_TEST_WEAKEN=hooks)");
        None
    } else {
        let unix_allowed = [policy.worktree.clone(), dir.tmp().to_path_buf()];
        // Supervised: the seccomp supervisor resolves and performs the
        // command's pathname connects; the hooks refuse any it names itself.
        let exposed: Vec<u16> = policy.network.expose.iter().map(|p| p.get()).collect();
        let mut h = crate::bpf::NetworkHooks::attach_with(
            &cgroup,
            dir.id(),
            &allowed,
            &exposed,
            &unix_allowed,
            crate::bpf::unix::UnixMode::supervised(crate::kernel::Kernel::get().fallbacks()),
        )?;
        h.spawn_audit_reader(audit.clone())?;
        tracing::debug!("6. run registered in the hooks");
        Some(h)
    };

    Ok(KernelSide {
        seccomp,
        listener_rx,
        listener_tx,
        cgroup,
        join_v1,
        proxy,
        proxy_env,
        hooks,
    })
}

#[allow(clippy::too_many_arguments)] // the pieces of one spawn, prepared by `run`
async fn spawn_and_wait(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cgroup: std::os::fd::BorrowedFd<'_>,
    plan: crate::sys::ChildPlan,
    report: crate::sys::Report,
    supervise: (std::os::fd::OwnedFd, crate::supervise::Config),
    signals: &mut Signals,
    kernel_audit: Option<&crate::audit::kernel::KernelAudit>,
) -> Result<
    (
        Started,
        Option<crate::supervise::Supervisor>,
        Option<std::os::fd::OwnedFd>,
    ),
    RunError,
> {
    use crate::sys::spawn::SpawnError;
    use std::os::fd::AsFd as _;
    tracing::debug!("9. spawning");
    if let Some(k) = kernel_audit {
        k.wait_for_baseline();
    }
    let mut child = match crate::sys::spawn::spawn(argv, env, cgroup, plan, report) {
        Ok(c) => c,
        Err(SpawnError::Clone(source)) => {
            return Err(RunError::Child {
                what: "clone3 into the run's cgroup",
                source,
            })
        }
        Err(SpawnError::Confine(step, source)) => return Err(RunError::Confine { step, source }),
        Err(SpawnError::Exec(e)) => {
            let started = match e.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => Started::NotFound(e),
                _ => Started::NotExecutable(e),
            };
            return Ok((started, None, None));
        }
    };
    // Held until the teardown (see there): the command's exit then leaves
    // the namespace standing.
    let mount_namespace = child.take_mount_namespace();
    // The child sent the listener (and its root) before exec; without it, its notified
    // syscalls would fail (ENOSYS): refuse the run rather than limp.
    let (listener_rx, config) = supervise;
    let supervisor = match crate::sys::supervisor_calls::recv_fds(listener_rx.as_fd())
        .and_then(|[listener, root]| crate::supervise::Supervisor::start(listener, root, config))
    {
        Ok(s) => s,
        Err(source) => {
            child.kill().await;
            return Err(RunError::Child {
                what: "receiving the seccomp listener and starting the supervisor",
                source,
            });
        }
    };
    drop(listener_rx);
    tracing::debug!("9. the command is running; its supervisor started");
    let pid = child.id();
    if let Some(k) = kernel_audit {
        k.watch(pid);
    }
    // 9. supervise
    loop {
        tokio::select! {
            status = child.wait() => {
                return status
                    .map(|s| (Started::Exited(s), Some(supervisor), mount_namespace))
                    .map_err(RunError::Wait);
            }
            sig = signals.recv() => child.signal(sig as libc::c_int),
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught for forwarding.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> nix::sys::signal::Signal {
        use nix::sys::signal::Signal;
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

/// The first word of the command, for messages.
#[must_use]
pub fn program_name(argv: &[OsString]) -> &OsStr {
    argv.first().map_or(OsStr::new(""), OsString::as_os_str)
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

    /// The run dir of a run that ended with its temp dir as it got it goes
    /// to the spares, and the next run takes it (the same temp dir, empty,
    /// 0700, the new owner); one whose temp dir was written, chmodded or
    /// had an entry made and removed, or whose run is not known to have
    /// ended, is removed; a spare older than half the grace period is not
    /// taken, and `lockrun gc`'s removal takes those older than it.
    #[test]
    fn a_run_dir_is_kept_for_a_later_run_only_as_its_run_got_it() {
        type Touch = fn(&Path);
        let scratch = crate::testing::Scratch::new("spare");
        let base = scratch.path().to_path_buf();
        let runs = RunDir::make_runs_dir(&base.join("runs"), "x").unwrap();
        let spares = base.join(SPARES);
        let grace = Duration::from_hours(1);
        let count = |d: &Path| std::fs::read_dir(d).map_or(0, Iterator::count);
        let fresh = |name: &str| RunDir::create_as(&runs, name.into(), grace).unwrap();

        let mut a = fresh("a");
        let ino = std::fs::metadata(a.tmp()).unwrap().ino();
        std::fs::read_dir(a.tmp()).unwrap().for_each(drop); // a listing changes nothing
        a.ended();
        drop(a);
        assert_eq!((count(&runs), count(&spares)), (0, 1), "kept");

        let mut b = fresh("b");
        let md = std::fs::metadata(b.tmp()).unwrap();
        assert_eq!(md.ino(), ino, "the spare was taken");
        assert_eq!(md.mode() & 0o7777, 0o700);
        assert_eq!(count(b.tmp()), 0);
        assert_eq!(count(&spares), 0);
        assert_eq!(Owner::of_run_dir(&runs.join("b")), Some(Owner::current()));

        // Touched in every way a run can touch it: never kept.
        let touches: [(&str, Touch); 3] = [
            ("a file made", |t| {
                std::fs::write(t.join("f"), b"x").unwrap();
            }),
            ("chmod", |t| {
                std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o700)).unwrap();
            }),
            ("an entry made and removed", |t| {
                std::fs::create_dir(t.join("d")).unwrap();
                std::fs::remove_dir(t.join("d")).unwrap();
            }),
        ];
        for (what, touch) in touches {
            std::thread::sleep(Duration::from_millis(10)); // a ctime of its own
            touch(b.tmp());
            b.ended();
            drop(b);
            assert_eq!(
                (count(&runs), count(&spares)),
                (0, 0),
                "{what}: removed, not kept"
            );
            b = fresh("b");
        }
        // Not known to have ended (a process of the run may be left): removed.
        drop(b);
        assert_eq!((count(&runs), count(&spares)), (0, 0), "not ended");

        // Old spares: not taken, and removed by gc's pass.
        let mut c = fresh("c");
        c.ended();
        drop(c);
        assert_eq!(count(&spares), 1);
        let old = std::fs::File::open(spares.join("c")).unwrap();
        old.set_modified(std::time::SystemTime::now() - Duration::from_mins(30))
            .unwrap();
        drop(fresh("d"));
        assert_eq!(count(&spares), 1, "older than half the grace: not taken");
        assert_eq!(remove_old_spares(&spares, Duration::from_hours(1)), 0);
        assert_eq!(remove_old_spares(&spares, Duration::from_mins(20)), 1);
        assert_eq!(count(&spares), 0);
    }

    /// A run dir made now names its owner by a symlink; one of an earlier
    /// build, by a file; one with neither, or with a line that does not
    /// parse, names none (and is reaped once old).
    #[test]
    fn a_run_dirs_owner_is_read_from_its_symlink_or_its_file() {
        let scratch = crate::testing::Scratch::new("owner");
        let base = scratch.path().to_path_buf();
        let runs = base.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let dir = RunDir::create(&runs).unwrap();
        let made = runs.join(dir.id());
        assert!(std::fs::symlink_metadata(made.join("owner"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(Owner::of_run_dir(&made), Some(Owner::current()));
        drop(dir);
        assert!(!made.exists());

        let earlier = base.join("earlier");
        std::fs::create_dir_all(&earlier).unwrap();
        assert_eq!(Owner::of_run_dir(&earlier), None);
        std::fs::write(earlier.join("owner"), "123 456\n").unwrap();
        assert_eq!(
            Owner::of_run_dir(&earlier),
            Some(Owner {
                pid: 123,
                start: 456
            })
        );
        std::fs::remove_file(earlier.join("owner")).unwrap();
        std::os::unix::fs::symlink("123 x", earlier.join("owner")).unwrap();
        assert_eq!(Owner::of_run_dir(&earlier), None);
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

    #[test]
    fn exit_code_is_status_or_128_plus_signal() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 128 + 9);
    }
}
