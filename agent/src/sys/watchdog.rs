//! The run's watchdog: ends the run when lockrun itself dies.
//!
//! A `SIGKILL` (a runner's timeout, `kill -9`) or a crash gives lockrun no
//! chance to tear its run down. The command would go on, still confined
//! (Landlock, seccomp and the pinned network hooks need no lockrun), but
//! unsupervised and unaccounted for, writing to its worktree after the
//! runner thought it over, until `lockrun gc`.
//!
//! So before the command starts lockrun clones a watchdog: a process of
//! its own thread group, process group and cgroup (unconfined, every
//! signal blocked but `SIGKILL` and `SIGSTOP`; a `SIGKILL` to lockrun's
//! process group does not reach it, nor does a kill of every process in
//! lockrun's cgroup: it is forked straight into `<run cgroup>/watchdog`,
//! [`crate::cgroup::WATCHDOG`], beneath the run's and outside the caller's) that keeps only two
//! descriptors: the read end of a pipe whose write end lockrun alone
//! holds, and the run cgroup's `cgroup.kill` (Linux 5.14). It blocks in
//! `read`:
//! - **end of file**: lockrun is gone, whatever way it went, the kernel
//!   having closed its descriptors. It writes `1` to `cgroup.kill` (the
//!   kernel kills every process of the run, those that left the command's
//!   process tree included) and exits. The run dir and the empty cgroup
//!   are left to the next run's sweep and to `lockrun gc`;
//! - **a byte**: lockrun stands it down when it drops it before the
//!   run's cgroup is killed (a setup step that failed after it started),
//!   and reaps it. At a run's end the cgroup's kill takes it with the rest
//!   (its cgroup is beneath the run's), and lockrun reaps it.
//!
//! On `x86_64` it shares lockrun's memory (`CLONE_VM`, on a stack of its
//! own, as the command's spawn does), so no page table is copied and
//! lockrun takes no copy-on-write fault afterwards; it then issues raw
//! syscalls only (no libc call: its thread pointer is the cloning
//! thread's, and `errno` lives there). Other architectures fork it.
//!
//! Limit: the OOM killer, should it pick lockrun, kills every process that
//! shares its memory, the watchdog with it; that run's command then goes
//! on confined until `lockrun gc`
//! (`tests/net_e2e.rs::a_run_whose_lockrun_and_watchdog_are_killed_stays_confined_until_gc`).
//! It picks the run's processes first ([`super::OOM_SCORE_ADJ`]).

// Kernel ABI words (pids, fds, syscall results) change width and sign
// here; each cast is the encoding the syscall expects or returns.
#![allow(
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap,
    clippy::cast_possible_truncation
)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The name the watchdog gives itself (`comm`, at most 15 bytes).
pub const NAME: &str = "lockrun-watch";
const NAME_C: &[u8; 14] = b"lockrun-watch\0";

/// The byte that stands the watchdog down.
const STAND_DOWN: u8 = b'.';

/// A running watchdog; stood down and reaped when dropped.
pub struct Watchdog {
    pid: u32,
    /// The pipe's write end: closed by the kernel if lockrun dies.
    wake: Option<OwnedFd>,
    #[cfg(target_arch = "x86_64")]
    _stack: super::spawn::Stack,
}

impl Watchdog {
    /// Clone the watchdog over the `cgroup.kill` of the cgroup `cgroup`
    /// (its directory), into the cgroup `home` (its directory,
    /// [`crate::cgroup::RunCgroup::watchdog_home`]).
    pub fn start(cgroup: BorrowedFd<'_>, home: BorrowedFd<'_>) -> io::Result<Self> {
        // SAFETY: openat on a live directory fd and a NUL-terminated name;
        // the result is checked before it is owned.
        let cgroup_kill = unsafe {
            let fd = libc::openat(
                cgroup.as_raw_fd(),
                c"cgroup.kill".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("opening the run cgroup's cgroup.kill (Linux 5.14): {e}"),
                ));
            }
            OwnedFd::from_raw_fd(fd)
        };
        let (wake_rx, wake_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let kill_fd = u32::try_from(cgroup_kill.as_raw_fd()).map_err(io::Error::other)?;
        let rx_fd = u32::try_from(wake_rx.as_raw_fd()).map_err(io::Error::other)?;
        let arg = (u64::from(kill_fd) << 32 | u64::from(rx_fd)) as usize;
        let started = clone_watchdog(arg, home)?;
        // The watchdog holds its own copies (its descriptor table is a copy).
        drop(wake_rx);
        drop(cgroup_kill);
        let watchdog = Self {
            pid: started.pid,
            wake: Some(wake_tx),
            #[cfg(target_arch = "x86_64")]
            _stack: started.stack,
        };
        // A process group of its own, made from here before the command
        // starts (the watchdog may not have run yet): a `SIGKILL` to
        // lockrun's group (`timeout -s KILL`, a runner's timeout, a CI job
        // cancelled) must not take the watchdog with lockrun, or nothing
        // ends the run's processes that left that group.
        let pid = nix::unistd::Pid::from_raw(watchdog.pid as i32);
        nix::unistd::setpgid(pid, pid).map_err(|e| {
            io::Error::other(format!(
                "giving the watchdog a process group of its own: setpgid: {e}"
            ))
        })?;
        Ok(watchdog)
    }

    /// The watchdog's pid.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.wake.take() {
            // EPIPE if it is gone already (SIGPIPE is ignored): reaped below.
            let _ = nix::unistd::write(&tx, &[STAND_DOWN]);
        }
        // Reaped before its stack is unmapped (the field drops after this).
        let _ = super::spawn::reap_blocking(self.pid);
    }
}

struct Started {
    pid: u32,
    #[cfg(target_arch = "x86_64")]
    stack: super::spawn::Stack,
}

/// The watchdog's stack: it runs a loop of a few raw syscalls.
#[cfg(target_arch = "x86_64")]
const STACK: usize = 16 * 1024;

/// Forked straight into `home` (`CLONE_INTO_CGROUP`, Linux 5.7, as the
/// command is into the run's): no window outside it, and no migration
/// through `cgroup.procs`, which waits for an RCU grace period.
#[cfg(target_arch = "x86_64")]
fn clone_watchdog(arg: usize, home: BorrowedFd<'_>) -> io::Result<Started> {
    let stack = super::spawn::Stack::map(STACK)?;
    let mut cl = super::spawn::CloneArgs {
        flags: super::spawn::CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: home.as_raw_fd() as u64,
        ..super::spawn::CloneArgs::default()
    };
    // SAFETY: `watch` only reads its argument and issues raw syscalls on
    // its own stack (the mapping outlives it: it is unmapped only after
    // the watchdog is reaped, or goes with the memory when lockrun and it
    // are both gone); every signal is blocked in it.
    let ret = unsafe { super::spawn::clone_on_stack(&mut cl, &stack, watch, arg) };
    if ret < 0 {
        let e = io::Error::from_raw_os_error((-ret) as i32);
        return Err(io::Error::new(
            e.kind(),
            format!("clone3 into its cgroup (CLONE_INTO_CGROUP, Linux 5.7): {e}"),
        ));
    }
    Ok(Started {
        pid: ret as u32,
        stack,
    })
}

/// Forked, then moved into `home` through its `cgroup.procs` before the
/// command starts.
#[cfg(not(target_arch = "x86_64"))]
fn clone_watchdog(arg: usize, home: BorrowedFd<'_>) -> io::Result<Started> {
    let started = fork_watchdog(arg)?;
    let procs = format!("/proc/self/fd/{}/cgroup.procs", home.as_raw_fd());
    let moved = std::fs::OpenOptions::new()
        .write(true)
        .open(procs)
        .and_then(|mut f| std::io::Write::write_all(&mut f, started.pid.to_string().as_bytes()));
    if let Err(e) = moved {
        // SAFETY: kill(2) of the child just forked, not yet reaped.
        unsafe { libc::kill(started.pid as i32, libc::SIGKILL) };
        let _ = super::spawn::reap_blocking(started.pid);
        return Err(io::Error::new(
            e.kind(),
            format!("moving the watchdog into its cgroup: {e}"),
        ));
    }
    Ok(started)
}

#[cfg(not(target_arch = "x86_64"))]
fn fork_watchdog(arg: usize) -> io::Result<Started> {
    // SAFETY: fork; the child runs `watch` (raw syscalls on its own copy
    // of the memory) with every signal blocked and never returns.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old);
        let pid = libc::fork();
        if pid == 0 {
            watch(arg);
        }
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut());
        if pid < 0 {
            return Err(err);
        }
        Ok(Started { pid: pid as u32 })
    }
}

/// The watchdog's side: never returns. Keeps `cgroup.kill` (high half of
/// `arg`) and the pipe's read end (low half), closes every other
/// descriptor of its copy of the table (lockrun's stdout among them, which
/// the caller may read to its end), then waits.
extern "C" fn watch(arg: usize) -> ! {
    let kill = (arg >> 32) as u32;
    let wake = (arg & 0xffff_ffff) as u32;
    let (lo, hi) = (kill.min(wake), kill.max(wake));
    // SAFETY: raw syscalls on integers and on buffers of this stack and of
    // static memory.
    unsafe {
        raw(libc::SYS_close_range, [0, lo as usize - 1, 0]);
        if hi > lo + 1 {
            raw(libc::SYS_close_range, [lo as usize + 1, hi as usize - 1, 0]);
        }
        raw(
            libc::SYS_close_range,
            [hi as usize + 1, u32::MAX as usize, 0],
        );
        raw(
            libc::SYS_prctl,
            [libc::PR_SET_NAME as usize, NAME_C.as_ptr() as usize, 0],
        );
        let mut byte = 0u8;
        let n = loop {
            let n = raw(
                libc::SYS_read,
                [wake as usize, std::ptr::addr_of_mut!(byte) as usize, 1],
            );
            if n != -(libc::EINTR as isize) {
                break n;
            }
        };
        // End of file, or a read that failed: lockrun is gone; end the run.
        if n != 1 {
            raw(libc::SYS_write, [kill as usize, b"1".as_ptr() as usize, 1]);
        }
        raw(libc::SYS_exit, [0, 0, 0]);
    }
    // SAFETY: exit does not return; the instruction traps if it ever did.
    unsafe { std::hint::unreachable_unchecked() }
}

/// A syscall of up to three arguments; the result, or -errno. Writes no
/// `errno`.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(nr: libc::c_long, a: [usize; 3]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a syscall and arguments valid for it; the
    // syscall instruction clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A syscall of up to three arguments; the result, or -errno (in a forked
/// child, whose `errno` is its own).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw(nr: libc::c_long, a: [usize; 3]) -> isize {
    // SAFETY: the caller passes a syscall and arguments valid for it.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2]) } as isize;
    if r < 0 {
        -(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as isize)
    } else {
        r
    }
}
