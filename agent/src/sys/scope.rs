//! Raw calls the supervisor makes for the scoping fallbacks
//! ([`crate::supervise::scope`], [`crate::supervise::abstract_unix`]):
//! signalling through a pidfd, setting a file's owner, and binding,
//! connecting and sending on a unix socket to an address given as its
//! bytes. Safe wrappers; each `unsafe` block has a `// SAFETY:` comment.

// Kernel ABI words change width and sign here; each cast is the encoding
// the syscall expects.
#![allow(clippy::cast_sign_loss, clippy::cast_possible_wrap)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

fn unit_result(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `pidfd_open(pid, 0)` (Linux 5.3): a pidfd of process `pid` (a thread
/// group's leader), through which a signal is process-directed.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: the syscall returned a new descriptor that nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
    }
}

/// `sizeof(siginfo_t)`.
pub const SIGINFO_SIZE: usize = 128;

/// `pidfd_send_signal(pidfd, sig, info, flags)` (Linux 5.1); `info` is a
/// whole `siginfo_t` as the caller gave it, or none.
pub fn pidfd_send_signal(
    pidfd: BorrowedFd<'_>,
    sig: i32,
    info: Option<&[u8; SIGINFO_SIZE]>,
    flags: u32,
) -> io::Result<()> {
    let info = info.map_or(std::ptr::null(), |i| i.as_ptr());
    // SAFETY: info is NULL or a live buffer of sizeof(siginfo_t), which the
    // kernel only reads; the other arguments are integers.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            info,
            flags,
        )
    })
}

/// `fcntl(fd, F_SETOWN_EX, {kind, pid})`: who gets the file's `SIGIO` and
/// `SIGURG` (`F_OWNER_TID` 0, `F_OWNER_PID` 1, `F_OWNER_PGRP` 2; pid 0: no one).
pub fn set_owner(fd: BorrowedFd<'_>, kind: i32, pid: i32) -> io::Result<()> {
    /// asm-generic/fcntl.h.
    const F_SETOWN_EX: libc::c_int = 15;
    #[repr(C)]
    struct OwnerEx {
        kind: libc::c_int,
        pid: libc::pid_t,
    }
    let ex = OwnerEx { kind, pid };
    // SAFETY: ex is a live f_owner_ex the kernel only reads.
    unit_result(unsafe { libc::fcntl(fd.as_raw_fd(), F_SETOWN_EX, &raw const ex) }.into())
}

/// A `sockaddr_un` holding `addr`, a whole unix address as a caller gave it
/// (family first), and its length.
fn sockaddr(addr: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: plain data; zeroed is an empty address.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if addr.len() > std::mem::size_of::<libc::sockaddr_un>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a is a sockaddr_un, at least addr.len() bytes long (checked
    // above); the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(addr.as_ptr(), (&raw mut a).cast::<u8>(), addr.len());
    }
    Ok((a, addr.len() as libc::socklen_t))
}

/// `bind(sock, addr)`, `addr` a unix address's bytes.
pub fn bind(sock: BorrowedFd<'_>, addr: &[u8]) -> io::Result<()> {
    let (a, len) = sockaddr(addr)?;
    // SAFETY: a is a live sockaddr_un and len is within it.
    unit_result(unsafe { libc::bind(sock.as_raw_fd(), (&raw const a).cast(), len) }.into())
}

/// `connect(sock, addr)`, `addr` a unix address's bytes (`AF_UNSPEC`
/// dissolves a datagram socket's association).
pub fn connect(sock: BorrowedFd<'_>, addr: &[u8]) -> io::Result<()> {
    let (a, len) = sockaddr(addr)?;
    // SAFETY: a is a live sockaddr_un and len is within it.
    unit_result(unsafe { libc::connect(sock.as_raw_fd(), (&raw const a).cast(), len) }.into())
}

/// `sendto(sock, data, flags, addr)`; the bytes sent.
pub fn sendto(sock: BorrowedFd<'_>, data: &[u8], flags: i32, addr: &[u8]) -> io::Result<usize> {
    let (a, len) = sockaddr(addr)?;
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

/// `getsockname(sock)`: the socket's own address's bytes.
pub fn sockname(sock: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    // SAFETY: plain data.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: a and len are live, len is a's size.
    unit_result(
        unsafe { libc::getsockname(sock.as_raw_fd(), (&raw mut a).cast(), &raw mut len) }.into(),
    )?;
    // SAFETY: a is a sockaddr_un, whose bytes are all initialized (zeroed).
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&raw const a).cast::<u8>(),
            std::mem::size_of::<libc::sockaddr_un>(),
        )
    };
    Ok(bytes[..(len as usize).min(bytes.len())].to_vec())
}
