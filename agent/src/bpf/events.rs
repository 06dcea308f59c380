//! The run's refusals as the hooks record them: drained from its ring
//! buffer and decoded into audit events. A record's size tells what it is:
//! a [`Denial`], or a call a read-only mount refused
//! ([`lockrun_common::ReadOnlyRefusal`]).

use std::net::SocketAddr;
use std::sync::PoisonError;

use lockrun_common::{Denial, Hook, AF_INET6, AF_UNIX, UNIX_PATH_MAX};

use crate::audit::{
    AuditLog, Destination, Direction, Event, KernelNetEvent, ScopeEvent, ScopeTarget,
};

use super::hooks::Ring;

/// Deliver the run's records to `audit` (`None`: discard); a record of
/// another cgroup (a killed run that held the slot before) is dropped.
pub(super) fn drain(ring: &Ring, audit: Option<&AuditLog>, cgroup_id: u64) {
    let mut ring = ring.lock().unwrap_or_else(PoisonError::into_inner);
    while let Some(item) = ring.next() {
        if let (Some(audit), Some((cg, ev))) = (audit, decode_event(&item)) {
            if cg == cgroup_id {
                audit.record(ev);
            }
        }
    }
}

/// A ring-buffer record → its run's cgroup id and the audit event: a call
/// a read-only mount refused is a filesystem refusal
/// ([`super::read_only::decode`]); an abstract unix name a task of the run
/// named itself, refused where the supervisor judges them (no Landlock
/// scoping), is a scope refusal, as Landlock's would be; any other a
/// [`KernelNetEvent`].
#[must_use]
pub fn decode_event(bytes: &[u8]) -> Option<(u64, Event)> {
    if bytes.len() != std::mem::size_of::<Denial>() {
        return super::read_only::decode(bytes);
    }
    let d = bytemuck_read(bytes)?;
    if d.family == AF_UNIX && d.path[0] == 0 && d.path.iter().any(|b| *b != 0) {
        let end = d.path.iter().rposition(|b| *b != 0).map_or(1, |i| i + 1);
        let name = String::from_utf8_lossy(&d.path[1..end]).into_owned();
        let hook =
            Hook::from_u32(d.hook).map_or_else(|| d.hook.to_string(), |h| h.name().to_owned());
        let comm_end = d.comm.iter().position(|&b| b == 0).unwrap_or(d.comm.len());
        return Some((
            d.cgroup_id,
            Event::Scope(ScopeEvent {
                pid: d.tgid,
                comm: String::from_utf8_lossy(&d.comm[..comm_end]).into_owned(),
                raw: format!(
                    "lockrun's {hook} refused a connect or send to abstract unix socket @{name} \
                     named by a task of the run itself (no Landlock scoping here)"
                ),
                target: ScopeTarget::AbstractUnixSocket { name },
            }),
        ));
    }
    decode(bytes).map(|k| (k.cgroup_id, Event::KernelNetwork(k)))
}

/// A ring-buffer record → the audit event.
#[must_use]
pub fn decode(bytes: &[u8]) -> Option<KernelNetEvent> {
    if bytes.len() != std::mem::size_of::<Denial>() {
        return None;
    }
    // SAFETY-free copy: Denial is Pod; read it unaligned from the byte slice.
    let d: Denial = bytemuck_read(bytes)?;
    let hook = Hook::from_u32(d.hook).map_or_else(|| d.hook.to_string(), |h| h.name().to_owned());
    let comm_end = d.comm.iter().position(|&b| b == 0).unwrap_or(d.comm.len());
    let comm = String::from_utf8_lossy(&d.comm[..comm_end]).into_owned();
    let (family, destination) = match d.family {
        AF_UNIX => {
            let end = d.path.iter().position(|&b| b == 0).unwrap_or(d.path.len());
            (
                "unix",
                Destination::Unix(String::from_utf8_lossy(&d.path[..end]).into_owned()),
            )
        }
        AF_INET6 => (
            "inet6",
            Destination::Inet(SocketAddr::new(
                std::net::Ipv6Addr::from(d.addr).into(),
                d.port,
            )),
        ),
        _ => (
            "inet",
            Destination::Inet(SocketAddr::new(
                std::net::Ipv4Addr::new(d.addr[0], d.addr[1], d.addr[2], d.addr[3]).into(),
                d.port,
            )),
        ),
    };
    Some(KernelNetEvent {
        pid: d.pid,
        tgid: d.tgid,
        comm,
        cgroup_id: d.cgroup_id,
        hook,
        family: family.to_owned(),
        protocol: protocol_name(d.family, d.sock_type, d.protocol),
        destination,
        target_absent: false,
        direction: if d.hook == Hook::Ingress as u32 {
            Direction::Inbound
        } else {
            Direction::Outbound
        },
        local_port: d.local_port,
    })
}

pub(super) fn protocol_name(family: u16, sock_type: u32, protocol: u32) -> String {
    const IPPROTO_ICMP: u32 = 1;
    const IPPROTO_TCP: u32 = 6;
    const IPPROTO_UDP: u32 = 17;
    const IPPROTO_ICMPV6: u32 = 58;
    const IPPROTO_SCTP: u32 = 132;
    const IPPROTO_UDPLITE: u32 = 136;
    const IPPROTO_MPTCP: u32 = 262;
    const SOCK_RAW: u32 = 3;
    if family == AF_UNIX {
        return match sock_type {
            1 => "unix_stream".into(),
            2 => "unix_dgram".into(),
            5 => "unix_seqpacket".into(),
            t => format!("unix_type_{t}"),
        };
    }
    let name = match protocol {
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_UDP => "udp".into(),
        IPPROTO_ICMP | IPPROTO_ICMPV6 => "icmp".into(),
        IPPROTO_SCTP => "sctp".into(),
        IPPROTO_UDPLITE => "udplite".into(),
        IPPROTO_MPTCP => "mptcp".into(),
        p => p.to_string(),
    };
    if sock_type == SOCK_RAW {
        format!("raw {name}")
    } else {
        name
    }
}

/// Read a `Denial` from the start of `bytes` without alignment assumptions.
pub(super) fn bytemuck_read(bytes: &[u8]) -> Option<Denial> {
    let b = bytes.get(..std::mem::size_of::<Denial>())?;
    let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
    let mut addr = [0u8; 16];
    addr.copy_from_slice(&b[32..48]);
    let mut comm = [0u8; 16];
    comm.copy_from_slice(&b[48..64]);
    let mut path = [0u8; UNIX_PATH_MAX];
    path.copy_from_slice(&b[64..64 + UNIX_PATH_MAX]);
    let mut cg = [0u8; 8];
    cg.copy_from_slice(&b[0..8]);
    Some(Denial {
        cgroup_id: u64::from_ne_bytes(cg),
        pid: u32_at(8),
        tgid: u32_at(12),
        hook: u32_at(16),
        sock_type: u32_at(20),
        protocol: u32_at(24),
        family: u16_at(28),
        port: u16_at(30),
        addr,
        comm,
        path,
        local_port: u16_at(172),
        _pad: [0; 2],
    })
}
