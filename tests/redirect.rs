//! The kernel brings a run's connections to its proxy (issue 59): the
//! cgroup hooks of a run registered with [`RedirectTo`] redirect a TCP
//! connect to the fake range (`198.18.0.0/15`) to the transparent listener
//! and DNS (TCP and UDP to port 53) to the resolver, show the client the
//! address it asked for (`getpeername`, a reply's source), and record each
//! transparent connection for the proxy to take ([`Originals::take`]).
//! Everything else stays refused and recorded, and a run without
//! redirection keeps today's refusals.
//!
//! At the library level, as `tests/net.rs`: a cgroup, the hooks, a probe
//! moved into the cgroup before it tries anything, and plain listeners of
//! the test's own standing in for the proxy's, judged from outside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

use lockrun::bpf::hooks::RedirectTo;

use crate::support::net::{assert_eperm, assert_event, support_dir, Run, TcpSink};
use crate::support::python::python3_command;
use crate::support::skip::skip;

/// The test's stand-ins for the proxy: a transparent listener, and a
/// resolver listening for TCP and UDP on one port.
struct Listeners {
    transparent: TcpListener,
    resolver_tcp: TcpListener,
    resolver_udp: UdpSocket,
}

impl Listeners {
    fn bind() -> Self {
        let transparent = TcpListener::bind("127.0.0.1:0").unwrap();
        // The same port number for TCP and UDP; a port taken for UDP is tried again.
        for _ in 0..50 {
            let resolver_tcp = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = resolver_tcp.local_addr().unwrap().port();
            if let Ok(resolver_udp) = UdpSocket::bind(("127.0.0.1", port)) {
                return Self {
                    transparent,
                    resolver_tcp,
                    resolver_udp,
                };
            }
        }
        panic!("no port free for both TCP and UDP");
    }

    fn redirect(&self) -> RedirectTo {
        RedirectTo {
            transparent: self.transparent.local_addr().unwrap(),
            resolver: self.resolver_tcp.local_addr().unwrap(),
        }
    }
}

/// The connection the probe made to `l`, accepted after it (the kernel
/// completes the handshake and queues what the client sent): the client's
/// address, the listener's, and what it sent. `None` if none is queued.
fn accepted(l: &TcpListener) -> Option<(SocketAddr, SocketAddr, Vec<u8>)> {
    l.set_nonblocking(true).unwrap();
    let r = match l.accept() {
        Ok((mut s, peer)) => {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let local = s.local_addr().unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).unwrap();
            Some((peer, local, buf))
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => panic!("accept: {e}"),
    };
    l.set_nonblocking(false).unwrap();
    r
}

/// Whether a datagram is waiting on `u` (after a probe that must not have sent one).
fn a_datagram_waits(u: &UdpSocket) -> bool {
    u.set_nonblocking(true).unwrap();
    let r = u.peek_from(&mut [0u8; 16]).is_ok();
    u.set_nonblocking(false).unwrap();
    r
}

/// Answer one datagram on `u` with `answer` (waiting up to 2 min): where it
/// came from, and what it carried. `None` if none came.
fn answer_one(u: &UdpSocket, answer: &'static [u8]) -> JoinHandle<Option<(SocketAddr, Vec<u8>)>> {
    let u = u.try_clone().unwrap();
    // Long: the probe starts Python first, slow under an emulated kernel.
    u.set_read_timeout(Some(Duration::from_mins(2))).unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        let (n, from) = u.recv_from(&mut buf).ok()?;
        u.send_to(answer, from).unwrap();
        Some((from, buf[..n].to_vec()))
    })
}

/// The redirect probe inside `run`: `kind host port`.
fn probe(run: &Run, args: &[&str]) -> String {
    let mut cmd: Command = python3_command();
    cmd.arg(support_dir().join("redirect_probe.py")).args(args);
    run.inside(cmd)
}

fn start(test: &str, l: &Listeners) -> Option<Run> {
    let run = Run::start_with(test, &[], &[], Some(l.redirect()))?;
    if let Err(why) = lockrun::kernel::redirect() {
        skip(
            test,
            &format!("transparent redirection: not on this kernel ({why})"),
        );
        return None;
    }
    Some(run)
}

#[test]
fn a_tcp_connect_to_the_fake_range_lands_on_the_transparent_listener() {
    const T: &str = "a_tcp_connect_to_the_fake_range_lands_on_the_transparent_listener";
    let l = Listeners::bind();
    let Some(run) = start(T, &l) else {
        return;
    };
    let originals = run.hooks.as_ref().unwrap().originals().expect("originals");
    for (host, shown) in [
        ("198.18.0.7", "198.18.0.7"),
        ("::ffff:198.19.255.1", "::ffff:198.19.255.1"),
    ] {
        let out = probe(&run, &["tcp_peer", host, "443"]);
        assert_eq!(
            out,
            format!("ok {shown} 443"),
            "getpeername in the client ({host})"
        );
        let (peer, local, bytes) = accepted(&l.transparent).expect("the listener got it");
        assert_eq!(bytes, b"hello\n", "{host}");
        assert_eq!(local, l.redirect().transparent);
        let original = shown.trim_start_matches("::ffff:");
        let want: SocketAddr = format!("{original}:443").parse().unwrap();
        assert_eq!(
            originals.take(peer, local),
            Some(want),
            "{host}: taken once"
        );
        assert_eq!(originals.take(peer, local), None, "{host}: and then gone");
    }
    // MPTCP connects through its first subflow, a TCP socket of the run
    // (the hook sees protocol tcp, `tests/net.rs::tcp_fast_open_and_mptcp_are_refused`):
    // it is brought to the listener as TCP is, and ends there (the listener
    // speaks no MPTCP: the connection falls back to plain TCP).
    assert_eq!(run.probe(&["mptcp", "198.18.0.9", "443"]), "ok");
    let (peer, local, bytes) = accepted(&l.transparent).expect("the listener got it");
    assert_eq!(bytes, b"escaped\n");
    assert_eq!(
        originals.take(peer, local),
        Some("198.18.0.9:443".parse().unwrap())
    );
    let cg = run.cgroup_id();
    let events = run.finish();
    assert!(
        events.is_empty(),
        "nothing refused: {events:?} (cgroup {cg})"
    );
}

#[test]
fn a_transparent_connection_is_taken_only_by_its_own_run() {
    const T: &str = "a_transparent_connection_is_taken_only_by_its_own_run";
    let l = Listeners::bind();
    let Some(run) = start(T, &l) else {
        return;
    };
    // Another run, with the same listener: its proxy would see the first
    // run's connection on the same address.
    let Some(other) = Run::start_with(T, &[], &[], Some(l.redirect())) else {
        return;
    };
    let mine = run.hooks.as_ref().unwrap().originals().unwrap();
    let theirs = other.hooks.as_ref().unwrap().originals().unwrap();
    assert_eq!(
        probe(&run, &["tcp_peer", "198.18.3.4", "22"]),
        "ok 198.18.3.4 22"
    );
    let (peer, local, _) = accepted(&l.transparent).unwrap();
    assert_eq!(
        theirs.take(peer, local),
        None,
        "another run's entry is refused"
    );
    // A process outside any run connecting to the listener has no entry.
    let outside = std::net::TcpStream::connect(local).unwrap();
    drop(outside);
    let (outside_peer, _, _) = accepted(&l.transparent).unwrap();
    assert_eq!(
        mine.take(outside_peer, local),
        None,
        "no entry for a process outside"
    );
    // The control: the entry was left for its own run.
    assert_eq!(
        mine.take(peer, local),
        Some("198.18.3.4:22".parse().unwrap())
    );
    assert!(other.finish().is_empty());
    assert!(run.finish().is_empty());
}

#[test]
fn dns_over_udp_reaches_the_resolver_and_the_reply_shows_the_server() {
    const T: &str = "dns_over_udp_reaches_the_resolver_and_the_reply_shows_the_server";
    let l = Listeners::bind();
    let Some(run) = start(T, &l) else {
        return;
    };
    for (kind, host) in [
        ("dns_sendto", "10.255.255.53"),
        ("dns_connect", "127.0.0.53"),
        ("dns_sendto", "::ffff:10.255.255.53"),
        ("dns_connect", "::ffff:127.0.0.53"),
    ] {
        let answered = answer_one(&l.resolver_udp, b"answer");
        let out = probe(&run, &[kind, host, "53"]);
        assert_eq!(out, format!("ok {host} 53 answer"), "{kind} {host}");
        let (_, query) = answered
            .join()
            .unwrap()
            .expect("the resolver got the query");
        assert!(query.ends_with(b"\x07example\x03com\x00\x00\x01\x00\x01"));
    }
    let events = run.finish();
    assert!(events.is_empty(), "nothing refused: {events:?}");
}

#[test]
fn dns_over_tcp_reaches_the_resolver() {
    const T: &str = "dns_over_tcp_reaches_the_resolver";
    let l = Listeners::bind();
    let Some(run) = start(T, &l) else {
        return;
    };
    let originals = run.hooks.as_ref().unwrap().originals().unwrap();
    assert_eq!(
        probe(&run, &["tcp_peer", "192.0.2.53", "53"]),
        "ok 192.0.2.53 53"
    );
    let (peer, local, bytes) = accepted(&l.resolver_tcp).expect("the resolver got it");
    assert_eq!(bytes, b"hello\n");
    assert_eq!(local, l.redirect().resolver);
    // Not a transparent connection: the proxy has nothing to take.
    assert_eq!(originals.take(peer, l.redirect().transparent), None);
    assert!(run.finish().is_empty());
}

#[test]
fn what_is_not_redirected_stays_refused_and_recorded() {
    const T: &str = "what_is_not_redirected_stays_refused_and_recorded";
    let l = Listeners::bind();
    let Some(run) = start(T, &l) else {
        return;
    };
    let loopback = TcpSink::bind("127.0.0.1");
    // An IP literal outside the range, UDP to another port or to the
    // range, IPv6 to port 53 (only IPv4 and v4-mapped are redirected), and
    // a loopback port nobody allowed.
    assert_eperm(
        "tcp [2001:db8::53]:53",
        &run.probe(&["tcp", "2001:db8::53", "53"]),
    );
    assert_eperm(
        "udp [2001:db8::53]:53",
        &run.probe(&["udp_sendto", "2001:db8::53", "53"]),
    );
    assert_eperm(
        "tcp 192.0.2.1:443",
        &run.probe(&["tcp", "192.0.2.1", "443"]),
    );
    assert_eperm(
        "udp 10.255.255.53:5353",
        &run.probe(&["udp_sendto", "10.255.255.53", "5353"]),
    );
    assert_eperm(
        "udp to the fake range",
        &run.probe(&["udp_sendto", "198.18.0.7", "443"]),
    );
    let port = loopback.port().to_string();
    assert_eperm("tcp loopback", &run.probe(&["tcp", "127.0.0.1", &port]));
    assert_eq!(loopback.received(), None);
    assert!(
        accepted(&l.transparent).is_none(),
        "the transparent listener got nothing"
    );
    assert!(accepted(&l.resolver_tcp).is_none());
    assert!(!a_datagram_waits(&l.resolver_udp), "nor the resolver");
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", "192.0.2.1:443");
    assert_event(&events, cg, "sendmsg4", "10.255.255.53:5353");
    assert_event(&events, cg, "sendmsg4", "198.18.0.7:443");
    assert_event(&events, cg, "connect4", &loopback.addr.to_string());
    assert_event(&events, cg, "connect6", "[2001:db8::53]:53");
    assert_event(&events, cg, "sendmsg6", "[2001:db8::53]:53");
    assert_eq!(events.len(), 6, "{events:?}");
}

#[test]
fn a_run_without_redirection_keeps_todays_refusals() {
    const T: &str = "a_run_without_redirection_keeps_todays_refusals";
    let l = Listeners::bind();
    let Some(run) = Run::start_with(T, &[], &[], None) else {
        return;
    };
    assert!(run.hooks.as_ref().unwrap().originals().is_none());
    assert_eperm(
        "tcp 198.18.0.7:443",
        &run.probe(&["tcp", "198.18.0.7", "443"]),
    );
    assert_eperm("dns", &run.probe(&["dns", "127.0.0.53", "53"]));
    assert_eperm("tcp dns", &run.probe(&["tcp", "192.0.2.53", "53"]));
    assert!(accepted(&l.transparent).is_none());
    assert!(accepted(&l.resolver_tcp).is_none());
    assert!(!a_datagram_waits(&l.resolver_udp));
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", "198.18.0.7:443");
    assert_event(&events, cg, "sendmsg4", "127.0.0.53:53");
    assert_event(&events, cg, "connect4", "192.0.2.53:53");
    assert_eq!(events.len(), 3, "{events:?}");
}

/// Helper for `a_kernel_without_the_hooks_runs_without_redirection` (run
/// with `LOCKRUN_TEST_NO_REDIRECT=1` and a build of its own): a run asked
/// to redirect is judged as one without. One `FALLBACK <what>` line.
#[test]
#[ignore = "helper process for a_kernel_without_the_hooks_runs_without_redirection"]
fn helper_without_the_hooks() {
    const T: &str = "helper_without_the_hooks";
    if std::env::var_os("LOCKRUN_TEST_NO_REDIRECT").is_none() {
        return;
    }
    let l = Listeners::bind();
    let run = Run::start_with(T, &[], &[], Some(l.redirect())).expect("a run");
    let out = run.probe(&["tcp", "198.18.0.7", "443"]);
    let dns = run.probe(&["dns", "127.0.0.53", "53"]);
    let originals = run.hooks.as_ref().unwrap().originals().is_some();
    let got = accepted(&l.transparent).is_some();
    let cg = run.cgroup_id();
    let events = run.finish();
    assert_event(&events, cg, "connect4", "198.18.0.7:443");
    assert_event(&events, cg, "sendmsg4", "127.0.0.53:53");
    println!(
        "FALLBACK redirect={:?} tcp={out} dns={dns} originals={originals} accepted={got} events={}",
        lockrun::kernel::redirect(),
        events.len()
    );
}

/// Where the kernel lacks a hook redirection needs (before 5.8), the run
/// goes without it: the redirect programs are neither loaded nor attached,
/// and a connect to the fake range or a DNS query is refused and recorded
/// as before. Shown here by pretending (`LOCKRUN_TEST_NO_REDIRECT`), in a
/// build of its own, whose pins are checked.
#[test]
fn a_kernel_without_the_hooks_runs_without_redirection() {
    const T: &str = "a_kernel_without_the_hooks_runs_without_redirection";
    if !nix::unistd::Uid::effective().is_root() {
        skip(T, "needs root");
        return;
    }
    let build = support::build::TestBuild::new("noredirect");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_without_the_hooks",
            "--ignored",
            "--nocapture",
        ])
        .env("LOCKRUN_TEST_BUILD_ID", &build.0)
        .env("LOCKRUN_TEST_NO_REDIRECT", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FALLBACK "))
        .unwrap_or_else(|| {
            panic!(
                "no FALLBACK line: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(
        line,
        format!(
            "redirect=Err({:?}) tcp=errno 1 EPERM dns=errno 1 EPERM originals=false \
             accepted=false events=2",
            lockrun::kernel::REDIRECT_NEEDS
        )
    );
    let dir = build.dir();
    assert!(dir.join("connect4").exists(), "the build was loaded here");
    for program in [
        "recvmsg4",
        "recvmsg6",
        "getpeername4",
        "getpeername6",
        "sock_ops",
    ] {
        assert!(!dir.join(program).exists(), "{program} not loaded");
    }
}
