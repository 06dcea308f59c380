//! Steps 1–8 of a run (see [`super`]): everything the command needs, made
//! in the parent before it is spawned, and nothing run yet. Any failure
//! here refuses the run; what was made is torn down as it drops.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::kernel_side::{kernel_side_and_watchdog, refused_calls_seen, KernelSide};
use super::worker::{Pending, Worker};
use super::{core_dumps, gc, nested, RunError};
use crate::audit::kernel::{KernelAudit, KernelAuditError};
use crate::audit::syscalls::RunRules;
use crate::audit::{AuditLog, Event, Layer};
use crate::bpf::hooks::NetworkHooks;
use crate::cgroup::RunCgroup;
use crate::fs::links::{self, Judge, Marked};
use crate::fs::{
    check_abi, empty_fs, hidden_mounts, machine_secrets, masks, FsError, FsSandbox, Mask, OwnFs,
    ReadWalk, Sealed,
};
use crate::gitguard::{GitGuard, TakeError};
use crate::kernel::Gap;
use crate::policy::{runs_later, Policy};
use crate::proxy::inspector::Inspector;
use crate::proxy::RunningProxy;
use crate::shown::say;
use crate::state::RunDir;
use crate::stdio;
use crate::supervise;
use crate::sys::watchdog::Watchdog;
use crate::sys::{
    grant_beneath, has_effective_cap, make_fs, ChildPlan, LoginUid, OwnMount, ReadOnlyOutside,
    Report, Restrict,
};
use crate::terminal::Terminals;
use crate::worktree_lock::LOCKS_DIR;

/// What steps 1–8 made, in setup order: bound in this order by `run`, they
/// drop in reverse on every path.
pub(super) struct SetUp {
    pub dir: RunDir,
    pub git_guard: Option<GitGuard>,
    pub terminals: Terminals,
    pub watchdog: Watchdog,
    pub queues: Option<OwnedFd>,
    pub linked: Marked,
    pub listener_rx: OwnedFd,
    pub cgroup: RunCgroup,
    pub proxy: Option<RunningProxy>,
    pub hooks: Option<NetworkHooks>,
    pub kernel_audit: Option<KernelAudit>,
    pub supervise: supervise::Config,
    pub refused_calls: Option<RunRules>,
    pub core_dumps: core_dumps::CoreDumps,
    pub stdio: stdio::Kept,
    pub plan: ChildPlan,
    pub report: Report,
    pub env: Vec<(OsString, OsString)>,
}

/// The walk's result, with the run's own filesystems made beside it.
type Walked = (
    Result<(FsSandbox, Marked), FsError>,
    Option<std::io::Result<Vec<(PathBuf, OwnedFd)>>>,
);

/// The machine's secrets found, and what masks them.
type Secrets = (Vec<Mask>, std::io::Result<Option<Sealed>>);

/// Steps 1–8, in order (the module docs of [`super`] tell them).
#[allow(clippy::too_many_lines)] // the setup's order is the point: its steps, top to bottom
pub(super) fn setup(
    policy: &Policy,
    inspector: &Arc<Inspector>,
    argv: &[OsString],
    audit: &Arc<AuditLog>,
    nofile: Option<libc::rlimit>,
    run_id: String,
    worker: &Worker,
) -> Result<SetUp, RunError> {
    let runs_dir = RunDir::make_runs_dir(&policy.runs_dir(), &run_id)?;
    let tmp = RunDir::tmp_path(&runs_dir, &run_id);
    // A policy asking for more Landlock than the kernel has, or a kernel
    // that cannot hold a promise the policy does not let go, is refused
    // first, before any kernel object exists.
    prepare_writable(policy, &tmp);
    check_abi(policy)?;
    let accepted_gaps = gaps_accepted(policy)?;

    // 3. the Landlock ruleset: its walk from `/` starts first, on the
    //    worker thread (see [`super::worker`]); it needs the temp dir's
    //    path, not the dir. Its writable roots are added once the run dir
    //    is made (below).
    let read_walk = {
        let (policy, tmp, runs_dir) = (policy.clone(), tmp.clone(), runs_dir.clone());
        worker.run(move || FsSandbox::begin(&policy, &tmp, &runs_dir))
    };

    // 1. run dir (removed when `dir` drops, on every path below)
    let dir = RunDir::create_as(&runs_dir, run_id, policy.run.gc_grace)?;
    tracing::debug!("1. run dir {}", dir.id());

    let walk = finish_walk(worker, policy, read_walk);
    let secrets = find_secrets(worker, policy);
    let kernel_audit = start_kernel_audit(worker, audit, dir.id());

    // 2. sweep stale runs (after the run dir, so a bad state dir is reported once, by step 1)
    if let Err(e) = gc::sweep_at_start(&runs_dir, policy.run.gc_grace) {
        say!("lockrun: warning: sweeping {}: {e}", runs_dir.display());
    }
    tracing::debug!("2. stale runs swept");
    audit.record(Event::RunStart {
        run_id: dir.id().to_owned(),
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        policy: policy.sources.clone(),
        worktree: policy.worktree.clone(),
        seal_key: audit.key_id(),
    });
    // A log that cannot be written from the start is not kept: nothing has
    // run yet, and a run without the log asked for is refused.
    audit.check_written()?;
    tell_accepted(policy, accepted_gaps, audit);
    let (git_guard, terminals) = guard_worktree(policy, audit)?;

    // 3–7, beside the walk. Should both fail, the walk's error is the one
    // told (a deny list that cannot be built, before what the kernel
    // refused later); either way nothing ran.
    let kernel = kernel_side_and_watchdog(policy, inspector.clone(), &dir, audit);
    let kernel_audit_started = kernel_audit.wait();
    let Some((secrets, sealed)) = secrets.wait() else {
        return Err(FsError::WalkPanicked.into());
    };
    let Some((fs, made)) = walk.wait() else {
        return Err(FsError::WalkPanicked.into());
    };
    let ((kernel, watchdog, queues), (fs, linked)) = match (kernel, fs) {
        (Ok(kernel), Ok(fs)) => (kernel, fs),
        (_, Err(e)) => return Err(e.into()),
        (Err(e), Ok(_)) => return Err(e),
    };
    // In setup order, so that they drop in reverse.
    let KernelSide {
        seccomp,
        listener_rx,
        listener_tx,
        cgroup,
        join_v1,
        proxy,
        proxy_env,
        trusted,
        hooks,
    } = kernel;
    // Last, so that it drops first, as the last step set up.
    let kernel_audit = kernel_audit_or_notice(kernel_audit_started, audit);
    tell_findings(&fs, &linked, audit);
    // What the supervisor judges by, taken before the ruleset goes to the child.
    // The run's own /dev/shm is writable as its tmp is; the supervisor
    // opens it from the command's root, in the command's mount namespace.
    let own = fs.own_filesystems().to_vec();
    let supervise = supervise::Config {
        writable: (fs.writable_roots().iter().cloned())
            .chain(
                own.iter()
                    .filter(|o| o.writable())
                    .map(|o| o.path().to_path_buf()),
            )
            .collect(),
        denied: fs.denied().to_vec(),
        written_outside: fs.written_outside().to_vec(),
        unix: vec![policy.worktree.clone(), dir.tmp().to_path_buf()],
        cgroup_id: cgroup.id(),
        cgroup_path: cgroup.seen_in_proc(),
        audit: audit.clone(),
        fallbacks: super::kernel().fallbacks(),
    };
    tracing::debug!("3. Landlock ruleset received");
    // 7. below Landlock ABI 7, the run's refused calls from kernel audit
    //    (removed when this drops, on every path).
    let refused_calls = refused_calls_seen(
        policy,
        &cgroup,
        kernel_audit.as_ref(),
        (&supervise.writable, &fs),
        audit,
    )?;
    // The denied files' other names, judged from here on: the command has
    // not started.
    linked.arm(Judge {
        run_cgroup: supervise.cgroup_path.clone(),
        writable: supervise.writable.clone(),
        audit: audit.clone(),
    });
    let ruleset = fs.into_fd();
    grant_trusted(&ruleset, &trusted)?;
    let mounts = own_mounts(
        &ruleset,
        queues.as_ref(),
        &own,
        made,
        (secrets, sealed),
        &supervise.writable,
    )?;
    // A crash must not start a program outside the sandbox (see core_dumps).
    let core_dumps = core_dumps::CoreDumps::of_machine();
    if core_dumps.off() {
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message: core_dumps.to_string(),
        });
    }
    let (mut plan, report) = ChildPlan::new(
        Restrict {
            ruleset,
            log_denials: super::kernel().landlock_abi() >= 7,
        },
        seccomp,
        listener_tx,
        nofile,
        core_dumps.off(),
        mounts,
        join_v1,
        refused_calls.as_ref().map(|r| LoginUid::new(r.login_uid())),
    )
    .map_err(|source| RunError::Child {
        what: "report pipe",
        source,
    })?;
    // Without Landlock's device ioctl right: device files only under /dev.
    if super::kernel().devices_only_in_dev() {
        plan.keep_devices_in_dev();
    }
    // Where their refusals are seen: every mount read-only but the
    // writable roots, which then hold metadata changes outside them.
    if super::kernel().metadata_by_mounts() {
        plan.read_only_outside(read_only_outside(&supervise, &own)?);
    }
    // The caller's stdio, off the machine's writable mounts: last, so that
    // nothing but the plan holds the relays' pipes when the command starts.
    let stdio::Prepared { handed, kept } = stdio::prepare()?;
    plan.hand_stdio(handed);

    // 8. environment
    let env = child_env(
        std::env::vars_os(),
        policy,
        dir.id(),
        dir.tmp(),
        &proxy_env,
        inspector,
    );
    Ok(SetUp {
        dir,
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
        stdio: kept,
        plan,
        report,
        env,
    })
}

/// The walk's writable roots (added once the run dir is made), then what
/// follows it on the worker thread: the run's own filesystems, and the
/// denied files' other names.
fn finish_walk(
    worker: &Worker,
    policy: &Policy,
    read_walk: Pending<Result<ReadWalk, FsError>>,
) -> Pending<Walked> {
    let policy = policy.clone();
    worker.run(move || {
        let fs = read_walk
            .wait()
            .ok_or(FsError::WalkPanicked)
            .and_then(|r| r)
            .and_then(|begun| begun.finish(&policy));
        tracing::debug!("3. Landlock ruleset prepared");
        let made = fs.as_ref().ok().map(made_filesystems);
        tracing::debug!("3. the run's own filesystems made");
        // The denied files' other names (see crate::fs::links).
        let fs = fs.and_then(|fs| {
            let state = policy.run.state_dir.canonicalize();
            let state = state.as_deref().unwrap_or(&policy.run.state_dir);
            let linked = links::mark(fs.denied_found(), state, fs.writable_roots())?;
            Ok((fs, linked))
        });
        tracing::debug!("3. the denied files' other names marked");
        (fs, made)
    })
}

/// The machine's secrets to mask, and what masks them: a few `lstat`s,
/// queued after the walk, and, like the kernel audit reader's start,
/// taken back by the main thread should it be done with steps 4–7 first
/// ([`super::worker`]): whichever thread is free first does them.
fn find_secrets(worker: &Worker, policy: &Policy) -> Pending<Secrets> {
    let state_dir = policy.run.state_dir.clone();
    worker.run(move || {
        let secrets = machine_secrets();
        let sealed = if secrets.is_empty() {
            Ok(None)
        } else {
            Sealed::in_state_dir(&state_dir).map(Some)
        };
        tracing::debug!("3. the machine's secrets found");
        (secrets, sealed)
    })
}

/// Step 7's filesystem refusals: Landlock reports them to kernel audit.
/// Its reader starts on the worker thread, after the walk: it then has until
/// the spawn to take its baseline (the audit's lost count), which the
/// spawn waits for.
fn start_kernel_audit(
    worker: &Worker,
    audit: &Arc<AuditLog>,
    run_id: &str,
) -> Pending<Result<KernelAudit, KernelAuditError>> {
    let (audit, run_id) = (audit.clone(), run_id.to_owned());
    worker.run(move || {
        let started = KernelAudit::start(audit, &run_id);
        tracing::debug!("7. kernel audit reader started");
        started
    })
}

/// The kernel audit reader, started; or, where it could not be, a notice
/// that filesystem refusals are not collected.
fn kernel_audit_or_notice(
    started: Option<Result<KernelAudit, KernelAuditError>>,
    audit: &AuditLog,
) -> Option<KernelAudit> {
    let started = started.map_or_else(
        || Err("starting the kernel audit reader panicked".to_owned()),
        |r| r.map_err(|e| e.to_string()),
    );
    match started {
        Ok(k) => Some(k),
        Err(why) => {
            audit.record(Event::Notice {
                layer: Layer::Filesystem,
                message: format!("filesystem refusals are not collected: {why}"),
            });
            None
        }
    }
}

/// What the run goes on with, said on every run: the promises this kernel
/// cannot hold, which the policy lets go, and the writable roots that
/// reach where code runs later.
fn tell_accepted(policy: &Policy, accepted_gaps: Vec<Gap>, audit: &AuditLog) {
    // A promise this kernel cannot hold, which the policy lets go.
    for gap in accepted_gaps {
        let message = format!(
            "this kernel cannot hold a promise, which the policy accepts ({}): {gap} (this kernel lacks {})",
            gap.name(),
            super::kernel().lacks(gap)
        );
        say!("lockrun: warning: {message}");
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    }
    // A writable root that reaches where code runs later (the user's shell
    // start-up, git's config, ~/.cargo, the system's programs): the policy
    // may say so, but never silently.
    for reach in runs_later::reached_by(policy) {
        let message = reach.to_string();
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    }
}

/// The worktree's git hooks and config, read now, put back after the run
/// (see [`crate::gitguard`]): git runs them outside the sandbox. Then the
/// caller's terminal settings, likewise (see [`crate::terminal`]).
fn guard_worktree(
    policy: &Policy,
    audit: &AuditLog,
) -> Result<(Option<GitGuard>, Terminals), RunError> {
    let locks = policy.run.state_dir.join(LOCKS_DIR);
    let git_guard = GitGuard::take(&policy.worktree, &locks).map_err(|e| match e {
        TakeError::Busy { holder } => RunError::WorktreeBusy {
            worktree: policy.worktree.clone(),
            holder,
        },
        TakeError::Io(source) => RunError::GitGuard {
            path: policy.worktree.join(".git"),
            source,
        },
    })?;
    let terminals = Terminals::save();
    for h in git_guard.iter().flat_map(|g| g.lock().held_by_runs()) {
        let message = format!(
            "the worktree {} is also locked by process {} ({}) of lockrun run {}: a command of a \
             run, not a lockrun, so this run goes on (lockrun's own lock is in its state dir, \
             which no run can open)",
            policy.worktree.display(),
            h.pid,
            h.comm,
            h.run
        );
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    }
    Ok((git_guard, terminals))
}

/// What the walk found that the run should know before the command starts.
fn tell_findings(fs: &FsSandbox, linked: &Marked, audit: &AuditLog) {
    // A denied path inside a writable dir: the dir cannot be granted whole,
    // and the refusals it brings are explained before they happen.
    for n in fs.narrowed() {
        tracing::warn!("{n}");
        audit.record(Event::Narrowed(n.clone()));
    }
    // Denied trees the walk for other names did not finish: a file there
    // with a name outside is not guarded.
    for (dir, why) in &linked.unwalked {
        let message = format!(
            "other names (hard links) of the files beneath {} not looked for: {why}; a file \
             there with a name outside the denied paths is readable by that name",
            dir.display()
        );
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    }
    // A denied path among thousands of siblings: a cost of every run, said
    // so that it can be moved rather than paid unexplained.
    for c in fs.crowded() {
        let message = c.to_string();
        tracing::warn!("{message}");
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    }
}

/// The mounts the child makes: each of the run's own filesystems, made and
/// granted on the worker thread ([`made_filesystems`]) and moved by the
/// child onto its path, which hides the machine's; the run's message
/// queues, made in this thread's IPC namespace, are granted here; the
/// machine's secrets, masked; and the caller's terminal, named
/// `/dev/console`.
fn own_mounts(
    ruleset: &OwnedFd,
    queues: Option<&OwnedFd>,
    own: &[OwnFs],
    made: Option<std::io::Result<Vec<(PathBuf, OwnedFd)>>>,
    (secrets, sealed): Secrets,
    writable: &[PathBuf],
) -> Result<Vec<OwnMount>, RunError> {
    let mq = OwnFs::MessageQueues;
    let mut mounts = queues
        .map_or(Ok(()), |q| {
            grant_beneath(ruleset.as_fd(), q.as_fd(), mq.rights())
        })
        .and_then(|()| {
            let mut m = Vec::new();
            if let (Some(q), true) = (queues, own.contains(&mq)) {
                m.push(OwnMount::made(q.try_clone()?, mq.path())?);
            }
            // The others, and those hiding the machine's kernel filesystems.
            for (at, fs) in made.unwrap_or_else(|| Ok(Vec::new()))? {
                m.push(OwnMount::made(fs, &at)?);
            }
            // The machine's own secrets, masked.
            if let Some(sealed) = sealed? {
                for mask in masks(secrets, writable) {
                    m.push(OwnMount::mask(sealed.over(&mask), mask.path())?);
                }
            }
            Ok(m)
        });
    // The caller's terminal is on the machine's /dev/pts, out of sight
    // inside: it keeps a name there as /dev/console (as under bubblewrap),
    // which `ttyname` finds when it looks through /dev. Bound by its name,
    // before the run's own /dev/pts hides it: a descriptor keeps the mount
    // of lockrun's namespace, which the child's cannot bind from.
    if let (Ok(m), Some(tty)) = (&mut mounts, callers_terminal(own)) {
        match OwnMount::bind(&tty, Path::new(CONSOLE)) {
            Ok(b) => m.insert(0, b),
            Err(e) => mounts = Err(e),
        }
    }
    mounts.map_err(|source| RunError::Child {
        what: "the run's own /dev/shm, /dev/pts, /dev/mqueue and /proc, the hidden kernel filesystems and the masked machine secrets",
        source,
    })
}

/// The plan for every mount of the command's namespace read-only but its
/// writable roots ([`ReadOnlyOutside`]): the roots as the supervisor
/// judges them, the run's `own` writable filesystems among them, and
/// lockrun's working directory, which the command inherits.
fn read_only_outside(
    supervise: &supervise::Config,
    own: &[OwnFs],
) -> Result<ReadOnlyOutside, RunError> {
    let own: Vec<PathBuf> = own
        .iter()
        .filter(|o| o.writable())
        .map(|o| o.path().to_path_buf())
        .collect();
    let cwd = std::env::current_dir().ok();
    ReadOnlyOutside::new(&supervise.writable, &own, &supervise.denied, cwd.as_deref()).map_err(
        |source| RunError::Child {
            what: "the read-only mounts outside the writable roots (a writable root looked up)",
            source,
        },
    )
}

/// Writable paths beneath the state dir (e.g. a preset's
/// `{state}/agents/<harness>`) are lockrun's own: create them (0700) so the
/// harness finds its home. A writable path elsewhere that does not exist is
/// not granted; say so once.
fn prepare_writable(policy: &Policy, tmp: &Path) {
    for spec in &policy.fs.writable {
        let path = spec.resolve(tmp);
        if path.exists() {
            continue;
        }
        if path.starts_with(&policy.run.state_dir) && !path.starts_with(policy.runs_dir()) {
            if let Err(e) = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
            {
                say!(
                    "lockrun: warning: creating {}: {e}; it is not writable in this run",
                    path.display()
                );
            }
        } else {
            say!(
                "lockrun: warning: writable path {} does not exist; it is not granted in this run",
                path.display()
            );
        }
    }
}

/// Let the run read the run's CA bundle and CA (in the run dir, which it
/// cannot otherwise reach), and nothing else there.
fn grant_trusted(ruleset: &OwnedFd, files: &[PathBuf]) -> Result<(), RunError> {
    for f in files {
        let fail = |source| RunError::Child {
            what: "granting the run's CA bundle",
            source,
        };
        let file = std::os::unix::fs::OpenOptionsExt::custom_flags(
            std::fs::OpenOptions::new().read(true),
            libc::O_PATH | libc::O_CLOEXEC,
        )
        .open(f)
        .map_err(fail)?;
        grant_beneath(ruleset.as_fd(), file.as_fd(), crate::fs::read_file_rights())
            .map_err(fail)?;
    }
    Ok(())
}

/// The child's environment: the caller's, then TMPDIR/TMP/TEMP, the
/// policy's `[env]`, the proxy's variables, the secrets' placeholders
/// (never their values: a secret's variable holds its placeholder, or
/// nothing, when an optional one was not set), and the run's id
/// ([`nested::RUN_ID_VAR`]) — later entries win.
#[must_use]
pub fn child_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &Policy,
    run_id: &str,
    tmp: &Path,
    proxy_env: &[(OsString, OsString)],
    inspector: &Inspector,
) -> Vec<(OsString, OsString)> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = inherited.into_iter().collect();
    for k in ["TMPDIR", "TMP", "TEMP"] {
        env.insert(k.into(), tmp.as_os_str().to_owned());
    }
    for (k, v) in &policy.env {
        env.insert(k.into(), v.render(tmp).into());
    }
    for (k, v) in proxy_env {
        env.insert(k.clone(), v.clone());
    }
    for name in policy.secrets.keys() {
        env.remove(OsStr::new(name));
    }
    for (k, placeholder) in inspector.placeholders() {
        env.insert(k.into(), placeholder.into());
    }
    env.insert(nested::RUN_ID_VAR.into(), run_id.into());
    env.into_iter().collect()
}

/// `CAP_SYS_ADMIN`'s number.
const CAP_SYS_ADMIN: u32 = 21;

/// The promises this kernel cannot hold ([`crate::kernel::Gap`]), each of
/// which the policy accepts; or the refusal naming those it does not.
///
/// A caller without `CAP_SYS_ADMIN`, which every run needs (its mount
/// namespace, its cgroup, its eBPF hooks), is not judged here: what the
/// kernel was asked (a BPF program loaded, kernel audit's rules) was
/// refused for the caller's want of privileges, not for the kernel's lack,
/// and such a run is refused at its first privileged step, naming it. (A
/// run that got past that without kernel audit's records is refused where
/// its audit rule is added: [`refused_calls_seen`].)
fn gaps_accepted(policy: &Policy) -> Result<Vec<Gap>, RunError> {
    if !has_effective_cap(CAP_SYS_ADMIN).unwrap_or(true) {
        return Ok(Vec::new());
    }
    let (accepted, refused): (Vec<_>, Vec<_>) = super::kernel()
        .gaps()
        .into_iter()
        .partition(|g| policy.run.accept_gaps.contains(g));
    if refused.is_empty() {
        Ok(accepted)
    } else {
        Err(RunError::Gaps(refused))
    }
}

/// The run's own filesystems ([`crate::fs::OwnFs`]) but its message queues
/// (made by [`own_message_queues`], in lockrun's IPC namespace), each made
/// and granted in the ruleset, and an empty read-only filesystem for each
/// of the machine's kernel filesystems to hide (`HIDDEN_FS`): detached
/// mounts, with the path each goes onto. Made on the worker thread, once
/// the walk is done, while lockrun's thread sets up the rest; the child
/// only moves them onto their paths (a `move_mount` each), rather than
/// making them on the command's start.
fn made_filesystems(fs: &FsSandbox) -> std::io::Result<Vec<(PathBuf, std::os::fd::OwnedFd)>> {
    let mut made = Vec::new();
    for &o in fs.own_filesystems() {
        if o.reached_without_path() {
            continue;
        }
        let m = make_fs(&o.new_fs())?;
        grant_beneath(fs.ruleset_fd().as_fd(), m.as_fd(), o.rights())?;
        made.push((o.path().to_path_buf(), m));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    for at in hidden_mounts(&mountinfo) {
        made.push((at, make_fs(&empty_fs())?));
    }
    Ok(made)
}

/// Where the caller's terminal is named inside a run.
const CONSOLE: &str = "/dev/console";

/// The name of the first of lockrun's stdin, stdout and stderr that is a
/// terminal on the machine's `/dev/pts`, when the run has terminals of its
/// own (and there is a `/dev/console` to bind it on).
fn callers_terminal(own: &[OwnFs]) -> Option<PathBuf> {
    if !own.contains(&OwnFs::Terminals) || std::fs::symlink_metadata(CONSOLE).is_err() {
        return None;
    }
    (0..=2).find_map(|fd| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .ok()
            .filter(|p| p.starts_with(OwnFs::Terminals.path()))
    })
}
