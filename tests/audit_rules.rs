//! Filesystem refusals when the kernel's audit is short of the whole
//! account, by the host's rules or by a burst:
//! - a host whose audit rules leave processes out of syscall auditing: an
//!   `-a task,never` rule, which some distributions ship. Such a task has
//!   no audit context, so Landlock's records come one by one, each with a
//!   serial of its own, the domain's record after the first refusal's, and
//!   no `SYSCALL` record (no process, no outcome);
//! - a burst of refusals from several processes, more than the kernel's
//!   audit backlog holds: it drops records and only counts them;
//! - below Landlock ABI 7, where kernel audit's syscall records stand in
//!   for Landlock's, a host rule `-a task,never` leaves a run's processes
//!   without them: the gap stays, and the refusal says why.
//!
//! The refusals made here are Landlock's and kernel audit's to record, so
//! the runs keep the machine's mounts as they are and the supervisor holds
//! metadata (`LOCKRUN_TEST_NO_READ_ONLY_MOUNTS`, [`run_held_by_landlock`]):
//! with the mounts read-only outside the writable roots, the same writes
//! would be the mount's `EROFS`, which lockrun's own recorder records
//! through the run's ring buffer, no audit record at all.
//!
//! Both are the machine's: the rule holds for every process started while
//! it is loaded, and a burst costs every process's records. So this binary
//! holds these tests only, one at a time (`ONE_AT_A_TIME`): cargo runs test
//! binaries one after another, and no other test of lockrun runs beside
//! them. The rule is removed on every path (a drop guard), and only if the
//! test added it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod support;

use std::process::{Command, Output};
use std::sync::Mutex;

use crate::support::{python, skip, slow, world};
use python::python3;
use world::{s, World};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The machine's audit state for `test` alone, once it may run: as root
/// (the kernel's audit rules and status, Landlock's audit records), or a
/// loud skip.
fn one_at_a_time_as_root(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    let one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !nix::unistd::geteuid().is_root() {
        world::skip(test, "needs root (the kernel's audit rules and status)");
        return None;
    }
    Some(one)
}

/// Add (`add`) or delete (`del`) the audit rule `-a task,never` (no
/// fields) through the audit netlink socket (`AUDIT_ADD_RULE` 1011,
/// `AUDIT_DEL_RULE` 1012, a `struct audit_rule_data` with flags
/// `AUDIT_FILTER_TASK`, action `AUDIT_NEVER`); prints the kernel's answer,
/// 0 or a negative errno.
const RULE: &str = r#"
import socket, struct, sys
op = {"add": 1011, "del": 1012}[sys.argv[1]]
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
body = struct.pack("=3I", 1, 0, 0) + bytes(4 * 64 * 4) + struct.pack("=I", 0)
s.send(struct.pack("=IHHII", 16 + len(body), op, 0x5, 1, 0) + body)
while True:
    d = s.recv(8192)
    if struct.unpack("=H", d[4:6])[0] == 2:  # NLMSG_ERROR: the answer
        print(struct.unpack("=i", d[16:20])[0])
        break
"#;

fn rule(op: &str) -> i32 {
    let out = Command::new(python3())
        .args(["-c", RULE, op])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `-a task,never` while it lives; removed on drop if it was added here.
struct TaskNever {
    added: bool,
}

impl TaskNever {
    fn load() -> Self {
        match rule("add") {
            0 => Self { added: true },
            // The host has the rule already: it is the host's, and stays.
            r if r == -libc::EEXIST => Self { added: false },
            r => panic!("AUDIT_ADD_RULE -a task,never: errno {}", -r),
        }
    }
}

impl Drop for TaskNever {
    fn drop(&mut self) {
        if self.added {
            assert_eq!(
                rule("del"),
                0,
                "the -a task,never rule could not be removed"
            );
        }
    }
}

/// Two writes outside (refused), and `> /dev/stdout`, whose open asks
/// Landlock whether `/proc/<pid>/fd/1` could be made before finding it
/// there (a logged check, not a refusal).
fn run(w: &World, log: &std::path::Path) -> Output {
    let cmd = format!(
        "echo a > {0}/a; echo b > {0}/b; echo out > /dev/stdout; echo wrote-inside > inside",
        s(&w.data)
    );
    run_held_by_landlock(w, &["--audit-log", s(log)], &["sh", "-c", &cmd])
}

#[test]
fn refusals_are_kept_when_the_hosts_audit_rules_give_no_syscall_records() {
    const T: &str = "refusals_are_kept_when_the_hosts_audit_rules_give_no_syscall_records";
    // Landlock's own records, which come without a syscall record here;
    // below ABI 7 the next test judges the same host rule.
    if skip::below_landlock_abi(T, 7, "denial records of Landlock's own") {
        return;
    }
    let Some(_one) = one_at_a_time_as_root(T) else {
        return;
    };
    let w = World::new("auditrules");
    let data = s(&w.data);

    // Control, without the rule (unless the host has it): each refusal
    // with its process, and the check on /proc dropped by its outcome.
    let present = rule("add");
    if present == 0 {
        assert_eq!(rule("del"), 0);
        let out = run(&w, &w.root.join("control.jsonl"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "lockrun: 2 filesystem accesses refused: create a file in {data} ×2 (sh)\n"
            )),
            "{err}"
        );
        assert!(!err.contains("named no process"), "{err}");
    }

    let guard = TaskNever::load();
    let log = w.root.join("never.jsonl");
    let out = run(&w, &log);
    drop(guard);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    // Both refusals, the first one too (its domain's record came after
    // it), each without a process; the check on /proc is no refusal.
    assert!(
        err.contains(&format!(
            "lockrun: 2 filesystem accesses refused: create a file in {data} ×2\n"
        )),
        "{err}"
    );
    assert!(
        err.contains("lockrun: the kernel named no process for 2 of these"),
        "{err}"
    );
    assert!(!err.contains("/proc/"), "{err}");
    // The log says why.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("the kernel gave Landlock's refusals no syscall record"),
        "{text}"
    );
    assert_eq!(text.matches(r#""comm":"""#).count(), 2, "{text}");
    // Judged from outside: nothing written there, the control inside was.
    assert!(!w.data.join("a").exists() && !w.data.join("b").exists());
    assert_eq!(
        std::fs::read_to_string(w.wt.join("inside")).unwrap(),
        "wrote-inside\n"
    );
    w.assert_no_run_dirs();
}

#[test]
fn below_abi_7_a_task_never_rule_leaves_the_refusals_unseen_and_the_run_says_why() {
    let Some(_one) = one_at_a_time_as_root(
        "below_abi_7_a_task_never_rule_leaves_the_refusals_unseen_and_the_run_says_why",
    ) else {
        return;
    };
    let w = World::new("auditgap");
    let ran = w.wt.join("ran");
    let run = |extra: &[&str]| {
        w.cmd(extra, &["sh", "-c", "echo ran > ran"])
            .env("LOCKRUN_TEST_LANDLOCK_ABI", "6")
            .output()
            .unwrap()
    };
    // Control, without the rule (unless the host has it): the syscall
    // records hold the promise, and the run goes on.
    if rule("add") == 0 {
        assert_eq!(rule("del"), 0);
        let out = run(&[]);
        assert!(out.status.success(), "{out:?}");
        std::fs::remove_file(&ran).unwrap();
    }
    let guard = TaskNever::load();
    let refused = run(&[]);
    let accepted = run(&["--accept-gap", "filesystem_refusals_unseen"]);
    drop(guard);
    // Refused, naming the gap and why the records cannot stand in.
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{err}");
    assert!(
        err.contains(
            "filesystem_refusals_unseen: filesystem refusals are not recorded: the audit log and \
             the summary do not name them (this kernel lacks Landlock's denial logging (ABI 7, \
             Linux 6.15), and kernel audit's syscall records cannot stand in here: the host's \
             audit rules leave processes out of syscall auditing (`-a task,never`))"
        ),
        "{err}"
    );
    // Accepted: it runs, and says so.
    let err = String::from_utf8_lossy(&accepted.stderr);
    assert_eq!(accepted.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "lockrun: warning: this kernel cannot hold a promise, which the policy accepts \
             (filesystem_refusals_unseen): "
        ),
        "{err}"
    );
    assert_eq!(std::fs::read(&ran).unwrap(), b"ran\n");
    w.assert_no_run_dirs();
}

/// The kernel's count of audit records it dropped since boot, and the
/// audit daemon's pid (0: none) (`AUDIT_GET`, `struct audit_status`'s
/// `lost` and `pid`), read from outside any run.
const STATUS: &str = r#"
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
s.send(struct.pack("=IHHII", 16, 1000, 0x1, 1, 0))
while True:
    d = s.recv(8192)
    if struct.unpack("=H", d[4:6])[0] == 1000:
        st = struct.unpack("=10I", d[16:56])
        print(st[6], st[3])
        break
"#;

/// (`lost`, the daemon's pid) of [`STATUS`].
fn status() -> (u32, u32) {
    let out = Command::new(python3())
        .args(["-c", STATUS])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut n = text.split_whitespace().map(|n| n.parse().unwrap());
    (n.next().unwrap(), n.next().unwrap())
}

fn lost() -> u32 {
    status().0
}

/// Whether the kernel counts as dropped the records it could not hold for
/// an audit daemon, those lockrun read among them: booted with `audit=1`
/// (as the kernel matrix's guests are) and no daemon connected, every
/// record past its hold queue's backlog limit. Its count is then no count
/// of records a reader missed.
fn held_records_count_as_dropped() -> bool {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap();
    let at_boot = cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("audit="))
        .next_back()
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("on"));
    at_boot && status().1 == 0
}

/// `processes` processes (a power of two) each try to create `each` files
/// in `dir`, and print how many creations were refused with `EACCES`.
fn burst(w: &World, log: &std::path::Path, processes: u32, each: u32) -> (Output, u64) {
    let probe = format!(
        r#"
import errno, os
kids = []
for _ in range({forks}):
    pid = os.fork()
    if pid: kids.append(pid)
    else: kids = []
n = 0
for i in range({each}):
    try:
        open("{dir}/f%d" % i, "w")
    except OSError as e:
        assert e.errno == errno.EACCES, e
        n += 1
os.write(1, b"%d\n" % n)
for k in kids: os.waitpid(k, 0)
"#,
        forks = processes.trailing_zeros(),
        dir = s(&w.data),
    );
    let out = run_held_by_landlock(w, &["--audit-log", s(log)], &[python3(), "-c", &probe]);
    let refused = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            l.parse::<u64>()
                .unwrap_or_else(|e| panic!("{l:?}: {e}: {out:?}"))
        })
        .sum();
    (out, refused)
}

/// `w.run(extra, argv)` with the machine's mounts as they are, so that
/// writes outside the writable roots are Landlock's refusals.
fn run_held_by_landlock(w: &World, extra: &[&str], argv: &[&str]) -> Output {
    w.cmd(extra, argv)
        .env("LOCKRUN_TEST_NO_READ_ONLY_MOUNTS", "1")
        .output()
        .unwrap()
}

/// The refusals a run's summary counts, and the records it says the
/// kernel dropped (none when it says nothing of it).
fn shown(err: &str) -> (u64, Option<u64>) {
    let count = |line: &str| -> u64 { line.split(' ').next().unwrap().parse().unwrap() };
    let refused = err
        .lines()
        .filter_map(|l| l.strip_prefix("lockrun: "))
        .find(|l| l.contains(" filesystem access"))
        .map_or(0, count);
    let dropped = err
        .lines()
        .find_map(|l| l.strip_prefix("lockrun: the kernel dropped "))
        .map(count);
    (refused, dropped)
}

#[test]
fn a_run_says_so_when_the_kernel_drops_its_refusals_records() {
    let Some(_one) =
        one_at_a_time_as_root("a_run_says_so_when_the_kernel_drops_its_refusals_records")
    else {
        return;
    };
    let w = World::new("auditlost");

    // Control: two processes, ten refusals each. When the kernel dropped
    // nothing meanwhile (its count, read from outside, did not rise),
    // every one is shown and no loss is told.
    let before = lost();
    let (out, made) = burst(&w, &w.root.join("control.jsonl"), 2, 10);
    let delta = u64::from(lost().wrapping_sub(before));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(made, 20, "{out:?}");
    if delta == 0 {
        assert_eq!(shown(&err), (20, None), "{err}");
    } else {
        eprintln!("the kernel dropped {delta} audit records during the control (another process's burst): its count is not judged");
    }

    // Eight processes, 20000 refusals each (2000 under emulation, where
    // lockrun reads as much slower as they make them), as fast as they go:
    // more records wait than the kernel's backlog holds (64 by default),
    // and it drops the refusals' records (made where the call cannot wait).
    let log = w.root.join("burst.jsonl");
    let each = slow::repetitions(20_000, 2_000);
    let before = lost();
    let (out, made) = burst(&w, &log, 8, each);
    let delta = u64::from(lost().wrapping_sub(before));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(made, 8 * u64::from(each), "{out:?}");
    assert!(
        delta > 0,
        "the kernel dropped no audit record in the burst (its backlog is larger than here): nothing to judge"
    );
    let (refused, dropped) = shown(&err);
    // The account is short, and the run says so.
    assert!(refused < made, "{err}");
    assert!(
        err.contains("so this run's filesystem and scope refusals may not all be shown"),
        "{err}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    if held_records_count_as_dropped() {
        // The kernel's count rose by every record it could not hold, read
        // ones too: no count of what the run missed, and lockrun tells no
        // such loss, but says in the log that it cannot be told. The
        // summary's line above is its reader's own (its socket overflowed).
        assert_eq!(dropped, None, "{err}");
        let counted: u64 = text
            .split("the kernel counted ")
            .nth(1)
            .and_then(|r| r.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no notice of the kernel's count: {text}"));
        assert!(
            0 < counted && counted <= delta,
            "{counted} of {delta}: {text}"
        );
        assert!(
            text.contains("booted with `audit=1` and no audit daemon"),
            "{text}"
        );
        assert!(
            err.contains("lockrun's kernel audit socket overflowed while the run went on"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&w.data).unwrap().count(), 0);
        w.assert_no_run_dirs();
        return;
    }
    // The kernel's count over the run, which the count from outside, over
    // more, holds.
    let dropped = dropped.unwrap_or_else(|| panic!("no loss told: {err}"));
    assert!(
        0 < dropped && dropped <= delta,
        "{dropped} of {delta}: {err}"
    );
    assert!(
        text.contains(&format!(
            r#""event":"audit_records_lost","cause":"dropped","records":{dropped},"#
        )),
        "{}",
        text.lines().rev().take(3).collect::<Vec<_>>().join("\n")
    );
    // Judged from outside: no file was made there.
    assert_eq!(std::fs::read_dir(&w.data).unwrap().count(), 0);
    w.assert_no_run_dirs();
}
