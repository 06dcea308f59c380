//! Pathname unix sockets only inside the worktree and the run's temp dir,
//! on a kernel without the cgroup `connect_unix`/`sendmsg_unix` hooks
//! (before Linux 6.7; Debian 12's 6.1): lockrun's unix guard
//! (`fmod_ret` on the kernel's `security_unix_stream_connect` and
//! `security_unix_may_send`) refuses what the supervisor does not see: an
//! address as long as an inet one, a `sendmsg` with a `msg_name`.
//!
//! On a newer kernel the test build pretends the hooks are missing
//! (`LOCKRUN_TEST_NO_UNIX_HOOKS=1`). Where the guard cannot load either
//! (a kernel that refuses every BPF trampoline), the promise is a
//! gap, and what is asserted is that the run is refused, naming it; under
//! a kernel that loads it (Debian's 6.1, 6.12), the escapes themselves,
//! each judged from outside (the outside listener accepted nothing, the
//! outside datagram socket received nothing), with the errno inside, the
//! refusal in the audit log, and a control beside it: sockets in the
//! worktree work, a connected datagram socket's sends to its peer among
//! them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::Path;
use std::process::Command;

use lockrun::audit::{Destination, Event, Record};

use crate::support::{build, python, slow, world};
use world::{s, World};

const PROBE: &str = world::SCOPE_PROBE;

/// What a kernel without the unix hooks may lack besides, which this test
/// does not judge (Debian 12's 6.1 has Landlock ABI 2): accepted, so that
/// the runs go on. Never the unix ones.
const OTHER_GAPS: [&str; 3] = ["truncate", "device_ioctl", "filesystem_refusals_unseen"];

fn lockrun(w: &World, log: &Path, ops: &[&[&str]]) -> Command {
    let mut extra = vec!["--audit-log", s(log)];
    for g in OTHER_GAPS {
        extra.extend(["--accept-gap", g]);
    }
    let mut c = w.cmd(&extra, &world::probe_argv_of(PROBE, ops));
    c.env("LOCKRUN_TEST_NO_UNIX_HOOKS", "1");
    c
}

/// The unix refusals of the kernel's guard in the audit log: hook and path.
fn guard_refusals(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        // A line of its own between runs appended to one log.
        .filter(|l| !l.is_empty())
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            Record {
                event: Event::KernelNetwork(k),
                ..
            } => match k.destination {
                Destination::Unix(p) => Some((k.hook, p)),
                Destination::Inet(_) => None,
            },
            _ => None,
        })
        .collect()
}

/// Where the guard does not load, assert that the run is refused, naming
/// the promise, and say so; `true` where it loads.
fn guard_loads(w: &World, log: &Path, test: &str) -> bool {
    if lockrun::bpf::load::unix_guard_loads() {
        return true;
    }
    let own = w.wt.join("own.sock");
    let out = lockrun(w, log, &[&["unix_own", s(&own)]]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("unix_addresses: ") && err.contains("BPF trampolines"),
        "{err}"
    );
    assert!(!own.exists(), "the refused run ran");
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "note: {test}: the unix guard does not load on this kernel: asserted the run's \
             refusal (the escapes run under a kernel that loads it)\n"
        )
        .as_bytes(),
    );
    false
}

/// A listener outside the worktree whose path is 13 bytes long (its address
/// as long as a `sockaddr_in`: the filter does not hand it over), removed at
/// the end; a name of its own for each test of this process, which run at
/// once.
fn short_listener() -> (String, UnixListener, world::RemovedAtEnd) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    assert!(n < 10, "one digit of the name per test");
    let short = format!("/tmp/lr{n}-{:04}", std::process::id() % 10_000);
    assert_eq!(short.len(), 13);
    let _ = std::fs::remove_file(&short);
    let gone = world::RemovedAtEnd(vec![short.clone().into()]);
    let listener = UnixListener::bind(&short).unwrap();
    listener.set_nonblocking(true).unwrap();
    (short, listener, gone)
}

fn nothing(r: std::io::Result<()>) -> bool {
    matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn without_the_unix_hooks_no_unix_socket_outside_is_reached() {
    let w = World::new("unix-guard");
    let log = w.root.join("audit.jsonl");
    if !guard_loads(
        &w,
        &log,
        "without_the_unix_hooks_no_unix_socket_outside_is_reached",
    ) {
        return;
    }
    let (short, listener, _gone) = short_listener();
    let outside = w.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let dgram_path = outside.join("dgram.sock");
    let dgram = UnixDatagram::bind(&dgram_path).unwrap();
    dgram.set_nonblocking(true).unwrap();
    let (own, own_dgram) = (w.wt.join("own.sock"), w.wt.join("own-dgram.sock"));
    let ops: [&[&str]; 5] = [
        &["unix_connect", &short],
        &["unix_sendmsg", s(&dgram_path)],
        &["unix_sendto", s(&dgram_path)],
        &["unix_own", s(&own)],
        &["unix_dgram_own", s(&own_dgram)],
    ];
    let out = lockrun(&w, &log, &ops).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["errno=EPERM", "errno=EPERM", "errno=EPERM", "ok", "ok"]
    );
    assert!(
        nothing(listener.accept().map(drop)),
        "accepted a connection"
    );
    assert!(
        nothing(dgram.recv(&mut [0; 16]).map(drop)),
        "received a datagram"
    );
    // The guard's refusals (the sendto is the supervisor's, as on every kernel).
    let refused = guard_refusals(&log);
    let d = dgram_path.display().to_string();
    for want in [
        ("unix_guard_connect".to_owned(), short.clone()),
        ("unix_guard_send".to_owned(), d.clone()),
        ("seccomp_sendto_unix".to_owned(), d),
    ] {
        assert!(refused.contains(&want), "{want:?} not in {refused:?}");
    }
    // Control: outside, the same probe reaches both.
    let out = Command::new(python::python3())
        .args([
            "-c",
            PROBE,
            "unix_connect",
            &short,
            ";",
            "unix_sendmsg",
            s(&dgram_path),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\nok\n");
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok());
    assert!(dgram.recv(&mut [0; 16]).is_ok());
}

/// The supervisor lets a connect on an inet socket go on; a thread that
/// puts a unix socket under its number and a pathname in its address
/// before the kernel looks again is refused by the guard. Judged from
/// outside, and by the guard's refusals of that path (the swap was made).
/// Control: the listener is reached from outside (above), and the run's
/// own sockets work (above).
#[test]
fn a_unix_socket_swapped_under_a_continued_connect_is_refused() {
    let w = World::new("unix-guard-swap");
    let log = w.root.join("audit.jsonl");
    if !guard_loads(
        &w,
        &log,
        "a_unix_socket_swapped_under_a_continued_connect_is_refused",
    ) {
        return;
    }
    let (short, listener, _gone) = short_listener();
    // A race: 3 s of tries; where the tests run slower (emulated), as many
    // runs more as it takes a swap to reach the kernel, up to the factor
    // (at most 8). Every run judged alike.
    let mut said = Vec::new();
    for _ in 0..slow::factor().min(8) {
        let out = lockrun(&w, &log, &[&["swap_race", &short, "3"]])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.starts_with("tries=") && stdout.trim_end().ends_with(" connected=0"),
            "{stdout}"
        );
        assert!(
            nothing(listener.accept().map(drop)),
            "the swap reached the listener"
        );
        said.push(stdout);
        if guard_refusals(&log)
            .iter()
            .any(|(hook, path)| hook == "unix_guard_connect" && *path == short)
        {
            return;
        }
    }
    panic!("no swap reached the kernel: {said:?}");
}

/// Runs that start at once, the first of a build on this boot, all attach
/// to the one guard: the kernel links its program to a function once, and
/// a run that finds the link another has just made and not yet pinned
/// waits for it (it was refused with `EBUSY`, exit 125). A build of the
/// test's own, so that no link of it is there before. Each run makes its
/// own socket and reaches it; the guard is live after.
#[test]
fn runs_that_start_at_once_share_the_guard() {
    const T: &str = "runs_that_start_at_once_share_the_guard";
    let w = World::new("unix-guard-once");
    let log = w.root.join("audit.jsonl");
    if !guard_loads(&w, &log, T) {
        return;
    }
    let build = build::TestBuild::new("guardonce");
    let runs: Vec<_> = (0..6)
        .map(|i| {
            let own = w.wt.join(format!("own-{i}.sock"));
            let mut c = lockrun(
                &w,
                &w.root.join(format!("audit-{i}.jsonl")),
                &[&["unix_own", s(&own)]],
            );
            c.env("LOCKRUN_TEST_BUILD_ID", &build.0)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{err}");
    }
    assert!(
        build.pinned().iter().any(|n| n == &build.0)
            && std::fs::read_dir(build.dir())
                .unwrap()
                .flatten()
                .any(|e| e.file_name() == "link-guard_connect_unix"),
        "the guard's link is not pinned"
    );
}
