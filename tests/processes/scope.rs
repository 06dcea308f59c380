//! The run reaches no process and no abstract unix socket outside it, on a
//! kernel without Landlock's scoping (ABI < 6, Linux < 6.12; Debian 12's
//! 6.1 has ABI 2): held by the seccomp supervisor, and for what it does not
//! see by the kernel refusing the run's own abstract connects (the cgroup
//! unix hooks, or lockrun's unix guard without them).
//!
//! On a newer kernel the test build lowers the Landlock ABI it uses
//! to Debian 12's (`LOCKRUN_TEST_LANDLOCK_ABI=2`); under the 6.1 kernel it is
//! that already. The other promises an ABI-2 kernel cannot hold (truncate,
//! device ioctls, recorded filesystem refusals) are not these tests' and
//! are accepted by name, so that the runs go on; the scoping ones never are.
//!
//! Each escape is judged from outside (the outside process is alive, still
//! stopped, got no `SIGIO`; the outside socket accepted and received
//! nothing), asserts the errno inside and the refusal in the audit log, as
//! on a kernel with the scoping, and has a control beside it that must
//! succeed: a process, a group, an abstract name of the run's own.

use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Output};

use lockrun::audit::{Event, Record, ScopeTarget};

use crate::support::{python, world};
use world::{s, World};

const PROBE: &str = world::SCOPE_PROBE;

/// Debian 12's Landlock ABI: no scoping.
const ABI: &str = "2";

/// What an ABI-2 kernel cannot hold besides, which these tests do not
/// judge: accepted, so that the runs go on.
const OTHER_GAPS: [&str; 3] = ["truncate", "device_ioctl", "filesystem_refusals_unseen"];

/// `lockrun … -- argv` at [`ABI`], its audit log at `log`.
fn lockrun<S: AsRef<std::ffi::OsStr>>(w: &World, log: &Path, argv: &[S]) -> Command {
    let mut extra = vec!["--audit-log", s(log)];
    for g in OTHER_GAPS {
        extra.extend(["--accept-gap", g]);
    }
    let mut c = w.cmd(&extra, argv);
    c.env("LOCKRUN_TEST_LANDLOCK_ABI", ABI);
    c
}

fn probe_argv(ops: &[&[&str]]) -> Vec<String> {
    world::probe_argv_of(PROBE, ops)
}

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

/// The scope refusals in the audit log `log`, with the command that made each.
fn scope_refusals(log: &Path) -> Vec<(String, ScopeTarget)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        // A line of its own between runs appended to one log.
        .filter(|l| !l.is_empty())
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            Record {
                event: Event::Scope(sc),
                ..
            } => Some((sc.comm, sc.target)),
            _ => None,
        })
        .collect()
}

/// A process outside the run, killed when dropped.
struct Outside(Child);

impl Outside {
    fn spawn(c: &mut Command) -> Self {
        Self(c.spawn().unwrap())
    }
    fn sleep() -> Self {
        Self::spawn(Command::new("sleep").arg("300"))
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
    /// Its state letter (`/proc/<pid>/stat`): `T` while stopped.
    fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        after.trim_start().chars().next().unwrap()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every call that signals one process, to a process outside: `EPERM`, and
/// it lives; each refusal recorded as a scope refusal naming it, as
/// Landlock's would be. Control: the same calls signal a process of the run.
#[test]
fn a_signal_to_a_process_outside_is_refused() {
    let w = World::new("scope-signal");
    let log = w.root.join("audit.jsonl");
    let mut outside = Outside::sleep();
    let pid = outside.pid().to_string();
    let calls = ["kill", "tkill", "tgkill", "sigqueue", "tgsigqueue", "pidfd"];
    let mut ops: Vec<Vec<&str>> = calls
        .iter()
        .map(|c| vec!["signal", c, pid.as_str(), "15"])
        .collect();
    // Signal 0 (is it there?) too.
    ops.push(vec!["signal", "kill", &pid, "0"]);
    let ops: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    let out = lockrun(&w, &log, &probe_argv(&ops)).output().unwrap();
    assert_eq!(checked(&out), ["errno=EPERM"; 7]);
    outside.assert_alive();
    let refused = scope_refusals(&log);
    assert_eq!(refused.len(), 7, "{refused:?}");
    for (comm, target) in &refused {
        assert_eq!(comm, "python3");
        assert_eq!(
            *target,
            ScopeTarget::Signal {
                to_pid: outside.pid(),
                to_comm: "sleep".into()
            }
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("attempts to reach processes outside the run refused")
            && err.contains(&format!("signal to pid {pid} (sleep)")),
        "stderr: {err}"
    );

    // Control: each call signals a process of the run, which dies of it.
    let script = format!(
        "for c in {}; do sleep 300 & PROBE signal $c $! 0 \\; signal $c $! 15; wait $!; echo status=$?; done",
        calls.join(" ")
    );
    let out = lockrun(&w, &log, &world::scope_sh(&script))
        .output()
        .unwrap();
    let mut want = Vec::new();
    for _ in calls {
        want.extend(["ok", "ok", "status=143"]);
    }
    assert_eq!(checked(&out), want);
}

/// The owner of a file's `SIGIO` (`fcntl F_SETOWN`, `F_SETOWN_EX`, `ioctl
/// FIOSETOWN`, `SIOCSPGRP`) may not be a process or group outside: `EPERM`,
/// and no `SIGIO` kills it (its default action). Control: a process of the
/// run as the owner gets it and dies of it.
#[test]
fn sigio_goes_to_no_process_outside() {
    let w = World::new("scope-sigio");
    let log = w.root.join("audit.jsonl");
    let mut outside = Outside::sleep();
    let mut group = Outside::spawn(Command::new("sleep").arg("300").process_group(0));
    let (pid, pgrp) = (outside.pid().to_string(), format!("-{}", group.pid()));
    let hows = ["setown", "setown_ex", "fiosetown", "siocspgrp"];
    let mut ops: Vec<Vec<&str>> = hows.iter().map(|h| vec!["sigio", h, &pid]).collect();
    ops.push(vec!["sigio", "setown", &pgrp]);
    ops.push(vec!["sigio", "setown_ex", &pgrp]);
    let ops: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    let out = lockrun(&w, &log, &probe_argv(&ops)).output().unwrap();
    assert_eq!(checked(&out), ["errno=EPERM"; 6]);
    outside.assert_alive();
    group.assert_alive();
    let refused = scope_refusals(&log);
    assert_eq!(refused.len(), 6, "{refused:?}");
    assert!(refused.iter().all(|(_, t)| matches!(
        t,
        ScopeTarget::Signal { to_pid, to_comm } if (*to_pid == outside.pid() || *to_pid == group.pid()) && to_comm == "sleep"
    )));

    // Control: a process of the run as the owner dies of SIGIO (128 + 29).
    let script = format!(
        "for h in {}; do sleep 300 & PROBE sigio $h $!; wait $!; echo status=$?; done",
        hows.join(" ")
    );
    let out = lockrun(&w, &log, &world::scope_sh(&script))
        .output()
        .unwrap();
    let mut want = Vec::new();
    for _ in hows {
        want.extend(["ok", "status=157"]);
    }
    assert_eq!(checked(&out), want);
}

/// `kill(0)` when the run shares its process group with processes outside
/// (lockrun's, here led by an outside `sleep`): the run's members get the
/// signal, those outside do not, and the call succeeds, as under
/// Landlock. `kill(-pgrp)` of a group all outside: `EPERM`.
#[test]
fn a_process_group_is_signalled_only_in_the_run() {
    let w = World::new("scope-pgrp");
    let log = w.root.join("audit.jsonl");
    // The group's leader is outside; lockrun, and so the command, join it.
    let mut leader = Outside::spawn(Command::new("sleep").arg("300").process_group(0));
    let mut other = Outside::spawn(Command::new("sleep").arg("300").process_group(0));
    let g = i32::try_from(leader.pid()).unwrap();
    // SIGUSR1 (10): its default action ends a process; the shell and the
    // probe ignore it, the run's `sleep` dies of it.
    let script = format!(
        "sleep 300 & trap '' USR1; PROBE kill0 10 \\; killpg {} 10; wait $!; echo status=$?",
        other.pid()
    );
    let out = lockrun(&w, &log, &world::scope_sh(&script))
        .process_group(g)
        .output()
        .unwrap();
    assert_eq!(checked(&out), ["ok", "errno=EPERM", "status=138"]);
    leader.assert_alive();
    other.assert_alive();
    let refused: Vec<u32> = scope_refusals(&log)
        .into_iter()
        .map(|(_, t)| match t {
            ScopeTarget::Signal { to_pid, .. } => to_pid,
            t => panic!("{t:?}"),
        })
        .collect();
    // kill(0): the first member outside (the leader, or lockrun); killpg: the other group's.
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_ne!(refused[0], other.pid());
    assert_eq!(refused[1], other.pid());
}

/// `kill(-1)`: every process the caller may signal. Only the run's get it:
/// a stopped process outside stays stopped after `SIGCONT`; a stopped
/// process of the run is continued.
#[test]
fn kill_minus_one_reaches_only_the_run() {
    let w = World::new("scope-every");
    let log = w.root.join("audit.jsonl");
    let mut stopped = Outside::sleep();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(stopped.pid()).unwrap()),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    while stopped.state() != 'T' {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let script = "sleep 300 & p=$!; kill -STOP $p; \
                  while [ \"$(cut -d' ' -f3 /proc/$p/stat)\" != T ]; do :; done; \
                  PROBE kill_every 18; \
                  while [ \"$(cut -d' ' -f3 /proc/$p/stat)\" = T ]; do :; done; echo continued; kill $p";
    let out = lockrun(&w, &log, &world::scope_sh(script))
        .output()
        .unwrap();
    assert_eq!(checked(&out), ["ok", "continued"]);
    assert_eq!(stopped.state(), 'T', "the outside process was continued");
    stopped.assert_alive();
    let refused = scope_refusals(&log);
    assert_eq!(refused.len(), 1, "{refused:?}");
}

/// An abstract unix socket bound outside is unreachable: by `connect`
/// and `sendto` (judged by the supervisor), by an address as long as an
/// inet one and by `sendmsg` (which it does not see: refused by the
/// kernel). The outside sockets accepted and received nothing; each
/// refusal is recorded as a scope refusal naming the socket. Control: the
/// run's own names, bound and autobound, are reached; outside, the same
/// probe reaches the outside listener.
#[test]
fn an_abstract_socket_bound_outside_is_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    let w = World::new("scope-abstract");
    let log = w.root.join("audit.jsonl");
    let tag = std::process::id();
    let listen = |name: &str| {
        let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let l = UnixListener::bind_addr(&a).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    };
    // 21 and 20 bytes: the addresses (24, 23) are handed to the supervisor.
    let stream = format!("lrs-stream-{tag:010}");
    // 13 bytes: the address is 16 long, as a sockaddr_in (not handed over).
    let short = format!("ls{tag:011}");
    assert_eq!(short.len(), 13);
    let dgram = format!("lrs-dgram-{tag:010}");
    let (l_stream, l_short) = (listen(&stream), listen(&short));
    let d = UnixDatagram::bind_addr(
        &std::os::unix::net::SocketAddr::from_abstract_name(dgram.as_bytes()).unwrap(),
    )
    .unwrap();
    d.set_nonblocking(true).unwrap();
    let own = format!("lrs-own-{tag:010}");
    let ops: [&[&str]; 5] = [
        &["abstract_connect", &stream],
        &["abstract_connect", &short],
        &["abstract_sendto", &dgram],
        &["abstract_sendmsg", &dgram],
        &["abstract_own", &own],
    ];
    let out = lockrun(&w, &log, &probe_argv(&ops)).output().unwrap();
    assert_eq!(
        checked(&out),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "ok"
        ]
    );
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
    let mut names: Vec<String> = scope_refusals(&log)
        .into_iter()
        .map(|(comm, t)| {
            assert_eq!(comm, "python3");
            match t {
                ScopeTarget::AbstractUnixSocket { name } => name,
                t => panic!("{t:?}"),
            }
        })
        .collect();
    names.sort();
    let mut want = vec![stream.clone(), short.clone(), dgram.clone(), dgram.clone()];
    want.sort();
    assert_eq!(names, want);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("abstract unix socket @{stream} (python3)")),
        "stderr: {err}"
    );
    // Control: outside, the same probe reaches the listener.
    let out = Command::new(python::python3())
        .args(probe_argv(&[&["abstract_connect", &stream]])[1..].iter())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    l_stream.set_nonblocking(false).unwrap();
    assert!(l_stream.accept().is_ok());
}
