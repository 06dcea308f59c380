//! What the run-limit tests (tasks, memory) read of a run: its audit log
//! and its output.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use lockrun::audit::{Event, Record};

/// Every event of the audit log at `log`, in order (none before it exists).
pub fn records(log: &Path) -> Vec<Event> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Record>(l).unwrap().event)
        .collect()
}

/// The run's id, once its start is logged.
pub fn run_id(log: &Path) -> Option<String> {
    records(log).into_iter().find_map(|e| match e {
        Event::RunStart { run_id, .. } => Some(run_id),
        _ => None,
    })
}

/// The run's id, waiting for its start to be logged (a run spawned in
/// the background).
pub fn started(log: &Path) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some(id) = run_id(log) {
            return id;
        }
        assert!(
            start.elapsed() < super::slow::patience(Duration::from_secs(10)),
            "the run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// What `lockrun audit` (the binary `bin`) says of the log at `log`.
pub fn audit(bin: &str, log: &Path) -> String {
    let out = std::process::Command::new(bin)
        .arg("audit")
        .arg(log)
        .output()
        .unwrap();
    text(&out).0
}

/// Whether `test` can go on: the limit's controller is here
/// (`available`, as `lockrun doctor` says it); else a loud skip (none
/// under `CI=true`).
pub fn require(test: &str, available: Result<String, lockrun::cgroup::CgroupError>) -> bool {
    match available {
        Ok(_) => true,
        Err(e) => {
            super::skip::skip(test, &e.to_string());
            false
        }
    }
}

/// Nothing of the run left behind: no cgroup of it in any v1 hierarchy
/// lockrun uses (wherever in it), nor in the unified one.
pub fn assert_gone(run_id: &str) {
    use lockrun::cgroup::v1::{self, Hierarchy};
    for h in Hierarchy::ALL {
        if let Some(dir) = v1::find_run(h, run_id) {
            panic!("{} left behind", dir.display());
        }
    }
    assert_eq!(lockrun::cgroup::find_run(run_id).unwrap(), None);
}

/// The count after `key` in the flat-keyed file `file` of the cgroup
/// `dir` (`memory.events`, `pids.events`, `memory.oom_control`).
pub fn counter(dir: &Path, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {}/{file}: {text:?}", dir.display()))
}

/// A process's stdout and stderr, as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A cgroup of the test's own, limited, for lockrun's caller to run in
/// (`wrapper`): in the v1 hierarchy of the controller where the host has
/// one (a hybrid host), else in the unified hierarchy, where
/// its root hands the controller to its children (a pure v2 host, as
/// systemd makes it). Whatever is still in it is killed and it is removed
/// when dropped.
pub struct TestCgroup {
    pub path: PathBuf,
    /// In the unified hierarchy (its files are v2's: `memory.max`,
    /// `memory.peak`, `memory.events`).
    pub unified: bool,
}

impl TestCgroup {
    /// `<hierarchy>/<name>-<pid>`, with `h`'s limit at `limit` (tasks, or
    /// bytes); `None` where neither hierarchy has `h`'s controller here.
    pub fn limited(h: lockrun::cgroup::v1::Hierarchy, name: &str, limit: u64) -> Option<Self> {
        use lockrun::cgroup::v1::{self, Hierarchy};
        let dir_name = format!("{name}-{}", std::process::id());
        let (path, unified) = if let Some(mount) = v1::mount(h) {
            (mount.join(dir_name), false)
        } else {
            let root = lockrun::cgroup::cgroup2_mount().ok()?;
            let handed = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
            if !handed.split_whitespace().any(|c| c == h.controller()) {
                return None;
            }
            (root.join(dir_name), true)
        };
        let file = match (h, unified) {
            (Hierarchy::Pids, _) => "pids.max",
            (Hierarchy::Memory, false) => "memory.limit_in_bytes",
            (Hierarchy::Memory, true) => "memory.max",
        };
        std::fs::create_dir(&path).unwrap();
        let cg = Self { path, unified };
        std::fs::write(cg.path.join(file), limit.to_string()).unwrap();
        Some(cg)
    }

    /// The number in one of its files (`pids.peak`, `memory.peak`).
    pub fn read(&self, file: &str) -> u64 {
        let text = std::fs::read_to_string(self.path.join(file)).unwrap();
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{file}: {text:?}: {e}"))
    }

    /// The count after `key` in one of its flat-keyed files
    /// (`memory.events`, `pids.events`, `memory.oom_control`).
    pub fn counter(&self, file: &str, key: &str) -> u64 {
        counter(&self.path, file, key)
    }

    /// A shell line that moves the shell into this cgroup, then execs its
    /// arguments.
    pub fn wrapper(&self) -> [String; 4] {
        [
            "sh".to_owned(),
            "-c".to_owned(),
            format!(
                "echo $$ > {}/cgroup.procs && exec \"$@\"",
                self.path.display()
            ),
            "sh".to_owned(),
        ]
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.path.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let start = Instant::now();
        while std::fs::remove_dir(&self.path).is_err() && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!self.path.exists(), "{} left behind", self.path.display());
    }
}
