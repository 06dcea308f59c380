//! The policy model: one immutable [`Policy`] value built from the CLI flags
//! and a TOML policy file. Everything downstream reads these typed values;
//! nothing re-parses a string. No syscalls happen here except reading files
//! and canonicalizing paths.

pub mod file;
pub mod host;
pub mod later;
pub mod net;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use file::{load, Overrides, PolicyError};
pub use host::{HostName, HostPattern, HostRule, Port};
pub use net::IpNet;

/// The Landlock ABI the project pins: every filesystem right it knows is handled.
pub const LANDLOCK_ABI: u8 = 7;

/// A path as written in a policy: absolute once loaded, except those under the
/// run's temp dir, which only exists once the run has an id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "base", content = "path")]
pub enum PathSpec {
    /// An absolute path (placeholders `{worktree}`, `{home}` and `{state}` already substituted).
    Absolute(#[serde(serialize_with = "crate::audit::lossy::path")] PathBuf),
    /// A path relative to the run's temp dir (`{tmp}` or `{tmp}/sub`).
    RunTmp(#[serde(serialize_with = "crate::audit::lossy::path")] PathBuf),
}

impl PathSpec {
    /// The concrete path for a run whose temp dir is `tmp`.
    #[must_use]
    pub fn resolve(&self, tmp: &Path) -> PathBuf {
        match self {
            Self::Absolute(p) => p.clone(),
            Self::RunTmp(rel) if rel.as_os_str().is_empty() => tmp.to_path_buf(),
            Self::RunTmp(rel) => tmp.join(rel),
        }
    }
}

impl std::fmt::Display for PathSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absolute(p) => write!(f, "{}", p.display()),
            Self::RunTmp(rel) if rel.as_os_str().is_empty() => f.write_str("{tmp}"),
            Self::RunTmp(rel) => write!(f, "{{tmp}}/{}", rel.display()),
        }
    }
}

/// What the command may do to the filesystem.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FsPolicy {
    /// Writable besides the worktree and the run's temp dir.
    pub writable: Vec<PathSpec>,
    /// Neither readable, listable nor executable (nor anything beneath).
    pub deny_read: Vec<PathSpec>,
}

/// A private network the proxy may dial, for named hosts only.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PrivateGrant {
    pub hosts: Vec<HostPattern>,
    pub network: IpNet,
}

/// What the command may reach.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NetworkPolicy {
    /// Hosts the proxy may reach, by name (checked before DNS).
    pub allow: Vec<HostRule>,
    /// Names refused even when an allow rule matches: deny wins.
    pub deny: Vec<HostPattern>,
    /// Loopback endpoints the command may connect to directly (e.g. a local database).
    pub local: Vec<SocketAddr>,
    /// Private networks allowed for named hosts (the address guard refuses them otherwise).
    pub private: Vec<PrivateGrant>,
    /// Fixed answers for names, used instead of DNS (like /etc/hosts, for this run's proxy only).
    /// Every address is still checked by the address guard.
    pub resolve: BTreeMap<host::HostName, Vec<std::net::IpAddr>>,
}

impl NetworkPolicy {
    /// Whether the run needs a proxy at all.
    #[must_use]
    pub fn needs_proxy(&self) -> bool {
        !self.allow.is_empty()
    }
}

/// Settings of the run itself.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunSettings {
    /// Where run dirs live: `<state_dir>/runs/<id>`.
    #[serde(serialize_with = "crate::audit::lossy::path")]
    pub state_dir: PathBuf,
    /// How long an idle proxy tunnel lives.
    #[serde(with = "secs")]
    pub idle_tunnel: Duration,
    /// How old a run dir of a vanished lockrun must be before `gc` reaps it.
    #[serde(with = "secs")]
    pub gc_grace: Duration,
    /// Concurrent proxy connections per run.
    pub max_connections: usize,
    /// The Landlock ABI the policy demands; a weaker kernel refuses the run.
    pub landlock_abi: u8,
    /// The most tasks (processes and threads) the run may have at once.
    pub max_tasks: TaskLimit,
}

/// The most tasks (processes and threads) a run may have at once: a fork
/// bomb inside, or a build that forks without end, would otherwise take
/// every pid of the machine (`kernel.pid_max`, 32768 on many), and with
/// them every other run's and the caller's ability to start anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskLimit {
    /// At most this many at once (cgroup `pids.max`): a `fork` or
    /// `clone` beyond gets `EAGAIN`, and is counted and shown.
    At(u32),
    /// No limit: the policy said `max_tasks = "unlimited"`. Where the
    /// kernel has no pids controller for lockrun, the one way to run.
    Unlimited,
}

impl TaskLimit {
    /// The default: far above what a build or an agent's tools start (a
    /// `cargo build -j` on many cores, a browser's threads), far below
    /// the machine's pids.
    pub const DEFAULT: Self = Self::At(4096);
    /// The most `pids.max` takes (the kernel's `PID_MAX_LIMIT`).
    pub const MOST: u32 = 4 * 1024 * 1024;
}

impl std::fmt::Display for TaskLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::At(n) => write!(f, "{n}"),
            Self::Unlimited => f.write_str("unlimited"),
        }
    }
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
}

/// An environment value for the command; `{tmp}` is filled in per run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EnvTemplate(pub String);

impl EnvTemplate {
    #[must_use]
    pub fn render(&self, tmp: &Path) -> String {
        self.0.replace("{tmp}", &tmp.to_string_lossy())
    }
}

/// The effective policy of one run. Immutable once built. Paths serialize
/// as text, a byte that is not UTF-8 as U+FFFD (as in the audit log).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Policy {
    /// The files merged into this policy, outermost first.
    #[serde(serialize_with = "crate::audit::lossy::paths")]
    pub sources: Vec<PathBuf>,
    /// The worktree: writable, canonical.
    #[serde(serialize_with = "crate::audit::lossy::path")]
    pub worktree: PathBuf,
    /// The user's home, used by `{home}` and the default secrets.
    #[serde(serialize_with = "crate::audit::lossy::path")]
    pub home: PathBuf,
    pub fs: FsPolicy,
    pub network: NetworkPolicy,
    pub run: RunSettings,
    /// Extra environment for the command (e.g. `CLAUDE_CODE_TMPDIR = "{tmp}"`).
    pub env: BTreeMap<String, EnvTemplate>,
}

impl Policy {
    /// Secrets denied to every run, whatever the policy says: beneath
    /// `home` (`$HOME`) and, where it is another, beneath the home the
    /// password database gives the command's uid. A caller whose `HOME`
    /// is not its uid's (`sudo` keeping the user's, a runner's own) would
    /// otherwise leave `/root/.ssh` readable to a run of uid 0, which
    /// passes its owner's permission bits.
    #[must_use]
    pub fn secret_floor(home: &Path) -> Vec<PathBuf> {
        let uid_home = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.dir)
            .filter(|d| d.is_absolute() && d != home && d != Path::new("/"));
        std::iter::once(home)
            .chain(uid_home.as_deref())
            .flat_map(Self::secrets_beneath)
            .collect()
    }

    /// The secrets of the floor beneath one home.
    fn secrets_beneath(home: &Path) -> Vec<PathBuf> {
        [
            ".ssh",
            ".aws",
            ".azure",
            ".config/gcloud",
            ".config/gh",
            ".netrc",
            ".docker/config.json",
            ".kube",
            ".gnupg",
            ".password-store",
            ".git-credentials",
            ".npmrc",
            ".pypirc",
            ".cargo/credentials.toml",
            ".cargo/credentials",
            ".vault-token",
        ]
        .iter()
        .map(|p| home.join(p))
        .collect()
    }

    /// The run directory root: `<state>/runs`.
    #[must_use]
    pub fn runs_dir(&self) -> PathBuf {
        self.run.state_dir.join("runs")
    }
}
