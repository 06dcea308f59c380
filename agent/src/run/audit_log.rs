//! Where a run's audit log may be: nowhere the run can write.
//!
//! lockrun writes the log as root, before the command starts and after it
//! ends. A log the run could write would let the run turn that against
//! the machine or against the log: replaced by a link, the next run's
//! lockrun creates or appends to whatever file it names; replaced by a
//! FIFO, the next run hangs; rewritten, it tells what the run chose. So a
//! log at or beneath any of the run's writable roots (the worktree, the
//! policy's writable paths, every run's temp dir under the state dir) is
//! refused before anything starts, its dir is opened as the very dir that
//! was judged (no link on the way, [`crate::sys::open_dir_without_links`]),
//! and the file itself as [`crate::audit::sink`] opens it. Each line is
//! sealed with the state dir's key ([`crate::audit::seal`]), which no run
//! can read, so a reader can tell the lines lockrun wrote from any others.

use std::ffi::OsString;
use std::os::fd::AsFd as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use crate::audit::seal::{KeyError, SealKey};
use crate::audit::sink::{LogFile, SinkError};
use crate::audit::AuditLog;
use crate::exit;
use crate::policy::{PathSpec, Policy};
use crate::sys::open_dir_without_links;

/// Why the run's log cannot be kept where it was asked for.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("--audit-log {0} names no file")]
    NoName(PathBuf),
    #[error("--audit-log {path}: its dir {dir}: {source}")]
    Dir {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the audit log {log} is in {root}, which the run may write: the run could replace it \
         (with a link to a file lockrun would then write as root, or a FIFO) or rewrite it; keep \
         the log where no run writes, e.g. beside the worktree"
    )]
    Writable { log: PathBuf, root: PathBuf },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("the state dir {path}: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the audit log's key, which seals each line: {0}")]
    Key(#[from] KeyError),
}

impl LogError {
    /// The exit status: a place or a file the caller named that cannot be
    /// the log is a usage error; a state dir or key lockrun cannot make is
    /// a setup error.
    #[must_use]
    pub fn exit(&self) -> i32 {
        match self {
            Self::StateDir { .. } | Self::Key(_) => exit::SETUP,
            _ => exit::USAGE,
        }
    }
}

/// The run's sealed log at `path`, judged and opened as the module says.
pub fn open(policy: &Policy, path: &Path, run_id: &str) -> Result<AuditLog, LogError> {
    let (dir, name, shown) = judge(policy, path)?;
    let state = &policy.run.state_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state)
        .map_err(|source| LogError::StateDir {
            path: state.clone(),
            source,
        })?;
    let key = SealKey::of_state_dir(state)?;
    let file = LogFile::open_in(dir.as_fd(), &name, &shown)?;
    Ok(AuditLog::sealed(file, key, run_id))
}

/// The log's dir, opened, the log's name in it, and its whole path; or why
/// it may not be there.
fn judge(
    policy: &Policy,
    path: &Path,
) -> Result<(std::os::fd::OwnedFd, OsString, PathBuf), LogError> {
    let name = match path.file_name() {
        Some(n) => n.to_os_string(),
        None => return Err(LogError::NoName(path.to_path_buf())),
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir_err = |dir: &Path, source| LogError::Dir {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        source,
    };
    let dir = parent.canonicalize().map_err(|e| dir_err(parent, e))?;
    let log = dir.join(&name);
    if let Some(root) = writable_roots(policy)
        .into_iter()
        .find(|root| log.starts_with(root))
    {
        return Err(LogError::Writable { log, root });
    }
    let fd = open_dir_without_links(&dir).map_err(|e| dir_err(&dir, e.into()))?;
    Ok((fd, name, log))
}

/// Every root a run of `policy` may write beneath, canonical where it
/// exists: the worktree, the writable paths, and the dir of every run's
/// temp dir (a path under `{tmp}` is under it).
fn writable_roots(policy: &Policy) -> Vec<PathBuf> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let mut roots = vec![canonical(&policy.worktree), canonical(&policy.runs_dir())];
    roots.extend(policy.fs.writable.iter().filter_map(|spec| match spec {
        PathSpec::Absolute(p) => Some(canonical(p)),
        PathSpec::RunTmp(_) => None,
    }));
    roots
}
