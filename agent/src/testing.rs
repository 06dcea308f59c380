//! Unit tests' scratch directories: `/tmp/lockrun-<tag>-<pid>`, removed
//! when dropped, so that a test that fails (a panic) leaves nothing behind
//! either.

use std::path::{Path, PathBuf};

pub struct Scratch(PathBuf);

impl Scratch {
    /// Made empty: what a killed earlier run of the same test left is
    /// removed first.
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("lockrun-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::Scratch;

    #[test]
    fn a_scratch_dir_is_removed_when_its_test_panics() {
        let made = std::sync::Mutex::new(None);
        let outcome = std::panic::catch_unwind(|| {
            let scratch = Scratch::new("scratch-panics");
            std::fs::create_dir_all(scratch.path().join("a/b")).unwrap_or_else(|e| panic!("{e}"));
            *made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(scratch.path().to_path_buf());
            panic!("the test fails here");
        });
        assert!(outcome.is_err());
        let made = made
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .unwrap_or_else(|| panic!("no dir was made"));
        assert!(made.starts_with(std::env::temp_dir()), "{made:?}");
        assert!(!made.exists(), "{made:?} is left");
    }
}
