//! Below Landlock ABI 7 (Linux 6.15), what stands in for Landlock's denial
//! logging: kernel audit's syscall records of the run's login uid, where
//! they can be used, or why not. The values only: `crate::audit::syscalls`
//! asks the kernel (`probe`), a module above this one.

/// Why kernel audit's syscall records cannot stand in for Landlock's on
/// this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No kernel audit (`CONFIG_AUDIT`): no `/proc/self/loginuid`, or no
    /// audit netlink.
    NoAudit,
    /// lockrun runs in a user namespace other than the machine's: kernel
    /// audit takes rules and login uids from the initial one only.
    UserNamespace,
    /// Kernel audit could not be asked (errno).
    NotReachable { errno: i32 },
    /// Audit is locked (`auditctl -e 2`): no rule may be added until boot.
    Locked,
    /// lockrun's own login uid is set, and the command could not set its own.
    LoginUidFixed(Fixed),
    /// A rule `-a task,never` of the host's: the processes it matches get
    /// no syscall records at all.
    TaskNever,
    /// A rule of the host's `exclude` list that may drop the records of
    /// type `msgtype` (0: any type) this needs.
    Excluded { msgtype: u32 },
    /// A test build told so (`LOCKRUN_TEST_SYSCALL_AUDIT=off`).
    OffForTests,
}

/// Why a login uid, once set, stays as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixed {
    /// The kernel's audit feature `loginuid_immutable` is on.
    Immutable,
    /// The kernel's audit feature `only_unset_loginuid` is on.
    OnlyUnset,
    /// lockrun lacks `CAP_AUDIT_CONTROL`.
    NoCapability,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoAudit => f.write_str("the kernel has no audit (CONFIG_AUDIT)"),
            Self::UserNamespace => f.write_str(
                "lockrun runs in a user namespace of its own, and kernel audit takes rules and \
                 login uids from the machine's only",
            ),
            Self::NotReachable { errno } => write!(
                f,
                "kernel audit could not be asked: {}",
                nix::Error::from_raw(*errno)
            ),
            Self::Locked => f.write_str(
                "kernel audit is locked (enabled 2, `auditctl -e 2`): no rule may be added until \
                 the next boot",
            ),
            Self::LoginUidFixed(how) => write!(
                f,
                "lockrun's login uid is set, and the run cannot take one of its own: {}",
                match how {
                    Fixed::Immutable => "the audit feature loginuid_immutable is on",
                    Fixed::OnlyUnset => "the audit feature only_unset_loginuid is on",
                    Fixed::NoCapability => "lockrun lacks CAP_AUDIT_CONTROL",
                }
            ),
            Self::TaskNever => f.write_str(
                "the host's audit rules leave processes out of syscall auditing (`-a task,never`)",
            ),
            Self::Excluded { msgtype: 0 } => {
                f.write_str("an exclude rule of the host's audit rules may drop the records needed")
            }
            Self::Excluded { msgtype } => write!(
                f,
                "an exclude rule of the host's audit rules drops the records of type {msgtype}"
            ),
            Self::OffForTests => f.write_str("turned off in this test build"),
        }
    }
}

/// What was found of kernel audit where it can be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyscallAudit {
    /// Audit is on (`enabled` 1); if off, a run turns it on first.
    pub audit_on: bool,
}
