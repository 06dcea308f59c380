//! Every filesystem refusal is seen also where Landlock logs none (ABI < 7,
//! Linux before 6.15): kernel audit's records of the run's refused calls,
//! told by a login uid of the run's own, stand in ([`lockrun::audit::syscalls`]).
//!
//! On this machine's kernel the test build lowers the Landlock ABI a run
//! uses (`LOCKRUN_TEST_LANDLOCK_ABI=6`), so the fallback is what shows the
//! refusals; under an older kernel it is so anyway. Each refusal is judged
//! from outside too, beside a control inside the worktree that must work
//! and show nothing.
//!
//! The run's audit rule is the machine's: the tests also look that no rule
//! of a run's is left, after the run and after a killed lockrun and
//! `lockrun gc`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/fs.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lockrun::audit::{Event, Record};
use support::{assert_absent, s, skip, World, BIN};

/// Landlock ABI 6: no denial logging.
const ABI: &str = "6";

/// The login uids of the kernel's audit rules of lockrun's shapes
/// (`AUDIT_LIST_RULES`: exit filter, always, the fields arch, auid and
/// exit, exit `-EACCES` or `-EPERM`), one line each, with the exit.
const RULES: &str = r#"
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
s.send(struct.pack("=IHHII", 16, 1013, 0x5, 1, 0))
done = False
while not done:
    d = s.recv(65536)
    off = 0
    while off + 16 <= len(d):
        n, t = struct.unpack_from("=IH", d, off)
        p = d[off + 16:off + n]
        if t == 2 and struct.unpack_from("=i", p)[0] != 0:
            raise SystemExit("AUDIT_LIST_RULES: errno %d" % -struct.unpack_from("=i", p)[0])
        if t == 3:
            done = True
        if t == 1013:
            flags, action, count = struct.unpack_from("=3I", p)
            fields = struct.unpack_from("=64I", p, 12 + 256)[:count]
            values = struct.unpack_from("=64I", p, 12 + 512)[:count]
            if flags & 7 == 4 and action == 2 and fields == (11, 9, 103) and values[2] in (0xfffffff3, 0xffffffff):
                print(values[1], 0x100000000 - values[2])
        off += (n + 3) & ~3
"#;

/// The login uids of lockrun's rules loaded now, each with its rule's
/// errno (`EACCES`: filesystem refusals; `EPERM`: reaches outside the run,
/// at ABI 6).
fn rules() -> Vec<(u32, i32)> {
    let out = Command::new(python::python3())
        .args(["-c", RULES])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (uid, errno) = l.split_once(' ').unwrap();
            (uid.parse().unwrap(), errno.parse().unwrap())
        })
        .collect()
}

/// As root, or a loud skip (the kernel's audit rules and records).
fn root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip(test, "needs root (the kernel's audit rules and records)");
    false
}

/// A filesystem refusal: (path, access, comm).
type Seen = (String, Vec<String>, String);

/// The filesystem refusals of a run's log, and the run's login uid, as
/// its records name it.
fn refusals(log: &Path) -> (BTreeSet<Seen>, Option<u32>) {
    let mut seen = BTreeSet::new();
    let mut uid = None;
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let Record { event, .. } = serde_json::from_str(line).unwrap();
        if let Event::Filesystem(f) = event {
            assert!(f.pid > 0, "{f:?}");
            uid = f
                .raw
                .split_whitespace()
                .find_map(|w| w.strip_prefix("auid="))
                .and_then(|u| u.parse().ok());
            seen.insert((f.path.unwrap_or_default(), f.access, f.comm));
        }
    }
    (seen, uid)
}

fn one(path: &str, access: &str, comm: &str) -> Seen {
    (path.to_owned(), vec![access.to_owned()], comm.to_owned())
}

#[test]
fn below_abi_7_each_filesystem_refusal_is_seen_with_its_path_and_access() {
    if !root("below_abi_7_each_filesystem_refusal_is_seen_with_its_path_and_access") {
        return;
    }
    let w = World::new("fsseen");
    let data = s(&w.data).to_owned();
    std::fs::write(w.data.join("existing"), b"canary").unwrap();
    std::fs::write(w.data.join("ro-file"), b"canary").unwrap();
    let secret = w.data.join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key"), b"k").unwrap();
    std::fs::write(secret.join("run.sh"), b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(
        secret.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let usr_file = format!("/usr/lockrun-test-{}", std::process::id());
    let usr_dir = format!("/usr/lockrun-test-dir-{}", std::process::id());
    let _gone = support::RemovedAtEnd(vec![usr_file.clone().into(), usr_dir.clone().into()]);
    let log = w.root.join("audit.jsonl");
    // Six refusals, then the control inside the worktree, and an open of
    // /dev/stdout with O_CREAT, whose create check the kernel drops as the
    // file is there (a call that succeeds: no record).
    let script = format!(
        "echo x >> {data}/existing; echo x > {usr_file}; mkdir {usr_dir}; \
         cat {data}/secret/key; mv {data}/ro-file moved; {data}/secret/run.sh; \
         echo in > inside && mkdir d && mv inside d/ && cat d/inside; echo out > /dev/stdout"
    );
    let out = w
        .cmd(
            &["--audit-log", s(&log), "--deny-read", s(&secret)],
            &["sh", "-c", &script],
        )
        .env("LOCKRUN_TEST_LANDLOCK_ABI", ABI)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // The last command's status: the control and the open of stdout worked.
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "in\nout\n", "{err}");

    // Each refusal, with its path and access in Landlock's words.
    let (seen, uid) = refusals(&log);
    let want: BTreeSet<_> = [
        one(&format!("{data}/existing"), "fs.write_file", "sh"),
        one("/usr", "fs.make_reg", "sh"),
        one("/usr", "fs.make_dir", "mkdir"),
        one(&format!("{data}/secret/key"), "fs.read_file", "cat"),
        one(&data, "fs.remove_file", "mv"),
        one(&format!("{data}/secret/run.sh"), "fs.execute", "sh"),
    ]
    .into();
    assert_eq!(seen, want, "{err}");
    // And in the summary.
    for said in [
        format!("write {data}/existing (sh)"),
        "create a file in /usr (sh)".to_owned(),
        "make a dir in /usr (mkdir)".to_owned(),
        format!("read {data}/secret/key (cat)"),
        format!("remove a file from {data} (mv)"),
        format!("run {data}/secret/run.sh (sh)"),
    ] {
        assert!(err.contains(&said), "{said} not in: {err}");
    }
    assert!(
        err.contains("lockrun: 6 filesystem accesses refused: "),
        "{err}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("are taken from kernel audit's records of the calls of the run's login uid"),
        "{text}"
    );
    // Judged from outside: nothing written, made or moved there; the
    // control inside was.
    assert_eq!(std::fs::read(w.data.join("existing")).unwrap(), b"canary");
    assert_absent(Path::new(&usr_file));
    assert_absent(Path::new(&usr_dir));
    assert!(w.data.join("ro-file").exists());
    assert_absent(&w.wt.join("moved"));
    assert_eq!(std::fs::read(w.wt.join("d/inside")).unwrap(), b"in\n");

    // The run's rule went with it.
    let uid = uid.expect("the records name the run's login uid");
    assert!(uid >= 0x8000_0000, "{uid}");
    assert!(
        !rules().iter().any(|r| r.0 == uid),
        "the run's audit rule was left"
    );
}

/// Kills its lockrun (and the command, through the watchdog) if the test
/// ends before it did.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_killed_lockruns_audit_rule_is_removed_by_gc() {
    if !root("a_killed_lockruns_audit_rule_is_removed_by_gc") {
        return;
    }
    let w = World::new("fsseengc");
    let uid_file = w.wt.join("uid");
    let lockrun = w
        .cmd(
            &[],
            &[
                "sh",
                "-c",
                "cat /proc/self/loginuid > uid.tmp && mv uid.tmp uid && exec sleep 60",
            ],
        )
        .env("LOCKRUN_TEST_LANDLOCK_ABI", ABI)
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lockrun = Killed(lockrun);
    // The command runs, with its login uid, once its rule is loaded.
    let started = Instant::now();
    let uid: u32 = loop {
        if let Ok(text) = std::fs::read_to_string(&uid_file) {
            break text.trim().parse().unwrap();
        }
        assert!(
            lockrun.0.try_wait().unwrap().is_none(),
            "lockrun ended before the command started"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the command did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(uid >= 0x8000_0000, "{uid}");
    // At ABI 6, one rule for its filesystem refusals, one for its reaches
    // outside the run (signals, abstract sockets); below (the run's ABI is
    // the kernel's where that is lower: 6.1's 2), the first alone.
    let at_6 = skip::landlock_abi() >= 6;
    let both = if at_6 {
        vec![(uid, libc::EPERM), (uid, libc::EACCES)]
    } else {
        vec![(uid, libc::EACCES)]
    };
    let ours = |rules: Vec<(u32, i32)>| {
        let mut r: Vec<_> = rules.into_iter().filter(|r| r.0 == uid).collect();
        r.sort_unstable();
        r
    };
    assert_eq!(ours(rules()), both, "the run's rules are not loaded");
    // SIGKILL: no teardown runs, and the rules stay.
    lockrun.0.kill().unwrap();
    lockrun.0.wait().unwrap();
    assert_eq!(ours(rules()), both, "the rules are gone without gc");
    let gc = Command::new(BIN)
        .args(["gc", "--state-dir", s(&w.state), "--grace-secs", "0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&gc.stdout);
    assert!(gc.status.success(), "{gc:?}");
    let removed: &[&str] = if at_6 {
        &[
            "its calls refused with EACCES",
            "its signal and socket calls refused with EPERM",
        ]
    } else {
        &["its calls refused with EACCES"]
    };
    for refused in removed {
        assert!(
            said.contains(&format!(
                "removed the kernel audit rule of login uid {uid} ({refused}): its run's cgroup \
                 is gone"
            )),
            "{said}"
        );
    }
    assert_eq!(ours(rules()), Vec::new(), "gc left the rules");
}
