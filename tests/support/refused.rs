//! A lockrun that must refuse, run so that whatever it does cannot hurt
//! the test or the machine: its address space capped (a policy of
//! `/dev/zero` once grew lockrun by gigabytes in seconds), killed past a
//! time limit (a FIFO once hung it), its output read to a bound. Then the
//! refusal judged: exit 2, exactly one line on stderr, `lockrun: …`.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The address space lockrun gets here (KiB, for `ulimit -v`): ample for
/// loading a policy or a short run, far below what the machine has.
const ADDRESS_SPACE_KIB: u64 = 1 << 20;
/// The most of each output stream kept.
const KEPT: u64 = 64 << 10;

/// `bin` with its address space capped: add arguments, environment and
/// directory, then run it with [`bounded`].
pub fn capped(bin: &str) -> Command {
    capped_via(&[], bin)
}

/// [`capped`], started by `launcher` (`ip netns exec NS`).
pub fn capped_via(launcher: &[&str], bin: &str) -> Command {
    let script = format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\"");
    let mut all: Vec<&str> = launcher.to_vec();
    all.extend(["/bin/sh", "-c", &script, bin]);
    let mut c = Command::new(all[0]);
    c.args(&all[1..]);
    c
}

/// What a bounded run did.
#[derive(Debug)]
pub struct Bounded {
    /// The exit status; `None` when killed by a signal (our SIGKILL too).
    pub code: Option<i32>,
    #[allow(dead_code)] // shown when an assertion fails
    pub stdout: String,
    pub stderr: String,
    /// Killed because it ran past its limit.
    pub timed_out: bool,
    pub took: Duration,
}

/// Run `cmd`, killed (`SIGKILL`) should it run `limit` or longer.
pub fn bounded(mut cmd: Command, limit: Duration) -> Bounded {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read = |stream: Option<Box<dyn std::io::Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut s) = stream {
                let _ = s.by_ref().take(KEPT).read_to_end(&mut kept);
                let _ = std::io::copy(&mut s, &mut std::io::sink());
            }
            let _ = tx.send(String::from_utf8_lossy(&kept).into_owned());
        });
        rx
    };
    let out = read(child.stdout.take().map(|s| Box::new(s) as _));
    let err = read(child.stderr.take().map(|s| Box::new(s) as _));
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() >= limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    // A process it left may hold the pipes: wait for them a moment only.
    let text =
        |rx: mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
    Bounded {
        code: status.code(),
        stdout: text(out),
        stderr: text(err),
        timed_out,
        took,
    }
}

/// `got` is lockrun's refusal of a bad input: not timed out, exit 2,
/// exactly one line on stderr, starting `lockrun: `, holding each of `wants`.
pub fn assert_refused(name: &str, got: &Bounded, wants: &[&str]) {
    assert!(
        !got.timed_out,
        "{name}: still running after {:?}, killed: {got:?}",
        got.took
    );
    assert_eq!(got.code, Some(2), "{name}: exit status: {got:?}");
    let lines: Vec<&str> = got.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{name}: one line on stderr: {got:?}");
    assert!(lines[0].starts_with("lockrun: "), "{name}: {got:?}");
    for w in wants {
        assert!(lines[0].contains(w), "{name}: {w:?} not in {:?}", lines[0]);
    }
}
