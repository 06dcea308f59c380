//! What `lockrun audit` says of a log: each run's refusals grouped by
//! layer, by process and by target, each with the policy line (and the
//! equivalent flag) that would allow it, or the reason why none should.
//!
//! The suggestions are pure functions ([`suggest_proxy`], [`suggest_kernel`],
//! [`suggest_fs`], [`suggest_scope`]) so that each case is unit-tested;
//! reading the file, reloading the run's policy and printing are the
//! command's edge ([`crate::commands::audit`]).
//!
//! What a log does not say, this cannot know: CLI flags of the run
//! (`--deny-read`, `--state-dir`) are not recorded, and the policy files are
//! read again as they are now, not as they were during the run.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{refused_as, Event, Layer, Narrowed, ProxyVerdict, RanOut, Record, ScopeTarget};
use crate::policy::{size, TaskLimit};

mod filesystem;
mod network;
mod render;
#[cfg(test)]
pub(crate) mod tests;

pub use filesystem::{suggest_fs, suggest_scope};
pub use network::{suggest_kernel, suggest_proxy};
pub use render::render_text;
use render::{layer_name, show_dest};

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
    #[must_use]
    pub fn broken(&self) -> bool {
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

impl DenySource {
    /// Where the entry comes from, in a reason's words.
    #[must_use]
    pub fn said(self) -> &'static str {
        match self {
            Self::SecretFloor => "a secret lockrun always denies",
            Self::Policy => "the run's policy",
            Self::StateDir => "lockrun's state dir",
        }
    }
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
    pub narrowed: Vec<Narrowed>,
}

impl FsContext {
    fn deny_entry_for(&self, path: &Path) -> Option<&(PathBuf, DenySource)> {
        self.deny
            .iter()
            .filter(|(d, _)| path.starts_with(d))
            .max_by_key(|(d, _)| d.components().count())
    }

    /// The deny-read entry nearest beneath the dir `path`, if any lies
    /// beneath it.
    fn deny_entry_below(&self, path: &Path) -> Option<&(PathBuf, DenySource)> {
        self.deny
            .iter()
            .filter(|(d, _)| d != path && d.starts_with(path))
            .min_by_key(|(d, _)| d.components().count())
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
    let mut named: HashMap<&str, usize> = HashMap::new();
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
fn task_limit_refusal(limit: u32, refused: u64, ran_out: RanOut) -> Refusal {
    if ran_out == RanOut::AboveTheRun {
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
                limit.saturating_mul(2).min(TaskLimit::MOST)
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
fn memory_limit_refusal(limit: u64, killed: u64, peak: Option<u64>, ran_out: RanOut) -> Refusal {
    let peak = peak.map_or_else(String::new, |p| format!("; the run's peak was {}", size(p)));
    if ran_out == RanOut::AboveTheRun {
        return Refusal {
            layer: Layer::Memory,
            target: "memory run out above the run".to_owned(),
            detail: format!(
                "process killed by the kernel (SIGKILL, out of memory), the run below its own limit of {}{peak}",
                size(limit)
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
        target: format!("the run's memory limit of {}", size(limit)),
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
                let target = p.target();
                let detail = p.detail();
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
        Event::Proxy(p) if p.refused() => {
            (Layer::Proxy, p.target(), p.detail(), None, suggest_proxy(p))
        }
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
            match f.errno {
                Some(errno) => format!(
                    "{} ({}; {errno})",
                    refused_as(&f.access),
                    f.access.join(", ")
                ),
                None => format!("{} ({})", refused_as(&f.access), f.access.join(", ")),
            },
            named(&f.comm),
            suggest_fs(f, ctx, is_dir),
        ),
        _ => return None,
    })
}
