//! `SO_REUSEPORT`, and `SO_REUSEADDR` on a datagram socket: refused when
//! set, performed for the command otherwise.
//!
//! Either lets a socket bind a port that a socket outside the run already
//! holds, and then take what was meant for it. The kernel asks only that
//! both sockets have the option, and for `SO_REUSEPORT` that both belong to
//! one uid, which a run's command shares with every process of the caller's
//! uid: checked by hand, a run's listener with `SO_REUSEPORT` on a port where
//! a process outside listened with it took 9 of 20 connections (and the
//! bytes the clients sent), and a UDP socket with `SO_REUSEADDR` took all 20
//! datagrams sent to an outside one's port. The packet programs let these
//! through: the clients are on loopback. (Python's asyncio refuses
//! `reuse_address` for UDP for the same reason.)
//!
//! The filter hands over `setsockopt(SOL_SOCKET, SO_REUSEADDR | SO_REUSEPORT)`.
//! The value is read once and the option set by the supervisor, on the
//! command's own socket (taken with `pidfd_getfd`: the same socket), so
//! a descriptor swapped under the number after the check gains nothing.
//! Turning either off, and `SO_REUSEADDR` on a stream socket (every TCP
//! server sets it; a TCP port being listened on cannot be bound again), is
//! performed; turning on `SO_REUSEPORT` on an inet socket, or `SO_REUSEADDR`
//! on an inet datagram one, is refused (`EPERM`) and recorded. Unix
//! sockets are not judged here: the options mean nothing to them.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;

use super::{Reply, Task};
use crate::sys::supervisor_calls;
use lockrun_seccomp::deny_list::Widens;

/// Answer a notified `setsockopt(fd, SOL_SOCKET, SO_REUSEADDR | SO_REUSEPORT, optval, optlen)`.
#[must_use]
pub fn handle(task: &Task<'_>) -> Reply {
    let [fd, _, optname, optval, optlen, _] = task.args();
    let optname = optname as i32;
    // The kernel wants an int at least (`sk_setsockopt`).
    if (optlen & 0xffff_ffff) < 4 {
        return Reply::Errno(libc::EINVAL);
    }
    let value = match task.read(optval, 4) {
        Ok(b) => i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        Err(e) => return Reply::Errno(e),
    };
    let sock = match task.getfd(fd as i32) {
        Ok(s) => s,
        Err(e) => return Reply::Errno(e),
    };
    if !task.valid() {
        return Reply::Gone;
    }
    let kind = |opt| supervisor_calls::sockopt_int(sock.as_fd(), opt);
    let (domain, sock_type) = match (kind(libc::SO_DOMAIN), kind(libc::SO_TYPE)) {
        (Ok(d), Ok(t)) => (d, t),
        (Err(e), _) | (_, Err(e)) => {
            return Reply::Errno(e.raw_os_error().unwrap_or(libc::ENOTSOCK))
        }
    };
    if let Some(call) = shares_a_port(domain, sock_type, optname, value) {
        return super::refuse_call(task, call, Widens::SharedPort);
    }
    let Ok(_unprivileged) = supervisor_calls::EffectiveCapsDropped::new() else {
        return Reply::Errno(libc::EPERM);
    };
    match supervisor_calls::set_sockopt_int(sock.as_fd(), optname, value) {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Errno(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// The refused call, described, when setting `optname` to `value` on a
/// socket of this domain and type would let it share a port held outside.
fn shares_a_port(domain: i32, sock_type: i32, optname: i32, value: i32) -> Option<String> {
    let inet = domain == libc::AF_INET || domain == libc::AF_INET6;
    if !inet || value == 0 {
        return None;
    }
    let kind = match sock_type {
        libc::SOCK_STREAM => "stream",
        libc::SOCK_DGRAM => "datagram",
        _ => "other",
    };
    match optname {
        libc::SO_REUSEPORT => Some(format!("setsockopt SO_REUSEPORT on an inet {kind} socket")),
        libc::SO_REUSEADDR if sock_type != libc::SOCK_STREAM => {
            Some(format!("setsockopt SO_REUSEADDR on an inet {kind} socket"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::shares_a_port;
    use libc::{AF_INET, AF_INET6, AF_UNIX, SOCK_DGRAM, SOCK_STREAM, SO_REUSEADDR, SO_REUSEPORT};

    #[test]
    fn only_turning_on_port_sharing_for_inet_is_refused() {
        assert_eq!(
            shares_a_port(AF_INET, SOCK_STREAM, SO_REUSEPORT, 1).as_deref(),
            Some("setsockopt SO_REUSEPORT on an inet stream socket")
        );
        assert_eq!(
            shares_a_port(AF_INET6, SOCK_DGRAM, SO_REUSEADDR, 7).as_deref(),
            Some("setsockopt SO_REUSEADDR on an inet datagram socket")
        );
        assert!(shares_a_port(AF_INET6, SOCK_DGRAM, SO_REUSEPORT, 1).is_some());
        // TCP servers set SO_REUSEADDR; off is always fine; unix sockets.
        assert_eq!(shares_a_port(AF_INET, SOCK_STREAM, SO_REUSEADDR, 1), None);
        assert_eq!(shares_a_port(AF_INET, SOCK_DGRAM, SO_REUSEPORT, 0), None);
        assert_eq!(shares_a_port(AF_UNIX, SOCK_DGRAM, SO_REUSEPORT, 1), None);
    }
}
