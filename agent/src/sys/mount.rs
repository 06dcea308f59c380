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

/// `mount_setattr(AT_FDCWD, path, AT_RECURSIVE, {set, clear})` (Linux
/// 5.12): on the mount at `path` (`EINVAL` where none is) and every mount
/// beneath it. Post-fork: no allocation.
pub(super) fn mount_setattr_recursive(path: &CStr, set: u64, clear: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path, and a live mount_attr of the size passed.
    zero(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })
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
}
