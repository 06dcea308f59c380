//! The policy model: one immutable [`Policy`] value built from the CLI flags
//! and a TOML policy file. Everything downstream reads these typed values;
//! nothing re-parses a string. No syscalls happen here except reading files
//! and canonicalizing paths.

pub mod file;
pub mod host;
pub mod net;
pub mod overlap;
pub mod requests;
pub mod runs_later;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use file::{load, Overrides, PolicyError};
pub use host::{HostName, HostPattern, HostRule, Port};
pub use net::IpNet;
pub use requests::RequestRule;

/// The Landlock ABI a policy demands unless it says otherwise: any
/// (lockrun uses what the kernel has, and names what it lacks).
pub const LANDLOCK_ABI: u8 = 1;

/// A path as written in a policy: absolute once loaded, except those under the
/// run's temp dir, which only exists once the run has an id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "base", content = "path")]
pub enum PathSpec {
    /// An absolute path (placeholders `{worktree}`, `{home}` and `{state}` already substituted).
    Absolute(#[serde(serialize_with = "crate::shown::lossy::path")] PathBuf),
    /// A path relative to the run's temp dir (`{tmp}` or `{tmp}/sub`).
    RunTmp(#[serde(serialize_with = "crate::shown::lossy::path")] PathBuf),
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
    /// The run's own ports that processes of this host outside the run may
    /// reach over loopback (a dev server a person previews), TCP and UDP.
    /// Nothing else outside the run reaches a port it listens on, and no
    /// other host reaches any.
    pub expose: Vec<Port>,
    /// Private networks allowed for named hosts (the address guard refuses them otherwise).
    pub private: Vec<PrivateGrant>,
    /// Fixed answers for names, used instead of DNS (like /etc/hosts, for this run's proxy only).
    /// Every address is still checked by the address guard.
    pub resolve: BTreeMap<host::HostName, Vec<std::net::IpAddr>>,
    /// The CAs (a PEM file) the proxy trusts for the upstreams whose TLS it
    /// terminates, instead of the system's roots (`[network] tls_ca`).
    pub tls_ca: Option<std::path::PathBuf>,
    /// Hosts whose requests are allowed by method and path only
    /// (`[network.requests."HOST"] allow = ["GET /path/**"]`): any other
    /// request to them is refused.
    pub requests: BTreeMap<HostPattern, Vec<RequestRule>>,
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
    #[serde(serialize_with = "crate::shown::lossy::path")]
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
    /// The promises this policy lets a run go without where the kernel
    /// cannot hold them ([`crate::kernel::Gap`]); every such run says so.
    pub accept_gaps: Vec<crate::kernel::Gap>,
    /// The most tasks (processes and threads) the run may have at once.
    pub max_tasks: TaskLimit,
    /// The most memory the run's processes may use together.
    pub max_memory: MemoryLimit,
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

/// The most memory a run's processes may use together (cgroup
/// `memory.max`, or `memory.limit_in_bytes` with swap counted in a v1
/// hierarchy): one run that allocates without end, or a build that
/// outgrows the machine, would otherwise drive it to its own OOM killer,
/// which kills whatever process it finds biggest, in any run or outside.
/// At the limit the kernel first reclaims the run's own cache, then kills
/// a process of the run (SIGKILL); lockrun shows how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryLimit {
    /// At most this many bytes: `"8GiB"`, `"512MiB"`.
    Bytes(u64),
    /// This share of the machine's memory, in percent (1 to 100), counted
    /// when the run starts: `"50%"`.
    Share(u8),
    /// No limit: the policy said `max_memory = "unlimited"`. Where the
    /// kernel has no memory controller for lockrun, the one way to run.
    Unlimited,
}

impl MemoryLimit {
    /// The default: half the machine. A run cannot drive it out of memory
    /// alone, and a large build (a linker takes a few GiB) still fits.
    pub const DEFAULT: Self = Self::Share(50);
    /// The least a limit may be: below it, a shell and its first
    /// commands are killed before doing anything.
    pub const LEAST: u64 = 16 << 20;

    /// The limit in bytes on a machine of `total` bytes of memory;
    /// `None` when unlimited.
    #[must_use]
    pub fn bytes(self, total: u64) -> Option<u64> {
        match self {
            Self::Bytes(b) => Some(b),
            Self::Share(p) => {
                let share = u128::from(total) * u128::from(p) / 100;
                Some(u64::try_from(share).unwrap_or(u64::MAX).max(Self::LEAST))
            }
            Self::Unlimited => None,
        }
    }

    /// `text` as the policy writes it: a size with a binary unit
    /// (`"512MiB"`, `"8GiB"`, `"1.5GiB"` is not taken), a share of the
    /// machine (`"50%"`), or `"unlimited"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        const HOW: &str =
            "a size with its unit (\"512MiB\", \"8GiB\"; KiB, MiB, GiB, TiB), a share of the machine's memory (\"50%\"), or \"unlimited\"";
        if text == "unlimited" {
            return Ok(Self::Unlimited);
        }
        // Digits only: `str::parse` would take a sign (`"+8GiB"`).
        let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
        if let Some(p) = text.strip_suffix('%') {
            return match p.parse::<u8>().ok().filter(|_| digits(p)) {
                Some(p) if (1..=100).contains(&p) => Ok(Self::Share(p)),
                _ => Err(format!("{text:?}: a share is from 1% to 100%; or {HOW}")),
            };
        }
        let units: [(&str, u32); 4] = [("KiB", 10), ("MiB", 20), ("GiB", 30), ("TiB", 40)];
        let Some((n, shift)) = units
            .iter()
            .find_map(|(u, shift)| text.strip_suffix(u).map(|n| (n, *shift)))
        else {
            return Err(format!("{text:?} is not {HOW}"));
        };
        // As sizes are shown: `8 GiB`.
        let n = n.strip_suffix(' ').unwrap_or(n);
        let bytes = Some(n)
            .filter(|n| digits(n))
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| n.checked_mul(1u64 << shift))
            .filter(|b| *b < 1 << 60)
            .ok_or_else(|| format!("{text:?}: {n:?} is not a whole number in range; {HOW}"))?;
        if bytes < Self::LEAST {
            return Err(format!(
                "{text:?} is below the least a run can do anything in, 16MiB"
            ));
        }
        Ok(Self::Bytes(bytes))
    }
}

impl std::fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(b) => f.write_str(&size(*b)),
            Self::Share(p) => write!(f, "{p}% of the machine's memory"),
            Self::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// `bytes` in the largest binary unit it reaches, to a tenth where not
/// whole: `8 GiB`, `1.5 GiB`, `300 MiB`.
#[must_use]
pub fn size(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1 << shift {
            if bytes.is_multiple_of(1 << shift) {
                return format!("{} {unit}", bytes >> shift);
            }
            #[allow(clippy::cast_precision_loss)]
            let v = bytes as f64 / (1u64 << shift) as f64;
            return format!("{v:.1} {unit}");
        }
    }
    format!("{bytes} bytes")
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
    #[serde(serialize_with = "crate::shown::lossy::paths")]
    pub sources: Vec<PathBuf>,
    /// The worktree: writable, canonical.
    #[serde(serialize_with = "crate::shown::lossy::path")]
    pub worktree: PathBuf,
    /// The user's home, used by `{home}` and the default secrets.
    #[serde(serialize_with = "crate::shown::lossy::path")]
    pub home: PathBuf,
    pub fs: FsPolicy,
    pub network: NetworkPolicy,
    pub run: RunSettings,
    /// Extra environment for the command (e.g. `CLAUDE_CODE_TMPDIR = "{tmp}"`).
    pub env: BTreeMap<String, EnvTemplate>,
    /// The secrets kept out of the run, by environment variable: the run
    /// gets a placeholder, the proxy puts the value in for their hosts.
    pub secrets: BTreeMap<String, SecretSpec>,
}

/// Where a secret's value comes from and where it may go. Its value is
/// never part of the policy: it is read when the run starts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SecretSpec {
    /// The hosts the proxy puts the value in for (each allowed by the policy).
    pub hosts: Vec<HostPattern>,
    /// Read the value from this file (denied to the run) rather than from
    /// lockrun's environment.
    #[serde(serialize_with = "crate::shown::lossy::opt_path")]
    pub file: Option<PathBuf>,
    /// Also put the value in request bodies (else only in headers, the path
    /// and the query).
    pub body: bool,
    /// A variable that is unset is skipped with a notice, not refused.
    pub optional: bool,
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
