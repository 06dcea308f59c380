//! Helpers for the filesystem/confinement escape tests: a fresh state dir,
//! worktree, home and outside dirs per test, the real binary, and a python
//! probe that reports the errno it got.
#![allow(dead_code, clippy::unwrap_used, clippy::unused_self)]

use crate::python::python3;
#[allow(unused_imports)] // not every test crate that shares this module skips
pub use crate::skip::skip;
use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_lockrun");
pub const PROBE: &str = include_str!("probe.py");

/// One test's world, in `/tmp/lockrun-test-<name>-<pid>`, removed whole when it is
/// dropped (no parent dir shared by the tests is left behind).
pub struct World {
    pub root: PathBuf,
    /// The run's worktree.
    pub wt: PathBuf,
    /// `--state-dir`.
    pub state: PathBuf,
    /// `HOME` for lockrun: the secret floor lives here.
    pub home: PathBuf,
    /// A data dir the command must not write.
    pub data: PathBuf,
    /// Another agent's worktree.
    pub other: PathBuf,
}

impl World {
    pub fn new(name: &str) -> Self {
        let root = PathBuf::from(format!("/tmp/lockrun-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let w = Self {
            wt: root.join("wt"),
            state: root.join("state"),
            home: root.join("home"),
            data: root.join("data"),
            other: root.join("agents/bob/repo"),
            root,
        };
        for d in [&w.wt, &w.state, &w.home, &w.data, &w.other] {
            std::fs::create_dir_all(d).unwrap();
        }
        w
    }

    /// `lockrun --worktree WT --state-dir STATE [extra] -- argv`, HOME set to the test home.
    pub fn cmd<S: AsRef<OsStr>>(&self, extra: &[&str], argv: &[S]) -> Command {
        self.cmd_under::<&str, S>(&[], extra, argv)
    }

    /// [`cmd`](Self::cmd) started by `wrapper`, a program and its
    /// arguments that go on to exec lockrun (`setpriv`, a pty, a mount
    /// namespace).
    pub fn cmd_under<W: AsRef<OsStr>, S: AsRef<OsStr>>(
        &self,
        wrapper: &[W],
        extra: &[&str],
        argv: &[S],
    ) -> Command {
        let mut c = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        c.arg("--worktree")
            .arg(&self.wt)
            .arg("--state-dir")
            .arg(&self.state)
            .args(extra)
            .arg("--")
            .args(argv)
            .env("HOME", &self.home)
            .current_dir(&self.wt);
        c
    }

    pub fn run<S: AsRef<OsStr>>(&self, extra: &[&str], argv: &[S]) -> Output {
        self.cmd(extra, argv).output().unwrap()
    }

    /// Run the probe inside; one result line per op. Asserts lockrun exited 0.
    pub fn probe(&self, extra: &[&str], ops: &[&[&str]]) -> Vec<String> {
        let out = self.run(extra, &probe_argv(ops));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "lockrun failed: {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        self.assert_no_run_dirs();
        stdout.lines().map(str::to_owned).collect()
    }

    /// The calls the supervisor refused and recorded in the audit log
    /// `log`, in order, each with what it would have widened; asserts each
    /// came from `comm`.
    #[allow(dead_code)]
    pub fn refused_calls(
        &self,
        log: &std::path::Path,
        comm: &str,
    ) -> Vec<(String, lockrun::seccomp::Widens)> {
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .filter_map(|l| match serde_json::from_str(l).unwrap() {
                lockrun::audit::Record {
                    event: lockrun::audit::Event::Syscall(sc),
                    ..
                } => {
                    assert_eq!(sc.comm, comm, "{sc:?}");
                    Some((sc.call, sc.why))
                }
                _ => None,
            })
            .collect()
    }

    /// The same probe, outside any sandbox (controls).
    pub fn probe_outside(&self, ops: &[&[&str]]) -> Vec<String> {
        let argv = probe_argv(ops);
        let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// No run dir may be left behind.
    pub fn assert_no_run_dirs(&self) {
        let runs = self.state.join("runs");
        if let Ok(rd) = std::fs::read_dir(&runs) {
            let left: Vec<_> = rd.flatten().map(|e| e.path()).collect();
            assert!(left.is_empty(), "run dirs left behind: {left:?}");
        }
    }

    /// A canary file with known bytes.
    pub fn canary(&self, path: &Path) -> PathBuf {
        std::fs::write(path, b"canary").unwrap();
        path.to_path_buf()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // After every test: no run dir left behind.
        if !std::thread::panicking() {
            self.assert_no_run_dirs();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether `line` is lockrun's warning that a dir on the way to a denied
/// path holds thousands of entries: for the tests' state dirs that is
/// `/tmp`, crowded or not depending on the machine, not on the test.
pub fn is_crowding(line: &str) -> bool {
    line.starts_with("lockrun: warning: ")
        && line.contains(" entries, and each gets a Landlock rule of its own on every run ")
}

/// The `lockrun: warning:` lines of `stderr`, but for [`is_crowding`] ones.
pub fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("lockrun: warning:") && !is_crowding(l))
        .collect()
}

pub fn probe_argv(ops: &[&[&str]]) -> Vec<String> {
    let mut v = vec![python3().to_owned(), "-c".to_owned(), PROBE.to_owned()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            v.push(";".to_owned());
        }
        v.extend(op.iter().map(|s| (*s).to_owned()));
    }
    v
}

pub fn assert_canary(path: &Path) {
    assert_eq!(
        std::fs::read(path).unwrap(),
        b"canary",
        "{} was changed",
        path.display()
    );
}

pub fn assert_absent(path: &Path) {
    assert!(
        std::fs::symlink_metadata(path).is_err(),
        "{} exists",
        path.display()
    );
}

/// (mode, uid, gid, mtime) of a file, judged from outside.
pub fn meta(path: &Path) -> (u32, u32, u32, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.permissions().mode(), m.uid(), m.gid(), m.mtime())
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Paths removed when a test ends, however it ends (files, or dirs with
/// what is in them).
pub struct RemovedAtEnd(pub Vec<PathBuf>);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
        }
    }
}

/// The Landlock ABI a run here uses: the kernel's own
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`),
/// lowered by `LOCKRUN_TEST_LANDLOCK_ABI` as the test build of lockrun
/// lowers it.
pub fn landlock_abi() -> u8 {
    let out = Command::new(python3())
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .unwrap();
    let kernel: u8 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    std::env::var("LOCKRUN_TEST_LANDLOCK_ABI")
        .ok()
        .and_then(|a| a.parse().ok())
        .map_or(kernel, |lower: u8| lower.min(kernel))
}

/// The notices of the audit log `log`: what lockrun says of the run's
/// mechanisms, as it says it.
pub fn notices(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            lockrun::audit::Record {
                event: lockrun::audit::Event::Notice { message, .. },
                ..
            } => Some(message),
            _ => None,
        })
        .collect()
}
