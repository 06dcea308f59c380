//! Helpers for the escape tests that drive the real binary: a fresh state
//! dir, worktree, home and outside dirs per test, the real binary, a python
//! probe that reports the errno it got; a process outside, a lockrun in the
//! background, and the waits and judges the tests share.
#![allow(clippy::unused_self)]
// A pid fits an i32 (`pid_max` is at most 2^22).
#![allow(clippy::cast_possible_wrap)]

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::python::python3;
pub use super::skip::skip;

pub const BIN: &str = env!("CARGO_BIN_EXE_lockrun");
pub const PROBE: &str = include_str!("probe.py");
/// The probe of the scope tests: processes, groups and abstract sockets.
pub const SCOPE_PROBE: &str = include_str!("scope_probe.py");

/// One test's world, in `/tmp/lockrun-test-<name>-<pid>`, removed whole when it is
/// dropped (no parent dir shared by the tests is left behind).
pub struct World {
    pub root: PathBuf,
    /// The run's worktree.
    pub wt: PathBuf,
    /// `--state-dir`.
    pub state: PathBuf,
    /// `HOME` for lockrun: the secret floor lives here.
    pub home: PathBuf,
    /// A data dir the command must not write.
    pub data: PathBuf,
    /// Another agent's worktree.
    pub other: PathBuf,
}

impl World {
    pub fn new(name: &str) -> Self {
        let root = PathBuf::from(format!("/tmp/lockrun-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let w = Self {
            wt: root.join("wt"),
            state: root.join("state"),
            home: root.join("home"),
            data: root.join("data"),
            other: root.join("agents/bob/repo"),
            root,
        };
        for d in [&w.wt, &w.state, &w.home, &w.data, &w.other] {
            std::fs::create_dir_all(d).unwrap();
        }
        w
    }

    /// `lockrun --worktree WT --state-dir STATE [extra] -- argv`, HOME set to the test home.
    pub fn cmd<S: AsRef<OsStr>>(&self, extra: &[&str], argv: &[S]) -> Command {
        self.cmd_under::<&str, S>(&[], extra, argv)
    }

    /// [`cmd`](Self::cmd) started by `wrapper`, a program and its
    /// arguments that go on to exec lockrun (`setpriv`, a pty, a mount
    /// namespace).
    pub fn cmd_under<W: AsRef<OsStr>, S: AsRef<OsStr>>(
        &self,
        wrapper: &[W],
        extra: &[&str],
        argv: &[S],
    ) -> Command {
        let mut c = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        c.arg("--worktree")
            .arg(&self.wt)
            .arg("--state-dir")
            .arg(&self.state)
            .args(extra)
            .arg("--")
            .args(argv)
            .env("HOME", &self.home)
            .current_dir(&self.wt);
        c
    }

    pub fn run<S: AsRef<OsStr>>(&self, extra: &[&str], argv: &[S]) -> Output {
        self.cmd(extra, argv).output().unwrap()
    }

    /// Run the probe inside; one result line per op. Asserts lockrun exited 0.
    pub fn probe(&self, extra: &[&str], ops: &[&[&str]]) -> Vec<String> {
        let out = self.run(extra, &probe_argv(ops));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "lockrun failed: {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        self.assert_no_run_dirs();
        stdout.lines().map(str::to_owned).collect()
    }

    /// The calls the supervisor refused and recorded in the audit log
    /// `log`, in order, each with what it would have widened; asserts each
    /// came from `comm`.
    pub fn refused_calls(
        &self,
        log: &std::path::Path,
        comm: &str,
    ) -> Vec<(String, lockrun_seccomp::deny_list::Widens)> {
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .filter_map(|l| match serde_json::from_str(l).unwrap() {
                lockrun::audit::Record {
                    event: lockrun::audit::Event::Syscall(sc),
                    ..
                } => {
                    assert_eq!(sc.comm, comm, "{sc:?}");
                    Some((sc.call, sc.why))
                }
                _ => None,
            })
            .collect()
    }

    /// The same probe, outside any sandbox (controls).
    pub fn probe_outside(&self, ops: &[&[&str]]) -> Vec<String> {
        let argv = probe_argv(ops);
        let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// No run dir may be left behind.
    pub fn assert_no_run_dirs(&self) {
        let runs = self.state.join("runs");
        if let Ok(rd) = std::fs::read_dir(&runs) {
            let left: Vec<_> = rd.flatten().map(|e| e.path()).collect();
            assert!(left.is_empty(), "run dirs left behind: {left:?}");
        }
    }

    /// A canary file with known bytes.
    pub fn canary(&self, path: &Path) -> PathBuf {
        std::fs::write(path, b"canary").unwrap();
        path.to_path_buf()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // After every test: no run dir left behind.
        if !std::thread::panicking() {
            self.assert_no_run_dirs();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether `line` is lockrun's warning that a dir on the way to a denied
/// path holds thousands of entries: for the tests' state dirs that is
/// `/tmp`, crowded or not depending on the machine, not on the test.
pub fn is_crowding(line: &str) -> bool {
    line.starts_with("lockrun: warning: ")
        && line.contains(" entries, and each gets a Landlock rule of its own on every run ")
}

/// The `lockrun: warning:` lines of `stderr`, but for [`is_crowding`] ones.
pub fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("lockrun: warning:") && !is_crowding(l))
        .collect()
}

pub fn probe_argv(ops: &[&[&str]]) -> Vec<String> {
    probe_argv_of(PROBE, ops)
}

/// `python3 -c PROBE op1 ; op2 …`: the ops, `;` between them, for `probe`.
pub fn probe_argv_of(probe: &str, ops: &[&[&str]]) -> Vec<String> {
    let mut v = vec![python3().to_owned(), "-c".to_owned(), probe.to_owned()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            v.push(";".to_owned());
        }
        v.extend(op.iter().map(|s| (*s).to_owned()));
    }
    v
}

/// `sh -c SCRIPT` with the scope probe as `$0`: `PROBE` in the script runs
/// it (`python3 -c "$0" …`).
pub fn scope_sh(script: &str) -> Vec<String> {
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        script.replace("PROBE", &format!("{} -c \"$0\"", python3())),
        SCOPE_PROBE.to_owned(),
    ]
}

pub fn assert_canary(path: &Path) {
    assert_eq!(
        std::fs::read(path).unwrap(),
        b"canary",
        "{} was changed",
        path.display()
    );
}

pub fn assert_absent(path: &Path) {
    assert!(
        std::fs::symlink_metadata(path).is_err(),
        "{} exists",
        path.display()
    );
}

/// (mode, uid, gid, mtime) of a file, judged from outside.
pub fn meta(path: &Path) -> (u32, u32, u32, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.permissions().mode(), m.uid(), m.gid(), m.mtime())
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Paths removed when a test ends, however it ends (files, or dirs with
/// what is in them).
pub struct RemovedAtEnd(pub Vec<PathBuf>);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
        }
    }
}

/// The Landlock ABI a run here uses: the kernel's own
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`),
/// lowered by `LOCKRUN_TEST_LANDLOCK_ABI` as the test build of lockrun
/// lowers it.
pub fn landlock_abi() -> u8 {
    let out = Command::new(python3())
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .unwrap();
    let kernel: u8 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    std::env::var("LOCKRUN_TEST_LANDLOCK_ABI")
        .ok()
        .and_then(|a| a.parse().ok())
        .map_or(kernel, |lower: u8| lower.min(kernel))
}

/// The notices of the audit log `log`: what lockrun says of the run's
/// mechanisms, as it says it.
pub fn notices(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            lockrun::audit::Record {
                event: lockrun::audit::Event::Notice { message, .. },
                ..
            } => Some(message),
            _ => None,
        })
        .collect()
}

/// A process outside the sandbox, killed when dropped.
pub struct Outside(pub std::process::Child);

impl Outside {
    pub fn sleep() -> Self {
        Self(Command::new("sleep").arg("300").spawn().unwrap())
    }
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
    pub fn assert_alive_untraced(&mut self) {
        assert!(self.0.try_wait().unwrap().is_none(), "outside process died");
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        assert!(
            status.contains("TracerPid:\t0\n"),
            "outside process is traced: {status}"
        );
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A lockrun started in the background. If the test fails first it gets
/// `SIGTERM`, so that it cleans up after its run, and `SIGKILL` if it has
/// not exited within 5 s, so a failing test never leaves it holding the
/// harness's output.
pub struct Background(pub std::process::Child);

impl Background {
    pub fn sigterm(&self) {
        self.term().unwrap();
    }
    pub fn term(&self) -> nix::Result<()> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
    }
    /// `c` started with its stdio piped, and its stdout's lines up to and
    /// including one that says `ready` (a probe holding what it made).
    pub fn until_ready(
        mut c: Command,
    ) -> (
        Self,
        std::io::BufReader<std::process::ChildStdout>,
        Vec<String>,
    ) {
        use std::io::BufRead as _;
        use std::process::Stdio;
        let mut p = Self(
            c.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut out = std::io::BufReader::new(p.0.stdout.take().unwrap());
        let mut lines = Vec::new();
        while lines.last().is_none_or(|l| l != "ready") {
            let mut line = String::new();
            assert_ne!(out.read_line(&mut line).unwrap(), 0, "{lines:?}");
            lines.push(line.trim_end().to_owned());
        }
        (p, out, lines)
    }
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(st) = self.0.try_wait().unwrap() {
                return st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "lockrun did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = self.term();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for what is bound to happen (a backstop, stretched where the
/// tests run slower: [`slow`](super::slow)).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    let patience = super::slow::patience(Duration::from_secs(20));
    while !f() {
        assert!(t.elapsed() < patience, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command's standard output, line by line.
pub fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The run refused exactly one call, `call` for `why`: recorded in the
/// audit log `log` (by python3), and summed up on stderr.
pub fn assert_one_refused_call(
    w: &World,
    log: &std::path::Path,
    out: &Output,
    call: &str,
    why: lockrun_seccomp::deny_list::Widens,
) {
    assert_eq!(w.refused_calls(log, "python3"), [(call.to_owned(), why)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("lockrun: 1 system call refused (seccomp: calls that would widen the sandbox, which no policy allows): {call} (python3)\n")),
        "{stderr}"
    );
}

/// How many connections (`stream`) or datagrams wait on the nonblocking
/// socket `fd`, taken.
pub fn received(fd: &std::os::fd::OwnedFd, stream: bool) -> usize {
    use nix::sys::socket as so;
    use std::os::fd::AsRawFd as _;
    let mut n = 0;
    loop {
        let r = if stream {
            so::accept(fd.as_raw_fd()).map(|c| {
                let _ = nix::unistd::close(c);
            })
        } else {
            so::recv(fd.as_raw_fd(), &mut [0u8; 64], so::MsgFlags::empty()).map(drop)
        };
        if r.is_err() {
            return n;
        }
        n += 1;
    }
}

/// `inner` (a lockrun command of `w`) run by a shell after `ulimit ARGS`.
pub fn with_ulimit(args: &str, w: &World, inner: &Command) -> Output {
    let script = format!("ulimit {args} && exec \"$@\"");
    wrapped(&["sh", "-c", &script, "sh"], w, inner)
}

/// `inner` (a [`World::cmd`]) run by `wrapper`, a program that runs the
/// command given after its own arguments (`taskset -c 1`), with the
/// test's home, in the worktree.
pub fn wrapped(wrapper: &[&str], w: &World, inner: &Command) -> Output {
    Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env("HOME", &w.home)
        .current_dir(&w.wt)
        .output()
        .unwrap()
}
