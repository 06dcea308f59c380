//! Raw syscalls of seccomp user notification (Linux 5.0; `WAIT_KILLABLE_RECV`
//! 5.19, `PIDFD_THREAD` 6.9) and of the operations the supervisor performs
//! on the command's behalf. Safe wrappers; each `unsafe` block has a
//! `// SAFETY:` comment. Policy lives in [`crate::supervise`], not here.
//!
//! Two halves:
//! - **child side** (`load_listener`, `send_fds`): called from
//!   [`super::ChildPlan::apply`] after fork, so allocation-free and
//!   async-signal-safe;
//! - **supervisor side**: receiving and answering notifications, taking the
//!   command's descriptors (`pidfd_getfd`), and the metadata/socket calls,
//!   issued by a thread whose effective capabilities are dropped
//!   ([`EffectiveCapsDropped`]) so the kernel's own permission checks see the
//!   command's privileges, not lockrun's.

// Kernel ABI words (flags, fds, lengths) change width and sign here; each
// cast is the encoding the syscall expects.
#![allow(clippy::cast_sign_loss, clippy::cast_possible_wrap)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` (Linux 5.0).
const FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19): once the supervisor
/// has received a notification, only a fatal signal interrupts the waiting
/// task. Without it a signal (Go's preemption `SIGURG`, a timer) would
/// restart a syscall the supervisor already performed — a second `connect`
/// would then fail with `EISCONN`.
const FLAG_WAIT_KILLABLE_RECV: libc::c_ulong = 1 << 5;
/// `PIDFD_THREAD` (Linux 6.9): a pidfd for a thread, not only a leader.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// Child side: load `prog` as a filter with a new notification listener;
/// the listener's fd (close-on-exec), or -1 with errno set.
pub(super) fn load_listener(prog: &[seccompiler::sock_filter]) -> libc::c_long {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr().cast_mut().cast(),
    };
    // SAFETY: fprog points at the plan's filter, alive and unchanged for the
    // call; the kernel copies it.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            FLAG_NEW_LISTENER | FLAG_WAIT_KILLABLE_RECV,
            &raw const fprog,
        )
    }
}

/// Child side: send `fds` (the listener and the command's root) over the
/// connected unix socket `sock` with `SCM_RIGHTS`, in one message.
/// Allocation-free: the control buffer is on the stack.
pub(super) fn send_fds(sock: RawFd, fds: [RawFd; 2]) -> bool {
    // CMSG_SPACE(2 * sizeof(int)) is 24 on LP64; 32 bytes, 8-aligned, is enough.
    let mut control = [0u64; 4];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(&fds) as u32) } as _;
    // SAFETY: msg_control points at a live, large-enough, aligned buffer, so
    // CMSG_FIRSTHDR returns a pointer into it (non-null), and CMSG_DATA too,
    // with room for both descriptors.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null() {
            return false;
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(&fds) as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<[RawFd; 2]>(), fds);
        libc::sendmsg(sock, &raw const msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// Parent side: receive the two descriptors sent with `send_fds`, without
/// waiting (the child sent them before exec, so they are there once spawn
/// returned).
pub fn recv_fds(sock: BorrowedFd<'_>) -> io::Result<[OwnedFd; 2]> {
    let mut control = [0u64; 4];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in msg refers to live stack buffers of the
    // stated sizes.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &raw mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG
    // macros stay within it and check for null; the length is checked
    // before the two descriptors are read.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no descriptor in the message",
            ));
        }
        let data = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
        let size = std::mem::size_of::<RawFd>();
        // The kernel installed these fds for us: we own them now (each one
        // it installed, even when the count is not the expected one).
        let mut owned: Vec<OwnedFd> = (0..data / size)
            .map(|i| {
                OwnedFd::from_raw_fd(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).add(i * size).cast::<RawFd>(),
                ))
            })
            .collect();
        match (owned.pop(), owned.pop(), owned.is_empty()) {
            (Some(root), Some(listener), true) => Ok([listener, root]),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not the two descriptors the child sends",
            )),
        }
    }
}

/// One notification: who asked, and the syscall with its register arguments.
#[derive(Debug, Clone, Copy)]
pub struct Notif {
    pub id: u64,
    /// The thread id (in lockrun's pid namespace).
    pub pid: u32,
    pub nr: i32,
    pub arch: u32,
    pub args: [u64; 6],
}

/// `SECCOMP_IOCTL_NOTIF_RECV`: blocks until a notification is pending.
pub fn notif_recv(listener: BorrowedFd<'_>) -> io::Result<Notif> {
    // SAFETY: plain data; the kernel demands a zeroed struct.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: n is a live, correctly sized seccomp_notif for the ioctl.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &raw mut n,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Notif {
        id: n.id,
        pid: n.pid,
        nr: n.data.nr,
        arch: n.data.arch,
        args: n.data.args,
    })
}

/// `SECCOMP_IOCTL_NOTIF_SEND`: the syscall returns `val` (`error == 0`) or
/// fails with `error` (a positive errno); or, with `cont`, the kernel runs it.
pub fn notif_send(
    listener: BorrowedFd<'_>,
    id: u64,
    val: i64,
    error: i32,
    cont: bool,
) -> io::Result<()> {
    let resp = libc::seccomp_notif_resp {
        id,
        val,
        error: -error,
        flags: if cont {
            libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
        } else {
            0
        },
    };
    // SAFETY: resp is a live, correctly sized seccomp_notif_resp.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &raw const resp,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6; not in the libc crate).
const USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;

/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS(SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)`
/// (Linux 6.6): the kernel hands each notification to the supervisor, and
/// its answer back to the task, as a direct switch on the waker's CPU
/// rather than a wake-up of the other (often idle) one: the task waits for
/// the answer anyway, so no parallelism is lost. `EINVAL` on older kernels,
/// which is harmless: only slower.
pub fn notif_sync_wakeup(listener: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: the argument is the flags value itself, not a pointer.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SECCOMP_IOCTL_NOTIF_ID_VALID`: whether the notifying task is still
/// waiting — so a pid read from the notification still names it.
#[must_use]
pub fn notif_id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: id is a live u64 for the ioctl to read.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &raw const id,
        ) == 0
    }
}

fn fd_result(r: libc::c_long) -> io::Result<OwnedFd> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: the syscall returned a new descriptor that nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
    }
}

fn unit_result(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `pidfd_open(tid, PIDFD_THREAD)` (Linux 6.9), falling back to a plain
/// pidfd (valid when `tid` leads its thread group) on older kernels.
pub fn pidfd_open(tid: u32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, PIDFD_THREAD) };
    if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // SAFETY: integer arguments only.
        return fd_result(unsafe { libc::syscall(libc::SYS_pidfd_open, tid, 0u32) });
    }
    fd_result(r)
}

/// `pidfd_getfd` (Linux 5.6): a duplicate of the task's `fd` (same open file).
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    fd_result(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0u32) })
}

/// `openat2` (Linux 5.6) with `how.flags = flags`, `how.resolve = resolve`.
pub fn openat2(dir: BorrowedFd<'_>, path: &CStr, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    // open_how is #[non_exhaustive] in libc: build it as the kernel's layout.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: path is NUL-terminated and how is a live open_how of the size passed.
    fd_result(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// `getsockopt(SOL_SOCKET, opt)` for an int option (`SO_DOMAIN`, `SO_TYPE`).
pub fn sockopt_int(sock: BorrowedFd<'_>, opt: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are live and sized for an int option.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&raw mut v).cast(),
            &raw mut len,
        )
    };
    unit_result(r.into()).map(|()| v)
}

fn sockaddr_un(path: &CStr) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: plain data; zeroed is an empty address.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.to_bytes_with_nul();
    if bytes.len() > a.sun_path.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (d, s) in a.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // offsetof(sun_path) + strlen + NUL
    Ok((a, (2 + bytes.len()) as libc::socklen_t))
}

/// `connect(sock, {AF_UNIX, path})`.
pub fn connect_unix(sock: BorrowedFd<'_>, path: &CStr) -> io::Result<()> {
    let (a, len) = sockaddr_un(path)?;
    // SAFETY: a is a live sockaddr_un and len is within it.
    unit_result(unsafe { libc::connect(sock.as_raw_fd(), (&raw const a).cast(), len) }.into())
}

/// `sendto(sock, data, flags, {AF_UNIX, path})`; the bytes sent.
pub fn sendto_unix(
    sock: BorrowedFd<'_>,
    data: &[u8],
    flags: i32,
    path: &CStr,
) -> io::Result<usize> {
    let (a, len) = sockaddr_un(path)?;
    // SAFETY: data and a are live for the call, lengths are theirs.
    let n = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            flags,
            (&raw const a).cast(),
            len,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `fchmodat2` (Linux 6.6; one number on every arch, and missing from the
/// libc crate's aarch64 glibc module). The seccomp filter names it too
/// ([`crate::seccomp`] is also compiled alone by the build script).
const SYS_FCHMODAT2: libc::c_long = 452;

/// `fchmodat2(fd, "", mode, AT_EMPTY_PATH)`: the mode of what `fd` (`O_PATH`
/// or not) refers to, itself; no name is looked up (a path through
/// `/proc/self/fd/N` costs a walk of procfs, twice what the change does).
/// Before Linux 6.6, which has no `fchmodat2` (`ENOSYS`), through that path
/// ([`chmod_through_proc`]).
pub fn chmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    static NO_FCHMODAT2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if NO_FCHMODAT2.load(std::sync::atomic::Ordering::Relaxed) {
        return chmod_through_proc(fd, mode);
    }
    // SAFETY: the path is a NUL-terminated empty string; no other pointer.
    match unit_result(unsafe {
        libc::syscall(
            SYS_FCHMODAT2,
            fd.as_raw_fd(),
            c"".as_ptr(),
            mode,
            libc::AT_EMPTY_PATH,
        )
    }) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            NO_FCHMODAT2.store(true, std::sync::atomic::Ordering::Relaxed);
            chmod_through_proc(fd, mode)
        }
        r => r,
    }
}

/// `chmod("/proc/self/fd/<fd>", mode)`: the magic link leads to the very
/// inode `fd` refers to, whatever its names now. A symbolic link's mode is
/// not changed: `EOPNOTSUPP`, as `fchmodat2` answers (`chmod` would follow
/// the link's own path no further, and change the link).
fn chmod_through_proc(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(io::Error::from)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    let mut path = [0u8; 32];
    let name = proc_fd_path(fd.as_raw_fd(), &mut path);
    // SAFETY: `name` is NUL-terminated within `path`, which outlives the call.
    unit_result(unsafe { libc::chmod(name.as_ptr(), mode) }.into())
}

/// `/proc/self/fd/<fd>`, NUL-terminated, in `buf`, without allocating.
fn proc_fd_path(fd: i32, buf: &mut [u8; 32]) -> &std::ffi::CStr {
    let _ = std::io::Write::write_fmt(&mut &mut buf[..], format_args!("/proc/self/fd/{fd}\0"));
    std::ffi::CStr::from_bytes_until_nul(&buf[..]).unwrap_or(c"/proc/self/fd")
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`; `u32::MAX` leaves one
/// unchanged.
pub fn chown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: the path is a NUL-terminated empty string.
    unit_result(
        unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) }
            .into(),
    )
}

/// `utimensat(fd, "", times, AT_EMPTY_PATH)` (`UTIME_NOW`/`UTIME_OMIT` as
/// given): the path form, whose permission checks are the inode's, not the
/// open file's.
pub fn utimens(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: the path is a NUL-terminated empty string and times is a live
    // array of two.
    unit_result(
        unsafe {
            libc::utimensat(
                fd.as_raw_fd(),
                c"".as_ptr(),
                times.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        }
        .into(),
    )
}

/// `setxattr(path, name, value, flags)`.
pub fn setxattr(path: &CStr, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    // SAFETY: path and name are NUL-terminated; value is live for its length.
    unit_result(
        unsafe {
            libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        }
        .into(),
    )
}

/// `ioctl(fd, cmd, arg)` with `arg` pointing at a buffer of ours.
pub fn ioctl_buf(fd: BorrowedFd<'_>, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
    // SAFETY: arg is a live buffer at least as large as the command's
    // argument (the caller sized it from the command); the kernel reads or
    // writes within it.
    unit_result(
        unsafe { libc::ioctl(fd.as_raw_fd(), libc::Ioctl::from(cmd), arg.as_mut_ptr()) }.into(),
    )
}

/// `truncate(path, length)`: the supervisor's, on a `/proc/self/fd/N` of
/// the object it resolved and judged (the kernel follows that to the very
/// file, whatever its name is by now).
pub fn truncate(path: &CStr, length: i64) -> io::Result<()> {
    // SAFETY: a NUL-terminated path and an integer.
    unit_result(unsafe { libc::truncate(path.as_ptr(), length) }.into())
}

/// `open(path, flags | O_CLOEXEC)`, without a mode (`flags` creates
/// nothing): the supervisor's reopen of an object it resolved and judged,
/// through its `/proc/self/fd/N`.
pub fn open(path: &CStr, flags: i32) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; no mode is read without O_CREAT or
    // O_TMPFILE, which the caller does not pass.
    fd_result(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) }.into())
}

/// `SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SEND` (Linux
/// 5.14): put a duplicate of `fd` in the notifying task, at its lowest
/// free number (`O_CLOEXEC` there when `cloexec`), and answer the
/// notification with that number, in one step. Its number in the task;
/// `ENOENT` when the task is gone, and any error (the task's descriptor
/// limit: `EMFILE`) leaves the notification unanswered.
pub fn addfd_send(
    listener: BorrowedFd<'_>,
    id: u64,
    fd: BorrowedFd<'_>,
    cloexec: bool,
) -> io::Result<i32> {
    let addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: addfd is a live, correctly sized seccomp_notif_addfd.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD,
            &raw const addfd,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `removexattr(path, name)`.
pub fn removexattr(path: &CStr, name: &CStr) -> io::Result<()> {
    // SAFETY: path and name are NUL-terminated.
    unit_result(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }.into())
}

/// `setsockopt(SOL_SOCKET, opt, value)` for an int option.
pub fn set_sockopt_int(sock: BorrowedFd<'_>, opt: i32, value: i32) -> io::Result<()> {
    // SAFETY: value is a live int and the length is its size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    unit_result(r.into())
}

/// `inotify_add_watch(inotify, path, mask)`: the watch descriptor.
pub fn inotify_add_watch(inotify: BorrowedFd<'_>, path: &CStr, mask: u32) -> io::Result<i32> {
    // SAFETY: a descriptor and a NUL-terminated path, live for the call.
    let wd = unsafe { libc::inotify_add_watch(inotify.as_raw_fd(), path.as_ptr(), mask) };
    if wd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(wd)
}

// The capset(2) structs are the parent module's (`super::CapHeader`, `super::CapData`).
use super::{CapData, CapHeader};

fn capget() -> io::Result<[CapData; 2]> {
    let mut h = CapHeader {
        version: super::LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: header and a v3 pair of data structs, live for the call.
    unit_result(unsafe { libc::syscall(libc::SYS_capget, &raw mut h, d.as_mut_ptr()) })?;
    Ok(d)
}

fn capset(d: &[CapData; 2]) -> io::Result<()> {
    let mut h = CapHeader {
        version: super::LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: header and a v3 pair of data structs, live for the call.
    // The raw syscall (not libcap/glibc) changes only the calling thread.
    unit_result(unsafe { libc::syscall(libc::SYS_capset, &raw mut h, d.as_ptr()) })
}

/// While alive, the calling **thread** has no effective capability (its
/// permitted set is kept, so they come back on drop). Credentials are
/// per-thread in Linux and this uses the raw syscall, so other threads of
/// lockrun are untouched. The command runs with lockrun's uid and groups and
/// no capability: under this guard the kernel's DAC checks (owner for
/// chmod/chown/utimes, `CAP_CHOWN`, `CAP_FOWNER`, `CAP_SYS_ADMIN` for
/// `trusted.*` xattrs, write permission on a socket) judge as they would for
/// the command.
pub struct EffectiveCapsDropped {
    /// What to set back on drop; `None` when an outer guard of this thread
    /// already dropped them (it alone raises them again).
    saved: Option<[CapData; 2]>,
    /// Not `Send`: the credentials belong to this thread.
    _thread: std::marker::PhantomData<*const ()>,
}

thread_local! {
    /// This thread's capabilities as the first guard found them: they change
    /// only through the guards (and back), so one `capget` per thread does.
    static HELD: std::cell::Cell<Option<[CapData; 2]>> = const { std::cell::Cell::new(None) };
    /// Whether a guard of this thread is alive.
    static DROPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl EffectiveCapsDropped {
    pub fn new() -> io::Result<Self> {
        if DROPPED.get() {
            return Ok(Self {
                saved: None,
                _thread: std::marker::PhantomData,
            });
        }
        let saved = if let Some(held) = HELD.get() {
            held
        } else {
            let held = capget()?;
            HELD.set(Some(held));
            held
        };
        let mut d = saved;
        for x in &mut d {
            x.effective = 0;
        }
        capset(&d)?;
        DROPPED.set(true);
        Ok(Self {
            saved: Some(saved),
            _thread: std::marker::PhantomData,
        })
    }
}

impl Drop for EffectiveCapsDropped {
    fn drop(&mut self) {
        if let Some(saved) = self.saved {
            // Raising effective caps back within the kept permitted set
            // cannot fail; if it did, this thread stays unprivileged (fails
            // closed): the next guard then finds nothing to drop or raise.
            if capset(&saved).is_err() {
                HELD.set(Some([CapData::default(); 2]));
            }
            DROPPED.set(false);
        }
    }
}

/// Run `f` with this thread's capabilities raised again, when a guard has
/// dropped them, and drop them again after. For the supervisor's own work
/// only, never around an operation it performs for the command: reading the
/// task (its memory, descriptors and `/proc/<pid>/cwd` need `CAP_SYS_PTRACE`
/// when it is not dumpable) and placing an object (walking up through a dir
/// the command cannot search). If they cannot be dropped again, the thread
/// counts as not dropped: the next guard drops them itself, or fails and
/// its caller refuses.
pub fn with_caps<T>(f: impl FnOnce() -> T) -> T {
    let (true, Some(held)) = (DROPPED.get(), HELD.get()) else {
        return f();
    };
    if capset(&held).is_err() {
        return f();
    }
    DROPPED.set(false);
    let r = f();
    let mut d = held;
    for x in &mut d {
        x.effective = 0;
    }
    if capset(&d).is_ok() {
        DROPPED.set(true);
    }
    r
}

/// `f` as this thread is, and once more under [`with_caps`] if it failed
/// with an error `refused` says capabilities may lift: the one shape of
/// every supervisor read that a task which is not dumpable, or a dir the
/// command cannot search, refuses without them.
pub fn retry_with_caps<T, E>(
    mut f: impl FnMut() -> Result<T, E>,
    refused: impl FnOnce(&E) -> bool,
) -> Result<T, E> {
    match f() {
        Err(e) if refused(&e) => with_caps(f),
        r => r,
    }
}

/// Drop this thread's effective capabilities for good (threads that only
/// act for the command).
pub fn drop_thread_caps_for_good() -> io::Result<()> {
    capset(&[CapData::default(); 2])?;
    HELD.set(Some([CapData::default(); 2]));
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    /// Below Linux 6.6 (no `fchmodat2`): the mode of the file a descriptor
    /// (`O_PATH` too) refers to, changed through its `/proc/self/fd` link;
    /// a symbolic link's refused as `fchmodat2` refuses it.
    #[test]
    fn chmod_through_proc_changes_the_descriptors_file_and_no_link() {
        use std::os::fd::AsFd as _;
        use std::os::unix::fs::PermissionsExt as _;
        let dir = crate::testing::Scratch::new("chmodproc");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let open = |p: &std::path::Path, flags: i32| {
            use std::os::unix::fs::OpenOptionsExt as _;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | flags)
                .open(p)
                .unwrap()
        };
        let fd = open(&file, 0);
        super::chmod_through_proc(fd.as_fd(), 0o640).unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let fd = open(&link, libc::O_NOFOLLOW);
        assert_eq!(
            super::chmod_through_proc(fd.as_fd(), 0o600)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777,
            0o640
        );
    }
    use super::{retry_with_caps, with_caps, EffectiveCapsDropped};

    fn thread_cap_eff() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .unwrap();
        u64::from_str_radix(hex.trim(), 16).unwrap()
    }

    #[test]
    fn guards_drop_effective_caps_and_only_the_outer_one_raises_them() {
        const T: &str = "guards_drop_effective_caps_and_only_the_outer_one_raises_them";
        std::thread::spawn(|| {
            let full = thread_cap_eff();
            if full == 0 {
                assert!(
                    std::env::var_os("CI").is_none_or(|v| v != "true"),
                    "{T}: needs effective capabilities (root) under CI=true"
                );
                eprintln!("skipped: {T}: needs effective capabilities (root)");
                return;
            }
            for round in ["first (capget)", "second (kept)"] {
                let outer = EffectiveCapsDropped::new().unwrap();
                assert_eq!(thread_cap_eff(), 0, "{round}: dropped");
                drop(EffectiveCapsDropped::new().unwrap());
                assert_eq!(thread_cap_eff(), 0, "{round}: an inner guard raised them");
                assert_eq!(with_caps(thread_cap_eff), full, "{round}: raised for f");
                assert_eq!(thread_cap_eff(), 0, "{round}: dropped again after f");
                let mut tries = Vec::new();
                let r: Result<(), u64> = retry_with_caps(
                    || {
                        tries.push(thread_cap_eff());
                        Err(tries.len() as u64)
                    },
                    |e| *e == 1,
                );
                assert_eq!((r, tries), (Err(2), vec![0, full]), "{round}: one retry");
                assert_eq!(
                    thread_cap_eff(),
                    0,
                    "{round}: dropped again after the retry"
                );
                drop(outer);
                assert_eq!(thread_cap_eff(), full, "{round}: raised back");
            }
        })
        .join()
        .unwrap();
    }
}
