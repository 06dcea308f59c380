//! Redirection, for a run whose [`RunConfig`](lockrun_common::RunConfig)
//! carries redirect ports (see the crate's doc): the connect and sendmsg
//! hooks' rewrite, `recvmsg`, `getpeername` and `sock_ops`.

use aya_ebpf::{
    helpers::bpf_get_socket_cookie,
    macros::{cgroup_sock_addr, map, sock_ops},
    maps::LruHashMap,
    programs::{SockAddrContext, SockOpsContext},
};
use lockrun_common::{
    is_fake_v4, Endpoint, Hook, Original, Transparent, TransparentKey, AF_INET, AF_INET6, DNS_PORT,
    MAX_ORIGINALS, MAX_TRANSPARENT, REDIRECT_RESOLVER, REDIRECT_TRANSPARENT,
};

use crate::{kind, port_of, ALLOW, RUNS};

/// Where each redirected socket was meant to go, by its cookie
/// (`bpf_get_socket_cookie`, never reused while the system runs): written
/// by the connect and sendmsg hooks when they redirect, read by `recvmsg`,
/// `getpeername` and `sock_ops`. An LRU map: an entry outlives its socket
/// until it is pushed out, and is then inert (no other socket has its
/// cookie).
#[map]
static ORIGINALS: LruHashMap<u64, Original> = LruHashMap::with_max_entries(MAX_ORIGINALS, 0);

/// A transparent connection's client side → where it was meant to go and
/// its run (`sock_ops`); taken by the proxy on accept.
#[map]
static TRANSPARENT: LruHashMap<TransparentKey, Transparent> =
    LruHashMap::with_max_entries(MAX_TRANSPARENT, 0);

/// Whether `hook` is one of an IPv6 socket.
#[inline(always)]
fn is_v6(hook: Hook) -> bool {
    matches!(hook, Hook::Connect6 | Hook::Sendmsg6)
}

/// For a run whose [`RunConfig`](lockrun_common::RunConfig) carries
/// redirect ports: bring a TCP connect to the fake range (`198.18.0.0/15`)
/// to the run's transparent listener, and a TCP connect or UDP connect or datagram to port 53 to
/// its resolver, each to an IPv4 destination (or v4-mapped, from an IPv6
/// socket), keeping where it was meant to go in [`ORIGINALS`]. Whether it
/// did; nothing else is redirected (other UDP, an IP literal outside the
/// range, any IPv6 destination: refused as before). MPTCP connects through
/// its first subflow, a TCP socket (the hook sees `IPPROTO_TCP`), and is
/// redirected as TCP is: it ends at the listener, which speaks no MPTCP.
#[inline(always)]
pub(crate) fn redirect(
    ctx: &SockAddrContext,
    hook: Hook,
    cgroup_id: u64,
    ep: &Endpoint,
    raw_addr: [u8; 16],
    (sock_type, protocol): (u32, u32),
) -> bool {
    // SAFETY: a read-only lookup; the value is copied out.
    let Some(cfg) = (unsafe { RUNS.get(&cgroup_id) }).copied() else {
        return false;
    };
    if !cfg.redirects() {
        return false;
    }
    // IPv4, or v4-mapped on an IPv6 socket, only: an IPv6 destination
    // rewritten to a mapped address is refused by the kernel's UDP
    // (`ENOTSUPP`, "currently unsupported"), and there is no fake IPv6 range.
    if ep.family != AF_INET {
        return false;
    }
    let tcp = sock_type == kind::STREAM && protocol == kind::TCP;
    let udp = sock_type == kind::DGRAM && protocol == kind::UDP;
    let connect = matches!(hook, Hook::Connect4 | Hook::Connect6);
    let fake = is_fake_v4([ep.addr[0], ep.addr[1], ep.addr[2], ep.addr[3]]);
    let (kind, port) = if tcp && connect && fake {
        (REDIRECT_TRANSPARENT, cfg.transparent_port)
    } else if ((tcp && connect) || udp) && ep.port == DNS_PORT {
        (REDIRECT_RESOLVER, cfg.resolver_port)
    } else {
        return false;
    };
    let v6 = is_v6(hook);
    let original = Original {
        // An IPv6 socket's destination as it named it, to show it back.
        endpoint: if v6 {
            Endpoint {
                family: AF_INET6,
                port: ep.port,
                addr: raw_addr,
            }
        } else {
            *ep
        },
        kind,
        cgroup_id,
    };
    // SAFETY: the program's own context.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    if ORIGINALS.insert(&cookie, &original, 0).is_err() {
        // Not redirected without its original: refused.
        return false;
    }
    set_addr(ctx, v6, cfg.redirect_ip4, port);
    true
}

/// `::ffff:0.0.0.0`'s third word, as `user_ip6` holds it.
const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

/// Write `ip4:port` into the context's address (an IPv6 socket's as
/// `::ffff:ip4`).
#[inline(always)]
fn set_addr(ctx: &SockAddrContext, v6: bool, ip4: [u8; 4], port: u16) {
    // SAFETY: 4-byte stores to the fields the verifier lets these attach
    // types write (user_ip4 or user_ip6 word by word, user_port).
    unsafe {
        let sa = ctx.sock_addr;
        if v6 {
            (*sa).user_ip6[0] = 0;
            (*sa).user_ip6[1] = 0;
            (*sa).user_ip6[2] = V4_MAPPED_WORD;
            (*sa).user_ip6[3] = u32::from_ne_bytes(ip4);
        } else {
            (*sa).user_ip4 = u32::from_ne_bytes(ip4);
        }
        (*sa).user_port = u32::from(port.to_be());
    }
}

/// Whether the context's address is `ip4:port` (an IPv6 socket's as
/// `::ffff:ip4`).
#[inline(always)]
fn addr_is(ctx: &SockAddrContext, v6: bool, ip4: [u8; 4], port: u16) -> bool {
    if port_of(ctx) != port {
        return false;
    }
    // SAFETY: 4-byte context loads the verifier allows for these attach types.
    unsafe {
        let sa = ctx.sock_addr;
        if v6 {
            (*sa).user_ip6[0] == 0
                && (*sa).user_ip6[1] == 0
                && (*sa).user_ip6[2] == V4_MAPPED_WORD
                && (*sa).user_ip6[3] == u32::from_ne_bytes(ip4)
        } else {
            (*sa).user_ip4 == u32::from_ne_bytes(ip4)
        }
    }
}

/// For a redirected socket whose address in the context is where it was
/// redirected to (the peer `getpeername` shows, the source of a datagram
/// `recvmsg` delivers), show where it was meant to go instead; `datagrams`:
/// only a socket redirected to the resolver (`recvmsg`). Always lets the
/// call go on (these hooks cannot refuse).
#[inline(always)]
fn show_original(ctx: &SockAddrContext, v6: bool, datagrams: bool) -> i32 {
    // SAFETY: the program's own context.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // SAFETY: a read-only lookup; the value is copied out.
    let Some(original) = (unsafe { ORIGINALS.get(&cookie) }).copied() else {
        return ALLOW;
    };
    if datagrams && original.kind != REDIRECT_RESOLVER {
        return ALLOW;
    }
    // The run that redirected the socket, by its own cgroup id (the socket
    // may have been handed to another process since).
    // SAFETY: a read-only lookup; the value is copied out.
    let Some(cfg) = (unsafe { RUNS.get(&original.cgroup_id) }).copied() else {
        return ALLOW;
    };
    let port = if original.kind == REDIRECT_TRANSPARENT {
        cfg.transparent_port
    } else {
        cfg.resolver_port
    };
    if !cfg.redirects() || !addr_is(ctx, v6, cfg.redirect_ip4, port) {
        return ALLOW;
    }
    let e = original.endpoint;
    // As the socket's family shows it: an IPv4 original to an IPv6 socket
    // as `::ffff:a.b.c.d` (a v6 socket's datagram to a mapped address went
    // through `sendmsg4`), a v4-mapped one to an IPv4 socket as IPv4.
    let mut a = [0u8; 16];
    if e.family == AF_INET {
        a[10] = 0xff;
        a[11] = 0xff;
        a[12] = e.addr[0];
        a[13] = e.addr[1];
        a[14] = e.addr[2];
        a[15] = e.addr[3];
    } else {
        a = e.addr;
    }
    if !v6 && !lockrun_common::is_v4_mapped(&a) {
        return ALLOW;
    }
    // SAFETY: 4-byte stores to the fields these attach types may write.
    unsafe {
        let sa = ctx.sock_addr;
        if v6 {
            let mut i = 0;
            while i < 4 {
                (*sa).user_ip6[i] =
                    u32::from_ne_bytes([a[i * 4], a[i * 4 + 1], a[i * 4 + 2], a[i * 4 + 3]]);
                i += 1;
            }
        } else {
            (*sa).user_ip4 = u32::from_ne_bytes([a[12], a[13], a[14], a[15]]);
        }
        (*sa).user_port = u32::from(e.port.to_be());
    }
    ALLOW
}

#[cgroup_sock_addr(recvmsg4)]
pub fn recvmsg4(ctx: SockAddrContext) -> i32 {
    show_original(&ctx, false, true)
}

#[cgroup_sock_addr(recvmsg6)]
pub fn recvmsg6(ctx: SockAddrContext) -> i32 {
    show_original(&ctx, true, true)
}

#[cgroup_sock_addr(getpeername4)]
pub fn getpeername4(ctx: SockAddrContext) -> i32 {
    show_original(&ctx, false, false)
}

#[cgroup_sock_addr(getpeername6)]
pub fn getpeername6(ctx: SockAddrContext) -> i32 {
    show_original(&ctx, true, false)
}

/// `BPF_SOCK_OPS_TCP_CONNECT_CB`: a socket's SYN about to go, its local
/// address and port chosen.
const SOCK_OPS_TCP_CONNECT_CB: u32 = 3;

/// When a socket a connect hook redirected to a run's transparent listener
/// sends its SYN: record its client side (local address and port, the
/// listener's port) → where it was meant to go and its run, for the proxy
/// to take on accept ([`TRANSPARENT`]). Runs for every TCP socket under the
/// build's parent; changes nothing about the connection.
#[sock_ops]
pub fn sock_ops(ctx: SockOpsContext) -> u32 {
    if ctx.op() != SOCK_OPS_TCP_CONNECT_CB {
        return 1;
    }
    // SAFETY: the program's own context.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.ops.cast()) };
    // SAFETY: a read-only lookup; the value is copied out.
    let Some(original) = (unsafe { ORIGINALS.get(&cookie) }).copied() else {
        return 1;
    };
    if original.kind != REDIRECT_TRANSPARENT {
        return 1;
    }
    // SAFETY: a read-only lookup; the value is copied out.
    let Some(cfg) = (unsafe { RUNS.get(&original.cgroup_id) }).copied() else {
        return 1;
    };
    // `local_port` is in host order; the addresses in network order.
    let local_port = ctx.local_port() as u16;
    let client = if ctx.family() == u32::from(AF_INET6) {
        let w = ctx.local_ip6();
        let mut a = [0u8; 16];
        let mut i = 0;
        while i < 4 {
            let b = w[i].to_ne_bytes();
            a[i * 4] = b[0];
            a[i * 4 + 1] = b[1];
            a[i * 4 + 2] = b[2];
            a[i * 4 + 3] = b[3];
            i += 1;
        }
        Endpoint::v6(a, local_port)
    } else {
        Endpoint::v4(ctx.local_ip4().to_ne_bytes(), local_port)
    };
    let key = TransparentKey {
        client,
        listener_port: cfg.transparent_port,
        _pad: [0; 2],
    };
    let e = original.endpoint;
    let value = Transparent {
        original: if e.family == AF_INET6 {
            Endpoint::v6(e.addr, e.port)
        } else {
            e
        },
        _pad: 0,
        cgroup_id: original.cgroup_id,
    };
    // A full map pushes out its oldest entry; an error leaves the
    // connection without an entry, and the proxy refuses it.
    let _ = TRANSPARENT.insert(&key, &value, 0);
    1
}
