//! The caller's stdin, stdout and stderr as the command gets them: never on
//! one of the machine's writable mounts.
//!
//! A descriptor the command inherits was opened in lockrun's mount
//! namespace, the machine's, and keeps the mount it was opened on, however
//! read-only the run's own namespace is made: with stdin `/dev/null`,
//! `fchmod(0, 0)` would change the machine's `/dev/null`; with the caller's
//! terminal, `chmod 666` it; `chmod /proc/self/fd/1` would reach the
//! caller's log file. So lockrun, before the command starts, in its own
//! namespace, gives each of the three a replacement ([`Handling`], decided
//! by [`handling`] from what the descriptor is open on and how):
//!
//! - **on no path** (a pipe, a socket, an anonymous inode, a memfd): the
//!   caller's own descriptor, which reaches no mount of the machine's;
//! - **a device, a FIFO, a directory, a regular file open for reading
//!   only**: the same file opened again through a detached clone of its
//!   mount of its own, read-only (`open_tree`, Linux 5.2, and
//!   `mount_setattr`, 5.12; [`crate::sys::stdio`]), where the kernel
//!   refuses every change of mode, owner, times, attributes (`EROFS`), and
//!   devices still open (no `nodev`). The access mode, `O_APPEND` and
//!   `O_NONBLOCK` are the original's, with `O_NOCTTY`; a FIFO is opened
//!   without blocking and then given back the original's blocking; a
//!   regular file (or block device) is positioned where the caller's was,
//!   and once the run is over the caller's is moved to where the run's
//!   copy ended, so `while read f; do lockrun …; done < list` sees the
//!   run's reads. A terminal so reopened is the same terminal (`isatty`,
//!   job control, its settings: [`crate::terminal`]);
//! - **a regular file open for writing** (`>`, `>>`, `2>&1`) on stdout or
//!   stderr: a pipe, which lockrun relays into the caller's descriptor
//!   ([`relay`]): a file cannot be opened for writing on a read-only mount,
//!   and lockrun's writes through the caller's own descriptor keep its
//!   offset and `O_APPEND` (`{ lockrun …; echo done; } > log` ends with the
//!   run's output, then `done`). Stdout and stderr that are one open file
//!   (`2>&1`) share one pipe, which keeps their order. lockrun reads it to
//!   its end before it prints its own end-of-run lines; a write that fails
//!   (`ENOSPC`, `EFBIG`, `EIO`) is said once at the end, and the pipe is
//!   closed, so that the run's next write fails (`EPIPE`) rather than be
//!   lost unseen;
//! - **refused** (exit 125, nothing runs): a regular file open for writing
//!   on stdin (lockrun relays output only; `<` a file, or `cat file |`,
//!   hands it on), a pseudo-terminal's master (opened again it would be a
//!   new terminal), a named pipe written that no process reads (`ENXIO`:
//!   opened again, it would wait for one), and any descriptor whose mount
//!   cannot be cloned: an unbindable one, or one of another mount
//!   namespace where the file's name in lockrun's does not lead to the
//!   same file (where it does, as after `unshare -m`, that one is cloned).
//!
//! The Landlock rules that let the command reach these again by
//! `/dev/stdin`, `/proc/self/fd/N` or `/dev/console` are the walk's
//! ([`crate::fs`], by the files' inodes, as this module describes them:
//! [`describe`]).
#![forbid(unsafe_code)]

use std::fmt;
use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::stat::SFlag;
use nix::unistd::{lseek, Whence};

use crate::sys::stdio::{open_clone, read_only_clone, same_open_file, CallFailed};

pub mod relay;
#[cfg(test)]
mod tests;

use relay::Relay;

/// One of the caller's three standard descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    In,
    Out,
    Err,
}

impl Stream {
    pub const ALL: [Self; 3] = [Self::In, Self::Out, Self::Err];

    /// lockrun's own descriptor, which the caller's is.
    #[must_use]
    pub fn fd(self) -> BorrowedFd<'static> {
        crate::sys::stdio::standard(self as libc::c_int)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::In => "stdin",
            Self::Out => "stdout",
            Self::Err => "stderr",
        })
    }
}

/// What a descriptor is open on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No path: a pipe, a socket, an anonymous inode, a memfd (the kernel
    /// names it `pipe:[…]`, `socket:[…]`, `anon_inode:…`, `/memfd:…`).
    Unnamed,
    Regular,
    Fifo,
    /// A pseudo-terminal's master (the device `/dev/ptmx` is).
    PtyMaster,
    CharDevice,
    BlockDevice,
    Directory,
    /// A symbolic link or a socket's file, open `O_PATH`.
    Other,
}

/// How a descriptor is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// Read and write (or access mode 3, ioctls only, which asks both).
    ReadWrite,
    /// `O_PATH`: a place, neither read nor written.
    Path,
}

impl Access {
    fn of(flags: OFlag) -> Self {
        if flags.contains(OFlag::O_PATH) {
            return Self::Path;
        }
        match flags & OFlag::O_ACCMODE {
            OFlag::O_RDONLY => Self::Read,
            OFlag::O_WRONLY => Self::Write,
            _ => Self::ReadWrite,
        }
    }

    #[must_use]
    pub fn reads(self) -> bool {
        matches!(self, Self::Read | Self::ReadWrite)
    }

    #[must_use]
    pub fn writes(self) -> bool {
        matches!(self, Self::Write | Self::ReadWrite)
    }
}

/// What the command gets for one of the caller's descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// The caller's own: it lies on no mount.
    AsIs,
    /// The same file, opened again through a read-only clone of its mount.
    Reopened,
    /// A pipe lockrun relays into the caller's descriptor.
    Relayed,
    /// None: the run is refused.
    Refused(Refusal),
}

/// Why a descriptor cannot be handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A regular file open for writing as stdin: on a read-only mount it
    /// cannot be opened for writing, and lockrun relays output only.
    WrittenStdin,
    /// A pseudo-terminal's master: opened again, it is a new terminal.
    PtyMaster,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WrittenStdin => {
                "it is a regular file open for writing: the command gets its stdio on a \
                 read-only mount, where no file opens for writing, and lockrun relays stdout \
                 and stderr only; give it the file read-only (`< FILE`) or through a pipe"
            }
            Self::PtyMaster => {
                "it is a pseudo-terminal's master, which opened again would be a new terminal; \
                 give the command the terminal's other end, or a pipe"
            }
        })
    }
}

/// What `stream`, open on `kind` with `access`, is handed on as.
#[must_use]
pub fn handling(stream: Stream, kind: Kind, access: Access) -> Handling {
    match (kind, access) {
        (Kind::Unnamed, _) => Handling::AsIs,
        (Kind::Regular, Access::Write | Access::ReadWrite) if stream == Stream::In => {
            Handling::Refused(Refusal::WrittenStdin)
        }
        (Kind::Regular, Access::Write | Access::ReadWrite) => Handling::Relayed,
        // O_PATH: the clone's own descriptor, nothing opened.
        (Kind::PtyMaster, Access::Path) => Handling::Reopened,
        (Kind::PtyMaster, _) => Handling::Refused(Refusal::PtyMaster),
        _ => Handling::Reopened,
    }
}

/// One of the caller's descriptors, as lockrun finds it.
#[derive(Debug, Clone)]
pub struct Described {
    pub stream: Stream,
    /// The kernel's name for it (`/proc/self/fd/N`): a path, or `pipe:[…]`.
    pub name: PathBuf,
    pub kind: Kind,
    pub access: Access,
    /// Its status flags (`F_GETFL`).
    flags: OFlag,
}

impl Described {
    #[must_use]
    pub fn handling(&self) -> Handling {
        handling(self.stream, self.kind, self.access)
    }
}

/// `stream` as lockrun holds it; `None` when it is closed.
///
/// # Errors
/// `/proc/self/fd` unreadable, or `fstat` refused.
pub fn describe(stream: Stream) -> io::Result<Option<Described>> {
    describe_fd(stream, stream.fd())
}

/// [`describe`], of `fd` standing for `stream`.
fn describe_fd(stream: Stream, fd: BorrowedFd<'_>) -> io::Result<Option<Described>> {
    use nix::errno::Errno;
    let flags = match fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL) {
        Ok(f) => OFlag::from_bits_retain(f),
        Err(Errno::EBADF) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let name = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let kind = if name.is_absolute() {
        kind_of(fd, &name)?
    } else {
        Kind::Unnamed
    };
    Ok(Some(Described {
        stream,
        name,
        kind,
        access: Access::of(flags),
        flags,
    }))
}

/// What `fd`, named `name` (absolute), is open on.
fn kind_of(fd: BorrowedFd<'_>, name: &std::path::Path) -> io::Result<Kind> {
    use std::os::unix::ffi::OsStrExt as _;
    let st = nix::sys::stat::fstat(fd.as_raw_fd())?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    Ok(match kind {
        SFlag::S_IFREG => {
            // memfd_create's files: on the kernel's internal tmpfs (or
            // hugetlbfs), in no directory.
            let memfd = name.as_os_str().as_bytes().starts_with(b"/memfd:")
                && st.st_nlink == 0
                && nix::sys::statfs::fstatfs(fd).is_ok_and(|s| {
                    [
                        nix::sys::statfs::TMPFS_MAGIC,
                        nix::sys::statfs::HUGETLBFS_MAGIC,
                    ]
                    .contains(&s.filesystem_type())
                });
            if memfd {
                Kind::Unnamed
            } else {
                Kind::Regular
            }
        }
        SFlag::S_IFIFO => Kind::Fifo,
        SFlag::S_IFCHR if st.st_rdev == libc::makedev(PTMX.0, PTMX.1) => Kind::PtyMaster,
        SFlag::S_IFCHR => Kind::CharDevice,
        SFlag::S_IFBLK => Kind::BlockDevice,
        SFlag::S_IFDIR => Kind::Directory,
        _ => Kind::Other,
    })
}

/// `/dev/ptmx`'s device number (`Documentation/admin-guide/devices.txt`).
const PTMX: (u32, u32) = (5, 2);

/// Why the caller's stdio cannot be handed on; the run is refused.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("{stream}: reading what it is: {source}")]
    Describe { stream: Stream, source: io::Error },
    #[error("{stream} ({}): {refusal}", .name.display())]
    Refused {
        stream: Stream,
        name: PathBuf,
        refusal: Refusal,
    },
    #[error("{stream} ({}): a read-only clone of its mount, for the command: {source} (lockrun hands the command its stdio on a mount of its own, read-only, so that it cannot change the file's mode, owner or times; an unbindable mount, or one of another mount namespace where that name here is not the same file, cannot be cloned: give the command a pipe instead, e.g. `cat FILE | lockrun …`)", .name.display())]
    Clone {
        stream: Stream,
        name: PathBuf,
        source: CallFailed,
    },
    #[error("{stream} ({}): opening it again through its read-only clone: {source}", .name.display())]
    Reopen {
        stream: Stream,
        name: PathBuf,
        source: CallFailed,
    },
    #[error("{stream} ({}): a named pipe that no process has open for reading (ENXIO): lockrun cannot open it again for the command without waiting for one", .name.display())]
    NoReader { stream: Stream, name: PathBuf },
    #[error("{stream} ({}): {call}: {source}", .name.display())]
    Prepare {
        stream: Stream,
        name: PathBuf,
        call: &'static str,
        source: io::Error,
    },
}

/// What the command gets, and what lockrun keeps until the run's end.
pub struct Prepared {
    /// The command's stdin, stdout and stderr
    /// ([`crate::sys::ChildPlan::hand_stdio`]); `None`: the caller's own,
    /// or closed.
    pub handed: [Option<OwnedFd>; 3],
    pub kept: Kept,
}

/// What lockrun keeps until the run is over: the relays, and the caller's
/// files whose offsets follow the run's.
#[derive(Default)]
pub struct Kept {
    relays: Vec<Relay>,
    follow: Vec<Follow>,
}

/// A file the run reads through a copy of its own: the caller's offset
/// moves to where the copy's ended.
struct Follow {
    stream: Stream,
    name: PathBuf,
    /// The caller's open file (a duplicate of lockrun's descriptor).
    caller: OwnedFd,
    /// The run's open file (a duplicate of what it was handed).
    copy: OwnedFd,
    /// Where both were when the run started.
    from: i64,
}

/// Prepare the command's stdin, stdout and stderr from lockrun's (see the
/// module docs). In lockrun's mount namespace, before the command is
/// spawned.
///
/// # Errors
/// A descriptor that cannot be handed on without reaching one of the
/// machine's writable mounts: the run must be refused.
pub fn prepare() -> Result<Prepared, StdioError> {
    prepare_fds(Stream::ALL.map(Stream::fd))
}

/// [`prepare`], from `fds` standing for stdin, stdout and stderr.
fn prepare_fds(fds: [BorrowedFd<'_>; 3]) -> Result<Prepared, StdioError> {
    let mut handed: [Option<OwnedFd>; 3] = [None, None, None];
    let mut kept = Kept::default();
    let mut earlier: Vec<Stream> = Vec::new();
    for stream in Stream::ALL {
        let fd = fds[stream.index()];
        let d = match describe_fd(stream, fd) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(source) => return Err(StdioError::Describe { stream, source }),
        };
        // One open file on two numbers (`2>&1`): one replacement for both.
        if let Some(same) = earlier
            .iter()
            .find(|e| one_open_file(fds[e.index()], fd, d.flags))
        {
            handed[stream.index()] = match &handed[same.index()] {
                Some(h) => Some(h.try_clone().map_err(|source| d.failed("dup", source))?),
                None => None,
            };
            earlier.push(stream);
            continue;
        }
        earlier.push(stream);
        handed[stream.index()] = match d.handling() {
            Handling::AsIs => None,
            Handling::Refused(refusal) => {
                return Err(StdioError::Refused {
                    stream,
                    name: d.name,
                    refusal,
                })
            }
            Handling::Reopened => {
                let (copy, follow) = reopen(&d, fd)?;
                kept.follow.extend(follow);
                Some(copy)
            }
            Handling::Relayed => {
                let (into, relay) =
                    Relay::start(stream, &d.name, fd).map_err(|source| d.failed("pipe", source))?;
                kept.relays.push(relay);
                Some(into)
            }
        };
    }
    Ok(Prepared { handed, kept })
}

/// Whether `a` and `b` are one open file: `kcmp`, or where the kernel has
/// none, the same file with the same flags (`b`'s) at the same offset.
fn one_open_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>, b_flags: OFlag) -> bool {
    if let Ok(same) = same_open_file(a, b) {
        return same;
    }
    let (Ok(sa), Ok(sb)) = (
        nix::sys::stat::fstat(a.as_raw_fd()),
        nix::sys::stat::fstat(b.as_raw_fd()),
    ) else {
        return false;
    };
    let offset = |fd: BorrowedFd<'_>| lseek(fd.as_raw_fd(), 0, Whence::SeekCur).ok();
    (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
        && fcntl(a.as_raw_fd(), FcntlArg::F_GETFL).ok() == Some(b_flags.bits())
        && offset(a) == offset(b)
}

impl Described {
    fn failed(&self, call: &'static str, source: impl Into<io::Error>) -> StdioError {
        StdioError::Prepare {
            stream: self.stream,
            name: self.name.clone(),
            call,
            source: source.into(),
        }
    }
}

/// `fd`, described as `d`, opened again through a read-only clone of its
/// mount; and, for a file with an offset, what follows it at the end.
fn reopen(d: &Described, fd: BorrowedFd<'_>) -> Result<(OwnedFd, Option<Follow>), StdioError> {
    let clone_failed = |source| StdioError::Clone {
        stream: d.stream,
        name: d.name.clone(),
        source,
    };
    let tree = match read_only_clone(fd) {
        Ok(tree) => tree,
        // Not a mount of this namespace (lockrun started in one of its
        // own, by `unshare -m` or a service manager, after its stdio was
        // opened), or an unbindable one: the same file by its name here.
        Err(e) if e.source.raw_os_error() == Some(libc::EINVAL) => match same_file_here(d, fd) {
            Some(here) => read_only_clone(here.as_fd()).map_err(clone_failed)?,
            None => return Err(clone_failed(e)),
        },
        Err(e) => return Err(clone_failed(e)),
    };
    if d.access == Access::Path {
        // The clone's descriptor is an `O_PATH` one of the file itself.
        return Ok((tree, None));
    }
    let kept = d.flags & (OFlag::O_ACCMODE | OFlag::O_APPEND | OFlag::O_NONBLOCK);
    let fifo = d.kind == Kind::Fifo;
    // A FIFO's open waits for its other end: not lockrun's.
    let flags = kept
        | OFlag::O_NOCTTY
        | if fifo {
            OFlag::O_NONBLOCK
        } else {
            OFlag::empty()
        };
    let copy = match open_clone(tree.as_fd(), flags.bits()) {
        Ok(copy) => copy,
        Err(e) if fifo && e.source.raw_os_error() == Some(libc::ENXIO) => {
            return Err(StdioError::NoReader {
                stream: d.stream,
                name: d.name.clone(),
            })
        }
        Err(source) => {
            return Err(StdioError::Reopen {
                stream: d.stream,
                name: d.name.clone(),
                source,
            })
        }
    };
    if fifo && !kept.contains(OFlag::O_NONBLOCK) {
        fcntl(copy.as_raw_fd(), FcntlArg::F_SETFL(kept))
            .map_err(|e| d.failed("fcntl F_SETFL", e))?;
    }
    if !matches!(d.kind, Kind::Regular | Kind::BlockDevice) {
        return Ok((copy, None));
    }
    let from = lseek(fd.as_raw_fd(), 0, Whence::SeekCur).map_err(|e| d.failed("lseek", e))?;
    lseek(copy.as_raw_fd(), from, Whence::SeekSet).map_err(|e| d.failed("lseek", e))?;
    let follow = Follow {
        stream: d.stream,
        name: d.name.clone(),
        caller: fd.try_clone_to_owned().map_err(|e| d.failed("dup", e))?,
        copy: copy.try_clone().map_err(|e| d.failed("dup", e))?,
        from,
    };
    Ok((copy, Some(follow)))
}

/// The file `fd` is open on, as lockrun's mount namespace names it
/// (`d.name`, the kernel's name in the namespace it was opened in), opened
/// `O_PATH` (the name's own, without following a last symlink; no device
/// driver's open): only if it is that very file (device and inode), as
/// after `unshare -m`, whose new namespace holds copies of the mounts it
/// was made from.
fn same_file_here(d: &Described, fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let here: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&d.name)
        .ok()?
        .into();
    let inode = |fd: BorrowedFd<'_>| {
        nix::sys::stat::fstat(fd.as_raw_fd())
            .ok()
            .map(|st| (st.st_dev, st.st_ino))
    };
    (inode(here.as_fd()).is_some() && inode(here.as_fd()) == inode(fd)).then_some(here)
}

/// What the end of the run left to say about its stdio.
#[derive(Debug)]
pub enum Ending {
    /// A relay's write into the caller's file failed.
    Relay(relay::Failed),
    /// A relay not read to its end: processes of the run are left.
    NotDrained { stream: Stream, name: PathBuf },
    /// The caller's offset could not follow the run's.
    Unmoved {
        stream: Stream,
        name: PathBuf,
        source: nix::Error,
    },
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Relay(failed) => failed.fmt(f),
            Self::NotDrained { stream, name } => write!(
                f,
                "the command's {stream}, relayed into {}, was not read to its end: processes \
                 of the run are left, and what they write now is lost",
                name.display()
            ),
            Self::Unmoved {
                stream,
                name,
                source,
            } => write!(
                f,
                "the caller's {stream} ({}) could not be moved to where the run's reads left \
                 it: lseek: {source}",
                name.display()
            ),
        }
    }
}

impl Kept {
    /// Once the run is over: each relay read to its end (`all_gone`: no
    /// process of the run is left to write more; else each gets a moment),
    /// and the caller's files moved to where the run's copies ended (those
    /// the run did not move, left alone). What failed, to be said.
    #[must_use]
    pub fn finish(self, all_gone: bool) -> Vec<Ending> {
        let mut endings = Vec::new();
        for relay in self.relays {
            let (stream, name) = (relay.stream(), relay.name().to_path_buf());
            match relay.finish(all_gone) {
                Some(Ok(_)) => {}
                Some(Err(failed)) => endings.push(Ending::Relay(failed)),
                None => endings.push(Ending::NotDrained { stream, name }),
            }
        }
        for f in self.follow {
            let moved = lseek(f.copy.as_raw_fd(), 0, Whence::SeekCur).and_then(|now| {
                if now == f.from {
                    return Ok(());
                }
                lseek(f.caller.as_raw_fd(), now, Whence::SeekSet).map(|_| ())
            });
            if let Err(source) = moved {
                endings.push(Ending::Unmoved {
                    stream: f.stream,
                    name: f.name,
                    source,
                });
            }
        }
        endings
    }
}
