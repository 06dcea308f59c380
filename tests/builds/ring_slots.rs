//! A run's ring slot outlives neither its lockrun nor its processes: the
//! slot of a run whose lockrun was killed and whose processes are all gone
//! is the next run's at once, while a run still being set up (registered,
//! its cgroup still empty) and a killed run whose processes live on keep
//! theirs (`lockrun::bpf`, issue 55 item 3).
//!
//! Filling 1024 slots with killed runs takes no 1024 runs: the test writes
//! the build's `SLOT_OWNERS` itself, naming cgroups it made (one with a
//! process, one emptied, one removed). It uses a build of its own
//! (`LOCKRUN_TEST_BUILD_ID`, [`TestBuild`]): the shared build's slots are
//! untouched. Judged from outside: `lockrun`'s exit status and summary, the
//! audit log, a listener that must receive nothing, and the slot owners.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use aya::maps::{HashMap, Map, MapData};

use crate::support::{build, net, python};
use build::TestBuild;
use net::{assert_eperm, TcpSink};

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");
const SLOTS: u32 = lockrun_common::MAX_RING_SLOTS;

/// Run by the test in a process of its own, with the test's build: a run
/// registered in the hooks, whose cgroup has no process yet — a run being
/// set up. Says `READY <cgroup id>`, then on `probe <port>` tries a TCP
/// connect to `127.0.0.1:<port>` from its cgroup (`PROBE <result>`), and on
/// `end` tears down and says how many refusals it was told (`FINISHED <n>`).
#[test]
#[ignore = "helper process for ring_slots_of_killed_runs_are_taken_over_and_live_runs_keep_theirs"]
fn helper_a_run_being_set_up() {
    if std::env::var_os("LOCKRUN_TEST_BUILD_ID").is_none() {
        return;
    }
    let run = net::Run::start("helper_a_run_being_set_up", &[], &[]).unwrap();
    println!("READY {}", run.cgroup_id());
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        if let Some(port) = line.strip_prefix("probe ") {
            println!("PROBE {}", run.probe(&["tcp", "127.0.0.1", port]));
        } else if line == "end" {
            break;
        }
    }
    println!("FINISHED {}", run.finish().len());
}

/// The helper's process; killed when dropped, if the test fails first.
struct LiveRun {
    child: Child,
    stdin: ChildStdin,
    out: std::io::Lines<std::io::BufReader<ChildStdout>>,
    cgroup_id: u64,
}

impl LiveRun {
    fn start(build: &TestBuild) -> Self {
        // The helper's test name, its module path without the crate's name.
        let (_, module) = module_path!().split_once("::").unwrap();
        let helper = format!("{module}::helper_a_run_being_set_up");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &helper, "--ignored", "--nocapture"])
            .env("LOCKRUN_TEST_BUILD_ID", &build.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut run = Self {
            child,
            stdin,
            out,
            cgroup_id: 0,
        };
        run.cgroup_id = run.said("READY").parse().unwrap();
        run
    }

    /// The rest of the next line the helper begins with `word`.
    fn said(&mut self, word: &str) -> String {
        let prefix = format!("{word} ");
        for line in self.out.by_ref() {
            if let Some(rest) = line.unwrap().strip_prefix(&prefix) {
                return rest.to_owned();
            }
        }
        panic!("the helper ended before saying {word}");
    }

    fn tell(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A killed run's cgroup, in the build's parent: made by the test, with a
/// process in it until [`Self::end_process`]. Removed when dropped.
struct KilledRun {
    path: PathBuf,
    process: Option<Child>,
    cgroup_id: u64,
}

impl KilledRun {
    fn new(build: &TestBuild, name: &str) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let path = build
            .parent()
            .join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&path).unwrap();
        let cgroup_id = std::fs::metadata(&path).unwrap().ino();
        let process = Command::new("sleep").arg("60").spawn().unwrap();
        std::fs::write(path.join("cgroup.procs"), process.id().to_string()).unwrap();
        Self {
            path,
            process: Some(process),
            cgroup_id,
        }
    }

    /// Its last process ends: the cgroup is empty.
    fn end_process(&mut self) {
        let mut p = self.process.take().unwrap();
        p.kill().unwrap();
        p.wait().unwrap();
        let events = self.path.join("cgroup.events");
        for _ in 0..500 {
            if std::fs::read_to_string(&events)
                .unwrap()
                .contains("populated 0")
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{} stays populated", self.path.display());
    }
}

impl Drop for KilledRun {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A cgroup id no cgroup has any more: one made and removed.
fn gone_cgroup(build: &TestBuild) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let path = build.parent().join(format!("gone-{}", std::process::id()));
    std::fs::create_dir(&path).unwrap();
    let id = std::fs::metadata(&path).unwrap().ino();
    std::fs::remove_dir(&path).unwrap();
    id
}

/// The build's `SLOT_OWNERS`: slot → cgroup id of the run holding it.
fn slot_owners(build: &TestBuild) -> HashMap<MapData, u32, u64> {
    let data = MapData::from_pin(build.dir().join("SLOT_OWNERS")).unwrap();
    HashMap::try_from(Map::HashMap(data)).unwrap()
}

fn owners_now(build: &TestBuild) -> Vec<(u32, u64)> {
    let mut all: Vec<(u32, u64)> = slot_owners(build).iter().map(Result::unwrap).collect();
    all.sort_unstable();
    all
}

/// A scratch dir (worktree, state dir, audit log), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("lockrun-slots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["wt", "state"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        Self(dir)
    }

    /// `lockrun … -- python3 -c SCRIPT` with the test's build.
    fn lockrun(&self, build: &TestBuild, script: &str) -> std::process::Output {
        let _ = std::fs::remove_file(self.0.join("audit.jsonl"));
        Command::new(BIN)
            .arg("--worktree")
            .arg(self.0.join("wt"))
            .arg("--state-dir")
            .arg(self.0.join("state"))
            .arg("--audit-log")
            .arg(self.0.join("audit.jsonl"))
            .args(["--", python::python3(), "-c", script])
            .env("LOCKRUN_TEST_BUILD_ID", &build.0)
            .env("HOME", &self.0)
            .current_dir(self.0.join("wt"))
            .output()
            .unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn ring_slots_of_killed_runs_are_taken_over_and_live_runs_keep_theirs() {
    const T: &str = "ring_slots_of_killed_runs_are_taken_over_and_live_runs_keep_theirs";
    if !nix::unistd::Uid::effective().is_root() {
        net::skip(T, "needs root (cgroup v2 + bpf)");
        return;
    }
    // Dropped last: the runs and cgroups below are gone by then.
    let build = TestBuild::new("slots");
    let scratch = Scratch::new();
    let sink = TcpSink::bind("127.0.0.1");
    let connect = format!(
        "import errno, socket\n\
         try:\n    socket.create_connection(('127.0.0.1', {}), timeout=5)\n    print('connected')\n\
         except OSError as e:\n    print(errno.errorcode.get(e.errno, e.errno))",
        sink.port()
    );

    // A run being set up: registered, with a slot, its cgroup empty.
    let mut live = LiveRun::start(&build);
    let held = owners_now(&build);
    assert_eq!(held.len(), 1, "{held:?}");
    let (live_slot, owner) = held[0];
    assert_eq!(owner, live.cgroup_id);

    // Every other slot: a run whose lockrun was killed, whose process
    // lives on.
    let mut killed = KilledRun::new(&build, "killed");
    let mut owners = slot_owners(&build);
    for slot in (0..SLOTS).filter(|s| *s != live_slot) {
        owners.insert(slot, killed.cgroup_id, 0).unwrap();
    }
    let out = scratch.lockrun(&build, &connect);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains(&format!("all {SLOTS} slots are held")),
        "{stderr}"
    );
    let expected: Vec<(u32, u64)> = (0..SLOTS)
        .map(|s| {
            let o = if s == live_slot {
                live.cgroup_id
            } else {
                killed.cgroup_id
            };
            (s, o)
        })
        .collect();
    assert_eq!(
        owners_now(&build),
        expected,
        "no slot of a live run, or of a killed run with a process, is taken"
    );

    // The killed run's process ends: its cgroup is empty. A new run takes
    // over its slot; so does the next, when every slot names a run whose
    // cgroup is gone. Each refusal of theirs is itemized.
    killed.end_process();
    let gone = gone_cgroup(&build);
    for owner in [None, Some(gone)] {
        if let Some(gone) = owner {
            for slot in (0..SLOTS).filter(|s| *s != live_slot) {
                owners.insert(slot, gone, 0).unwrap();
            }
        }
        let what = if owner.is_some() { "gone" } else { "empty" };
        let out = scratch.lockrun(&build, &connect);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "cgroup {what}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "EPERM",
            "{stderr}"
        );
        assert_eq!(sink.received(), None, "the listener must receive nothing");
        assert!(
            stderr.contains(&format!(
                "lockrun: 1 connection refused: 127.0.0.1:{} (python3)",
                sink.port()
            )),
            "cgroup {what}: {stderr}"
        );
        let events = net::read_events(&scratch.0.join("audit.jsonl"));
        assert!(
            events.iter().any(|e| e.hook == "connect4"
                && e.destination.to_string() == sink.addr.to_string()),
            "cgroup {what}: {events:#?}"
        );
        let now = owners_now(&build);
        assert!(
            now.contains(&(live_slot, live.cgroup_id)),
            "the live run keeps its slot: {now:?}"
        );
    }

    // The live run's slot still carries its refusals.
    live.tell(&format!("probe {}", sink.port()));
    assert_eperm("the live run's probe", &live.said("PROBE"));
    assert_eq!(sink.received(), None);
    live.tell("end");
    assert_eq!(live.said("FINISHED"), "1", "the live run's one refusal");
}
