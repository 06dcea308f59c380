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

#[path = "net_support.rs"]
mod support;

use support::{assert_eperm, assert_event, Run, TcpSink, UdpSink};

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
    assert_event(&events, cg, "connect6", &format!("[::ffff:127.0.0.1]:{}", v4.port()));
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
        .arg(support::tests_dir().join("net_uring.c"))
        .status();
    if !cc.is_ok_and(|s| s.success()) {
        support::skip(T, "gcc could not build tests/net_uring.c");
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

/// Lets root open ICMP ping sockets for the test's duration (per network namespace).
struct PingGroupRange(String);

impl PingGroupRange {
    const PATH: &'static str = "/proc/sys/net/ipv4/ping_group_range";
    fn allow_root() -> Self {
        let old = std::fs::read_to_string(Self::PATH).unwrap();
        std::fs::write(Self::PATH, "0 0").unwrap();
        Self(old)
    }
}

impl Drop for PingGroupRange {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.0.trim().replace('\t', " "));
    }
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
        support::skip(T, "needs root");
        return;
    }
    let _range = PingGroupRange::allow_root();
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
    assert_eq!(Run::probe_outside(&["ping", "127.0.0.1", &t_out.to_string()]), "ok");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(icmp_seen(&raw, &token(t_out)), "the control ping must be seen");

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
    assert_eperm("ping sendto", &run.probe(&["ping", "127.0.0.1", &t_in.to_string()]));
    assert_eperm("ping connect", &run.probe(&["ping_connect", "127.0.0.1", "0"]));
    assert_eperm("ping6", &run.probe(&["ping", "::1", &t_in.to_string()]));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!icmp_seen(&raw, &token(t_in)), "the refused ping must not be sent");
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_eq!(events.len(), 3, "{events:#?}");
    assert_event(&events, cg, "sock_create", "0.0.0.0:0");
    assert_event(&events, cg, "sock_create", "[::]:0");
    assert!(events.iter().all(|e| e.protocol == "icmp"), "{events:#?}");
}
