//! Every refusal of a reach outside the run is seen where Landlock scopes
//! but logs nothing: ABI 6 (Linux 6.12 to 6.14: Debian 13, RHEL 10, Ubuntu
//! 24.04's HWE kernels). A signal to a process outside, a connect or send to
//! an abstract unix socket bound outside, a read of an outside process's
//! `/proc` entry: each refused with the errno Landlock gives, and each in the
//! audit log and the summary as a kernel with Landlock's denial logging
//! (ABI 7) shows it, a scope refusal naming the process or the socket.
//!
//! On a newer kernel the test build lowers the Landlock ABI a run
//! uses (`LOCKRUN_TEST_LANDLOCK_ABI=6`); under 6.12 it is 6 already. Where
//! the kernel's own ABI is 7, a run at it, beside, is the reference: the
//! same refusals, the same scope events, the same summary line.
//!
//! One refusal is not seen below ABI 7, and the run says so: a process
//! outside hidden from the run's own `/proc` (Landlock's ptrace scoping,
//! `hidepid=ptraceable`) is met as `ENOENT`, the errno of any missing
//! path, and left out of a listing, and no record names it; only
//! Landlock's own logging does. Its entry in the machine's procfs, which a
//! run sees where a writable path beneath `/proc` keeps its own from being
//! mounted, is refused with `EACCES`, and that is seen.
//!
//! Each escape is judged from outside (the process is alive, the sockets
//! accepted and received nothing, nothing was copied out); the controls, a
//! child of the run signalled and the run's own abstract sockets reached,
//! must work and be recorded as nothing; an inet refusal, which the cgroup
//! hooks record, is recorded once.

use std::collections::BTreeMap;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use lockrun::audit::{Event, Record, ScopeTarget};

use crate::support::{python, world};
use world::{assert_absent, notices, s, skip, World};

const PROBE: &str = world::SCOPE_PROBE;

/// Landlock ABI 6: scoping, no denial logging.
const ABI6: &str = "6";

fn probe_argv(ops: &[&[&str]]) -> Vec<String> {
    world::probe_argv_of(PROBE, ops)
}

/// As root, or a loud skip (runs, and the kernel's audit rules).
fn root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip(test, "needs root (lockrun runs, kernel audit)");
    false
}

/// The kernel's own Landlock ABI (`landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`).
fn kernel_abi() -> i64 {
    let out = Command::new(python::python3())
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// The run of `argv` with its audit log at `log`, at Landlock ABI `abi`
/// (`None`: the kernel's own), with lockrun's arguments `extra`.
fn run(w: &World, log: &Path, abi: Option<&str>, extra: &[&str], argv: &[String]) -> Output {
    let mut flags = vec!["--audit-log", s(log)];
    flags.extend(extra);
    let mut c = w.cmd(&flags, argv);
    if let Some(abi) = abi {
        c.env("LOCKRUN_TEST_LANDLOCK_ABI", abi);
    }
    c.output().unwrap()
}

/// The probe's lines of a run that must have exited 0.
fn checked(out: &Output) -> Vec<String> {
    assert_eq!(
        out.status.code(),
        Some(0),
        "lockrun failed\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What the audit log at `log` holds: its scope refusals, each target with
/// how often and by which commands; its filesystem refusals' paths; its
/// kernel network refusals.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    scope: BTreeMap<ScopeTarget, (usize, Vec<String>)>,
    filesystem: Vec<String>,
    network: usize,
}

fn seen(log: &Path) -> Seen {
    let mut seen = Seen::default();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        match serde_json::from_str::<Record>(line).unwrap().event {
            Event::Scope(sc) => {
                let e = seen.scope.entry(sc.target).or_default();
                e.0 += 1;
                if !e.1.contains(&sc.comm) {
                    e.1.push(sc.comm);
                }
            }
            Event::Filesystem(f) => seen.filesystem.push(f.path.unwrap_or_default()),
            Event::KernelNetwork(_) => seen.network += 1,
            _ => {}
        }
    }
    seen
}

/// The summary's line of scope refusals.
fn scope_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find(|l| l.contains("outside the run refused"))
        .unwrap_or_default()
        .to_owned()
}

/// A process outside the run, killed when dropped.
struct Outside(Child);

impl Outside {
    /// `sleep 300` without capabilities, of the run's uid, as another run's
    /// command is: nothing but Landlock's scoping keeps the run from it
    /// (the capability check would refuse a reach at a process holding
    /// capabilities the command lacks first, and no kernel records that).
    fn without_caps() -> Self {
        let child = Command::new("setpriv")
            .args([
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
                "--",
                "sleep",
                "300",
            ])
            .env("LOCKRUN_TEST_SECRET", "scope-seen")
            .spawn()
            .unwrap();
        let pid = child.id();
        let t = Instant::now();
        loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            if status.starts_with("Name:\tsleep\n")
                && status.contains("CapPrm:\t0000000000000000\n")
            {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "setpriv did not exec sleep"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn assert_alive(&mut self) {
        assert!(
            self.0.try_wait().unwrap().is_none(),
            "the outside process died: {:?}",
            self.0.try_wait()
        );
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The same probe at ABI 6 and, where the kernel has it, at ABI 7: the
/// ABI 6 run's output and audit log, and the reference's (`None` where
/// the kernel's own ABI is below 7).
struct Compared {
    abi6: (Output, Seen),
    abi7: Option<(Output, Seen)>,
}

/// Each run with lockrun's arguments `extra`, its logs named for `name`.
fn compared(w: &World, name: &str, extra: &[&str], argv: &[String]) -> Compared {
    let log6 = w.root.join(format!("{name}-abi6.jsonl"));
    let out6 = run(w, &log6, Some(ABI6), extra, argv);
    let abi7 = (kernel_abi() >= 7).then(|| {
        let log7 = w.root.join(format!("{name}-abi7.jsonl"));
        let out7 = run(w, &log7, None, extra, argv);
        (out7, seen(&log7))
    });
    Compared {
        abi6: (out6, seen(&log6)),
        abi7,
    }
}

/// Every call that signals one process, to a process outside: `EPERM`, the
/// process lives, and each refusal is a scope refusal naming it, at ABI 6
/// as at ABI 7.
#[test]
fn signals_to_a_process_outside_are_seen_at_abi_6_as_at_abi_7() {
    if !root("signals_to_a_process_outside_are_seen_at_abi_6_as_at_abi_7") {
        return;
    }
    let w = World::new("scope-seen-signal");
    let mut outside = Outside::without_caps();
    let pid = outside.pid().to_string();
    let calls = ["kill", "tkill", "tgkill", "sigqueue", "tgsigqueue", "pidfd"];
    let mut ops: Vec<Vec<&str>> = calls
        .iter()
        .map(|c| vec!["signal", c, pid.as_str(), "15"])
        .collect();
    ops.push(vec!["signal", "kill", &pid, "0"]);
    let ops: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    let c = compared(&w, "signal", &[], &probe_argv(&ops));
    let (out6, seen6) = &c.abi6;
    assert_eq!(checked(out6), ["errno=EPERM"; 7]);
    outside.assert_alive();
    let target = ScopeTarget::Signal {
        to_pid: outside.pid(),
        to_comm: "sleep".into(),
    };
    assert_eq!(
        seen6.scope,
        BTreeMap::from([(target, (7, vec!["python3".to_owned()]))]),
        "stderr: {}",
        String::from_utf8_lossy(&out6.stderr)
    );
    assert!(seen6.filesystem.is_empty(), "{seen6:?}");
    assert!(
        scope_line(out6).contains(&format!("signal to pid {pid} (sleep)")),
        "stderr: {}",
        String::from_utf8_lossy(&out6.stderr)
    );
    if let Some((out7, seen7)) = &c.abi7 {
        assert_eq!(checked(out7), checked(out6));
        assert_eq!(seen7, seen6);
        assert_eq!(scope_line(out7), scope_line(out6));
    }
    outside.assert_alive();
}

/// A connect, a `sendto` and a `sendmsg` to abstract unix sockets bound
/// outside, by a name the supervisor would see and one as long as an inet
/// address: `EPERM`, nothing accepted or received outside, and each a
/// scope refusal naming the socket, at ABI 6 as at ABI 7.
#[test]
fn abstract_sockets_bound_outside_are_seen_at_abi_6_as_at_abi_7() {
    use std::os::linux::net::SocketAddrExt;
    if !root("abstract_sockets_bound_outside_are_seen_at_abi_6_as_at_abi_7") {
        return;
    }
    let w = World::new("scope-seen-abstract");
    let tag = std::process::id();
    let addr =
        |name: &str| std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let stream = format!("lrss-stream-{tag:010}");
    // 13 bytes: an address 16 long, as a sockaddr_in.
    let short = format!("ls{tag:011}");
    let dgram = format!("lrss-dgram-{tag:010}");
    let l_stream = UnixListener::bind_addr(&addr(&stream)).unwrap();
    let l_short = UnixListener::bind_addr(&addr(&short)).unwrap();
    let d = UnixDatagram::bind_addr(&addr(&dgram)).unwrap();
    for l in [&l_stream, &l_short] {
        l.set_nonblocking(true).unwrap();
    }
    d.set_nonblocking(true).unwrap();
    let ops: [&[&str]; 4] = [
        &["abstract_connect", &stream],
        &["abstract_connect", &short],
        &["abstract_sendto", &dgram],
        &["abstract_sendmsg", &dgram],
    ];
    let c = compared(&w, "abstract", &[], &probe_argv(&ops));
    let (out6, seen6) = &c.abi6;
    assert_eq!(checked(out6), ["errno=EPERM"; 4]);
    let nothing =
        |r: std::io::Result<()>| matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(
        nothing(l_stream.accept().map(drop)),
        "accepted a connection"
    );
    assert!(nothing(l_short.accept().map(drop)), "accepted a connection");
    assert!(
        nothing(d.recv(&mut [0; 16]).map(drop)),
        "received a datagram"
    );
    let socket = |name: &str, n| {
        (
            ScopeTarget::AbstractUnixSocket { name: name.into() },
            (n, vec!["python3".to_owned()]),
        )
    };
    assert_eq!(
        seen6.scope,
        BTreeMap::from([socket(&stream, 1), socket(&short, 1), socket(&dgram, 2)]),
        "stderr: {}",
        String::from_utf8_lossy(&out6.stderr)
    );
    assert!(
        scope_line(out6).contains(&format!("abstract unix socket @{stream} (python3)")),
        "stderr: {}",
        String::from_utf8_lossy(&out6.stderr)
    );
    if let Some((out7, seen7)) = &c.abi7 {
        assert_eq!(checked(out7), checked(out6));
        assert_eq!(seen7, seen6);
        assert_eq!(scope_line(out7), scope_line(out6));
    }
    assert!(
        nothing(l_stream.accept().map(drop)),
        "accepted a connection"
    );
    assert!(
        nothing(d.recv(&mut [0; 16]).map(drop)),
        "received a datagram"
    );
}

/// A writable path beneath `/proc`, which keeps lockrun from mounting the
/// run's own procfs there: the run sees the machine's. `/proc/fs` holds
/// nothing whose mode lets a write through.
const UNDER_PROC: &str = "/proc/fs";

/// An outside process's `/proc/<pid>/environ` and `cwd` in the machine's
/// procfs (the run's own is not mounted: [`UNDER_PROC`] is writable),
/// copied into the worktree and read: `EACCES` (Landlock's ptrace-mode
/// check), nothing copied, and each refusal a scope refusal naming the
/// process, not a filesystem one, at ABI 6 as at ABI 7.
#[test]
fn an_outside_process_s_entry_in_the_machines_proc_is_seen_at_abi_6_as_at_abi_7() {
    if !root("an_outside_process_s_entry_in_the_machines_proc_is_seen_at_abi_6_as_at_abi_7") {
        return;
    }
    let w = World::new("scope-seen-machine-proc");
    let mut outside = Outside::without_caps();
    let pid = outside.pid().to_string();
    let (environ, cwd) = (format!("/proc/{pid}/environ"), format!("/proc/{pid}/cwd"));
    let leak = w.wt.join("leak");
    // Listed: it is the machine's procfs, which hides no process.
    let argv = probe_argv(&[
        &["copy", &environ, s(&leak)],
        &["readlink", &cwd],
        &["lists", "/proc", &pid],
    ]);
    let c = compared(&w, "machine-proc", &["--allow-write", UNDER_PROC], &argv);
    let (out6, seen6) = &c.abi6;
    assert_eq!(checked(out6), ["errno=EACCES", "errno=EACCES", "ok"]);
    assert_absent(&leak);
    outside.assert_alive();
    let target = ScopeTarget::Ptrace {
        to_pid: outside.pid(),
        to_comm: "sleep".into(),
    };
    let err6 = String::from_utf8_lossy(&out6.stderr);
    assert_eq!(
        seen6.scope,
        BTreeMap::from([(target, (2, vec!["python3".to_owned()]))]),
        "stderr: {err6}"
    );
    assert!(seen6.filesystem.is_empty(), "{seen6:?}");
    assert!(
        scope_line(out6).contains(&format!("ptrace or /proc access to pid {pid} (sleep) ×2")),
        "stderr: {err6}"
    );
    if let Some((out7, seen7)) = &c.abi7 {
        assert_eq!(checked(out7), checked(out6));
        assert_eq!(seen7, seen6);
        assert_eq!(scope_line(out7), scope_line(out6));
    }
    assert_absent(&leak);
}

/// An outside process in the run's own `/proc` (`hidepid=ptraceable`):
/// its `environ` copied, its `cwd` read, its entry listed, all `ENOENT`
/// (hidden by Landlock's ptrace scoping), nothing copied. At ABI 7 each is
/// a scope refusal naming the process. Below it nothing is recorded — no
/// filesystem refusal either — and the run's log says that these are not:
/// the lookups fail as any missing path does, the listing leaves the
/// process out, and no record of kernel audit names it, so no mechanism
/// below Landlock's own logging (ABI 7, Linux 6.15) can show them.
#[test]
fn an_outside_process_hidden_from_the_runs_proc_is_said_unrecorded_below_abi_7() {
    if !root("an_outside_process_hidden_from_the_runs_proc_is_said_unrecorded_below_abi_7") {
        return;
    }
    let w = World::new("scope-seen-proc");
    let mut outside = Outside::without_caps();
    let pid = outside.pid().to_string();
    let (environ, cwd) = (format!("/proc/{pid}/environ"), format!("/proc/{pid}/cwd"));
    let leak = w.wt.join("leak");
    let argv = probe_argv(&[
        &["copy", &environ, s(&leak)],
        &["readlink", &cwd],
        &["lists", "/proc", &pid],
    ]);
    let c = compared(&w, "proc", &[], &argv);
    let (out6, seen6) = &c.abi6;
    assert_eq!(checked(out6), ["errno=ENOENT"; 3]);
    assert_absent(&leak);
    outside.assert_alive();
    let err6 = String::from_utf8_lossy(&out6.stderr);
    assert_eq!(seen6, &Seen::default(), "stderr: {err6}");
    assert!(scope_line(out6).is_empty(), "stderr: {err6}");
    let said = notices(&w.root.join("proc-abi6.jsonl"));
    assert!(
        said.iter().any(|n| n.contains(
            "Processes outside the run hidden from its /proc (Landlock's ptrace scoping) are not \
             recorded"
        )),
        "{said:?}"
    );
    if let Some((out7, seen7)) = &c.abi7 {
        assert_eq!(checked(out7), checked(out6));
        let target = ScopeTarget::Ptrace {
            to_pid: outside.pid(),
            to_comm: "sleep".into(),
        };
        // Each op at least once; the listing names every process it hid
        // (those of other tests too).
        let n = seen7.scope.get(&target).map_or(0, |e| e.0);
        assert!(n >= 3, "{seen7:?}");
        assert!(
            (seen7.scope.keys()).all(|t| matches!(t, ScopeTarget::Ptrace { .. })),
            "{seen7:?}"
        );
        assert!(seen7.filesystem.is_empty(), "{seen7:?}");
        assert!(
            scope_line(out7).contains(&format!("ptrace or /proc access to pid {pid} (sleep) ×")),
            "{}",
            scope_line(out7)
        );
        let said = notices(&w.root.join("proc-abi7.jsonl"));
        assert!(!said.iter().any(|n| n.contains("/proc")), "{said:?}");
    }
    assert_absent(&leak);
}

/// Controls: a child of the run signalled (it dies of it), the run's own
/// abstract sockets reached, at ABI 6: all work, and no scope refusal is
/// recorded.
#[test]
fn the_runs_own_child_and_sockets_are_reached_and_nothing_is_recorded() {
    if !root("the_runs_own_child_and_sockets_are_reached_and_nothing_is_recorded") {
        return;
    }
    let w = World::new("scope-seen-own");
    let log = w.root.join("audit.jsonl");
    // Of no inet address's length, with "-dgram" too (16, 28 bytes): such
    // an address the supervisor does not see, and below Landlock ABI 6 the
    // unix hooks or guard refuse it (tests/supervise.rs).
    let own = format!("lrss-own{:010}", std::process::id());
    let script = format!(
        "sleep 300 & PROBE signal tgkill $! 0 \\; signal kill $! 15 \\; abstract_own {own}; wait $!; echo status=$?"
    );
    let out = run(&w, &log, Some(ABI6), &[], &world::scope_sh(&script));
    assert_eq!(checked(&out), ["ok", "ok", "ok", "status=143"]);
    let seen = seen(&log);
    assert!(seen.scope.is_empty(), "{seen:?}");
    assert!(scope_line(&out).is_empty(), "{}", scope_line(&out));
}

/// A datagram to an inet address the run may not reach: `EPERM` from the
/// cgroup hooks, which record it; recorded once, and not as a scope
/// refusal, at ABI 6.
#[test]
fn an_inet_refusal_is_recorded_once_at_abi_6() {
    if !root("an_inet_refusal_is_recorded_once_at_abi_6") {
        return;
    }
    let w = World::new("scope-seen-inet");
    let log = w.root.join("audit.jsonl");
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let argv = probe_argv(&[&["inet_sendto", "127.0.0.1", &port]]);
    let out = run(&w, &log, Some(ABI6), &[], &argv);
    assert_eq!(checked(&out), ["errno=EPERM"]);
    assert!(
        listener.recv(&mut [0; 16]).is_err(),
        "the listener received a datagram"
    );
    let seen = seen(&log);
    assert_eq!(seen.network, 1, "{seen:?}");
    assert!(seen.scope.is_empty(), "{seen:?}");
}
