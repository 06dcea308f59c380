//! No way to widen the box from inside: no capabilities, `no_new_privs`, and
//! the seccomp deny list (kernel modules, x32 calls, `io_uring`).

use crate::support::world;
use crate::support::world::{assert_one_refused_call, s, World};

#[test]
fn inside_no_capabilities_no_new_privs_seccomp() {
    let w = World::new("status");
    let r = w.probe(&[], &[&["status"]]);
    for want in [
        "CapEff=0000000000000000",
        "CapPrm=0000000000000000",
        "CapInh=0000000000000000",
        "CapBnd=0000000000000000",
        "CapAmb=0000000000000000",
        "NoNewPrivs=1",
        "Seccomp=2",
    ] {
        assert!(r.iter().any(|l| l == want), "{want} not in {r:?}");
    }
}

/// Each refusal of the deny list is seen: the filter hands the call to
/// lockrun's supervisor, which answers EPERM, records it and sums it up on
/// stderr. The controls, and `clone3`'s ENOSYS (glibc falls back to
/// `clone`), are not refusals and are not reported.
#[test]
fn seccomp_denials_and_controls() {
    let w = World::new("seccomp");
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &world::probe_argv(&[
            &["bpf"],
            &["unshare"],
            &["mount"],
            &["socket", "packet"],
            &["socket", "netlink", "4"],
            &["clone_newuser"],
            &["clone3"],
            // Controls.
            &["fork"],
            &["socket", "inet"],
            &["socket", "inet6"],
            &["socket", "unix"],
            &["socket", "netlink", "0"],
        ]),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{out:?}");
    w.assert_no_run_dirs();
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=EPERM",
            "errno=ENOSYS",
            "ok",
            "ok",
            "ok",
            "ok",
            "ok"
        ]
    );
    let calls: Vec<String> = w
        .refused_calls(&log, "python3")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(
        calls,
        [
            "bpf",
            "unshare",
            "mount",
            "socket(AF_PACKET)",
            "socket(AF_NETLINK, protocol 4)",
            "clone with CLONE_NEWUSER"
        ]
    );
    assert!(
        stderr.contains(
            "lockrun: 6 system calls refused (seccomp: calls that would widen the sandbox, \
             which no policy allows): bpf (python3), clone with CLONE_NEWUSER (python3), \
             mount (python3), socket(AF_NETLINK, protocol 4) (python3), socket(AF_PACKET) \
             (python3), unshare (python3)\n"
        ),
        "{stderr}"
    );
    // NETLINK_ROUTE is what `ip addr` needs.
    let out = w.run(&[], &["ip", "addr", "show", "lo"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("127.0.0.1"));
}

/// An inet socket of a protocol the inet code does not have itself (SCTP,
/// L2TP) makes the kernel look the protocol up, and where modules load on
/// demand, load its module as root (`net-pf-2-proto-132-type-1`) before any
/// hook of the run is asked. This kernel loads none (no `CONFIG_MODULES`),
/// so what is judged is where the call stops: inside, at the filter
/// (`EPERM`, recorded and shown); outside, the same probe reaches the
/// kernel's lookup (`EPROTONOSUPPORT` where the protocol is absent, as
/// here). Controls inside: TCP, MPTCP and UDP by their numbers.
#[test]
fn inet_protocols_the_kernel_would_load_are_refused_first() {
    let w = World::new("inet-protocols");
    let log = w.root.join("audit.jsonl");
    let refused: [&[&str]; 2] = [
        &["socket", "inet", "132", "1"],  // SCTP, SOCK_STREAM
        &["socket", "inet6", "115", "2"], // L2TP, SOCK_DGRAM
    ];
    for (op, got) in refused.iter().zip(w.probe_outside(&refused)) {
        assert!(
            got == "errno=EPROTONOSUPPORT" || got == "ok",
            "control {op:?}: {got}"
        );
    }
    let mut ops = refused.to_vec();
    ops.extend([
        &["socket", "inet", "6", "1"][..],
        &["socket", "inet6", "262", "1"],
        &["socket", "inet6", "17", "2"],
    ]);
    let out = w.run(&["--audit-log", s(&log)], &world::probe_argv(&ops));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["errno=EPERM", "errno=EPERM", "ok", "ok", "ok"]
    );
    let why = lockrun_seccomp::deny_list::Widens::SocketProtocol;
    assert_eq!(
        w.refused_calls(&log, "python3"),
        [
            ("socket(AF_INET, IPPROTO_SCTP)".to_owned(), why),
            ("socket(AF_INET6, IPPROTO_L2TP)".to_owned(), why),
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "lockrun: 2 system calls refused (seccomp: calls that would widen the sandbox, \
             which no policy allows): socket(AF_INET, IPPROTO_SCTP) (python3), \
             socket(AF_INET6, IPPROTO_L2TP) (python3)\n"
        ),
        "{stderr}"
    );
    w.assert_no_run_dirs();
}

/// x32-ABI calls (bit 30 in the number) are refused with EPERM whatever the
/// kernel: where that ABI is on, they are the same calls under numbers the
/// deny list and the supervisor would not know. Outside, the same call gets
/// the kernel's own answer (ENOSYS where x32 is off, as on our machines).
#[cfg(target_arch = "x86_64")]
#[test]
fn x32_calls_are_refused() {
    let w = World::new("x32");
    let outside = w.probe_outside(&[&["x32_getpid"]]);
    assert!(
        outside == ["ok"] || outside == ["errno=ENOSYS"],
        "outside: {outside:?}"
    );
    let log = w.root.join("audit.jsonl");
    let out = w.run(
        &["--audit-log", s(&log)],
        &world::probe_argv(&[&["x32_getpid"], &["getpid"]]),
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["errno=EPERM", "ok"]);
    // Seen: recorded, and summed up on stderr.
    assert_one_refused_call(
        &w,
        &log,
        &out,
        "x32-ABI call 0x40000027",
        lockrun_seccomp::deny_list::Widens::X32Abi,
    );
    w.assert_no_run_dirs();
}

#[test]
fn io_uring_is_refused_because_it_creates_sockets_seccomp_never_sees() {
    let w = World::new("iouring");
    // Outside: IORING_OP_SOCKET makes an AF_PACKET socket, which socket()
    // inside would be refused. That is why io_uring_setup is refused.
    let outside = w.probe_outside(&[&["uring_socket", "packet"]]);
    if outside != ["ok"] {
        let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .is_ok_and(|s| s.trim() != "0");
        assert!(
            disabled || outside == ["errno=ENOSYS"],
            "io_uring failed outside for an unexpected reason: {outside:?}"
        );
        world::skip(
            "io_uring decision",
            &format!("io_uring unavailable on this host ({outside:?})"),
        );
    }
    let r = w.probe(&[], &[&["io_uring_setup"], &["uring_socket", "packet"]]);
    assert_eq!(r, ["errno=EPERM", "errno=EPERM"]);
}
