//! How the policy's paths meet, judged once when it loads.
//!
//! Landlock only grants, and a writable root is granted whole unless a
//! denied path lies beneath it. So:
//! - a denied path that **is** a writable root (the worktree, `{tmp}`, a
//!   writable path; written alike or meeting through symlinks) cannot be
//!   denied: it would stay readable while `policy show` lists it as
//!   denied. Refused ([`refuse_denied_writable`]), naming both entries.
//! - a denied dir that **holds** a writable root is denied but for that
//!   root, which is granted whole (the more specific grant wins, as it does
//!   for the run's `{tmp}` and the agents' dirs in the denied state dir).
//!   Kept, and said beside the denied path ([`open_beneath`]).
//! - a denied path **inside** a writable root narrows that root
//!   ([`crate::fs::Narrowed`]), as before.
//!
//! And the state dir, denied to every run, must not be nor hold what every
//! command reads: `/`, the system's programs, libraries and configuration,
//! the home, a directory on `PATH`, the command itself
//! ([`refuse_state_dir`]). A run would otherwise fail obscurely
//! (`126 sh: Permission denied`). What lies in a writable root stays open,
//! and is fine: a state dir may hold the worktree.
//!
//! Paths are compared canonical, as the Landlock walk resolves them: through
//! symlinks, and a path that does not exist yet through its deepest
//! existing ancestor.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

use super::{EnvTemplate, PathSpec, Policy, PolicyError};

/// Where an entry of the policy comes from, as a message names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag (`--deny-read`, `--allow-write`, `--state-dir`).
    Flag(&'static str),
    /// A key of a policy file.
    Key { key: &'static str, file: String },
    /// The worktree (`--worktree`, or the current directory).
    Worktree,
    /// The run's temp dir, writable in every run.
    RunTmp,
    /// A secret of the floor every run is denied ([`Policy::secret_floor`]).
    Secret,
    /// What lockrun takes when nothing names it (the state dir).
    Default,
}

/// A path of the policy, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub origin: Origin,
    pub path: PathSpec,
}

impl Entry {
    #[must_use]
    pub fn new(origin: Origin, path: PathSpec) -> Self {
        Self { origin, path }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.path;
        match &self.origin {
            Origin::Flag(flag) => write!(f, "{flag} {path}"),
            Origin::Key { key, file } => write!(f, "{key} {path} (in {file})"),
            Origin::Worktree => write!(f, "the worktree {path}"),
            Origin::RunTmp => write!(f, "{path} (the run's temp dir)"),
            Origin::Secret => write!(f, "the secret {path} (denied to every run)"),
            Origin::Default => write!(f, "{path} (lockrun's default)"),
        }
    }
}

/// A denied path that is also a writable root: it cannot be denied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DeniedWritable {
    pub denied: Entry,
    pub writable: Entry,
    /// The path both are, where it is not what either says.
    pub through_symlinks: Option<PathBuf>,
}

impl fmt::Display for DeniedWritable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} and {} are the same path", self.denied, self.writable)?;
        if let Some(c) = &self.through_symlinks {
            write!(f, " ({}, through symlinks)", c.display())?;
        }
        let fix = match (&self.denied.origin, &self.writable.origin) {
            (Origin::Secret, Origin::Worktree) => "choose a worktree elsewhere",
            (Origin::Secret, _) => "make a path beside it writable instead",
            (_, Origin::Worktree) => {
                "deny paths inside the worktree instead, or choose another worktree"
            }
            (_, Origin::RunTmp) => "deny paths inside {tmp} instead",
            _ => "drop one of the two, or deny paths inside it instead",
        };
        write!(
            f,
            ": a writable path stays readable, so it cannot be denied; {fix}"
        )
    }
}

/// Refuse the first denied entry that is one of the writable ones (which
/// name the worktree and `{tmp}` too). Entries of the run's temp dir meet
/// only each other: an absolute path is never a run's temp dir of its own.
pub fn refuse_denied_writable(
    denied: &[Entry],
    writable: &[Entry],
) -> Result<(), Box<DeniedWritable>> {
    let writable: Vec<(&Entry, PathSpec)> = writable
        .iter()
        .map(|w| (w, canonical_spec(&w.path)))
        .collect();
    for d in denied {
        let cd = canonical_spec(&d.path);
        for (w, cw) in &writable {
            if cd == *cw {
                let through_symlinks = match &cd {
                    PathSpec::Absolute(c) if cd != d.path || *cw != w.path => Some(c.clone()),
                    _ => None,
                };
                return Err(Box::new(DeniedWritable {
                    denied: d.clone(),
                    writable: (*w).clone(),
                    through_symlinks,
                }));
            }
        }
    }
    Ok(())
}

/// The writable roots strictly beneath the denied `denied`, as `policy show`
/// writes them: granted whole, they stay readable and writable although
/// they lie in a denied dir. `{tmp}` is among them when the run dirs lie
/// at or beneath `denied`.
#[must_use]
pub fn open_beneath(policy: &Policy, denied: &PathSpec) -> Vec<String> {
    let writable = std::iter::once(PathSpec::Absolute(policy.worktree.clone()))
        .chain(policy.fs.writable.iter().cloned());
    match canonical_spec(denied) {
        PathSpec::Absolute(d) => {
            let mut open: Vec<String> = writable
                .filter(|w| match canonical_spec(w) {
                    PathSpec::Absolute(w) => w != d && w.starts_with(&d),
                    PathSpec::RunTmp(_) => false,
                })
                .map(|w| w.to_string())
                .collect();
            if canonical(&policy.runs_dir()).starts_with(&d) {
                open.push(PathSpec::RunTmp(PathBuf::new()).to_string());
            }
            open
        }
        PathSpec::RunTmp(d) => writable
            .filter(|w| matches!(w, PathSpec::RunTmp(w) if *w != d && w.starts_with(&d)))
            .map(|w| w.to_string())
            .collect(),
    }
}

/// Refuse a writable root that is the state dir or lies in its run dirs. A
/// writable root beneath a denied path is granted whole unless a denied
/// path lies beneath it (the more specific grant wins: `{state}/agents/<name>`),
/// so one in `runs/` would open another run's temp dir to this run; the
/// state dir itself would be split around `runs/`, a worktree in which
/// nothing could be created. An ancestor of the state dir is split around
/// it, and is fine.
pub fn outside_run_dirs(
    worktree: &Path,
    writable: &[PathSpec],
    state: &Path,
) -> Result<(), PolicyError> {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let state = canon(state);
    let runs = state.join("runs");
    let roots = std::iter::once(("worktree", worktree.to_path_buf())).chain(
        writable.iter().filter_map(|w| match w {
            PathSpec::Absolute(p) => Some(("writable path", canon(p))),
            PathSpec::RunTmp(_) => None,
        }),
    );
    for (what, path) in roots {
        let how = if path == state {
            "is lockrun's state dir"
        } else if path.starts_with(&runs) {
            "lies in the run dirs of lockrun's state dir"
        } else {
            continue;
        };
        return Err(PolicyError::InStateDir {
            what,
            path,
            how,
            state,
        });
    }
    Ok(())
}

/// What every command reads, which a state dir must neither be nor hold.
const EVERY_COMMAND_READS: &[(&str, &str)] = &[
    ("/usr", "the system's programs and libraries"),
    ("/bin", "the system's programs"),
    ("/sbin", "the system's programs"),
    ("/lib", "the system's libraries"),
    ("/lib32", "the system's libraries"),
    ("/lib64", "the system's libraries and dynamic loader"),
    ("/libx32", "the system's libraries"),
    ("/etc", "the system's configuration"),
    ("/dev", "the devices a shell opens"),
];

/// What a state dir holds that a run needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Needed {
    /// A place of the system's ([`EVERY_COMMAND_READS`]).
    System { path: PathBuf, what: &'static str },
    /// The home, whose tools and configuration commands read.
    Home(PathBuf),
    /// A directory on the command's `PATH`.
    OnPath(PathBuf),
    /// The command itself.
    Command(PathBuf),
}

impl fmt::Display for Needed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System { path, what } => {
                write!(f, "{} ({what}), which every command reads", path.display())
            }
            Self::Home(p) => write!(
                f,
                "{}, the home, whose tools and configuration commands read",
                p.display()
            ),
            Self::OnPath(p) => write!(f, "{}, a directory on PATH", p.display()),
            Self::Command(p) => write!(f, "the command {}", p.display()),
        }
    }
}

/// A state dir that is or holds what a run needs: denied to the run, it
/// would make the run fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct StateDirHolds {
    pub state: Entry,
    /// What the state dir is, where it is not what it says.
    pub through_symlinks: Option<PathBuf>,
    pub needed: Needed,
    /// The state dir to suggest instead.
    pub default: PathBuf,
}

impl fmt::Display for StateDirHolds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.state)?;
        if let Some(c) = &self.through_symlinks {
            write!(f, " ({}, through symlinks)", c.display())?;
        }
        write!(
            f,
            ": the state dir is denied to every run, and it holds {}; choose a dir of lockrun's own, such as {}",
            self.needed,
            self.default.display()
        )
    }
}

/// Refuse a state dir (`state`) that is or holds what every command reads,
/// the home, a directory on the command's `PATH` (`env`'s, else the
/// caller's) or, for a run, the `program` it starts; unless that lies in
/// one of the `writable` roots. `default` is what the refusal suggests.
pub fn refuse_state_dir(
    state: &Entry,
    home: &Path,
    program: Option<&OsStr>,
    env: &BTreeMap<String, EnvTemplate>,
    writable: &[Entry],
    default: &Path,
) -> Result<(), Box<StateDirHolds>> {
    let path_var = command_path(env);
    let holding = Holding::new(state, writable, default);
    refuse_state_dir_holding(&holding, home, path_var.as_deref())?;
    match program {
        Some(program) => refuse_state_dir_holding_command(&holding, program, path_var.as_deref()),
        None => Ok(()),
    }
}

/// The `PATH` the command gets: the policy's `[env]` one (without what
/// lies in `{tmp}`, the run's own), else the caller's.
fn command_path(env: &BTreeMap<String, EnvTemplate>) -> Option<OsString> {
    match env.get("PATH") {
        Some(t) => Some(
            t.0.split(':')
                .filter(|d| !d.contains("{tmp}"))
                .collect::<Vec<_>>()
                .join(":")
                .into(),
        ),
        None => std::env::var_os("PATH"),
    }
}

/// Refuse the state dir `holding` checks if it is or holds what every
/// command reads, the home, or a directory of `path_var` (the command's
/// `PATH`), unless that lies in one of its writable roots (granted whole,
/// it stays open).
fn refuse_state_dir_holding(
    holding: &Holding<'_>,
    home: &Path,
    path_var: Option<&OsStr>,
) -> Result<(), Box<StateDirHolds>> {
    let needed = EVERY_COMMAND_READS
        .iter()
        .map(|&(p, what)| Needed::System {
            path: PathBuf::from(p),
            what,
        })
        .chain(std::iter::once(Needed::Home(home.to_path_buf())))
        .chain(
            std::env::split_paths(path_var.unwrap_or_default())
                .filter(|d| d.is_absolute())
                .map(Needed::OnPath),
        );
    for n in needed {
        holding.refuse(n)?;
    }
    Ok(())
}

/// Refuse a state dir that holds the command a run is to start, found as
/// the run finds it: `program` itself when it has a `/`, else the first
/// executable regular file of that name in `path_var`'s directories.
fn refuse_state_dir_holding_command(
    holding: &Holding<'_>,
    program: &OsStr,
    path_var: Option<&OsStr>,
) -> Result<(), Box<StateDirHolds>> {
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.as_bytes().contains(&b'/') {
        Some(PathBuf::from(program))
    } else {
        // Without a PATH, the run searches glibc's default (`sys::spawn`).
        std::env::split_paths(path_var.unwrap_or(OsStr::new("/bin:/usr/bin")))
            .map(|d| d.join(program))
            .find(|p| executable(p))
    };
    match found.filter(|p| executable(p)) {
        Some(command) => holding.refuse(Needed::Command(command)),
        None => Ok(()),
    }
}

/// A state dir checked against what runs need, its path resolved once.
struct Holding<'a> {
    state: &'a Entry,
    /// `state`'s path through symlinks ([`canonical`]); `None` for one in
    /// `{tmp}`, which holds nothing of the machine's.
    canonical: Option<PathBuf>,
    writable: &'a [Entry],
    /// What a refusal suggests instead.
    default: &'a Path,
}

impl<'a> Holding<'a> {
    fn new(state: &'a Entry, writable: &'a [Entry], default: &'a Path) -> Self {
        let canonical = match &state.path {
            PathSpec::Absolute(p) => Some(canonical(p)),
            PathSpec::RunTmp(_) => None,
        };
        Self {
            state,
            canonical,
            writable,
            default,
        }
    }

    /// Refuse the state dir if it is or holds `needed`, which no writable
    /// root holds. What does not exist here is not needed.
    fn refuse(&self, needed: Needed) -> Result<(), Box<StateDirHolds>> {
        let (Some(cs), PathSpec::Absolute(path)) = (&self.canonical, &self.state.path) else {
            return Ok(());
        };
        let (Needed::System { path: at, .. }
        | Needed::Home(at)
        | Needed::OnPath(at)
        | Needed::Command(at)) = &needed;
        let Ok(at) = at.canonicalize() else {
            return Ok(());
        };
        if !at.starts_with(cs) {
            return Ok(());
        }
        let open = self.writable.iter().any(|w| match &w.path {
            PathSpec::Absolute(w) => at.starts_with(canonical(w)),
            PathSpec::RunTmp(_) => false,
        });
        if open {
            return Ok(());
        }
        Err(Box::new(StateDirHolds {
            state: self.state.clone(),
            through_symlinks: (cs != path).then(|| cs.clone()),
            needed,
            default: self.default.to_path_buf(),
        }))
    }
}

/// `spec` canonical: an absolute path through symlinks ([`canonical`]); a
/// path in `{tmp}` by its components (`{tmp}/a/` is `{tmp}/a`).
fn canonical_spec(spec: &PathSpec) -> PathSpec {
    match spec {
        PathSpec::Absolute(p) => PathSpec::Absolute(canonical(p)),
        PathSpec::RunTmp(r) => PathSpec::RunTmp(r.components().collect()),
    }
}

/// `path` canonical: what it resolves to through symlinks; a path that does
/// not exist, through its deepest existing ancestor (as the Landlock walk
/// resolves a denied path that is not there yet).
#[must_use]
pub fn canonical(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut at = path;
    loop {
        if let Ok(mut c) = at.canonicalize() {
            c.extend(missing.iter().rev());
            return c;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lockrun-overlap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }

    fn abs(origin: Origin, p: &Path) -> Entry {
        Entry::new(origin, PathSpec::Absolute(p.to_path_buf()))
    }

    fn tmp(origin: Origin, rel: &str) -> Entry {
        Entry::new(origin, PathSpec::RunTmp(PathBuf::from(rel)))
    }

    #[test]
    fn a_state_dir_may_not_hold_what_commands_read_but_may_hold_a_writable_dir() {
        let d = scratch("state-dir");
        let (home, tools, wt) = (d.join("home"), d.join("tools"), d.join("tools/wt"));
        for p in [&home, &tools.join("bin"), &wt.join("bin")] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::os::unix::fs::symlink("/", d.join("root")).unwrap();
        let path_var = std::env::join_paths([tools.join("bin"), wt.join("bin")]).unwrap();
        let writable = [abs(Origin::Worktree, &wt)];
        let held = |state: &Path| {
            let state = abs(Origin::Flag("--state-dir"), state);
            let holding = Holding::new(&state, &writable, Path::new("/var/lib/lockrun"));
            refuse_state_dir_holding(&holding, &home, Some(&path_var)).err()
        };
        let e = held(Path::new("/")).unwrap();
        assert_eq!(
            e.to_string(),
            "--state-dir /: the state dir is denied to every run, and it holds /usr (the system's \
             programs and libraries), which every command reads; choose a dir of lockrun's own, \
             such as /var/lib/lockrun"
        );
        let e = held(&d.join("root")).unwrap();
        assert_eq!(e.through_symlinks, Some(PathBuf::from("/")));
        assert!(matches!(
            held(Path::new("/etc")).unwrap().needed,
            Needed::System { .. }
        ));
        assert_eq!(held(&d).unwrap().needed, Needed::Home(home.clone()));
        assert_eq!(
            held(&tools).unwrap().needed,
            Needed::OnPath(tools.join("bin"))
        );
        // A PATH dir in the worktree stays open; so do dirs beside the needed.
        assert_eq!(held(&wt), None);
        assert_eq!(held(&d.join("state")), None);
        assert_eq!(held(Path::new("/var/lib/lockrun")), None);
        assert_eq!(held(Path::new("/usr/local/lib/lockrun")), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_path_is_canonical_through_its_deepest_existing_ancestor() {
        let d = scratch("canonical");
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        assert_eq!(canonical(&d.join("link/absent/x")), d.join("real/absent/x"));
        assert_eq!(canonical(&d.join("link")), d.join("real"));
        assert_eq!(canonical(Path::new("/")), PathBuf::from("/"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_denied_path_that_is_writable_is_refused_and_one_inside_or_around_is_not() {
        let d = scratch("denied-writable");
        let wt = d.join("wt");
        std::fs::create_dir(&wt).unwrap();
        std::os::unix::fs::symlink(&wt, d.join("link")).unwrap();
        let writable = [
            abs(Origin::Worktree, &wt),
            tmp(Origin::RunTmp, ""),
            tmp(
                Origin::Key {
                    key: "filesystem.writable",
                    file: "p.toml".into(),
                },
                "cache",
            ),
        ];
        let refused = |denied: Entry| refuse_denied_writable(&[denied], &writable).err();
        let e = refused(abs(Origin::Flag("--deny-read"), &wt)).unwrap();
        assert_eq!(e.writable, writable[0]);
        assert_eq!(e.through_symlinks, None);
        let e = refused(abs(Origin::Flag("--deny-read"), &d.join("link"))).unwrap();
        assert_eq!(e.through_symlinks, Some(wt.clone()));
        assert_eq!(
            e.to_string(),
            format!(
                "--deny-read {0}/link and the worktree {0}/wt are the same path ({0}/wt, through symlinks): \
                 a writable path stays readable, so it cannot be denied; deny paths inside the worktree \
                 instead, or choose another worktree",
                d.display()
            )
        );
        let e = refused(tmp(Origin::Flag("x"), "")).unwrap();
        assert_eq!(e.writable, writable[1]);
        let e = refused(tmp(Origin::Flag("x"), "cache/")).unwrap();
        assert_eq!(e.writable, writable[2]);
        // Inside (narrowed) and around (the writable one stays open): kept.
        for kept in [
            abs(Origin::Flag("--deny-read"), &wt.join("inner")),
            abs(Origin::Flag("--deny-read"), &d),
            tmp(Origin::Flag("x"), "cache/inner"),
            tmp(Origin::Flag("x"), "other"),
        ] {
            assert_eq!(refused(kept.clone()), None, "{kept}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
