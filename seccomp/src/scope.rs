//! The seccomp part of the scoping fallbacks: on a kernel without
//! Landlock's scoping (ABI < 6, Linux < 6.12; Debian 12's 6.1 has ABI 2)
//! the calls that deliver a signal to a process the caller names, or that
//! bind an abstract unix socket's name, go to the supervisor
//! (`lockrun::supervise::scope`, `lockrun::supervise::abstract_unix`).
//!
//! - **Signals**: `kill`, `tkill`, `tgkill`, `rt_sigqueueinfo`,
//!   `rt_tgsigqueueinfo`, `pidfd_send_signal` — every one, signal 0
//!   included: the filter cannot tell the caller's own pid from another's.
//! - **Owners of a file's `SIGIO`/`SIGURG`** (what Landlock's scoping judges
//!   in `file_send_sigiotask`): `fcntl` `F_SETOWN` and `F_SETOWN_EX`,
//!   `ioctl` `FIOSETOWN` and `SIOCSPGRP` (sockets). `F_SETSIG` only picks
//!   the signal the owner gets, so it is not handed over.
//! - **`bind` of a unix address** whose length is not an inet one's, so that
//!   the supervisor learns the abstract names the run binds (an abstract
//!   name of exactly 13 or 25 bytes is bound unseen and is then reachable by
//!   no connect of the run: the kernel refuses the run's own, see
//!   `lockrun::bpf::unix`).

use seccompiler::BpfProgram;

use super::assemble::{arg_lo, insn, JA, JEQ_K, LD_W_ABS, RET_K, RET_USER_NOTIF};
use super::notify::INET_ADDRLENS;
use super::Fallbacks;

/// The calls that signal a process the caller names, handed over whole.
pub const SIGNAL_CALLS: &[(i64, &str)] = &[
    (libc::SYS_kill, "kill"),
    (libc::SYS_tkill, "tkill"),
    (libc::SYS_tgkill, "tgkill"),
    (libc::SYS_rt_sigqueueinfo, "rt_sigqueueinfo"),
    (libc::SYS_rt_tgsigqueueinfo, "rt_tgsigqueueinfo"),
    (libc::SYS_pidfd_send_signal, "pidfd_send_signal"),
];

/// `fcntl` commands that set who gets a file's `SIGIO` and `SIGURG`:
/// `F_SETOWN`, `F_SETOWN_EX` (asm-generic/fcntl.h; the same on every arch
/// lockrun is built for).
pub const OWNER_FCNTLS: [u32; 2] = [F_SETOWN, F_SETOWN_EX];
pub const F_SETOWN: u32 = 8;
pub const F_SETOWN_EX: u32 = 15;

/// `ioctl(FIOSETOWN)` and `ioctl(SIOCSPGRP)`: a socket's owner, by an int
/// in the caller's memory (asm-generic/sockios.h, the same on every arch
/// lockrun is built for).
pub const FIOSETOWN: u32 = 0x8901;
pub const SIOCSPGRP: u32 = 0x8902;

/// The sections of the fallback part for the scoping fallbacks, appended to
/// `p` with the accumulator holding the syscall number, which every path
/// that does not notify leaves there for the next section; the calls they
/// decide on go to `calls`.
pub(super) fn filter(fallbacks: Fallbacks, p: &mut BpfProgram, calls: &mut Vec<i64>) {
    if fallbacks.scoping {
        for (nr, _) in SIGNAL_CALLS {
            p.push(insn(JEQ_K, 0, 1, nr32(*nr)));
            p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
            calls.push(*nr);
        }
        arg_is_one_of(p, libc::SYS_fcntl, 1, &OWNER_FCNTLS);
        arg_is_one_of(p, libc::SYS_ioctl, 1, &[FIOSETOWN, SIOCSPGRP]);
        calls.extend([libc::SYS_fcntl, libc::SYS_ioctl]);
    }
    if abstract_names_supervised(fallbacks) {
        // bind(fd, addr, addrlen): notify unless addrlen is an inet one's.
        p.extend([
            insn(JEQ_K, 0, 5, nr32(libc::SYS_bind)),
            insn(LD_W_ABS, 0, 0, arg_lo(2)),
            insn(JEQ_K, 2, 0, INET_ADDRLENS[0]),
            insn(JEQ_K, 1, 0, INET_ADDRLENS[1]),
            insn(RET_K, 0, 0, RET_USER_NOTIF),
            insn(LD_W_ABS, 0, 0, 0), // nr, for the next section
        ]);
        calls.push(libc::SYS_bind);
    }
}

/// Whether the supervisor judges the abstract names the run reaches: where
/// Landlock does not scope them, and where the kernel refuses the run's own
/// unix connects (no cgroup unix hooks: lockrun's guard refuses every unix
/// connect a task of the run makes itself, so the supervisor performs them,
/// from outside Landlock's domain).
#[must_use]
pub fn abstract_names_supervised(fallbacks: Fallbacks) -> bool {
    fallbacks.scoping || fallbacks.unix_addresses
}

/// `nr == call && args[arg] ∈ values` → notify; otherwise on to the next
/// section with the number reloaded.
fn arg_is_one_of(p: &mut BpfProgram, call: i64, arg: u32, values: &[u32]) {
    let n = values.len();
    // Not this call: over the load, the n tests, the reload, the jump and the return.
    p.push(insn(JEQ_K, 0, (n + 4) as u8, nr32(call)));
    p.push(insn(LD_W_ABS, 0, 0, arg_lo(arg)));
    for (i, v) in values.iter().enumerate() {
        // Found: over the rest of the tests, the reload and the jump.
        p.push(insn(JEQ_K, (n - i + 1) as u8, 0, *v));
    }
    p.push(insn(LD_W_ABS, 0, 0, 0));
    p.push(insn(JA, 0, 0, 1));
    p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
}

fn nr32(nr: i64) -> u32 {
    u32::try_from(nr).unwrap_or(u32::MAX)
}

/// What the scoping sections hand over, for `lockrun policy show`.
#[must_use]
pub fn describe(fallbacks: Fallbacks) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if fallbacks.scoping {
        out.push((
            "supervised",
            format!(
                "{} (no Landlock scoping here: ABI < 6): let through to a process of the run, refused (EPERM, shown) \
                 to any other; a process group or -1: signalled by lockrun to its processes in the run only; \
                 fcntl F_SETOWN, F_SETOWN_EX, ioctl FIOSETOWN, SIOCSPGRP: lockrun sets the owner, only a process \
                 or group of the run",
                SIGNAL_CALLS
                    .iter()
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if abstract_names_supervised(fallbacks) {
        out.push((
            "supervised",
            "bind of a unix address (abstract names: lockrun binds them and remembers them); connect, sendto of an \
             abstract address: lockrun connects or sends, only to a name the run bound (EPERM, shown, otherwise)"
                .to_owned(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::assemble::RET_ALLOW as A;
    use super::super::assemble::RET_USER_NOTIF as N;
    use super::super::tests::run;
    use super::super::Fallbacks;

    const SCOPING: Fallbacks = Fallbacks {
        scoping: true,
        ..Fallbacks::NONE
    };
    const UNIX: Fallbacks = Fallbacks {
        unix_addresses: true,
        ..Fallbacks::NONE
    };

    /// Each case's verdict from the whole program with `fallbacks`.
    fn check(fallbacks: Fallbacks, cases: &[(i64, [u64; 6], u32, &str)]) {
        let p = crate::compile(fallbacks).unwrap();
        for (nr, args, want, what) in cases {
            assert_eq!(run(&p, *nr, *args), *want, "{fallbacks:?}: {what}");
        }
    }

    #[test]
    fn without_scoping_the_signals_and_owners_go_to_the_supervisor() {
        let mut cases = Vec::new();
        for (nr, name) in super::SIGNAL_CALLS {
            cases.push((*nr, [4321, 15, 0, 0, 0, 0], N, *name));
            cases.push((*nr, [0, 0, 0, 0, 0, 0], N, *name));
        }
        let f = libc::SYS_fcntl;
        let i = libc::SYS_ioctl;
        cases.extend([
            (f, [3, 8, 4321, 0, 0, 0], N, "F_SETOWN"),
            (f, [3, 15, 0x1000, 0, 0, 0], N, "F_SETOWN_EX"),
            (
                f,
                [3, 0x1_0000_0008, 4321, 0, 0, 0],
                N,
                "F_SETOWN, junk above",
            ),
            (f, [3, 9, 0, 0, 0, 0], A, "F_GETOWN"),
            (f, [3, 10, 29, 0, 0, 0], A, "F_SETSIG"),
            (f, [3, 4, 0o4000, 0, 0, 0], A, "F_SETFL"),
            (
                f,
                [3, 1024, 1, 0, 0, 0],
                N,
                "F_SETLEASE: still the deny list's",
            ),
            (i, [3, 0x8901, 0x1000, 0, 0, 0], N, "FIOSETOWN"),
            (i, [3, 0x8902, 0x1000, 0, 0, 0], N, "SIOCSPGRP"),
            (i, [3, libc::TCGETS, 0x1000, 0, 0, 0], A, "TCGETS"),
            (
                i,
                [3, libc::TIOCSTI, 0x1000, 0, 0, 0],
                N,
                "TIOCSTI: the deny list's",
            ),
            (
                i,
                [3, 0x4008_6602, 0x1000, 0, 0, 0],
                A,
                "FS_IOC_SETFLAGS: the mounts' (the kernel's)",
            ),
            (
                libc::SYS_bind,
                [3, 0x1000, 110, 0, 0, 0],
                N,
                "bind, unix length",
            ),
            (libc::SYS_bind, [3, 0x1000, 16, 0, 0, 0], A, "bind, inet"),
            (libc::SYS_bind, [3, 0x1000, 28, 0, 0, 0], A, "bind, inet6"),
            (
                libc::SYS_connect,
                [3, 0x1000, 16, 0, 0, 0],
                A,
                "connect, inet",
            ),
            (
                libc::SYS_connect,
                [3, 0x1000, 110, 0, 0, 0],
                N,
                "connect, unix",
            ),
            (libc::SYS_getpid, [0; 6], A, "getpid"),
            (libc::SYS_read, [3, 0x1000, 16, 0, 0, 0], A, "read"),
        ]);
        check(SCOPING, &cases);
        // With the supervisor performing metadata calls, chattr is its too.
        let setflags = [3, 0x4008_6602, 0x1000, 0, 0, 0];
        let supervised = Fallbacks {
            metadata: true,
            ..SCOPING
        };
        check(
            supervised,
            &[(i, setflags, N, "FS_IOC_SETFLAGS: performed")],
        );
    }

    #[test]
    fn with_every_mechanism_they_stay_the_kernels() {
        let mut cases = Vec::new();
        for (nr, name) in super::SIGNAL_CALLS {
            cases.push((*nr, [4321, 15, 0, 0, 0, 0], A, *name));
        }
        cases.extend([
            (libc::SYS_fcntl, [3, 8, 4321, 0, 0, 0], A, "F_SETOWN"),
            (
                libc::SYS_ioctl,
                [3, 0x8901, 0x1000, 0, 0, 0],
                A,
                "FIOSETOWN",
            ),
            (
                libc::SYS_bind,
                [3, 0x1000, 110, 0, 0, 0],
                A,
                "bind, unix length",
            ),
        ]);
        check(Fallbacks::NONE, &cases);
        // Without the unix hooks only: the abstract names, not the signals.
        check(
            UNIX,
            &[
                (libc::SYS_kill, [4321, 15, 0, 0, 0, 0], A, "kill"),
                (libc::SYS_fcntl, [3, 8, 4321, 0, 0, 0], A, "F_SETOWN"),
                (libc::SYS_bind, [3, 0x1000, 110, 0, 0, 0], N, "bind"),
                (libc::SYS_bind, [3, 0x1000, 16, 0, 0, 0], A, "bind, inet"),
            ],
        );
    }

    /// The front lets no call of the fallback part through undecided: with
    /// the fallbacks, the program answers as its parts chained, for every
    /// number up to 1024.
    #[test]
    fn the_front_knows_the_fallback_calls() {
        for f in [SCOPING, UNIX] {
            let all = crate::compile(f).unwrap();
            let (parts, _) = super::super::assemble::parts(f).unwrap();
            let parts = super::super::assemble::chain(&parts).unwrap();
            for nr in 0..1024 {
                for a in [[0; 6], [3, 8, 110, 0, 0, 0], [3, 0x8901, 16, 0, 0, 0]] {
                    assert_eq!(run(&all, nr, a), run(&parts, nr, a), "{f:?} nr {nr} {a:?}");
                }
            }
        }
    }
}
