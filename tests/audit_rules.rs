//! Filesystem refusals on a host whose audit rules leave processes out of
//! syscall auditing: an `-a task,never` rule, which some distributions
//! ship. Such a task has no audit context, so Landlock's records come one
//! by one, each with a serial of its own, the domain's record after the
//! first refusal's, and no `SYSCALL` record (no process, no outcome).
//!
//! The rule is the machine's, for every process started while it is
//! loaded, so this binary holds this one test: cargo runs test binaries
//! one after another, and no other test of lockrun runs beside it. The
//! rule is removed on every path (a drop guard), and only if this test
//! added it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/fs.rs"]
mod support;

use python::python3;
use std::process::{Command, Output};
use support::{s, World};

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
    w.run(&["--audit-log", s(log)], &["sh", "-c", &cmd])
}

#[test]
fn refusals_are_kept_when_the_hosts_audit_rules_give_no_syscall_records() {
    if !nix::unistd::geteuid().is_root() {
        support::skip(
            "refusals_are_kept_when_the_hosts_audit_rules_give_no_syscall_records",
            "needs root (audit rules, Landlock's audit records)",
        );
        return;
    }
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
                "lockrun: 2 filesystem accesses refused: {data} ×2 (sh)\n"
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
            "lockrun: 2 filesystem accesses refused: {data} ×2\n"
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
