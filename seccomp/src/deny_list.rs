//! The deny list's data and its part of the filter: the calls refused
//! always, `clone`'s namespace flags, the socket families and protocols,
//! set-id modes of file creation, the terminal ioctls, leases and other
//! processes' limits ([`filters`]), and the reason each refusal gives
//! ([`Widens`]).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use super::assemble::{RET_ERRNO, RET_K, RET_USER_NOTIF};
use super::notify::SYS_FILE_SETATTR;
use super::{SeccompError, ARCH, SYS_OPEN_TREE_ATTR};

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
pub(super) const DENY_ALWAYS: &[(i64, &str, Widens)] = &[
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
pub(super) const CLONE_NS_FLAGS: &[(u64, &str)] = &[
    (libc::CLONE_NEWNS as u64, "CLONE_NEWNS"),
    (libc::CLONE_NEWCGROUP as u64, "CLONE_NEWCGROUP"),
    (libc::CLONE_NEWUTS as u64, "CLONE_NEWUTS"),
    (libc::CLONE_NEWIPC as u64, "CLONE_NEWIPC"),
    (libc::CLONE_NEWUSER as u64, "CLONE_NEWUSER"),
    (libc::CLONE_NEWPID as u64, "CLONE_NEWPID"),
    (libc::CLONE_NEWNET as u64, "CLONE_NEWNET"),
];

pub(super) const NETLINK_ROUTE: u64 = 0;

/// A syscall that creates a file with a mode, and where its arguments are.
pub(super) struct Creates {
    pub(super) nr: i64,
    pub(super) name: &'static str,
    /// The path it creates (shown, never judged).
    pub(super) path: u8,
    pub(super) mode: u8,
    /// The flags that say whether it creates at all; `None`: it always does.
    pub(super) flags: Option<u8>,
}

/// The calls whose set-id modes the reported part refuses. The chmod family
/// is the supervisor's ([`set_id_refused`]).
pub(super) const CREATES: &[Creates] = &[
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
pub(super) const SOCKET_FAMILIES: [u64; 3] = [
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
pub(super) const INET_PROTOCOLS: [(u64, [u64; 6]); 2] = [
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
pub(super) const CREATING_FLAGS: [u64; 2] = [
    libc::O_CREAT as u64,
    (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64,
];

/// `fcntl(fd, F_SETLEASE, F_RDLCK | F_WRLCK)`: the owner of a file (a
/// capability-less uid 0 owns every root-owned one) may take a lease on it
/// through a descriptor open for reading, which makes the kernel hold back
/// anyone else's open for writing until the holder lets go or the lease
/// break time passes. File servers use leases; no tool of a run needs one.
/// `F_UNLCK` (letting one go) passes.
pub(super) const F_SETLEASE: u64 = libc::F_SETLEASE as u64;
pub(super) const F_UNLCK: u64 = libc::F_UNLCK as u64;

/// `S_ISUID`, `S_ISGID`.
pub(super) const SET_ID_BITS: &[u64] = &[0o4000, 0o2000];

/// Commands of `ioctl` that change a terminal past the run: typing into it,
/// switching its line discipline (`TIOCSETD`, which takes the discipline
/// through a pointer the filter cannot read, so every switch is refused;
/// reading it, `TIOCGETD`, passes), making it exclusive (`TIOCEXCL`;
/// `TIOCNXCL`, which undoes it, passes), and stopping its flow (`TCXONC`
/// with `TCOOFF` or `TCIOFF`, an argument by value the kernel compares
/// whole; `TCOON` and `TCION`, which restart it, pass). With `Some(arg)`,
/// only that argument is refused.
pub(super) const TERMINAL_IOCTLS: &[TerminalIoctl] = &[
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
pub(super) type TerminalIoctl = (u64, Option<u64>, &'static str, Widens);

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

pub(super) fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// The rules of `ioctl` on a terminal that changes it past the run
/// ([`TERMINAL_IOCTLS`]).
pub(super) fn terminal_rules() -> Result<Vec<SeccompRule>, SeccompError> {
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

/// The seccompiler-built parts of [`crate::compile`], in its order: the calls
/// refused and reported (→ the supervisor, which answers EPERM), then
/// `clone3` and friends → ENOSYS.
pub(super) fn filters() -> Result<(Vec<BpfProgram>, Vec<i64>), SeccompError> {
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
pub(super) fn to_supervisor(mut part: BpfProgram) -> BpfProgram {
    for f in &mut part {
        if f.code == RET_K && f.k == RET_ERRNO | libc::EPERM as u32 {
            f.k = RET_USER_NOTIF;
        }
    }
    part
}
