//! The filter's parts run through a small classic-BPF interpreter, against
//! the supervisor's own decisions.

use super::assemble::{
    chain, fast_paths, front, insn, parts, AUDIT_ARCH, JA, JEQ_K, JGE_K, JSET_K, LD_W_ABS,
    RET_ALLOW, RET_K, RET_USER_NOTIF,
};
use super::deny_list::{filters, DENY_ALWAYS, F_SETLEASE, F_UNLCK, TERMINAL_IOCTLS};

const JGT_K: u16 = 0x25;
const AND_K: u16 = 0x54;

/// Run a classic-BPF filter on a `seccomp_data` (the opcodes lockrun's
/// and seccompiler's filters use; any other fails the test).
pub(crate) fn run(p: &[seccompiler::sock_filter], nr: i64, args: [u64; 6]) -> u32 {
    steps(p, nr, args).0
}

/// [`run`]'s verdict, and how many instructions it took to reach it.
pub(crate) fn steps(p: &[seccompiler::sock_filter], nr: i64, args: [u64; 6]) -> (u32, usize) {
    let mut data = Vec::new();
    data.extend_from_slice(&u32::try_from(nr).unwrap_or(u32::MAX).to_le_bytes());
    data.extend_from_slice(&AUDIT_ARCH.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes());
    for a in args {
        data.extend_from_slice(&a.to_le_bytes());
    }
    let (mut pc, mut acc, mut taken) = (0usize, 0u32, 0usize);
    loop {
        taken += 1;
        let f = &p[pc];
        match f.code {
            LD_W_ABS => {
                let k = f.k as usize;
                acc = u32::from_le_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]);
                pc += 1;
            }
            JEQ_K => {
                pc += 1 + usize::from(if acc == f.k { f.jt } else { f.jf });
            }
            JGE_K => {
                pc += 1 + usize::from(if acc >= f.k { f.jt } else { f.jf });
            }
            JGT_K => {
                pc += 1 + usize::from(if acc > f.k { f.jt } else { f.jf });
            }
            JSET_K => {
                pc += 1 + usize::from(if acc & f.k != 0 { f.jt } else { f.jf });
            }
            AND_K => {
                acc &= f.k;
                pc += 1;
            }
            JA => pc += 1 + f.k as usize,
            RET_K => return (f.k, taken),
            c => panic!("opcode {c:#x}"),
        }
    }
}

#[test]
fn notify_filter_decides_on_registers() {
    const A: u32 = RET_ALLOW;
    const N: u32 = RET_USER_NOTIF;
    let p = crate::notify::notify_filter(SUPERVISED);
    let c = libc::SYS_connect;
    assert_eq!(run(&p, c, [3, 0x1000, 16, 0, 0, 0]), A, "sockaddr_in");
    assert_eq!(run(&p, c, [3, 0x1000, 28, 0, 0, 0]), A, "sockaddr_in6");
    assert_eq!(run(&p, c, [3, 0x1000, 110, 0, 0, 0]), N, "sockaddr_un");
    assert_eq!(run(&p, c, [3, 0x1000, 128, 0, 0, 0]), N, "sockaddr_storage");
    let s = libc::SYS_sendto;
    assert_eq!(run(&p, s, [3, 1, 1, 0, 0, 0]), A, "no address");
    assert_eq!(run(&p, s, [3, 1, 1, 0, 0, 110]), A, "NULL address");
    assert_eq!(run(&p, s, [3, 1, 1, 0, 0x1_0000_0000, 110]), N, "high half");
    assert_eq!(run(&p, s, [3, 1, 1, 0, 0x1000, 16]), A);
    assert_eq!(run(&p, s, [3, 1, 1, 0, 0x1000, 20]), N);
    for nr in crate::notify::NOTIFY_METADATA
        .iter()
        .chain([&crate::notify::NOTIFY_WATCH])
    {
        assert_eq!(run(&p, *nr, [0; 6]), N, "nr {nr}");
    }
    for cmd in crate::notify::NOTIFY_IOCTLS {
        assert_eq!(
            run(&p, libc::SYS_ioctl, [0, u64::from(*cmd), 0, 0, 0, 0]),
            N
        );
    }
    assert_eq!(run(&p, libc::SYS_ioctl, [0, libc::TCGETS, 0, 0, 0, 0]), A);
    assert_eq!(run(&p, libc::SYS_ioctl, [0, libc::TIOCGETD, 0, 0, 0, 0]), A);
    let so = libc::SYS_setsockopt;
    let sol = libc::SOL_SOCKET as u64;
    assert_eq!(run(&p, so, [3, sol, 2, 0x1000, 4, 0]), N, "SO_REUSEADDR");
    assert_eq!(run(&p, so, [3, sol, 15, 0x1000, 4, 0]), N, "SO_REUSEPORT");
    assert_eq!(run(&p, so, [3, sol, 9, 0x1000, 4, 0]), A, "SO_KEEPALIVE");
    assert_eq!(run(&p, so, [3, 6, 2, 0x1000, 4, 0]), A, "IPPROTO_TCP level");
    for nr in [
        libc::SYS_read,
        libc::SYS_openat,
        libc::SYS_sendmsg,
        libc::SYS_bind,
    ] {
        assert_eq!(run(&p, nr, [0, 0, 16, 0, 0, 110]), A, "nr {nr}");
    }
}

/// The supervisor performing every metadata call: a kernel without the
/// read-only mounts' refusals seen.
pub(crate) const SUPERVISED: super::Fallbacks = super::Fallbacks {
    metadata: true,
    ..super::Fallbacks::NONE
};

/// The filter notifies a scheduling call exactly when
/// [`crate::notify::sched_target`] says it names another than the caller, for
/// the registers each call reads and junk in their high halves.
#[test]
fn sched_target_agrees_with_the_filter() {
    const A: u32 = RET_ALLOW;
    const N: u32 = RET_USER_NOTIF;
    use crate::notify::SchedTarget;
    let p = crate::notify::notify_filter(super::Fallbacks::NONE);
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let values = [
        0,
        1,
        2,
        3,
        4,
        4321,
        0xffff_ffff,
        0x1_0000_0000,
        0x7_0000_0002,
    ];
    for c in crate::notify::NOTIFY_SCHED {
        let nr = c.nr;
        for a0 in values {
            for a1 in values {
                let args = [a0, a1, 19, 0, 0, 0];
                let target = crate::notify::sched_target(nr, args).unwrap();
                let want = if target == SchedTarget::Caller { A } else { N };
                assert_eq!(run(&p, nr, args), want, "nr {nr} {args:?} {target:?}");
                assert_eq!(run(&all, nr, args), want, "combined: nr {nr} {args:?}");
            }
        }
    }
    assert_eq!(
        crate::notify::sched_target(libc::SYS_getpriority, [0; 6]),
        None
    );
    let t = |nr, a0, a1| crate::notify::sched_target(nr, [a0, a1, 19, 0, 0, 0]).unwrap();
    let s = libc::SYS_setpriority;
    assert_eq!(t(s, 0, 0), SchedTarget::Caller);
    assert_eq!(t(s, 0x1_0000_0000, 0), SchedTarget::Caller, "an int");
    assert_eq!(
        t(s, 0, 4321),
        SchedTarget::Task {
            call: "setpriority",
            tid: 4321
        }
    );
    assert_eq!(
        t(s, 2, 0),
        SchedTarget::Many("setpriority PRIO_USER of every process of its own uid".into())
    );
    assert_eq!(
        t(s, 1, 77),
        SchedTarget::Many("setpriority PRIO_PGRP of process group 77".into())
    );
    let io = libc::SYS_ioprio_set;
    assert_eq!(t(io, 1, 0), SchedTarget::Caller);
    assert_eq!(
        t(io, 0, 0),
        SchedTarget::Many("ioprio_set with which 0".into())
    );
    assert_eq!(
        t(io, 3, 0),
        SchedTarget::Many("ioprio_set IOPRIO_WHO_USER of every process of its own uid".into())
    );
    assert_eq!(
        t(libc::SYS_sched_setaffinity, 0xffff_ffff, 0),
        SchedTarget::Task {
            call: "sched_setaffinity",
            tid: -1
        }
    );
}

#[test]
fn notify_filter_jumps_stay_inside() {
    for fallbacks in [super::Fallbacks::NONE, SUPERVISED] {
        let p = crate::notify::notify_filter(fallbacks);
        for (i, f) in p.iter().enumerate() {
            if f.code == JEQ_K || f.code == JSET_K {
                assert!(i + 1 + usize::from(f.jt.max(f.jf)) < p.len(), "insn {i}");
            }
        }
        assert_eq!(p.last().map(|f| f.code), Some(RET_K));
    }
}

#[test]
fn chain_turns_each_allow_but_the_last_into_a_jump_to_the_next_part() {
    let a = vec![
        insn(LD_W_ABS, 0, 0, 0),
        insn(JEQ_K, 0, 1, 7),
        insn(RET_K, 0, 0, 0x0005_0001), // errno
        insn(RET_K, 0, 0, RET_ALLOW),
    ];
    let b = vec![insn(LD_W_ABS, 0, 0, 0), insn(RET_K, 0, 0, RET_ALLOW)];
    let c = chain(&[a.clone(), b.clone(), b.clone()]).unwrap();
    assert_eq!(c.len(), a.len() + 2 * b.len());
    // a's allow (index 3) jumps to index 4, b's first allow to index 6.
    assert_eq!((c[3].code, c[3].k), (JA, 0));
    assert_eq!((c[5].code, c[5].k), (JA, 0));
    assert_eq!((c[2].code, c[2].k), (RET_K, 0x0005_0001));
    assert_eq!((c[7].code, c[7].k), (RET_K, RET_ALLOW));
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    // After the front, only the last part may allow; every jump of the
    // parts lands inside the program.
    let tail = crate::notify::notify_filter(super::Fallbacks::NONE).len();
    let (_, decided) = parts(super::Fallbacks::NONE).unwrap();
    let front = front(&decided, &fast_paths(super::Fallbacks::NONE)).len();
    for (i, f) in all.iter().enumerate().skip(front) {
        if f.code == RET_K && f.k == RET_ALLOW {
            assert!(
                i >= all.len() - tail,
                "allow at {i} before the notifying part"
            );
        }
        if f.code == JA {
            assert!(i + 1 + f.k as usize <= all.len() - tail, "jump at {i}");
        }
    }
}

#[test]
fn filters_compile_for_this_arch() {
    let (f, _) = filters().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|p| !p.is_empty() && p.len() < u16::MAX.into()));
}

/// Each call of the deny list goes to the supervisor (which answers
/// EPERM and reports it) whatever its arguments; the list holds the
/// whole mount family, including the calls newer kernels added to it.
#[test]
fn every_call_of_the_deny_list_is_handed_to_the_supervisor() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    for (nr, name, _) in DENY_ALWAYS {
        for a in [[0; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]] {
            assert_eq!(run(&all, *nr, a), RET_USER_NOTIF, "{name} {a:?}");
        }
        assert_eq!(
            crate::refused::refused_call(*nr, [0; 6])
                .map(|(c, _)| c)
                .as_deref(),
            Some(*name)
        );
    }
    let names: Vec<&str> = DENY_ALWAYS.iter().map(|(_, n, _)| *n).collect();
    for call in [
        "mount",
        "umount2",
        "pivot_root",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "fsopen",
        "fsmount",
        "fsconfig",
        "fspick",
        "mount_setattr",
    ] {
        assert!(names.contains(&call), "{call} is not refused");
    }
}

/// Of the terminal ioctls, those that read what a refused one sets, or
/// undo it, pass.
#[test]
fn terminal_ioctls_that_read_or_undo_pass() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
        (
            libc::SYS_ioctl,
            [0, libc::TIOCGETD, 0x7ffd_0000, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
        (
            libc::SYS_ioctl,
            [0, libc::TIOCNXCL, 0, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
    ];
    check_cases(&all, cases);
}

/// Inet sockets ask only for the inet code's own protocols; any other
/// is refused and shown by its name, the low half of the register
/// being what the kernel reads.
#[test]
fn inet_sockets_are_refused_by_their_protocol() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
        (
            libc::SYS_socket,
            [2, 1, 132, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socket(AF_INET, IPPROTO_SCTP)"),
        ),
        (
            libc::SYS_socketpair,
            [2, 5, 132, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socketpair(AF_INET, IPPROTO_SCTP)"),
        ),
        (
            libc::SYS_socket,
            [10, 2, 115, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socket(AF_INET6, IPPROTO_L2TP)"),
        ),
        (
            libc::SYS_socket,
            [10, 2, 1, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socket(AF_INET6, IPPROTO_ICMP)"),
        ),
        (
            libc::SYS_socket,
            [2, 1, 0x1_0000_0084, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socket(AF_INET, IPPROTO_SCTP)"),
        ),
    ];
    check_cases(&all, cases);
    // The inet code's own, by number; the high half unread.
    for args in [
        [2, 1, 6, 0, 0, 0],
        [2, 1, 262, 0, 0, 0],
        [2, 2, 136, 0, 0, 0],
        [2, 2, 1, 0, 0, 0],
        [10, 2, 58, 0, 0, 0],
        [10, 2, 17, 0, 0, 0],
        [10, 1, 0x1_0000_0006, 0, 0, 0],
    ] {
        assert_eq!(run(&all, libc::SYS_socket, args), RET_ALLOW, "{args:?}");
        assert!(crate::refused::refused_call(libc::SYS_socket, args).is_none());
    }
}

/// The calls refused by their arguments are reported as refused, with
/// what made them so; the same calls with allowed arguments pass.
#[test]
fn calls_refused_by_their_arguments_are_reported_with_them() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let sigchld = libc::SIGCHLD as u64;
    let newuser = libc::CLONE_NEWUSER as u64 | libc::CLONE_NEWNET as u64 | sigchld;
    let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
        (
            libc::SYS_clone,
            [newuser, 0, 0, 0, 0, 0],
            RET_USER_NOTIF,
            Some("clone with CLONE_NEWUSER|CLONE_NEWNET"),
        ),
        (libc::SYS_clone, [sigchld, 0, 0, 0, 0, 0], RET_ALLOW, None),
        (
            libc::SYS_socket,
            [17, 3, 0, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socket(AF_PACKET)"),
        ),
        (
            libc::SYS_socketpair,
            [40, 1, 0, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socketpair(AF_VSOCK)"),
        ),
        (
            libc::SYS_socket,
            [16, 3, 4, 0, 0, 0],
            RET_USER_NOTIF,
            Some("socket(AF_NETLINK, protocol 4)"),
        ),
        (libc::SYS_socket, [16, 3, 0, 0, 0, 0], RET_ALLOW, None),
        (libc::SYS_socket, [2, 1, 0, 0, 0, 0], RET_ALLOW, None),
    ];
    check_cases(&all, cases);
    // Typing into the terminal, and creating a set-id file: reported.
    // The chmod family goes to the notifying part whatever its mode:
    // the supervisor performs it, and refuses set-id bits itself.
    let reported: &[(i64, [u64; 6], &str)] = &[
        (
            libc::SYS_ioctl,
            [0, libc::TIOCSTI, 0, 0, 0, 0],
            "ioctl TIOCSTI",
        ),
        (
            libc::SYS_ioctl,
            [0, libc::TIOCLINUX, 0, 0, 0, 0],
            "ioctl TIOCLINUX",
        ),
        (
            libc::SYS_ioctl,
            [0, libc::TIOCSETD, 0x7ffd_0000, 0, 0, 0],
            "ioctl TIOCSETD",
        ),
        (
            libc::SYS_ioctl,
            [0, libc::TIOCEXCL, 0, 0, 0, 0],
            "ioctl TIOCEXCL",
        ),
        (
            libc::SYS_openat,
            [3, 0x1000, 0o101, 0o4755, 0, 0],
            "openat with mode 04755",
        ),
        (
            libc::SYS_mknodat,
            [3, 0x1000, 0o10_2644, 0, 0, 0],
            "mknodat with mode 02644",
        ),
    ];
    assert_eq!(crate::deny_list::path_arg(libc::SYS_openat), Some(1));
    assert_eq!(crate::deny_list::path_arg(libc::SYS_mknodat), Some(1));
    assert_eq!(crate::deny_list::path_arg(libc::SYS_fchmodat), None);
    for (nr, args, shown) in reported {
        assert_eq!(run(&all, *nr, *args), RET_USER_NOTIF, "{shown}");
        assert_eq!(
            crate::refused::refused_call(*nr, *args)
                .map(|(c, _)| c)
                .as_deref(),
            Some(*shown)
        );
    }
    assert_eq!(
        run(&all, libc::SYS_openat, [3, 0x1000, 0o101, 0o644, 0, 0]),
        RET_ALLOW
    );
    assert_eq!(
        run(&all, libc::SYS_fchmod, [3, 0o4755, 0, 0, 0, 0]),
        RET_USER_NOTIF
    );
    assert_eq!(
        crate::refused::refused_call(libc::SYS_fchmod, [3, 0o4755, 0, 0, 0, 0]),
        None
    );
}

/// Each case's verdict from the whole program, and the call
/// [`crate::refused::refused_call`] names for it (none when allowed).
fn check_cases(all: &[seccompiler::sock_filter], cases: &[(i64, [u64; 6], u32, Option<&str>)]) {
    for (nr, args, verdict, shown) in cases {
        assert_eq!(run(all, *nr, *args), *verdict, "{nr} {args:?}");
        assert_eq!(
            crate::refused::refused_call(*nr, *args)
                .map(|(c, _)| c)
                .as_deref(),
            *shown,
            "{nr} {args:?}"
        );
    }
}

/// A lease is refused and shown, whatever it is of; letting one go, a
/// lock of a file and asking for the lease pass. Setting another
/// process's limits is refused; one's own (pid 0) and reading pass.
#[test]
fn leases_and_others_limits_are_refused_but_ones_own() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
        (
            libc::SYS_prlimit64,
            [4321, 7, 0x1000, 0, 0, 0],
            RET_USER_NOTIF,
            Some("prlimit64 setting RLIMIT_NOFILE of pid 4321"),
        ),
        (
            libc::SYS_prlimit64,
            [4321, 0, 0x7fff_0000_0000, 0x2000, 0, 0],
            RET_USER_NOTIF,
            Some("prlimit64 setting RLIMIT_CPU of pid 4321"),
        ),
        (
            libc::SYS_prlimit64,
            [0, 7, 0x1000, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
        (
            libc::SYS_prlimit64,
            [0x1_0000_0000, 7, 0x1000, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
        (
            libc::SYS_prlimit64,
            [4321, 7, 0, 0x1000, 0, 0],
            RET_ALLOW,
            None,
        ),
        (
            libc::SYS_fcntl,
            [3, F_SETLEASE, libc::F_RDLCK as u64, 0, 0, 0],
            RET_USER_NOTIF,
            Some("fcntl F_SETLEASE F_RDLCK"),
        ),
        (
            libc::SYS_fcntl,
            [3, F_SETLEASE, libc::F_WRLCK as u64, 0, 0, 0],
            RET_USER_NOTIF,
            Some("fcntl F_SETLEASE F_WRLCK"),
        ),
        (
            libc::SYS_fcntl,
            [3, F_SETLEASE, F_UNLCK, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
        // A lock (not a lease) of a file, and the everyday commands: allowed.
        (
            libc::SYS_fcntl,
            [3, libc::F_SETLK as u64, 0x1000, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
        (
            libc::SYS_fcntl,
            [3, libc::F_GETLEASE as u64, 0, 0, 0, 0],
            RET_ALLOW,
            None,
        ),
    ];
    check_cases(&all, cases);
}

/// open and openat are refused for their mode only when they create
/// (`O_CREAT`, `__O_TMPFILE`): without, the kernel ignores the mode,
/// which may be garbage (rustc's jemalloc opens /proc files so).
#[test]
fn a_mode_is_judged_only_when_the_call_creates() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    for flags in [0, 0o2_000_000, 0o200_000] {
        let args = [3, 0x1000, flags, 0o5007, 0, 0];
        assert_eq!(run(&all, libc::SYS_openat, args), RET_ALLOW);
        assert_eq!(crate::refused::refused_call(libc::SYS_openat, args), None);
    }
    let tmpfile = [3, 0x1000, 0o2020_0002, 0o2600, 0, 0];
    assert_eq!(run(&all, libc::SYS_openat, tmpfile), RET_USER_NOTIF);
    assert_eq!(
        crate::refused::refused_call(libc::SYS_openat, tmpfile)
            .map(|(c, _)| c)
            .as_deref(),
        Some("openat with mode 02600")
    );
}

/// The supervisor takes a notification for a refusal exactly when the
/// reported part (or, for x32, the front) gave it: for every number up
/// to 1024 and arguments that take each branch, [`crate::refused::refused_call`]
/// names a call if and only if the filter handed it over as refused.
#[test]
fn refused_call_agrees_with_the_filter() {
    let (parts, _) = parts(super::Fallbacks::NONE).unwrap();
    let reported = &parts[0];
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let args: &[[u64; 6]] = &[
        [0; 6],
        [u64::MAX; 6],
        [0o4000; 6],
        [0o2000; 6],
        [0o1755; 6],
        [0x800_0000_0000; 6], // a set-id bit in the high half: not read
        [0x1_0000_0800; 6],   // S_ISUID in the low half
        [17, 3, 0, 0, 0, 0],
        [2, 1, 132, 0, 0, 0],
        [16, 3, 4, 0, 0, 0],
        [16, 3, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [2, 1, 0, 0, 0, 0],
        [10, 2, 0, 0, 0, 0],
        [0x1000_0000, 0, 0, 0, 0, 0],
        [libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
        [3, libc::TIOCSTI, 0, 0, 0, 0],
        [3, libc::TIOCLINUX | 0x1_0000_0000, 0, 0, 0, 0],
        [3, libc::TCGETS, 0, 0, 0, 0],
        [3, libc::TIOCSETD, 0x7ffd_0000, 0, 0, 0],
        [3, libc::TIOCGETD, 0x7ffd_0000, 0, 0, 0],
        [3, libc::TIOCEXCL, 0, 0, 0, 0],
        [3, libc::TIOCNXCL, 0, 0, 0, 0],
        [3, libc::TCXONC, 0, 0, 0, 0],
        [3, libc::TCXONC, 1, 0, 0, 0],
        [3, libc::TCXONC, 2, 0, 0, 0],
        [3, libc::TCXONC, 3, 0, 0, 0],
        [3, libc::TCXONC, 0x1_0000_0000, 0, 0, 0],
        [3, libc::TCXONC | 0x1_0000_0000, 2, 0, 0, 0],
        [3, 0x4008_6602, 0, 0, 0, 0],
        [3, F_SETLEASE, 0, 0, 0, 0],
        [3, F_SETLEASE, 1, 0, 0, 0],
        [3, F_SETLEASE, F_UNLCK, 0, 0, 0],
        [3, F_SETLEASE | 0x1_0000_0000, 0x1_0000_0000, 0, 0, 0],
        [3, F_SETLEASE, 7, 0, 0, 0],
        [4321, 7, 0x1000, 0, 0, 0],
        [0, 7, 0x1000, 0, 0, 0],
        [4321, 7, 0, 0x1000, 0, 0],
        [4321, 99, 0x1_0000_0000, 0, 0, 0],
        // open and openat: creating (O_CREAT, O_TMPFILE) or not, with
        // set-id modes where each reads it.
        [0x1000, 0o100, 0o4755, 0o4755, 0, 0],
        [3, 0x1000, 0o100, 0o2755, 0, 0],
        [3, 0x1000, 0o2020_0002, 0o2600, 0, 0],
        [3, 0x1000, 0o2000_0000, 0o5007, 0, 0],
        [0x1000, 0o2000_0000, 0o4260, 0, 0, 0],
    ];
    for nr in 0..1024 {
        for a in args {
            let handed = run(reported, nr, *a) == RET_USER_NOTIF;
            let named = crate::refused::refused_call(nr, *a);
            assert_eq!(handed, named.is_some(), "nr {nr} args {a:?}: {named:?}");
            if handed {
                assert_eq!(run(&all, nr, *a), RET_USER_NOTIF, "nr {nr} {a:?}");
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    for nr in [0, libc::SYS_getpid, libc::SYS_fchmodat, 547] {
        let x32 = nr | 0x4000_0000;
        assert_eq!(run(&all, x32, [0; 6]), RET_USER_NOTIF);
        let (call, why) = crate::refused::refused_call(x32, [0; 6]).unwrap();
        assert_eq!(why, crate::deny_list::Widens::X32Abi);
        assert_eq!(call, format!("x32-ABI call {x32:#x}"));
    }
}

#[test]
fn set_id_bits_are_refused_but_set_group_id_on_a_directory() {
    use crate::deny_list::set_id_refused;
    assert!(set_id_refused(0o4755, false));
    assert!(set_id_refused(0o4755, true));
    assert!(set_id_refused(0o2755, false));
    assert!(set_id_refused(0o6755, true));
    assert!(set_id_refused(0x1_0000_4755, false));
    assert!(!set_id_refused(0o2775, true));
    assert!(!set_id_refused(0o1777, false));
    assert!(!set_id_refused(0o755, false));
    // Bits the kernel drops (above the mode's 16) decide nothing.
    assert!(!set_id_refused(0o10_0755, false));
}

/// No call the notifying part hands over for the supervisor to perform
/// is one [`crate::refused::refused_call`] names (the supervisor relies on it to
/// ask that after `connect`, `sendto` and the metadata calls), and the
/// notifying part hands over none of the reported part's refusals.
#[test]
fn the_reported_calls_are_notified_by_no_other_part() {
    for fallbacks in [super::Fallbacks::NONE, SUPERVISED] {
        reported_calls_are_notified_by_no_other_part(fallbacks);
    }
}

fn reported_calls_are_notified_by_no_other_part(fallbacks: super::Fallbacks) {
    let notify = crate::notify::notify_filter(fallbacks);
    let mut args: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6], [3, 0o4755, 0o6755, 0o4755, 0, 0]];
    for cmd in crate::notify::NOTIFY_IOCTLS {
        args.push([3, u64::from(*cmd), 0, 0, 0, 0]);
    }
    for (cmd, arg, _, _) in TERMINAL_IOCTLS {
        args.push([3, *cmd, arg.unwrap_or(0), 0, 0, 0]);
    }
    for nr in crate::notify::NOTIFY_METADATA
        .iter()
        .chain(&super::notify::NOTIFY_JUDGED)
    {
        for a in &args {
            let notified = run(&notify, *nr, *a) == RET_USER_NOTIF;
            let refused = crate::refused::refused_call(*nr, *a).is_some();
            assert!(
                !(notified && refused),
                "{nr} {a:?} is both reported and supervised"
            );
        }
    }
    for (nr, _, _) in DENY_ALWAYS {
        assert_eq!(run(&notify, *nr, [u64::MAX; 6]), RET_ALLOW, "{nr}");
    }
    for nr in [libc::SYS_clone, libc::SYS_socket, libc::SYS_socketpair] {
        for a in [[0; 6], [u64::MAX; 6], [17, 3, 0, 0, 0, 0]] {
            assert_eq!(run(&notify, nr, a), RET_ALLOW, "{nr} {a:?}");
        }
    }
}

/// The front changes no verdict but the x32 ones: for every number up
/// to 1024 (and a few beyond), with arguments that take each
/// argument-dependent branch, the program answers as the parts alone.
#[test]
fn the_front_only_adds_the_x32_refusal() {
    let all = crate::compile(super::Fallbacks::NONE).unwrap();
    let (parts, _) = parts(super::Fallbacks::NONE).unwrap();
    let parts = chain(&parts).unwrap();
    let args: &[[u64; 6]] = &[
        [0; 6],
        [0o4000; 6],
        [0o2000; 6],
        [17, 3, 0, 0, 0, 0],          // AF_PACKET
        [16, 3, 4, 0, 0, 0],          // AF_NETLINK, NETLINK_SOCK_DIAG
        [16, 3, 0, 0, 0, 0],          // AF_NETLINK, NETLINK_ROUTE
        [0x1000_0000, 0, 0, 0, 0, 0], // CLONE_NEWUSER
        [3, libc::TIOCSTI, 0, 0, 0, 0],
        [3, 0x4008_6602, 0, 0, 0, 0],     // FS_IOC_SETFLAGS
        [3, 0x1000, 110, 0, 0x1000, 110], // unix address lengths
        [3, 0x1000, 16, 0, 0x1000, 16],   // inet address lengths
    ];
    let mut nrs: Vec<i64> = (0..1024).collect();
    nrs.extend([0x3fff_ffff, 0x8000_0000, 0x8000_0001]);
    let mut differ = 0;
    for &nr in &nrs {
        for a in args {
            assert_eq!(run(&all, nr, *a), run(&parts, nr, *a), "nr {nr} args {a:?}");
        }
        differ += usize::from(run(&parts, nr, [0; 6]) != RET_ALLOW);
    }
    // Each unconditional one answers other than allow with zero arguments.
    // (The metadata calls are the mounts' here, allowed with any argument
    // but a set-id mode.)
    let always = DENY_ALWAYS.len() + 3;
    assert!(
        differ >= always,
        "only {differ} numbers decided by the parts"
    );
    #[cfg(target_arch = "x86_64")]
    for nr in [
        0,
        libc::SYS_getpid,
        libc::SYS_fchmodat,
        libc::SYS_ptrace,
        511,
        547,
    ] {
        let x32 = nr | 0x4000_0000;
        assert_eq!(
            run(&parts, x32, [0; 6]),
            RET_ALLOW,
            "the parts alone miss {x32:#x}"
        );
        assert_eq!(run(&all, x32, [0; 6]), RET_USER_NOTIF, "x32 {nr}");
    }
}

/// Every jump of the front lands inside it or on the parts' first instruction.
#[test]
fn the_front_jumps_stay_inside() {
    let (_, decided) = parts(super::Fallbacks::NONE).unwrap();
    let f = front(&decided, &fast_paths(super::Fallbacks::NONE));
    for (i, insn) in f.iter().enumerate() {
        let to = match insn.code {
            JA => i + 1 + insn.k as usize,
            JEQ_K | JGE_K | JSET_K => i + 1 + usize::from(insn.jt.max(insn.jf)),
            _ => continue,
        };
        assert!(to <= f.len(), "insn {i} jumps to {to} of {}", f.len());
    }
    // One comparison per number, beside the architecture's.
    let mut d = decided.clone();
    d.sort_unstable();
    d.dedup();
    let jeqs = f.iter().filter(|i| i.code == JEQ_K).count();
    let fast = fast_paths(super::Fallbacks::NONE);
    let values = fast
        .iter()
        .filter(|f| matches!(f.unless, super::assemble::Unless::Is(_)))
        .count();
    assert_eq!(jeqs, 1 + fast.len() + values + d.len());
}

/// Every kernel's program gives each [`fast_paths`] call the verdict its
/// parts alone give, for flags, commands and clone flags bit by bit, pairs
/// of bits, and junk in either half; and the calls that need no part
/// (a plain open, `fork`, `fcntl(F_GETFD)`) are decided within 10
/// instructions, where the parts took 66 to 91.
#[test]
fn the_fast_paths_agree_with_the_parts() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut values: Vec<u64> = vec![0, u64::MAX, 0xffff_ffff, 0xffff_ffff_0000_0000];
    for i in 0..32 {
        values.push(1 << i);
        values.push((1 << i) | 0xdead_0000_0000);
        for j in 0..i {
            values.push((1 << i) | (1 << j));
        }
    }
    values.extend([
        0o4000,
        0o2000,
        0o6755,
        0o644,
        0x400,
        0x401,
        0x402,
        0x1_0000_0400,
    ]);
    values.extend((0..2000).map(|_| next()));
    for bits in 0..16u8 {
        let fallbacks = super::Fallbacks {
            truncate: bits & 1 != 0,
            scoping: bits & 2 != 0,
            unix_addresses: bits & 4 != 0,
            metadata: bits & 8 != 0,
        };
        let all = crate::compile(fallbacks).unwrap();
        let (parts, _) = parts(fallbacks).unwrap();
        let parts = chain(&parts).unwrap();
        for f in fast_paths(fallbacks) {
            for v in &values {
                for mode in [0, 0o644, 0o4755, 0o2755, u64::MAX] {
                    let mut a = [3, 0x1000, 0, 0, 0, 0];
                    a[f.arg as usize] = *v;
                    if f.arg < 3 {
                        a[3] = mode;
                    }
                    if f.arg == 1 {
                        a[2] = mode;
                    }
                    assert_eq!(
                        run(&all, f.nr, a),
                        run(&parts, f.nr, a),
                        "{fallbacks:?}: nr {} args {a:?}",
                        f.nr
                    );
                }
            }
        }
        let quick: &[(i64, [u64; 6])] = &[
            (libc::SYS_openat, [3, 0x1000, 0o2_000_000, 0, 0, 0]),
            (libc::SYS_clone, [0x0120_0011, 0, 0, 0, 0, 0]),
            (libc::SYS_fcntl, [3, 1, 0, 0, 0, 0]),
        ];
        for (nr, a) in quick {
            if *nr == libc::SYS_fcntl && fallbacks.scoping {
                continue;
            }
            let (verdict, taken) = steps(&all, *nr, *a);
            assert_eq!((verdict, run(&parts, *nr, *a)), (RET_ALLOW, RET_ALLOW));
            assert!(taken <= 10, "{fallbacks:?}: nr {nr} took {taken}");
        }
    }
}
