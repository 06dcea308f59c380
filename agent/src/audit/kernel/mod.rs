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

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{recv, send, setsockopt, sockopt, MsgFlags};

use super::syscalls::Watch;
use super::{AuditLog, AuditLoss, Event, Layer};

mod correlate;
#[cfg(test)]
mod kernel_tests;
mod netlink;
mod records;
#[cfg(test)]
mod tests;

pub use correlate::NO_SYSCALL_RECORD;
use correlate::{Correlator, NO_END_AFTER};
use netlink::{
    answer, ask, nl_split, parse_status, sys, AUDIT_GET, AUDIT_NLGRP_READLOG, AUDIT_USER,
};
pub use netlink::{enable, status, AuditStatus, KernelAuditError};
pub(in crate::audit) use netlink::{
    nl_message, nl_socket, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_ACK, NLM_F_REQUEST,
};
pub(in crate::audit) use records::{parse_record, AuditRecord};

/// How long [`KernelAudit::finish`] waits for the reader to read the
/// run's end mark.
const MARK_WAIT: Duration = Duration::from_secs(2);

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
    /// kernel sends that reply from a kernel thread it creates for it, which
    /// would hold up the run's cgroup creation beside it. Audit is normally
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
        if let Err(e) = sent {
            self.stop.store(true, Ordering::SeqCst);
            self.tell_unfinished(&format!(
                "the end of the run could not be marked in it ({e})"
            ));
        }
    }

    /// Wait until every record the kernel queued before the marker has been
    /// read (bounded: [`MARK_WAIT`]), then stop. A reader that has not read
    /// the mark by then is stopped, and the log says so: refusals of the
    /// run's last moments may be missing, never silently.
    pub fn finish(mut self) {
        self.send_marker();
        if let Some(t) = self.thread.take() {
            // Disconnected when the reader returns; a timeout stops it.
            let waited = self.done.recv_timeout(MARK_WAIT);
            self.stop.store(true, Ordering::SeqCst);
            let _ = t.join();
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = waited {
                self.tell_unfinished(&format!(
                    "its end mark was not read within {} s",
                    MARK_WAIT.as_secs()
                ));
            }
        }
    }

    fn tell_unfinished(&self, why: &str) {
        self.log.record(Event::Notice {
            layer: Layer::Filesystem,
            message: format!(
                "the kernel's audit records of this run were not all read: {why}; filesystem \
                 refusals of its last moments may be missing from this log"
            ),
        });
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
/// The count is read again (the kernel answers from a thread it creates)
/// only when the reader's own tally leaves a drop possible. The
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
