//! Step 9 of a run, its start (see [`super`]): the command spawned into
//! the run's cgroup with the child-side confinement ([`crate::sys`]) as
//! its `pre_exec`, the supervised filter's listener received, and the
//! seccomp supervisor ([`crate::supervise`]) started.

use std::ffi::OsString;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use super::{RunError, Started};
use crate::audit::kernel::KernelAudit;
use crate::supervise::{Config, Supervisor};
use crate::sys::spawn::{self, Child, SpawnError};
use crate::sys::supervisor_calls::recv_fds;
use crate::sys::{ChildPlan, Report};

/// The command, running, and what watches it.
pub(super) struct Spawned {
    pub child: Child,
    pub supervisor: Supervisor,
    /// The command's mount namespace, held until the teardown (see there).
    pub mount_namespace: Option<OwnedFd>,
}

/// The command spawned and supervised; or, where its exec failed, why it
/// never started.
pub(super) async fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cgroup: BorrowedFd<'_>,
    (plan, report): (ChildPlan, Report),
    supervise: (OwnedFd, Config),
    kernel_audit: Option<&KernelAudit>,
) -> Result<Result<Spawned, Started>, RunError> {
    tracing::debug!("9. spawning");
    if let Some(k) = kernel_audit {
        k.wait_for_baseline();
    }
    let mut child = match spawn::spawn(argv, env, cgroup, plan, report) {
        Ok(c) => c,
        Err(SpawnError::Clone(source)) => {
            return Err(RunError::Child {
                what: "clone3 into the run's cgroup",
                source,
            })
        }
        Err(SpawnError::Confine(step, source)) => return Err(RunError::Confine { step, source }),
        Err(SpawnError::Exec(e)) => {
            let started = match e.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => Started::NotFound(e),
                _ => Started::NotExecutable(e),
            };
            return Ok(Err(started));
        }
    };
    // Held until the teardown (see there): the command's exit then leaves
    // the namespace standing.
    let mount_namespace = child.take_mount_namespace();
    // The child sent the listener (and its root) before exec; without it, its notified
    // syscalls would fail (ENOSYS): refuse the run rather than limp.
    let (listener_rx, config) = supervise;
    let supervisor = match recv_fds(listener_rx.as_fd())
        .and_then(|[listener, root]| Supervisor::start(listener, root, config))
    {
        Ok(s) => s,
        Err(source) => {
            child.kill().await;
            return Err(RunError::Child {
                what: "receiving the seccomp listener and starting the supervisor",
                source,
            });
        }
    };
    drop(listener_rx);
    tracing::debug!("9. the command is running; its supervisor started");
    let pid = child.id();
    if let Some(k) = kernel_audit {
        k.watch(pid);
    }
    Ok(Ok(Spawned {
        child,
        supervisor,
        mount_namespace,
    }))
}
