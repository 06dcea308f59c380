//! A refused call's kernel audit records, as the scope refusal Landlock
//! would have logged: a reach outside the run, where Landlock refuses it
//! but logs nothing (ABI < 7).
//!
//! | refused | records | target |
//! |---|---|---|
//! | `kill`, `tkill`, `tgkill`, `rt_sigqueueinfo`, `rt_tgsigqueueinfo`, `pidfd_send_signal` with `EPERM` (the run's [`Refused::Reach`](super::rules::Refused::Reach) rule, ABI 6) | `SYSCALL`, `OBJ_PID` (the signal's target, which kernel audit notes before any check refuses it) | [`ScopeTarget::Signal`]: `OBJ_PID`'s `opid` and `ocomm`; without it, the process the call's arguments name |
//! | `connect`, `sendto`, `sendmsg`, `sendmmsg` with `EPERM` (the same rule) | `SYSCALL`, `SOCKADDR` (the address given, hex) | [`ScopeTarget::AbstractUnixSocket`] for an `AF_UNIX` address whose path starts with a NUL; any other address is none of these (an inet or pathname refusal, which the cgroup hooks record themselves) |
//! | any call refused with `EACCES` on `/proc/<pid>/…` of a process outside the run (the run's [`Refused::Files`](super::rules::Refused::Files) rule, every ABI below 7; where the run sees the machine's procfs, a writable path beneath `/proc` keeping its own from being mounted: Landlock's ptrace-mode check refuses) | as a filesystem refusal's | [`ScopeTarget::Ptrace`]: that process, not a filesystem refusal |
//!
//! What differs from Landlock's own records:
//! - **Not only Landlock's refusals**: a signal refused by the kernel's
//!   permission check (a process of another user) is `EPERM` alike, and is
//!   shown as the refusal of a reach outside the run it is. A signal to a
//!   process of the run refused (by a Landlock domain the command made
//!   itself, inside the run's) is not a reach outside, and is left out;
//!   for an abstract socket the records cannot tell who bound it, and such
//!   a refusal is shown.
//! - **A process group** (`kill(0)`, `kill(-pgrp)`) refused whole names
//!   its first member, as kernel audit notes it.
//!
//! What no record shows below ABI 7, and so is not recorded there (the
//! run's notice says so, [`crate::kernel::Kernel::promises`] too):
//! - **A process hidden from the run's own `/proc`** (`hidepid=ptraceable`,
//!   [`crate::fs::OwnFs::Processes`]): Landlock's ptrace-mode check hides
//!   every process outside the run, and the run meets that as `ENOENT` on
//!   a lookup (the errno of every missing path: a rule for it would take
//!   each of the run's misses, every module a Python start-up looks for,
//!   past the kernel's backlog and with its real refusals) and as nothing
//!   at all in a listing. Only Landlock's own logging (ABI 7) names them.
//! - **A `SIGIO`/`SIGURG` to an owner outside the run** (`F_SETOWN`): at
//!   ABI 6 Landlock drops it when it is sent, where no call fails.

use super::super::kernel::AuditRecord;
use super::super::{FsEvent, ScopeEvent, ScopeTarget};
use super::records::Look;
use super::Watch;
use crate::state::{membership, Membership};

const SYSCALL: u16 = 1300;
const SOCKADDR: u16 = 1306;
const OBJ_PID: u16 = 1318;

/// `exit=-1`: `EPERM`.
const EPERM: &str = "-1";

fn field<'a>(r: &'a AuditRecord, key: &str) -> Option<&'a str> {
    r.fields.get(key).map(String::as_str)
}

/// The scope refusal told by one event's records (one serial), if it is a
/// reach outside the run of the watched run's that its `EPERM` rule
/// records ([`super::Reach`]): a signal to a process outside it, a connect
/// or send to an abstract unix socket. None for any other call.
pub(in crate::audit) fn refusal(
    group: &[AuditRecord],
    watch: &Watch,
    look: &dyn Look,
) -> Option<ScopeEvent> {
    let sys = group.iter().find(|r| r.ty == SYSCALL)?;
    let login_uid = watch.login_uid.to_string();
    let arch = format!("{:x}", super::rules::ARCH);
    if field(sys, "auid") != Some(login_uid.as_str())
        || field(sys, "exit") != Some(EPERM)
        || field(sys, "arch") != Some(arch.as_str())
    {
        return None;
    }
    let nr: i64 = field(sys, "syscall")?.parse().ok()?;
    let pid: u32 = field(sys, "pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    let arg = |i: usize| {
        field(sys, &format!("a{i}"))
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .unwrap_or(0)
    };
    let (target, told) = match nr {
        libc::SYS_kill
        | libc::SYS_tkill
        | libc::SYS_tgkill
        | libc::SYS_rt_sigqueueinfo
        | libc::SYS_rt_tgsigqueueinfo
        | libc::SYS_pidfd_send_signal
            if watch.reach.signals =>
        {
            let obj = group.iter().find(|r| r.ty == OBJ_PID);
            let (to_pid, to_comm) = if let Some(o) = obj {
                (
                    field(o, "opid").and_then(|p| p.parse::<u32>().ok())?,
                    field(o, "ocomm").unwrap_or_default().to_owned(),
                )
            } else {
                let to = named_process(nr, &arg, pid, look)?;
                (to, look.comm(to).unwrap_or_default())
            };
            if in_run(look, to_pid, watch) == Some(true) {
                return None;
            }
            (ScopeTarget::Signal { to_pid, to_comm }, obj)
        }
        libc::SYS_connect | libc::SYS_sendto | libc::SYS_sendmsg | libc::SYS_sendmmsg
            if watch.reach.abstract_sockets =>
        {
            let sa = group.iter().find(|r| r.ty == SOCKADDR)?;
            let name = abstract_name(field(sa, "saddr")?)?;
            (ScopeTarget::AbstractUnixSocket { name }, Some(sa))
        }
        _ => return None,
    };
    let raw: Vec<&str> = std::iter::once(sys)
        .chain(told)
        .map(|r| r.text.as_str())
        .collect();
    Some(ScopeEvent {
        pid,
        comm: field(sys, "comm").unwrap_or_default().to_owned(),
        target,
        raw: raw.join("\n"),
    })
}

/// Whether process `pid` is in the watched run's cgroup; None when that is
/// not known (it is gone).
fn in_run(look: &dyn Look, pid: u32, watch: &Watch) -> Option<bool> {
    let run = watch.cgroup.as_deref()?;
    let cgroups = look.cgroups(pid)?;
    Some(membership(&cgroups, run) == Membership::InRun)
}

/// The process a signal call's arguments name, where kernel audit noted
/// none: `kill`'s, `tkill`'s, `rt_sigqueueinfo`'s first (a process, or a
/// thread, as Landlock names it); `tgkill`'s and `rt_tgsigqueueinfo`'s
/// process; the process behind `pidfd_send_signal`'s descriptor, while the
/// caller `pid` holds it. None for a group (`kill(0)`, `kill(-pgrp)`).
fn named_process(nr: i64, arg: &dyn Fn(usize) -> u64, pid: u32, look: &dyn Look) -> Option<u32> {
    // An int argument is the register's low 32 bits.
    let int = (arg(0) as u32).cast_signed();
    if nr == libc::SYS_pidfd_send_signal {
        return look.pidfd_pid(pid, int);
    }
    u32::try_from(int).ok().filter(|p| *p > 0)
}

/// The abstract name of a `SOCKADDR` record's `saddr` (the address the
/// call gave, hex): an `AF_UNIX` address whose path starts with a NUL,
/// shown without it, as Landlock's records are read ([`super::super::kernel`]).
/// None for any other address.
fn abstract_name(saddr: &str) -> Option<String> {
    let bytes: Vec<u8> = (0..saddr.len() / 2)
        .map(|i| u8::from_str_radix(saddr.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let family = u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]);
    if family != libc::AF_UNIX as u16 || bytes.len() <= 3 || bytes[2] != 0 {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes[3..]).into_owned())
}

/// A filesystem refusal of the `/proc` entry of a process outside the run
/// (`/proc/<pid>` or beneath, `EACCES`: Landlock's ptrace-mode check, in
/// the machine's procfs, which shows every process), as the ptrace-mode
/// refusal Landlock ABI 7 logs it as. None for any other refusal: of
/// another path, of the run's own processes or of one gone since (whose
/// it was is not known): a filesystem refusal as any.
pub(in crate::audit) fn proc_entry(
    fs: &FsEvent,
    watch: &Watch,
    look: &dyn Look,
) -> Option<ScopeEvent> {
    let rest = fs.path.as_deref()?.strip_prefix("/proc/")?;
    let digits = rest.split('/').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let to_pid: u32 = digits.parse().ok()?;
    if in_run(look, to_pid, watch) != Some(false) {
        return None;
    }
    Some(ScopeEvent {
        pid: fs.pid,
        comm: fs.comm.clone(),
        target: ScopeTarget::Ptrace {
            to_pid,
            to_comm: look.comm(to_pid).unwrap_or_default(),
        },
        raw: fs.raw.clone(),
    })
}

#[cfg(test)]
mod tests;
