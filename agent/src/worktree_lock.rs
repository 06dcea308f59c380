//! One run at a time on a worktree with git, by a lock no run can take.
//!
//! [`crate::gitguard`] puts a worktree's hooks and config back after each
//! run; two runs at once would each put back what the other changed. The
//! lock that keeps them apart was a `flock` on the worktree directory. But
//! any process that can open a directory for reading can `flock` it, and a
//! run reads everywhere but its denied paths: a command of one run could
//! hold another agent's worktree and keep every run of that agent from
//! starting (refused, "in use by another run (process N)", naming the
//! command).
//!
//! So lockrun's own lock is a file in the state dir,
//! `<state>/worktrees/<st_dev>-<st_ino>` of the worktree, which every run
//! of that state dir is denied ([`crate::fs`]). It is unlinked by its holder
//! while still held; a lockrun that locked a file unlinked meanwhile takes
//! the one at the path again, so two never hold "the" lock at once.
//!
//! The `flock` on the worktree directory is still taken, for lockruns of
//! other state dirs. When it is held, its holders decide: if every one is
//! gone or is the command of some run (its cgroup v2 path is beneath
//! `/lockrun/`, where only lockrun puts processes and from which a command
//! cannot move itself), no lockrun holds it: the run goes on, and says who
//! held it. Any other holder is taken for another run, as before.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::cgroup::PARENT;
use crate::state::unified;

/// lockrun's own locks, in the state dir.
pub const LOCKS_DIR: &str = "worktrees";

/// Why the worktree could not be locked (and, as [`crate::gitguard::TakeError`],
/// why its guarded state could not be taken).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Another run (or whatever holds the lock) is on it.
    #[error("the worktree is locked by {}", holder.map_or_else(|| "another process".to_owned(), |p| format!("process {p}")))]
    Busy { holder: Option<u32> },
}

/// A process of a run that holds a `flock` on the worktree directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHolder {
    pub pid: u32,
    pub comm: String,
    /// Its run's id (the last part of its cgroup path).
    pub run: String,
}

/// Both locks, held until dropped.
#[derive(Debug)]
pub struct WorktreeLock {
    // Dropped in this order: the file is unlinked while still locked.
    _own: OwnLock,
    _dir: Option<Flock<OwnedFd>>,
    held_by_runs: Vec<RunHolder>,
}

impl WorktreeLock {
    /// Lock the worktree open at `worktree` for this run, with lockrun's
    /// own lock in `locks` (`<state>/worktrees`, made if missing).
    pub fn take(worktree: BorrowedFd<'_>, locks: &Path) -> Result<Self, LockError> {
        let st = nix::sys::stat::fstat(worktree.as_raw_fd()).map_err(std::io::Error::from)?;
        let own = OwnLock::take(locks, st.st_dev, st.st_ino)?;
        let dir = worktree.try_clone_to_owned()?;
        let (dir, held_by_runs) = match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => (Some(locked), Vec::new()),
            Err((dir, nix::errno::Errno::EWOULDBLOCK)) => {
                let holders = flock_holders(dir.as_fd());
                let mut runs = Vec::new();
                for pid in &holders {
                    match holder_kind(*pid) {
                        Holder::Gone => {}
                        Holder::Run(h) => runs.push(h),
                        Holder::Other => return Err(LockError::Busy { holder: Some(*pid) }),
                    }
                }
                if holders.is_empty() {
                    // Let go between our try and the read of /proc/locks,
                    // or not listed: another run, as far as we can tell.
                    return Err(LockError::Busy { holder: None });
                }
                (None, runs)
            }
            Err((_, e)) => return Err(LockError::Io(e.into())),
        };
        Ok(Self {
            _own: own,
            _dir: dir,
            held_by_runs,
        })
    }

    /// The commands of runs that held the worktree directory's `flock`
    /// when this run started (it went on without that lock).
    #[must_use]
    pub fn held_by_runs(&self) -> &[RunHolder] {
        &self.held_by_runs
    }
}

/// `<locks>/<dev>-<ino>`, locked; unlinked when dropped.
#[derive(Debug)]
struct OwnLock {
    path: PathBuf,
    _file: Flock<std::fs::File>,
}

impl OwnLock {
    fn take(locks: &Path, dev: u64, ino: u64) -> Result<Self, LockError> {
        match std::fs::DirBuilder::new().mode(0o700).create(locks) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
            _ => {}
        }
        let path = locks.join(format!("{dev:x}-{ino}"));
        // A holder unlinks the file before it lets go: a file locked here
        // that is no longer the one at the path is taken again.
        for _ in 0..16 {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)?;
            match lock_current(file, &path)? {
                Taken::Held(file) => return Ok(Self { path, _file: file }),
                Taken::Replaced => {}
                Taken::Busy(file) => {
                    return Err(LockError::Busy {
                        holder: flock_holders(file.as_fd()).first().copied(),
                    })
                }
            }
        }
        Err(LockError::Io(std::io::Error::other(format!(
            "{}: the lock file was replaced 16 times while being taken",
            path.display()
        ))))
    }
}

/// What [`lock_current`] found.
enum Taken {
    /// Locked, and still the file at its path.
    Held(Flock<std::fs::File>),
    /// Unlinked or replaced by its last holder meanwhile.
    Replaced,
    /// Another holds it.
    Busy(std::fs::File),
}

/// Lock `file`, opened at `path`, without waiting, and tell whether what
/// was locked is still the file at `path`: the step that keeps two
/// lockruns from holding "the" lock at once, given that holders unlink it.
fn lock_current(file: std::fs::File, path: &Path) -> std::io::Result<Taken> {
    let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(f) => f,
        Err((f, nix::errno::Errno::EWOULDBLOCK)) => return Ok(Taken::Busy(f)),
        Err((_, e)) => return Err(e.into()),
    };
    let held = nix::sys::stat::fstat(file.as_raw_fd())?;
    match nix::sys::stat::lstat(path) {
        Ok(now) if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) => Ok(Taken::Held(file)),
        Ok(_) | Err(nix::errno::Errno::ENOENT) => Ok(Taken::Replaced),
        Err(e) => Err(e.into()),
    }
}

impl Drop for OwnLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Remove the lock files in `locks` no lockrun holds (left by one killed
/// before it could unlink its own): each is locked first and unlinked only
/// if it is still the file at its path, as [`OwnLock`] does. Returns the
/// paths removed.
#[must_use]
pub fn sweep(locks: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(locks) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        if let Ok(Taken::Held(_locked)) = lock_current(file, &path) {
            if std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

/// The pids holding a `flock` on the file open at `fd`, from `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 26017 fd:01:1234 0 EOF`; a waiter's line
/// starts `1: ->` and is skipped).
fn flock_holders(fd: BorrowedFd<'_>) -> Vec<u32> {
    let Ok(st) = nix::sys::stat::fstat(fd.as_raw_fd()) else {
        return Vec::new();
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    holders_in(&locks, st.st_dev, st.st_ino)
}

fn holders_in(locks: &str, dev: u64, ino: u64) -> Vec<u32> {
    let want = format!(
        "{:02x}:{:02x}:{ino}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    locks
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
                .then(|| f.get(4)?.parse().ok())
                .flatten()
        })
        .collect()
}

enum Holder {
    /// No such process now: its lock lives on in a descriptor it handed
    /// down, and no lockrun hands its lock down.
    Gone,
    Run(RunHolder),
    /// Anything else: maybe a lockrun of another state dir.
    Other,
}

fn holder_kind(pid: u32) -> Holder {
    let Ok(cgroups) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Holder::Gone;
    };
    match run_of(&cgroups) {
        Some(run) => Holder::Run(RunHolder {
            pid,
            comm: std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim_end().to_owned())
                .unwrap_or_default(),
            run,
        }),
        None => Holder::Other,
    }
}

/// The run whose cgroup a process is in, from its `/proc/<pid>/cgroup`:
/// the cgroup v2 line (`0::/lockrun/build-…/<run-id>`).
fn run_of(cgroups: &str) -> Option<String> {
    let path = unified(cgroups)?;
    let beneath = path.strip_prefix(&format!("/{PARENT}/"))?;
    let run = beneath.rsplit('/').next()?;
    (!run.is_empty()).then(|| run.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_read_from_proc_locks() {
        let dev = nix::sys::stat::makedev(0xfd, 1);
        let locks = "1: FLOCK  ADVISORY  WRITE 26017 fd:01:1234 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 26020 fd:01:1234 0 EOF\n\
                     2: FLOCK  ADVISORY  READ 300 fd:01:1234 0 EOF\n\
                     3: POSIX  ADVISORY  READ 400 fd:01:1234 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 500 fd:01:12345 0 EOF\n";
        assert_eq!(holders_in(locks, dev, 1234), [26017, 300]);
        assert!(holders_in(locks, dev, 99).is_empty());
    }

    #[test]
    fn a_run_is_named_by_its_cgroup_v2_path_beneath_lockrun() {
        let run = "4:memory:/x\n0::/lockrun/build-b9dd4c303b6d3797/001796021795-069891778-26128\n";
        assert_eq!(run_of(run).as_deref(), Some("001796021795-069891778-26128"));
        assert_eq!(run_of("0::/lockrun/r1\n").as_deref(), Some("r1"));
        assert_eq!(run_of("0::/user.slice/session-1.scope\n"), None);
        assert_eq!(run_of("0::/lockrunner/x\n"), None);
        assert_eq!(run_of("0::/lockrun\n"), None);
        assert_eq!(run_of("1:name=systemd:/lockrun/x\n"), None);
    }
}
