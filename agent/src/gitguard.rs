//! The worktree's git hooks and configuration, as they were before the run.
//!
//! git runs `.git/hooks/*` and obeys `.git/config` (`core.hooksPath`,
//! `core.fsmonitor`, aliases, filters: all run programs) and `.git/commondir`
//! (which moves the config and hooks elsewhere) on the user's own git
//! commands. The worktree is writable, so a command could leave a hook
//! there that runs, unconfined, on the next `git commit` or `git push`
//! made outside the sandbox: an escape that waits.
//!
//! Landlock cannot keep those files read-only while the worktree around
//! them stays writable (a right granted on a directory holds for everything
//! beneath it), and a read-only bind mount of `hooks` can be sidestepped by
//! renaming `.git` or writing `commondir`. So lockrun keeps them as they
//! were: [`GitGuard::take`] reads them before the command starts, and
//! [`GitGuard::restore`], once no process of the run is left, puts back
//! every one the run changed, added or removed. What the run left is moved
//! aside, never deleted: `.git/lockrun-quarantine-<run-id>/`. Each change
//! is reported (one line on stderr, a notice in the audit log).
//!
//! Guarded: a `.git` *directory* at the top of the worktree that existed
//! when the run started: `config`, `config.worktree`, `commondir`, and
//! every entry of `hooks/` except git's inert `*.sample` files. Not guarded:
//! a repository the run creates, `.git` files of linked worktrees, nested
//! repositories and submodules' gitdirs (see the README).
//!
//! Everything is opened relative to descriptors, never following a
//! symlink: the run may have planted one anywhere in `.git`, and lockrun
//! acts here as root, outside the sandbox.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use nix::sys::stat::Mode;

use crate::sys::supervisor_calls::openat2;
use crate::worktree_lock::WorktreeLock;

/// The files directly in `.git` that are guarded.
const GUARDED_FILES: [&str; 3] = ["config", "config.worktree", "commondir"];
/// The directory whose entries are guarded.
const HOOKS: &str = "hooks";
/// Where what a run left is moved, inside `.git`.
const QUARANTINE: &str = "lockrun-quarantine";
/// A guarded file larger than this is compared but cannot be put back.
const MAX_KEPT: u64 = 1 << 20;

/// One guarded entry as it is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        mode: u32,
        uid: u32,
        gid: u32,
        bytes: Vec<u8>,
    },
    /// Too large to keep: compared by identity and times only.
    Large {
        ino: u64,
        size: i64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
    Dir {
        mode: u32,
        uid: u32,
        gid: u32,
    },
    /// A symlink, fifo, socket or device: never put back, always moved aside.
    Other {
        kind: u32,
    },
}

/// Guarded entries by their path relative to `.git` (`config`, `hooks`,
/// `hooks/pre-commit`).
type State = BTreeMap<PathBuf, Entry>;

/// What happened to one guarded entry during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Changed,
    Removed,
}

/// What lockrun did about it.
#[derive(Debug)]
pub enum Outcome {
    /// Put back as it was; the run's version (if any) is at `kept`.
    Restored { kept: Option<PathBuf> },
    /// Moved aside (it did not exist before the run).
    MovedAside { kept: PathBuf },
    /// Moved aside, but the original could not be put back: why.
    NotRestored { kept: Option<PathBuf>, why: NotKept },
    /// Nothing could be done: the reason.
    Failed(io::Error),
}

/// Why an original cannot be put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotKept {
    /// A file over [`MAX_KEPT`]: compared, not copied.
    TooLarge,
    /// A symlink, fifo, socket or device: never made again by lockrun.
    NotAFileOrDir,
    /// `.git` itself is no longer a directory: the repository is not copied.
    Repository,
}

impl NotKept {
    fn describe(self) -> &'static str {
        match self {
            Self::TooLarge => "the original was too large to keep",
            Self::NotAFileOrDir => "the original was not a file or directory",
            Self::Repository => "lockrun keeps no copy of a whole repository",
        }
    }
}

/// One guarded entry the run changed, and what lockrun did.
#[derive(Debug)]
pub struct GitChange {
    pub path: PathBuf,
    pub change: Change,
    pub outcome: Outcome,
}

impl std::fmt::Display for GitChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.change {
            Change::Added => "added",
            Change::Changed => "changed",
            Change::Removed => "removed",
        };
        write!(
            f,
            "the command {what} {}, which git runs or obeys outside the sandbox: ",
            self.path.display()
        )?;
        match &self.outcome {
            Outcome::Restored { kept: Some(k) } => write!(
                f,
                "put back as it was before the run; the command's version is at {}",
                k.display()
            ),
            Outcome::Restored { kept: None } => f.write_str("put back as it was before the run"),
            Outcome::MovedAside { kept } => write!(f, "moved to {}", kept.display()),
            Outcome::NotRestored { kept, why } => write!(
                f,
                "{}: it is NOT back{}; check it before running git there",
                why.describe(),
                kept.as_ref().map_or_else(String::new, |k| format!(
                    " (the command's version is at {})",
                    k.display()
                ))
            ),
            Outcome::Failed(e) => write!(
                f,
                "could NOT be put back ({e}); check it before running git there"
            ),
        }
    }
}

/// Why the guarded state could not be taken: it could not be read, or the
/// worktree is another run's.
pub use crate::worktree_lock::LockError as TakeError;

/// The guarded state of a worktree's `.git`, taken before the run.
pub struct GitGuard {
    /// The worktree.
    worktree: OwnedFd,
    /// One run at a time on it, while the guard lives.
    lock: WorktreeLock,
    git_path: PathBuf,
    before: State,
}

impl GitGuard {
    /// Read the guarded files of `<worktree>/.git`. `Ok(None)` when there is
    /// no `.git` directory there (nothing to guard); an error when there is
    /// one that cannot be read (the run must not start unguarded).
    ///
    /// The worktree is locked ([`WorktreeLock`], in `locks`:
    /// `<state>/worktrees`) until the guard is dropped: two runs on one
    /// worktree would each put back what the other changed, a hook planted
    /// by the first restored by the second as "as it was".
    pub fn take(worktree: &Path, locks: &Path) -> Result<Option<Self>, TakeError> {
        let wt = open_abs_dir(worktree)?;
        let git = match open_dir(wt.as_fd(), OsStr::new(".git")) {
            Ok(g) => g,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let lock = WorktreeLock::take(wt.as_fd(), locks)?;
        let before = read_state(git.as_fd())?;
        Ok(Some(Self {
            worktree: wt,
            lock,
            git_path: worktree.join(".git"),
            before,
        }))
    }

    /// The worktree's lock, held while the guard lives.
    #[must_use]
    pub fn lock(&self) -> &WorktreeLock {
        &self.lock
    }

    /// Put every guarded entry back as it was, moving what the run left to
    /// `.git/lockrun-quarantine-<run_id>/`. Call it once no process of the
    /// run is left. Returns what changed, and what was done about it.
    #[must_use]
    pub fn restore(&self, run_id: &str) -> Vec<GitChange> {
        // `.git` by name again: the run may have renamed the directory and
        // made another in its place.
        let git = match open_dir(self.worktree.as_fd(), OsStr::new(".git")) {
            Ok(g) => g,
            Err(e) => return vec![self.git_replaced(&e, run_id)],
        };
        let after = match read_state(git.as_fd()) {
            Ok(a) => a,
            Err(e) => {
                return vec![GitChange {
                    path: self.git_path.clone(),
                    change: Change::Changed,
                    outcome: Outcome::Failed(e),
                }]
            }
        };
        let mut q = Quarantine {
            git: git.as_fd(),
            run_id,
            git_path: &self.git_path,
            dir: None,
        };
        let mut changes = Vec::new();
        let hooks = Path::new(HOOKS);
        // `hooks` itself first: if it is not the directory it was, it goes
        // aside whole, with everything in it, and is made again.
        let hooks_replaced = self.before.get(hooks) != after.get(hooks);
        if hooks_replaced {
            let (was, now) = (self.before.get(hooks), after.get(hooks));
            let mut outcome = fix(git.as_fd(), hooks, was, now, &mut q);
            if matches!(outcome, Outcome::Restored { .. }) {
                for (key, entry) in &self.before {
                    if key.starts_with(hooks) && key != hooks {
                        if let Err(e) = put_back(git.as_fd(), key, entry) {
                            outcome = Outcome::Failed(e);
                        }
                    }
                }
            }
            changes.push(GitChange {
                path: self.git_path.join(hooks),
                change: change(was, now),
                outcome,
            });
        }
        let keys: std::collections::BTreeSet<&PathBuf> =
            self.before.keys().chain(after.keys()).collect();
        for key in keys {
            if key.starts_with(hooks) && (hooks_replaced || key == hooks) {
                continue;
            }
            let (was, now) = (self.before.get(key), after.get(key));
            if was == now {
                continue;
            }
            changes.push(GitChange {
                path: self.git_path.join(key),
                change: change(was, now),
                outcome: fix(git.as_fd(), key, was, now, &mut q),
            });
        }
        changes
    }

    /// `.git` is no longer a directory (or cannot be opened): what is there
    /// now goes aside; the repository itself cannot be put back.
    fn git_replaced(&self, e: &io::Error, run_id: &str) -> GitChange {
        let gone = e.raw_os_error() == Some(libc::ENOENT);
        let outcome = if gone {
            Outcome::Failed(io::Error::other("the repository's .git is gone"))
        } else {
            let aside = format!(".git.lockrun-quarantine-{run_id}");
            match nix::fcntl::renameat(
                Some(self.worktree.as_raw_fd()),
                ".git",
                Some(self.worktree.as_raw_fd()),
                aside.as_str(),
            ) {
                Ok(()) => Outcome::NotRestored {
                    kept: self.git_path.parent().map(|wt| wt.join(&aside)),
                    why: NotKept::Repository,
                },
                Err(e) => Outcome::Failed(e.into()),
            }
        };
        GitChange {
            path: self.git_path.clone(),
            change: if gone {
                Change::Removed
            } else {
                Change::Changed
            },
            outcome,
        }
    }
}

fn change(was: Option<&Entry>, now: Option<&Entry>) -> Change {
    match (was, now) {
        (None, _) => Change::Added,
        (_, None) => Change::Removed,
        _ => Change::Changed,
    }
}

/// Where the run's versions go: a directory made fresh in `.git` on first
/// use (never one that was there: the run could have planted it).
struct Quarantine<'a> {
    git: BorrowedFd<'a>,
    run_id: &'a str,
    git_path: &'a Path,
    dir: Option<(OwnedFd, String)>,
}

impl Quarantine<'_> {
    /// Move `key` (relative to `.git`) into the quarantine, keeping its
    /// relative path; returns where it now is.
    fn take(&mut self, key: &Path) -> io::Result<PathBuf> {
        if self.dir.is_none() {
            self.dir = Some(fresh_dir(
                self.git,
                &format!("{QUARANTINE}-{}", self.run_id),
            )?);
        }
        let (q, q_name) = self
            .dir
            .as_ref()
            .ok_or_else(|| io::Error::other("no quarantine"))?;
        let (parent_key, name) = split(key)?;
        let (src_dir, dst_dir) = match parent_key {
            None => (None, None),
            Some(p) => (
                Some(open_dir(self.git, p.as_os_str())?),
                Some(mkdir(q.as_fd(), p.as_os_str(), Existing::Open)?),
            ),
        };
        let src = src_dir.as_ref().map_or(self.git, AsFd::as_fd);
        let dst = dst_dir.as_ref().map_or(q.as_fd(), AsFd::as_fd);
        nix::fcntl::renameat(Some(src.as_raw_fd()), name, Some(dst.as_raw_fd()), name)?;
        Ok(self.git_path.join(q_name).join(key))
    }
}

/// Put one entry back: what is there now goes aside, what was there is
/// made again.
fn fix(
    git: BorrowedFd<'_>,
    key: &Path,
    was: Option<&Entry>,
    now: Option<&Entry>,
    q: &mut Quarantine<'_>,
) -> Outcome {
    let kept = match now.map(|_| q.take(key)).transpose() {
        Ok(k) => k,
        Err(e) => return Outcome::Failed(e),
    };
    match (was, kept) {
        (None, Some(kept)) => Outcome::MovedAside { kept },
        (None, None) => Outcome::Failed(io::Error::other("nothing to move")),
        (Some(Entry::Large { .. }), kept) => Outcome::NotRestored {
            kept,
            why: NotKept::TooLarge,
        },
        (Some(Entry::Other { .. }), kept) => Outcome::NotRestored {
            kept,
            why: NotKept::NotAFileOrDir,
        },
        (Some(entry), kept) => match put_back(git, key, entry) {
            Ok(()) => Outcome::Restored { kept },
            Err(e) => Outcome::Failed(e),
        },
    }
}

/// Make `key` again as `entry` was: a file with its bytes, or an empty
/// directory; mode and owner as they were.
fn put_back(git: BorrowedFd<'_>, key: &Path, entry: &Entry) -> io::Result<()> {
    let (parent_key, name) = split(key)?;
    let parent = parent_key
        .map(|p| open_dir(git, p.as_os_str()))
        .transpose()?;
    let dir = parent.as_ref().map_or(git, AsFd::as_fd);
    let (fd, mode, uid, gid) = match entry {
        Entry::File {
            mode,
            uid,
            gid,
            bytes,
        } => {
            // Made with mode 0 and written through this descriptor; its
            // mode is set last.
            let fd = open_beneath(
                dir,
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            )?;
            let mut f = std::fs::File::from(fd);
            f.write_all(bytes)?;
            (OwnedFd::from(f), *mode, *uid, *gid)
        }
        Entry::Dir { mode, uid, gid } => (mkdir(dir, name, Existing::Refuse)?, *mode, *uid, *gid),
        Entry::Large { .. } | Entry::Other { .. } => {
            return Err(io::Error::other("not kept"));
        }
    };
    nix::unistd::fchown(fd.as_raw_fd(), Some(uid.into()), Some(gid.into()))?;
    nix::sys::stat::fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(mode))?;
    Ok(())
}

/// Make a directory named `base` (or `base-2`, `base-3`, …: the first that
/// does not exist yet) in `dir`, and open it.
fn fresh_dir(dir: BorrowedFd<'_>, base: &str) -> io::Result<(OwnedFd, String)> {
    for n in 1..=100 {
        let name = if n == 1 {
            base.to_owned()
        } else {
            format!("{base}-{n}")
        };
        match mkdir(dir, OsStr::new(&name), Existing::Refuse) {
            Ok(fd) => return Ok((fd, name)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!("{base}: 100 names taken")))
}

/// Whether [`mkdir`] may open a directory that is already there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Existing {
    /// Only inside a quarantine lockrun has just made.
    Open,
    Refuse,
}

/// Make the directory `name` in `dir` (mode 0700 until its own is set) and
/// open it, following no symlink.
fn mkdir(dir: BorrowedFd<'_>, name: &OsStr, existing: Existing) -> io::Result<OwnedFd> {
    match nix::sys::stat::mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => {}
        Err(nix::errno::Errno::EEXIST) if existing == Existing::Open => {}
        Err(e) => return Err(e.into()),
    }
    open_dir(dir, name)
}

/// The guarded entries of the `.git` directory `git`.
fn read_state(git: BorrowedFd<'_>) -> io::Result<State> {
    let mut state = State::new();
    for name in GUARDED_FILES {
        if let Some(e) = read_entry(git, OsStr::new(name))? {
            state.insert(PathBuf::from(name), e);
        }
    }
    let Some(hooks) = read_entry(git, OsStr::new(HOOKS))? else {
        return Ok(state);
    };
    let is_dir = matches!(hooks, Entry::Dir { .. });
    state.insert(PathBuf::from(HOOKS), hooks);
    if is_dir {
        let dir = open_dir(git, OsStr::new(HOOKS))?;
        // Listed through the descriptor just opened (no path walk).
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
        for entry in listing {
            let name = entry?.file_name();
            if name.as_bytes().ends_with(b".sample") {
                continue; // git never runs these
            }
            if let Some(e) = read_entry(dir.as_fd(), &name)? {
                state.insert(Path::new(HOOKS).join(&name), e);
            }
        }
    }
    Ok(state)
}

/// One entry of `dir`, not following a symlink; `None` when absent.
fn read_entry(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Entry>> {
    let st = match nix::sys::stat::fstatat(
        Some(dir.as_raw_fd()),
        name,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => st,
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let kind = st.st_mode & libc::S_IFMT;
    let too_large = u64::try_from(st.st_size).map_or(true, |n| n > MAX_KEPT);
    Ok(Some(match kind {
        libc::S_IFDIR => Entry::Dir {
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
        },
        libc::S_IFREG if too_large => Entry::Large {
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        },
        libc::S_IFREG => {
            let f = std::fs::File::from(open_beneath(
                dir,
                name,
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            )?);
            let mut bytes = Vec::new();
            f.take(MAX_KEPT + 1).read_to_end(&mut bytes)?;
            Entry::File {
                mode: st.st_mode & 0o7777,
                uid: st.st_uid,
                gid: st.st_gid,
                bytes,
            }
        }
        other => Entry::Other { kind: other },
    }))
}

/// `name` (relative to `dir`) opened with `flags`, following no symlink
/// and never leaving `dir`.
fn open_beneath(dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(name.as_bytes()).map_err(io::Error::other)?;
    openat2(
        dir,
        &c,
        flags,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_BENEATH,
    )
}

/// The directory `name` in `dir`, following no symlink.
fn open_dir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    open_beneath(
        dir,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )
}

/// An absolute directory path (the canonical worktree).
fn open_abs_dir(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    Ok(OwnedFd::from(f))
}

/// `hooks/x` → (`Some("hooks")`, `x`); `config` → (`None`, `config`).
fn split(key: &Path) -> io::Result<(Option<&Path>, &OsStr)> {
    let name = key
        .file_name()
        .ok_or_else(|| io::Error::other(format!("no file name in {}", key.display())))?;
    Ok((key.parent().filter(|p| !p.as_os_str().is_empty()), name))
}

fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}
