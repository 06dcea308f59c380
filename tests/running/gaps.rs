//! A promise the kernel cannot hold refuses the run, naming it and what the
//! kernel lacks, unless the policy accepts exactly that gap; then the run
//! goes on and says so, every run. On a newer kernel the test
//! build lowers the Landlock ABI it uses (`LOCKRUN_TEST_LANDLOCK_ABI`), and
//! turns off kernel audit's syscall records, which would otherwise hold
//! the promise Landlock's denial logging holds from ABI 7
//! (`LOCKRUN_TEST_SYSCALL_AUDIT=off`), so that there is a gap to judge;
//! under an older kernel it has its own.

use std::process::Output;

use crate::support::{skip, world};
use world::{assert_absent, s, World};

/// Landlock ABI 6: no denial logging (ABI 7), and with the syscall
/// records turned off, at least that gap.
const ABI: &str = "6";

fn run(w: &World, extra: &[&str]) -> Output {
    w.cmd(extra, &["sh", "-c", "echo ran > ran"])
        .env("LOCKRUN_TEST_LANDLOCK_ABI", ABI)
        .env("LOCKRUN_TEST_SYSCALL_AUDIT", "off")
        .output()
        .unwrap()
}

/// The names a refusal says to accept: `run.accept_gaps = ["a", "b"]`.
fn names_in(refusal: &str) -> Vec<String> {
    let list = refusal
        .split("run.accept_gaps = [")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .unwrap_or_else(|| panic!("no names to accept in: {refusal}"));
    list.split(", ")
        .map(|n| n.trim_matches('"').to_owned())
        .collect()
}

#[test]
fn a_gap_refuses_the_run_unless_the_policy_accepts_it_and_then_every_run_says_so() {
    let w = World::new("gaps");
    let marker = w.wt.join("ran");
    // Refused: exit 125, one line naming each gap and what the kernel lacks.
    let out = run(&w, &[]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("lockrun: this kernel cannot hold "),
        "{err}"
    );
    assert!(
        lines[0].contains("filesystem_refusals_unseen: filesystem refusals are not recorded"),
        "{err}"
    );
    assert!(
        lines[0].contains("this kernel lacks Landlock's denial logging (ABI 7, Linux 6.15)"),
        "{err}"
    );
    assert_absent(&marker);
    let names = names_in(lines[0]);

    // Accepting all but one is not enough.
    if names.len() > 1 {
        let mut flags = Vec::new();
        for n in &names[1..] {
            flags.extend(["--accept-gap", n.as_str()]);
        }
        let out = run(&w, &flags);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(err.contains(&format!("{}:", names[0])), "{err}");
        assert_absent(&marker);
    }

    // Accepted, by flag and by policy: the run goes on, and says so.
    let log = w.root.join("audit.jsonl");
    let mut flags = vec!["--audit-log", s(&log)];
    for n in &names {
        flags.extend(["--accept-gap", n.as_str()]);
    }
    let policy = w.root.join("accepting.toml");
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    std::fs::write(
        &policy,
        format!("[run]\naccept_gaps = [{}]\n", quoted.join(", ")),
    )
    .unwrap();
    for extra in [flags.clone(), vec!["--policy", s(&policy)]] {
        std::fs::remove_file(&marker).ok();
        let out = run(&w, &extra);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(marker.exists(), "the accepted run ran");
        for n in &names {
            assert!(
                err.lines().any(|l| l.starts_with(&format!(
                    "lockrun: warning: this kernel cannot hold a promise, which the policy accepts ({n}): "
                ))),
                "{n} not said: {err}"
            );
        }
    }
    let notices = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"event\":\"notice\"") && l.contains("which the policy accepts"))
        .count();
    assert_eq!(notices, names.len(), "one notice per gap in the log");

    // A gap lockrun does not know is a usage error.
    let out = run(&w, &["--accept-gap", "everything"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("\"everything\" is no gap lockrun knows"),
        "{err}"
    );
}

/// Without Landlock nothing confines the run's writes: every run is
/// refused (exit 125, one line naming Landlock and why it is missing),
/// whatever gaps the policy accepts, and `doctor` says no run starts. On a
/// kernel booted without it (`cargo xtask test --kernel 6.12 --lsm
/// lockdown,yama,bpf`) that kernel's own answer; on one that has it, the
/// test build's stand-in (`LOCKRUN_TEST_LANDLOCK_ABI=0`: Landlock "not
/// enabled at boot", as such a kernel answers). Judged from outside: the
/// command's file is not there. Control: the same run where Landlock is.
#[test]
fn without_landlock_every_run_is_refused_naming_it() {
    let w = World::new("nolandlock");
    let real = skip::landlock_abi() == 0;
    let ran = w.wt.join("ran");
    let cmd = |extra: &[&str], absent: bool| {
        let mut c = w.cmd(extra, &["sh", "-c", "echo ran > ran"]);
        if absent && !real {
            c.env("LOCKRUN_TEST_LANDLOCK_ABI", "0");
        }
        c
    };
    let every_gap: Vec<&str> = [
        "truncate",
        "device_ioctl",
        "signal_scope",
        "abstract_unix_scope",
        "unix_addresses",
        "filesystem_refusals_unseen",
    ]
    .iter()
    .flat_map(|g| ["--accept-gap", g])
    .collect();
    for extra in [&[][..], &every_gap] {
        let out = cmd(extra, true).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("lockrun: filesystem sandbox: Landlock, which confines the run's writes, is not available in this kernel: compiled in but not enabled at boot (boot with lsm=…,landlock); lockrun will not run the command unconfined"),
            "{err}"
        );
        assert_absent(&ran);
        w.assert_no_run_dirs();
    }
    let mut doctor = std::process::Command::new(world::BIN);
    doctor.args(["doctor", "--no-canary"]);
    if !real {
        doctor.env("LOCKRUN_TEST_LANDLOCK_ABI", "0");
    }
    let out = doctor.output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("[MISS]"), "{said}");
    assert!(
        said.contains("nothing: no Landlock (no run starts)"),
        "{said}"
    );
    if real {
        return;
    }
    // Control: where Landlock is, the run runs.
    let out = cmd(&[], false).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
}
