//! Types shared by the kernel programs (`ebpf/programs`) and the loader in
//! `lockrun::bpf`. Every map's key and value layout is documented here; both
//! sides compile these same `#[repr(C)]` definitions.
//!
//! # Maps
//!
//! The nine programs (the object's `connect4/6`, `sendmsg4/6`, `sock_create`,
//! `ingress`, `egress` and the loader's hand-assembled `connect_unix`,
//! `sendmsg_unix`; on a kernel without the last two, its unix guard's
//! `guard_connect_unix`, `guard_send_unix` instead) are
//! verified **once** per lockrun build, pinned under
//! `/sys/fs/bpf/lockrun-programs/<object-hash>/` with the shared maps, and
//! attached once to the build's parent cgroup `<cgroup2>/lockrun/build-<object-hash>/`,
//! under which every run's cgroup is created. Beside them, the `sys_exit`
//! recorder of calls refused by a read-only mount ([`ReadOnlyRefusal`];
//! x86_64) is attached to that tracepoint, machine-wide, and judges only
//! tasks of the build's runs, by `RUNS`. They find the run's state by
//! the cgroup id of the task (`bpf_get_current_cgroup_id`); the packet
//! programs `ingress` and `egress` by the cgroup id of the packet's socket
//! (`bpf_skb_cgroup_id`), which may be judged in no task's context.
//!
//! | map | kind | key | value | written by |
//! |---|---|---|---|---|
//! | [`MAP_ALLOWED_ENDPOINTS`] (object, shared) | `BPF_MAP_TYPE_HASH`, [`MAX_ALLOWED_ENDPOINTS_ALL_RUNS`] entries, `BPF_F_NO_PREALLOC` | [`RunEndpoint`] | `u8` (1 = allowed) | loader, before the command starts; removed at teardown |
//! | [`MAP_COUNTERS`] (object, shared) | `BPF_MAP_TYPE_PERCPU_HASH`, [`MAX_RUNS`] entries | `u64` cgroup id | [`RunCounters`] per CPU | kernel; the loader creates the run's entry and sums the CPUs |
//! | [`MAP_RUNS`] (object, shared) | `BPF_MAP_TYPE_HASH`, [`MAX_RUNS`] entries | `u64` cgroup id | [`RunConfig`]: the run's slot in [`MAP_RINGS`] and how its unix hooks judge | loader; present exactly while the run may have tasks |
//! | [`MAP_RINGS`] (object, shared) | `BPF_MAP_TYPE_ARRAY_OF_MAPS`, [`MAX_RING_SLOTS`] | `u32` slot | a ring buffer, kept from run to run | loader, the first time a slot is used |
//! | `SLOT_OWNERS` (shared, loader only) | `BPF_MAP_TYPE_HASH` | `u32` slot | `u64` cgroup id of the run holding it | loader: claimed with `BPF_NOEXIST`, released at teardown |
//! | `ring-<slot>` (pinned with the programs) | `BPF_MAP_TYPE_RINGBUF`, [`DENIALS_RING_BYTES`] bytes | — | [`Denial`] records, and [`ReadOnlyRefusal`]s (told apart by their `hook` and size) | kernel, one per refusal |
//! | [`MAP_EXPOSED_PORTS`] (object, shared) | `BPF_MAP_TYPE_HASH`, [`MAX_EXPOSED_PORTS_ALL_RUNS`] entries, `BPF_F_NO_PREALLOC` | [`RunPort`] | `u8` (1 = exposed) | loader, before the command starts (`network.expose`); removed at teardown |
//! | [`MAP_ORIGINALS`] (object, shared) | `BPF_MAP_TYPE_LRU_HASH`, [`MAX_ORIGINALS`] entries | `u64` socket cookie | [`Original`] | kernel: a run's connect or datagram redirected (its RunConfig carries redirect ports) |
//! | [`MAP_TRANSPARENT`] (object, shared) | `BPF_MAP_TYPE_LRU_HASH`, [`MAX_TRANSPARENT`] entries | [`TransparentKey`] | [`Transparent`] | kernel (`sock_ops`, a redirected TCP connect's SYN); read and deleted by the proxy on accept |
//! | `UNIX_PREFIXES` (shared, created by the loader) | `BPF_MAP_TYPE_LPM_TRIE`, [`MAX_UNIX_PREFIXES_ALL_RUNS`] entries, `BPF_F_NO_PREALLOC` | [`UnixPrefixKey`] | `u8` (1 = allowed) | loader: per run, the directories (with trailing `/`) whose pathname sockets it may reach |
//!
//! A task whose cgroup has no entry is refused every inet destination and
//! its refusal is not recorded (there is no run to record it for): fail
//! closed. The unix hooks let such a task through: they also run for the
//! run's sockets used by lockrun's seccomp supervisor, which connects for the
//! command from outside (see `lockrun::bpf::unix`).
//!
//! An IPv4-mapped IPv6 destination (`::ffff:a.b.c.d`) is always keyed as the
//! IPv4 address it carries, on both sides.
#![no_std]

mod read_only;
pub use read_only::{
    is_query, path_args, read_only_offset, ReadOnlyRefusal, EROFS, NO_PATH, READ_ONLY_PATH_MAX,
};

/// `AF_UNIX`.
pub const AF_UNIX: u16 = 1;
/// `AF_INET`.
pub const AF_INET: u16 = 2;
/// `AF_INET6`.
pub const AF_INET6: u16 = 10;

/// Name of the allow map in the object (shared by every run, keyed by cgroup).
pub const MAP_ALLOWED_ENDPOINTS: &str = "ALLOWED_ENDPOINTS";
/// Name of the map from a run's cgroup id to its [`RunConfig`].
pub const MAP_RUNS: &str = "RUNS";
/// Name of the array of ring buffers, one per slot.
pub const MAP_RINGS: &str = "RINGS";
/// Ring-buffer slots: runs at the same time, each with its own ring.
pub const MAX_RING_SLOTS: u32 = 1024;
/// Unix socket directories one run may be allowed (as given and canonical).
pub const MAX_UNIX_PREFIXES: u32 = 64;
/// Capacity of the shared unix prefix trie, over all concurrent runs.
pub const MAX_UNIX_PREFIXES_ALL_RUNS: u32 = 65536;
/// Name of the per-CPU counter map in the object (shared, keyed by cgroup).
pub const MAP_COUNTERS: &str = "COUNTERS";
/// Name of the map of the ports each run exposes to this host's processes
/// over loopback (`network.expose`).
pub const MAP_EXPOSED_PORTS: &str = "EXPOSED_PORTS";
/// Ports one run may expose.
pub const MAX_EXPOSED_PORTS: u32 = 64;
/// Capacity of [`MAP_EXPOSED_PORTS`], over all concurrent runs.
pub const MAX_EXPOSED_PORTS_ALL_RUNS: u32 = 8192;

/// Endpoints one run may be allowed.
pub const MAX_ALLOWED_ENDPOINTS: u32 = 256;
/// Capacity of [`MAP_ALLOWED_ENDPOINTS`], over all concurrent runs.
pub const MAX_ALLOWED_ENDPOINTS_ALL_RUNS: u32 = 65536;
/// Concurrent runs the shared maps hold.
pub const MAX_RUNS: u32 = 8192;
/// Size of a run's ring buffer (a power of two, a multiple of the page size).
pub const DENIALS_RING_BYTES: u32 = 256 * 1024;
/// Slots in [`RunCounters`] (a power of two: the programs mask the index).
pub const COUNTER_SLOTS: u32 = 16;
/// The [`RunCounters`] slot counting refusals whose event did not fit the ring buffer.
pub const COUNTER_LOST: u32 = 7;
/// The [`RunCounters`] slot counting packets from outside dropped by
/// [`Hook::Ingress`] beyond the first [`INBOUND_RECORDS_PER_CPU`] on a CPU:
/// counted in the hook's slot and here, not written to the ring buffer. An
/// outside host decides how many packets come in; it must not decide how
/// much the run's ring buffer and audit log carry.
pub const COUNTER_INBOUND_UNITEMIZED: u32 = 10;
/// Inbound drops a run's ring buffer receives per CPU, each as a [`Denial`].
pub const INBOUND_RECORDS_PER_CPU: u64 = 32;

/// Key of [`MAP_ALLOWED_ENDPOINTS`]: one destination one run may reach.
/// 32 bytes: the run's cgroup id, the [`Endpoint`], 4 zero bytes (explicit,
/// so no padding byte can differ between the two sides).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunEndpoint {
    pub cgroup_id: u64,
    pub endpoint: Endpoint,
    pub _pad: u32,
}

/// Key of [`MAP_EXPOSED_PORTS`]: a port of one run that processes of this
/// host outside it may reach over loopback, TCP and UDP. 16 bytes: the run's
/// cgroup id, the port (host order), 6 zero bytes (explicit, as in
/// [`RunEndpoint`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunPort {
    pub cgroup_id: u64,
    pub port: u16,
    pub _pad: [u8; 6],
}

impl RunPort {
    #[must_use]
    pub const fn new(cgroup_id: u64, port: u16) -> Self {
        Self {
            cgroup_id,
            port,
            _pad: [0; 6],
        }
    }
}

/// Value of [`MAP_RUNS`]: where the run's refusals go, how its unix
/// hooks judge pathname destinations its tasks name, and where its
/// connects are redirected (16 bytes; the hand-assembled unix programs read
/// the first two fields at offsets 0 and 4).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// The run's slot in [`MAP_RINGS`].
    pub slot: u32,
    /// [`UNIX_MODE_PREFIXES`], or [`UNIX_MODE_SUPERVISED`] with or without
    /// [`UNIX_MODE_ABSTRACT`].
    pub unix_mode: u32,
    /// The IPv4 address of the run's transparent listener and resolver
    /// (network order; `127.0.0.1`).
    pub redirect_ip4: [u8; 4],
    /// The port of the run's transparent listener (host order): a TCP
    /// connect to [`is_fake_v4`] goes there. 0: no redirection at all (the
    /// hooks judge the run exactly as without these fields).
    pub transparent_port: u16,
    /// The port of the run's resolver (host order, TCP and UDP): a connect
    /// or datagram to port 53 goes there. 0 with `transparent_port`.
    pub resolver_port: u16,
}

impl RunConfig {
    /// Whether the run's connects are redirected.
    #[must_use]
    pub const fn redirects(&self) -> bool {
        self.transparent_port != 0 && self.resolver_port != 0
    }
}

/// The first address of the range the run's resolver hands out for allowed
/// names, `198.18.0.0/15` (RFC 2544: benchmarking, never routed).
pub const FAKE_V4_NET: [u8; 4] = [198, 18, 0, 0];
/// The prefix length of [`FAKE_V4_NET`].
pub const FAKE_V4_PREFIX_LEN: u8 = 15;

/// Whether an IPv4 address (network order) is in `198.18.0.0/15`.
#[must_use]
pub const fn is_fake_v4(a: [u8; 4]) -> bool {
    a[0] == FAKE_V4_NET[0] && a[1] & 0xfe == FAKE_V4_NET[1]
}

/// The DNS port: a run's TCP connect or datagram to it is its resolver's.
pub const DNS_PORT: u16 = 53;

/// Name of the map from a redirected socket (its cookie, `bpf_get_socket_cookie`)
/// to where it was meant to go ([`Original`]).
pub const MAP_ORIGINALS: &str = "ORIGINALS";
/// Capacity of [`MAP_ORIGINALS`] (LRU), over all concurrent runs.
pub const MAX_ORIGINALS: u32 = 65536;
/// Name of the map from a transparent connection's client side
/// ([`TransparentKey`]) to where it was meant to go ([`Transparent`]).
pub const MAP_TRANSPARENT: &str = "TRANSPARENT";
/// Capacity of [`MAP_TRANSPARENT`] (LRU), over all concurrent runs.
pub const MAX_TRANSPARENT: u32 = 65536;

/// [`Original::kind`]: a TCP connect to the fake range, now to the run's
/// transparent listener.
pub const REDIRECT_TRANSPARENT: u32 = 1;
/// [`Original::kind`]: a connect or datagram to port 53, now to the run's resolver.
pub const REDIRECT_RESOLVER: u32 = 2;

/// Value of [`MAP_ORIGINALS`]: where a redirected socket of a run was meant
/// to go. 32 bytes. `endpoint` as the socket named it: an IPv4 socket's as
/// [`Endpoint::v4`], an IPv6 socket's with its 16 bytes unmodified (family
/// [`AF_INET6`], a v4-mapped address too), so the hooks can show it back.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Original {
    pub endpoint: Endpoint,
    /// [`REDIRECT_TRANSPARENT`] or [`REDIRECT_RESOLVER`].
    pub kind: u32,
    /// The run's cgroup id (of the task that connected).
    pub cgroup_id: u64,
}

/// Key of [`MAP_TRANSPARENT`]: the client side of a transparent
/// connection, as the listener sees its peer. 24 bytes: the client's
/// address and port (as [`Endpoint::v6`] keys them: v4-mapped as IPv4),
/// the listener's port (host order), 2 zero bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransparentKey {
    pub client: Endpoint,
    pub listener_port: u16,
    pub _pad: [u8; 2],
}

/// Value of [`MAP_TRANSPARENT`]: where the connection was meant to go (as
/// [`Endpoint::v6`] keys it), and the run whose socket made it. 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transparent {
    pub original: Endpoint,
    pub _pad: u32,
    pub cgroup_id: u64,
}

/// Unix hooks judge a pathname by text: absolute, no `.`/`..`, under the
/// run's prefixes.
pub const UNIX_MODE_PREFIXES: u32 = 0;
/// Unix hooks refuse every pathname a task of the run names itself (the
/// seccomp supervisor connects for it). A bit: the modes are bits.
pub const UNIX_MODE_SUPERVISED: u32 = 1;
/// With [`UNIX_MODE_SUPERVISED`]: every abstract name a task of the run
/// names itself is refused too (no Landlock scoping: the supervisor
/// connects to the names the run bound).
pub const UNIX_MODE_ABSTRACT: u32 = 2;

/// Value of [`MAP_COUNTERS`]: refusals per [`Hook`] slot, [`COUNTER_LOST`]
/// and [`COUNTER_INBOUND_UNITEMIZED`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounters {
    pub slots: [u64; COUNTER_SLOTS as usize],
}

/// Bytes of a unix socket path carried in a [`Denial`] (`sizeof(sun_path)`).
pub const UNIX_PATH_MAX: usize = 108;

/// Key of [`MAP_ALLOWED_ENDPOINTS`]: one destination the run may reach.
///
/// Layout (20 bytes, no padding): `family: u16` ([`AF_INET`] or [`AF_INET6`]),
/// `port: u16` in host byte order, `addr: [u8; 16]` in network byte order —
/// an IPv4 address fills the first 4 bytes and the other 12 are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub family: u16,
    pub port: u16,
    pub addr: [u8; 16],
}

impl Endpoint {
    /// An IPv4 endpoint; `addr` in network byte order.
    #[must_use]
    pub const fn v4(addr: [u8; 4], port: u16) -> Self {
        Self {
            family: AF_INET,
            port,
            addr: [
                addr[0], addr[1], addr[2], addr[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
        }
    }

    /// An IPv6 endpoint; an IPv4-mapped address becomes the IPv4 endpoint it carries.
    #[must_use]
    pub const fn v6(addr: [u8; 16], port: u16) -> Self {
        if is_v4_mapped(&addr) {
            Self::v4([addr[12], addr[13], addr[14], addr[15]], port)
        } else {
            Self {
                family: AF_INET6,
                port,
                addr,
            }
        }
    }
}

/// Whether a 16-byte IPv6 address is `::ffff:a.b.c.d`.
#[must_use]
pub const fn is_v4_mapped(a: &[u8; 16]) -> bool {
    a[0] == 0
        && a[1] == 0
        && a[2] == 0
        && a[3] == 0
        && a[4] == 0
        && a[5] == 0
        && a[6] == 0
        && a[7] == 0
        && a[8] == 0
        && a[9] == 0
        && a[10] == 0xff
        && a[11] == 0xff
}

/// Which hook refused. Also the [`RunCounters`] slot of its refusals.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Connect4 = 0,
    Connect6 = 1,
    Sendmsg4 = 2,
    Sendmsg6 = 3,
    ConnectUnix = 4,
    SendmsgUnix = 5,
    /// `cgroup/sock_create`: an ICMP ping or raw inet socket, refused at creation.
    SockCreate = 6,
    // 7 is [`COUNTER_LOST`].
    /// `cgroup_skb/ingress`: a packet for a socket of the run from outside
    /// it: from beyond loopback (an outside host reaching a port the command
    /// listens on), or over loopback from a process of this host that is not
    /// the run's, to a port the run does not expose.
    Ingress = 8,
    /// `cgroup_skb/egress`: a packet from a socket of the run to beyond
    /// loopback that no `connect`/`sendmsg` hook judged (a reply on a
    /// connection accepted from outside).
    Egress = 9,
    // 10 is [`COUNTER_INBOUND_UNITEMIZED`].
    /// lockrun's unix guard (a kernel without the unix hooks, before Linux
    /// 6.7): a stream or seqpacket connect to a named socket that a task of
    /// the run made itself (`security_unix_stream_connect`).
    GuardConnectUnix = 11,
    /// The unix guard: a datagram connect, or a send to a socket other than
    /// the connected peer, that a task of the run made itself
    /// (`security_unix_may_send`).
    GuardSendUnix = 12,
    /// lockrun's `sys_exit` recorder (a raw tracepoint, not a cgroup hook):
    /// a call of a task of the run that a read-only mount refused
    /// (`EROFS`), written as a [`ReadOnlyRefusal`], not a [`Denial`].
    ReadOnly = 13,
}

impl Hook {
    /// Every hook, in slot order.
    pub const ALL: [Hook; 12] = [
        Hook::Connect4,
        Hook::Connect6,
        Hook::Sendmsg4,
        Hook::Sendmsg6,
        Hook::ConnectUnix,
        Hook::SendmsgUnix,
        Hook::SockCreate,
        Hook::Ingress,
        Hook::Egress,
        Hook::GuardConnectUnix,
        Hook::GuardSendUnix,
        Hook::ReadOnly,
    ];

    /// The hook's name as the audit log prints it.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Hook::Connect4 => "connect4",
            Hook::Connect6 => "connect6",
            Hook::Sendmsg4 => "sendmsg4",
            Hook::Sendmsg6 => "sendmsg6",
            Hook::ConnectUnix => "connect_unix",
            Hook::SendmsgUnix => "sendmsg_unix",
            Hook::SockCreate => "sock_create",
            Hook::Ingress => "ingress",
            Hook::Egress => "egress",
            Hook::GuardConnectUnix => "unix_guard_connect",
            Hook::GuardSendUnix => "unix_guard_send",
            Hook::ReadOnly => "read_only",
        }
    }

    #[must_use]
    pub const fn from_u32(v: u32) -> Option<Hook> {
        match v {
            0 => Some(Hook::Connect4),
            1 => Some(Hook::Connect6),
            2 => Some(Hook::Sendmsg4),
            3 => Some(Hook::Sendmsg6),
            4 => Some(Hook::ConnectUnix),
            5 => Some(Hook::SendmsgUnix),
            6 => Some(Hook::SockCreate),
            8 => Some(Hook::Ingress),
            9 => Some(Hook::Egress),
            11 => Some(Hook::GuardConnectUnix),
            12 => Some(Hook::GuardSendUnix),
            13 => Some(Hook::ReadOnly),
            _ => None,
        }
    }
}

/// One refusal, as written to the run's ring buffer (`DENIALS`).
///
/// Layout (176 bytes, offsets in [`denial_offset`]): `cgroup_id: u64`, `pid: u32` (thread id), `tgid: u32`
/// (process id), `hook: u32` ([`Hook`]), `sock_type: u32` (`SOCK_STREAM`, …),
/// `protocol: u32` (`IPPROTO_*`, 0 for unix), `family: u16` (`AF_*` of the
/// destination as the socket sees it), `port: u16` (host order), `addr: [u8; 16]`
/// (as in [`Endpoint`], IPv6 unmodified), `comm: [u8; 16]` (NUL-padded),
/// `path: [u8; 108]` (unix destinations; NUL-padded), `local_port: u16` (host
/// order; the run's own port, for [`Hook::Ingress`] and [`Hook::Egress`],
/// else 0), 2 bytes of zero padding.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Denial {
    pub cgroup_id: u64,
    pub pid: u32,
    pub tgid: u32,
    pub hook: u32,
    pub sock_type: u32,
    pub protocol: u32,
    pub family: u16,
    pub port: u16,
    pub addr: [u8; 16],
    pub comm: [u8; 16],
    pub path: [u8; UNIX_PATH_MAX],
    pub local_port: u16,
    /// Explicit tail padding (always zero), so the record has no hidden bytes.
    pub _pad: [u8; 2],
}

/// Byte offsets inside [`Denial`], for the hand-assembled unix hooks.
pub mod denial_offset {
    pub const CGROUP_ID: i16 = 0;
    pub const PID: i16 = 8;
    pub const TGID: i16 = 12;
    pub const HOOK: i16 = 16;
    pub const SOCK_TYPE: i16 = 20;
    pub const PROTOCOL: i16 = 24;
    pub const FAMILY: i16 = 28;
    pub const PORT: i16 = 30;
    pub const ADDR: i16 = 32;
    pub const COMM: i16 = 48;
    pub const PATH: i16 = 64;
    pub const LOCAL_PORT: i16 = 172;
    pub const SIZE: i16 = 176;
}

const _: () = {
    assert!(core::mem::size_of::<Denial>() == denial_offset::SIZE as usize);
    assert!(core::mem::offset_of!(Denial, path) == denial_offset::PATH as usize);
    assert!(core::mem::offset_of!(Denial, local_port) == denial_offset::LOCAL_PORT as usize);
    assert!(core::mem::offset_of!(Denial, comm) == denial_offset::COMM as usize);
    assert!(core::mem::offset_of!(Denial, family) == denial_offset::FAMILY as usize);
    assert!(core::mem::offset_of!(Denial, sock_type) == denial_offset::SOCK_TYPE as usize);
    assert!(core::mem::size_of::<Endpoint>() == 20);
    assert!(core::mem::size_of::<RunEndpoint>() == 32);
    assert!(core::mem::size_of::<RunPort>() == 16);
    assert!(core::mem::size_of::<RunCounters>() == 8 * COUNTER_SLOTS as usize);
    assert!(core::mem::size_of::<UnixPrefixKey>() == 4 + 8 + UNIX_PATH_MAX);
    assert!(core::mem::size_of::<RunConfig>() == 16);
    assert!(core::mem::size_of::<Original>() == 32);
    assert!(core::mem::size_of::<TransparentKey>() == 24);
    assert!(core::mem::size_of::<Transparent>() == 32);
};

/// Key of `UNIX_PREFIXES` (`BPF_MAP_TYPE_LPM_TRIE` layout): `prefix_len: u32`
/// in **bits**, then the data: the run's cgroup id (8 bytes, native order,
/// always matched whole) and the path bytes. An allowed directory is stored
/// with its trailing `/`, so `/work/wt` does not admit `/work/wt-other`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct UnixPrefixKey {
    pub prefix_len: u32,
    pub cgroup_id: u64,
    pub path: [u8; UNIX_PATH_MAX],
}

#[cfg(test)]
mod tests {
    use super::is_fake_v4;

    #[test]
    fn the_fake_range_is_198_18_0_0_slash_15() {
        for a in [[198, 18, 0, 0], [198, 18, 0, 7], [198, 19, 255, 255]] {
            assert!(is_fake_v4(a), "{a:?}");
        }
        for a in [
            [198, 17, 255, 255],
            [198, 20, 0, 0],
            [197, 18, 0, 1],
            [199, 18, 0, 1],
            [127, 0, 0, 1],
            [198, 50, 0, 1],
        ] {
            assert!(!is_fake_v4(a), "{a:?}");
        }
    }
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain `#[repr(C)]` integers and byte arrays, no padding, every bit pattern valid.
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::Endpoint {}
    // SAFETY: as above; the tail padding is an explicit field (size checked at compile time).
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::Denial {}
    // SAFETY: integers and byte arrays, explicit padding, every offset
    // checked at compile time: no hidden bytes, every bit pattern valid.
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::ReadOnlyRefusal {}
    // SAFETY: packed integers and bytes, every bit pattern valid.
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::UnixPrefixKey {}
    // SAFETY: integers and an Endpoint, explicit padding field, size checked at compile time.
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::RunEndpoint {}
    // SAFETY: an array of u64.
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::RunCounters {}
    // SAFETY: a u64, a u16 and explicit zero padding, size checked at compile time.
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::RunPort {}
    // SAFETY: two u32, four bytes, two u16: no padding (size checked at compile time).
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::RunConfig {}
    // SAFETY: an Endpoint, a u32 and a u64: no padding (size checked at compile time).
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::Original {}
    // SAFETY: an Endpoint, a u16 and explicit zero padding (size checked at compile time).
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::TransparentKey {}
    // SAFETY: an Endpoint, explicit padding and a u64 (size checked at compile time).
    #[allow(unsafe_code)]
    unsafe impl aya::Pod for super::Transparent {}
}
