//! The seccomp supervisor: lockrun, outside the sandbox, answers the syscalls
//! the supervised filter ([`crate::seccomp::notify_filter`]) hands over
//! (seccomp user notification, Linux 5.0). It closes two gaps the kernel
//! layers leave on this kernel (Landlock ABI 7, no BPF LSM):
//!
//! - **set-id modes** ([`meta`]): `chmod` to `S_ISUID`, or `S_ISGID` but on
//!   a directory beneath a writable root, refused; and, only where the
//!   kernel cannot record the read-only mounts' refusals
//!   ([`crate::kernel::Features::metadata_by_mounts`]), **metadata of files
//!   outside**: `chmod`, `chown`, `utimes`, `setxattr`, `removexattr` and
//!   their variants, and the inode-attribute `ioctl`s (`chattr`), are not
//!   Landlock rights, and a capability-less uid 0 owns every root-owned
//!   file (elsewhere the mounts, read-only outside the writable roots,
//!   hold them: [`crate::sys::ReadOnlyOutside`]);
//! - **unix sockets through symlinks** ([`unix`]): the cgroup unix hooks see
//!   the path before the kernel resolves it;
//! - **other processes' scheduling** ([`sched`]): nice, scheduling policy,
//!   CPU affinity and I/O priority of a task outside the run, which the
//!   kernel lets a capability-less task set for every capability-less task
//!   of its uid;
//! - **ports shared with sockets outside** ([`reuse`]): `SO_REUSEPORT`,
//!   and `SO_REUSEADDR` on a datagram socket, let a socket take the
//!   connections or datagrams of another of the same uid;
//! - **watches on denied paths** ([`watch`]): Landlock does not check
//!   `inotify_add_watch`, and a watch on a directory names what appears in
//!   it;
//! - **truncation outside** ([`truncate`]), only on a kernel without
//!   Landlock's truncate right (ABI < 3, Linux < 6.2): `truncate(2)` and
//!   the opens with `O_TRUNC` that ask for no write right.
//! - **signals to processes outside the run** ([`scope`]) and **abstract
//!   unix sockets bound outside it** ([`abstract_unix`]), on a kernel
//!   without Landlock's scoping (ABI < 6, Linux < 6.12): judged by the
//!   target's cgroup, and by the abstract names the run bound.
//!
//! It also answers the calls of the seccomp deny list with `EPERM`
//! ([`crate::seccomp::refused_call`]): the filter hands them over only so
//! that each refusal is recorded and shown, decided on the registers alone.
//!
//! # Never continue on user memory
//! A notified task's memory can change between the supervisor's read and the
//! kernel's own. So the supervisor either decides on **registers and kernel
//! state** only and lets the call continue (a `connect` on a socket whose
//! family is not `AF_UNIX`), or reads the arguments **once** and **performs
//! the operation itself** on what it read and resolved, answering with its
//! result. The one continue that follows a memory read — a unix address that
//! is not a pathname — is backed by the kernel: in supervised mode the unix
//! hooks refuse every pathname a task of the run names itself
//! ([`lockrun_unix`]), so swapping one in after the read gains nothing.
//! Where Landlock does not scope abstract names, there is no such continue:
//! the supervisor performs the connects to the run's own names
//! ([`abstract_unix`]), and the kernel refuses every abstract name a task
//! of the run names itself.
//!
//! # Acting with the command's privileges
//! The operation runs on a supervisor thread whose **effective capabilities
//! are dropped** ([`crate::sys::supervisor_calls::EffectiveCapsDropped`]; the command
//! runs with lockrun's uid and groups and no capability). The receiving
//! thread drops them once, for its life: its own reads of a task (memory,
//! descriptors, cwd) and its placing of objects are retried with them only
//! when refused without ([`crate::sys::supervisor_calls::with_caps`]: a task that is
//! not dumpable, a dir above that the command cannot search), never the
//! resolution of a path for the command nor the operation. The operation
//! acts on the descriptor of the object the supervisor opened
//! (`AT_EMPTY_PATH`; xattrs through `/proc/self/fd/N`). So the kernel's own
//! checks still refuse what it would refuse the command (another owner's
//! file, `chown` to another uid, `trusted.*` xattrs). Set-id bits are
//! refused here, before any chmod is performed
//! ([`crate::seccomp::set_id_refused`]: `S_ISUID` always, `S_ISGID` but on
//! a directory), and recorded as a refused call; files created with them
//! never get here (the seccomp program's reported part refuses them).
//!
//! # The run's one listener
//! Among seccomp filters giving the same action the newest wins, so a
//! listener the command installed for `chmod` could answer `CONTINUE` and
//! the kernel would run the call past this supervisor. The kernel allows
//! one listener per filter tree and refuses a second with `EBUSY`; the
//! run's filter holds it from before the command's exec
//! (`tests/supervise.rs::the_command_cannot_add_a_seccomp_listener_of_its_own`).
//! A filter of the command's that notifies without a listener makes the
//! call fail with `ENOSYS` (the kernel answers so for a filter without
//! one), and any stronger action it gives refuses too.
//!
//! # Liveness
//! One thread receives (poll on the listener and a stop pipe). Metadata
//! calls are answered inline (no blocking I/O on the command's behalf);
//! `connect`/`sendto` can block on the peer, so each runs on its own
//! short-lived thread. `SECCOMP_IOCTL_NOTIF_ID_VALID` is checked after every
//! read of the task's memory and descriptors, before acting: a recycled tid
//! cannot lend its memory to a decision. If lockrun dies the listener closes
//! and the kernel fails notified syscalls with `ENOSYS`: closed.
//!
//! # Known limits (each refuses, none lets through)
//! - A unix address of length 16 or 28 (a 13- or 25-byte path with its NUL,
//!   or 14/26 without) is not notified — the length is all the filter can
//!   see, and it keeps inet connects un-notified — so the unix hooks refuse it.
//! - `sendmsg`/`sendmmsg` with a pathname `msg_name` are refused by the
//!   hooks (or, before Linux 6.7, lockrun's unix guard, [`lockrun_unix::guard`]): the address is user memory behind a pointer in a struct, and
//!   performing the call (iovecs, `SCM_RIGHTS`) would be a second kernel.
//!   Connected sockets and `sendto` work. Without Landlock's scoping, so is
//!   an abstract `msg_name`.
//! - Paths through `/proc` magic links (`/proc/self/cwd/…`) get `ELOOP`;
//!   `/proc/self/fd/N` itself is understood.
//! - A symlink with an absolute target met *inside* a path (not as its last
//!   component) is followed by the kernel from lockrun's root, whose mount
//!   namespace differs from the command's only at the run's own `/dev/shm`,
//!   `/dev/pts` and `/dev/console`: a metadata change through such a link
//!   into the run's `/dev/shm` is judged on the machine's and refused
//!   (`EPERM`).
//! - Peers see lockrun's pid in `SO_PEERCRED` for connects done here.
//! - fs-verity and fscrypt policy ioctls are refused everywhere.
#![forbid(unsafe_code)]
// Syscall registers are u64 words the kernel reads as int/u32/pointers: the
// casts between them are the ABI, checked where a range matters.
#![allow(clippy::cast_sign_loss, clippy::cast_possible_wrap)]

pub mod abstract_unix;
pub mod meta;
pub mod resolve;
pub mod reuse;
pub mod sched;
pub mod scope;
pub mod truncate;
pub mod unix;
pub mod watch;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::audit::{AuditLog, Event, SyscallEvent};
use crate::sys::supervisor_calls::{self, Notif};
use lockrun_seccomp::deny_list::{path_arg, Widens};
use lockrun_seccomp::notify::{NOTIFY_METADATA, NOTIFY_SCHED, NOTIFY_WATCH};
use lockrun_seccomp::refused::refused_call;
use lockrun_seccomp::Fallbacks;
use resolve::{Errno, Roots};

/// What the supervisor is told about the run.
pub struct Config {
    /// Writable roots (worktree, run tmp, `fs.writable`), canonical.
    pub writable: Vec<PathBuf>,
    /// Denied-read paths (nothing beneath them is writable), canonical.
    pub denied: Vec<PathBuf>,
    /// `(st_dev, st_ino)` of what the command may write outside `writable`
    /// ([`crate::fs::FsSandbox::written_outside`]).
    pub written_outside: Vec<(u64, u64)>,
    /// Where the command's pathname sockets may be: the worktree and run tmp.
    pub unix: Vec<PathBuf>,
    /// The run cgroup's id, for audit events.
    pub cgroup_id: u64,
    /// The run cgroup as `/proc/<pid>/cgroup` shows it: whose scheduling
    /// the command may set ([`sched`]). `None`: no other task's.
    pub cgroup_path: Option<String>,
    pub audit: Arc<AuditLog>,
    /// What this kernel's missing mechanisms leave to the supervisor
    /// ([`crate::kernel::Kernel::fallbacks`]): signals ([`scope`]) and
    /// abstract names ([`abstract_unix`]) where Landlock does not scope them.
    pub fallbacks: Fallbacks,
}

/// State shared by the receiving thread and the socket threads.
pub struct Shared {
    listener: OwnedFd,
    root: OwnedFd,
    fs_roots: Roots,
    unix_roots: Roots,
    /// [`Config::written_outside`]: a descriptor open for writing on one of
    /// these is placed by its name.
    written_outside: Vec<(u64, u64)>,
    cgroup_id: u64,
    cgroup_path: Option<String>,
    audit: Arc<AuditLog>,
    fallbacks: Fallbacks,
    /// The abstract names the run bound ([`abstract_unix`]).
    abstract_names: abstract_unix::Names,
    /// The last task's pidfd, kept for its next call (a tar extracting
    /// files makes three per file). A pidfd holds its task's `struct pid`,
    /// and a tid is handed out again only once that is detached: a kept
    /// pidfd whose tid came back refers to the dead task (`ESRCH`), never
    /// to the new one.
    last_pidfd: std::sync::Mutex<Option<(u32, Arc<OwnedFd>)>>,
}

/// How a notification is answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// The syscall returns this value.
    Value(i64),
    /// The syscall fails with this errno.
    Errno(Errno),
    /// The kernel runs the syscall (decided on registers/kernel state).
    Continue,
    /// Another thread will answer.
    Deferred,
    /// Answered already, with a descriptor put in the task
    /// (`SECCOMP_ADDFD_FLAG_SEND`).
    Answered,
    /// The task is gone (its notification is no longer valid).
    Gone,
}

impl Shared {
    fn respond(&self, id: u64, reply: &Reply) {
        let r = match *reply {
            Reply::Value(v) => supervisor_calls::notif_send(self.listener.as_fd(), id, v, 0, false),
            Reply::Errno(e) => supervisor_calls::notif_send(self.listener.as_fd(), id, 0, e, false),
            Reply::Continue => supervisor_calls::notif_send(self.listener.as_fd(), id, 0, 0, true),
            Reply::Deferred | Reply::Gone | Reply::Answered => Ok(()),
        };
        // ENOENT: the task died meanwhile; nothing to answer.
        let _ = r;
    }
}

/// The notifying task, and what the supervisor may take from it.
pub struct Task<'a> {
    s: &'a Shared,
    n: Notif,
}

impl<'a> Task<'a> {
    fn new(s: &'a Shared, n: Notif) -> Self {
        Self { s, n }
    }

    /// Whether the task is still waiting on this notification: call after
    /// every read of its memory or descriptors, before acting on them.
    #[must_use]
    pub fn valid(&self) -> bool {
        supervisor_calls::notif_id_valid(self.s.listener.as_fd(), self.n.id)
    }

    /// `len` bytes at `addr` in the task's memory (`EFAULT` otherwise).
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        if len == 0 {
            return Ok(Vec::new());
        }
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mut buf = vec![0u8; len];
        let readv = || {
            nix::sys::uio::process_vm_readv(
                nix::unistd::Pid::from_raw(self.n.pid.cast_signed()),
                &mut [std::io::IoSliceMut::new(&mut buf)],
                &[nix::sys::uio::RemoteIoVec {
                    base: addr as usize,
                    len,
                }],
            )
        };
        let n = supervisor_calls::retry_with_caps(readv, |e| *e == nix::errno::Errno::EPERM)
            .map_err(|_| libc::EFAULT)?;
        if n != len {
            return Err(libc::EFAULT);
        }
        Ok(buf)
    }

    /// A NUL-terminated string of at most `max` bytes with its NUL
    /// (`Err(None)`: longer), read page by page so that a string ending
    /// just before an unmapped page is still read.
    pub fn read_cstr(&self, addr: u64, max: usize) -> Result<Vec<u8>, Option<Errno>> {
        const PAGE: u64 = 4096;
        if addr == 0 {
            return Err(Some(libc::EFAULT));
        }
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let chunk = ((PAGE - at % PAGE) as usize).min(max - out.len());
            let part = self.read(at, chunk).map_err(Some)?;
            if let Some(i) = part.iter().position(|b| *b == 0) {
                out.extend_from_slice(&part[..i]);
                return Ok(out);
            }
            out.extend_from_slice(&part);
            at += chunk as u64;
        }
        Err(None)
    }

    /// A duplicate of the task's descriptor `fd` (`EBADF` if it has none).
    /// Calls that name a path take none, and open no pidfd.
    pub fn getfd(&self, fd: i32) -> Result<OwnedFd, Errno> {
        let r = match self.kept_pidfd() {
            Some(p) => match getfd_of(p.as_fd(), fd) {
                // Kept for an earlier task with this tid, gone since: open ours.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    getfd_of(self.open_pidfd()?.as_fd(), fd)
                }
                r => r,
            },
            None => getfd_of(self.open_pidfd()?.as_fd(), fd),
        };
        r.map_err(|e| match e.raw_os_error() {
            Some(libc::EBADF) | None => libc::EBADF,
            Some(e) => e,
        })
    }

    /// The pidfd kept from the last call, if it was this tid's.
    fn kept_pidfd(&self) -> Option<Arc<OwnedFd>> {
        let kept = self.s.last_pidfd.lock().ok()?;
        kept.as_ref()
            .filter(|(tid, _)| *tid == self.n.pid)
            .map(|(_, p)| p.clone())
    }

    /// A new pidfd for the task, kept for its next call.
    fn open_pidfd(&self) -> Result<Arc<OwnedFd>, Errno> {
        // Failing: the task is gone. A reused tid gets a pidfd of the
        // wrong task, whose descriptors are then taken: the notification
        // is no longer valid then, checked before acting.
        let p = Arc::new(supervisor_calls::pidfd_open(self.n.pid).map_err(|_| libc::ESRCH)?);
        if let Ok(mut kept) = self.s.last_pidfd.lock() {
            *kept = Some((self.n.pid, p.clone()));
        }
        Ok(p)
    }

    /// The task's working directory, through the run's own `/proc`. That
    /// shows only the tasks its opener may ptrace-read, so a task that is
    /// not dumpable is not there (`ENOENT`) until the capabilities are back.
    pub fn cwd(&self) -> Result<OwnedFd, Errno> {
        let p = std::ffi::CString::new(format!("proc/{}/cwd", self.n.pid)).unwrap_or_default();
        let open = || {
            supervisor_calls::openat2(self.s.root.as_fd(), &p, libc::O_PATH | libc::O_DIRECTORY, 0)
        };
        supervisor_calls::retry_with_caps(open, |e| {
            matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::ENOENT)
            )
        })
        .map_err(|_| libc::ESRCH)
    }

    #[must_use]
    pub fn root(&self) -> BorrowedFd<'_> {
        self.s.root.as_fd()
    }

    #[must_use]
    pub fn args(&self) -> [u64; 6] {
        self.n.args
    }

    #[must_use]
    pub fn nr(&self) -> i64 {
        i64::from(self.n.nr)
    }

    #[must_use]
    pub fn tid(&self) -> u32 {
        self.n.pid
    }

    /// The task's command name, for the audit log.
    #[must_use]
    pub fn comm(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/comm", self.n.pid))
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_default()
    }

    /// The task's thread-group id, for the audit log.
    #[must_use]
    pub fn tgid(&self) -> u32 {
        std::fs::read_to_string(format!("/proc/{}/status", self.n.pid))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(self.n.pid)
    }
}

/// The task's descriptor `fd` through its pidfd, retried with capabilities
/// if refused without (a task that is not dumpable).
fn getfd_of(pidfd: BorrowedFd<'_>, fd: i32) -> std::io::Result<OwnedFd> {
    supervisor_calls::retry_with_caps(
        || supervisor_calls::pidfd_getfd(pidfd, fd),
        |e| e.raw_os_error() == Some(libc::EPERM),
    )
}

/// The running supervisor; stops (and joins its receiving thread) when
/// finished or dropped.
pub struct Supervisor {
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    /// Start answering notifications from `listener`. `root` is the
    /// command's `/`, opened by the command before its exec: absolute paths
    /// are resolved from it, in the command's mount namespace (where the
    /// run's own `/dev/shm` is), never in lockrun's.
    pub fn start(listener: OwnedFd, root: OwnedFd, config: Config) -> std::io::Result<Self> {
        if let Err(e) = supervisor_calls::notif_sync_wakeup(listener.as_fd()) {
            tracing::debug!("seccomp notifications keep ordinary wake-ups: {e}");
        }
        let fs_roots = Roots::open(root.as_fd(), &config.writable, &config.denied);
        let unix_roots = Roots::open(root.as_fd(), &config.unix, &config.denied);
        // The caller's stdio files need no place here: the command holds
        // none open for writing (crate::stdio relays those).
        let written_outside = config.written_outside;
        let shared = Arc::new(Shared {
            listener,
            root,
            fs_roots,
            unix_roots,
            written_outside,
            cgroup_id: config.cgroup_id,
            cgroup_path: config.cgroup_path,
            audit: config.audit,
            fallbacks: config.fallbacks,
            abstract_names: abstract_unix::Names::default(),
            last_pidfd: std::sync::Mutex::new(None),
        });
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let thread = std::thread::Builder::new()
            .name("lockrun-supervise".into())
            .spawn(move || receive(&shared, &r))?;
        Ok(Self {
            stop: Some(w),
            thread: Some(thread),
        })
    }

    /// Stop receiving; notifications still pending then fail with `ENOSYS`.
    pub fn finish(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn receive(s: &Arc<Shared>, stop: &OwnedFd) {
    // Without effective capabilities for good: what the supervisor does for
    // the command is done without them anyway, and its own reads of the
    // task that need them are retried with them ([`supervisor_calls::retry_with_caps`]), so a call
    // costs no `capset` (two each). Should
    // this fail, the guards around each operation drop them (or refuse).
    let _unprivileged = supervisor_calls::EffectiveCapsDropped::new();
    loop {
        let mut fds = [
            PollFd::new(s.listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match nix::poll::poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        let r = fds[0].revents().unwrap_or(PollFlags::empty());
        if r.contains(PollFlags::POLLIN) {
            match supervisor_calls::notif_recv(s.listener.as_fd()) {
                Ok(n) => handle(s, n),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINTR)) => {}
                Err(_) => return,
            }
        } else if r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
            // Every task using the filter is gone.
            return;
        }
    }
}

fn handle(s: &Arc<Shared>, n: Notif) {
    let nr = i64::from(n.nr);
    let task = Task::new(s, n);
    // The refusals after the calls that are never one (a `tar x` makes
    // ~15,000 metadata calls), but before `ioctl`, which is refused or
    // performed by its command (`the_reported_calls_are_notified_by_no_other_part`).
    let reply = if nr == libc::SYS_connect {
        unix::connect(&task, s)
    } else if nr == libc::SYS_sendto {
        unix::sendto(&task, s)
    } else if NOTIFY_METADATA.contains(&nr) {
        meta::handle(&task, &s.fs_roots)
    } else if nr == libc::SYS_setsockopt {
        reuse::handle(&task)
    } else if nr == NOTIFY_WATCH {
        watch::handle(&task, s)
    } else if NOTIFY_SCHED.iter().any(|c| c.nr == nr) {
        sched::handle(&task, s)
    } else if let Some(reply) = fallback(&task, s, nr) {
        reply
    } else if let Some((call, why)) = refused_call(nr, task.args()) {
        refuse_call(&task, call, why)
    } else if nr == libc::SYS_ioctl {
        meta::handle(&task, &s.fs_roots)
    } else if truncate::handles(nr, task.args()) {
        truncate::handle(&task)
    } else {
        Reply::Errno(libc::ENOSYS)
    };
    s.respond(n.id, &reply);
}

/// A call handed over for want of a kernel mechanism
/// ([`crate::seccomp::Fallbacks`]); `None` for any other.
fn fallback(task: &Task<'_>, s: &Shared, nr: i64) -> Option<Reply> {
    if nr == libc::SYS_bind {
        return Some(abstract_unix::bind(task, s));
    }
    scope::handle(task, s)
}

/// A call of the seccomp deny list, which the filter hands over only to be
/// seen: recorded, and refused with `EPERM` as the kernel would have.
/// Decided on the number and registers alone; nothing is done. A file
/// created with set-id bits is shown with the path it named, read from
/// the task for the record only (it may have changed since; it decides
/// nothing).
pub(crate) fn refuse_call(task: &Task<'_>, call: String, why: Widens) -> Reply {
    let s = task.s;
    let named = path_arg(task.nr())
        .and_then(|i| task.read_cstr(task.args()[i], meta::PATH_MAX).ok())
        .map(|p| String::from_utf8_lossy(&p).into_owned());
    let call = match named {
        Some(path) => format!("{call} on {path}"),
        None => call,
    };
    s.audit.record(Event::Syscall(SyscallEvent {
        pid: task.tgid(),
        comm: task.comm(),
        cgroup_id: s.cgroup_id,
        call,
        why,
    }));
    Reply::Errno(libc::EPERM)
}
