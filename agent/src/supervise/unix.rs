//! `connect` and `sendto` with an address whose length is not an inet one.
//!
//! 1. The socket is taken from the task (`pidfd_getfd`: the same open file).
//!    Its family is kernel state the task cannot change: not `AF_UNIX` →
//!    **continue** (the kernel validates the address against the family and
//!    the inet hooks judge it).
//! 2. `AF_UNIX`: the address is read once. Not a pathname (abstract,
//!    unnamed, another family) → **continue**: abstract names are scoped by
//!    Landlock to the run's domain, and should the task swap a pathname in
//!    before the kernel re-reads it, the unix hooks refuse it (supervised
//!    mode refuses every pathname a task of the run names itself). Without
//!    Landlock's scoping (ABI < 6), [`super::abstract_unix`] judges it
//!    instead, and the supervisor performs a connect or send to an
//!    abstract name the run bound, as below for pathnames.
//! 3. A pathname is resolved as the kernel would for the task (cwd, `..`,
//!    symlinks) to an `O_PATH` fd, judged against the worktree and the run's
//!    temp dir (not `fs.writable`, like the hooks), and — when inside — the
//!    supervisor **connects (or sends) itself**, on the duplicated socket,
//!    to `/proc/self/fd/N` of that fd, from a thread without capabilities
//!    (write permission on the socket inode is checked as for the task).
//!    The task's socket is the same open file, so it is now connected.
//!    Outside → `EPERM` and a `kernel_network` audit event.
//!
//! Abstract connects are never performed by the supervisor: from outside the
//! sandbox it would escape Landlock's scoping (it could reach any abstract
//! socket on the host). Differences a peer can see: `SO_PEERCRED` and
//! `SCM_CREDENTIALS` name lockrun's pid (same uid and gid as the command).
//! A `sendto` payload is read from the task's memory, at most 1 MiB
//! (`EMSGSIZE` beyond: larger than any unix datagram the default buffers take).

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::resolve::{self, Errno, Object};
use super::{Reply, Shared, Task};
use crate::audit::Direction;
use crate::audit::{Destination, Event, KernelNetEvent};
use crate::sys::supervisor_calls;

const MAX_ADDRLEN: i32 = 128;
const MAX_SEND: usize = 1 << 20;
/// Connects and sends in flight at once; beyond, `EAGAIN` (a command that
/// floods blocked connects must not grow lockrun without bound).
const MAX_IN_FLIGHT: usize = 256;

static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The pathname in a unix socket address, if it is one.
#[must_use]
pub fn pathname(addr: &[u8]) -> Option<&[u8]> {
    if addr.len() <= 2 || u16::from_ne_bytes([addr[0], addr[1]]) != libc::AF_UNIX as u16 {
        return None;
    }
    let sun = &addr[2..];
    if sun[0] == 0 {
        return None;
    }
    let end = sun.iter().position(|b| *b == 0).unwrap_or(sun.len());
    Some(&sun[..end])
}

enum Decision {
    Reply(Reply),
    /// Inside: perform on `sock` to `obj`.
    Perform {
        sock: OwnedFd,
        obj: Object,
    },
    /// An abstract name the run bound (or `AF_UNSPEC`), where the
    /// supervisor judges them: perform on `sock` to `addr`
    /// ([`super::abstract_unix`]).
    Abstract {
        sock: OwnedFd,
        addr: Vec<u8>,
    },
}

/// Step 1: the task's socket `fd`, if it is a unix one.
pub(super) fn unix_socket(task: &Task<'_>, fd: u64) -> Result<OwnedFd, Reply> {
    let sock = task.getfd(fd as i32).map_err(Reply::Errno)?;
    match supervisor_calls::sockopt_int(sock.as_fd(), libc::SO_DOMAIN) {
        Ok(libc::AF_UNIX) => Ok(sock),
        Ok(_) => Err(Reply::Continue),
        Err(e) => Err(Reply::Errno(e.raw_os_error().unwrap_or(libc::ENOTSOCK))),
    }
}

/// Steps 2–3: the address at `addr`/`addrlen` for the unix socket `sock`.
fn judge(
    task: &Task<'_>,
    s: &Shared,
    sock: OwnedFd,
    addr: u64,
    addrlen: u64,
    hook: &str,
) -> Decision {
    let len = addrlen as u32 as i32;
    if !(0..=MAX_ADDRLEN).contains(&len) {
        return Decision::Reply(Reply::Errno(libc::EINVAL));
    }
    let bytes = match task.read(addr, len as usize) {
        Ok(b) => b,
        Err(e) => return Decision::Reply(Reply::Errno(e)),
    };
    let Some(path) = pathname(&bytes) else {
        if !super::abstract_unix::supervised(s) {
            return Decision::Reply(Reply::Continue);
        }
        let call = if hook.contains("connect") {
            "connect"
        } else {
            "sendto"
        };
        return match super::abstract_unix::judge(task, s, &bytes, call) {
            Ok(_) if !task.valid() => Decision::Reply(Reply::Gone),
            Ok(addr) => Decision::Abstract { sock, addr },
            Err(r) => Decision::Reply(r),
        };
    };
    let cwd = if path[0] == b'/' {
        None
    } else {
        match task.cwd() {
            Ok(c) => Some(c),
            Err(e) => return Decision::Reply(Reply::Errno(e)),
        }
    };
    if !task.valid() {
        return Decision::Reply(Reply::Gone);
    }
    let root = task.root();
    let start = cwd.as_ref().map_or(root, AsFd::as_fd);
    // Walked with the command's privileges (search permission on each dir).
    let resolved = match supervisor_calls::EffectiveCapsDropped::new() {
        Ok(_unprivileged) => resolve::resolve(root, start, path, true),
        Err(_) => Err(libc::EPERM),
    };
    let obj = match resolved {
        Ok(o) => o,
        Err(e) => return Decision::Reply(Reply::Errno(e)),
    };
    match s.unix_roots.judge(&obj) {
        Ok(true) => {}
        Ok(false) => {
            refused(task, s, &sock, path, hook);
            return Decision::Reply(Reply::Errno(libc::EPERM));
        }
        Err(e) => return Decision::Reply(Reply::Errno(e)),
    }
    if !obj.is_socket() {
        // unix_find_bsd(): not a socket inode.
        return Decision::Reply(Reply::Errno(libc::ECONNREFUSED));
    }
    Decision::Perform { sock, obj }
}

fn refused(task: &Task<'_>, s: &Shared, sock: &OwnedFd, path: &[u8], hook: &str) {
    let protocol = match supervisor_calls::sockopt_int(sock.as_fd(), libc::SO_TYPE) {
        Ok(libc::SOCK_STREAM) => "unix_stream".to_owned(),
        Ok(libc::SOCK_DGRAM) => "unix_dgram".to_owned(),
        Ok(libc::SOCK_SEQPACKET) => "unix_seqpacket".to_owned(),
        Ok(t) => format!("unix_type_{t}"),
        Err(_) => "unix".to_owned(),
    };
    s.audit.record(Event::KernelNetwork(KernelNetEvent {
        pid: task.tid(),
        tgid: task.tgid(),
        comm: task.comm(),
        cgroup_id: s.cgroup_id,
        hook: hook.to_owned(),
        family: "unix".to_owned(),
        protocol,
        destination: Destination::Unix(String::from_utf8_lossy(path).into_owned()),
        target_absent: false, // AuditLog::record judges it
        direction: Direction::Outbound,
        local_port: 0,
    }));
}

/// Run `op` on a thread of its own, without capabilities, and answer `id`
/// with its result: a connect or send can block on the peer.
fn perform_on_thread(
    s: &Arc<Shared>,
    id: u64,
    op: impl FnOnce() -> Result<i64, Errno> + Send + 'static,
) -> Reply {
    use std::sync::atomic::Ordering;
    if IN_FLIGHT.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        return Reply::Errno(libc::EAGAIN);
    }
    let shared = Arc::clone(s);
    let spawned = std::thread::Builder::new()
        .name("lockrun-unix".into())
        .spawn(move || {
            let reply = match supervisor_calls::drop_thread_caps_for_good() {
                Err(_) => Reply::Errno(libc::EPERM),
                Ok(()) => match op() {
                    Ok(v) => Reply::Value(v),
                    Err(e) => Reply::Errno(e),
                },
            };
            shared.respond(id, &reply);
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_ok() {
        Reply::Deferred
    } else {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        Reply::Errno(libc::EAGAIN)
    }
}

fn os(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// `connect(fd, addr, addrlen)`.
#[must_use]
pub fn connect(task: &Task<'_>, s: &Arc<Shared>) -> Reply {
    let a = task.args();
    let sock = match unix_socket(task, a[0]) {
        Ok(sock) => sock,
        Err(r) => return r,
    };
    match judge(task, s, sock, a[1], a[2], "seccomp_connect_unix") {
        Decision::Reply(r) => r,
        Decision::Perform { sock, obj } => perform_on_thread(s, task.n.id, move || {
            let path: CString = obj.proc_path();
            supervisor_calls::connect_unix(sock.as_fd(), &path)
                .map(|()| 0)
                .map_err(|e| os(&e))
        }),
        Decision::Abstract { sock, addr } => perform_on_thread(s, task.n.id, move || {
            super::abstract_unix::perform(&sock, &addr, None)
        }),
    }
}

/// `sendto(fd, buf, len, flags, addr, addrlen)` with `addr` not NULL.
#[must_use]
pub fn sendto(task: &Task<'_>, s: &Arc<Shared>) -> Reply {
    let a = task.args();
    let sock = match unix_socket(task, a[0]) {
        Ok(sock) => sock,
        Err(r) => return r,
    };
    let len = usize::try_from(a[2]).unwrap_or(usize::MAX);
    if len > MAX_SEND {
        return Reply::Errno(libc::EMSGSIZE);
    }
    // The payload is read before the final validity check in `judge`.
    let data = match task.read(a[1], len) {
        Ok(d) => d,
        Err(e) => return Reply::Errno(e),
    };
    // MSG_NOSIGNAL: an EPIPE must not signal lockrun.
    let flags = (a[3] as i32) | libc::MSG_NOSIGNAL;
    match judge(task, s, sock, a[4], a[5], "seccomp_sendto_unix") {
        Decision::Reply(r) => r,
        Decision::Perform { sock, obj } => perform_on_thread(s, task.n.id, move || {
            let path: CString = obj.proc_path();
            supervisor_calls::sendto_unix(sock.as_fd(), &data, flags, &path)
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
                .map_err(|e| os(&e))
        }),
        Decision::Abstract { sock, addr } => perform_on_thread(s, task.n.id, move || {
            super::abstract_unix::perform(&sock, &addr, Some((&data, flags)))
        }),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pathnames_only() {
        let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        assert_eq!(super::pathname(&a), None);
        a.extend_from_slice(b"\0abstract");
        assert_eq!(super::pathname(&a), None);
        let mut p = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        p.extend_from_slice(b"rel/s.sock\0junk");
        assert_eq!(super::pathname(&p), Some(&b"rel/s.sock"[..]));
        let mut inet = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        inet.extend_from_slice(b"/x");
        assert_eq!(super::pathname(&inet), None);
    }
}
