//! The end-of-run summary: the run's refusals counted as they are recorded,
//! by layer and by target, and said in a few lines on stderr.
//!
//! What lockrun keeps for it is bounded, whatever the run does: at most
//! [`MAX_TARGETS`] targets of each kind (the refusals of any further target
//! are counted, and the summary says how many went unnamed), each named by
//! at most [`MAX_TARGET_BYTES`] bytes, with at most [`MAX_COMMANDS`]
//! commands. The audit log has every refusal whole; a run that refuses
//! itself a million distinct names, each as long as a request may be, costs
//! lockrun no more memory than one that refuses a thousand.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use super::{AuditLoss, Destination, Event, Layer, ProxyVerdict, RanOut, ScopeTarget};
use crate::policy::size;

/// The most distinct targets kept of one kind (destinations refused, paths,
/// proxy targets, calls, …).
pub const MAX_TARGETS: usize = 1024;

/// The most bytes of a target's name kept (a host, a path): longer ones end
/// with `…`.
pub const MAX_TARGET_BYTES: usize = 200;

/// The most commands named for one target.
pub const MAX_COMMANDS: usize = 8;

/// The most targets one summary line names; the rest are counted (the
/// audit log has each). A `ps` beside many other runs' processes, each
/// hidden from the run's `/proc` and recorded, would otherwise make a line
/// of hundreds.
pub(super) const SHOWN_PER_LINE: usize = 12;

/// `s`, or its first [`MAX_TARGET_BYTES`] bytes (at a character's
/// boundary) and `…`.
#[must_use]
pub fn bounded(s: &str) -> String {
    if s.len() <= MAX_TARGET_BYTES {
        return s.to_owned();
    }
    let mut end = MAX_TARGET_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The refusals of one kind, by target: each target's count and the
/// commands refused it, for at most [`MAX_TARGETS`] targets; `unnamed`
/// counts the refusals of the targets past them.
struct Targets<K> {
    by: BTreeMap<K, (u64, Vec<String>)>,
    unnamed: u64,
}

impl<K> Default for Targets<K> {
    fn default() -> Self {
        Self {
            by: BTreeMap::new(),
            unnamed: 0,
        }
    }
}

impl<K: Ord> Targets<K> {
    /// One more refusal of `target`, by `comm` (named once per target, up
    /// to [`MAX_COMMANDS`]; empty: no command known).
    fn seen(&mut self, target: K, comm: &str) {
        let full = self.by.len() >= MAX_TARGETS;
        match self.by.get_mut(&target) {
            Some(entry) => add_comm(entry, comm),
            None if full => self.unnamed += 1,
            None => add_comm(self.by.entry(target).or_default(), comm),
        }
    }

    fn total(&self) -> u64 {
        self.by.values().map(|(n, _)| n).sum::<u64>() + self.unnamed
    }

    /// `<target> ×2 (cmd, cmd)` for the first [`SHOWN_PER_LINE`] targets in
    /// order, then how many more there were.
    fn shown(&self, show: impl Fn(&K) -> String) -> Vec<String> {
        let mut parts: Vec<String> = self
            .by
            .iter()
            .take(SHOWN_PER_LINE)
            .map(|(k, (n, comms))| {
                let comms: Vec<&str> = comms
                    .iter()
                    .map(String::as_str)
                    .filter(|c| !c.is_empty())
                    .collect();
                if comms.is_empty() {
                    format!("{}{}", show(k), times(*n))
                } else {
                    format!("{}{} ({})", show(k), times(*n), comms.join(", "))
                }
            })
            .collect();
        if self.by.len() > SHOWN_PER_LINE {
            parts.push(format!("{} more targets", self.by.len() - SHOWN_PER_LINE));
        }
        if self.unnamed > 0 {
            parts.push(format!(
                "{} more {} of further targets, not kept by name (lockrun keeps {MAX_TARGETS} \
                 targets of a kind; the audit log names each)",
                self.unnamed,
                plural(self.unnamed, "refusal", "refusals")
            ));
        }
        parts
    }
}

fn add_comm(entry: &mut (u64, Vec<String>), comm: &str) {
    entry.0 += 1;
    if entry.1.len() < MAX_COMMANDS && !entry.1.iter().any(|c| c == comm) {
        entry.1.push(bounded(comm));
    }
}

/// A run's refusals, as the summary counts them.
#[derive(Default)]
pub(super) struct Tally {
    refused: BTreeMap<Layer, u64>,
    lost: u64,
    /// Packets from outside counted but not itemized, and how many per CPU are.
    inbound_unitemized: u64,
    inbound_per_cpu: u64,
    /// Kernel network refusals by destination.
    kernel: Targets<Destination>,
    /// Connects to unix sockets that do not exist on the host (harmless).
    absent: Targets<Destination>,
    /// Packets from outside dropped, by peer address, the run's port and
    /// the protocol. No commands: a packet is judged in no task's context.
    inbound: Targets<(std::net::IpAddr, u16, String)>,
    /// Packets of the run's sockets to outside dropped, by the run's port,
    /// the peer and the protocol.
    outbound_packets: Targets<(u16, SocketAddr, String)>,
    /// Sockets of a kind a run may not make, by kind (`inet udplite`).
    sockets: Targets<String>,
    /// Proxy refusals by target (`host:port`, or the reason of one without).
    proxy: Targets<String>,
    /// Connections to the proxy dropped unanswered, its cap and how many
    /// over it were answered.
    proxy_dropped: Option<(u64, usize, usize)>,
    /// Requests the policy allowed whose upstream failed, by target: count
    /// and the latest reason.
    upstream: BTreeMap<String, (u64, String)>,
    upstream_unnamed: u64,
    /// Hosts whose inspected TLS a client refused (the run's certificate).
    cert_refused: std::collections::BTreeSet<String>,
    /// Filesystem refusals by path and what was refused there
    /// ([`refused_as`]).
    fs: Targets<(String, String)>,
    scope: Targets<ScopeTarget>,
    syscalls: Targets<String>,
    /// Filesystem and scope refusals whose record named no process.
    no_process: u64,
    /// Kernel audit records that did not reach lockrun, once per cause.
    audit_loss: Vec<AuditLoss>,
    /// The run's task limit, the forks refused, and where the tasks ran out.
    tasks: Option<(u32, u64, RanOut)>,
    /// The run's memory limit, the processes killed out of memory, and where it ran out.
    memory: Option<(u64, u64, RanOut)>,
}

impl Tally {
    /// Count `event`.
    pub(super) fn record(&mut self, event: &Event) {
        let t = self;
        match event {
            Event::KernelNetwork(k) => t.kernel_network(k),
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
                let key = bounded(&p.target());
                let full = t.upstream.len() >= MAX_TARGETS;
                match t.upstream.get_mut(&key) {
                    Some(e) => {
                        e.0 += 1;
                        e.1 = bounded(&p.reason);
                    }
                    None if full => t.upstream_unnamed += 1,
                    None => {
                        t.upstream.insert(key, (1, bounded(&p.reason)));
                    }
                }
            }
            Event::Proxy(p) if p.refused() => {
                *t.refused.entry(Layer::Proxy).or_default() += 1;
                if p.verdict == ProxyVerdict::ClientRefusedCert
                    && t.cert_refused.len() < MAX_TARGETS
                {
                    t.cert_refused.insert(bounded(&p.host));
                }
                // A connection refused before any request (the cap, a head
                // that never came) has no target: its reason names it.
                let key = if p.host.is_empty() {
                    format!("({})", bounded(&p.reason))
                } else {
                    bounded(&p.target())
                };
                t.proxy.seen(key, "");
            }
            Event::ProxyConnectionsDropped {
                count,
                max_connections,
                answered,
            } => {
                *t.refused.entry(Layer::Proxy).or_default() += count;
                t.proxy_dropped = Some((*count, *max_connections, *answered));
            }
            Event::Scope(sc) => {
                *t.refused.entry(Layer::Scope).or_default() += 1;
                t.no_process += u64::from(sc.comm.is_empty());
                let target = match &sc.target {
                    ScopeTarget::AbstractUnixSocket { name } => ScopeTarget::AbstractUnixSocket {
                        name: bounded(name),
                    },
                    other => other.clone(),
                };
                t.scope.seen(target, &sc.comm);
            }
            Event::Syscall(sc) => {
                *t.refused.entry(Layer::Syscall).or_default() += 1;
                t.syscalls.seen(bounded(&sc.call), &sc.comm);
            }
            Event::Filesystem(f) => {
                *t.refused.entry(Layer::Filesystem).or_default() += 1;
                let path = f
                    .path
                    .as_deref()
                    .map_or_else(|| "(path unknown)".to_owned(), bounded);
                t.no_process += u64::from(f.comm.is_empty());
                t.fs.seen((path, refused_as(&f.access)), &f.comm);
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

    fn kernel_network(&mut self, k: &super::KernelNetEvent) {
        *self.refused.entry(Layer::KernelNetwork).or_default() += 1;
        if let Some(peer) = k.inbound_peer() {
            self.inbound
                .seen((peer, k.local_port, bounded(&k.protocol)), "");
        } else if let Some(peer) = k.outbound_packet_peer() {
            self.outbound_packets
                .seen((k.local_port, peer, bounded(&k.protocol)), "");
        } else if let Some(kind) = k.refused_socket_kind() {
            self.sockets.seen(bounded(&kind), &k.comm);
        } else {
            let dest = match &k.destination {
                Destination::Unix(p) => Destination::Unix(bounded(p)),
                inet @ Destination::Inet(_) => inet.clone(),
            };
            let to = if k.target_absent {
                &mut self.absent
            } else {
                &mut self.kernel
            };
            to.seen(dest, &k.comm);
        }
    }

    /// Refusals so far, per layer.
    pub(super) fn refused(&self) -> BTreeMap<Layer, u64> {
        self.refused.clone()
    }

    /// The end-of-run summary lines: what was refused, and requests the
    /// policy allowed whose upstream failed (empty when neither). `log`:
    /// where the details are, if anywhere.
    pub(super) fn lines(&self, log: Option<&Path>) -> Vec<String> {
        let t = self;
        let mut lines = Vec::new();
        t.packet_lines(&mut lines);
        let n_kernel = t.kernel.total() + t.lost;
        if n_kernel > 0 {
            let mut parts = t.kernel.shown(show_dest);
            if t.lost > 0 {
                parts.push(format!("{} more not delivered (ring buffer full)", t.lost));
            }
            lines.push(format!(
                "lockrun: {n_kernel} {} refused: {}",
                plural(n_kernel, "connection", "connections"),
                parts.join(", ")
            ));
        }
        let n_sockets = t.sockets.total();
        if n_sockets > 0 {
            lines.push(format!(
                "lockrun: {n_sockets} {} refused (a run may make inet sockets of three kinds only, TCP, MPTCP and UDP, and no policy changes that): {}",
                plural(n_sockets, "socket", "sockets"),
                t.sockets.shown(String::clone).join(", ")
            ));
        }
        let n_absent = t.absent.total();
        if n_absent > 0 {
            lines.push(format!(
                "lockrun: {n_absent} {} to unix sockets that do not exist here refused (harmless: they would have failed anyway): {}",
                plural(n_absent, "connection", "connections"),
                t.absent.shown(show_dest).join(", ")
            ));
        }
        let dropped = t.proxy_dropped.map_or(0, |(n, ..)| n);
        let n_proxy = t.proxy.total() + dropped;
        if n_proxy > 0 {
            let mut parts = t.proxy.shown(String::clone);
            if let Some((n, max, answered)) = t.proxy_dropped {
                parts.push(format!(
                    "{n} {} dropped unanswered (over run.max_connections = {max}, past the \
                     first {answered} such, answered with a 503)",
                    plural(n, "connection", "connections")
                ));
            }
            lines.push(format!(
                "lockrun: {n_proxy} proxy {} refused: {}",
                plural(n_proxy, "request", "requests"),
                parts.join(", ")
            ));
        }
        let n_fs = t.fs.total();
        if n_fs > 0 {
            lines.push(format!(
                "lockrun: {n_fs} filesystem {} refused: {}",
                plural(n_fs, "access", "accesses"),
                t.fs.shown(|(path, what)| format!("{what} {path}"))
                    .join(", ")
            ));
        }
        let n_scope = t.scope.total();
        if n_scope > 0 {
            lines.push(format!(
                "lockrun: {n_scope} {} to reach processes outside the run refused (Landlock; no policy allows it): {}",
                plural(n_scope, "attempt", "attempts"),
                t.scope.shown(ToString::to_string).join(", ")
            ));
        }
        let n_calls = t.syscalls.total();
        if n_calls > 0 {
            lines.push(format!(
                "lockrun: {n_calls} system {} refused (seccomp: calls that would widen the sandbox, which no policy allows): {}",
                plural(n_calls, "call", "calls"),
                t.syscalls.shown(String::clone).join(", ")
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
        lines.extend(t.cert_line());
        for loss in &t.audit_loss {
            lines.push(format!("lockrun: {loss}"));
        }
        if !lines.is_empty() {
            lines.push(match log {
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

    /// The hosts whose inspected TLS a client refused, and why it cannot
    /// reach them.
    fn cert_line(&self) -> Option<String> {
        if self.cert_refused.is_empty() {
            return None;
        }
        let hosts: Vec<&str> = self.cert_refused.iter().map(String::as_str).collect();
        let hosts = hosts.join(", ");
        Some(format!(
            "lockrun: a client refused the run's certificate for {hosts}: it does not trust the \
             run's CA bundle (it pins the host's key, or reads its own CA list); the proxy \
             inspects the requests of {hosts} (secrets or request rules), so such a client \
             cannot reach it"
        ))
    }

    /// Requests the policy allowed whose upstream failed, by target, each
    /// with the latest cause.
    fn upstream_line(&self) -> Option<String> {
        let n: u64 = self.upstream.values().map(|(n, _)| n).sum::<u64>() + self.upstream_unnamed;
        let mut parts: Vec<String> = self
            .upstream
            .iter()
            .take(SHOWN_PER_LINE)
            .map(|(h, (n, why))| format!("{h}{} ({why})", times(*n)))
            .collect();
        if self.upstream.len() > SHOWN_PER_LINE {
            parts.push(format!(
                "{} more targets",
                self.upstream.len() - SHOWN_PER_LINE
            ));
        }
        if self.upstream_unnamed > 0 {
            parts.push(format!(
                "{} more to further targets, not kept by name",
                self.upstream_unnamed
            ));
        }
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
        let n_inbound = self.inbound.total() + self.inbound_unitemized;
        if n_inbound > 0 {
            let mut parts = self
                .inbound
                .shown(|(ip, port, protocol)| format!("from {ip} to port {port} ({protocol})"));
            if self.inbound_unitemized > 0 {
                parts.push(format!(
                    "{} more not itemized (only the first {} on each CPU are)",
                    self.inbound_unitemized, self.inbound_per_cpu
                ));
            }
            // Over loopback, a port the policy exposes lets this host's
            // processes in; from beyond it, nothing does.
            let why = if self.inbound.by.keys().any(|(ip, _, _)| ip.is_loopback()) {
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
        let n_out = self.outbound_packets.total();
        if n_out > 0 {
            let parts = self
                .outbound_packets
                .shown(|(port, peer, protocol)| format!("from port {port} to {peer} ({protocol})"));
            lines.push(format!(
                "lockrun: {n_out} {} to outside dropped (a run's sockets exchange packets only with loopback, and no policy changes that): {}",
                plural(n_out, "packet", "packets"),
                parts.join(", ")
            ));
        }
    }
}

/// ` ×n` after what was seen more than once.
pub(crate) fn times(n: u64) -> String {
    if n > 1 {
        format!(" ×{n}")
    } else {
        String::new()
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
fn tasks_refused_line(limit: u32, refused: u64, ran_out: RanOut) -> String {
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
fn out_of_memory_line(limit: u64, killed: u64, ran_out: RanOut) -> String {
    let limit = size(limit);
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
