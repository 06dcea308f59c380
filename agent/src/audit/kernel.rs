//! Filesystem refusals from the kernel: Landlock (ABI 7, Linux 6.15) writes
//! each denial to the kernel audit subsystem, and this reader collects the
//! ones of its own run into the run's audit log. Below ABI 7 the same
//! reader takes kernel audit's records of the run's refused calls instead
//! ([`super::syscalls`]).
//!
//! How:
//! - A `NETLINK_AUDIT` socket bound to the read-only multicast group
//!   `AUDIT_NLGRP_READLOG` (needs `CAP_AUDIT_READ`). It does not take the
//!   audit daemon's place: when auditd owns the unicast socket, both receive
//!   every record.
//! - Landlock logs only while audit is enabled (`audit_enabled`). If it is
//!   off, lockrun turns it on (`AUDIT_SET`, needs `CAP_AUDIT_CONTROL`) and
//!   says so in the log; it leaves it on, since other runs may rely on it.
//!   With no audit daemon, the kernel also prints records to its own log.
//! - The child restricts itself with `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`
//!   (otherwise nothing after `execve` is logged).
//! - A denial arrives as records sharing one serial: `LANDLOCK_ACCESS` (1423:
//!   domain, blockers, path), `LANDLOCK_DOMAIN` (1424, first time only: the pid
//!   that created the domain — our child) and `SYSCALL` (1300: pid, comm,
//!   syscall). The run's domain is the one whose creator is the run's child.
//! - At the end of the run a user message (`AUDIT_USER`) is sent through the
//!   same kernel queue; once it comes back, every earlier record has been read.
//! - The kernel drops a refusal's record, rather than wait, when more than its
//!   backlog limit (64 by default) are waiting for their reader, as a burst of
//!   refusals from several processes makes them; it only counts them
//!   (`lost`). Its count is read before the command starts and once no task
//!   of the run is left; a rise is reported as [`AuditLoss::Dropped`], so a
//!   short account is never shown as a whole one.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};

use super::syscalls::{self, Watch};
use super::{AuditLog, AuditLoss, Event, FsEvent, Layer, ScopeEvent, ScopeTarget};

const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;
const AUDIT_USER: u16 = 1005;
const AUDIT_SYSCALL: u16 = 1300;
const AUDIT_PATH: u16 = 1302;
const AUDIT_SOCKADDR: u16 = 1306;
const AUDIT_CWD: u16 = 1307;
const AUDIT_OBJ_PID: u16 = 1318;
const AUDIT_EOE: u16 = 1320;
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
const AUDIT_NLGRP_READLOG: u32 = 1;
const AUDIT_STATUS_ENABLED: u32 = 1;
pub(super) const NLMSG_ERROR: u16 = 2;
pub(super) const NLM_F_REQUEST: u16 = 1;
pub(super) const NLM_F_ACK: u16 = 4;
pub(super) const NLMSG_HDRLEN: usize = 16;

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

fn sys(call: &'static str) -> impl FnOnce(nix::Error) -> KernelAuditError {
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

pub(super) fn nl_socket(groups: u32) -> Result<OwnedFd, KernelAuditError> {
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

pub(super) fn nl_message(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
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
fn nl_split(buf: &[u8]) -> Vec<(u16, &[u8])> {
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
fn ask(fd: &OwnedFd, ty: u16, payload: &[u8]) -> Result<(), KernelAuditError> {
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
fn answer(fd: &OwnedFd, ty: u16) -> Result<Vec<u8>, KernelAuditError> {
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

fn request(fd: &OwnedFd, ty: u16, payload: &[u8]) -> Result<Vec<u8>, KernelAuditError> {
    ask(fd, ty, payload)?;
    answer(fd, ty)
}

/// The kernel's `struct audit_status`, as `AUDIT_GET` answers it.
fn parse_status(p: &[u8]) -> AuditStatus {
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

/// One parsed audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AuditRecord {
    pub(super) ty: u16,
    pub(super) serial: u64,
    pub(super) fields: HashMap<String, String>,
    pub(super) text: String,
}

/// Parse `audit(1795938126.349:3): key=value key="quoted" …`. Values the
/// kernel hex-encodes (untrusted strings with spaces or quotes) are decoded.
pub(super) fn parse_record(ty: u16, payload: &[u8]) -> Option<AuditRecord> {
    let text = String::from_utf8_lossy(payload)
        .trim_end_matches('\0')
        .trim()
        .to_owned();
    let rest = text.strip_prefix("audit(")?;
    // An `EOE` record has no body: `audit(…): `, trimmed to `audit(…):`.
    let (stamp, body) = rest
        .split_once("): ")
        .or_else(|| Some((rest.strip_suffix("):")?, "")))?;
    let serial = stamp.rsplit_once(':')?.1.parse().ok()?;
    let mut fields = HashMap::new();
    let mut s = body;
    while let Some(eq) = s.find('=') {
        let key = s[..eq].trim().to_owned();
        let after = &s[eq + 1..];
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_owned(), &q[end + 1..]),
                None => (q.to_owned(), ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let raw = &after[..end];
            let decoded = if matches!(
                key.as_str(),
                "path" | "comm" | "ocomm" | "exe" | "name" | "cwd"
            ) {
                unhex(raw)
            } else {
                None
            };
            (decoded.unwrap_or_else(|| raw.to_owned()), &after[end..])
        };
        fields.insert(key, value);
        s = next.trim_start();
    }
    Some(AuditRecord {
        ty,
        serial,
        fields,
        text,
    })
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) || s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect();
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// How long the records of one serial wait for their `EOE` before they
/// are taken as they are: a task the host's audit rules leave out of
/// syscall auditing (`-a task,never`, which some distributions ship) has
/// no audit context, and each of its records comes alone, with a serial of
/// its own and no `SYSCALL` or `EOE` after it. A refused call returns at
/// once, so in a task that has a context the end follows within
/// microseconds.
const NO_END_AFTER: Duration = Duration::from_secs(1);

/// Turns the kernel's records into the run's filesystem events.
#[derive(Default)]
struct Correlator {
    /// The Landlock domains created by the run's child.
    domains: Vec<String>,
    /// Records by serial, with when the first came, until the event's end
    /// (EOE), [`NO_END_AFTER`] or a flush.
    pending: HashMap<u64, (Instant, Vec<AuditRecord>)>,
    /// Whether a refusal came without its `SYSCALL` record (said once).
    no_syscall_said: bool,
    /// Below Landlock ABI 7: the run whose refused calls kernel audit
    /// records ([`super::syscalls`]).
    watch: Option<Arc<Watch>>,
}

impl Correlator {
    fn push(&mut self, rec: AuditRecord, child: u32, now: Instant, out: &mut Vec<Event>) {
        if rec.ty == AUDIT_EOE {
            // A Landlock denial ended before the reader was told the run's
            // child (the command refused at once): whose domain it is, is
            // not known yet. It waits, ended, for the next `expire`.
            if let Some((_, group)) = self.pending.get_mut(&rec.serial) {
                if child == 0 && group.iter().any(|r| r.ty == AUDIT_LANDLOCK_ACCESS) {
                    group.push(rec);
                    return;
                }
            }
            if let Some((_, group)) = self.pending.remove(&rec.serial) {
                self.finish(&group, child, out);
            }
            return;
        }
        if matches!(
            rec.ty,
            AUDIT_LANDLOCK_ACCESS | AUDIT_LANDLOCK_DOMAIN | AUDIT_SYSCALL
        ) {
            // Learnt now: without a context, a denial's domain record comes
            // after its access record, under the next serial.
            learn(&mut self.domains, &rec, child);
            self.pending
                .entry(rec.serial)
                .or_insert_with(|| (now, Vec::new()))
                .1
                .push(rec);
        } else if matches!(
            rec.ty,
            AUDIT_CWD | AUDIT_PATH | AUDIT_SOCKADDR | AUDIT_OBJ_PID
        ) {
            // A refused call's names, address or signal target, after its
            // SYSCALL record (the kernel writes that first): kept for a call
            // of the watched run only.
            let Some(w) = &self.watch else {
                return;
            };
            let uid = w.login_uid.to_string();
            if let Some((_, group)) = self.pending.get_mut(&rec.serial) {
                if group
                    .iter()
                    .any(|r| r.ty == AUDIT_SYSCALL && r.fields.get("auid") == Some(&uid))
                {
                    group.push(rec);
                }
            }
        }
    }

    /// Take the records whose end has not come within [`NO_END_AFTER`] as
    /// they are (see there), and, once the run's child is known, those that
    /// ended waiting for it, oldest first.
    fn expire(&mut self, child: u32, now: Instant, out: &mut Vec<Event>) {
        let mut old: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, (first, group))| {
                now.saturating_duration_since(*first) >= NO_END_AFTER
                    || (child != 0 && group.iter().any(|r| r.ty == AUDIT_EOE))
            })
            .map(|(s, _)| *s)
            .collect();
        self.finish_serials(&mut old, child, out);
    }

    fn flush(&mut self, child: u32, out: &mut Vec<Event>) {
        let mut all: Vec<u64> = self.pending.keys().copied().collect();
        self.finish_serials(&mut all, child, out);
    }

    fn finish_serials(&mut self, serials: &mut [u64], child: u32, out: &mut Vec<Event>) {
        // The child may have been named since a domain record came.
        for (_, group) in self.pending.values() {
            for r in group {
                learn(&mut self.domains, r, child);
            }
        }
        serials.sort_unstable();
        for s in serials.iter() {
            if let Some((_, group)) = self.pending.remove(s) {
                self.finish(&group, child, out);
            }
        }
    }

    fn finish(&mut self, group: &[AuditRecord], child: u32, out: &mut Vec<Event>) {
        for r in group {
            learn(&mut self.domains, r, child);
        }
        let syscall = group.iter().find(|r| r.ty == AUDIT_SYSCALL);
        if let Some(w) = &self.watch {
            if !group.iter().any(|r| r.ty == AUDIT_LANDLOCK_ACCESS) {
                out.extend(syscalls::event(group, w, &syscalls::records::Proc));
                return;
            }
        }
        for r in group.iter().filter(|r| r.ty == AUDIT_LANDLOCK_ACCESS) {
            let Some(domain) = r.fields.get("domain") else {
                continue;
            };
            if !self.domains.contains(domain) {
                continue;
            }
            let blockers = r
                .fields
                .get("blockers")
                .map(String::as_str)
                .unwrap_or_default();
            let dev = r.fields.get("dev").map(String::as_str);
            if create_check_of_an_existing_file(blockers, dev, syscall) {
                continue;
            }
            if syscall.is_none() && !self.no_syscall_said {
                self.no_syscall_said = true;
                out.push(Event::Notice {
                    layer: Layer::Filesystem,
                    message: NO_SYSCALL_RECORD.into(),
                });
            }
            // Empty without the SYSCALL record: the kernel did not say.
            let pid = syscall
                .and_then(|s| s.fields.get("pid"))
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            let comm = syscall
                .and_then(|s| s.fields.get("comm"))
                .cloned()
                .unwrap_or_default();
            let mut raw: Vec<&str> = vec![r.text.as_str()];
            raw.extend(syscall.map(|s| s.text.as_str()));
            let raw = raw.join("\n");
            if let Some(target) = scope_target(blockers, &r.fields) {
                out.push(Event::Scope(ScopeEvent {
                    pid,
                    comm,
                    target,
                    raw,
                }));
                continue;
            }
            out.push(Event::Filesystem(FsEvent {
                pid,
                comm,
                path: r.fields.get("path").cloned(),
                access: blockers
                    .split(',')
                    .filter(|b| !b.is_empty())
                    .map(str::to_owned)
                    .collect(),
                raw,
                other_name_of: None,
            }));
        }
    }
}

/// A domain record of a domain the run's child created: the domain is the
/// run's (added to `domains`). Any other record is passed over.
fn learn(domains: &mut Vec<String>, r: &AuditRecord, child: u32) {
    if r.ty != AUDIT_LANDLOCK_DOMAIN || child == 0 {
        return;
    }
    let created_by_child = r.fields.get("pid").and_then(|p| p.parse::<u32>().ok()) == Some(child);
    if created_by_child && r.fields.get("status").map(String::as_str) == Some("allocated") {
        if let Some(d) = r.fields.get("domain") {
            if !domains.contains(d) {
                domains.push(d.clone());
            }
        }
    }
}

/// What a denial of a reach outside the run tried to reach:
/// `blockers=scope.signal` and `blockers=ptrace` name the process (`opid`,
/// `ocomm`), `blockers=scope.abstract_unix_socket` the socket (`path`,
/// hex-encoded, starting with its NUL). `None` for any other blocker (the
/// filesystem's).
fn scope_target(blockers: &str, fields: &HashMap<String, String>) -> Option<ScopeTarget> {
    let opid = || fields.get("opid").and_then(|p| p.parse().ok()).unwrap_or(0);
    let ocomm = || fields.get("ocomm").cloned().unwrap_or_default();
    match blockers {
        "scope.signal" => Some(ScopeTarget::Signal {
            to_pid: opid(),
            to_comm: ocomm(),
        }),
        "ptrace" => Some(ScopeTarget::Ptrace {
            to_pid: opid(),
            to_comm: ocomm(),
        }),
        "scope.abstract_unix_socket" => Some(ScopeTarget::AbstractUnixSocket {
            name: fields
                .get("path")
                .map(|p| p.strip_prefix('\0').unwrap_or(p).to_owned())
                .unwrap_or_default(),
        }),
        _ => None,
    }
}

/// Whether a denial is the kernel checking a create it then did not need:
/// `open(O_CREAT)` of a name whose dentry is not cached (procfs revalidates
/// every one: `> /dev/stdout` opens `/proc/self/fd/1`) asks the security
/// hooks whether the file could be made before looking it up, and when it
/// exists the refusal is dropped and the open goes on. Landlock logs it all
/// the same; the SYSCALL record shows the call succeeded. Only a refusal
/// of making something, in a call that succeeded, is this; any other
/// blocker, or a failed call, is a refusal the command saw.
///
/// Without the SYSCALL record (see [`NO_END_AFTER`]) the call's outcome is
/// unknown; a refusal of making something on procfs (`dev="proc"`) is
/// still this, since no file can be made there: it never decided a call.
fn create_check_of_an_existing_file(
    blockers: &str,
    dev: Option<&str>,
    syscall: Option<&AuditRecord>,
) -> bool {
    let only_making =
        !blockers.is_empty() && blockers.split(',').all(|b| b.starts_with("fs.make_"));
    match syscall {
        Some(s) => only_making && s.fields.get("success").map(String::as_str) == Some("yes"),
        None => only_making && dev == Some("proc"),
    }
}

/// The notice for refusals that came without their SYSCALL record.
pub const NO_SYSCALL_RECORD: &str = "the kernel gave Landlock's refusals no syscall record: the \
    host's audit rules leave this run's processes out of syscall auditing (an `-a task,never` \
    rule, as some distributions ship), so each refusal is shown without the process that made \
    it, and a check the kernel makes before creating a file that then exists cannot be told \
    from a refusal (except on /proc)";

/// The reader thread of one run.
pub struct KernelAudit {
    child: Arc<AtomicU32>,
    /// Below Landlock ABI 7: the run whose refused calls to take.
    calls: Arc<std::sync::OnceLock<Arc<Watch>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Closed by the reader thread when it returns.
    done: std::sync::mpsc::Receiver<()>,
    /// Sent to (or closed) once the reader has asked the kernel's status.
    asked: std::sync::mpsc::Receiver<()>,
    log: Arc<AuditLog>,
    marker: String,
    marker_sent: bool,
}

impl KernelAudit {
    /// Subscribe to the kernel's audit records, turning audit on if it is off.
    /// A notice in `log` says what was done.
    ///
    /// Whether audit is on is asked by the reader thread, not here: the
    /// kernel sends that reply from a kernel thread it creates for it (~1 ms,
    /// and it held up the run's cgroup creation beside it). Audit is normally
    /// on already (lockrun leaves it on); the records are buffered in the
    /// socket meanwhile.
    pub fn start(log: Arc<AuditLog>, run_id: &str) -> Result<Self, KernelAuditError> {
        let fd = nl_socket(AUDIT_NLGRP_READLOG)?;
        setsockopt(
            &fd,
            sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(0, 50_000),
        )
        .map_err(sys("setsockopt(SO_RCVTIMEO)"))?;
        // Room for a burst of denials between two reads.
        let _ = setsockopt(&fd, sockopt::RcvBufForce, &(4 << 20));
        let child = Arc::new(AtomicU32::new(0));
        let calls = Arc::new(std::sync::OnceLock::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let marker = format!("lockrun-audit-sync-{run_id}");
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let (asked_tx, asked) = std::sync::mpsc::channel::<()>();
        let thread = {
            let (child, calls, stop, marker, log) = (
                child.clone(),
                calls.clone(),
                stop.clone(),
                marker.clone(),
                log.clone(),
            );
            std::thread::Builder::new()
                .name("lockrun-kaudit".into())
                .spawn(move || {
                    let baseline = take_baseline(&log, asked_tx);
                    let read = read_loop(&fd, &log, (&child, &calls), &stop, &marker);
                    if let Some(b) = baseline {
                        check_loss(&log, &b, &read);
                    }
                    drop(done_tx);
                })
                .map_err(|e| KernelAuditError::Syscall {
                    call: "clone (audit reader thread)",
                    source: nix::Error::from_raw(e.raw_os_error().unwrap_or(0)),
                })?
        };
        Ok(Self {
            child,
            calls,
            stop,
            thread: Some(thread),
            done,
            asked,
            log,
            marker,
            marker_sent: false,
        })
    }

    /// Wait (at most 1 s) until the reader has asked the kernel's count of
    /// dropped records, which is read in the asking call: call before the
    /// command starts, so that no record of the run is dropped uncounted.
    /// Normally it was asked long before.
    pub fn wait_for_baseline(&self) {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            self.asked.recv_timeout(Duration::from_secs(1))
        {
            self.log.record(Event::Notice {
                layer: Layer::Filesystem,
                message: "the kernel's count of dropped audit records was read after the command \
                          started: records dropped in its first moments would not be told"
                    .into(),
            });
        }
    }

    /// The run's child: the process that creates the run's Landlock domain.
    pub fn watch(&self, child_pid: u32) {
        self.child.store(child_pid, Ordering::SeqCst);
    }

    /// Below Landlock ABI 7: take the refused calls kernel audit records
    /// for the run of `watch.login_uid` ([`super::syscalls`]). Before the
    /// command starts; once.
    pub fn watch_calls(&self, watch: Watch) {
        let _ = self.calls.set(Arc::new(watch));
    }

    /// Mark the end of the run in the kernel's audit stream: the reader stops
    /// once it reads the mark, so every record queued before it is read.
    /// Call once no task of the run is left; [`finish`](Self::finish) waits.
    pub fn send_marker(&mut self) {
        if self.marker_sent {
            return;
        }
        self.marker_sent = true;
        // NUL-terminated: the kernel drops the last byte of a user message otherwise.
        let mut text = self.marker.clone().into_bytes();
        text.push(0);
        let sent = nl_socket(0).and_then(|fd| {
            send(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                &nl_message(AUDIT_USER, NLM_F_REQUEST, 1, &text),
                MsgFlags::empty(),
            )
            .map(drop)
            .map_err(sys("send(AUDIT_USER)"))
        });
        if sent.is_err() {
            self.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Wait until every record the kernel queued before the marker has been
    /// read (bounded: 2 s), then stop.
    pub fn finish(mut self) {
        self.send_marker();
        if let Some(t) = self.thread.take() {
            // Disconnected when the reader returns; a timeout stops it.
            let _ = self.done.recv_timeout(Duration::from_secs(2));
            self.stop.store(true, Ordering::SeqCst);
            let _ = t.join();
        }
    }
}

/// Ask the kernel's audit status, and say once it is asked: the kernel
/// reads its figures in the asking call, so from then on its count of
/// dropped records is the run's baseline. Then turn audit on if it is off,
/// and say so in `log` (as a notice: the run goes on either way, its
/// filesystem refusals are what is at stake). The status, if it came.
fn take_baseline(log: &AuditLog, asked: std::sync::mpsc::Sender<()>) -> Option<AuditStatus> {
    let notice = |message: String| {
        log.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    };
    let st = nl_socket(0).and_then(|fd| {
        ask(&fd, AUDIT_GET, &[])?;
        let _ = asked.send(());
        answer(&fd, AUDIT_GET).map(|p| parse_status(&p))
    });
    drop(asked);
    match st {
        Ok(st) if st.enabled != 0 => Some(st),
        Ok(st) => {
            match enable() {
                Ok(()) => notice(
                    "kernel audit was off; lockrun turned it on (audit_enabled=1) so that Landlock \
                     reports its denials (any in the run's first milliseconds may be missing)"
                        .into(),
                ),
                Err(e) => notice(format!(
                    "kernel audit is off and could not be turned on: {e}; filesystem refusals are not collected"
                )),
            }
            Some(st)
        }
        Err(e) => {
            notice(format!(
                "whether kernel audit is on could not be read: {e}; filesystem refusals may be missing"
            ));
            None
        }
    }
}

/// Whether the kernel counts as dropped the records it printed and
/// multicast but then could not hold for an audit daemon: it does when it
/// was booted with `audit=1` and no daemon is connected (its hold queue
/// fills and stays full). lockrun read those records all the same.
fn held_records_count_as_dropped(daemon_pid: u32) -> bool {
    daemon_pid == 0 && std::fs::read_to_string("/proc/cmdline").is_ok_and(|c| audit_on_at_boot(&c))
}

/// Whether a kernel command line turns audit on at boot (`audit=1` or
/// `audit=on`, the last `audit=` deciding, as the kernel reads it).
fn audit_on_at_boot(cmdline: &str) -> bool {
    cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("audit="))
        .next_back()
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("on"))
}

/// Once no task of the run is left: did the kernel drop records since
/// `baseline`? Its count is the machine's; a rise means some of the run's
/// refusals may be missing, and the log says so.
///
/// The count is read again (~0.1 ms: the kernel answers from a thread it
/// creates) only when the reader's own tally leaves a drop possible. The
/// kernel drops a record when more than its backlog limit wait in its
/// queue, and every record that waited there after the baseline was sent
/// to the reader before the run's mark. So if the reader got no more than
/// the limit, all told, the queue never passed it. A rate limit, or an
/// overflow of the reader's socket, leaves it possible. (Left out: a record
/// the kernel had no memory for, on a machine out of memory.)
fn check_loss(log: &AuditLog, baseline: &AuditStatus, read: &Read) {
    if !loss_possible(baseline, read) {
        return;
    }
    let now = match status() {
        Ok(st) => st,
        Err(e) => {
            log.record(Event::Notice {
                layer: Layer::Filesystem,
                message: format!(
                    "whether the kernel dropped audit records during the run could not be read: {e}"
                ),
            });
            return;
        }
    };
    let records = u64::from(now.lost.wrapping_sub(baseline.lost));
    if records == 0 {
        return;
    }
    if held_records_count_as_dropped(baseline.daemon_pid.min(now.daemon_pid)) {
        log.record(Event::Notice {
            layer: Layer::Filesystem,
            message: format!(
                "the kernel counted {records} audit records as dropped during the run, but booted \
                 with `audit=1` and no audit daemon it counts records lockrun did read as dropped \
                 too: whether any refusal of this run is missing cannot be told"
            ),
        });
        return;
    }
    log.record(Event::AuditRecordsLost(AuditLoss::Dropped {
        records,
        backlog_limit: now.backlog_limit,
        rate_limit: now.rate_limit,
    }));
}

impl Drop for KernelAudit {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Whether the kernel may have dropped records while the reader got
/// `read` (see [`check_loss`]).
fn loss_possible(baseline: &AuditStatus, read: &Read) -> bool {
    baseline.rate_limit != 0
        || read.overflowed
        || (baseline.backlog_limit != 0 && read.records > u64::from(baseline.backlog_limit))
}

/// What the reader got from the kernel, all told.
#[derive(Debug, Default)]
struct Read {
    /// Records of every process, the run's mark included.
    records: u64,
    /// The socket overflowed: some were dropped on their way to it.
    overflowed: bool,
}

fn read_loop(
    fd: &OwnedFd,
    log: &AuditLog,
    (child, calls): (&AtomicU32, &std::sync::OnceLock<Arc<Watch>>),
    stop: &std::sync::atomic::AtomicBool,
    marker: &str,
) -> Read {
    let mut buf = vec![0u8; 16 * 1024];
    let mut corr = Correlator::default();
    let mut events = Vec::new();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd.as_fd());
    let mut expired_at = Instant::now();
    let mut read = Read::default();
    while !stop.load(Ordering::SeqCst) {
        // Also when nothing came (the receive times out), at most every
        // tenth of NO_END_AFTER: it looks at every waiting record.
        let now = Instant::now();
        if now.saturating_duration_since(expired_at) >= NO_END_AFTER / 10 {
            expired_at = now;
            corr.expire(child.load(Ordering::SeqCst), now, &mut events);
            for e in events.drain(..) {
                log.record(e);
            }
        }
        let n = match recv(raw, &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(nix::Error::EAGAIN | nix::Error::EINTR) => continue,
            Err(nix::Error::ENOBUFS) => {
                if !read.overflowed {
                    read.overflowed = true;
                    log.record(Event::AuditRecordsLost(AuditLoss::SocketFull));
                }
                continue;
            }
            Err(_) => break,
        };
        // Set before the command starts, so before any record of its calls.
        if corr.watch.is_none() {
            corr.watch = calls.get().cloned();
        }
        let mut done = false;
        for (ty, payload) in nl_split(&buf[..n]) {
            read.records += 1;
            if ty == AUDIT_USER && String::from_utf8_lossy(payload).contains(marker) {
                done = true;
                continue;
            }
            if let Some(rec) = parse_record(ty, payload) {
                corr.push(
                    rec,
                    child.load(Ordering::SeqCst),
                    Instant::now(),
                    &mut events,
                );
            }
        }
        for e in events.drain(..) {
            log.record(e);
        }
        if done {
            break;
        }
    }
    corr.flush(child.load(Ordering::SeqCst), &mut events);
    for e in events.drain(..) {
        log.record(e);
    }
    read
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    // Records as this kernel (6.18) printed them for `sh -c 'echo > /tmp/x'`
    // under a Landlock domain created by pid 9245.
    const ACCESS: &str = r#"audit(1795938126.349:3): domain=1049acb18 blockers=fs.make_reg path="/tmp" dev="vda" ino=246951"#;
    const DOMAIN: &str = r#"audit(1795938126.349:3): domain=1049acb18 status=allocated mode=enforcing pid=9245 uid=0 exe="/usr/bin/python3.11" comm="python3""#;
    const SYSCALL: &str = r#"audit(1795938126.349:3): arch=c000003e syscall=257 success=no exit=-13 a0=ffffff9c items=0 ppid=9115 pid=9245 auid=4294967295 uid=0 comm="sh" exe="/usr/bin/dash" key=(null)"#;

    fn feed(child: u32, records: &[(u16, &str)]) -> Vec<Event> {
        let mut c = Correlator::default();
        let mut out = Vec::new();
        let now = Instant::now();
        for (ty, text) in records {
            c.push(
                parse_record(*ty, text.as_bytes()).unwrap(),
                child,
                now,
                &mut out,
            );
        }
        c.push(
            AuditRecord {
                ty: AUDIT_EOE,
                serial: 3,
                fields: HashMap::new(),
                text: String::new(),
            },
            child,
            now,
            &mut out,
        );
        out
    }

    #[test]
    fn a_drop_is_possible_only_past_the_limits_or_an_overflow() {
        let limits = |backlog_limit, rate_limit| AuditStatus {
            enabled: 1,
            daemon_pid: 0,
            rate_limit,
            backlog_limit,
            lost: 7,
        };
        let read = |records, overflowed| Read {
            records,
            overflowed,
        };
        // The queue never held more than the reader got.
        assert!(!loss_possible(&limits(64, 0), &read(0, false)));
        assert!(!loss_possible(&limits(64, 0), &read(64, false)));
        assert!(loss_possible(&limits(64, 0), &read(65, false)));
        // No backlog limit: nothing is dropped for the queue's length.
        assert!(!loss_possible(&limits(0, 0), &read(1_000_000, false)));
        // A rate limit, or records lost on their way to the reader.
        assert!(loss_possible(&limits(64, 100), &read(0, false)));
        assert!(loss_possible(&limits(64, 0), &read(3, true)));
    }

    #[test]
    fn audit_turned_on_at_boot_is_read_as_the_kernel_reads_it() {
        assert!(audit_on_at_boot("BOOT_IMAGE=/vmlinuz ro audit=1 quiet\n"));
        assert!(audit_on_at_boot("audit=on"));
        assert!(audit_on_at_boot("audit=0 audit=1"));
        assert!(!audit_on_at_boot("audit=1 audit=0"));
        assert!(!audit_on_at_boot("ro audit_backlog_limit=8192 quiet"));
        assert!(!audit_on_at_boot("noaudit=1"));
        assert!(!audit_on_at_boot(""));
    }

    /// Records as this kernel printed them for `sh -c 'echo x > /etc/f;
    /// echo > /dev/stdout'` in a task with no audit context (an
    /// `-a task,never` rule loaded): a serial each, the domain record after
    /// the first access record, no SYSCALL, no EOE.
    const NO_CONTEXT: [(u16, &str); 3] = [
        (
            AUDIT_LANDLOCK_ACCESS,
            r#"audit(1796016531.147:244937): domain=104a1f9fc blockers=fs.make_reg path="/etc" dev="vda" ino=19"#,
        ),
        (
            AUDIT_LANDLOCK_DOMAIN,
            r#"audit(1796016531.147:244938): domain=104a1f9fc status=allocated mode=enforcing pid=12805 uid=0 exe="/work/main/target/release/lockrun" comm="lockrun""#,
        ),
        (
            AUDIT_LANDLOCK_ACCESS,
            r#"audit(1796016531.147:244940): domain=104a1f9fc blockers=fs.make_reg path="/proc/12805/fd" dev="proc" ino=84218016"#,
        ),
    ];

    #[test]
    fn refusals_without_an_audit_context_are_kept_without_a_process() {
        let mut c = Correlator::default();
        let mut out = Vec::new();
        let t0 = Instant::now();
        for (ty, text) in NO_CONTEXT {
            c.push(
                parse_record(ty, text.as_bytes()).unwrap(),
                12805,
                t0,
                &mut out,
            );
        }
        // Within NO_END_AFTER the records wait for an end that may come.
        c.expire(12805, t0 + NO_END_AFTER / 2, &mut out);
        assert_eq!(out, []);
        c.expire(12805, t0 + NO_END_AFTER, &mut out);
        // The first refusal, whose domain record came after it, is kept; the
        // create check on /proc is not a refusal; the notice says why no
        // process is named, once.
        let [Event::Notice { message, .. }, Event::Filesystem(f)] = out.as_slice() else {
            panic!("not a notice and one refusal: {out:?}");
        };
        assert_eq!(message, NO_SYSCALL_RECORD);
        assert_eq!((f.pid, f.comm.as_str()), (0, ""));
        assert_eq!(f.path.as_deref(), Some("/etc"));
        assert_eq!(f.access, vec!["fs.make_reg".to_owned()]);
        assert!(c.pending.is_empty());
        // A create check off /proc is kept: without the call's outcome it
        // cannot be told from a refusal.
        let tmp = NO_CONTEXT[2].1.replace(
            r#"path="/proc/12805/fd" dev="proc""#,
            r#"path="/tmp" dev="vda""#,
        );
        c.push(
            parse_record(AUDIT_LANDLOCK_ACCESS, tmp.as_bytes()).unwrap(),
            12805,
            t0,
            &mut out,
        );
        c.flush(12805, &mut out);
        assert_eq!(out.len(), 3, "{out:?}");
    }

    #[test]
    fn a_domain_is_the_runs_once_its_child_is_known() {
        // The records came before the reader was told the child's pid.
        let named_late = |child: u32| {
            let mut c = Correlator::default();
            let mut out = Vec::new();
            for (ty, text) in NO_CONTEXT {
                let rec = parse_record(ty, text.as_bytes()).unwrap();
                c.push(rec, 0, Instant::now(), &mut out);
            }
            c.flush(child, &mut out);
            out
        };
        assert_eq!(named_late(12805).len(), 2);
        // Another run's child: nothing.
        assert_eq!(named_late(4242), []);
    }

    #[test]
    fn a_create_check_in_a_call_that_succeeded_is_no_refusal() {
        // `sh -c 'echo > /dev/stdout'`, stdout a pipe: the open succeeded.
        let access = r#"audit(1795938126.349:3): domain=1049acb18 blockers=fs.make_reg path="/proc/9245/fd" dev="proc" ino=46495301"#;
        let ok = SYSCALL.replace("success=no exit=-13", "success=yes exit=3");
        let dropped = feed(
            9245,
            &[
                (AUDIT_LANDLOCK_ACCESS, access),
                (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                (AUDIT_SYSCALL, &ok),
            ],
        );
        assert_eq!(dropped, []);
        // The same denial in a call that failed is one.
        let kept = feed(
            9245,
            &[
                (AUDIT_LANDLOCK_ACCESS, access),
                (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                (AUDIT_SYSCALL, SYSCALL),
            ],
        );
        assert_eq!(kept.len(), 1);
        // Any other blocker in a call that succeeded is kept too.
        let write = access.replace("fs.make_reg", "fs.write_file");
        let other = feed(
            9245,
            &[
                (AUDIT_LANDLOCK_ACCESS, &write),
                (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                (AUDIT_SYSCALL, &ok),
            ],
        );
        assert_eq!(other.len(), 1);
    }

    #[test]
    fn below_abi_7_a_refused_call_of_the_watched_run_becomes_an_event() {
        // `mkdir /usr/dd` in the run of login uid 2147483700, and another
        // process's refused call (no login uid of a run), as this kernel
        // wrote them, interleaved.
        let records: [(u16, &str); 7] = [
            (
                AUDIT_SYSCALL,
                r#"audit(1796534893.678:7): arch=c000003e syscall=83 success=no exit=-13 a0=7ffcc50f69ea a1=1ff a2=0 a3=7f33fc43a958 items=1 ppid=12536 pid=12538 auid=2147483700 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=6 comm="mkdir" exe="/usr/bin/mkdir" key=(null)"#,
            ),
            (
                AUDIT_SYSCALL,
                r#"audit(1796534893.678:8): arch=c000003e syscall=83 success=no exit=-13 a0=7ffcc50f69ea a1=1ff a2=0 a3=0 items=1 ppid=1 pid=99 auid=4294967295 uid=0 comm="mkdir" exe="/usr/bin/mkdir" key=(null)"#,
            ),
            (AUDIT_CWD, r#"audit(1796534893.678:7): cwd="/tmp/r1""#),
            (
                AUDIT_PATH,
                r#"audit(1796534893.678:7): item=0 name="/usr/" inode=246973 dev=fe:00 mode=040755 ouid=0 ogid=0 rdev=00:00 nametype=PARENT cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0"#,
            ),
            (AUDIT_CWD, r#"audit(1796534893.678:8): cwd="/""#),
            (
                AUDIT_PATH,
                r#"audit(1796534893.678:8): item=0 name="/etc/" inode=19 dev=fe:00 mode=040755 nametype=PARENT"#,
            ),
            (AUDIT_EOE, "audit(1796534893.678:8): "),
        ];
        let mut c = Correlator {
            watch: Some(Arc::new(Watch {
                login_uid: 2_147_483_700,
                writable: Vec::new(),
                granted: syscalls::refer::Granted::default(),
                cgroup: None,
                reach: syscalls::Reach::default(),
            })),
            ..Correlator::default()
        };
        let mut out = Vec::new();
        let now = Instant::now();
        for (ty, text) in records {
            c.push(parse_record(ty, text.as_bytes()).unwrap(), 0, now, &mut out);
        }
        // The other process's call ended: nothing of it is kept.
        assert_eq!(out, []);
        assert_eq!(c.pending.len(), 1);
        assert_eq!(c.pending[&7].1.len(), 3);
        c.push(
            parse_record(AUDIT_EOE, b"audit(1796534893.678:7): ").unwrap(),
            0,
            now,
            &mut out,
        );
        let [Event::Filesystem(f)] = out.as_slice() else {
            panic!("not one filesystem event: {out:?}");
        };
        assert_eq!((f.pid, f.comm.as_str()), (12538, "mkdir"));
        assert_eq!(f.path.as_deref(), Some("/usr"));
        assert_eq!(f.access, vec!["fs.make_dir".to_owned()]);
        assert_eq!(f.raw.lines().count(), 3);
        assert!(c.pending.is_empty());
    }

    /// `kill` of a process outside the run and `connect` to an abstract
    /// name bound outside it, refused by Landlock ABI 6 (`EPERM`), as this
    /// kernel wrote them: their `OBJ_PID` and `SOCKADDR` records are kept
    /// with the call's, and each becomes a scope refusal.
    #[test]
    fn below_abi_7_a_refused_reach_of_the_watched_run_becomes_a_scope_event() {
        let records: [(u16, &str); 6] = [
            (
                AUDIT_SYSCALL,
                r#"audit(1796542359.022:471023): arch=c000003e syscall=62 success=no exit=-1 a0=124b a1=f a2=7fe919bb17a8 a3=7fe919634580 items=0 ppid=4728 pid=4735 auid=2147681900 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=217 comm="python3" exe="/root/.pyenv/versions/3.11.7/bin/python3.11" key=(null)"#,
            ),
            (
                AUDIT_OBJ_PID,
                r#"audit(1796542359.022:471023): opid=4683 oauid=-1 ouid=0 oses=-1 ocomm="sleep""#,
            ),
            (AUDIT_EOE, "audit(1796542359.022:471023): "),
            (
                AUDIT_SYSCALL,
                r#"audit(1796542359.022:471025): arch=c000003e syscall=42 success=no exit=-1 a0=4 a1=7fff26ac5840 a2=9 a3=0 items=0 ppid=4728 pid=4735 auid=2147681900 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=217 comm="python3" exe="/root/.pyenv/versions/3.11.7/bin/python3.11" key=(null)"#,
            ),
            (
                AUDIT_SOCKADDR,
                "audit(1796542359.022:471025): saddr=010000733135616273",
            ),
            (AUDIT_EOE, "audit(1796542359.022:471025): "),
        ];
        let mut c = Correlator {
            watch: Some(Arc::new(Watch {
                login_uid: 2_147_681_900,
                writable: Vec::new(),
                granted: syscalls::refer::Granted::default(),
                cgroup: None,
                reach: syscalls::Reach {
                    signals: true,
                    abstract_sockets: true,
                },
            })),
            ..Correlator::default()
        };
        let mut out = Vec::new();
        for (ty, text) in records {
            c.push(
                parse_record(ty, text.as_bytes()).unwrap(),
                0,
                Instant::now(),
                &mut out,
            );
        }
        let [Event::Scope(signal), Event::Scope(socket)] = out.as_slice() else {
            panic!("not two scope events: {out:?}");
        };
        assert_eq!(
            (signal.pid, signal.comm.as_str(), &signal.target),
            (
                4735,
                "python3",
                &ScopeTarget::Signal {
                    to_pid: 4683,
                    to_comm: "sleep".into()
                }
            )
        );
        assert_eq!(
            socket.target,
            ScopeTarget::AbstractUnixSocket {
                name: "s15abs".into()
            }
        );
        assert!(c.pending.is_empty());
    }

    #[test]
    fn a_denial_that_ends_before_the_child_is_known_waits_for_it() {
        let mut c = Correlator::default();
        let mut out = Vec::new();
        let t0 = Instant::now();
        for (ty, text) in [
            (AUDIT_LANDLOCK_ACCESS, ACCESS),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, SYSCALL),
            (AUDIT_EOE, "audit(1795938126.349:3): "),
        ] {
            c.push(parse_record(ty, text.as_bytes()).unwrap(), 0, t0, &mut out);
        }
        assert_eq!(out, []);
        c.expire(0, t0, &mut out);
        assert_eq!(out, []);
        // Told the child: taken at the next look, not a second later.
        c.expire(9245, t0, &mut out);
        let [Event::Filesystem(f)] = out.as_slice() else {
            panic!("not one filesystem event: {out:?}");
        };
        assert_eq!((f.pid, f.path.as_deref()), (9245, Some("/tmp")));
        assert!(c.pending.is_empty());
    }

    #[test]
    fn a_denial_of_our_child_becomes_an_event() {
        let ev = feed(
            9245,
            &[
                (AUDIT_LANDLOCK_ACCESS, ACCESS),
                (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                (AUDIT_SYSCALL, SYSCALL),
            ],
        );
        let [Event::Filesystem(f)] = ev.as_slice() else {
            panic!("not one filesystem event: {ev:?}");
        };
        assert_eq!(f.pid, 9245);
        assert_eq!(f.comm, "sh");
        assert_eq!(f.path.as_deref(), Some("/tmp"));
        assert_eq!(f.access, vec!["fs.make_reg".to_owned()]);
    }

    /// Records as this kernel printed them for `kill` of a process outside
    /// the run, for `connect` to the abstract socket `@s15abs` bound
    /// outside it, and for reading `/proc/<pid>/environ` of a process
    /// outside it: refusals of a reach outside the run, named as such, not
    /// filesystem ones.
    #[test]
    fn scoping_denials_name_the_process_or_the_socket() {
        let signal = r#"audit(1795938126.349:3): domain=1049acb18 blockers=scope.signal opid=2637 ocomm="bash""#;
        let abstract_socket = "audit(1795938126.349:3): domain=1049acb18 blockers=scope.abstract_unix_socket path=00733135616273";
        let ptrace =
            r#"audit(1795938126.349:3): domain=1049acb18 blockers=ptrace opid=26780 ocomm="sleep""#;
        for (access, syscall, want) in [
            (
                signal,
                "kill",
                ScopeTarget::Signal {
                    to_pid: 2637,
                    to_comm: "bash".into(),
                },
            ),
            (
                abstract_socket,
                "connect",
                ScopeTarget::AbstractUnixSocket {
                    name: "s15abs".into(),
                },
            ),
            (
                ptrace,
                "257",
                ScopeTarget::Ptrace {
                    to_pid: 26780,
                    to_comm: "sleep".into(),
                },
            ),
        ] {
            let sys = SYSCALL.replace("syscall=257", &format!("syscall={syscall}"));
            let ev = feed(
                9245,
                &[
                    (AUDIT_LANDLOCK_ACCESS, access),
                    (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                    (AUDIT_SYSCALL, &sys),
                ],
            );
            let [Event::Scope(sc)] = ev.as_slice() else {
                panic!("not one scoping event: {ev:?}");
            };
            assert_eq!((sc.pid, sc.comm.as_str()), (9245, "sh"));
            assert_eq!(sc.target, want);
        }
        assert_eq!(
            ScopeTarget::AbstractUnixSocket {
                name: "s15abs".into()
            }
            .to_string(),
            "abstract unix socket @s15abs"
        );
        assert_eq!(
            ScopeTarget::Signal {
                to_pid: 2637,
                to_comm: "bash".into()
            }
            .to_string(),
            "signal to pid 2637 (bash)"
        );
        assert_eq!(
            ScopeTarget::Ptrace {
                to_pid: 26780,
                to_comm: "sleep".into()
            }
            .to_string(),
            "ptrace or /proc access to pid 26780 (sleep)"
        );
    }

    #[test]
    fn another_runs_domain_is_ignored() {
        let ev = feed(
            1234,
            &[
                (AUDIT_LANDLOCK_ACCESS, ACCESS),
                (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                (AUDIT_SYSCALL, SYSCALL),
            ],
        );
        assert!(ev.is_empty());
    }

    #[test]
    fn an_end_of_event_record_with_no_body_is_read() {
        // As the kernel sends it: the stamp, a colon, a space and a NUL.
        let eoe = parse_record(AUDIT_EOE, b"audit(1796534893.678:123622): \0").unwrap();
        assert_eq!((eoe.ty, eoe.serial), (AUDIT_EOE, 123_622));
        assert!(eoe.fields.is_empty());
    }

    #[test]
    fn hex_encoded_paths_are_decoded() {
        let r = parse_record(AUDIT_LANDLOCK_ACCESS, b"audit(1.2:9): domain=1 blockers=fs.write_file path=2F746D702F6120622E747874 dev=\"vda\"").unwrap();
        assert_eq!(r.fields["path"], "/tmp/a b.txt");
        assert_eq!(r.serial, 9);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod kernel_tests {
    use super::*;

    /// Restricts itself with Landlock (`write_file|make_reg` handled, nothing
    /// granted, `LOG_NEW_EXEC_ON`) and execs `argv[1:]`.
    const LANDLOCKED: &str = r#"
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
attr = struct.pack("=QQQ", (1<<1)|(1<<8), 0, 0)
fd = libc.syscall(444, ctypes.create_string_buffer(attr), len(attr), 0)
assert fd >= 0 and libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.syscall(446, fd, 2) == 0, ctypes.get_errno()
os.execvp(sys.argv[1], sys.argv[1:])
"#;

    #[test]
    fn collects_a_real_landlock_denial_of_its_child() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "kernel test may not skip under CI"
            );
            let _ = std::io::Write::write_all(&mut std::io::stderr(), concat!("skipped: collects_a_real_landlock_denial_of_its_child: needs root (CAP_AUDIT_READ)", "\n").as_bytes());
            return;
        }
        // Landlock's denial records are ABI 7's (Linux 6.15); below, the
        // run's refused calls stand in (tested in tests/fs_refusals_seen.rs).
        let abi = crate::sys::landlock_abi_version().unwrap_or(0);
        if abi < 7 {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("skipped: collects_a_real_landlock_denial_of_its_child: this kernel's Landlock ABI is {abi}: no denial records (ABI 7)\n").as_bytes(),
            );
            return;
        }
        let scratch = crate::testing::Scratch::new("kaudit");
        let dir = scratch.path().to_path_buf();
        let target = dir.join("denied.txt");
        let log_path = dir.join("audit.jsonl");
        let log = Arc::new(AuditLog::open(Some(&log_path)).unwrap());
        let reader = KernelAudit::start(log.clone(), "test").unwrap();
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                LANDLOCKED,
                "sh",
                "-c",
                &format!("echo x > {}", target.display()),
            ])
            .spawn()
            .unwrap();
        reader.watch(child.id());
        let status = child.wait().unwrap();
        reader.finish();
        assert!(!status.success(), "the write must have been refused");
        assert!(
            !target.exists(),
            "judged from outside: the file must not exist"
        );
        let text = std::fs::read_to_string(&log_path).unwrap();
        let events: Vec<crate::audit::Record> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let fs: Vec<&FsEvent> = events
            .iter()
            .filter_map(|r| {
                if let Event::Filesystem(f) = &r.event {
                    Some(f)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(fs.len(), 1, "exactly the one denial: {text}");
        assert_eq!(fs[0].pid, child.id());
        assert_eq!(fs[0].comm, "sh");
        assert_eq!(fs[0].path.as_deref(), Some(dir.to_str().unwrap()));
        assert_eq!(fs[0].access, vec!["fs.make_reg".to_owned()]);
    }
}
