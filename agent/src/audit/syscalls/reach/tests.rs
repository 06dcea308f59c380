#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;

use super::super::records::{At, DevIno};
use super::super::Reach;
use super::*;
use crate::audit::kernel::parse_record;

/// The run's login uid in the records below.
const UID: u32 = 2_147_681_900;

/// The run's cgroup, as `/proc/<pid>/cgroup` shows it.
const RUN: &str = "/lockrun/build-1/run-1";

/// A refused call of the run's process 4735 (`python3`), as this kernel
/// (6.18, the run's Landlock at ABI 6) wrote it: its SYSCALL record, with
/// `call` (`syscall=… exit=… a0=…`), and the records after it.
fn group(call: &str, after: &[(u16, &str)]) -> Vec<AuditRecord> {
    let mut g = vec![parse_record(
        SYSCALL,
        format!(
            "audit(1796542359.022:471023): arch=c000003e {call} items=0 ppid=4728 pid=4735 \
             auid={UID} uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) \
             ses=217 comm=\"python3\" exe=\"/root/.pyenv/versions/3.11.7/bin/python3.11\" \
             key=(null)"
        )
        .as_bytes(),
    )
    .unwrap()];
    for (ty, text) in after {
        g.push(
            parse_record(
                *ty,
                format!("audit(1796542359.022:471023): {text}").as_bytes(),
            )
            .unwrap(),
        );
    }
    g
}

/// `OBJ_PID` of the signal's target, 4683 (`sleep`).
const TARGET: (u16, &str) = (
    OBJ_PID,
    r#"opid=4683 oauid=-1 ouid=0 oses=-1 ocomm="sleep""#,
);

/// Processes as `/proc` shows them: name, cgroup; the caller's pidfds.
#[derive(Default)]
struct Fake {
    procs: BTreeMap<u32, (&'static str, &'static str)>,
    pidfds: BTreeMap<i32, u32>,
}

impl Fake {
    fn with_sleep(cgroup: &'static str) -> Self {
        Self {
            procs: BTreeMap::from([(4683, ("sleep", cgroup))]),
            pidfds: BTreeMap::from([(3, 4683)]),
        }
    }
}

impl Look for Fake {
    fn fd_path(&self, _: u32, _: i32) -> Option<String> {
        None
    }
    fn dev_ino(&self, _: u32, _: &At<'_>) -> Option<DevIno> {
        None
    }
    fn comm(&self, pid: u32) -> Option<String> {
        self.procs.get(&pid).map(|p| p.0.to_owned())
    }
    fn pidfd_pid(&self, pid: u32, fd: i32) -> Option<u32> {
        assert_eq!(pid, 4735);
        self.pidfds.get(&fd).copied()
    }
    fn cgroups(&self, pid: u32) -> Option<String> {
        self.procs.get(&pid).map(|p| format!("0::{}\n", p.1))
    }
}

fn watch(reach: Reach) -> Watch {
    Watch {
        login_uid: UID,
        writable: Vec::new(),
        granted: super::super::refer::Granted::default(),
        cgroup: Some(RUN.to_owned()),
        reach,
    }
}

const ABI_6: Reach = Reach {
    signals: true,
    abstract_sockets: true,
};

fn signal_to_sleep() -> ScopeTarget {
    ScopeTarget::Signal {
        to_pid: 4683,
        to_comm: "sleep".into(),
    }
}

#[test]
fn a_refused_signal_names_the_process_kernel_audit_noted() {
    let outside = Fake::with_sleep("/user.slice");
    let kill = group(
        "syscall=62 success=no exit=-1 a0=124b a1=f a2=7fe919bb17a8 a3=7fe919634580",
        &[TARGET],
    );
    let sc = refusal(&kill, &watch(ABI_6), &outside).unwrap();
    assert_eq!((sc.pid, sc.comm.as_str()), (4735, "python3"));
    assert_eq!(sc.target, signal_to_sleep());
    assert_eq!(sc.raw.lines().count(), 2);
    assert!(sc.raw.lines().nth(1).unwrap().contains("opid=4683"));
    // pidfd_send_signal alike.
    let pidfd = group(
        "syscall=424 success=no exit=-1 a0=3 a1=f a2=0 a3=0",
        &[TARGET],
    );
    assert_eq!(
        refusal(&pidfd, &watch(ABI_6), &outside).unwrap().target,
        signal_to_sleep()
    );
}

#[test]
fn without_its_obj_pid_record_a_signal_names_the_process_of_its_arguments() {
    let outside = Fake::with_sleep("/user.slice");
    for call in [
        "syscall=62 success=no exit=-1 a0=124b a1=f a2=0 a3=0",
        "syscall=200 success=no exit=-1 a0=124b a1=f a2=0 a3=0",
        "syscall=234 success=no exit=-1 a0=124b a1=124b a2=f a3=0",
        "syscall=424 success=no exit=-1 a0=3 a1=f a2=0 a3=0",
    ] {
        let sc = refusal(&group(call, &[]), &watch(ABI_6), &outside);
        assert_eq!(sc.map(|s| s.target), Some(signal_to_sleep()), "{call}");
    }
    // A group (kill(0), kill(-pgrp)) is named by its first member only.
    let group_kill = group("syscall=62 success=no exit=-1 a0=0 a1=f a2=0 a3=0", &[]);
    assert_eq!(refusal(&group_kill, &watch(ABI_6), &outside), None);
}

#[test]
fn a_signal_to_a_process_of_the_run_is_no_reach_outside() {
    // Refused by a Landlock domain the command made inside the run's.
    let inside = Fake::with_sleep(RUN);
    let kill = group(
        "syscall=62 success=no exit=-1 a0=124b a1=f a2=0 a3=0",
        &[TARGET],
    );
    assert_eq!(refusal(&kill, &watch(ABI_6), &inside), None);
}

#[test]
fn a_refused_connect_to_an_abstract_name_names_the_socket() {
    let connect = group(
        "syscall=42 success=no exit=-1 a0=4 a1=7fff26ac5840 a2=9 a3=0",
        &[(SOCKADDR, "saddr=010000733135616273")],
    );
    let sc = refusal(&connect, &watch(ABI_6), &Fake::default()).unwrap();
    assert_eq!(
        sc.target,
        ScopeTarget::AbstractUnixSocket {
            name: "s15abs".into()
        }
    );
    assert!(sc.raw.ends_with("saddr=010000733135616273"));
    // An inet address (the cgroup hooks' refusal, which they record), a
    // pathname (the unix hooks'), an unnamed one: none.
    for saddr in [
        "saddr=020000097F0000010000000000000000",
        "saddr=01002F746D702F73",
        "saddr=0100",
        "saddr=0100000",
    ] {
        let g = group(
            "syscall=44 success=no exit=-1 a0=4 a1=7fff26ac5840 a2=10 a3=0",
            &[(SOCKADDR, saddr)],
        );
        assert_eq!(
            refusal(&g, &watch(ABI_6), &Fake::default()),
            None,
            "{saddr}"
        );
    }
    assert_eq!(abstract_name("0100006100"), Some("a\0".to_owned()));
}

#[test]
fn only_what_the_watch_stands_for_and_only_eperm_of_the_run_are_taken() {
    let outside = Fake::with_sleep("/user.slice");
    let kill = group(
        "syscall=62 success=no exit=-1 a0=124b a1=f a2=0 a3=0",
        &[TARGET],
    );
    let connect = group(
        "syscall=42 success=no exit=-1 a0=4 a1=7fff26ac5840 a2=9 a3=0",
        &[(SOCKADDR, "saddr=010000733135616273")],
    );
    // Below ABI 6 the supervisor records them; where it judges the
    // abstract names, it does.
    let none = Reach::default();
    assert_eq!(refusal(&kill, &watch(none), &outside), None);
    assert_eq!(refusal(&connect, &watch(none), &outside), None);
    let signals_only = Reach {
        signals: true,
        ..none
    };
    assert!(refusal(&kill, &watch(signals_only), &outside).is_some());
    assert_eq!(refusal(&connect, &watch(signals_only), &outside), None);
    // Another exit, another login uid, another call.
    let eacces = group(
        "syscall=62 success=no exit=-13 a0=124b a1=f a2=0 a3=0",
        &[TARGET],
    );
    assert_eq!(refusal(&eacces, &watch(ABI_6), &outside), None);
    let mut other = watch(ABI_6);
    other.login_uid += 1;
    assert_eq!(refusal(&kill, &other, &outside), None);
    let setuid = group("syscall=105 success=no exit=-1 a0=3e8 a1=0 a2=0 a3=0", &[]);
    assert_eq!(refusal(&setuid, &watch(ABI_6), &outside), None);
}

fn read_of(path: &str) -> FsEvent {
    FsEvent {
        pid: 4735,
        comm: "python3".into(),
        path: Some(path.into()),
        access: vec!["fs.read_file".into()],
        raw: "audit(…): arch=c000003e syscall=257 success=no exit=-13".into(),
        other_name_of: None,
        errno: None,
    }
}

#[test]
fn a_refused_proc_entry_of_a_process_outside_is_a_ptrace_mode_refusal() {
    let outside = Fake::with_sleep("/user.slice");
    let environ = read_of("/proc/4683/environ");
    // At every ABI below 7: the rule of filesystem refusals records it.
    for reach in [ABI_6, Reach::default()] {
        let sc = proc_entry(&environ, &watch(reach), &outside).unwrap();
        assert_eq!(
            sc.target,
            ScopeTarget::Ptrace {
                to_pid: 4683,
                to_comm: "sleep".into()
            }
        );
        assert_eq!((sc.pid, sc.raw.as_str()), (4735, environ.raw.as_str()));
    }
    assert!(proc_entry(&read_of("/proc/4683"), &watch(ABI_6), &outside).is_some());
    // A process of the run's, one gone, the caller's own, another path:
    // filesystem refusals as any.
    let inside = Fake::with_sleep(RUN);
    assert_eq!(proc_entry(&environ, &watch(ABI_6), &inside), None);
    assert_eq!(proc_entry(&environ, &watch(ABI_6), &Fake::default()), None);
    for path in [
        "/proc/self/environ",
        "/proc/sys/kernel",
        "/proc/4683x/environ",
        "/proc//4683",
        "/etc/4683",
    ] {
        assert_eq!(
            proc_entry(&read_of(path), &watch(ABI_6), &outside),
            None,
            "{path}"
        );
    }
}
