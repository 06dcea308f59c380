//! The kernel allows a run exactly one way out: escape tests for the cgroup
//! eBPF hooks (`lockrun::bpf`) on the run's cgroup (`lockrun::cgroup`).
//!
//! Until the run flow lands, each test builds the run at the library level
//! (root): a cgroup, the hooks with an allow list, and a probe process that is
//! moved into the cgroup before it tries anything. Each escape is judged from
//! outside (the test's own listener receives nothing) and by the errno the
//! probe got, and has a control beside it that must get through. After each
//! test no cgroup, pin or link may remain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use crate::support::{build, net, python, skip};
use build::TestBuild;
use net::{assert_eperm, assert_event, Run, TcpSink, UdpLiteSink, UdpSink};
use python::{python3, python3_command};

#[test]
fn tcp_to_unlisted_loopback_ports_is_refused() {
    const T: &str = "tcp_to_unlisted_loopback_ports_is_refused";
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    // Control: the allowed endpoint works, bytes arrive.
    let out = run.probe(&["tcp", "127.0.0.1", &allowed.port().to_string()]);
    assert_eq!(out, "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    // Escape: another port on the same address.
    let out = run.probe(&["tcp", "127.0.0.1", &other.port().to_string()]);
    assert_eperm("tcp 127.0.0.1", &out);
    assert_eq!(other.received(), None, "the listener must receive nothing");
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", &other.addr.to_string());
    assert_eq!(events.len(), 1);
}

#[test]
fn tcp_over_ipv6_mapped_and_other_loopbacks_is_refused() {
    const T: &str = "tcp_over_ipv6_mapped_and_other_loopbacks_is_refused";
    let allowed = TcpSink::bind("127.0.0.1");
    let v4 = TcpSink::bind("127.0.0.1");
    let v6 = TcpSink::bind("::1");
    let two = TcpSink::bind("127.0.0.2");
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    // Control: the allowed endpoint, written as an IPv4-mapped IPv6 address, is the same endpoint.
    let out = run.probe(&["tcp", "::ffff:127.0.0.1", &allowed.port().to_string()]);
    assert_eq!(out, "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));

    let out = run.probe(&["tcp", "::1", &v6.port().to_string()]);
    assert_eperm("tcp [::1]", &out);
    assert_eq!(v6.received(), None);
    let out = run.probe(&["tcp", "::ffff:127.0.0.1", &v4.port().to_string()]);
    assert_eperm("tcp [::ffff:127.0.0.1]", &out);
    assert_eq!(v4.received(), None);
    let out = run.probe(&["tcp", "127.0.0.2", &two.port().to_string()]);
    assert_eperm("tcp 127.0.0.2", &out);
    assert_eq!(two.received(), None);

    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect6", &format!("[::1]:{}", v6.port()));
    assert_event(
        &events,
        cg,
        "connect6",
        &format!("[::ffff:127.0.0.1]:{}", v4.port()),
    );
    assert_event(&events, cg, "connect4", &two.addr.to_string());
    assert_eq!(events.len(), 3);
    // The control of the control: outside the run nothing is refused.
    assert_eq!(
        Run::probe_outside(&["tcp", "127.0.0.2", &two.port().to_string()]),
        "ok"
    );
    assert!(two.received().is_some());
}

#[test]
fn udp_sendto_and_connect_are_refused() {
    const T: &str = "udp_sendto_and_connect_are_refused";
    let allowed = UdpSink::bind("127.0.0.1:0").unwrap();
    let other = UdpSink::bind("127.0.0.1:0").unwrap();
    let other6 = UdpSink::bind("[::1]:0").unwrap();
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    let p = allowed.addr.port().to_string();
    assert_eq!(run.probe(&["udp_sendto", "127.0.0.1", &p]), "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eq!(run.probe(&["udp_connect", "127.0.0.1", &p]), "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));

    let q = other.addr.port().to_string();
    assert_eperm("udp sendto", &run.probe(&["udp_sendto", "127.0.0.1", &q]));
    assert_eperm("udp connect", &run.probe(&["udp_connect", "127.0.0.1", &q]));
    assert_eperm(
        "udp sendto mapped",
        &run.probe(&["udp_sendto", "::ffff:127.0.0.1", &q]),
    );
    let q6 = other6.addr.port().to_string();
    assert_eperm("udp6 sendto", &run.probe(&["udp_sendto", "::1", &q6]));
    assert_eq!(other.received(), None);
    assert_eq!(other6.received(), None);

    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "sendmsg4", &other.addr.to_string());
    assert_event(&events, cg, "connect4", &other.addr.to_string());
    assert_event(&events, cg, "sendmsg6", &format!("[::1]:{q6}"));
    // UDP sendto to a mapped address arrives at sendmsg4 as plain IPv4 (TOOLCHAIN.md).
    assert_eq!(
        events
            .iter()
            .filter(|e| e.destination.to_string() == other.addr.to_string())
            .count(),
        3
    );
}

#[test]
fn dns_query_to_the_stub_resolver_is_refused() {
    const T: &str = "dns_query_to_the_stub_resolver_is_refused";
    // Our own stand-in for systemd-resolved's stub, when the port is free.
    let sink = UdpSink::bind("127.0.0.53:53").ok();
    let Some(run) = Run::start(T, &[], &[]) else {
        return;
    };
    assert_eperm("dns", &run.probe(&["dns", "127.0.0.53", "53"]));
    if let Some(s) = &sink {
        assert_eq!(s.received(), None);
    }
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "sendmsg4", "127.0.0.53:53");
    if let Some(s) = &sink {
        // Control: outside the run, the same query arrives.
        assert_eq!(Run::probe_outside(&["dns", "127.0.0.53", "53"]), "ok");
        assert!(s.received().is_some());
    }
}

#[test]
fn tcp_fast_open_and_mptcp_are_refused() {
    const T: &str = "tcp_fast_open_and_mptcp_are_refused";
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    let p = allowed.port().to_string();
    let q = other.port().to_string();
    assert_eq!(run.probe(&["tfo", "127.0.0.1", &p]), "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eq!(run.probe(&["mptcp", "127.0.0.1", &p]), "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));

    assert_eperm("tcp fast open", &run.probe(&["tfo", "127.0.0.1", &q]));
    assert_eq!(other.received(), None);
    assert_eperm("mptcp", &run.probe(&["mptcp", "127.0.0.1", &q]));
    assert_eq!(other.received(), None);
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_eq!(events.len(), 2, "{events:#?}");
    assert_event(&events, cg, "connect4", &other.addr.to_string());
    // MPTCP connects through its first TCP subflow, which carries the run's
    // cgroup: the hook sees (and reports) protocol tcp for both refusals.
    assert!(
        events
            .iter()
            .all(|e| e.destination.to_string() == other.addr.to_string()),
        "{events:#?}"
    );
}

#[test]
fn io_uring_connect_is_refused() {
    const T: &str = "io_uring_connect_is_refused";
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    let bin = std::env::temp_dir().join(format!("lockrun-net-uring-{}", std::process::id()));
    let cc = std::process::Command::new("gcc")
        .arg("-O1")
        .arg("-o")
        .arg(&bin)
        .arg(net::support_dir().join("net_uring.c"))
        .status();
    if !cc.is_ok_and(|s| s.success()) {
        net::skip(T, "gcc could not build tests/support/net_uring.c");
        return;
    }
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    let uring = |port: u16| {
        let mut c = std::process::Command::new(&bin);
        c.args(["127.0.0.1", &port.to_string()]);
        run.inside(c)
    };
    assert_eq!(uring(allowed.port()), "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eperm("io_uring connect", &uring(other.port()));
    assert_eq!(other.received(), None);
    let cg = run.cgroup_id();
    let events = run.finish();
    let _ = std::fs::remove_file(&bin);
    assert_event(&events, cg, "connect4", &other.addr.to_string());
}

#[test]
fn nested_setsid_grandchild_is_still_confined() {
    const T: &str = "nested_setsid_grandchild_is_still_confined";
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    let Some(run) = Run::start(T, &[allowed.addr], &[]) else {
        return;
    };
    let out = run.probe_env(&["tcp", "127.0.0.1", &allowed.port().to_string()], true);
    assert_eq!(out, "ok");
    assert!(allowed.received().is_some());
    let out = run.probe_env(&["tcp", "127.0.0.1", &other.port().to_string()], true);
    assert_eperm("grandchild tcp", &out);
    assert_eq!(other.received(), None);
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", &other.addr.to_string());
}

/// Every ICMP packet on this host is seen here, from outside the run.
fn icmp_seen(raw: &std::os::fd::OwnedFd, token: &[u8]) -> bool {
    let mut buf = [0u8; 2048];
    loop {
        match nix::sys::socket::recv(
            std::os::fd::AsRawFd::as_raw_fd(raw),
            &mut buf,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(n) if buf[..n].windows(token.len()).any(|w| w == token) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
}

#[test]
fn icmp_ping_socket_is_refused() {
    const T: &str = "icmp_ping_socket_is_refused";
    if !nix::unistd::Uid::effective().is_root() {
        net::skip(T, "needs root");
        return;
    }
    let _range = net::PingGroupRange::allow_root();
    let raw = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Raw,
        nix::sys::socket::SockFlag::empty(),
        nix::sys::socket::SockProtocol::Icmp,
    )
    .unwrap();
    let token = |t: u32| format!("lockrun-ping-{t}").into_bytes();
    let (t_out, t_in) = (std::process::id() * 2, std::process::id() * 2 + 1);
    let udp = UdpSink::bind("127.0.0.1:0").unwrap();

    // Control of the judge: outside any run, the same ping is sent and seen.
    assert_eq!(
        Run::probe_outside(&["ping", "127.0.0.1", &t_out.to_string()]),
        "ok"
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        icmp_seen(&raw, &token(t_out)),
        "the control ping must be seen"
    );

    let Some(run) = Run::start(T, &[udp.addr], &[]) else {
        return;
    };
    // Control inside: ordinary datagram sockets are still created and reach what is allowed.
    assert_eq!(
        run.probe(&["udp_sendto", "127.0.0.1", &udp.addr.port().to_string()]),
        "ok"
    );
    assert!(udp.received().is_some());
    // sendto() on a ping socket runs no cgroup sendmsg hook (kernel 6.18), so the
    // socket itself is refused at creation.
    assert_eperm(
        "ping sendto",
        &run.probe(&["ping", "127.0.0.1", &t_in.to_string()]),
    );
    assert_eperm(
        "ping connect",
        &run.probe(&["ping_connect", "127.0.0.1", "0"]),
    );
    assert_eperm("ping6", &run.probe(&["ping", "::1", &t_in.to_string()]));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(
        !icmp_seen(&raw, &token(t_in)),
        "the refused ping must not be sent"
    );
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_eq!(events.len(), 3, "{events:#?}");
    assert_event(&events, cg, "sock_create", "0.0.0.0:0");
    assert_event(&events, cg, "sock_create", "[::]:0");
    assert!(events.iter().all(|e| e.protocol == "icmp"), "{events:#?}");
}

#[test]
fn udp_lite_and_other_socket_kinds_are_refused() {
    const T: &str = "udp_lite_and_other_socket_kinds_are_refused";
    let udp = UdpSink::bind("127.0.0.1:0").unwrap();
    let lite = UdpLiteSink::bind("127.0.0.1");
    let lite6 = UdpLiteSink::bind("::1");
    let (port, port6) = (lite.addr.port().to_string(), lite6.addr.port().to_string());
    // Control of the judge: outside any run, a UDP-Lite datagram arrives.
    assert_eq!(
        Run::probe_outside(&["udplite_connect", "127.0.0.1", &port]),
        "ok"
    );
    // Both sinks are allowed endpoints: what is refused is the kind of socket.
    let Some(run) = Run::start(T, &[udp.addr, lite.addr, lite6.addr], &[]) else {
        return;
    };
    // Control inside: plain UDP sockets are made and reach what is allowed.
    assert_eq!(
        run.probe(&["udp_connect", "127.0.0.1", &udp.addr.port().to_string()]),
        "ok"
    );
    assert!(udp.received().is_some());
    // On kernel 6.18 connect() on a UDP-Lite socket runs no connect hook: the
    // send after it went anywhere on loopback before sock_create refused the kind.
    assert_eperm(
        "udplite connect",
        &run.probe(&["udplite_connect", "127.0.0.1", &port]),
    );
    assert_eperm(
        "udplite sendto",
        &run.probe(&["udplite_sendto", "127.0.0.1", &port]),
    );
    assert_eperm(
        "udplite6 connect",
        &run.probe(&["udplite_connect", "::1", &port6]),
    );
    assert_eq!(lite.received(), ["escaped-connect"]);
    assert_eq!(lite6.received(), Vec::<String>::new());
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_eq!(events.len(), 3, "{events:#?}");
    assert_event(&events, cg, "sock_create", "0.0.0.0:0");
    assert_event(&events, cg, "sock_create", "[::]:0");
    assert!(
        events.iter().all(|e| e.protocol == "udplite"),
        "{events:#?}"
    );
}

/// A worktree, a run temp dir and an "outside" holding stand-ins for
/// /run/docker.sock and /run/systemd/resolve/io.systemd.Resolve.
struct UnixWorld {
    base: std::path::PathBuf,
    wt: std::path::PathBuf,
    tmp: std::path::PathBuf,
    outside: std::path::PathBuf,
    docker: std::os::unix::net::UnixListener,
    resolve: std::os::unix::net::UnixDatagram,
}

impl UnixWorld {
    fn new(test: &str) -> Self {
        let base = std::env::temp_dir().join(net::run_id(test));
        let (wt, tmp, outside) = (base.join("wt"), base.join("tmp"), base.join("outside"));
        for d in [&wt, &tmp, &outside, &base.join("wt-other")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let docker = std::os::unix::net::UnixListener::bind(outside.join("docker.sock")).unwrap();
        docker.set_nonblocking(true).unwrap();
        let resolve =
            std::os::unix::net::UnixDatagram::bind(outside.join("io.systemd.Resolve")).unwrap();
        resolve.set_nonblocking(true).unwrap();
        Self {
            base,
            wt,
            tmp,
            outside,
            docker,
            resolve,
        }
    }

    fn docker_path(&self) -> String {
        self.outside.join("docker.sock").display().to_string()
    }

    /// Did anything reach the outside sockets?
    fn outside_reached(&self) -> bool {
        let mut buf = [0u8; 64];
        self.docker.accept().is_ok() || self.resolve.recv(&mut buf).is_ok()
    }
}

impl Drop for UnixWorld {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn unix_listener(path: &std::path::Path) -> std::os::unix::net::UnixListener {
    let l = std::os::unix::net::UnixListener::bind(path).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

#[test]
fn unix_sockets_outside_the_run_are_unreachable() {
    const T: &str = "unix_sockets_outside_the_run_are_unreachable";
    // The hooks alone (no supervisor): before 6.7 a run's unix addresses
    // are judged by the supervisor and the unix guard (tests/unix_guard.rs,
    // tests/supervise.rs).
    if skip::before_kernel(T, (6, 7), "cgroup connect_unix and sendmsg_unix hooks") {
        return;
    }
    let w = UnixWorld::new(T);
    let Some(run) = Run::start(T, &[], &[w.wt.clone(), w.tmp.clone()]) else {
        return;
    };
    // Controls: sockets in the worktree and the run's temp dir work, stream and datagram;
    // abstract sockets and socketpairs inside the run still work.
    let inside = unix_listener(&w.wt.join("ok.sock"));
    let ok = w.wt.join("ok.sock").display().to_string();
    assert_eq!(run.probe(&["unix_stream", &ok]), "ok");
    assert!(inside.accept().is_ok());
    let dg = std::os::unix::net::UnixDatagram::bind(w.tmp.join("dg.sock")).unwrap();
    dg.set_nonblocking(true).unwrap();
    assert_eq!(
        run.probe(&["unix_dgram", &w.tmp.join("dg.sock").display().to_string()]),
        "ok"
    );
    let mut buf = [0u8; 16];
    assert!(dg.recv(&mut buf).is_ok());
    assert_eq!(
        run.probe(&["unix_abstract", &format!("lockrun-{}", run.run_id)]),
        "ok"
    );
    assert_eq!(run.probe(&["unix_socketpair", "-"]), "ok");

    // Escapes, each refused before the kernel resolves anything.
    let docker = w.docker_path();
    assert_eperm("absolute outside", &run.probe(&["unix_stream", &docker]));
    assert_eperm(
        "datagram to resolve",
        &run.probe(&[
            "unix_dgram",
            &w.outside.join("io.systemd.Resolve").display().to_string(),
        ]),
    );
    let wt = w.wt.display().to_string();
    assert_eperm(
        "dot-dot from the worktree",
        &run.probe(&["unix_stream", &format!("{wt}/../outside/docker.sock")]),
    );
    assert_eperm(
        "dot-dot, trailing",
        &run.probe(&["unix_stream", &format!("{wt}/./../outside/docker.sock")]),
    );
    assert_eperm(
        "relative from the worktree",
        &run.probe(&["unix_stream", "../outside/docker.sock", "0", &wt]),
    );
    assert_eperm(
        "relative, no dot-dot",
        &run.probe(&[
            "unix_stream",
            "docker.sock",
            "0",
            &w.outside.display().to_string(),
        ]),
    );
    let sibling = unix_listener(&w.base.join("wt-other/s.sock"));
    assert_eperm(
        "sibling sharing the worktree's name as a prefix",
        &run.probe(&[
            "unix_stream",
            &w.base.join("wt-other/s.sock").display().to_string(),
        ]),
    );
    assert!(sibling.accept().is_err());
    assert!(!w.outside_reached(), "an outside socket was reached");

    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect_unix", &format!("unix:{docker}"));
    assert_event(
        &events,
        cg,
        "sendmsg_unix",
        &format!("unix:{}", w.outside.join("io.systemd.Resolve").display()),
    );
    assert_event(&events, cg, "connect_unix", "unix:../outside/docker.sock");
    assert_eq!(events.len(), 7, "{events:#?}");
    // Control of the judge: outside any run, the stand-in is reachable.
    assert_eq!(Run::probe_outside(&["unix_stream", &docker]), "ok");
    assert!(w.docker.accept().is_ok());
}

/// Once a known gap: the unix hooks judge the path as written, before the
/// kernel resolves it, so a symlink inside the worktree that points at an
/// outside socket passed them. A real run closes it: the seccomp supervisor
/// (`lockrun::supervise`) resolves every pathname connect of the command and
/// performs only those that land in the worktree or the run's temp dir, and
/// the hooks, in `UnixMode::Supervised`, refuse any pathname a task of the
/// run names itself. So this test drives the real binary, with a control: a
/// symlink inside that points inside still connects. (More in
/// tests/supervise.rs: `..`, a cwd outside, datagrams, servers inside.)
#[test]
fn symlink_in_worktree_to_outside_socket() {
    const T: &str = "symlink_in_worktree_to_outside_socket";
    let w = UnixWorld::new(T);
    if !nix::unistd::Uid::effective().is_root() {
        net::skip(T, "needs root (the real binary: Landlock, cgroup v2, bpf)");
        return;
    }
    std::os::unix::fs::symlink(w.outside.join("docker.sock"), w.wt.join("link.sock")).unwrap();
    std::os::unix::fs::symlink(&w.outside, w.wt.join("dir")).unwrap();
    let inside = unix_listener(&w.wt.join("ok.sock"));
    std::os::unix::fs::symlink(w.wt.join("ok.sock"), w.wt.join("ok-link.sock")).unwrap();
    let probe = |path: &std::path::Path| -> String {
        use std::io::Write as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lockrun"))
            .arg("--worktree")
            .arg(&w.wt)
            .arg("--state-dir")
            .arg(w.base.join("state"))
            .arg("--")
            .arg(python3())
            .arg(net::support_dir().join("net_probe.py"))
            .arg("unix_stream")
            .arg(path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "lockrun: {:?}", out.status);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let file_link = probe(&w.wt.join("link.sock"));
    let dir_link = probe(&w.wt.join("dir/docker.sock"));
    let control = probe(&w.wt.join("ok-link.sock"));
    let reached = w.outside_reached();
    assert_eperm("symlink to an outside socket", &file_link);
    assert_eperm("directory symlink to outside", &dir_link);
    assert!(!reached, "the outside listener was reached");
    assert_eq!(control, "ok", "a symlink inside to a socket inside");
    assert!(inside.accept().is_ok(), "the control reached its listener");
}

#[test]
fn a_full_ring_buffer_is_counted_not_silent() {
    const T: &str = "a_full_ring_buffer_is_counted_not_silent";
    let Some(mut run) = Run::start(T, &[], &[]) else {
        return;
    };
    assert_eq!(run.probe(&["flood", "127.0.0.1", "9"]), "ok");
    let cg = run.cg.take().unwrap();
    cg.remove().unwrap().remove().unwrap();
    let counters = run.hooks.take().unwrap().finish(&run.audit).unwrap();
    let delivered = net::read_events(&run.audit_path).len() as u64;
    assert_eq!(counters.total(), 3000, "{counters:?}");
    assert!(
        counters.lost > 0,
        "3000 events cannot fit the ring buffer: {counters:?}"
    );
    assert_eq!(delivered + counters.lost, 3000, "{counters:?}");
    let log = std::fs::read_to_string(&run.audit_path).unwrap();
    assert!(
        log.contains(&format!(
            "\"event\":\"kernel_events_lost\",\"count\":{}",
            counters.lost
        )),
        "the loss must be in the audit log"
    );
    assert!(run.audit.summary()[0].contains("not delivered (ring buffer full)"));
    run.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_reader_delivers_events_while_the_run_goes() {
    const T: &str = "the_audit_reader_delivers_events_while_the_run_goes";
    let other = TcpSink::bind("127.0.0.1");
    let Some(mut run) = Run::start(T, &[], &[]) else {
        return;
    };
    let audit = std::sync::Arc::clone(&run.audit);
    run.hooks
        .as_mut()
        .unwrap()
        .spawn_audit_reader(audit)
        .unwrap();
    let port = other.port().to_string();
    let out = tokio::task::block_in_place(|| run.probe(&["tcp", "127.0.0.1", &port]));
    assert_eperm("tcp", &out);
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = net::read_events(&run.audit_path);
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_event(&seen, run.cgroup_id(), "connect4", &other.addr.to_string());
    let events = tokio::task::block_in_place(|| run.finish());
    assert_eq!(
        events.len(),
        1,
        "delivered once, not again at finish: {events:#?}"
    );
}

#[test]
fn the_run_cgroup_is_not_made_writable() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    const T: &str = "the_run_cgroup_is_not_made_writable";
    if !nix::unistd::Uid::effective().is_root() {
        net::skip(T, "needs root");
        return;
    }
    let cg = lockrun::cgroup::RunCgroup::create(lockrun::bpf::shared::build_id(), &net::run_id(T))
        .unwrap();
    for f in [
        "",
        "cgroup.procs",
        "cgroup.threads",
        "cgroup.subtree_control",
    ] {
        let m = std::fs::metadata(cg.path().join(f)).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0), "{f} must stay root's");
        assert_eq!(
            m.permissions().mode() & 0o022,
            0,
            "{f} must not be group/other-writable"
        );
    }
    let parent = std::fs::metadata(cg.path().parent().unwrap()).unwrap();
    assert_eq!(parent.permissions().mode() & 0o022, 0);
    let path = cg.path().to_path_buf();
    cg.remove().unwrap().remove().unwrap();
    assert!(!path.exists());
}

/// Run by `hooks_outlive_a_sigkilled_loader` in a child process: attach, say
/// READY, and wait to be killed.
#[test]
#[ignore = "helper process for hooks_outlive_a_sigkilled_loader"]
fn helper_loader_that_gets_killed() {
    let Ok(run_id) = std::env::var("LOCKRUN_TEST_HELPER_RUN_ID") else {
        return;
    };
    let cg = lockrun::cgroup::RunCgroup::create(lockrun::bpf::shared::build_id(), &run_id).unwrap();
    let hooks = lockrun::bpf::hooks::NetworkHooks::attach(&cg, &run_id, &[], &[]).unwrap();
    println!("READY {}", cg.path().display());
    std::thread::sleep(std::time::Duration::from_mins(2));
    drop((hooks, cg));
}

/// Helper for `a_new_build_attached_by_many_threads_at_once_loads_once`
/// (run with `LOCKRUN_TEST_BUILD_ID` naming a build no one has loaded):
/// eight threads create a run cgroup each, then attach at once. One
/// `ATTACH ok` or `ATTACH <error>` line per thread.
#[test]
#[ignore = "helper process for a_new_build_attached_by_many_threads_at_once_loads_once"]
fn helper_many_threads_attach_a_new_build() {
    const THREADS: usize = 8;
    let Ok(prefix) = std::env::var("LOCKRUN_TEST_HELPER_RUN_ID") else {
        return;
    };
    let barrier = std::sync::Barrier::new(THREADS);
    let results: Vec<String> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let (prefix, barrier) = (&prefix, &barrier);
                s.spawn(move || {
                    let run_id = format!("{prefix}t{i}");
                    let cg = lockrun::cgroup::RunCgroup::create(
                        lockrun::bpf::shared::build_id(),
                        &run_id,
                    );
                    barrier.wait();
                    let cg = cg.map_err(|e| format!("cgroup: {e}"))?;
                    let hooks = lockrun::bpf::hooks::NetworkHooks::attach(&cg, &run_id, &[], &[])
                        .map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))?;
                    drop((hooks, cg));
                    Ok::<(), String>(())
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap().err().unwrap_or_else(|| "ok".into()))
            .collect()
    });
    for r in results {
        println!("ATTACH {r}");
    }
}

/// The first runs of a build load its programs, each into a directory of
/// its own, and the first to rename it into place wins. Threads of one
/// process (a program using the library) once shared one such directory,
/// pinning into and clearing each other's: `EEXIST`/`ENOENT` from
/// `BPF_OBJ_PIN`, or a build directory missing programs.
#[test]
fn a_new_build_attached_by_many_threads_at_once_loads_once() {
    const T: &str = "a_new_build_attached_by_many_threads_at_once_loads_once";
    if !nix::unistd::Uid::effective().is_root() {
        net::skip(T, "needs root");
        return;
    }
    let build = TestBuild::new("threads");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_many_threads_attach_a_new_build",
            "--ignored",
            "--nocapture",
        ])
        .env("LOCKRUN_TEST_BUILD_ID", &build.0)
        .env("LOCKRUN_TEST_HELPER_RUN_ID", net::run_id(T))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let attached: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ATTACH "))
        .collect();
    assert_eq!(
        attached,
        ["ok"; 8],
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One complete build directory, and no load left half done.
    assert_eq!(build.pinned(), std::slice::from_ref(&build.0));
    let dir = build.dir();
    let mut programs = vec!["connect4", "ingress", "egress"];
    // The unix hooks where the kernel has them (Linux 6.7).
    if lockrun::kernel::Features::get().unix_hooks {
        programs.push("sendmsg_unix");
    }
    for program in programs {
        assert!(dir.join(program).exists(), "{program} pinned");
    }
}

#[test]
fn hooks_outlive_a_sigkilled_loader() {
    use std::io::BufRead as _;
    const T: &str = "hooks_outlive_a_sigkilled_loader";
    if !nix::unistd::Uid::effective().is_root() {
        net::skip(T, "needs root");
        return;
    }
    let run_id = net::run_id(T);
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_loader_that_gets_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("LOCKRUN_TEST_HELPER_RUN_ID", &run_id)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(helper.stdout.take().unwrap()).lines();
    let cg_path = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = helper.kill();
            let _ = helper.wait();
            // The helper could not attach: the object is missing or it failed; say which.
            net::skip(
                T,
                "the helper loader did not get READY (eBPF object built?)",
            );
            return;
        };
        if let Some(p) = line.strip_prefix("READY ") {
            break std::path::PathBuf::from(p);
        }
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(helper.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    helper.wait().unwrap();

    let sink = TcpSink::bind("127.0.0.1");
    let port = sink.port().to_string();
    let probe_in_cgroup = || {
        let mut child = python3_command()
            .arg(net::support_dir().join("net_probe.py"))
            .args(["tcp", "127.0.0.1", &port])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::fs::write(cg_path.join("cgroup.procs"), child.id().to_string()).unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"go\n").unwrap();
        String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout)
            .trim()
            .to_owned()
    };
    // The loader is dead; the build's hooks still judge its run (it stays
    // registered), and gc can find the run.
    let cg_id = lockrun::cgroup::run_cgroup_id(&run_id).unwrap();
    assert!(
        lockrun::bpf::registry::registered_runs()
            .unwrap()
            .contains(&cg_id),
        "the killed run stays registered in the shared maps: its hooks judge by it"
    );
    assert!(lockrun::cgroup::runs().unwrap().contains(&run_id));
    assert_eperm("after SIGKILL of the loader", &probe_in_cgroup());
    assert_eq!(sink.received(), None);
    // The control: the same probe, outside the run's cgroup, gets through.
    assert_eq!(
        Run::probe_outside(&["tcp", "127.0.0.1", &port]),
        "ok",
        "the probe outside the run"
    );
    assert!(sink.received().is_some());
    // gc: reap the cgroup, then forget the run in the shared maps.
    assert_eq!(lockrun::cgroup::reap(&run_id).unwrap(), Some(cg_id));
    assert!(!cg_path.exists());
    lockrun::bpf::registry::forget_runs(&[cg_id]).unwrap();
    assert!(!lockrun::bpf::registry::registered_runs()
        .unwrap()
        .contains(&cg_id));
    assert_eq!(lockrun::cgroup::reap(&run_id).unwrap(), None);
}
