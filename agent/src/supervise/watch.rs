//! `inotify_add_watch`, performed for the command: refused on a denied path.
//!
//! Landlock does not check a watch (it has no hook on `path_notify`), and a
//! watch on a directory reports the name of every entry made, opened,
//! changed or removed in it: without this, a run could learn the names of
//! the files that appear in a denied directory (another run's temp dir, the
//! caller's `~/.ssh`) as they appear, which its listing refuses.
//!
//! The path is read once and resolved as the kernel would for the task
//! ([`super::meta::locate`]); a target at or beneath a denied path gets
//! `EACCES`, as Landlock answers a read there, and is recorded as a refused
//! read. Any other gets its watch from the supervisor, on the task's own
//! inotify instance (taken with `pidfd_getfd`: the same open file, so the
//! watch descriptor is the task's), through `/proc/self/fd/N` of the object
//! it resolved, with its effective capabilities dropped: the kernel's own
//! checks (read permission on the object, the watch limit) still apply.
//! `tail -f`, file watchers and test runners' watch modes keep working.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;

use super::meta::{self, Fail, Target};
use super::resolve::Object;
use super::{Reply, Shared, Task};
use crate::audit::{Event, FsEvent};
use crate::sys::supervisor_calls;

/// `IN_DONT_FOLLOW`, `IN_ONLYDIR` (inotify.h).
const IN_DONT_FOLLOW: u32 = 0x0200_0000;
const IN_ONLYDIR: u32 = 0x0100_0000;

/// Answer a notified `inotify_add_watch(fd, path, mask)`.
pub fn handle(task: &Task<'_>, s: &Shared) -> Reply {
    let [fd, path, mask, ..] = task.args();
    let (fd, mask) = (fd as i32, mask as u32);
    match add_watch(task, s, fd, path, mask) {
        Ok(wd) => Reply::Value(i64::from(wd)),
        Err(Fail::Errno(e)) => Reply::Errno(e),
        // `locate` refuses only what it cannot place (a descriptor's
        // object with no name to judge); no chmod is made here (`SetId`).
        Err(Fail::Outside(what) | Fail::SetId(what)) => {
            task.s.audit.record(Event::Filesystem(FsEvent {
                pid: task.tgid(),
                comm: task.comm(),
                path: Some(what.clone()),
                access: vec!["fs.read_dir".to_owned()],
                raw: format!(
                    "seccomp supervisor: inotify_add_watch on {what}, at or beneath a denied \
                     path or not placeable: refused (EACCES)"
                ),
                other_name_of: None,
                errno: None,
            }));
            Reply::Errno(libc::EACCES)
        }
    }
}

fn add_watch(task: &Task<'_>, s: &Shared, fd: i32, path: u64, mask: u32) -> Result<i32, Fail> {
    let inotify = task.getfd(fd)?;
    let target = Target::Path {
        dirfd: libc::AT_FDCWD,
        path,
        follow: mask & IN_DONT_FOLLOW == 0,
        empty_ok: false,
    };
    let (obj, _, _) = meta::locate(task, target)?;
    if mask & IN_ONLYDIR != 0 && !matches!(obj, Object::Dir(_)) {
        return Err(Fail::Errno(libc::ENOTDIR));
    }
    if s.fs_roots.denied(&obj)? {
        return Err(Fail::Outside(meta::fd_target(obj.fd())));
    }
    let _unprivileged = supervisor_calls::EffectiveCapsDropped::new().map_err(|_| libc::EPERM)?;
    // The magic link lands on the object resolved, a symlink itself when
    // not followed: the flag would watch the link in /proc instead.
    supervisor_calls::inotify_add_watch(inotify.as_fd(), &obj.proc_path(), mask & !IN_DONT_FOLLOW)
        .map_err(|e| Fail::Errno(e.raw_os_error().unwrap_or(libc::EIO)))
}
