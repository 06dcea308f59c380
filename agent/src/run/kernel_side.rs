//! Steps 3 (seccomp) to 7 of a run (see [`super`]), made by lockrun's
//! own thread while the Landlock walk goes on on the worker thread: the
//! seccomp filters, the run's cgroup and its limits, the proxy, the hooks'
//! registration, the run's IPC namespace and watchdog, and, below Landlock
//! ABI 7, the run's kernel audit rules for its refused calls.

use std::ffi::OsString;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use lockrun_unix::UnixMode;

use super::{chain, RunError};
use crate::audit::kernel::KernelAudit;
use crate::audit::syscalls::refer::Granted;
use crate::audit::syscalls::{self, RunRules};
use crate::audit::{AuditLog, Event, Layer};
use crate::bpf::hooks::{NetworkHooks, RedirectTo};
use crate::bpf::shared::build_id;
use crate::cgroup::RunCgroup;
use crate::fs::{grant_rights, handled_rights, FsSandbox, OwnFs};
use crate::kernel::Gap;
use crate::policy::Policy;
use crate::proxy::inspector::Inspector;
use crate::proxy::tls::RunTls;
use crate::proxy::{ProxyConfig, RunningProxy, SystemResolver};
use crate::seccomp::combined;
use crate::shown::say;
use crate::state::RunDir;
use crate::sys::watchdog::Watchdog;
use crate::sys::{make_fs, Step};

/// Steps 3 (seccomp) to 7 but the kernel audit reader: [`kernel_side`],
/// then the run's IPC namespace and message queues, and its watchdog.
pub(super) fn kernel_side_and_watchdog(
    policy: &Policy,
    inspector: Arc<Inspector>,
    dir: &RunDir,
    audit: &Arc<AuditLog>,
) -> Result<(KernelSide, Watchdog, Option<OwnedFd>), RunError> {
    let k = kernel_side(policy, inspector, dir, audit)?;
    own_ipc_namespace()?;
    let queues = own_message_queues()?;
    tracing::debug!("7. the run's IPC namespace and message queues made");
    // The watchdog: should lockrun die from here on, it kills what is
    // in the run's cgroup.
    let home = k.cgroup.watchdog_home().map_err(|e| {
        RunError::Watchdog(std::io::Error::other(format!(
            "its cgroup beneath the run's: {} (a limit on nested cgroups, \
                 cgroup.max.depth or cgroup.max.descendants above it?)",
            chain(&e)
        )))
    })?;
    let watchdog = Watchdog::start(k.cgroup.dir_fd(), home.as_fd()).map_err(RunError::Watchdog)?;
    drop(home);
    tracing::debug!("7. watchdog started (pid {})", watchdog.pid());
    Ok((k, watchdog, queues))
}

/// What steps 3–6 made, in setup order: the seccomp filter, the listener's
/// socketpair, the cgroup, the proxy and its variables, the hooks'
/// registration (step 7's kernel audit reader starts beside). Each tears
/// itself down on drop.
pub(super) struct KernelSide {
    pub seccomp: seccompiler::BpfProgram,
    pub listener_rx: OwnedFd,
    pub listener_tx: OwnedFd,
    pub cgroup: RunCgroup,
    /// Where the run's task or memory limit is a cgroup of a v1
    /// hierarchy: its `tasks` file, which the command's process joins
    /// first, with the step that names it.
    pub join_v1: Vec<(Step, OwnedFd)>,
    pub proxy: Option<RunningProxy>,
    pub proxy_env: Vec<(OsString, OsString)>,
    /// The run's CA bundle and CA, which the ruleset lets the run read.
    pub trusted: Vec<PathBuf>,
    pub hooks: Option<NetworkHooks>,
}

/// Variables for the child's environment.
type Vars = Vec<(OsString, OsString)>;

/// Step 5's proxy, and for hosts whose requests it inspects, the variables
/// that point the run at its CA bundle and the files the run may read.
fn start_proxy(
    policy: &Policy,
    inspector: Arc<Inspector>,
    dir: &RunDir,
    audit: &Arc<AuditLog>,
    weaken_hooks: bool,
) -> Result<(RunningProxy, Vars, Vec<PathBuf>), RunError> {
    let mut config = ProxyConfig::from_policy(policy, audit.clone(), Arc::new(SystemResolver));
    config.transparent = !weaken_hooks && crate::kernel::redirect().is_ok();
    config.inspector = inspector;
    let mut env = Vec::new();
    let mut files = Vec::new();
    if !config.inspector.is_empty() {
        let (tls, vars) = run_ca(policy, dir, &config.inspector.inspected_names())?;
        config.tls = Some(tls);
        env = vars;
        let (bundle, ca) = trusted_files(dir);
        files = vec![bundle, ca];
    }
    Ok((RunningProxy::start(config)?, env, files))
}

/// The run's CA for the hosts whose TLS the proxy terminates (`names`, and
/// nothing else: its name constraints), its bundle
/// (the system's roots and the CA) and the CA alone written in the run dir
/// (which the run cannot write; [`trusted_files`] grants it their reading),
/// and the variables that point each ecosystem's clients at them.
fn run_ca(
    policy: &Policy,
    dir: &RunDir,
    names: &[String],
) -> Result<(Arc<RunTls>, Vars), RunError> {
    let tls = RunTls::new(dir.id(), policy.network.tls_ca.as_deref(), names)?;
    let (bundle, ca) = trusted_files(dir);
    let write = |path: &PathBuf, text: String| {
        std::fs::write(path, text).map_err(|source| RunError::Child {
            what: "writing the run's CA bundle",
            source,
        })
    };
    write(&bundle, tls.bundle_pem())?;
    write(&ca, tls.ca_pem())?;
    Ok((Arc::new(tls), trust_vars(&bundle, &ca)))
}

/// The run's CA bundle and its CA alone, in the run dir.
pub(super) fn trusted_files(dir: &RunDir) -> (PathBuf, PathBuf) {
    let root = dir.tmp().parent().unwrap_or(dir.tmp());
    (root.join("ca-bundle.pem"), root.join("ca.pem"))
}

/// Where each ecosystem reads the CAs it trusts: OpenSSL (and Python's
/// `ssl`, Ruby, PHP), curl, Python `requests` and pip, git, cargo, the AWS
/// SDKs, Deno and Nix take the bundle; Node adds `NODE_EXTRA_CA_CERTS` to
/// its own roots, so the CA alone.
fn trust_vars(bundle: &std::path::Path, ca: &std::path::Path) -> Vars {
    let mut v: Vars = [
        "SSL_CERT_FILE",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "PIP_CERT",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
        "AWS_CA_BUNDLE",
        "DENO_CERT",
        "NIX_SSL_CERT_FILE",
    ]
    .into_iter()
    .map(|k| (k.into(), bundle.as_os_str().to_owned()))
    .collect();
    v.push(("NODE_EXTRA_CA_CERTS".into(), ca.as_os_str().to_owned()));
    v
}

/// Steps 3 (seccomp) to 6, run while the Landlock walk goes on beside.
fn kernel_side(
    policy: &Policy,
    inspector: Arc<Inspector>,
    dir: &RunDir,
    audit: &Arc<AuditLog>,
) -> Result<KernelSide, RunError> {
    // 3. the seccomp filters (the Landlock ruleset is on its way, above).
    let seccomp = combined(super::kernel().fallbacks())?;
    tracing::debug!("3. seccomp filter compiled");
    // The supervised filter's listener travels from the child to lockrun
    // through this socketpair (SCM_RIGHTS), after the child loaded it.
    let (listener_rx, listener_tx) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| RunError::Child {
        what: "socketpair for the seccomp listener",
        source: e.into(),
    })?;

    // 4. the run's cgroup; the child is born in it (clone3 CLONE_INTO_CGROUP).
    //    Dropped (killed and removed) on every path after this.
    #[cfg(feature = "weaken-for-tests")]
    let weaken_hooks = std::env::var_os("LOCKRUN_TEST_WEAKEN").is_some_and(|v| v == "hooks");
    #[cfg(not(feature = "weaken-for-tests"))]
    let weaken_hooks = false;
    #[cfg(feature = "weaken-for-tests")]
    let cgroup = if weaken_hooks {
        RunCgroup::create_outside_the_hooks(dir.id())
    } else {
        RunCgroup::create(build_id(), dir.id())
    };
    #[cfg(not(feature = "weaken-for-tests"))]
    let cgroup = RunCgroup::create(build_id(), dir.id());
    let mut cgroup = cgroup?;
    // Its task limit: a fork bomb stops there, not at the machine's pids;
    // its memory limit: the kernel's OOM killer acts in the run, not on
    // the machine.
    let join_tasks = cgroup.limit_tasks(dir.id(), policy.run.max_tasks)?;
    let join_memory = cgroup.limit_memory(dir.id(), policy.run.max_memory)?;
    let join_v1: Vec<_> = [
        join_tasks.map(|fd| (Step::JoinTasks, fd)),
        join_memory.map(|fd| (Step::JoinMemory, fd)),
    ]
    .into_iter()
    .flatten()
    .collect();
    tracing::debug!("4. cgroup created, its tasks and memory limited");

    // 5. the proxy, when the policy allows any host; its endpoint is the one
    //    way out the hooks allow, beside the policy's loopback endpoints.
    //    Where the kernel can redirect, with the run's resolver and
    //    transparent listener, where the hooks bring the run's DNS and its
    //    connects to the addresses that resolver hands out.
    let (proxy, trust_env, trusted) = if policy.network.needs_proxy() {
        let (p, env, files) = start_proxy(policy, inspector, dir, audit, weaken_hooks)?;
        (Some(p), env, files)
    } else {
        (None, Vec::new(), Vec::new())
    };
    tracing::debug!(
        "5. proxy: {}",
        if proxy.is_some() { "started" } else { "none" }
    );
    let mut allowed: Vec<std::net::SocketAddr> = proxy.iter().map(RunningProxy::addr).collect();
    allowed.extend(policy.network.local.iter().copied());
    let proxy_env: Vec<(OsString, OsString)> = proxy
        .iter()
        .flat_map(RunningProxy::env_vars)
        .map(|(k, v)| (k.into(), v.into()))
        .chain(trust_env)
        .collect();

    // 6. the kernel network hooks: the run registered in the build's hooks,
    //    which judge its cgroup from its parent; their refusals stream
    //    into the audit log while the run goes on.
    let hooks = if weaken_hooks {
        say!("lockrun: TEST BUILD: the run's cgroup is deliberately outside the network hooks (LOCKRUN_TEST_WEAKEN=hooks)");
        None
    } else {
        let unix_allowed = [policy.worktree.clone(), dir.tmp().to_path_buf()];
        // Supervised: the seccomp supervisor resolves and performs the
        // command's pathname connects; the hooks refuse any it names itself.
        let exposed: Vec<u16> = policy.network.expose.iter().map(|p| p.get()).collect();
        let redirect = proxy.as_ref().and_then(|p| {
            Some(RedirectTo {
                transparent: p.transparent_addr()?,
                resolver: p.resolver_addr()?,
            })
        });
        let mut h = NetworkHooks::attach_with(
            &cgroup,
            dir.id(),
            &allowed,
            &exposed,
            &unix_allowed,
            UnixMode::supervised(super::kernel().fallbacks()),
            redirect,
        )?;
        // Before the command starts: until then the listener refuses all.
        if let (Some(p), Some(originals)) = (&proxy, h.originals()) {
            p.set_originals(originals);
        }
        h.spawn_audit_reader(audit.clone())?;
        tracing::debug!("6. run registered in the hooks");
        Some(h)
    };

    Ok(KernelSide {
        seccomp,
        listener_rx,
        listener_tx,
        cgroup,
        join_v1,
        proxy,
        proxy_env,
        trusted,
        hooks,
    })
}

/// System V IPC objects (shared memory, message queues, semaphores) are
/// not files: Landlock does not see them, and a command, often
/// uid 0 like the objects' owners, could attach another process's shared
/// memory and write into it, or send to its queue. So the run gets an IPC
/// namespace of its own, where only the objects its processes make exist;
/// those outside are not there to name (`ENOENT`, `EINVAL`). The command
/// cannot leave it: `setns` and `unshare` are on the seccomp deny list.
///
/// lockrun's own thread moves into it (`unshare(CLONE_NEWIPC)`; the
/// command is cloned from this thread and starts there), so the time the
/// kernel takes to make one is spent while the Landlock walk finishes on
/// the worker thread. lockrun uses no IPC object itself. A kernel without IPC
/// namespaces refuses the run: nothing else keeps those objects apart.
pub(super) fn own_ipc_namespace() -> Result<(), RunError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWIPC)
        .map_err(|e| RunError::IpcNamespace(e.into()))
}

/// The run's POSIX message queues: the mqueue filesystem of its IPC
/// namespace, which this thread is in ([`own_ipc_namespace`]), where
/// `mq_open` opens them. Made here (`fsopen`, `fsmount`), a detached
/// mount that lockrun holds until the run has ended and closes on the
/// worker thread: the last close of a detached mount waits out an RCU
/// grace period, which the child would pay before the command starts. `None` on a
/// kernel without POSIX message queues (`ENODEV`): there are none to keep
/// apart, nor to grant.
fn own_message_queues() -> Result<Option<OwnedFd>, RunError> {
    match make_fs(&OwnFs::MessageQueues.new_fs()) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
            tracing::debug!("no POSIX message queues in this kernel (fsopen mqueue: ENODEV)");
            Ok(None)
        }
        Err(source) => Err(RunError::Child {
            what: "the run's own message queues (fsopen and fsmount of mqueue)",
            source,
        }),
    }
}

/// Below Landlock ABI 7, kernel audit's records of the run's refused calls
/// show its filesystem refusals ([`crate::audit::syscalls`]): the run's
/// login uid from its cgroup, its rules loaded (removed when the guard
/// drops), and the reader told whose calls to take, with the run's
/// `writable` paths and what its ruleset `fs` grants. `None` where
/// Landlock logs them itself, or where they cannot be shown and the policy
/// accepts that gap; a refusal of the run where it does not.
pub(super) fn refused_calls_seen(
    policy: &Policy,
    cgroup: &RunCgroup,
    reader: Option<&KernelAudit>,
    (writable, fs): (&[PathBuf], &FsSandbox),
    audit: &AuditLog,
) -> Result<Option<RunRules>, RunError> {
    let kernel = super::kernel();
    let Some(probe) = kernel.refusals_by_syscall_audit() else {
        // Landlock logs them itself; or they cannot be shown, which the
        // policy accepts or (a caller that may not ask) is refused here.
        return match kernel.syscall_audit {
            Some(Err(why))
                if !policy
                    .run
                    .accept_gaps
                    .contains(&Gap::FilesystemRefusalsUnseen) =>
            {
                Err(RunError::RefusalsUnseen(why.to_string()))
            }
            _ => Ok(None),
        };
    };
    let reach = syscalls::Reach::below_abi_7(kernel.landlock_abi(), kernel.fallbacks());
    let notice = |message: String| {
        audit.record(Event::Notice {
            layer: Layer::Filesystem,
            message,
        });
    };
    let set_up = reader
        .ok_or_else(|| "the kernel audit reader did not start".to_owned())
        .and_then(|reader| {
            let (rules, turned_on) = syscalls::login_uid_of(cgroup.id())
                .and_then(|uid| syscalls::RunRules::add(uid, probe, &reach.rules()))
                .map_err(|e| e.to_string())?;
            reader.watch_calls(syscalls::Watch {
                login_uid: rules.login_uid(),
                writable: writable.to_vec(),
                granted: granted(fs),
                cgroup: cgroup.seen_in_proc(),
                reach,
            });
            Ok((rules, turned_on))
        });
    match set_up {
        Ok((rules, turned_on)) => {
            if turned_on {
                notice(
                    "kernel audit was off; lockrun turned it on (audit_enabled=1) so that the \
                     kernel records the run's refused calls"
                        .into(),
                );
            }
            let reaches = if reach.rules().contains(&syscalls::Refused::Reach) {
                "; signals to processes outside the run and connects and sends to abstract \
                 sockets bound outside it, from its signal and socket calls refused with EPERM"
            } else {
                ""
            };
            notice(format!(
                "Landlock logs no refusal below ABI 7 (this kernel's is {}): filesystem refusals \
                 are taken from kernel audit's records of the calls of the run's login uid {} \
                 refused with EACCES, their access derived from the call (refusals by permission \
                 bits are among them), and of its links and renames refused with EXDEV where \
                 Landlock refused them (not a move across mounts){reaches}. {PROC_UNSEEN}",
                kernel.landlock_abi(),
                rules.login_uid(),
            ));
            Ok(Some(rules))
        }
        Err(why) => {
            let gap = Gap::FilesystemRefusalsUnseen;
            if !policy.run.accept_gaps.contains(&gap) {
                return Err(RunError::RefusalsUnseen(why));
            }
            let message = format!(
                "this kernel cannot hold a promise, which the policy accepts ({}): {gap} (kernel \
                 audit's syscall records, which stand in for Landlock's denial logging, could not \
                 be set up: {why})",
                gap.name()
            );
            say!("lockrun: warning: {message}");
            notice(message);
            Ok(None)
        }
    }
}

/// What the run's Landlock ruleset grants, by path: the rule of each path
/// the walk granted, and of each filesystem of the run's own, granted
/// where the child mounts it.
fn granted(fs: &FsSandbox) -> Granted {
    let rules = fs
        .grants()
        .iter()
        .map(|(p, g)| (p.clone(), grant_rights(*g)));
    let own = (fs.own_filesystems().iter()).map(|o| (o.path().to_path_buf(), o.rights()));
    Granted {
        handled: handled_rights(),
        rules: rules.chain(own).collect(),
    }
}

/// What no mechanism records below Landlock ABI 7, said in the notice of
/// every run whose refusals kernel audit shows there
/// ([`crate::audit::syscalls::reach`]).
const PROC_UNSEEN: &str = "Processes outside the run hidden from its /proc (Landlock's ptrace \
     scoping) are not recorded: a lookup of one fails as any missing path does (ENOENT), and a \
     listing leaves it out, with no record naming it";
