//! A call of the run that a read-only mount refused (`EROFS`), as
//! lockrun's `sys_exit` recorder saw it (`crate::bpf::read_only`), as the
//! filesystem refusal Landlock would have logged had it been asked: the
//! kernel refuses a write, a create or a metadata change on a read-only
//! mount before any security hook, so neither Landlock's records nor
//! kernel audit's `EACCES` rules see it.
//!
//! - **The access** is derived from the call and its arguments by the same
//!   table as kernel audit's records (the parent module's, [`Call`]):
//!   `openat` with `O_WRONLY` of a file that is there, `fs.write_file`;
//!   with `O_CREAT` of one that is not, `fs.make_reg` in its directory;
//!   `mkdir`, `fs.make_dir` in its directory; `chmod`, `metadata.chmod`;
//!   ….
//! - **The path** is the name the call gave, as the recorder read it from
//!   the task's memory: absolute as given; a relative one joined with the
//!   process's working directory (`/proc/<pid>/cwd`) or found through the
//!   directory descriptor it named (`/proc/<pid>/fd/<n>`), while the
//!   process lives. Once it is gone a relative name is not made absolute
//!   (its directory is unknown, and a guess could name another file): the
//!   path is not named, and `raw` says which relative name it was. What
//!   was made or removed is named by its directory, as Landlock names it.
//!   A name the recorder cut ([`READ_ONLY_PATH_MAX`]) is not named either.
//!   A file an open or `truncate` reached through a symlink or
//!   `/proc/self/fd/<n>` is named by what it is, as Landlock names it,
//!   and the name given stays in `raw`.
//! - **A call on a descriptor** (`fchmod`, `fchown`, `fsetxattr`,
//!   `futimens`, i.e. `utimensat(fd, NULL, …)`) is named by the descriptor
//!   and what it is, `fd 3 (/path)`, as the supervisor names its own.
//! - **The error**, [`FsErrno::ReadOnly`], is kept with the event.

use std::fmt::Write as _;

use lockrun_common::READ_ONLY_PATH_MAX;

use super::super::super::{FsErrno, FsEvent};
use super::{judged, At, Call, Ctx, Item, Kind, Look, RENAME_NEW_FIRST};

/// A name a refused call gave, as the recorder read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// None in this place (the call names none, or a null pointer).
    Nothing,
    Path(String),
    /// Longer than the recorder carries: its first bytes.
    Cut(String),
    /// The task's memory could not be read there (`-errno`).
    Unreadable(i32),
}

impl Named {
    /// From what the recorder wrote: the bytes it read (`len`: what
    /// `bpf_probe_read_user_str` returned, its NUL included) of `buf`.
    #[must_use]
    pub fn from_record(len: i32, buf: &[u8]) -> Self {
        let Ok(n) = usize::try_from(len) else {
            return Self::Unreadable(len);
        };
        if n == 0 {
            return Self::Nothing;
        }
        let bytes = &buf[..n.min(buf.len())];
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
        if n >= READ_ONLY_PATH_MAX {
            Self::Cut(text)
        } else if text.is_empty() {
            // An empty name (`AT_EMPTY_PATH`): the descriptor's own file.
            Self::Nothing
        } else {
            Self::Path(text)
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            Self::Path(p) => Some(p),
            _ => None,
        }
    }
}

/// One call of a run that failed with `EROFS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOnlyCall {
    /// The thread that made it.
    pub pid: u32,
    /// Its process.
    pub tgid: u32,
    pub comm: String,
    /// The syscall number (this build's architecture).
    pub nr: i64,
    /// Its first four arguments.
    pub args: [u64; 4],
    /// Its first and second name (old and new of a link or rename).
    pub paths: [Named; 2],
}

/// The filesystem refusal `call` is (see the module's docs); `None` for a
/// call that asks rather than acts (`access`, `faccessat`).
#[must_use]
pub fn refusal(call: &ReadOnlyCall, look: &dyn Look) -> Option<FsEvent> {
    let kind = Call::of(call.nr);
    if kind == Call::Query {
        return None;
    }
    let arg = |i: usize| call.args.get(i).copied().unwrap_or(0);
    // The thread's view first (a thread may have a working directory or a
    // descriptor table of its own), then its process's.
    let pid = [call.pid, call.tgid]
        .into_iter()
        .find(|p| look.cwd(*p).is_some())
        .unwrap_or(call.tgid);
    let cwd = look.cwd(pid);
    let (path, access) = if let Some(fd) = on_fd(kind, &call.paths[0], &arg) {
        (
            Some(fd_named(look, pid, fd)),
            vec![on_fd_access(call.nr, kind, &arg)],
        )
    } else {
        let (owned, decided) = names(kind, call, cwd.as_deref(), look, pid, &arg);
        let items: Vec<Item<'_>> = owned
            .iter()
            .map(|(name, kind)| Item {
                name: name.as_deref(),
                kind: *kind,
                mode: None,
                dev_ino: None,
            })
            .collect();
        let ctx = Ctx {
            items: &items,
            cwd: cwd.as_deref(),
            pid,
            arg: &arg,
            look,
        };
        let (path, access) = judged(kind, &ctx, &[]);
        let file = items.first().is_some_and(|i| i.kind == Kind::Normal);
        let path = match path {
            Some(p) if file && follows_last(kind, &arg) => Some(through_links(look, pid, p)),
            other => other,
        };
        let access = if decided { access } else { Vec::new() };
        (path, access.into_iter().map(str::to_owned).collect())
    };
    let access = if access.is_empty() {
        vec![format!("syscall.{}", call.nr)]
    } else {
        access
    };
    Some(FsEvent {
        pid: call.tgid,
        comm: call.comm.clone(),
        raw: raw(call, path.is_none() && cwd.is_none()),
        path,
        access,
        other_name_of: None,
        errno: Some(FsErrno::ReadOnly),
    })
}

/// The descriptor a call acted on, where it acted on one: a call on a
/// descriptor, or a metadata change naming no path relative to its
/// directory descriptor (`utimensat(fd, NULL, …)`, an empty name).
fn on_fd(kind: Call, first: &Named, arg: &dyn Fn(usize) -> u64) -> Option<i32> {
    match kind {
        Call::OnFd { .. } => Some(arg(0) as i32),
        Call::Meta { dirfd: Some(i), .. } if *first == Named::Nothing => {
            Some(arg(i) as i32).filter(|fd| *fd != libc::AT_FDCWD)
        }
        _ => None,
    }
}

fn on_fd_access(nr: i64, kind: Call, arg: &dyn Fn(usize) -> u64) -> String {
    let cmd = u32::try_from(arg(1) & 0xffff_ffff).unwrap_or(u32::MAX);
    match kind {
        // A read-only mount refuses an inode-attribute ioctl (`chattr`):
        // metadata, as the supervisor names it, not a device's ioctl.
        Call::OnFd { .. }
            if nr == libc::SYS_ioctl && lockrun_seccomp::notify::NOTIFY_IOCTLS.contains(&cmd) =>
        {
            "metadata.ioctl".to_owned()
        }
        Call::OnFd { access } | Call::Meta { access, .. } => access.to_owned(),
        _ => String::new(),
    }
}

/// `fd <n> (<what it is>)`, or `fd <n>` once the process is gone.
fn fd_named(look: &dyn Look, pid: u32, fd: i32) -> String {
    match look.fd_path(pid, fd) {
        Some(p) => format!("fd {fd} ({p})"),
        None => format!("fd {fd}"),
    }
}

/// The call's names as the parent module's items take them (see [`Item`]):
/// the file it named, or the directory it made or removed a name in; a
/// rename's two directories in the order kernel audit records them. And
/// whether its access is known: an open with `O_CREAT` asked to make the
/// file or to write it, as it found it there or not, which is not known
/// once the process is gone (then named by the call's number, as kernel
/// audit's stand-in names one whose names it did not all read).
fn names(
    kind: Call,
    call: &ReadOnlyCall,
    cwd: Option<&str>,
    look: &dyn Look,
    pid: u32,
    arg: &dyn Fn(usize) -> u64,
) -> (Vec<(Option<String>, Kind)>, bool) {
    let [first, second] = &call.paths;
    let file = |n: &Named| (n.path().map(str::to_owned), Kind::Normal);
    let parent = |n: &Named, dirfd: Option<usize>| {
        let at_cwd = dirfd.is_none_or(|i| arg(i) as i32 == libc::AT_FDCWD);
        (
            n.path().and_then(|p| parent_name(p, at_cwd, cwd)),
            Kind::Parent,
        )
    };
    match kind {
        Call::Open { flags, dirfd } => {
            let flags = flags.of(arg);
            if flags & libc::O_CREAT as u64 == 0 {
                return (vec![file(first)], true);
            }
            match there(first, dirfd, cwd, look, pid, arg) {
                Some(true) => (vec![file(first)], true),
                // A file that is not there, made: its directory.
                Some(false) => (vec![parent(first, dirfd)], true),
                None => (vec![file(first)], false),
            }
        }
        Call::Make { dirfd, .. } | Call::Mknod { dirfd, .. } | Call::Remove { dirfd, .. } => {
            (vec![parent(first, dirfd)], true)
        }
        Call::Rename {
            old_dirfd,
            new_dirfd,
            ..
        } => {
            let (old, new) = (parent(first, old_dirfd), parent(second, new_dirfd));
            let both = if RENAME_NEW_FIRST {
                vec![new, old]
            } else {
                vec![old, new]
            };
            (both, true)
        }
        Call::Link { new_dirfd, .. } => (vec![file(first), parent(second, new_dirfd)], true),
        _ => (vec![file(first)], true),
    }
}

/// Whether `kind` (with arguments `arg`) acts on what its name's last
/// symlink leads to: `truncate`; an open without `O_NOFOLLOW`, unless it
/// makes the file only (`O_CREAT | O_EXCL`). Other calls are named as
/// given.
fn follows_last(kind: Call, arg: &dyn Fn(usize) -> u64) -> bool {
    match kind {
        Call::Truncate => true,
        Call::Open { flags, .. } => {
            let flags = flags.of(arg);
            let excl = (libc::O_CREAT | libc::O_EXCL) as u64;
            flags & libc::O_NOFOLLOW as u64 == 0 && flags & excl != excl
        }
        _ => false,
    }
}

/// The file the absolute name `name`, followed to its end, leads to, as
/// Landlock names what it refuses: `/proc/self/fd/<n>` (or
/// `thread-self`'s) by what the descriptor is, while the process is the
/// run's; a name outside the run's own ground resolved where lockrun is
/// (the run sees the same files there); else, or where it cannot be
/// resolved, as given. The given name stays in the event's `raw`.
fn through_links(look: &dyn Look, pid: u32, name: String) -> String {
    if let Some(fd) = crate::sys::proc_self_fd(name.as_bytes()) {
        return look.fd_path(pid, fd).unwrap_or(name);
    }
    if own_ground(&name) {
        return name;
    }
    look.found(&name, true)
        .map_or(name, |f| f.path.to_string_lossy().into_owned())
}

/// How kernel audit's `PATH` record names the directory of `path`: its
/// directory part, with the slash; for a last component alone, the
/// working directory (`at_cwd`), or any name without a trailing slash
/// (the directory is then the descriptor's).
fn parent_name(path: &str, at_cwd: bool, cwd: Option<&str>) -> Option<String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Some("/".to_owned());
    }
    match trimmed.rfind('/') {
        Some(i) => Some(trimmed[..=i].to_owned()),
        None if at_cwd => cwd.map(str::to_owned),
        None => Some(".".to_owned()),
    }
}

/// Whether the file `name` names (relative to the descriptor in argument
/// `dirfd`) is there, as process `pid` sees it; `None` when that cannot
/// be told (the process is gone, the name was not read).
fn there(
    name: &Named,
    dirfd: Option<usize>,
    cwd: Option<&str>,
    look: &dyn Look,
    pid: u32,
    arg: &dyn Fn(usize) -> u64,
) -> Option<bool> {
    let name = name.path()?;
    let fd = dirfd
        .map(|i| arg(i) as i32)
        .filter(|fd| *fd != libc::AT_FDCWD);
    let joined;
    let at = if name.starts_with('/') {
        At::Root(name)
    } else if let Some(fd) = fd {
        At::Fd(fd, name)
    } else {
        joined = format!("{}/{name}", cwd?);
        At::Root(&joined)
    };
    if look.dev_ino(pid, &at).is_some() {
        return Some(true);
    }
    // Not found: so only while the process is there to look through. Once
    // it is gone, an absolute name is looked up where lockrun is: the
    // run's mount namespace shows the same files but at its own
    // filesystems (`/proc`, `/dev`'s, the hidden and masked ones), none of
    // which a refused create of a run lands in elsewhere.
    if look.cwd(pid).is_some() {
        return Some(false);
    }
    match at {
        At::Root(path) if path.starts_with('/') && !own_ground(path) => {
            Some(look.found(path, false).is_some())
        }
        _ => None,
    }
}

/// Where the run's mount namespace shows other files than lockrun's: its
/// own `/proc` and `/dev`, and the machine's kernel filesystems under
/// `/sys`, which it hides.
fn own_ground(path: &str) -> bool {
    ["/proc", "/dev", "/sys"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// The recorder's account of the call, for what the event's fields leave
/// out: its number and arguments, the names read, and, where a relative
/// name could not be made absolute, that it was relative.
fn raw(call: &ReadOnlyCall, relative_unnamed: bool) -> String {
    let [a0, a1, a2, a3] = call.args;
    let mut s = format!(
        "lockrun's sys_exit recorder: syscall {} ({a0:#x}, {a1:#x}, {a2:#x}, {a3:#x}) of pid {} \
         (thread {}) failed with {}",
        call.nr,
        call.tgid,
        call.pid,
        FsErrno::ReadOnly
    );
    for (i, n) in call.paths.iter().enumerate() {
        let which = if i == 0 { "name" } else { "second name" };
        let _ = match n {
            Named::Nothing => Ok(()),
            Named::Path(p) => write!(s, "; {which} {p:?}"),
            Named::Cut(p) => write!(
                s,
                "; {which} longer than {} bytes, not named: {p:?}…",
                READ_ONLY_PATH_MAX - 1
            ),
            Named::Unreadable(e) => write!(
                s,
                "; {which} unreadable in the process's memory ({})",
                nix::Error::from_raw(-e)
            ),
        };
    }
    let relative = call
        .paths
        .iter()
        .filter_map(Named::path)
        .any(|p| !p.starts_with('/'));
    if relative_unnamed && relative {
        s.push_str(
            "; the name is relative, and the process had exited before lockrun could read its \
             working directory or descriptors: not named",
        );
    }
    s
}

#[cfg(test)]
mod tests;
