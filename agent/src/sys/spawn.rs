//! Spawning the command straight into the run's cgroup: `clone3` with
//! `CLONE_INTO_CGROUP` (Linux 5.7) and `CLONE_PIDFD` (5.2).
//!
//! The kernel places the child in the cgroup as part of the fork, so the
//! command is inside it before its first instruction, and no process ever
//! migrates: a write into `cgroup.procs` would take the cgroup threadgroup
//! rwsem for writing, which waits for an RCU grace period.
//!
//! On `x86_64` the child shares lockrun's memory until its exec, as
//! `posix_spawn` does (`CLONE_VM | CLONE_VFORK`, on a stack of its own):
//! the fork copies no page tables and neither side takes a copy-on-write
//! fault afterwards, and lockrun's thread waits in `clone3` until the
//! command has exec'd or failed. Signals are blocked around it, and the
//! child sets every handled signal back to its default before it unblocks
//! them, so no handler of lockrun's ever runs on the child's stack. Other
//! architectures fork as before.
//!
//! The child then does what `std::process::Command` did with the
//! confinement as `pre_exec`: `SIGPIPE` back to its default (Rust ignores
//! it), [`ChildPlan::apply`], and glibc's `execvp` search written out on
//! candidates the parent prepared from the command's own `PATH` (glibc's
//! default `/bin:/usr/bin` when it has none; `EACCES` remembered, `ENOEXEC`
//! run by `/bin/sh`), so that nothing of lockrun's memory — `environ`
//! included — is written. Everything that allocates happens in the parent.
//! A failure travels through the plan's report pipe (close-on-exec) as
//! five bytes: the step (0 for the exec itself) and the errno; end-of-file
//! means the exec succeeded.

// Kernel ABI words (pids, fds, flags) change width and sign here; each cast
// is the encoding the syscall expects (a pid or fd is never negative).
#![allow(
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_possible_truncation
)]

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use super::{ChildPlan, Report, Step};

const CLONE_PIDFD: u64 = 0x1000;
pub(super) const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args`, `CLONE_ARGS_SIZE_VER2` (Linux 5.7: with `cgroup`).
#[repr(C)]
#[derive(Default)]
pub(super) struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

#[cfg(target_arch = "x86_64")]
const CLONE_VM: u64 = libc::CLONE_VM as u64;
#[cfg(target_arch = "x86_64")]
const CLONE_VFORK: u64 = libc::CLONE_VFORK as u64;
/// The child's stack while it shares lockrun's memory (above a guard page).
#[cfg(target_arch = "x86_64")]
const CHILD_STACK: usize = 256 * 1024;
/// glibc's search path when the command's environment has no `PATH`.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// Why the command did not start.
#[derive(Debug)]
pub enum SpawnError {
    /// `clone3` itself failed (e.g. the cgroup refused the process).
    Clone(io::Error),
    /// A confinement step failed in the child.
    Confine(Step, io::Error),
    /// The exec failed (not found, not executable, a NUL in an argument).
    Exec(io::Error),
}

/// The running command.
pub struct Child {
    pid: u32,
    pidfd: tokio::io::unix::AsyncFd<OwnedFd>,
    mount_namespace: Option<OwnedFd>,
}

/// NUL-terminated pointer arrays over owned C strings.
struct CArgs {
    _strings: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
}

impl CArgs {
    fn new(items: impl IntoIterator<Item = Vec<u8>>) -> io::Result<Self> {
        let strings = items
            .into_iter()
            .map(CString::new)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "nul byte found in provided data",
                )
            })?;
        let mut ptrs: Vec<_> = strings.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Ok(Self {
            _strings: strings,
            ptrs,
        })
    }
}

/// Start `argv` with exactly `env`, inside the cgroup `cgroup` (its
/// directory fd), confined by `plan`. Must be called within a tokio runtime.
pub fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cgroup: BorrowedFd<'_>,
    plan: ChildPlan,
    report: Report,
) -> Result<Child, SpawnError> {
    let c_argv =
        CArgs::new(argv.iter().map(|a| a.as_bytes().to_vec())).map_err(SpawnError::Exec)?;
    let envp = CArgs::new(env.iter().map(|(k, v)| {
        let mut b = k.as_bytes().to_vec();
        b.push(b'=');
        b.extend_from_slice(v.as_bytes());
        b
    }))
    .map_err(SpawnError::Exec)?;
    let Some(program) = argv.first().map(|a| a.as_bytes()) else {
        return Err(SpawnError::Exec(io::Error::from_raw_os_error(libc::ENOENT)));
    };
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k.as_bytes() == b"PATH")
        .map(|(_, v)| v.as_bytes());
    let mut exec = Exec::new(program, path, &c_argv).map_err(SpawnError::Exec)?;

    let mut pidfd: libc::c_int = -1;
    // A mount namespace of its own, for the run's own filesystems
    // (see `OwnMount`): made by the clone itself, since lockrun's threads
    // share their filesystem context and so could not `unshare` one.
    let newns = if plan.new_mount_namespace() {
        libc::CLONE_NEWNS as u64
    } else {
        0
    };
    let mut cl = CloneArgs {
        flags: CLONE_PIDFD | CLONE_INTO_CGROUP | newns,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let job = ChildJob {
        plan: &plan,
        candidates: &exec.candidates,
        sh_argv: exec.sh_argv.as_mut_ptr(),
        argv: c_argv.ptrs.as_ptr(),
        envp: envp.ptrs.as_ptr(),
        sigmask: empty_sigset(),
    };
    let ret = clone_child(&mut cl, job);
    if ret < 0 {
        return Err(SpawnError::Clone(io::Error::from_raw_os_error(
            (-ret) as i32,
        )));
    }
    let pid = ret as u32;
    // SAFETY: CLONE_PIDFD stored a new fd we own into `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // At once: a short command may be gone a moment later.
    let mount_namespace = mount_namespace(&pidfd);
    // Close the parent's copies of the plan's fds, the report pipe's write
    // end among them, before reading it.
    drop(plan);
    match report.read_failure() {
        None => {}
        Some((step, err)) => {
            let _ = reap_blocking(pid);
            return Err(match step {
                Some(step) => SpawnError::Confine(step, err),
                None => SpawnError::Exec(err),
            });
        }
    }
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the fd stays
    // open and refers to the same pidfd for the AsyncFd's whole life.
    let pidfd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|e| {
        kill(pid, libc::SIGKILL);
        let _ = reap_blocking(pid);
        SpawnError::Clone(io::Error::other(e.to_string()))
    })?;
    Ok(Child {
        pid,
        pidfd,
        mount_namespace,
    })
}

/// The mount namespace of the process `pidfd` refers to
/// (`PIDFD_GET_MNT_NAMESPACE`, Linux 6.11), or `None` if the kernel has no
/// such call or the process has exited already.
fn mount_namespace(pidfd: &OwnedFd) -> Option<OwnedFd> {
    // SAFETY: an ioctl without argument on a pidfd we own; the result is
    // checked before it is owned.
    let fd = unsafe { libc::ioctl(pidfd.as_raw_fd(), libc::PIDFD_GET_MNT_NAMESPACE, 0) };
    if fd < 0 {
        tracing::debug!(
            "the command's mount namespace not held (its teardown falls to its exit): {}",
            io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: the ioctl returned a new fd we own.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The candidates of glibc's `execvp` search, prepared in the parent.
struct Exec {
    /// `program` itself when it has a `/`; else each `PATH` entry joined
    /// with it (an empty entry: `program` alone, the current directory).
    candidates: Vec<CString>,
    /// `/bin/sh`, a slot for the candidate, then `argv[1..]`: the argument
    /// vector for a candidate the kernel cannot exec (`ENOEXEC`).
    sh_argv: Vec<*const libc::c_char>,
}

impl Exec {
    fn new(program: &[u8], path: Option<&[u8]>, argv: &CArgs) -> io::Result<Self> {
        let nul = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "nul byte found in provided data",
            )
        };
        if program.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let candidates = if program.contains(&b'/') {
            vec![CString::new(program).map_err(|_| nul())?]
        } else {
            path.unwrap_or(DEFAULT_PATH)
                .split(|&b| b == b':')
                .map(|dir| {
                    let mut c = dir.to_vec();
                    if !dir.is_empty() {
                        c.push(b'/');
                    }
                    c.extend_from_slice(program);
                    CString::new(c).map_err(|_| nul())
                })
                .collect::<io::Result<_>>()?
        };
        // argv.ptrs ends with its NULL: so does this.
        let mut sh_argv = vec![SH.as_ptr(), std::ptr::null()];
        sh_argv.extend(argv.ptrs.iter().skip(1).copied());
        Ok(Self {
            candidates,
            sh_argv,
        })
    }
}

const SH: &std::ffi::CStr = c"/bin/sh";

/// What the child needs, in the parent's memory (alive while the parent
/// waits in `clone3`).
struct ChildJob<'a> {
    plan: &'a ChildPlan,
    /// [`Exec::candidates`].
    candidates: &'a [CString],
    /// [`Exec::sh_argv`], whose slot 1 the child fills: taken from a
    /// mutable borrow in the parent, which does not touch it until the child
    /// has exec'd or exited.
    sh_argv: *mut *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The parent thread's signal mask before it blocked everything.
    sigmask: libc::sigset_t,
}

fn empty_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    unsafe {
        let mut s: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut s);
        s
    }
}

/// A stack for a child that shares lockrun's memory: an anonymous
/// mapping, a guard page below it; unmapped when dropped.
#[cfg(target_arch = "x86_64")]
pub(super) struct Stack {
    map: usize,
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl Stack {
    /// `size` bytes (a multiple of 16) above a guard page.
    pub(super) fn map(size: usize) -> io::Result<Self> {
        let len = size + 4096;
        // SAFETY: an anonymous private mapping; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the first page of the mapping just made.
        unsafe {
            libc::mprotect(map, 4096, libc::PROT_NONE);
        }
        Ok(Self {
            map: map as usize,
            len,
        })
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, which no child runs on any
        // more (its owner reaps or waits for the child first).
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.len);
        }
    }
}

/// `clone3` with `cl` plus `CLONE_VM` on `stack`: the child shares
/// lockrun's memory and calls `entry(arg)` on that stack, with every
/// signal blocked; this thread's mask is restored once `clone3` returns.
///
/// # Safety
/// `entry` never returns, and touches only `arg`, its own stack and what
/// outlives its use of it; `stack` outlives the child's use of it.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn clone_on_stack(
    cl: &mut CloneArgs,
    stack: &Stack,
    entry: extern "C" fn(usize) -> !,
    arg: usize,
) -> libc::c_long {
    cl.flags |= CLONE_VM;
    cl.stack = (stack.map + 4096) as u64;
    cl.stack_size = (stack.len - 4096) as u64;
    // Every signal blocked for the child's start (the command's child
    // unblocks them after resetting handlers; the watchdog never does),
    // restored here once clone3 returns.
    // SAFETY: sigset_t values on this stack; pthread_sigmask on this thread.
    let old = unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old);
        old
    };
    let ret: libc::c_long;
    // SAFETY: clone3 with CLONE_VM and a stack of its own: the child starts
    // on that stack (16-byte aligned top: the mapping is page-aligned and
    // its size a multiple of 16) and calls `entry(arg)`, which never
    // returns (the caller's promise). r12 and r13 survive the syscall in
    // both processes; rcx and r11 it clobbers.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") std::ptr::from_mut(cl),
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut());
    }
    ret
}

/// Start the child with `cl` and run `job` in it; the pid, or -errno.
#[cfg(target_arch = "x86_64")]
fn clone_child(cl: &mut CloneArgs, mut job: ChildJob<'_>) -> libc::c_long {
    let stack = match Stack::map(CHILD_STACK) {
        Ok(s) => s,
        Err(e) => return -libc::c_long::from(e.raw_os_error().unwrap_or(libc::ENOMEM)),
    };
    // The child restores this mask after resetting handlers: the current one.
    // SAFETY: reading this thread's mask into a live sigset_t.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &raw mut job.sigmask);
    }
    cl.flags |= CLONE_VFORK;
    // SAFETY: `child_entry` never returns; this thread sleeps in the
    // syscall until the child has exec'd or exited (CLONE_VFORK), so
    // `job`, `cl`, the stack and everything they point at outlive the
    // child's use of them.
    unsafe { clone_on_stack(cl, &stack, child_entry, std::ptr::from_ref(&job) as usize) }
}

/// Start the child with `cl` and run `job` in it; the pid, or -errno.
#[cfg(not(target_arch = "x86_64"))]
fn clone_child(cl: &mut CloneArgs, mut job: ChildJob<'_>) -> libc::c_long {
    // The child restores this mask after resetting handlers: the current one.
    // SAFETY: reading this thread's mask into a live sigset_t.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &raw mut job.sigmask);
    }
    // SAFETY: a fork (no CLONE_VM, no stack given: the child runs on a copy
    // of this thread's stack, as after fork(2)); `cl` is live for the call.
    // The child branch only issues async-signal-safe syscalls on values
    // prepared by the parent and never returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::from_mut(cl),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        child_entry(std::ptr::from_ref(&job) as usize);
    }
    if ret < 0 {
        -libc::c_long::from(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL),
        )
    } else {
        ret
    }
}

/// The child's side: never returns. Async-signal-safe syscalls only, on
/// what the parent prepared; writes nothing of the parent's but the
/// `/bin/sh` argument slot lent in `job.sh_argv`.
extern "C" fn child_entry(job: usize) -> ! {
    // SAFETY: the parent passed the address of a live ChildJob and waits
    // until this process exec's or exits.
    let job = unsafe { &*(job as *const ChildJob<'_>) };
    // SAFETY: sigaction and sigprocmask with values on this stack. Every
    // signal is blocked (by the parent); a handler of lockrun's must not
    // run here, on this stack, in lockrun's memory: each caught signal
    // goes back to its default before the mask is restored. SIGPIPE too
    // (Rust ignores it; the command expects the default).
    unsafe {
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &raw mut old) != 0 {
                continue;
            }
            let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if caught || sig == libc::SIGPIPE {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &raw const dfl, std::ptr::null_mut());
            }
        }
        libc::sigprocmask(
            libc::SIG_SETMASK,
            &raw const job.sigmask,
            std::ptr::null_mut(),
        );
    }
    if job.plan.apply().is_ok() {
        exec_search(job);
        job.plan.fail_exec();
    }
    // SAFETY: _exit(2) is async-signal-safe and runs no destructors.
    unsafe { libc::_exit(127) }
}

/// glibc's `execvp` on the prepared candidates: returns only when none
/// could be exec'd, with errno set (EACCES if any candidate gave it).
fn exec_search(job: &ChildJob<'_>) {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut got_eacces = false;
    for cand in job.candidates {
        // SAFETY: NUL-terminated strings and arrays the parent prepared.
        unsafe {
            libc::execve(cand.as_ptr(), job.argv, job.envp);
        }
        if errno() == libc::ENOEXEC {
            // A script without `#!`: glibc hands it to /bin/sh.
            // SAFETY: slot 1 of the /bin/sh vector (at least three long),
            // lent to this child alone while the parent waits.
            unsafe {
                *job.sh_argv.add(1) = cand.as_ptr();
                libc::execve(SH.as_ptr(), job.sh_argv, job.envp);
            }
        }
        match errno() {
            libc::EACCES => got_eacces = true,
            libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return,
        }
    }
    if got_eacces {
        // SAFETY: errno is this thread's.
        unsafe {
            *libc::__errno_location() = libc::EACCES;
        }
    }
}

fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with integers; the pid is our unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// waitpid until the child is reaped; its status.
pub(super) fn reap_blocking(pid: u32) -> io::Result<ExitStatus> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid on our own child with a live status word.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &raw mut status, 0) };
        if r >= 0 {
            return Ok(ExitStatus::from_raw(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl Child {
    /// The command's pid.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// The command's mount namespace, taken right after the clone, or
    /// `None` (see [`mount_namespace`]). Whoever holds it holds the
    /// namespace: the command's exit no longer tears it down (an unmount
    /// of each of its mounts, then an RCU grace period, before the exit
    /// is reported); the last close of this does, once the
    /// command is reaped.
    pub fn take_mount_namespace(&mut self) -> Option<OwnedFd> {
        self.mount_namespace.take()
    }

    /// Send `sig` to the command (until it is reaped, its pid is still ours).
    pub fn signal(&self, sig: libc::c_int) {
        kill(self.pid, sig);
    }

    /// Wait for the command to end (its pidfd becomes readable) and reap it.
    pub async fn wait(&self) -> io::Result<ExitStatus> {
        loop {
            let mut guard = self.pidfd.readable().await?;
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid on our own child with a live status word.
            let r =
                unsafe { libc::waitpid(self.pid as libc::pid_t, &raw mut status, libc::WNOHANG) };
            if r > 0 {
                return Ok(ExitStatus::from_raw(status));
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            guard.clear_ready();
        }
    }

    /// Kill the command and reap it.
    pub async fn kill(&self) {
        kill(self.pid, libc::SIGKILL);
        let _ = self.wait().await;
    }
}
