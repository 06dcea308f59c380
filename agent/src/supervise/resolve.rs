//! Naming objects as the kernel would for the command, and judging whether
//! they lie beneath a writable root.
//!
//! **Resolution** ([`resolve`]) walks the path like the kernel's lookup: the
//! directory part is opened with `openat2(RESOLVE_NO_MAGICLINKS)` from the
//! command's cwd, dirfd or root; the last component is opened `O_PATH |
//! O_NOFOLLOW` from that directory; a trailing symlink that the syscall would
//! follow is read and resolved again (at most 40 hops, like the kernel). The
//! object is therefore always held as an fd opened **without following** from
//! a directory fd we hold: whatever the command swaps in concurrently, the
//! supervisor acts on the object it judged. Magic links (`/proc/<pid>/fd/N`,
//! `/proc/self/...` — which would name lockrun's view, not the command's) are
//! refused (`ELOOP`); the command's `/proc/self/fd/N` and
//! `/proc/thread-self/fd/N` are recognised beforehand and taken as its fd N.
//! The command's root is the `/` it opened before its exec, in its mount
//! namespace (where the run's own `/dev/shm` is); it cannot `chroot` (no
//! `CAP_SYS_CHROOT`).
//!
//! **Judging** ([`Roots::judge_dir`]) compares `(st_dev, st_ino)` of the
//! directory and each ancestor (`..`, crossing mounts like the kernel does)
//! with the writable roots and the denied-read paths, opened once when the
//! run starts (held open, so the inode numbers cannot be reused); the nearest
//! match decides. The same directory membership Landlock judges by: the
//! command can neither move a directory out of a writable root nor one into
//! it (both need write access outside), so the answer cannot change under
//! us. Why ancestors rather than `RESOLVE_BENEATH` from each root: the
//! object is reached by the command's path (cwd, dirfd, symlinks) which need
//! not be spelled relative to any root; walking up from what it resolved to
//! asks the question directly, for every object kind, in O(depth).
//!
//! A non-directory's membership is its **parent directory's** (a hard link
//! is judged by the name used, as Landlock does; Landlock's `REFER` rules
//! keep the command from linking outside files into the worktree).

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;

use crate::sys::supervisor_calls;

/// The kernel's `MAXSYMLINKS`.
const MAX_HOPS: usize = 40;
/// Deeper than any real tree: a walk that does not reach `/` is refused.
const MAX_DEPTH: usize = 4096;

const PIPEFS_MAGIC: i64 = 0x5049_5045;
const SOCKFS_MAGIC: i64 = 0x534f_434b;
const ANON_INODE_FS_MAGIC: i64 = 0x0904_1934;
const TMPFS_MAGIC: i64 = 0x0102_1994;
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

pub type Errno = i32;

fn errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn nix_errno(e: nix::errno::Errno) -> Errno {
    e as i32
}

/// What a syscall's target resolved to.
pub enum Object {
    /// A directory (also `.`/`..`/trailing slash targets).
    Dir(OwnedFd),
    /// A non-directory and the directory it was found in.
    Entry {
        parent: OwnedFd,
        obj: OwnedFd,
        mode: u32,
    },
    /// No path reaches it (pipe, socket, anonymous inode, memfd): only
    /// descriptor holders see its metadata.
    Anonymous(OwnedFd),
    /// A regular file the command opened for writing, and not one of the
    /// few it may write outside the writable roots: Landlock let it open
    /// it for writing, so it lay beneath a writable root when opened (see
    /// [`locate_fd`]).
    Written(OwnedFd),
}

impl Object {
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Object::Dir(fd)
            | Object::Anonymous(fd)
            | Object::Written(fd)
            | Object::Entry { obj: fd, .. } => fd.as_fd(),
        }
    }

    #[must_use]
    pub fn is_symlink(&self) -> bool {
        matches!(self, Object::Entry { mode, .. } if mode & libc::S_IFMT == libc::S_IFLNK)
    }

    #[must_use]
    pub fn is_socket(&self) -> bool {
        match self {
            Object::Entry { mode, .. } => mode & libc::S_IFMT == libc::S_IFSOCK,
            _ => false,
        }
    }

    /// The `/proc/self/fd/N` name the supervisor acts through.
    #[must_use]
    pub fn proc_path(&self) -> CString {
        let s = format!("/proc/self/fd/{}", self.fd().as_raw_fd());
        CString::new(s).unwrap_or_default()
    }
}

fn open_at(dir: BorrowedFd<'_>, p: &[u8], flags: i32, resolve: u64) -> Result<OwnedFd, Errno> {
    let c = CString::new(p).map_err(|_| libc::EINVAL)?;
    supervisor_calls::openat2(dir, &c, flags, resolve).map_err(|e| errno(&e))
}

fn stat(fd: BorrowedFd<'_>) -> Result<nix::sys::stat::FileStat, Errno> {
    nix::sys::stat::fstat(fd.as_raw_fd()).map_err(nix_errno)
}

fn fs_magic(fd: BorrowedFd<'_>) -> Result<i64, Errno> {
    nix::sys::statfs::fstatfs(fd)
        .map(|s| s.filesystem_type().0)
        .map_err(nix_errno)
}

/// Resolve `path` as the kernel would for the command: absolute from `root`,
/// relative from `start` (its cwd or dirfd); a trailing symlink followed only
/// when `follow`. `path` must not be empty.
pub fn resolve(
    root: BorrowedFd<'_>,
    start: BorrowedFd<'_>,
    path: &[u8],
    follow: bool,
) -> Result<Object, Errno> {
    const DIR: i32 = libc::O_PATH | libc::O_DIRECTORY;
    let no_magic = libc::RESOLVE_NO_MAGICLINKS;
    if path.is_empty() {
        return Err(libc::ENOENT);
    }
    // `None`: still at `start` (borrowed, not duplicated).
    let mut base: Option<OwnedFd> = None;
    let mut path = path.to_vec();
    for _ in 0..=MAX_HOPS {
        let (b, rel): (BorrowedFd<'_>, &[u8]) = if path[0] == b'/' {
            let i = path.iter().position(|c| *c != b'/').unwrap_or(path.len());
            (root, &path[i..])
        } else {
            (base.as_ref().map_or(start, AsFd::as_fd), &path[..])
        };
        if rel.is_empty() {
            return Ok(Object::Dir(open_at(b, b".", DIR, no_magic)?));
        }
        let end = rel.iter().rposition(|c| *c != b'/').map_or(0, |i| i + 1);
        let trimmed = &rel[..end];
        let trailing_slash = end != rel.len();
        let (dir, name): (&[u8], &[u8]) = match trimmed.iter().rposition(|c| *c == b'/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (b".", trimmed),
        };
        if trailing_slash || name == b"." || name == b".." {
            return Ok(Object::Dir(open_at(b, rel, DIR, no_magic)?));
        }
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let parent = open_at(b, dir, DIR, no_magic)?;
        let obj = open_at(
            parent.as_fd(),
            name,
            libc::O_PATH | libc::O_NOFOLLOW,
            no_magic,
        )?;
        let st = stat(obj.as_fd())?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFLNK && follow {
            // procfs links name lockrun's view (`self`) or are magic.
            if fs_magic(parent.as_fd())? == PROC_SUPER_MAGIC {
                return Err(libc::ELOOP);
            }
            let target =
                nix::fcntl::readlinkat(Some(parent.as_raw_fd()), std::ffi::OsStr::from_bytes(name))
                    .map_err(nix_errno)?;
            path = target.as_bytes().to_vec();
            if path.is_empty() {
                return Err(libc::ENOENT);
            }
            base = Some(parent);
            continue;
        }
        if kind == libc::S_IFDIR {
            return Ok(Object::Dir(obj));
        }
        return Ok(Object::Entry {
            parent,
            obj,
            mode: st.st_mode,
        });
    }
    Err(libc::ELOOP)
}

/// Why a descriptor taken from the command was not placed.
#[derive(Debug)]
pub enum Unplaced {
    /// The supervisor's own call failed with this errno.
    Errno(Errno),
    /// It cannot be placed (renamed meanwhile, not a path): refuse. The
    /// kernel's name for it, for the audit log.
    Refused(String),
}

/// Place a descriptor taken from the command. `written_outside`: the
/// descriptor is open for writing (access mode `O_WRONLY` or `O_RDWR`; not
/// mode 3, which Landlock lets open anything it can reach), and these
/// `(st_dev, st_ino)` are what
/// Landlock lets the command write outside the writable roots
/// ([`crate::fs::FsSandbox::written_outside`]).
///
/// A regular file open for writing and not among those is taken as it is
/// ([`Object::Written`]), without looking up its name: the command could
/// open it for writing only beneath a writable root (Landlock's
/// `WRITE_FILE`, which a rule on a file grants to its inode whatever the
/// name), every descriptor it did not open itself was closed before its
/// exec but stdio, none of which is a regular file open for writing
/// (lockrun relays those, [`crate::stdio`]), and it can be handed no
/// other (pathname unix sockets only
/// in the worktree and the run's temp dir, abstract ones and ptrace scoped
/// to the sandbox). What it may write, it may set the mode, owner and times
/// of, as the kernel's own checks allow. The one difference from judging by
/// name: such a file moved out of the writable roots by a process outside,
/// while the command holds it open, still takes its metadata from it.
pub fn locate_fd(
    root: BorrowedFd<'_>,
    fd: OwnedFd,
    written_outside: Option<&[(u64, u64)]>,
) -> Result<Object, Unplaced> {
    let st = stat(fd.as_fd()).map_err(Unplaced::Errno)?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFDIR {
        return Ok(Object::Dir(fd));
    }
    if kind == libc::S_IFREG
        && written_outside.is_some_and(|o| !o.contains(&(st.st_dev, st.st_ino)))
    {
        return Ok(Object::Written(fd));
    }
    let link = nix::fcntl::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str())
        .map_err(|e| Unplaced::Errno(nix_errno(e)))?;
    let link = link.as_bytes();
    let refused = || Unplaced::Refused(String::from_utf8_lossy(link).into_owned());
    // The filesystem is asked only where the name leaves a doubt: a file
    // at a path is placed by that path below, whatever it is on (a name
    // the kernel gives that is no path, or is one the command could have
    // made up, cannot be placed there and is refused).
    if !link.starts_with(b"/") || link.starts_with(b"/memfd:") {
        let magic = fs_magic(fd.as_fd()).map_err(Unplaced::Errno)?;
        if [PIPEFS_MAGIC, SOCKFS_MAGIC, ANON_INODE_FS_MAGIC].contains(&magic) {
            return Ok(Object::Anonymous(fd));
        }
        if link.starts_with(b"/memfd:")
            && st.st_nlink == 0
            && [TMPFS_MAGIC, HUGETLBFS_MAGIC].contains(&magic)
        {
            return Ok(Object::Anonymous(fd));
        }
        if !link.starts_with(b"/") {
            return Err(refused());
        }
    }
    // Unlinked (an `O_TMPFILE`, a deleted temp file): no name to check, but
    // the kernel still names the directory it was in — its real dentry chain,
    // not text the command chose (names cannot contain `/`). Judged by that
    // directory; the command cannot move directories across a root boundary.
    let deleted = st.st_nlink == 0;
    let link = if deleted {
        link.strip_suffix(b" (deleted)").ok_or_else(refused)?
    } else {
        link
    };
    let i = link.iter().rposition(|c| *c == b'/').unwrap_or(0);
    let (dir, name) = (&link[..i], &link[i + 1..]);
    let dir = dir.strip_prefix(b"/").unwrap_or(dir);
    let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
    // With lockrun's capabilities if need be, as every read of the
    // supervisor's own: the dirs above may not be searchable without.
    let place = || -> Result<(OwnedFd, bool), ()> {
        let parent = open_at(
            root,
            dir,
            libc::O_PATH | libc::O_DIRECTORY,
            libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        )
        .map_err(|_| ())?;
        if deleted {
            return Ok((parent, true));
        }
        let named = nix::sys::stat::fstatat(
            Some(parent.as_raw_fd()),
            std::ffi::OsStr::from_bytes(name),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|_| ())?;
        Ok((
            parent,
            (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino),
        ))
    };
    let (parent, same) =
        supervisor_calls::retry_with_caps(place, |()| true).map_err(|()| refused())?;
    if !same {
        return Err(refused());
    }
    Ok(Object::Entry {
        parent,
        obj: fd,
        mode: st.st_mode,
    })
}

/// Writable roots and denied paths, by `(st_dev, st_ino)`.
pub struct Roots {
    entries: Vec<(u64, u64, bool)>,
    /// Held open so the inode numbers cannot be reused during the run.
    held: Vec<OwnedFd>,
}

impl Roots {
    /// Open `writable` and `denied` (missing paths grant and deny nothing)
    /// from the command's `root`: relative to it, since an absolute path
    /// would be taken from lockrun's root, in lockrun's mount namespace.
    #[must_use]
    pub fn open(root: BorrowedFd<'_>, writable: &[PathBuf], denied: &[PathBuf]) -> Self {
        let mut r = Self {
            entries: Vec::new(),
            held: Vec::new(),
        };
        for (paths, w) in [(writable, true), (denied, false)] {
            for p in paths {
                let bytes = p.as_os_str().as_bytes();
                let rel = bytes.strip_prefix(b"/").unwrap_or(bytes);
                let Ok(fd) = open_at(
                    root,
                    if rel.is_empty() { b"." } else { rel },
                    libc::O_PATH,
                    libc::RESOLVE_NO_MAGICLINKS,
                ) else {
                    continue;
                };
                let Ok(st) = stat(fd.as_fd()) else {
                    continue;
                };
                r.entries.push((st.st_dev, st.st_ino, w));
                r.held.push(fd);
            }
        }
        r
    }

    /// Whether the directory `dir` is a writable root or beneath one, with
    /// no denied path nearer.
    pub fn judge_dir(&self, dir: BorrowedFd<'_>) -> Result<bool, Errno> {
        Ok(self.nearest(dir)? == Some(true))
    }

    /// The nearest root at or above the directory `dir`: `Some(true)` a
    /// writable one, `Some(false)` a denied one; `None` when the walk
    /// reached `/` (or went deeper than any path) without meeting one.
    fn nearest(&self, dir: BorrowedFd<'_>) -> Result<Option<bool>, Errno> {
        // `None`: still at `dir` itself (borrowed, not duplicated).
        let mut up: Option<OwnedFd> = None;
        let mut st = stat(dir)?;
        for _ in 0..MAX_DEPTH {
            if let Some((_, _, w)) = self
                .entries
                .iter()
                .find(|(d, i, _)| (*d, *i) == (st.st_dev, st.st_ino))
            {
                return Ok(Some(*w));
            }
            let cur = up.as_ref().map_or(dir, AsFd::as_fd);
            let parent = open_at(cur, b"..", libc::O_PATH | libc::O_DIRECTORY, 0)?;
            let pst = stat(parent.as_fd())?;
            if (pst.st_dev, pst.st_ino) == (st.st_dev, st.st_ino) {
                return Ok(None);
            }
            up = Some(parent);
            st = pst;
        }
        Ok(None)
    }

    /// Whether `obj` is a denied path or lies beneath one (with no writable
    /// root nearer). Retried with capabilities as [`Roots::judge`] is.
    pub fn denied(&self, obj: &Object) -> Result<bool, Errno> {
        let dir = match obj {
            Object::Anonymous(_) | Object::Written(_) => return Ok(false),
            Object::Dir(fd) => fd.as_fd(),
            // The entry itself may be a denied file.
            Object::Entry { obj, parent, .. } => {
                let st = stat(obj.as_fd())?;
                if self
                    .entries
                    .iter()
                    .any(|(d, i, w)| !w && (*d, *i) == (st.st_dev, st.st_ino))
                {
                    return Ok(true);
                }
                parent.as_fd()
            }
        };
        supervisor_calls::retry_with_caps(|| self.nearest(dir), |_| true).map(|n| n == Some(false))
    }

    /// Whether `obj` lies beneath a writable root.
    /// The walk up may need lockrun's capabilities (a dir above that the
    /// command cannot search): retried with them if it fails without. Only
    /// a failure differs: the walk compares what it reaches, it acts on
    /// nothing.
    pub fn judge(&self, obj: &Object) -> Result<bool, Errno> {
        let dir = match obj {
            Object::Anonymous(_) | Object::Written(_) => return Ok(true),
            Object::Dir(fd) => fd.as_fd(),
            Object::Entry { parent, .. } => parent.as_fd(),
        };
        supervisor_calls::retry_with_caps(|| self.judge_dir(dir), |_| true)
    }
}
