//! Filesystem confinement with Landlock, at the ABI of the running kernel
//! ([`crate::kernel`]: every right up to ABI 7, Linux 6.15; scoping from
//! ABI 6, Linux 6.12; at least ABI 1, Linux 5.13). What an older ABI
//! lacks is held another way, or named as a gap the policy must accept:
//! without the truncate right (ABI < 3, Linux < 6.2) the seccomp
//! supervisor truncates for the command only beneath the writable roots
//! ([`crate::supervise::truncate`]); without the device ioctl right (ABI
//! < 5, Linux < 6.10) device files are opened only under `/dev`, where the
//! rules here name the few a run may open: the child makes every other
//! mount of its namespace `nodev`
//! ([`crate::kernel::Kernel::devices_only_in_dev`]), beneath the writable
//! roots too.
//!
//! What it enforces:
//! - **writes** (every write right of ABI 7: write, truncate, remove, make
//!   any kind of node, refer, ioctl on devices) only beneath the worktree, the
//!   run's temp dir, `fs.writable`, and the few device files a shell needs
//!   (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`, `/dev/ptmx`, and the
//!   pty on the caller's stdio — only read/write, plus `ioctl_dev`);
//! - **reads** (read file, read dir, execute) everywhere except the denied
//!   paths: the secret floor, `fs.deny_read`, and `<state>/runs` (other runs;
//!   the run's own temp dir is granted again beneath it). Landlock only
//!   allows, so a denied path is enforced by granting its siblings, on the way
//!   down from each granted root; ancestors of a denied path get no rule of
//!   their own and are therefore **not listable** (their entries stay
//!   reachable by name). Inside a writable tree the same holds: the dirs
//!   between a writable root and a denied path beneath it get no rule, so
//!   new entries cannot be made directly in them (existing entries stay
//!   writable); each run warns of such dirs before the command starts
//!   ([`Narrowed`]). A listing that fails refuses the run.
//! - **scoping**: no signals and no abstract unix socket connects to
//!   processes outside the sandbox (`Scope::Signal | Scope::AbstractUnixSocket`).
//!
//! Every right of the ABI in use is a hard requirement: a kernel that cannot
//! enforce one of them (or whose ABI is below `run.landlock_abi`) refuses
//! the run. The ruleset is
//! built here, in the parent; the child only calls `landlock_restrict_self`
//! on [`FsSandbox::ruleset_fd`] (see [`crate::sys`]).
//!
//! Not covered by Landlock (known limits, enforced elsewhere or not at all):
//! metadata changes (`chmod`, `chown`, `utimes`, `setxattr`, `removexattr`)
//! — the seccomp supervisor ([`crate::supervise`]) performs them for the
//! command only beneath [`FsSandbox::writable_roots`] (set-id bits stay
//! refused, but set-group-ID on a directory:
//! [`crate::seccomp::set_id_refused`]), and so are the inode-attribute ioctls
//! (`FS_IOC_SETFLAGS` for `chattr`, `FS_IOC_FSSETXATTR`, …: see
//! [`crate::seccomp::NOTIFY_IOCTLS`]). Hard links that already exist outside
//! a denied dir are not refused by Landlock, which decides by path: their
//! inodes are guarded instead ([`links`]: fanotify permission events). The
//! command cannot make one: Landlock refuses a link that would widen a
//! file's rights.

pub mod links;

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use std::os::unix::fs::OpenOptionsExt;

use crate::policy::Policy;

/// The ABI whose rights lockrun handles: the kernel's
/// ([`crate::kernel::Kernel::landlock`]), at most the newest lockrun knows.
fn abi() -> ABI {
    match crate::kernel::Kernel::get().landlock_abi() {
        0 | 1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// Whether the ABI in use scopes signals and abstract unix sockets (ABI 6).
fn scoping() -> bool {
    crate::kernel::Kernel::get().landlock_abi() >= 6
}

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(
        "Landlock, which confines the run's writes, is not available in this kernel: {0}; lockrun will not run the command unconfined"
    )]
    Unavailable(crate::kernel::NoLandlock),
    #[error(
        "the kernel's Landlock ABI is {have}, the policy demands {want} (use a newer kernel, or lower run.landlock_abi knowing what is lost; lockrun will not run the command with less)"
    )]
    AbiTooOld { have: i32, want: u8 },
    #[error(
        "landlock_create_ruleset: {0} (this kernel cannot enforce every filesystem right of its own ABI)"
    )]
    Ruleset(#[source] landlock::RulesetError),
    #[error("landlock_add_rule for {path}: {source}")]
    Rule {
        path: PathBuf,
        source: landlock::RulesetError,
    },
    #[error("open {path} (O_PATH|O_NOFOLLOW): {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("listing {path} to deny {denied}: {source} (a deny list that cannot be built refuses the run)")]
    List {
        path: PathBuf,
        denied: PathBuf,
        source: std::io::Error,
    },
    #[error("the ruleset has no file descriptor (Landlock unsupported)")]
    NoFd,
    #[error(transparent)]
    OtherNames(#[from] links::LinksError),
    #[error(
        "the thread building the Landlock ruleset panicked (a bug in lockrun; please report it)"
    )]
    WalkPanicked,
}

/// A Landlock ruleset built in the parent, ready for `restrict_self` in the child.
#[derive(Debug)]
pub struct FsSandbox {
    ruleset: OwnedFd,
    /// What was granted, for `policy show` and debugging.
    grants: Vec<(PathBuf, Grant)>,
    /// The writable roots that exist, canonical (for the seccomp supervisor).
    writable: Vec<PathBuf>,
    /// The filesystems the run gets of its own ([`own_filesystems`]).
    own: Vec<OwnFs>,
    /// The denied-read paths, canonical.
    denied: Vec<PathBuf>,
    /// Those of them that exist, as the walk found them.
    denied_found: Vec<PathBuf>,
    /// The writable dirs that could not be granted whole.
    narrowed: Vec<Narrowed>,
    /// The listed dirs whose entries cost each run many rules.
    crowded: Vec<Crowded>,
    /// `(st_dev, st_ino)` of what may be written outside the writable roots.
    written_outside: Vec<(u64, u64)>,
}

/// The kind of rule a path received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Read,
    ReadWrite,
    Device,
    Tty,
    /// List a directory (and the directories beneath), read nothing in it: `/dev`.
    List,
    /// Write and truncate, not read: the file or FIFO the caller's stdout or
    /// stderr is open on for writing, so that `> /dev/stdout` and
    /// `tee /dev/stderr` reach it as they do outside. The command can do as
    /// much through the descriptor it inherits (`write`, `ftruncate`).
    Stdio,
}

fn read_rights() -> BitFlags<AccessFs> {
    AccessFs::from_read(abi())
}

fn all_rights() -> BitFlags<AccessFs> {
    AccessFs::from_all(abi())
}

/// The Landlock filesystem rights a run's ruleset handles (every right of
/// the pinned ABI), as the kernel's bits.
#[must_use]
pub fn handled_rights() -> u64 {
    all_rights().bits()
}

/// The rights `grant` gives, as the kernel's bits.
#[must_use]
pub fn grant_rights(grant: Grant) -> u64 {
    rights(grant).bits()
}

fn rights(grant: Grant) -> BitFlags<AccessFs> {
    all_rights() & granted(grant)
}

/// What `grant` gives, of every right lockrun knows: [`rights`] keeps
/// those the ABI in use handles.
fn granted(grant: Grant) -> BitFlags<AccessFs> {
    match grant {
        Grant::Read => read_rights(),
        Grant::ReadWrite => all_rights(),
        // Terminals need their ioctls. null/zero/full have none of their own:
        // granting ioctl_dev there only keeps isatty() probes (TCGETS →
        // ENOTTY) from being logged as refusals.
        Grant::Device | Grant::Tty => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev,
        Grant::List => AccessFs::ReadDir.into(),
        Grant::Stdio => AccessFs::WriteFile | AccessFs::Truncate,
    }
}

/// What of `/dev` a run may read (besides the devices it may also write).
///
/// A run is uid 0 without capabilities, and uid 0 owns root's device nodes:
/// reading everywhere would hand it the console's screen and keystrokes
/// (`/dev/vcs*`, `/dev/tty[0-9]*`, `/dev/ttyS*`), raw disks (every file's
/// bytes, whatever the deny list), and more. So `/dev` is listable, and
/// readable only here — the set a build or a shell uses, as bubblewrap's
/// `--dev` provides. Refused elsewhere in `/dev`: EACCES. Not the machine's
/// `/dev/mqueue` (a queue's file, opened for reading, receives its
/// messages: the run has its own, [`OwnFs::MessageQueues`]) nor
/// `/dev/hugepages` (other processes' huge-page-backed memory, as files).
pub const DEV_READABLE: [&str; 13] = [
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin",
    "stdout", "stderr",
];

/// The devices of `/dev` a run may read, write and drive by ioctl
/// ([`Grant::Device`]).
pub const DEVICES: [&str; 3] = ["null", "zero", "full"];

/// The terminals of `/dev` a run may open ([`Grant::Tty`]), besides its own
/// in `/dev/pts` and the caller's.
pub const TERMINALS: [&str; 2] = ["tty", "ptmx"];

/// A filesystem of the run's own, mounted over the machine's in the run's
/// mount namespace by the child ([`crate::sys::OwnMount`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnFs {
    /// `/dev/shm`, an empty tmpfs: POSIX shared memory and named semaphores
    /// (Python's multiprocessing) work, shared with nothing outside.
    SharedMemory,
    /// `/dev/pts`, a new devpts instance: the command can open terminals
    /// (`openpty`, `script`, tmux, a pty-driven tool runner), which
    /// `/dev/ptmx` allocates in the instance at the `pts` beside it (Linux
    /// 4.7), and no other process's terminal is there to open.
    Terminals,
    /// `/dev/mqueue`, the mqueue filesystem of the run's IPC namespace:
    /// POSIX message queues (`mq_open`) work, and are the run's own. The
    /// kernel opens them there by itself, so it is granted even where the
    /// machine has no `/dev/mqueue` to mount it on.
    MessageQueues,
    /// `/proc`, a procfs instance of its own that shows only the processes
    /// the command may ptrace-read (`hidepid=ptraceable`, Linux 5.8): the
    /// run's own. Every other process — another run's command, the caller's
    /// shell, the machine's daemons — has no entry there (`ENOENT`), so its
    /// command line, name, state and cgroup are out of reach, as under
    /// bubblewrap's `--unshare-pid`. Landlock's ptrace scoping is what says
    /// no to those outside; it records each it hides from a listing (an
    /// outside process with capabilities is refused earlier, unrecorded).
    Processes,
}

impl OwnFs {
    pub const ALL: [OwnFs; 4] = [
        OwnFs::SharedMemory,
        OwnFs::Terminals,
        OwnFs::MessageQueues,
        OwnFs::Processes,
    ];

    /// Where it is mounted.
    #[must_use]
    pub fn path(self) -> &'static Path {
        Path::new(match self {
            OwnFs::SharedMemory => "/dev/shm",
            OwnFs::Terminals => "/dev/pts",
            OwnFs::MessageQueues => "/dev/mqueue",
            OwnFs::Processes => "/proc",
        })
    }

    /// Whether the kernel opens files there without a path the command
    /// names (`mq_open`): then lockrun makes and grants it itself, also
    /// where it cannot be mounted at [`path`](Self::path), and the child
    /// only moves it there.
    #[must_use]
    pub fn reached_without_path(self) -> bool {
        self == OwnFs::MessageQueues
    }

    /// The filesystem to make.
    #[must_use]
    pub fn new_fs(self) -> crate::sys::NewFs {
        use libc::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID};
        let (fstype, attrs, options): (_, _, &'static [_]) = match self {
            OwnFs::SharedMemory => (
                c"tmpfs",
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                &[(c"mode", Some(c"1777"))],
            ),
            OwnFs::Terminals => (
                c"devpts",
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                &[
                    (c"newinstance", None),
                    (c"ptmxmode", Some(c"0666")),
                    (c"mode", Some(c"0620")),
                ],
            ),
            OwnFs::MessageQueues => (
                c"mqueue",
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                &[],
            ),
            // `ptraceable`, not `invisible`: the latter shows every process
            // to members of its `gid` option's group, root's by default,
            // which a run's command often is.
            OwnFs::Processes => (
                c"proc",
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                &[(c"hidepid", Some(c"ptraceable"))],
            ),
        };
        crate::sys::NewFs {
            fstype,
            attrs,
            options,
        }
    }

    /// The Landlock rights granted beneath it: every right in the run's
    /// shared memory and message queues, as in its temp dir; terminals are
    /// read, written and driven by ioctl, and listed; its processes are
    /// read, as the machine's `/proc` was (nothing there is written).
    #[must_use]
    pub fn rights(self) -> u64 {
        match self {
            OwnFs::SharedMemory | OwnFs::MessageQueues => all_rights().bits(),
            OwnFs::Terminals => (rights(Grant::Tty) | AccessFs::ReadDir).bits(),
            OwnFs::Processes => rights(Grant::Read).bits(),
        }
    }

    /// Whether the command may change metadata there (the supervisor's
    /// writable roots): in its shared memory and message queues, as in its
    /// temp dir.
    #[must_use]
    pub fn writable(self) -> bool {
        matches!(self, OwnFs::SharedMemory | OwnFs::MessageQueues)
    }
}

/// The filesystems a run gets of its own ([`OwnFs`]).
///
/// Each where its path is a directory (not a symlink: the mount goes on the
/// path the machine uses) and no writable root lies at, beneath or above
/// it: a worktree (or temp dir) on the machine's `/dev/shm` would be hidden
/// by the run's own, and `--allow-write /dev/shm` asks for the machine's,
/// shared. In those cases the machine's stays: `/dev/shm` as before,
/// `/dev/pts` listable only, so that no other process's terminal can be
/// read; the run's message queues are granted unmounted
/// ([`OwnFs::reached_without_path`]), the machine's `/dev/mqueue` only
/// by the writable root that holds it. Mounting needs `CAP_SYS_ADMIN`, which a run needs anyway (its IPC
/// namespace); a mount that fails refuses the run (exit 125, naming it).
#[must_use]
pub fn own_filesystems(writable: &[PathBuf]) -> Vec<OwnFs> {
    OwnFs::ALL
        .into_iter()
        .filter(|own| {
            let at = own.path();
            let dir = std::fs::symlink_metadata(at).is_ok_and(|m| m.is_dir());
            dir && !writable
                .iter()
                .any(|w| w.starts_with(at) || at.starts_with(w))
        })
        .collect()
}

/// A filesystem of the machine's that no run may see, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HiddenFs {
    /// Its type, as mountinfo names it.
    pub fstype: &'static str,
    /// What a run could read there (for `policy show`).
    pub holds: &'static str,
}

/// The machine's filesystems no run may see. A run is often uid 0, which
/// owns them, and reading them needs no capability:
/// - tracefs's `trace` holds the events the machine's tracers enabled,
///   from every process (the files other runs open, what they exec), and
///   reading `trace_pipe` takes those events from the tracer they were
///   meant for; debugfs holds the same and more;
/// - bpffs holds the names of every pinned eBPF object (lockrun's own:
///   which build runs here), and a pinned map whose types the kernel knows
///   (BTF) reads as its entries;
/// - securityfs holds the LSMs' state and, where IMA is on, the list of
///   every file the machine's processes ran or read, with its hash;
/// - pstore holds the kernel logs of earlier crashes, the log a refused
///   `syslog` keeps from a run.
///
/// No build or agent reads them (their tools, perf, bpftool, bpftrace,
/// need calls a run is refused anyway).
///
/// Each mount of them is hidden, wherever it is, under an empty read-only
/// tmpfs that the child mounts over it in the run's mount namespace
/// ([`hidden_mounts`]). Not a Landlock denial: that would split `/sys` and
/// `/sys/kernel` into a rule per entry on every run (~0.4 ms here), where
/// a mount costs only where the machine has one, and catches every place
/// it is mounted.
pub const HIDDEN_FS: [HiddenFs; 5] = [
    HiddenFs {
        fstype: "tracefs",
        holds: "other processes' trace events",
    },
    HiddenFs {
        fstype: "debugfs",
        holds: "the kernel's internals and trace events",
    },
    HiddenFs {
        fstype: "bpf",
        holds: "pinned eBPF objects, and typed maps' entries",
    },
    HiddenFs {
        fstype: "securityfs",
        holds: "the LSMs' state and IMA's list of every file run",
    },
    HiddenFs {
        fstype: "pstore",
        holds: "earlier crashes' kernel logs",
    },
];

/// What a hidden mount shows a run: an empty, read-only tmpfs.
#[must_use]
pub fn empty_fs() -> crate::sys::NewFs {
    use libc::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    crate::sys::NewFs {
        fstype: c"tmpfs",
        attrs: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        options: &[(c"mode", Some(c"0555"))],
    }
}

/// A path where a machine keeps secrets of its own, and what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineSecret {
    pub path: &'static str,
    pub holds: &'static str,
}

/// The machine's own secrets, masked in every run whatever the policy says.
///
/// A run is often uid 0, and uid 0 without capabilities still passes the
/// owner's permission bits of every file root owns: `/etc/shadow` (0640
/// root:shadow), the SSH host keys (0600), `/etc/ssl/private` (0710) read
/// as they would for root. Landlock could deny them only by splitting
/// `/etc` and `/var/lib` into a rule per entry (~150 more rules here, about
/// twice the walk every run waits for). So each that exists is masked in
/// the run's mount namespace instead ([`masks`]), under a bind of an
/// empty dir or file of mode 0000 (a bind costs ~18 µs here, a tmpfs of
/// its own ~43). Both answer `EACCES`, as a denial does, but the kernel
/// records nothing (the refusal is the permission bits', not Landlock's).
pub const MACHINE_SECRETS: [MachineSecret; 22] = [
    secret("/etc/shadow", "password hashes"),
    secret("/etc/shadow-", "password hashes"),
    secret("/etc/gshadow", "group password hashes"),
    secret("/etc/gshadow-", "group password hashes"),
    secret("/etc/security/opasswd", "old password hashes"),
    secret("/etc/ssh/ssh_host_rsa_key", "the host's SSH keys"),
    secret("/etc/ssh/ssh_host_ecdsa_key", "the host's SSH keys"),
    secret("/etc/ssh/ssh_host_ed25519_key", "the host's SSH keys"),
    secret("/etc/ssh/ssh_host_dsa_key", "the host's SSH keys"),
    secret("/etc/ssl/private", "TLS private keys"),
    secret("/etc/pki/tls/private", "TLS private keys"),
    secret("/etc/letsencrypt", "TLS private keys"),
    secret("/etc/wireguard", "WireGuard keys"),
    secret(
        "/etc/NetworkManager/system-connections",
        "network passwords",
    ),
    secret("/etc/kubernetes", "Kubernetes cluster credentials"),
    secret("/var/lib/kubelet", "Kubernetes pods' secrets"),
    secret("/var/lib/docker", "containers' files and secrets"),
    secret("/var/lib/containerd", "containers' files and secrets"),
    secret("/var/lib/cloud", "cloud-init's user data"),
    secret("/var/log/audit", "the audit log: other runs' refusals"),
    secret("/var/log/journal", "every service's log"),
    secret("/run/log/journal", "every service's log"),
];

const fn secret(path: &'static str, holds: &'static str) -> MachineSecret {
    MachineSecret { path, holds }
}

/// How one of [`MACHINE_SECRETS`] is masked where the machine has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mask {
    /// A directory, under a bind of an empty dir of mode 0000.
    Dir(PathBuf),
    /// A file, under a bind of an empty file of mode 0000.
    File(PathBuf),
}

/// The [`MACHINE_SECRETS`] this machine has, each at its canonical path.
/// Most machines have few of them: an absent one costs one `lstat`.
#[must_use]
pub fn machine_secrets() -> Vec<Mask> {
    MACHINE_SECRETS
        .iter()
        .filter(|s| std::fs::symlink_metadata(s.path).is_ok())
        .filter_map(|s| {
            let at = Path::new(s.path).canonicalize().ok()?;
            match std::fs::metadata(&at).ok()? {
                m if m.is_dir() => Some(Mask::Dir(at)),
                m if m.is_file() => Some(Mask::File(at)),
                _ => None,
            }
        })
        .collect()
}

/// Of `found` ([`machine_secrets`]), those to mask, outermost first: none
/// at, beneath or above a writable root (masking it would hide the
/// worktree, or what the caller asked to write), and none at or beneath
/// another.
#[must_use]
pub fn masks(found: Vec<Mask>, writable: &[PathBuf]) -> Vec<Mask> {
    let apart = found.into_iter().filter(|m| {
        let at = m.path();
        !writable
            .iter()
            .any(|w| w.starts_with(at) || at.starts_with(w))
    });
    outermost(apart.collect(), Mask::path)
}

/// `items` outermost first (fewest path components), without any at or
/// beneath one before it: mounting over that one hides it too.
fn outermost<T>(mut items: Vec<T>, path: impl Fn(&T) -> &Path) -> Vec<T> {
    items.sort_by_key(|i| path(i).components().count());
    let mut out: Vec<T> = Vec::new();
    for i in items {
        if !out.iter().any(|o| path(&i).starts_with(path(o))) {
            out.push(i);
        }
    }
    out
}

impl Mask {
    /// Where it goes.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Mask::Dir(p) | Mask::File(p) => p,
        }
    }
}

/// The mount points of `mountinfo` (`/proc/self/mountinfo`'s text) whose
/// filesystem is one of [`HIDDEN_FS`], outermost first, and none
/// beneath another (hiding that one hides it too).
#[must_use]
pub fn hidden_mounts(mountinfo: &str) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt as _;
    let found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| {
            let (fields, after) = line.split_once(" - ")?;
            let fstype = after.split(' ').next()?;
            let at = fields.split(' ').nth(4)?;
            HIDDEN_FS
                .iter()
                .any(|h| h.fstype == fstype)
                .then(|| PathBuf::from(std::ffi::OsString::from_vec(unescape_octal(at))))
        })
        .collect();
    outermost(found, PathBuf::as_path)
}

/// mountinfo's escapes (`\040` for a space, `\011`, `\012`, `\134`) undone.
fn unescape_octal(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let Some(d) = code {
            out.push(
                d.iter()
                    .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
            );
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The Landlock ABI in use ([`crate::kernel`]), or why there is none.
pub fn kernel_abi() -> Result<i32, FsError> {
    crate::kernel::Kernel::get()
        .landlock
        .map(i32::from)
        .map_err(FsError::Unavailable)
}

/// Whether this kernel's Landlock is there and at least the ABI `policy`
/// demands (`run.landlock_abi`).
pub fn check_abi(policy: &Policy) -> Result<(), FsError> {
    let have = kernel_abi()?;
    if have < i32::from(policy.run.landlock_abi) {
        return Err(FsError::AbiTooOld {
            have,
            want: policy.run.landlock_abi,
        });
    }
    Ok(())
}

/// A ruleset's walk halfway: the read rules made (the walk from `/` around
/// the denied paths, nearly all of its rules), the writable roots not yet
/// ([`ReadWalk::finish`]). What a run starts before its run dir exists,
/// whose temp dir is one of those roots.
pub struct ReadWalk {
    plan: Plan,
    denied: BTreeSet<PathBuf>,
    own: Vec<OwnFs>,
    /// What [`Roots::writable_of`] is asked again once the run dir is made.
    run_tmp: PathBuf,
    runs_dir: PathBuf,
}

impl ReadWalk {
    /// The writable roots' rules, the devices' and the caller's stdio
    /// files': the ruleset done, for the `policy` the walk was begun for.
    /// `run_tmp` must exist now. Should the
    /// writable roots found now ask for other filesystems of the run's own
    /// than those the read walk left out (`run_tmp` was not canonical, so
    /// its path was not the one [`FsSandbox::begin`] judged), the whole
    /// walk is made again, as [`FsSandbox::prepare`] makes it.
    pub fn finish(self, policy: &Policy) -> Result<FsSandbox, FsError> {
        let writable = Roots::writable_of(policy, &self.run_tmp);
        if own_filesystems(&writable) != self.own {
            return FsSandbox::prepare(policy, &self.run_tmp, &self.runs_dir);
        }
        FsSandbox::complete(self.plan, writable, self.denied, self.own)
    }
}

impl FsSandbox {
    /// Build the ruleset for `policy`, with `run_tmp` writable and the rest of
    /// the state dir (other runs under `runs_dir`, other agents' dirs)
    /// unreadable; writable paths beneath it (a preset's agent dir) stay open.
    pub fn prepare(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Result<Self, FsError> {
        let roots = Roots::of(policy, run_tmp, runs_dir);
        let writable = roots.writable.clone();
        let walk = Self::walk_read(policy, run_tmp, runs_dir, roots)?;
        Self::complete(walk.plan, writable, walk.denied, walk.own)
    }

    /// [`prepare`](Self::prepare)'s walk from `/`, for a run whose temp
    /// dir is to be `run_tmp` (canonical: beneath the canonical `runs_dir`)
    /// and need not exist yet; [`ReadWalk::finish`] adds the rest once it
    /// does. Nothing of the read walk depends on the temp dir but its
    /// path: a denied path written `{tmp}/…`, and whether the run gets a
    /// filesystem of its own where it lies (a state dir on `/dev/shm`).
    pub fn begin(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Result<ReadWalk, FsError> {
        let mut roots = Roots::of(policy, run_tmp, runs_dir);
        if !roots.writable.iter().any(|w| w == run_tmp) {
            roots.writable.push(run_tmp.to_path_buf());
        }
        Self::walk_read(policy, run_tmp, runs_dir, roots)
    }

    fn walk_read(
        policy: &Policy,
        run_tmp: &Path,
        runs_dir: &Path,
        roots: Roots,
    ) -> Result<ReadWalk, FsError> {
        check_abi(policy)?;

        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(all_rights());
        let ruleset = if scoping() {
            ruleset.and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        } else {
            ruleset
        };
        let ruleset: RulesetCreated = ruleset
            .and_then(Ruleset::create)
            .map_err(FsError::Ruleset)?;
        let own = own_filesystems(&roots.writable);
        let mut plan = Plan::adding_to(ruleset);
        plan.own.clone_from(&own);
        plan.grant_except(Path::new("/"), Grant::Read, &roots.denied)?;
        Ok(ReadWalk {
            plan,
            denied: roots.denied,
            own,
            run_tmp: run_tmp.to_path_buf(),
            runs_dir: runs_dir.to_path_buf(),
        })
    }

    /// The rest of [`prepare`](Self::prepare) once the read rules are in
    /// `plan`: the `writable` roots (existing, canonical) split around the
    /// `denied` paths beneath them, the devices, the caller's stdio.
    fn complete(
        mut plan: Plan,
        writable: Vec<PathBuf>,
        denied: BTreeSet<PathBuf>,
        own: Vec<OwnFs>,
    ) -> Result<Self, FsError> {
        let roots = Roots { denied, writable };
        roots.grant_writable(&mut plan)?;
        for dev in DEVICES {
            plan.push_if_exists(&Path::new("/dev").join(dev), Grant::Device)?;
        }
        for tty in TERMINALS {
            plan.push_if_exists(&Path::new("/dev").join(tty), Grant::Tty)?;
        }
        for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            plan.push_stdio(fd)?;
        }
        let narrowed = plan.take_narrowed();
        let crowded = plan.take_crowded();
        let fd: Option<OwnedFd> = plan.ruleset.take().and_then(Into::into);
        Ok(Self {
            ruleset: fd.ok_or(FsError::NoFd)?,
            grants: plan.grants,
            narrowed,
            crowded,
            written_outside: plan.written_outside,
            writable: roots.writable,
            own,
            denied: roots.denied.into_iter().collect(),
            denied_found: {
                let mut d = plan.denied_found;
                d.sort();
                d.dedup();
                d
            },
        })
    }

    /// The filesystems the run gets of its own, mounted by the child
    /// ([`crate::sys::OwnMount`]); the machine's where one is not listed.
    #[must_use]
    pub fn own_filesystems(&self) -> &[OwnFs] {
        &self.own
    }

    /// The ruleset's descriptor, for `landlock_restrict_self` in the child.
    #[must_use]
    pub fn ruleset_fd(&self) -> &OwnedFd {
        &self.ruleset
    }

    /// Every path that received a rule, and which.
    #[must_use]
    pub fn grants(&self) -> &[(PathBuf, Grant)] {
        &self.grants
    }

    /// The writable roots that exist (canonical): where the seccomp
    /// supervisor performs metadata changes for the command.
    #[must_use]
    pub fn writable_roots(&self) -> &[PathBuf] {
        &self.writable
    }

    /// The denied-read paths that exist, as the walk found them listing
    /// their parents (canonical; one beneath another is not listed, nor found).
    #[must_use]
    pub fn denied_found(&self) -> &[PathBuf] {
        &self.denied_found
    }

    /// The denied-read paths (canonical): nothing beneath them is writable.
    #[must_use]
    pub fn denied(&self) -> &[PathBuf] {
        &self.denied
    }

    /// `(st_dev, st_ino)` of the objects the command may write outside the
    /// writable roots: the devices and the caller's stdio files (a rule on
    /// a file holds for its inode, whatever name reaches it). With these
    /// excepted, a regular file the command holds open for writing lies
    /// beneath a writable root, or did when it was opened.
    #[must_use]
    pub fn written_outside(&self) -> &[(u64, u64)] {
        &self.written_outside
    }

    /// The writable dirs that could not be granted whole (see [`Narrowed`]).
    #[must_use]
    pub fn narrowed(&self) -> &[Narrowed] {
        &self.narrowed
    }

    /// The dirs the walk listed that hold so many entries that granting
    /// them one by one is a noticeable part of every run's start-up.
    #[must_use]
    pub fn crowded(&self) -> &[Crowded] {
        &self.crowded
    }

    /// Give up the ruleset descriptor (moved into the child's plan).
    #[must_use]
    pub fn into_fd(self) -> OwnedFd {
        self.ruleset
    }
}

/// The roots of a run's ruleset: what is denied, and what is writable.
struct Roots {
    /// Denied paths, as written and canonical ([`canonical_set`]).
    denied: BTreeSet<PathBuf>,
    /// Writable paths that exist (canonical). Each is granted whole unless
    /// a denied path lies beneath it, whether or not it lies beneath one
    /// itself: the more specific grant wins (the run's own tmp beneath
    /// `<state>/runs`, `{state}/agents/<name>`), and the more specific
    /// denial beneath it wins again.
    writable: Vec<PathBuf>,
}

impl Roots {
    fn of(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Self {
        let mut denied: Vec<PathBuf> = Policy::secret_floor(&policy.home);
        denied.extend(policy.fs.deny_read.iter().map(|p| p.resolve(run_tmp)));
        denied.push(runs_dir.to_path_buf());
        denied.push(policy.run.state_dir.clone());
        let denied = canonical_set(&denied);
        let writable = Self::writable_of(policy, run_tmp);
        Self { denied, writable }
    }

    /// The writable roots alone, canonical: what [`ReadWalk::finish`]
    /// asks again once the temp dir exists (the denied paths it keeps
    /// from the walk).
    fn writable_of(policy: &Policy, run_tmp: &Path) -> Vec<PathBuf> {
        let mut writable = vec![policy.worktree.clone(), run_tmp.to_path_buf()];
        writable.extend(policy.fs.writable.iter().map(|p| p.resolve(run_tmp)));
        // A writable path that does not exist grants nothing (like a bind
        // of nothing).
        writable
            .iter()
            .filter_map(|w| w.canonicalize().ok())
            .collect()
    }

    /// Add the writable roots' rules: whole, or split around the denied
    /// paths beneath them (which records the dirs it lists in
    /// [`Plan::narrowed`]). Only the denied paths beneath a root count for
    /// it: one it lies in is what its grant overrides.
    fn grant_writable(&self, plan: &mut Plan) -> Result<(), FsError> {
        for root in &self.writable {
            let beneath: BTreeSet<PathBuf> = self
                .denied
                .iter()
                .filter(|d| strictly_beneath(d, root))
                .cloned()
                .collect();
            plan.grant_except(root, Grant::ReadWrite, &beneath)?;
        }
        Ok(())
    }
}

/// A writable dir that Landlock cannot grant whole, in the audit log's words.
pub use crate::audit::Narrowed;

/// `paths`, shown and joined with `, `.
fn joined(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// A directory listed on the way to a denied path that holds so many
/// entries (at least [`CROWDED_ENTRIES`]) that the rule for each, made on
/// every run, shows in the start-up: a state dir in a shared `/tmp` of
/// thousands of entries costs a run ~1–5 µs for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crowded {
    pub dir: PathBuf,
    /// Its entries, each granted by a rule of its own (or skipped: a symlink,
    /// a socket).
    pub entries: usize,
    /// Its entries at or beneath which a denied path lies: what made the
    /// walk list it.
    pub toward: Vec<PathBuf>,
    /// What listing it and granting its entries took in this run (the dirs
    /// listed beneath it not included); `None` for a walk that made no rules
    /// (`policy show`).
    pub took: Option<std::time::Duration>,
}

/// From how many entries a listed dir is [`Crowded`].
pub const CROWDED_ENTRIES: usize = 1000;

impl std::fmt::Display for Crowded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{dir} holds {n} entries, and each gets a Landlock rule of its own on every run",
            dir = self.dir.display(),
            n = self.entries,
        )?;
        if let Some(took) = self.took {
            write!(f, " ({:.1} ms in this one)", took.as_secs_f64() * 1000.0)?;
        }
        write!(
            f,
            ", because denied paths lie at or beneath {toward} (Landlock only grants, so a \
             denied path's siblings are granted one by one); a state dir (--state-dir) or denied \
             path in a less crowded directory starts faster",
            toward = joined(&self.toward)
        )
    }
}

/// What the walk a run makes finds in `policy`, here, before any run: the
/// writable dirs it cannot grant whole ([`Narrowed`]) and the crowded dirs
/// it lists ([`Crowded`]). What `policy show` warns of.
#[derive(Debug, Default)]
pub struct Findings {
    pub narrowed: Vec<Narrowed>,
    pub crowded: Vec<Crowded>,
}

/// The [`Findings`] of the walk a run makes for `policy`, made without a
/// ruleset. A dir that cannot be listed ends that part of the walk here; a
/// run refuses to start then, with its reason.
#[must_use]
pub fn findings(policy: &Policy, run_tmp: &Path, runs_dir: &Path) -> Findings {
    let roots = Roots::of(policy, run_tmp, runs_dir);
    let mut plan = Plan::default();
    let _ = plan.grant_except(Path::new("/"), Grant::Read, &roots.denied);
    let _ = roots.grant_writable(&mut plan);
    Findings {
        narrowed: plan.take_narrowed(),
        crowded: plan.take_crowded(),
    }
}

/// Denied paths as written and canonical (a symlinked `~/.ssh` denies its
/// target). A path that does not exist yet is canonicalized through its
/// deepest existing ancestor, so that its real parent is still split and
/// creating it later does not expose it.
fn canonical_set(paths: &[PathBuf]) -> BTreeSet<PathBuf> {
    // The secret floor is ~20 paths under the same home, most of them
    // absent: each prefix is resolved once, with one `readlink` (realpath
    // would take one per component, for every path).
    let mut resolved = std::collections::HashMap::new();
    let mut out = BTreeSet::new();
    for p in paths {
        out.insert(p.clone());
        out.insert(resolve(p, &mut resolved));
    }
    out
}

/// `path` canonical, one component at a time on its resolved parent: a
/// component that is a symlink is resolved whole (`realpath`), one that is
/// not, or is absent, stands as it is. `cache` holds every prefix resolved.
fn resolve(path: &Path, cache: &mut std::collections::HashMap<PathBuf, PathBuf>) -> PathBuf {
    if let Some(c) = cache.get(path) {
        return c.clone();
    }
    let c = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if path.is_absolute() => {
            let joined = resolve(parent, cache).join(name);
            if std::fs::read_link(&joined).is_ok() {
                // A dangling link stands for itself.
                joined.canonicalize().unwrap_or(joined)
            } else {
                joined
            }
        }
        // `/`, a path ending in `..`, or a relative one.
        _ => path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
    };
    cache.insert(path.to_path_buf(), c.clone());
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of the device files a run may open in `/dev`, only random and
    /// urandom lack the device ioctl right, and their ioctls do nothing
    /// without `CAP_SYS_ADMIN` but report the entropy count: where the
    /// kernel has no such right (ABI < 5), lockrun keeps device files to
    /// `/dev` ([`crate::kernel::Kernel::devices_only_in_dev`]) and grants
    /// nothing more. A device added to [`DEV_READABLE`] must be judged
    /// there first.
    #[test]
    fn the_devices_readable_in_dev_take_ioctls_only_where_granted() {
        use std::os::unix::fs::FileTypeExt as _;
        let mut devices = 0;
        for name in DEV_READABLE {
            // Not through a symlink: stdin, stdout, stderr are the
            // caller's stdio, granted as such.
            let Ok(m) = std::fs::symlink_metadata(Path::new("/dev").join(name)) else {
                continue;
            };
            let ft = m.file_type();
            if !(ft.is_char_device() || ft.is_block_device()) {
                continue;
            }
            devices += 1;
            assert!(
                DEVICES.contains(&name)
                    || TERMINALS.contains(&name)
                    || ["random", "urandom"].contains(&name),
                "/dev/{name} is readable in a run, a device, and granted no ioctl: judge what its \
                 ioctls do without Landlock's device ioctl right (crate::kernel::Kernel::devices_only_in_dev)"
            );
        }
        assert!(
            devices >= 5,
            "only {devices} devices of DEV_READABLE found in /dev"
        );
    }

    #[test]
    fn strictly_beneath_is_by_component() {
        let b = |p: &str, d: &str| strictly_beneath(Path::new(p), Path::new(d));
        assert!(b("/root/.ssh", "/root"));
        assert!(b("/root/.ssh", "/"));
        assert!(b("/a/b/c", "/a/b/"));
        assert!(!b("/root", "/root"));
        assert!(!b("/rootkit/x", "/root"));
        assert!(!b("/root", "/root/.ssh"));
        assert!(!b("/", "/"));
    }

    /// A dir of at least [`CROWDED_ENTRIES`] entries is found once, even
    /// when listed twice, naming each of its entries that leads to a denied
    /// path once (`a` and `a-b` sort apart among the denied paths: `a`,
    /// `a-b/x`, `a/y`); a dir of fewer entries (`few`) is not.
    #[test]
    fn crowded_dirs_name_the_entries_that_lead_to_denied_paths() {
        let scratch = crate::testing::Scratch::new("fs-crowded");
        let dir = scratch.path().to_path_buf();
        let many = dir.join("many");
        for d in ["a", "a-b", "few/v"] {
            std::fs::create_dir_all(many.join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        for i in 0..CROWDED_ENTRIES - 3 {
            std::fs::write(many.join(format!("f{i}")), b"").unwrap_or_else(|e| panic!("{e}"));
        }
        let many = many.canonicalize().unwrap_or_else(|e| panic!("{e}"));
        let denied: BTreeSet<PathBuf> = [
            many.join("a"),
            many.join("a-b/x"),
            many.join("a/y"),
            many.join("few/v"),
        ]
        .into_iter()
        .collect();
        // Listed twice, as a writable root over a denied path is: found once.
        let mut plan = Plan::default();
        for grant in [Grant::Read, Grant::ReadWrite] {
            plan.grant_except(&many, grant, &denied)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let got: Vec<(PathBuf, usize, Vec<PathBuf>)> = plan
            .take_crowded()
            .into_iter()
            .map(|c| (c.dir, c.entries, c.toward))
            .collect();
        assert_eq!(
            got,
            [(
                many.clone(),
                CROWDED_ENTRIES,
                vec![many.join("a"), many.join("a-b"), many.join("few")]
            )]
        );
    }

    /// A run begins its walk before its temp dir exists and finishes it
    /// once it does: the rules, roots and denials are those of the walk
    /// made at once, as `policy show` makes it (a state dir with a
    /// writable agent dir beneath it and a denied path in the worktree,
    /// so that both the read walk and a writable root are split).
    #[test]
    fn a_walk_begun_before_the_temp_dir_exists_makes_the_rules_of_one_made_after() {
        let scratch = crate::testing::Scratch::new("fs-begun");
        let base = scratch.path().to_path_buf();
        let (wt, state) = (base.join("wt"), base.join("state"));
        for d in [wt.join("secret"), wt.join("src"), state.join("agents/a")] {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
        }
        let policy = crate::policy::load(
            None,
            &crate::policy::Overrides {
                worktree: Some(wt.clone()),
                state_dir: Some(state.clone()),
                allow_write: vec![state.join("agents/a")],
                deny_read: vec![wt.join("secret")],
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let runs = state.join("runs");
        std::fs::create_dir_all(&runs).unwrap_or_else(|e| panic!("{e}"));
        let runs = runs.canonicalize().unwrap_or_else(|e| panic!("{e}"));
        let tmp = runs.join("r1").join("tmp");

        let begun = FsSandbox::begin(&policy, &tmp, &runs).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("{e}"));
        let split = begun.finish(&policy).unwrap_or_else(|e| panic!("{e}"));
        let whole = FsSandbox::prepare(&policy, &tmp, &runs).unwrap_or_else(|e| panic!("{e}"));

        assert_eq!(split.grants(), whole.grants());
        assert_eq!(split.writable_roots(), whole.writable_roots());
        assert_eq!(split.denied(), whole.denied());
        assert_eq!(split.denied_found(), whole.denied_found());
        assert_eq!(split.own_filesystems(), whole.own_filesystems());
        assert_eq!(split.narrowed(), whole.narrowed());
        // Not vacuous: the temp dir is granted, and the worktree was
        // listed around its secret by both the read walk and its own grant.
        let src = wt
            .canonicalize()
            .unwrap_or_else(|e| panic!("{e}"))
            .join("src");
        for (path, grant) in [
            (&tmp, Grant::ReadWrite),
            (&src, Grant::Read),
            (&src, Grant::ReadWrite),
        ] {
            assert!(
                split.grants().contains(&(path.clone(), grant)),
                "{path:?} {grant:?}"
            );
        }
        assert_eq!(split.narrowed().len(), 1, "{:?}", split.narrowed());
    }

    /// The walk's grants from `root` down, around `denied`, for a run that
    /// has the filesystems `own` of its own.
    fn walked(root: &str, denied: &[&str], own: Vec<OwnFs>) -> Vec<(PathBuf, Grant)> {
        let mut plan = Plan {
            own,
            ..Plan::default()
        };
        let denied: BTreeSet<PathBuf> = denied.iter().map(PathBuf::from).collect();
        plan.grant_except(Path::new(root), Grant::Read, &denied)
            .unwrap_or_else(|e| panic!("{e}"));
        plan.grants
    }

    /// `/dev`'s grants: with the run's own shared memory and terminals,
    /// the machine's get no rule; without, `/dev/pts` is listable only (no
    /// other process's terminal can be opened for reading), `/dev/shm`
    /// readable as before.
    #[test]
    fn the_machines_terminals_are_never_readable_and_hidden_when_the_run_has_its_own() {
        let grants = |own| walked("/dev", &[], own);
        let of = |g: &[(PathBuf, Grant)], p: &str| {
            g.iter().find(|(q, _)| q == Path::new(p)).map(|(_, g)| *g)
        };
        let machine = grants(Vec::new());
        assert_eq!(of(&machine, "/dev/pts"), Some(Grant::List));
        assert_eq!(of(&machine, "/dev/shm"), Some(Grant::Read));
        assert_eq!(of(&machine, "/dev/null"), Some(Grant::Read));
        let own = grants(OwnFs::ALL.to_vec());
        assert_eq!(of(&own, "/dev/pts"), None);
        assert_eq!(of(&own, "/dev/shm"), None);
        assert_eq!(of(&own, "/dev/null"), Some(Grant::Read));
    }

    /// The machine's `/proc` gets no rule when the run has its own (whose
    /// rule the child adds on the new mount), and its usual one otherwise.
    #[test]
    fn the_machines_processes_get_no_rule_when_the_run_has_its_own() {
        let grants = |own| walked("/", &["/root/.ssh"], own);
        let proc_rule = |g: &[(PathBuf, Grant)]| g.iter().any(|(p, _)| p == Path::new("/proc"));
        assert!(proc_rule(&grants(Vec::new())));
        let own = grants(OwnFs::ALL.to_vec());
        assert!(!proc_rule(&own));
        assert!(own.iter().any(|(p, _)| p == Path::new("/etc")));
    }

    #[test]
    fn a_secret_near_a_writable_root_or_beneath_another_is_not_masked() {
        let dir = |p: &str| Mask::Dir(PathBuf::from(p));
        let file = |p: &str| Mask::File(PathBuf::from(p));
        let found = vec![
            dir("/etc/ssl/private"),
            dir("/var/lib/docker/volumes"),
            dir("/var/lib/cloud"),
            file("/etc/shadow"),
            dir("/var/lib/docker"),
            file("/var/lib/cloud/instance/user-data.txt"),
            dir("/var/lib/docker"),
        ];
        let writable = [
            PathBuf::from("/var/lib/cloud/instance/wt"),
            PathBuf::from("/etc"),
        ];
        // /etc/ssl/private and /etc/shadow lie beneath a writable /etc,
        // /var/lib/cloud above a worktree, docker's volumes beneath docker
        // (listed before it), docker twice; the user data beside the
        // worktree is masked on its own.
        assert_eq!(
            masks(found, &writable),
            [
                dir("/var/lib/docker"),
                file("/var/lib/cloud/instance/user-data.txt")
            ]
        );
        assert!(MACHINE_SECRETS
            .iter()
            .all(|s| s.path.starts_with('/') && !s.holds.is_empty()));
    }

    #[test]
    fn hidden_mounts_are_the_outermost_mounts_of_the_hidden_types() {
        let mountinfo = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,nosuid - sysfs sysfs rw
30 23 0:7 / /sys/kernel/debug rw,nosuid - debugfs debugfs rw
31 30 0:12 / /sys/kernel/debug/tracing rw - tracefs tracefs rw
32 23 0:12 / /sys/kernel/tracing rw - tracefs tracefs rw
33 27 0:12 / /srv/my\\040trace rw - tracefs tracefs rw
34 27 0:40 / /srv/tracefs rw - tmpfs tracefs rw
35 23 0:30 / /sys/fs/bpf rw - bpf bpf rw,mode=700
36 23 0:8 / /sys/kernel/security rw - securityfs securityfs rw
37 23 0:31 / /sys/fs/pstore rw - pstore pstore rw
";
        assert_eq!(
            hidden_mounts(mountinfo),
            [
                PathBuf::from("/srv/my trace"),
                PathBuf::from("/sys/kernel/debug"),
                PathBuf::from("/sys/kernel/tracing"),
                PathBuf::from("/sys/fs/bpf"),
                PathBuf::from("/sys/kernel/security"),
                PathBuf::from("/sys/fs/pstore"),
            ]
        );
        assert!(hidden_mounts("22 27 0:21 / /proc rw - proc proc rw\n").is_empty());
        assert_eq!(unescape_octal("a\\134b\\011\\9"), b"a\\b\t\\9");
    }

    #[test]
    fn narrowed_dirs_are_those_the_walk_lists_in_writable_roots() {
        let scratch = crate::testing::Scratch::new("fs-narrowed");
        let dir = scratch.path().to_path_buf();
        let w = dir.join("w");
        std::fs::create_dir_all(w.join("a/b")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(w.join("d")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(dir.join("elsewhere/x")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(dir.join("closed/inner/s")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(dir.join("closed/open")).unwrap_or_else(|e| panic!("{e}"));
        let _ = std::os::unix::fs::symlink(dir.join("elsewhere"), w.join("link"));
        let w = w.canonicalize().unwrap_or_else(|e| panic!("{e}"));
        let closed = dir
            .join("closed")
            .canonicalize()
            .unwrap_or_else(|e| panic!("{e}"));
        let roots = Roots {
            denied: [
                w.join("a/b/secret"),   // W, W/a, W/a/b
                w.join("absent"),       // W (absent: still split)
                w.join("d"),            // W; a denied dir itself is not narrowed
                w.join("d/deeper"),     // nothing below a denied dir
                w.join("link/x"),       // W; the walk grants the symlink whole
                closed.clone(),         // what the roots below lie in
                closed.join("inner/s"), // beneath a root in a denied dir: split
            ]
            .into_iter()
            .collect(),
            writable: vec![w.clone(), closed.join("inner"), closed.join("open")],
        };
        let mut plan = Plan::default();
        roots
            .grant_writable(&mut plan)
            .unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(PathBuf, usize)> = plan
            .take_narrowed()
            .into_iter()
            .map(|n| (n.dir, n.denied.len()))
            .collect();
        assert_eq!(
            got,
            [
                (closed.join("inner"), 1),
                (w.clone(), 5),
                (w.join("a"), 1),
                (w.join("a/b"), 1)
            ],
            "{got:?}"
        );
        // A root in a denied dir with nothing denied beneath it is whole.
        assert!(
            plan.grants
                .iter()
                .any(|(p, g)| *p == closed.join("open") && *g == Grant::ReadWrite),
            "{:?}",
            plan.grants
        );
        assert!(
            !plan
                .grants
                .iter()
                .any(|(p, _)| p.starts_with(closed.join("inner/s"))),
            "{:?}",
            plan.grants
        );
    }

    #[test]
    fn missing_denied_paths_resolve_through_their_existing_ancestor() {
        let scratch = crate::testing::Scratch::new("fs-unit");
        let dir = scratch.path().to_path_buf();
        let real = dir.join("real");
        std::fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
        let link = dir.join("link");
        let _ = std::os::unix::fs::symlink(&real, &link);
        let set = canonical_set(&[link.join("not-yet/secret")]);
        let real = real.canonicalize().unwrap_or_else(|e| panic!("{e}"));
        assert!(set.contains(&real.join("not-yet/secret")), "{set:?}");
        assert!(set.contains(&link.join("not-yet/secret")), "{set:?}");
    }

    #[test]
    fn a_symlinked_denied_path_resolves_to_its_target_and_a_dangling_one_to_itself() {
        let scratch = crate::testing::Scratch::new("fs-unit-links");
        let dir = scratch.path().to_path_buf();
        let real = dir.join("home/real-ssh");
        std::fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
        let home = dir
            .join("home")
            .canonicalize()
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = std::os::unix::fs::symlink(&real, home.join(".ssh"));
        let _ = std::os::unix::fs::symlink(home.join("gone"), home.join(".aws"));
        let _ = std::os::unix::fs::symlink(&home, dir.join("via"));
        let set = canonical_set(&[
            home.join(".ssh"),
            home.join(".aws"),
            dir.join("via/.ssh/id_ed25519"),
            home.join(".absent"),
        ]);
        let want: BTreeSet<PathBuf> = [
            home.join(".ssh"),
            home.join("real-ssh"),
            home.join(".aws"),
            dir.join("via/.ssh/id_ed25519"),
            home.join("real-ssh/id_ed25519"),
            home.join(".absent"),
        ]
        .into_iter()
        .collect();
        assert_eq!(set, want);
    }
}

/// The walk's findings. With a ruleset, each rule goes into it as soon as its
/// path is opened, and the descriptor is closed at once: a listed dir may
/// hold thousands of entries (a shared `/tmp` above a state dir), more than
/// a 1024-descriptor limit.
#[derive(Default)]
struct Plan {
    /// Where the rules go; `None` when only the findings are wanted.
    ruleset: Option<RulesetCreated>,
    /// Every path that received a rule, and which.
    grants: Vec<(PathBuf, Grant)>,
    /// The writable dirs listed instead of granted whole, in walk order.
    narrowed: Vec<Narrowed>,
    /// The listed dirs of at least [`CROWDED_ENTRIES`] entries.
    crowded: Vec<Crowded>,
    /// The time spent listing dirs and granting their entries, so far.
    listed: std::time::Duration,
    /// `(st_dev, st_ino)` of every object granted a write right outside the
    /// writable roots (devices, the caller's stdio files).
    written_outside: Vec<(u64, u64)>,
    /// The machine's filesystems there get no rule: the run has its own.
    own: Vec<OwnFs>,
    /// The denied paths the walk found in the dirs it listed: those that exist.
    denied_found: Vec<PathBuf>,
}

impl Plan {
    fn adding_to(ruleset: RulesetCreated) -> Self {
        Self {
            ruleset: Some(ruleset),
            ..Self::default()
        }
    }

    /// The dirs the walk listed in writable roots, by path, each once.
    fn take_narrowed(&mut self) -> Vec<Narrowed> {
        let mut n = std::mem::take(&mut self.narrowed);
        n.sort_by(|a, b| a.dir.cmp(&b.dir));
        n.dedup_by(|a, b| a.dir == b.dir);
        n
    }

    /// The crowded dirs, each once: a dir listed by both the read walk and
    /// a writable root's costs both times.
    fn take_crowded(&mut self) -> Vec<Crowded> {
        let mut merged: Vec<Crowded> = Vec::new();
        for c in std::mem::take(&mut self.crowded) {
            match merged.iter_mut().find(|m| m.dir == c.dir) {
                Some(m) => {
                    m.took = match (m.took, c.took) {
                        (Some(a), Some(b)) => Some(a + b),
                        (a, b) => a.or(b),
                    };
                    m.toward.extend(c.toward);
                    m.toward.sort();
                    m.toward.dedup();
                }
                None => merged.push(c),
            }
        }
        merged
    }

    /// Open `path` without following a final symlink and add a rule.
    /// Returns false (and adds nothing) for a symlink: a rule on a symlink
    /// that pointed into a denied dir would grant that dir.
    fn push(&mut self, path: &Path, grant: Grant) -> Result<bool, FsError> {
        self.push_known(&Entry::by_path(path), grant)
    }

    /// [`push`](Self::push) for an entry of the walk, opened in the
    /// directory that listed it, with the type the listing gave (no `fstat`
    /// of ours then). Should the entry have been swapped since the listing:
    /// to a symlink, the rule is on the link's own inode (opened
    /// `O_NOFOLLOW`), which no access walks through; from a file to a
    /// directory, it gets the file rights only; to a directory from a
    /// symlink or file's stale type "directory" on a non-directory, the
    /// kernel refuses the rule and the run.
    ///
    /// A socket gets no rule: none of the rights of ABI 7 applies to one
    /// (`open` of a socket fails whatever the rights, `connect` is not a
    /// Landlock right there), and a `/tmp` of a shared machine holds
    /// thousands.
    fn push_known(&mut self, entry: &Entry<'_>, grant: Grant) -> Result<bool, FsError> {
        use nix::dir::Type;
        use std::os::unix::fs::FileTypeExt as _;
        if matches!(entry.kind, Some(Type::Symlink | Type::Socket)) {
            return Ok(false);
        }
        let file = entry.open(libc::O_PATH | libc::O_NOFOLLOW)?;
        let is_dir = if let Some(kind) = entry.kind {
            kind == Type::Directory
        } else {
            let ft = file
                .metadata()
                .map_err(|source| FsError::Open {
                    path: entry.path.to_path_buf(),
                    source,
                })?
                .file_type();
            if ft.is_symlink() || ft.is_socket() {
                return Ok(false);
            }
            ft.is_dir()
        };
        self.add(entry.path, &file, grant, is_dir)?;
        Ok(true)
    }

    /// Add the rule for `file` (opened `O_PATH`), shown as `path`.
    fn add(
        &mut self,
        path: &Path,
        file: &std::fs::File,
        grant: Grant,
        is_dir: bool,
    ) -> Result<(), FsError> {
        if let Some(ruleset) = self.ruleset.take() {
            let mut access = rights(grant);
            if !is_dir {
                access &= AccessFs::from_file(abi());
            }
            self.ruleset = Some(
                ruleset
                    .add_rule(PathBeneath::new(file.as_fd(), access))
                    .map_err(|source| FsError::Rule {
                        path: path.to_path_buf(),
                        source,
                    })?,
            );
        }
        if matches!(grant, Grant::Device | Grant::Tty | Grant::Stdio) {
            use std::os::unix::fs::MetadataExt as _;
            let st = file.metadata().map_err(|source| FsError::Open {
                path: path.to_path_buf(),
                source,
            })?;
            self.written_outside.push((st.dev(), st.ino()));
        }
        self.grants.push((path.to_path_buf(), grant));
        Ok(())
    }

    /// The caller's stdio descriptor `fd`, as the command will inherit it:
    /// its pty ([`Grant::Tty`], `/dev/pts/N`), or the regular file or named
    /// FIFO it is open on for writing ([`Grant::Stdio`]), reached through
    /// the descriptor itself (`/proc/self/fd/N`: the same inode, whatever
    /// its name now). Anything else gets nothing here: a pipe or socket
    /// needs no rule, a device is not granted by the caller's redirection.
    fn push_stdio(&mut self, fd: libc::c_int) -> Result<(), FsError> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        use nix::sys::stat::{fstat, SFlag};
        let link = PathBuf::from(format!("/proc/self/fd/{fd}"));
        let Ok(path) = std::fs::read_link(&link) else {
            return Ok(()); // closed: nothing to grant
        };
        if self.grants.iter().any(|(p, _)| *p == path) {
            return Ok(()); // the same terminal or file on another descriptor
        }
        if path.starts_with("/dev/pts/") {
            return self.push_if_exists(&path, Grant::Tty);
        }
        if !path.is_absolute() {
            // `pipe:[N]`, `socket:[N]`: in no directory; Landlock takes no
            // rule on them, nor needs one.
            return Ok(());
        }
        let (Ok(flags), Ok(st)) = (fcntl(fd, FcntlArg::F_GETFL), fstat(fd)) else {
            return Ok(());
        };
        let mode = OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE;
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        if !(mode == OFlag::O_WRONLY || mode == OFlag::O_RDWR)
            || !(kind == SFlag::S_IFREG || kind == SFlag::S_IFIFO)
        {
            return Ok(());
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(&link)
            .map_err(|source| FsError::Open {
                path: path.clone(),
                source,
            })?;
        self.add(&path, &file, Grant::Stdio, false)
    }

    /// Queue a rule for a fixed system path (a device), following symlinks
    /// (`/dev/ptmx` is often `pts/ptmx`); absent ones are skipped.
    fn push_if_exists(&mut self, path: &Path, grant: Grant) -> Result<(), FsError> {
        let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        match self.push(&path, grant) {
            Err(FsError::Open { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) =>
            {
                Ok(())
            }
            r => r.map(|_| ()),
        }
    }

    /// Grant `grant` beneath `root`, except beneath every path of `denied`:
    /// a root with no denied path beneath it gets one rule; otherwise it is
    /// listed and each entry handled the same way (denied entries get nothing).
    fn grant_except(
        &mut self,
        root: &Path,
        grant: Grant,
        denied: &BTreeSet<PathBuf>,
    ) -> Result<(), FsError> {
        self.grant_except_known(&Entry::by_path(root), grant, denied)
    }

    /// [`grant_except`](Self::grant_except) for an entry of the walk.
    fn grant_except_known(
        &mut self,
        entry: &Entry<'_>,
        grant: Grant,
        denied: &BTreeSet<PathBuf>,
    ) -> Result<(), FsError> {
        use std::os::unix::ffi::OsStrExt as _;
        let root = entry.path;
        // By bytes: the set's own lookup compares paths component by
        // component, and the walk asks for every entry it lists.
        if denied
            .iter()
            .any(|d| d.as_os_str().as_bytes() == root.as_os_str().as_bytes())
        {
            self.denied_found.push(root.to_path_buf());
            return Ok(());
        }
        // The machine's /proc is out of sight (its processes are the
        // point): the run's own is granted in the child.
        if root == OwnFs::Processes.path() && self.own.contains(&OwnFs::Processes) {
            return Ok(());
        }
        if grant == Grant::Read && root == Path::new("/dev") {
            // Listable, and readable only where DEV_READABLE says.
            self.push(root, Grant::List)?;
            for name in DEV_READABLE {
                let dev = root.join(name);
                // The machine's /dev/shm and /dev/pts are out of sight, also
                // through /proc/<pid>/root: the run's own are granted in
                // the child.
                if self.own.iter().any(|o| o.path() == dev) {
                    continue;
                }
                // Other processes' terminals (uid 0 owns root's) must not be
                // opened for reading, which would take their keystrokes:
                // the machine's /dev/pts is listable only; the caller's own
                // terminal is granted by its inode (`push_stdio`).
                let grant = if dev == OwnFs::Terminals.path() {
                    Grant::List
                } else {
                    grant
                };
                match self.grant_except(&dev, grant, denied) {
                    Err(FsError::Open { source, .. })
                        if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENXIO)) => {}
                    r => r?,
                }
            }
            return Ok(());
        }
        let Some(inner) = denied.iter().find(|d| strictly_beneath(d, root)) else {
            self.push_known(entry, grant)?;
            return Ok(());
        };
        let list_error = |source| FsError::List {
            path: root.to_path_buf(),
            denied: inner.clone(),
            source,
        };
        // The directory itself, not what a symlink there points to: the
        // listing and every rule beneath are taken through this descriptor,
        // so a path swapped meanwhile cannot redirect them.
        let dir = match entry.open(libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW) {
            Ok(dir) => dir,
            // A file (or symlink) cannot hold the denied path: grant it as
            // any other entry (a symlink gets nothing). Something made there
            // later is a new inode, without a rule.
            Err(FsError::Open { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) =>
            {
                self.push_known(
                    &Entry {
                        kind: None,
                        ..*entry
                    },
                    grant,
                )?;
                return Ok(());
            }
            // Vanished since its parent was listed: the caller's to judge.
            Err(FsError::Open { path, source }) if source.raw_os_error() == Some(libc::ENOENT) => {
                return Err(FsError::Open { path, source });
            }
            Err(FsError::Open { source, .. }) => return Err(list_error(source)),
            Err(e) => return Err(e),
        };
        if grant == Grant::ReadWrite {
            self.narrowed.push(Narrowed {
                dir: root.to_path_buf(),
                denied: denied
                    .iter()
                    .filter(|d| strictly_beneath(d, root))
                    .cloned()
                    .collect(),
            });
        }
        let opener = dir.try_clone().map_err(list_error)?;
        let mut listing =
            nix::dir::Dir::from(dir).map_err(|e| list_error(std::io::Error::from(e)))?;
        let (started, listed_before, mut entries) =
            (std::time::Instant::now(), self.listed, 0usize);
        for item in listing.iter() {
            let item = item.map_err(|e| list_error(std::io::Error::from(e)))?;
            let name = item.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            entries += 1;
            let child = root.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            let child = Entry {
                path: &child,
                at: Some((opener.as_fd(), name)),
                kind: item.file_type(),
            };
            match self.grant_except_known(&child, grant, denied) {
                // Vanished between listing and opening: nothing to grant.
                Err(FsError::Open { source, .. })
                    if source.raw_os_error() == Some(libc::ENOENT) => {}
                r => r?,
            }
        }
        self.note_listed(root, entries, denied, started, listed_before);
        Ok(())
    }

    /// Account for a listed dir: its own time (the dirs listed beneath it
    /// count for themselves), and a [`Crowded`] finding if it held at least
    /// [`CROWDED_ENTRIES`] entries.
    fn note_listed(
        &mut self,
        root: &Path,
        entries: usize,
        denied: &BTreeSet<PathBuf>,
        started: std::time::Instant,
        listed_before: std::time::Duration,
    ) {
        use std::os::unix::ffi::OsStrExt as _;
        let total = started.elapsed();
        let took = total.saturating_sub(self.listed.saturating_sub(listed_before));
        self.listed = listed_before + total;
        if entries < CROWDED_ENTRIES {
            return;
        }
        let prefix = root.as_os_str().as_bytes().len();
        let mut toward: Vec<PathBuf> = denied
            .iter()
            .filter(|d| strictly_beneath(d, root))
            .filter_map(|d| {
                let rest = d.as_os_str().as_bytes().get(prefix..)?;
                let name = rest.strip_prefix(b"/").unwrap_or(rest);
                let name = name.split(|b| *b == b'/').next()?;
                Some(root.join(std::ffi::OsStr::from_bytes(name)))
            })
            .collect();
        toward.sort();
        toward.dedup();
        self.crowded.push(Crowded {
            dir: root.to_path_buf(),
            entries,
            toward,
            took: self.ruleset.is_some().then_some(took),
        });
    }
}

/// A path the walk grants or lists: by its absolute path, or as an entry of
/// the directory that listed it (opened there, by name), with the type the
/// listing gave, if any.
#[derive(Clone, Copy)]
struct Entry<'a> {
    path: &'a Path,
    at: Option<(std::os::fd::BorrowedFd<'a>, &'a std::ffi::CStr)>,
    kind: Option<nix::dir::Type>,
}

impl<'a> Entry<'a> {
    fn by_path(path: &'a Path) -> Self {
        Self {
            path,
            at: None,
            kind: None,
        }
    }

    /// Open the entry itself with `flags` (and `O_CLOEXEC`).
    fn open(&self, flags: libc::c_int) -> Result<std::fs::File, FsError> {
        let opened = match self.at {
            Some((dir, name)) => crate::sys::notify::openat2(dir, name, flags, 0).map(Into::into),
            None => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags | libc::O_CLOEXEC)
                .open(self.path),
        };
        opened.map_err(|source| FsError::Open {
            path: self.path.to_path_buf(),
            source,
        })
    }
}

/// Whether `path` lies strictly beneath `dir`, by bytes (both absolute and
/// canonical, as the walk's paths are): `Path::starts_with` parses both into
/// components, and the walk asks this for every entry and every denied path.
fn strictly_beneath(path: &Path, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let d = d.strip_suffix(b"/").unwrap_or(d);
    p.len() > d.len() + 1 && p.starts_with(d) && p[d.len()] == b'/'
}
