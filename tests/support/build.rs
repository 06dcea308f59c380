//! A lockrun build of a test's own (`LOCKRUN_TEST_BUILD_ID`, a
//! `weaken-for-tests` build): the real programs under a name no one else
//! uses, so a test can load a build afresh, attach it differently or have
//! `lockrun gc` judge it, without touching the build every other test shares.

use std::path::{Path, PathBuf};

/// A build id of a test's own. Its parent cgroup and its pins (and any load
/// of it left half done) are removed when dropped, on every path.
pub struct TestBuild(pub String);

impl TestBuild {
    /// `<tag><pid>`: letters and digits, as a build id must be.
    pub fn new(tag: &str) -> Self {
        Self(format!("{tag}{}", std::process::id()))
    }

    /// What of this build is pinned: its directory and any
    /// `<id>-loading-…` left by a load.
    pub fn pinned(&self) -> Vec<String> {
        std::fs::read_dir(shared_root())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| *n == self.0 || n.starts_with(&format!("{}-", self.0)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where the build's programs are pinned.
    pub fn dir(&self) -> PathBuf {
        shared_root().join(&self.0)
    }

    /// The build's parent cgroup, `<cgroup2>/lockrun/build-<id>`.
    pub fn parent(&self) -> PathBuf {
        lockrun::cgroup::cgroup2_mount()
            .unwrap()
            .join(lockrun::cgroup::PARENT)
            .join(format!("{}{}", lockrun::cgroup::BUILD_PREFIX, self.0))
    }

    /// The link pins named after the parent cgroup as it is now.
    pub fn links_to_parent(&self) -> usize {
        use std::os::unix::fs::MetadataExt as _;
        let ino = std::fs::metadata(self.parent()).unwrap().ino();
        std::fs::read_dir(self.dir())
            .unwrap()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("link-") && n.ends_with(&format!("-{ino}"))
            })
            .count()
    }
}

impl Drop for TestBuild {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(self.parent());
        for n in self.pinned() {
            let _ = std::fs::remove_dir_all(shared_root().join(n));
        }
    }
}

fn shared_root() -> PathBuf {
    Path::new(lockrun::bpf::BPFFS).join(lockrun::bpf::SHARED_ROOT)
}
