//! What the running kernel offers lockrun, asked once per process.
//!
//! lockrun keeps every promise on Linux 6.1 and later, each by the best
//! mechanism the running kernel has. This module says which kernel
//! features are there; the layers choose their mechanism by it:
//!
//! | feature | first kernel | without it |
//! |---|---|---|
//! | Landlock ABI 1 (filesystem rights) | 5.13 | the run is refused: nothing else confines writes |
//! | ABI 2 (`REFER`: links and renames across dirs) | 5.19 | the run is refused (older than 6.1) |
//! | ABI 3 (`TRUNCATE`) | 6.2 | the read-only mounts outside the writable roots refuse truncation there (`EROFS`), where lockrun's recorder sees their refusals; elsewhere the seccomp supervisor truncates only beneath the writable roots ([`crate::supervise::truncate`]) |
//! | ABI 5 (`IOCTL_DEV`) | 6.10 | device files opened only under `/dev`, where Landlock's rules name the few a run may open: every other mount `nodev` in the run's mount namespace ([`Kernel::devices_only_in_dev`]) |
//! | ABI 6 (scoping of signals and abstract unix sockets) | 6.12 | the seccomp supervisor: signals ([`crate::supervise::scope`]); abstract names the run bound ([`crate::supervise::abstract_unix`]), where the kernel refuses the run's own unix connects (the unix hooks, or the unix guard) |
//! | ABI 7 (denials logged to kernel audit) | 6.15 | kernel audit's syscall records of the run's login uid: its filesystem refusals, and at ABI 6 its signals and abstract unix connects refused outside it ([`crate::audit::syscalls`]); where audit cannot be used so, [`Gap::FilesystemRefusalsUnseen`]. The processes Landlock hides from the run's `/proc` are recorded by nothing ([`crate::audit::syscalls::reach`]) |
//! | cgroup `connect_unix`/`sendmsg_unix` hooks | 6.7 | lockrun's unix guard ([`lockrun_unix::guard`]: `fmod_ret` programs on the kernel's `security_unix_stream_connect` and `security_unix_may_send`, BTF and BPF trampolines, 5.7) refuses every unix connect and send to a named socket a task of the run makes itself, and the supervisor makes the legitimate ones; where neither, [`Gap::UnixAddresses`] |
//! | cgroup `recvmsg4`/`6` (5.2), `getpeername4`/`6` hooks, `sock_ops` | 5.8 | runs go without transparent redirection ([`redirect`]): their connects are judged as before, a client that ignores the proxy variables is refused, not let through; `doctor` says so |
//! | a raw tracepoint program on `sys_exit` with `bpf_probe_read_kernel` and a ring buffer (lockrun's recorder of calls a read-only mount refused, `crate::bpf::read_only`; `x86_64`) | 5.8 | no refusal by a read-only mount is seen ([`Kernel::read_only_refusals_seen`] says why): a run must not depend on read-only mounts for what it refuses, and keeps the seccomp supervisor for metadata changes outside the writable roots |
//!
//! A [`Gap`] is a promise this kernel cannot hold with what lockrun has for
//! it: a run with one is refused (exit 125, naming the promise and the
//! feature it lacks) unless the policy accepts exactly that gap by name
//! (`run.accept_gaps`), and then every run says so.
//!
//! Test builds (`weaken-for-tests`) may lower the Landlock ABI used,
//! `LOCKRUN_TEST_LANDLOCK_ABI=N`, and pretend the kernel has no cgroup unix
//! hooks, `LOCKRUN_TEST_NO_UNIX_HOOKS=1` (they are then neither loaded nor
//! attached), or none of the hooks redirection needs,
//! `LOCKRUN_TEST_NO_REDIRECT=1` ([`redirect`]), so that an older kernel's
//! mechanisms are tested on this one too.

mod syscall_audit;
#[cfg(test)]
mod tests;

use std::fmt;

use lockrun_seccomp::Fallbacks;

use crate::sys;
pub use syscall_audit::{Fixed, SyscallAudit, Unusable};

/// The newest Landlock ABI lockrun knows; a newer kernel's is used as this.
pub const LANDLOCK_NEWEST: u8 = 7;

/// Why the supervisor holds a scoping promise, as `doctor` says it.
const NO_SCOPING: &str = "no Landlock scoping: ABI < 6";

/// What this kernel has of its own, asked by this module: Landlock and
/// the cgroup unix hooks. What lockrun has in place of a missing one is
/// asked by the module that owns it, above this one ([`Kernel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// The Landlock ABI lockrun uses here: the kernel's, at most
    /// [`LANDLOCK_NEWEST`]; `Err` when Landlock is not there at all.
    pub landlock: Result<u8, NoLandlock>,
    /// The cgroup hooks on unix sockets' addresses (`connect_unix`,
    /// `sendmsg_unix`, Linux 6.7): a program of their attach type loads.
    pub unix_hooks: bool,
}

/// What this kernel offers: its [`Features`], and the stand-ins lockrun
/// has where one is missing, each asked by its owner (kernel audit's
/// syscall records by `crate::audit::syscalls`, the unix guard by
/// `crate::bpf`) and handed in ([`Kernel::with_stand_ins`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// The Landlock ABI lockrun uses here: the kernel's, at most
    /// [`LANDLOCK_NEWEST`]; `Err` when Landlock is not there at all.
    pub landlock: Result<u8, NoLandlock>,
    /// The cgroup hooks on unix sockets' addresses (`connect_unix`,
    /// `sendmsg_unix`, Linux 6.7): a program of their attach type loads.
    pub unix_hooks: bool,
    /// Below Landlock ABI 7: whether kernel audit's syscall records can
    /// show the run's filesystem refusals ([`crate::audit::syscalls::probe`]);
    /// `None` where Landlock logs them itself (not asked).
    pub syscall_audit: Option<Result<SyscallAudit, Unusable>>,
    /// Without those: lockrun's unix guard loads ([`lockrun_unix::guard`]).
    /// Not asked (false) where the hooks are.
    pub unix_guard: bool,
    /// Whether lockrun's `sys_exit` recorder is attached, which records
    /// the run's calls that a read-only mount refuses (`EROFS`), or why not
    /// ([`Self::read_only_refusals_seen`]).
    pub read_only_refusals: Result<(), ReadOnlyUnseen>,
}

/// Why the calls of a run that a read-only mount refuses (`EROFS`) are not
/// recorded here: lockrun's `sys_exit` recorder (`crate::bpf::read_only`)
/// is not attached. The kernel refuses those calls before Landlock or
/// kernel audit's rules see them, so without it none would be seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadOnlyUnseen {
    #[error("lockrun's sys_exit recorder reads x86_64's syscall registers, and this is {0}")]
    Architecture(&'static str),
    #[error(
        "this build's eBPF programs could not be loaded (the BPF cgroup hooks' line of `lockrun \
         doctor` says why)"
    )]
    NoPrograms,
    #[error(
        "the kernel refused to load lockrun's sys_exit recorder (BPF_PROG_LOAD of a raw \
         tracepoint program: {}; a kernel locked down for confidentiality refuses its \
         bpf_probe_read_kernel)",
        nix::Error::from_raw(*errno)
    )]
    Load { errno: i32 },
    #[error(
        "the kernel refused to attach lockrun's sys_exit recorder to the sys_exit tracepoint \
         (BPF_RAW_TRACEPOINT_OPEN: {})",
        nix::Error::from_raw(*errno)
    )]
    Attach { errno: i32 },
    #[error(
        "pinning the link of lockrun's sys_exit recorder in bpffs failed ({}), so it would not \
         outlive lockrun",
        nix::Error::from_raw(*errno)
    )]
    Pin { errno: i32 },
}

/// A promise, and what holds it on this kernel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Holding {
    pub promise: &'static str,
    /// The mechanism, or why none holds it here.
    pub by: Result<Held, Unheld>,
}

/// What holds a promise here: the kind of mechanism, and how `doctor`
/// says it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Held {
    pub mechanism: Mechanism,
    /// In a sentence: which right, hook or record, and for want of what.
    pub how: String,
}

impl Held {
    fn new(mechanism: Mechanism, how: impl Into<String>) -> Self {
        Self {
            mechanism,
            how: how.into(),
        }
    }
}

/// The kind of mechanism that holds a promise, named as `doctor --json`
/// names it (`"supervisor"`), for what renders a table of kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// A right or scoping of the Landlock ABI in use.
    Landlock,
    /// The seccomp supervisor.
    Supervisor,
    /// The seccomp supervisor, and the cgroup `connect_unix` and
    /// `sendmsg_unix` hooks refusing the unix connects and sends a task of
    /// the run makes itself.
    SupervisorAndUnixHooks,
    /// The seccomp supervisor, and lockrun's unix guard ([`lockrun_unix::guard`])
    /// refusing them.
    SupervisorAndUnixGuard,
    /// Device files opened only under `/dev`: every other mount `nodev`
    /// ([`Kernel::devices_only_in_dev`]).
    NodevMounts,
    /// Every mount of the run read-only but its writable roots
    /// ([`Kernel::metadata_by_mounts`]), the kernel's refusals there
    /// (`EROFS`) recorded by lockrun's `sys_exit` recorder.
    ReadOnlyMounts,
    /// Kernel audit's syscall records of the run's login uid
    /// ([`crate::audit::syscalls`]).
    SyscallAudit,
}

/// Why no mechanism holds a promise here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unheld {
    /// A gap a policy may accept.
    Gap(Gap),
    /// No Landlock at all: nothing confines the run's writes, and no
    /// policy may accept that.
    NoLandlock,
}

impl From<Gap> for Unheld {
    fn from(g: Gap) -> Self {
        Self::Gap(g)
    }
}

/// Why there is no Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoLandlock {
    #[error("compiled in but not enabled at boot (boot with lsm=…,landlock)")]
    NotEnabled,
    #[error("not compiled into this kernel (CONFIG_SECURITY_LANDLOCK)")]
    NotBuilt,
}

impl Features {
    /// This kernel's, asked once.
    #[must_use]
    pub fn get() -> Self {
        static FEATURES: std::sync::OnceLock<Features> = std::sync::OnceLock::new();
        *FEATURES.get_or_init(Self::probe)
    }

    fn probe() -> Self {
        let landlock = match sys::landlock_abi_version() {
            Ok(v) => Ok(u8::try_from(v)
                .unwrap_or(LANDLOCK_NEWEST)
                .min(LANDLOCK_NEWEST)),
            Err(nix::errno::Errno::EOPNOTSUPP) => Err(NoLandlock::NotEnabled),
            Err(_) => Err(NoLandlock::NotBuilt),
        };
        #[cfg(feature = "weaken-for-tests")]
        let landlock = landlock.and_then(|v| {
            match std::env::var("LOCKRUN_TEST_LANDLOCK_ABI")
                .ok()
                .and_then(|s| s.parse::<u8>().ok())
            {
                // As a kernel booted without it (`lsm=` not naming it).
                Some(0) => Err(NoLandlock::NotEnabled),
                lower => Ok(lower.map_or(v, |lower| lower.min(v))),
            }
        });
        let unix_hooks = unix_hooks_load();
        #[cfg(feature = "weaken-for-tests")]
        let unix_hooks = unix_hooks && std::env::var_os("LOCKRUN_TEST_NO_UNIX_HOOKS").is_none();
        Self {
            landlock,
            unix_hooks,
        }
    }

    /// The Landlock ABI in use, 0 where there is none.
    #[must_use]
    pub fn landlock_abi(&self) -> u8 {
        self.landlock.unwrap_or(0)
    }

    /// Whether kernel audit's syscall records are asked to stand in for
    /// Landlock's denial logging: below ABI 7, where there is Landlock.
    #[must_use]
    pub fn wants_syscall_audit(&self) -> bool {
        self.landlock.is_ok_and(|v| v < 7)
    }

    /// What the seccomp supervisor stands in for here, for want of the
    /// kernel's own mechanism: with the kernel's features alone, the
    /// metadata calls too (whether the mounts can hold them is the
    /// recorder's to say: [`Kernel::fallbacks`]).
    #[must_use]
    pub fn fallbacks(&self) -> Fallbacks {
        Fallbacks {
            truncate: self.landlock_abi() < 3,
            scoping: self.landlock.is_ok() && self.landlock_abi() < 6,
            unix_addresses: !self.unix_hooks,
            metadata: true,
        }
    }

    /// Whether the run opens device files only under `/dev`, for want of
    /// Landlock's device ioctl right (ABI < 5, Linux < 6.10): the child
    /// marks every other mount of its namespace `nodev`
    /// ([`crate::sys::ChildPlan`]). Under `/dev` Landlock's rules let a run
    /// open only null, zero, full, the terminals (each granted the ioctl
    /// right where the kernel has it) and random, urandom (whose ioctls do
    /// nothing without `CAP_SYS_ADMIN` but read the entropy count, as
    /// `/proc/sys/kernel/random/entropy_avail` does); a device file
    /// elsewhere, which the run could read, and so drive by ioctl, is
    /// refused at its open (`EACCES`), beneath a writable root too.
    ///
    /// Not the supervisor, judging each `ioctl` by what its descriptor is:
    /// the kernel looks the descriptor up again after the supervisor lets
    /// the call go on, and a thread of the command sharing its descriptor
    /// table could put a device there in between; and every `ioctl`
    /// (`isatty`) would wait on a round trip to lockrun.
    #[must_use]
    pub fn devices_only_in_dev(&self) -> bool {
        self.landlock_abi() < 5
    }
}

impl Kernel {
    /// `features`, with what the owners of the stand-ins found: whether
    /// kernel audit's syscall records can be used (`None` where not asked:
    /// [`Features::wants_syscall_audit`]), whether lockrun's unix guard
    /// is used (false where the unix hooks are), and whether its `sys_exit`
    /// recorder of refusals by read-only mounts is attached.
    #[must_use]
    pub fn with_stand_ins(
        features: Features,
        syscall_audit: Option<Result<SyscallAudit, Unusable>>,
        unix_guard: bool,
        read_only_refusals: Result<(), ReadOnlyUnseen>,
    ) -> Self {
        Self {
            landlock: features.landlock,
            unix_hooks: features.unix_hooks,
            syscall_audit,
            unix_guard,
            read_only_refusals,
        }
    }

    /// Whether a run's calls that a read-only mount refuses (`EROFS`) are
    /// recorded here, by lockrun's `sys_exit` recorder; if not, why. A run
    /// may leave a refusal to a read-only mount only where they are: every
    /// refusal is seen.
    pub fn read_only_refusals_seen(&self) -> Result<(), ReadOnlyUnseen> {
        self.read_only_refusals
    }

    /// The kernel's own features.
    #[must_use]
    pub fn features(&self) -> Features {
        Features {
            landlock: self.landlock,
            unix_hooks: self.unix_hooks,
        }
    }

    /// Below Landlock ABI 7, where kernel audit's syscall records show the
    /// run's filesystem refusals: what was found of kernel audit.
    #[must_use]
    pub fn refusals_by_syscall_audit(&self) -> Option<SyscallAudit> {
        match self.syscall_audit {
            Some(Ok(p)) if self.landlock_abi() < 7 => Some(p),
            _ => None,
        }
    }

    /// What this kernel lacks for `gap`, as a refusal names it, with why
    /// no other mechanism stands in here where lockrun has one.
    #[must_use]
    pub fn lacks(&self, gap: Gap) -> String {
        match (gap, self.syscall_audit) {
            (Gap::FilesystemRefusalsUnseen, Some(Err(why))) => format!(
                "{}, and kernel audit's syscall records cannot stand in here: {why}",
                gap.lacks()
            ),
            _ => gap.lacks().to_owned(),
        }
    }

    /// The Landlock ABI in use, 0 where there is none.
    #[must_use]
    pub fn landlock_abi(&self) -> u8 {
        self.features().landlock_abi()
    }

    /// Each promise that depends on the kernel, and what holds it here:
    /// the mechanism, or the gap.
    #[must_use]
    pub fn promises(&self) -> Vec<Holding> {
        let abi = self.landlock_abi();
        let landlock = |right: &str, from: u8| {
            (abi >= from)
                .then(|| Held::new(Mechanism::Landlock, format!("Landlock {right} (ABI {abi})")))
        };
        let supervisor = |why: &str| {
            Held::new(
                Mechanism::Supervisor,
                format!("the seccomp supervisor ({why})"),
            )
        };
        let held = |gap: Gap, by: Option<Held>| by.ok_or(Unheld::Gap(gap));
        vec![
            Holding {
                promise: "writes only in the worktree, {tmp} and the writable paths; deny-read paths unreadable",
                by: self
                    .landlock
                    .map(|v| {
                        Held::new(
                            Mechanism::Landlock,
                            format!("Landlock filesystem rights (ABI {v})"),
                        )
                    })
                    .map_err(|_| Unheld::NoLandlock),
            },
            Holding {
                promise: "no file outside the writable roots truncated",
                by: held(
                    Gap::Truncate,
                    landlock("truncate right", 3).or_else(|| self.truncation_held_by()),
                ),
            },
            Holding {
                promise: "no ioctl on a device outside the writable roots but a terminal's and those of null, zero, full",
                by: held(
                    Gap::DeviceIoctl,
                    landlock("device ioctl right", 5).or_else(|| {
                        self.devices_only_in_dev().then(|| {
                            Held::new(
                                Mechanism::NodevMounts,
                                "device files only under /dev, by Landlock's rules there: every other mount nodev \
                                 (no Landlock device ioctl right: ABI < 5)",
                            )
                        })
                    }),
                ),
            },
            Holding {
                promise: "no signal to a process outside the run",
                by: held(
                    Gap::SignalScope,
                    landlock("signal scoping", 6)
                        .or_else(|| Gap::SignalScope.held_by(self).then(|| supervisor(NO_SCOPING))),
                ),
            },
            Holding {
                promise: "no abstract unix socket bound outside the run reached",
                by: held(
                    Gap::AbstractUnixScope,
                    landlock("abstract unix socket scoping", 6).or_else(|| {
                        Gap::AbstractUnixScope
                            .held_by(self)
                            .then(|| self.supervisor_and_unix_refusal(Some(NO_SCOPING)))
                    }),
                ),
            },
            Holding {
                promise: "pathname unix sockets only inside the worktree and {tmp}",
                by: held(
                    Gap::UnixAddresses,
                    Gap::UnixAddresses
                        .held_by(self)
                        .then(|| self.supervisor_and_unix_refusal(None)),
                ),
            },
            Holding {
                promise: "every filesystem refusal recorded",
                by: held(
                    Gap::FilesystemRefusalsUnseen,
                    landlock("denial logging to kernel audit", 7).or_else(|| {
                        self.refusals_by_syscall_audit().map(|_| {
                            Held::new(
                                Mechanism::SyscallAudit,
                                "kernel audit's syscall records of the run's login uid (no Landlock \
                                 denial logging: ABI < 7)",
                            )
                        })
                    }),
                ),
            },
            Holding {
                promise: "every refused reach outside the run recorded",
                by: held(Gap::FilesystemRefusalsUnseen, self.reaches_recorded_by()),
            },
        ]
    }

    /// What keeps a file outside the writable roots from being truncated
    /// without Landlock's truncate right (ABI < 3): the read-only mounts,
    /// where their refusals are seen; else the supervisor.
    fn truncation_held_by(&self) -> Option<Held> {
        if self.metadata_by_mounts() {
            return Some(Held::new(
                Mechanism::ReadOnlyMounts,
                "every mount read-only outside the writable roots, its refusals recorded by \
                 lockrun's sys_exit recorder (no Landlock truncate right: ABI < 3)",
            ));
        }
        self.fallbacks().truncate.then(|| {
            Held::new(
                Mechanism::Supervisor,
                "the seccomp supervisor (no Landlock truncate right: ABI < 3)",
            )
        })
    }

    /// What records the run's refused reaches outside it (signals,
    /// abstract unix sockets, ptrace and `/proc` access): Landlock's
    /// denial logging; below it, what refuses them (the supervisor, below
    /// ABI 6) or kernel audit's syscall records (ABI 6), none of which
    /// sees the processes Landlock hides from the run's `/proc`
    /// ([`crate::audit::syscalls::reach`]). `None` at ABI 6 where kernel
    /// audit cannot be used so: the gap of the filesystem refusals, whose
    /// records are the same.
    fn reaches_recorded_by(&self) -> Option<Held> {
        let abi = self.landlock_abi();
        if abi >= 7 {
            return Some(Held::new(
                Mechanism::Landlock,
                format!("Landlock denial logging to kernel audit (ABI {abi})"),
            ));
        }
        let (mechanism, by) = if abi == 6 {
            self.refusals_by_syscall_audit()?;
            (
                Mechanism::SyscallAudit,
                "kernel audit's syscall records of the run's login uid (no Landlock denial \
                 logging: ABI < 7)"
                    .to_owned(),
            )
        } else {
            (
                Mechanism::Supervisor,
                format!("the seccomp supervisor ({NO_SCOPING})"),
            )
        };
        Some(Held::new(
            mechanism,
            format!(
                "{by}; not the processes outside the run hidden from its /proc: no record names \
                 them"
            ),
        ))
    }

    /// The supervisor, with what refuses the unix connects and sends to a
    /// named socket that a task of the run makes itself, for the supervisor
    /// to make the legitimate ones; `why` the supervisor stands in, if it
    /// does.
    fn supervisor_and_unix_refusal(self, why: Option<&str>) -> Held {
        let (mechanism, refusal) = if self.unix_hooks {
            (
                Mechanism::SupervisorAndUnixHooks,
                "the cgroup connect_unix and sendmsg_unix hooks",
            )
        } else {
            (
                Mechanism::SupervisorAndUnixGuard,
                "lockrun's unix guard (fmod_ret on security_unix_stream_connect and \
                 security_unix_may_send; no cgroup unix hooks: Linux < 6.7)",
            )
        };
        let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
        Held::new(
            mechanism,
            format!("the seccomp supervisor, and {refusal}{why}"),
        )
    }

    /// What the seccomp supervisor stands in for here
    /// ([`Features::fallbacks`]), the metadata calls and truncation only
    /// where the mounts cannot hold them ([`Self::metadata_by_mounts`]):
    /// outside the writable roots a read-only mount refuses a truncation
    /// (`EROFS`) as it refuses a write, before Landlock is asked.
    #[must_use]
    pub fn fallbacks(&self) -> Fallbacks {
        let by_mounts = self.metadata_by_mounts();
        let features = self.features().fallbacks();
        Fallbacks {
            metadata: !by_mounts,
            truncate: features.truncate && !by_mounts,
            ..features
        }
    }

    /// Whether the run's mounts are read-only outside its writable roots
    /// ([`crate::sys::ReadOnlyOutside`]), so that the kernel itself refuses
    /// metadata changes there (`EROFS`) and the supervisor performs none
    /// but set-id modes: only where those refusals are seen
    /// ([`Self::read_only_refusals_seen`]); elsewhere the mounts stay as
    /// the machine has them and the supervisor performs every metadata
    /// call beneath the writable roots. Test builds (`weaken-for-tests`)
    /// take the supervisor's way with `LOCKRUN_TEST_NO_READ_ONLY_MOUNTS=1`,
    /// so that it is tested on a kernel that has the recorder too.
    #[must_use]
    pub fn metadata_by_mounts(&self) -> bool {
        #[cfg(feature = "weaken-for-tests")]
        if std::env::var_os("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS").is_some() {
            return false;
        }
        self.read_only_refusals.is_ok()
    }

    /// Whether the run opens device files only under `/dev`
    /// ([`Features::devices_only_in_dev`]).
    #[must_use]
    pub fn devices_only_in_dev(&self) -> bool {
        self.features().devices_only_in_dev()
    }

    /// The promises this kernel leaves without a mechanism.
    #[must_use]
    pub fn gaps(&self) -> Vec<Gap> {
        Gap::ALL.into_iter().filter(|g| !g.held_by(self)).collect()
    }
}

/// Whether the unix hooks are there: on a kernel whose release is 6.7 or
/// later, without asking (a run's start-up does not pay a program load;
/// should one lack them, loading the hooks fails and refuses the run);
/// before, whether the smallest program of the unix connect hook's attach
/// type (`r0 = 1; exit`) loads, which a kernel without them refuses
/// (`EINVAL`), whatever the program (a backport would have them).
fn unix_hooks_load() -> bool {
    /// `BPF_MOV64_IMM(BPF_REG_0, 1)`, `BPF_EXIT_INSN()`.
    const ALLOW: [u64; 2] = [0x0000_0001_0000_00b7, 0x95];
    use crate::sys::bpf::{prog_load, ATTACH_UNIX_CONNECT, PROG_TYPE_CGROUP_SOCK_ADDR};
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    if release_at_least(&release, (6, 7)) {
        return true;
    }
    prog_load(
        PROG_TYPE_CGROUP_SOCK_ADDR,
        &ALLOW,
        ATTACH_UNIX_CONNECT,
        "lockrun_probe",
        c"GPL",
    )
    .is_ok()
}

/// Whether the run's connects can be brought to its proxy here (the
/// transparent path and the run's resolver, `crate::bpf::hooks::RedirectTo`),
/// asked once: the hooks it takes are `cgroup/recvmsg4`, `recvmsg6` (5.2),
/// `cgroup/getpeername4`, `getpeername6` (5.8) and `sock_ops` (4.13), with
/// `bpf_get_socket_cookie` in `sock_addr` (5.0) and `sock_ops` (5.0)
/// programs. On a release of 5.8 or later, without asking; before, whether
/// the smallest program of the getpeername hook's attach type loads. `Err`
/// says what is missing, as `lockrun doctor` says it: a run there goes
/// without redirection (every connect judged as before: fail closed).
///
/// Test builds (`weaken-for-tests`): `LOCKRUN_TEST_NO_REDIRECT=1` pretends
/// the kernel has none of it.
pub fn redirect() -> Result<(), &'static str> {
    static REDIRECT: std::sync::OnceLock<Result<(), &'static str>> = std::sync::OnceLock::new();
    *REDIRECT.get_or_init(|| {
        #[cfg(feature = "weaken-for-tests")]
        if std::env::var_os("LOCKRUN_TEST_NO_REDIRECT").is_some() {
            return Err(REDIRECT_NEEDS);
        }
        redirect_hooks_load().then_some(()).ok_or(REDIRECT_NEEDS)
    })
}

/// What [`redirect`] needs, as `doctor` says it.
pub const REDIRECT_NEEDS: &str =
    "needs the cgroup getpeername4/6 hooks, Linux 5.8, and recvmsg4/6, sock_ops";

fn redirect_hooks_load() -> bool {
    /// `BPF_MOV64_IMM(BPF_REG_0, 1)`, `BPF_EXIT_INSN()`.
    const ALLOW: [u64; 2] = [0x0000_0001_0000_00b7, 0x95];
    use crate::sys::bpf::{
        prog_load, ATTACH_INET4_GETPEERNAME, ATTACH_SOCK_OPS, ATTACH_UDP4_RECVMSG,
        PROG_TYPE_CGROUP_SOCK_ADDR, PROG_TYPE_SOCK_OPS,
    };
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    if release_at_least(&release, (5, 8)) {
        return true;
    }
    [
        (PROG_TYPE_CGROUP_SOCK_ADDR, ATTACH_INET4_GETPEERNAME),
        (PROG_TYPE_CGROUP_SOCK_ADDR, ATTACH_UDP4_RECVMSG),
        (PROG_TYPE_SOCK_OPS, ATTACH_SOCK_OPS),
    ]
    .into_iter()
    .all(|(ty, at)| prog_load(ty, &ALLOW, at, "lockrun_probe", c"GPL").is_ok())
}

/// Whether a kernel release (`6.12.117+deb13-amd64`) is `at_least` a
/// major and minor version.
fn release_at_least(release: &str, at_least: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= at_least
}

/// A promise this kernel cannot hold with the mechanisms lockrun has for
/// it, named as a policy accepts it (`run.accept_gaps = ["truncate"]`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Gap {
    /// A file outside the writable roots that the run may read can be
    /// truncated: `truncate(2)`, or opened read-only with `O_TRUNC`.
    Truncate,
    /// A device file outside the writable roots that the run may read
    /// takes its ioctls.
    DeviceIoctl,
    /// The run can signal processes outside it that its uid may signal.
    SignalScope,
    /// The run can connect to abstract unix sockets bound outside it.
    AbstractUnixScope,
    /// Filesystem refusals are made, but not recorded: the audit log and
    /// the summary do not name them.
    FilesystemRefusalsUnseen,
    /// The run can reach pathname unix sockets outside its worktree and
    /// temp dir by an address the seccomp filter takes for an inet one
    /// (its length), or by `sendmsg(2)`, whose address it cannot read.
    UnixAddresses,
}

impl Gap {
    /// Every gap, in the order they are told.
    pub const ALL: [Self; 6] = [
        Self::Truncate,
        Self::DeviceIoctl,
        Self::SignalScope,
        Self::AbstractUnixScope,
        Self::UnixAddresses,
        Self::FilesystemRefusalsUnseen,
    ];

    /// The name a policy accepts it by.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Truncate => "truncate",
            Self::DeviceIoctl => "device_ioctl",
            Self::SignalScope => "signal_scope",
            Self::AbstractUnixScope => "abstract_unix_scope",
            Self::FilesystemRefusalsUnseen => "filesystem_refusals_unseen",
            Self::UnixAddresses => "unix_addresses",
        }
    }

    /// The gap of `name`, if any.
    #[must_use]
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.name() == name)
    }

    /// Whether `kernel` holds the promise this gap would leave.
    #[must_use]
    pub fn held_by(self, kernel: &Kernel) -> bool {
        let abi = kernel.landlock_abi();
        match self {
            Self::Truncate => abi >= 3 || kernel.truncation_held_by().is_some(),
            Self::DeviceIoctl => abi >= 5 || kernel.devices_only_in_dev(),
            // The seccomp supervisor judges signals where Landlock does not.
            Self::SignalScope => true,
            // Landlock; or the supervisor, where the kernel refuses the
            // abstract connects the run makes itself.
            Self::AbstractUnixScope => abi >= 6 || kernel.unix_hooks || kernel.unix_guard,
            Self::FilesystemRefusalsUnseen => {
                abi >= 7 || kernel.refusals_by_syscall_audit().is_some()
            }
            Self::UnixAddresses => kernel.unix_hooks || kernel.unix_guard,
        }
    }

    /// What the kernel lacks for it, as a refusal names it.
    #[must_use]
    pub fn lacks(self) -> &'static str {
        match self {
            Self::Truncate => "Landlock's truncate right (ABI 3, Linux 6.2)",
            Self::DeviceIoctl => "Landlock's device ioctl right (ABI 5, Linux 6.10)",
            Self::SignalScope => "Landlock's scoping (ABI 6, Linux 6.12)",
            Self::AbstractUnixScope => {
                "Landlock's scoping (ABI 6, Linux 6.12), and both the cgroup unix hooks (Linux 6.7) \
                 and BPF trampolines on the kernel's security functions (fmod_ret) for lockrun's unix guard"
            }
            Self::FilesystemRefusalsUnseen => "Landlock's denial logging (ABI 7, Linux 6.15)",
            Self::UnixAddresses => {
                "the cgroup connect_unix and sendmsg_unix hooks (Linux 6.7), and BPF trampolines on \
                 the kernel's security functions (fmod_ret, with BTF) for lockrun's unix guard"
            }
        }
    }
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Truncate => {
                "a file outside the writable roots that the run may read can be truncated \
                 (truncate(2), or an open with O_TRUNC)"
            }
            Self::DeviceIoctl => {
                "a device file outside the writable roots that the run may read takes its ioctls"
            }
            Self::SignalScope => {
                "the run can signal processes outside it (those its uid may signal)"
            }
            Self::AbstractUnixScope => "the run can connect to abstract unix sockets bound outside it",
            Self::FilesystemRefusalsUnseen => {
                "filesystem refusals are not recorded: the audit log and the summary do not name them"
            }
            Self::UnixAddresses => {
                "the run can reach unix sockets outside its worktree and temp dir by an address \
                 as long as an inet one, or by sendmsg(2)"
            }
        })
    }
}
