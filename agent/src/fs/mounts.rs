//! The filesystems of a run's own ([`OwnFs`]: `/dev/shm`, `/dev/pts`,
//! `/dev/mqueue`, `/proc`), which the child mounts over the machine's, and
//! the machine's kernel filesystems hidden behind an empty one
//! ([`HIDDEN_FS`]).

use std::path::{Path, PathBuf};

use landlock::AccessFs;

use super::{all_rights, outermost, rights, Grant};
use crate::sys::NewFs;

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
    pub fn new_fs(self) -> NewFs {
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
        NewFs {
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
/// `/sys/kernel` into a rule per entry on every run, where
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
pub fn empty_fs() -> NewFs {
    use libc::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
    NewFs {
        fstype: c"tmpfs",
        attrs: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        options: &[(c"mode", Some(c"0555"))],
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
pub(super) fn unescape_octal(s: &str) -> Vec<u8> {
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
