//! `lockrun doctor`: on this host every promise holds and the canary's
//! evidence is in its output; with the hooks deliberately left off (a
//! test-only build feature, `weaken-for-tests`, that release builds lack) the
//! canary catches it and doctor exits non-zero.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "support/skip.rs"]
mod skip;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

use skip::skip;

fn doctor(weaken: Option<&str>) -> (i32, String) {
    let mut c = Command::new(BIN);
    c.arg("doctor");
    if let Some(w) = weaken {
        c.env("LOCKRUN_TEST_WEAKEN", w);
    }
    let out = c.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn line<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
}

#[test]
fn doctor_holds_here_and_its_canary_really_ran() {
    if !nix::unistd::geteuid().is_root() {
        skip("doctor_holds_here_and_its_canary_really_ran", "needs root");
        return;
    }
    let (code, text) = doctor(None);
    assert_eq!(code, 0, "{text}");
    for what in [
        "Landlock",
        "cgroup v2",
        "bpffs",
        "BPF cgroup hooks",
        "kernel audit",
    ] {
        assert!(line(&text, what).contains("[ ok ]"), "{what}: {text}");
    }
    // The controls got through, seen from outside...
    let l = line(&text, "write in the worktree");
    assert!(l.contains("inside: ok") && l.contains("file exists"), "{l}");
    let l = line(&text, "TCP to the allowed");
    assert!(
        l.contains("inside: ok") && l.contains("listener received 6 bytes"),
        "{l}"
    );
    // ...and each escape was attempted (the errno the probe got) and failed (seen from outside).
    for (what, errno, outside) in [
        ("escaped.txt", "errno=13 (EACCES", "file absent"),
        ("TCP to an outside listener", "errno=1 (EPERM", "accepted 0"),
        ("UDP to", "errno=1 (EPERM", "received 0 bytes"),
        (
            "escape    unix socket",
            "errno=1 (EPERM",
            "accepted nothing",
        ),
        (
            "SIGTERM to an outside process",
            "errno=1 (EPERM",
            "still alive",
        ),
    ] {
        let l = line(&text, what);
        assert!(
            l.contains("[ ok ]") && l.contains(errno) && l.contains(outside),
            "{l}"
        );
    }
    // Every promise that depends on the kernel, with what holds it here.
    let promises: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("the promises that depend on the kernel"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(promises.len() >= 7, "{text}");
    assert!(promises.iter().all(|l| l.contains("[ ok ]")), "{text}");
    assert!(text.contains("every promise holds on this host"), "{text}");
}

#[cfg(feature = "weaken-for-tests")]
#[test]
fn doctor_catches_a_sandbox_without_its_hooks() {
    if !nix::unistd::geteuid().is_root() {
        skip("doctor_catches_a_sandbox_without_its_hooks", "needs root");
        return;
    }
    let (code, text) = doctor(Some("hooks"));
    assert_eq!(code, 4, "the canary must fail: {text}");
    let l = line(&text, "TCP to an outside listener");
    assert!(l.contains("FAIL") && l.contains("inside: ok"), "{l}");
    let l = line(&text, "UDP to");
    assert!(l.contains("FAIL"), "{l}");
    // Landlock still held: the weakening is exactly the one layer.
    assert!(line(&text, "escaped.txt").contains("[ ok ]"), "{text}");
    assert!(text.contains("does NOT confine as promised"), "{text}");
}

#[cfg(not(feature = "weaken-for-tests"))]
#[test]
fn doctor_catches_a_sandbox_without_its_hooks() {
    skip(
        "doctor_catches_a_sandbox_without_its_hooks",
        "built without the weaken-for-tests feature",
    );
}
