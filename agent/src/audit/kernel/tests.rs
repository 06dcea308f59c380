//! The reader's correlation and loss checks, on records this kernel printed.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::HashMap;

use super::netlink::*;
use super::*;
use crate::audit::{syscalls, ScopeTarget};

// Records as this kernel (6.18) printed them for `sh -c 'echo > /tmp/x'`
// under a Landlock domain created by pid 9245.
const ACCESS: &str = r#"audit(1795938126.349:3): domain=1049acb18 blockers=fs.make_reg path="/tmp" dev="vda" ino=246951"#;
const DOMAIN: &str = r#"audit(1795938126.349:3): domain=1049acb18 status=allocated mode=enforcing pid=9245 uid=0 exe="/usr/bin/python3.11" comm="python3""#;
const SYSCALL: &str = r#"audit(1795938126.349:3): arch=c000003e syscall=257 success=no exit=-13 a0=ffffff9c items=0 ppid=9115 pid=9245 auid=4294967295 uid=0 comm="sh" exe="/usr/bin/dash" key=(null)"#;

fn feed(child: u32, records: &[(u16, &str)]) -> Vec<Event> {
    let mut c = Correlator::default();
    let mut out = Vec::new();
    let now = Instant::now();
    for (ty, text) in records {
        c.push(
            parse_record(*ty, text.as_bytes()).unwrap(),
            child,
            now,
            &mut out,
        );
    }
    c.push(
        AuditRecord {
            ty: AUDIT_EOE,
            serial: 3,
            fields: HashMap::new(),
            text: String::new(),
        },
        child,
        now,
        &mut out,
    );
    out
}

#[test]
fn a_drop_is_possible_only_past_the_limits_or_an_overflow() {
    let limits = |backlog_limit, rate_limit| AuditStatus {
        enabled: 1,
        daemon_pid: 0,
        rate_limit,
        backlog_limit,
        lost: 7,
    };
    let read = |records, overflowed| Read {
        records,
        overflowed,
    };
    // The queue never held more than the reader got.
    assert!(!loss_possible(&limits(64, 0), &read(0, false)));
    assert!(!loss_possible(&limits(64, 0), &read(64, false)));
    assert!(loss_possible(&limits(64, 0), &read(65, false)));
    // No backlog limit: nothing is dropped for the queue's length.
    assert!(!loss_possible(&limits(0, 0), &read(1_000_000, false)));
    // A rate limit, or records lost on their way to the reader.
    assert!(loss_possible(&limits(64, 100), &read(0, false)));
    assert!(loss_possible(&limits(64, 0), &read(3, true)));
}

#[test]
fn audit_turned_on_at_boot_is_read_as_the_kernel_reads_it() {
    assert!(audit_on_at_boot("BOOT_IMAGE=/vmlinuz ro audit=1 quiet\n"));
    assert!(audit_on_at_boot("audit=on"));
    assert!(audit_on_at_boot("audit=0 audit=1"));
    assert!(!audit_on_at_boot("audit=1 audit=0"));
    assert!(!audit_on_at_boot("ro audit_backlog_limit=8192 quiet"));
    assert!(!audit_on_at_boot("noaudit=1"));
    assert!(!audit_on_at_boot(""));
}

/// Records as this kernel printed them for `sh -c 'echo x > /etc/f;
/// echo > /dev/stdout'` in a task with no audit context (an
/// `-a task,never` rule loaded): a serial each, the domain record after
/// the first access record, no SYSCALL, no EOE.
const NO_CONTEXT: [(u16, &str); 3] = [
    (
        AUDIT_LANDLOCK_ACCESS,
        r#"audit(1796016531.147:244937): domain=104a1f9fc blockers=fs.make_reg path="/etc" dev="vda" ino=19"#,
    ),
    (
        AUDIT_LANDLOCK_DOMAIN,
        r#"audit(1796016531.147:244938): domain=104a1f9fc status=allocated mode=enforcing pid=12805 uid=0 exe="/work/main/target/release/lockrun" comm="lockrun""#,
    ),
    (
        AUDIT_LANDLOCK_ACCESS,
        r#"audit(1796016531.147:244940): domain=104a1f9fc blockers=fs.make_reg path="/proc/12805/fd" dev="proc" ino=84218016"#,
    ),
];

#[test]
fn refusals_without_an_audit_context_are_kept_without_a_process() {
    let mut c = Correlator::default();
    let mut out = Vec::new();
    let t0 = Instant::now();
    for (ty, text) in NO_CONTEXT {
        c.push(
            parse_record(ty, text.as_bytes()).unwrap(),
            12805,
            t0,
            &mut out,
        );
    }
    // Within NO_END_AFTER the records wait for an end that may come.
    c.expire(12805, t0 + NO_END_AFTER / 2, &mut out);
    assert_eq!(out, []);
    c.expire(12805, t0 + NO_END_AFTER, &mut out);
    // The first refusal, whose domain record came after it, is kept; the
    // create check on /proc is not a refusal; the notice says why no
    // process is named, once.
    let [Event::Notice { message, .. }, Event::Filesystem(f)] = out.as_slice() else {
        panic!("not a notice and one refusal: {out:?}");
    };
    assert_eq!(message, NO_SYSCALL_RECORD);
    assert_eq!((f.pid, f.comm.as_str()), (0, ""));
    assert_eq!(f.path.as_deref(), Some("/etc"));
    assert_eq!(f.access, vec!["fs.make_reg".to_owned()]);
    assert!(c.pending.is_empty());
    // A create check off /proc is kept: without the call's outcome it
    // cannot be told from a refusal.
    let tmp = NO_CONTEXT[2].1.replace(
        r#"path="/proc/12805/fd" dev="proc""#,
        r#"path="/tmp" dev="vda""#,
    );
    c.push(
        parse_record(AUDIT_LANDLOCK_ACCESS, tmp.as_bytes()).unwrap(),
        12805,
        t0,
        &mut out,
    );
    c.flush(12805, &mut out);
    assert_eq!(out.len(), 3, "{out:?}");
}

#[test]
fn a_domain_is_the_runs_once_its_child_is_known() {
    // The records came before the reader was told the child's pid.
    let named_late = |child: u32| {
        let mut c = Correlator::default();
        let mut out = Vec::new();
        for (ty, text) in NO_CONTEXT {
            let rec = parse_record(ty, text.as_bytes()).unwrap();
            c.push(rec, 0, Instant::now(), &mut out);
        }
        c.flush(child, &mut out);
        out
    };
    assert_eq!(named_late(12805).len(), 2);
    // Another run's child: nothing.
    assert_eq!(named_late(4242), []);
}

#[test]
fn a_create_check_in_a_call_that_succeeded_is_no_refusal() {
    // `sh -c 'echo > /dev/stdout'`, stdout a pipe: the open succeeded.
    let access = r#"audit(1795938126.349:3): domain=1049acb18 blockers=fs.make_reg path="/proc/9245/fd" dev="proc" ino=46495301"#;
    let ok = SYSCALL.replace("success=no exit=-13", "success=yes exit=3");
    let dropped = feed(
        9245,
        &[
            (AUDIT_LANDLOCK_ACCESS, access),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, &ok),
        ],
    );
    assert_eq!(dropped, []);
    // The same denial in a call that failed is one.
    let kept = feed(
        9245,
        &[
            (AUDIT_LANDLOCK_ACCESS, access),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, SYSCALL),
        ],
    );
    assert_eq!(kept.len(), 1);
    // Any other blocker in a call that succeeded is kept too.
    let write = access.replace("fs.make_reg", "fs.write_file");
    let other = feed(
        9245,
        &[
            (AUDIT_LANDLOCK_ACCESS, &write),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, &ok),
        ],
    );
    assert_eq!(other.len(), 1);
}

#[test]
fn below_abi_7_a_refused_call_of_the_watched_run_becomes_an_event() {
    // `mkdir /usr/dd` in the run of login uid 2147483700, and another
    // process's refused call (no login uid of a run), as this kernel
    // wrote them, interleaved.
    let records: [(u16, &str); 7] = [
        (
            AUDIT_SYSCALL,
            r#"audit(1796534893.678:7): arch=c000003e syscall=83 success=no exit=-13 a0=7ffcc50f69ea a1=1ff a2=0 a3=7f33fc43a958 items=1 ppid=12536 pid=12538 auid=2147483700 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=6 comm="mkdir" exe="/usr/bin/mkdir" key=(null)"#,
        ),
        (
            AUDIT_SYSCALL,
            r#"audit(1796534893.678:8): arch=c000003e syscall=83 success=no exit=-13 a0=7ffcc50f69ea a1=1ff a2=0 a3=0 items=1 ppid=1 pid=99 auid=4294967295 uid=0 comm="mkdir" exe="/usr/bin/mkdir" key=(null)"#,
        ),
        (AUDIT_CWD, r#"audit(1796534893.678:7): cwd="/tmp/r1""#),
        (
            AUDIT_PATH,
            r#"audit(1796534893.678:7): item=0 name="/usr/" inode=246973 dev=fe:00 mode=040755 ouid=0 ogid=0 rdev=00:00 nametype=PARENT cap_fp=0 cap_fi=0 cap_fe=0 cap_fver=0 cap_frootid=0"#,
        ),
        (AUDIT_CWD, r#"audit(1796534893.678:8): cwd="/""#),
        (
            AUDIT_PATH,
            r#"audit(1796534893.678:8): item=0 name="/etc/" inode=19 dev=fe:00 mode=040755 nametype=PARENT"#,
        ),
        (AUDIT_EOE, "audit(1796534893.678:8): "),
    ];
    let mut c = Correlator {
        watch: Some(Arc::new(Watch {
            login_uid: 2_147_483_700,
            writable: Vec::new(),
            granted: syscalls::refer::Granted::default(),
            cgroup: None,
            reach: syscalls::Reach::default(),
        })),
        ..Correlator::default()
    };
    let mut out = Vec::new();
    let now = Instant::now();
    for (ty, text) in records {
        c.push(parse_record(ty, text.as_bytes()).unwrap(), 0, now, &mut out);
    }
    // The other process's call ended: nothing of it is kept.
    assert_eq!(out, []);
    assert_eq!(c.pending.len(), 1);
    assert_eq!(c.pending[&7].1.len(), 3);
    c.push(
        parse_record(AUDIT_EOE, b"audit(1796534893.678:7): ").unwrap(),
        0,
        now,
        &mut out,
    );
    let [Event::Filesystem(f)] = out.as_slice() else {
        panic!("not one filesystem event: {out:?}");
    };
    assert_eq!((f.pid, f.comm.as_str()), (12538, "mkdir"));
    assert_eq!(f.path.as_deref(), Some("/usr"));
    assert_eq!(f.access, vec!["fs.make_dir".to_owned()]);
    assert_eq!(f.raw.lines().count(), 3);
    assert!(c.pending.is_empty());
}

/// `kill` of a process outside the run and `connect` to an abstract
/// name bound outside it, refused by Landlock ABI 6 (`EPERM`), as this
/// kernel wrote them: their `OBJ_PID` and `SOCKADDR` records are kept
/// with the call's, and each becomes a scope refusal.
#[test]
fn below_abi_7_a_refused_reach_of_the_watched_run_becomes_a_scope_event() {
    let records: [(u16, &str); 6] = [
        (
            AUDIT_SYSCALL,
            r#"audit(1796542359.022:471023): arch=c000003e syscall=62 success=no exit=-1 a0=124b a1=f a2=7fe919bb17a8 a3=7fe919634580 items=0 ppid=4728 pid=4735 auid=2147681900 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=217 comm="python3" exe="/root/.pyenv/versions/3.11.7/bin/python3.11" key=(null)"#,
        ),
        (
            AUDIT_OBJ_PID,
            r#"audit(1796542359.022:471023): opid=4683 oauid=-1 ouid=0 oses=-1 ocomm="sleep""#,
        ),
        (AUDIT_EOE, "audit(1796542359.022:471023): "),
        (
            AUDIT_SYSCALL,
            r#"audit(1796542359.022:471025): arch=c000003e syscall=42 success=no exit=-1 a0=4 a1=7fff26ac5840 a2=9 a3=0 items=0 ppid=4728 pid=4735 auid=2147681900 uid=0 gid=0 euid=0 suid=0 fsuid=0 egid=0 sgid=0 fsgid=0 tty=(none) ses=217 comm="python3" exe="/root/.pyenv/versions/3.11.7/bin/python3.11" key=(null)"#,
        ),
        (
            AUDIT_SOCKADDR,
            "audit(1796542359.022:471025): saddr=010000733135616273",
        ),
        (AUDIT_EOE, "audit(1796542359.022:471025): "),
    ];
    let mut c = Correlator {
        watch: Some(Arc::new(Watch {
            login_uid: 2_147_681_900,
            writable: Vec::new(),
            granted: syscalls::refer::Granted::default(),
            cgroup: None,
            reach: syscalls::Reach {
                signals: true,
                abstract_sockets: true,
            },
        })),
        ..Correlator::default()
    };
    let mut out = Vec::new();
    for (ty, text) in records {
        c.push(
            parse_record(ty, text.as_bytes()).unwrap(),
            0,
            Instant::now(),
            &mut out,
        );
    }
    let [Event::Scope(signal), Event::Scope(socket)] = out.as_slice() else {
        panic!("not two scope events: {out:?}");
    };
    assert_eq!(
        (signal.pid, signal.comm.as_str(), &signal.target),
        (
            4735,
            "python3",
            &ScopeTarget::Signal {
                to_pid: 4683,
                to_comm: "sleep".into()
            }
        )
    );
    assert_eq!(
        socket.target,
        ScopeTarget::AbstractUnixSocket {
            name: "s15abs".into()
        }
    );
    assert!(c.pending.is_empty());
}

#[test]
fn a_denial_that_ends_before_the_child_is_known_waits_for_it() {
    let mut c = Correlator::default();
    let mut out = Vec::new();
    let t0 = Instant::now();
    for (ty, text) in [
        (AUDIT_LANDLOCK_ACCESS, ACCESS),
        (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
        (AUDIT_SYSCALL, SYSCALL),
        (AUDIT_EOE, "audit(1795938126.349:3): "),
    ] {
        c.push(parse_record(ty, text.as_bytes()).unwrap(), 0, t0, &mut out);
    }
    assert_eq!(out, []);
    c.expire(0, t0, &mut out);
    assert_eq!(out, []);
    // Told the child: taken at the next look, not a second later.
    c.expire(9245, t0, &mut out);
    let [Event::Filesystem(f)] = out.as_slice() else {
        panic!("not one filesystem event: {out:?}");
    };
    assert_eq!((f.pid, f.path.as_deref()), (9245, Some("/tmp")));
    assert!(c.pending.is_empty());
}

#[test]
fn a_denial_of_our_child_becomes_an_event() {
    let ev = feed(
        9245,
        &[
            (AUDIT_LANDLOCK_ACCESS, ACCESS),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, SYSCALL),
        ],
    );
    let [Event::Filesystem(f)] = ev.as_slice() else {
        panic!("not one filesystem event: {ev:?}");
    };
    assert_eq!(f.pid, 9245);
    assert_eq!(f.comm, "sh");
    assert_eq!(f.path.as_deref(), Some("/tmp"));
    assert_eq!(f.access, vec!["fs.make_reg".to_owned()]);
}

/// Records as this kernel printed them for `kill` of a process outside
/// the run, for `connect` to the abstract socket `@s15abs` bound
/// outside it, and for reading `/proc/<pid>/environ` of a process
/// outside it: refusals of a reach outside the run, named as such, not
/// filesystem ones.
#[test]
fn scoping_denials_name_the_process_or_the_socket() {
    let signal =
        r#"audit(1795938126.349:3): domain=1049acb18 blockers=scope.signal opid=2637 ocomm="bash""#;
    let abstract_socket = "audit(1795938126.349:3): domain=1049acb18 blockers=scope.abstract_unix_socket path=00733135616273";
    let ptrace =
        r#"audit(1795938126.349:3): domain=1049acb18 blockers=ptrace opid=26780 ocomm="sleep""#;
    for (access, syscall, want) in [
        (
            signal,
            "kill",
            ScopeTarget::Signal {
                to_pid: 2637,
                to_comm: "bash".into(),
            },
        ),
        (
            abstract_socket,
            "connect",
            ScopeTarget::AbstractUnixSocket {
                name: "s15abs".into(),
            },
        ),
        (
            ptrace,
            "257",
            ScopeTarget::Ptrace {
                to_pid: 26780,
                to_comm: "sleep".into(),
            },
        ),
    ] {
        let sys = SYSCALL.replace("syscall=257", &format!("syscall={syscall}"));
        let ev = feed(
            9245,
            &[
                (AUDIT_LANDLOCK_ACCESS, access),
                (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
                (AUDIT_SYSCALL, &sys),
            ],
        );
        let [Event::Scope(sc)] = ev.as_slice() else {
            panic!("not one scoping event: {ev:?}");
        };
        assert_eq!((sc.pid, sc.comm.as_str()), (9245, "sh"));
        assert_eq!(sc.target, want);
    }
    assert_eq!(
        ScopeTarget::AbstractUnixSocket {
            name: "s15abs".into()
        }
        .to_string(),
        "abstract unix socket @s15abs"
    );
    assert_eq!(
        ScopeTarget::Signal {
            to_pid: 2637,
            to_comm: "bash".into()
        }
        .to_string(),
        "signal to pid 2637 (bash)"
    );
    assert_eq!(
        ScopeTarget::Ptrace {
            to_pid: 26780,
            to_comm: "sleep".into()
        }
        .to_string(),
        "ptrace or /proc access to pid 26780 (sleep)"
    );
}

#[test]
fn another_runs_domain_is_ignored() {
    let ev = feed(
        1234,
        &[
            (AUDIT_LANDLOCK_ACCESS, ACCESS),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, SYSCALL),
        ],
    );
    assert!(ev.is_empty());
}

#[test]
fn an_end_of_event_record_with_no_body_is_read() {
    // As the kernel sends it: the stamp, a colon, a space and a NUL.
    let eoe = parse_record(AUDIT_EOE, b"audit(1796534893.678:123622): \0").unwrap();
    assert_eq!((eoe.ty, eoe.serial), (AUDIT_EOE, 123_622));
    assert!(eoe.fields.is_empty());
}

#[test]
fn hex_encoded_paths_are_decoded() {
    let r = parse_record(
        AUDIT_LANDLOCK_ACCESS,
        b"audit(1.2:9): domain=1 blockers=fs.write_file path=2F746D702F6120622E747874 dev=\"vda\"",
    )
    .unwrap();
    assert_eq!(r.fields["path"], "/tmp/a b.txt");
    assert_eq!(r.serial, 9);
}

/// A reader that has not read the run's end mark when `finish` stops
/// waiting is stopped, and the log says refusals may be missing; one that
/// read it (returned) adds nothing.
#[test]
fn a_reader_stopped_before_the_end_mark_is_told_in_the_log() {
    let dir = std::env::temp_dir().join(format!("lockrun-kaudit-mark-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let told = |reads_the_mark: bool| -> String {
        let path = dir.join(format!("{reads_the_mark}.jsonl"));
        let log = Arc::new(AuditLog::open(Some(&path)).unwrap());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let (_asked_tx, asked) = std::sync::mpsc::channel::<()>();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // A slow reader runs until stopped; one that read the mark returns.
                while !reads_the_mark && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                drop(done_tx);
            })
        };
        let reader = KernelAudit {
            child: Arc::new(AtomicU32::new(0)),
            calls: Arc::new(std::sync::OnceLock::new()),
            stop,
            thread: Some(thread),
            done,
            asked,
            log: log.clone(),
            marker: "lockrun-audit-sync-test".into(),
            // As if sent: the test sends nothing to the kernel.
            marker_sent: true,
        };
        reader.finish();
        drop(log);
        std::fs::read_to_string(&path).unwrap_or_default()
    };
    let slow = told(false);
    assert!(
        slow.contains("the kernel's audit records of this run were not all read: its end mark was not read within 2 s"),
        "{slow}"
    );
    assert_eq!(told(true), "");
    let _ = std::fs::remove_dir_all(&dir);
}
