//! Other names of denied files: hard links outside the denied paths, kept
//! unreadable to the run.
//!
//! Landlock decides by path. A file beneath a denied path that also has a
//! name elsewhere (a hard link the machine's user made: a backup tree of
//! `cp -al`, a key linked into a project) is read by that name as if it
//! were any other file. The command cannot make such a name itself:
//! Landlock refuses a link that would give a file more rights than it has
//! where it is. So each run walks its denied paths for files of more than
//! one link ([`mark`]) and marks each of their inodes in a fanotify group of
//! its own, for permission events (`FAN_OPEN_PERM`, `FAN_OPEN_EXEC_PERM`):
//! every open of the inode, by any name and by any process, then waits for
//! lockrun's answer. A thread of lockrun answers, from the first mark on:
//! until the run is armed ([`Marked::arm`], just before the command starts)
//! every open is let through, lockrun's own among them; then
//! - a process of the run ([`in_run`]) is refused (`EPERM`), and the refusal
//!   is recorded as a filesystem one, naming the name it used and the denied
//!   name it is another of;
//! - unless that name lies beneath one of the run's writable roots: those
//!   are the run's own files (a worktree cloned by hard links from a denied
//!   repository reads its own objects);
//! - every other process is let through.
//!
//! Cost and limits:
//! - A group is made only when such a file exists: most runs walk a few
//!   entries and make nothing.
//! - The walk visits at most [`ENTRY_BUDGET`] entries in all; a denied tree
//!   larger than that is walked that far, and the run says so (a warning,
//!   and a notice in its audit log).
//! - Only the denied paths that exist are walked, as the Landlock walk found
//!   them listing their parents ([`crate::fs::FsSandbox::denied_found`]).
//! - The state dir is not walked: what is in it was made by lockrun and its
//!   runs, and a run cannot give a file a name outside its writable roots.
//! - A link made after the walk, to a file that had one name then, is not
//!   guarded; nor is a bind mount that shows a denied dir elsewhere (that
//!   is another path to the same name, not another name).
//! - While lockrun does not answer (stopped by a signal), a process outside
//!   opening a guarded file waits. Only files of a denied path that have
//!   other names are guarded.
//! - Needs `CAP_SYS_ADMIN` and a kernel with
//!   `CONFIG_FANOTIFY_ACCESS_PERMISSIONS`; without them, a run whose denied
//!   paths hold such a file is refused (it would be readable).
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use nix::sys::fanotify::{
    EventFFlags, Fanotify, FanotifyEvent, FanotifyResponse, InitFlags, MarkFlags, MaskFlags,
    Response,
};

use crate::audit::{AuditLog, Event, FsEvent};

/// Entries the walk of a run's denied paths visits at most, in all: each
/// costs a share of a `getdents` and, for a non-directory, a `statx`, on
/// every run's start.
/// The secrets of the floor hold a few dozen on most machines.
pub const ENTRY_BUDGET: usize = 1024;

/// A file beneath a denied path with more than one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    /// Its name beneath the denied path.
    pub name: PathBuf,
    pub dev: u64,
    pub ino: u64,
    /// Its number of names.
    pub links: u64,
}

/// Why the other names of a denied file cannot be guarded: the run is
/// refused, since the file would be readable by them.
#[derive(Debug, thiserror::Error)]
pub enum LinksError {
    #[error(
        "{} has {} names, and another name, outside the denied paths, is not refused by Landlock; \
         guarding it needs fanotify permission events: fanotify_init: {source} (lockrun needs \
         CAP_SYS_ADMIN and a kernel with CONFIG_FANOTIFY_ACCESS_PERMISSIONS; or remove the other \
         name: `find / -xdev -samefile {}`)",
        linked.name.display(), linked.links, linked.name.display()
    )]
    Unavailable { linked: Linked, source: nix::Error },
    #[error("starting the thread that guards the denied files' other names: {0}")]
    Thread(std::io::Error),
    #[error("marking {} (a denied file of {} names) in the run's fanotify group: {source}", linked.name.display(), linked.links)]
    Mark { linked: Linked, source: nix::Error },
}

/// The denied files with other names, marked; and where the walk stopped
/// short, if it did.
#[derive(Default)]
pub struct Marked {
    /// The group and the thread answering it, from the first mark on.
    guard: Option<Guard>,
    linked: Vec<Linked>,
    /// A dir the walk did not finish, and why.
    pub unwalked: Vec<(PathBuf, String)>,
}

impl Marked {
    /// The files marked.
    #[must_use]
    pub fn linked(&self) -> &[Linked] {
        &self.linked
    }

    /// Judge opens by `judge` from now on: called before the command
    /// starts. Until then every open is let through, as no process of the
    /// run exists yet (lockrun's own opens among them, which would
    /// otherwise wait for an answer that only this judge gives).
    pub fn arm(&self, judge: Judge) {
        if let Some(g) = &self.guard {
            let _ = g.shared.judge.set((judge, self.linked.clone()));
        }
    }

    /// Stop answering and close the group: its marks go, and an open still
    /// waiting (of a process outside: none of the run is left) is let through.
    pub fn finish(self) {
        drop(self);
    }
}

/// Walk `denied` (canonical) for files of more than one name and mark each
/// in a fanotify group made for the first. Not walked: a denied path at or
/// beneath `state_dir`, and any path of `skip` (the writable roots: a
/// writable dir beneath a denied one is the run's own). Symlinks are not
/// followed and not marked (`readlink` is no open).
pub fn mark(denied: &[PathBuf], state_dir: &Path, skip: &[PathBuf]) -> Result<Marked, LinksError> {
    mark_within(denied, state_dir, skip, ENTRY_BUDGET)
}

fn mark_within(
    denied: &[PathBuf],
    state_dir: &Path,
    skip: &[PathBuf],
    mut budget: usize,
) -> Result<Marked, LinksError> {
    let mut marked = Marked::default();
    let limit = budget;
    let roots: Vec<&PathBuf> = denied
        .iter()
        .filter(|d| !d.starts_with(state_dir) && !skip.contains(d))
        .collect();
    for (i, &root) in roots.iter().enumerate() {
        let Ok(meta) = std::fs::symlink_metadata(root) else {
            continue;
        };
        if !meta.is_dir() {
            consider(&mut marked, root, &meta)?;
            continue;
        }
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) => {
                    marked.unwalked.push((dir, format!("listing it: {e}")));
                    continue;
                }
            };
            for entry in entries {
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        marked
                            .unwalked
                            .push((dir.clone(), format!("listing it: {e}")));
                        break;
                    }
                };
                if budget == 0 {
                    // This root and every one after it: each is named, none
                    // is left out silently.
                    let why = format!("the walk's budget of {limit} entries was spent");
                    marked.unwalked.extend(
                        roots[i..]
                            .iter()
                            .filter(|r| r.symlink_metadata().is_ok())
                            .map(|r| ((*r).clone(), why.clone())),
                    );
                    return Ok(marked);
                }
                budget -= 1;
                let path = entry.path();
                if skip.contains(&path) {
                    continue;
                }
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(path),
                    Ok(t) if t.is_symlink() => {}
                    _ => {
                        if let Ok(meta) = entry.metadata() {
                            consider(&mut marked, &path, &meta)?;
                        }
                    }
                }
            }
        }
    }
    Ok(marked)
}

/// Mark `path` if it is a file of more than one name. Directories cannot
/// have one; symlinks are not opened.
fn consider(marked: &mut Marked, path: &Path, meta: &std::fs::Metadata) -> Result<(), LinksError> {
    let t = meta.file_type();
    if meta.nlink() < 2 || t.is_dir() || t.is_symlink() {
        return Ok(());
    }
    let linked = Linked {
        name: path.to_owned(),
        dev: meta.dev(),
        ino: meta.ino(),
        links: meta.nlink(),
    };
    let guard = if let Some(g) = &marked.guard {
        g
    } else {
        let group = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT
                | InitFlags::FAN_CLOEXEC
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_REPORT_TID,
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC,
        )
        .map_err(|source| LinksError::Unavailable {
            linked: linked.clone(),
            source,
        })?;
        // Answering before the first mark: an open of a marked file waits
        // for an answer, lockrun's own among them.
        marked
            .guard
            .insert(Guard::start(group).map_err(LinksError::Thread)?)
    };
    guard
        .shared
        .group
        .mark(
            MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_DONT_FOLLOW,
            MaskFlags::FAN_OPEN_PERM | MaskFlags::FAN_OPEN_EXEC_PERM,
            None,
            Some(path),
        )
        .map_err(|source| LinksError::Mark {
            linked: linked.clone(),
            source,
        })?;
    marked.linked.push(linked);
    Ok(())
}

/// Whether a task whose `/proc/<tid>/cgroup` is `cgroups` belongs to the
/// run whose cgroup `/proc` shows as `run`: in it, or beneath it. `None`
/// (the run's path is not known): every task does, so that nothing of the
/// run is let through.
#[must_use]
pub fn in_run(cgroups: &str, run: Option<&str>) -> bool {
    use crate::state::{membership, Membership};
    run.is_none_or(|run| membership(cgroups, run) != Membership::Outside)
}

/// What the guard judges a run's opens by.
pub struct Judge {
    /// The run's cgroup as `/proc/<pid>/cgroup` shows it.
    pub run_cgroup: Option<String>,
    /// The run's writable roots (canonical): a name beneath one is the run's own.
    pub writable: Vec<PathBuf>,
    pub audit: Arc<AuditLog>,
}

/// The verdict on one open of a guarded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A process outside the run.
    Outside,
    /// A process of the run, by a name beneath one of its writable roots.
    OwnName,
    /// A process of the run, by another name: refused (`EPERM`).
    Refused,
}

impl Judge {
    /// Judge the open of `name` by task `tid`, whose `/proc` cgroup text
    /// is `cgroups` (`None`: unreadable, judged as the run's).
    #[must_use]
    pub fn verdict(&self, cgroups: Option<&str>, name: Option<&Path>) -> Verdict {
        if cgroups.is_some_and(|c| !in_run(c, self.run_cgroup.as_deref())) {
            Verdict::Outside
        } else if name.is_some_and(|n| self.writable.iter().any(|w| n.starts_with(w))) {
            Verdict::OwnName
        } else {
            Verdict::Refused
        }
    }
}

/// The thread answering the marked files' permission events, from the
/// first mark until no process of the run is left.
struct Guard {
    shared: Arc<Shared>,
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    group: Fanotify,
    /// Set by [`Marked::arm`], with the files marked (for the records).
    judge: OnceLock<(Judge, Vec<Linked>)>,
}

impl Guard {
    fn start(group: Fanotify) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            group,
            judge: OnceLock::new(),
        });
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lockrun-links".into())
            .spawn(move || serve(&s, &r))?;
        Ok(Self {
            shared,
            stop: Some(w),
            thread: Some(thread),
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(s: &Shared, stop: &OwnedFd) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds = [
            PollFd::new(s.group.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => {
                tracing::warn!("the guard of denied files' other names stopped: poll: {e}");
                return;
            }
        }
        if fds[1].any().unwrap_or(true) {
            return;
        }
        match s.group.read_events() {
            Ok(events) => {
                for e in events {
                    answer(s, &e);
                }
            }
            Err(nix::Error::EAGAIN | nix::Error::EINTR) => {}
            // The kernel could not give lockrun the event's descriptor
            // (`EMFILE`: the proxy's tunnels may hold most of them): it
            // refused that open itself and took the event off the queue.
            // The next ones are answered as ever; stopping here would leave
            // every later open of a marked file, outside the run too,
            // waiting until the run's end.
            Err(e) => {
                tracing::warn!("an open of a denied file's other name was refused by the kernel, not judged: reading its event: {e}");
            }
        }
    }
}

fn answer(s: &Shared, e: &FanotifyEvent) {
    let Some(fd) = e.fd() else { return };
    let tid = e.pid();
    // Not armed: the command has not started, and every open is let through.
    let judged = s.judge.get().map(|(judge, linked)| {
        let cgroups = std::fs::read_to_string(format!("/proc/{tid}/cgroup")).ok();
        let name = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok();
        (
            judge.verdict(cgroups.as_deref(), name.as_deref()),
            judge,
            linked,
            name,
        )
    });
    let refused = judged
        .as_ref()
        .is_some_and(|(v, ..)| *v == Verdict::Refused);
    let response = if refused {
        Response::FAN_DENY
    } else {
        Response::FAN_ALLOW
    };
    if let Err(err) = s.group.write_response(FanotifyResponse::new(fd, response)) {
        tracing::warn!("answering an open of a denied file's other name: {err}");
    }
    if let Some((Verdict::Refused, judge, linked, name)) = judged {
        let denied = nix::sys::stat::fstat(fd.as_raw_fd()).ok().and_then(|m| {
            linked
                .iter()
                .find(|l| l.dev == m.st_dev && l.ino == m.st_ino)
        });
        judge.audit.record(Event::Filesystem(refusal(
            tid,
            e.mask(),
            name.as_deref(),
            denied,
        )));
    }
}

/// The record of a refused open of a denied file by another name.
fn refusal(tid: i32, mask: MaskFlags, name: Option<&Path>, denied: Option<&Linked>) -> FsEvent {
    let exec = mask.contains(MaskFlags::FAN_OPEN_EXEC_PERM);
    let shown = name.map(|n| n.to_string_lossy().into_owned());
    let of = denied.map_or_else(
        || "a denied file".to_owned(),
        |d| format!("the denied {} ({} names)", d.name.display(), d.links),
    );
    FsEvent {
        pid: u32::try_from(tid).unwrap_or(0),
        comm: std::fs::read_to_string(format!("/proc/{tid}/comm"))
            .map(|c| c.trim_end().to_owned())
            .unwrap_or_default(),
        path: shown.clone(),
        access: vec![if exec { "fs.execute" } else { "fs.read_file" }.to_owned()],
        raw: format!(
            "fanotify guard: {} of {}, another name of {of}: refused (EPERM)",
            if exec { "execute" } else { "open" },
            shown.as_deref().unwrap_or("(unnamed)")
        ),
        other_name_of: Some(denied.map_or_else(
            || "(a denied file)".to_owned(),
            |d| d.name.to_string_lossy().into_owned(),
        )),
        errno: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_of_the_run_in_its_cgroup_or_beneath() {
        let run = Some("/lockrun/b-1/r");
        assert!(in_run("1:name=systemd:/x\n0::/lockrun/b-1/r\n", run));
        assert!(in_run("0::/lockrun/b-1/r/watchdog\n", run));
        assert!(!in_run("0::/lockrun/b-1/r2\n", run));
        assert!(!in_run("0::/user.slice\n", run));
        assert!(!in_run("1:name=systemd:/lockrun/b-1/r\n", run));
        // Not known: judged as the run's.
        assert!(in_run("0::/user.slice\n", None));
    }

    fn judge() -> Judge {
        Judge {
            run_cgroup: Some("/lockrun/b/r".into()),
            writable: vec![PathBuf::from("/wt"), PathBuf::from("/state/runs/r/tmp")],
            audit: Arc::new(AuditLog::open(None).unwrap()),
        }
    }

    #[test]
    fn only_the_runs_opens_by_names_outside_its_writable_roots_are_refused() {
        let j = judge();
        let run = Some("0::/lockrun/b/r\n");
        assert_eq!(
            j.verdict(Some("0::/other\n"), Some(Path::new("/tmp/l"))),
            Verdict::Outside
        );
        assert_eq!(j.verdict(run, Some(Path::new("/tmp/l"))), Verdict::Refused);
        assert_eq!(
            j.verdict(run, Some(Path::new("/wt/.git/objects/ab/cd"))),
            Verdict::OwnName
        );
        assert_eq!(j.verdict(run, Some(Path::new("/wtx/l"))), Verdict::Refused);
        assert_eq!(j.verdict(run, None), Verdict::Refused);
        // A task whose cgroup cannot be read is judged as the run's.
        assert_eq!(j.verdict(None, Some(Path::new("/tmp/l"))), Verdict::Refused);
    }

    /// Needs root (`fanotify_init` of a content class: `CAP_SYS_ADMIN`).
    #[test]
    fn the_walk_marks_only_denied_files_of_several_names() {
        let scratch = crate::testing::Scratch::new("links");
        let root = scratch.path().to_path_buf();
        let (vault, state, own) = (
            root.join("vault"),
            root.join("state"),
            root.join("vault/own"),
        );
        for d in [vault.join("a/b"), state.clone(), own.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        let write = |p: &Path| std::fs::write(p, "x").unwrap();
        let link = |a: &Path, b: &Path| std::fs::hard_link(a, b).unwrap();
        // One name: nothing to guard.
        write(&vault.join("single"));
        // Two names, one outside: guarded, however deep.
        write(&vault.join("a/b/key"));
        link(&vault.join("a/b/key"), &root.join("outside"));
        // In the state dir and in a writable root beneath: not walked.
        write(&state.join("s"));
        link(&state.join("s"), &root.join("s2"));
        write(&own.join("o"));
        link(&own.join("o"), &root.join("o2"));
        // A symlink is not followed.
        std::os::unix::fs::symlink(root.join("outside"), vault.join("sym")).unwrap();
        let denied = [vault.clone(), state.clone(), root.join("absent")];
        let m = mark_within(&denied, &state, std::slice::from_ref(&own), 100).unwrap();
        let names: Vec<&Path> = m.linked().iter().map(|l| l.name.as_path()).collect();
        assert_eq!(names, [vault.join("a/b/key")]);
        assert_eq!(m.linked()[0].links, 2);
        assert!(m.unwalked.is_empty(), "{:?}", m.unwalked);
        // Before it is armed, every open is let through (lockrun's own
        // among them); once armed with this process's cgroup as the run's,
        // the other name is refused, and the name in a writable root read.
        let outside = root.join("outside");
        assert_eq!(std::fs::read(&outside).unwrap(), b"x");
        let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let armed = |writable: Vec<PathBuf>| Judge {
            run_cgroup: crate::state::unified(&mine).map(Into::into),
            writable,
            audit: Arc::new(AuditLog::open(None).unwrap()),
        };
        m.arm(armed(vec![]));
        let e = std::fs::read(&outside).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
        m.finish();
        let m = mark_within(&denied, &state, std::slice::from_ref(&own), 100).unwrap();
        m.arm(armed(vec![root.clone()]));
        assert_eq!(std::fs::read(&outside).unwrap(), b"x");
        m.finish();
        // None with several names: no group is made.
        let m = mark_within(&[vault.join("single")], &state, &[], 100).unwrap();
        assert!(m.guard.is_none() && m.linked().is_empty());
        // The budget spent: the walk names the root it stopped in and every
        // root after it (not an absent one).
        let later = root.join("later");
        std::fs::create_dir_all(&later).unwrap();
        let denied = [vault.clone(), root.join("absent"), later.clone()];
        let m = mark_within(&denied, &state, &[own], 2).unwrap();
        let unwalked: Vec<&Path> = m.unwalked.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(unwalked, [vault.as_path(), later.as_path()]);
        assert!(
            m.unwalked.iter().all(|(_, why)| why.contains("budget")),
            "{:?}",
            m.unwalked
        );
    }

    #[test]
    fn a_refusal_names_the_name_used_and_the_denied_one() {
        let d = Linked {
            name: PathBuf::from("/root/.ssh/id"),
            dev: 1,
            ino: 2,
            links: 2,
        };
        let r = refusal(
            0,
            MaskFlags::FAN_OPEN_PERM,
            Some(Path::new("/tmp/l")),
            Some(&d),
        );
        assert_eq!(r.path.as_deref(), Some("/tmp/l"));
        assert_eq!(r.access, ["fs.read_file"]);
        assert!(
            r.raw
                .contains("another name of the denied /root/.ssh/id (2 names)"),
            "{}",
            r.raw
        );
        let r = refusal(0, MaskFlags::FAN_OPEN_EXEC_PERM, None, None);
        assert_eq!(r.access, ["fs.execute"]);
    }
}
