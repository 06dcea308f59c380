//! A crash writes nothing outside: no core helper starts outside, no core
//! reaches a socket outside (the core pattern is the machine's, so these
//! tests take turns).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::skip;
use crate::support::world::{s, wait_for, World};

/// `kernel.core_pattern` set for one test, and set back when dropped (a
/// failing test included).
/// Tests that set it take turns.
struct CorePattern {
    before: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl CorePattern {
    fn set(pattern: &str) -> Self {
        let turn = CORE_PATTERN_TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = std::fs::read_to_string(CORE_PATTERN).unwrap();
        std::fs::write(CORE_PATTERN, pattern).unwrap();
        Self {
            before,
            _turn: turn,
        }
    }
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        std::fs::write(CORE_PATTERN, self.before.trim_end_matches('\n')).unwrap();
    }
}

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";
static CORE_PATTERN_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where `kernel.core_pattern` pipes cores to a program (systemd-coredump,
/// apport), the kernel starts it as root outside every sandbox and feeds it
/// the crashed process's memory, which it writes out. A crash inside a run
/// must start nothing: the command runs with `RLIMIT_CORE` at 1 byte, which
/// a pipe heeds. Judged from outside by the helper's mark, for a crash by a
/// copy of `sh` named for this test; the control, the same crash outside
/// (by a second copy), leaves its mark. The run's exit is 128+11, its
/// stderr says why no core was dumped and its audit log holds the notice.
#[test]
fn a_crash_inside_starts_no_core_helper_outside() {
    use std::os::unix::process::ExitStatusExt as _;
    let w = World::new("cores");
    let marks = w.root.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let helper = w.root.join("helper");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\ncat > {}/\"$1-$2\"\n", marks.display()),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Two copies of sh, so each crash names itself to the helper (`%e`).
    let (inside, outside) = (w.data.join("lrcore-in"), w.data.join("lrcore-out"));
    std::fs::copy("/bin/sh", &inside).unwrap();
    std::fs::copy("/bin/sh", &outside).unwrap();
    let marked = |name: &str| {
        std::fs::read_dir(&marks)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}-"))
            })
    };
    let crash = "grep '^Max core' /proc/self/limits; kill -SEGV $$";
    let log = w.root.join("audit.jsonl");
    let pattern = CorePattern::set(&format!("|{} %e %P", helper.display()));
    let run = w
        .cmd(&["--audit-log", s(&log)], &[s(&inside), "-c", crash])
        .output()
        .unwrap();
    let control = Command::new(&outside)
        .args(["-c", "kill -SEGV $$"])
        .status()
        .unwrap();
    // The kernel starts the helpers in the order of the crashes; once the
    // control's mark is there, the run's would be too.
    wait_for("the control crash's core helper", || marked("lrcore-out"));
    std::thread::sleep(Duration::from_millis(200));
    let inside_marked = marked("lrcore-in");
    drop(pattern);
    assert_eq!(control.signal(), Some(libc::SIGSEGV));
    assert!(
        !inside_marked,
        "a crash inside the run started the core helper outside"
    );
    assert_eq!(run.status.code(), Some(128 + libc::SIGSEGV), "{run:?}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout
            .split_whitespace()
            .eq(["Max", "core", "file", "size", "1", "1", "bytes"]),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("the command died of signal 11 and left no core dump: core dumps are off in this run: kernel.core_pattern"),
        "{stderr}"
    );
    let audit = std::fs::read_to_string(&log).unwrap();
    let notices: Vec<String> = audit
        .lines()
        .filter_map(|l| match serde_json::from_str(l).unwrap() {
            lockrun::audit::Record {
                event: lockrun::audit::Event::Notice { message, .. },
                ..
            } => Some(message),
            _ => None,
        })
        .filter(|m| m.starts_with("core dumps are off"))
        .collect();
    assert_eq!(notices.len(), 1, "{audit}");
    assert!(
        notices[0].contains(&format!("`|{} %e %P`", helper.display())),
        "{}",
        notices[0]
    );
    w.assert_no_run_dirs();
}

/// Where `kernel.core_pattern` sends cores to a unix socket (`@path`, Linux
/// 6.16), the kernel connects as the crashing process: the run's hooks on
/// unix connects refuse it, and the refusal is shown. Judged from outside
/// by the listener: the one connection it accepts comes from the control,
/// the same crash outside the run (its peer pid).
#[test]
fn a_crash_inside_sends_no_core_to_a_socket_outside() {
    use std::os::unix::process::ExitStatusExt as _;
    if skip::before_kernel(
        "a_crash_inside_sends_no_core_to_a_socket_outside",
        (6, 16),
        "core_pattern `@socket`",
    ) {
        return;
    }
    let w = World::new("coresock");
    let sock = w.root.join("core.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let pattern = CorePattern::set(&format!("@{}", sock.display()));
    let run = w.run(&[], &["sh", "-c", "kill -SEGV $$"]);
    let mut control = Command::new("sh")
        .args(["-c", "kill -SEGV $$"])
        .spawn()
        .unwrap();
    let control_pid = control.id();
    // The crashing process waits for its core to be taken: each connection
    // is closed as soon as its peer is known.
    let mut peers = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20)
        && (peers.is_empty() || t.elapsed() < Duration::from_millis(200))
    {
        match listener.accept() {
            Ok((conn, _)) => peers.push(
                nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials)
                    .unwrap()
                    .pid(),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    let _ = control.kill();
    let control_status = control.wait().unwrap();
    drop(pattern);
    assert_eq!(control_status.signal(), Some(libc::SIGSEGV));
    assert_eq!(
        peers,
        [control_pid as i32],
        "the crash inside the run reached the socket"
    );
    assert_eq!(run.status.code(), Some(128 + libc::SIGSEGV), "{run:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!(
            "1 connection refused: unix:{} (sh)",
            sock.display()
        )),
        "{stderr}"
    );
    w.assert_no_run_dirs();
}
