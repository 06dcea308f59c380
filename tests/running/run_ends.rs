//! The run ends with lockrun: `lockrun gc` and each run's start reap only
//! runs whose lockrun is gone, past the grace period.

use std::os::unix::fs::MetadataExt as _;
use std::process::Command;
use std::time::Duration;

use crate::support::python::python3;
use crate::support::world::{assert_absent, s, World, BIN};

#[test]
fn gc_reaps_only_dead_and_old_runs() {
    let w = World::new("gc");
    let [dead, young, alive] = stale_runs(&w);
    let out = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "3600"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // `gc` reads the young dir's owner too, to report it apart.
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("1 reaped, 1 running, 1 within the grace period"),
        "{report}"
    );
    assert_absent(&dead);
    assert!(young.exists(), "a young run dir was reaped");
    assert!(alive.exists(), "a live run dir was reaped");
    std::fs::remove_dir_all(w.state.join("runs")).unwrap();
}

/// Run cgroups no run dir accounts for (lockrun killed, its state dir
/// deleted): `gc` reaps, once older than the grace period, those whose
/// recorded lockrun is gone (killing what is in them) and an empty one with
/// no owner recorded. It leaves a live owner's, a young one, one whose
/// owner is in another pid namespace, and one with processes in it and no
/// owner recorded (an earlier lockrun's run may still be going).
#[test]
fn gc_reaps_run_cgroups_whose_lockrun_is_gone() {
    let w = World::new("gc-cgroups");
    let mut made = HandMadeCgroups::new();
    // A dead owner: a pid with a start time that never matches, in this
    // pid namespace; the same in another one cannot be judged from here.
    let ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    let dead = format!("1 1 {ns}\n");
    let dead_empty = made.add("dead-empty", Some(&dead), true);
    let dead_busy = made.add("dead-busy", Some(&dead), true);
    let mut killed = sleep_in(&dead_busy);
    made.add("young", Some(&dead), false);
    let elsewhere = made.add("elsewhere", Some(&format!("1 1 {}\n", ns + 1)), true);
    let unknown_empty = made.add("unknown-empty", None, true);
    let unknown_busy = made.add("unknown-busy", None, true);
    let mut spared = sleep_in(&unknown_busy);
    // Made as a run makes its cgroup: this test process is its owner.
    let live = lockrun::cgroup::RunCgroup::create(
        lockrun::bpf::shared::build_id(),
        &HandMadeCgroups::id("live"),
    )
    .unwrap();
    age(live.path());

    let out = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "3600"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let alive_after = spared.try_wait().unwrap().is_none();
    // Clean up before judging: the processes, and what gc left.
    let _ = spared.kill();
    let _ = spared.wait();
    let _ = killed.kill();
    let killed_status = killed.wait().unwrap();
    let live_kept = live.path().exists();
    let elsewhere_kept = elsewhere.exists();
    drop(live);
    let id = HandMadeCgroups::id;

    assert!(out.status.success(), "{out:?}");
    for k in ["dead-empty", "dead-busy", "unknown-empty"] {
        let reaped = format!("reaped the cgroup of run {}: its lockrun is gone", id(k));
        assert!(report.contains(&reaped), "{k}: {report}");
    }
    assert_absent(&dead_empty);
    assert_absent(&dead_busy);
    assert_absent(&unknown_empty);
    // The process in the dead owner's cgroup was killed by gc (SIGKILL,
    // from cgroup.kill), before the test's own kill could matter.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed_status),
        Some(9)
    );
    // Controls.
    assert!(live_kept, "a live lockrun's cgroup was reaped: {report}");
    assert!(
        alive_after,
        "a process in an unowned cgroup was killed: {report}"
    );
    assert!(elsewhere_kept, "{report}");
    let other_ns = format!(
        "kept the cgroup of run {}: its lockrun is in another pid namespace",
        id("elsewhere")
    );
    assert!(report.contains(&other_ns), "{report}");
    let kept = format!(
        "kept 1 run cgroup with processes in it whose lockrun is not recorded \
         (made by an earlier lockrun): {}",
        id("unknown-busy")
    );
    assert!(report.contains(&kept), "{report}");
    for k in ["young", "unknown-busy", "live"] {
        assert!(
            !report.contains(&format!("run {}:", id(k))),
            "{k}: {report}"
        );
    }
}

/// Run cgroups a test makes by hand in the build's parent, killed and
/// removed on every path.
struct HandMadeCgroups {
    parent: std::path::PathBuf,
    made: Vec<std::path::PathBuf>,
}

impl HandMadeCgroups {
    fn new() -> Self {
        let parent = lockrun::bpf::shared::build_parent().unwrap();
        std::fs::create_dir_all(&parent).unwrap();
        Self {
            parent,
            made: Vec::new(),
        }
    }

    fn id(k: &str) -> String {
        format!("gccg-{}-{k}", std::process::id())
    }

    /// A cgroup `k`, with `owner` as its recorded lockrun, aged if `old`.
    fn add(&mut self, k: &str, owner: Option<&str>, old: bool) -> std::path::PathBuf {
        let p = self.parent.join(Self::id(k));
        std::fs::create_dir(&p).unwrap();
        self.made.push(p.clone());
        if let Some(owner) = owner {
            let set = "import os,sys; os.setxattr(sys.argv[1], 'trusted.lockrun.owner', sys.argv[2].encode())";
            let ok = Command::new(python3())
                .args(["-c", set, s(&p), owner])
                .status()
                .unwrap();
            assert!(ok.success());
        }
        if old {
            age(&p);
        }
        p
    }
}

impl Drop for HandMadeCgroups {
    fn drop(&mut self) {
        for p in &self.made {
            let _ = std::fs::write(p.join("cgroup.kill"), "1");
            for _ in 0..250 {
                if std::fs::remove_dir(p).is_ok() || !p.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Date `p` back to 2000.
fn age(p: &std::path::Path) {
    let ok = Command::new("touch")
        .args(["-d", "2000-01-01", s(p)])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A `sleep 600` moved into the cgroup `cg`.
fn sleep_in(cg: &std::path::Path) -> std::process::Child {
    let child = Command::new("sleep").arg("600").spawn().unwrap();
    std::fs::write(cg.join("cgroup.procs"), child.id().to_string()).unwrap();
    child
}

/// The sweep a run makes at its start (which reads no owner of a young
/// dir) reaps the same: the dead and old run only.
#[test]
fn a_runs_start_reaps_only_dead_and_old_runs() {
    let w = World::new("gc-at-start");
    std::fs::write(w.wt.join("policy.toml"), "[run]\ngc_grace_secs = 3600\n").unwrap();
    let [dead, young, alive] = stale_runs(&w);
    let out = w
        .cmd(&["--policy", s(&w.wt.join("policy.toml"))], &["true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_absent(&dead);
    assert!(young.exists(), "a young run dir was reaped");
    assert!(alive.exists(), "a live run dir was reaped");
    std::fs::remove_dir_all(w.state.join("runs")).unwrap();
}

/// Three run dirs under `w`'s state dir: a dead and old one, a young one
/// with a dead owner, and an old one whose owner (this test) is alive.
fn stale_runs(w: &World) -> [std::path::PathBuf; 3] {
    let runs = w.state.join("runs");
    let dead = runs.join("000000000001-000000000-1");
    let young = runs.join("000000000002-000000000-2");
    let alive = runs.join("000000000003-000000000-3");
    for d in [&dead, &young, &alive] {
        std::fs::create_dir_all(d.join("tmp")).unwrap();
    }
    // A dead owner: a pid with a start time that never matches, named as
    // lockrun names an owner (a symlink to the owner line).
    std::os::unix::fs::symlink("1 1", dead.join("owner")).unwrap();
    std::os::unix::fs::symlink("1 1", young.join("owner")).unwrap();
    let me = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let started = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_owned();
    // As lockrun names its owner: a symlink to the owner line.
    std::os::unix::fs::symlink(format!("{me} {started}"), alive.join("owner")).unwrap();
    // Age the dead and alive dirs.
    for d in [&dead, &alive] {
        let ok = Command::new("touch")
            .args(["-d", "2000-01-01", s(d)])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    [dead, young, alive]
}

#[test]
fn a_run_sweeps_stale_run_dirs_past_the_grace_period() {
    let w = World::new("sweep");
    let stale = w.state.join("runs/000000000001-000000000-1");
    std::fs::create_dir_all(stale.join("tmp")).unwrap();
    std::os::unix::fs::symlink("1 1", stale.join("owner")).unwrap();
    let ok = Command::new("touch")
        .args(["-d", "2000-01-01", s(&stale)])
        .status()
        .unwrap();
    assert!(ok.success());
    let policy = w.root.join("p.toml");
    std::fs::write(&policy, "[run]\ngc_grace_secs = 3600\n").unwrap();
    let out = w.run(&["--policy", s(&policy)], &["true"]);
    assert!(out.status.success(), "{out:?}");
    assert_absent(&stale);
}
