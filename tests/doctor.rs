//! `lockrun doctor`: on this host every promise holds and the canary's
//! evidence is in its output; with the hooks deliberately left off (a
//! test-only build feature, `weaken-for-tests`, that release builds lack) the
//! canary catches it and doctor exits non-zero.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod support;

use std::process::Command;

use serde_json::Value;

use crate::support::skip;

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

/// `lockrun doctor --no-canary`, as text and as JSON, with `env` (the test
/// build's stand-ins for an older kernel): both exit statuses, the text,
/// and the one JSON object.
fn doctor_both(env: &[(&str, &str)]) -> (i32, String, i32, Value) {
    let mut text = Command::new(BIN);
    text.args(["doctor", "--no-canary"])
        .envs(env.iter().copied());
    let text = text.output().unwrap();
    let mut json = Command::new(BIN);
    json.args(["doctor", "--json", "--no-canary"])
        .envs(env.iter().copied());
    let json = json.output().unwrap();
    let report: Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no one JSON object ({e}): {}{}",
            String::from_utf8_lossy(&json.stdout),
            String::from_utf8_lossy(&json.stderr)
        )
    });
    (
        text.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&text.stdout).into_owned(),
        json.status.code().unwrap_or(-1),
        report,
    )
}

/// The promise of `report` whose text starts with `start`.
#[cfg_attr(not(feature = "weaken-for-tests"), allow(dead_code))]
fn promise<'a>(report: &'a Value, start: &str) -> &'a Value {
    report["promises"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["promise"].as_str().unwrap().starts_with(start))
        .unwrap_or_else(|| panic!("no promise {start:?} in {report:#}"))
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
        // Outside the writable roots every mount is read-only.
        ("escaped.txt", "errno=30 (EROFS", "file absent"),
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

/// `--json` tells what the text tells: the same promises, each held by
/// the same mechanism or left with the same gap, the kernel's release and
/// Landlock ABI, and the same exit status.
#[test]
fn doctor_json_tells_what_the_text_tells() {
    let (text_code, text, json_code, report) = doctor_both(&[]);
    assert_eq!(json_code, text_code, "{text}\n{report:#}");
    let release = nix::sys::utsname::uname().unwrap();
    assert_eq!(
        report["release"].as_str(),
        release.release().to_str(),
        "{report:#}"
    );
    let abi = report["landlock_abi"].as_u64().unwrap();
    let landlock = line(&text, "] Landlock ");
    if abi == 0 {
        assert!(landlock.contains("[MISS]"), "{landlock}");
    } else {
        assert!(landlock.contains(&format!(" ABI {abi} ")), "{landlock}");
    }
    let promises = report["promises"].as_array().unwrap();
    let told: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("the promises that depend on the kernel"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(promises.len() >= 7, "{report:#}");
    assert_eq!(promises.len(), told.len(), "{text}\n{report:#}");
    for (p, l) in promises.iter().zip(&told) {
        let mut keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert!(l.contains(p["promise"].as_str().unwrap()), "{l}\n{p:#}");
        if let Some(by) = p["held_by"].as_str() {
            assert_eq!(keys, ["held_by", "mechanism", "promise"], "{p:#}");
            assert!(l.starts_with("  [ ok ] ") && l.ends_with(by), "{l}\n{p:#}");
        } else if let Some(gap) = p["gap"].as_str() {
            assert_eq!(keys, ["gap", "lacks", "promise"], "{p:#}");
            assert!(l.starts_with("  [GAP ] "), "{l}");
            assert!(l.contains(p["lacks"].as_str().unwrap()), "{l}\n{p:#}");
            assert!(l.contains(&format!("accepts {gap} ")), "{l}");
        } else {
            assert_eq!(keys, ["no_landlock", "promise"], "{p:#}");
            assert!(l.starts_with("  [MISS] "), "{l}");
        }
    }
    assert!(report["canary"].is_null(), "{report:#}");
}

/// The test build's stand-ins for an older kernel change what `--json`
/// says holds each promise: below ABI 3 the read-only mounts (the
/// supervisor where they are not used), below 5 and 6 `nodev` mounts and
/// the supervisor; below 7 without kernel audit's syscall records, the gap
/// for denial logging; without the cgroup unix hooks, never those hooks.
#[cfg(feature = "weaken-for-tests")]
#[test]
fn doctor_json_follows_the_kernel_it_is_told_of() {
    let (_, _, _, native) = doctor_both(&[]);
    let native_abi = native["landlock_abi"].as_u64().unwrap();
    if native_abi == 0 {
        // No Landlock here: nothing to lower, and no run.
        assert!(promise(&native, "writes only")["no_landlock"].is_string());
        return;
    }
    let mechanism = |report: &Value, start: &str| {
        promise(report, start)["mechanism"]
            .as_str()
            .map(str::to_owned)
    };

    let (text_code, text, code, abi2) = doctor_both(&[("LOCKRUN_TEST_LANDLOCK_ABI", "2")]);
    assert_eq!(code, text_code, "{text}\n{abi2:#}");
    assert_eq!(abi2["landlock_abi"].as_u64(), Some(native_abi.min(2)));
    assert_eq!(mechanism(&abi2, "writes only").as_deref(), Some("landlock"));
    // Truncation outside: the read-only mounts where their refusals are
    // seen (the recorder, which every kernel of the matrix has), else the
    // supervisor.
    assert_eq!(
        mechanism(&abi2, "no file outside").as_deref(),
        Some("read_only_mounts"),
        "{abi2:#}"
    );
    let (_, _, _, supervised) = doctor_both(&[
        ("LOCKRUN_TEST_LANDLOCK_ABI", "2"),
        ("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1"),
    ]);
    assert_eq!(
        mechanism(&supervised, "no file outside").as_deref(),
        Some("supervisor"),
        "{supervised:#}"
    );
    assert_eq!(
        mechanism(&abi2, "no ioctl").as_deref(),
        Some("nodev_mounts"),
        "{abi2:#}"
    );
    assert_eq!(
        mechanism(&abi2, "no signal").as_deref(),
        Some("supervisor"),
        "{abi2:#}"
    );
    assert!(
        line(&text, "no signal to a process").contains("the seccomp supervisor"),
        "{text}"
    );

    let (_, _, code, abi6) = doctor_both(&[
        ("LOCKRUN_TEST_LANDLOCK_ABI", "6"),
        ("LOCKRUN_TEST_SYSCALL_AUDIT", "off"),
    ]);
    assert_eq!(abi6["landlock_abi"].as_u64(), Some(native_abi.min(6)));
    let recorded = promise(&abi6, "every filesystem refusal recorded");
    assert_eq!(
        recorded["gap"].as_str(),
        Some("filesystem_refusals_unseen"),
        "{abi6:#}"
    );
    assert!(
        recorded["lacks"]
            .as_str()
            .unwrap()
            .starts_with("Landlock's denial logging (ABI 7, Linux 6.15)"),
        "{recorded:#}"
    );
    assert_eq!(code, 3, "a gap is what the host lacks: {abi6:#}");

    let (_, _, _, no_hooks) = doctor_both(&[("LOCKRUN_TEST_NO_UNIX_HOOKS", "1")]);
    let unix = promise(&no_hooks, "pathname unix sockets");
    assert!(
        unix["mechanism"] == "supervisor_and_unix_guard" || unix["gap"] == "unix_addresses",
        "{unix:#}"
    );
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
    // The same verdict as JSON, with the attempt that got out.
    let out = Command::new(BIN)
        .args(["doctor", "--json"])
        .env("LOCKRUN_TEST_WEAKEN", "hooks")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(4), "{report:#}");
    let tcp = report["canary"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["what"]
                .as_str()
                .unwrap()
                .starts_with("TCP to an outside listener")
        })
        .unwrap();
    assert_eq!(tcp["held"], false, "{tcp:#}");
    assert_eq!(tcp["inside"], "ok", "{tcp:#}");
}

#[cfg(not(feature = "weaken-for-tests"))]
#[test]
fn doctor_catches_a_sandbox_without_its_hooks() {
    skip(
        "doctor_catches_a_sandbox_without_its_hooks",
        "built without the weaken-for-tests feature",
    );
}
