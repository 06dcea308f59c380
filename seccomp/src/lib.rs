//! The seccomp deny list: syscalls that would let the command widen its box
//! (seccomp-bpf, Linux 3.5; filters compiled with seccompiler, for the
//! architecture chosen at build time).
//!
//! Compiled in lockrun's parent process (or by its build script), loaded in
//! the child (`lockrun::sys`) as one program ([`compile`]; lockrun's
//! `seccomp::combined` takes the one its build script compiled). It opens with a front that kills any other
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
//!    on the registers alone ([`refused::refused_call`]), records the call and
//!    answers `EPERM`, so the user learns what a tool was refused
//!    (`lockrun: 1 system call refused …: unshare (bwrap)`). If lockrun is
//!    gone, the kernel fails them with `ENOSYS`.
//! 2. **`clone3` and `openat2` → ENOSYS.** Their flags/mode live in a struct
//!    seccomp cannot read, so they cannot be told apart from a
//!    namespace-creating call or a set-id file creation. ENOSYS (not EPERM)
//!    makes glibc fall back to `clone` / callers to `openat`, whose
//!    arguments *are* checked — so threads and fork keep working.
//!
//! The last part, [`notify::notify_filter`], hands syscalls to lockrun's supervisor
//! (`SECCOMP_RET_USER_NOTIF`, Linux 5.0; see `lockrun::supervise`): the
//! metadata calls Landlock does not cover, the scheduling calls that name
//! another task than the caller ([`notify::NOTIFY_SCHED`]), and `connect`/`sendto` whose
//! address length is not that of an inet address. The chmod family is
//! there whatever its mode: the supervisor refuses set-id bits itself
//! ([`deny_list::set_id_refused`]), because only it knows the target, and a directory
//! may keep `S_ISGID` (`git init --shared`, `mkdir -m 2775`). Each part's
//! verdict is final, and the earlier parts decide on other calls or
//! arguments (the supervisor asks [`refused::refused_call`] before it performs an
//! `ioctl`), so what they refuse stays refused.
//!
//! On a kernel that lacks a mechanism lockrun relies on ([`Fallbacks`],
//! `lockrun::kernel::Features::fallbacks`), a part more, [`fallback::fallback_filter`],
//! hands the supervisor the calls that mechanism would have judged: without
//! Landlock's scoping (ABI < 6), the signals a caller aims at a process it
//! names, the owners of a file's `SIGIO`, and the binds of unix addresses
//! ([`scope`]).

pub mod assemble;
mod compact;
pub mod deny_list;
pub mod describe;
pub mod fallback;
pub mod notify;
pub mod refused;
pub mod scope;
#[cfg(test)]
mod tests;

use seccompiler::{BpfProgram, TargetArch};

use assemble::compile_with;

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

/// The promises of the kernel's own mechanisms that the supervisor holds
/// instead on a kernel without them (`lockrun::kernel`): each names calls
/// handed to the supervisor by [`fallback::fallback_filter`]. (The device ioctl
/// right, ABI 5, is stood in for by the mounts of the run's namespace, not
/// here: `lockrun::kernel::Features::devices_only_in_dev`.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // one flag per missing mechanism, each its own calls
pub struct Fallbacks {
    /// No Landlock truncate right (ABI 3): [`fallback::TRUNCATING_OPENS`] and `truncate`.
    pub truncate: bool,
    /// No Landlock scoping of signals and abstract unix sockets (ABI 6).
    pub scoping: bool,
    /// No cgroup unix hooks (Linux 6.7).
    pub unix_addresses: bool,
    /// No read-only mounts outside the writable roots whose refusals are
    /// seen (`lockrun::kernel`): the supervisor performs every metadata
    /// call of [`notify::NOTIFY_METADATA`] and inode-attribute `ioctl` of
    /// [`notify::NOTIFY_IOCTLS`] beneath the writable roots, and refuses
    /// them elsewhere. Without it, only a set-id mode and the `ioctl`s
    /// refused everywhere are handed over ([`notify::notify_filter`]).
    pub metadata: bool,
}

impl Fallbacks {
    /// A kernel with every mechanism.
    pub const NONE: Self = Self {
        truncate: false,
        scoping: false,
        unix_addresses: false,
        metadata: false,
    };
}

/// Every filter of a run as one program, in this order: the [`assemble::front`]
/// (architecture, x32, and a search that lets every call no part decides
/// on through at once), the deny list (reported), then `clone3`/`openat2`
/// → ENOSYS, then [`notify::notify_filter`]. Loaded as one
/// filter (with the notification listener), because each filter the
/// kernel loads costs its own allocation, conversion, JIT and action-cache
/// emulation, and every syscall of the command
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
/// ([`Fallbacks`]), the program has a part more ([`fallback::fallback_filter`]). It
/// comes last, so it sees only what every other part allowed; where it hands
/// over a call an earlier part also takes with other arguments (`open`,
/// `openat`: a set-id mode, refused; `O_TRUNC` without write access,
/// truncated beneath a writable root), the supervisor asks
/// [`refused::refused_call`] first, so what the reported part refuses stays refused
/// (`truncating_agrees_with_the_filter`).
///
/// Built and compacted now, for a kernel that lacks the mechanisms of
/// `fallbacks` ([`Fallbacks::NONE`]: none).
pub fn compile(fallbacks: Fallbacks) -> Result<BpfProgram, SeccompError> {
    compile_with(fallbacks)
}

/// `fchmodat2` (Linux 6.6; one number on every arch, and missing from the
/// libc crate's aarch64 glibc module).
pub const SYS_FCHMODAT2: i64 = 452;

/// `open_tree_attr` (Linux 6.15: `open_tree` that also sets the clone's
/// mount attributes; one number on every arch, missing from the libc crate).
pub const SYS_OPEN_TREE_ATTR: i64 = 467;

/// `setxattrat` and `removexattrat` (Linux 6.13; one number on every arch).
pub const SYS_SETXATTRAT: i64 = 463;
pub const SYS_REMOVEXATTRAT: i64 = 466;
