//! The run's task limit (`run.max_tasks`, cgroup `pids.max`): a fork or
//! clone beyond it gets `EAGAIN`, the kernel counts each, and the run
//! shows them; a fork bomb stops at the run while the machine forks on.
//! Judged from outside: the kernel's own counters (`pids.events`,
//! `pids.peak`) and the audit log, each beside a control.

use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lockrun::audit::Event;
use lockrun::cgroup::RanOut;

use crate::support::{limits, python, skip, world};
use limits::{records, run_id, text, TestCgroup};
use python::python3;
use world::{s, World};

/// Forks children that wait on a pipe until it has `want` of them or a
/// fork fails; prints `forked N errno NAME`.
const FORKS: &str = r"
import errno, os, sys
want = int(sys.argv[1])
r, w = os.pipe()
kids, err = [], None
for _ in range(want):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    kids.append(pid)
print('forked', len(kids), 'errno', errno.errorcode.get(err, err), flush=True)
os.close(w)
for k in kids:
    os.waitpid(k, 0)
";

fn policy(w: &World, max_tasks: &str) -> PathBuf {
    let p = w.root.join(format!("tasks-{max_tasks}.toml"));
    std::fs::write(&p, format!("[run]\nmax_tasks = {max_tasks}\n")).unwrap();
    p
}

/// The cgroup that holds the run's `pids.max`, wherever the pids
/// controller is on this host (a v1 hierarchy, or the run's own unified
/// cgroup).
fn limit_cgroup(run_id: &str) -> Option<PathBuf> {
    use lockrun::cgroup::v1::{self, Hierarchy};
    if v1::mount(Hierarchy::Pids).is_some() {
        // Beneath the cgroup lockrun is in: the test's.
        return Some(v1::own(Hierarchy::Pids).ok()?.join("lockrun").join(run_id));
    }
    lockrun::cgroup::find_run(run_id).ok().flatten()
}

/// The run's `task_limit` events: each the limit, the forks refused, and
/// where the tasks ran out.
fn task_limit_events(log: &Path) -> Vec<(u32, u64, RanOut)> {
    records(log)
        .into_iter()
        .filter_map(|e| match e {
            Event::TaskLimit {
                limit,
                refused,
                ran_out,
            } => Some((limit, refused, ran_out)),
            _ => None,
        })
        .collect()
}

/// [`FORKS`] asking for 40 children in a run under `max_tasks`, logged to
/// `log`: its stdout and lockrun's stderr, once lockrun exited 0.
fn forty_forks(w: &World, max_tasks: &str, log: &Path) -> (String, String) {
    let limit = policy(w, max_tasks);
    let out = w.run(
        &["--policy", s(&limit), "--audit-log", s(log)],
        &[python3(), "-c", FORKS, "40"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn a_fork_beyond_the_task_limit_gets_eagain_and_is_counted_and_shown() {
    if !limits::require(
        "a_fork_beyond_the_task_limit_gets_eagain_and_is_counted_and_shown",
        lockrun::cgroup::pids::available(),
    ) {
        return;
    }
    let w = World::new("tasks-limit");
    let log = w.root.join("audit.jsonl");
    let (stdout, stderr) = forty_forks(&w, "16", &log);
    // The python process is one task: fifteen children fill the sixteen,
    // and the sixteenth fork is refused.
    assert_eq!(stdout.trim(), "forked 15 errno EAGAIN", "{stderr}");
    assert!(
        stderr.contains(
            "lockrun: 1 fork or thread refused (EAGAIN): the run had reached its limit of 16 tasks"
        ),
        "{stderr}"
    );
    // The kernel's count (pids.events), read by lockrun from outside.
    let events = records(&log);
    assert!(
        events.contains(&Event::TaskLimit {
            limit: 16,
            refused: 1,
            ran_out: RanOut::AtTheRunsLimit,
        }),
        "{events:?}"
    );
    limits::assert_gone(&run_id(&log).unwrap());
    // What `lockrun audit` suggests.
    let report = limits::audit(world::BIN, &log);
    assert!(
        report.contains("max_tasks = 32") && report.contains("the run's limit of 16 tasks"),
        "{report}"
    );

    // Control: the same forks under a limit above them, and outside.
    let log = w.root.join("audit-control.jsonl");
    let (stdout, stderr) = forty_forks(&w, "64", &log);
    assert_eq!(stdout.trim(), "forked 40 errno None", "{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    assert!(
        !records(&log)
            .iter()
            .any(|e| matches!(e, Event::TaskLimit { .. })),
        "no refusal, no event"
    );
    let outside = std::process::Command::new(python3())
        .args(["-c", FORKS, "40"])
        .output()
        .unwrap();
    assert_eq!(text(&outside).0.trim(), "forked 40 errno None");
}

#[test]
fn a_fork_bomb_stops_at_the_runs_limit_while_the_machine_forks_on() {
    if !limits::require(
        "a_fork_bomb_stops_at_the_runs_limit_while_the_machine_forks_on",
        lockrun::cgroup::pids::available(),
    ) {
        return;
    }
    let w = World::new("tasks-bomb");
    let log = w.root.join("audit.jsonl");
    let limit = policy(&w, "64");
    // The bomb, started by the command's one fork, then the command waits
    // without forking (bash retries a refused fork, so the run stays at its
    // limit); its end ends the run, whose teardown kills what is left of
    // the bomb. Not `f; exec sleep 3`: there the command forks twice, once
    // for each side of `f|f`, and on a busy machine the first side's bomb
    // filled the run before the second fork, which bash gave up on after
    // its retries, failing the command.
    let child = w
        .cmd(
            &["--policy", s(&limit), "--audit-log", s(&log)],
            &["bash", "-c", "f(){ f|f& }; f & exec sleep 3"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let run_id = limits::started(&log);
    // The run id is logged before the run's cgroup is made.
    let (cg, max) = loop {
        let found = limit_cgroup(&run_id).and_then(|cg| {
            let max = std::fs::read_to_string(cg.join("pids.max")).ok()?;
            Some((cg, max.trim().parse::<u64>().ok()?))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no pids.max for the run"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |f: &str| -> Option<u64> {
        std::fs::read_to_string(cg.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    // From outside: the run's tasks reach the limit and no further.
    let mut peak = 0;
    while start.elapsed() < Duration::from_secs(10) {
        match read("pids.peak") {
            Some(p) => peak = p,
            None => break,
        }
        if peak >= max {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(peak, max, "the bomb should fill the run's {max} tasks");
    // Control: while the run is full, a fork outside it succeeds.
    let outside = std::process::Command::new("true").status().unwrap();
    assert!(outside.success());
    let refused_so_far = std::fs::read_to_string(cg.join("pids.events")).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let refused = task_limit_events(&log);
    assert!(
        matches!(refused[..], [(64, n, RanOut::AtTheRunsLimit)] if n > 0),
        "{refused:?}; pids.events during the run: {refused_so_far}\n{stderr}"
    );
    assert!(
        stderr.contains("forks or threads refused (EAGAIN)"),
        "{stderr}"
    );
    limits::assert_gone(&run_id);
}

/// A run's limits, wherever the host has them (the run cgroup's own
/// `pids.max` and `memory.max` on a pure v2 host, cgroups of the run's own
/// in the v1 hierarchies of a hybrid one), are removed by `lockrun gc` with
/// the run's cgroup once its lockrun is gone, and a live run's are kept.
/// On a hybrid host, besides: the v1 cgroups whose run's cgroup is gone (a
/// lockrun killed between removing the one and the other), at the root's
/// `lockrun/` and beneath a cgroup a lockrun ran in, are removed, and those
/// of a run whose cgroup exists are kept. A pure v2 host has none such: a
/// limit there is a file of the run's cgroup.
#[test]
fn gc_removes_limit_cgroups_whose_run_is_gone_and_no_other() {
    use lockrun::cgroup::v1::{self, Hierarchy};
    let w = World::new("tasks-gc");
    let pid = std::process::id();
    let runs = AgedRuns::new(pid);

    let orphan = format!("tasks-gc-orphan-{pid}");
    let nested_orphan = format!("tasks-gc-nested-orphan-{pid}");
    let live = format!("tasks-gc-live-{pid}");
    // The control's run cgroup exists (young: gc's grace keeps it).
    let live_cg = lockrun::bpf::shared::build_parent().unwrap().join(&live);
    std::fs::create_dir_all(&live_cg).unwrap();
    // Per v1 hierarchy: the root's `lockrun/`, and a `lockrun/` beneath a
    // cgroup a lockrun ran in (the test's own, as a CI job's would be).
    let mut tops = Vec::new();
    for h in Hierarchy::ALL {
        let Some(mount) = v1::mount(h) else {
            continue;
        };
        let top = mount.join("lockrun");
        let _ = std::fs::create_dir(&top);
        for id in [&orphan, &live] {
            std::fs::create_dir(top.join(id)).unwrap();
        }
        let callers = mount.join(format!("lockrun-test-gc-{pid}"));
        let nested = callers.join("lockrun");
        std::fs::create_dir_all(nested.join(&nested_orphan)).unwrap();
        tops.push((h, top, callers));
    }
    let out = std::process::Command::new(world::BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "3600"])
        .env("HOME", &w.home)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    let left: Vec<[bool; 4]> = tops
        .iter()
        .map(|(_, top, callers)| {
            [
                top.join(&orphan).exists(),
                callers.join("lockrun").join(&nested_orphan).exists(),
                callers.join("lockrun").exists(),
                top.join(&live).exists(),
            ]
        })
        .collect();
    for (_, top, callers) in &tops {
        let _ = std::fs::remove_dir(top.join(&orphan));
        let _ = std::fs::remove_dir(top.join(&live));
        let _ = std::fs::remove_dir(callers.join("lockrun").join(&nested_orphan));
        let _ = std::fs::remove_dir(callers.join("lockrun"));
        let _ = std::fs::remove_dir(callers);
    }
    let _ = std::fs::remove_dir(&live_cg);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    runs.judge(&stdout);

    for ((h, top, callers), [orphan_left, nested_left, nested_parent_left, live_left]) in
        tops.iter().zip(left)
    {
        assert!(!orphan_left, "{h:?}: {stdout}");
        assert!(!nested_left, "{h:?}: {stdout}");
        assert!(
            !nested_parent_left,
            "{h:?}: an emptied lockrun/ beneath a caller's cgroup stays: {stdout}"
        );
        for (id, at) in [(&orphan, top), (&nested_orphan, &callers.join("lockrun"))] {
            let expected = format!(
                "reaped the {} cgroup of run {id} ({}): its run's cgroup is gone",
                h.what(),
                at.join(id).display()
            );
            assert!(stdout.contains(&expected), "{expected}\n{stdout}");
        }
        assert!(
            live_left,
            "{h:?}: a run whose cgroup exists keeps its limits: {stdout}"
        );
    }
    if tops.is_empty() {
        // Pure v2: no limit has a cgroup of its own to be orphaned.
        assert!(!stdout.contains("-limit cgroup of run"), "{stdout}");
    }
}

/// Two runs made as lockrun makes them, each with both limits, aged past
/// gc's grace: one whose lockrun is gone (a pid and start time that never
/// match, in this pid namespace), left as a killed lockrun leaves it; one
/// whose lockrun (this test) is alive.
struct AgedRuns {
    dead: String,
    dead_limits: Vec<PathBuf>,
    live: String,
    live_limits: Vec<PathBuf>,
    kept: lockrun::cgroup::RunCgroup,
}

impl AgedRuns {
    fn new(pid: u32) -> Self {
        let limited = |id: &str| {
            use lockrun::policy::{MemoryLimit, TaskLimit};
            let mut run =
                lockrun::cgroup::RunCgroup::create(lockrun::bpf::shared::build_id(), id).unwrap();
            run.limit_tasks(id, TaskLimit::At(16)).unwrap();
            run.limit_memory(id, MemoryLimit::Bytes(64 << 20)).unwrap();
            let ok = std::process::Command::new("touch")
                .args(["-d", "2000-01-01", s(run.path())])
                .status()
                .unwrap();
            assert!(ok.success());
            run
        };
        let dead = format!("tasks-gc-dead-run-{pid}");
        let run = limited(&dead);
        let ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
        lockrun::sys::fsetxattr(
            std::fs::File::open(run.path()).unwrap().as_fd(),
            c"trusted.lockrun.owner",
            format!("1 1 {ns}\n").as_bytes(),
        )
        .unwrap();
        let dead_limits = limits_of(&dead, run.path());
        run.leave();
        let live = format!("tasks-gc-live-run-{pid}");
        let kept = limited(&live);
        let live_limits = limits_of(&live, kept.path());
        assert_eq!(
            (dead_limits.len(), live_limits.len()),
            (2, 2),
            "{dead_limits:?} {live_limits:?}"
        );
        Self {
            dead,
            dead_limits,
            live,
            live_limits,
            kept,
        }
    }

    /// After gc, which said `stdout`: the dead lockrun's run, its cgroup
    /// and its limits, gone; the live one's kept (then removed).
    fn judge(self, stdout: &str) {
        let dead_left: Vec<_> = self.dead_limits.iter().filter(|p| p.exists()).collect();
        let live_left = self.live_limits.iter().filter(|p| p.exists()).count();
        let dead_cgroup_left = lockrun::cgroup::find_run(&self.dead).unwrap();
        drop(self.kept);
        limits::assert_gone(&self.live);
        let reaped = format!(
            "reaped the cgroup of run {}: its lockrun is gone",
            self.dead
        );
        assert!(stdout.contains(&reaped), "{stdout}");
        assert_eq!(dead_cgroup_left, None, "{stdout}");
        assert!(dead_left.is_empty(), "{dead_left:?} left: {stdout}");
        limits::assert_gone(&self.dead);
        assert_eq!(live_left, 2, "{:?}: {stdout}", self.live_limits);
    }
}

/// Where run `id`'s two limits are, its cgroup at `run`: the run
/// cgroup's own `pids.max` and `memory.max` where the unified hierarchy has
/// the controller, else its cgroup in that v1 hierarchy.
fn limits_of(id: &str, run: &Path) -> Vec<PathBuf> {
    use lockrun::cgroup::v1::{self, Hierarchy};
    Hierarchy::ALL
        .into_iter()
        .filter_map(|h| {
            let own = run.join(format!("{}.max", h.controller()));
            if own.exists() {
                Some(own)
            } else {
                v1::find_run(h, id)
            }
        })
        .collect()
}

/// The task limit on lockrun's caller (a CI job's, a service's), where its
/// runs' cgroups can be beneath the caller's: in a v1 pids hierarchy, a
/// run's task-limit cgroup is beneath the one lockrun is in, so that limit
/// holds the run too. lockrun runs in a pids cgroup of the test's own
/// limited to 40 tasks (lockrun's own threads and its watchdog count there
/// too), with a run limit of its own of 64: a run forking 60 children is
/// refused (`EAGAIN`) short of them, the test's cgroup's peak at its limit,
/// and lockrun says the tasks ran out above the run, not at its limit.
/// With the run's cgroup beside lockrun's (`<pids>/lockrun/<run-id>`, as
/// before), the run forked all 60.
///
/// On a pure v2 host it does not hold (docs/promises.md, `#tasks`: the
/// run's cgroup is beneath its build's parent, which no cgroup of the
/// caller's is above), and the test shows that instead: the same run forks
/// all 60, no fork refused in the caller's cgroup, whose peak stays below
/// its limit, and only the run's own limit holds it (a run limited to 16
/// there is refused its sixteenth).
///
/// Control: a run forking 10 in the same cgroup forks them all. Each
/// leaves nothing beneath the test's cgroup.
#[test]
fn the_task_limit_on_lockruns_caller_holds_its_runs_too() {
    use lockrun::cgroup::v1::Hierarchy;
    let test = "the_task_limit_on_lockruns_caller_holds_its_runs_too";
    let Some(caller) = TestCgroup::limited(Hierarchy::Pids, "lockrun-test-caller-tasks", 40) else {
        skip::skip(
            test,
            "no pids controller, v1 or unified, to make a cgroup of the test's own with",
        );
        return;
    };
    let w = World::new("tasks-caller-limit");
    let wrapper = caller.wrapper();
    let under = |max_tasks: &str, want: &str, log: &Path| {
        let out = w
            .cmd_under(
                &wrapper,
                &["--policy", s(&policy(&w, max_tasks)), "--audit-log", s(log)],
                &[python3(), "-c", FORKS, want],
            )
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        (stdout, stderr)
    };

    // Control: within the caller's limit, every fork succeeds.
    let control_log = w.root.join("control.jsonl");
    let (stdout, stderr) = under("64", "10", &control_log);
    assert_eq!(stdout.trim(), "forked 10 errno None", "{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    assert!(
        !caller.path.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&control_log).unwrap());

    let log = w.root.join("audit.jsonl");
    let (stdout, stderr) = under("64", "60", &log);
    if caller.unified {
        // Not held: every fork, none refused in the caller's cgroup.
        let (peak, refused) = (
            caller.read("pids.peak"),
            caller.counter("pids.events", "max"),
        );
        assert_eq!(stdout.trim(), "forked 60 errno None", "{stderr}");
        assert!(!stderr.contains("refused"), "{stderr}");
        assert!(
            peak < 40 && refused == 0,
            "the caller's cgroup: peak {peak}, {refused} forks refused at its limit"
        );
        assert!(task_limit_events(&log).is_empty());
        limits::assert_gone(&run_id(&log).unwrap());
        // The run's own limit holds it, there too.
        let own = w.root.join("own.jsonl");
        let (stdout, stderr) = under("16", "40", &own);
        assert_eq!(stdout.trim(), "forked 15 errno EAGAIN", "{stderr}");
        assert!(
            matches!(
                task_limit_events(&own)[..],
                [(16, 1, RanOut::AtTheRunsLimit)]
            ),
            "{stderr}"
        );
        limits::assert_gone(&run_id(&own).unwrap());
        return;
    }
    let forked: Option<u32> = stdout
        .strip_prefix("forked ")
        .and_then(|r| r.split_whitespace().next()?.parse().ok());
    assert!(
        matches!(forked, Some(n) if n < 40) && stdout.trim_end().ends_with("errno EAGAIN"),
        "{stdout}\n{stderr}"
    );
    // The caller's cgroup, read from outside: its tasks reached its limit.
    assert_eq!(caller.read("pids.peak"), 40, "the caller's cgroup's peak");
    assert!(
        stderr.contains(
            "refused (EAGAIN): tasks ran out above the run (a cgroup's lockrun is in, e.g. its caller's), which had not reached its own limit of 64"
        ),
        "{stderr}"
    );
    let events = task_limit_events(&log);
    assert!(
        matches!(events[..], [(64, n, RanOut::AboveTheRun)] if n > 0),
        "{events:?}"
    );
    assert!(
        !caller.path.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&log).unwrap());
}
