//! Truncation, where the kernel lacks Landlock's truncate right (ABI < 3,
//! Linux < 6.2; Debian 12's 6.1 has ABI 2) and the run's mounts cannot be
//! read-only outside its writable roots (no `sys_exit` recorder to see
//! their refusals: `crate::kernel::Kernel::metadata_by_mounts`; where they
//! are, a read-only mount refuses a truncation outside, `EROFS`, and
//! nothing comes here). There a file outside the
//! writable roots that the run may read can be truncated: `truncate(2)`
//! asks Landlock for nothing, and neither does an open with `O_TRUNC`
//! whose access mode asks for no write right (`O_RDONLY`, or 3). The
//! seccomp program hands exactly those calls here
//! ([`crate::seccomp::truncating`]; `O_WRONLY` and `O_RDWR` opens, and
//! `creat`, ask for Landlock's write right, which refuses them outside the
//! writable roots), and the supervisor:
//!
//! - resolves the path as the kernel would for the command
//!   ([`super::meta::locate`]: its cwd or dirfd, its root, symlinks, its
//!   `/proc/self/fd/N`), holding the file it found, opened without
//!   following anything further;
//! - judges that file beneath the writable roots, as the metadata calls are
//!   ([`super::resolve::Roots::judge`]);
//! - there, **performs the call itself on the file it judged**, with the
//!   command's privileges (its effective capabilities dropped): truncates it
//!   through its `/proc/self/fd/N`, or opens it so, with the command's flags,
//!   and puts the descriptor in the command as the open's result
//!   (`SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SEND`, Linux 5.14);
//! - elsewhere refuses with `EACCES`, what Landlock's truncate right answers,
//!   and records a filesystem refusal (`fs.truncate`), which the summary and
//!   `lockrun audit` name.
//!
//! Never `CONTINUE`: by the time the kernel walked the path again it could
//! name another file. Answered inline, as the metadata calls are.
//!
//! Refused here though Landlock's truncate right would let them through
//! (`EACCES`, recorded): an open with `O_TRUNC` and no write access that
//! would *create* its file (`O_CREAT`, no such file: the supervisor would
//! have to create it as the command does, with its umask and the
//! directory's default ACL), and one of what is not a regular file (a FIFO
//! or a device, which the supervisor does not open for the command;
//! `O_TRUNC` does nothing to them). Read-only opens with `O_TRUNC` are an
//! oddity no tool relies on (POSIX leaves them undefined; Rust's
//! `OpenOptions` refuses to make one).

use std::os::fd::{AsFd, AsRawFd};

use super::meta::{self, Fail, Target};
use super::resolve::{Errno, Object};
use super::{Reply, Task};
use crate::audit::{Event, FsEvent};
use crate::sys::supervisor_calls;
use lockrun_seccomp::fallback::truncating;

/// A call the seccomp program handed over for want of the truncate right,
/// as its registers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// `truncate(path, length)`.
    Truncate { path: u64, length: i64 },
    /// `open(path, flags)` or `openat(dirfd, path, flags)`.
    Open { dirfd: i32, path: u64, flags: i32 },
}

impl Call {
    fn decode(nr: i64, a: [u64; 6]) -> Option<Self> {
        if !truncating(nr, a) {
            return None;
        }
        match nr {
            libc::SYS_truncate => Some(Self::Truncate {
                path: a[0],
                length: a[1] as i64,
            }),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_open => Some(Self::Open {
                dirfd: libc::AT_FDCWD,
                path: a[0],
                flags: a[1] as i32,
            }),
            libc::SYS_openat => Some(Self::Open {
                dirfd: a[0] as i32,
                path: a[1],
                flags: a[2] as i32,
            }),
            _ => None,
        }
    }

    /// Where it points. A trailing symlink is followed but for `O_NOFOLLOW`
    /// (`ELOOP` on one) and `O_CREAT | O_EXCL` (`EEXIST` on any name).
    fn target(self) -> Target {
        let (dirfd, path, follow) = match self {
            Self::Truncate { path, .. } => (libc::AT_FDCWD, path, true),
            Self::Open { dirfd, path, flags } => (
                dirfd,
                path,
                flags & libc::O_NOFOLLOW == 0 && !creates_only(flags),
            ),
        };
        Target::Path {
            dirfd,
            path,
            follow,
            empty_ok: false,
        }
    }

    fn path(self) -> u64 {
        match self {
            Self::Truncate { path, .. } | Self::Open { path, .. } => path,
        }
    }
}

/// `O_CREAT | O_EXCL`: the open makes a new file or fails.
fn creates_only(flags: i32) -> bool {
    flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL
}

/// The open flags the supervisor's own open keeps: what the file is
/// opened as, and how it is read. What names it (`O_CREAT`, `O_EXCL`,
/// `O_NOFOLLOW`, `O_DIRECTORY`, `O_NOCTTY`) was decided in resolving it;
/// `O_CLOEXEC` is the command's descriptor's, set when it is handed over.
const KEPT_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_LARGEFILE;

/// Whether this notification is one of the truncating calls.
#[must_use]
pub fn handles(nr: i64, args: [u64; 6]) -> bool {
    Call::decode(nr, args).is_some()
}

/// Answer one truncating call.
#[must_use]
pub fn handle(task: &Task<'_>) -> Reply {
    let Some(call) = Call::decode(task.nr(), task.args()) else {
        return Reply::Errno(libc::ENOSYS);
    };
    match run(task, call) {
        Ok(reply) => reply,
        Err(Fail::Errno(e)) => Reply::Errno(e),
        Err(Fail::Outside(what) | Fail::SetId(what)) => refuse(task, call, what),
    }
}

fn run(task: &Task<'_>, call: Call) -> Result<Reply, Fail> {
    let (obj, _, _) = match meta::locate(task, call.target()) {
        // No such file: the open would make one, which is not done here.
        Err(Fail::Errno(libc::ENOENT)) if matches!(call, Call::Open { flags, .. } if flags & libc::O_CREAT != 0) =>
        {
            return Err(Fail::Outside(format!(
                "{} (an open with O_TRUNC and no write access that would create it)",
                named(task, call.path())
            )));
        }
        r => r?,
    };
    // A refusal names the file held, as Landlock's records do, however the
    // command named it (a symlink, its /proc/self/fd/N).
    let shown = || meta::fd_target(obj.fd());
    let kind = kind(&obj)?;
    match call {
        Call::Truncate { length, .. } => {
            // vfs_truncate(): these before any permission.
            if kind == libc::S_IFDIR {
                return Err(Fail::Errno(libc::EISDIR));
            }
            if kind != libc::S_IFREG {
                return Err(Fail::Errno(libc::EINVAL));
            }
            judge(task, &obj, shown)?;
            let _unprivileged = supervisor_calls::EffectiveCapsDropped::new()
                .map_err(|_| Fail::Errno(libc::EPERM))?;
            supervisor_calls::truncate(&obj.proc_path(), length)
                .map_err(|e| Fail::Errno(os(&e)))?;
            Ok(Reply::Value(0))
        }
        Call::Open { flags, .. } => {
            // do_open(), may_open(): these before any permission.
            if creates_only(flags) {
                return Err(Fail::Errno(libc::EEXIST));
            }
            if kind == libc::S_IFLNK {
                return Err(Fail::Errno(libc::ELOOP));
            }
            if kind == libc::S_IFDIR {
                return Err(Fail::Errno(libc::EISDIR));
            }
            if flags & libc::O_DIRECTORY != 0 {
                return Err(Fail::Errno(libc::ENOTDIR));
            }
            if kind != libc::S_IFREG {
                return Err(Fail::Outside(format!(
                    "{} (not a regular file: an open with O_TRUNC and no write access is not made for it)",
                    shown()
                )));
            }
            judge(task, &obj, shown)?;
            open_into(task, &obj, flags)
        }
    }
}

/// Whether `obj` lies beneath a writable root; `Outside` (shown by
/// `shown`) when not.
fn judge(task: &Task<'_>, obj: &Object, shown: impl Fn() -> String) -> Result<(), Fail> {
    if task.s.fs_roots.judge(obj)? {
        Ok(())
    } else {
        Err(Fail::Outside(shown()))
    }
}

/// Open `obj` with the command's `flags`, as the command (no effective
/// capability), and make the descriptor the result of its open.
fn open_into(task: &Task<'_>, obj: &Object, flags: i32) -> Result<Reply, Fail> {
    let file = {
        let _unprivileged =
            supervisor_calls::EffectiveCapsDropped::new().map_err(|_| Fail::Errno(libc::EPERM))?;
        supervisor_calls::open(&obj.proc_path(), flags & KEPT_FLAGS)
            .map_err(|e| Fail::Errno(os(&e)))?
    };
    let cloexec = flags & libc::O_CLOEXEC != 0;
    match supervisor_calls::addfd_send(task.s.listener.as_fd(), task.n.id, file.as_fd(), cloexec) {
        Ok(_) => Ok(Reply::Answered),
        // Gone meanwhile: nothing to answer.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Reply::Gone),
        // Not placed (its descriptor limit: EMFILE): the notification
        // still waits for an answer.
        Err(e) => Err(Fail::Errno(os(&e))),
    }
}

/// The file type (`S_IFMT`) of what `obj` holds.
fn kind(obj: &Object) -> Result<u32, Errno> {
    match obj {
        Object::Dir(_) => Ok(libc::S_IFDIR),
        Object::Entry { mode, .. } => Ok(mode & libc::S_IFMT),
        Object::Anonymous(fd) | Object::Written(fd) => nix::sys::stat::fstat(fd.as_raw_fd())
            .map(|st| st.st_mode & libc::S_IFMT)
            .map_err(|e| e as i32),
    }
}

/// The path the call named, for the record only (it decides nothing).
fn named(task: &Task<'_>, path: u64) -> String {
    task.read_cstr(path, meta::PATH_MAX).map_or_else(
        |_| "?".to_owned(),
        |p| String::from_utf8_lossy(&p).into_owned(),
    )
}

fn os(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Refused: `EACCES`, as Landlock's truncate right answers, recorded as a
/// filesystem refusal.
fn refuse(task: &Task<'_>, call: Call, what: String) -> Reply {
    let how = match call {
        Call::Truncate { .. } => "truncate(2)",
        Call::Open { .. } => "an open with O_TRUNC and no write access",
    };
    task.s.audit.record(Event::Filesystem(FsEvent {
        pid: task.tgid(),
        comm: task.comm(),
        path: Some(what),
        access: vec!["fs.truncate".to_owned()],
        raw: format!(
            "seccomp supervisor (no Landlock truncate right): {how} of a file outside the writable roots: refused (EACCES)"
        ),
        other_name_of: None,
        errno: None,
    }));
    Reply::Errno(libc::EACCES)
}

#[cfg(test)]
mod tests {
    use super::Call;

    #[test]
    fn decodes_the_truncating_calls_only() {
        let rdonly_trunc = libc::O_TRUNC as u64;
        assert_eq!(
            Call::decode(libc::SYS_truncate, [0x1000, 7, 0, 0, 0, 0]),
            Some(Call::Truncate {
                path: 0x1000,
                length: 7
            })
        );
        assert_eq!(
            Call::decode(libc::SYS_openat, [5, 0x1000, rdonly_trunc, 0, 0, 0]),
            Some(Call::Open {
                dirfd: 5,
                path: 0x1000,
                flags: libc::O_TRUNC
            })
        );
        // Write access: Landlock's write right judges it; not handed over.
        let wronly = (libc::O_WRONLY | libc::O_TRUNC) as u64;
        assert_eq!(
            Call::decode(libc::SYS_openat, [5, 0x1000, wronly, 0, 0, 0]),
            None
        );
        assert_eq!(
            Call::decode(libc::SYS_openat, [5, 0x1000, 0, 0, 0, 0]),
            None
        );
        assert_eq!(Call::decode(libc::SYS_ftruncate, [3, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_trailing_symlink_is_followed_as_the_kernel_does() {
        let follows = |flags: i32| match (Call::Open {
            dirfd: libc::AT_FDCWD,
            path: 0x1000,
            flags,
        })
        .target()
        {
            super::Target::Path { follow, .. } => follow,
            super::Target::Fd(_) => unreachable!(),
        };
        assert!(follows(libc::O_TRUNC));
        assert!(follows(libc::O_TRUNC | libc::O_CREAT));
        assert!(!follows(libc::O_TRUNC | libc::O_NOFOLLOW));
        assert!(!follows(libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL));
    }
}
