//! Helpers for `tests/net_e2e.rs`: a world per test (worktree, state dir, home,
//! an "outside" dir and an audit log, all under one temp root), the real
//! `lockrun` binary running the python probe, and the judges that look from
//! outside: the audit log's `kernel_network` events for this run, and the
//! run's cgroup, pins and run dir, which must all be gone afterwards.
#![allow(clippy::missing_panics_doc)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lockrun::audit::{Event, KernelNetEvent, Record};

use super::python::python3;
pub use super::skip::skip;

pub const BIN: &str = env!("CARGO_BIN_EXE_lockrun");
pub const PROBE: &str = include_str!("net_e2e.py");

static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One test's world under `/tmp/lr-e2e-<pid>-<n>`.
pub struct World {
    pub test: &'static str,
    pub root: PathBuf,
    /// `--worktree`; the command's cwd.
    pub wt: PathBuf,
    /// `--state-dir`.
    pub state: PathBuf,
    /// `HOME` for lockrun.
    pub home: PathBuf,
    /// Beside the worktree, not writable by the run: outside sockets and files live here.
    pub outside: PathBuf,
    /// `--audit-log`.
    pub audit: PathBuf,
    /// `--policy`: no network but what `--allow-local` adds.
    pub policy: PathBuf,
}

impl World {
    /// `None` (after printing the skip) when this is not root.
    pub fn new(test: &'static str) -> Option<Self> {
        if !nix::unistd::Uid::effective().is_root() {
            skip(test, "needs root (cgroup v2, bpf, Landlock)");
            return None;
        }
        // Short: a unix socket in the run's TMPDIR must fit in sun_path (108 bytes).
        let root = PathBuf::from(format!(
            "/tmp/lr-e2e-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let w = Self {
            test,
            wt: root.join("wt"),
            state: root.join("state"),
            home: root.join("home"),
            outside: root.join("outside"),
            audit: root.join("audit.jsonl"),
            policy: root.join("policy.toml"),
            root,
        };
        for d in [&w.wt, &w.state, &w.home, &w.outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(
            &w.policy,
            "[filesystem]\nwritable = []\n\n[network]\nallow = []\n",
        )
        .unwrap();
        Some(w)
    }

    /// `lockrun --worktree WT --policy P --state-dir S --audit-log A [extra] -- argv`.
    pub fn cmd<S: AsRef<OsStr>>(&self, extra: &[String], argv: &[S]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--worktree")
            .arg(&self.wt)
            .arg("--policy")
            .arg(&self.policy)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--audit-log")
            .arg(&self.audit)
            .args(extra)
            .arg("--")
            .args(argv)
            .env("HOME", &self.home)
            .current_dir(&self.wt);
        c
    }

    /// Run the probe inside the real binary, the first op always `cgroup`.
    /// `None` (after the skip) when this lockrun has no eBPF object.
    pub fn probe(&self, allow_local: &[std::net::SocketAddr], ops: &[&[&str]]) -> Option<Outcome> {
        let extra: Vec<String> = allow_local
            .iter()
            .flat_map(|a| ["--allow-local".to_owned(), a.to_string()])
            .collect();
        let mut all: Vec<&[&str]> = vec![&["cgroup"]];
        all.extend_from_slice(ops);
        let out = self.cmd(&extra, &probe_argv(&all)).output().unwrap();
        if !self.ran(&out) {
            return None;
        }
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "lockrun failed: {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), all.len(), "one line per op: {lines:?}");
        let first = lines.remove(0);
        let (cg_path, cg_id) = first.split_once(' ').expect("cgroup line");
        let run_id = self.run_id();
        assert_eq!(
            cg_path,
            lockrun::cgroup::relative_path(lockrun::bpf::shared::build_id(), &run_id),
            "the command ran in the run's own cgroup"
        );
        let o = Outcome {
            lines,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            run_id,
            cgroup_id: cg_id.parse().unwrap(),
            events: self.events(),
        };
        assert_run_gone(&self.state, &o.run_id);
        Some(o)
    }

    /// Whether lockrun ran the command; a lockrun built without its eBPF
    /// object refuses (125) with that reason, which is the one allowed skip.
    pub fn ran(&self, out: &Output) -> bool {
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(125) && err.contains("built without its eBPF object") {
            skip(
                self.test,
                "lockrun was built without its eBPF object (`cargo xtask build`)",
            );
            return false;
        }
        true
    }

    /// The run id from this world's audit log (`run_start`); there is exactly one run.
    pub fn run_id(&self) -> String {
        let ids: Vec<String> = records(&self.audit)
            .into_iter()
            .filter_map(|r| match r.event {
                Event::RunStart { run_id, .. } => Some(run_id),
                _ => None,
            })
            .collect();
        assert_eq!(ids.len(), 1, "one run_start in {}", self.audit.display());
        ids.into_iter().next().unwrap()
    }

    pub fn events(&self) -> Vec<KernelNetEvent> {
        records(&self.audit)
            .into_iter()
            .filter_map(|r| match r.event {
                Event::KernelNetwork(k) => Some(k),
                _ => None,
            })
            .collect()
    }

    /// `lockrun gc --state-dir S --grace-secs 0`, once no test of this
    /// binary keeps an orphaned run on purpose (see [`ORPHAN_KEPT`]).
    pub fn gc(&self) -> Output {
        let _no_orphan_kept = ORPHAN_KEPT
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.run_gc()
    }

    /// [`gc`](Self::gc) by the test that keeps the orphan, holding the lock.
    pub fn gc_keeping(&self, _kept: &std::sync::RwLockWriteGuard<'_, ()>) -> Output {
        self.run_gc()
    }

    fn run_gc(&self) -> Output {
        Command::new(BIN)
            .args(["gc", "--grace-secs", "0", "--state-dir"])
            .arg(&self.state)
            .output()
            .unwrap()
    }
}

/// `lockrun gc --grace-secs 0` reaps every run cgroup whose lockrun is
/// gone, whichever state dir the run was in: so it should, as an orphan's
/// state dir may be gone too. A test that SIGKILLs its lockrun and expects
/// the run to go on until its own gc holds this for writing meanwhile: the
/// gc of another test of this binary finishing at the same time (each
/// `World` runs one when dropped) would reap that run under it.
pub static ORPHAN_KEPT: std::sync::RwLock<()> = std::sync::RwLock::new(());

impl Drop for World {
    fn drop(&mut self) {
        // A failed test may leave a run behind (a killed lockrun): reap it
        // before its files go, so nothing keeps running.
        let _ = self.gc();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// What one run of the probe left: one line per op (after `cgroup`), its
/// stderr, the run id, the run's cgroup id as seen from inside, and its kernel events.
pub struct Outcome {
    pub lines: Vec<String>,
    /// lockrun's own lines (its end-of-run summary) and the command's.
    pub stderr: String,
    pub run_id: String,
    pub cgroup_id: u64,
    pub events: Vec<KernelNetEvent>,
}

impl Outcome {
    /// A `kernel_network` event of this run: hook, destination and protocol.
    pub fn assert_event(&self, hook: &str, dest: &str, protocol: &str) {
        assert!(
            self.events.iter().any(|e| e.cgroup_id == self.cgroup_id
                && e.hook == hook
                && e.destination.to_string() == dest
                && e.protocol == protocol
                && e.pid != 0
                && !e.comm.is_empty()),
            "no {hook} {protocol} event for {dest} in cgroup {}: {:#?}",
            self.cgroup_id,
            self.events
        );
    }

    /// Exactly these events, no more: every refusal has its line, nothing
    /// else was refused — except glibc's probe of the name service cache
    /// daemon's socket, which every `getaddrinfo` makes (and the unix hook
    /// refuses even where no nscd runs); those must be just that.
    pub fn assert_events(&self, want: &[(&str, &str, &str)]) {
        for (hook, dest, proto) in want {
            self.assert_event(hook, dest, proto);
        }
        let (nscd, rest): (Vec<_>, Vec<_>) = self
            .events
            .iter()
            .partition(|e| e.destination.to_string() == NSCD);
        assert!(
            nscd.iter().all(|e| e.hook == "connect_unix"
                && e.protocol == "unix_stream"
                && e.cgroup_id == self.cgroup_id),
            "{nscd:#?}"
        );
        assert_eq!(rest.len(), want.len(), "{:#?}", self.events);
    }
}

/// glibc's nscd socket, as the unix hook reports it.
pub const NSCD: &str = "unix:/var/run/nscd/socket";

pub fn records(path: &Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line {l:?}: {e}")))
        .collect()
}

pub fn probe_argv(ops: &[&[&str]]) -> Vec<String> {
    let mut v = vec![python3().to_owned(), "-c".to_owned(), PROBE.to_owned()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            v.push(";".to_owned());
        }
        v.extend(op.iter().map(|s| (*s).to_owned()));
    }
    v
}

/// The same probe outside any sandbox (controls of the judge).
pub fn probe_outside(ops: &[&[&str]]) -> Vec<String> {
    let argv = probe_argv(ops);
    let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn run_cgroup(run_id: &str) -> PathBuf {
    lockrun::bpf::shared::build_parent().unwrap().join(run_id)
}

/// Nothing of the run is left: its cgroup, its run dir.
pub fn assert_run_gone(state: &Path, run_id: &str) {
    let cg = run_cgroup(run_id);
    assert!(!cg.exists(), "cgroup {} remains", cg.display());
    let dir = state.join("runs").join(run_id);
    assert!(!dir.exists(), "run dir {} remains", dir.display());
}

/// The refusal must be EPERM, exactly.
pub fn assert_eperm(what: &str, line: &str) {
    assert_eq!(line, "errno 1 EPERM", "{what}");
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A lockrun left running in the background; killed and reaped when dropped.
pub struct Background(pub std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Background {
    /// Wait (15 s at most) until `started` says the command is under way.
    /// `false` (after the skip) when lockrun refused for want of its eBPF
    /// object; any other early exit fails the test with lockrun's stderr
    /// (which must be piped).
    pub fn until_started(&mut self, w: &World, mut started: impl FnMut() -> bool) -> bool {
        let t = std::time::Instant::now();
        while !started() {
            if let Some(status) = self.0.try_wait().unwrap() {
                let mut stderr = Vec::new();
                std::io::Read::read_to_end(&mut self.0.stderr.take().unwrap(), &mut stderr)
                    .unwrap();
                let out = Output {
                    status,
                    stdout: Vec::new(),
                    stderr,
                };
                if !w.ran(&out) {
                    return false;
                }
                panic!(
                    "lockrun exited early: {status:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(15),
                "the command never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }
}

/// Poll `f` every 20 ms until it holds; fail after 15 s.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(15),
            "timed out: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
