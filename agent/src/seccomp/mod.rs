//! The seccomp deny list: syscalls that would let the command widen its box
//! (seccomp-bpf, Linux 3.5; filters compiled with seccompiler, for the
//! architecture chosen at build time).
//!
//! Compiled in the parent, loaded in the child (see [`crate::sys`]) as one
//! program ([`combined`]). It opens with a front that kills any other
//! architecture, hands every x32-ABI call to the supervisor to be refused,
//! and sends only the calls a part decides on to the three default-allow
//! parts:
//!
//! 1. **the deny list → the supervisor, which answers EPERM**: tracing and
//!    cross-process memory (`ptrace`, `process_vm_*`), `bpf`,
//!    `perf_event_open`, every mount API, `setns`, `unshare`, `clone` with
//!    any `CLONE_NEW*` flag, the kernel keyring, module loading, kexec,
//!    reboot, swap, `userfaultfd`, `io_uring` (its `IORING_OP_SOCKET`/
//!    `OP_CONNECT` run socket creation and connects in the kernel where this
//!    filter never sees them), and `socket`/`socketpair` for any family but
//!    `AF_UNIX`, `AF_INET`, `AF_INET6` and `AF_NETLINK` with protocol
//!    `NETLINK_ROUTE` (read-only without `CAP_NET_ADMIN`; `ip addr` needs
//!    it, glibc's `getaddrinfo` uses it for `AI_ADDRCONFIG`), and inet
//!    sockets of any protocol but the inet code's own (TCP, UDP, MPTCP,
//!    UDP-Lite, ICMP): asking for another (SCTP, L2TP) makes the kernel
//!    load its module as root where modules load on demand, before any
//!    hook of the run is asked. Raw `AF_INET`
//!    sockets need `CAP_NET_RAW`, which is gone. Also **set-id mode bits**
//!    (`S_ISUID`/`S_ISGID`) in the calls that create a file (`open`,
//!    `openat`, `creat`, `mknod(at)`: a setuid-root file left in the
//!    worktree would widen someone's privileges after the run), and `ioctl`
//!    `TIOCSTI` and `TIOCLINUX` (typing into the caller's terminal, which
//!    runs once lockrun exits; `dev.tty.legacy_tiocsti` is on here) and
//!    `TIOCSETD` (a line discipline switched stays on the caller's terminal
//!    after the run: `n_null` swallows all it shows; where modules load,
//!    the kernel loads the discipline's as root) and `TIOCEXCL` (exclusive
//!    mode stays too, and refuses every later open of the terminal by a
//!    process without `CAP_SYS_ADMIN`) and `TCXONC` `TCOOFF`/`TCIOFF`
//!    (stopped output stays stopped: the shell's next write blocks), and
//!    `fcntl F_SETLEASE` (a lease on a file outside, which a capability-less
//!    uid 0 may take on any root-owned file it can read, holds back every
//!    other process's open of it for writing for up to 45 s), and
//!    `prlimit64` setting another process's limits (a capability-less uid 0
//!    may lower those of every uid-0 process: `RLIMIT_CPU` kills it past
//!    the signal scoping, `RLIMIT_NOFILE` starves it). These
//!    are handed over (`USER_NOTIF`) only to be seen: the supervisor decides
//!    on the registers alone ([`refused_call`]), records the call and
//!    answers `EPERM`, so the user learns what a tool was refused
//!    (`lockrun: 1 system call refused …: unshare (bwrap)`). If lockrun is
//!    gone, the kernel fails them with `ENOSYS`.
//! 2. **`clone3` and `openat2` → ENOSYS.** Their flags/mode live in a struct
//!    seccomp cannot read, so they cannot be told apart from a
//!    namespace-creating call or a set-id file creation. ENOSYS (not EPERM)
//!    makes glibc fall back to `clone` / callers to `openat`, whose
//!    arguments *are* checked — so threads and fork keep working.
//!
//! The last part, [`notify_filter`], hands syscalls to lockrun's supervisor
//! (`SECCOMP_RET_USER_NOTIF`, Linux 5.0; see [`crate::supervise`]): the
//! metadata calls Landlock does not cover, the scheduling calls that name
//! another task than the caller ([`NOTIFY_SCHED`]), and `connect`/`sendto` whose
//! address length is not that of an inet address. The chmod family is
//! there whatever its mode: the supervisor refuses set-id bits itself
//! ([`set_id_refused`]), because only it knows the target, and a directory
//! may keep `S_ISGID` (`git init --shared`, `mkdir -m 2775`). Each part's
//! verdict is final, and the earlier parts decide on other calls or
//! arguments (the supervisor asks [`refused_call`] before it performs an
//! `ioctl`), so what they refuse stays refused.
//!
//! On a kernel that lacks a mechanism lockrun relies on ([`Fallbacks`],
//! [`crate::kernel::Kernel::fallbacks`]), a part more, [`fallback_filter`],
//! hands the supervisor the calls that mechanism would have judged: without
//! Landlock's scoping (ABI < 6), the signals a caller aims at a process it
//! names, the owners of a file's `SIGIO`, and the binds of unix addresses
//! ([`scope`]).

use std::collections::BTreeMap;

mod compact;
pub mod scope;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("lockrun's seccomp filter is written for x86_64 and aarch64");

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("building the seccomp filter: {0}")]
    Build(#[from] seccompiler::BackendError),
    #[error("compiling the seccomp filter: {0}")]
    Compile(#[source] seccompiler::BackendError),
    #[error("the seccomp filter has {0} instructions; the kernel takes at most 4096")]
    TooLong(usize),
}

/// How a refused call would widen the sandbox: the reason `lockrun audit`
/// gives for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Widens {
    OtherProcesses,
    KernelPrograms,
    Mounts,
    Namespaces,
    Keyring,
    Machine,
    FaultStall,
    IoUring,
    FileHandles,
    SocketFamily,
    SocketProtocol,
    SetIdMode,
    Terminal,
    LineDiscipline,
    ExclusiveTerminal,
    TerminalFlow,
    Leases,
    OtherLimits,
    OtherScheduling,
    Watches,
    SharedPort,
    KernelLog,
    X32Abi,
}

impl Widens {
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::OtherProcesses => "it traces, or reads and writes the memory of, another process",
            Self::KernelPrograms => {
                "it loads programs into the kernel or watches the kernel's events"
            }
            Self::Mounts => {
                "it changes mounts, which could hide or replace what the sandbox's rules name"
            }
            Self::Namespaces => {
                "it makes or enters namespaces (nested sandboxes, containers, `unshare`): a new \
                 user namespace hands back every capability lockrun dropped"
            }
            Self::Keyring => "it reaches the kernel keyring, shared with processes outside the run",
            Self::Machine => {
                "it changes the running kernel or the machine (modules, kexec, reboot, swap)"
            }
            Self::FaultStall => "it stalls the kernel on page faults, a staple of kernel exploits",
            Self::IoUring => {
                "io_uring opens sockets and connects inside the kernel, where the filter and the \
                 network hooks never see it; programs fall back to plain calls"
            }
            Self::FileHandles => "it opens files by handle, past every path the rules name",
            Self::SocketFamily => {
                "a socket family other than unix, inet, inet6 and netlink route reaches networks \
                 and kernel interfaces no hook of lockrun judges"
            }
            Self::SocketProtocol => {
                "an inet protocol other than TCP, UDP, MPTCP, UDP-Lite and ICMP (SCTP, L2TP, \
                 DCCP, SMC) is one the network hooks do not judge, and where the kernel loads \
                 modules on demand, asking for one makes it load that protocol's module as root"
            }
            Self::SetIdMode => {
                "a set-user-ID or set-group-ID file left behind runs with its owner's or group's \
                 privileges for whoever starts it after the run (a directory may keep \
                 set-group-ID, which only hands its group to what is made in it)"
            }
            Self::Terminal => {
                "it types into the terminal lockrun was started from, which runs what it typed \
                 outside the sandbox once lockrun exits"
            }
            Self::LineDiscipline => {
                "it switches the terminal lockrun was started from to another line discipline, \
                 which stays after lockrun exits (n_null swallows all that is typed and shown), \
                 and where the kernel loads modules on demand (dev.tty.ldisc_autoload), it loads \
                 that discipline's module as root"
            }
            Self::ExclusiveTerminal => {
                "it makes the terminal lockrun was started from refuse every later open by a \
                 process without CAP_SYS_ADMIN (EBUSY: password prompts of ssh and sudo, gpg's \
                 pinentry), which stays after lockrun exits"
            }
            Self::TerminalFlow => {
                "it stops the output of the terminal lockrun was started from (TCOOFF), or asks \
                 its other end to stop sending (TCIOFF), which stays after lockrun exits: the \
                 shell's next write to it blocks"
            }
            Self::Leases => {
                "a lease on a file outside the run stalls every process that then opens it for \
                 writing (up to fs.lease-break-time, 45 s by default) and tells the run when \
                 one does"
            }
            Self::OtherLimits => {
                "it lowers another process's resource limits (open files, CPU time, file size), \
                 which starves or kills a process outside the run past the signal scoping; a \
                 process may still set its own (pid 0)"
            }
            Self::OtherScheduling => {
                "it lowers the CPU or I/O priority of processes outside the run, or pins them to \
                 CPUs: every process of its uid that has no capabilities, another run's command \
                 among them, would be starved past the signal scoping; a process may still set \
                 its own, and those of its run's processes"
            }
            Self::Watches => {
                "fanotify watches files by inode and reports them by handle, past every path the \
                 rules name (a watch on a denied directory names what appears in it); inotify \
                 works, judged by lockrun"
            }
            Self::SharedPort => {
                "a socket with it may bind a port that a socket of the same uid outside the run \
                 holds, and take the connections or datagrams meant for that one (SO_REUSEPORT; \
                 SO_REUSEADDR on a datagram socket); bind a port of the run's own instead"
            }
            Self::KernelLog => {
                "it reads the kernel's log, where the kernel writes the audit records of other \
                 processes (other runs' refusals, with their command lines and the paths they \
                 were refused) when no audit daemon takes them; any user may read it where \
                 kernel.dmesg_restrict is 0"
            }
            Self::X32Abi => {
                "an x32-ABI call is an ordinary call under another number, which the filter's \
                 lists would not know"
            }
        }
    }
}

/// Syscalls refused whatever their arguments, with the names `policy show`
/// prints and what they would widen.
const DENY_ALWAYS: &[(i64, &str, Widens)] = &[
    (libc::SYS_ptrace, "ptrace", Widens::OtherProcesses),
    (
        libc::SYS_process_vm_readv,
        "process_vm_readv",
        Widens::OtherProcesses,
    ),
    (
        libc::SYS_process_vm_writev,
        "process_vm_writev",
        Widens::OtherProcesses,
    ),
    (libc::SYS_bpf, "bpf", Widens::KernelPrograms),
    (libc::SYS_fanotify_init, "fanotify_init", Widens::Watches),
    (libc::SYS_fanotify_mark, "fanotify_mark", Widens::Watches),
    (libc::SYS_syslog, "syslog", Widens::KernelLog),
    (
        libc::SYS_perf_event_open,
        "perf_event_open",
        Widens::KernelPrograms,
    ),
    (libc::SYS_mount, "mount", Widens::Mounts),
    (libc::SYS_umount2, "umount2", Widens::Mounts),
    (libc::SYS_pivot_root, "pivot_root", Widens::Mounts),
    (libc::SYS_move_mount, "move_mount", Widens::Mounts),
    (libc::SYS_open_tree, "open_tree", Widens::Mounts),
    (SYS_OPEN_TREE_ATTR, "open_tree_attr", Widens::Mounts),
    (libc::SYS_fsopen, "fsopen", Widens::Mounts),
    (libc::SYS_fsmount, "fsmount", Widens::Mounts),
    (libc::SYS_fsconfig, "fsconfig", Widens::Mounts),
    (libc::SYS_fspick, "fspick", Widens::Mounts),
    (libc::SYS_mount_setattr, "mount_setattr", Widens::Mounts),
    (libc::SYS_setns, "setns", Widens::Namespaces),
    (libc::SYS_unshare, "unshare", Widens::Namespaces),
    (libc::SYS_keyctl, "keyctl", Widens::Keyring),
    (libc::SYS_add_key, "add_key", Widens::Keyring),
    (libc::SYS_request_key, "request_key", Widens::Keyring),
    (libc::SYS_init_module, "init_module", Widens::Machine),
    (libc::SYS_finit_module, "finit_module", Widens::Machine),
    (libc::SYS_delete_module, "delete_module", Widens::Machine),
    (libc::SYS_kexec_load, "kexec_load", Widens::Machine),
    (
        libc::SYS_kexec_file_load,
        "kexec_file_load",
        Widens::Machine,
    ),
    (libc::SYS_reboot, "reboot", Widens::Machine),
    (libc::SYS_swapon, "swapon", Widens::Machine),
    (libc::SYS_swapoff, "swapoff", Widens::Machine),
    (libc::SYS_userfaultfd, "userfaultfd", Widens::FaultStall),
    (libc::SYS_io_uring_setup, "io_uring_setup", Widens::IoUring),
    (libc::SYS_io_uring_enter, "io_uring_enter", Widens::IoUring),
    (
        libc::SYS_io_uring_register,
        "io_uring_register",
        Widens::IoUring,
    ),
    (
        libc::SYS_open_by_handle_at,
        "open_by_handle_at",
        Widens::FileHandles,
    ),
    (
        libc::SYS_name_to_handle_at,
        "name_to_handle_at",
        Widens::FileHandles,
    ),
];

/// Every `CLONE_NEW*` flag `clone` accepts (`CLONE_NEWTIME` shares its bit
/// with the exit signal there and is clone3/unshare-only).
const CLONE_NS_FLAGS: &[(u64, &str)] = &[
    (libc::CLONE_NEWNS as u64, "CLONE_NEWNS"),
    (libc::CLONE_NEWCGROUP as u64, "CLONE_NEWCGROUP"),
    (libc::CLONE_NEWUTS as u64, "CLONE_NEWUTS"),
    (libc::CLONE_NEWIPC as u64, "CLONE_NEWIPC"),
    (libc::CLONE_NEWUSER as u64, "CLONE_NEWUSER"),
    (libc::CLONE_NEWPID as u64, "CLONE_NEWPID"),
    (libc::CLONE_NEWNET as u64, "CLONE_NEWNET"),
];

const NETLINK_ROUTE: u64 = 0;

/// A syscall that creates a file with a mode, and where its arguments are.
struct Creates {
    nr: i64,
    name: &'static str,
    /// The path it creates (shown, never judged).
    path: u8,
    mode: u8,
    /// The flags that say whether it creates at all; `None`: it always does.
    flags: Option<u8>,
}

/// The calls whose set-id modes the reported part refuses. The chmod family
/// is the supervisor's ([`set_id_refused`]).
const CREATES: &[Creates] = &[
    #[cfg(target_arch = "x86_64")]
    Creates {
        nr: libc::SYS_creat,
        name: "creat",
        path: 0,
        mode: 1,
        flags: None,
    },
    #[cfg(target_arch = "x86_64")]
    Creates {
        nr: libc::SYS_open,
        name: "open",
        path: 0,
        mode: 2,
        flags: Some(1),
    },
    #[cfg(target_arch = "x86_64")]
    Creates {
        nr: libc::SYS_mknod,
        name: "mknod",
        path: 0,
        mode: 1,
        flags: None,
    },
    Creates {
        nr: libc::SYS_openat,
        name: "openat",
        path: 1,
        mode: 3,
        flags: Some(2),
    },
    Creates {
        nr: libc::SYS_mknodat,
        name: "mknodat",
        path: 1,
        mode: 2,
        flags: None,
    },
];

/// Which argument of a refused call names its path, to show it: the calls
/// of [`CREATES`]. For the audit only; the refusal was decided on the
/// registers.
#[must_use]
pub fn path_arg(nr: i64) -> Option<usize> {
    CREATES
        .iter()
        .find(|c| c.nr == nr)
        .map(|c| usize::from(c.path))
}

/// The socket families a run may make, besides `AF_NETLINK` with
/// `NETLINK_ROUTE`.
const SOCKET_FAMILIES: [u64; 3] = [
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
];

/// The inet families and the protocols a socket of each may ask for (0:
/// the type's own): those of the inet code itself, which the kernel never
/// loads a module for, and whose kinds the `sock_create` hook then judges
/// (it lets TCP, MPTCP and UDP through). Any other makes the kernel look
/// the protocol up, and where modules load on demand, load its module as
/// root (`net-pf-2-proto-132`: SCTP) before any hook runs; refused here
/// first.
const INET_PROTOCOLS: [(u64, [u64; 6]); 2] = [
    (
        libc::AF_INET as u64,
        [
            0,
            libc::IPPROTO_ICMP as u64,
            libc::IPPROTO_TCP as u64,
            libc::IPPROTO_UDP as u64,
            libc::IPPROTO_UDPLITE as u64,
            libc::IPPROTO_MPTCP as u64,
        ],
    ),
    (
        libc::AF_INET6 as u64,
        [
            0,
            libc::IPPROTO_ICMPV6 as u64,
            libc::IPPROTO_TCP as u64,
            libc::IPPROTO_UDP as u64,
            libc::IPPROTO_UDPLITE as u64,
            libc::IPPROTO_MPTCP as u64,
        ],
    ),
];

/// The open flags under which the kernel reads the mode (`WILL_CREATE`:
/// `O_CREAT`, `__O_TMPFILE`); without them it ignores it, and a caller may
/// leave garbage there (jemalloc's `syscall(SYS_open, path, flags)` in
/// rustc does).
const CREATING_FLAGS: [u64; 2] = [
    libc::O_CREAT as u64,
    (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64,
];

/// `fcntl(fd, F_SETLEASE, F_RDLCK | F_WRLCK)`: the owner of a file (a
/// capability-less uid 0 owns every root-owned one) may take a lease on it
/// through a descriptor open for reading, which makes the kernel hold back
/// anyone else's open for writing until the holder lets go or the lease
/// break time passes. File servers use leases; no tool of a run needs one.
/// `F_UNLCK` (letting one go) passes.
const F_SETLEASE: u64 = libc::F_SETLEASE as u64;
const F_UNLCK: u64 = libc::F_UNLCK as u64;

/// `S_ISUID`, `S_ISGID`.
const SET_ID_BITS: &[u64] = &[0o4000, 0o2000];

/// Commands of `ioctl` that change a terminal past the run: typing into it,
/// switching its line discipline (`TIOCSETD`, which takes the discipline
/// through a pointer the filter cannot read, so every switch is refused;
/// reading it, `TIOCGETD`, passes), making it exclusive (`TIOCEXCL`;
/// `TIOCNXCL`, which undoes it, passes), and stopping its flow (`TCXONC`
/// with `TCOOFF` or `TCIOFF`, an argument by value the kernel compares
/// whole; `TCOON` and `TCION`, which restart it, pass). With `Some(arg)`,
/// only that argument is refused.
const TERMINAL_IOCTLS: &[TerminalIoctl] = &[
    (libc::TIOCSTI, None, "TIOCSTI", Widens::Terminal),
    (libc::TIOCLINUX, None, "TIOCLINUX", Widens::Terminal),
    (libc::TIOCSETD, None, "TIOCSETD", Widens::LineDiscipline),
    (libc::TIOCEXCL, None, "TIOCEXCL", Widens::ExclusiveTerminal),
    (
        libc::TCXONC,
        Some(libc::TCOOFF as u64),
        "TCXONC TCOOFF",
        Widens::TerminalFlow,
    ),
    (
        libc::TCXONC,
        Some(libc::TCIOFF as u64),
        "TCXONC TCIOFF",
        Widens::TerminalFlow,
    ),
];

/// An `ioctl` command on a terminal, the one argument refused (`None`:
/// every one), its name and why it is refused.
type TerminalIoctl = (u64, Option<u64>, &'static str, Widens);

/// Whether a chmod to `mode` is refused for its set-id bits: `S_ISUID`
/// always, `S_ISGID` unless the target is a directory (where it only hands
/// the directory's group to what is made in it). The supervisor asks this
/// of every chmod it would perform; `mode` is the register, of which the
/// kernel keeps the low 16 bits.
#[must_use]
pub fn set_id_refused(mode: u64, is_dir: bool) -> bool {
    let mode = mode & 0o7777;
    mode & 0o4000 != 0 || (mode & 0o2000 != 0 && !is_dir)
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// The rules of `ioctl` on a terminal that changes it past the run
/// ([`TERMINAL_IOCTLS`]).
fn terminal_rules() -> Result<Vec<SeccompRule>, SeccompError> {
    // Typing into the terminal lockrun was started from would run commands
    // outside the sandbox once it exits (TIOCSTI; TIOCLINUX on a VT); a
    // line discipline switched stays on it (TIOCSETD), and so does
    // exclusive mode, which refuses others' opens of it (TIOCEXCL).
    // Output stopped (TCXONC TCOOFF) stays stopped: the shell's next write
    // to it blocks.
    let mut tty = Vec::new();
    for (cmd, arg, _, _) in TERMINAL_IOCTLS {
        let mut c = vec![cond(1, SeccompCmpOp::Eq, *cmd)?];
        if let Some(arg) = arg {
            c.push(SeccompCondition::new(
                2,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::Eq,
                *arg,
            )?);
        }
        tty.push(SeccompRule::new(c)?);
    }
    Ok(tty)
}

/// The seccompiler-built parts of [`combined`], in its order: the calls
/// refused and reported (→ the supervisor, which answers EPERM), then
/// `clone3` and friends → ENOSYS.
fn filters() -> Result<(Vec<BpfProgram>, Vec<i64>), SeccompError> {
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    // openat2's mode is in a struct too; ENOSYS makes callers fall back to openat.
    clone3.insert(libc::SYS_openat2, vec![]);
    // file_setattr (6.17) sets inode flags by path; ENOSYS makes callers fall
    // back to the FS_IOC_FSSETXATTR ioctl, which the supervisor judges.
    clone3.insert(SYS_FILE_SETATTR, vec![]);
    let mut decided: Vec<i64> = clone3.keys().copied().collect();
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _, _) in DENY_ALWAYS {
        rules.insert(*nr, vec![]);
    }
    let mut clone = Vec::new();
    for (flag, _) in CLONE_NS_FLAGS {
        clone.push(SeccompRule::new(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(*flag),
            *flag,
        )?])?);
    }
    rules.insert(libc::SYS_clone, clone);
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        let mut not_allowed = Vec::new();
        for family in SOCKET_FAMILIES.iter().chain(&[libc::AF_NETLINK as u64]) {
            not_allowed.push(cond(0, SeccompCmpOp::Ne, *family)?);
        }
        let family_not_allowed = SeccompRule::new(not_allowed)?;
        let netlink_not_route = SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
            cond(2, SeccompCmpOp::Ne, NETLINK_ROUTE)?,
        ])?;
        let mut refused = vec![family_not_allowed, netlink_not_route];
        for (family, protocols) in &INET_PROTOCOLS {
            let mut other_protocol = vec![cond(0, SeccompCmpOp::Eq, *family)?];
            for protocol in protocols {
                other_protocol.push(cond(2, SeccompCmpOp::Ne, *protocol)?);
            }
            refused.push(SeccompRule::new(other_protocol)?);
        }
        rules.insert(nr, refused);
    }
    // Set-id bits: a file in the worktree made setuid root would run as
    // root for anyone outside, after the run. Refused wherever a file is
    // created with a mode (open/creat/mknod); the chmod family goes to the
    // supervisor, which knows whether the target is a directory.
    for c in CREATES {
        let mut r = Vec::new();
        for bit in SET_ID_BITS {
            let set_id = cond(c.mode, SeccompCmpOp::MaskedEq(*bit), *bit)?;
            match c.flags {
                None => r.push(SeccompRule::new(vec![set_id])?),
                Some(flags) => {
                    for creating in CREATING_FLAGS {
                        r.push(SeccompRule::new(vec![
                            cond(flags, SeccompCmpOp::MaskedEq(creating), creating)?,
                            set_id.clone(),
                        ])?);
                    }
                }
            }
        }
        rules.insert(c.nr, r);
    }
    rules.insert(libc::SYS_ioctl, terminal_rules()?);
    // Another process's resource limits: a capability-less uid 0 may lower
    // those of every process of uid 0 (RLIMIT_CPU kills it, RLIMIT_NOFILE
    // starves it). Its own (pid 0, how setrlimit asks) and reading them pass.
    rules.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Ne, 0)?,
            SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)?,
        ])?],
    );
    // Holding back others' writes to a file outside: a lease.
    rules.insert(
        libc::SYS_fcntl,
        vec![SeccompRule::new(vec![
            cond(1, SeccompCmpOp::Eq, F_SETLEASE)?,
            cond(2, SeccompCmpOp::Ne, F_UNLCK)?,
        ])?],
    );
    decided.extend(rules.keys().copied());
    let reported = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    let reported = to_supervisor(reported.try_into().map_err(SeccompError::Compile)?);
    Ok((
        vec![reported, clone3.try_into().map_err(SeccompError::Compile)?],
        decided,
    ))
}

/// A part whose only refusal is `EPERM`, made to hand that refusal to the
/// supervisor instead (`USER_NOTIF`; seccompiler has no such action): the
/// supervisor answers `EPERM` and records it, so the user sees the call.
/// If lockrun is gone the kernel fails the call with `ENOSYS`: refused still.
fn to_supervisor(mut part: BpfProgram) -> BpfProgram {
    for f in &mut part {
        if f.code == RET_K && f.k == RET_ERRNO | libc::EPERM as u32 {
            f.k = RET_USER_NOTIF;
        }
    }
    part
}

/// What a notification of the reported part (or the front's x32 test)
/// refused, and how it would widen the sandbox, for the audit: `None` when
/// the call is not one of its refusals. Decided on the number and the
/// registers the kernel copied, never the task's memory, exactly as the
/// filter decides (`refused_call_agrees_with_the_filter`). The supervisor
/// asks this before it performs an `ioctl` and after the calls that are
/// never one of these: no call the notifying part hands over for the
/// supervisor to perform is one of these
/// (`the_reported_calls_are_notified_by_no_other_part`), and a refusal
/// this failed to name would still be refused there (`ENOSYS`, or the
/// ioctl refused as not allowed).
#[must_use]
pub fn refused_call(nr: i64, args: [u64; 6]) -> Option<(String, Widens)> {
    #[cfg(target_arch = "x86_64")]
    if nr & i64::from(X32_SYSCALL_BIT) != 0 {
        return Some((
            format!("x32-ABI call {:#x}", nr & 0xffff_ffff),
            Widens::X32Abi,
        ));
    }
    if let Some((_, name, why)) = DENY_ALWAYS.iter().find(|(n, _, _)| *n == nr) {
        return Some(((*name).to_owned(), *why));
    }
    // Registers the kernel reads as ints: their low halves.
    let low = |i: usize| args[i] & 0xffff_ffff;
    if let Some(c) = CREATES.iter().find(|c| c.nr == nr) {
        let mode = low(usize::from(c.mode));
        // Without a creating flag the kernel ignores the mode.
        let creates = c.flags.is_none_or(|f| {
            CREATING_FLAGS
                .iter()
                .any(|cr| low(usize::from(f)) & cr != 0)
        });
        let set_id = SET_ID_BITS.iter().any(|b| mode & b != 0);
        return (creates && set_id).then(|| {
            (
                format!("{} with mode 0{:o}", c.name, mode & 0o7777),
                Widens::SetIdMode,
            )
        });
    }
    match nr {
        libc::SYS_clone => {
            let flags: Vec<&str> = CLONE_NS_FLAGS
                .iter()
                .filter(|(f, _)| args[0] & f == *f)
                .map(|(_, n)| *n)
                .collect();
            (!flags.is_empty()).then(|| {
                (
                    format!("clone with {}", flags.join("|")),
                    Widens::Namespaces,
                )
            })
        }
        libc::SYS_socket | libc::SYS_socketpair => {
            let call = if nr == libc::SYS_socket {
                "socket"
            } else {
                "socketpair"
            };
            let (family, protocol) = (low(0), low(2));
            if let Some((_, protocols)) = INET_PROTOCOLS.iter().find(|(f, _)| *f == family) {
                return (!protocols.contains(&protocol)).then(|| {
                    let family = u32::try_from(family).unwrap_or(u32::MAX);
                    (
                        format!(
                            "{call}({}, {})",
                            family_name(family),
                            protocol_name(protocol)
                        ),
                        Widens::SocketProtocol,
                    )
                });
            }
            let allowed = SOCKET_FAMILIES.contains(&family)
                || (family == libc::AF_NETLINK as u64 && protocol == NETLINK_ROUTE);
            if allowed {
                return None;
            }
            let family = u32::try_from(family).unwrap_or(u32::MAX);
            let shown = if family == libc::AF_NETLINK as u32 {
                format!("{call}({}, protocol {protocol})", family_name(family))
            } else {
                format!("{call}({})", family_name(family))
            };
            Some((shown, Widens::SocketFamily))
        }
        libc::SYS_ioctl => TERMINAL_IOCTLS
            .iter()
            .find(|(cmd, arg, _, _)| *cmd == low(1) && arg.is_none_or(|a| a == args[2]))
            .map(|(_, _, name, why)| (format!("ioctl {name}"), *why)),
        libc::SYS_prlimit64 if low(0) != 0 && args[2] != 0 => Some((
            format!(
                "prlimit64 setting {} of pid {}",
                rlimit_name(low(1)),
                low(0).cast_signed()
            ),
            Widens::OtherLimits,
        )),
        libc::SYS_fcntl if low(1) == F_SETLEASE && low(2) != F_UNLCK => {
            let kind = match i32::try_from(low(2)) {
                Ok(libc::F_RDLCK) => "F_RDLCK".to_owned(),
                Ok(libc::F_WRLCK) => "F_WRLCK".to_owned(),
                _ => format!("type {}", low(2)),
            };
            Some((format!("fcntl F_SETLEASE {kind}"), Widens::Leases))
        }
        _ => None,
    }
}

/// `RLIMIT_NOFILE`, … or the number.
fn rlimit_name(resource: u64) -> String {
    const NAMES: [&str; 16] = [
        "RLIMIT_CPU",
        "RLIMIT_FSIZE",
        "RLIMIT_DATA",
        "RLIMIT_STACK",
        "RLIMIT_CORE",
        "RLIMIT_RSS",
        "RLIMIT_NPROC",
        "RLIMIT_NOFILE",
        "RLIMIT_MEMLOCK",
        "RLIMIT_AS",
        "RLIMIT_LOCKS",
        "RLIMIT_SIGPENDING",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
    ];
    usize::try_from(resource)
        .ok()
        .and_then(|r| NAMES.get(r))
        .map_or_else(|| format!("resource {resource}"), |n| (*n).to_owned())
}

/// `AF_PACKET`, … or the number.
fn family_name(family: u32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (libc::AF_INET, "AF_INET"),
        (libc::AF_INET6, "AF_INET6"),
        (libc::AF_PACKET, "AF_PACKET"),
        (libc::AF_NETLINK, "AF_NETLINK"),
        (libc::AF_VSOCK, "AF_VSOCK"),
        (libc::AF_ALG, "AF_ALG"),
        (libc::AF_BLUETOOTH, "AF_BLUETOOTH"),
        (libc::AF_CAN, "AF_CAN"),
        (libc::AF_KEY, "AF_KEY"),
        (libc::AF_XDP, "AF_XDP"),
        (libc::AF_TIPC, "AF_TIPC"),
        (libc::AF_RDS, "AF_RDS"),
        (libc::AF_APPLETALK, "AF_APPLETALK"),
        (libc::AF_X25, "AF_X25"),
        (libc::AF_PPPOX, "AF_PPPOX"),
    ];
    NAMES
        .iter()
        .find(|(f, _)| u32::try_from(*f) == Ok(family))
        .map_or_else(|| format!("family {family}"), |(_, n)| (*n).to_owned())
}

/// An inet protocol as a person knows it, for the refusals of
/// [`Widens::SocketProtocol`].
fn protocol_name(protocol: u64) -> String {
    const NAMES: &[(i32, &str)] = &[
        (libc::IPPROTO_SCTP, "IPPROTO_SCTP"),
        (libc::IPPROTO_DCCP, "IPPROTO_DCCP"),
        (libc::IPPROTO_RAW, "IPPROTO_RAW"),
        (libc::IPPROTO_IGMP, "IPPROTO_IGMP"),
        (libc::IPPROTO_ICMP, "IPPROTO_ICMP"),
        (libc::IPPROTO_ICMPV6, "IPPROTO_ICMPV6"),
        (115, "IPPROTO_L2TP"),
        (256, "IPPROTO_SMC"),
    ];
    NAMES
        .iter()
        .find(|(p, _)| u64::try_from(*p) == Ok(protocol))
        .map_or_else(|| format!("protocol {protocol}"), |(_, n)| (*n).to_owned())
}

/// Every filter of a run as one program, in this order: the [`front`]
/// (architecture, x32, and a search that lets every call no part decides
/// on through at once), the deny list (reported), then `clone3`/`openat2`
/// → ENOSYS, then [`notify_filter`]. Loaded as one
/// filter (with the notification listener), because each filter the
/// kernel loads costs its own allocation, conversion, JIT and action-cache
/// emulation (~0.1 ms here for three), and every syscall of the command
/// then runs one program instead of three.
///
/// Same verdicts as the parts loaded separately would give, because no
/// two parts decide on the same call except in order: the reported part's
/// calls and arguments no other part names
/// (`the_reported_calls_are_notified_by_no_other_part`: `ioctl` is in both,
/// with other commands); the ENOSYS calls are in no other part. A part's
/// verdict other than allow is final, and a part that allows falls through
/// to the next.
///
/// Where the kernel lacks a mechanism the supervisor stands in for
/// ([`Fallbacks`]), the program has a part more ([`fallback_filter`]), and
/// is built now rather than taken as the build script made it. It comes
/// last, so it sees only what every other part allowed; where it hands
/// over a call an earlier part also takes with other arguments (`open`,
/// `openat`: a set-id mode, refused; `O_TRUNC` without write access,
/// truncated beneath a writable root), the supervisor asks
/// [`refused_call`] first, so what the reported part refuses stays refused
/// (`truncating_agrees_with_the_filter`).
pub fn combined(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    if fallbacks != Fallbacks::NONE {
        return compile_with(fallbacks);
    }
    #[cfg(lockrun_seccomp_built)]
    {
        Ok(BUILT
            .iter()
            .map(|&(code, jt, jf, k)| insn(code, jt, jf, k))
            .collect())
    }
    #[cfg(not(lockrun_seccomp_built))]
    compile()
}

/// The promises of the kernel's own mechanisms that the supervisor holds
/// instead on a kernel without them ([`crate::kernel`]): each names calls
/// handed to the supervisor by [`fallback_filter`]. (The device ioctl
/// right, ABI 5, is stood in for by the mounts of the run's namespace, not
/// here: [`crate::kernel::Kernel::devices_only_in_dev`].)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // one flag per missing mechanism, each its own calls
pub struct Fallbacks {
    /// No Landlock truncate right (ABI 3): [`TRUNCATING_OPENS`] and `truncate`.
    pub truncate: bool,
    /// No Landlock scoping of signals and abstract unix sockets (ABI 6).
    pub scoping: bool,
    /// No cgroup unix hooks (Linux 6.7).
    pub unix_addresses: bool,
}

impl Fallbacks {
    /// A kernel with every mechanism.
    pub const NONE: Self = Self {
        truncate: false,
        scoping: false,
        unix_addresses: false,
    };
}

/// The part of [`combined`] that hands the supervisor the calls a kernel's
/// missing mechanism would have judged ([`Fallbacks`]), and the calls it
/// decides on; allows every other. One section per mechanism, each handing
/// over its calls and going on to the next with every other: the scoping
/// and unix sections ([`scope::filter`]) take the number in the
/// accumulator and leave it there; the truncate section loads it again
/// itself, and leaves the accumulator holding anything.
fn fallback_filter(fallbacks: Fallbacks) -> (BpfProgram, Vec<i64>) {
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4), // arch
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // nr
    ];
    let mut calls = Vec::new();
    scope::filter(fallbacks, &mut p, &mut calls);
    if fallbacks.truncate {
        truncate_section(&mut p, &mut calls);
    }
    p.push(insn(RET_K, 0, 0, RET_ALLOW));
    (p, calls)
}

/// The opens that can truncate without asking Landlock for a write right,
/// with the argument that holds their flags: `O_TRUNC` with the access
/// mode `O_RDONLY`, or 3 (`O_WRONLY | O_RDWR`, which opens for neither and
/// asks Landlock nothing), truncate a regular file the run may only read
/// (or not even that) where Landlock has no truncate right (ABI < 3,
/// Linux < 6.2). `O_WRONLY` and `O_RDWR` ask for the write right, which
/// refuses them outside the writable roots, and so does `creat`
/// (`O_WRONLY`); `O_PATH` ignores `O_TRUNC`; `openat2` is `ENOSYS`.
pub const TRUNCATING_OPENS: &[(i64, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1),
    (libc::SYS_openat, 2),
];

/// Whether [`fallback_filter`] hands this call over for want of Landlock's
/// truncate right: `truncate(2)`, and the opens of [`TRUNCATING_OPENS`]
/// with `O_TRUNC`, without `O_PATH`, and access mode 0 or 3. Decided on
/// the registers alone, as the filter decides
/// (`truncating_agrees_with_the_filter`); the kernel reads the flags as an
/// int (the low half).
#[must_use]
pub fn truncating(nr: i64, args: [u64; 6]) -> bool {
    if nr == libc::SYS_truncate {
        return true;
    }
    TRUNCATING_OPENS
        .iter()
        .find(|(n, _)| *n == nr)
        .is_some_and(|(_, f)| {
            let flags = args[*f as usize] & 0xffff_ffff;
            let mode = flags & libc::O_ACCMODE as u64;
            flags & libc::O_TRUNC as u64 != 0
                && flags & libc::O_PATH as u64 == 0
                && (mode == 0 || mode == libc::O_ACCMODE as u64)
        })
}

/// [`fallback_filter`]'s section for [`Fallbacks::truncate`]: every
/// `truncate`, and the opens [`truncating`] names, to the supervisor
/// ([`crate::supervise::truncate`]), which truncates, or opens and hands
/// over the descriptor, only beneath a writable root.
fn truncate_section(p: &mut BpfProgram, decided: &mut Vec<i64>) {
    let nr = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    let (trunc, path) = (libc::O_TRUNC as u32, libc::O_PATH as u32);
    let (wronly, rdwr) = (libc::O_WRONLY as u32, libc::O_RDWR as u32);
    p.push(insn(LD_W_ABS, 0, 0, 0));
    p.push(insn(JEQ_K, 0, 1, nr(libc::SYS_truncate)));
    p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
    decided.push(libc::SYS_truncate);
    let mut to_end = Vec::new();
    for (call, flags) in TRUNCATING_OPENS {
        // Not this call: over the eight below, to the next call's test.
        p.push(insn(JEQ_K, 0, 8, nr(*call)));
        p.extend([
            insn(LD_W_ABS, 0, 0, arg_lo(*flags)), // 0
            insn(JSET_K, 0, 5, trunc),            // 1: no O_TRUNC → 7
            insn(JSET_K, 4, 0, path),             // 2: O_PATH → 7
            insn(JSET_K, 0, 1, wronly),           // 3: → 4 | 5
            insn(JSET_K, 1, 2, rdwr),             // 4: mode 3 → 6, mode 1 → 7
            insn(JSET_K, 1, 0, rdwr),             // 5: mode 2 → 7, mode 0 → 6
            insn(RET_K, 0, 0, RET_USER_NOTIF),    // 6
        ]);
        // 7: this call is decided; the accumulator holds its flags, which
        // the next call's test must not take for a number: to the end.
        to_end.push(p.len());
        p.push(insn(JA, 0, 0, 0));
        decided.push(*call);
    }
    let end = p.len();
    for at in to_end {
        p[at].k = u32::try_from(end - at - 1).unwrap_or(u32::MAX);
    }
}

/// [`combined`] as the build script compiled it, from this very module
/// (agent/build.rs compiles it too): `(code, jt, jf, k)`. Building and
/// compacting it took ~0.13 ms of each run's start-up (~0.03 ms warm).
#[cfg(lockrun_seccomp_built)]
#[allow(clippy::unreadable_literal)]
const BUILT: &[(u16, u8, u8, u32)] = include!(concat!(env!("OUT_DIR"), "/seccomp_filter.rs"));

/// [`combined`] for a kernel with every mechanism, built and compacted now.
pub fn compile() -> Result<BpfProgram, SeccompError> {
    compile_with(Fallbacks::NONE)
}

/// [`combined`] with `fallbacks`, built and compacted now.
fn compile_with(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    let out = compact::compact(&uncompacted(fallbacks)?);
    // BPF_MAXINSNS: the kernel refuses a longer classic program.
    if out.len() > 4096 {
        return Err(SeccompError::TooLong(out.len()));
    }
    Ok(out)
}

/// [`combined`] as built, before [`compact::compact`] makes it smaller.
fn uncompacted(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    let (parts, decided) = parts(fallbacks)?;
    let mut out = front(&decided);
    out.extend(chain(&parts)?);
    Ok(out)
}

/// The parts of [`combined`] in order, and every syscall number any
/// of them decides on (the others it allows).
fn parts(fallbacks: Fallbacks) -> Result<(Vec<BpfProgram>, Vec<i64>), SeccompError> {
    let (mut parts, mut decided) = filters()?;
    parts.push(notify_filter());
    decided.extend(NOTIFY_METADATA);
    decided.extend(NOTIFY_JUDGED);
    decided.extend(NOTIFY_SCHED.iter().map(|c| c.nr));
    decided.push(NOTIFY_WATCH);
    if fallbacks != Fallbacks::NONE {
        let (part, calls) = fallback_filter(fallbacks);
        parts.push(part);
        decided.extend(calls);
    }
    Ok((parts, decided))
}

/// The first instructions of [`combined`]: the architecture (any other is
/// killed), then on `x86_64` every x32-ABI call handed to the supervisor,
/// which refuses it with EPERM and reports it ([`refused_call`]), then a
/// binary search over `decided`, the calls some part decides on; only
/// those go on to the parts, every other call is allowed here.
///
/// x32 calls carry bit 30 in their number under the same `AUDIT_ARCH`: on
/// a kernel built with `CONFIG_X86_X32_ABI` and booted with it on,
/// `0x4000_0000 | SYS_fchmodat` is `fchmodat`, and the parts, which compare
/// plain numbers, would let it past the deny list and the supervisor.
///
/// The search is for start-up: when the kernel loads a filter it runs it
/// for every syscall number (~470) to cache the ones it always allows. Down
/// the parts' lists that was ~200 comparisons per number, a few tenths of
/// a millisecond of every run; through the search it is ~10.
fn front(decided: &[i64]) -> BpfProgram {
    let mut nrs: Vec<u32> = decided
        .iter()
        .map(|nr| u32::try_from(*nr).unwrap_or(u32::MAX))
        .collect();
    nrs.sort_unstable();
    nrs.dedup();
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4), // arch
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // nr
    ];
    #[cfg(target_arch = "x86_64")]
    p.extend([
        insn(JSET_K, 0, 1, X32_SYSCALL_BIT),
        insn(RET_K, 0, 0, RET_USER_NOTIF),
    ]);
    let mut to_parts = Vec::new();
    search(&mut p, &mut to_parts, &nrs);
    // Where every found number goes: a load of an argument, which ends the
    // kernel's trial run there (it follows loads of the number and the
    // architecture only). A decided number is never always allowed, so the
    // cache loses nothing, and the trial no longer walks the parts' lists
    // for each of them. Each part loads what it compares first.
    let parts_at = p.len();
    p.push(insn(LD_W_ABS, 0, 0, arg_lo(0)));
    for at in to_parts {
        p[at].k = u32::try_from(parts_at - at - 1).unwrap_or(u32::MAX);
    }
    p
}

/// A binary search for the number in the accumulator over sorted `nrs`:
/// found → a `JA` (recorded in `to_parts`, its offset set by [`front`]) to
/// the parts; not found → allow. Up to four numbers are compared in a row.
fn search(p: &mut BpfProgram, to_parts: &mut Vec<usize>, nrs: &[u32]) {
    if nrs.len() <= 4 {
        for (i, nr) in nrs.iter().enumerate() {
            // Found: over the rest of the row and the allow, to the JA.
            p.push(insn(
                JEQ_K,
                u8::try_from(nrs.len() - i).unwrap_or(0),
                0,
                *nr,
            ));
        }
        p.push(insn(RET_K, 0, 0, RET_ALLOW));
        to_parts.push(p.len());
        p.push(insn(JA, 0, 0, 0));
        return;
    }
    let mid = nrs.len() / 2;
    // nr >= nrs[mid]: the JA over the lower half; below: skip the JA.
    p.push(insn(JGE_K, 0, 1, nrs[mid]));
    let over = p.len();
    p.push(insn(JA, 0, 0, 0));
    search(p, to_parts, &nrs[..mid]);
    p[over].k = u32::try_from(p.len() - over - 1).unwrap_or(u32::MAX);
    search(p, to_parts, &nrs[mid..]);
}

/// Concatenate complete filters: in each part but the last, every
/// `RET ALLOW` becomes a jump to the first instruction of the next part.
/// Jumps inside a part keep their offsets (one instruction replaces one).
fn chain(parts: &[BpfProgram]) -> Result<BpfProgram, SeccompError> {
    let mut out = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        let last = n + 1 == parts.len();
        for (i, f) in part.iter().enumerate() {
            if !last && f.code == RET_K && f.k == RET_ALLOW {
                let to_next = u32::try_from(part.len() - i - 1)
                    .map_err(|_| SeccompError::TooLong(out.len() + part.len()))?;
                out.push(insn(JA, 0, 0, to_next));
            } else {
                out.push(f.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0x3e | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xb7 | 0x8000_0000 | 0x4000_0000;

/// `fchmodat2` (Linux 6.6; one number on every arch, and missing from the
/// libc crate's aarch64 glibc module).
pub const SYS_FCHMODAT2: i64 = 452;

/// `open_tree_attr` (Linux 6.15: `open_tree` that also sets the clone's
/// mount attributes; one number on every arch, missing from the libc crate).
pub const SYS_OPEN_TREE_ATTR: i64 = 467;

/// `setxattrat` and `removexattrat` (Linux 6.13; one number on every arch).
pub const SYS_SETXATTRAT: i64 = 463;
pub const SYS_REMOVEXATTRAT: i64 = 466;

/// What the filters do, for people (`lockrun policy show`), on a kernel
/// that leaves `fallbacks` to the supervisor: each line a verdict and the
/// calls it applies to. Built from the same tables as the
/// filters where the calls are listed one by one.
#[must_use]
pub fn describe(fallbacks: Fallbacks) -> Vec<(&'static str, String)> {
    let mut lines = describe_always();
    // What this kernel's missing mechanisms hand over besides.
    lines.extend(scope::describe(fallbacks));
    lines.extend(describe_fallbacks(fallbacks));
    lines
}

/// [`describe`] of the parts every kernel has.
fn describe_always() -> Vec<(&'static str, String)> {
    let names: Vec<&str> = DENY_ALWAYS.iter().map(|(_, n, _)| *n).collect();
    vec![
        ("EPERM, each refusal shown", names.join(", ")),
        ("EPERM, each refusal shown", "clone with any CLONE_NEW* flag".to_owned()),
        (
            "EPERM, each refusal shown",
            "socket, socketpair: any family but AF_UNIX, AF_INET, AF_INET6, and AF_NETLINK with NETLINK_ROUTE; AF_INET and AF_INET6 with any protocol but TCP, UDP, MPTCP, UDP-Lite and ICMP".to_owned(),
        ),
        (
            "EPERM, each refusal shown",
            format!(
                "ioctl {} (typing into the caller's terminal, switching its line discipline, making it refuse others' opens, stopping its flow)",
                TERMINAL_IOCTLS.iter().map(|(_, _, n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        ),
        (
            "EPERM, each refusal shown",
            "prlimit64 setting a limit of another process (any pid but 0)".to_owned(),
        ),
        (
            "EPERM, each refusal shown",
            "fcntl F_SETLEASE but F_UNLCK (a lease holds back others' writes to the file)".to_owned(),
        ),
        #[cfg(target_arch = "x86_64")]
        (
            "EPERM, each refusal shown",
            "every x32-ABI call (numbers with bit 30 set: the same calls under numbers the lists would miss)".to_owned(),
        ),
        (
            "EPERM, each refusal shown",
            "set-id mode bits: S_ISUID and S_ISGID in open, openat, creat, mknod, mknodat; in chmod, fchmod, fchmodat, \
             fchmodat2 (judged by the supervisor) S_ISUID always and S_ISGID except on a directory".to_owned(),
        ),
        (
            "ENOSYS",
            "clone3, openat2, file_setattr (arguments in a struct; callers fall back to clone, openat, the ioctl)".to_owned(),
        ),
        (
            "supervised",
            format!(
                "{} metadata calls (chmod, chown, utime(s), utimensat, set/remove xattr families), the inode-attribute ioctls, \
                 and connect/sendto of unix pathname addresses: lockrun performs them, only beneath the run's writable roots",
                NOTIFY_METADATA.len()
            ),
        ),
        (
            "supervised",
            "setsockopt SO_REUSEPORT, SO_REUSEADDR: lockrun sets them, refused (EPERM, shown) when turning on port sharing \
             for an inet socket (SO_REUSEPORT; SO_REUSEADDR but on a stream socket)".to_owned(),
        ),
        (
            "supervised",
            "inotify_add_watch: lockrun adds the watch, refused (EACCES, shown) at or beneath a denied path".to_owned(),
        ),
        (
            "supervised",
            format!(
                "{} naming another task: let through for a task of the run, refused (EPERM, shown) for any other; \
                 a process group's or a uid's (PRIO_PGRP, PRIO_USER, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER) refused",
                NOTIFY_SCHED.iter().map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    ]
}

/// What the part of [`fallback_filter`] adds on this kernel, for people
/// (`lockrun policy show`), as [`describe`]'s lines: nothing where the
/// kernel has every mechanism.
#[must_use]
pub fn describe_fallbacks(fallbacks: Fallbacks) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if fallbacks.truncate {
        let opens: Vec<String> = TRUNCATING_OPENS
            .iter()
            .map(|(nr, _)| match *nr {
                libc::SYS_openat => "openat".to_owned(),
                _ => "open".to_owned(),
            })
            .collect();
        lines.push((
            "supervised",
            format!(
                "truncate, and {} with O_TRUNC and access mode O_RDONLY (or 3), for want of Landlock's truncate \
                 right (ABI < 3): lockrun truncates, or opens and hands over the descriptor, only a regular file \
                 beneath the run's writable roots; refused (EACCES, shown) elsewhere",
                opens.join(", ")
            ),
        ));
    }
    lines
}

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

/// `inotify_add_watch`, performed by the supervisor, which refuses a watch
/// on a denied path ([`crate::supervise::watch`]): Landlock does not check
/// watches, and a watch on a directory names what appears in it.
pub const NOTIFY_WATCH: i64 = libc::SYS_inotify_add_watch;

/// `setsockopt(fd, SOL_SOCKET, optname, …)` with one of these options goes
/// to the supervisor, which refuses turning on port sharing for inet
/// sockets and performs the rest ([`crate::supervise::reuse`]).
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

/// The calls [`notify_filter`] judges by their arguments: `ioctl` by its
/// command, `connect` and `sendto` by their address length.
const NOTIFY_JUDGED: [i64; 4] = [
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

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `BPF_JMP | BPF_JA`: jump `k` instructions forward.
const JA: u16 = 0x05;
/// `BPF_JMP | BPF_JGE | BPF_K`, `BPF_JMP | BPF_JSET | BPF_K` (the x32
/// test, the open flags of [`truncate_section`]).
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
/// `__X32_SYSCALL_BIT`: the x32 ABI's syscall numbers.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `offsetof(struct seccomp_data, args[i])`, low and high 32-bit halves (LE).
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}
const fn arg_hi(i: u32) -> u32 {
    20 + 8 * i
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> seccompiler::sock_filter {
    seccompiler::sock_filter { code, jt, jf, k }
}

/// The supervised filter (classic BPF, written out: seccompiler 0.5 has no
/// `USER_NOTIF` action). Decides on registers only:
/// - the metadata calls of [`NOTIFY_METADATA`] and [`NOTIFY_WATCH`] → notify;
/// - `ioctl` with a command of [`NOTIFY_IOCTLS`] → notify;
/// - `connect(fd, addr, addrlen)` → notify unless `addrlen` is 16 or 28
///   (TCP/UDP to an inet address keeps its speed; a unix address of exactly
///   that length is refused by the unix hooks, see [`crate::bpf::unix`]);
/// - `sendto(fd, buf, len, flags, addr, addrlen)` → notify when `addr` is not
///   NULL and `addrlen` is not 16 or 28;
/// - `setsockopt(fd, SOL_SOCKET, SO_REUSEADDR | SO_REUSEPORT)` → notify;
/// - the scheduling calls of [`NOTIFY_SCHED`] → notify unless they name
///   the caller itself;
/// - everything else → allow (the other filters still apply).
#[must_use]
pub fn notify_filter() -> BpfProgram {
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4), // arch
        insn(JEQ_K, 1, 0, AUDIT_ARCH),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, 0), // nr
    ];
    for nr in NOTIFY_METADATA.iter().chain([&NOTIFY_WATCH]) {
        p.push(insn(JEQ_K, 0, 1, u32::try_from(*nr).unwrap_or(u32::MAX)));
        p.push(insn(RET_K, 0, 0, RET_USER_NOTIF));
    }
    // ioctl: the command is args[1] (an unsigned int).
    let n = NOTIFY_IOCTLS.len();
    // Not ioctl: skip the load, the n tests and both returns.
    p.push(insn(JEQ_K, 0, (n + 3) as u8, libc::SYS_ioctl as u32));
    p.push(insn(LD_W_ABS, 0, 0, arg_lo(1)));
    for (i, cmd) in NOTIFY_IOCTLS.iter().enumerate() {
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
    const JGT_K: u16 = 0x25;
    const AND_K: u16 = 0x54;

    /// Run a classic-BPF filter on a `seccomp_data` (the opcodes lockrun's
    /// and seccompiler's filters use; any other fails the test).
    pub(in crate::seccomp) fn run(p: &[seccompiler::sock_filter], nr: i64, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&u32::try_from(nr).unwrap_or(u32::MAX).to_le_bytes());
        data.extend_from_slice(&super::AUDIT_ARCH.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let f = &p[pc];
            match f.code {
                super::LD_W_ABS => {
                    let k = f.k as usize;
                    acc = u32::from_le_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]);
                    pc += 1;
                }
                super::JEQ_K => {
                    pc += 1 + usize::from(if acc == f.k { f.jt } else { f.jf });
                }
                super::JGE_K => {
                    pc += 1 + usize::from(if acc >= f.k { f.jt } else { f.jf });
                }
                JGT_K => {
                    pc += 1 + usize::from(if acc > f.k { f.jt } else { f.jf });
                }
                super::JSET_K => {
                    pc += 1 + usize::from(if acc & f.k != 0 { f.jt } else { f.jf });
                }
                AND_K => {
                    acc &= f.k;
                    pc += 1;
                }
                super::JA => pc += 1 + f.k as usize,
                super::RET_K => return f.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn notify_filter_decides_on_registers() {
        use super::{RET_ALLOW as A, RET_USER_NOTIF as N};
        let p = super::notify_filter();
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
        for nr in super::NOTIFY_METADATA.iter().chain([&super::NOTIFY_WATCH]) {
            assert_eq!(run(&p, *nr, [0; 6]), N, "nr {nr}");
        }
        for cmd in super::NOTIFY_IOCTLS {
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

    /// The filter notifies a scheduling call exactly when
    /// [`super::sched_target`] says it names another than the caller, for
    /// the registers each call reads and junk in their high halves.
    #[test]
    fn sched_target_agrees_with_the_filter() {
        use super::{SchedTarget, RET_ALLOW as A, RET_USER_NOTIF as N};
        let p = super::notify_filter();
        let all = super::combined(super::Fallbacks::NONE).unwrap();
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
        for c in super::NOTIFY_SCHED {
            let nr = c.nr;
            for a0 in values {
                for a1 in values {
                    let args = [a0, a1, 19, 0, 0, 0];
                    let target = super::sched_target(nr, args).unwrap();
                    let want = if target == SchedTarget::Caller { A } else { N };
                    assert_eq!(run(&p, nr, args), want, "nr {nr} {args:?} {target:?}");
                    assert_eq!(run(&all, nr, args), want, "combined: nr {nr} {args:?}");
                }
            }
        }
        assert_eq!(super::sched_target(libc::SYS_getpriority, [0; 6]), None);
        let t = |nr, a0, a1| super::sched_target(nr, [a0, a1, 19, 0, 0, 0]).unwrap();
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
        let p = super::notify_filter();
        for (i, f) in p.iter().enumerate() {
            if f.code == super::JEQ_K {
                assert!(i + 1 + usize::from(f.jt.max(f.jf)) < p.len(), "insn {i}");
            }
        }
        assert_eq!(p.last().map(|f| f.code), Some(super::RET_K));
    }

    #[test]
    fn chain_turns_each_allow_but_the_last_into_a_jump_to_the_next_part() {
        use super::{insn, JA, JEQ_K, LD_W_ABS, RET_ALLOW, RET_K};
        let a = vec![
            insn(LD_W_ABS, 0, 0, 0),
            insn(JEQ_K, 0, 1, 7),
            insn(RET_K, 0, 0, 0x0005_0001), // errno
            insn(RET_K, 0, 0, RET_ALLOW),
        ];
        let b = vec![insn(LD_W_ABS, 0, 0, 0), insn(RET_K, 0, 0, RET_ALLOW)];
        let c = super::chain(&[a.clone(), b.clone(), b.clone()]).unwrap();
        assert_eq!(c.len(), a.len() + 2 * b.len());
        // a's allow (index 3) jumps to index 4, b's first allow to index 6.
        assert_eq!((c[3].code, c[3].k), (JA, 0));
        assert_eq!((c[5].code, c[5].k), (JA, 0));
        assert_eq!((c[2].code, c[2].k), (RET_K, 0x0005_0001));
        assert_eq!((c[7].code, c[7].k), (RET_K, RET_ALLOW));
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        // After the front, only the last part may allow; every jump of the
        // parts lands inside the program.
        let tail = super::notify_filter().len();
        let (_, decided) = super::parts(super::Fallbacks::NONE).unwrap();
        let front = super::front(&decided).len();
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

    /// The filter every run loads is the one this module builds: the build
    /// script's copy (compiled from this file) is not stale, and the build
    /// embedded it (on the build's own architecture it always does).
    #[test]
    fn the_filter_a_run_loads_is_the_one_this_module_builds() {
        let key = |p: &[seccompiler::sock_filter]| -> Vec<(u16, u8, u8, u32)> {
            p.iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect()
        };
        let loaded = super::combined(super::Fallbacks::NONE).unwrap_or_else(|e| panic!("{e}"));
        let built = super::compile().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key(&loaded), key(&built));
        // A fact of the build, checked where the tests run.
        #[allow(clippy::assertions_on_constants)]
        {
            assert!(
                cfg!(lockrun_seccomp_built),
                "the build script did not build the filter"
            );
        }
    }

    #[test]
    fn filters_compile_for_this_arch() {
        let (f, _) = super::filters().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|p| !p.is_empty() && p.len() < u16::MAX.into()));
    }

    /// Each call of the deny list goes to the supervisor (which answers
    /// EPERM and reports it) whatever its arguments; the list holds the
    /// whole mount family, including the calls newer kernels added to it.
    #[test]
    fn every_call_of_the_deny_list_is_handed_to_the_supervisor() {
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        for (nr, name, _) in super::DENY_ALWAYS {
            for a in [[0; 6], [u64::MAX; 6], [1, 2, 3, 4, 5, 6]] {
                assert_eq!(run(&all, *nr, a), super::RET_USER_NOTIF, "{name} {a:?}");
            }
            assert_eq!(
                super::refused_call(*nr, [0; 6]).map(|(c, _)| c).as_deref(),
                Some(*name)
            );
        }
        let names: Vec<&str> = super::DENY_ALWAYS.iter().map(|(_, n, _)| *n).collect();
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
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
            (
                libc::SYS_ioctl,
                [0, libc::TIOCGETD, 0x7ffd_0000, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (
                libc::SYS_ioctl,
                [0, libc::TIOCNXCL, 0, 0, 0, 0],
                super::RET_ALLOW,
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
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
            (
                libc::SYS_socket,
                [2, 1, 132, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socket(AF_INET, IPPROTO_SCTP)"),
            ),
            (
                libc::SYS_socketpair,
                [2, 5, 132, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socketpair(AF_INET, IPPROTO_SCTP)"),
            ),
            (
                libc::SYS_socket,
                [10, 2, 115, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socket(AF_INET6, IPPROTO_L2TP)"),
            ),
            (
                libc::SYS_socket,
                [10, 2, 1, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socket(AF_INET6, IPPROTO_ICMP)"),
            ),
            (
                libc::SYS_socket,
                [2, 1, 0x1_0000_0084, 0, 0, 0],
                super::RET_USER_NOTIF,
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
            assert_eq!(
                run(&all, libc::SYS_socket, args),
                super::RET_ALLOW,
                "{args:?}"
            );
            assert!(super::refused_call(libc::SYS_socket, args).is_none());
        }
    }

    /// The calls refused by their arguments are reported as refused, with
    /// what made them so; the same calls with allowed arguments pass.
    #[test]
    fn calls_refused_by_their_arguments_are_reported_with_them() {
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        let sigchld = libc::SIGCHLD as u64;
        let newuser = libc::CLONE_NEWUSER as u64 | libc::CLONE_NEWNET as u64 | sigchld;
        let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
            (
                libc::SYS_clone,
                [newuser, 0, 0, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("clone with CLONE_NEWUSER|CLONE_NEWNET"),
            ),
            (
                libc::SYS_clone,
                [sigchld, 0, 0, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (
                libc::SYS_socket,
                [17, 3, 0, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socket(AF_PACKET)"),
            ),
            (
                libc::SYS_socketpair,
                [40, 1, 0, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socketpair(AF_VSOCK)"),
            ),
            (
                libc::SYS_socket,
                [16, 3, 4, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("socket(AF_NETLINK, protocol 4)"),
            ),
            (
                libc::SYS_socket,
                [16, 3, 0, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (libc::SYS_socket, [2, 1, 0, 0, 0, 0], super::RET_ALLOW, None),
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
        assert_eq!(super::path_arg(libc::SYS_openat), Some(1));
        assert_eq!(super::path_arg(libc::SYS_mknodat), Some(1));
        assert_eq!(super::path_arg(libc::SYS_fchmodat), None);
        for (nr, args, shown) in reported {
            assert_eq!(run(&all, *nr, *args), super::RET_USER_NOTIF, "{shown}");
            assert_eq!(
                super::refused_call(*nr, *args).map(|(c, _)| c).as_deref(),
                Some(*shown)
            );
        }
        assert_eq!(
            run(&all, libc::SYS_openat, [3, 0x1000, 0o101, 0o644, 0, 0]),
            super::RET_ALLOW
        );
        assert_eq!(
            run(&all, libc::SYS_fchmod, [3, 0o4755, 0, 0, 0, 0]),
            super::RET_USER_NOTIF
        );
        assert_eq!(
            super::refused_call(libc::SYS_fchmod, [3, 0o4755, 0, 0, 0, 0]),
            None
        );
    }

    /// Each case's verdict from the whole program, and the call
    /// [`super::refused_call`] names for it (none when allowed).
    fn check_cases(all: &[seccompiler::sock_filter], cases: &[(i64, [u64; 6], u32, Option<&str>)]) {
        for (nr, args, verdict, shown) in cases {
            assert_eq!(run(all, *nr, *args), *verdict, "{nr} {args:?}");
            assert_eq!(
                super::refused_call(*nr, *args).map(|(c, _)| c).as_deref(),
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
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        let cases: &[(i64, [u64; 6], u32, Option<&str>)] = &[
            (
                libc::SYS_prlimit64,
                [4321, 7, 0x1000, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("prlimit64 setting RLIMIT_NOFILE of pid 4321"),
            ),
            (
                libc::SYS_prlimit64,
                [4321, 0, 0x7fff_0000_0000, 0x2000, 0, 0],
                super::RET_USER_NOTIF,
                Some("prlimit64 setting RLIMIT_CPU of pid 4321"),
            ),
            (
                libc::SYS_prlimit64,
                [0, 7, 0x1000, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (
                libc::SYS_prlimit64,
                [0x1_0000_0000, 7, 0x1000, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (
                libc::SYS_prlimit64,
                [4321, 7, 0, 0x1000, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (
                libc::SYS_fcntl,
                [3, super::F_SETLEASE, libc::F_RDLCK as u64, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("fcntl F_SETLEASE F_RDLCK"),
            ),
            (
                libc::SYS_fcntl,
                [3, super::F_SETLEASE, libc::F_WRLCK as u64, 0, 0, 0],
                super::RET_USER_NOTIF,
                Some("fcntl F_SETLEASE F_WRLCK"),
            ),
            (
                libc::SYS_fcntl,
                [3, super::F_SETLEASE, super::F_UNLCK, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            // A lock (not a lease) of a file, and the everyday commands: allowed.
            (
                libc::SYS_fcntl,
                [3, libc::F_SETLK as u64, 0x1000, 0, 0, 0],
                super::RET_ALLOW,
                None,
            ),
            (
                libc::SYS_fcntl,
                [3, libc::F_GETLEASE as u64, 0, 0, 0, 0],
                super::RET_ALLOW,
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
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        for flags in [0, 0o2_000_000, 0o200_000] {
            let args = [3, 0x1000, flags, 0o5007, 0, 0];
            assert_eq!(run(&all, libc::SYS_openat, args), super::RET_ALLOW);
            assert_eq!(super::refused_call(libc::SYS_openat, args), None);
        }
        let tmpfile = [3, 0x1000, 0o2020_0002, 0o2600, 0, 0];
        assert_eq!(run(&all, libc::SYS_openat, tmpfile), super::RET_USER_NOTIF);
        assert_eq!(
            super::refused_call(libc::SYS_openat, tmpfile)
                .map(|(c, _)| c)
                .as_deref(),
            Some("openat with mode 02600")
        );
    }

    /// The supervisor takes a notification for a refusal exactly when the
    /// reported part (or, for x32, the front) gave it: for every number up
    /// to 1024 and arguments that take each branch, [`super::refused_call`]
    /// names a call if and only if the filter handed it over as refused.
    #[test]
    fn refused_call_agrees_with_the_filter() {
        let (parts, _) = super::parts(super::Fallbacks::NONE).unwrap();
        let reported = &parts[0];
        let all = super::combined(super::Fallbacks::NONE).unwrap();
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
            [3, super::F_SETLEASE, 0, 0, 0, 0],
            [3, super::F_SETLEASE, 1, 0, 0, 0],
            [3, super::F_SETLEASE, super::F_UNLCK, 0, 0, 0],
            [3, super::F_SETLEASE | 0x1_0000_0000, 0x1_0000_0000, 0, 0, 0],
            [3, super::F_SETLEASE, 7, 0, 0, 0],
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
                let handed = run(reported, nr, *a) == super::RET_USER_NOTIF;
                let named = super::refused_call(nr, *a);
                assert_eq!(handed, named.is_some(), "nr {nr} args {a:?}: {named:?}");
                if handed {
                    assert_eq!(run(&all, nr, *a), super::RET_USER_NOTIF, "nr {nr} {a:?}");
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        for nr in [0, libc::SYS_getpid, libc::SYS_fchmodat, 547] {
            let x32 = nr | 0x4000_0000;
            assert_eq!(run(&all, x32, [0; 6]), super::RET_USER_NOTIF);
            let (call, why) = super::refused_call(x32, [0; 6]).unwrap();
            assert_eq!(why, super::Widens::X32Abi);
            assert_eq!(call, format!("x32-ABI call {x32:#x}"));
        }
    }

    #[test]
    fn set_id_bits_are_refused_but_set_group_id_on_a_directory() {
        use super::set_id_refused;
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
    /// is one [`super::refused_call`] names (the supervisor relies on it to
    /// ask that after `connect`, `sendto` and the metadata calls), and the
    /// notifying part hands over none of the reported part's refusals.
    #[test]
    fn the_reported_calls_are_notified_by_no_other_part() {
        let notify = super::notify_filter();
        let mut args: Vec<[u64; 6]> =
            vec![[0; 6], [u64::MAX; 6], [3, 0o4755, 0o6755, 0o4755, 0, 0]];
        for cmd in super::NOTIFY_IOCTLS {
            args.push([3, u64::from(*cmd), 0, 0, 0, 0]);
        }
        for (cmd, arg, _, _) in super::TERMINAL_IOCTLS {
            args.push([3, *cmd, arg.unwrap_or(0), 0, 0, 0]);
        }
        for nr in super::NOTIFY_METADATA.iter().chain(&super::NOTIFY_JUDGED) {
            for a in &args {
                let notified = run(&notify, *nr, *a) == super::RET_USER_NOTIF;
                let refused = super::refused_call(*nr, *a).is_some();
                assert!(
                    !(notified && refused),
                    "{nr} {a:?} is both reported and supervised"
                );
            }
        }
        for (nr, _, _) in super::DENY_ALWAYS {
            assert_eq!(run(&notify, *nr, [u64::MAX; 6]), super::RET_ALLOW, "{nr}");
        }
        for nr in [libc::SYS_clone, libc::SYS_socket, libc::SYS_socketpair] {
            for a in [[0; 6], [u64::MAX; 6], [17, 3, 0, 0, 0, 0]] {
                assert_eq!(run(&notify, nr, a), super::RET_ALLOW, "{nr} {a:?}");
            }
        }
    }

    /// The front changes no verdict but the x32 ones: for every number up
    /// to 1024 (and a few beyond), with arguments that take each
    /// argument-dependent branch, the program answers as the parts alone.
    #[test]
    fn the_front_only_adds_the_x32_refusal() {
        let all = super::combined(super::Fallbacks::NONE).unwrap();
        let (parts, _) = super::parts(super::Fallbacks::NONE).unwrap();
        let parts = super::chain(&parts).unwrap();
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
            differ += usize::from(run(&parts, nr, [0; 6]) != super::RET_ALLOW);
        }
        // Each unconditional one answers other than allow with zero arguments.
        let always = super::DENY_ALWAYS.len() + super::NOTIFY_METADATA.len() + 3;
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
                super::RET_ALLOW,
                "the parts alone miss {x32:#x}"
            );
            assert_eq!(run(&all, x32, [0; 6]), super::RET_USER_NOTIF, "x32 {nr}");
        }
    }

    /// Every jump of the front lands inside it or on the parts' first instruction.
    #[test]
    fn the_front_jumps_stay_inside() {
        let (_, decided) = super::parts(super::Fallbacks::NONE).unwrap();
        let f = super::front(&decided);
        for (i, insn) in f.iter().enumerate() {
            let to = match insn.code {
                super::JA => i + 1 + insn.k as usize,
                super::JEQ_K | super::JGE_K | super::JSET_K => {
                    i + 1 + usize::from(insn.jt.max(insn.jf))
                }
                _ => continue,
            };
            assert!(to <= f.len(), "insn {i} jumps to {to} of {}", f.len());
        }
        // One comparison per number, beside the architecture's.
        let mut d = decided.clone();
        d.sort_unstable();
        d.dedup();
        let jeqs = f.iter().filter(|i| i.code == super::JEQ_K).count();
        assert_eq!(jeqs, 1 + d.len());
    }

    /// Open flags that take each branch of the truncate section, with junk
    /// in the high half the kernel does not read.
    fn open_flag_cases() -> Vec<u64> {
        let mut flags = Vec::new();
        for mode in 0..4u64 {
            for extra in [
                0,
                libc::O_TRUNC as u64,
                (libc::O_TRUNC | libc::O_PATH) as u64,
                (libc::O_TRUNC | libc::O_CREAT) as u64,
                (libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC) as u64,
                (libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_DIRECTORY) as u64,
                libc::O_PATH as u64,
                0x1_0000_0000 | libc::O_TRUNC as u64,
                0x2000_0000_0000,
            ] {
                flags.push(mode | extra);
                flags.push(mode | extra | 0xffff_ffff_0000_0000);
            }
        }
        flags
    }

    /// The truncate section hands over exactly the calls
    /// [`super::truncating`] names (which the supervisor's
    /// `truncate` module takes by), and in the whole program every other
    /// open goes on as before: allowed, or refused for a set-id mode, which
    /// the supervisor asks first.
    #[test]
    fn truncating_agrees_with_the_filter() {
        let fallbacks = super::Fallbacks {
            truncate: true,
            ..super::Fallbacks::NONE
        };
        let (part, decided) = super::fallback_filter(fallbacks);
        let all = super::combined(fallbacks).unwrap();
        let none = super::combined(super::Fallbacks::NONE).unwrap();
        let mut cases: Vec<(i64, [u64; 6])> = vec![
            (libc::SYS_truncate, [0x1000, 0, 0, 0, 0, 0]),
            (libc::SYS_truncate, [u64::MAX; 6]),
            (libc::SYS_ftruncate, [3, 0, 0, 0, 0, 0]),
            (libc::SYS_read, [3, 0x1000, 0o1000, 0, 0, 0]),
            (libc::SYS_openat2, [3, 0x1000, 0x1000, 24, 0, 0]),
        ];
        #[cfg(target_arch = "x86_64")]
        cases.push((libc::SYS_creat, [0x1000, 0o644, 0, 0, 0, 0]));
        for flags in open_flag_cases() {
            for mode in [0o644, 0o4755] {
                cases.push((libc::SYS_openat, [3, 0x1000, flags, mode, 0, 0]));
                #[cfg(target_arch = "x86_64")]
                cases.push((libc::SYS_open, [0x1000, flags, mode, 0, 0, 0]));
            }
        }
        let mut handed = 0;
        for (nr, args) in cases {
            let truncating = super::truncating(nr, args);
            handed += usize::from(truncating);
            let want = if truncating {
                super::RET_USER_NOTIF
            } else {
                super::RET_ALLOW
            };
            assert_eq!(run(&part, nr, args), want, "part: {nr} {args:?}");
            // The whole program: the truncating calls notified; every other
            // answered as without the fallback.
            let whole = run(&all, nr, args);
            if truncating {
                assert_eq!(whole, super::RET_USER_NOTIF, "{nr} {args:?}");
                assert!(decided.contains(&nr), "{nr} not decided");
            } else {
                assert_eq!(whole, run(&none, nr, args), "{nr} {args:?}");
            }
        }
        // Each truncating branch was taken: truncate, and per open call
        // mode 0 and 3 with O_TRUNC, with or without O_CREAT, O_EXCL…
        assert!(handed >= 2 + 8, "only {handed} calls handed over");
        // The flags the section reads are the kernel's int: the low half.
        assert!(super::truncating(
            libc::SYS_openat,
            [
                3,
                0x1000,
                0xffff_ffff_0000_0000 | libc::O_TRUNC as u64,
                0,
                0,
                0
            ]
        ));
        assert!(!super::truncating(
            libc::SYS_openat,
            [
                3,
                0x1000,
                0x1_0000_0000 | libc::O_WRONLY as u64 | libc::O_TRUNC as u64,
                0,
                0,
                0
            ]
        ));
    }

    /// With every fallback, the program still fits the kernel's limit, its
    /// jumps stay inside, and only its last part allows.
    #[test]
    fn the_program_with_every_fallback_fits() {
        let every = super::Fallbacks {
            truncate: true,
            scoping: true,
            unix_addresses: true,
        };
        let all = super::combined(every).unwrap();
        assert!(all.len() <= 4096);
        let (part, _) = super::fallback_filter(every);
        for (i, f) in part.iter().enumerate() {
            let to = match f.code {
                super::JA => i + 1 + f.k as usize,
                super::JEQ_K | super::JSET_K => i + 1 + usize::from(f.jt.max(f.jf)),
                _ => continue,
            };
            assert!(to < part.len(), "insn {i} jumps to {to} of {}", part.len());
        }
        assert_eq!(
            part.last().map(|f| (f.code, f.k)),
            Some((super::RET_K, super::RET_ALLOW))
        );
    }
}
