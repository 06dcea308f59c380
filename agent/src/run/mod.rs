//! The one place that orders the steps of a run: [`execute`] runs them,
//! in this order, each in a file named for its part (`setup`, `spawn`,
//! `wait`, `teardown`). These numbers are the ones the trace lines
//! (`LOCKRUN_LOG=debug`) give. Any setup failure refuses the run (exit 125,
//! one line naming what failed), and nothing runs.
//!
//! Setup ([`setup`]):
//! 1. the run dir `<state>/runs/<id>` with `tmp/` (0700) and `owner`
//!    ([`crate::state::RunDir`]);
//! 2. sweep stale run dirs (best effort, grace period respected; [`gc`]);
//! 3. the Landlock ruleset ([`crate::fs`]) and seccomp filters ([`crate::seccomp`]);
//!    the ruleset's walk from `/` starts before step 1 (it needs the temp
//!    dir's path, not the dir), on the worker thread ([`worker`]); its
//!    writable roots follow there once step 1 is done, and it is waited
//!    for after step 7;
//! 4. the run's cgroup ([`crate::cgroup`]) → its open `cgroup.procs` fd;
//! 5. the proxy ([`crate::proxy`]), when any host is allowed → its endpoint and `*_PROXY`;
//! 6. the eBPF hooks ([`crate::bpf`]): the build's, attached once to the
//!    cgroup's parent; the run registered in their maps, allowing only the
//!    proxy endpoint and the policy's loopback endpoints;
//! 7. the kernel audit reader for Landlock's denials ([`crate::audit::kernel`]),
//!    and, below Landlock ABI 7, the run's audit rule for its refused calls
//!    ([`crate::audit::syscalls`], once the ruleset is in: the rule names
//!    the run's cgroup);
//!    then an IPC namespace of the run's own
//!    ([`kernel_side::own_ipc_namespace`]), and the run's watchdog
//!    ([`crate::sys::watchdog`]: should lockrun die, it kills what is in
//!    the run's cgroup), made while the walk finishes;
//! 8. the child's environment, built explicitly; the command's stdin,
//!    stdout and stderr, off the machine's writable mounts ([`crate::stdio`]:
//!    reopened through read-only clones of their mounts, or relayed).
//!
//! Spawn and wait ([`spawn`], [`wait`]):
//! 9. spawn with the child-side confinement ([`crate::sys`]) as `pre_exec`
//!    (it joins the cgroup first, so no instruction runs outside), receive
//!    the supervised filter's listener and start the seccomp supervisor
//!    ([`crate::supervise`]), then supervise: forward SIGINT/SIGTERM/SIGHUP,
//!    wait.
//!
//! Teardown ([`teardown`]):
//! 10. in reverse, on every path: the cgroup killed and removed, the
//!     seccomp supervisor stopped (after the cgroup: until then a
//!     descendant may still call), the hooks drained and the run
//!     unregistered, the proxy stopped, the kernel audit read to its end
//!     (the run's audit rule removed on a thread of its own); the run dir
//!     is removed and the watchdog reaped on the worker thread, once the
//!     cgroup is gone (the cgroup's kill took the watchdog too, in its
//!     cgroup beneath the run's); the relays of the caller's files read to
//!     their end, and the caller's stdin file moved to where the run's
//!     reads left it, before any line of lockrun's own; last, the run's
//!     summary on stderr.
//!
//! Each layer's handle also tears itself down in `Drop` (like
//! [`crate::state::RunDir`]): bound in setup order inside `run`, they are
//! dropped in reverse on every path — a `?` during setup, the command's
//! exit, or lockrun being signalled (signals are caught from before step 1
//! and forwarded to the command, so lockrun always reaches its teardown
//! unless killed with `SIGKILL`; then the watchdog kills every process of
//! the run, the build's hooks keep judging the registered run, and
//! `lockrun gc` ([`gc`]) reaps its cgroup and run dir).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;

use lockrun_seccomp::SeccompError;

use crate::audit::{AuditError, AuditLog};
use crate::bpf::BpfError;
use crate::cgroup::CgroupError;
use crate::exit;
use crate::fs::FsError;
use crate::kernel::{Features, Gap, Kernel};
use crate::policy::Policy;
use crate::proxy::inspector::Inspector;
use crate::proxy::ProxyError;
use crate::shown::say;
use crate::state::{new_run_id, RunDirError};
use crate::sys::{raise_nofile, Step};
use crate::{audit, bpf};
use setup::SetUp;
use spawn::Spawned;
use teardown::Ended;
use wait::Signals;

pub mod audit_log;
pub mod core_dumps;
pub mod gc;
mod kernel_side;
pub mod nested;
mod setup;
mod spawn;
mod teardown;
mod wait;
mod worker;

pub use setup::child_env;

/// Why a run could not be set up. Every variant maps to exit 125.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error("filesystem sandbox: {0}")]
    Fs(#[from] FsError),
    #[error("{}", gaps_refused(.0))]
    Gaps(Vec<Gap>),
    #[error("{}", refusals_unseen(.0))]
    RefusalsUnseen(String),
    #[error("seccomp: {0}")]
    Seccomp(#[from] SeccompError),
    #[error("the command's stdin, stdout and stderr: {0}")]
    Stdio(#[from] crate::stdio::StdioError),
    #[error("preparing the child: {what}: {source}")]
    Child {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("confining the command: {} failed: {source} (the kernel refused a restriction; see `lockrun doctor`)", step.describe())]
    Confine { step: Step, source: std::io::Error },
    #[error("the worktree {} is in use by {}: its git hooks and config are put back at the end of each run, and two runs at once would each put back what the other changed; wait for it, or give each run its own worktree", worktree.display(), holder.map_or_else(|| "another run".to_owned(), |p| format!("another run (process {p})")))]
    WorktreeBusy {
        worktree: PathBuf,
        holder: Option<u32>,
    },
    #[error("reading the worktree's git hooks and config to keep them: {path}: {source} (lockrun puts them back after the run; it will not run without a copy)")]
    GitGuard {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("an IPC namespace of the run's own: unshare(CLONE_NEWIPC): {0} (without one, the command could write into other processes' SysV shared memory; a kernel needs CONFIG_IPC_NS)")]
    IpcNamespace(#[source] std::io::Error),
    #[error("the run's cgroup: {}", chain(.0))]
    Cgroup(#[from] CgroupError),
    #[error("the kernel network hooks: {}", chain(.0))]
    Hooks(#[from] BpfError),
    #[error("the proxy: {}", chain(.0))]
    Proxy(#[from] ProxyError),
    #[error("TLS for the hosts whose requests the proxy inspects: {0}")]
    Tls(#[from] crate::proxy::tls::TlsError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("installing signal handlers: sigaction: {0}")]
    Signals(#[source] std::io::Error),
    #[error("waiting for the command: wait4: {0}")]
    Wait(#[source] std::io::Error),
    #[error("the run's watchdog, which ends the run should lockrun die: {0}")]
    Watchdog(#[source] std::io::Error),
}

/// The refusal of a run whose filesystem refusals kernel audit's syscall
/// records were to show, which could not be set up (`why`), one line.
fn refusals_unseen(why: &str) -> String {
    let gap = Gap::FilesystemRefusalsUnseen;
    format!(
        "this kernel cannot hold one of lockrun's promises: {}: {gap} (this kernel lacks {}, and \
         kernel audit's syscall records, which stand in for it, could not be set up: {why}); \
         lockrun will not run the command with less. Run it on a newer kernel, or accept exactly \
         what is lost: --accept-gap {0}, or run.accept_gaps = [\"{0}\"] in the policy",
        gap.name(),
        gap.lacks()
    )
}

/// This kernel, with the stand-ins for what it lacks, each asked once by
/// the module that owns it: kernel audit's syscall records
/// ([`audit::syscalls::stand_in`]), lockrun's unix guard
/// ([`bpf::load::unix_guard`]) and its recorder of refusals by read-only
/// mounts ([`bpf::read_only::recorder`], which loads and attaches this
/// build's programs where no run has yet). What a run and `doctor` judge
/// the promises by.
#[must_use]
pub fn kernel() -> Kernel {
    Kernel::with_stand_ins(
        Features::get(),
        audit::syscalls::stand_in(),
        bpf::load::unix_guard(),
        bpf::read_only::recorder(),
    )
}

/// The refusal of a run on a kernel that cannot hold `gaps`, one line.
fn gaps_refused(gaps: &[Gap]) -> String {
    let each: Vec<String> = gaps
        .iter()
        .map(|g| {
            format!(
                "{}: {g} (this kernel lacks {})",
                g.name(),
                kernel().lacks(*g)
            )
        })
        .collect();
    let names: Vec<&str> = gaps.iter().map(|g| g.name()).collect();
    format!(
        "this kernel cannot hold {} of lockrun's promises: {}; lockrun will not run the command \
         with less. Run it on a newer kernel, or accept exactly what is lost: --accept-gap NAME, \
         or run.accept_gaps = [\"{}\"] in the policy",
        if gaps.len() == 1 {
            "one".to_owned()
        } else {
            gaps.len().to_string()
        },
        each.join("; "),
        names.join("\", \"")
    )
}

/// An error and its sources, one line: `a: b: c`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// The exit status lockrun reports for the command's status.
#[must_use]
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(exit::SETUP)
}

/// Run `argv` under `policy`; returns lockrun's exit status. Prints one line
/// on stderr for any failure of its own.
#[must_use]
pub fn execute(
    policy: &Policy,
    inspector: &Arc<Inspector>,
    argv: &[OsString],
    audit_log: Option<&Path>,
) -> i32 {
    let run_id = new_run_id();
    let audit = match audit_log.map(|path| audit_log::open(policy, path, &run_id)) {
        None => Arc::new(AuditLog::unkept()),
        Some(Ok(a)) => Arc::new(a),
        Some(Err(e)) => {
            say!("lockrun: {e}");
            return e.exit();
        }
    };
    // Before any descriptor is opened: the proxy and the ruleset walk get
    // the hard limit, the command the caller's.
    let nofile = raise_nofile().unwrap_or_else(|e| {
        say!("lockrun: warning: the descriptor limit could not be raised ({e}); the proxy keeps the caller's");
        None
    });
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return refuse(&RunError::Runtime(e)),
    };
    tracing::debug!("audit log open, runtime built");
    let (code, told) = match rt.block_on(run(policy, inspector, argv, &audit, nofile, run_id)) {
        Ok(code) => (code, false),
        Err(e) => (refuse(&e), matches!(e, RunError::Audit(_))),
    };
    for line in audit.summary() {
        say!("{line}");
    }
    // Lines the log lacks, unless that is why nothing ran.
    if let Some(lost) = audit.write_failure().filter(|_| !told) {
        say!("lockrun: warning: {lost}");
    }
    tracing::debug!("10. summary written");
    code
}

fn refuse(e: &RunError) -> i32 {
    say!("lockrun: {e}");
    exit::SETUP
}

/// How the command ended, or why it never started.
enum Started {
    Exited(ExitStatus),
    NotFound(std::io::Error),
    NotExecutable(std::io::Error),
}

/// The steps of a run, in order (see the module docs).
async fn run(
    policy: &Policy,
    inspector: &Arc<Inspector>,
    argv: &[OsString],
    audit: &Arc<AuditLog>,
    nofile: Option<libc::rlimit>,
    run_id: String,
) -> Result<i32, RunError> {
    // The worker thread (see [`worker`]), started first: it takes a
    // moment to be running.
    let worker = worker::Worker::start();
    // Signals are caught from here on, so that lockrun is never killed
    // between creating the run dir and removing it.
    let mut signals = Signals::new().map_err(RunError::Signals)?;
    // 1–8, bound in setup order, so that they drop in reverse on every path.
    let SetUp {
        mut dir,
        git_guard,
        terminals,
        watchdog,
        queues,
        linked,
        listener_rx,
        cgroup,
        proxy,
        hooks,
        kernel_audit,
        supervise,
        refused_calls,
        core_dumps,
        stdio,
        plan,
        report,
        env,
    } = setup::setup(policy, inspector, argv, audit, nofile, run_id, &worker)?;

    // A signal that arrived during setup cancels the run before anything starts.
    tokio::select! {
        biased;
        sig = signals.recv() => {
            say!("lockrun: {sig} during setup: the command was not started");
            return Ok(128 + sig as i32);
        }
        () = std::future::ready(()) => {}
    }

    // 9. spawn and supervise
    dir.command_starts();
    let spawned = spawn::spawn(
        argv,
        &env,
        cgroup.dir_fd(),
        (plan, report),
        (listener_rx, supervise),
        kernel_audit.as_ref(),
    )
    .await?;
    let (started, supervisor, mount_namespace) = match spawned {
        Err(never) => (never, None, None),
        Ok(Spawned {
            child,
            supervisor,
            mount_namespace,
        }) => {
            let status = wait::wait(&child, &mut signals).await?;
            (Started::Exited(status), Some(supervisor), mount_namespace)
        }
    };
    tracing::debug!("9. the command ended");

    // 10. teardown
    let ended = Ended {
        dir,
        git_guard,
        terminals,
        watchdog,
        queues,
        linked,
        cgroup,
        proxy,
        hooks,
        kernel_audit,
        refused_calls,
        core_dumps,
        stdio,
        started,
        supervisor,
        mount_namespace,
    };
    Ok(teardown::teardown(ended, argv, audit, &worker).await)
}

/// The first word of the command, for messages.
#[must_use]
pub fn program_name(argv: &[OsString]) -> &OsStr {
    argv.first().map_or(OsStr::new(""), OsString::as_os_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_is_status_or_128_plus_signal() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 128 + 9);
    }
}
