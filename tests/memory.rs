//! The run's memory limit (`run.max_memory`, cgroup `memory.max`, or
//! `memory.limit_in_bytes` in a v1 hierarchy): a run that allocates
//! beyond it has a process killed by the kernel in the run (SIGKILL), the
//! kernel counts each kill, and the run shows them. Judged from outside:
//! the exit status, how far the allocation got, the kernel's own files of
//! the run's cgroup while it runs, and the audit log, each beside a
//! control. And when memory runs out where a run shares it (the machine,
//! or any cgroup above the run), the OOM killer takes the run's processes
//! first (`oom_score_adj` 1000), not lockrun, the caller or a larger
//! process outside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/limits.rs"]
mod limits;
#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/fs.rs"]
mod support;
#[path = "support/watchdog.rs"]
#[allow(dead_code)] // this crate finds the watchdog, and kills none
mod watchdog;

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use limits::{records, run_id, text, TestCgroup};
use lockrun::audit::Event;
use lockrun::cgroup::v1::{self, Hierarchy};
use lockrun::cgroup::RanOut;
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

/// The run's `memory_limit` events: each the limit, the processes killed,
/// the peak, where that is at the run's own limit (asserted).
fn memory_events(log: &Path) -> Vec<(u64, u64, Option<u64>)> {
    records(log)
        .into_iter()
        .filter_map(|e| match e {
            Event::MemoryLimit {
                limit,
                killed,
                peak,
                ran_out,
            } => {
                assert_eq!(ran_out, RanOut::AtTheRunsLimit);
                Some((limit, killed, peak))
            }
            _ => None,
        })
        .collect()
}

/// The cgroup that holds the run's memory limit and its files: the run's
/// own in a v1 memory hierarchy, or its unified cgroup.
fn limit_cgroup(run_id: &str) -> Option<(PathBuf, &'static str, &'static str)> {
    if v1::mount(Hierarchy::Memory).is_some() {
        // Beneath the cgroup lockrun is in: the test's.
        let dir = v1::own(Hierarchy::Memory)
            .ok()?
            .join("lockrun")
            .join(run_id);
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

/// Inside: the `oom_score_adj` the command started with, then whether it
/// may lower it back to the caller's; waits for stdin to close.
const OOM_PROBE: &str = r"
import errno, os, sys
def write(v):
    try:
        with open('/proc/self/oom_score_adj', 'w') as f:
            f.write(str(v))
        return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
print('pid', os.getpid())
print('started', open('/proc/self/oom_score_adj').read().strip())
print('lower', write(200))
print('ready', flush=True)
sys.stdin.read()
";

/// The OOM killer takes a run's processes before any outside: while a run
/// goes on, its command's `oom_score_adj` is 1000, and it cannot lower it
/// back to the caller's (`EACCES`), while lockrun and its watchdog keep
/// the caller's (200, set before lockrun's exec). Judged by the kernel's
/// own `/proc` files, read from outside: the adjustments, and the
/// kernel's badness (`oom_score`), the command's above lockrun's.
#[test]
fn the_oom_killer_takes_the_runs_processes_before_lockrun_and_the_caller() {
    let w = World::new("memory-oom-score");
    let wrapper = [
        "sh",
        "-c",
        "echo 200 > /proc/self/oom_score_adj && exec \"$@\"",
        "sh",
    ];
    let log = w.root.join("audit.jsonl");
    let mut child = w
        .cmd_under(
            &wrapper,
            &["--audit-log", s(&log)],
            &[python3(), "-c", OOM_PROBE],
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "ready" {
            break;
        }
        said.push(line);
    }
    let read = |pid: u32, file: &str| -> i32 {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/{file}: {e} ({said:?})"))
            .trim()
            .parse()
            .unwrap()
    };
    let lockrun = child.id();
    let watchdog = watchdog::watchdog_of(lockrun);
    let command: u32 = said
        .iter()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap_or_else(|| panic!("no pid from inside: {said:?}"))
        .parse()
        .unwrap();
    let adj = [lockrun, watchdog, command].map(|p| read(p, "oom_score_adj"));
    let score = [lockrun, watchdog, command].map(|p| read(p, "oom_score"));
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{said:?}\n{stderr}");
    assert_eq!(said[1..], ["started 1000", "lower EACCES"], "{stderr}");
    assert_eq!(
        adj,
        [200, 200, 1000],
        "oom_score_adj of lockrun, its watchdog, the command"
    );
    // The kernel's rank, (1000 + badness in thousandths of the machine)
    // × 2/3: the command's 1333, at most; lockrun's ~800, its 200 and its
    // few MiB.
    assert!(
        score[2] >= 1333 && score[0] < 1000 && score[1] < 1000,
        "oom_score of lockrun, its watchdog, the command: {score:?}"
    );
    limits::assert_gone(&run_id(&log).unwrap());
}

/// A memory cgroup of the test's own in the v1 hierarchy, limited to
/// `limit` bytes.
fn test_memcg(name: &str, limit: u64) -> Option<TestCgroup> {
    TestCgroup::new(
        Hierarchy::Memory,
        name,
        &[("memory.limit_in_bytes", limit.to_string())],
    )
}

/// The kernel's count of OOM kills in the v1 memory cgroup `cg`.
fn oom_kills(cg: &TestCgroup) -> u64 {
    std::fs::read_to_string(cg.0.join("memory.oom_control"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.parse().ok())
        .unwrap()
}

/// Holds `MiB` MiB (touched) and says so, until stdin closes.
const HOG: &str = r"
import sys
held = bytearray(int(sys.argv[1]) << 20)
print('holding', flush=True)
sys.stdin.read()
print('still here', flush=True)
";

/// What the OOM killer does when memory runs out where a run and a larger
/// process outside share it: it kills the run's process, not the one
/// outside. A memory cgroup of the test's own (256 MiB) stands for a
/// machine out of memory: a process outside the run holds 160 MiB in it,
/// then lockrun (in it too, its run's processes charged there: the policy
/// sets no limit of the run's own) runs a command that allocates towards
/// 512 MiB. The kernel counts one OOM kill there; the command is the one
/// killed (lockrun exits 137, the allocation got no further than what was
/// left, ~90 MiB), and the process outside still answers. Without the
/// run's `oom_score_adj`, the kernel took the larger, outside.
#[test]
fn out_of_memory_the_kernel_kills_the_run_not_a_larger_process_outside() {
    let test = "out_of_memory_the_kernel_kills_the_run_not_a_larger_process_outside";
    let Some(memcg) = test_memcg("lockrun-test-oom", 256 << 20) else {
        skip::skip(
            test,
            "no v1 memory hierarchy to make a cgroup of the test's own in",
        );
        return;
    };
    let w = World::new("memory-oom-outside");
    let mut hog = std::process::Command::new("sh")
        .args(&memcg.wrapper()[1..])
        .args([python3(), "-c", HOG, "160"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut hog_out = BufReader::new(hog.stdout.take().unwrap()).lines();
    assert_eq!(hog_out.next().unwrap().unwrap(), "holding");
    let out = w
        .cmd_under(
            &memcg.wrapper(),
            &["--policy", s(&policy(&w, "unlimited"))],
            &[python3(), "-c", ALLOC, "512"],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    let kills = oom_kills(&memcg);
    // The process outside: alive, and answering.
    hog.stdin.take().unwrap().write_all(b"").unwrap();
    let hog_status = hog.wait().unwrap();
    let answered = hog_out.next().and_then(Result::ok);
    assert_eq!(
        (hog_status.code(), answered.as_deref()),
        (Some(0), Some("still here")),
        "the process outside was killed ({hog_status:?}); the run said:\n{stdout}\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(137), "{stdout}\n{stderr}");
    let (reached, done) = reached(&stdout);
    assert!(!done && reached < 96, "reached {reached} MiB\n{stdout}");
    assert_eq!(kills, 1, "the kernel's count of OOM kills in the cgroup");
    drop(memcg);
}

/// A run's memory cgroup is beneath the one lockrun is in, so the limit
/// on lockrun's caller holds the run too (a CI job's, a service's), and
/// what the run uses counts there. lockrun runs in a memory cgroup of the
/// test's own limited to 128 MiB, with a run limit of its own of 1 GiB:
/// a run allocating towards 512 MiB is killed by the kernel short of 128
/// (lockrun 137), the test's cgroup's peak at its limit and charges there
/// refused (its `failcnt`), and lockrun says
/// the memory ran out above the run, not at its limit. Control: a run
/// that allocates 48 MiB in the same cgroup finishes. Each leaves nothing
/// beneath the test's cgroup. With the run's cgroup beside lockrun's
/// (`<memory>/lockrun/<run-id>`, as before), the run went on to 512 MiB.
#[test]
fn the_memory_limit_on_lockruns_caller_holds_its_runs_too() {
    let test = "the_memory_limit_on_lockruns_caller_holds_its_runs_too";
    let Some(memcg) = test_memcg("lockrun-test-caller-limit", 128 << 20) else {
        skip::skip(
            test,
            "no v1 memory hierarchy to make a cgroup of the test's own in",
        );
        return;
    };
    let w = World::new("memory-caller-limit");
    let limit = policy(&w, "1GiB");
    let under = |want: &str, log: &Path| {
        let out = w
            .cmd_under(
                &memcg.wrapper(),
                &["--policy", s(&limit), "--audit-log", s(log)],
                &[python3(), "-c", ALLOC, want],
            )
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        (out.status.code(), stdout, stderr)
    };

    // Control: within the caller's limit, the run finishes.
    let control_log = w.root.join("control.jsonl");
    let (code, stdout, stderr) = under("48", &control_log);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(reached(&stdout), (48, true), "{stdout}");
    assert!(
        !memcg.0.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&control_log).unwrap());

    let log = w.root.join("audit.jsonl");
    let (code, stdout, stderr) = under("512", &log);
    // The caller's cgroup, read from outside: the run's memory was
    // charged there, up to its limit, which allocations hit (v1 counts
    // the kill in the run's cgroup, where it happened).
    let read = |file: &str| -> u64 {
        let content = std::fs::read_to_string(memcg.0.join(file)).unwrap();
        content.trim().parse().unwrap()
    };
    let (peak, failed) = (read("memory.max_usage_in_bytes"), read("memory.failcnt"));
    assert_eq!(code, Some(137), "{stdout}\n{stderr}");
    let (got, done) = reached(&stdout);
    assert!(!done && got < 128, "reached {got} MiB:\n{stdout}\n{stderr}");
    assert!(
        peak > (120 << 20) && failed > 0,
        "the caller's cgroup: peak {peak}, {failed} charges failed at its limit"
    );
    assert!(
        stderr.contains(
            "lockrun: the kernel killed 1 process of the run (SIGKILL, out of memory): memory ran out above the run (the machine's, or a cgroup's lockrun is in), which had not reached its own limit of 1 GiB"
        ),
        "{stderr}"
    );
    let events: Vec<_> = records(&log)
        .into_iter()
        .filter_map(|e| match e {
            Event::MemoryLimit {
                limit,
                killed,
                ran_out,
                ..
            } => Some((limit, killed, ran_out)),
            _ => None,
        })
        .collect();
    assert_eq!(events, [(1 << 30, 1, RanOut::AboveTheRun)]);
    assert!(
        !memcg.0.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&log).unwrap());
    drop(memcg);
}
