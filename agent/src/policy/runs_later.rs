//! Where code that runs later, outside any sandbox, is kept: the user's
//! shell start-up files, git's configuration, the directories on `PATH`,
//! toolchains and the package caches their next install unpacks, the
//! system's programs and services.
//!
//! A run confines the command while it runs. A command that may write to one
//! of these places can leave something there that the user's own shell, git,
//! cargo or npm runs afterwards, unconfined: an escape that waits. So
//! lockrun never suggests making them writable (`lockrun audit`), and warns
//! on every run whose policy does (see [`overlapping`]).
//!
//! One table, pure functions, tested below: the list is audited as a whole.

use std::path::{Path, PathBuf};

/// One place whose contents something outside the sandbox runs later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsLater {
    /// The place; everything beneath it counts.
    pub path: PathBuf,
    /// What runs what is kept there, and when.
    pub runner: &'static str,
    /// How a command usually gets what it wanted there without it, if
    /// there is a common way.
    pub instead: Option<&'static str>,
}

/// Why git's global config (either of its two places) runs code later.
const GIT_READS: &str =
    "git reads it on every command (hooks path, fsmonitor, aliases, filters run programs)";
const GIT_INSTEAD: Option<&str> =
    Some("set git options for the run with GIT_CONFIG_GLOBAL or `git -c`");

/// Under the user's home: (path, what runs it, how to do without).
const HOME: &[(&str, &str, Option<&str>)] = &[
    (".bashrc", "the shell runs it at every start", None),
    (".bash_profile", "the shell runs it at login", None),
    (".bash_login", "the shell runs it at login", None),
    (".bash_logout", "the shell runs it at logout", None),
    (".profile", "the shell runs it at login", None),
    (".zshrc", "zsh runs it at every start", None),
    (".zshenv", "zsh runs it at every start", None),
    (".zprofile", "zsh runs it at login", None),
    (".zlogin", "zsh runs it at login", None),
    (
        ".gitconfig",
        GIT_READS,
        GIT_INSTEAD,
    ),
    (
        ".config/git",
        GIT_READS,
        GIT_INSTEAD,
    ),
    (".config/systemd", "systemd starts the user services in it", None),
    (".config/autostart", "the desktop starts what it names at login", None),
    (".config/fish", "fish runs its scripts at every start", None),
    (".local/bin", "it is on PATH: its programs run in place of the real ones", None),
    (
        ".local/lib",
        "Python imports the user site-packages in it on every start",
        Some("install into the worktree or {tmp} (pip install --target, a venv)"),
    ),
    (
        ".cargo",
        "its bin/ is on PATH, and the next cargo command reads its config.toml and builds the registry sources in it",
        Some("CARGO_HOME = \"{tmp}/cargo\" (or a dir of the agent's own under {state}) in the policy's [env]"),
    ),
    (
        ".rustup",
        "it holds the toolchains: every rustc and cargo the user runs",
        Some("RUSTUP_HOME pointing at a dir of the run's own"),
    ),
    (
        ".npm",
        "the next npm install unpacks packages from its cache and runs their install scripts",
        Some("npm_config_cache = \"{tmp}/npm\" in the policy's [env]"),
    ),
    (
        ".cache/pip",
        "the next pip install installs the wheels in its cache",
        Some("PIP_CACHE_DIR = \"{tmp}/pip\" in the policy's [env], or PIP_NO_CACHE_DIR=1"),
    ),
    (".pyenv", "its shims and interpreters run for every python and pip", None),
    (".nvm", "its node and npm run for every node command", None),
    (".volta", "its shims run for every node command", None),
    (".bun", "its bin/ is on PATH", None),
    (".deno", "its bin/ is on PATH", None),
    (".rbenv", "its shims run for every ruby command", None),
    (".asdf", "its shims run for every command it manages", None),
    ("go/bin", "it is on PATH", None),
    (".gradle", "every Gradle build runs its init.d scripts", None),
    (".vscode-server", "the editor runs the extensions in it", None),
    (".vscode", "the editor runs the extensions in it", None),
];

/// The system's own: (path, what runs it).
const SYSTEM: &[(&str, &str)] = &[
    ("/usr", "the system's programs and libraries"),
    ("/bin", "the system's programs"),
    ("/sbin", "the system's programs"),
    ("/lib", "the system's libraries"),
    ("/lib32", "the system's libraries"),
    ("/lib64", "the system's libraries and dynamic loader"),
    ("/libx32", "the system's libraries"),
    ("/boot", "the kernel and boot loader"),
    (
        "/etc",
        "the system's configuration: login scripts, cron, services, the dynamic loader's preloads",
    ),
    ("/var/spool/cron", "cron runs the crontabs in it"),
];

/// Every such place for a user whose home is `home` (an empty `home`
/// gives the system's places only).
#[must_use]
pub fn places(home: &Path) -> Vec<RunsLater> {
    let mut all: Vec<RunsLater> = SYSTEM
        .iter()
        .map(|&(p, runner)| RunsLater {
            path: PathBuf::from(p),
            runner,
            instead: None,
        })
        .collect();
    if !home.as_os_str().is_empty() {
        all.extend(HOME.iter().map(|&(p, runner, instead)| RunsLater {
            path: home.join(p),
            runner,
            instead,
        }));
    }
    all
}

/// The first place that a command able to write beneath `dir` could change:
/// `dir` is such a place, lies inside one, or contains one. Paths are
/// compared by components, as given (callers pass canonical paths).
#[must_use]
pub fn overlapping(dir: &Path, home: &Path) -> Option<RunsLater> {
    places(home)
        .into_iter()
        .find(|p| dir.starts_with(&p.path) || p.path.starts_with(dir))
}

/// A writable root of a policy that reaches such a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// The writable root (canonical where it exists).
    pub dir: PathBuf,
    pub place: RunsLater,
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is writable and reaches {}; what a command leaves there runs later, outside the \
             sandbox",
            self.dir.display(),
            self.place
        )
    }
}

/// The policy's writable roots (the worktree and `fs.writable`) that reach
/// such a place. Entries under the run's temp dir are judged by the runs
/// dir they live in (`<state>/runs`), which holds every run's temp dir.
#[must_use]
pub fn reached_by(policy: &super::Policy) -> Vec<Reach> {
    std::iter::once(policy.worktree.clone())
        .chain(policy.fs.writable.iter().map(|w| match w {
            super::PathSpec::Absolute(p) => p.clone(),
            super::PathSpec::RunTmp(_) => policy.runs_dir(),
        }))
        .filter_map(|dir| {
            let dir = dir.canonicalize().unwrap_or(dir);
            overlapping(&dir, &policy.home).map(|place| Reach { dir, place })
        })
        .collect()
}

impl std::fmt::Display for RunsLater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.runner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(dir: &str) -> Option<String> {
        overlapping(Path::new(dir), Path::new("/home/u")).map(|p| p.path.display().to_string())
    }

    #[test]
    fn places_themselves_what_is_inside_and_what_contains_them_overlap() {
        for (dir, place) in [
            ("/home/u/.cargo", "/home/u/.cargo"),
            ("/home/u/.cargo/registry", "/home/u/.cargo"),
            ("/home/u/.cargo/bin/cargo", "/home/u/.cargo"),
            ("/home/u/.config", "/home/u/.config/git"),
            ("/home/u/.config/git/config", "/home/u/.config/git"),
            ("/home/u/.local", "/home/u/.local/bin"),
            ("/home/u/.cache", "/home/u/.cache/pip"),
            ("/home/u", "/home/u/.bashrc"),
            ("/home", "/home/u/.bashrc"),
            ("/", "/usr"),
            ("/usr/local/bin", "/usr"),
            ("/etc/profile.d", "/etc"),
            ("/var", "/var/spool/cron"),
            ("/var/spool/cron/crontabs", "/var/spool/cron"),
        ] {
            assert_eq!(hit(dir).as_deref(), Some(place), "{dir}");
        }
    }

    #[test]
    fn unrelated_dirs_and_near_names_do_not() {
        for dir in [
            "/home/u/work/repo",
            "/home/u/.cargo-other",
            "/home/u/.cargox",
            "/home/u/.config/myapp",
            "/home/u/.cache/other",
            "/home/u/.local/state/lockrun",
            "/home/u/.bashrc.d.bak/x",
            "/tmp",
            "/var/lib/lockrun/agents/claude-code",
            "/var/tmp",
            "/usrx",
            "/home/v/.cargo",
            "/srv/data",
        ] {
            assert_eq!(hit(dir), None, "{dir}");
        }
    }

    #[test]
    fn without_a_home_only_the_system_counts() {
        assert!(overlapping(Path::new("/home/u/.cargo"), Path::new("")).is_none());
        assert_eq!(
            overlapping(Path::new("/usr/local"), Path::new("")).map(|p| p.path),
            Some(PathBuf::from("/usr"))
        );
    }

    #[test]
    fn every_place_is_absolute_and_says_what_runs_it() {
        for p in places(Path::new("/home/u")) {
            assert!(p.path.is_absolute(), "{p}");
            assert!(!p.runner.is_empty(), "{p}");
        }
    }
}
