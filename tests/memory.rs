//! The run's memory limit (`run.max_memory`, cgroup `memory.max`, or
//! `memory.limit_in_bytes` in a v1 hierarchy): a run that allocates
//! beyond it has a process killed by the kernel in the run (SIGKILL), the
//! kernel counts each kill, and the run shows them. Judged from outside:
//! the exit status, how far the allocation got, the kernel's own files of
//! the run's cgroup while it runs, and the audit log, each beside a
//! control.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/limits.rs"]
mod limits;
#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/fs.rs"]
mod support;

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use limits::{records, run_id, text};
use lockrun::audit::Event;
use lockrun::cgroup::v1::{self, Hierarchy};
use python::python3;
use support::{s, World};

/// Allocates (and touches) `step` MiB at a time up to `want` MiB, printing
/// each total reached.
const ALLOC: &str = r"
import sys
want, step = int(sys.argv[1]), 8
held = []
while len(held) * step < want:
    held.append(bytearray(step << 20))
    print(len(held) * step, flush=True)
print('done', flush=True)
";

fn policy(w: &World, max_memory: &str) -> PathBuf {
    let p = w
        .root
        .join(format!("memory-{}.toml", max_memory.replace('%', "pc")));
    std::fs::write(&p, format!("[run]\nmax_memory = \"{max_memory}\"\n")).unwrap();
    p
}

fn memory_events(log: &Path) -> Vec<(u64, u64, Option<u64>)> {
    records(log)
        .into_iter()
        .filter_map(|e| match e {
            Event::MemoryLimit {
                limit,
                killed,
                peak,
            } => Some((limit, killed, peak)),
            _ => None,
        })
        .collect()
}

/// The cgroup that holds the run's memory limit and its files: the run's
/// own in a v1 memory hierarchy, or its unified cgroup.
fn limit_cgroup(run_id: &str) -> Option<(PathBuf, &'static str, &'static str)> {
    if let Some(m) = v1::mount(Hierarchy::Memory) {
        let dir = m.join("lockrun").join(run_id);
        return Some((dir, "memory.limit_in_bytes", "memory.max_usage_in_bytes"));
    }
    let dir = lockrun::cgroup::find_run(run_id).ok().flatten()?;
    Some((dir, "memory.max", "memory.peak"))
}

/// The last total [`ALLOC`] printed, in MiB, and whether it finished.
fn reached(stdout: &str) -> (u64, bool) {
    let last = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<u64>().ok())
        .unwrap_or(0);
    (last, stdout.lines().any(|l| l.trim() == "done"))
}

#[test]
fn a_run_beyond_its_memory_limit_is_killed_in_the_run_and_shown() {
    if !limits::require(
        "a_run_beyond_its_memory_limit_is_killed_in_the_run_and_shown",
        lockrun::cgroup::memory::available(),
    ) {
        return;
    }
    let w = World::new("memory-limit");
    let log = w.root.join("audit.jsonl");
    let limit = policy(&w, "64MiB");
    let out = w.run(
        &["--policy", s(&limit), "--audit-log", s(&log)],
        &[python3(), "-c", ALLOC, "256"],
    );
    let (stdout, stderr) = text(&out);
    // Killed by the kernel (lockrun exits 128 + SIGKILL), before it got
    // past the limit.
    assert_eq!(out.status.code(), Some(137), "{stdout}\n{stderr}");
    let (got, done) = reached(&stdout);
    assert!(!done && got < 64, "reached {got} MiB:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "lockrun: the kernel killed 1 process of the run (SIGKILL, out of memory): the run had reached its memory limit of 64 MiB"
        ),
        "{stderr}"
    );
    // The kernel's count (oom_kill), read by lockrun from outside.
    let events = memory_events(&log);
    assert!(
        matches!(events[..], [(limit, 1, _)] if limit == 64 << 20),
        "{events:?}"
    );
    limits::assert_gone(&run_id(&log).unwrap());
    // What `lockrun audit` suggests.
    let report = limits::audit(support::BIN, &log);
    assert!(
        report.contains("max_memory = \"128MiB\"")
            && report.contains("the run's memory limit of 64 MiB"),
        "{report}"
    );

    // Control: the same allocation under a limit above it, and outside.
    let log = w.root.join("audit-control.jsonl");
    let limit = policy(&w, "1GiB");
    let out = w.run(
        &["--policy", s(&limit), "--audit-log", s(&log)],
        &[python3(), "-c", ALLOC, "256"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(reached(&stdout), (256, true), "{stderr}");
    assert!(!stderr.contains("killed"), "{stderr}");
    assert!(memory_events(&log).is_empty(), "no kill, no event");
    let outside = std::process::Command::new(python3())
        .args(["-c", ALLOC, "256"])
        .output()
        .unwrap();
    assert_eq!(reached(&text(&outside).0), (256, true));
}

#[test]
fn the_kernel_holds_the_run_to_its_limit_and_the_default_is_half_the_machine() {
    let test = "the_kernel_holds_the_run_to_its_limit_and_the_default_is_half_the_machine";
    if !limits::require(test, lockrun::cgroup::memory::available()) {
        return;
    }
    let w = World::new("memory-outside");
    let total = nix::sys::sysinfo::sysinfo().unwrap().ram_total();
    // The default policy (half the machine), then 96 MiB. The command
    // allocates beyond the limit, and the shell that ran it goes on: the
    // kernel killed the allocation alone, in the run.
    for (policy_args, want) in [
        (Vec::new(), (total / 2) & !4095),
        (
            vec!["--policy".to_owned(), s(&policy(&w, "96MiB")).to_owned()],
            96 << 20,
        ),
    ] {
        let log = w.root.join(format!("audit-{want}.jsonl"));
        let mut args: Vec<&str> = policy_args.iter().map(String::as_str).collect();
        args.extend(["--audit-log", s(&log)]);
        let alloc = if policy_args.is_empty() { "64" } else { "512" };
        let script = format!(
            "{} -c \"$0\" {alloc}; echo status $?; exec sleep 2",
            python3()
        );
        let child = w
            .cmd(&args, &["bash", "-c", script.as_str(), ALLOC])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let run_id = limits::started(&log);
        let (cg, limit_file, peak_file) = limit_cgroup(&run_id).unwrap();
        let read = |f: &str| -> Option<u64> {
            std::fs::read_to_string(cg.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        // From outside, while the run goes on: its limit, as the kernel has it.
        let set = loop {
            if let Some(v) = read(limit_file) {
                break v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no {limit_file} for the run"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(set, want, "{}", cg.display());
        // Once the allocation is over, the most the run used, by the kernel.
        std::thread::sleep(Duration::from_millis(1200));
        let peak = read(peak_file);
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let peak = peak.unwrap_or_else(|| panic!("no {peak_file} while the run went on\n{stdout}"));
        assert!(peak <= want, "peak {peak} above the limit {want}");
        if policy_args.is_empty() {
            // Control: under half the machine, 64 MiB is allocated whole.
            assert!(stdout.contains("done\nstatus 0"), "{stdout}\n{stderr}");
            assert!(
                peak >= 64 << 20,
                "peak {peak}: the allocation was not counted"
            );
            assert!(memory_events(&log).is_empty());
        } else {
            assert!(stdout.contains("status 137"), "{stdout}\n{stderr}");
            assert!(!stdout.contains("done"), "{stdout}");
            assert!(
                peak >= 64 << 20,
                "peak {peak}: the run never neared its limit"
            );
            let events = memory_events(&log);
            assert!(matches!(events[..], [(l, 1, _)] if l == want), "{events:?}");
        }
        assert!(out.status.signal().is_none());
        limits::assert_gone(&run_id);
    }
}
