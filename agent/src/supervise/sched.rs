//! Another task's CPU and I/O scheduling: nice, scheduling policy and
//! parameters, CPU affinity, I/O priority ([`crate::seccomp::NOTIFY_SCHED`]).
//!
//! The kernel lets a task set these for any task of its uid that has no
//! more capabilities than it (`cap_safe_nice`). A run's command has none,
//! so without this it could set every capability-less process of its uid
//! (another run's command, a CI job that dropped its capabilities) to nice
//! 19, `SCHED_IDLE` or the idle I/O class, or pin it to one CPU, and that
//! process could not undo it. Landlock's scoping covers signals, not these.
//!
//! The filter lets through every call naming the caller itself (pid 0; for
//! `setpriority`/`ioprio_set`, the process and `who` 0) and hands over the
//! rest. A call naming one task goes on (`CONTINUE`) when that task is in
//! the run's cgroup, which only the run's processes are (a run cannot make
//! cgroups or move tasks: Landlock refuses the writes): `pthread_setaffinity_np`,
//! `pthread_setschedparam` and `renice` of the run's own children keep
//! working. A task elsewhere, a process group, or every process of a uid is
//! refused (`EPERM`) and recorded.
//!
//! Decided on the registers and kernel state (the task's cgroup), never the
//! task's memory, so the kernel may run the call itself. Known limit: a
//! task of the run that exits between this check and the kernel's lookup,
//! and whose tid is handed to a process outside in that window, would get
//! the call. The kernel hands tids out in order and reuses one only after
//! the counter has gone round (`kernel.pid_max`), so the run cannot aim it.
#![forbid(unsafe_code)]

use super::{Reply, Shared, Task};
use crate::state::{membership, Membership};
use lockrun_seccomp::deny_list::Widens;
use lockrun_seccomp::notify::{sched_target, SchedTarget};

/// Answer a notified scheduling call.
pub fn handle(task: &Task<'_>, s: &Shared) -> Reply {
    let why = Widens::OtherScheduling;
    match sched_target(task.nr(), task.args()) {
        // Never notified; and the kernel decides on the caller itself.
        None | Some(SchedTarget::Caller) => Reply::Continue,
        Some(SchedTarget::Many(call)) => super::refuse_call(task, call, why),
        // No such task (the kernel answers ESRCH or EINVAL): nothing is named.
        Some(SchedTarget::Task { tid, .. }) if tid < 0 => Reply::Continue,
        Some(SchedTarget::Task { call, tid }) => match in_run(tid, s.cgroup_path.as_deref()) {
            Ok(true) => Reply::Continue,
            Ok(false) => super::refuse_call(task, format!("{call} of pid {tid}"), why),
            Err(e) => Reply::Errno(e),
        },
    }
}

/// Whether task `tid` (of lockrun's pid namespace, which is the run's) is in
/// the run's cgroup, `run` as `/proc/<pid>/cgroup` shows it. `None` (the
/// path is not known): in none. `ESRCH` when there is no such task.
fn in_run(tid: i32, run: Option<&str>) -> Result<bool, super::Errno> {
    let cgroups = match std::fs::read_to_string(format!("/proc/{tid}/cgroup")) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(libc::ESRCH),
        Err(_) => return Ok(false),
    };
    // Exactly the run's: the watchdog, beneath it, is lockrun's.
    Ok(run.is_some_and(|run| membership(&cgroups, run) == Membership::InRun))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_task_is_in_the_run_only_when_its_cgroup_is_the_runs() {
        let me = i32::try_from(std::process::id()).unwrap();
        let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let mine = crate::state::unified(&mine).unwrap().to_owned();
        assert_eq!(super::in_run(me, Some(&mine)), Ok(true));
        assert_eq!(super::in_run(me, Some("/lockrun/build-x/other")), Ok(false));
        assert_eq!(super::in_run(me, None), Ok(false));
        // A prefix of the run's path is another cgroup.
        assert_eq!(super::in_run(me, Some(&format!("{mine}/below"))), Ok(false));
        // pid_max is at most 2^22: no such task.
        assert_eq!(super::in_run(0x7fff_fff0, Some(&mine)), Err(libc::ESRCH));
    }
}
