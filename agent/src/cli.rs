//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Run a command confined by the kernel: it can write only to its worktree and
/// its own temp dir, and reach the network only through its own allowlisting
/// proxy. Exit status: the command's own (128+N for signal N); 125 when the
/// sandbox could not be set up (nothing ran); 126 not executable; 127 not
/// found; 2 for a usage error.
#[derive(Debug, Parser)]
#[command(
    name = "lockrun",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Reap run dirs, cgroups and pinned hooks left by lockruns that are gone
    /// (only those older than the grace period), and other lockrun builds'
    /// programs and parent cgroups once none of their runs is left.
    Gc(GcArgs),
    /// Policy tools.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Report what this host can enforce, then prove it with a live canary run.
    Doctor(DoctorArgs),
    /// Summarize an audit log: refusals by layer, process and target, each with
    /// the policy line that would allow it.
    Audit(AuditArgs),
    /// (internal) One attempt made from inside a sandbox by the doctor's canary.
    #[command(name = "__probe", hide = true)]
    Probe(ProbeArgs),
    /// (internal) The kernel's part of a run on this machine, for the bench's floor.
    #[command(name = "__kernel_steps", hide = true)]
    KernelSteps(KernelStepsArgs),
}

#[derive(Debug, Args)]
pub struct KernelStepsArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The directory that stands in for the run's temp dir.
    #[arg(long)]
    pub tmp: PathBuf,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// write PATH | tcp ADDR | udp ADDR | unix PATH | signal PID
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the effective policy after merging files and flags, every path resolved.
    Show(ShowArgs),
}

/// The policy inputs shared by a run and `policy show`.
#[derive(Debug, Args, Clone, Default)]
pub struct PolicyArgs {
    /// The worktree: the one directory the command may write besides its temp dir [default: .]
    #[arg(long, value_name = "DIR")]
    pub worktree: Option<PathBuf>,
    /// A policy file, or the name of a preset (default, claude-code, codex, gemini, opencode, qwen-code).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<String>,
    /// Also allow writing beneath PATH (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Deny reading, listing and executing PATH and everything beneath (repeatable).
    #[arg(long = "deny-read", value_name = "PATH")]
    pub deny_read: Vec<PathBuf>,
    /// Allow reaching HOST[:PORT] through the proxy; `*.suffix` for subdomains;
    /// port 443 when none is given (repeatable).
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    pub allow_host: Vec<String>,
    /// Keep the environment variable ENV's value out of the run: the run
    /// gets a placeholder, and the proxy puts the value in requests to
    /// HOST (each allowed) in their place; sent anywhere else, refused
    /// (repeatable; ENV must be set).
    #[arg(long = "secret", value_name = "ENV@HOST[,HOST...]")]
    pub secrets: Vec<String>,
    /// Allow connecting directly to a loopback ADDRESS:PORT, e.g. 127.0.0.1:5432 (repeatable).
    #[arg(long = "allow-local", value_name = "ADDR:PORT")]
    pub allow_local: Vec<String>,
    /// Let processes of this host outside the run connect to the run's PORT
    /// over loopback, e.g. a dev server to preview (repeatable); no other host can.
    #[arg(long = "expose", value_name = "PORT")]
    pub expose: Vec<String>,
    /// Where run dirs live [default: /var/lib/lockrun as root, else ~/.local/state/lockrun].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Run even though this kernel cannot hold the promise GAP names (see
    /// `lockrun doctor`); every such run says so (repeatable).
    #[arg(long = "accept-gap", value_name = "GAP")]
    pub accept_gaps: Vec<String>,
}

#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Append every refusal and proxy decision to FILE as JSON lines.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Where run dirs live.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Reap only runs older than this many seconds [default: the policy's `gc_grace_secs`].
    #[arg(long, value_name = "SECS")]
    pub grace_secs: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also list every Landlock rule the policy produces on this machine (the
    /// read grants around each deny-read path, the writable trees, devices).
    #[arg(long)]
    pub rules: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Only report host support; skip the live canary.
    #[arg(long)]
    pub no_canary: bool,
    /// Print one JSON object instead of text: the kernel release, the
    /// Landlock ABI (0 without Landlock), the host checks, each promise with
    /// the mechanism holding it or its gap, and the canary's attempts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The audit log to read.
    pub file: PathBuf,
    /// The state dir of the runs that wrote it, whose key checks each
    /// line's seal [default: /var/lib/lockrun as root, else ~/.local/state/lockrun].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}
