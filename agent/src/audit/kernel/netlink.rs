//! The kernel audit subsystem's netlink socket: its message and record
//! types, a request and its answer, and the audit status (read, and
//! enabled where it is off).

use std::os::fd::OwnedFd;

use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};

pub(in crate::audit) const AUDIT_GET: u16 = 1000;
pub(in crate::audit) const AUDIT_SET: u16 = 1001;
pub(in crate::audit) const AUDIT_USER: u16 = 1005;
pub(in crate::audit) const AUDIT_SYSCALL: u16 = 1300;
pub(in crate::audit) const AUDIT_PATH: u16 = 1302;
pub(in crate::audit) const AUDIT_SOCKADDR: u16 = 1306;
pub(in crate::audit) const AUDIT_CWD: u16 = 1307;
pub(in crate::audit) const AUDIT_OBJ_PID: u16 = 1318;
pub(in crate::audit) const AUDIT_EOE: u16 = 1320;
pub(in crate::audit) const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
pub(in crate::audit) const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
pub(in crate::audit) const AUDIT_NLGRP_READLOG: u32 = 1;
pub(in crate::audit) const AUDIT_STATUS_ENABLED: u32 = 1;
pub(in crate::audit) const NLMSG_ERROR: u16 = 2;
pub(in crate::audit) const NLM_F_REQUEST: u16 = 1;
pub(in crate::audit) const NLM_F_ACK: u16 = 4;
pub(in crate::audit) const NLMSG_HDRLEN: usize = 16;

/// Why the kernel's filesystem refusals cannot be collected.
#[derive(Debug, thiserror::Error)]
pub enum KernelAuditError {
    #[error("{call} on the audit netlink socket failed: {source}")]
    Syscall {
        call: &'static str,
        source: nix::Error,
    },
    #[error("the kernel refused {what}: errno {errno}")]
    Refused { what: &'static str, errno: i32 },
    #[error("no answer from the kernel audit subsystem")]
    NoAnswer,
}

pub(super) fn sys(call: &'static str) -> impl FnOnce(nix::Error) -> KernelAuditError {
    move |source| KernelAuditError::Syscall { call, source }
}

/// What the kernel's audit status was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditStatus {
    /// 0 off, 1 on, 2 on and locked.
    pub enabled: u32,
    /// pid of the audit daemon, 0 if none.
    pub daemon_pid: u32,
    /// Records per second past which the kernel drops them; 0: no limit.
    pub rate_limit: u32,
    /// Records the kernel keeps waiting for its reader before it drops
    /// new ones (those of calls that cannot wait, as Landlock's); 0: no limit.
    pub backlog_limit: u32,
    /// Records the kernel has dropped since boot, machine-wide (wraps).
    pub lost: u32,
}

pub(in crate::audit) fn nl_socket(groups: u32) -> Result<OwnedFd, KernelAuditError> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkAudit,
    )
    .map_err(sys("socket(AF_NETLINK, NETLINK_AUDIT)"))?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &NetlinkAddr::new(0, groups),
    )
    .map_err(sys("bind"))?;
    Ok(fd)
}

pub(in crate::audit) fn nl_message(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + payload.len();
    let mut m = Vec::with_capacity(len.next_multiple_of(4));
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(payload);
    m.resize(len.next_multiple_of(4), 0);
    m
}

/// Netlink messages in one datagram: (type, payload).
pub(super) fn nl_split(buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let len = u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]) as usize;
        let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        // The audit subsystem's multicast messages carry a length that may not
        // include the header; take what the datagram has.
        let end = if len >= NLMSG_HDRLEN && off + len <= buf.len() {
            off + len
        } else {
            buf.len()
        };
        out.push((ty, &buf[off + NLMSG_HDRLEN..end]));
        if end == buf.len() {
            break;
        }
        off = end.next_multiple_of(4);
    }
    out
}

/// Send one request. The kernel handles it in this call: an `AUDIT_GET`'s
/// figures are those of this moment, whenever its answer is read.
pub(super) fn ask(fd: &OwnedFd, ty: u16, payload: &[u8]) -> Result<(), KernelAuditError> {
    setsockopt(
        fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(1, 0),
    )
    .map_err(sys("setsockopt(SO_RCVTIMEO)"))?;
    send(
        std::os::fd::AsRawFd::as_raw_fd(fd),
        &nl_message(ty, NLM_F_REQUEST | NLM_F_ACK, 1, payload),
        MsgFlags::empty(),
    )
    .map(drop)
    .map_err(sys("send"))
}

/// The kernel's answer to what [`ask`] sent.
pub(super) fn answer(fd: &OwnedFd, ty: u16) -> Result<Vec<u8>, KernelAuditError> {
    let raw = std::os::fd::AsRawFd::as_raw_fd(fd);
    let mut buf = vec![0u8; 8192];
    for _ in 0..4 {
        let n = recv(raw, &mut buf, MsgFlags::empty()).map_err(sys("recv"))?;
        for (t, p) in nl_split(&buf[..n]) {
            if t == NLMSG_ERROR && p.len() >= 4 {
                let errno = i32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
                if errno != 0 {
                    return Err(KernelAuditError::Refused {
                        what: if ty == AUDIT_SET {
                            "AUDIT_SET"
                        } else {
                            "AUDIT_GET"
                        },
                        errno: -errno,
                    });
                }
                if ty != AUDIT_GET {
                    return Ok(Vec::new());
                }
            } else if t == ty {
                return Ok(p.to_vec());
            }
        }
    }
    Err(KernelAuditError::NoAnswer)
}

pub(super) fn request(fd: &OwnedFd, ty: u16, payload: &[u8]) -> Result<Vec<u8>, KernelAuditError> {
    ask(fd, ty, payload)?;
    answer(fd, ty)
}

/// The kernel's `struct audit_status`, as `AUDIT_GET` answers it.
pub(super) fn parse_status(p: &[u8]) -> AuditStatus {
    let word = |i: usize| {
        p.get(i * 4..i * 4 + 4)
            .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    AuditStatus {
        enabled: word(1),
        daemon_pid: word(3),
        rate_limit: word(4),
        backlog_limit: word(5),
        lost: word(6),
    }
}

/// Read the kernel's audit status (`AUDIT_GET`).
pub fn status() -> Result<AuditStatus, KernelAuditError> {
    let fd = nl_socket(0)?;
    request(&fd, AUDIT_GET, &[]).map(|p| parse_status(&p))
}

/// Turn kernel audit on (`AUDIT_SET enabled=1`).
pub fn enable() -> Result<(), KernelAuditError> {
    let fd = nl_socket(0)?;
    let mut st = [0u8; 40];
    st[0..4].copy_from_slice(&AUDIT_STATUS_ENABLED.to_ne_bytes());
    st[4..8].copy_from_slice(&1u32.to_ne_bytes());
    request(&fd, AUDIT_SET, &st).map(drop)
}
