//! The run's own filesystems: made in the parent (`fsopen`, `fsconfig`,
//! `fsmount`, Linux 5.2; [`make_fs`]) and mounted by the child over the
//! machine's ([`OwnMount`]), and the mount attributes the child sets.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::c_path;

/// A filesystem of the run's own, mounted by the child over the machine's
/// (see [`crate::fs::OwnFs`]: `/dev/shm`, `/dev/pts`, `/dev/mqueue`), or a
/// bind of the caller's terminal.
///
/// lockrun makes each filesystem beforehand ([`make_fs`]: `fsopen`,
/// `fsconfig`, `fsmount`, Linux 5.2), a detached mount, and adds a Landlock
/// rule granting it through the mount's descriptor ([`grant_beneath`]) —
/// the rule is keyed by the filesystem's root inode, which exists only for
/// this run. The run's message queues, which `mq_open` reaches without a
/// path, are granted so also where the machine has no `/dev/mqueue`.
/// The child is cloned into a mount namespace of its own (`CLONE_NEWNS`).
/// There it makes every mount private (so nothing it mounts reaches the
/// machine's namespace) and moves each onto its path (`move_mount`); the
/// message queues only where the machine has a `/dev/mqueue`. The
/// filesystems go away with the namespace, once the run's last process has
/// ended and lockrun has let it go. The command cannot unmount them or leave the namespace: the mount
/// family, `setns` and `unshare` are on the seccomp deny list, and it has
/// no capability.
pub struct OwnMount {
    what: Mounted,
    /// Where it goes.
    target: std::ffi::CString,
}

pub(super) enum Mounted {
    /// Made by lockrun beforehand ([`make_fs`]), granted already: moved.
    Made(OwnedFd),
    /// A bind of a file whose inode has its rule already.
    Bind(std::ffi::CString),
    /// A bind masking one of the machine's secrets: where the secret has
    /// gone since lockrun looked, there is nothing left to mask.
    Mask(std::ffi::CString),
}

/// A new filesystem: its type, its mount's attributes (`MOUNT_ATTR_*`) and
/// its options, each a flag (`None`) or a value (`fsconfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewFs {
    pub fstype: &'static CStr,
    pub attrs: u64,
    pub options: &'static [(&'static CStr, Option<&'static CStr>)],
}

/// Closes a raw descriptor when dropped. Post-fork: no allocation.
pub(super) struct RawFd(libc::c_int);

impl RawFd {
    fn into_owned(self) -> OwnedFd {
        let fd = std::mem::ManuallyDrop::new(self).0;
        // SAFETY: the descriptor is open and owned by `self`, which gives it
        // up without closing it.
        unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }
    }

    fn new(fd: libc::c_long) -> io::Result<Self> {
        libc::c_int::try_from(fd)
            .ok()
            .filter(|fd| *fd >= 0)
            .map(Self)
            .ok_or_else(io::Error::last_os_error)
    }
}

impl Drop for RawFd {
    fn drop(&mut self) {
        // SAFETY: the descriptor was returned to this process by the kernel
        // and is closed once, here.
        unsafe {
            libc::close(self.0);
        }
    }
}

/// A syscall's `0 or -1` as a result.
pub(super) fn zero(r: libc::c_long) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl OwnMount {
    /// `mount`, a filesystem lockrun made ([`make_fs`]) and granted
    /// ([`grant_beneath`]), or, to hide what is at `target`, an empty
    /// read-only one with no rule of its own, read as what it lies in is;
    /// moved onto `target` (canonical, a directory).
    pub fn made(mount: OwnedFd, target: &std::path::Path) -> io::Result<Self> {
        Ok(Self {
            what: Mounted::Made(mount),
            target: c_path(target)?,
        })
    }

    /// A bind of the file `source` on the file `target`, with no rule of
    /// its own: what the file may be used for is its inode's rule.
    pub fn bind(source: &std::path::Path, target: &std::path::Path) -> io::Result<Self> {
        Ok(Self {
            what: Mounted::Bind(c_path(source)?),
            target: c_path(target)?,
        })
    }

    /// A bind of `sealed` (lockrun's empty file or dir of mode 0000) over
    /// one of the machine's secrets at `target`. Should the secret be gone
    /// by the time the child mounts (removed since lockrun looked), the
    /// mask is left out: what is absent cannot be read, and a secret made
    /// after lockrun looked is unmasked either way. Any other failure,
    /// `sealed` missing included, fails the run.
    pub fn mask(sealed: &std::path::Path, target: &std::path::Path) -> io::Result<Self> {
        Ok(Self {
            what: Mounted::Mask(c_path(sealed)?),
            target: c_path(target)?,
        })
    }

    /// Child side, in its new mount namespace, before the capabilities go:
    /// make every mount private, then mount each.
    /// Post-fork: no allocation.
    pub(super) fn mount_all(mounts: &[Self]) -> io::Result<()> {
        // SAFETY: mount(2) with a NUL-terminated literal and NULL pointers.
        if unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        mounts.iter().try_for_each(Self::mount)
    }

    fn mount(&self) -> io::Result<()> {
        match &self.what {
            Mounted::Bind(source) => self.bind_onto_target(source),
            Mounted::Mask(sealed) => match self.bind_onto_target(sealed) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && self.target_is_gone() => Ok(()),
                r => r,
            },
            Mounted::Made(mnt) => self.move_onto_target(mnt.as_raw_fd()),
        }
    }

    fn bind_onto_target(&self, source: &CStr) -> io::Result<()> {
        // SAFETY: mount(2) with NUL-terminated strings the plan owns, and
        // NULL where it takes none.
        zero(
            unsafe {
                libc::mount(
                    source.as_ptr(),
                    self.target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            }
            .into(),
        )
    }

    /// Nothing at the target path (`lstat`'s `ENOENT`). Post-fork: no
    /// allocation.
    fn target_is_gone(&self) -> bool {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: lstat(2) of a NUL-terminated path into a stat buffer of
        // the right size on this stack.
        let r = unsafe { libc::lstat(self.target.as_ptr(), st.as_mut_ptr()) };
        r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)
    }

    fn move_onto_target(&self, mnt: libc::c_int) -> io::Result<()> {
        // SAFETY: move_mount(2) of a live mount descriptor, by an empty
        // literal path, onto a NUL-terminated path the plan owns.
        zero(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                mnt,
                c"".as_ptr(),
                libc::AT_FDCWD,
                self.target.as_ptr(),
                libc::MOVE_MOUNT_F_EMPTY_PATH,
            )
        })
    }
}

/// `struct mount_attr` (Linux 5.12).
#[repr(C)]
pub(super) struct MountAttr {
    pub(super) attr_set: u64,
    pub(super) attr_clr: u64,
    pub(super) propagation: u64,
    pub(super) userns_fd: u64,
}

/// `mount_setattr(dirfd, path, flags, {set, clear})` (Linux 5.12): the
/// one call the helpers below make. Post-fork: no allocation.
fn mount_setattr(
    dirfd: libc::c_int,
    path: &CStr,
    flags: libc::c_int,
    set: u64,
    clear: u64,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path, a descriptor or AT_FDCWD, and a live
    // mount_attr of the size passed.
    zero(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })
}

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE, {set, clear})`: on the
/// mount at `path` (`EINVAL` where none is) and every mount beneath it.
/// Post-fork: no allocation.
pub(super) fn mount_setattr_recursive(path: &CStr, set: u64, clear: u64) -> io::Result<()> {
    mount_setattr(libc::AT_FDCWD, path, libc::AT_RECURSIVE, set, clear)
}

/// Child side, in its own mount namespace, before the capabilities go:
/// device files can be opened only under `/dev` (on the devtmpfs and what
/// is mounted beneath it: the terminals, the caller's terminal bound at
/// `/dev/console`), where Landlock's rules name the few a run may open
/// ([`crate::fs::DEV_READABLE`]). Every mount gets `nodev`, then those at
/// and beneath `/dev` lose it again; a device file anywhere else, which
/// the run may read and, without Landlock's device ioctl right (ABI 5),
/// drive by ioctl, cannot be opened (`EACCES`). The command cannot take
/// it off: the mount family is on the seccomp deny list, and it has no
/// capability. `/dev` not a mount of its own (`EINVAL`) refuses the run.
/// Post-fork: no allocation.
pub(super) fn devices_in_dev_only() -> io::Result<()> {
    let nodev = libc::MOUNT_ATTR_NODEV;
    mount_setattr_recursive(c"/", nodev, 0)?;
    mount_setattr_recursive(c"/dev", 0, nodev)
}

/// `openat2(AT_FDCWD, path, O_PATH, RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS)` (Linux 5.6): the file at `path` reached through
/// no symbolic link, so that a name swapped for a link by another process
/// since lockrun looked leads nowhere else. Post-fork: no allocation.
fn open_without_links(path: &CStr) -> io::Result<RawFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a NUL-terminated path and a live open_how of the size passed.
    RawFd::new(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// The device and inode of the file open as `fd`. Post-fork: no
/// allocation.
fn dev_ino(fd: &RawFd) -> io::Result<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat(2) of a descriptor we own into a stat buffer of the
    // right size on this stack.
    zero(unsafe { libc::fstat(fd.0, st.as_mut_ptr()) }.into())?;
    // SAFETY: filled by the successful fstat above.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// A copy of the mount tree at `at`, detached (`open_tree`,
/// `OPEN_TREE_CLONE | AT_RECURSIVE`, Linux 5.2). Post-fork: no allocation.
fn clone_tree(at: &RawFd) -> io::Result<RawFd> {
    let flags = libc::AT_EMPTY_PATH.cast_unsigned()
        | libc::AT_RECURSIVE.cast_unsigned()
        | libc::OPEN_TREE_CLONE
        | libc::OPEN_TREE_CLOEXEC;
    // SAFETY: open_tree(2) of a live descriptor by an empty literal path.
    RawFd::new(unsafe { libc::syscall(libc::SYS_open_tree, at.0, c"".as_ptr(), flags) })
}

/// `move_mount` of the detached `tree` onto the very file open as `at`.
/// Post-fork: no allocation.
fn attach(tree: &RawFd, at: &RawFd) -> io::Result<()> {
    // SAFETY: move_mount(2) of live descriptors by empty literal paths.
    zero(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.0,
            c"".as_ptr(),
            at.0,
            c"".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {set, clear})`: on the mount open
/// as `fd` alone. Post-fork: no allocation.
fn mount_setattr_fd(fd: &RawFd, set: u64, clear: u64) -> io::Result<()> {
    mount_setattr(fd.0, c"", libc::AT_EMPTY_PATH, set, clear)
}

/// `mount_setattr(AT_FDCWD, path, 0, {set, clear})`: on the mount at
/// `path` alone (`EINVAL` where none is). Post-fork: no allocation.
fn mount_setattr_one(path: &CStr, set: u64, clear: u64) -> io::Result<()> {
    mount_setattr(libc::AT_FDCWD, path, 0, set, clear)
}

/// `path`, reached through no link, bound onto itself (its mount tree
/// copied and moved onto the very file), its top mount writable where
/// `writable` (those beneath stay as they are); the file lockrun found
/// there (`expected`: device and inode) or `ESTALE`: a name swapped since
/// lockrun looked is never bound. Post-fork: no allocation.
fn bind_onto_itself(path: &CStr, expected: Option<(u64, u64)>, writable: bool) -> io::Result<()> {
    let at = open_without_links(path)?;
    if let Some(expected) = expected {
        if dev_ino(&at)? != expected {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
    }
    let tree = clone_tree(&at)?;
    if writable {
        mount_setattr_fd(&tree, 0, libc::MOUNT_ATTR_RDONLY)?;
    }
    attach(&tree, &at)
}

/// Every mount of the run's namespace read-only but its writable roots:
/// the kernel itself then refuses, with `EROFS`, every change outside them
/// that Landlock has no right for — mode, owner, times, extended
/// attributes, inode flags (`chmod`, `chown`, `utimensat`, `setxattr`,
/// `FS_IOC_SETFLAGS`: each takes `mnt_want_write` first) — and every
/// write Landlock would refuse, before it is asked. A capability-less root
/// owns every root-owned file, so without this only lockrun's supervisor
/// stood between a run and `chmod 777 /etc/shadow`, at a round trip per
/// call; with it, those calls need no supervisor beneath the roots
/// ([`crate::seccomp`]).
///
/// In the child, in its own mount namespace, once its own filesystems are
/// mounted and before the capabilities go:
/// 1. each denied path beneath a writable root is bound onto itself;
/// 2. every mount is made read-only (`mount_setattr`, `AT_RECURSIVE`):
///    fail closed, a mount nothing here names stays read-only: the denied
///    paths' (what Landlock keeps from being read stays unchangeable too),
///    and every mount beneath a writable root (a filesystem mounted inside
///    a worktree is writable in a run only when named writable itself);
/// 3. each writable root (outermost first) is bound onto itself, its top
///    mount writable: reached through no symbolic link (`openat2`,
///    `RESOLVE_NO_SYMLINKS`), checked to be the very file lockrun found
///    there (device and inode), its mount tree copied (`open_tree`), made
///    writable while detached and moved onto that very file
///    (`move_mount`); one the machine mounts read-only stays so. No name
///    is looked up twice, so no other process can swap in a link to
///    `/etc` between lockrun's look and the bind; a root that is no
///    longer what lockrun found refuses the run (`ESTALE`). The run's own
///    writable filesystems (`/dev/shm`) are lockrun's own mounts at the
///    machine's paths, made writable by name;
/// 4. the working directory, where it lies at or beneath one of those
///    binds, is entered again by its path, so that it is the bind's (the
///    clone had translated it to the mount beneath); kept as it was where
///    that path is now another directory.
///
/// Descriptors opened before the namespace (the caller's stdio) are on the
/// machine's mounts: lockrun hands the command others (see
/// [`crate::stdio`]). `/dev`'s device files open for writing on a
/// read-only mount (only regular files, directories and links are refused).
/// Post-fork: no allocation.
#[derive(Debug, Default)]
pub struct ReadOnlyOutside {
    /// The writable roots (canonical), outermost first, each with the
    /// device and inode lockrun found there, and whether its mount is
    /// writable on the machine: a root the machine mounts read-only is
    /// bound read-only too (lockrun never makes writable what the machine
    /// does not).
    pub(super) writable: Vec<(std::ffi::CString, (u64, u64), bool)>,
    /// The run's own writable filesystems (mounted by [`OwnMount`]).
    pub(super) own: Vec<std::ffi::CString>,
    /// Denied paths beneath a writable root.
    pub(super) denied_beneath: Vec<std::ffi::CString>,
    /// The working directory, where step 4 applies.
    pub(super) cwd: Option<std::ffi::CString>,
}

impl ReadOnlyOutside {
    /// The plan for `writable` roots (canonical, found now), the run's
    /// `own` writable filesystems among them, the `denied` paths
    /// (canonical; those beneath a writable root are bound and stay
    /// read-only) and the working directory `cwd`.
    pub fn new(
        writable: &[std::path::PathBuf],
        own: &[std::path::PathBuf],
        denied: &[std::path::PathBuf],
        cwd: Option<&std::path::Path>,
    ) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        use std::path::{Path, PathBuf};
        let mut roots: Vec<&PathBuf> = writable.iter().filter(|p| !own.contains(p)).collect();
        roots.sort_by_key(|p| p.components().count());
        roots.dedup();
        let denied_beneath: Vec<&PathBuf> = denied
            .iter()
            .filter(|d| writable.iter().any(|w| d.starts_with(w)))
            .filter(|d| d.symlink_metadata().is_ok())
            .collect();
        let in_denied = |p: &Path| denied_beneath.iter().any(|d| p.starts_with(d));
        let rebound = |p: &Path| roots.iter().any(|r| p.starts_with(r)) || in_denied(p);
        let c = |ps: &mut dyn Iterator<Item = &PathBuf>| {
            ps.map(|p| super::c_path(p)).collect::<io::Result<Vec<_>>>()
        };
        Ok(Self {
            writable: roots
                .iter()
                .map(|p| {
                    let m = std::fs::metadata(p)?;
                    let read_only = nix::sys::statvfs::statvfs(p.as_path())
                        .map_err(io::Error::from)?
                        .flags()
                        .contains(nix::sys::statvfs::FsFlags::ST_RDONLY);
                    Ok((super::c_path(p)?, (m.dev(), m.ino()), !read_only))
                })
                .collect::<io::Result<_>>()?,
            own: c(&mut own.iter().filter(|p| writable.contains(p)))?,
            denied_beneath: c(&mut denied_beneath.iter().copied())?,
            cwd: cwd.filter(|c| rebound(c)).map(super::c_path).transpose()?,
        })
    }

    /// Child side. Post-fork: no allocation.
    pub(super) fn apply(&self) -> io::Result<()> {
        let rdonly = libc::MOUNT_ATTR_RDONLY;
        // The working directory as the clone left it, to compare with.
        // SAFETY: open(2) of a NUL-terminated literal; closed on drop.
        let before = unsafe { libc::open(c".".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        let before = (before >= 0).then_some(RawFd(before));
        for denied in &self.denied_beneath {
            match bind_onto_itself(denied, None, false) {
                // Gone, or a link now: nothing to bind (it stays under
                // the read-only mount it lies in, and Landlock's rules).
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => {}
                r => r?,
            }
        }
        mount_setattr_recursive(c"/", rdonly, 0)?;
        for (root, found, writable) in &self.writable {
            bind_onto_itself(root, Some(*found), *writable)?;
        }
        for own in &self.own {
            mount_setattr_one(own, 0, rdonly)?;
        }
        if let (Some(cwd), Some(before)) = (&self.cwd, before) {
            enter_again(cwd, &before)?;
        }
        Ok(())
    }
}

/// `chdir(cwd)`, where `cwd` is still the directory open as `before`
/// (device and inode); otherwise back to `before`. Post-fork: no
/// allocation.
fn enter_again(cwd: &CStr, before: &RawFd) -> io::Result<()> {
    let id = |st: &libc::stat| (st.st_dev, st.st_ino);
    let mut was = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat(2) of a descriptor we own into a stat buffer of the
    // right size on this stack.
    zero(unsafe { libc::fstat(before.0, was.as_mut_ptr()) }.into())?;
    // SAFETY: filled by the successful fstat above.
    let was = unsafe { was.assume_init() };
    // SAFETY: chdir(2) of a NUL-terminated path the plan owns.
    if unsafe { libc::chdir(cwd.as_ptr()) } == 0 {
        let mut now = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: stat(2) of a NUL-terminated literal into a stat buffer.
        if unsafe { libc::stat(c".".as_ptr(), now.as_mut_ptr()) } == 0 {
            // SAFETY: filled by the successful stat above.
            if id(&unsafe { now.assume_init() }) == id(&was) {
                return Ok(());
            }
        }
    }
    // SAFETY: fchdir(2) to a directory descriptor we own.
    zero(unsafe { libc::fchdir(before.0) }.into())
}

/// A detached mount of a new `fs` (`fsopen`, `fsconfig`, `fsmount`), made
/// in the calling thread's namespaces (an mqueue filesystem is its IPC
/// namespace's), for lockrun to grant ([`grant_beneath`]) and hand to the
/// child ([`OwnMount::made`]).
pub fn make_fs(fs: &NewFs) -> io::Result<OwnedFd> {
    // SAFETY: fsopen(2) with a NUL-terminated literal.
    let ctx = RawFd::new(unsafe {
        libc::syscall(libc::SYS_fsopen, fs.fstype.as_ptr(), libc::FSOPEN_CLOEXEC)
    })?;
    for (key, value) in fs.options {
        let (cmd, value) = match value {
            Some(v) => (libc::FSCONFIG_SET_STRING, v.as_ptr()),
            None => (libc::FSCONFIG_SET_FLAG, std::ptr::null()),
        };
        // SAFETY: fsconfig(2) on the context above, with NUL-terminated
        // literals or NULL for a flag's value.
        zero(unsafe { libc::syscall(libc::SYS_fsconfig, ctx.0, cmd, key.as_ptr(), value, 0) })?;
    }
    // SAFETY: fsconfig(2) CMD_CREATE takes no key or value.
    zero(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            ctx.0,
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: fsmount(2) of the context above, with integer flags.
    RawFd::new(unsafe { libc::syscall(libc::SYS_fsmount, ctx.0, libc::FSMOUNT_CLOEXEC, fs.attrs) })
        .map(RawFd::into_owned)
}

#[cfg(test)]
mod tests {
    use super::OwnMount;

    /// `mount_all` of `mounts` in a forked child, in a mount namespace of
    /// its own: 0, or the errno it failed with; 100 when the first mount's
    /// target is not then `first_is`'s inode.
    fn mounted_in_a_child(mounts: &[OwnMount], first_is: &std::path::Path) -> i32 {
        use std::os::unix::fs::MetadataExt as _;
        let want = std::fs::metadata(first_is).map(|m| (m.dev(), m.ino())).ok();
        let target = mounts[0].target.clone();
        // SAFETY: the child makes syscalls only (no allocation) and leaves
        // by _exit; the parent waits for it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: unshare(2) with a flag; the child is single-threaded.
            if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
                unsafe { libc::_exit(99) };
            }
            let code = OwnMount::mount_all(mounts).map_or_else(
                |e| e.raw_os_error().unwrap_or(98),
                |()| if inode_of(&target) == want { 0 } else { 100 },
            );
            // SAFETY: leaving the forked child without running the
            // parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child status {status}");
        libc::WEXITSTATUS(status)
    }

    /// The device and inode at `path`, if anything is there. Post-fork: no
    /// allocation.
    fn inode_of(path: &std::ffi::CStr) -> Option<(u64, u64)> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: stat(2) of a NUL-terminated path into a buffer of the
        // right size.
        if unsafe { libc::stat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: filled by the successful stat above.
        let st = unsafe { st.assume_init() };
        Some((st.st_dev, st.st_ino))
    }

    /// A mask lies over the secret; a secret gone before the child mounts
    /// leaves nothing to mask and the run goes on; lockrun's own sealed
    /// file gone fails it.
    #[test]
    fn a_mask_over_a_secret_gone_since_lockrun_looked_is_left_out() {
        let scratch = crate::testing::Scratch::new("sys-mask");
        let dir = scratch.path();
        let sealed = dir.join("sealed-file");
        let secret = dir.join("secret");
        std::fs::write(&sealed, "").unwrap();
        std::fs::write(&secret, "key").unwrap();
        let mask = |s: &std::path::Path, t: &std::path::Path| OwnMount::mask(s, t).unwrap();
        assert_eq!(mounted_in_a_child(&[mask(&sealed, &secret)], &sealed), 0);
        let gone = dir.join("gone");
        assert_eq!(mounted_in_a_child(&[mask(&sealed, &gone)], &gone), 0);
        assert_eq!(
            mounted_in_a_child(&[mask(&dir.join("no-sealed"), &secret)], &sealed),
            libc::ENOENT
        );
        // A bind that is not a mask fails where its target is gone.
        let bind = OwnMount::bind(&sealed, &gone).unwrap();
        assert_eq!(mounted_in_a_child(&[bind], &gone), libc::ENOENT);
    }

    /// `plan` applied in a forked child, in a mount namespace of its own
    /// (every mount private first, as `mount_all` makes them): 0, or the
    /// errno it failed with; then, where it did not fail, `then`'s code
    /// (run in the child; no allocation).
    fn applied_in_a_child(plan: &super::ReadOnlyOutside, then: fn() -> i32) -> i32 {
        // SAFETY: the child makes syscalls only (no allocation) and leaves
        // by _exit; the parent waits for it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: unshare(2) and mount(2) with flags and literals; the
            // child is single-threaded.
            let code = unsafe {
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                {
                    99
                } else {
                    plan.apply()
                        .map_or_else(|e| e.raw_os_error().unwrap_or(98), |()| then())
                }
            };
            // SAFETY: leaving the forked child without running the
            // parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child status {status}");
        libc::WEXITSTATUS(status)
    }

    /// The machine's read-only bind of a root, unmounted however the test
    /// ends.
    struct Bound(std::path::PathBuf);

    impl Drop for Bound {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }

    /// A writable root on a mount the machine has read-only stays
    /// read-only in the run (`EROFS`): lockrun never makes writable what
    /// the machine does not. Control: the same root, once the machine's
    /// read-only mount is gone, is writable in the run. Judged from
    /// outside: the file's mode.
    #[test]
    fn a_root_the_machine_mounts_read_only_stays_read_only() {
        use std::os::unix::fs::PermissionsExt as _;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: a_root_the_machine_mounts_read_only_stays_read_only: needs root (a mount)");
            return;
        }
        let dir = std::path::Path::new(MACHINE_RO_DIR.to_str().unwrap()).to_path_buf();
        let _ = nix::mount::umount2(&dir.join("root"), nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("f"), "").unwrap();
        let mode = || {
            std::fs::metadata(root.join("f"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        let plan =
            || super::ReadOnlyOutside::new(std::slice::from_ref(&root), &[], &[], None).unwrap();
        {
            use nix::mount::{mount, MsFlags};
            mount(
                Some(&root),
                &root,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .unwrap();
            let bound = Bound(root.clone());
            mount(
                None::<&str>,
                &root,
                None::<&str>,
                MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY,
                None::<&str>,
            )
            .unwrap();
            assert_eq!(
                applied_in_a_child(&plan(), chmod_in_the_machines_root),
                CHMOD_FAILED + libc::EROFS
            );
            drop(bound);
        }
        assert_eq!(mode(), 0o644);
        // Control: the machine's mount gone, the same root is writable.
        assert_eq!(applied_in_a_child(&plan(), chmod_in_the_machines_root), 0);
        assert_eq!(mode(), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The scratch dir of [`a_root_the_machine_mounts_read_only_stays_read_only`].
    const MACHINE_RO_DIR: &std::ffi::CStr = c"/tmp/lockrun-ro-machine-unit";

    /// Added to the errno of a failed [`chmod_in_the_machines_root`], to
    /// tell it from a failure of the plan itself.
    const CHMOD_FAILED: i32 = 100;

    /// `chmod` of `MACHINE_RO_DIR/root/f` to 0600: 0 where it is done,
    /// else [`CHMOD_FAILED`] + its errno.
    fn chmod_in_the_machines_root() -> i32 {
        // SAFETY: chmod(2) of a NUL-terminated literal.
        if unsafe { libc::chmod(c"/tmp/lockrun-ro-machine-unit/root/f".as_ptr(), 0o600) } == 0 {
            0
        } else {
            CHMOD_FAILED + std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        }
    }

    /// The scratch dir of [`read_only_outside_holds_and_never_binds_a_swapped_root`],
    /// as the forked child's checks name it (no allocation there).
    const RO_DIR: &std::ffi::CStr = c"/tmp/lockrun-ro-unit";

    /// `chmod` of `RO_DIR/root/f` (inside) works, of `RO_DIR/out` fails
    /// with `EROFS`: 0, or 10 + which check failed.
    fn chmods_inside_only() -> i32 {
        // SAFETY: chmod(2) of NUL-terminated literals.
        unsafe {
            if libc::chmod(c"/tmp/lockrun-ro-unit/root/f".as_ptr(), 0o600) != 0 {
                return 11;
            }
            if libc::chmod(c"/tmp/lockrun-ro-unit/out".as_ptr(), 0o600) == 0 {
                return 12;
            }
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EROFS) {
            return 13;
        }
        0
    }

    /// A writable root is bound writable and everything else is read-only;
    /// a root that is no longer the file lockrun found is never bound
    /// (`ESTALE`), nor one reached through a symbolic link (`ELOOP`), the
    /// run refused either way. Judged from outside: the modes.
    #[test]
    fn read_only_outside_holds_and_never_binds_a_swapped_root() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: read_only_outside_holds_and_never_binds_a_swapped_root: needs root (a mount namespace)");
            return;
        }
        let dir = std::path::Path::new(RO_DIR.to_str().unwrap()).to_path_buf();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        std::fs::write(dir.join("root/f"), "").unwrap();
        std::fs::write(dir.join("out"), "").unwrap();
        let mode = |p: &str| std::fs::metadata(dir.join(p)).unwrap().permissions().mode() & 0o7777;
        let reset = || {
            for p in ["root/f", "out"] {
                std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(0o644))
                    .unwrap();
            }
        };
        let root = dir.join("root");
        let plan = |path: &std::path::Path, found: &std::path::Path| {
            let mut p =
                super::ReadOnlyOutside::new(&[found.to_path_buf()], &[], &[], None).unwrap();
            p.writable[0].0 = crate::sys::c_path(path).unwrap();
            p
        };
        reset();
        assert_eq!(
            applied_in_a_child(&plan(&root, &root), chmods_inside_only),
            0
        );
        assert_eq!((mode("root/f"), mode("out")), (0o600, 0o644));
        // Swapped since lockrun looked: another dir where the root was.
        reset();
        let other = dir.join("other");
        assert_eq!(
            applied_in_a_child(&plan(&other, &root), chmods_inside_only),
            libc::ESTALE
        );
        // A link where the root was, to the very dir lockrun found.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        assert_eq!(
            applied_in_a_child(&plan(&link, &root), chmods_inside_only),
            libc::ELOOP
        );
        assert_eq!((mode("root/f"), mode("out")), (0o644, 0o644));
        assert_ne!(
            std::fs::metadata(&other).unwrap().ino(),
            std::fs::metadata(&root).unwrap().ino()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
