//! The run's task limit (`run.max_tasks`, cgroup `pids.max`): a fork or
//! clone beyond it gets `EAGAIN`, the kernel counts each, and the run
//! shows them; a fork bomb stops at the run while the machine forks on.
//! Judged from outside: the kernel's own counters (`pids.events`,
//! `pids.peak`) and the audit log, each beside a control.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/limits.rs"]
mod limits;
#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/fs.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use limits::{records, run_id, text, TestCgroup};
use lockrun::audit::Event;
use lockrun::cgroup::RanOut;
use python::python3;
use support::{s, World};

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
    let report = limits::audit(support::BIN, &log);
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
    // ~15 s of retries, failing the command.
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

#[test]
fn gc_removes_limit_cgroups_whose_run_is_gone_and_no_other() {
    use lockrun::cgroup::v1::{self, Hierarchy};
    let test = "gc_removes_limit_cgroups_whose_run_is_gone_and_no_other";
    let w = World::new("tasks-gc");
    let pid = std::process::id();
    let orphan = format!("tasks-gc-orphan-{pid}");
    let nested_orphan = format!("tasks-gc-nested-orphan-{pid}");
    let live = format!("tasks-gc-live-{pid}");
    // The control's run cgroup exists (young: gc's grace keeps it).
    let live_cg = lockrun::cgroup::build_parent().unwrap().join(&live);
    std::fs::create_dir_all(&live_cg).unwrap();
    // Per hierarchy: the root's `lockrun/`, and a `lockrun/` beneath a
    // cgroup a lockrun ran in (the test's own, as a CI job's would be).
    let mut tops = Vec::new();
    for h in Hierarchy::ALL {
        let Some(mount) = v1::mount(h) else {
            // On a pure cgroup v2 host the limit is the run cgroup's own
            // file, removed with it: there is no cgroup of its own to leave.
            support::skip(
                test,
                &format!(
                    "no v1 {} hierarchy here, so no limit cgroup of a run's own there",
                    h.controller()
                ),
            );
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
    let out = std::process::Command::new(support::BIN)
        .args(["gc", "--state-dir", s(&w.state)])
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
}

/// A run's task-limit cgroup is beneath the one lockrun is in, so a task
/// limit on lockrun's caller (a CI job's, a service's) holds the run too.
/// lockrun runs in a pids cgroup of the test's own limited to 40 tasks
/// (lockrun's own threads and its watchdog count there too), with a run
/// limit of its own of 64: a run forking 60 children is refused (`EAGAIN`)
/// short of them, the test's cgroup's peak at its limit, and lockrun says
/// the tasks ran out above the run, not at its limit. Control: a run
/// forking 10 in the same cgroup forks them all. Each leaves nothing
/// beneath the test's cgroup. With the run's cgroup beside lockrun's
/// (`<pids>/lockrun/<run-id>`, as before), the run forked all 60.
#[test]
fn the_task_limit_on_lockruns_caller_holds_its_runs_too() {
    use lockrun::cgroup::v1::Hierarchy;
    let test = "the_task_limit_on_lockruns_caller_holds_its_runs_too";
    let Some(caller) = TestCgroup::new(
        Hierarchy::Pids,
        "lockrun-test-caller-tasks",
        &[("pids.max", "40".to_owned())],
    ) else {
        skip::skip(
            test,
            "no v1 pids hierarchy to make a cgroup of the test's own in",
        );
        return;
    };
    let w = World::new("tasks-caller-limit");
    let limit = policy(&w, "64");
    let wrapper = caller.wrapper();
    let under = |want: &str, log: &Path| {
        let out = w
            .cmd_under(
                &wrapper,
                &["--policy", s(&limit), "--audit-log", s(log)],
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
    let (stdout, stderr) = under("10", &control_log);
    assert_eq!(stdout.trim(), "forked 10 errno None", "{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    assert!(
        !caller.0.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&control_log).unwrap());

    let log = w.root.join("audit.jsonl");
    let (stdout, stderr) = under("60", &log);
    let forked: Option<u32> = stdout
        .strip_prefix("forked ")
        .and_then(|r| r.split_whitespace().next()?.parse().ok());
    assert!(
        matches!(forked, Some(n) if n < 40) && stdout.trim_end().ends_with("errno EAGAIN"),
        "{stdout}\n{stderr}"
    );
    // The caller's cgroup, read from outside: its tasks reached its limit.
    let peak = std::fs::read_to_string(caller.0.join("pids.peak")).unwrap();
    assert_eq!(peak.trim(), "40", "the caller's cgroup's peak");
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
        !caller.0.join("lockrun").exists(),
        "left beneath the caller's cgroup"
    );
    limits::assert_gone(&run_id(&log).unwrap());
}
