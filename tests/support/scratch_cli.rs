//! A scratch dir with `wt`, `home` and `state` for tests of lockrun's
//! command line, removed when dropped, and lockrun run in it.

use std::path::PathBuf;
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

/// `/tmp/lockrun-<tag>-<name>-<pid>`, canonical, with `wt`, `home` and `state`.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str, name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("lockrun-{tag}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        for d in ["wt", "home", "state"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        Self(p.canonicalize().unwrap())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `lockrun ARGS` in the scratch dir, its `home` as `HOME`.
pub fn lockrun(s: &Scratch, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("HOME", s.0.join("home"))
        .current_dir(&s.0)
        .output()
        .unwrap()
}
