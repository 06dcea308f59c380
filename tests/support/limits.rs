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

/// The run's id, waiting up to 10 s for its start to be logged (a run
/// spawned in the background).
pub fn started(log: &Path) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some(id) = run_id(log) {
            return id;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
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
            crate::support::skip(test, &e.to_string());
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

/// A process's stdout and stderr, as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A cgroup of the test's own in a v1 hierarchy, made with each
/// `(file, value)` of its settings written; whatever is still in it is
/// killed and it is removed when dropped.
pub struct TestCgroup(pub PathBuf);

impl TestCgroup {
    /// `<h>/<name>-<pid>`; `None` where `h` has no v1 hierarchy here.
    pub fn new(
        h: lockrun::cgroup::v1::Hierarchy,
        name: &str,
        settings: &[(&str, String)],
    ) -> Option<Self> {
        let dir = lockrun::cgroup::v1::mount(h)?.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let cg = Self(dir);
        for (file, value) in settings {
            std::fs::write(cg.0.join(file), value).unwrap();
        }
        Some(cg)
    }

    /// A shell line that moves the shell into this cgroup, then execs its
    /// arguments.
    pub fn wrapper(&self) -> [String; 4] {
        [
            "sh".to_owned(),
            "-c".to_owned(),
            format!("echo $$ > {}/cgroup.procs && exec \"$@\"", self.0.display()),
            "sh".to_owned(),
        ]
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
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
        while std::fs::remove_dir(&self.0).is_err() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!self.0.exists(), "{} left behind", self.0.display());
    }
}
