//! lockrun's kernel side: cgroup `sock_addr` hooks that let a run reach only
//! the endpoints in `ALLOWED_ENDPOINTS` (see `lockrun-common` for every map's
//! layout). Verified once per lockrun build, pinned, and attached once to the
//! build's parent cgroup, under which every run's cgroup v2 is created, by
//! `lockrun::bpf`; a program finds its run by the cgroup id of the calling
//! task, and refuses everything to a task of no known run.
//!
//! | hook | kernel | fires on |
//! |---|---|---|
//! | `cgroup/connect4`, `cgroup/connect6` | 4.17 | `connect(2)` (TCP, UDP, ICMP ping, TFO, io_uring) |
//! | `cgroup/sendmsg4`, `cgroup/sendmsg6` | 4.18 | `sendto`/`sendmsg` with an address on an unconnected UDP socket |
//! | `cgroup/recvmsg4`, `cgroup/recvmsg6` | 5.2 | `recvfrom`/`recvmsg` on a UDP socket: the source address the caller is shown |
//! | `cgroup/getpeername4`, `cgroup/getpeername6` | 5.8 | `getpeername(2)`: the peer the caller is shown |
//! | `sockops` (`BPF_SOCK_OPS_TCP_CONNECT_CB`) | 4.13 | a TCP socket about to send its SYN, its local port chosen |
//! | `raw_tp/sys_exit` ([`read_only`], x86_64; not a cgroup hook: every task's) | 5.8 (ring buffer reserve) | a call of a run's task refused by a read-only mount (`EROFS`): recorded, never judged |
//!
//! # Redirection (a run whose `RunConfig` carries redirect ports)
//! The connect hooks bring a TCP connect to the fake range `198.18.0.0/15`
//! to the run's transparent listener, and a TCP connect or a UDP connect or
//! datagram to port 53 to its resolver (both `127.0.0.1`; IPv4 destinations,
//! or v4-mapped from an IPv6 socket), after `ALLOWED_ENDPOINTS` and before
//! refusing; `sendmsg` the UDP ones. Where each was meant to go is kept by
//! the socket's cookie (`bpf_get_socket_cookie`, in `sock_addr` and
//! `sock_ops` programs since before 5.2) in `ORIGINALS`; `recvmsg` shows a
//! datagram from the resolver as from that server, `getpeername` the
//! original peer; `sock_ops` records a transparent connection's client side
//! in `TRANSPARENT` for the proxy, which takes it on accept and checks its
//! cgroup id. A run without redirect ports is judged exactly as before.
//!
//! Why not socket-local storage (`BPF_MAP_TYPE_SK_STORAGE`, freed with the
//! socket): the kernel creates such a map only with BTF for its key and
//! value (`bpf_local_storage_map_alloc_check`), and this loader loads raw,
//! without BTF. A cookie is never reused while the system runs, so an
//! `ORIGINALS` entry that outlives its socket is inert until the LRU map
//! pushes it out. The LRU maps are shared by all runs: a run that makes
//! tens of thousands of redirected sockets at once can push out another
//! run's entries (that run's client then sees the listener's address, its
//! DNS reply's source mismatches, its proxy refuses the connection): it
//! fails closed, never open.
//!
//! | `cgroup/sock_create` | 4.10 | every inet socket: only TCP, MPTCP and UDP ones are made |
//! | `cgroup_skb/ingress`, `cgroup_skb/egress` | 4.10 | every packet to or from a socket of a run: only loopback peers |
//! | `cgroup_skb/ingress` over loopback | 5.8 | a connection request or datagram from a loopback peer: only the run's own, its replies, or to a port it exposes (`EXPOSED_PORTS`) |
//!
//! Why `sock_create`: the address hooks above see every way out of a TCP,
//! MPTCP or UDP socket, and not of some other kinds, so a run may make only
//! those three. Measured on kernel 6.18:
//! - `sendto()` on an ICMP ping socket runs no cgroup sendmsg program
//!   (`ping_v4_sendmsg` has no hook), so an unconnected ping socket could send
//!   echo requests anywhere (`tests/net.rs::icmp_ping_socket_is_refused`);
//! - `connect()` on a UDP-Lite socket runs no connect program, and `send()`
//!   on it then reached an unlisted loopback port
//!   (`tests/net.rs::udp_lite_and_other_socket_kinds_are_refused`).
//!
//! SCTP, DCCP, L2TP/IP and whatever a future kernel adds are refused the same
//! way, unexamined: an allow list, not a list of known holes.
//!
//! Why the packet programs: the address hooks judge only what a task
//! *names* (`connect`, `sendto`). A socket that listens (on `0.0.0.0`, or on
//! the host's own address) names nobody: an outside host connected to it,
//! and the command answered it on the accepted connection, which no address
//! hook sees. Every peer a run may have is on loopback (its proxy, and the
//! policy's `local` endpoints, which must be loopback), so a packet of a
//! run's socket from or to any other address is dropped: the SYN of such a
//! connection never reaches the listener, and no datagram from outside is
//! delivered. Measured by `tests/proxy_e2e.rs::a_listener_inside_takes_nothing_from_outside`
//! (and, for the flood cap below, `a_flood_from_outside_is_counted_whole_and_leaves_the_runs_own_refusals_itemized`).
//! `egress` alone, with `ingress` left out, drops the listener's SYN-ACK:
//! `egress_alone_keeps_an_outside_host_from_connecting_to_a_listener_inside`.
//!
//! Loopback is not the run's alone: every process of the host is a
//! loopback peer. So over loopback `ingress` judges what could open a way
//! in ([`loopback_admits`]): a TCP connection request (SYN without ACK)
//! passes only from a socket of the same run, found by the packet's tuple
//! reversed (`bpf_sk_lookup_tcp`, the connecting socket in `SYN_SENT`) and
//! compared by cgroup (`bpf_sk_cgroup_id`), or to a port the policy
//! exposes; a datagram only from a socket of the same run
//! (`bpf_sk_lookup_udp`), from an endpoint the run may reach (the replies
//! of its proxy and `local` endpoints), or to an exposed port. Every later
//! TCP packet passes: its connection was judged by its SYN, or made by the
//! run. Those helpers and `bpf_sk_cgroup_id` are in `cgroup_skb` programs
//! since Linux 5.8. Measured by
//! `tests/proxy_e2e.rs::nothing_outside_the_run_connects_in_over_loopback_unless_exposed`.
//!
//! A program returning 0 makes the syscall fail with `EPERM` (a packet
//! program: the packet is dropped); 1 lets it pass.
//! Every refusal writes a `Denial` to the run's ring buffer (`RUNS`, `RINGS`)
//! and bumps its hook's slot in the run's `COUNTERS` entry; a full ring buffer
//! bumps `COUNTER_LOST` instead, so no refusal of a run goes uncounted.
//! Packets from outside are itemized only up to `INBOUND_RECORDS_PER_CPU`
//! per CPU; the rest are counted in `COUNTER_INBOUND_UNITEMIZED`.
#![no_std]
// `atomic_xadd`: see `bump`. The build sets RUSTC_BOOTSTRAP already (for
// `-Z build-std=core`).
#![allow(internal_features)]
#![feature(core_intrinsics)]
#![no_main]

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    bindings::{
        bpf_map_def, bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS, bpf_sock_tuple, BPF_F_NO_PREALLOC,
    },
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_map_lookup_elem, bpf_ringbuf_output, bpf_sk_cgroup_id, bpf_sk_lookup_tcp,
        bpf_sk_lookup_udp, bpf_sk_release, bpf_skb_cgroup_id, bpf_skb_load_bytes,
    },
    macros::{cgroup_skb, cgroup_sock, cgroup_sock_addr, map},
    maps::{HashMap, PerCpuHashMap},
    programs::{SkBuffContext, SockAddrContext, SockContext},
};
use lockrun_common::{
    Denial, Endpoint, Hook, RunConfig, RunCounters, RunEndpoint, RunPort, AF_INET, AF_INET6,
    COUNTER_INBOUND_UNITEMIZED, COUNTER_LOST, COUNTER_SLOTS, INBOUND_RECORDS_PER_CPU,
    MAX_ALLOWED_ENDPOINTS_ALL_RUNS, MAX_EXPOSED_PORTS_ALL_RUNS, MAX_RING_SLOTS, MAX_RUNS,
    UNIX_PATH_MAX,
};

mod read_only;
mod redirect;
use redirect::redirect;

const ALLOW: i32 = 1;
const DENY: i32 = 0;

#[map]
static ALLOWED_ENDPOINTS: HashMap<RunEndpoint, u8> =
    HashMap::with_max_entries(MAX_ALLOWED_ENDPOINTS_ALL_RUNS, BPF_F_NO_PREALLOC);

#[map]
static COUNTERS: PerCpuHashMap<u64, RunCounters> = PerCpuHashMap::with_max_entries(MAX_RUNS, 0);

/// The ports each run exposes to this host's processes over loopback.
#[map]
static EXPOSED_PORTS: HashMap<RunPort, u8> =
    HashMap::with_max_entries(MAX_EXPOSED_PORTS_ALL_RUNS, BPF_F_NO_PREALLOC);

/// The run's configuration (its ring-buffer slot in `RINGS`), by the run's cgroup id.
#[map]
static RUNS: HashMap<u64, RunConfig> = HashMap::with_max_entries(MAX_RUNS, 0);

/// A legacy map definition aya-ebpf has no type for: `BPF_MAP_TYPE_ARRAY_OF_MAPS`
/// from a slot to a ring buffer. The rings stay in their slots from run to
/// run (a map-of-maps update waits for an RCU grace period, milliseconds);
/// a run claims a free slot instead.
#[repr(transparent)]
struct MapOfRings(UnsafeCell<bpf_map_def>);

// SAFETY: the definition is only read by the loader; the program passes its
// address to helpers and never touches the fields.
unsafe impl Sync for MapOfRings {}

#[unsafe(link_section = "maps")]
#[unsafe(export_name = "RINGS")]
static RINGS: MapOfRings = MapOfRings(UnsafeCell::new(bpf_map_def {
    type_: BPF_MAP_TYPE_ARRAY_OF_MAPS,
    key_size: 4,
    value_size: 4,
    max_entries: MAX_RING_SLOTS,
    map_flags: 0,
    id: 0,
    pinning: 0,
}));

#[cgroup_sock_addr(connect4)]
pub fn connect4(ctx: SockAddrContext) -> i32 {
    judge_v4(&ctx, Hook::Connect4)
}

#[cgroup_sock_addr(sendmsg4)]
pub fn sendmsg4(ctx: SockAddrContext) -> i32 {
    judge_v4(&ctx, Hook::Sendmsg4)
}

#[cgroup_sock_addr(connect6)]
pub fn connect6(ctx: SockAddrContext) -> i32 {
    judge_v6(&ctx, Hook::Connect6)
}

#[cgroup_sock_addr(sendmsg6)]
pub fn sendmsg6(ctx: SockAddrContext) -> i32 {
    judge_v6(&ctx, Hook::Sendmsg6)
}

/// A socket's type and protocol as `sock_create` sees them (`u32` fields).
mod kind {
    pub const STREAM: u32 = 1;
    pub const DGRAM: u32 = 2;
    pub const TCP: u32 = 6;
    pub const UDP: u32 = 17;
    pub const MPTCP: u32 = 262;
}

#[cgroup_sock(sock_create)]
pub fn sock_create(ctx: SockContext) -> i32 {
    // SAFETY: plain context loads the verifier checks.
    let (family, sock_type, protocol) = unsafe {
        let sk = &*ctx.sock;
        (sk.family, sk.type_, sk.protocol)
    };
    // `protocol` is the one the kernel chose: `socket(AF_INET, SOCK_STREAM, 0)`
    // arrives here as IPPROTO_TCP.
    let allowed = matches!(
        (sock_type, protocol),
        (kind::STREAM, kind::TCP | kind::MPTCP) | (kind::DGRAM, kind::UDP)
    );
    if allowed {
        return ALLOW;
    }
    let family = if family == u32::from(AF_INET6) {
        AF_INET6
    } else {
        AF_INET
    };
    refuse(Hook::SockCreate, family, sock_type, protocol, 0, [0; 16]);
    DENY
}

#[inline(always)]
fn port_of(ctx: &SockAddrContext) -> u16 {
    // SAFETY: ctx.sock_addr is the kernel-provided context; the verifier checks the access.
    // `user_port` holds the port in network byte order in its low 16 bits.
    let raw = unsafe { (*ctx.sock_addr).user_port };
    u16::from_be(raw as u16)
}

#[inline(always)]
fn judge_v4(ctx: &SockAddrContext, hook: Hook) -> i32 {
    // SAFETY: a 4-byte context load the verifier allows for this attach type.
    let ip = unsafe { (*ctx.sock_addr).user_ip4 };
    let ep = Endpoint::v4(ip.to_ne_bytes(), port_of(ctx));
    judge(ctx, hook, &ep, ep.addr)
}

#[inline(always)]
fn judge_v6(ctx: &SockAddrContext, hook: Hook) -> i32 {
    let mut addr = [0u8; 16];
    let mut i = 0;
    while i < 4 {
        // SAFETY: user_ip6 must be read in 4-byte words; the verifier checks each load.
        let w = unsafe { (*ctx.sock_addr).user_ip6[i] }.to_ne_bytes();
        addr[i * 4] = w[0];
        addr[i * 4 + 1] = w[1];
        addr[i * 4 + 2] = w[2];
        addr[i * 4 + 3] = w[3];
        i += 1;
    }
    // Endpoint::v6 keys ::ffff:a.b.c.d as a.b.c.d: a mapped address is judged as the IPv4 it carries.
    let ep = Endpoint::v6(addr, port_of(ctx));
    judge(ctx, hook, &ep, addr)
}

#[inline(always)]
fn judge(ctx: &SockAddrContext, hook: Hook, ep: &Endpoint, raw_addr: [u8; 16]) -> i32 {
    // SAFETY: helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let key = RunEndpoint {
        cgroup_id,
        endpoint: *ep,
        _pad: 0,
    };
    // SAFETY: a read-only lookup; the value is not dereferenced.
    if unsafe { ALLOWED_ENDPOINTS.get(&key) }.is_some() {
        return ALLOW;
    }
    // SAFETY: plain context loads.
    let (family, sock_type, protocol) = unsafe {
        let sa = &*ctx.sock_addr;
        (sa.user_family, sa.type_, sa.protocol)
    };
    if redirect(ctx, hook, cgroup_id, ep, raw_addr, (sock_type, protocol)) {
        return ALLOW;
    }
    let family = if family == u32::from(AF_INET6) {
        AF_INET6
    } else {
        AF_INET
    };
    refuse(hook, family, sock_type, protocol, ep.port, raw_addr);
    DENY
}

#[inline(always)]
fn bump(cgroup_id: u64, slot: u32) {
    if let Some(p) = COUNTERS.get_ptr_mut(&cgroup_id) {
        // An atomic add, though the entry is this CPU's own: a program runs
        // with migration disabled, not bottom halves or preemption, so
        // `ingress` (and `egress` sending an ACK) in a softirq can interrupt
        // `connect4` or `egress` in a task on this CPU, and under a
        // preemptible kernel another task's program can too; both may bump
        // `COUNTER_LOST` or the same hook's slot, and a plain `+= 1` would
        // lose one. The result is unused, so this is `BPF_XADD`, which every
        // kernel with these hooks verifies. (The stable `AtomicU64::fetch_add`
        // needs compare-and-swap, which the target does not claim.)
        //
        // SAFETY: the run's per-CPU entry, a live map value, 8-aligned
        // (`RunCounters` is `[u64; COUNTER_SLOTS]`); `slot` < COUNTER_SLOTS
        // (a Hook or a COUNTER_ slot), masked for the verifier.
        unsafe {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                core::ptr::addr_of_mut!((*p).slots[(slot & (COUNTER_SLOTS - 1)) as usize]),
                1,
            );
        }
    }
}

#[inline(always)]
fn refuse(hook: Hook, family: u16, sock_type: u32, protocol: u32, port: u16, addr: [u8; 16]) {
    // SAFETY: helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let pid_tgid = bpf_get_current_pid_tgid();
    let mut denial = Denial {
        cgroup_id,
        pid: pid_tgid as u32,
        tgid: (pid_tgid >> 32) as u32,
        hook: hook as u32,
        sock_type,
        protocol,
        family,
        port,
        addr,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        path: [0; UNIX_PATH_MAX],
        local_port: 0,
        _pad: [0; 2],
    };
    record(&mut denial);
}

/// Count `denial` in its run's counters and write it to the run's ring
/// buffer (or count it lost).
#[inline(always)]
fn record(denial: &mut Denial) {
    let cgroup_id = denial.cgroup_id;
    bump(cgroup_id, denial.hook);
    // SAFETY: a read-only lookup; the slot is copied out.
    let Some(slot) = (unsafe { RUNS.get(&cgroup_id) }).map(|c| c.slot) else {
        bump(cgroup_id, COUNTER_LOST);
        return;
    };
    // SAFETY: the outer map's address and a key on the stack; the result is
    // the slot's ring buffer (a map pointer, only passed to a helper) or null.
    let ring =
        unsafe { bpf_map_lookup_elem(RINGS.0.get().cast(), core::ptr::from_ref(&slot).cast()) };
    if ring.is_null() {
        bump(cgroup_id, COUNTER_LOST);
        return;
    }
    // SAFETY: `ring` is a ring buffer map from RINGS; the record is on
    // the stack and its size is the size passed.
    let written = unsafe {
        bpf_ringbuf_output(
            ring,
            core::ptr::from_mut(denial).cast::<c_void>(),
            core::mem::size_of::<Denial>() as u64,
            0,
        )
    };
    if written != 0 {
        bump(cgroup_id, COUNTER_LOST);
    }
}

/// Whether an inbound drop gets a record of its own: only the first
/// [`INBOUND_RECORDS_PER_CPU`] on this CPU do (the hook's per-CPU count so
/// far). Past them a flood from outside is only counted, so it can neither
/// fill the run's ring buffer, and lose the run's own refusals with it, nor
/// grow its audit log by a line per packet.
#[inline(always)]
fn itemize_inbound(cgroup_id: u64) -> bool {
    // SAFETY: a read of this CPU's entry; a count, copied out.
    match unsafe { COUNTERS.get(&cgroup_id) } {
        Some(c) => c.slots[Hook::Ingress as usize] < INBOUND_RECORDS_PER_CPU,
        None => true,
    }
}

/// `N` bytes of the packet at `offset` (from the network header) into `buf`;
/// false if the packet is shorter.
#[inline(always)]
fn load<const N: usize>(ctx: &SkBuffContext, offset: u32, buf: &mut [u8; N]) -> bool {
    // SAFETY: the program's own context; `buf` is `N` writable bytes on the
    // stack, and `N` is a constant the verifier checks against it.
    unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb.cast_const().cast(),
            offset,
            buf.as_mut_ptr().cast::<c_void>(),
            N as u32,
        ) == 0
    }
}

/// `len` (at most 16) bytes of the packet at `offset` into the start of `buf`;
/// false if the packet is shorter.
#[inline(always)]
fn load_into(ctx: &SkBuffContext, offset: u32, buf: &mut [u8; 16], len: u32) -> bool {
    // SAFETY: the program's own context; `buf` is 16 writable bytes on the
    // stack and `len` is at most 16 (masked for the verifier).
    unsafe {
        bpf_skb_load_bytes(
            ctx.skb.skb.cast_const().cast(),
            offset,
            buf.as_mut_ptr().cast::<c_void>(),
            (len & 0x1f).min(16),
        ) == 0
    }
}

/// `ETH_P_IP` and `ETH_P_IPV6` as `__sk_buff.protocol` holds them (network order).
const ETH_P_IP_BE: u32 = 0x0800_u16.to_be() as u32;
const ETH_P_IPV6_BE: u32 = 0x86DD_u16.to_be() as u32;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// `::1`.
const IN6_LOOPBACK: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// What the TCP header says.
mod tcp {
    /// Offset of the flags byte in the TCP header.
    pub const FLAGS_AT: u32 = 13;
    pub const SYN: u8 = 0x02;
    pub const ACK: u8 = 0x10;
    /// `TCP_SYN_SENT`, as `bpf_sock.state` holds it.
    pub const STATE_SYN_SENT: u32 = 2;
}

/// The IPv6 extension headers skipped to reach the transport header, at
/// most: hop-by-hop (0), routing (43) and destination options (60), each
/// `(length + 1) * 8` bytes. A routing header needs no privilege
/// (`IPV6_RTHDR`), so a header past them is not taken for the transport.
const MAX_IPV6_EXTENSIONS: u32 = 4;

/// The transport protocol of an IPv6 packet whose fixed header names `next`,
/// and where its header starts; `(next, _)` is the header it stopped at when
/// that is not TCP or UDP (an unreadable chain, a fragment, too many).
#[inline(always)]
fn ipv6_transport(ctx: &SkBuffContext, mut next: u8) -> (u8, u32) {
    let mut at = 40u32;
    let mut i = 0;
    while i < MAX_IPV6_EXTENSIONS {
        if !matches!(next, 0 | 43 | 60) {
            break;
        }
        let mut e = [0u8; 2];
        if !load(ctx, at, &mut e) {
            return (0xff, 0);
        }
        next = e[0];
        at += (u32::from(e[1]) + 1) * 8;
        i += 1;
    }
    (next, at)
}

/// A packet of a run's socket, as `judge_packet` read it: the peer's
/// address and port, the run's own, addresses as in [`Denial`].
struct Packet {
    family: u16,
    ip_proto: u8,
    tcp_flags: u8,
    peer: [u8; 16],
    own: [u8; 16],
    peer_port: u16,
    own_port: u16,
}

/// Whether a run takes this packet from a loopback peer: nothing outside
/// the run may reach it, loopback included, but what the run itself asked
/// for and what its policy exposes.
/// - TCP: only a connection request (a SYN without ACK) is judged here
///   (`judge_packet` passes the rest over loopback): every later packet
///   belongs to a connection that was (its SYN), or that the run made
///   itself (the connect hooks judged it), and a SYN-ACK answers the run's
///   own connect. A request passes to a port the run exposes
///   (`EXPOSED_PORTS`), or from a socket of the same run: the connecting
///   socket, found by the packet's tuple reversed (`bpf_sk_lookup_tcp`),
///   must be in `SYN_SENT` (not a listener found in its place) and in the
///   run's cgroup (`bpf_sk_cgroup_id`).
/// - UDP: a datagram passes to an exposed port, from an endpoint the run
///   may reach (`ALLOWED_ENDPOINTS`: replies of its proxy and its `local`
///   endpoints), or from a socket of the same run (`bpf_sk_lookup_udp`:
///   the socket bound where the datagram came from; a run cannot share a
///   port with a socket outside it, the seccomp supervisor refuses
///   `SO_REUSEPORT` and a datagram socket's `SO_REUSEADDR`).
/// - Anything else (an IPv6 header chain not ending in TCP or UDP) is dropped.
///
/// A function of its own (a BPF-to-BPF call, Linux 4.16), not inlined, as
/// is [`refuse_packet`]: with both inlined into `judge_packet`, LLVM said
/// "Looks like the BPF stack limit is exceeded. Please move large on stack
/// variables into BPF per-cpu array map."; with only this one apart, the
/// verifier "combined stack size of 2 calls is 736. Too large" (the record
/// and the tuple each in a frame of the chain). Apart, each is a frame of
/// its own beside `judge_packet`'s small one.
#[inline(never)]
fn loopback_admits(ctx: &SkBuffContext, cgroup_id: u64, p: &Packet) -> bool {
    let tcp = p.ip_proto == IPPROTO_TCP;
    if !tcp && p.ip_proto != IPPROTO_UDP {
        return false;
    }
    let exposed = RunPort::new(cgroup_id, p.own_port);
    // SAFETY: a read-only lookup; the value is not dereferenced.
    if unsafe { EXPOSED_PORTS.get(&exposed) }.is_some() {
        return true;
    }
    if !tcp {
        let endpoint = if p.family == AF_INET {
            Endpoint::v4([p.peer[0], p.peer[1], p.peer[2], p.peer[3]], p.peer_port)
        } else {
            Endpoint::v6(p.peer, p.peer_port)
        };
        let key = RunEndpoint {
            cgroup_id,
            endpoint,
            _pad: 0,
        };
        // SAFETY: a read-only lookup; the value is not dereferenced.
        if unsafe { ALLOWED_ENDPOINTS.get(&key) }.is_some() {
            return true;
        }
    }
    peer_socket_in_run(ctx, cgroup_id, p)
}

/// A `struct bpf_sock_tuple` (its IPv6 form, the larger), 4-aligned.
#[repr(C, align(4))]
struct SockTuple([u8; 36]);

/// Whether the socket that sent `p` is one of the run in `cgroup_id`: the
/// socket that would receive the packet's reply (the tuple reversed), in
/// this network namespace.
#[inline(always)]
fn peer_socket_in_run(ctx: &SkBuffContext, cgroup_id: u64, p: &Packet) -> bool {
    /// `BPF_F_CURRENT_NETNS`.
    const CURRENT_NETNS: u64 = u64::MAX;
    let mut t = SockTuple([0; 36]);
    let (own_port, peer_port) = (p.own_port.to_be_bytes(), p.peer_port.to_be_bytes());
    let size = if p.family == AF_INET {
        let mut i = 0;
        while i < 4 {
            t.0[i] = p.own[i];
            t.0[4 + i] = p.peer[i];
            i += 1;
        }
        t.0[8] = own_port[0];
        t.0[9] = own_port[1];
        t.0[10] = peer_port[0];
        t.0[11] = peer_port[1];
        12
    } else {
        let mut i = 0;
        while i < 16 {
            t.0[i] = p.own[i];
            t.0[16 + i] = p.peer[i];
            i += 1;
        }
        t.0[32] = own_port[0];
        t.0[33] = own_port[1];
        t.0[34] = peer_port[0];
        t.0[35] = peer_port[1];
        36
    };
    let ctx_ptr = ctx.skb.skb.cast::<c_void>();
    let tuple = core::ptr::from_mut(&mut t).cast::<bpf_sock_tuple>();
    // SAFETY: the program's own context, and a tuple on the stack of at
    // least `size` bytes, all of them written; the socket found, if any,
    // is a reference the verifier makes us release, on every path below.
    let sk = unsafe {
        if p.ip_proto == IPPROTO_TCP {
            bpf_sk_lookup_tcp(ctx_ptr, tuple, size, CURRENT_NETNS, 0)
        } else {
            bpf_sk_lookup_udp(ctx_ptr, tuple, size, CURRENT_NETNS, 0)
        }
    };
    if sk.is_null() {
        return false;
    }
    // SAFETY: `sk` is a socket the lookup returned (not null): its fields
    // may be read, it may be handed to the helper, and it is released
    // once, here, before it is judged.
    let (state, peer_cgroup) = unsafe {
        let state = (*sk).state;
        let cg = bpf_sk_cgroup_id(sk.cast());
        bpf_sk_release(sk.cast());
        (state, cg)
    };
    peer_cgroup == cgroup_id && (p.ip_proto != IPPROTO_TCP || state == tcp::STATE_SYN_SENT)
}

#[cgroup_skb(ingress)]
pub fn ingress(ctx: SkBuffContext) -> i32 {
    judge_packet(&ctx, Hook::Ingress)
}

#[cgroup_skb(egress)]
pub fn egress(ctx: SkBuffContext) -> i32 {
    judge_packet(&ctx, Hook::Egress)
}

/// A packet of a run's socket passes only if its peer — the source of what
/// comes in, the destination of what goes out — is a loopback address
/// (`127.0.0.0/8`, `::1`), and, coming in, if it is one the run may take
/// ([`loopback_admits`]). The kernel already drops a packet with a loopback
/// source that arrived on another device. Anything unreadable or not IP is
/// dropped. The data starts at the network header in both directions.
#[inline(always)]
fn judge_packet(ctx: &SkBuffContext, hook: Hook) -> i32 {
    let inbound = matches!(hook, Hook::Ingress);
    let protocol = ctx.skb.protocol();
    // The addresses are read straight into `p`, never through a copy of the
    // header: copied byte by byte, each byte took a stack slot of its own
    // in LLVM's output (the frame grew by 256 bytes, past the verifier's
    // limit for the chain of calls).
    let mut p = Packet {
        family: 0,
        ip_proto: 0,
        tcp_flags: tcp::SYN,
        peer: [0; 16],
        own: [0; 16],
        peer_port: 0,
        own_port: 0,
    };
    // Where the run's own address is (read only when it is judged).
    let (own_at, ports_at) = if protocol == ETH_P_IP_BE {
        let mut h = [0u8; 10];
        let (peer_at, own_at) = if inbound { (12, 16) } else { (16, 12) };
        if !load(ctx, 0, &mut h) || !load_into(ctx, peer_at, &mut p.peer, 4) {
            return DENY;
        }
        p.family = AF_INET;
        p.ip_proto = h[9];
        (own_at, u32::from(h[0] & 0x0f) * 4)
    } else if protocol == ETH_P_IPV6_BE {
        let mut h = [0u8; 8];
        let (peer_at, own_at) = if inbound { (8, 24) } else { (24, 8) };
        if !load(ctx, 0, &mut h) || !load_into(ctx, peer_at, &mut p.peer, 16) {
            return DENY;
        }
        let (next, at) = ipv6_transport(ctx, h[6]);
        p.family = AF_INET6;
        p.ip_proto = next;
        (own_at, at)
    } else {
        (0, 0)
    };
    let loopback = match p.family {
        AF_INET => p.peer[0] == 127,
        AF_INET6 => p.peer == IN6_LOOPBACK,
        _ => false,
    };
    if loopback && !inbound {
        return ALLOW;
    }
    // The TCP flags (a SYN unless read otherwise: judged, never waved
    // through); over loopback, only a connection request is judged.
    let mut f = [0u8; 1];
    if p.ip_proto == IPPROTO_TCP && load(ctx, ports_at + tcp::FLAGS_AT, &mut f) {
        p.tcp_flags = f[0];
    }
    if loopback && p.ip_proto == IPPROTO_TCP && p.tcp_flags & (tcp::SYN | tcp::ACK) != tcp::SYN {
        return ALLOW;
    }
    // The peer's port and the run's own, from TCP and UDP headers.
    if p.ip_proto == IPPROTO_TCP || p.ip_proto == IPPROTO_UDP {
        let mut ports = [0u8; 4];
        if load(ctx, ports_at, &mut ports) {
            let (src, dst) = (
                u16::from_be_bytes([ports[0], ports[1]]),
                u16::from_be_bytes([ports[2], ports[3]]),
            );
            (p.peer_port, p.own_port) = if inbound { (src, dst) } else { (dst, src) };
        }
    }
    // SAFETY: the helper takes the program's own context.
    let cgroup_id = unsafe { bpf_skb_cgroup_id(ctx.skb.skb) };
    if loopback {
        let len = if p.family == AF_INET { 4 } else { 16 };
        if load_into(ctx, own_at, &mut p.own, len) && loopback_admits(ctx, cgroup_id, &p) {
            return ALLOW;
        }
    }
    refuse_packet(cgroup_id, hook, &p);
    DENY
}

/// Count and record a packet `hook` dropped, for the run in `cgroup_id`:
/// an inbound one itemized only while [`itemize_inbound`] says so. Not
/// inlined: see [`loopback_admits`].
#[inline(never)]
fn refuse_packet(cgroup_id: u64, hook: Hook, p: &Packet) {
    let inbound = matches!(hook, Hook::Ingress);
    if inbound && !itemize_inbound(cgroup_id) {
        bump(cgroup_id, hook as u32);
        bump(cgroup_id, COUNTER_INBOUND_UNITEMIZED);
        return;
    }
    // No task to name: an inbound packet is judged in no task's context,
    // and an outbound one often in none of the run's (a retransmit).
    let mut denial = Denial {
        cgroup_id,
        pid: 0,
        tgid: 0,
        hook: hook as u32,
        sock_type: 0,
        protocol: u32::from(p.ip_proto),
        family: p.family,
        port: p.peer_port,
        addr: p.peer,
        comm: [0; 16],
        path: [0; UNIX_PATH_MAX],
        local_port: p.own_port,
        _pad: [0; 2],
    };
    record(&mut denial);
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "license")]
pub static LICENSE: [u8; 4] = *b"GPL\0";
