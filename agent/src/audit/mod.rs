//! The run's audit trail: every refusal (and every proxy decision) as one JSON
//! line in `--audit-log`, and a one-line summary on stderr when the run ends.
//! Three layers feed it: the kernel network hooks (BPF ring buffer and
//! counters), the proxy, and the filesystem (Landlock's kernel audit records).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub mod kernel;

/// Paths in the log as UTF-8, bytes that are not replaced by U+FFFD (as
/// `Path::display` does): a path that is not UTF-8 must not cost the line.
/// Read back as written.
pub mod lossy {
    use serde::Serializer;
    use std::path::{Path, PathBuf};

    /// # Errors
    /// Only the serializer's own.
    pub fn path<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&p.to_string_lossy())
    }

    /// # Errors
    /// Only the serializer's own.
    pub fn paths<S: Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(ps.iter().map(|p| p.to_string_lossy()))
    }
}

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
    /// go by. A log written before lockrun recorded it reads back as
    /// [`ProxyVerdict::Unrecorded`].
    #[serde(default)]
    pub verdict: ProxyVerdict,
}

impl ProxyEvent {
    /// Refused by the proxy: a request the policy, the address guard or the
    /// proxy itself turned away. Not a client's first try without the
    /// credentials (git asks once without them, then with them), and not a
    /// request the policy allowed whose upstream then failed.
    #[must_use]
    pub fn refused(&self) -> bool {
        match self.verdict {
            ProxyVerdict::Unrecorded => !self.allowed && self.status != 407,
            v => !v.allowed() && v != ProxyVerdict::NoCredentials,
        }
    }
}

/// What the proxy decided about a request, and why, as a value: the
/// `reason` beside it says the same in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
        range: Option<crate::proxy::guard::Range>,
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
    /// Not recorded: a log from a lockrun before the verdict was written.
    #[default]
    Unrecorded,
}

impl ProxyVerdict {
    /// The policy let the request through (the upstream may still have
    /// failed). `false` for [`Self::Unrecorded`]: the event's `allowed`
    /// says.
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
    pub why: crate::seccomp::Widens,
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
        #[serde(serialize_with = "lossy::paths")]
        policy: Vec<PathBuf>,
        #[serde(serialize_with = "lossy::path")]
        worktree: PathBuf,
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
    Filesystem(FsEvent),
    Scope(ScopeEvent),
    Syscall(SyscallEvent),
    /// A writable dir the ruleset could not grant whole, because a denied
    /// path lies beneath it ([`crate::fs::Narrowed`]): creating, removing
    /// or renaming directly in it is refused.
    Narrowed(crate::fs::Narrowed),
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
        /// in). Absent from logs written before it was told: those
        /// counted refusals at the limit only.
        #[serde(default)]
        ran_out: crate::cgroup::RanOut,
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
        /// Absent from logs written before it was told: those counted
        /// kills at the limit only.
        #[serde(default)]
        ran_out: crate::cgroup::RanOut,
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
    },
}

/// A timestamped line as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Milliseconds since the epoch.
    pub ts_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// Errors opening or writing the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open audit log {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Default)]
struct Tally {
    refused: BTreeMap<Layer, u64>,
    lost: u64,
    /// Packets from outside counted but not itemized, and how many per CPU are.
    inbound_unitemized: u64,
    inbound_per_cpu: u64,
    /// Kernel network refusals by destination: count and the commands seen.
    kernel: BTreeMap<Destination, (u64, Vec<String>)>,
    /// Connects to unix sockets that do not exist on the host (harmless).
    absent: BTreeMap<Destination, (u64, Vec<String>)>,
    /// Packets from outside dropped, by peer address, the run's port and
    /// the protocol. No commands: a packet is judged in no task's context.
    inbound: BTreeMap<(std::net::IpAddr, u16, String), (u64, Vec<String>)>,
    /// Packets of the run's sockets to outside dropped, by the run's port,
    /// the peer and the protocol.
    outbound_packets: BTreeMap<(u16, SocketAddr, String), (u64, Vec<String>)>,
    /// Sockets of a kind a run may not make, by kind (`inet udplite`).
    sockets: BTreeMap<String, (u64, Vec<String>)>,
    proxy: BTreeMap<String, u64>,
    /// Requests the policy allowed whose upstream failed, by target: count
    /// and the latest reason.
    upstream: BTreeMap<String, (u64, String)>,
    /// Filesystem refusals by path and what was refused there
    /// ([`refused_as`]).
    fs: BTreeMap<(String, String), (u64, Vec<String>)>,
    scope: BTreeMap<ScopeTarget, (u64, Vec<String>)>,
    syscalls: BTreeMap<String, (u64, Vec<String>)>,
    /// Filesystem and scope refusals whose record named no process.
    no_process: u64,
    /// Kernel audit records that did not reach lockrun, once per cause.
    audit_loss: Vec<AuditLoss>,
    /// The run's task limit, the forks refused, and where the tasks ran out.
    tasks: Option<(u32, u64, crate::cgroup::RanOut)>,
    /// The run's memory limit, the processes killed out of memory, and where it ran out.
    memory: Option<(u64, u64, crate::cgroup::RanOut)>,
}

/// ` ×n` after what was seen more than once.
pub(crate) fn times(n: u64) -> String {
    if n > 1 {
        format!(" ×{n}")
    } else {
        String::new()
    }
}

/// One more of a tally's entries, and the command that made it (once).
fn seen(entry: &mut (u64, Vec<String>), comm: &str) {
    entry.0 += 1;
    if !entry.1.iter().any(|c| c == comm) {
        entry.1.push(comm.to_owned());
    }
}

impl Tally {
    /// The proxy's refusals, by target.
    fn proxy_line(&self) -> Option<String> {
        let n: u64 = self.proxy.values().sum();
        let parts: Vec<String> = self
            .proxy
            .iter()
            .map(|(h, n)| format!("{h}{}", times(*n)))
            .collect();
        (n > 0).then(|| {
            format!(
                "lockrun: {n} proxy {} refused: {}",
                plural(n, "request", "requests"),
                parts.join(", ")
            )
        })
    }

    /// Requests the policy allowed whose upstream failed, by target, each
    /// with the latest cause.
    fn upstream_line(&self) -> Option<String> {
        let n: u64 = self.upstream.values().map(|(n, _)| n).sum();
        let parts: Vec<String> = self
            .upstream
            .iter()
            .map(|(h, (n, why))| format!("{h}{} ({why})", times(*n)))
            .collect();
        (n > 0).then(|| {
            format!(
                "lockrun: {n} proxy {} the policy allowed failed upstream, not refused: {}",
                plural(n, "request", "requests"),
                parts.join(", ")
            )
        })
    }

    /// The summary's lines for packets the packet programs dropped: from
    /// outside (`ingress`), and of the run's sockets to outside (`egress`).
    fn packet_lines(&self, lines: &mut Vec<String>) {
        let n_inbound: u64 =
            self.inbound.values().map(|(n, _)| n).sum::<u64>() + self.inbound_unitemized;
        if n_inbound > 0 {
            let mut parts = counted(&self.inbound, |(ip, port, protocol)| {
                format!("from {ip} to port {port} ({protocol})")
            });
            if self.inbound_unitemized > 0 {
                parts.push(format!(
                    "{} more not itemized (only the first {} on each CPU are)",
                    self.inbound_unitemized, self.inbound_per_cpu
                ));
            }
            // Over loopback, a port the policy exposes lets this host's
            // processes in; from beyond it, nothing does.
            let why = if self.inbound.keys().any(|(ip, _, _)| ip.is_loopback()) {
                "a run takes no traffic from outside it; [network] expose lets this host's processes reach a port over loopback, never another host"
            } else {
                "a run takes no traffic from beyond loopback, and no policy changes that"
            };
            lines.push(format!(
                "lockrun: {n_inbound} {} from outside dropped ({why}): {}",
                plural(n_inbound, "packet", "packets"),
                parts.join(", ")
            ));
        }
        let n_out: u64 = self.outbound_packets.values().map(|(n, _)| n).sum();
        if n_out > 0 {
            let parts = counted(&self.outbound_packets, |(port, peer, protocol)| {
                format!("from port {port} to {peer} ({protocol})")
            });
            lines.push(format!(
                "lockrun: {n_out} {} to outside dropped (a run's sockets exchange packets only with loopback, and no policy changes that): {}",
                plural(n_out, "packet", "packets"),
                parts.join(", ")
            ));
        }
    }
}

/// The run's audit sink. Cheap to share (`Arc<AuditLog>`); writes are
/// serialized and flushed per line so a killed lockrun leaves a readable log.
pub struct AuditLog {
    path: Option<PathBuf>,
    out: Mutex<Option<BufWriter<File>>>,
    tally: Mutex<Tally>,
}

impl AuditLog {
    /// A sink writing to `path` (appending), or only tallying when `None`.
    pub fn open(path: Option<&Path>) -> Result<Self, AuditError> {
        let out = match path {
            Some(p) => Some(BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| AuditError::Open {
                        path: p.to_path_buf(),
                        source: e,
                    })?,
            )),
            None => None,
        };
        Ok(Self {
            path: path.map(Path::to_path_buf),
            out: Mutex::new(out),
            tally: Mutex::new(Tally::default()),
        })
    }

    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Record one event: tally it and append it to the log.
    pub fn record(&self, mut event: Event) {
        if let Event::KernelNetwork(k) = &mut event {
            if let Destination::Unix(p) = &k.destination {
                k.target_absent = p.starts_with('/') && std::fs::symlink_metadata(p).is_err();
            }
        }
        self.tally(&event);
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let rec = Record { ts_ms, event };
        let mut guard = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(w) = guard.as_mut() {
            // A failing audit write must not kill the run; it is reported once at the end.
            // Whole lines only: a record that cannot be serialized is not
            // begun (a half line would make the rest of the log unreadable).
            if let Ok(mut line) = serde_json::to_vec(&rec) {
                line.push(b'\n');
                let _ = w.write_all(&line);
                let _ = w.flush();
            }
        }
    }

    fn tally(&self, event: &Event) {
        let mut t = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            Event::KernelNetwork(k) => {
                *t.refused.entry(Layer::KernelNetwork).or_default() += 1;
                if let Some(peer) = k.inbound_peer() {
                    t.inbound
                        .entry((peer, k.local_port, k.protocol.clone()))
                        .or_default()
                        .0 += 1;
                    return;
                }
                if let Some(peer) = k.outbound_packet_peer() {
                    t.outbound_packets
                        .entry((k.local_port, peer, k.protocol.clone()))
                        .or_default()
                        .0 += 1;
                    return;
                }
                let e = if let Some(kind) = k.refused_socket_kind() {
                    t.sockets.entry(kind).or_default()
                } else if k.target_absent {
                    t.absent.entry(k.destination.clone()).or_default()
                } else {
                    t.kernel.entry(k.destination.clone()).or_default()
                };
                seen(e, &k.comm);
            }
            Event::KernelEventsLost { count } => {
                *t.refused.entry(Layer::KernelNetwork).or_default() += count;
                t.lost += count;
            }
            Event::InboundNotItemized { count, per_cpu } => {
                *t.refused.entry(Layer::KernelNetwork).or_default() += count;
                t.inbound_unitemized += count;
                t.inbound_per_cpu = *per_cpu;
            }
            Event::Proxy(p) if p.verdict == ProxyVerdict::UpstreamFailed => {
                let e = t
                    .upstream
                    .entry(format!("{}:{}", p.host, p.port))
                    .or_default();
                e.0 += 1;
                e.1.clone_from(&p.reason);
            }
            Event::Proxy(p) if p.refused() => {
                *t.refused.entry(Layer::Proxy).or_default() += 1;
                // A connection refused before any request (the cap, a head
                // that never came) has no target: its reason names it.
                let key = if p.host.is_empty() {
                    format!("({})", p.reason)
                } else {
                    format!("{}:{}", p.host, p.port)
                };
                *t.proxy.entry(key).or_default() += 1;
            }
            Event::Scope(sc) => {
                *t.refused.entry(Layer::Scope).or_default() += 1;
                t.no_process += u64::from(sc.comm.is_empty());
                seen(t.scope.entry(sc.target.clone()).or_default(), &sc.comm);
            }
            Event::Syscall(sc) => {
                *t.refused.entry(Layer::Syscall).or_default() += 1;
                seen(t.syscalls.entry(sc.call.clone()).or_default(), &sc.comm);
            }
            Event::Filesystem(f) => {
                *t.refused.entry(Layer::Filesystem).or_default() += 1;
                let path = f.path.clone().unwrap_or_else(|| "(path unknown)".into());
                t.no_process += u64::from(f.comm.is_empty());
                seen(
                    t.fs.entry((path, refused_as(&f.access))).or_default(),
                    &f.comm,
                );
            }
            Event::TaskLimit {
                limit,
                refused,
                ran_out,
            } => {
                *t.refused.entry(Layer::Tasks).or_default() += refused;
                t.tasks = Some((*limit, *refused, *ran_out));
            }
            Event::MemoryLimit {
                limit,
                killed,
                ran_out,
                ..
            } => {
                *t.refused.entry(Layer::Memory).or_default() += killed;
                t.memory = Some((*limit, *killed, *ran_out));
            }
            Event::AuditRecordsLost(loss) if !t.audit_loss.contains(loss) => {
                t.audit_loss.push(*loss);
            }
            _ => {}
        }
    }

    /// Refusals so far, per layer.
    #[must_use]
    pub fn refused(&self) -> BTreeMap<Layer, u64> {
        self.tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .refused
            .clone()
    }

    /// The end-of-run summary lines for stderr: what was refused, and
    /// requests the policy allowed whose upstream failed (empty when
    /// neither).
    #[must_use]
    pub fn summary(&self) -> Vec<String> {
        let t = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut lines = Vec::new();
        t.packet_lines(&mut lines);
        let n_kernel: u64 = t.kernel.values().map(|(n, _)| n).sum::<u64>() + t.lost;
        if n_kernel > 0 {
            let mut parts = by_destination(&t.kernel);
            if t.lost > 0 {
                parts.push(format!("{} more not delivered (ring buffer full)", t.lost));
            }
            lines.push(format!(
                "lockrun: {n_kernel} {} refused: {}",
                plural(n_kernel, "connection", "connections"),
                parts.join(", ")
            ));
        }
        let n_sockets: u64 = t.sockets.values().map(|(n, _)| n).sum();
        if n_sockets > 0 {
            lines.push(format!(
                "lockrun: {n_sockets} {} refused (a run may make inet sockets of three kinds only, TCP, MPTCP and UDP, and no policy changes that): {}",
                plural(n_sockets, "socket", "sockets"),
                counted(&t.sockets, String::clone).join(", ")
            ));
        }
        let n_absent: u64 = t.absent.values().map(|(n, _)| n).sum();
        if n_absent > 0 {
            let parts = by_destination(&t.absent);
            lines.push(format!(
                "lockrun: {n_absent} {} to unix sockets that do not exist here refused (harmless: they would have failed anyway): {}",
                plural(n_absent, "connection", "connections"),
                parts.join(", ")
            ));
        }
        lines.extend(t.proxy_line());
        let n_fs: u64 = t.fs.values().map(|(n, _)| n).sum();
        if n_fs > 0 {
            let parts = counted(&t.fs, |(path, what)| format!("{what} {path}"));
            lines.push(format!(
                "lockrun: {n_fs} filesystem {} refused: {}",
                plural(n_fs, "access", "accesses"),
                parts.join(", ")
            ));
        }
        let n_scope: u64 = t.scope.values().map(|(n, _)| n).sum();
        if n_scope > 0 {
            let parts = counted(&t.scope, ToString::to_string);
            lines.push(format!(
                "lockrun: {n_scope} {} to reach processes outside the run refused (Landlock; no policy allows it): {}",
                plural(n_scope, "attempt", "attempts"),
                parts.join(", ")
            ));
        }
        let n_calls: u64 = t.syscalls.values().map(|(n, _)| n).sum();
        if n_calls > 0 {
            lines.push(format!(
                "lockrun: {n_calls} system {} refused (seccomp: calls that would widen the sandbox, which no policy allows): {}",
                plural(n_calls, "call", "calls"),
                counted(&t.syscalls, String::clone).join(", ")
            ));
        }
        if let Some((limit, refused, ran_out)) = t.tasks {
            lines.push(tasks_refused_line(limit, refused, ran_out));
        }
        if let Some((limit, killed, ran_out)) = t.memory {
            lines.push(out_of_memory_line(limit, killed, ran_out));
        }
        if t.no_process > 0 {
            lines.push(format!(
                "lockrun: the kernel named no process for {} of these (it names none on a host whose audit rules leave the run out of syscall auditing, e.g. `-a task,never`)",
                t.no_process
            ));
        }
        for loss in &t.audit_loss {
            lines.push(format!("lockrun: {loss}"));
        }
        if !lines.is_empty() {
            lines.push(match &self.path {
                Some(p) => format!(
                    "lockrun: details and the policy lines that would allow them: lockrun audit {}",
                    p.display()
                ),
                None => "lockrun: for details and the policy lines that would allow them, run it again with --audit-log FILE, then: lockrun audit FILE".to_owned(),
            });
        }
        // Last, and without the pointer to policy lines: not refusals.
        lines.extend(t.upstream_line());
        lines
    }
}

/// What a filesystem refusal refused, said for its path: `create a file
/// in` (Landlock names the directory for what is made or removed in it),
/// `write`, `set the times of`. The rights as the records name them
/// (`fs.make_reg`, the supervisor's `metadata.utimes`); one not known
/// here is shown as named.
#[must_use]
pub fn refused_as(access: &[String]) -> String {
    let said: Vec<&str> = access
        .iter()
        .map(|a| match a.as_str() {
            "fs.execute" => "run",
            "fs.write_file" => "write",
            "fs.read_file" => "read",
            "fs.read_dir" => "list",
            "fs.remove_dir" => "remove a dir from",
            "fs.remove_file" => "remove a file from",
            "fs.make_char" => "make a char device in",
            "fs.make_dir" => "make a dir in",
            "fs.make_reg" => "create a file in",
            "fs.make_sock" => "make a unix socket in",
            "fs.make_fifo" => "make a fifo in",
            "fs.make_block" => "make a block device in",
            "fs.make_sym" => "make a symlink in",
            "fs.refer" => "link or rename across",
            "fs.truncate" => "truncate",
            "fs.ioctl_dev" | "metadata.ioctl" => "ioctl on",
            "metadata.chmod" => "chmod",
            "metadata.chown" => "chown",
            "metadata.utimes" => "set the times of",
            "metadata.setxattr" => "set an xattr of",
            "metadata.removexattr" => "remove an xattr of",
            other => other,
        })
        .collect();
    if said.is_empty() {
        "access".to_owned()
    } else {
        said.join(" and ")
    }
}

/// `127.0.0.1:6379 ×2 (redis-cli)` for each destination.
fn by_destination(m: &BTreeMap<Destination, (u64, Vec<String>)>) -> Vec<String> {
    counted(m, show_dest)
}

/// The most targets one summary line names; the rest are counted (the
/// audit log has each). A `ps` beside many other runs' processes, each
/// hidden from the run's `/proc` and recorded, would otherwise make a line
/// of hundreds.
const SHOWN_PER_LINE: usize = 12;

/// `<target> ×2 (cmd, cmd)` for each target of a tally, in its order (no
/// `×1`), the first [`SHOWN_PER_LINE`] of them, then `N more targets`.
fn counted<K>(m: &BTreeMap<K, (u64, Vec<String>)>, show: impl Fn(&K) -> String) -> Vec<String> {
    let mut parts = shown(m, show);
    if m.len() > SHOWN_PER_LINE {
        parts.push(format!("{} more targets", m.len() - SHOWN_PER_LINE));
    }
    parts
}

fn shown<K>(m: &BTreeMap<K, (u64, Vec<String>)>, show: impl Fn(&K) -> String) -> Vec<String> {
    m.iter()
        .take(SHOWN_PER_LINE)
        .map(|(k, (n, comms))| {
            let times = if *n > 1 {
                format!(" ×{n}")
            } else {
                String::new()
            };
            let comms: Vec<&str> = comms
                .iter()
                .map(String::as_str)
                .filter(|c| !c.is_empty())
                .collect();
            if comms.is_empty() {
                format!("{}{times}", show(k))
            } else {
                format!("{}{times} ({})", show(k), comms.join(", "))
            }
        })
        .collect()
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

fn show_dest(d: &Destination) -> String {
    match d {
        Destination::Inet(SocketAddr::V6(a)) => format!("[{}]:{}", a.ip(), a.port()),
        other => other.to_string(),
    }
}

/// The summary's line for forks and clones refused: at the run's task
/// limit, or above the run.
fn tasks_refused_line(limit: u32, refused: u64, ran_out: crate::cgroup::RanOut) -> String {
    use crate::cgroup::RanOut;
    let why = match ran_out {
        RanOut::AtTheRunsLimit => format!(
            "the run had reached its limit of {limit} tasks, processes and threads at once (run.max_tasks in the policy)"
        ),
        RanOut::AboveTheRun => format!(
            "tasks ran out above the run (a cgroup's lockrun is in, e.g. its caller's), which had not reached its own limit of {limit}"
        ),
    };
    format!(
        "lockrun: {refused} {} refused (EAGAIN): {why}",
        plural(refused, "fork or thread", "forks or threads"),
    )
}

/// The summary's line for processes of the run the kernel killed out of
/// memory, saying where it ran out.
fn out_of_memory_line(limit: u64, killed: u64, ran_out: crate::cgroup::RanOut) -> String {
    use crate::cgroup::RanOut;
    let limit = crate::policy::size(limit);
    let why = match ran_out {
        RanOut::AtTheRunsLimit => format!(
            "the run had reached its memory limit of {limit}, its processes together (run.max_memory in the policy)"
        ),
        RanOut::AboveTheRun => format!(
            "memory ran out above the run (the machine's, or a cgroup's lockrun is in), which had not reached its own limit of {limit}; a run's processes are the kernel's first pick there"
        ),
    };
    format!(
        "lockrun: the kernel killed {killed} {} of the run (SIGKILL, out of memory): {why}",
        plural(killed, "process", "processes"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    /// The summary's lines of a log kept nowhere (`--audit-log` not given),
    /// but the last, which must tell how to get the details.
    fn refusals(log: &AuditLog) -> Vec<String> {
        let mut lines = log.summary();
        assert_eq!(
            lines.pop().as_deref(),
            Some(
                "lockrun: for details and the policy lines that would allow them, run it again \
                 with --audit-log FILE, then: lockrun audit FILE"
            )
        );
        lines
    }

    #[test]
    fn the_details_are_where_the_log_is_and_nothing_is_said_without_a_refusal() {
        let scratch = crate::testing::Scratch::new("summary");
        let dir = scratch.path().to_path_buf();
        let path = dir.join("audit.jsonl");
        let kept = AuditLog::open(Some(&path)).unwrap();
        assert_eq!(kept.summary(), Vec::<String>::new());
        kept.record(k("127.0.0.1:6379", "redis-cli"));
        assert_eq!(
            kept.summary(),
            vec![
                "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
                format!(
                    "lockrun: details and the policy lines that would allow them: lockrun audit {}",
                    path.display()
                ),
            ]
        );
        let unkept = AuditLog::open(None).unwrap();
        assert_eq!(unkept.summary(), Vec::<String>::new());
    }

    /// The kills out of memory say where it ran out: at the run's limit
    /// (raise it), or above the run (raising it would not help). And a log
    /// written before `ran_out` was told reads as at the limit, all it
    /// counted then.
    #[test]
    fn kills_out_of_memory_say_where_it_ran_out() {
        use crate::cgroup::RanOut;
        let kill = |ran_out| Event::MemoryLimit {
            limit: 64 << 20,
            killed: 2,
            peak: Some(60 << 20),
            ran_out,
        };
        let log = AuditLog::open(None).unwrap();
        log.record(kill(RanOut::AtTheRunsLimit));
        assert_eq!(
            refusals(&log),
            ["lockrun: the kernel killed 2 processes of the run (SIGKILL, out of memory): the run \
              had reached its memory limit of 64 MiB, its processes together (run.max_memory in \
              the policy)"]
        );
        let log = AuditLog::open(None).unwrap();
        log.record(kill(RanOut::AboveTheRun));
        assert_eq!(
            refusals(&log),
            ["lockrun: the kernel killed 2 processes of the run (SIGKILL, out of memory): memory \
              ran out above the run (the machine's, or a cgroup's lockrun is in), which had not \
              reached its own limit of 64 MiB; a run's processes are the kernel's first pick there"]
        );
        let old: Event = serde_json::from_str(
            r#"{"event":"memory_limit","limit":67108864,"killed":1,"peak":null}"#,
        )
        .unwrap();
        assert!(matches!(
            old,
            Event::MemoryLimit {
                ran_out: RanOut::AtTheRunsLimit,
                ..
            }
        ));
        let now = serde_json::to_string(&kill(RanOut::AboveTheRun)).unwrap();
        assert!(now.contains(r#""ran_out":"above_the_run""#), "{now}");
    }

    /// Forks refused say where the tasks ran out: at the run's limit, or
    /// above the run (a cgroup's lockrun is in). A log written before
    /// `ran_out` was told reads as at the limit.
    #[test]
    fn refused_forks_say_where_the_tasks_ran_out() {
        use crate::cgroup::RanOut;
        let refused = |ran_out| Event::TaskLimit {
            limit: 16,
            refused: 3,
            ran_out,
        };
        let log = AuditLog::open(None).unwrap();
        log.record(refused(RanOut::AtTheRunsLimit));
        assert_eq!(
            refusals(&log),
            ["lockrun: 3 forks or threads refused (EAGAIN): the run had reached its limit of 16 \
              tasks, processes and threads at once (run.max_tasks in the policy)"]
        );
        let log = AuditLog::open(None).unwrap();
        log.record(refused(RanOut::AboveTheRun));
        assert_eq!(
            refusals(&log),
            ["lockrun: 3 forks or threads refused (EAGAIN): tasks ran out above the run (a \
              cgroup's lockrun is in, e.g. its caller's), which had not reached its own limit of 16"]
        );
        let old: Event =
            serde_json::from_str(r#"{"event":"task_limit","limit":16,"refused":1}"#).unwrap();
        assert_eq!(
            old,
            Event::TaskLimit {
                limit: 16,
                refused: 1,
                ran_out: RanOut::AtTheRunsLimit
            }
        );
        let now = serde_json::to_string(&refused(RanOut::AboveTheRun)).unwrap();
        assert!(now.contains(r#""ran_out":"above_the_run""#), "{now}");
    }

    fn fs(path: Option<&str>, access: &[&str], comm: &str) -> Event {
        Event::Filesystem(FsEvent {
            pid: 1,
            comm: comm.into(),
            path: path.map(Into::into),
            access: access.iter().map(|&a| a.into()).collect(),
            raw: String::new(),
            other_name_of: None,
        })
    }

    #[test]
    fn a_filesystem_refusal_says_what_was_refused_where() {
        let log = AuditLog::open(None).unwrap();
        log.record(fs(Some("/etc"), &["fs.make_reg"], "sh"));
        log.record(fs(Some("/etc"), &["fs.remove_file"], "rm"));
        log.record(fs(Some("/etc/passwd"), &["fs.write_file"], "touch"));
        log.record(fs(Some("/etc/passwd"), &["fs.write_file"], "sh"));
        log.record(fs(Some("/etc/passwd"), &["metadata.utimes"], "touch"));
        log.record(fs(Some("/etc/x"), &["fs.write_file", "fs.truncate"], "sh"));
        log.record(fs(Some("/vault"), &["fs.read_dir"], "ls"));
        log.record(fs(None, &["fs.future_right"], ""));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 8 filesystem accesses refused: fs.future_right (path unknown), \
                 create a file in /etc (sh), remove a file from /etc (rm), \
                 set the times of /etc/passwd (touch), write /etc/passwd ×2 (touch, sh), \
                 write and truncate /etc/x (sh), list /vault (ls)"
                    .to_owned(),
                "lockrun: the kernel named no process for 1 of these (it names none on a host \
                 whose audit rules leave the run out of syscall auditing, e.g. `-a task,never`)"
                    .to_owned(),
            ]
        );
    }

    fn k(dest: &str, comm: &str) -> Event {
        Event::KernelNetwork(KernelNetEvent {
            pid: 1,
            tgid: 1,
            comm: comm.into(),
            cgroup_id: 7,
            hook: "connect4".into(),
            family: "inet".into(),
            protocol: "tcp".into(),
            destination: Destination::Inet(dest.parse().unwrap()),
            target_absent: false,
            direction: Direction::Outbound,
            local_port: 0,
        })
    }

    #[test]
    fn lost_audit_records_are_told_once_per_cause_even_with_nothing_else_refused() {
        let dropped = AuditLoss::Dropped {
            records: 3,
            backlog_limit: 64,
            rate_limit: 0,
        };
        let log = AuditLog::open(None).unwrap();
        log.record(Event::AuditRecordsLost(AuditLoss::SocketFull));
        log.record(Event::AuditRecordsLost(dropped));
        log.record(Event::AuditRecordsLost(AuditLoss::SocketFull));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: lockrun's kernel audit socket overflowed while the run went on, so this \
                 run's filesystem and scope refusals may not all be shown"
                    .to_owned(),
                "lockrun: the kernel dropped 3 audit records on this machine while the run went on \
                 (more were waiting than its backlog limit of 64), so this run's filesystem and \
                 scope refusals may not all be shown; `auditctl -b 8192` raises the backlog limit"
                    .to_owned(),
            ]
        );
        // The causes the kernel's limits give.
        let said = |backlog_limit, rate_limit| {
            AuditLoss::Dropped {
                records: 1,
                backlog_limit,
                rate_limit,
            }
            .to_string()
        };
        assert!(said(64, 100).contains(
            "1 audit record on this machine while the run went on (more were waiting than its \
             backlog limit of 64, or more came than its rate limit of 100 a second)"
        ));
        assert!(said(0, 100).contains("(more came than its rate limit of 100 a second)"));
        assert!(said(0, 0).contains("(it had no memory for them)"));
        // As the log writes it, and read back.
        let line = serde_json::to_string(&Event::AuditRecordsLost(dropped)).unwrap();
        assert_eq!(
            line,
            r#"{"event":"audit_records_lost","cause":"dropped","records":3,"backlog_limit":64,"rate_limit":0}"#
        );
        assert_eq!(
            serde_json::from_str::<Event>(&line).unwrap(),
            Event::AuditRecordsLost(dropped)
        );
        let full = serde_json::to_string(&Event::AuditRecordsLost(AuditLoss::SocketFull)).unwrap();
        assert_eq!(
            full,
            r#"{"event":"audit_records_lost","cause":"socket_full"}"#
        );
        assert_eq!(
            serde_json::from_str::<Event>(&full).unwrap(),
            Event::AuditRecordsLost(AuditLoss::SocketFull)
        );
    }

    #[test]
    fn a_summary_line_names_at_most_a_dozen_targets_and_counts_the_rest() {
        let log = AuditLog::open(None).unwrap();
        for port in 1..=20u16 {
            log.record(k(&format!("127.0.0.1:{port}"), "nc"));
        }
        let lines = refusals(&log);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(
            line.starts_with("lockrun: 20 connections refused: "),
            "{line}"
        );
        assert!(line.ends_with(", 8 more targets"), "{line}");
        assert_eq!(line.matches("(nc)").count(), SHOWN_PER_LINE, "{line}");
    }

    #[test]
    fn summary_groups_by_destination() {
        let log = AuditLog::open(None).unwrap();
        log.record(k("127.0.0.1:6379", "redis-cli"));
        log.record(k("127.0.0.1:6379", "redis-cli"));
        log.record(k("[::1]:22", "ssh"));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 3 connections refused: 127.0.0.1:6379 ×2 (redis-cli), [::1]:22 (ssh)"
                    .to_owned()
            ]
        );
    }

    /// A packet between `peer` and the run's `port` that a packet program
    /// (`hook`) dropped: judged in no task's context, so no process.
    fn packet(hook: &str, direction: Direction, peer: &str, port: u16, protocol: &str) -> Event {
        Event::KernelNetwork(KernelNetEvent {
            pid: 0,
            tgid: 0,
            comm: String::new(),
            cgroup_id: 7,
            hook: hook.into(),
            family: "inet".into(),
            protocol: protocol.into(),
            destination: Destination::Inet(peer.parse().unwrap()),
            target_absent: false,
            direction,
            local_port: port,
        })
    }

    /// A packet from `peer` to the run's `port`, dropped by `ingress`.
    fn inbound(peer: &str, port: u16, protocol: &str) -> Event {
        packet("ingress", Direction::Inbound, peer, port, protocol)
    }

    #[test]
    fn inbound_drops_are_their_own_line_by_peer_and_port() {
        let log = AuditLog::open(None).unwrap();
        // Two SYNs of one connection attempt, from two source ports.
        log.record(inbound("10.1.2.3:40000", 8080, "tcp"));
        log.record(inbound("10.1.2.3:40001", 8080, "tcp"));
        log.record(inbound("[fd00::2]:5353", 9000, "udp"));
        log.record(k("127.0.0.1:6379", "redis-cli"));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 3 packets from outside dropped (a run takes no traffic from beyond loopback, and no policy changes that): from 10.1.2.3 to port 8080 (tcp) ×2, from fd00::2 to port 9000 (udp)".to_owned(),
                "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
            ]
        );
        assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&4));
    }

    #[test]
    fn inbound_drops_over_loopback_name_the_setting_that_lets_them_in() {
        let log = AuditLog::open(None).unwrap();
        log.record(inbound("127.0.0.1:40000", 3000, "tcp"));
        log.record(inbound("[::1]:5353", 9000, "udp"));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 2 packets from outside dropped (a run takes no traffic from outside it; [network] expose lets this host's processes reach a port over loopback, never another host): from 127.0.0.1 to port 3000 (tcp), from ::1 to port 9000 (udp)".to_owned(),
            ]
        );
    }

    #[test]
    fn packets_dropped_on_their_way_out_are_their_own_line() {
        let log = AuditLog::open(None).unwrap();
        let egress = |peer, port| packet("egress", Direction::Outbound, peer, port, "tcp");
        // A SYN-ACK and its retransmit, then another connection's.
        log.record(egress("10.1.2.3:40000", 8080));
        log.record(egress("10.1.2.3:40000", 8080));
        log.record(egress("10.1.2.3:40001", 8080));
        log.record(k("127.0.0.1:6379", "redis-cli"));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 3 packets to outside dropped (a run's sockets exchange packets only with loopback, and no policy changes that): from port 8080 to 10.1.2.3:40000 (tcp) ×2, from port 8080 to 10.1.2.3:40001 (tcp)".to_owned(),
                "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
            ]
        );
        assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&4));
    }

    #[test]
    fn refused_system_calls_are_their_own_line_and_layer() {
        let log = AuditLog::open(None).unwrap();
        let call = |call: &str, comm: &str| {
            Event::Syscall(SyscallEvent {
                pid: 9,
                comm: comm.into(),
                cgroup_id: 7,
                call: call.into(),
                why: crate::seccomp::Widens::Namespaces,
            })
        };
        log.record(call("unshare", "bwrap"));
        log.record(call("unshare", "bwrap"));
        log.record(call("clone with CLONE_NEWUSER", "chrome"));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 3 system calls refused (seccomp: calls that would widen the sandbox, which no policy allows): clone with CLONE_NEWUSER (chrome), unshare ×2 (bwrap)".to_owned(),
            ]
        );
        assert_eq!(log.refused(), BTreeMap::from([(Layer::Syscall, 3)]));
    }

    #[test]
    fn sockets_of_a_refused_kind_are_their_own_line() {
        let log = AuditLog::open(None).unwrap();
        let socket = |family: &str, protocol: &str, comm: &str| {
            Event::KernelNetwork(KernelNetEvent {
                pid: 9,
                tgid: 9,
                comm: comm.into(),
                cgroup_id: 7,
                hook: "sock_create".into(),
                family: family.into(),
                protocol: protocol.into(),
                destination: Destination::Inet("0.0.0.0:0".parse().unwrap()),
                target_absent: false,
                direction: Direction::Outbound,
                local_port: 0,
            })
        };
        log.record(socket("inet", "udplite", "python3"));
        log.record(socket("inet", "udplite", "python3"));
        log.record(socket("inet6", "icmp", "ping"));
        log.record(k("127.0.0.1:6379", "redis-cli"));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 1 connection refused: 127.0.0.1:6379 (redis-cli)".to_owned(),
                "lockrun: 3 sockets refused (a run may make inet sockets of three kinds only, TCP, MPTCP and UDP, and no policy changes that): inet udplite ×2 (python3), inet6 icmp (ping)".to_owned(),
            ]
        );
        assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&4));
    }

    #[test]
    fn inbound_drops_past_the_itemized_ones_are_counted_on_the_same_line() {
        let log = AuditLog::open(None).unwrap();
        log.record(inbound("10.1.2.3:40000", 9000, "udp"));
        log.record(Event::InboundNotItemized {
            count: 4999,
            per_cpu: 32,
        });
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 5000 packets from outside dropped (a run takes no traffic from beyond loopback, and no policy changes that): from 10.1.2.3 to port 9000 (udp), 4999 more not itemized (only the first 32 on each CPU are)".to_owned(),
            ]
        );
        assert_eq!(log.refused().get(&Layer::KernelNetwork), Some(&5000));
    }

    #[test]
    fn scoping_refusals_are_their_own_line_and_layer() {
        let log = AuditLog::open(None).unwrap();
        let sc = |target: ScopeTarget, comm: &str| {
            Event::Scope(ScopeEvent {
                pid: 7,
                comm: comm.into(),
                target,
                raw: String::new(),
            })
        };
        let sig = ScopeTarget::Signal {
            to_pid: 42,
            to_comm: "sshd".into(),
        };
        log.record(sc(sig.clone(), "kill"));
        log.record(sc(sig, "sh"));
        log.record(sc(
            ScopeTarget::AbstractUnixSocket {
                name: "dbus-x".into(),
            },
            "gdbus",
        ));
        log.record(sc(
            ScopeTarget::Ptrace {
                to_pid: 7,
                to_comm: "agent".into(),
            },
            "cat",
        ));
        assert_eq!(
            refusals(&log),
            vec![
                "lockrun: 4 attempts to reach processes outside the run refused (Landlock; no \
                 policy allows it): signal to pid 42 (sshd) ×2 (kill, sh), abstract unix socket \
                 @dbus-x (gdbus), ptrace or /proc access to pid 7 (agent) (cat)"
                    .to_owned()
            ]
        );
        assert_eq!(log.refused(), BTreeMap::from([(Layer::Scope, 4)]));
    }

    #[test]
    fn proxy_refusals_without_a_target_are_named_by_their_reason() {
        let log = AuditLog::open(None).unwrap();
        let cap = "too many connections (run.max_connections = 256)";
        log.record(proxy("", 0, ProxyVerdict::Overloaded, cap, 503));
        log.record(proxy("", 0, ProxyVerdict::Overloaded, cap, 503));
        log.record(proxy(
            "evil.example",
            443,
            ProxyVerdict::NotListed,
            "evil.example is not in the allowlist",
            403,
        ));
        assert_eq!(
            refusals(&log),
            vec![format!(
                "lockrun: 3 proxy requests refused: ({cap}) ×2, evil.example:443"
            )]
        );
    }

    fn proxy(host: &str, port: u16, verdict: ProxyVerdict, reason: &str, status: u16) -> Event {
        Event::Proxy(ProxyEvent {
            method: if host.is_empty() { "" } else { "CONNECT" }.into(),
            host: host.into(),
            port,
            dialed: None,
            allowed: verdict.allowed(),
            reason: reason.into(),
            status,
            verdict,
        })
    }

    /// A request the policy allowed whose upstream failed (its name did not
    /// resolve, no connection) is said apart, after the refusals and their
    /// pointer to policy lines, and counted as no refusal; the credentials
    /// challenge is not said at all.
    #[test]
    fn an_allowed_request_whose_upstream_failed_is_not_called_refused() {
        let log = AuditLog::open(None).unwrap();
        let unresolved = "resolving api.example.com failed: Name or service not known";
        for _ in 0..2 {
            let failed = ProxyVerdict::UpstreamFailed;
            log.record(proxy("api.example.com", 443, failed, unresolved, 502));
        }
        log.record(proxy(
            "git.example.com",
            443,
            ProxyVerdict::NoCredentials,
            "proxy credentials required",
            407,
        ));
        assert_eq!(
            log.summary(),
            vec![format!(
                "lockrun: 2 proxy requests the policy allowed failed upstream, not refused: api.example.com:443 ×2 ({unresolved})"
            )]
        );
        assert!(log.refused().is_empty());
        log.record(proxy(
            "evil.example",
            443,
            ProxyVerdict::NotListed,
            "evil.example is not in the allowlist",
            403,
        ));
        let lines = log.summary();
        assert_eq!(
            lines[0],
            "lockrun: 1 proxy request refused: evil.example:443"
        );
        assert!(lines[1].contains("--audit-log FILE"), "{lines:?}");
        assert!(
            lines[2].contains("failed upstream, not refused"),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 3);
        assert_eq!(log.refused(), BTreeMap::from([(Layer::Proxy, 1)]));
    }

    #[test]
    fn records_round_trip() {
        let rec = Record {
            ts_ms: 5,
            event: k("127.0.0.1:1", "x"),
        };
        let line = serde_json::to_string(&rec).unwrap();
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back.event, rec.event);
    }
}
