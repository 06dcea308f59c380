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
//! Paths are compared canonical, as the Landlock walk resolves them: through
//! symlinks, and a path that does not exist yet through its deepest
//! existing ancestor.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{PathSpec, Policy, PolicyError};

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
pub fn refuse_denied_writable(denied: &[Entry], writable: &[Entry]) -> Result<(), DeniedWritable> {
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
                return Err(DeniedWritable {
                    denied: d.clone(),
                    writable: (*w).clone(),
                    through_symlinks,
                });
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
