//! Signals to processes outside the run, where Landlock does not scope
//! them (ABI < 6, Linux < 6.12; Debian 12's 6.1 has ABI 2).
//!
//! A run's command is often uid 0 without capabilities, and the kernel
//! lets it signal every process of its uid; Landlock's scoping (6.12)
//! refuses a signal to any process outside the run's domain. Without it,
//! the filter hands over every call that names another process
//! ([`crate::seccomp::scope`]) and this judges it by the target's cgroup,
//! as [`super::sched`] does: only the run's processes are in the run's
//! cgroup, and a run can neither make cgroups nor move tasks (Landlock
//! refuses the writes). Signal 0 is judged like any.
//!
//! - **One process or thread** (`kill(pid)`, `tkill`, `tgkill`,
//!   `rt_sigqueueinfo`, `rt_tgsigqueueinfo`): of the run → the kernel goes
//!   on (`CONTINUE`) and delivers the signal itself, with the caller's
//!   `si_pid`; elsewhere → `EPERM`; none → `ESRCH`, answered here (never
//!   let through: a pid no task holds may be handed to a process outside
//!   before the kernel looks it up).
//! - **A process group** (`kill(0)`, `kill(-pgrp)`) and **every process**
//!   (`kill(-1)`): a group of the run's processes only → `CONTINUE`. One
//!   with members outside (the command shares lockrun's process group) is
//!   signalled here, as Landlock would: each member of the run gets it
//!   through a pidfd opened before its cgroup is read and checked alive
//!   after, each other member is refused, and the call returns as the
//!   kernel's would (0 when any was signalled). `kill(-1)` is every
//!   process but init and the caller's: those of the run get it.
//! - **`pidfd_send_signal`**: the pidfd is taken from the task
//!   (`pidfd_getfd`) and its process named by its `fdinfo` (or, for a
//!   `/proc/<pid>` directory, read through it); the signal is sent here,
//!   on the descriptor taken, never let through: the task could put
//!   another pidfd under the same number before the kernel looks.
//! - **The owner of a file's `SIGIO`/`SIGURG`** (`fcntl` `F_SETOWN`,
//!   `F_SETOWN_EX`; `ioctl` `FIOSETOWN`, `SIOCSPGRP` on a socket; what
//!   Landlock's `file_send_sigiotask` check covers): set here, on the file
//!   taken from the task, only to a process, thread or group of the run,
//!   and checked again after: a target that died meanwhile (its pid may
//!   have been handed on) is unset again and the call fails with `ESRCH`.
//!
//! What is signalled or set here is done by the receiving thread, whose
//! effective capabilities are dropped: the kernel's permission checks are
//! those of the command (its uid, no capability). The receiver of a signal
//! sent here sees lockrun's pid in `si_pid` (as a peer sees it in
//! `SO_PEERCRED` for connects done here), unless the caller gave a
//! `siginfo` (`rt_sigqueueinfo`'s, passed on).
//!
//! Each refusal is recorded as a scope refusal
//! ([`ScopeTarget::Signal`]), the first process outside named, as the
//! kernel's audit records name Landlock's on a newer kernel.
//!
//! # Pid reuse
//! A call let through is delivered by the kernel after this judged its
//! target: should that process die, be reaped and its pid be handed to a
//! process outside in between, the signal goes there. The window is from
//! the cgroup read to the kernel's lookup on the caller's return, and
//! needs the pid to come round: the kernel hands pids out in order
//! (`kernel.pid_max`), so the run cannot aim it at a process, as for
//! [`super::sched`]. A signal to the caller's own process, or `tgkill` of a
//! thread of it, has no window: the caller holds its process id. A
//! pidfd-based design without a window would have lockrun send every
//! signal (no thread pidfds before Linux 6.9, and `si_pid`, `si_code`
//! then lockrun's); it is used where the kernel could otherwise be pointed
//! elsewhere (a pidfd, an owner) and for groups with members outside.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::{Errno, Reply, Shared, Task};
use crate::audit::{Event, ScopeEvent, ScopeTarget};
use crate::state::{membership, Membership};
use crate::sys::{self, supervisor_calls};
use lockrun_seccomp::scope::{FIOSETOWN, F_SETOWN, OWNER_FCNTLS, SIOCSPGRP};

/// `F_OWNER_TID`, `F_OWNER_PID`, `F_OWNER_PGRP`.
const OWNER_TID: i32 = 0;
const OWNER_PID: i32 = 1;
const OWNER_PGRP: i32 = 2;

/// Answer a notified call of the scoping fallback; `None` when it is not
/// one (the caller goes on to the other handlers).
pub fn handle(task: &Task<'_>, s: &Shared) -> Option<Reply> {
    let a = task.args();
    let int = |i: usize| (a[i] & 0xffff_ffff) as u32 as i32;
    Some(match task.nr() {
        libc::SYS_kill => kill(task, s, int(0), int(1)),
        libc::SYS_tkill => one(task, s, "tkill", int(0), int(1)),
        libc::SYS_rt_sigqueueinfo => one(task, s, "rt_sigqueueinfo", int(0), int(1)),
        libc::SYS_tgkill => in_process(task, s, "tgkill", int(0), int(1), int(2)),
        libc::SYS_rt_tgsigqueueinfo => {
            in_process(task, s, "rt_tgsigqueueinfo", int(0), int(1), int(2))
        }
        libc::SYS_pidfd_send_signal => pidfd_send(task, s),
        libc::SYS_fcntl if OWNER_FCNTLS.contains(&(int(1) as u32)) => owner_fcntl(task, s),
        libc::SYS_ioctl if [FIOSETOWN, SIOCSPGRP].contains(&(int(1) as u32)) => {
            owner_ioctl(task, s)
        }
        _ => return None,
    })
}

/// A task, held by its `/proc/<id>` directory: reads through it are of
/// that task, or fail once it is reaped, whoever has its id by then.
struct Held {
    id: i32,
    dir: OwnedFd,
}

impl Held {
    /// Task `id` of lockrun's pid namespace (which is the run's); `None`
    /// when there is none.
    fn open(id: i32) -> Option<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(format!("/proc/{id}"))
            .ok()?;
        Some(Self {
            id,
            dir: dir.into(),
        })
    }

    fn read(&self, name: &std::ffi::CStr) -> Option<String> {
        let fd = supervisor_calls::openat2(self.dir.as_fd(), name, libc::O_RDONLY, 0).ok()?;
        let mut s = String::new();
        File::from(fd).read_to_string(&mut s).ok()?;
        Some(s)
    }

    /// Whether it is in the run's cgroup; `None` once it is gone.
    fn membership(&self, s: &Shared) -> Option<Membership> {
        let cgroups = self.read(c"cgroup")?;
        Some(
            s.cgroup_path
                .as_deref()
                .map_or(Membership::Outside, |run| membership(&cgroups, run)),
        )
    }

    fn comm(&self) -> String {
        self.read(c"comm")
            .map(|c| c.trim_end().to_owned())
            .unwrap_or_default()
    }

    /// Whether it has not been reaped: its id is still its own.
    fn alive(&self) -> bool {
        self.read(c"stat").is_some()
    }

    /// Its thread-group id.
    fn tgid(&self) -> Option<i32> {
        self.read(c"status")?
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())
    }
}

/// `kill(pid, sig)`.
fn kill(task: &Task<'_>, s: &Shared, pid: i32, sig: i32) -> Reply {
    match pid {
        p if p > 0 => one(task, s, "kill", p, sig),
        // The kernel's answer (ESRCH).
        i32::MIN => Reply::Continue,
        0 => match process_group(task.tid() as i32) {
            Some(g) => group(task, s, "kill", Some(g), sig),
            None => Reply::Errno(libc::ESRCH),
        },
        -1 => group(task, s, "kill", None, sig),
        p => group(task, s, "kill", Some(-p), sig),
    }
}

/// A call that names one process or thread.
fn one(task: &Task<'_>, s: &Shared, call: &str, id: i32, sig: i32) -> Reply {
    // No task named: the kernel's EINVAL.
    if id <= 0 {
        return Reply::Continue;
    }
    if id as u32 == task.tgid() {
        return Reply::Continue;
    }
    judged(task, s, &format!("{call}({id}, {})", signal_name(sig)), id)
}

/// `tgkill(tgid, tid, sig)` and `rt_tgsigqueueinfo`: thread `thread` of
/// process `process`.
fn in_process(
    task: &Task<'_>,
    s: &Shared,
    call: &str,
    process: i32,
    thread: i32,
    sig: i32,
) -> Reply {
    if process <= 0 || thread <= 0 {
        return Reply::Continue;
    }
    // A thread of the caller's own process: the kernel checks the thread is
    // one of `process`, whose id the caller holds.
    if process as u32 == task.tgid() {
        return Reply::Continue;
    }
    let Some(t) = Held::open(thread) else {
        return Reply::Errno(libc::ESRCH);
    };
    if t.tgid() != Some(process) {
        return Reply::Errno(libc::ESRCH);
    }
    judged(
        task,
        s,
        &format!("{call}({process}, {thread}, {})", signal_name(sig)),
        thread,
    )
}

/// Let the kernel deliver to task `id` when it is of the run.
fn judged(task: &Task<'_>, s: &Shared, call: &str, id: i32) -> Reply {
    let Some(t) = Held::open(id) else {
        return Reply::Errno(libc::ESRCH);
    };
    match t.membership(s) {
        None => Reply::Errno(libc::ESRCH),
        Some(Membership::InRun) => Reply::Continue,
        Some(_) => refuse(task, s, call, id, t.comm()),
    }
}

/// The processes of a group (`Some(pgrp)`), or every process but init and
/// the caller's (`None`, `kill(-1)`): each with whether it is of the run.
fn members(task: &Task<'_>, s: &Shared, pgrp: Option<i32>) -> Vec<(Held, bool)> {
    let own = task.tgid() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let wanted = match pgrp {
            Some(g) => process_group(pid) == Some(g),
            None => pid > 1 && pid != own,
        };
        if !wanted {
            continue;
        }
        let Some(h) = Held::open(pid) else { continue };
        // None: gone meanwhile.
        if let Some(m) = h.membership(s) {
            out.push((h, m == Membership::InRun));
        }
    }
    out
}

/// `kill` of a process group, or of every process (`None`).
fn group(task: &Task<'_>, s: &Shared, call: &str, pgrp: Option<i32>, sig: i32) -> Reply {
    let members = members(task, s, pgrp);
    if members.is_empty() {
        return Reply::Errno(libc::ESRCH);
    }
    let Some(outside) = members.iter().find(|(_, in_run)| !in_run) else {
        // Only the run's: the kernel signals them all itself.
        return Reply::Continue;
    };
    let shown = match pgrp {
        Some(g) => format!("{call}(-{g}, {})", signal_name(sig)),
        None => format!("{call}(-1, {})", signal_name(sig)),
    };
    let (first, first_comm) = (outside.0.id, outside.0.comm());
    // As Landlock would: each member of the run gets it, every other is refused.
    let mut signalled = false;
    let mut last = libc::EPERM;
    for (h, in_run) in &members {
        if !in_run {
            continue;
        }
        match send_to(h, sig) {
            Ok(()) => {
                signalled = true;
                last = libc::EPERM;
            }
            Err(e) if e != libc::EPERM => last = e,
            Err(_) => {}
        }
    }
    let _ = refuse(task, s, &shown, first, first_comm);
    // As the kernel answers: a group, 0 once any member was signalled;
    // kill(-1), 0 unless a failure other than EPERM came last.
    let answered = if pgrp.is_some() {
        signalled
    } else {
        last == libc::EPERM
    };
    if answered {
        Reply::Value(0)
    } else {
        Reply::Errno(last)
    }
}

/// Signal the process held by `h` through a pidfd, checked to be it.
fn send_to(h: &Held, sig: i32) -> Result<(), Errno> {
    let pidfd = sys::scope::pidfd_open(h.id).map_err(|_| libc::ESRCH)?;
    // The pidfd is of whoever has the pid now: the one held, when that is alive.
    if !h.alive() {
        return Err(libc::ESRCH);
    }
    sys::scope::pidfd_send_signal(pidfd.as_fd(), sig, None, 0).map_err(|e| os(&e))
}

/// `pidfd_send_signal(pidfd, sig, info, flags)`: sent here, on the
/// descriptor taken from the task, to a process of the run only.
fn pidfd_send(task: &Task<'_>, s: &Shared) -> Reply {
    let a = task.args();
    let sig = a[1] as u32 as i32;
    let pidfd = match task.getfd(a[0] as u32 as i32) {
        Ok(fd) => fd,
        Err(e) => return Reply::Errno(e),
    };
    let info = if a[2] == 0 {
        None
    } else {
        match task.read(a[2], sys::scope::SIGINFO_SIZE) {
            Ok(b) => {
                let mut i = [0u8; sys::scope::SIGINFO_SIZE];
                i.copy_from_slice(&b);
                Some(i)
            }
            Err(e) => return Reply::Errno(e),
        }
    };
    if !task.valid() {
        return Reply::Gone;
    }
    let (id, membership, comm) = match pidfd_target(pidfd.as_fd(), s) {
        Ok(t) => t,
        Err(e) => return Reply::Errno(e),
    };
    if membership != Membership::InRun {
        return refuse(
            task,
            s,
            &format!("pidfd_send_signal(pid {id}, {})", signal_name(sig)),
            id,
            comm,
        );
    }
    match sys::scope::pidfd_send_signal(pidfd.as_fd(), sig, info.as_ref(), a[3] as u32) {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Errno(os(&e)),
    }
}

/// The process a pidfd (or a `/proc/<pid>` directory) refers to: its id,
/// whether it is of the run, its command name.
fn pidfd_target(fd: BorrowedFd<'_>, s: &Shared) -> Result<(i32, Membership, String), Errno> {
    let fdinfo = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let pid_of = || -> Option<i32> {
        std::fs::read_to_string(&fdinfo)
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|v| v.trim().parse().ok())
    };
    match pid_of() {
        Some(id) if id > 0 => {
            let h = Held::open(id).ok_or(libc::ESRCH)?;
            let m = h.membership(s).ok_or(libc::ESRCH)?;
            let comm = h.comm();
            // Still the pidfd's process: the pid was its throughout.
            if pid_of() != Some(id) {
                return Err(libc::ESRCH);
            }
            Ok((id, m, comm))
        }
        // A pidfd whose process is gone.
        Some(_) => Err(libc::ESRCH),
        // A /proc/<pid> directory names its process too; reads through it
        // fail once that is gone.
        None => {
            let h = Held {
                id: 0,
                dir: fd.try_clone_to_owned().map_err(|_| libc::EBADF)?,
            };
            let stat = h.read(c"stat").ok_or(libc::EBADF)?;
            let id = stat
                .split(' ')
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or(libc::EBADF)?;
            let m = h.membership(s).ok_or(libc::ESRCH)?;
            Ok((id, m, h.comm()))
        }
    }
}

/// `fcntl(fd, F_SETOWN, pid)` and `fcntl(fd, F_SETOWN_EX, &owner)`.
fn owner_fcntl(task: &Task<'_>, s: &Shared) -> Reply {
    let a = task.args();
    let cmd = a[1] as u32 as i32;
    let (kind, pid) = if cmd == F_SETOWN as i32 {
        match a[2] as u32 as i32 {
            // Unset, or the kernel's EINVAL: no process named.
            0 | i32::MIN => return Reply::Continue,
            p if p < 0 => (OWNER_PGRP, -p),
            p => (OWNER_PID, p),
        }
    } else {
        match task.read(a[2], 8) {
            Ok(b) => (
                i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
                i32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            ),
            Err(e) => return Reply::Errno(e),
        }
    };
    if !(OWNER_TID..=OWNER_PGRP).contains(&kind) {
        return Reply::Errno(libc::EINVAL);
    }
    let file = match task.getfd(a[0] as u32 as i32) {
        Ok(f) => f,
        Err(e) => return Reply::Errno(e),
    };
    let call = if cmd == F_SETOWN as i32 {
        "fcntl F_SETOWN"
    } else {
        "fcntl F_SETOWN_EX"
    };
    set_owner(task, s, call, &file, kind, pid, |f, k, p| {
        sys::scope::set_owner(f, k, p)
    })
}

/// `ioctl(sock, FIOSETOWN | SIOCSPGRP, &pid)`: a socket's owner.
fn owner_ioctl(task: &Task<'_>, s: &Shared) -> Reply {
    let a = task.args();
    let cmd = a[1] as u32;
    let pid = match task.read(a[2], 4) {
        Ok(b) => i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        Err(e) => return Reply::Errno(e),
    };
    let sock = match task.getfd(a[0] as u32 as i32) {
        Ok(f) => f,
        Err(e) => return Reply::Errno(e),
    };
    // Only sockets know these commands.
    if supervisor_calls::sockopt_int(sock.as_fd(), libc::SO_TYPE).is_err() {
        return Reply::Errno(libc::ENOTTY);
    }
    let (kind, id) = match pid {
        0 => (OWNER_PID, 0),
        i32::MIN => return Reply::Errno(libc::EINVAL),
        p if p < 0 => (OWNER_PGRP, -p),
        p => (OWNER_PID, p),
    };
    let call = if cmd == FIOSETOWN {
        "ioctl FIOSETOWN"
    } else {
        "ioctl SIOCSPGRP"
    };
    set_owner(task, s, call, &sock, kind, id, move |f, k, p| {
        let signed = if k == OWNER_PGRP { -p } else { p };
        supervisor_calls::ioctl_buf(f, cmd, &mut signed.to_ne_bytes())
    })
}

/// Set the owner of `file` to (`kind`, `id`) with `set`, when that is of
/// the run; checked again after, and unset if it died meanwhile.
fn set_owner(
    task: &Task<'_>,
    s: &Shared,
    call: &str,
    file: &OwnedFd,
    kind: i32,
    id: i32,
    set: impl Fn(BorrowedFd<'_>, i32, i32) -> std::io::Result<()>,
) -> Reply {
    if !task.valid() {
        return Reply::Gone;
    }
    let shown = |id: i32| {
        let to = match kind {
            OWNER_TID => "thread",
            OWNER_PID => "process",
            _ => "process group",
        };
        format!("{call} to {to} {id}")
    };
    if id == 0 {
        return result(set(file.as_fd(), kind, 0));
    }
    if id < 0 {
        return Reply::Errno(libc::ESRCH);
    }
    if kind == OWNER_PGRP {
        let members = members(task, s, Some(id));
        if members.is_empty() {
            return Reply::Errno(libc::ESRCH);
        }
        if let Some((h, _)) = members.iter().find(|(_, in_run)| !in_run) {
            return refuse(task, s, &shown(id), h.id, h.comm());
        }
        return result(set(file.as_fd(), kind, id));
    }
    let Some(h) = Held::open(id) else {
        return Reply::Errno(libc::ESRCH);
    };
    match h.membership(s) {
        None => return Reply::Errno(libc::ESRCH),
        Some(Membership::InRun) => {}
        Some(_) => return refuse(task, s, &shown(id), id, h.comm()),
    }
    if let Err(e) = set(file.as_fd(), kind, id) {
        return Reply::Errno(os(&e));
    }
    // Alive after the set: its id was its own throughout, so the owner is it.
    if h.alive() {
        Reply::Value(0)
    } else {
        let _ = set(file.as_fd(), OWNER_PID, 0);
        Reply::Errno(libc::ESRCH)
    }
}

fn result(r: std::io::Result<()>) -> Reply {
    match r {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Errno(os(&e)),
    }
}

/// Record a scope refusal of a signal to `to_pid`, and answer `EPERM`.
fn refuse(task: &Task<'_>, s: &Shared, call: &str, to_pid: i32, to_comm: String) -> Reply {
    s.audit.record(Event::Scope(ScopeEvent {
        pid: task.tgid(),
        comm: task.comm(),
        target: ScopeTarget::Signal {
            to_pid: to_pid.max(0) as u32,
            to_comm,
        },
        raw: format!(
            "lockrun's seccomp supervisor refused {call}: pid {to_pid} is not in the run \
             (no Landlock scoping here: ABI < 6)"
        ),
    }));
    Reply::Errno(libc::EPERM)
}

/// The process group of process `pid`, from `/proc/<pid>/stat` (the field
/// after the command name, which may itself hold spaces and parentheses).
fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // state, ppid, pgrp
    after.split_whitespace().nth(2)?.parse().ok()
}

/// `SIGTERM`, or the number.
fn signal_name(sig: i32) -> String {
    match sig {
        0 => "signal 0".to_owned(),
        n => nix::sys::signal::Signal::try_from(n)
            .map_or_else(|_| format!("signal {n}"), |s| s.as_str().to_owned()),
    }
}

fn os(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_group_is_read_past_a_command_name_with_parentheses() {
        let me = i32::try_from(std::process::id()).unwrap();
        let g = nix::unistd::getpgrp().as_raw();
        assert_eq!(super::process_group(me), Some(g));
        assert_eq!(super::process_group(0x7fff_fff0), None);
    }

    #[test]
    fn signals_are_named() {
        assert_eq!(super::signal_name(15), "SIGTERM");
        assert_eq!(super::signal_name(0), "signal 0");
        assert_eq!(super::signal_name(40), "signal 40");
    }
}
