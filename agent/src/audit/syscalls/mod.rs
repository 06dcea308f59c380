//! Filesystem refusals, and reaches outside the run, where Landlock does
//! not log them: below ABI 7
//! (Linux 6.15: Debian 12's 6.1, Debian 13's and RHEL 10's 6.12, Ubuntu's
//! 6.8–6.14) Landlock refuses as it does on a newer kernel, but writes no
//! audit record, so without this the audit log and the summary would not
//! name a single filesystem refusal ([`crate::kernel::Gap::FilesystemRefusalsUnseen`]).
//! Here kernel audit's own syscall auditing stands in:
//!
//! - **A login uid of the run's own.** The command's process sets its
//!   login uid (`/proc/self/loginuid`, [`crate::sys::ChildPlan`]) before
//!   its capabilities go; every process of the run inherits it, and none
//!   can change it again (that needs `CAP_AUDIT_CONTROL`). It is
//!   `0x8000_0000 | ino`, `ino` the kernfs inode number of the run's cgroup
//!   (the low 32 bits of its id, below 2³¹, unique among the machine's
//!   live cgroups): in a range no user's login uid is in, and one per live
//!   run ([`login_uid_of`]).
//! - **An audit rule of each run's** ([`rules`]): on the syscall exit filter,
//!   for this build's architecture, that login uid and a result of
//!   `-EACCES`, every syscall: `-A exit,always -F arch=b64 -F auid=<uid>
//!   -F exit=-EACCES -S all`. Prepended, so no rule of the host's can
//!   silence it (the first matching rule decides); rules are the
//!   machine's, and lockrun touches only its own. Added before the command
//!   starts, removed when the run ends (on every path: a drop guard), and
//!   by `lockrun gc` after a killed lockrun, once the run's cgroup is gone.
//!   No rule for the i386 compat architecture: the seccomp filter kills a
//!   process at its first call of another architecture
//!   ([`crate::seccomp`]), so no such call of the run can be refused with
//!   `EACCES`.
//! - **A second rule for links and renames**: the same fields with
//!   `exit=-EXDEV`, for the calls that link or rename a file only (`-S
//!   link -S linkat -S rename -S renameat -S renameat2`,
//!   [`rules::REFER_CALLS`]), added, removed and reaped with the first
//!   (in one datagram each way). Landlock refuses a link or rename that
//!   would give a file rights it lacks, or out of or into a directory
//!   without `fs.refer`, with `EXDEV` ([`refer`]); one rule cannot take
//!   both errnos (below).
//! - **A third rule at Landlock ABI 6** (Linux 6.12–6.14), whose scoping
//!   refuses signals to processes outside the run and connects to abstract
//!   sockets bound outside it with `EPERM`, unlogged: the same fields with
//!   `exit=-EPERM`, for the calls that signal a process or name a socket
//!   address only (`-S kill -S tkill -S tgkill -S rt_sigqueueinfo -S
//!   rt_tgsigqueueinfo -S pidfd_send_signal -S connect -S sendto -S
//!   sendmsg -S sendmmsg`, [`rules::REACH_CALLS`]). Kernel audit's rule
//!   fields are all and-ed, one syscall mask and one `exit` each: no one
//!   rule holds both without also taking every call's `EPERM` or more
//!   errnos (a bit test that matches `-EACCES` and `-EPERM` matches `EIO`
//!   and `EBADF` too). Below ABI 6 there is none: the supervisor judges
//!   and records those reaches itself ([`Reach`]).
//! - **The same reader** ([`super::kernel`]): a refused call's records
//!   (`SYSCALL`, `CWD`, one `PATH` per name it looked up, `SOCKADDR`,
//!   `OBJ_PID`, `EOE`, one serial) come through the same read-only
//!   multicast group, the same end marker and loss accounting; the reader
//!   takes those whose `SYSCALL` names the run's login uid, exactly, and
//!   turns each into a [`super::FsEvent`] ([`records`], [`refer`]) or a
//!   [`super::ScopeEvent`] ([`reach`]).
//!
//! What differs from Landlock's own records (ABI 7):
//! - **The blocker is derived from the call, not said by Landlock**: the
//!   syscall and its arguments give the access in Landlock's words
//!   (`openat` with `O_WRONLY` on a file that is there: `fs.write_file`;
//!   with `O_CREAT` on one that is not: `fs.make_reg` on its directory, as
//!   Landlock names it; `mkdir`: `fs.make_dir`; …, see [`records`]). A call
//!   it does not know is named by its number (`syscall.262`).
//! - **Refusals by the permission bits are shown too**: the kernel says
//!   `EACCES` alike for Landlock's refusals and for those of the file's
//!   mode, and a run, uid 0 without capabilities, meets the latter on the
//!   machine's masked secrets (mode 0000), files of mode 0000 and other
//!   users' files. They are real refusals of the run, and are shown as
//!   such. Not shown: `access(2)` and `faccessat(2)`, which ask and open
//!   nothing, and `EACCES` from calls that name no file (a port below 1024
//!   to `bind`): those are not filesystem refusals.
//! - **`EXDEV` is Landlock's only where the kernel got as far as asking
//!   it** ([`refer`]): a link or rename across two mounts (every move
//!   across filesystems, which `mv` and `git` then copy instead of) gets
//!   `EXDEV` before any security hook, and a filesystem's own (overlayfs
//!   renaming a directory, btrfs across subvolumes) comes after Landlock
//!   allowed it. A record is taken only where its two names are found on
//!   one mount, with the device and inode the record gives, and
//!   Landlock's decision, made again from what the run's ruleset grants at
//!   the two directories ([`Watch::granted`]), refuses the move; it is
//!   named as Landlock's record names it: the directory not allowed, with
//!   every right the file would gain. Every other `EXDEV` is no refusal of
//!   the run's, and is dropped; so is one whose names are gone or changed
//!   by the time the reader looks (a refusal not named, rather than a move
//!   across mounts named as one).
//! - **Paths** are as the kernel records them: a name joined with the
//!   process's working directory (`CWD`); a name relative to a directory
//!   descriptor is found through that descriptor while the process still
//!   holds it (`/proc/<pid>/fd`), and taken only if its device and inode
//!   are those the kernel recorded; otherwise the path is not named. A
//!   link or rename across two directories is named as Landlock names it
//!   where Landlock, as the run's ruleset decides it, refuses it
//!   ([`refer`]): each directory it names, with what it names there.
//!   Where it allows it (the permission bits refused), the records do
//!   not say which directory refused: the one outside the run's writable
//!   paths is named (with what the rename removes there, or makes), the
//!   source when both are.
//! - **Reaches outside the run** ([`reach`]): a signal or an abstract
//!   connect refused at ABI 6, and a refused access to the `/proc` entry
//!   of a process outside the run, are scope refusals, as Landlock logs
//!   them. A process Landlock hides from the run's own `/proc` is recorded
//!   by nothing below ABI 7: no call fails with a record that names it.
//! - **The cost is the machine's**: while any audit rule is loaded, the
//!   kernel keeps an account of the names every audited syscall of every
//!   process looks up (not only the run's), and checks each syscall's
//!   exit against the rules. A host with audit rules of its own pays that
//!   already.
//!
//! Where kernel audit cannot be used this way (no `CONFIG_AUDIT`; audit
//! locked, `-e 2`, so no rule may be added; lockrun's own login uid set
//! and not changeable here; a user namespace; a host rule `-a task,never`,
//! which leaves processes without the syscall records, or an `exclude`
//! rule that drops them) the gap stays, and says why ([`probe`], asked
//! before the run). Should the rule still fail at the run's start, the run
//! is refused, unless its policy accepts the gap.

use std::path::PathBuf;

use lockrun_seccomp::scope::abstract_names_supervised;
use lockrun_seccomp::Fallbacks;

pub mod reach;
pub mod records;
pub mod refer;
pub mod rules;

pub use rules::{reap_stale, remove_beside, Refused, RunRules};

use super::kernel::KernelAuditError;
use crate::kernel::{Features, Fixed, SyscallAudit, Unusable};
use crate::sys::has_effective_cap;

/// The first login uid of lockrun's range: `0x8000_0000 | ino`.
pub const LOGIN_UID_RANGE: u32 = 0x8000_0000;

/// The login uid that means "not set".
const LOGIN_UID_UNSET: u32 = u32::MAX;

/// `CAP_AUDIT_CONTROL`: what changing a login uid once set needs.
const CAP_AUDIT_CONTROL: u32 = 30;

/// Why the run's refused calls cannot be told from kernel audit's records.
#[derive(Debug, thiserror::Error)]
pub enum SyscallAuditError {
    #[error("{call} on the audit netlink socket failed: {source}")]
    Syscall {
        call: &'static str,
        source: nix::Error,
    },
    #[error("the kernel refused {what}: {}", nix::Error::from_raw(*.errno))]
    Refused { what: &'static str, errno: i32 },
    #[error("no answer from the kernel audit subsystem to {what}")]
    NoAnswer { what: &'static str },
    #[error(
        "the run's cgroup id {id:#x} gives no login uid of lockrun's range (its inode number \
         must be below 2^31 - 1)"
    )]
    NoLoginUid { id: u64 },
    #[error(transparent)]
    Kernel(#[from] KernelAuditError),
    #[error("reading the live run cgroups: {0}")]
    LiveRuns(Box<dyn std::error::Error + Send + Sync>),
}

/// What the reader needs to take a run's records: its login uid, its
/// writable paths (to name the directory that refused a rename), what its
/// Landlock ruleset grants (to tell a link or rename Landlock refused with
/// `EXDEV`), its cgroup (to tell a process outside it), and which of its
/// reaches outside the records stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub login_uid: u32,
    pub writable: Vec<PathBuf>,
    pub granted: refer::Granted,
    /// The run's cgroup, as `/proc/<pid>/cgroup` shows it.
    pub cgroup: Option<String>,
    pub reach: Reach,
}

/// The refusals of a reach outside the run that kernel audit's records
/// stand for at Landlock ABI 6, where nothing else records them
/// ([`reach`]). Below ABI 6 the supervisor judges and records both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reach {
    /// Signals to processes outside the run: Landlock ABI 6 scopes them
    /// and logs nothing.
    pub signals: bool,
    /// Connects and sends to abstract unix sockets bound outside the run:
    /// Landlock ABI 6 scopes them, where the supervisor does not judge the
    /// names (where it does, it refuses and records them itself).
    pub abstract_sockets: bool,
}

impl Reach {
    /// What kernel audit stands in for on a kernel of Landlock ABI `abi`
    /// (below 7), with the seccomp supervisor's `fallbacks`.
    #[must_use]
    pub fn below_abi_7(abi: u8, fallbacks: Fallbacks) -> Self {
        Self {
            signals: abi == 6,
            abstract_sockets: abi == 6 && !abstract_names_supervised(fallbacks),
        }
    }

    /// The rules that record these: [`Refused::Files`] and
    /// [`Refused::Refer`] always, and [`Refused::Reach`] for signals or
    /// abstract sockets.
    #[must_use]
    pub fn rules(self) -> Vec<Refused> {
        let mut r = vec![Refused::Files, Refused::Refer];
        if self.signals || self.abstract_sockets {
            r.push(Refused::Reach);
        }
        r
    }
}

/// The events one refused call's records (one serial) tell of the watched
/// run: a reach outside the run ([`reach`]), filesystem refusals
/// ([`records`]: one, or one for each directory of a link or rename
/// Landlock names) but one of the `/proc` entry of a process outside the
/// run, which is that reach ([`reach::proc_entry`]), or nothing.
pub(in crate::audit) fn event(
    group: &[super::kernel::AuditRecord],
    watch: &Watch,
    look: &dyn records::Look,
) -> Vec<super::Event> {
    if let Some(sc) = reach::refusal(group, watch, look) {
        return vec![super::Event::Scope(sc)];
    }
    records::refusal(group, watch, look)
        .into_iter()
        .map(|fs| match reach::proc_entry(&fs, watch, look) {
            Some(ptrace) => super::Event::Scope(ptrace),
            None => super::Event::Filesystem(fs),
        })
        .collect()
}

/// The login uid of the run whose cgroup's id is `cgroup_id`:
/// `0x8000_0000 | ino`, `ino` its low 32 bits (the kernfs inode number,
/// which the kernel hands out below 2³¹, one per live node). Not the
/// "unset" value `u32::MAX`.
pub fn login_uid_of(cgroup_id: u64) -> Result<u32, SyscallAuditError> {
    let ino = cgroup_id as u32;
    if ino == 0 || ino >= LOGIN_UID_UNSET - LOGIN_UID_RANGE {
        return Err(SyscallAuditError::NoLoginUid { id: cgroup_id });
    }
    Ok(LOGIN_UID_RANGE | ino)
}

/// Whether `uid` is a login uid of lockrun's range.
#[must_use]
pub fn is_lockruns(uid: u32) -> bool {
    (LOGIN_UID_RANGE..LOGIN_UID_UNSET).contains(&uid)
}

/// Whether kernel audit's syscall records stand in for Landlock's denial
/// logging on this kernel, asked once: `None` where Landlock logs its
/// denials itself, or is not there ([`Features::wants_syscall_audit`]);
/// else what [`probe`] found (`crate::kernel::Kernel::syscall_audit`).
#[must_use]
pub fn stand_in() -> Option<Result<SyscallAudit, Unusable>> {
    static ANSWER: std::sync::OnceLock<Option<Result<SyscallAudit, Unusable>>> =
        std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| {
        Features::get().wants_syscall_audit().then(|| {
            #[cfg(feature = "weaken-for-tests")]
            if std::env::var("LOCKRUN_TEST_SYSCALL_AUDIT").as_deref() == Ok("off") {
                return Err(Unusable::OffForTests);
            }
            probe()
        })
    })
}

/// Whether kernel audit's syscall records can stand in for Landlock's
/// denial logging here, asked before a run: lockrun's login uid and user
/// namespace, audit's status (on, off or locked), its features where the
/// login uid is set, and the host's rules (`AUDIT_LIST_RULES`). Three
/// questions to the kernel, whose answers come from threads it starts for
/// them; asked only below Landlock ABI 7.
pub fn probe() -> Result<SyscallAudit, Unusable> {
    let login_uid = match std::fs::read_to_string("/proc/self/loginuid") {
        Ok(s) => s.trim().parse::<u32>().unwrap_or(LOGIN_UID_UNSET),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::NoAudit),
        Err(e) => {
            return Err(Unusable::NotReachable {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })
        }
    };
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    if !initial_user_namespace(&uid_map) {
        return Err(Unusable::UserNamespace);
    }
    let asked = rules::ask_host(login_uid != LOGIN_UID_UNSET).map_err(|e| match e {
        SyscallAuditError::Kernel(KernelAuditError::Syscall {
            source: nix::Error::EPROTONOSUPPORT,
            ..
        }) => Unusable::NoAudit,
        SyscallAuditError::Kernel(KernelAuditError::Syscall { source, .. })
        | SyscallAuditError::Syscall { source, .. } => Unusable::NotReachable {
            errno: source as i32,
        },
        SyscallAuditError::Refused { errno, .. } => Unusable::NotReachable { errno },
        _ => Unusable::NotReachable { errno: libc::EIO },
    })?;
    if asked.enabled == 2 {
        return Err(Unusable::Locked);
    }
    if login_uid != LOGIN_UID_UNSET {
        if asked.features & rules::FEATURE_LOGINUID_IMMUTABLE != 0 {
            return Err(Unusable::LoginUidFixed(Fixed::Immutable));
        }
        if asked.features & rules::FEATURE_ONLY_UNSET_LOGINUID != 0 {
            return Err(Unusable::LoginUidFixed(Fixed::OnlyUnset));
        }
        if !has_effective_cap(CAP_AUDIT_CONTROL).unwrap_or(false) {
            return Err(Unusable::LoginUidFixed(Fixed::NoCapability));
        }
    }
    if let Some(why) = asked.rules.iter().find_map(rules::HostRule::silences) {
        return Err(why);
    }
    Ok(SyscallAudit {
        audit_on: asked.enabled == 1,
    })
}

/// Whether `/proc/self/uid_map` is the initial user namespace's: the
/// whole range, mapped to itself.
fn initial_user_namespace(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn a_runs_login_uid_is_its_cgroups_inode_in_lockruns_range() {
        assert_eq!(login_uid_of(49064).unwrap(), 0x8000_bfa8);
        // The generation (high 32 bits) is not the inode.
        assert_eq!(login_uid_of((3 << 32) | 7).unwrap(), 0x8000_0007);
        assert!(is_lockruns(login_uid_of(1).unwrap()));
        // Never "unset", never a user's.
        assert!(login_uid_of(0x7fff_ffff).is_err());
        assert!(login_uid_of(0x8000_0001).is_err());
        assert!(login_uid_of(0).is_err());
        assert!(login_uid_of(0x7fff_fffe).is_ok());
        assert!(!is_lockruns(u32::MAX));
        assert!(!is_lockruns(1000));
        assert!(!is_lockruns(0x7fff_ffff));
    }

    #[test]
    fn only_the_machines_user_namespace_is_the_initial_one() {
        assert!(initial_user_namespace("         0          0 4294967295\n"));
        assert!(!initial_user_namespace("0 100000 65536\n"));
        assert!(!initial_user_namespace(""));
    }
}
