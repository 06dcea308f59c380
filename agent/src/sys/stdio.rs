//! The calls that hand the command the caller's stdio on a read-only mount
//! of its own ([`crate::stdio`]): a detached clone of the mount a
//! descriptor is on (`open_tree`, Linux 5.2), made read-only
//! (`mount_setattr`, 5.12), the file opened again through it, and whether
//! two descriptors are one open file (`kcmp`, 3.5).

use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd};

use super::mount::{zero, MountAttr};

/// lockrun's own descriptor `n` (0, 1 or 2), for as long as lockrun runs.
///
/// # Panics
/// For any other `n`.
#[must_use]
pub fn standard(n: libc::c_int) -> BorrowedFd<'static> {
    assert!((0..=2).contains(&n), "not a standard descriptor: {n}");
    // SAFETY: 0, 1 and 2 are open for the whole life of the process: the
    // Rust runtime opens `/dev/null` on any found closed at start, and
    // nothing in lockrun closes them.
    unsafe { BorrowedFd::borrow_raw(n) }
}

/// A syscall that failed, by name.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {source}")]
pub struct CallFailed {
    pub call: &'static str,
    pub source: io::Error,
}

impl CallFailed {
    fn last(call: &'static str) -> Self {
        Self {
            call,
            source: io::Error::last_os_error(),
        }
    }
}

/// The file open as `fd`, on a detached clone of its mount of its own,
/// read-only (`open_tree(fd, "", AT_EMPTY_PATH | OPEN_TREE_CLONE)`, then
/// `mount_setattr(MOUNT_ATTR_RDONLY)`): an `O_PATH` descriptor of the
/// clone's root, which is the file itself. The clone keeps the original's
/// other attributes (`nodev` only where the original has it). Made in
/// lockrun's mount namespace: a namespace cannot clone a mount of another
/// (`EINVAL`), nor anyone an unbindable mount.
pub fn read_only_clone(fd: BorrowedFd<'_>) -> Result<OwnedFd, CallFailed> {
    // SAFETY: open_tree(2) of a live descriptor by an empty literal path;
    // the result is checked before it is owned.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH.cast_unsigned() | libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    };
    let Ok(tree) = libc::c_int::try_from(tree) else {
        return Err(CallFailed::last("open_tree"));
    };
    if tree < 0 {
        return Err(CallFailed::last("open_tree"));
    }
    // SAFETY: open_tree(2) just returned this descriptor, which nothing
    // else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(tree) };
    let attr = MountAttr {
        attr_set: libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr(2) of the mount descriptor above, by an empty
    // literal path, with a live mount_attr of the size passed.
    zero(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map_err(|source| CallFailed {
        call: "mount_setattr",
        source,
    })?;
    Ok(tree)
}

/// The file at the root of the clone `tree` ([`read_only_clone`]) opened
/// with `flags` (and `O_CLOEXEC`), through `/proc/self/fd`: `open` takes
/// no empty path.
pub fn open_clone(tree: BorrowedFd<'_>, flags: libc::c_int) -> Result<OwnedFd, CallFailed> {
    let path = format!("/proc/self/fd/{}\0", tree.as_raw_fd());
    // SAFETY: open(2) of a NUL-terminated path that lives for the call; the
    // result is checked before it is owned.
    let fd = unsafe { libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(CallFailed::last("open"));
    }
    // SAFETY: open(2) just returned this descriptor, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `a` and `b` are one open file description (`kcmp(KCMP_FILE)`),
/// as after `dup` or `2>&1`: one offset, one set of flags.
pub fn same_open_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    const KCMP_FILE: libc::c_int = 0;
    let me = nix::unistd::getpid().as_raw();
    // SAFETY: kcmp(2) with integer arguments only: this process twice, and
    // two of its descriptors.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            me,
            me,
            KCMP_FILE,
            a.as_raw_fd(),
            b.as_raw_fd(),
        )
    };
    match r {
        0 => Ok(true),
        1..=3 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}
