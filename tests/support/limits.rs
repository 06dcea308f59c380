//! What the run-limit tests (tasks, memory) read of a run: its audit log
//! and its output.

use std::path::Path;
use std::process::Output;

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
