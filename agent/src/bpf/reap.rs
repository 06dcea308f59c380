//! Reaping what other lockrun builds left: their pins and parent cgroup once
//! none of their runs is left ([`reap_other_builds`]), and loads abandoned
//! half-way.

use std::path::Path;
use std::{fs, io};

use super::attach::{link_parent, names};
use super::shared::{build_id, is_build_name};
use super::{BpfError, BPFFS, SHARED_ROOT};
use crate::cgroup::CgroupError;
use crate::sys;

/// Remove `<hash>-loading-<pid>-<n>` directories whose loader is gone
/// (killed while loading the programs; a finished load renames its
/// directory).
pub(super) fn remove_abandoned_loads() {
    let root = Path::new(BPFFS).join(SHARED_ROOT);
    let Ok(entries) = fs::read_dir(&root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.rsplit_once("-loading-"))
            .and_then(|(_, load)| load.split('-').next()?.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// What `lockrun gc` did about another lockrun build's parent cgroup and
/// pinned programs ([`reap_other_builds`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherBuild {
    /// Its parent cgroup is removed, and its pinned programs, maps, rings
    /// and links with it: the kernel frees them.
    Reaped { id: String },
    /// Run cgroups are still in its parent (`rmdir`: `EBUSY`): nothing was
    /// touched.
    InUse { id: String },
    /// A run of it made the parent again and attached while gc reaped: its
    /// programs stay (put back where they were, when nothing took their
    /// place) and a later gc removes them.
    Deferred { id: String },
}

/// Under [`SHARED_ROOT`]: `<id>-reaping-<pid>`, a build's pins moved out of
/// its runs' way by a gc.
pub(super) const REAPING: &str = "-reaping-";

/// `lockrun gc`: remove every other build's parent cgroup and pinned
/// programs where none of its runs is left. Each build's programs pin
/// ~256 KiB of kernel memory per ring slot ever used, and a machine that
/// upgrades lockrun (or CI that builds each commit) makes a new build each
/// time.
///
/// Safe beside runs of that build, because a run makes its cgroup (and the
/// parent, when missing) before it opens the pins, and attaches by links
/// named after the parent's inode:
/// 1. `rmdir` the parent. It fails (`EBUSY`) while any run cgroup is in it:
///    then nothing is touched. A run starting now makes a new parent, with a
///    new inode, whose links are not among the old ones.
/// 2. Rename the pin directory to `<id>-reaping-<pid>`: from here on no run
///    can pin anything into it (runs pin into `<id>/`, and one that finds it
///    missing loads its own programs; one that opened it just before fails
///    closed: no program to attach, or no registration the attached
///    programs know).
/// 3. If a link in it is named after the parent as it is now — a run made
///    the parent again and attached between 1 and 2 — its hooks hang on that
///    pin: the directory goes back (`RENAME_NOREPLACE`) and stays. Otherwise
///    it is removed, and with the last reference to each program, map and
///    link, the kernel frees them.
///
/// Moved directories a gc left (killed between 2 and 3, or deferred by 3)
/// are judged by 3 again.
pub fn reap_other_builds() -> Result<Vec<OtherBuild>, BpfError> {
    use crate::cgroup::{build_parent_of, build_parents};
    let root = Path::new(BPFFS).join(SHARED_ROOT);
    let mut ids: std::collections::BTreeSet<String> =
        build_parents()?.into_iter().map(|(id, _)| id).collect();
    ids.extend(names(&root));
    ids.retain(|id| is_build_name(id));
    ids.remove(build_id());

    let mut out = Vec::new();
    let mut judged = Vec::new();
    for id in ids {
        let parent = build_parent_of(&id)?;
        match fs::remove_dir(&parent) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                out.push(OtherBuild::InUse { id });
                continue;
            }
            Err(source) => {
                return Err(CgroupError::Rmdir {
                    path: parent,
                    source,
                }
                .into())
            }
        }
        let moved = format!("{id}{REAPING}{}", std::process::id());
        match sys::rename_noreplace(&root.join(&id), &root.join(&moved)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                out.push(OtherBuild::Reaped { id });
                continue;
            }
            Err(source) => {
                return Err(BpfError::Unpin {
                    path: root.join(&id),
                    source,
                })
            }
        }
        judged.push(moved.clone());
        out.push(if remove_moved(&root, &moved, &id, &parent)? {
            OtherBuild::Reaped { id }
        } else {
            OtherBuild::Deferred { id }
        });
    }
    for name in names(&root) {
        let Some((id, _)) = name.split_once(REAPING) else {
            continue;
        };
        if judged.contains(&name) || !is_build_name(id) {
            continue;
        }
        remove_moved(&root, &name, id, &build_parent_of(id)?)?;
    }
    Ok(out)
}

/// Step 3 of [`reap_other_builds`]: remove the moved pins `root/moved` of
/// build `id`, unless one of its links is named after `parent` as it is now
/// (then put them back at `root/id` when that is free). Whether it removed them.
pub(super) fn remove_moved(
    root: &Path,
    moved: &str,
    id: &str,
    parent: &Path,
) -> Result<bool, BpfError> {
    use std::os::unix::fs::MetadataExt as _;
    let path = root.join(moved);
    if let Ok(md) = fs::metadata(parent) {
        if names(&path)
            .iter()
            .any(|n| link_parent(n) == Some(md.ino()))
        {
            let _ = sys::rename_noreplace(&root.join(moved), &root.join(id));
            return Ok(false);
        }
    }
    match fs::remove_dir_all(&path) {
        Ok(()) => Ok(true),
        // Another gc removed it first, by the same judgement.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(BpfError::Unpin { path, source }),
    }
}
