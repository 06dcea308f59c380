//! Attaching to the build's parent cgroup: its lock, the links pinned per
//! parent incarnation, and the programs the kernel has attached there.

use std::os::fd::AsFd;
use std::path::Path;
use std::{fs, io};

use super::load::programs_here;
use super::BpfError;
use crate::sys::bpf;

/// The programs attached to `cgroup` itself, by the name of the hook of
/// this build they would be ([`PROGRAMS`]), in the order they run: what the
/// kernel says, whatever any bpffs holds. For tests and diagnosis.
pub fn programs_attached_to(cgroup: &Path) -> Result<Vec<(&'static str, Vec<u32>)>, BpfError> {
    let cg = fs::File::open(cgroup).map_err(|source| BpfError::OpenShared {
        path: cgroup.to_path_buf(),
        source,
    })?;
    programs_here()
        .map(|(name, _, attach_type)| {
            bpf::prog_query(cg.as_fd(), attach_type)
                .map(|ids| (name, ids))
                .map_err(|source| BpfError::Query {
                    cgroup: cgroup.to_path_buf(),
                    source,
                })
        })
        .collect()
}

/// How long a lockrun waits for another to finish attaching to the parent.
pub(super) const PARENT_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The lock of the build's parent cgroup `parent`, held while programs are
/// attached to it: an exclusive `flock` on its directory. On the cgroup,
/// not in bpffs: lockruns that see different bpf filesystems share the
/// cgroup. A process of a run could hold it too (it may read the cgroup
/// tree), but only a lockrun that finds no live link of its own waits for
/// it, and then for [`PARENT_LOCK_TIMEOUT`] at most.
pub(super) fn lock_parent(parent: &Path) -> Result<nix::fcntl::Flock<fs::File>, BpfError> {
    use nix::fcntl::{Flock, FlockArg};
    let start = std::time::Instant::now();
    let mut pause = std::time::Duration::from_micros(100);
    loop {
        let dir = fs::File::open(parent).map_err(|source| BpfError::Mkdir {
            path: parent.to_path_buf(),
            source,
        })?;
        match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if start.elapsed() < PARENT_LOCK_TIMEOUT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
            Err((_, e)) => {
                return Err(BpfError::ParentLocked {
                    parent: parent.to_path_buf(),
                    source: io::Error::from(e),
                })
            }
        }
    }
}

/// The pin of the link attaching `program` to the parent cgroup whose id
/// (inode) is `parent_id`: `link-<program>-<parent id>`.
pub(super) fn link_pin(program: &str, parent_id: u64) -> String {
    format!("link-{program}-{parent_id}")
}

/// The parent cgroup id a [`link_pin`] name is for; `None` for any other name.
pub(super) fn link_parent(name: &str) -> Option<u64> {
    name.strip_prefix("link-")?.rsplit_once('-')?.1.parse().ok()
}

/// The entry names in `dir` (empty when it cannot be listed).
pub(super) fn names(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}
