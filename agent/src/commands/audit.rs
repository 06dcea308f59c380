//! `lockrun audit FILE [--json]`: read an audit log (JSON lines of
//! [`crate::audit::Record`]) and summarize each run in it — refusals grouped
//! by layer, by process and by target — each with the policy line (and the
//! equivalent flag) that would allow it, or the reason why none should.
//!
//! The suggestion logic is a set of pure functions (`suggest_proxy`,
//! `suggest_kernel`, `suggest_fs`) so that each case is unit-tested; reading
//! the file, reloading the run's policy and printing are the edge.
//!
//! What a log does not say, this command cannot know: CLI flags of the run
//! (`--deny-read`, `--state-dir`) are not recorded, and the policy files are
//! read again as they are now, not as they were during the run.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::audit::{
    times, Destination, Event, FsEvent, KernelNetEvent, Layer, ProxyEvent, ProxyVerdict, Record,
    ScopeTarget,
};
use crate::cli::AuditArgs;
use crate::policy::{HostName, Overrides, PathSpec, Policy};
use crate::proxy::guard::Range;
use crate::shown::say;

/// Whether a run's lines are the ones lockrun wrote, as far as this
/// reading could tell ([`crate::audit::seal`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SealStatus {
    /// Every line of the run is there, unaltered, in order, to its end.
    Verified { lines: u64 },
    /// Some are not: forged, altered, removed, reordered, or cut off.
    Broken { said: String },
    /// No line holds with the key at hand, and the run names another.
    OtherKey { key: String, said: String },
    /// Not checked: no key at hand.
    NotChecked { why: String },
    /// The lines carry no seal: not written by a run's lockrun.
    #[default]
    Unsealed,
}

impl SealStatus {
    /// The lines were checked and did not hold: forged or altered, or
    /// sealed with another key (another state dir's, or a forger's own).
    fn broken(&self) -> bool {
        matches!(self, Self::Broken { .. } | Self::OtherKey { .. })
    }
}

impl std::fmt::Display for SealStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Verified { lines } => {
                write!(
                    f,
                    "verified: all {lines} lines written by lockrun, unaltered"
                )
            }
            Self::Broken { said }
            | Self::OtherKey { said, .. }
            | Self::NotChecked { why: said } => f.write_str(said),
            Self::Unsealed => f.write_str(
                "NOT sealed: no line of this run carries a seal, so none can be told from one \
                 written by someone else (lockrun seals every line of a run's log)",
            ),
        }
    }
}

/// What lockrun suggests for one refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Suggestion {
    /// A policy line that would allow it, and the flag that does the same
    /// (none for `[[network.private]]`, which has no flag).
    Allow {
        policy: String,
        flag: Option<String>,
        note: Option<String>,
    },
    /// It could be allowed, but it should not be: no line is given.
    Warn { reason: String },
    /// No policy can allow it.
    Never { reason: String },
    /// Not a matter of one policy line: what happened and what to do.
    Explain { reason: String },
    /// Nothing to allow: it would have failed anyway.
    Harmless { reason: String },
}

/// Where a deny-read entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenySource {
    /// The secrets lockrun always denies ([`Policy::secret_floor`]).
    SecretFloor,
    /// `[filesystem] deny_read` of the run's policy.
    Policy,
    /// lockrun's state dir: other runs, other agents.
    StateDir,
}

/// What the filesystem suggestions need to know about the run's host.
#[derive(Debug, Clone, Default)]
pub struct FsContext {
    pub home: PathBuf,
    /// Deny-read entries and where each comes from.
    pub deny: Vec<(PathBuf, DenySource)>,
    /// lockrun state dirs (the default one, the policy's, and any seen in the log).
    pub state_dirs: Vec<PathBuf>,
    /// The writable dirs the run could not grant whole (from its log).
    pub narrowed: Vec<crate::fs::Narrowed>,
}

impl FsContext {
    fn deny_entry_for(&self, path: &Path) -> Option<&(PathBuf, DenySource)> {
        self.deny
            .iter()
            .filter(|(d, _)| path.starts_with(d))
            .max_by_key(|(d, _)| d.components().count())
    }

    fn state_dir_for(&self, path: &Path) -> Option<&PathBuf> {
        self.state_dirs.iter().find(|s| path.starts_with(s))
    }
}

/// One group of identical refusals.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub layer: Layer,
    /// What was refused: `host:port`, `ADDR:PORT`, `unix:PATH`, or a path.
    pub target: String,
    /// How: the access, protocol, method and reason.
    pub detail: String,
    pub count: u64,
    /// The commands that were refused (empty for the proxy, which does not know them).
    pub processes: Vec<String>,
    pub suggestion: Suggestion,
}

/// Identical requests the policy allowed whose upstream then failed: no
/// refusal, and no policy line would change them.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamFailure {
    /// `host:port`.
    pub target: String,
    /// The method, the status answered and what failed.
    pub detail: String,
    pub count: u64,
}

/// One run of the log.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    pub run_id: Option<String>,
    pub command: Vec<String>,
    pub policy: Vec<PathBuf>,
    pub worktree: Option<PathBuf>,
    pub exit: Option<i32>,
    pub refused: BTreeMap<Layer, u64>,
    /// Kernel refusals counted but not delivered (ring buffer full).
    pub lost_kernel_events: u64,
    /// Packets from outside dropped and counted past those itemized (the
    /// kernel itemizes the first `inbound_per_cpu` on each CPU).
    pub inbound_not_itemized: u64,
    pub inbound_per_cpu: u64,
    pub by_process: BTreeMap<String, u64>,
    pub refusals: Vec<Refusal>,
    /// Requests allowed whose upstream failed, said apart from the refusals.
    pub upstream_failures: Vec<UpstreamFailure>,
    pub notices: Vec<String>,
    /// Whether these are the lines lockrun wrote.
    pub seal: SealStatus,
    /// The short name of the key the run's lockrun sealed its lines with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seal_key: Option<String>,
}

impl RunSummary {
    /// A refusal the kernel counted whole (a limit's), counted in its layer.
    fn push_counted(&mut self, r: Refusal) {
        *self.refused.entry(r.layer).or_default() += r.count;
        self.refusals.push(r);
    }
}

/// The `audit` subcommand: exit 0 when the log was read whole and no seal
/// it could check failed (or there was no key to check with), 1 when a line
/// was not a record or a run's lines do not hold with the key, 2 when the
/// log could not be read.
#[must_use]
pub fn run(args: &AuditArgs) -> i32 {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| default_state_dir(&home));
    let state_dir = state_dir.canonicalize().unwrap_or(state_dir);
    let key = crate::audit::seal::SealKey::read(&state_dir.join(crate::audit::seal::KEY_FILE));
    let (key, no_key) = match key {
        Ok(k) => (Some(k), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let log = match crate::audit::read::read(&args.file, key) {
        Ok(l) => l,
        Err(e) => {
            say!("lockrun audit: {e}");
            return crate::exit::USAGE;
        }
    };
    for u in &log.unreadable {
        say!(
            "lockrun audit: {}:{}: not an audit record, passed over: {}",
            args.file.display(),
            u.line,
            u.why
        );
    }
    let mut runs = summarize(
        &log.records,
        |meta, seen_paths| host_context(&home, &state_dir, meta, seen_paths),
        &|p: &Path| p.is_dir(),
    );
    for run in &mut runs {
        if run.seal == SealStatus::Unsealed {
            continue;
        }
        run.seal = seal_status(run, &log, no_key.as_deref(), &state_dir);
    }
    let broken = runs.iter().any(|r| r.seal.broken()) || !log.unreadable.is_empty();
    if args.json {
        match serde_json::to_string_pretty(&serde_json::json!({ "runs": runs })) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                say!("lockrun audit: cannot write JSON: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", render_text(&runs));
    }
    i32::from(broken)
}

/// What the seals of a sealed run's lines say.
fn seal_status(
    run: &RunSummary,
    log: &crate::audit::read::Log,
    no_key: Option<&str>,
    state_dir: &Path,
) -> SealStatus {
    let Some(key) = log.key() else {
        return SealStatus::NotChecked {
            why: format!(
                "not checked: no key to check the seals with ({}); --state-dir names the state \
                 dir of the runs that wrote the log",
                no_key.unwrap_or("none")
            ),
        };
    };
    let id = run.run_id.as_deref().unwrap_or_default();
    let Some(seal) = log.seal_of(id) else {
        return SealStatus::Unsealed;
    };
    match &run.seal_key {
        Some(theirs) if *theirs != key.id() && seal.broken.len() as u64 >= seal.sealed => {
            return SealStatus::OtherKey {
                key: theirs.clone(),
                said: format!(
                    "NOT verified: no line holds with the key of {} ({}); the run names key \
                     {theirs}: --state-dir names the state dir of the run, if lockrun wrote it",
                    state_dir.display(),
                    key.id()
                ),
            };
        }
        _ => {}
    }
    if seal.whole() {
        SealStatus::Verified { lines: seal.sealed }
    } else {
        SealStatus::Broken {
            said: seal.to_string(),
        }
    }
}

/// The start of a run, as far as the context builder needs it.
#[derive(Debug, Clone)]
pub struct RunMeta {
    pub run_id: String,
    pub policy: Vec<PathBuf>,
    pub worktree: PathBuf,
}

/// Split records into runs and group each run's refusals. A line that
/// names its run (every line a run's lockrun writes) goes to that run,
/// wherever it lies among other runs' lines; a line that names none opens
/// a run at its `run_start` or joins the last such run (events before any
/// start form a run without id). `context` builds the filesystem context
/// of a run from its start and the paths refused in it.
pub fn summarize(
    records: &[Record],
    mut context: impl FnMut(Option<&RunMeta>, &[PathBuf]) -> FsContext,
    is_dir: &dyn Fn(&Path) -> bool,
) -> Vec<RunSummary> {
    // First pass: cut the log into runs, named or not.
    struct Cut<'r> {
        meta: Option<RunMeta>,
        events: Vec<&'r Event>,
        named: bool,
    }
    let mut runs: Vec<Cut> = Vec::new();
    let mut named: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut last_unnamed: Option<usize> = None;
    for rec in records {
        let start = match &rec.event {
            Event::RunStart {
                run_id,
                policy,
                worktree,
                ..
            } => Some(RunMeta {
                run_id: run_id.clone(),
                policy: policy.clone(),
                worktree: worktree.clone(),
            }),
            _ => None,
        };
        let at = match (rec.run.as_deref(), &start) {
            (Some(run), _) => *named.entry(run).or_insert_with(|| {
                runs.push(Cut {
                    meta: None,
                    events: Vec::new(),
                    named: true,
                });
                runs.len() - 1
            }),
            (None, None) if last_unnamed.is_some() => last_unnamed.unwrap_or_default(),
            (None, _) => {
                runs.push(Cut {
                    meta: None,
                    events: Vec::new(),
                    named: false,
                });
                last_unnamed = Some(runs.len() - 1);
                runs.len() - 1
            }
        };
        if start.is_some() {
            runs[at].meta = start;
        }
        runs[at].events.push(&rec.event);
    }
    runs.into_iter()
        .map(|cut| {
            let paths: Vec<PathBuf> = cut
                .events
                .iter()
                .filter_map(|e| match e {
                    Event::Filesystem(f) => f.path.as_ref().map(PathBuf::from),
                    _ => None,
                })
                .collect();
            let mut ctx = context(cut.meta.as_ref(), &paths);
            // The run's own account of the dirs it could not grant whole.
            ctx.narrowed
                .extend(cut.events.iter().filter_map(|e| match e {
                    Event::Narrowed(n) => Some(n.clone()),
                    _ => None,
                }));
            let mut run = summarize_run(&cut.events, &ctx, is_dir);
            if cut.named {
                run.seal = SealStatus::NotChecked {
                    why: "not checked".to_owned(),
                };
            }
            run
        })
        .collect()
}

/// The forks refused at the run's task limit: one refusal, counted by the
/// kernel (which names no process), and the limit twice as high; refused
/// above the run, no higher limit, but why.
fn task_limit_refusal(limit: u32, refused: u64, ran_out: crate::cgroup::RanOut) -> Refusal {
    if ran_out == crate::cgroup::RanOut::AboveTheRun {
        return Refusal {
            layer: Layer::Tasks,
            target: "tasks run out above the run".to_owned(),
            detail: format!(
                "fork or clone refused with EAGAIN, the run below its own limit of {limit} tasks"
            ),
            count: refused,
            processes: Vec::new(),
            suggestion: Suggestion::Explain {
                reason: "a cgroup's task limit that lockrun is in (its caller's, e.g. a CI job's \
                         or a service's) was reached, which holds its runs too: a higher \
                         max_tasks would not have helped; a higher limit there, or fewer tasks \
                         beside the run, would"
                    .to_owned(),
            },
        };
    }
    Refusal {
        layer: Layer::Tasks,
        target: format!("the run's limit of {limit} tasks"),
        detail: "fork or clone refused with EAGAIN (cgroup pids.max)".to_owned(),
        count: refused,
        processes: Vec::new(),
        suggestion: Suggestion::Allow {
            policy: format!(
                "[run]\nmax_tasks = {}",
                limit.saturating_mul(2).min(crate::policy::TaskLimit::MOST)
            ),
            flag: None,
            note: Some(
                "tasks are the run's processes and threads at once; a limit reached by a \
                 fork bomb or a runaway loop is doing its job, one reached by a real build \
                 is too low"
                    .to_owned(),
            ),
        },
    }
}

/// The processes killed at the run's memory limit: one refusal, counted
/// by the kernel, and the limit twice as high, written as the policy
/// takes it.
fn memory_limit_refusal(
    limit: u64,
    killed: u64,
    peak: Option<u64>,
    ran_out: crate::cgroup::RanOut,
) -> Refusal {
    use crate::cgroup::RanOut;
    let peak = peak.map_or_else(String::new, |p| {
        format!("; the run's peak was {}", crate::policy::size(p))
    });
    if ran_out == RanOut::AboveTheRun {
        return Refusal {
            layer: Layer::Memory,
            target: "memory run out above the run".to_owned(),
            detail: format!(
                "process killed by the kernel (SIGKILL, out of memory), the run below its own limit of {}{peak}",
                crate::policy::size(limit)
            ),
            count: killed,
            processes: Vec::new(),
            suggestion: Suggestion::Explain {
                reason: "the machine's memory, or a cgroup's that lockrun is in, ran out, and a \
                         run's processes are the kernel's first pick (oom_score_adj 1000): a higher \
                         max_memory would not have helped; fewer runs at once, or limits that fit \
                         the machine together, would"
                    .to_owned(),
            },
        };
    }
    let twice = limit.saturating_mul(2);
    let written = if twice.is_multiple_of(1 << 30) {
        format!("{}GiB", twice >> 30)
    } else {
        format!("{}MiB", twice.div_ceil(1 << 20))
    };
    Refusal {
        layer: Layer::Memory,
        target: format!("the run's memory limit of {}", crate::policy::size(limit)),
        detail: format!("process killed by the kernel (SIGKILL, cgroup memory.max){peak}"),
        count: killed,
        processes: Vec::new(),
        suggestion: Suggestion::Allow {
            policy: format!("[run]\nmax_memory = \"{written}\""),
            flag: None,
            note: Some(
                "the limit is for the run's processes together, swap counted; one reached by \
                 a runaway allocation is doing its job, one reached by a real build is too low"
                    .to_owned(),
            ),
        },
    }
}

/// The one refusal an event counted whole stands for: forks refused at a
/// task limit, processes killed at a memory limit, connections dropped over
/// the proxy's cap; `None` for any other event.
fn counted_refusal(event: &Event) -> Option<Refusal> {
    match event {
        Event::TaskLimit {
            limit,
            refused,
            ran_out,
        } => Some(task_limit_refusal(*limit, *refused, *ran_out)),
        Event::MemoryLimit {
            limit,
            killed,
            peak,
            ran_out,
        } => Some(memory_limit_refusal(*limit, *killed, *peak, *ran_out)),
        Event::ProxyConnectionsDropped {
            count,
            max_connections,
            answered,
        } => Some(dropped_refusal(*count, *max_connections, *answered)),
        _ => None,
    }
}

/// Connections to the proxy dropped unanswered over its cap: one refusal,
/// counted by the proxy (which names no process), and the cap twice as high.
fn dropped_refusal(count: u64, max_connections: usize, answered: usize) -> Refusal {
    Refusal {
        layer: Layer::Proxy,
        target: "(connections over run.max_connections)".to_owned(),
        detail: format!(
            "dropped unanswered, past the first {answered} over the cap, which got a 503"
        ),
        count,
        processes: Vec::new(),
        suggestion: Suggestion::Allow {
            policy: format!(
                "[run]\nmax_connections = {}",
                max_connections.saturating_mul(2)
            ),
            flag: None,
            note: Some(format!(
                "the run had {max_connections} connections to its proxy open at once; raise the \
                 cap only if the command really needs more"
            )),
        },
    }
}

/// The notice line an event gives, `layer: message`.
fn notice(event: &Event) -> Option<String> {
    match event {
        Event::Notice { layer, message } => Some(format!("{}: {message}", layer_name(*layer))),
        Event::Narrowed(n) => Some(format!("{}: {n}", layer_name(Layer::Filesystem))),
        Event::AuditRecordsLost(loss) => Some(format!("{}: {loss}", layer_name(Layer::Filesystem))),
        _ => None,
    }
}

fn summarize_run(events: &[&Event], ctx: &FsContext, is_dir: &dyn Fn(&Path) -> bool) -> RunSummary {
    let mut run = RunSummary::default();
    // (layer, target, detail) -> index into run.refusals
    let mut index: BTreeMap<(Layer, String, String), usize> = BTreeMap::new();
    let mut add = |run: &mut RunSummary,
                   layer: Layer,
                   target: String,
                   detail: String,
                   comm: Option<&str>,
                   suggestion: Suggestion| {
        *run.refused.entry(layer).or_default() += 1;
        if let Some(c) = comm {
            *run.by_process.entry(c.to_owned()).or_default() += 1;
        }
        let key = (layer, target.clone(), detail.clone());
        let i = *index.entry(key).or_insert_with(|| {
            run.refusals.push(Refusal {
                layer,
                target,
                detail,
                count: 0,
                processes: Vec::new(),
                suggestion,
            });
            run.refusals.len() - 1
        });
        let r = &mut run.refusals[i];
        r.count += 1;
        if let Some(c) = comm {
            if !r.processes.iter().any(|p| p == c) {
                r.processes.push(c.to_owned());
            }
        }
    };
    for event in events {
        match event {
            Event::RunStart {
                run_id,
                command,
                policy,
                worktree,
                seal_key,
            } => {
                run.seal_key.clone_from(seal_key);
                run.run_id = Some(run_id.clone());
                run.command.clone_from(command);
                run.policy.clone_from(policy);
                run.worktree = Some(worktree.clone());
            }
            Event::RunEnd { run_id, exit, .. } => {
                if run.run_id.is_none() {
                    run.run_id = Some(run_id.clone());
                }
                run.exit = Some(*exit);
            }
            Event::Notice { .. } | Event::Narrowed(_) | Event::AuditRecordsLost(_) => {
                run.notices.extend(notice(event));
            }
            Event::KernelEventsLost { count } => {
                *run.refused.entry(Layer::KernelNetwork).or_default() += count;
                run.lost_kernel_events += count;
            }
            Event::InboundNotItemized { count, per_cpu } => {
                *run.refused.entry(Layer::KernelNetwork).or_default() += count;
                run.inbound_not_itemized += count;
                run.inbound_per_cpu = *per_cpu;
            }
            Event::Proxy(p) if p.verdict == ProxyVerdict::UpstreamFailed => {
                let target = format!("{}:{}", show_host(&p.host), p.port);
                let detail = format!("{} → {}: {}", p.method, p.status, p.reason);
                match run
                    .upstream_failures
                    .iter_mut()
                    .find(|f| f.target == target && f.detail == detail)
                {
                    Some(f) => f.count += 1,
                    None => run.upstream_failures.push(UpstreamFailure {
                        target,
                        detail,
                        count: 1,
                    }),
                }
            }
            _ => {
                if let Some(r) = counted_refusal(event) {
                    run.push_counted(r);
                } else if let Some(r) = refusal(event, ctx, is_dir) {
                    add(&mut run, r.0, r.1, r.2, r.3, r.4);
                }
            }
        }
    }
    run
}

/// The process a record named; an empty name is none (the kernel's
/// records name none in some cases, see `audit::kernel`).
fn named(comm: &str) -> Option<&str> {
    (!comm.is_empty()).then_some(comm)
}

/// A refusal event as `lockrun audit` groups it: its layer, target and
/// detail, the process that made it (when known), and what to do about it.
/// `None` for what is not a refusal.
fn refusal<'e>(
    event: &'e Event,
    ctx: &FsContext,
    is_dir: &dyn Fn(&Path) -> bool,
) -> Option<(Layer, String, String, Option<&'e str>, Suggestion)> {
    Some(match event {
        Event::Proxy(p) if p.refused() => (
            Layer::Proxy,
            format!("{}:{}", show_host(&p.host), p.port),
            format!("{} → {}: {}", p.method, p.status, p.reason),
            None,
            suggest_proxy(p),
        ),
        Event::KernelNetwork(k) => (
            Layer::KernelNetwork,
            match (k.inbound_peer(), k.outbound_packet_peer()) {
                // By the peer's address: its port changes with each connection.
                (Some(peer), _) => format!("from {peer} to port {}", k.local_port),
                (None, Some(peer)) => format!("from port {} to {peer}", k.local_port),
                (None, None) => k.refused_socket_kind().map_or_else(
                    || show_dest(&k.destination),
                    |kind| format!("socket {kind}"),
                ),
            },
            if k.refused_socket_kind().is_some() {
                format!("refused when made ({})", k.hook)
            } else {
                format!("{} {} ({})", k.family, k.protocol, k.hook)
            },
            // A packet judged in no task's context names no process.
            named(&k.comm),
            suggest_kernel(k),
        ),
        Event::Scope(sc) => (
            Layer::Scope,
            sc.target.to_string(),
            match sc.target {
                ScopeTarget::Signal { .. } => "signal (Landlock scope.signal)",
                ScopeTarget::AbstractUnixSocket { .. } => {
                    "connect (Landlock scope.abstract_unix_socket)"
                }
                ScopeTarget::Ptrace { .. } => "ptrace-mode access (Landlock)",
            }
            .to_owned(),
            named(&sc.comm),
            suggest_scope(&sc.target),
        ),
        Event::Syscall(sc) => (
            Layer::Syscall,
            sc.call.clone(),
            "refused with EPERM (seccomp)".to_owned(),
            Some(&sc.comm),
            Suggestion::Never {
                reason: format!(
                    "{}; lockrun refuses it in every run, and no policy line allows it \
                     (`lockrun policy show` lists every refused call).",
                    sc.why.reason()
                ),
            },
        ),
        Event::Filesystem(f) => (
            Layer::Filesystem,
            f.path.clone().unwrap_or_else(|| "(path not named)".into()),
            format!(
                "{} ({})",
                crate::audit::refused_as(&f.access),
                f.access.join(", ")
            ),
            named(&f.comm),
            suggest_fs(f, ctx, is_dir),
        ),
        _ => return None,
    })
}

/// The filesystem context of a run on this host: the secret floor, the run's
/// policy reloaded (when it still loads), and the state dirs.
fn host_context(
    home: &Path,
    state_dir: &Path,
    meta: Option<&RunMeta>,
    seen: &[PathBuf],
) -> FsContext {
    let mut ctx = FsContext {
        home: home.to_path_buf(),
        deny: Policy::secret_floor(home)
            .into_iter()
            .map(|p| (p, DenySource::SecretFloor))
            .collect(),
        state_dirs: vec![state_dir.to_path_buf()],
        narrowed: Vec::new(),
    };
    if let Some(meta) = meta {
        if let Some(policy) = reload_policy(meta) {
            for d in &policy.fs.deny_read {
                if let PathSpec::Absolute(p) = d {
                    ctx.deny.push((p.clone(), DenySource::Policy));
                }
            }
            ctx.state_dirs.push(policy.run.state_dir.clone());
        }
        // A refused path of the form <state>/runs/<this run id>/… names the state dir.
        for p in seen {
            if let Some(s) = state_dir_from_run_path(p, &meta.run_id) {
                ctx.state_dirs.push(s);
            }
        }
    }
    ctx.state_dirs.sort();
    ctx.state_dirs.dedup();
    for s in ctx.state_dirs.clone() {
        ctx.deny.push((s, DenySource::StateDir));
    }
    ctx
}

/// Load the run's outermost policy again, as it is now. `None` when it no
/// longer loads (moved file, removed worktree): deny-read causes are then
/// judged from the secret floor and the state dir only.
fn reload_policy(meta: &RunMeta) -> Option<Policy> {
    let outer = meta.policy.last()?.to_string_lossy().into_owned();
    let name = outer.strip_prefix("preset:").unwrap_or(&outer).to_owned();
    let over = Overrides {
        worktree: Some(meta.worktree.clone()),
        ..Overrides::default()
    };
    crate::policy::load(Some(&name), &over).ok()
}

fn default_state_dir(home: &Path) -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/lockrun")
    } else {
        home.join(".local/state/lockrun")
    }
}

/// `<state>/runs/<run_id>/…` → `<state>`.
fn state_dir_from_run_path(path: &Path, run_id: &str) -> Option<PathBuf> {
    let comps: Vec<_> = path.components().collect();
    comps.windows(2).enumerate().find_map(|(i, w)| {
        (w[0].as_os_str() == "runs" && w[1].as_os_str() == run_id)
            .then(|| comps[..i].iter().collect())
    })
}

// ---------------------------------------------------------------- proxy

/// The line that would allow a proxy refusal, or why there is none: by
/// the refusal's verdict, as the proxy recorded it.
#[must_use]
pub fn suggest_proxy(ev: &ProxyEvent) -> Suggestion {
    let host = ev.host.trim_start_matches('[').trim_end_matches(']');
    match ev.verdict {
        ProxyVerdict::NotListed | ProxyVerdict::PortNotAllowed => allow_host(host, ev.port),
        ProxyVerdict::Denied => Suggestion::Explain {
            reason: format!(
                "{host} matches a [network] deny entry ({}); deny wins over allow. Remove that \
                 entry from the policy if the host is really needed.",
                ev.reason
            ),
        },
        // An IP literal: the proxy allows names only.
        ProxyVerdict::IpLiteral => match host.parse::<IpAddr>().map(classify) {
            Ok(AddrClass::Loopback | AddrClass::Unspecified) => Suggestion::Never {
                reason: format!(
                    "{host} is this host (loopback): the proxy never connects back to the host. \
                     A local service is reached directly with [network] local = [\"ADDR:PORT\"]."
                ),
            },
            _ => Suggestion::Explain {
                reason: format!(
                    "the request named an IP address ({host}); the proxy allows host names only, \
                     checked before DNS. Make the program use the host's name, then allow that name."
                ),
            },
        },
        ProxyVerdict::Address {
            addr,
            range: None,
            ..
        } => Suggestion::Never {
            reason: format!(
                "{host} resolved to an address of this host ({addr}); the proxy never connects \
                 to the host itself (that would reach services outside the sandbox). A service \
                 on this host is reached directly: [network] local = [\"127.0.0.1:PORT\"]."
            ),
        },
        ProxyVerdict::Address {
            addr,
            range: Some(range),
            embedded,
        } => suggest_guarded(host, addr, range, embedded),
        ProxyVerdict::GuardUnavailable => Suggestion::Explain {
            reason: format!(
                "the proxy could not read this host's addresses, without which it cannot judge \
                 what {host} resolved to, so it refused ({}); no policy line changes that. Run \
                 it again.",
                ev.reason
            ),
        },
        ProxyVerdict::WrongCredentials | ProxyVerdict::NoCredentials => Suggestion::Explain {
            reason: "the request came without this run's proxy credentials (the proxy URL in \
                     the run's environment carries them); no policy line changes that."
                .into(),
        },
        ProxyVerdict::BadRequest => Suggestion::Explain {
            reason: format!(
                "the request itself was refused, not its host ({}); no policy line changes that.",
                ev.reason
            ),
        },
        ProxyVerdict::Overloaded => Suggestion::Explain {
            reason: format!(
                "{}: the run had that many connections to the proxy open at once. Raise [run] \
                 max_connections in the policy if the command really needs more.",
                ev.reason
            ),
        },
        ProxyVerdict::Allowed | ProxyVerdict::UpstreamFailed => Suggestion::Explain {
            reason: format!(
                "the policy allowed it; the upstream failed ({}). No policy line changes that.",
                ev.reason
            ),
        },
        ProxyVerdict::Unrecorded => Suggestion::Explain {
            reason: format!(
                "refused: {}. This log is from an earlier lockrun, which did not record the \
                 refusal in a form `lockrun audit` can advise on; run the command again with \
                 this lockrun for the line that would allow it.",
                ev.reason
            ),
        },
    }
}

/// `[network] allow` for `host` (the port too, unless 443), and the flag.
fn allow_host(host: &str, port: u16) -> Suggestion {
    let Ok(name) = HostName::parse(host) else {
        return Suggestion::Explain {
            reason: format!("`{host}` is not a valid host name; nothing to allow."),
        };
    };
    let rule = if port == 443 {
        name.to_string()
    } else {
        format!("{name}:{port}")
    };
    Suggestion::Allow {
        policy: format!("[network]\nallow = [\"{rule}\"]"),
        flag: Some(format!("--allow-host {name}:{port}")),
        note: None,
    }
}

/// For an address the guard refused as lying in `range`: a private grant
/// where the guard would accept one (for the IPv4 address an IPv6 form
/// carries, which is what it judges), else why not.
fn suggest_guarded(host: &str, ip: IpAddr, range: Range, embedded: Option<Ipv4Addr>) -> Suggestion {
    let judged = embedded.map_or(ip, IpAddr::V4);
    match range {
        r if r.grantable() => {
            let net = match judged {
                IpAddr::V4(_) => format!("{judged}/32"),
                IpAddr::V6(_) => format!("{judged}/128"),
            };
            Suggestion::Allow {
                policy: format!("[[network.private]]\nhosts = [\"{host}\"]\nnetwork = \"{net}\""),
                flag: None,
                note: Some(format!(
                    "{host} resolved to {ip}, in the {} range; only a policy file can grant a \
                     private network (there is no flag), and only for the names it lists.",
                    r.name()
                )),
            }
        }
        Range::Loopback | Range::Unspecified | Range::ThisNetwork => Suggestion::Never {
            reason: format!(
                "{host} resolved to {ip}, which is this host: the proxy never connects back to \
                 the host (that would reach services outside the sandbox). A local service is \
                 reached directly: [network] local = [\"127.0.0.1:PORT\"] / --allow-local."
            ),
        },
        Range::LinkLocal => Suggestion::Never {
            reason: format!(
                "{host} resolved to the link-local address {ip} (where cloud metadata services \
                 and their credentials live); lockrun does not suggest opening it."
            ),
        },
        other => Suggestion::Never {
            reason: format!(
                "{host} resolved to {ip}, a {} address: not one a policy can grant, nor one a \
                 proxy tunnel should reach.",
                other.name()
            ),
        },
    }
}

// ---------------------------------------------------------------- kernel

/// A packet from `peer` to the run's `port`, dropped on its way in: a port
/// the policy can expose to this host's processes over loopback; nothing
/// lets another host in.
fn suggest_inbound(peer: std::net::IpAddr, port: u16) -> Suggestion {
    if peer.is_loopback() {
        return Suggestion::Allow {
            policy: format!("[network]\nexpose = [{port}]"),
            flag: Some(format!("--expose {port}")),
            note: Some(format!(
                "a process of this host outside the run ({peer}) reached for the run's port \
                 {port}; exposed, the port takes every process of this host over loopback (never \
                 another host)"
            )),
        };
    }
    Suggestion::Never {
        reason: format!(
            "a packet from {peer} to the run's port {port}: a program of the run listens where \
             hosts beyond loopback can reach it, and lockrun drops everything they send (an \
             accepted connection would be a way out no connect hook sees). Listen on \
             127.0.0.1 or ::1; nothing from outside the host can reach a run."
        ),
    }
}

/// The line that would allow a kernel network refusal, or why there is none.
#[must_use]
pub fn suggest_kernel(ev: &KernelNetEvent) -> Suggestion {
    if let Some(peer) = ev.inbound_peer() {
        return suggest_inbound(peer, ev.local_port);
    }
    if let Some(peer) = ev.outbound_packet_peer() {
        return Suggestion::Never {
            reason: format!(
                "a packet from the run's port {} to {peer} that no connect or send of the run \
                 named (a reply on a connection an outside host opened, or a retransmit); a \
                 run's sockets exchange packets only with loopback peers, and no policy line \
                 changes that.",
                ev.local_port
            ),
        };
    }
    if let Some(kind) = ev.refused_socket_kind() {
        return Suggestion::Never {
            reason: format!(
                "a socket of a kind a run may not make ({kind}): a run makes inet sockets of \
                 three kinds only, TCP, MPTCP and UDP, whose every way out the kernel hooks \
                 judge (on Linux 6.18 none judges sendto on an ICMP ping socket, or connect on \
                 a UDP-Lite one); no policy line changes that. Use a TCP or UDP socket."
            ),
        };
    }
    let addr = match &ev.destination {
        Destination::Unix(path) if ev.target_absent => {
            return Suggestion::Harmless {
                reason: format!(
                    "unix:{path} does not exist on this host, so the connect would have failed \
                     anyway; nothing to allow (glibc tries nscd's socket on every user lookup and \
                     falls back to local files)."
                ),
            }
        }
        Destination::Unix(path) => {
            return Suggestion::Explain {
                reason: format!(
                    "a unix socket outside the sandbox (unix:{path}); no policy line allows it. \
                     Start the service with its socket inside the worktree (or the run's temp \
                     dir) and point the program there."
                ),
            }
        }
        Destination::Inet(a) => *a,
    };
    let mapped = matches!(addr.ip(), IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
    let ip = canonical(addr.ip());
    let port = addr.port();
    let shown = SocketAddr::new(ip, port);
    match classify(ip) {
        AddrClass::Loopback if port == 53 => Suggestion::Warn {
            reason: format!(
                "{shown} is a local DNS resolver. Names are resolved by the proxy; a program that \
                 resolves on its own should use HTTPS_PROXY instead. Opening the resolver would \
                 let DNS queries — a data channel — leave the sandbox."
            ),
        },
        AddrClass::Loopback => Suggestion::Allow {
            policy: format!("[network]\nlocal = [\"{shown}\"]"),
            flag: Some(format!("--allow-local {shown}")),
            note: mapped.then(|| {
                format!(
                    "the program used the IPv4-mapped form {}; the rule names {shown}",
                    addr.ip()
                )
            }),
        },
        AddrClass::Unspecified => Suggestion::Explain {
            reason: format!(
                "a connection to {shown} (the unspecified address, which Linux treats as this \
                 host). Connect to 127.0.0.1:{port} instead, and allow that with [network] local \
                 = [\"127.0.0.1:{port}\"] / --allow-local 127.0.0.1:{port}."
            ),
        },
        _ => {
            let udp = if ev.protocol == "udp" {
                " UDP cannot go through the proxy at all."
            } else {
                ""
            };
            Suggestion::Never {
                reason: format!(
                    "a direct connection to {shown}: lockrun never lets the command reach another \
                     host directly.{udp} Go through the run's proxy (HTTPS_PROXY is set for the \
                     command; make the program honor it) and allow the host by name: [network] \
                     allow = [\"HOST\"] / --allow-host HOST:{port}."
                ),
            }
        }
    }
}

// ---------------------------------------------------------------- filesystem

const READ_RIGHTS: &[&str] = &["fs.read_file", "fs.read_dir", "fs.execute"];

/// Whether any refused right is more than reading (writing, creating,
/// removing, renaming, truncating, device ioctls).
fn is_write(access: &[String]) -> bool {
    access.iter().any(|a| !READ_RIGHTS.contains(&a.as_str()))
}

/// A reach outside the run is never allowed: a run is a box around its
/// processes, and lockrun has no option to open it.
#[must_use]
pub fn suggest_scope(target: &ScopeTarget) -> Suggestion {
    let what = match target {
        ScopeTarget::Signal { .. } => "signal a process",
        ScopeTarget::AbstractUnixSocket { .. } => "connect to an abstract unix socket",
        ScopeTarget::Ptrace { .. } => "trace or inspect a process (its memory, environment, files)",
    };
    Suggestion::Never {
        reason: format!(
            "a run may not {what} outside it (Landlock); no policy allows it. Start the \
             other process inside the same run, or talk to it through a pathname socket in the \
             worktree or the run's temp dir."
        ),
    }
}

/// The line that would allow a filesystem refusal, or why there is none.
#[must_use]
pub fn suggest_fs(ev: &FsEvent, ctx: &FsContext, is_dir: &dyn Fn(&Path) -> bool) -> Suggestion {
    let Some(raw) = ev.path.as_deref() else {
        return Suggestion::Explain {
            reason: format!(
                "the kernel did not name the path; the raw record may say more: {}",
                ev.raw
            ),
        };
    };
    if let Some(denied) = &ev.other_name_of {
        return Suggestion::Explain {
            reason: format!(
                "{raw} is another name (a hard link) of {denied}, which is denied: Landlock \
                 decides by path, so lockrun guards the file itself and refuses the run every \
                 name of it outside its writable roots. Remove the link if it need not exist \
                 (`find / -xdev -samefile {denied}` lists its names), or give the command a copy."
            ),
        };
    }
    let path = Path::new(raw);
    let deny = ctx.deny_entry_for(path);
    if !is_write(&ev.access) {
        return refused_read(raw, deny);
    }
    if let Some((entry, source)) = deny {
        return Suggestion::Warn {
            reason: format!(
                "{raw} is under the deny-read entry {} ({}); lockrun will not suggest making it \
                 writable.",
                entry.display(),
                match source {
                    DenySource::SecretFloor => "a secret lockrun always denies",
                    DenySource::Policy => "the run's policy",
                    DenySource::StateDir => "lockrun's state dir",
                }
            ),
        };
    }
    if let Some(state) = ctx.state_dir_for(path) {
        return Suggestion::Warn {
            reason: format!(
                "{raw} is inside lockrun's state dir {}; point the program at the worktree or \
                 its temp dir ({{tmp}}) instead.",
                state.display()
            ),
        };
    }
    // Creating, removing or linking is checked on the directory, and that is
    // the path Landlock names (audit/kernel.rs); other rights name the file.
    let names_dir = ev
        .access
        .iter()
        .any(|a| a.starts_with("fs.make_") || a.starts_with("fs.remove_") || a == "fs.refer");
    if let Some(n) = ctx.narrowed.iter().find(|n| names_dir && n.dir == path) {
        let denied: Vec<String> = n.denied.iter().map(|d| d.display().to_string()).collect();
        return Suggestion::Never {
            reason: format!(
                "{raw} is writable but holds the denied {}: Landlock cannot grant it whole, so no \
                 policy line lets a command create, remove or rename directly in it. Have the \
                 command work in a subdirectory, or move what must not be read out of the \
                 writable dir and drop its deny-read entry.",
                denied.join(", ")
            ),
        };
    }
    let dir = if names_dir || is_dir(path) {
        path.to_path_buf()
    } else {
        path.parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
    };
    if let Some(warning) = not_to_open(&dir, raw, &ctx.home) {
        return warning;
    }
    let in_policy = match dir.strip_prefix(&ctx.home) {
        Ok(rel) if !ctx.home.as_os_str().is_empty() => format!("{{home}}/{}", rel.display()),
        _ => dir.display().to_string(),
    };
    Suggestion::Allow {
        policy: format!("[filesystem]\nwritable = [{}]", toml_string(&in_policy)),
        flag: Some(format!("--allow-write {}", dir.display())),
        note: link_note(ev, &dir),
    }
}

/// `s` as a TOML string, quoted and escaped as a policy file needs it: a
/// path the run chose may hold a quote, a backslash or a newline.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// Why a refused read is not suggested, or what would allow it, by the
/// deny-read entry it lies under (if any).
fn refused_read(raw: &str, deny: Option<&(PathBuf, DenySource)>) -> Suggestion {
    match deny {
        Some((entry, DenySource::SecretFloor)) => Suggestion::Never {
            reason: format!(
                "{raw} is under {}, one of the secrets lockrun always denies; no policy can \
                 open it. Give the command what it needs another way (e.g. an env var with a \
                 scoped token).",
                entry.display()
            ),
        },
        Some((entry, DenySource::Policy)) => Suggestion::Explain {
            reason: format!(
                "{raw} is under the deny-read entry {} of the run's policy ([filesystem] \
                 deny_read); remove that entry if the command really needs it.",
                entry.display()
            ),
        },
        Some((entry, DenySource::StateDir)) => Suggestion::Never {
            reason: format!(
                "{raw} is inside lockrun's state dir {} (other runs and agents); it is never \
                 readable from a run.",
                entry.display()
            ),
        },
        None => Suggestion::Explain {
            reason: format!(
                "{raw} is not under any deny-read entry visible here (secrets, the policy \
                 file as it is now, the state dir); the run may have had a --deny-read flag, \
                 which the log does not record."
            ),
        },
    }
}

/// With `fs.refer` among the blockers the refusal was a hard link or rename
/// that would give the file rights it lacks in `dir` (Landlock answers
/// EXDEV): what was refused, beside the line that would allow it.
fn link_note(ev: &FsEvent, dir: &Path) -> Option<String> {
    ev.access.iter().any(|a| a == "fs.refer").then(|| {
        format!(
            "the command hard-linked or renamed a file from {} into a writable dir, where it \
             would gain rights it lacks here; Landlock refuses that with EXDEV, and most \
             tools then copy instead (`git clone` of a local path does; `--no-hardlinks` \
             skips the attempt). Make it writable only if the command should also write \
             there.",
            dir.display()
        )
    })
}

/// Why making `dir` writable for the refused `raw` should not be suggested:
/// it opens far more than the file, or reaches where code runs later.
fn not_to_open(dir: &Path, raw: &str, home: &Path) -> Option<Suggestion> {
    if SHARED_MEMORY.iter().any(|s| dir.starts_with(s)) {
        return Some(Suggestion::Warn {
            reason: format!(
                "{} is shared by every process on this machine: POSIX shared memory \
                 and named semaphores (Python multiprocessing's locks, queues and process pools, \
                 browsers) are made there. A run normally gets a private one (a tmpfs in a mount \
                 namespace of its own); this one did not, because a writable path of the run lies \
                 in or above it (a worktree on /dev/shm would be hidden by a private one). Made \
                 writable, the command could read \
                 and change what other processes and other runs keep there. Move the worktree off \
                 /dev/shm, or accept that sharing knowingly: --allow-write {}.",
                dir.display(),
                dir.display()
            ),
        });
    }
    if is_too_broad(dir, home) {
        // A refusal to make or remove something names the directory itself.
        let what = if Path::new(raw) == dir {
            format!("making {} writable", dir.display())
        } else {
            format!(
                "the nearest directory of {raw} is {}; making it writable",
                dir.display()
            )
        };
        return Some(Suggestion::Warn {
            reason: format!(
                "{what} would open far more than this needs. Point the program at the worktree \
                 or the run's temp dir ($TMPDIR; `{{tmp}}` in a policy's [env]), usually through \
                 its own environment variable."
            ),
        });
    }
    let place = crate::policy::runs_later::overlapping(dir, home)?;
    let instead = place
        .instead
        .map_or_else(String::new, |i| format!(" Instead: {i}."));
    Some(Suggestion::Warn {
        reason: format!(
            "making {} writable would reach {} ({}): what a command leaves there runs later, \
             outside the sandbox.{instead}",
            dir.display(),
            place.path.display(),
            place.runner,
        ),
    })
}

/// Shared-memory filesystems: one per machine, shared by every process.
const SHARED_MEMORY: &[&str] = &["/dev/shm", "/run/shm"];

fn is_too_broad(dir: &Path, home: &Path) -> bool {
    const SYSTEM: &[&str] = &[
        "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var", "/boot", "/proc", "/sys",
        "/dev", "/run", "/home", "/root", "/opt", "/srv", "/tmp", "/mnt", "/media",
    ];
    dir == home || SYSTEM.iter().any(|s| dir == Path::new(s))
}

// ---------------------------------------------------------------- addresses

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddrClass {
    Loopback,
    Unspecified,
    LinkLocal,
    Private,
    /// Multicast, broadcast, reserved, documentation.
    Special,
    Public,
}

/// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// A coarse classification, for choosing a suggestion only; the proxy's
/// address guard is what decides.
fn classify(ip: IpAddr) -> AddrClass {
    match canonical(ip) {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => {
            let seg = a.segments();
            if a.is_loopback() {
                AddrClass::Loopback
            } else if a.is_unspecified() {
                AddrClass::Unspecified
            } else if seg[0] & 0xffc0 == 0xfe80 {
                AddrClass::LinkLocal
            } else if seg[0] & 0xfe00 == 0xfc00 {
                AddrClass::Private
            } else if a.is_multicast() {
                AddrClass::Special
            } else {
                AddrClass::Public
            }
        }
    }
}

fn classify_v4(a: Ipv4Addr) -> AddrClass {
    let o = a.octets();
    if a.is_loopback() {
        AddrClass::Loopback
    } else if o[0] == 0 {
        AddrClass::Unspecified
    } else if a.is_link_local() {
        AddrClass::LinkLocal
    } else if a.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64) {
        AddrClass::Private
    } else if a.is_multicast() || a.is_broadcast() || o[0] >= 240 {
        AddrClass::Special
    } else {
        AddrClass::Public
    }
}

// ---------------------------------------------------------------- output

fn layer_name(l: Layer) -> &'static str {
    match l {
        Layer::Filesystem => "filesystem",
        Layer::KernelNetwork => "kernel network",
        Layer::Proxy => "proxy",
        Layer::Scope => "processes outside the run",
        Layer::Syscall => "system calls",
        Layer::Tasks => "task limit",
        Layer::Memory => "memory limit",
    }
}

fn show_dest(d: &Destination) -> String {
    match d {
        Destination::Inet(SocketAddr::V6(a)) => format!("[{}]:{}", a.ip(), a.port()),
        other => other.to_string(),
    }
}

fn show_host(h: &str) -> String {
    if h.contains(':') && !h.starts_with('[') {
        format!("[{h}]")
    } else {
        h.to_owned()
    }
}

/// One line of the report: what the log holds was chosen in part by the
/// run (process names, paths, hosts), so it is made inert first
/// ([`crate::shown`]).
fn put(out: &mut String, line: std::fmt::Arguments<'_>) {
    out.push_str(&crate::shown::escaped(&line.to_string()));
    out.push('\n');
}

/// The human-readable report.
#[must_use]
pub fn render_text(runs: &[RunSummary]) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        out.push_str("no runs in this log\n");
        return out;
    }
    for (i, run) in runs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let exit = run
            .exit
            .map(|code| format!(" (exit {code})"))
            .unwrap_or_default();
        put(
            &mut out,
            format_args!(
                "run {}{exit}",
                run.run_id.as_deref().unwrap_or("(no run_start)")
            ),
        );
        if !run.command.is_empty() {
            put(
                &mut out,
                format_args!("  command:  {}", run.command.join(" ")),
            );
        }
        if !run.policy.is_empty() {
            let names: Vec<String> = run.policy.iter().map(|p| p.display().to_string()).collect();
            put(&mut out, format_args!("  policy:   {}", names.join(" <- ")));
        }
        if let Some(w) = &run.worktree {
            put(&mut out, format_args!("  worktree: {}", w.display()));
        }
        put(&mut out, format_args!("  seal:     {}", run.seal));
        for n in &run.notices {
            put(&mut out, format_args!("  notice:   {n}"));
        }
        if run.refused.is_empty() {
            out.push_str("  nothing refused\n");
        } else {
            render_refusals(&mut out, run);
        }
        if !run.upstream_failures.is_empty() {
            out.push_str(
                "  allowed, but failed upstream (not refused; no policy line changes these):\n",
            );
            for f in &run.upstream_failures {
                put(
                    &mut out,
                    format_args!("    {} — {}{}", f.target, f.detail, times(f.count)),
                );
            }
        }
    }
    out
}

/// A run's refusals: the counts, then each group by layer with what to do.
fn render_refusals(out: &mut String, run: &RunSummary) {
    let per_layer: Vec<String> = run
        .refused
        .iter()
        .map(|(l, n)| format!("{} {n}", layer_name(*l)))
        .collect();
    put(out, format_args!("  refused:  {}", per_layer.join(", ")));
    if run.lost_kernel_events > 0 {
        put(
            out,
            format_args!(
                "            ({} kernel refusals counted but not delivered: ring buffer full)",
                run.lost_kernel_events
            ),
        );
    }
    if run.inbound_not_itemized > 0 {
        put(out, format_args!("            ({} packets from outside dropped and counted, not itemized: only the first {} on each CPU are)",
            run.inbound_not_itemized, run.inbound_per_cpu
        ));
    }
    if !run.by_process.is_empty() {
        let procs: Vec<String> = run
            .by_process
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        put(out, format_args!("  by process: {}", procs.join(", ")));
    }
    for layer in Layer::ALL {
        let group: Vec<&Refusal> = run.refusals.iter().filter(|r| r.layer == layer).collect();
        if group.is_empty() {
            continue;
        }
        put(out, format_args!("  {}:", layer_name(layer)));
        for r in group {
            let procs = if r.processes.is_empty() {
                String::new()
            } else {
                format!(" [{}]", r.processes.join(", "))
            };
            put(
                out,
                format_args!("    {} — {}{}{procs}", r.target, r.detail, times(r.count)),
            );
            render_suggestion(out, &r.suggestion);
        }
    }
}

fn render_suggestion(out: &mut String, s: &Suggestion) {
    match s {
        Suggestion::Allow { policy, flag, note } => {
            out.push_str("      allow with:\n");
            for line in policy.lines() {
                put(out, format_args!("        {line}"));
            }
            match flag {
                Some(f) => {
                    put(out, format_args!("      or the flag: {f}"));
                }
                None => out.push_str("      (no flag: write it in a policy file)\n"),
            }
            if let Some(n) = note {
                put(out, format_args!("      note: {n}"));
            }
        }
        Suggestion::Warn { reason } => {
            put(out, format_args!("      not suggested: {reason}"));
        }
        Suggestion::Never { reason } => {
            put(out, format_args!("      cannot be allowed: {reason}"));
        }
        Suggestion::Explain { reason } => {
            put(out, format_args!("      why: {reason}"));
        }
        Suggestion::Harmless { reason } => {
            put(out, format_args!("      harmless: {reason}"));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;
    use crate::policy::NetworkPolicy;
    use crate::proxy::allowlist::Reason;
    use crate::proxy::guard::check_addr;

    /// A refusal as the proxy records it: the allowlist's or the address
    /// guard's own `Reason`, in words and as the verdict.
    fn proxy(host: &str, port: u16, why: &Reason) -> ProxyEvent {
        ProxyEvent {
            method: "CONNECT".into(),
            host: host.into(),
            port,
            dialed: None,
            allowed: false,
            reason: why.to_string(),
            status: 403,
            verdict: why.verdict(),
        }
    }

    /// What the proxy decides for `host` on port 443 under a policy that
    /// allows it, resolving to `addr`, on a host whose own addresses are
    /// `own`: its refusal (the allowlist and the guard themselves).
    fn guarded(host: &str, addr: &str, own: &[&str]) -> ProxyEvent {
        let name = HostName::parse(host).unwrap();
        let own: std::collections::HashSet<IpAddr> =
            own.iter().map(|a| a.parse().unwrap()).collect();
        let addr: IpAddr = addr.parse().unwrap();
        let refusal = check_addr(&NetworkPolicy::default(), &name, addr, &own).unwrap_err();
        proxy(
            host,
            443,
            &Reason::Address {
                host: host.into(),
                refusal,
            },
        )
    }

    /// `lockrun audit` doubles a limit the run reached, and gives no line
    /// where memory ran out above the run: a higher limit would not help.
    #[test]
    fn memory_kills_suggest_a_higher_limit_only_where_the_run_reached_its_own() {
        use crate::cgroup::RanOut;
        let at = memory_limit_refusal(64 << 20, 1, Some(63 << 20), RanOut::AtTheRunsLimit);
        assert!(
            matches!(&at.suggestion, Suggestion::Allow { policy, .. } if policy == "[run]\nmax_memory = \"128MiB\""),
            "{:?}",
            at.suggestion
        );
        assert_eq!(at.target, "the run's memory limit of 64 MiB");
        let above = memory_limit_refusal(8 << 30, 3, Some(5 << 30), RanOut::AboveTheRun);
        assert_eq!(above.target, "memory run out above the run");
        assert_eq!(above.count, 3);
        assert!(
            above
                .detail
                .ends_with("the run below its own limit of 8 GiB; the run's peak was 5 GiB"),
            "{}",
            above.detail
        );
        let Suggestion::Explain { reason } = &above.suggestion else {
            panic!("{:?}", above.suggestion);
        };
        assert!(
            reason.contains("a higher max_memory would not have helped"),
            "{reason}"
        );
    }

    /// Forks refused at the run's limit get the limit doubled; refused
    /// above the run, no line: a higher limit would not help.
    #[test]
    fn refused_forks_suggest_a_higher_limit_only_where_the_run_reached_its_own() {
        use crate::cgroup::RanOut;
        let at = task_limit_refusal(16, 1, RanOut::AtTheRunsLimit);
        assert!(
            matches!(&at.suggestion, Suggestion::Allow { policy, .. } if policy == "[run]\nmax_tasks = 32"),
            "{:?}",
            at.suggestion
        );
        assert_eq!(at.target, "the run's limit of 16 tasks");
        let above = task_limit_refusal(4096, 7, RanOut::AboveTheRun);
        assert_eq!(
            (above.target.as_str(), above.count),
            ("tasks run out above the run", 7)
        );
        assert!(
            above
                .detail
                .ends_with("the run below its own limit of 4096 tasks"),
            "{}",
            above.detail
        );
        let Suggestion::Explain { reason } = &above.suggestion else {
            panic!("{:?}", above.suggestion);
        };
        assert!(
            reason.contains("a higher max_tasks would not have helped"),
            "{reason}"
        );
    }

    fn not_listed(host: &str, port: u16) -> ProxyEvent {
        proxy(host, port, &Reason::NotListed { host: host.into() })
    }

    fn kernel(dest: Destination, protocol: &str) -> KernelNetEvent {
        KernelNetEvent {
            pid: 7,
            tgid: 7,
            comm: "probe".into(),
            cgroup_id: 1,
            hook: "connect4".into(),
            family: "inet".into(),
            protocol: protocol.into(),
            destination: dest,
            target_absent: false,
            direction: crate::audit::Direction::Outbound,
            local_port: 0,
        }
    }

    fn inet(s: &str) -> Destination {
        Destination::Inet(s.parse().unwrap())
    }

    fn fs(path: Option<&str>, access: &[&str]) -> FsEvent {
        FsEvent {
            pid: 7,
            comm: "probe".into(),
            path: path.map(Into::into),
            access: access.iter().map(|s| (*s).to_owned()).collect(),
            raw: "type=LANDLOCK_ACCESS".into(),
            other_name_of: None,
        }
    }

    fn ctx() -> FsContext {
        let home = PathBuf::from("/home/u");
        let mut deny: Vec<(PathBuf, DenySource)> = Policy::secret_floor(&home)
            .into_iter()
            .map(|p| (p, DenySource::SecretFloor))
            .collect();

        deny.push(("/srv/private".into(), DenySource::Policy));
        deny.push(("/var/lib/lockrun".into(), DenySource::StateDir));
        FsContext {
            home,
            deny,
            state_dirs: vec!["/var/lib/lockrun".into()],
            narrowed: Vec::new(),
        }
    }

    fn dirs(p: &Path) -> bool {
        ["/home/u/.cache/mytool", "/opt/data"]
            .iter()
            .any(|d| p == Path::new(d))
    }

    fn allow(s: &Suggestion) -> (&str, Option<&str>) {
        match s {
            Suggestion::Allow { policy, flag, .. } => (policy.as_str(), flag.as_deref()),
            other => panic!("expected Allow, got {other:?}"),
        }
    }

    fn reason(s: &Suggestion) -> &str {
        match s {
            Suggestion::Warn { reason }
            | Suggestion::Never { reason }
            | Suggestion::Explain { reason }
            | Suggestion::Harmless { reason } => reason,
            Suggestion::Allow { .. } => panic!("expected no Allow, got {s:?}"),
        }
    }

    #[test]
    fn a_missing_unix_socket_is_harmless() {
        let mut ev = kernel(Destination::Unix("/var/run/nscd/socket".into()), "0");
        ev.target_absent = true;
        assert!(matches!(suggest_kernel(&ev), Suggestion::Harmless { .. }));
    }

    #[test]
    fn proxy_host_on_443_is_allowed_by_name() {
        let s = suggest_proxy(&not_listed("api.example.com", 443));
        assert_eq!(
            allow(&s),
            (
                "[network]\nallow = [\"api.example.com\"]",
                Some("--allow-host api.example.com:443")
            )
        );
    }

    #[test]
    fn proxy_host_on_other_port_names_the_port() {
        let s = suggest_proxy(&not_listed("git.example.org", 8443));
        let expected = (
            "[network]\nallow = [\"git.example.org:8443\"]",
            Some("--allow-host git.example.org:8443"),
        );
        assert_eq!(allow(&s), expected);
        let other_port = Reason::PortNotAllowed {
            host: "git.example.org".into(),
            port: crate::policy::Port::new(8443).unwrap(),
            allowed: "443".into(),
        };
        let s = suggest_proxy(&proxy("git.example.org", 8443, &other_port));
        assert_eq!(allow(&s), expected);
    }

    #[test]
    fn proxy_private_address_gets_a_private_grant() {
        let s = suggest_proxy(&guarded("git.internal.example", "10.20.0.5", &[]));
        let Suggestion::Allow { policy, flag, .. } = &s else {
            panic!("{s:?}")
        };
        assert_eq!(
            policy,
            "[[network.private]]\nhosts = [\"git.internal.example\"]\nnetwork = \"10.20.0.5/32\""
        );
        assert_eq!(flag, &None);
        let v6 = suggest_proxy(&guarded("db.internal.example", "fd00::5", &[]));
        assert!(
            allow(&v6).0.ends_with("network = \"fd00::5/128\""),
            "{v6:?}"
        );
        let cgnat = suggest_proxy(&guarded("t.example", "100.64.1.2", &[]));
        assert!(
            allow(&cgnat).0.ends_with("network = \"100.64.1.2/32\""),
            "{cgnat:?}"
        );
        // An IPv6 form carrying a private IPv4 address: the guard judges,
        // and a grant must name, the IPv4 address inside.
        for carrier in ["64:ff9b::a14:5", "2002:a14:5::1", "::ffff:10.20.0.5"] {
            let s = suggest_proxy(&guarded("nas.example", carrier, &[]));
            assert!(
                allow(&s).0.ends_with("network = \"10.20.0.5/32\""),
                "{carrier}: {s:?}"
            );
        }
        // Ranges no grant opens.
        for (addr, what) in [
            ("198.51.100.7", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("0.1.2.3", "this host"),
        ] {
            let s = suggest_proxy(&guarded("x.example", addr, &[]));
            assert!(
                matches!(s, Suggestion::Never { .. }) && reason(&s).contains(what),
                "{addr}: {s:?}"
            );
        }
    }

    #[test]
    fn proxy_never_suggests_loopback_or_the_host() {
        for ev in [
            guarded("localhost", "127.0.0.1", &[]),
            guarded("evil.example", "::ffff:127.0.0.1", &[]),
            guarded("evil.example", "::1", &[]),
            guarded("me.example", "9.9.9.9", &["9.9.9.9"]),
            guarded("me.example", "2606:4700::1111", &["2606:4700::1111"]),
            guarded("meta.example", "169.254.169.254", &[]),
            proxy(
                "127.0.0.1",
                443,
                &Reason::IpLiteral {
                    addr: "127.0.0.1".parse().unwrap(),
                },
            ),
        ] {
            let s = suggest_proxy(&ev);
            assert!(
                matches!(s, Suggestion::Never { .. }),
                "{} / {}: {s:?}",
                ev.host,
                ev.reason
            );
        }
        // A public address of this host: refused as the host's own, not
        // as a range.
        let own = guarded("me.example", "8.8.8.8", &["8.8.8.8"]);
        assert_eq!(
            own.verdict,
            ProxyVerdict::Address {
                addr: "8.8.8.8".parse().unwrap(),
                range: None,
                embedded: None,
            }
        );
        assert!(reason(&suggest_proxy(&own)).contains("address of this host (8.8.8.8)"));
    }

    #[test]
    fn proxy_deny_entry_and_bad_requests_explain() {
        let deny = Reason::Denied {
            host: "evil.example.org".into(),
            pattern: crate::policy::HostPattern::parse("*.example.org").unwrap(),
        };
        let d = suggest_proxy(&proxy("evil.example.org", 443, &deny));
        assert!(reason(&d).contains("deny wins"), "{d:?}");
        assert!(reason(&d).contains("`*.example.org`"), "{d:?}");
        let mut bad = not_listed("a.example", 443);
        bad.verdict = ProxyVerdict::BadRequest;
        bad.status = 400;
        assert!(
            reason(&suggest_proxy(&bad)).contains("request itself"),
            "{bad:?}"
        );
        let lit = Reason::IpLiteral {
            addr: "93.184.216.34".parse().unwrap(),
        };
        let lit = suggest_proxy(&proxy("93.184.216.34", 443, &lit));
        assert!(reason(&lit).contains("host names only"), "{lit:?}");
    }

    /// An allowed host whose name did not resolve was refused by no one:
    /// no line to allow it (it is allowed), and not listed as a refusal.
    #[test]
    fn an_upstream_failure_is_not_a_refusal_and_suggests_nothing() {
        let mut ev = not_listed("api.example.com", 443);
        ev.verdict = ProxyVerdict::UpstreamFailed;
        ev.allowed = true;
        ev.status = 502;
        ev.reason = "resolving api.example.com failed: Name or service not known".into();
        assert!(!ev.refused());
        let s = suggest_proxy(&ev);
        assert!(reason(&s).contains("the policy allowed it"), "{s:?}");
        // The credentials challenge is no refusal either; wrong ones are.
        ev.verdict = ProxyVerdict::NoCredentials;
        ev.allowed = false;
        ev.status = 407;
        assert!(!ev.refused());
        ev.verdict = ProxyVerdict::WrongCredentials;
        assert!(ev.refused());
    }

    /// `lockrun audit` shows requests allowed whose upstream failed, apart
    /// from the refusals and without advice, grouped and counted, also in
    /// a run that refused nothing.
    #[test]
    fn upstream_failures_are_listed_apart_from_refusals() {
        let line = |e: Event| Record {
            ts_ms: 0,
            event: e,
            run: None,
            seq: None,
        };
        let mut failed = not_listed("api.example.com", 443);
        failed.verdict = ProxyVerdict::UpstreamFailed;
        failed.allowed = true;
        failed.status = 502;
        failed.reason =
            "allowed by `api.example.com`; upstream: resolving api.example.com failed: \
                         Name or service not known"
                .into();
        let start = |id: &str| {
            line(Event::RunStart {
                run_id: id.into(),
                command: vec!["curl".into()],
                policy: vec![],
                worktree: "/w".into(),
                seal_key: None,
            })
        };
        let records = vec![
            start("r1"),
            line(Event::Proxy(failed.clone())),
            line(Event::Proxy(failed.clone())),
            line(Event::Proxy(not_listed("evil.example", 443))),
            start("r2"),
            line(Event::Proxy(failed)),
        ];
        let runs = summarize(&records, |_, _| ctx(), &|_: &Path| false);
        assert_eq!(runs[0].refused.get(&Layer::Proxy), Some(&1));
        assert_eq!(runs[0].refusals.len(), 1);
        assert_eq!(runs[0].upstream_failures.len(), 1);
        assert_eq!(runs[0].upstream_failures[0].count, 2);
        assert!(runs[1].refused.is_empty() && runs[1].refusals.is_empty());
        let text = render_text(&runs);
        let said =
            "  allowed, but failed upstream (not refused; no policy line changes these):\n    \
                    api.example.com:443 — CONNECT → 502: allowed by `api.example.com`; upstream: \
                    resolving api.example.com failed: Name or service not known";
        let (r1, r2) = text.split_once("\nrun r2").unwrap();
        assert!(r1.contains("evil.example:443 — CONNECT → 403"), "{text}");
        assert!(r1.contains(&format!("{said} ×2\n")), "{text}");
        assert!(!r1.contains("allow = [\"api.example.com"), "{text}");
        assert!(r2.contains("nothing refused"), "{text}");
        assert!(r2.ends_with(&format!("{said}\n")), "{text}");
    }

    /// A log from before verdicts were recorded reads back, and gets no
    /// advice it cannot back.
    #[test]
    fn a_log_without_verdicts_reads_back_unrecorded() {
        let line = r#"{"ts_ms":1,"event":"proxy","method":"CONNECT","host":"a.example","port":443,"dialed":null,"allowed":false,"reason":"a.example is not in the allowlist","status":403}"#;
        let rec: Record = serde_json::from_str(line).unwrap();
        let Event::Proxy(p) = rec.event else {
            panic!("{rec:?}")
        };
        assert_eq!(p.verdict, ProxyVerdict::Unrecorded);
        assert!(p.refused());
        assert!(reason(&suggest_proxy(&p)).contains("earlier lockrun"));
    }

    #[test]
    fn kernel_loopback_suggests_local() {
        let s = suggest_kernel(&kernel(inet("127.0.0.1:5432"), "tcp"));
        assert_eq!(
            allow(&s),
            (
                "[network]\nlocal = [\"127.0.0.1:5432\"]",
                Some("--allow-local 127.0.0.1:5432")
            )
        );
        let v6 = suggest_kernel(&kernel(inet("[::1]:6379"), "tcp"));
        assert_eq!(allow(&v6).1, Some("--allow-local [::1]:6379"));
        let mapped = suggest_kernel(&kernel(inet("[::ffff:127.0.0.1]:8080"), "tcp"));
        assert_eq!(allow(&mapped).1, Some("--allow-local 127.0.0.1:8080"));
    }

    #[test]
    fn inbound_over_loopback_suggests_expose_and_from_beyond_never() {
        let inbound = |peer: &str| KernelNetEvent {
            hook: "ingress".into(),
            direction: crate::audit::Direction::Inbound,
            local_port: 3000,
            ..kernel(inet(peer), "tcp")
        };
        for peer in ["127.0.0.1:40000", "[::1]:40000"] {
            let s = suggest_kernel(&inbound(peer));
            assert_eq!(
                allow(&s),
                ("[network]\nexpose = [3000]", Some("--expose 3000")),
                "{peer}"
            );
        }
        let s = suggest_kernel(&inbound("10.1.2.3:40000"));
        assert!(matches!(s, Suggestion::Never { .. }), "{s:?}");
    }

    #[test]
    fn kernel_local_dns_is_not_suggested() {
        let s = suggest_kernel(&kernel(inet("127.0.0.53:53"), "udp"));
        assert!(matches!(s, Suggestion::Warn { .. }), "{s:?}");
    }

    #[test]
    fn kernel_remote_is_never_allowed_directly() {
        let s = suggest_kernel(&kernel(inet("93.184.216.34:443"), "tcp"));
        assert!(matches!(s, Suggestion::Never { .. }), "{s:?}");
        assert!(reason(&s).contains("HTTPS_PROXY"));
        let udp = suggest_kernel(&kernel(inet("8.8.8.8:53"), "udp"));
        assert!(reason(&udp).contains("UDP"), "{udp:?}");
        let private = suggest_kernel(&kernel(inet("10.0.0.1:22"), "tcp"));
        assert!(matches!(private, Suggestion::Never { .. }), "{private:?}");
    }

    #[test]
    fn kernel_unix_socket_explains() {
        let s = suggest_kernel(&kernel(Destination::Unix("/run/docker.sock".into()), "0"));
        assert!(matches!(s, Suggestion::Explain { .. }), "{s:?}");
        assert!(reason(&s).contains("worktree"));
    }

    #[test]
    fn kernel_unspecified_points_to_loopback() {
        let s = suggest_kernel(&kernel(inet("0.0.0.0:8000"), "tcp"));
        assert!(reason(&s).contains("127.0.0.1:8000"), "{s:?}");
    }

    #[test]
    fn a_read_by_a_denied_files_other_name_is_explained_not_allowed() {
        let mut ev = fs(Some("/backup/root/.ssh/id"), &["fs.read_file"]);
        ev.other_name_of = Some("/home/u/.ssh/id".into());
        let s = suggest_fs(&ev, &ctx(), &dirs);
        assert!(matches!(s, Suggestion::Explain { .. }), "{s:?}");
        assert!(
            reason(&s)
                .contains("/backup/root/.ssh/id is another name (a hard link) of /home/u/.ssh/id"),
            "{s:?}"
        );
    }

    #[test]
    fn fs_write_suggests_the_nearest_directory() {
        let file = suggest_fs(
            &fs(Some("/home/u/.cache/mytool/http/x"), &["fs.write_file"]),
            &ctx(),
            &dirs,
        );
        assert_eq!(
            allow(&file),
            (
                "[filesystem]\nwritable = [\"{home}/.cache/mytool/http\"]",
                Some("--allow-write /home/u/.cache/mytool/http")
            )
        );
        let dir = suggest_fs(
            &fs(Some("/home/u/.cache/mytool"), &["fs.make_reg"]),
            &ctx(),
            &dirs,
        );
        assert_eq!(allow(&dir).1, Some("--allow-write /home/u/.cache/mytool"));
        // the directory is named by the right, even when it is gone by now
        let gone = suggest_fs(
            &fs(Some("/home/u/.cache/gone"), &["fs.make_dir"]),
            &ctx(),
            &dirs,
        );
        assert_eq!(allow(&gone).1, Some("--allow-write /home/u/.cache/gone"));
        let outside = suggest_fs(
            &fs(Some("/opt/data/out.csv"), &["fs.truncate"]),
            &ctx(),
            &dirs,
        );
        assert_eq!(
            allow(&outside).0,
            "[filesystem]\nwritable = [\"/opt/data\"]"
        );
    }

    #[test]
    fn fs_write_under_secret_or_state_warns() {
        for p in [
            "/home/u/.ssh/authorized_keys",
            "/var/lib/lockrun/runs/other/tmp/x",
            "/srv/private/x",
        ] {
            let s = suggest_fs(&fs(Some(p), &["fs.write_file"]), &ctx(), &dirs);
            assert!(matches!(s, Suggestion::Warn { .. }), "{p}: {s:?}");
        }
    }

    #[test]
    fn fs_write_to_broad_dirs_warns() {
        for p in ["/home/u/.bashrc", "/etc/hosts", "/tmp/x"] {
            let s = suggest_fs(&fs(Some(p), &["fs.write_file"]), &ctx(), &dirs);
            assert!(matches!(s, Suggestion::Warn { .. }), "{p}: {s:?}");
        }
        // A file in it names the file and its dir; a file made in it names
        // the dir alone (Landlock's record has no name for it).
        let file = suggest_fs(&fs(Some("/etc/hosts"), &["fs.write_file"]), &ctx(), &dirs);
        let file = reason(&file);
        assert!(
            file.starts_with(
                "the nearest directory of /etc/hosts is /etc; making it writable would open far more"
            ),
            "{file}"
        );
        let made = suggest_fs(&fs(Some("/etc"), &["fs.make_reg"]), &ctx(), &dirs);
        let made = reason(&made);
        assert!(
            made.starts_with("making /etc writable would open far more than this needs."),
            "{made}"
        );
        assert!(
            made.contains("($TMPDIR; `{tmp}` in a policy's [env])"),
            "{made}"
        );
    }

    #[test]
    fn fs_write_in_shared_memory_is_not_suggested_and_says_why() {
        // A named semaphore is made in /dev/shm (make_reg, on the dir), its
        // data written to a file there; both name the shared dir.
        for (p, access) in [
            ("/dev/shm", "fs.make_reg"),
            ("/dev/shm/sem.mp-1", "fs.write_file"),
            ("/run/shm/x", "fs.write_file"),
        ] {
            let s = suggest_fs(&fs(Some(p), &[access]), &ctx(), &dirs);
            assert!(matches!(s, Suggestion::Warn { .. }), "{p}: {s:?}");
            let r = reason(&s);
            assert!(
                r.contains("is shared by every process on this machine")
                    && r.contains("Python multiprocessing")
                    && r.contains("--allow-write /"),
                "{p}: {r}"
            );
        }
    }

    #[test]
    fn fs_write_where_code_runs_later_warns_and_says_what_instead() {
        for (p, place, instead) in [
            (
                "/home/u/.cargo/.package-cache",
                "/home/u/.cargo",
                Some("CARGO_HOME"),
            ),
            (
                "/home/u/.npm/_cacache/index-v5/x",
                "/home/u/.npm",
                Some("npm_config_cache"),
            ),
            (
                "/home/u/.cache/pip/http/x",
                "/home/u/.cache/pip",
                Some("PIP_CACHE_DIR"),
            ),
            (
                "/home/u/.config/git/config",
                "/home/u/.config/git",
                Some("GIT_CONFIG_GLOBAL"),
            ),
            ("/home/u/.local/bin/git", "/home/u/.local/bin", None),
            ("/usr/local/bin/cargo", "/usr", None),
        ] {
            let s = suggest_fs(&fs(Some(p), &["fs.write_file"]), &ctx(), &dirs);
            let Suggestion::Warn { reason } = &s else {
                panic!("{p}: expected Warn, got {s:?}");
            };
            assert!(
                reason.contains(&format!("would reach {place} (")),
                "{p}: {reason}"
            );
            assert!(reason.contains("outside the sandbox"), "{p}: {reason}");
            if let Some(i) = instead {
                assert!(reason.contains(i), "{p}: {reason}");
            }
        }
    }

    #[test]
    fn fs_make_in_a_narrowed_dir_cannot_be_allowed_and_a_write_beneath_can() {
        let mut c = ctx();
        c.narrowed.push(crate::fs::Narrowed {
            dir: "/work/repo".into(),
            denied: vec!["/work/repo/.env".into()],
        });
        for access in ["fs.make_reg", "fs.remove_file", "fs.refer"] {
            let s = suggest_fs(&fs(Some("/work/repo"), &[access]), &c, &dirs);
            assert!(matches!(s, Suggestion::Never { .. }), "{access}: {s:?}");
            assert!(
                reason(&s).contains("holds the denied /work/repo/.env"),
                "{s:?}"
            );
        }
        // Elsewhere, and without the run's account, the usual suggestion.
        let other = suggest_fs(&fs(Some("/work/other"), &["fs.make_reg"]), &c, &dirs);
        assert!(matches!(other, Suggestion::Allow { .. }), "{other:?}");
        let unlogged = suggest_fs(&fs(Some("/work/repo"), &["fs.make_reg"]), &ctx(), &dirs);
        assert!(matches!(unlogged, Suggestion::Allow { .. }), "{unlogged:?}");
    }

    #[test]
    fn a_link_out_of_a_read_only_dir_says_what_was_refused() {
        let s = suggest_fs(
            &fs(
                Some("/work/main/.git/objects/b1"),
                &["fs.write_file", "fs.make_reg", "fs.refer", "fs.truncate"],
            ),
            &ctx(),
            &dirs,
        );
        let Suggestion::Allow { note, flag, .. } = &s else {
            panic!("{s:?}")
        };
        assert_eq!(
            flag.as_deref(),
            Some("--allow-write /work/main/.git/objects/b1")
        );
        let note = note.as_deref().unwrap_or_default();
        assert!(
            note.contains("hard-linked or renamed a file from /work/main/.git/objects/b1")
                && note.contains("EXDEV"),
            "{note}"
        );
        // A plain write carries no such note.
        let plain = suggest_fs(&fs(Some("/srv/data/f"), &["fs.write_file"]), &ctx(), &dirs);
        assert!(
            matches!(plain, Suggestion::Allow { note: None, .. }),
            "{plain:?}"
        );
    }

    #[test]
    fn fs_read_names_the_deny_entry() {
        let secret = suggest_fs(
            &fs(Some("/home/u/.ssh/id_ed25519"), &["fs.read_file"]),
            &ctx(),
            &dirs,
        );
        assert!(matches!(secret, Suggestion::Never { .. }), "{secret:?}");
        assert!(reason(&secret).contains("/home/u/.ssh"), "{secret:?}");
        let nested = suggest_fs(
            &fs(Some("/home/u/.config/gcloud/x"), &["fs.read_file"]),
            &ctx(),
            &dirs,
        );
        assert!(
            reason(&nested).contains("/home/u/.config/gcloud"),
            "{nested:?}"
        );
        let pol = suggest_fs(&fs(Some("/srv/private/a"), &["fs.read_dir"]), &ctx(), &dirs);
        assert!(matches!(pol, Suggestion::Explain { .. }), "{pol:?}");
        assert!(reason(&pol).contains("deny_read") && reason(&pol).contains("/srv/private"));
        let unknown = suggest_fs(&fs(Some("/srv/other"), &["fs.read_file"]), &ctx(), &dirs);
        assert!(reason(&unknown).contains("--deny-read"), "{unknown:?}");
        let none = suggest_fs(&fs(None, &["fs.write_file"]), &ctx(), &dirs);
        assert!(reason(&none).contains("raw record"), "{none:?}");
    }

    #[test]
    fn state_dir_is_found_from_run_paths() {
        assert_eq!(
            state_dir_from_run_path(Path::new("/srv/lr/runs/r1/tmp/x"), "r1"),
            Some(PathBuf::from("/srv/lr"))
        );
        assert_eq!(
            state_dir_from_run_path(Path::new("/srv/lr/runs/r2/tmp"), "r1"),
            None
        );
    }

    /// Lines that name their run go to it, wherever they lie among other
    /// runs' lines (runs sharing a log write at once); lines that name none
    /// follow the last `run_start` that names none.
    #[test]
    fn lines_that_name_their_run_are_grouped_by_it() {
        let line = |run: Option<&str>, e: Event| Record {
            ts_ms: 0,
            event: e,
            run: run.map(str::to_owned),
            seq: None,
        };
        let start = |id: &str| Event::RunStart {
            run_id: id.into(),
            command: vec![],
            policy: vec![],
            worktree: "/w".into(),
            seal_key: None,
        };
        let refused = || Event::KernelNetwork(kernel(inet("127.0.0.1:5432"), "tcp"));
        let records = vec![
            line(Some("a"), start("a")),
            line(Some("b"), start("b")),
            line(Some("a"), refused()),
            line(None, start("legacy")),
            line(Some("b"), refused()),
            line(None, refused()),
            line(Some("a"), refused()),
        ];
        let runs = summarize(&records, |_, _| ctx(), &dirs);
        let counts: Vec<(Option<&str>, u64)> = runs
            .iter()
            .map(|r| {
                (
                    r.run_id.as_deref(),
                    r.refused.get(&Layer::KernelNetwork).copied().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(
            counts,
            vec![(Some("a"), 2), (Some("b"), 1), (Some("legacy"), 1)]
        );
        assert_eq!(runs[2].seal, SealStatus::Unsealed);
        assert_ne!(runs[0].seal, SealStatus::Unsealed);
    }

    #[test]
    fn runs_are_split_and_grouped() {
        let line = |e: Event| Record {
            ts_ms: 0,
            event: e,
            run: None,
            seq: None,
        };
        let records = vec![
            line(Event::RunStart {
                run_id: "r1".into(),
                command: vec!["psql".into()],
                policy: vec!["preset:default".into()],
                worktree: "/w".into(),
                seal_key: None,
            }),
            line(Event::KernelNetwork(kernel(inet("127.0.0.1:5432"), "tcp"))),
            line(Event::KernelNetwork(kernel(inet("127.0.0.1:5432"), "tcp"))),
            line(Event::KernelEventsLost { count: 2 }),
            line(Event::AuditRecordsLost(crate::audit::AuditLoss::Dropped {
                records: 5,
                backlog_limit: 64,
                rate_limit: 0,
            })),
            line(Event::InboundNotItemized {
                count: 9,
                per_cpu: 32,
            }),
            line(Event::RunEnd {
                run_id: "r1".into(),
                exit: 2,
                refused: BTreeMap::new(),
                unwritten: 0,
            }),
            line(Event::RunStart {
                run_id: "r2".into(),
                command: vec![],
                policy: vec![],
                worktree: "/w".into(),
                seal_key: None,
            }),
        ];
        let runs = summarize(&records, |_, _| ctx(), &dirs);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].refusals.len(), 1);
        assert_eq!(runs[0].refusals[0].count, 2);
        assert_eq!(runs[0].refused.get(&Layer::KernelNetwork), Some(&13));
        assert_eq!(runs[0].inbound_not_itemized, 9);
        assert_eq!(runs[0].by_process.get("probe"), Some(&2));
        assert_eq!(runs[0].exit, Some(2));
        assert!(runs[1].refusals.is_empty());
        let text = render_text(&runs);
        assert!(text.contains("--allow-local 127.0.0.1:5432"), "{text}");
        assert!(text.contains("nothing refused"), "{text}");
        // A short account is said so among the run's notices, not counted.
        assert!(
            text.contains("  notice:   filesystem: the kernel dropped 5 audit records on this machine while the run went on (more were waiting than its backlog limit of 64)"),
            "{text}"
        );
        assert!(
            text.contains("(9 packets from outside dropped and counted, not itemized: only the first 32 on each CPU are)"),
            "{text}"
        );
    }
}
