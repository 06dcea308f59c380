//! No other process's state: a run cannot signal, trace, read, lower the
//! limits or scheduling of, share a port with, or hold back with a lease any
//! process outside; its command runs on exactly the caller's CPUs.

use std::io::Read;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::world;
use crate::support::world::{
    assert_absent, assert_canary, assert_one_refused_call, received, s, stdout_lines, wait_for,
    wrapped, Background, Outside, World, PROBE,
};

#[test]
fn kill_and_ptrace_of_an_outside_process_fail() {
    let w = World::new("killptrace");
    let mut outside = Outside::sleep();
    let pid = outside.pid().to_string();
    let out = w.run(
        &[],
        &world::probe_argv(&[&["kill", &pid], &["ptrace", &pid]]),
    );
    assert_eq!(stdout_lines(&out), ["errno=EPERM", "errno=EPERM"]);
    outside.assert_alive_untraced();
    // The refusal is told as what it was, with the process it aimed at
    // (ptrace is refused by seccomp before Landlock sees it: no record).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 attempt to reach processes outside the run refused")
            && err.contains(&format!("signal to pid {pid}")),
        "stderr: {err}"
    );
    assert!(!err.contains("filesystem"), "stderr: {err}");
    // Control: a process inside the sandbox can be signalled.
    let out = w.run(
        &[],
        &[
            "sh",
            "-c",
            "sleep 300 & python3 -c \"$0\" kill $!; wait",
            PROBE,
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

/// A process outside the run is not in the run's `/proc` (a procfs
/// instance of its own, `hidepid=ptraceable`): its command line, which any
/// local user could read before, its environment and working directory
/// (ptrace-mode accesses) and its entry in a listing are all `ENOENT`. The
/// outside process here holds no capability and is of the run's uid, as
/// another run's command is, so it is Landlock's ptrace scoping that hides
/// it, and the summary names the process; init, which holds capabilities the
/// command lacks, is hidden by the capability check, unrecorded. Below
/// Landlock ABI 7 (Linux < 6.15) Landlock logs nothing, and nothing else can
/// name the process: a lookup of it fails as any missing path does
/// (`ENOENT`), a listing leaves it out, and no record of kernel audit names
/// it; there nothing is recorded, and the run's log says so. Judged from
/// outside: nothing was copied into the worktree. Controls: outside, the
/// same probe reads all of it, the secret included; inside, a process of the
/// run is listed and its command line, environment and directory read.
#[test]
fn an_outside_process_is_not_in_the_runs_proc() {
    let w = World::new("procptrace");
    let secret = format!("s16-secret-{}", std::process::id());
    // argv[0] carries a secret of its own, as a token on a command line would.
    let mut outside = Outside(
        Command::new("setpriv")
            .args([
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
                "--",
                "bash",
                "-c",
                &format!("exec -a sleep-{secret} sleep 300"),
            ])
            .env("LOCKRUN_TEST_SECRET", &secret)
            .spawn()
            .unwrap(),
    );
    let pid = outside.pid().to_string();
    // setpriv and bash exec sleep in the same process once the capabilities are gone.
    let t = Instant::now();
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap() != "sleep\n" {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "setpriv did not exec sleep"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("CapPrm:\t0000000000000000\n"), "{status}");
    let environ = format!("/proc/{pid}/environ");
    let cmdline = format!("/proc/{pid}/cmdline");
    let cwd = format!("/proc/{pid}/cwd");
    // Copy each into the worktree, where the caller would find it.
    let (leak_env, leak_cmd) = (w.wt.join("leak-env"), w.wt.join("leak-cmd"));
    let ops: [&[&str]; 5] = [
        &["copy", &environ, s(&leak_env)],
        &["copy", &cmdline, s(&leak_cmd)],
        &["readlink", &cwd],
        &["lists", "/proc", &pid],
        &["read", "/proc/1/cmdline"],
    ];
    let log = w.root.join("audit.jsonl");
    let out = w.run(&["--audit-log", s(&log)], &world::probe_argv(&ops));
    assert_eq!(stdout_lines(&out), ["errno=ENOENT"; 5]);
    assert_absent(&leak_env);
    assert_absent(&leak_cmd);
    outside.assert_alive_untraced();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("access to pid 1 "), "stderr: {err}");
    assert!(!err.contains("filesystem"), "stderr: {err}");
    if world::landlock_abi() >= 7 {
        let named = format!("ptrace or /proc access to pid {pid} (sleep) ×");
        assert!(
            err.contains("attempts to reach processes outside the run refused")
                && err.contains(&named),
            "stderr: {err}"
        );
    } else {
        // Not recorded below ABI 7 (see above), and said.
        assert!(!err.contains("outside the run refused"), "stderr: {err}");
        let said = world::notices(&log);
        assert!(
            said.iter().any(|n| n.contains(
                "Processes outside the run hidden from its /proc (Landlock's ptrace scoping) \
                 are not recorded"
            )),
            "{said:?}"
        );
    }
    // Controls: the same probe outside copies the secrets (so the judge
    // above would see them) and lists the process,
    let (copied_env, copied_cmd) = (w.root.join("copied-env"), w.root.join("copied-cmd"));
    let (copy_env, copy_cmd) = (
        ["copy", &environ, s(&copied_env)],
        ["copy", &cmdline, s(&copied_cmd)],
    );
    let mut outside_ops = ops;
    outside_ops[0] = &copy_env;
    outside_ops[1] = &copy_cmd;
    assert_eq!(w.probe_outside(&outside_ops), ["ok"; 5]);
    let copied = std::fs::read(&copied_env).unwrap();
    assert!(copied
        .split(|b| *b == 0)
        .any(|v| v == format!("LOCKRUN_TEST_SECRET={secret}").as_bytes()));
    let copied = std::fs::read(&copied_cmd).unwrap();
    assert!(copied.starts_with(format!("sleep-{secret}\0").as_bytes()));
    // and inside, a process of the run is there, and readable.
    let out = w.run(
        &[],
        &[
            "sh",
            "-c",
            "LOCKRUN_TEST_SECRET=inside sleep 300 & python3 -c \"$0\" copy /proc/$!/environ made \\; copy /proc/$!/cmdline made-cmd \\; readlink /proc/$!/cwd \\; lists /proc $!; kill $!",
            PROBE,
        ],
    );
    assert_eq!(stdout_lines(&out), ["ok"; 4]);
    let made = std::fs::read(w.wt.join("made")).unwrap();
    assert!(made
        .split(|b| *b == 0)
        .any(|v| v == b"LOCKRUN_TEST_SECRET=inside"));
    assert_eq!(
        std::fs::read(w.wt.join("made-cmd")).unwrap(),
        b"sleep\x00300\x00"
    );
}

/// A capability-less uid 0 may lower the resource limits of every process
/// of uid 0 (`prlimit`): an open-files limit of 3 starves a process
/// outside, a CPU-time limit kills it, past the signal scoping. Refused
/// (`EPERM`) and shown; the command still sets its own. Judged from
/// outside: the outside process's limit is unchanged. Control: the same
/// probe outside lowers it.
#[test]
fn limits_of_an_outside_process_cannot_be_lowered() {
    let w = World::new("prlimit");
    let mut victim = Outside::sleep();
    let pid = victim.pid().to_string();
    let limits = || {
        std::fs::read_to_string(format!("/proc/{pid}/limits"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap()
            .split_whitespace()
            .skip(3)
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let before = limits();
    assert_ne!(before, "3 3");
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &world::probe_argv(&[&["prlimit", &pid], &["rlimit_self"]]),
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["errno=EPERM", "ok"]);
    assert_eq!(limits(), before, "the outside process's limit changed");
    assert_one_refused_call(
        &w,
        &log,
        &out,
        &format!("prlimit64 setting RLIMIT_NOFILE of pid {pid}"),
        lockrun_seccomp::deny_list::Widens::OtherLimits,
    );
    // Control: outside, the same probe lowers it.
    assert_eq!(w.probe_outside(&[&["prlimit", &pid]]), ["ok"]);
    assert_eq!(limits(), "3 3");
    victim.assert_alive_untraced();
    w.assert_no_run_dirs();
}

/// A task's CPU and I/O scheduling, read from outside.
#[derive(Debug, PartialEq, Eq)]
struct Scheduling {
    nice: i32,
    /// `SCHED_OTHER` 0, `SCHED_IDLE` 5.
    policy: u32,
    /// `Cpus_allowed_list`.
    cpus: String,
    /// `ionice -p`: `none: prio 0`, `idle`, …
    io: String,
}

impl Scheduling {
    fn of(pid: &str) -> Self {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // After the command name: state is field 3, nice 19, policy 41.
        let after_comm = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        let io = Command::new("ionice").args(["-p", pid]).output().unwrap();
        Self {
            nice: fields[16].parse().unwrap(),
            policy: fields[38].parse().unwrap(),
            cpus: cpus.trim().to_owned(),
            io: String::from_utf8_lossy(&io.stdout).trim().to_owned(),
        }
    }
}

/// The kernel lets a task lower the CPU and I/O scheduling of any task of
/// its uid with no more capabilities than its own: a run's command, which
/// has none, could set another run's command to nice 19, `SCHED_IDLE`, the
/// idle I/O class or one CPU, for good (it cannot undo them without
/// capabilities). Refused (`EPERM`) and shown, also for every process of
/// the uid at once. Judged from outside on another run's command; control:
/// a capability-less process outside lowers it with the same probe, and
/// the run still sets its own child's and thread's scheduling.
#[test]
fn scheduling_of_another_runs_command_cannot_be_lowered() {
    let w = World::new("sched");
    let victim_w = World::new("sched-victim");
    let ready = victim_w.wt.join("pid");
    let mut victim = Background(
        victim_w
            .cmd(
                &[],
                &[
                    "sh",
                    "-c",
                    &format!("echo $$ > {}; exec sleep 300", s(&ready)),
                ],
            )
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the other run's command", || {
        std::fs::read_to_string(&ready).is_ok_and(|p| p.ends_with('\n'))
    });
    let pid = std::fs::read_to_string(&ready).unwrap().trim().to_owned();
    let before = Scheduling::of(&pid);
    // Whatever niceness the caller gave it, one it can still be lowered from.
    assert!(before.nice < 19 && before.policy == 0, "{before:?}");
    assert_ne!(before.io, "idle", "{before:?}");
    let log = w.root.join("audit.jsonl");
    let ops = ["nice", "affinity", "sched_idle", "ioprio_idle"];
    let mut argv: Vec<Vec<&str>> = ops.iter().map(|op| vec![*op, pid.as_str()]).collect();
    argv.extend([vec!["nice_user"], vec!["sched_own"]]);
    let argv: Vec<&[&str]> = argv.iter().map(Vec::as_slice).collect();
    let out = w.run(&["--audit-log", s(&log)], &world::probe_argv(&argv));
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "ok"
        ],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        Scheduling::of(&pid),
        before,
        "the other run's command was lowered"
    );
    let why = lockrun_seccomp::deny_list::Widens::OtherScheduling;
    let mut refused: Vec<(String, _)> = [
        "setpriority",
        "sched_setaffinity",
        "sched_setscheduler",
        "ioprio_set",
    ]
    .iter()
    .map(|call| (format!("{call} of pid {pid}"), why))
    .collect();
    refused.push((
        "setpriority PRIO_USER of every process of its own uid".to_owned(),
        why,
    ));
    assert_eq!(w.refused_calls(&log, "python3"), refused);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = format!(
        "lockrun: 5 system calls refused (seccomp: calls that would widen the sandbox, which no policy allows): \
         ioprio_set of pid {pid} (python3), sched_setaffinity of pid {pid} (python3), \
         sched_setscheduler of pid {pid} (python3), \
         setpriority PRIO_USER of every process of its own uid (python3), setpriority of pid {pid} (python3)\n"
    );
    assert!(stderr.contains(&summary), "{stderr}");
    // Control: outside, a process without capabilities lowers it.
    let control = Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-all", "--"])
        .args(world::probe_argv(&argv[..ops.len()]))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&control.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["ok"; 4],
        "{control:?}"
    );
    let after = Scheduling::of(&pid);
    assert_eq!(
        (after.nice, after.policy, after.cpus.as_str()),
        (19, 5, "0")
    );
    assert!(after.io.starts_with("idle"), "{after:?}");
    victim.sigterm();
    assert_eq!(victim.wait().code(), Some(128 + 15));
    w.assert_no_run_dirs();
    victim_w.assert_no_run_dirs();
}

/// A nonblocking inet socket of `kind` on 127.0.0.1, a port of its own,
/// with `opt` (`reuseport`, else `reuseaddr`) on, listening if a stream:
/// it and its port.
fn held_port(kind: nix::sys::socket::SockType, opt: &str) -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{self as so, sockopt};
    use std::os::fd::AsRawFd as _;
    let fd = so::socket(
        so::AddressFamily::Inet,
        kind,
        so::SockFlag::SOCK_NONBLOCK,
        None,
    )
    .unwrap();
    match opt {
        "reuseport" => so::setsockopt(&fd, sockopt::ReusePort, &true).unwrap(),
        _ => so::setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap(),
    }
    so::bind(fd.as_raw_fd(), &so::SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
    if kind == so::SockType::Stream {
        so::listen(&fd, so::Backlog::new(64).unwrap()).unwrap();
    }
    let at: so::SockaddrIn = so::getsockname(fd.as_raw_fd()).unwrap();
    (fd, at.port())
}

/// `SO_REUSEPORT`, and `SO_REUSEADDR` on a datagram socket, let a socket
/// bind a port a socket of the same uid outside already holds with it, and
/// take the connections or datagrams meant for that one. Refused (`EPERM`)
/// and shown, and the port then cannot be bound (`EADDRINUSE`). Judged
/// here: while the run holds its sockets, every connection and datagram
/// sent to the three ports reaches the sockets held outside. Controls: the
/// same probe run outside shares each port and takes a part of each; inside,
/// a TCP server's `SO_REUSEADDR` and turning `SO_REUSEPORT` off are set.
#[test]
fn a_socket_cannot_share_a_port_held_outside() {
    use nix::sys::socket as so;
    use std::io::Write as _;
    let w = World::new("reuse");
    let (tcp, tcp_port) = held_port(so::SockType::Stream, "reuseport");
    let (udp, udp_port) = held_port(so::SockType::Datagram, "reuseaddr");
    let (udp_rp, reuseport_port) = held_port(so::SockType::Datagram, "reuseport");
    // 20 connections with bytes, and 20 datagrams to each UDP port, each
    // from a port of its own (a reuseport group picks by the sender's
    // address): how many of each the sockets held here got.
    let sent_and_got = || {
        for _ in 0..20 {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", tcp_port)).unwrap();
            c.write_all(b"secret").unwrap();
            for port in [udp_port, reuseport_port] {
                let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                u.send_to(b"secret", ("127.0.0.1", port)).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        [
            received(&tcp, true),
            received(&udp, false),
            received(&udp_rp, false),
        ]
    };
    let [tcp_port, udp_port, reuseport_port] =
        [tcp_port, udp_port, reuseport_port].map(|p| p.to_string());
    let sharing: [&[&str]; 3] = [
        &["share_port", "tcp", "reuseport", "1", &tcp_port],
        &["share_port", "udp", "reuseaddr", "1", &udp_port],
        &["share_port", "udp", "reuseport", "1", &reuseport_port],
    ];
    let mut ops = sharing.to_vec();
    ops.push(&["hold"]);
    // `argv` as lockrun runs it, or as a process outside: its lines up to
    // "ready", then what the sockets here got while it held its own.
    let holding = |c: Command| {
        let (mut p, _out, lines) = Background::until_ready(c);
        let got = sent_and_got();
        writeln!(p.0.stdin.take().unwrap()).unwrap();
        assert!(p.wait().success());
        (lines, got)
    };
    let log = w.root.join("audit.jsonl");
    let (lines, got) = holding(w.cmd(&["--audit-log", s(&log)], &world::probe_argv(&ops)));
    // Judged here: every connection and datagram reached its socket.
    assert_eq!(got, [20, 20, 20], "a socket of the run took its part");
    let refused = "setsockopt=errno=EPERM value=0 bind=errno=EADDRINUSE";
    assert_eq!(lines, [refused, refused, refused, "ready"]);
    let why = lockrun_seccomp::deny_list::Widens::SharedPort;
    assert_eq!(
        w.refused_calls(&log, "python3"),
        [
            "setsockopt SO_REUSEPORT on an inet stream socket",
            "setsockopt SO_REUSEADDR on an inet datagram socket",
            "setsockopt SO_REUSEPORT on an inet datagram socket",
        ]
        .map(|c| (c.to_owned(), why))
    );
    // Inside, a TCP server's SO_REUSEADDR and SO_REUSEPORT off are set.
    assert_eq!(
        w.probe(
            &[],
            &[
                &["share_port", "tcp", "reuseaddr", "1", "0"],
                &["share_port", "udp", "reuseport", "0", "0"],
            ]
        ),
        [
            "setsockopt=ok value=1 bind=ok",
            "setsockopt=ok value=0 bind=ok"
        ]
    );
    // Control: the same probe outside shares each port, and takes a part
    // of each (all of the datagrams, where SO_REUSEADDR shares).
    let argv = world::probe_argv(&ops);
    let mut outside = Command::new(&argv[0]);
    outside.args(&argv[1..]);
    let (lines, got) = holding(outside);
    let shared = "setsockopt=ok value=1 bind=ok";
    assert_eq!(lines, [shared, shared, shared, "ready"]);
    assert!(got[0] < 20 && got[1] == 0 && got[2] < 20, "{got:?}");
    w.assert_no_run_dirs();
}

/// The probe's `lease` op run by `c`, with the file `victim` tried by a
/// writer outside while it holds on: its first line, and whether the
/// writer's non-blocking open for writing succeeded or failed how.
fn lease_held(mut c: Command, victim: &std::path::Path) -> (String, Result<(), i32>, Output) {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = Vec::new();
    let mut out = child.stdout.take().unwrap();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
        first.push(b[0]);
    }
    // With a lease held the kernel answers a non-blocking writer's open at
    // once with EWOULDBLOCK (a blocking one would wait up to the break time).
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(victim)
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap());
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    (String::from_utf8(first).unwrap(), writer, output)
}

/// A lease (`fcntl F_SETLEASE`) on a file outside would hold back every
/// process that then opens it for writing, up to `fs.lease-break-time`
/// (45 s by default), and tell the command when one did: the command, uid
/// 0, owns every root-owned file, and a lease needs only ownership and a
/// descriptor open for reading. Refused (`EPERM`) and shown. Judged from
/// outside: a writer's non-blocking open of the file, made while the
/// command holds on, succeeds. Control: the same probe outside takes the
/// lease, and the same open then fails with `EWOULDBLOCK`.
#[test]
fn a_lease_that_would_hold_back_writers_outside_is_refused() {
    let w = World::new("lease");
    let victim = w.canary(&w.data.join("shared.db"));
    let argv = world::probe_argv(&[&["lease", s(&victim)]]);

    let mut outside = Command::new(&argv[0]);
    outside.args(&argv[1..]);
    let (first, writer, _) = lease_held(outside, &victim);
    assert_eq!(first, "ok", "control: the lease outside");
    assert_eq!(
        writer,
        Err(nix::errno::Errno::EWOULDBLOCK as i32),
        "control: the writer is held back"
    );

    let log = w.root.join("audit.jsonl");
    let (first, writer, out) = lease_held(w.cmd(&["--audit-log", s(&log)], &argv), &victim);
    assert_eq!(first, "errno=EPERM", "inside: {out:?}");
    assert_eq!(
        writer,
        Ok(()),
        "the writer outside was held back by the run"
    );
    assert!(out.status.success(), "{out:?}");
    assert_one_refused_call(
        &w,
        &log,
        &out,
        "fcntl F_SETLEASE F_RDLCK",
        lockrun_seccomp::deny_list::Widens::Leases,
    );
    assert_canary(&victim);
    w.assert_no_run_dirs();
}

/// `Cpus_allowed_list` of a process: "0-1", "0,2-3".
fn cpus_allowed(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status:?}"))
        .trim()
        .to_owned()
}

fn cpu_list(list: &str) -> Vec<u32> {
    list.split(',')
        .flat_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()
        })
        .collect()
}

/// lockrun pins the thread it starts beside to the CPUs it is not on (see
/// `run::beside`); the command must still get exactly the caller's CPUs,
/// which `make -j$(nproc)` and test runners size themselves by. A caller
/// pinned to one CPU leaves no CPU beside: the run does all its work in
/// place, and still runs the command there.
#[test]
fn the_command_runs_on_exactly_the_callers_cpus() {
    let w = World::new("cpus");
    let outside = cpus_allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    let read = ["cat", "/proc/self/status"];
    let out = w.run(&[], &read);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cpus_allowed(&String::from_utf8_lossy(&out.stdout)), outside);
    for cpu in cpu_list(&outside) {
        let out = wrapped(&["taskset", "-c", &cpu.to_string()], &w, &w.cmd(&[], &read));
        assert!(
            out.status.success(),
            "on CPU {cpu}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            cpus_allowed(&String::from_utf8_lossy(&out.stdout)),
            cpu.to_string(),
            "a caller pinned to CPU {cpu}"
        );
        w.assert_no_run_dirs();
    }
}

/// A secret's value (`--secret`) read from lockrun's own environment stays
/// there, in `/proc/<lockrun>/environ`: the run cannot read it. Inside, the
/// command's parent is lockrun, and its environ is `ENOENT` (Landlock's
/// ptrace scoping hides lockrun, which the run may not trace); the run's
/// own variable holds a placeholder of the value's length and shape, never
/// the value. Judged from outside: nothing was copied; lockrun's output
/// does not hold the value. Controls: outside, lockrun's environ holds the
/// value (so there was something to take), and inside, the command's own
/// environ is read.
#[test]
fn the_run_cannot_read_lockruns_environment_where_a_secrets_value_is() {
    let w = World::new("secretenviron");
    let value = format!("sk-lockrun-REAL-{}-abcdefXYZ0123", std::process::id());
    let script = "echo ppid=$PPID; \
         cat /proc/$PPID/environ > leak 2>/dev/null && echo parent=read || echo parent=refused; \
         cat /proc/self/environ | tr '\\0' '\\n' | grep '^LOCKRUN_TEST_KEY='; \
         : > started; while [ ! -e go-on ]; do sleep 0.05; done";
    let child = w
        .cmd(
            &[
                "--allow-host",
                "api.example.com",
                "--secret",
                "LOCKRUN_TEST_KEY@api.example.com",
            ],
            &["sh", "-c", script],
        )
        .env("LOCKRUN_TEST_KEY", &value)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lockrun = child.id();
    let t = Instant::now();
    while !w.wt.join("started").exists() {
        assert!(
            t.elapsed() < Duration::from_mins(1),
            "the run did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Control: the value is in lockrun's environ, for whoever may read it.
    let environ = std::fs::read(format!("/proc/{lockrun}/environ")).unwrap();
    let want = format!("LOCKRUN_TEST_KEY={value}");
    assert!(environ.split(|b| *b == 0).any(|v| v == want.as_bytes()));
    std::fs::write(w.wt.join("go-on"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [format!("ppid={lockrun}").as_str(), "parent=refused"],
        "{stdout}"
    );
    let held = lines[2]
        .strip_prefix("LOCKRUN_TEST_KEY=")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(held.len(), value.len());
    assert!(
        held.starts_with("sk-lockrun-REAL-") && held != value,
        "{held}"
    );
    // Judged from outside: nothing of lockrun's environ was copied.
    let leak = std::fs::read(w.wt.join("leak")).unwrap_or_default();
    assert!(
        leak.is_empty(),
        "{} bytes of lockrun's environ copied",
        leak.len()
    );
    assert!(!stdout.contains(&value) && !stderr.contains(&value));
}
