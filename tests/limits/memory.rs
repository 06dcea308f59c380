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

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lockrun::audit::Event;
use lockrun::cgroup::v1::{self, Hierarchy};
use lockrun::cgroup::RanOut;

use crate::support::{build, limits, python, skip, slow, watchdog, world};
use build::TestBuild;
use limits::{records, run_id, text, TestCgroup};
use python::python3;
use world::{s, World};

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
    let report = limits::audit(world::BIN, &log);
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

/// The run's `memory.swap.max`, once lockrun has written it: after
/// `memory.max`, before the command starts, so read until it is 0 (or the
/// wait's bound).
fn swap_max_once_written(cg: &Path) -> std::io::Result<String> {
    let swap = || std::fs::read_to_string(cg.join("memory.swap.max"));
    let waited = Instant::now();
    while swap().is_ok_and(|s| s.trim() != "0")
        && waited.elapsed() < slow::patience(Duration::from_secs(10))
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    swap()
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
        // The run goes on, the allocation over, until the test has read
        // the run's peak and closed the shell's stdin.
        let script = format!(
            "{} -c \"$0\" {alloc}; echo status $?; read _ || true",
            python3()
        );
        let mut child = w
            .cmd(&args, &["bash", "-c", script.as_str(), ALLOC])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let run_id = limits::started(&log);
        let read = |cg: &Path, f: &str| -> Option<u64> {
            std::fs::read_to_string(cg.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        // From outside, while the run goes on: its limit, as the kernel
        // has it (the run id is logged before the run's cgroup is made,
        // and the cgroup before its limit is written: until then it reads
        // unlimited, `max` or v1's page-rounded i64::MAX).
        let (cg, limit_file, peak_file, set) = loop {
            let found = limit_cgroup(&run_id)
                .and_then(|(cg, limit, peak)| Some((read(&cg, limit)?, cg, limit, peak)));
            if let Some((set, cg, limit, peak)) = found.filter(|f| f.0 < (1 << 62)) {
                break (cg, limit, peak, set);
            }
            assert!(
                start.elapsed() < slow::patience(Duration::from_secs(10)),
                "no memory limit for the run"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(set, want, "{}", cg.display());
        if limit_file == "memory.max" {
            // v2: swap counted too, none allowed beyond the limit.
            let swap = swap_max_once_written(&cg);
            assert!(
                swap.as_ref().map_or(true, |s| s.trim() == "0"),
                "memory.swap.max: {swap:?}"
            );
        }
        // Once the allocation is over (the shell says how it ended), the
        // most the run used, by the kernel.
        let mut said = String::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for line in &mut lines {
            let line = line.unwrap();
            said.push_str(&line);
            said.push('\n');
            if line.starts_with("status ") {
                break;
            }
        }
        let peak = read(&cg, peak_file);
        drop(child.stdin.take());
        for line in lines {
            said.push_str(&line.unwrap());
            said.push('\n');
        }
        let out = child.wait_with_output().unwrap();
        let (_, stderr) = text(&out);
        let stdout = said;
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
    // Lowering it: /proc is read-only in the run's namespace (and Landlock
    // grants nothing there to write).
    assert_eq!(said[1..], ["started 1000", "lower EROFS"], "{stderr}");
    assert_eq!(
        adj,
        [200, 200, 1000],
        "oom_score_adj of lockrun, its watchdog, the command"
    );
    // The kernel's rank, (1000 + badness in thousandths of the machine)
    // × 2/3: the command's at least 1333; lockrun's and its watchdog's, whose
    // `oom_score_adj` is 200 and which hold a few MiB, below 1000.
    assert!(
        score[2] >= 1333 && score[0] < 1000 && score[1] < 1000,
        "oom_score of lockrun, its watchdog, the command: {score:?}"
    );
    limits::assert_gone(&run_id(&log).unwrap());
}

/// Where memory runs out above a run in a test: memory a run shares with
/// a process outside it, limited. In a v1 hierarchy (a hybrid host), a
/// memory cgroup of the test's own that both lockrun and the process
/// outside are in: a run's cgroup there is beneath lockrun's. In the
/// unified hierarchy (a pure v2 host), where a run's cgroup is beneath
/// its build's parent and no cgroup of its caller's, that parent, of a
/// build of the test's own (`LOCKRUN_TEST_BUILD_ID`): the process outside
/// in a cgroup beside the run's there, lockrun where the test is.
struct SharedMemory {
    /// The process outside the run goes here ([`TestCgroup::wrapper`]):
    /// the limited cgroup itself (v1), or one beneath it (v2). Dropped
    /// (its process killed, it removed) before `build`.
    outside: TestCgroup,
    /// v2: the build whose parent is limited, removed when dropped.
    build: Option<TestBuild>,
}

impl SharedMemory {
    /// Limited to `limit` bytes; `None` where the host has no memory
    /// controller for it.
    fn new(name: &str, limit: u64) -> Option<Self> {
        if v1::mount(Hierarchy::Memory).is_some() {
            let outside = TestCgroup::limited(Hierarchy::Memory, name, limit)?;
            return Some(Self {
                outside,
                build: None,
            });
        }
        let root = lockrun::cgroup::cgroup2_mount().ok()?;
        let handed = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
        if !handed.split_whitespace().any(|c| c == "memory") {
            return None;
        }
        let build = TestBuild::new(&name.replace('-', ""));
        let parent = build.parent();
        std::fs::create_dir_all(&parent).unwrap();
        // As lockrun hands the controller down to a build's parent.
        std::fs::write(
            parent.parent().unwrap().join("cgroup.subtree_control"),
            "+memory",
        )
        .unwrap();
        std::fs::write(parent.join("memory.max"), limit.to_string()).unwrap();
        if parent.join("memory.swap.max").exists() {
            std::fs::write(parent.join("memory.swap.max"), "0").unwrap();
        }
        let path = parent.join("outside");
        std::fs::create_dir(&path).unwrap();
        Some(Self {
            outside: TestCgroup {
                path,
                unified: true,
            },
            build: Some(build),
        })
    }

    /// `lockrun`, run where its runs share this memory.
    fn lockrun(&self, w: &World, extra: &[&str], argv: &[&str]) -> std::process::Command {
        match &self.build {
            None => w.cmd_under(&self.outside.wrapper(), extra, argv),
            Some(build) => {
                let mut c = w.cmd(extra, argv);
                c.env("LOCKRUN_TEST_BUILD_ID", &build.0);
                c
            }
        }
    }

    /// The kernel's count of OOM kills in the limited cgroup.
    fn oom_kills(&self) -> u64 {
        match &self.build {
            None => self.outside.counter("memory.oom_control", "oom_kill"),
            Some(build) => limits::counter(&build.parent(), "memory.events", "oom_kill"),
        }
    }
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
/// outside. 256 MiB of the test's own ([`SharedMemory`]) stands for a
/// machine out of memory: a process outside the run holds 160 MiB of it,
/// then lockrun runs a command, charged there too, that allocates towards
/// 512 MiB. The kernel counts one OOM kill there; the command is the one
/// killed (lockrun exits 137, the allocation got no further than what was
/// left), and the process outside still answers. Without the
/// run's `oom_score_adj`, the kernel took the larger, outside. In v1 the
/// policy sets no limit of the run's own (v1 counts a kill in the cgroup
/// of the process killed, which is then the test's; the run's own limit
/// there is shown run out above it by
/// [`the_memory_limit_on_lockruns_caller_holds_its_runs_too`]); in v2, a
/// far one, 1 GiB, which the kernel counts upwards: lockrun says the
/// memory ran out above the run, from the run's `memory.events` (a kill,
/// never at its own limit).
#[test]
fn out_of_memory_the_kernel_kills_the_run_not_a_larger_process_outside() {
    let test = "out_of_memory_the_kernel_kills_the_run_not_a_larger_process_outside";
    let Some(shared) = SharedMemory::new("lockrun-test-oom", 256 << 20) else {
        skip::skip(
            test,
            "no memory controller, v1 or unified, to make a cgroup of the test's own with",
        );
        return;
    };
    let w = World::new("memory-oom-outside");
    let mut hog = std::process::Command::new("sh")
        .args(&shared.outside.wrapper()[1..])
        .args([python3(), "-c", HOG, "160"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut hog_out = BufReader::new(hog.stdout.take().unwrap()).lines();
    assert_eq!(hog_out.next().unwrap().unwrap(), "holding");
    let log = w.root.join("audit.jsonl");
    let own_limit = if shared.build.is_some() {
        "1GiB"
    } else {
        "unlimited"
    };
    let out = shared
        .lockrun(
            &w,
            &[
                "--policy",
                s(&policy(&w, own_limit)),
                "--audit-log",
                s(&log),
            ],
            &[python3(), "-c", ALLOC, "512"],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    let kills = shared.oom_kills();
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
    if own_limit != "unlimited" {
        assert!(
            stderr.contains(
                "lockrun: the kernel killed 1 process of the run (SIGKILL, out of memory): memory ran out above the run (the machine's, or a cgroup's lockrun is in), which had not reached its own limit of 1 GiB"
            ),
            "{stderr}"
        );
    }
    limits::assert_gone(&run_id(&log).unwrap());
    drop(shared);
}

/// The memory limit on lockrun's caller (a CI job's, a service's), where
/// its runs' cgroups can be beneath the caller's: in a v1 memory
/// hierarchy, a run's cgroup is beneath the one lockrun is in, so that
/// limit holds the run too, and what the run uses counts there. lockrun
/// runs in a memory cgroup of the test's own limited to 128 MiB, with a run
/// limit of its own of 1 GiB: a run allocating towards 512 MiB is killed
/// by the kernel short of 128 (lockrun 137), the test's cgroup's peak at
/// its limit and charges there refused (its `failcnt`), and lockrun says
/// the memory ran out above the run, not at its limit. With the run's
/// cgroup beside lockrun's (`<memory>/lockrun/<run-id>`, as before), the
/// run went on to 512 MiB.
///
/// On a pure v2 host it does not hold (docs/promises.md, `#memory`: the
/// run's cgroup is beneath its build's parent, which no cgroup of the
/// caller's is above), and the test shows that instead: the same run
/// allocates its 512 MiB whole, nothing of it charged to the caller's
/// cgroup (its peak stays below its limit, nothing killed there), and only
/// the run's own limit holds it (a run limited to 64 MiB there is killed
/// at it).
///
/// Control: a run that allocates 48 MiB in the same cgroup finishes. Each
/// leaves nothing beneath the test's cgroup.
#[test]
fn the_memory_limit_on_lockruns_caller_holds_its_runs_too() {
    let test = "the_memory_limit_on_lockruns_caller_holds_its_runs_too";
    let Some(memcg) =
        TestCgroup::limited(Hierarchy::Memory, "lockrun-test-caller-limit", 128 << 20)
    else {
        skip::skip(
            test,
            "no memory controller, v1 or unified, to make a cgroup of the test's own with",
        );
        return;
    };
    let w = World::new("memory-caller-limit");
    let under = |max_memory: &str, want: &str, log: &Path| {
        let out = w
            .cmd_under(
                &memcg.wrapper(),
                &[
                    "--policy",
                    s(&policy(&w, max_memory)),
                    "--audit-log",
                    s(log),
                ],
                &[python3(), "-c", ALLOC, want],
            )
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        (out.status.code(), stdout, stderr)
    };

    // Control: within the caller's limit, the run finishes.
    let control_log = w.root.join("control.jsonl");
    let (code, stdout, stderr) = under("1GiB", "48", &control_log);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(reached(&stdout), (48, true), "{stdout}");
    assert!(
        !memcg.path.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&control_log).unwrap());

    let log = w.root.join("audit.jsonl");
    let (code, stdout, stderr) = under("1GiB", "512", &log);
    if memcg.unified {
        the_caller_limit_does_not_hold_on_v2(&w, &memcg, (code, &stdout, &stderr), &log);
        return;
    }
    // The caller's cgroup, read from outside: the run's memory was
    // charged there, up to its limit, which allocations hit (v1 counts
    // the kill in the run's cgroup, where it happened).
    let (peak, failed) = (
        memcg.read("memory.max_usage_in_bytes"),
        memcg.read("memory.failcnt"),
    );
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
        !memcg.path.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&log).unwrap());
    drop(memcg);
}

/// [`the_memory_limit_on_lockruns_caller_holds_its_runs_too`] on a pure
/// v2 host, after the run allocating 512 MiB under the caller's 128 MiB
/// (its exit status, output, and log at `log`): it finished, and the
/// caller's cgroup never neared its limit; then the run's own limit holds.
fn the_caller_limit_does_not_hold_on_v2(
    w: &World,
    memcg: &TestCgroup,
    (code, stdout, stderr): (Option<i32>, &str, &str),
    log: &Path,
) {
    let peak = memcg.read("memory.peak");
    let kills = memcg.counter("memory.events", "oom_kill");
    let at_limit = memcg.counter("memory.events", "max");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(reached(stdout), (512, true), "{stdout}");
    assert!(!stderr.contains("killed"), "{stderr}");
    assert!(
        peak < 128 << 20 && kills == 0,
        "the caller's cgroup: peak {peak}, {kills} OOM kills, at its limit {at_limit} times"
    );
    assert!(memory_events(log).is_empty());
    assert!(
        !memcg.path.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(log).unwrap());
    // The run's own limit holds it, there too.
    let own = w.root.join("own.jsonl");
    let out = w
        .cmd_under(
            &memcg.wrapper(),
            &["--policy", s(&policy(w, "64MiB")), "--audit-log", s(&own)],
            &[python3(), "-c", ALLOC, "512"],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(137), "{stdout}\n{stderr}");
    let (got, done) = reached(&stdout);
    assert!(!done && got < 64, "reached {got} MiB:\n{stdout}\n{stderr}");
    assert!(
        matches!(memory_events(&own)[..], [(l, 1, _)] if l == 64 << 20),
        "{stderr}"
    );
    limits::assert_gone(&run_id(&own).unwrap());
}
