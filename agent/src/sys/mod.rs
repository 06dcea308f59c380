//! The few raw syscalls lockrun needs. The only module allowed `unsafe`; each
//! block carries a `// SAFETY:` comment.
//!
//! [`ChildPlan::apply`] is the child-side confinement, run after the fork
//! and before exec ([`spawn`]). It is async-signal-safe: it allocates nothing,
//! takes no lock and only issues syscalls on values the parent prepared.
//! The child is born inside the run's cgroup (`clone3` with
//! `CLONE_INTO_CGROUP`, see [`spawn`]), so the network hooks hold from its
//! first instruction. The order, and why:
//!
//! 1. **mark every fd ≥ 3 close-on-exec** (`close_range(CLOSE_RANGE_CLOEXEC)`,
//!    Linux 5.11): nothing the caller leaked survives the exec; the ruleset
//!    and report fds are still usable until then; **the caller's stdin,
//!    stdout and stderr as lockrun prepared them** ([`crate::stdio`]: on a
//!    read-only mount of their own, or lockrun's relay pipe), each put on
//!    its number (`dup2`); then, when planned,
//!    **the run's own `/dev/shm`, `/dev/pts` and `/dev/mqueue`**
//!    ([`OwnMount`]): the child was cloned into a mount namespace of its own
//!    (`CLONE_NEWNS`), makes every mount there private and moves each
//!    filesystem lockrun made and granted in the Landlock ruleset (a tmpfs,
//!    a new devpts instance, the run's message queues, empty ones over the
//!    machine's kernel filesystems) onto its path, and where the kernel
//!    lacks Landlock's device ioctl right, **device files kept to `/dev`**
//!    ([`devices_in_dev_only`]: every other mount `nodev`), and, where
//!    planned, **every mount read-only but the writable roots**
//!    ([`ReadOnlyOutside`]) — needs
//!    `CAP_SYS_ADMIN`, so before the capabilities go; before those, core dumps off where a
//!    pipe would take them, and
//!    **the run the OOM killer's first pick** (`oom_score_adj` 1000,
//!    [`OOM_SCORE_ADJ`]), which Landlock then keeps from being lowered,
//!    and, below Landlock ABI 7, **the run's login uid**
//!    (`/proc/self/loginuid`, [`crate::audit::syscalls`]), by which kernel
//!    audit's records of the run's refused calls are told: setting it once
//!    set needs `CAP_AUDIT_CONTROL`, so before the capabilities go, after
//!    which no process of the run can change it;
//! 2. **securebits** `NOROOT | NO_SETUID_FIXUP | NO_CAP_AMBIENT_RAISE` and
//!    their locks (+ `KEEP_CAPS_LOCKED`), so uid 0 regains nothing at exec —
//!    needs `CAP_SETPCAP`, so before the capabilities go;
//! 3. **drop the bounding set** (`PR_CAPBSET_DROP` for every cap up to
//!    `cap_last_cap`) — also needs `CAP_SETPCAP`; steps 2 and 3 are skipped
//!    when lockrun does not hold it (an unprivileged caller: nothing to drop
//!    that exec could use, given `no_new_privs`);
//! 4. **clear the ambient set**;
//! 5. **capset** effective, permitted and inheritable to zero — last of the
//!    capability steps, since it removes `CAP_SETPCAP`;
//! 6. **`no_new_privs`** (Linux 3.5) — required by Landlock and seccomp once
//!    `CAP_SYS_ADMIN` is gone;
//! 7. **Landlock** `landlock_restrict_self` (see [`crate::fs`]);
//! 8. **seccomp**: one program ([`crate::seccomp::combined`]: the deny
//!    list, the ENOSYS list, the notifying part), last, so no step above is
//!    subject to the deny list; `execve` itself is allowed. It is loaded
//!    with a new notification listener, and
//! 9. that listener's fd, and the command's root (`/` opened `O_PATH` here,
//!    in the command's mount namespace), are sent to lockrun over a
//!    socketpair (`SCM_RIGHTS`) and closed here: the supervisor
//!    ([`crate::supervise`]) answers the notified syscalls from outside the
//!    sandbox, naming paths as the command does;
//! 10. **the caller's descriptor limit** given back (lockrun raised its
//!     own, [`raise_nofile`]), last: every step above opens descriptors,
//!     which a low soft limit could refuse (lockrun's own already hold the
//!     numbers below it).
//!
//! A failing step writes its number and the errno into the report pipe; the
//! parent turns that into exit 125 naming the step.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd as _, OwnedFd};
use std::path::Path;

pub mod bpf;
mod cpus;
mod mount;
pub mod scope;
pub mod spawn;
pub mod stdio;
pub mod supervisor_calls;
pub mod watchdog;

use cpus::this_threads_cpus;
pub use cpus::OtherCpus;
use mount::{devices_in_dev_only, zero};
pub use mount::{make_fs, NewFs, OwnMount, ReadOnlyOutside};

/// `landlock_restrict_self` flag (ABI 7, Linux 6.15): log denials after exec.
const LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON: u32 = 2;

/// The Landlock ruleset the child restricts itself with, and whether the
/// kernel is to log its denials after the command's exec (ABI 7; an older
/// kernel refuses the flag).
#[derive(Debug)]
pub struct Restrict {
    pub ruleset: OwnedFd,
    pub log_denials: bool,
}

/// One step of the child-side confinement; its number travels through the report pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    CloseRange = 1,
    Securebits,
    BoundingSet,
    Ambient,
    Capset,
    NoNewPrivs,
    Landlock,
    Seccomp,
    Notify,
    Rlimit,
    OwnMounts,
    CoreLimit,
    JoinTasks,
    JoinMemory,
    OomScore,
    DevicesInDevOnly,
    LoginUid,
    ReadOnlyOutside,
    Stdio,
}

impl Step {
    fn from_u8(b: u8) -> Option<Self> {
        use Step::{
            Ambient, BoundingSet, Capset, CloseRange, CoreLimit, DevicesInDevOnly, JoinMemory,
            JoinTasks, Landlock, LoginUid, NoNewPrivs, Notify, OomScore, OwnMounts,
            ReadOnlyOutside, Rlimit, Seccomp, Securebits, Stdio,
        };
        [
            CloseRange,
            Securebits,
            BoundingSet,
            Ambient,
            Capset,
            NoNewPrivs,
            Landlock,
            Seccomp,
            Notify,
            Rlimit,
            OwnMounts,
            CoreLimit,
            JoinTasks,
            JoinMemory,
            OomScore,
            DevicesInDevOnly,
            LoginUid,
            ReadOnlyOutside,
            Stdio,
        ]
        .into_iter()
        .find(|s| *s as u8 == b)
    }

    /// What the step does, naming its syscall.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Step::CloseRange => "marking inherited descriptors close-on-exec (close_range)",
            Step::Securebits => "locking securebits (prctl PR_SET_SECUREBITS)",
            Step::BoundingSet => "dropping the capability bounding set (prctl PR_CAPBSET_DROP)",
            Step::Ambient => "clearing ambient capabilities (prctl PR_CAP_AMBIENT)",
            Step::Capset => "dropping every capability (capset)",
            Step::NoNewPrivs => "setting no_new_privs (prctl PR_SET_NO_NEW_PRIVS)",
            Step::Landlock => "applying the Landlock ruleset (landlock_restrict_self)",
            Step::Seccomp => "loading the seccomp filter with its notification listener (seccomp SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER)",
            Step::Notify => "handing the seccomp listener and the command's root to lockrun (sendmsg SCM_RIGHTS)",
            Step::Rlimit => "giving back the caller's descriptor limit (setrlimit RLIMIT_NOFILE)",
            Step::CoreLimit => "turning core dumps off (setrlimit RLIMIT_CORE to 1 byte)",
            Step::JoinTasks => "joining the run's cgroup of the v1 pids hierarchy, which limits its tasks (write 0 to its tasks file)",
            Step::JoinMemory => "joining the run's cgroup of the v1 memory hierarchy, which limits its memory (write 0 to its tasks file)",
            Step::OomScore => "making the run the OOM killer's first pick (write 1000 to /proc/self/oom_score_adj)",
            Step::DevicesInDevOnly => "keeping the run's device files to /dev: every mount of its namespace nodev but /dev and those beneath it (mount_setattr MOUNT_ATTR_NODEV, recursive; /dev must be a mount)",
            Step::LoginUid => "taking the run's login uid, by which kernel audit's records of its refused calls are told (write to /proc/self/loginuid)",
            Step::ReadOnlyOutside => "making every mount of the run's namespace read-only but its writable roots (mount MS_BIND of each root onto itself; mount_setattr MOUNT_ATTR_RDONLY, recursive, then cleared on each root)",
            Step::Stdio => "handing the command its stdin, stdout and stderr as lockrun prepared them (dup2)",
            Step::OwnMounts => "mounting the run's own /dev/shm, /dev/pts and /dev/mqueue (mount MS_PRIVATE; fsopen, fsconfig and fsmount of tmpfs and devpts; landlock_add_rule; move_mount)",
        }
    }
}

/// Everything the child applies, prepared by the parent.
pub struct ChildPlan {
    landlock: OwnedFd,
    /// `landlock_restrict_self`'s flags.
    landlock_flags: u32,
    /// The run's one seccomp program ([`crate::seccomp::combined`]),
    /// loaded with a notification listener.
    seccomp: seccompiler::BpfProgram,
    /// The child's end of the socketpair the listener travels through.
    listener_to: OwnedFd,
    last_cap: u32,
    /// Whether lockrun holds `CAP_SETPCAP` (root): only then can securebits
    /// and the bounding set be changed. An unprivileged caller has nothing
    /// to lose there, and `no_new_privs` keeps exec from adding anything.
    setpcap: bool,
    /// The caller's descriptor limit, when lockrun raised its own
    /// ([`raise_nofile`]): the command gets it back.
    nofile: Option<libc::rlimit>,
    /// Whether the run's processes may not dump core
    /// ([`crate::run::core_dumps`]): `RLIMIT_CORE` at 1 byte, soft and hard.
    no_core_dumps: bool,
    /// The CPUs of the thread that clones the child, which the child sets
    /// again: Linux 6.1 gives the child of `clone3(CLONE_INTO_CGROUP)`
    /// every CPU of the cpuset of its cgroup (seen under Debian's 6.1 on a
    /// host whose root hands `cpuset` down, as systemd's does; 6.12 keeps
    /// the parent's), and the caller's `taskset` would be lost.
    cpus: Option<libc::cpu_set_t>,
    /// The run's own filesystems, mounted in the child's mount namespace.
    mounts: Vec<OwnMount>,
    /// Whether device files may be opened only under `/dev`
    /// ([`crate::kernel::Kernel::devices_only_in_dev`]).
    devices_in_dev_only: bool,
    /// Every mount read-only but the writable roots, where planned.
    read_only: Option<ReadOnlyOutside>,
    /// The `tasks` files of the run's cgroups in v1 hierarchies, which
    /// the child joins first ([`crate::cgroup::v1`]), each with the step
    /// that names it: none where the limits are the run cgroup's own (v2),
    /// or there are none.
    join_v1: Vec<(Step, OwnedFd)>,
    /// Below Landlock ABI 7, the run's login uid, in decimal, to write to
    /// `/proc/self/loginuid` ([`crate::audit::syscalls`]).
    login_uid: Option<LoginUid>,
    /// What the command gets as its stdin, stdout and stderr, each put on
    /// its number ([`crate::stdio`]); `None`: the caller's own descriptor.
    stdio: [Option<OwnedFd>; 3],
    report: OwnedFd,
}

/// A login uid as `/proc/self/loginuid` takes it: decimal digits,
/// prepared before the fork.
#[derive(Debug, Clone, Copy)]
pub struct LoginUid {
    digits: [u8; 10],
    len: usize,
}

impl LoginUid {
    #[must_use]
    pub fn new(uid: u32) -> Self {
        let mut digits = [0u8; 10];
        let mut len = 0;
        let mut rest = uid;
        loop {
            digits[len] = b'0' + (rest % 10) as u8;
            len += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        digits[..len].reverse();
        Self { digits, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.digits[..self.len]
    }
}

/// A path as a C string for a syscall (`EINVAL` for an inner NUL).
pub fn c_path(path: &std::path::Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt as _;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Grant `rights` beneath the directory open as `dir` in `ruleset`.
pub fn grant_beneath(ruleset: BorrowedFd<'_>, dir: BorrowedFd<'_>, rights: u64) -> io::Result<()> {
    add_path_rule(ruleset, dir.as_raw_fd(), rights)
}

/// `landlock_add_rule(ruleset, PATH_BENEATH, {rights, dir})`. Post-fork: no
/// allocation.
fn add_path_rule(ruleset: BorrowedFd<'_>, dir: libc::c_int, rights: u64) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: dir,
    };
    // SAFETY: the ruleset fd is alive (the plan owns it); attr is a live,
    // packed `landlock_path_beneath_attr`, which the kernel reads.
    zero(unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &raw const attr,
            0u32,
        )
    })
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_path_beneath_attr` (packed).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Raise this process's soft descriptor limit to its hard one, returning
/// the limit as it was (`None` when already there). The proxy holds two
/// sockets and up to two pipes per tunnel, and the common soft limit of
/// 1024 would cap it below `run.max_connections`; the command gets the
/// caller's limit back ([`ChildPlan::new`]), as Go does for its children:
/// programs using `select(2)` expect no descriptor above 1023.
pub fn raise_nofile() -> io::Result<Option<libc::rlimit>> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft >= hard {
        return Ok(None);
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    Ok(Some(libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    }))
}

/// `rename(from, to)` that fails (`EEXIST`, `ENOTEMPTY`) rather than
/// replace `to` (`renameat2` with `RENAME_NOREPLACE`, Linux 3.15).
pub fn rename_noreplace(from: &std::path::Path, to: &std::path::Path) -> io::Result<()> {
    nix::fcntl::renameat2(
        None,
        from,
        None,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(io::Error::from)
}

/// `name` opened in `dir` with `flags` (and `mode`, when it is made).
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    flags: nix::fcntl::OFlag,
    mode: nix::sys::stat::Mode,
) -> nix::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt as _;
    let fd = nix::fcntl::openat(Some(dir.as_raw_fd()), name.as_bytes(), flags, mode)?;
    // SAFETY: openat(2) just returned this new descriptor, which nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The dir at `path` (absolute) opened as a place to open in (`O_PATH`),
/// through no symbolic link at all (`openat2`, `RESOLVE_NO_SYMLINKS`,
/// Linux 5.6): a `path` that was canonical when judged, and is the same
/// dir when opened, or the open fails (`ELOOP`).
pub fn open_dir_without_links(path: &std::path::Path) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(libc::AT_FDCWD, path, how)?;
    // SAFETY: openat2(2) just returned this new descriptor, which nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Set the extended attribute `name` of the file open as `fd` to `value`.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated; `value` is valid for `value.len()`
    // bytes, which the kernel only reads.
    let r = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The extended attribute `name` of the file open as `fd`, if it has one
/// that fits in `max` bytes.
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &CStr, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; max];
    // SAFETY: `name` is NUL-terminated; the kernel writes at most
    // `buf.len()` bytes into `buf`.
    let r = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(r).map_err(|_| io::Error::last_os_error())?;
    buf.truncate(n);
    Ok(buf)
}

/// The parent's end of the report pipe.
pub struct Report(OwnedFd);

/// Whether `cap` is in this process's effective set (`/proc/self/status`).
pub fn has_effective_cap(cap: u32) -> io::Result<bool> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no CapEff"))?;
    let bits = u64::from_str_radix(hex.trim(), 16)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "CapEff"))?;
    Ok(cap < 64 && bits & (1 << cap) != 0)
}

/// The highest capability number this kernel knows.
pub fn last_cap() -> io::Result<u32> {
    let s = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")?;
    s.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "cap_last_cap"))
}

impl ChildPlan {
    /// Prepare the plan and the parent's end of its report pipe.
    #[allow(clippy::too_many_arguments)] // the plan's pieces, each prepared by `run`
    pub fn new(
        landlock: Restrict,
        seccomp: seccompiler::BpfProgram,
        listener_to: OwnedFd,
        nofile: Option<libc::rlimit>,
        no_core_dumps: bool,
        mounts: Vec<OwnMount>,
        join_v1: Vec<(Step, OwnedFd)>,
        login_uid: Option<LoginUid>,
    ) -> io::Result<(Self, Report)> {
        let last_cap = last_cap()?;
        let setpcap = has_effective_cap(CAP_SETPCAP)?;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        Ok((
            Self {
                landlock_flags: if landlock.log_denials {
                    LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
                } else {
                    0
                },
                landlock: landlock.ruleset,
                seccomp,
                listener_to,
                last_cap,
                setpcap,
                nofile,
                no_core_dumps,
                cpus: this_threads_cpus(),
                mounts,
                devices_in_dev_only: false,
                read_only: None,
                join_v1,
                login_uid,
                stdio: [None, None, None],
                report: w,
            },
            Report(r),
        ))
    }

    fn fail(&self, step: Step) -> io::Error {
        let err = io::Error::last_os_error();
        self.report_failure(step as u8, &err);
        err
    }

    /// Whether the child is to be cloned into a mount namespace of its own
    /// (for its [`OwnMount`]s, or to keep device files to `/dev`).
    #[must_use]
    pub fn new_mount_namespace(&self) -> bool {
        !self.mounts.is_empty() || self.devices_in_dev_only || self.read_only.is_some()
    }

    /// Make every mount of the command's namespace read-only but its
    /// writable roots ([`ReadOnlyOutside`]).
    pub fn read_only_outside(&mut self, plan: ReadOnlyOutside) {
        self.read_only = Some(plan);
    }

    /// Let the command open device files only under `/dev`
    /// ([`devices_in_dev_only`]), where the kernel lacks Landlock's device
    /// ioctl right ([`crate::kernel::Kernel::devices_only_in_dev`]).
    pub fn keep_devices_in_dev(&mut self) {
        self.devices_in_dev_only = true;
    }

    /// Hand the command `stdio` as its stdin, stdout and stderr (`None`:
    /// the caller's own descriptor), as [`crate::stdio`] prepared them.
    pub fn hand_stdio(&mut self, stdio: [Option<OwnedFd>; 3]) {
        self.stdio = stdio;
    }

    /// Child side, after a failed exec: report the errno (step 0).
    fn fail_exec(&self) {
        self.report_failure(0, &io::Error::last_os_error());
    }

    fn report_failure(&self, step: u8, err: &io::Error) {
        let e = err.raw_os_error().unwrap_or(libc::EINVAL).to_ne_bytes();
        let b = [step, e[0], e[1], e[2], e[3]];
        // SAFETY: writes five bytes from a live stack buffer to an fd we own
        // (atomic: below PIPE_BUF); write(2) is async-signal-safe. A failed
        // report only loses the reason.
        unsafe {
            libc::write(self.report.as_raw_fd(), b.as_ptr().cast(), b.len());
        }
    }

    /// Step 1 of [`apply`](Self::apply), before the mounts: inherited
    /// descriptors marked close-on-exec, the command's stdio put on 0, 1
    /// and 2, core dumps off where planned, the
    /// OOM score, and the run's login uid where planned. Post-fork: no
    /// allocation.
    fn prepare_process(&self) -> io::Result<()> {
        // close_range(3, ~0, CLOSE_RANGE_CLOEXEC)
        // SAFETY: plain syscall with integer arguments.
        if unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        } != 0
        {
            return Err(self.fail(Step::CloseRange));
        }
        // the command's stdio, each onto its number; dup2 leaves the copy
        // without close-on-exec, and the plan's own closes at exec
        for (target, fd) in (0..).zip(&self.stdio) {
            if let Some(fd) = fd {
                // SAFETY: dup2(2) of a descriptor the plan owns onto 0, 1 or 2.
                if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
                    return Err(self.fail(Step::Stdio));
                }
            }
        }
        // no core dumps: 1 byte, the one limit a piped core_pattern
        //     heeds (raising the hard limit needs CAP_SYS_RESOURCE)
        if self.no_core_dumps {
            let one = libc::rlimit {
                rlim_cur: 1,
                rlim_max: 1,
            };
            // SAFETY: setrlimit with a live, initialized stack value.
            if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &raw const one) } != 0 {
                return Err(self.fail(Step::CoreLimit));
            }
        }
        // the run the OOM killer's first pick (see `OOM_SCORE_ADJ`)
        if !write_whole(c"/proc/self/oom_score_adj", OOM_SCORE_ADJ) {
            return Err(self.fail(Step::OomScore));
        }
        // the run's login uid (needs CAP_AUDIT_CONTROL if one is set)
        if let Some(uid) = &self.login_uid {
            if !write_whole(c"/proc/self/loginuid", uid.as_bytes()) {
                return Err(self.fail(Step::LoginUid));
            }
        }
        // the CPUs it was cloned with (see `cpus`); a cpuset that leaves
        // none of them refuses, and the child keeps the cpuset's
        if let Some(cpus) = &self.cpus {
            // SAFETY: `cpus` is a live, initialized `cpu_set_t` of the size
            // passed; 0 is the calling thread.
            let _ = unsafe {
                libc::sched_setaffinity(
                    0,
                    std::mem::size_of::<libc::cpu_set_t>(),
                    std::ptr::from_ref(cpus),
                )
            };
        }
        Ok(())
    }

    /// Apply the confinement to the calling (child) process. Post-fork,
    /// pre-exec: no allocation, no locks.
    pub fn apply(&self) -> io::Result<()> {
        // 0. the run's task and memory limits, v1: this process alone joins
        //    their cgroups (`0`: the calling thread, which takes no global
        //    lock), before anything of the command runs; what it starts is
        //    born there
        for (step, tasks) in &self.join_v1 {
            // SAFETY: writes one byte from a static buffer to an fd we own;
            // write(2) is async-signal-safe.
            if unsafe { libc::write(tasks.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
                return Err(self.fail(*step));
            }
        }
        // 1. descriptors, limits, the OOM score, the login uid
        self.prepare_process()?;
        // 1, then: the run's own filesystems (needs CAP_SYS_ADMIN), and
        // with them mounted, the device files kept to /dev; every mount
        // made private first, also with none to mount: a mount the machine
        // makes later must not reach the run, without nodev
        if self.new_mount_namespace() {
            if let Err(e) = OwnMount::mount_all(&self.mounts) {
                self.report_failure(Step::OwnMounts as u8, &e);
                return Err(e);
            }
        }
        if let Some(read_only) = &self.read_only {
            if let Err(e) = read_only.apply() {
                self.report_failure(Step::ReadOnlyOutside as u8, &e);
                return Err(e);
            }
        }
        if self.devices_in_dev_only {
            if let Err(e) = devices_in_dev_only() {
                self.report_failure(Step::DevicesInDevOnly as u8, &e);
                return Err(e);
            }
        }
        if self.setpcap {
            // 2. securebits
            let bits: libc::c_ulong = (libc::SECBIT_NOROOT
                | libc::SECBIT_NOROOT_LOCKED
                | libc::SECBIT_NO_SETUID_FIXUP
                | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
                | libc::SECBIT_KEEP_CAPS_LOCKED
                | libc::SECBIT_NO_CAP_AMBIENT_RAISE
                | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)
                as libc::c_ulong;
            // SAFETY: prctl with integer arguments.
            if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) } != 0 {
                return Err(self.fail(Step::Securebits));
            }
            // 3. bounding set
            for cap in 0..=self.last_cap {
                // SAFETY: prctl with integer arguments.
                if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) }
                    != 0
                {
                    return Err(self.fail(Step::BoundingSet));
                }
            }
        }
        // 4. ambient
        // SAFETY: prctl with integer arguments.
        if unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            )
        } != 0
        {
            return Err(self.fail(Step::Ambient));
        }
        // 5. capset all-zero
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        // SAFETY: header and data are live, correctly laid out (v3: two data
        // structs) stack values for the duration of the call.
        if unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) } != 0 {
            return Err(self.fail(Step::Capset));
        }
        // 6. no_new_privs
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(self.fail(Step::NoNewPrivs));
        }
        // 7. Landlock
        // LOG_NEW_EXEC_ON, where planned: Landlock (ABI 7) logs denials
        // after execve to kernel audit, where crate::audit::kernel collects
        // them; without it, nothing the command does is logged.
        // SAFETY: the ruleset fd is owned by the plan and alive; a flag word.
        if unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.landlock.as_raw_fd(),
                self.landlock_flags,
            )
        } != 0
        {
            return Err(self.fail(Step::Landlock));
        }
        // 8. seccomp, and 9. its listener goes to lockrun.
        self.hand_over_listener()?;
        // 10. the caller's descriptor limit, last (lowering needs no
        //     privilege, and seccomp lets a process set its own).
        if let Some(limit) = &self.nofile {
            // SAFETY: setrlimit with a live, initialized stack value.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, limit) } != 0 {
                return Err(self.fail(Step::Rlimit));
            }
        }
        Ok(())
    }

    /// Steps 8 and 9: load the seccomp program with a new notification
    /// listener, send it and the command's root to lockrun and close both
    /// here. Post-fork: no allocation.
    fn hand_over_listener(&self) -> io::Result<()> {
        let listener = supervisor_calls::load_listener(&self.seccomp);
        if listener < 0 {
            return Err(self.fail(Step::Seccomp));
        }
        // SAFETY: open(2) with a NUL-terminated literal.
        let root = unsafe {
            libc::open(
                c"/".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        let sent = root >= 0
            && supervisor_calls::send_fds(self.listener_to.as_raw_fd(), [listener as i32, root]);
        let err = io::Error::last_os_error();
        // SAFETY: closing the fds this function just got; the process keeps
        // no other reference to them (close(-1) only fails).
        unsafe {
            libc::close(listener as i32);
            libc::close(root);
        }
        if sent {
            Ok(())
        } else {
            self.report_failure(Step::Notify as u8, &err);
            Err(err)
        }
    }
}

impl Report {
    /// Parent side, once the plan's write end is closed: `None` when the
    /// child exec'd (end of file), else the failed step (`None` for the exec
    /// itself) and its errno.
    fn read_failure(self) -> Option<(Option<Step>, io::Error)> {
        let mut b = [0u8; 5];
        let mut got = 0;
        while got < b.len() {
            match nix::unistd::read(self.0.as_raw_fd(), &mut b[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Some((None, e.into())),
            }
        }
        match got {
            0 => None,
            5 => Some((
                Step::from_u8(b[0]),
                io::Error::from_raw_os_error(i32::from_ne_bytes([b[1], b[2], b[3], b[4]])),
            )),
            _ => Some((None, io::Error::from_raw_os_error(libc::EIO))),
        }
    }
}

/// The `oom_score_adj` of the command's process, and so of every process of
/// the run: the highest, so that the OOM killer takes the run's processes
/// before any process outside, the largest of them first, as before.
/// Without it, a machine out of memory (runs within their limits that
/// together fill it, or a run beside a big process outside) loses its
/// largest process anywhere: the caller, another tenant, or lockrun, and
/// with lockrun the run's watchdog (they share memory); and a run at its
/// limit on a host whose watchdog is in the run's memory cgroup (pure
/// cgroup v2) could lose lockrun, were lockrun's the largest memory there.
/// Raising it needs no privilege (where the child still holds
/// `CAP_SYS_RESOURCE`, the kernel raises its floor, `oom_score_adj_min`,
/// with it), and the run cannot lower it again: Landlock refuses the write,
/// `/proc` being outside its writable roots.
pub const OOM_SCORE_ADJ: &[u8] = b"1000";

/// Write `bytes` to the file at `path` whole, in one write (a file of
/// `/proc/self`): in the child, before it is confined. For
/// [`OOM_SCORE_ADJ`]: on `x86_64` the child's memory is lockrun's until
/// exec (`CLONE_VM | CLONE_VFORK`); the kernel spreads a score written
/// there over every process sharing that memory, but not a vfork child's,
/// so lockrun keeps its own (elsewhere the child is a fork, with memory of
/// its own); a login uid is the task's alone.
/// Async-signal-safe: an open, a write and a close, on values the plan
/// holds.
fn write_whole(path: &CStr, bytes: &[u8]) -> bool {
    // SAFETY: open of a NUL-terminated path; the fd is checked, written
    // from a live buffer of its length and closed here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = *libc::__errno_location();
        libc::close(fd);
        *libc::__errno_location() = err;
        usize::try_from(n) == Ok(bytes.len())
    }
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_SETPCAP: u32 = 8;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The kernel's Landlock ABI version (`landlock_create_ruleset` with
/// `LANDLOCK_CREATE_RULESET_VERSION`, Linux 5.13).
pub fn landlock_abi_version() -> Result<i32, nix::errno::Errno> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: a NULL attr with size 0 and the VERSION flag is the documented
    // query; nothing is read or written through the pointer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        Err(nix::errno::Errno::last())
    } else {
        Ok(v as i32)
    }
}

/// The names of the directories in `dir` that `keep` accepts, sorted (empty
/// when `dir` cannot be read; a name that is not UTF-8 is left out).
pub fn dir_names(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| keep(name))
        .collect();
    names.sort();
    names
}

/// The fd number in `/proc/self/fd/N` or `/proc/thread-self/fd/N`: a
/// name that is the calling process's own descriptor.
#[must_use]
pub fn proc_self_fd(path: &[u8]) -> Option<i32> {
    let rest = path
        .strip_prefix(b"/proc/self/fd/")
        .or_else(|| path.strip_prefix(b"/proc/thread-self/fd/"))?;
    if rest.is_empty() || rest.len() > 10 || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(rest).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::LoginUid;

    #[test]
    fn proc_self_fd_names() {
        assert_eq!(super::proc_self_fd(b"/proc/self/fd/3"), Some(3));
        assert_eq!(super::proc_self_fd(b"/proc/thread-self/fd/12"), Some(12));
        assert_eq!(super::proc_self_fd(b"/proc/self/fd/3/x"), None);
        assert_eq!(super::proc_self_fd(b"/proc/self/fd/"), None);
        assert_eq!(super::proc_self_fd(b"/proc/self/fd/+3"), None);
        assert_eq!(super::proc_self_fd(b"/proc/1/fd/3"), None);
    }

    #[test]
    fn a_login_uid_is_written_in_decimal() {
        for uid in [0, 7, 10, 2_147_483_700, 0x8000_bfa8, u32::MAX - 1] {
            assert_eq!(LoginUid::new(uid).as_bytes(), uid.to_string().as_bytes());
        }
    }
}
