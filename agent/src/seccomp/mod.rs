//! The seccomp deny list: syscalls that would let the command widen its box
//! (seccomp-bpf, Linux 3.5; filters compiled with seccompiler, for the
//! architecture chosen at build time).
//!
//! Compiled in the parent, loaded in the child (see [`crate::sys`]). Two
//! filters, both default-allow:
//!
//! 1. **`clone3` and `openat2` → ENOSYS.** Their flags/mode live in a struct
//!    seccomp cannot read, so they cannot be told apart from a
//!    namespace-creating call or a set-id file creation. ENOSYS (not EPERM)
//!    makes glibc fall back to `clone` / callers to `openat`, whose
//!    arguments *are* checked — so threads and fork keep working.
//! 2. **the deny list → EPERM**: tracing and cross-process memory (`ptrace`,
//!    `process_vm_*`), `bpf`, `perf_event_open`, every mount API, `setns`,
//!    `unshare`, `clone` with any `CLONE_NEW*` flag, `ioctl` `TIOCSTI` and
//!    `TIOCLINUX` (typing into the caller's terminal, which runs once lockrun
//!    exits; `dev.tty.legacy_tiocsti` is on here), the kernel keyring,
//!    module loading, kexec, reboot, swap, `userfaultfd`, `io_uring` (its
//!    `IORING_OP_SOCKET`/`OP_CONNECT` run socket creation and connects in the
//!    kernel where this filter never sees them), and `socket`/`socketpair`
//!    for any family but `AF_UNIX`, `AF_INET`, `AF_INET6` and `AF_NETLINK`
//!    with protocol `NETLINK_ROUTE` (read-only without `CAP_NET_ADMIN`;
//!    `ip addr` needs it, glibc's `getaddrinfo` uses it for `AI_ADDRCONFIG`).
//!    Raw `AF_INET` sockets need `CAP_NET_RAW`, which is gone. Also **set-id
//!    mode bits** (`S_ISUID`/`S_ISGID`) in `chmod`, `fchmod`, `fchmodat(2)`,
//!    `open`, `openat`, `creat`, `mknod(at)`: a setuid-root file left in the
//!    worktree would widen someone's privileges after the run.

use std::collections::BTreeMap;

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
}

/// Syscalls refused whatever their arguments.
const DENY_ALWAYS: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
];

/// Every `CLONE_NEW*` flag `clone` accepts (`CLONE_NEWTIME` shares its bit
/// with the exit signal there and is clone3/unshare-only).
const CLONE_NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

const NETLINK_ROUTE: u64 = 0;

/// Syscalls that take a file mode, and the index of the mode argument.
const MODE_ARGS: &[(i64, u8)] = &[
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_chmod, 1),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_creat, 1),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 2),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_mknod, 1),
    (libc::SYS_fchmod, 1),
    (libc::SYS_fchmodat, 2),
    (libc::SYS_fchmodat2, 2),
    (libc::SYS_openat, 3),
    (libc::SYS_mknodat, 2),
];

/// `S_ISUID`, `S_ISGID`.
const SET_ID_BITS: &[u64] = &[0o4000, 0o2000];

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// The filters, in load order: `clone3` → ENOSYS, then the deny list → EPERM.
pub fn filters() -> Result<Vec<BpfProgram>, SeccompError> {
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    // openat2's mode is in a struct too; ENOSYS makes callers fall back to openat.
    clone3.insert(libc::SYS_openat2, vec![]);
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in DENY_ALWAYS {
        rules.insert(*nr, vec![]);
    }
    let mut clone = Vec::new();
    for flag in CLONE_NS_FLAGS {
        clone.push(SeccompRule::new(vec![cond(
            0,
            SeccompCmpOp::MaskedEq(*flag),
            *flag,
        )?])?);
    }
    rules.insert(libc::SYS_clone, clone);
    // Set-id bits: a file in the worktree made setuid root would run as
    // root for anyone outside, after the run. Refused wherever a mode is
    // given: chmod family (mode arg) and file creation (open/creat/mknod).
    for &(nr, arg) in MODE_ARGS {
        let mut r = Vec::new();
        for bit in SET_ID_BITS {
            r.push(SeccompRule::new(vec![cond(
                arg,
                SeccompCmpOp::MaskedEq(*bit),
                *bit,
            )?])?);
        }
        rules.insert(nr, r);
    }
    // Typing into the terminal lockrun was started from would run commands
    // outside the sandbox once it exits (TIOCSTI; TIOCLINUX on a VT).
    rules.insert(
        libc::SYS_ioctl,
        vec![
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCSTI)?])?,
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, libc::TIOCLINUX)?])?,
        ],
    );
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        let family_not_allowed = SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_NETLINK as u64)?,
        ])?;
        let netlink_not_route = SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
            cond(2, SeccompCmpOp::Ne, NETLINK_ROUTE)?,
        ])?;
        rules.insert(nr, vec![family_not_allowed, netlink_not_route]);
    }
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    Ok(vec![
        clone3.try_into().map_err(SeccompError::Compile)?,
        deny.try_into().map_err(SeccompError::Compile)?,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_compile_for_this_arch() {
        let f = super::filters().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|p| !p.is_empty() && p.len() < u16::MAX.into()));
    }
}
