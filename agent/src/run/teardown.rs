//! Step 10 of a run (see [`super`]): teardown, in reverse, on every path
//! once the command has started: what is left of the run killed, its
//! cgroup removed, the hooks drained, the proxy stopped, the kernel audit
//! read to its end, the worktree's git files and the caller's terminal put
//! back, the run dir removed. What cannot be removed is said, and left to
//! `lockrun gc`.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt as _;
use std::sync::Arc;

use super::core_dumps::{self, CoreDumps};
use super::worker::{self, Worker};
use super::{chain, exit_code, Started};
use crate::audit::kernel::KernelAudit;
use crate::audit::syscalls::{remove_beside, RunRules};
use crate::audit::{AuditLog, Event, Layer};
use crate::bpf::hooks::NetworkHooks;
use crate::cgroup::RunCgroup;
use crate::exit;
use crate::fs::links::Marked;
use crate::gitguard::GitGuard;
use crate::proxy::RunningProxy;
use crate::shown::say;
use crate::state::RunDir;
use crate::stdio;
use crate::supervise::Supervisor;
use crate::sys::watchdog::Watchdog;
use crate::terminal::Terminals;

/// What a run has that its teardown ends, in setup order; `started`, how
/// the command ended.
pub(super) struct Ended {
    pub dir: RunDir,
    pub git_guard: Option<GitGuard>,
    pub terminals: Terminals,
    pub watchdog: Watchdog,
    pub queues: Option<OwnedFd>,
    pub linked: Marked,
    pub cgroup: RunCgroup,
    pub proxy: Option<RunningProxy>,
    pub hooks: Option<NetworkHooks>,
    pub kernel_audit: Option<KernelAudit>,
    pub refused_calls: Option<RunRules>,
    pub core_dumps: CoreDumps,
    pub stdio: stdio::Kept,
    pub started: Started,
    pub supervisor: Option<Supervisor>,
    pub mount_namespace: Option<OwnedFd>,
}

/// Step 10; lockrun's exit status for how the command ended.
#[allow(clippy::too_many_lines)] // the teardown's order is the point: its steps, top to bottom
pub(super) async fn teardown(
    ended: Ended,
    argv: &[OsString],
    audit: &Arc<AuditLog>,
    worker: &Worker,
) -> i32 {
    // Bound in setup order, so that what is left drops in reverse.
    let Ended {
        mut dir,
        git_guard,
        terminals,
        watchdog,
        queues,
        linked,
        cgroup,
        proxy,
        mut hooks,
        kernel_audit,
        refused_calls,
        core_dumps,
        stdio,
        started,
        supervisor,
        mount_namespace,
    } = ended;
    // 10. teardown, in reverse: what is left of the run is killed, the hooks
    //     drained and the run unregistered, the proxy stopped, the kernel audit read to
    //     its end; the run dir is removed on the worker thread, once the cgroup
    //     is empty.
    let mut teardown_errors = Vec::new();
    // The command's mount namespace, which lockrun held so that the
    // command's exit, which lockrun waited for, did not tear it down
    // (see `Child::mount_namespace`): its teardown, an RCU grace period,
    // passes on the worker thread, now.
    let namespace_dropped = worker.run(move || drop(mount_namespace));
    // What is left of the run dies with its watchdog, in one instant; the
    // watchdog is reaped the moment it is dead (its exit is reported to
    // lockrun, its parent, at once), which is most often all that the
    // wait for the cgroup to empty then waits for: it finds it empty,
    // rather than waking from its first sleep to see so.
    let killed = cgroup.kill();
    drop(watchdog);
    let emptied = killed.and_then(|()| cgroup.wait_empty());
    // No task of the run is left (or none that `lockrun gc` will not
    // kill): the audit stream's end can be marked now, and the kernel
    // queues it while the rest is torn down. Nor a call of the run to
    // record: its audit rule goes, after the mark, on a thread of its own
    // (the kernel waits out an RCU grace period to delete it, holding its
    // audit lock, which the mark would wait for; on its own thread it
    // overlaps the namespace's teardown on the worker thread). With processes of the run left, the
    // rule stays for them, and `lockrun gc` removes it once their cgroup
    // is gone.
    let mut kernel_audit = kernel_audit;
    if let Some(k) = kernel_audit.as_mut() {
        k.send_marker();
    }
    let rules_removed = match (&emptied, refused_calls) {
        (Ok(()), Some(rules)) => remove_beside(rules),
        (Err(_), Some(rules)) => {
            rules.leave();
            None
        }
        (_, None) => None,
    };
    // No process of the run is left (or none that `lockrun gc` will not
    // kill): the run dir goes now, on the worker thread, beside the rest of the teardown (kept
    // for a later run only once the run's cgroup is known empty).
    let run_id = dir.id().to_owned();
    let all_gone = emptied.is_ok();
    if all_gone {
        dir.ended();
    }
    let dir_removed = worker.run(move || drop(dir));
    let removed = match emptied {
        Ok(()) => {
            record_limits_met(&cgroup, audit, &mut teardown_errors);
            cgroup.remove()
        }
        // Not killed, or not emptied in time: left to `lockrun gc`, not
        // killed and waited for again.
        Err(e) => {
            cgroup.leave();
            Err(e)
        }
    };
    // Its limits' v1 cgroups, empty with it, go on the worker thread (a
    // memory cgroup's rmdir, and, beneath the caller's, its `lockrun/`
    // too).
    let limits_removed = match removed {
        Ok(limits) => Some(worker.run(move || limits.remove())),
        Err(e) => {
            teardown_errors.push(format!("removing the run's cgroup: {}", chain(&e)));
            None
        }
    };
    if let Some(s) = supervisor {
        s.finish();
    }
    linked.finish();
    if let Some(h) = hooks.take() {
        if let Err(e) = h.finish(audit) {
            teardown_errors.push(format!(
                "unregistering the run from the hooks: {}",
                chain(&e)
            ));
        }
    }
    put_back(
        git_guard.as_ref(),
        terminals,
        (stdio, all_gone),
        &run_id,
        audit,
    );
    if let Some(p) = proxy {
        p.shutdown().await;
    }
    if let Some(k) = kernel_audit {
        k.finish();
    }
    if let Some(Some(Err(e))) = limits_removed.map(worker::Pending::wait) {
        teardown_errors.push(format!("removing the run's limits' cgroups: {}", chain(&e)));
    }
    tracing::debug!("10. torn down");
    for e in &teardown_errors {
        say!("lockrun: warning: {e} (`lockrun gc` will retry)");
    }

    let code = exit_of(started, &core_dumps, argv);
    audit.record(Event::RunEnd {
        run_id,
        exit: code,
        refused: audit.refused(),
        unwritten: 0,
    });
    // The message queues' mount: detached where the machine has no
    // /dev/mqueue, its last close waits out an RCU grace period, in step
    // with the namespace's teardown, while this thread has nothing else to do.
    drop(queues);
    // A panic there left what it had not removed to `lockrun gc`.
    let _ = namespace_dropped.wait();
    let _ = dir_removed.wait();
    if let Some(t) = rules_removed {
        let _ = t.join();
    }
    tracing::debug!("10. run dir removed");
    code
}

/// The forks refused at the run's task limit, and the processes killed
/// out of memory, read once the run's cgroup is empty.
fn record_limits_met(cgroup: &RunCgroup, audit: &AuditLog, teardown_errors: &mut Vec<String>) {
    // The forks refused at the run's task limit, counted by the
    // kernel until the last task of the run was gone.
    match cgroup.tasks_refused() {
        Some(Ok((limit, refused, ran_out))) if refused > 0 => {
            audit.record(Event::TaskLimit {
                limit,
                refused,
                ran_out,
            });
        }
        Some(Err(e)) => teardown_errors.push(format!(
            "reading the forks refused at the run's task limit: {}",
            chain(&e)
        )),
        _ => {}
    }
    // The processes killed out of memory, likewise.
    match cgroup.memory_report() {
        Some(Ok(r)) if r.oom_kills > 0 => audit.record(Event::MemoryLimit {
            limit: r.limit,
            killed: r.oom_kills,
            peak: r.peak,
            ran_out: r.ran_out,
        }),
        Some(Err(e)) => teardown_errors.push(format!(
            "reading the processes killed out of memory: {}",
            chain(&e)
        )),
        _ => {}
    }
}

/// No process of the run is left to race it (`all_gone`; else none that
/// `lockrun gc` will not kill): what it wrote into the caller's files is
/// read to its end, before any line of lockrun's own there, and the
/// caller's stdin file follows its reads ([`stdio::Kept::finish`]); the
/// worktree's git files and the caller's terminal go back as they were.
fn put_back(
    git_guard: Option<&GitGuard>,
    terminals: Terminals,
    (stdio, all_gone): (stdio::Kept, bool),
    run_id: &str,
    audit: &AuditLog,
) {
    // Nor a copy of a relay's pipe: the supervisor's went with it.
    for ending in stdio.finish(all_gone) {
        let message = ending.to_string();
        say!("lockrun: {message}");
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    }
    // No process of the run is left to race it: the worktree's git files
    // go back as they were.
    if let Some(g) = git_guard {
        for change in g.restore(run_id) {
            let message = change.to_string();
            say!("lockrun: git: {message}");
            audit.record(Event::Notice {
                layer: Layer::Filesystem,
                message,
            });
        }
    }
    // Nor to change the terminal again: its settings go back as they were.
    for restored in terminals.restore() {
        let message = restored.to_string();
        say!("lockrun: {message}");
        audit.record(Event::Notice {
            layer: Layer::Scope,
            message,
        });
    }
}

/// lockrun's exit status for how the command ended, and why a crash left
/// no core dump.
fn exit_of(started: Started, core_dumps: &CoreDumps, argv: &[OsString]) -> i32 {
    match started {
        Started::Exited(status) => {
            match status.signal() {
                Some(sig) if core_dumps.off() && core_dumps::dumps(sig) => say!(
                    "lockrun: the command died of signal {sig} and left no core dump: {core_dumps}"
                ),
                _ => {}
            }
            exit_code(status)
        }
        Started::NotFound(e) => {
            say!("lockrun: {}: {e}", argv[0].to_string_lossy());
            exit::NOT_FOUND
        }
        Started::NotExecutable(e) => {
            say!("lockrun: {}: {e}", argv[0].to_string_lossy());
            exit::NOT_EXECUTABLE
        }
    }
}
