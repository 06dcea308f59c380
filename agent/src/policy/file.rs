//! The TOML policy format, `extends`, placeholders and CLI overrides.
//!
//! ```toml
//! extends = "default"              # a preset name from policies/, or a path relative to this file
//! [filesystem]
//! writable  = ["{state}/agents/my-agent"]  # besides the worktree and {tmp}
//! deny_read = ["{home}/.config/secret"]
//! [network]
//! allow = ["api.example.com", "*.example.org:443"]
//! deny  = ["evil.example.org"]
//! local = ["127.0.0.1:5432"]
//! expose = [3000]                  # the run's ports this host's processes may reach over loopback
//! tls_ca = "/etc/ssl/corp-ca.pem"  # the CAs trusted for inspected upstreams (default: the system's)
//! [[network.private]]
//! hosts   = ["git.internal.example"]
//! network = "10.20.0.0/16"
//! [network.resolve]                # fixed answers instead of DNS; still guarded
//! "git.internal.example" = ["10.20.0.5"]
//! [run]
//! state_dir = "/var/lib/lockrun"
//! idle_tunnel_secs = 900
//! gc_grace_secs = 7200
//! max_connections = 256
//! landlock_abi = 7
//! max_tasks = 4096                 # processes and threads at once, or "unlimited"
//! max_memory = "50%"               # of the machine's memory; or "8GiB", or "unlimited"
//! [env]
//! CLAUDE_CODE_TMPDIR = "{tmp}"
//! ```
//!
//! Placeholders: `{worktree}`, `{home}`, `{state}` (the state dir) and
//! `{tmp}` (the run's temp dir). Lists from `extends` come first and are
//! added to; scalars are overridden. CLI flags add to the result.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::overlap::{self, Entry, Origin};
#[cfg(test)]
use super::MemoryLimit;
use super::{PathSpec, Policy, Port, TaskLimit};
use merge::Lists;
#[cfg(test)]
use source::parse_text;

mod merge;
mod secrets;
mod source;

/// The presets shipped in `policies/`, embedded so that `--policy NAME` works
/// from any directory.
pub const PRESETS: &[(&str, &str)] = &[
    ("default", include_str!("../../../policies/default.toml")),
    (
        "claude-code",
        include_str!("../../../policies/claude-code.toml"),
    ),
    ("codex", include_str!("../../../policies/codex.toml")),
    ("gemini", include_str!("../../../policies/gemini.toml")),
    ("opencode", include_str!("../../../policies/opencode.toml")),
    (
        "qwen-code",
        include_str!("../../../policies/qwen-code.toml"),
    ),
];

/// The most a policy file may hold: far more than any policy needs, and
/// a bound on what lockrun reads of a path it is given.
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The most files an `extends` chain may hold, the outermost included.
pub const MAX_EXTENDS: usize = 16;

/// Why a policy could not be built. Every variant names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}{}: {source}", extended_by(.by.as_deref()))]
    Read {
        path: PathBuf,
        /// The policy whose `extends` names it.
        by: Option<String>,
        source: crate::regular_file::ReadError,
    },
    #[error("cannot read policy {name}{}: no such file, and not a preset (presets: {presets})", extended_by(.by.as_deref()))]
    NoPreset {
        name: String,
        by: Option<String>,
        presets: String,
    },
    #[error("{origin}: `extends` chain longer than {MAX_EXTENDS} files; merge some of them")]
    TooDeep { origin: String },
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: `{key}`: {message}")]
    Value {
        origin: String,
        key: String,
        message: String,
    },
    #[error("{origin}: `extends` cycle: {chain}")]
    Cycle { origin: String, chain: String },
    #[error("worktree {path}: {source}")]
    Worktree {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("worktree {0} is not a directory")]
    WorktreeNotDir(PathBuf),
    #[error("{what} {path} {how} {state}, where other runs keep their temp dirs: it cannot be writable in a run (choose a dir outside {state}, or another --state-dir)")]
    InStateDir {
        what: &'static str,
        path: PathBuf,
        how: &'static str,
        state: PathBuf,
    },
    #[error(transparent)]
    DeniedWritable(#[from] Box<overlap::DeniedWritable>),
    #[error(transparent)]
    StateDirHolds(#[from] Box<overlap::StateDirHolds>),
    #[error("{flag} `{value}`: {message}")]
    Flag {
        flag: &'static str,
        value: String,
        message: String,
    },
}

/// ` (extended by ORIGIN)`, for a file an `extends` names.
fn extended_by(by: Option<&str>) -> String {
    by.map(|b| format!(" (extended by {b})"))
        .unwrap_or_default()
}

impl PolicyError {
    fn value(origin: &str, key: &str, message: impl Into<String>) -> Self {
        Self::Value {
            origin: origin.to_owned(),
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    extends: Option<String>,
    #[serde(default)]
    filesystem: RawFs,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    run: RawRun,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    secrets: BTreeMap<String, secrets::RawSecret>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFs {
    #[serde(default)]
    writable: Vec<String>,
    #[serde(default)]
    deny_read: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    local: Vec<String>,
    #[serde(default)]
    expose: Vec<i64>,
    #[serde(default)]
    private: Vec<RawPrivate>,
    #[serde(default)]
    resolve: BTreeMap<String, Vec<String>>,
    /// A PEM file of the CAs the proxy trusts for the upstreams it
    /// inspects, instead of the system's roots.
    tls_ca: Option<String>,
    #[serde(default)]
    requests: BTreeMap<String, secrets::RawRequests>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrivate {
    hosts: Vec<String>,
    network: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    state_dir: Option<String>,
    idle_tunnel_secs: Option<u64>,
    gc_grace_secs: Option<u64>,
    max_connections: Option<usize>,
    landlock_abi: Option<u8>,
    #[serde(default)]
    accept_gaps: Vec<String>,
    max_tasks: Option<RawTaskLimit>,
    max_memory: Option<RawMemoryLimit>,
}

/// `max_memory = "8GiB"`, `"50%"` or `"unlimited"`: a string, so that a
/// bare number (bytes? GiB?) is refused rather than guessed.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a size with its unit (\"8GiB\"), a share of the machine's memory (\"50%\"), or \"unlimited\""
)]
enum RawMemoryLimit {
    Text(String),
}

/// `max_tasks = 4096` or `max_tasks = "unlimited"`.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a number of tasks, or \"unlimited\"")]
enum RawTaskLimit {
    At(i64),
    Word(String),
}

/// A gap a policy accepts, by its name ([`crate::kernel::Gap`]).
fn gap(name: &str) -> Result<crate::kernel::Gap, String> {
    crate::kernel::Gap::named(name).ok_or_else(|| {
        let names: Vec<&str> = crate::kernel::Gap::ALL.iter().map(|g| g.name()).collect();
        format!(
            "{name:?} is no gap lockrun knows; the gaps a kernel can leave: {}",
            names.join(", ")
        )
    })
}

/// `run.max_tasks`: 1 to the kernel's most, or `"unlimited"`.
fn task_limit(v: &RawTaskLimit) -> Result<TaskLimit, String> {
    match v {
        RawTaskLimit::At(n) => match u32::try_from(*n) {
            Ok(n) if (1..=TaskLimit::MOST).contains(&n) => Ok(TaskLimit::At(n)),
            _ => Err(format!(
                "must be from 1 to {} (tasks: processes and threads), or \"unlimited\"",
                TaskLimit::MOST
            )),
        },
        RawTaskLimit::Word(w) if w == "unlimited" => Ok(TaskLimit::Unlimited),
        RawTaskLimit::Word(w) => Err(format!(
            "{w:?} is not a number of tasks; a number from 1 to {}, or \"unlimited\"",
            TaskLimit::MOST
        )),
    }
}

/// What the command line adds to the policy file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub worktree: Option<PathBuf>,
    pub allow_write: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub allow_host: Vec<String>,
    pub allow_local: Vec<String>,
    pub expose: Vec<String>,
    pub accept_gaps: Vec<String>,
    pub state_dir: Option<PathBuf>,
    /// `--secret ENV@HOST[,HOST…]`, each replacing the policy's binding of ENV.
    pub secrets: Vec<String>,
    /// The program a run is to start (`argv[0]`), if a run is to start:
    /// the state dir must not hold it.
    pub program: Option<std::ffi::OsString>,
}

/// Build the effective policy from an optional policy file (a path, or a
/// preset name) and the CLI overrides, in steps ([`merge`]): the chain of
/// files, base first; the worktree; the scalars of `[run]`, the state dir
/// first; the lists of each file, then of the flags; then the refusals of
/// a policy that contradicts itself.
pub fn load(policy: Option<&str>, over: &Overrides) -> Result<Policy, PolicyError> {
    let home = home_dir();
    let chain = merge::chain(policy)?;
    let worktree = merge::worktree(over)?;
    let (run, state) = merge::run_settings(&chain, &worktree, &home, over)?;
    let mut lists = Lists::new(&worktree);
    for s in &chain {
        lists.add_file(s, &worktree, &home, &state.path)?;
    }
    lists.add_flags(over)?;
    secrets::add_flags(&mut lists.secrets, &over.secrets)?;
    let Lists {
        mut fs,
        mut network,
        env,
        writable,
        mut denied,
        secrets,
    } = lists;
    secrets::check(&network, &secrets, &env)?;
    for (name, file) in secrets
        .iter()
        .filter_map(|(n, s)| Some((n, s.file.as_ref()?)))
    {
        // Where the run writes, a run could have put the value there.
        if let Some(w) = writable.iter().find(|w| match &w.path {
            PathSpec::Absolute(w) => file.starts_with(w),
            PathSpec::RunTmp(_) => false,
        }) {
            return Err(PolicyError::value(
                "the policy",
                &format!("secrets.{name}.file"),
                format!(
                    "{} lies beneath {w}, where the run writes: keep a secret's file outside every writable path",
                    file.display()
                ),
            ));
        }
        // The value's file is denied to the run, whatever else the policy
        // opens.
        let p = PathSpec::Absolute(file.clone());
        denied.push(Entry::new(Origin::Secret, p.clone()));
        fs.deny_read.push(p);
    }
    fs.writable.sort();
    fs.writable.dedup();
    fs.deny_read.sort();
    fs.deny_read.dedup();
    network.local.sort();
    network.local.dedup();
    network.expose.sort();
    network.expose.dedup();
    overlap::outside_run_dirs(&worktree, &fs.writable, &state.path)?;
    denied.extend(
        Policy::secret_floor(&home)
            .into_iter()
            .map(|p| Entry::new(Origin::Secret, PathSpec::Absolute(p))),
    );
    overlap::refuse_denied_writable(&denied, &writable)?;
    overlap::refuse_state_dir(
        &Entry::new(state.origin, PathSpec::Absolute(state.path.clone())),
        &home,
        over.program.as_deref(),
        &env,
        &writable,
        &default_state_dir(&home),
    )?;

    Ok(Policy {
        sources: chain.iter().map(|s| PathBuf::from(&s.origin)).collect(),
        worktree,
        home,
        fs,
        network,
        run,
        env,
        secrets,
    })
}

fn local_endpoint(raw: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = raw
        .parse()
        .map_err(|_| format!("`{raw}`: expected ADDRESS:PORT such as 127.0.0.1:5432"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("`{raw}`: only loopback endpoints may be reached directly; other hosts go through [network] allow"));
    }
    if addr.port() == 0 {
        return Err(format!("`{raw}`: port 0"));
    }
    Ok(addr)
}

/// A port of the run's that `network.expose` opens to this host's processes.
fn exposed_port(raw: i64) -> Result<Port, String> {
    u16::try_from(raw)
        .ok()
        .and_then(Port::new)
        .ok_or_else(|| format!("`{raw}`: a port is a number from 1 to 65535"))
}

fn absolute(flag: &'static str, p: &Path) -> Result<PathBuf, PolicyError> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| PolicyError::Flag {
                flag,
                value: p.display().to_string(),
                message: e.to_string(),
            })?
            .join(p)
    };
    Ok(normalize(&abs))
}

/// Lexical normalization: drop `.` and resolve `..` without touching the
/// filesystem (the Landlock layer opens every path itself).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

struct Ctx<'a> {
    origin: &'a str,
    worktree: &'a Path,
    home: &'a Path,
    state: Option<&'a Path>,
}

impl Ctx<'_> {
    fn path(&self, key: &str, raw: &str) -> Result<PathSpec, PolicyError> {
        if let Some(rest) = raw.strip_prefix("{tmp}") {
            let rel = rest.trim_start_matches('/');
            if !rest.is_empty() && !rest.starts_with('/') || rel.split('/').any(|c| c == "..") {
                return Err(PolicyError::value(
                    self.origin,
                    key,
                    format!("`{raw}`: {{tmp}} must be followed by / or nothing, without .."),
                ));
            }
            return Ok(PathSpec::RunTmp(PathBuf::from(rel)));
        }
        let mut s = raw
            .replace("{worktree}", &self.worktree.to_string_lossy())
            .replace("{home}", &self.home.to_string_lossy());
        if s.contains("{state}") {
            let Some(state) = self.state else {
                return Err(PolicyError::value(
                    self.origin,
                    key,
                    "{state} cannot be used here",
                ));
            };
            s = s.replace("{state}", &state.to_string_lossy());
        }
        if s.contains('{') {
            return Err(PolicyError::value(
                self.origin,
                key,
                format!("`{raw}`: unknown placeholder (known: {{worktree}}, {{home}}, {{state}}, {{tmp}})"),
            ));
        }
        let p = Path::new(&s);
        if !p.is_absolute() {
            return Err(PolicyError::value(
                self.origin,
                key,
                format!(
                    "`{raw}` is relative: write an absolute path or start it with a placeholder"
                ),
            ));
        }
        Ok(PathSpec::Absolute(normalize(p)))
    }
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

fn default_state_dir(home: &Path) -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/lockrun")
    } else {
        home.join(".local/state/lockrun")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn unknown_key_names_line_and_suggests() {
        let err = parse_text("t.toml", "[network]\nallow = []\nalow = [\"x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3:1:"), "{err}");
        assert!(
            err.contains("alow") && err.contains("did you mean `allow`"),
            "{err}"
        );
    }

    #[test]
    fn a_parse_error_is_one_line() {
        for text in ["[network\n", "[run]\n[run]\n", "[env]\nX = \"\\q\"\n"] {
            let err = parse_text("t.toml", text).unwrap_err().to_string();
            assert!(!err.contains('\n') && err.starts_with("t.toml:"), "{err:?}");
        }
    }

    #[test]
    fn wrong_type_names_line() {
        let err = parse_text("t.toml", "[run]\nidle_tunnel_secs = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:2:"), "{err}");
    }

    #[test]
    fn every_preset_parses() {
        for (name, text) in PRESETS {
            parse_text(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn max_tasks_is_a_number_in_range_or_unlimited() {
        let limit = |text: &str| {
            let raw = parse_text("t.toml", &format!("[run]\nmax_tasks = {text}\n"))
                .map_err(|e| e.to_string())?;
            task_limit(raw.run.max_tasks.as_ref().unwrap())
        };
        assert_eq!(limit("64"), Ok(TaskLimit::At(64)));
        assert_eq!(limit("1"), Ok(TaskLimit::At(1)));
        assert_eq!(limit("4194304"), Ok(TaskLimit::At(TaskLimit::MOST)));
        assert_eq!(limit("\"unlimited\""), Ok(TaskLimit::Unlimited));
        for bad in ["0", "-1", "4194305", "99999999999", "\"max\"", "\"64\""] {
            let err = limit(bad).unwrap_err();
            assert!(err.contains("unlimited"), "{bad}: {err}");
        }
        let err = limit("true").unwrap_err();
        assert!(
            err.starts_with("t.toml:2:") && err.contains("a number of tasks"),
            "{err}"
        );
    }

    #[test]
    fn max_memory_is_a_size_with_its_unit_a_share_or_unlimited() {
        let limit = |text: &str| {
            let raw = parse_text("t.toml", &format!("[run]\nmax_memory = {text}\n"))
                .map_err(|e| e.to_string())?;
            let Some(RawMemoryLimit::Text(v)) = raw.run.max_memory else {
                unreachable!()
            };
            MemoryLimit::parse(&v)
        };
        assert_eq!(limit("\"64MiB\""), Ok(MemoryLimit::Bytes(64 << 20)));
        assert_eq!(
            limit("\"16MiB\""),
            Ok(MemoryLimit::Bytes(MemoryLimit::LEAST))
        );
        assert_eq!(limit("\"8GiB\""), Ok(MemoryLimit::Bytes(8 << 30)));
        assert_eq!(limit("\"8 GiB\""), Ok(MemoryLimit::Bytes(8 << 30)));
        assert_eq!(limit("\"2TiB\""), Ok(MemoryLimit::Bytes(2 << 40)));
        assert_eq!(limit("\"65536KiB\""), Ok(MemoryLimit::Bytes(64 << 20)));
        assert_eq!(limit("\"50%\""), Ok(MemoryLimit::Share(50)));
        assert_eq!(limit("\"100%\""), Ok(MemoryLimit::Share(100)));
        assert_eq!(limit("\"unlimited\""), Ok(MemoryLimit::Unlimited));
        // Decimal units, no unit, fractions, signs, out of range, too small.
        for bad in [
            "\"8GB\"",
            "\"8G\"",
            "\"8  GiB\"",
            "\"8\"",
            "\"1.5GiB\"",
            "\"-1GiB\"",
            "\" 8GiB\"",
            "\"0%\"",
            "\"101%\"",
            "\"+8GiB\"",
            "\"+50%\"",
            "\"50.5%\"",
            "\"15MiB\"",
            "\"0MiB\"",
            "\"99999999999TiB\"",
            "\"max\"",
        ] {
            assert!(limit(bad).is_err(), "{bad}: {:?}", limit(bad));
        }
        let err = limit("\"8GB\"").unwrap_err();
        assert!(err.contains("GiB") && err.contains("unlimited"), "{err}");
        // A bare number is not guessed at.
        let err = limit("8").unwrap_err();
        assert!(
            err.starts_with("t.toml:2:") && err.contains("a size with its unit"),
            "{err}"
        );
    }

    #[test]
    fn a_share_of_the_machine_is_counted_at_the_start_and_sizes_read_back() {
        assert_eq!(MemoryLimit::Share(50).bytes(24 << 30), Some(12 << 30));
        assert_eq!(
            MemoryLimit::Share(1).bytes(100 << 20),
            Some(MemoryLimit::LEAST)
        );
        assert_eq!(MemoryLimit::Bytes(64 << 20).bytes(1 << 30), Some(64 << 20));
        assert_eq!(MemoryLimit::Unlimited.bytes(1 << 30), None);
        assert_eq!(crate::policy::size(8 << 30), "8 GiB");
        assert_eq!(crate::policy::size(3 << 29), "1.5 GiB");
        assert_eq!(crate::policy::size(300 << 20), "300 MiB");
        assert_eq!(crate::policy::size(12_884_901_888 - 4096), "12.0 GiB");
        assert_eq!(crate::policy::size(512), "512 bytes");
        assert_eq!(
            MemoryLimit::Share(50).to_string(),
            "50% of the machine's memory"
        );
    }

    #[test]
    fn exposed_ports_are_numbers_from_1_to_65535() {
        let raw = parse_text("t.toml", "[network]\nexpose = [3000, 65535, 1]\n").unwrap();
        let ports: Vec<u16> = raw
            .network
            .expose
            .iter()
            .map(|&p| exposed_port(p).unwrap().get())
            .collect();
        assert_eq!(ports, [3000, 65535, 1]);
        for bad in [0, -1, 65536, i64::MAX] {
            let err = exposed_port(bad).unwrap_err();
            assert!(err.contains("from 1 to 65535"), "{bad}: {err}");
        }
        let err = parse_text("t.toml", "[network]\nexpose = [\"3000\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:2:"), "{err}");
        let over = |expose: &str| Overrides {
            worktree: Some(PathBuf::from("/")),
            state_dir: Some(PathBuf::from("/nonexistent-lockrun-state")),
            expose: vec![expose.to_owned()],
            ..Overrides::default()
        };
        let p = load(None, &over("8080")).unwrap();
        assert_eq!(p.network.expose, [Port::new(8080).unwrap()]);
        for bad in ["0", "x", "70000", "-3"] {
            let err = load(None, &over(bad)).unwrap_err().to_string();
            assert!(err.contains("--expose"), "{bad}: {err}");
        }
    }

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../..")), PathBuf::from("/"));
    }
}
