//! The run's audit trail: every refusal (and every proxy decision) as one JSON
//! line in `--audit-log`, and a one-line summary on stderr when the run ends.
//! Three layers feed it: the kernel network hooks (BPF ring buffer and
//! counters), the proxy, and the filesystem: Landlock's kernel audit
//! records ([`kernel`], ABI 7), or, below ABI 7, where Landlock logs
//! nothing, kernel audit's records of the run's calls refused with
//! `EACCES`, and of its links and renames refused with `EXDEV`, told by a
//! login uid of the run's own ([`syscalls`]: the access derived from the
//! call, refusals by permission bits among them; an `EXDEV` only where
//! Landlock's, not a move across mounts).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use lockrun_seccomp::deny_list::Widens;

mod causes;
pub mod explain;
pub mod kernel;
pub mod ranges;
pub mod read;
pub mod seal;
pub mod sink;
mod summary;
pub mod syscalls;

pub use causes::{Narrowed, RanOut};
pub use summary::refused_as;
pub(crate) use summary::times;

/// Which layer refused (or allowed) something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    Filesystem,
    KernelNetwork,
    Proxy,
    /// Landlock's scoping: signals to, and abstract unix sockets of,
    /// processes outside the run.
    Scope,
    /// The seccomp deny list: calls that would widen the sandbox.
    Syscall,
    /// The run's task limit (cgroup `pids.max`): forks and clones beyond it.
    Tasks,
    /// The run's memory limit (cgroup `memory.max`): processes the kernel
    /// killed at it.
    Memory,
}

impl Layer {
    /// Every layer, in the order reports show them.
    pub const ALL: [Self; 7] = [
        Self::Filesystem,
        Self::KernelNetwork,
        Self::Proxy,
        Self::Scope,
        Self::Syscall,
        Self::Tasks,
        Self::Memory,
    ];
}

/// Where a refused connection or datagram was headed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destination {
    Inet(SocketAddr),
    Unix(String),
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inet(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{p}"),
        }
    }
}

/// Which way a refused packet or connection went, from the run's side.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The command reached out: a connect, a send, a packet it sent.
    #[default]
    Outbound,
    /// Something outside the run reached in: a packet for a socket of the
    /// run (a port it listens on) from beyond loopback, or over loopback from
    /// a process of this host to a port the policy does not expose, dropped
    /// by the `ingress` hook.
    Inbound,
}

impl Direction {
    #[must_use]
    pub fn is_outbound(&self) -> bool {
        *self == Self::Outbound
    }
}

/// A connect or send refused by the cgroup hooks, as the kernel reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelNetEvent {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// `connect4`, `connect6`, `sendmsg4`, `sendmsg6`, `sock_create`,
    /// `connect_unix`, `sendmsg_unix`, `ingress`, `egress`;
    /// `seccomp_connect_unix`, `seccomp_sendto_unix` when the seccomp supervisor refused.
    pub hook: String,
    /// `inet`, `inet6`, `unix`.
    pub family: String,
    /// `tcp`, `udp`, `icmp`, `mptcp`, or the number.
    pub protocol: String,
    /// Where it was headed; for an [`Direction::Inbound`] packet, where it
    /// came from (the outside peer).
    pub destination: Destination,
    /// A unix destination that does not exist on the host: the connect would
    /// have failed anyway (glibc probes nscd's socket on every user lookup).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub target_absent: bool,
    #[serde(default, skip_serializing_if = "Direction::is_outbound")]
    pub direction: Direction,
    /// The run's own port of a dropped packet (0: not known, or no packet).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub local_port: u16,
}

impl KernelNetEvent {
    /// The outside peer of a packet dropped on its way in (`ingress`):
    /// what the summary, `lockrun audit` and its suggestion name it by.
    #[must_use]
    pub fn inbound_peer(&self) -> Option<std::net::IpAddr> {
        match (self.direction, &self.destination) {
            (Direction::Inbound, Destination::Inet(peer)) => Some(peer.ip()),
            _ => None,
        }
    }

    /// The outside peer of a packet a run's socket sent, dropped on its way
    /// out (`egress`): no connect or send of the command named it (a reply
    /// on a connection from outside, a retransmit), so it is shown apart
    /// from the connections refused, and no policy line allows it.
    #[must_use]
    pub fn outbound_packet_peer(&self) -> Option<SocketAddr> {
        match (
            &self.destination,
            self.hook == lockrun_common::Hook::Egress.name(),
        ) {
            (Destination::Inet(peer), true) => Some(*peer),
            _ => None,
        }
    }

    /// The kind of a socket the run was not let make (`sock_create`), as
    /// `inet udplite`: no destination was named yet, so it is shown apart
    /// from the connections refused, and no policy line allows it.
    #[must_use]
    pub fn refused_socket_kind(&self) -> Option<String> {
        (self.hook == lockrun_common::Hook::SockCreate.name())
            .then(|| format!("{} {}", self.family, self.protocol))
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u16) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// A proxy decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyEvent {
    /// `CONNECT`, `GET`, …
    pub method: String,
    pub host: String,
    pub port: u16,
    /// The checked address actually dialed, when one was.
    pub dialed: Option<SocketAddr>,
    /// The policy let the request through ([`ProxyVerdict::allowed`]).
    pub allowed: bool,
    /// Why, in words: the rule that allowed it, or the refusal reason.
    pub reason: String,
    /// HTTP status returned to the client.
    pub status: u16,
    /// Why, as the proxy decided it: what the summary and `lockrun audit`
    /// go by.
    pub verdict: ProxyVerdict,
    /// How the connection came to the proxy. Absent in the logs of a
    /// lockrun before transparent redirection (all came by the proxy URL:
    /// `method` tells `CONNECT` from a forwarded request), and for a
    /// request that never said what it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<ProxyVia>,
    /// What a transparent connection's decision rested on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<ProxyBasis>,
}

/// How a connection (or a query) came to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyVia {
    /// A `CONNECT` request, by the proxy URL.
    Connect,
    /// A forwarded plain-HTTP request, by the proxy URL.
    Forward,
    /// A connect the kernel brought to the proxy: the client named an
    /// address the run's resolver had handed out.
    Transparent,
    /// A query to the run's resolver (`host` is the name asked for; no port).
    Dns,
    /// A request inside a connection whose TLS the proxy terminated (the
    /// host has secrets or request rules), reached by `CONNECT` or
    /// transparently.
    Inspected,
}

/// What a transparent connection was judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyBasis {
    /// The name the run's resolver handed out the address for (the client
    /// sent no TLS `ClientHello` or HTTP request naming a host: SSH, a
    /// database, or nothing yet).
    ResolvedName,
    /// That name, and the TLS `ClientHello`'s server name, which must be it.
    Sni,
    /// That name, and the HTTP request's `Host`, which must be it.
    Host,
}

impl fmt::Display for ProxyBasis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ResolvedName => "the name resolved",
            Self::Sni => "TLS server name",
            Self::Host => "HTTP Host",
        })
    }
}

impl ProxyEvent {
    /// What it was for, as reports name it: `host:port`, or `name (DNS)`
    /// for a query the run's resolver refused.
    #[must_use]
    pub fn target(&self) -> String {
        let host = if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.via {
            Some(ProxyVia::Dns) => format!("{host} (DNS)"),
            _ => format!("{host}:{}", self.port),
        }
    }

    /// How it was decided, as `lockrun audit` says it: `CONNECT → 403: …`,
    /// `transparent, by TLS server name → closed: …`, `DNS query →
    /// NXDOMAIN: …`.
    #[must_use]
    pub fn detail(&self) -> String {
        match (self.via, self.basis) {
            (Some(ProxyVia::Dns), _) => format!("DNS query → NXDOMAIN: {}", self.reason),
            (Some(ProxyVia::Transparent), basis) => {
                let by = basis.map(|b| format!(", by {b}")).unwrap_or_default();
                let end = if self.verdict.allowed() && self.verdict != ProxyVerdict::UpstreamFailed
                {
                    "relayed"
                } else {
                    "closed"
                };
                format!("transparent{by} → {end}: {}", self.reason)
            }
            _ => format!("{} → {}: {}", self.method, self.status, self.reason),
        }
    }

    /// Refused by the proxy: a request the policy, the address guard or the
    /// proxy itself turned away. Not a client's first try without the
    /// credentials (git asks once without them, then with them), and not a
    /// request the policy allowed whose upstream then failed.
    #[must_use]
    pub fn refused(&self) -> bool {
        !self.verdict.allowed() && self.verdict != ProxyVerdict::NoCredentials
    }
}

/// What the proxy decided about a request, and why, as a value: the
/// `reason` beside it says the same in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProxyVerdict {
    /// Allowed, and relayed to the upstream (whatever it answered).
    Allowed,
    /// Allowed by the policy, but the upstream failed: its name did not
    /// resolve (in time) or has no address, no checked address took the
    /// connection, or it closed before its answer was through. No policy
    /// line changes that.
    UpstreamFailed,
    /// No allow rule names the host.
    NotListed,
    /// Allow rules name the host, on other ports only.
    PortNotAllowed,
    /// A `[network] deny` entry covers the host (deny wins over allow).
    Denied,
    /// The request named an IP address that no allow rule lists.
    IpLiteral,
    /// The address guard refused `addr`, which the host resolved to (or
    /// the listed IP literal itself): one in a special `range` not
    /// granted (found as `embedded`, when an IPv6 form carries it), or,
    /// with no range, an address of this host.
    Address {
        addr: std::net::IpAddr,
        range: Option<ranges::Range>,
        embedded: Option<std::net::Ipv4Addr>,
    },
    /// The proxy could not read this host's addresses, without which it
    /// cannot judge an answer: refused rather than judged without them.
    GuardUnavailable,
    /// No proxy credentials: the challenge a client answers by sending
    /// them (git's first try). Not counted as a refusal.
    NoCredentials,
    /// Credentials that are not this run's.
    WrongCredentials,
    /// The request itself: malformed, too large, a method or HTTP version
    /// the proxy does not serve, or not complete in time.
    BadRequest,
    /// Over the run's connection cap (`run.max_connections`).
    Overloaded,
    /// A transparent connection whose first bytes named another host (TLS
    /// server name, HTTP `Host`) than the name its address was handed out
    /// for: a fronted connection.
    Fronted,
    /// A connection to the run's transparent listener that the kernel did
    /// not bring from the run (another process of this host), or that came
    /// before the proxy could tell.
    Unattributed,
    /// Inside a host's requests (TLS seen by the proxy, or plain HTTP):
    /// the host has `[network.requests]` rules and none allows this
    /// method and path.
    RuleRefused,
    /// The request carried a secret's placeholder to a host the secret is
    /// not bound to: an attempt to carry a secret elsewhere.
    SecretElsewhere,
    /// The upstream's TLS certificate did not verify against the roots the
    /// proxy trusts for it: never passed on as if valid.
    UpstreamUntrusted,
    /// The client ended the TLS handshake with the proxy's certificate for
    /// the host: it pins the host's key, or does not read the run's CA
    /// bundle.
    ClientRefusedCert,
}

impl ProxyVerdict {
    /// The policy let the request through (the upstream may still have
    /// failed).
    #[must_use]
    pub fn allowed(self) -> bool {
        matches!(self, Self::Allowed | Self::UpstreamFailed)
    }
}

/// A filesystem access refused by Landlock (from the kernel audit records) or
/// a metadata change refused by the seccomp supervisor ([`crate::supervise`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEvent {
    pub pid: u32,
    pub comm: String,
    /// The path, when the kernel names it; `None` when it cannot tell.
    pub path: Option<String>,
    /// The Landlock rights refused, e.g. `fs.write_file`.
    pub access: Vec<String>,
    /// The raw audit record, for what the fields above leave out.
    pub raw: String,
    /// Refused as another name (a hard link) of this denied file, by
    /// lockrun's guard of those ([`crate::fs::links`]), not by Landlock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_name_of: Option<String>,
    /// The error the call got, where it was neither Landlock's nor the
    /// supervisor's: `EROFS`, a read-only mount
    /// ([`syscalls::records::read_only`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<FsErrno>,
}

/// An error a filesystem refusal came with that is not Landlock's (nor the
/// supervisor's), as the log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FsErrno {
    /// `EROFS`: the file is on a read-only mount, which the kernel checks
    /// before it asks Landlock.
    #[serde(rename = "EROFS")]
    ReadOnly,
}

impl fmt::Display for FsErrno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadOnly => f.write_str(
                "EROFS: read-only (outside the writable roots, or a read-only mount of the \
                 machine's)",
            ),
        }
    }
}

/// A reach outside the run that Landlock refused (from the kernel audit
/// records): the command signalled a process outside the run or connected
/// to an abstract unix socket bound outside it (scoping, ABI 6), or asked
/// for ptrace-mode access to a process outside it (ABI 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeEvent {
    pub pid: u32,
    pub comm: String,
    pub target: ScopeTarget,
    /// The raw audit records.
    pub raw: String,
}

/// A call of the seccomp deny list ([`crate::seccomp::refused_call`]),
/// refused with `EPERM` by lockrun's supervisor, which the filter handed it
/// to so that it is seen: `unshare`, `mount`, `bpf`, `socket(AF_PACKET)`, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallEvent {
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// The call, with the arguments that refused it where there are
    /// (`clone with CLONE_NEWUSER`, `socket(AF_PACKET)`).
    pub call: String,
    /// How it would widen the sandbox.
    pub why: Widens,
}

/// What a [`ScopeEvent`] tried to reach.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScopeTarget {
    /// `kill`, `tgkill`, `pidfd_send_signal`, … to a process outside the run
    /// (`opid`, `ocomm` of the record; 0 and empty when not given).
    Signal { to_pid: u32, to_comm: String },
    /// `connect` or `sendto` to an abstract unix socket (`@name`).
    AbstractUnixSocket { name: String },
    /// A ptrace-mode access check on a process outside the run: reading its
    /// `/proc/<pid>/environ`, `mem`, `cwd`, `root`, `fd/`, …, or
    /// `process_vm_readv`, `pidfd_getfd`, `kcmp` (`ptrace` itself is
    /// refused earlier, by seccomp). Logged only when Landlock is what
    /// refused: against a process holding capabilities the command lacks,
    /// the capability check refuses first and the kernel writes no record.
    Ptrace { to_pid: u32, to_comm: String },
}

impl fmt::Display for ScopeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Signal { to_pid, to_comm } if to_comm.is_empty() => {
                write!(f, "signal to pid {to_pid}")
            }
            Self::Signal { to_pid, to_comm } => write!(f, "signal to pid {to_pid} ({to_comm})"),
            Self::AbstractUnixSocket { name } => write!(f, "abstract unix socket @{name}"),
            Self::Ptrace { to_pid, to_comm } if to_comm.is_empty() => {
                write!(f, "ptrace or /proc access to pid {to_pid}")
            }
            Self::Ptrace { to_pid, to_comm } => {
                write!(f, "ptrace or /proc access to pid {to_pid} ({to_comm})")
            }
        }
    }
}

/// Kernel audit records that did not reach lockrun: filesystem and scope
/// refusals of the run may be missing from its report. The kernel keeps
/// the run confined all the same; only the account is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum AuditLoss {
    /// The kernel's count of records it dropped rose while the run went on.
    /// The count is the machine's: whose records they were, it does not say.
    Dropped {
        records: u64,
        /// The kernel's limits then (0: none): a refusal's record is dropped
        /// when more than `backlog_limit` wait for their reader, or more than
        /// `rate_limit` come in a second.
        backlog_limit: u32,
        rate_limit: u32,
    },
    /// lockrun's own socket overflowed (`ENOBUFS`): how many, unknown.
    SocketFull,
}

impl fmt::Display for AuditLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dropped {
                records,
                backlog_limit,
                rate_limit,
            } => {
                write!(
                    f,
                    "the kernel dropped {records} audit {} on this machine while the run went on (",
                    if *records == 1 { "record" } else { "records" }
                )?;
                if *backlog_limit > 0 {
                    write!(
                        f,
                        "more were waiting than its backlog limit of {backlog_limit}"
                    )?;
                    if *rate_limit > 0 {
                        f.write_str(", or ")?;
                    }
                }
                if *rate_limit > 0 {
                    write!(f, "more came than its rate limit of {rate_limit} a second")?;
                }
                if *backlog_limit == 0 && *rate_limit == 0 {
                    f.write_str("it had no memory for them")?;
                }
                f.write_str(
                    "), so this run's filesystem and scope refusals may not all be shown; \
                     `auditctl -b 8192` raises the backlog limit",
                )
            }
            Self::SocketFull => f.write_str(
                "lockrun's kernel audit socket overflowed while the run went on, so this run's \
                 filesystem and scope refusals may not all be shown",
            ),
        }
    }
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStart {
        run_id: String,
        command: Vec<String>,
        #[serde(serialize_with = "crate::shown::lossy::paths")]
        policy: Vec<PathBuf>,
        #[serde(serialize_with = "crate::shown::lossy::path")]
        worktree: PathBuf,
        /// The short name of the key that seals the run's lines
        /// ([`seal::SealKey::id`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seal_key: Option<String>,
    },
    KernelNetwork(KernelNetEvent),
    /// Ring buffer was full: this many kernel events were counted but not delivered.
    KernelEventsLost {
        count: u64,
    },
    /// Packets from outside dropped past the first `per_cpu` on each CPU,
    /// which have events of their own: counted, not itemized (an outside
    /// host sets their number).
    InboundNotItemized {
        count: u64,
        per_cpu: u64,
    },
    Proxy(ProxyEvent),
    /// Connections to the proxy dropped unanswered: over its cap
    /// (`run.max_connections`) and past the first `answered` such, which
    /// got a 503 each (and a `proxy` line each). Counted, not itemized: the
    /// command sets their number.
    ProxyConnectionsDropped {
        count: u64,
        max_connections: usize,
        answered: usize,
    },
    Filesystem(FsEvent),
    Scope(ScopeEvent),
    Syscall(SyscallEvent),
    /// A writable dir the ruleset could not grant whole, because a denied
    /// path lies beneath it ([`Narrowed`]): creating, removing
    /// or renaming directly in it is refused.
    Narrowed(Narrowed),
    /// Kernel audit records lost: the filesystem and scope refusals shown
    /// may be fewer than were made.
    AuditRecordsLost(AuditLoss),
    /// Forks and clones refused (`EAGAIN`), counted by the kernel over
    /// the whole run (cgroup `pids.events`): because the run had `limit`
    /// tasks already (the policy's `run.max_tasks`), or at a limit above
    /// the run (`ran_out`).
    TaskLimit {
        limit: u32,
        refused: u64,
        /// At the run's limit, or above the run (a cgroup's lockrun is
        /// in).
        ran_out: RanOut,
    },
    /// Processes of the run the kernel killed (SIGKILL) out of memory,
    /// counted by the kernel over the whole run (cgroup `oom_kill`): at the
    /// run's memory limit of `limit` bytes (the policy's `run.max_memory`)
    /// or above the run (`ran_out`); `peak`, the most the run used at
    /// once, where the kernel says.
    MemoryLimit {
        limit: u64,
        killed: u64,
        peak: Option<u64>,
        /// At the run's limit, or above the run (the machine's, or a
        /// cgroup's lockrun is in).
        ran_out: RanOut,
    },
    /// A note about the audit itself (e.g. kernel audit unavailable).
    Notice {
        layer: Layer,
        message: String,
    },
    RunEnd {
        run_id: String,
        exit: i32,
        refused: BTreeMap<Layer, u64>,
        /// Records of the run counted (in `refused`) but not written: past
        /// [`MAX_LINES_PER_RUN`].
        #[serde(default, skip_serializing_if = "is_zero_u64")]
        unwritten: u64,
    },
}

/// A timestamped line as written. A line of a run's log also names its
/// run and its place among the run's lines, and ends with its seal
/// ([`seal`]), which [`Record`] does not keep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Milliseconds since the epoch.
    pub ts_ms: u64,
    #[serde(flatten)]
    pub event: Event,
    /// The run whose line this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The line's place among its run's lines, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

/// Errors opening or writing the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Sink(#[from] sink::SinkError),
    #[error("cannot open audit log {path}: its dir: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the audit log {path} could not be written: {source}; lockrun will not run the command \
         without the log it was asked to keep"
    )]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The most lines one run writes to its log, past which its refusals are
/// counted (in the summary, and in the run's `run_end`) but not itemized:
/// a run that refuses itself in a loop does not fill the disk with its log.
pub const MAX_LINES_PER_RUN: u64 = 100_000;

/// The run's audit sink. Cheap to share (`Arc<AuditLog>`); each line is
/// written whole as it is recorded, so a killed lockrun leaves a readable
/// log.
pub struct AuditLog {
    path: Option<PathBuf>,
    out: Mutex<Option<Writer>>,
    tally: Mutex<summary::Tally>,
}

/// The log's file, and how its lines are sealed.
struct Writer {
    file: sink::LogFile,
    /// The key and the run's id, for a run's log; none for a log a library
    /// caller keeps.
    seal: Option<(seal::SealKey, String)>,
    /// The next line's place among the run's.
    seq: u64,
    /// Records past [`MAX_LINES_PER_RUN`], counted and not written.
    unwritten: u64,
}

impl Writer {
    fn write(&mut self, event: Event) {
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let rec = Record {
            ts_ms,
            event,
            run: self.seal.as_ref().map(|(_, run)| run.clone()),
            seq: self.seal.as_ref().map(|_| self.seq),
        };
        // Whole lines only: a record that cannot be serialized is not
        // begun (a half line would make the rest of the log unreadable).
        let Ok(body) = serde_json::to_vec(&rec) else {
            return;
        };
        let line = match &self.seal {
            Some((key, _)) => key.seal(&body),
            None => body,
        };
        self.file.write_line(&line);
        self.seq += 1;
    }
}

impl AuditLog {
    /// A sink that only tallies: no log kept.
    #[must_use]
    pub fn unkept() -> Self {
        Self {
            path: None,
            out: Mutex::new(None),
            tally: Mutex::new(summary::Tally::default()),
        }
    }

    /// A sink writing to `path` (appending, unsealed), or only tallying
    /// when `None`: for a library caller's log. A run's log is
    /// [`sealed`](Self::sealed), where no run can write.
    pub fn open(path: Option<&Path>) -> Result<Self, AuditError> {
        let Some(path) = path else {
            return Ok(Self::unkept());
        };
        let dir_err = |source| AuditError::Dir {
            path: path.to_path_buf(),
            source,
        };
        let name = path
            .file_name()
            .ok_or_else(|| dir_err(std::io::Error::from_raw_os_error(libc::EISDIR)))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = std::fs::File::open(dir).map_err(dir_err)?;
        let file = sink::LogFile::open_in(std::os::fd::AsFd::as_fd(&dir), name, path)?;
        Ok(Self::writing(file, None))
    }

    /// A run's sink: every line names `run`, its place among the run's
    /// lines, and ends with a seal made with `key` ([`seal`]).
    #[must_use]
    pub fn sealed(file: sink::LogFile, key: seal::SealKey, run: &str) -> Self {
        Self::writing(file, Some((key, run.to_owned())))
    }

    fn writing(file: sink::LogFile, seal: Option<(seal::SealKey, String)>) -> Self {
        Self {
            path: Some(file.path().to_path_buf()),
            out: Mutex::new(Some(Writer {
                file,
                seal,
                seq: 0,
                unwritten: 0,
            })),
            tally: Mutex::new(summary::Tally::default()),
        }
    }

    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The short name of the key the log's lines are sealed with, if they are.
    #[must_use]
    pub fn key_id(&self) -> Option<String> {
        let out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        out.as_ref()
            .and_then(|w| w.seal.as_ref())
            .map(|(key, _)| key.id())
    }

    /// Record one event: tally it and append it to the log.
    pub fn record(&self, mut event: Event) {
        if let Event::KernelNetwork(k) = &mut event {
            if let Destination::Unix(p) = &k.destination {
                k.target_absent = p.starts_with('/') && std::fs::symlink_metadata(p).is_err();
            }
        }
        self.tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&event);
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(w) = out.as_mut() else {
            return;
        };
        // Past the bound, counted only; room is kept for the run's end,
        // which says how many.
        if let Event::RunEnd { unwritten, .. } = &mut event {
            *unwritten = w.unwritten;
        } else if w.seq + 1 >= MAX_LINES_PER_RUN {
            w.unwritten += 1;
            return;
        }
        w.write(event);
    }

    /// Refuse to go on when the log could not be written so far: at the
    /// start of a run, before the command starts.
    pub fn check_written(&self) -> Result<(), AuditError> {
        let out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        match out.as_ref().and_then(|w| w.file.failure()) {
            Some(f) => Err(AuditError::Write {
                path: self.path.clone().unwrap_or_default(),
                source: std::io::Error::new(f.error.kind(), f.error.to_string()),
            }),
            None => Ok(()),
        }
    }

    /// What could not be written to the log, said for the end of the run:
    /// `None` when every line was.
    #[must_use]
    pub fn write_failure(&self) -> Option<String> {
        let out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let f = out.as_ref()?.file.failure()?;
        Some(format!(
            "the audit log {} could not be written: {}; {} of this run {} missing from it (the \
             summary counts every refusal; `lockrun audit` names the gap)",
            self.path.as_deref().unwrap_or(Path::new("")).display(),
            f.error,
            if f.lines == 1 {
                "1 line".to_owned()
            } else {
                format!("{} lines", f.lines)
            },
            if f.lines == 1 { "is" } else { "are" }
        ))
    }

    /// Refusals so far, per layer.
    #[must_use]
    pub fn refused(&self) -> BTreeMap<Layer, u64> {
        self.tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refused()
    }

    /// The end-of-run summary lines for stderr: what was refused, and
    /// requests the policy allowed whose upstream failed (empty when
    /// neither).
    #[must_use]
    pub fn summary(&self) -> Vec<String> {
        self.tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lines(self.path.as_deref())
    }
}

#[cfg(test)]
mod tests;
