//! Abstract unix sockets bound outside the run, where Landlock does not
//! scope them (ABI < 6, Linux < 6.12), or where the supervisor connects
//! for the command from outside Landlock's domain (no cgroup unix hooks:
//! Linux < 6.7, whose stand-in refuses every unix connect a task of the
//! run makes itself).
//!
//! An abstract name is no file: nothing the filesystem rules name, and
//! any process of the machine's network namespace reaches any of them.
//! Landlock's scoping (6.12) lets a task reach only sockets made in its
//! domain. Without it the supervisor holds the promise by the names:
//!
//! - **`bind`** of a unix address (the filter hands over every one whose
//!   length is not an inet one's, [`crate::seccomp::scope`]): an abstract
//!   name, or the kernel's choice of one (`addrlen` 2, autobind), is bound
//!   here, on the socket taken from the task, and the name remembered as
//!   the run's (at most [`MAX_NAMES`]; past them `ENOBUFS`). A pathname
//!   goes on to the kernel (Landlock judges making the socket file);
//!   should the task swap an abstract name in after the read, the kernel
//!   binds a name this never learns, which no connect of the run reaches.
//! - **`connect`, `sendto`** of an abstract address (handed over by their
//!   length, as pathnames are, [`super::unix`]): performed here, on the
//!   socket taken and the address read once, only to a name the run
//!   bound; any other is refused (`EPERM`) and recorded as a scope
//!   refusal ([`ScopeTarget::AbstractUnixSocket`]), as the kernel's audit
//!   records of Landlock's name it on a newer kernel. `AF_UNSPEC` (a
//!   datagram socket let go of its peer) is performed too; any other
//!   address is the kernel's `EINVAL`.
//!
//! What the supervisor does not see — a connect of an address whose length
//! is an inet one's (16 or 28), a `sendmsg` with a `msg_name`, an address
//! swapped in after the read — the kernel refuses, for any abstract name a
//! task of the run names itself: the cgroup unix hooks (6.7) in the run's
//! mode ([`lockrun_unix`]), or lockrun's unix guard where they are not
//! there ([`lockrun_unix::guard`]). So nothing is let through after a read.
//!
//! # Known limits
//! - A name the run bound, whose socket it then closed, and which a process
//!   outside binds later in the run, is reachable: the names are
//!   remembered, not the sockets (holding the sockets would keep a
//!   listener the command closed accepting, and its name from being bound
//!   again).
//! - A name bound by the kernel for a socket without one (`connect` or
//!   `sendmsg` with `SO_PASSCRED`), or by `bind` with an address 16 or 28
//!   bytes long, is not learnt, and so not reachable by the run's connects.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, PoisonError};

use super::{Reply, Shared, Task};
use crate::audit::{Event, ScopeEvent, ScopeTarget};
use crate::sys;
use lockrun_seccomp::scope::abstract_names_supervised;

/// Abstract names one run may bind and reach.
pub const MAX_NAMES: usize = 4096;

/// `sizeof(struct sockaddr_un)`.
const SOCKADDR_UN: usize = 110;

/// The abstract names the run bound: each `sun_path` as the kernel matches
/// it (its leading NUL and the bytes after, as long as the address said).
#[derive(Default)]
pub struct Names(Mutex<HashSet<Vec<u8>>>);

impl Names {
    fn has(&self, name: &[u8]) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    fn full(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len() >= MAX_NAMES
    }

    fn learn(&self, name: &[u8]) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_vec());
    }
}

/// Whether this run's abstract names are judged here.
#[must_use]
pub fn supervised(s: &Shared) -> bool {
    abstract_names_supervised(s.fallbacks)
}

/// `bind(fd, addr, addrlen)` with `addrlen` not an inet one's.
pub fn bind(task: &Task<'_>, s: &Shared) -> Reply {
    let a = task.args();
    let sock = match super::unix::unix_socket(task, a[0]) {
        Ok(sock) => sock,
        Err(r) => return r,
    };
    let Ok(len) = usize::try_from(a[2] as u32 as i32) else {
        return Reply::Errno(libc::EINVAL);
    };
    if !(2..=SOCKADDR_UN).contains(&len) {
        return Reply::Errno(libc::EINVAL);
    }
    let addr = match task.read(a[1], len) {
        Ok(b) => b,
        Err(e) => return Reply::Errno(e),
    };
    if u16::from_ne_bytes([addr[0], addr[1]]) != libc::AF_UNIX as u16 {
        return Reply::Errno(libc::EINVAL);
    }
    // A pathname: the kernel binds it, Landlock judging the file it makes.
    if len > 2 && addr[2] != 0 {
        return Reply::Continue;
    }
    if s.abstract_names.full() {
        return Reply::Errno(libc::ENOBUFS);
    }
    if !task.valid() {
        return Reply::Gone;
    }
    if let Err(e) = sys::scope::bind(sock.as_fd(), &addr) {
        return Reply::Errno(e.raw_os_error().unwrap_or(libc::EIO));
    }
    // Autobind: the name the kernel chose.
    let bound = if len == 2 {
        sys::scope::sockname(sock.as_fd()).unwrap_or_default()
    } else {
        addr
    };
    if bound.len() > 2 {
        s.abstract_names.learn(&bound[2..]);
    }
    Reply::Value(0)
}

/// A connect or send to a unix address `addr` that is not a pathname:
/// the address to perform it to, or the answer. `call` is `connect` or
/// `sendto`.
pub fn judge(task: &Task<'_>, s: &Shared, addr: &[u8], call: &str) -> Result<Vec<u8>, Reply> {
    if addr.len() < 2 {
        return Err(Reply::Errno(libc::EINVAL));
    }
    match u16::from_ne_bytes([addr[0], addr[1]]) {
        // connect(AF_UNSPEC): a datagram socket lets go of its peer.
        f if f == libc::AF_UNSPEC as u16 && call == "connect" => return Ok(addr.to_vec()),
        f if f != libc::AF_UNIX as u16 => return Err(Reply::Errno(libc::EINVAL)),
        _ => {}
    }
    // Unnamed: no socket to reach.
    if addr.len() <= 2 {
        return Err(Reply::Errno(libc::EINVAL));
    }
    let name = &addr[2..];
    if s.abstract_names.has(name) {
        return Ok(addr.to_vec());
    }
    let shown = String::from_utf8_lossy(&name[1..]).into_owned();
    s.audit.record(Event::Scope(ScopeEvent {
        pid: task.tgid(),
        comm: task.comm(),
        target: ScopeTarget::AbstractUnixSocket {
            name: shown.clone(),
        },
        raw: format!(
            "lockrun's seccomp supervisor refused {call} to abstract unix socket @{shown}: no \
             socket of the run bound that name (no Landlock scoping of it here)"
        ),
    }));
    Err(Reply::Errno(libc::EPERM))
}

/// Perform a connect (or, with `data`, a send) on `sock` to the abstract
/// (or `AF_UNSPEC`) address `addr`; the call's return value.
pub fn perform(
    sock: &OwnedFd,
    addr: &[u8],
    data: Option<(&[u8], i32)>,
) -> Result<i64, super::Errno> {
    let os = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    match data {
        None => sys::scope::connect(sock.as_fd(), addr)
            .map(|()| 0)
            .map_err(os),
        Some((data, flags)) => sys::scope::sendto(sock.as_fd(), data, flags, addr)
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
            .map_err(os),
    }
}
