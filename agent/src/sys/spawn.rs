//! Spawning the command straight into the run's cgroup: `clone3` with
//! `CLONE_INTO_CGROUP` (Linux 5.7) and `CLONE_PIDFD` (5.2).
//!
//! The kernel places the child in the cgroup as part of the fork, so the
//! command is inside it before its first instruction, and no process ever
//! migrates: a write into `cgroup.procs` would take the cgroup threadgroup
//! rwsem for writing, which waits for an RCU grace period (~10 ms here).
//!
//! The child then does what `std::process::Command` did with the
//! confinement as `pre_exec`: `SIGPIPE` back to its default (Rust ignores
//! it), [`ChildPlan::apply`], `environ` set to the prepared environment,
//! and `execvp` — the same PATH search (the command's own `PATH`, glibc's
//! default when it has none; `EACCES` remembered, `ENOEXEC` run by
//! `/bin/sh`). Everything that allocates happens in the parent. A failure
//! travels through the plan's report pipe (close-on-exec) as five bytes:
//! the step (0 for the exec itself) and the errno; end-of-file means the
//! exec succeeded.

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
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args`, `CLONE_ARGS_SIZE_VER2` (Linux 5.7: with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

extern "C" {
    static mut environ: *const *const libc::c_char;
}

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
    let Some(&program) = c_argv.ptrs.first().filter(|p| !p.is_null()) else {
        return Err(SpawnError::Exec(io::Error::from_raw_os_error(libc::ENOENT)));
    };

    let mut pidfd: libc::c_int = -1;
    let mut cl = CloneArgs {
        flags: CLONE_PIDFD | CLONE_INTO_CGROUP,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: a fork (no CLONE_VM, no stack given: the child runs on a copy
    // of this thread's stack, as after fork(2)); `cl` and `pidfd` are live
    // for the call. The child branch below only issues async-signal-safe
    // syscalls on values prepared here and never returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(cl),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        // Child.
        child(&plan, program, c_argv.ptrs.as_ptr(), envp.ptrs.as_ptr());
    }
    if ret < 0 {
        return Err(SpawnError::Clone(io::Error::last_os_error()));
    }
    let pid = ret as u32;
    // SAFETY: CLONE_PIDFD stored a new fd we own into `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
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
    Ok(Child { pid, pidfd })
}

/// The child's side: never returns.
fn child(
    plan: &ChildPlan,
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> ! {
    // SAFETY: signal(2) with a constant disposition; async-signal-safe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    if plan.apply().is_ok() {
        // SAFETY: this process is single-threaded (a fresh fork) and owns its
        // copy of `environ`; `envp`, `program` and `argv` are NUL-terminated
        // arrays and strings the parent prepared, alive in this copy of its
        // memory. execvp allocates nothing.
        unsafe {
            environ = envp;
            libc::execvp(program, argv);
        }
        plan.fail_exec();
    }
    // SAFETY: _exit(2) is async-signal-safe and runs no destructors.
    unsafe { libc::_exit(127) }
}

fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with integers; the pid is our unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// waitpid until the child is reaped; its status.
fn reap_blocking(pid: u32) -> io::Result<ExitStatus> {
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
