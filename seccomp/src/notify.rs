//! The supervised part of the filter ([`notify_filter`]): the calls handed
//! to lockrun's supervisor to judge or perform (`SECCOMP_RET_USER_NOTIF`,
//! Linux 5.0) — the metadata calls Landlock does not cover, inode-attribute
//! ioctls, non-inet `connect`/`sendto`, port sharing, and scheduling calls
//! that name another task ([`NOTIFY_SCHED`], [`sched_target`]).

use seccompiler::BpfProgram;

use super::assemble::{
    arg_hi, arg_lo, insn, AUDIT_ARCH, JEQ_K, JSET_K, LD_W_ABS, RET_ALLOW, RET_K, RET_KILL_PROCESS,
    RET_USER_NOTIF,
};
use super::{Fallbacks, SYS_FCHMODAT2, SYS_REMOVEXATTRAT, SYS_SETXATTRAT};

/// The metadata syscalls the supervisor performs for the command: Landlock
/// (ABI 7) does not check them, and a capability-less root still owns every
/// root-owned file.
pub const NOTIFY_METADATA: &[i64] = &[
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    SYS_FCHMODAT2,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chown,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_lchown,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_utime,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_utimes,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_futimesat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    SYS_SETXATTRAT,
    SYS_REMOVEXATTRAT,
];

/// The calls of [`NOTIFY_METADATA`] that set a mode, each with the
/// argument the mode is in. Where the run's mounts are read-only outside
/// its writable roots (no [`Fallbacks::metadata`]), the kernel refuses
/// every metadata call outside them itself (`EROFS`) and performs those
/// beneath them; only a mode with a set-id bit still goes to the
/// supervisor, which refuses it but set-group-ID on a directory
/// (`deny_list::set_id_refused`: the filter cannot tell a directory).
pub const MODE_CALLS: &[(i64, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_chmod, 1),
    (libc::SYS_fchmod, 1),
    (libc::SYS_fchmodat, 2),
    (SYS_FCHMODAT2, 2),
];

/// `S_ISUID | S_ISGID`: a mode of [`MODE_CALLS`] with either goes to the
/// supervisor.
pub const SET_ID_BITS: u32 = 0o6000;

/// `inotify_add_watch`, performed by the supervisor, which refuses a watch
/// on a denied path (`lockrun::supervise::watch`): Landlock does not check
/// watches, and a watch on a directory names what appears in it.
pub const NOTIFY_WATCH: i64 = libc::SYS_inotify_add_watch;

/// `setsockopt(fd, SOL_SOCKET, optname, …)` with one of these options goes
/// to the supervisor, which refuses turning on port sharing for inet
/// sockets and performs the rest (`lockrun::supervise::reuse`).
pub const NOTIFY_SOCKOPTS: [u32; 2] = [libc::SO_REUSEADDR as u32, libc::SO_REUSEPORT as u32];

/// `file_setattr` (Linux 6.17; one number on every arch).
pub const SYS_FILE_SETATTR: i64 = 469;

/// `ioctl` commands that change an inode's attributes with only ownership
/// (or write access) to show — Landlock's `ioctl_dev` covers device files
/// only. The supervisor performs the first group beneath a writable root and
/// refuses everything else.
pub const NOTIFY_IOCTLS: &[u32] = &[
    0x4008_6602, // FS_IOC_SETFLAGS (chattr)
    0x4004_6602, // FS_IOC32_SETFLAGS
    0x401c_5820, // FS_IOC_FSSETXATTR (xflags, project id, extent size)
    0x4008_7602, // FS_IOC_SETVERSION
    0x4004_7602, // FS_IOC32_SETVERSION
    0x4008_6604, // EXT4_IOC_SETVERSION
    0x4004_6604, // EXT4_IOC32_SETVERSION
    0x4080_6685, // FS_IOC_ENABLE_VERITY: the file becomes immutable for good
    0x800c_6613, // FS_IOC_SET_ENCRYPTION_POLICY (on an empty directory)
];

/// The commands of [`NOTIFY_IOCTLS`] refused wherever they point: the
/// only ones still handed over where the mounts hold the rest (no
/// [`Fallbacks::metadata`]); the kernel then refuses the others outside
/// the writable roots itself (`EROFS`: each takes `mnt_want_write_file`).
pub const REFUSED_IOCTLS: &[u32] = &[
    0x4080_6685, // FS_IOC_ENABLE_VERITY
    0x800c_6613, // FS_IOC_SET_ENCRYPTION_POLICY
];

/// The metadata calls the filter decides on for `fallbacks`: every one
/// where the supervisor performs them, those of [`MODE_CALLS`] where the
/// mounts hold the rest.
#[must_use]
pub fn metadata_decided(fallbacks: Fallbacks) -> Vec<i64> {
    if fallbacks.metadata {
        NOTIFY_METADATA.to_vec()
    } else {
        MODE_CALLS.iter().map(|(nr, _)| *nr).collect()
    }
}

/// The `ioctl` commands handed over for `fallbacks`.
#[must_use]
pub fn ioctls_notified(fallbacks: Fallbacks) -> &'static [u32] {
    if fallbacks.metadata {
        NOTIFY_IOCTLS
    } else {
        REFUSED_IOCTLS
    }
}

/// The calls [`notify_filter`] judges by their arguments: `ioctl` by its
/// command, `connect` and `sendto` by their address length.
pub(super) const NOTIFY_JUDGED: [i64; 4] = [
    libc::SYS_ioctl,
    libc::SYS_connect,
    libc::SYS_sendto,
    libc::SYS_setsockopt,
];

/// A call that sets a task's CPU or I/O scheduling.
#[derive(Debug)]
pub struct SchedCall {
    pub nr: i64,
    pub name: &'static str,
    /// The registers that name the caller itself, `(argument, value)`:
    /// when all are so, the filter lets the call through.
    pub own: &'static [(u32, u32)],
    /// The argument that names the task (or group, or uid).
    pub who: usize,
}

/// The calls that set a task's CPU or I/O scheduling: only those naming
/// the caller itself pass the filter; every other target goes to the
/// supervisor ([`sched_target`]). The kernel lets a task set these for any task of its
/// uid with no more capabilities than its own (`cap_safe_nice`): for a run's
/// command, whose are none, that is every capability-less process of its uid,
/// another run's command among them. Landlock's scoping covers signals, not
/// these.
pub const NOTIFY_SCHED: &[SchedCall] = &[
    // setpriority(which, who, prio): PRIO_PROCESS 0, who 0 is the caller.
    SchedCall {
        nr: libc::SYS_setpriority,
        name: "setpriority",
        own: &[(0, 0), (1, 0)],
        who: 1,
    },
    // ioprio_set(which, who, ioprio): IOPRIO_WHO_PROCESS 1, who 0.
    SchedCall {
        nr: libc::SYS_ioprio_set,
        name: "ioprio_set",
        own: &[(0, 1), (1, 0)],
        who: 1,
    },
    // sched_*(pid, …): pid 0 is the caller.
    SchedCall {
        nr: libc::SYS_sched_setaffinity,
        name: "sched_setaffinity",
        own: &[(0, 0)],
        who: 0,
    },
    SchedCall {
        nr: libc::SYS_sched_setscheduler,
        name: "sched_setscheduler",
        own: &[(0, 0)],
        who: 0,
    },
    SchedCall {
        nr: libc::SYS_sched_setparam,
        name: "sched_setparam",
        own: &[(0, 0)],
        who: 0,
    },
    SchedCall {
        nr: libc::SYS_sched_setattr,
        name: "sched_setattr",
        own: &[(0, 0)],
        who: 0,
    },
];

/// Whom a scheduling call of [`NOTIFY_SCHED`] names, as the kernel reads
/// its registers (ints: their low halves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedTarget {
    /// The caller itself: the filter lets it through, never notified.
    Caller,
    /// One task, by its tid (a pid names its thread-group leader): allowed
    /// only for a task of the run.
    Task { call: &'static str, tid: i32 },
    /// A process group, every process of a uid, or a `which` the kernel
    /// does not know: refused, described for the record.
    Many(String),
}

/// [`SchedTarget`] of a call of [`NOTIFY_SCHED`]; `None` for any other.
/// Agrees with [`notify_filter`]: `Caller` exactly when it does not
/// notify (`sched_target_agrees_with_the_filter`).
#[must_use]
pub fn sched_target(nr: i64, args: [u64; 6]) -> Option<SchedTarget> {
    let c = NOTIFY_SCHED.iter().find(|c| c.nr == nr)?;
    let call = c.name;
    let low = |i: usize| (args[i] & 0xffff_ffff) as u32;
    if c.own.iter().all(|(a, v)| low(*a as usize) == *v) {
        return Some(SchedTarget::Caller);
    }
    let who = low(c.who).cast_signed();
    let whose = |what: &str| {
        if who == 0 {
            format!("its own {what}")
        } else {
            format!("{what} {who}")
        }
    };
    Some(match (nr, low(0)) {
        (libc::SYS_setpriority, 0) | (libc::SYS_ioprio_set, 1) => {
            SchedTarget::Task { call, tid: who }
        }
        (libc::SYS_setpriority, 1) => SchedTarget::Many(format!(
            "setpriority PRIO_PGRP of {}",
            whose("process group")
        )),
        (libc::SYS_setpriority, 2) => SchedTarget::Many(format!(
            "setpriority PRIO_USER of every process of {}",
            whose("uid")
        )),
        (libc::SYS_ioprio_set, 2) => SchedTarget::Many(format!(
            "ioprio_set IOPRIO_WHO_PGRP of {}",
            whose("process group")
        )),
        (libc::SYS_ioprio_set, 3) => SchedTarget::Many(format!(
            "ioprio_set IOPRIO_WHO_USER of every process of {}",
            whose("uid")
        )),
        (libc::SYS_setpriority | libc::SYS_ioprio_set, which) => {
            SchedTarget::Many(format!("{call} with which {which}"))
        }
        _ => SchedTarget::Task { call, tid: who },
    })
}

/// `sizeof(struct sockaddr_in)`, `sizeof(struct sockaddr_in6)`.
pub const INET_ADDRLENS: [u32; 2] = [16, 28];

/// The supervised filter (classic BPF, written out: seccompiler 0.5 has no
/// `USER_NOTIF` action), for a kernel lacking `fallbacks`. Decides on
/// registers only:
/// - [`NOTIFY_WATCH`] → notify; with [`Fallbacks::metadata`], every call
///   of [`NOTIFY_METADATA`] → notify; without, only a call of
///   [`MODE_CALLS`] whose mode has a bit of [`SET_ID_BITS`], the others
///   allowed (the read-only mounts hold them);
/// - `ioctl` with a command of [`ioctls_notified`] → notify;
/// - `connect(fd, addr, addrlen)` → notify unless `addrlen` is 16 or 28
///   (TCP/UDP to an inet address keeps its speed; a unix address of exactly
///   that length is refused by the unix hooks, see `lockrun::bpf::unix`);
/// - `sendto(fd, buf, len, flags, addr, addrlen)` → notify when `addr` is not
///   NULL and `addrlen` is not 16 or 28;
/// - `setsockopt(fd, SOL_SOCKET, SO_REUSEADDR | SO_REUSEPORT)` → notify;
/// - the scheduling calls of [`NOTIFY_SCHED`] → notify unless they name
///   the caller itself;
/// - everything else → allow (the other filters still apply).
#[must_use]
pub fn notify_filter(fallbacks: Fallbacks) -> BpfProgram {
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4), // arch
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // nr
    ];
    let always: &[i64] = if fallbacks.metadata {
        NOTIFY_METADATA
    } else {
        &[]
    };
    for nr in always.iter().chain([&NOTIFY_WATCH]) {
        p.push(insn(JEQ_K, 0, 1, u32::try_from(*nr).unwrap_or(u32::MAX)));
        p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
    }
    if !fallbacks.metadata {
        for (nr, arg) in MODE_CALLS {
            // Not this call: over the load, the test and both returns.
            p.push(insn(JEQ_K, 0, 4, u32::try_from(*nr).unwrap_or(u32::MAX)));
            p.push(insn(LD_W_ABS, 0, 0, arg_lo(*arg)));
            p.push(insn(JSET_K, 1, 0, SET_ID_BITS));
            p.push(insn(RET_K, 0, 0, RET_ALLOW));
            p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
        }
    }
    // ioctl: the command is args[1] (an unsigned int).
    let ioctls = ioctls_notified(fallbacks);
    let n = ioctls.len();
    // Not ioctl: skip the load, the n tests and both returns.
    p.push(insn(JEQ_K, 0, (n + 3) as u8, libc::SYS_ioctl as u32));
    p.push(insn(LD_W_ABS, 0, 0, arg_lo(1)));
    for (i, cmd) in ioctls.iter().enumerate() {
        p.push(insn(JEQ_K, (n - i) as u8, 0, *cmd));
    }
    p.push(insn(RET_K, 0, 0, RET_ALLOW));
    p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
    // connect: addrlen is args[2].
    p.extend([
        insn(JEQ_K, 0, 5, libc::SYS_connect as u32),
        insn(LD_W_ABS, 0, 0, arg_lo(2)),
        insn(JEQ_K, 2, 0, INET_ADDRLENS[0]),
        insn(JEQ_K, 1, 0, INET_ADDRLENS[1]),
        insn(RET_K, 0, 0, RET_USER_NOTIF),
        insn(RET_K, 0, 0, RET_ALLOW),
    ]);
    // sendto: addr is args[4], addrlen args[5].
    p.extend([
        insn(JEQ_K, 0, 9, libc::SYS_sendto as u32),
        insn(LD_W_ABS, 0, 0, arg_lo(4)),
        insn(JEQ_K, 0, 2, 0),
        insn(LD_W_ABS, 0, 0, arg_hi(4)),
        insn(JEQ_K, 4, 0, 0), // addr == NULL
        insn(LD_W_ABS, 0, 0, arg_lo(5)),
        insn(JEQ_K, 2, 0, INET_ADDRLENS[0]),
        insn(JEQ_K, 1, 0, INET_ADDRLENS[1]),
        insn(RET_K, 0, 0, RET_USER_NOTIF),
        insn(RET_K, 0, 0, RET_ALLOW),
    ]);
    // setsockopt: SOL_SOCKET (args[1]) and one of the port-sharing options (args[2]).
    p.extend([
        insn(JEQ_K, 0, 7, libc::SYS_setsockopt as u32),
        insn(LD_W_ABS, 0, 0, arg_lo(1)),
        insn(JEQ_K, 0, 3, libc::SOL_SOCKET as u32),
        insn(LD_W_ABS, 0, 0, arg_lo(2)),
        insn(JEQ_K, 2, 0, NOTIFY_SOCKOPTS[0]),
        insn(JEQ_K, 1, 0, NOTIFY_SOCKOPTS[1]),
        insn(RET_K, 0, 0, RET_ALLOW),
        insn(RET_K, 0, 0, RET_USER_NOTIF),
    ]);
    // Scheduling: allowed when every register naming the caller does.
    for c in NOTIFY_SCHED {
        let m = c.own.len();
        // Not this call: over the m loads and tests and both returns.
        let nr = u32::try_from(c.nr).unwrap_or(u32::MAX);
        p.push(insn(JEQ_K, 0, (2 * m + 2) as u8, nr));
        for (i, (arg, value)) in c.own.iter().enumerate() {
            p.push(insn(LD_W_ABS, 0, 0, arg_lo(*arg)));
            // Another target: over the rest and the allow, to the notify.
            p.push(insn(JEQ_K, 0, (2 * (m - i - 1) + 1) as u8, *value));
        }
        p.push(insn(RET_K, 0, 0, RET_ALLOW));
        p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
    }
    p.push(insn(RET_K, 0, 0, RET_ALLOW));
    p
}

#[cfg(test)]
mod tests {
    use crate::assemble::{RET_ALLOW, RET_USER_NOTIF};
    use crate::tests::{run, steps};

    /// Where the mounts hold metadata outside the writable roots, only a mode
    /// with a set-id bit, `inotify_add_watch` and the ioctls refused everywhere
    /// are handed over; every other metadata call and inode-attribute ioctl is
    /// the kernel's, whatever its arguments.
    #[test]
    fn with_the_mounts_only_set_id_modes_and_refused_ioctls_are_notified() {
        const A: u32 = RET_ALLOW;
        const N: u32 = RET_USER_NOTIF;
        let p = super::notify_filter(crate::Fallbacks::NONE);
        let modes = super::MODE_CALLS;
        for nr in super::NOTIFY_METADATA {
            if modes.iter().any(|(m, _)| m == nr) {
                continue;
            }
            for a in [[0; 6], [u64::MAX; 6], [3, 0o4755, 0o6755, 0o4755, 0, 0]] {
                assert_eq!(run(&p, *nr, a), A, "nr {nr} {a:?}");
            }
        }
        for (nr, arg) in modes {
            for (mode, want) in [
                (0o755, A),
                (0o1777, A),
                (0o4755, N),
                (0o2755, N),
                (0o6000, N),
                ((1 << 32) | 0o755, A),
                (0xffff_ffff_0000_0000 | 0o644, A),
                (u64::MAX, N),
            ] {
                let mut a = [3, 0x1000, 0x1000, 0, 0, 0];
                a[*arg as usize] = mode;
                assert_eq!(run(&p, *nr, a), want, "nr {nr} mode {mode:#o}");
            }
        }
        assert_eq!(run(&p, super::NOTIFY_WATCH, [0; 6]), N);
        for cmd in super::NOTIFY_IOCTLS {
            let want = if super::REFUSED_IOCTLS.contains(cmd) {
                N
            } else {
                A
            };
            let a = [0, u64::from(*cmd), 0, 0, 0, 0];
            assert_eq!(run(&p, libc::SYS_ioctl, a), want, "ioctl {cmd:#x}");
        }
        // The whole program agrees: no other part takes these calls.
        let all = crate::compile(crate::Fallbacks::NONE).unwrap();
        let fchmod = libc::SYS_fchmod;
        assert_eq!(run(&all, fchmod, [3, 0o644, 0, 0, 0, 0]), A);
        assert_eq!(run(&all, fchmod, [3, 0o4755, 0, 0, 0, 0]), N);
        assert_eq!(run(&all, libc::SYS_fchown, [3, 0, 0, 0, 0, 0]), A);
        let (_, steps_chown) = steps(&all, libc::SYS_fchown, [3, 0, 0, 0, 0, 0]);
        let (_, steps_chmod) = steps(&all, fchmod, [3, 0o644, 0, 0, 0, 0]);
        // Through the front's search alone (and, allowed for every argument,
        // in the kernel's cache of calls it never runs the filter for).
        assert!(steps_chown <= 25, "fchown took {steps_chown} instructions");
        assert!(steps_chmod <= 15, "fchmod took {steps_chmod} instructions");
    }
}
