//! Metadata syscalls, performed for the command when their target lies
//! beneath a writable root; `EPERM` (and an audit event) otherwise. Every
//! one is handed over only where the run's mounts cannot hold them
//! ([`lockrun_seccomp::Fallbacks::metadata`]); elsewhere, only a mode with
//! a set-id bit and the ioctls refused everywhere.
//!
//! Each call is decoded from its registers ([`decode`]), its memory
//! arguments read once (path, times, xattr name and value), its target
//! resolved like the kernel would ([`super::resolve`]) and judged, and the
//! operation done on the descriptor of the object the supervisor holds
//! (`AT_EMPTY_PATH`; xattrs through `/proc/self/fd/N`), with its effective
//! capabilities dropped. A regular file handed by
//! a descriptor the command opened for writing needs no name: Landlock
//! placed it when it let the command open it ([`resolve::locate_fd`]); a
//! `tar x` setting owner, mode and times per file pays ten system calls
//! here per call, not twenty. Errors the kernel would
//! return for malformed calls (`EINVAL` flags, `EFAULT`, `ENAMETOOLONG`,
//! `ERANGE`, `E2BIG`) are returned the same way.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::resolve::{self, Errno, Object, Roots, Unplaced};
use super::{Reply, Task};
use crate::audit::{Event, FsEvent};
use crate::sys::supervisor_calls;
use lockrun_seccomp::deny_list::{set_id_refused, Widens};

pub(super) const PATH_MAX: usize = 4096;
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
const AT_FLAGS: u64 = (libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) as u64;

/// Where the call points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `path` (a pointer) relative to `dirfd`.
    Path {
        dirfd: i32,
        path: u64,
        follow: bool,
        empty_ok: bool,
    },
    /// A descriptor of the task (`fchmod`, `fchown`, `fsetxattr`, …).
    Fd(i32),
}

/// What the call does, with its memory arguments still as pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Chmod(u32),
    Chown(u32, u32),
    /// `struct utimbuf *` (`utime`).
    Utimbuf(u64),
    /// `struct timeval[2] *` (`utimes`, `futimesat`).
    Timeval(u64),
    /// `struct timespec[2] *` (`utimensat`).
    Timespec(u64),
    SetXattr {
        name: u64,
        value: u64,
        size: u64,
        flags: i32,
    },
    /// `setxattrat`: value, size and flags in a `struct xattr_args`.
    SetXattrArgs {
        name: u64,
        args: u64,
        size: u64,
    },
    RemoveXattr {
        name: u64,
    },
    /// One of [`crate::seccomp::NOTIFY_IOCTLS`].
    Ioctl {
        cmd: u32,
        arg: u64,
    },
}

/// The size of the argument the kernel copies for `cmd`, when the
/// supervisor performs it; `None`: refused wherever it points (fs-verity
/// makes a file immutable for good, fscrypt policies need keys lockrun does
/// not hand out).
fn ioctl_arg_size(cmd: u32) -> Option<usize> {
    match cmd {
        // SETFLAGS, SETVERSION (both widths): the kernel reads an int.
        0x4008_6602 | 0x4004_6602 | 0x4008_7602 | 0x4004_7602 | 0x4008_6604 | 0x4004_6604 => {
            Some(4)
        }
        0x401c_5820 => Some(28), // struct fsxattr
        _ => None,
    }
}

impl Action {
    fn access(&self) -> &'static str {
        match self {
            Action::Chmod(_) => "metadata.chmod",
            Action::Chown(..) => "metadata.chown",
            Action::Utimbuf(_) | Action::Timeval(_) | Action::Timespec(_) => "metadata.utimes",
            Action::SetXattr { .. } | Action::SetXattrArgs { .. } => "metadata.setxattr",
            Action::RemoveXattr { .. } => "metadata.removexattr",
            Action::Ioctl { .. } => "metadata.ioctl",
        }
    }
}

/// The call as registers describe it (no memory read yet).
#[allow(clippy::too_many_lines)] // one arm per call, in one table
pub fn decode(nr: i64, a: [u64; 6]) -> Result<(Target, Action), Errno> {
    use lockrun_seccomp::{SYS_FCHMODAT2, SYS_REMOVEXATTRAT, SYS_SETXATTRAT};
    let cwd = libc::AT_FDCWD;
    let path = |dirfd: i32, p: u64, follow: bool| Target::Path {
        dirfd,
        path: p,
        follow,
        empty_ok: false,
    };
    let at = |dirfd: u64, p: u64, flags: u64| -> Result<Target, Errno> {
        if flags & !AT_FLAGS != 0 {
            return Err(libc::EINVAL);
        }
        Ok(Target::Path {
            dirfd: dirfd as i32,
            path: p,
            follow: flags & libc::AT_SYMLINK_NOFOLLOW as u64 == 0,
            empty_ok: flags & libc::AT_EMPTY_PATH as u64 != 0,
        })
    };
    let fd = |x: u64| Target::Fd(x as i32);
    Ok(match nr {
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chmod => (path(cwd, a[0], true), Action::Chmod(a[1] as u32)),
        libc::SYS_fchmod => (fd(a[0]), Action::Chmod(a[1] as u32)),
        libc::SYS_fchmodat => (path(a[0] as i32, a[1], true), Action::Chmod(a[2] as u32)),
        SYS_FCHMODAT2 => (
            at(a[0], a[1], a[3] & 0xffff_ffff)?,
            Action::Chmod(a[2] as u32),
        ),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chown => (
            path(cwd, a[0], true),
            Action::Chown(a[1] as u32, a[2] as u32),
        ),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_lchown => (
            path(cwd, a[0], false),
            Action::Chown(a[1] as u32, a[2] as u32),
        ),
        libc::SYS_fchown => (fd(a[0]), Action::Chown(a[1] as u32, a[2] as u32)),
        libc::SYS_fchownat => (
            at(a[0], a[1], a[4] & 0xffff_ffff)?,
            Action::Chown(a[2] as u32, a[3] as u32),
        ),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_utime => (path(cwd, a[0], true), Action::Utimbuf(a[1])),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_utimes => (path(cwd, a[0], true), Action::Timeval(a[1])),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_futimesat => {
            let t = if a[1] == 0 && a[0] as i32 != cwd {
                fd(a[0])
            } else {
                path(a[0] as i32, a[1], true)
            };
            (t, Action::Timeval(a[2]))
        }
        libc::SYS_utimensat => {
            let flags = a[3] & 0xffff_ffff;
            let t = if a[1] == 0 && a[0] as i32 != cwd {
                // futimens: no flags allowed (fs/utimes.c do_utimes_fd).
                if flags != 0 {
                    return Err(libc::EINVAL);
                }
                fd(a[0])
            } else {
                at(a[0], a[1], flags)?
            };
            (t, Action::Timespec(a[2]))
        }
        libc::SYS_setxattr | libc::SYS_lsetxattr => (
            path(cwd, a[0], nr == libc::SYS_setxattr),
            Action::SetXattr {
                name: a[1],
                value: a[2],
                size: a[3],
                flags: a[4] as i32,
            },
        ),
        libc::SYS_fsetxattr => (
            fd(a[0]),
            Action::SetXattr {
                name: a[1],
                value: a[2],
                size: a[3],
                flags: a[4] as i32,
            },
        ),
        libc::SYS_removexattr | libc::SYS_lremovexattr => (
            path(cwd, a[0], nr == libc::SYS_removexattr),
            Action::RemoveXattr { name: a[1] },
        ),
        libc::SYS_fremovexattr => (fd(a[0]), Action::RemoveXattr { name: a[1] }),
        SYS_SETXATTRAT => (
            at(a[0], a[1], a[2] & 0xffff_ffff)?,
            Action::SetXattrArgs {
                name: a[3],
                args: a[4],
                size: a[5],
            },
        ),
        SYS_REMOVEXATTRAT => (
            at(a[0], a[1], a[2] & 0xffff_ffff)?,
            Action::RemoveXattr { name: a[3] },
        ),
        libc::SYS_ioctl => (
            fd(a[0]),
            Action::Ioctl {
                cmd: a[1] as u32,
                arg: a[2],
            },
        ),
        _ => return Err(libc::ENOSYS),
    })
}

/// The call with its memory arguments read.
enum Op {
    Chmod(u32),
    Chown(u32, u32),
    Times([libc::timespec; 2]),
    SetXattr {
        name: CString,
        value: Vec<u8>,
        flags: i32,
    },
    RemoveXattr {
        name: CString,
    },
    Ioctl {
        cmd: u32,
        buf: Vec<u8>,
    },
    /// Never performed: refused (and audited) wherever it points.
    Refused(u32),
}

fn now() -> [libc::timespec; 2] {
    let t = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    [t, t]
}

fn le_i64(b: &[u8], i: usize) -> i64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[i * 8..i * 8 + 8]);
    i64::from_ne_bytes(x)
}

fn xattr_name(task: &Task<'_>, ptr: u64) -> Result<CString, Errno> {
    let name = task
        .read_cstr(ptr, XATTR_NAME_MAX + 1)
        .map_err(|e| e.unwrap_or(libc::ERANGE))?;
    if name.is_empty() {
        return Err(libc::ERANGE);
    }
    CString::new(name).map_err(|_| libc::EINVAL)
}

fn xattr_value(task: &Task<'_>, ptr: u64, size: u64) -> Result<Vec<u8>, Errno> {
    let size = usize::try_from(size).map_err(|_| libc::E2BIG)?;
    if size > XATTR_SIZE_MAX {
        return Err(libc::E2BIG);
    }
    task.read(ptr, size)
}

fn read_op(task: &Task<'_>, action: Action) -> Result<Op, Errno> {
    Ok(match action {
        Action::Chmod(m) => Op::Chmod(m),
        Action::Chown(u, g) => Op::Chown(u, g),
        Action::Utimbuf(0) | Action::Timeval(0) | Action::Timespec(0) => Op::Times(now()),
        Action::Utimbuf(p) => {
            let b = task.read(p, 16)?;
            let t = |i: usize| libc::timespec {
                tv_sec: le_i64(&b, i),
                tv_nsec: 0,
            };
            Op::Times([t(0), t(1)])
        }
        Action::Timeval(p) => {
            let b = task.read(p, 32)?;
            let mut ts = now();
            for (i, t) in ts.iter_mut().enumerate() {
                let usec = le_i64(&b, 2 * i + 1);
                if !(0..1_000_000).contains(&usec) {
                    return Err(libc::EINVAL);
                }
                *t = libc::timespec {
                    tv_sec: le_i64(&b, 2 * i),
                    tv_nsec: usec * 1000,
                };
            }
            Op::Times(ts)
        }
        Action::Timespec(p) => {
            let b = task.read(p, 32)?;
            let t = |i: usize| libc::timespec {
                tv_sec: le_i64(&b, 2 * i),
                tv_nsec: le_i64(&b, 2 * i + 1),
            };
            Op::Times([t(0), t(1)])
        }
        Action::SetXattr {
            name,
            value,
            size,
            flags,
        } => Op::SetXattr {
            name: xattr_name(task, name)?,
            value: xattr_value(task, value, size)?,
            flags,
        },
        Action::SetXattrArgs { name, args, size } => {
            // struct xattr_args { __aligned_u64 value; __u32 size; __u32 flags; }
            if size < 16 {
                return Err(libc::EINVAL);
            }
            let b = task.read(args, 16)?;
            let value = le_i64(&b, 0) as u64;
            let vsize = u64::from(u32::from_ne_bytes([b[8], b[9], b[10], b[11]]));
            let flags = i32::from_ne_bytes([b[12], b[13], b[14], b[15]]);
            Op::SetXattr {
                name: xattr_name(task, name)?,
                value: xattr_value(task, value, vsize)?,
                flags,
            }
        }
        Action::RemoveXattr { name } => Op::RemoveXattr {
            name: xattr_name(task, name)?,
        },
        Action::Ioctl { cmd, arg } => match ioctl_arg_size(cmd) {
            Some(n) => Op::Ioctl {
                cmd,
                buf: task.read(arg, n)?,
            },
            None => Op::Refused(cmd),
        },
    })
}

/// Why the call was refused rather than performed.
pub(super) enum Fail {
    Errno(Errno),
    /// Outside every writable root (or cannot be placed): `EPERM`, audited.
    Outside(String),
    /// A chmod to set-id bits ([`crate::seccomp::set_id_refused`]): `EPERM`,
    /// audited as a refused call, which no policy allows.
    SetId(String),
}

/// The chmod family's names, for the audit.
fn chmod_name(nr: i64) -> &'static str {
    match nr {
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chmod => "chmod",
        libc::SYS_fchmod => "fchmod",
        libc::SYS_fchmodat => "fchmodat",
        _ => "fchmodat2",
    }
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Self {
        Fail::Errno(e)
    }
}

/// What the target names, read from the task, before anything is resolved.
enum Named {
    /// A path (bytes) to resolve from `start` (`None`: absolute).
    Path {
        bytes: Vec<u8>,
        start: Option<OwnedFd>,
        follow: bool,
    },
    /// A descriptor of the task, named by `label`; `true` when it was handed
    /// as the call's descriptor and is open for writing.
    Fd(OwnedFd, String, bool),
    /// The task's cwd, for an empty path at `AT_FDCWD`.
    Cwd(OwnedFd),
}

/// The descriptor's open flags (`F_GETFL`).
fn fd_flags(fd: &OwnedFd) -> Result<i32, Errno> {
    nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(fd),
        nix::fcntl::FcntlArg::F_GETFL,
    )
    .map_err(|e| e as i32)
}

/// What a descriptor refers to, for the audit log (the kernel's name for it).
pub(super) fn fd_target(fd: BorrowedFd<'_>) -> String {
    nix::fcntl::readlink(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)).as_str())
        .map_or_else(|_| "?".to_owned(), |p| p.to_string_lossy().into_owned())
}

fn name_target(task: &Task<'_>, target: Target) -> Result<Named, Errno> {
    match target {
        Target::Fd(fd) => {
            let f = task.getfd(fd)?;
            let flags = fd_flags(&f)?;
            // fchmod/fchown/fsetxattr/futimens refuse O_PATH descriptors.
            if flags & libc::O_PATH != 0 {
                return Err(libc::EBADF);
            }
            // Open for writing: Landlock asked `WRITE_FILE` of it. Not
            // access mode 3 (`O_WRONLY | O_RDWR`, for ioctls only): the
            // kernel's DAC checks both read and write for it, but the file
            // gets neither mode, and Landlock asks no right at all.
            let accmode = flags & libc::O_ACCMODE;
            let written = accmode == libc::O_WRONLY || accmode == libc::O_RDWR;
            Ok(Named::Fd(f, format!("fd {fd}"), written))
        }
        Target::Path {
            dirfd,
            path,
            follow,
            empty_ok,
        } => {
            let bytes = if path == 0 && empty_ok {
                Vec::new()
            } else {
                task.read_cstr(path, PATH_MAX)
                    .map_err(|e| e.unwrap_or(libc::ENAMETOOLONG))?
            };
            if bytes.is_empty() {
                if !empty_ok {
                    return Err(libc::ENOENT);
                }
                if dirfd == libc::AT_FDCWD {
                    return Ok(Named::Cwd(task.cwd()?));
                }
                let f = task.getfd(dirfd)?;
                return Ok(Named::Fd(f, format!("fd {dirfd}"), false));
            }
            if follow {
                if let Some(fd) = crate::sys::proc_self_fd(&bytes) {
                    let f = task.getfd(fd)?;
                    return Ok(Named::Fd(
                        f,
                        String::from_utf8_lossy(&bytes).into_owned(),
                        false,
                    ));
                }
            }
            let start = if bytes[0] == b'/' {
                None
            } else if dirfd == libc::AT_FDCWD {
                Some(task.cwd()?)
            } else {
                Some(task.getfd(dirfd)?)
            };
            Ok(Named::Path {
                bytes,
                start,
                follow,
            })
        }
    }
}

/// Answer one metadata notification.
#[must_use]
pub fn handle(task: &Task<'_>, roots: &Roots) -> Reply {
    match run(task, roots) {
        Ok(()) => Reply::Value(0),
        Err(Fail::Errno(e)) => Reply::Errno(e),
        Err(Fail::Outside(what)) => {
            task.s.audit.record(Event::Filesystem(FsEvent {
                pid: task.tgid(),
                comm: task.comm(),
                path: Some(what),
                access: vec![decode(task.nr(), task.args())
                    .map_or("metadata", |(_, a)| a.access())
                    .to_owned()],
                raw: format!(
                    "seccomp supervisor: syscall {} on an object outside the writable roots: refused (EPERM)",
                    task.nr()
                ),
                other_name_of: None,
                errno: None,
            }));
            Reply::Errno(libc::EPERM)
        }
        Err(Fail::SetId(call)) => super::refuse_call(task, call, Widens::SetIdMode),
    }
}

fn run(task: &Task<'_>, roots: &Roots) -> Result<(), Fail> {
    let (target, action) = decode(task.nr(), task.args())?;
    let op = read_op(task, action)?;
    let (obj, label, by_fd) = locate(task, target)?;
    let shown = |obj: &Object| {
        if by_fd {
            format!("{label} ({})", fd_target(obj.fd()))
        } else {
            label.clone()
        }
    };
    if let Op::Refused(cmd) = op {
        return Err(Fail::Outside(format!(
            "{}: ioctl {cmd:#x} is not allowed under lockrun",
            shown(&obj)
        )));
    }
    if !roots.judge(&obj)? {
        return Err(Fail::Outside(shown(&obj)));
    }
    if let Op::Chmod(mode) = op {
        let is_dir = matches!(obj, Object::Dir(_));
        if set_id_refused(u64::from(mode), is_dir) {
            return Err(Fail::SetId(format!(
                "{} to mode 0{:o} on {}{}",
                chmod_name(task.nr()),
                mode & 0o7777,
                shown(&obj),
                if is_dir { " (a directory)" } else { "" }
            )));
        }
    }
    perform(&obj, &op).map_err(Fail::Errno)
}

/// What `target` names, read from the task and resolved as the kernel would
/// for it, with how the task named it; `true` when by a descriptor, whose
/// kernel name ([`fd_target`]) is then looked up only if it is refused.
/// Checks that the task still waits on its notification after the reads.
pub(super) fn locate(task: &Task<'_>, target: Target) -> Result<(Object, String, bool), Fail> {
    let named = name_target(task, target)?;
    // Everything taken from the task is in hand: is it still the task that asked?
    if !task.valid() {
        return Err(Fail::Errno(libc::ESRCH));
    }
    let root = task.root();
    // `by_fd`: `label` names a descriptor; the kernel's name for what it
    // refers to is added only on refusal.
    let (obj, label, by_fd) = match named {
        Named::Path {
            bytes,
            start,
            follow,
        } => {
            let label = String::from_utf8_lossy(&bytes).into_owned();
            let start = start.as_ref().map_or(root, AsFd::as_fd);
            // Walked with the command's privileges: a directory it may not
            // search is not searched for it either.
            let obj = {
                let _unprivileged = supervisor_calls::EffectiveCapsDropped::new()
                    .map_err(|_| Fail::Errno(libc::EPERM))?;
                resolve::resolve(root, start, &bytes, follow)?
            };
            (obj, label, false)
        }
        Named::Cwd(fd) => (Object::Dir(fd), "(cwd)".to_owned(), false),
        Named::Fd(fd, label, written) => match resolve::locate_fd(
            root,
            fd,
            written.then_some(task.s.written_outside.as_slice()),
        ) {
            // The kernel's name for it is looked up only if it is refused.
            Ok(o) => (o, label, true),
            Err(Unplaced::Errno(e)) => return Err(Fail::Errno(e)),
            Err(Unplaced::Refused(name)) => {
                return Err(Fail::Outside(format!("{label} ({name}) (not placeable)")))
            }
        },
    };
    Ok((obj, label, by_fd))
}

fn perform(obj: &Object, op: &Op) -> Result<(), Errno> {
    let _unprivileged = supervisor_calls::EffectiveCapsDropped::new().map_err(|_| libc::EPERM)?;
    let r = match op {
        // fchmodat2(AT_SYMLINK_NOFOLLOW) on a symlink: the kernel's answer.
        Op::Chmod(_) if obj.is_symlink() => return Err(libc::EOPNOTSUPP),
        Op::Chmod(mode) => supervisor_calls::chmod(obj.fd(), *mode),
        Op::Chown(u, g) => supervisor_calls::chown(obj.fd(), *u, *g),
        Op::Times(ts) => supervisor_calls::utimens(obj.fd(), ts),
        Op::SetXattr { name, value, flags } => {
            supervisor_calls::setxattr(&obj.proc_path(), name, value, *flags)
        }
        Op::RemoveXattr { name } => supervisor_calls::removexattr(&obj.proc_path(), name),
        // On the command's own open file (taken with pidfd_getfd).
        Op::Ioctl { cmd, buf } => supervisor_calls::ioctl_buf(obj.fd(), *cmd, &mut buf.clone()),
        Op::Refused(_) => Err(std::io::Error::from_raw_os_error(libc::EPERM)),
    };
    r.map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decodes_register_arguments() {
        let t = decode(
            lockrun_seccomp::SYS_FCHMODAT2,
            [3, 0x1000, 0o755, 0x100, 0, 0],
        )
        .unwrap();
        assert_eq!(
            t,
            (
                Target::Path {
                    dirfd: 3,
                    path: 0x1000,
                    follow: false,
                    empty_ok: false
                },
                Action::Chmod(0o755)
            )
        );
        assert_eq!(
            decode(libc::SYS_fchownat, [3, 1, 0, 0, 0x4000_0000, 0]),
            Err(libc::EINVAL)
        );
        assert_eq!(
            decode(
                libc::SYS_utimensat,
                [4, 0, 0, libc::AT_SYMLINK_NOFOLLOW as u64, 0, 0]
            ),
            Err(libc::EINVAL)
        );
        assert_eq!(
            decode(libc::SYS_utimensat, [4, 0, 0, 0, 0, 0]).map(|t| t.0),
            Ok(Target::Fd(4))
        );
        assert_eq!(
            decode(libc::SYS_fremovexattr, [5, 9, 0, 0, 0, 0]).map(|t| t.0),
            Ok(Target::Fd(5))
        );
    }

    #[test]
    fn every_notified_metadata_call_decodes() {
        for nr in lockrun_seccomp::notify::NOTIFY_METADATA {
            assert_ne!(decode(*nr, [0; 6]).err(), Some(libc::ENOSYS), "nr {nr}");
        }
    }
}
