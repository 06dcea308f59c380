//! Issue 3, through the real binary: every way out of the network box, tried
//! by a probe inside `lockrun` (as root), judged from outside.
//!
//! Each escape asserts the errno the probe got inside, that the test's own
//! listener outside received nothing (for TCP: not even a connection), and
//! that the `--audit-log` holds the matching `kernel_network` event (hook,
//! destination, protocol) from the run's own cgroup. Controls beside them
//! must get through: the `--allow-local` endpoint, unix sockets in the
//! worktree and in TMPDIR. After every run nothing of it is left: no cgroup,
//! no pins, no run dir (checked for this run's id, from its `run_start`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines // a test reads top to bottom: setup, attempt, judge
)]

mod support;

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{net, net_world, python, watchdog};
use net::{TcpSink, UdpSink};
use net_world::{assert_eperm, assert_run_gone, probe_outside, s, wait_for, Background, World};
use python::python3;
use watchdog::{gone, kill_watchdog_of, watchdog_of};

fn p(port: u16) -> String {
    port.to_string()
}

#[test]
fn tcp_to_unlisted_loopback_endpoints_is_refused() {
    const T: &str = "tcp_to_unlisted_loopback_endpoints_is_refused";
    let Some(w) = World::new(T) else { return };
    let allowed = TcpSink::bind("127.0.0.1");
    let v4 = TcpSink::bind("127.0.0.1");
    let named = TcpSink::bind("127.0.0.1");
    let v6 = TcpSink::bind("::1");
    let mapped = TcpSink::bind("127.0.0.1");
    let two = TcpSink::bind("127.0.0.2");
    // `localhost` may also name ::1 here: listen there too, on the same port.
    let localhost: Vec<SocketAddr> = ("localhost", named.port())
        .to_socket_addrs()
        .unwrap()
        .collect();
    let named6 = localhost.iter().any(SocketAddr::is_ipv6).then(|| {
        let listener = std::net::TcpListener::bind(("::1", named.port())).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        TcpSink { listener, addr }
    });

    let Some(o) = w.probe(
        &[allowed.addr],
        &[
            &["tcp", "127.0.0.1", &p(allowed.port())],
            &["tcp", "127.0.0.1", &p(v4.port())],
            &["tcp", "localhost", &p(named.port())],
            &["tcp", "::1", &p(v6.port())],
            &["tcp", "::ffff:127.0.0.1", &p(mapped.port())],
            &["tcp", "127.0.0.2", &p(two.port())],
        ],
    ) else {
        return;
    };
    // Control: the allowed endpoint got the bytes.
    assert_eq!(o.lines[0], "ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    for (what, line) in [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "127.0.0.2",
    ]
    .iter()
    .zip(&o.lines[1..])
    {
        assert_eperm(what, line);
    }
    for sink in [&v4, &named, &v6, &mapped, &two]
        .into_iter()
        .chain(named6.as_ref())
    {
        assert_eq!(sink.received(), None, "{} got a connection", sink.addr);
    }
    let mut want = vec![
        ("connect4", v4.addr.to_string(), "tcp"),
        ("connect6", format!("[::1]:{}", v6.port()), "tcp"),
        (
            "connect6",
            format!("[::ffff:127.0.0.1]:{}", mapped.port()),
            "tcp",
        ),
        ("connect4", two.addr.to_string(), "tcp"),
    ];
    for a in &localhost {
        let hook = if a.is_ipv6() { "connect6" } else { "connect4" };
        want.push((hook, a.to_string(), "tcp"));
    }
    o.assert_events(
        &want
            .iter()
            .map(|(h, d, p)| (*h, d.as_str(), *p))
            .collect::<Vec<_>>(),
    );
    // Controls of the judge: outside the run, the same attempts arrive.
    let out = probe_outside(&[
        &["tcp", "localhost", &p(named.port())],
        &["tcp", "::1", &p(v6.port())],
        &["tcp", "127.0.0.2", &p(two.port())],
    ]);
    assert_eq!(out, ["ok", "ok", "ok"]);
    let named_got = named.received().or_else(|| named6.as_ref()?.received());
    assert!(named_got.is_some() && v6.received().is_some() && two.received().is_some());
}

#[test]
fn udp_sendto_connect_and_dns_are_refused() {
    const T: &str = "udp_sendto_connect_and_dns_are_refused";
    let Some(w) = World::new(T) else { return };
    let allowed = UdpSink::bind("127.0.0.1:0").unwrap();
    let other = UdpSink::bind("127.0.0.1:0").unwrap();
    let other6 = UdpSink::bind("[::1]:0").unwrap();
    // Our stand-in for the stub resolver, when the address is free here.
    let stub = UdpSink::bind("127.0.0.53:53").ok();
    let Some(o) = w.probe(
        &[allowed.addr],
        &[
            &["udp_sendto", "127.0.0.1", &p(allowed.addr.port())],
            &["udp_connect", "127.0.0.1", &p(allowed.addr.port())],
            &["udp_sendto", "127.0.0.1", &p(other.addr.port())],
            &["udp_connect", "127.0.0.1", &p(other.addr.port())],
            &["udp_sendto", "::1", &p(other6.addr.port())],
            &["dns", "127.0.0.53", "53"],
        ],
    ) else {
        return;
    };
    assert_eq!(o.lines[..2], ["ok", "ok"]);
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eperm("udp sendto", &o.lines[2]);
    assert_eperm("udp connect", &o.lines[3]);
    assert_eperm("udp6 sendto", &o.lines[4]);
    assert_eperm("dns to 127.0.0.53", &o.lines[5]);
    assert_eq!(other.received(), None);
    assert_eq!(other6.received(), None);
    o.assert_events(&[
        ("sendmsg4", &other.addr.to_string(), "udp"),
        ("connect4", &other.addr.to_string(), "udp"),
        ("sendmsg6", &format!("[::1]:{}", other6.addr.port()), "udp"),
        ("sendmsg4", "127.0.0.53:53", "udp"),
    ]);
    if let Some(stub) = &stub {
        assert_eq!(stub.received(), None, "the DNS query arrived");
        // Control of the judge: outside, the same query arrives.
        assert_eq!(probe_outside(&[&["dns", "127.0.0.53", "53"]]), ["ok"]);
        assert!(stub.received().is_some());
    } else {
        // Judged by the errno and the event alone; say so.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("note: {T}: 127.0.0.53:53 is taken here; the DNS escape is judged by errno and event only\n").as_bytes(),
        );
    }
}

/// Build `tests/support/net_uring.c` into the test's root (outside the worktree).
fn build_uring(w: &World) -> std::path::PathBuf {
    let bin = w.root.join("net_uring");
    let st = Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(net::support_dir().join("net_uring.c"))
        .status()
        .expect("gcc");
    assert!(
        st.success(),
        "gcc could not build tests/support/net_uring.c"
    );
    bin
}

#[test]
fn tcp_fast_open_mptcp_and_io_uring_are_refused() {
    const T: &str = "tcp_fast_open_mptcp_and_io_uring_are_refused";
    let Some(w) = World::new(T) else { return };
    let uring = build_uring(&w);
    let allowed = TcpSink::bind("127.0.0.1");
    let tfo = TcpSink::bind("127.0.0.1");
    let mptcp = TcpSink::bind("127.0.0.1");
    let ring = TcpSink::bind("127.0.0.1");
    let Some(o) = w.probe(
        &[allowed.addr],
        &[
            &["tfo", "127.0.0.1", &p(allowed.port())],
            &["mptcp", "127.0.0.1", &p(allowed.port())],
            &["tfo", "127.0.0.1", &p(tfo.port())],
            &["mptcp", "127.0.0.1", &p(mptcp.port())],
            &["exec", s(&uring), "127.0.0.1", &p(ring.port())],
        ],
    ) else {
        return;
    };
    assert_eq!(o.lines[..2], ["ok", "ok"], "controls");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eperm("tcp fast open", &o.lines[2]);
    assert_eperm("mptcp", &o.lines[3]);
    // io_uring_setup itself is refused by seccomp: the ring never exists.
    assert_eq!(o.lines[4], "setup-errno 1", "io_uring_setup must get EPERM");
    for sink in [&tfo, &mptcp, &ring] {
        assert_eq!(sink.received(), None, "{} got a connection", sink.addr);
    }
    // MPTCP connects through its first subflow, a TCP socket in the run's
    // cgroup: the hook reports protocol tcp. io_uring never reached a hook.
    o.assert_events(&[
        ("connect4", &tfo.addr.to_string(), "tcp"),
        ("connect4", &mptcp.addr.to_string(), "tcp"),
    ]);
    // Control of the judge: outside, the same io_uring connect arrives.
    let mut c = Command::new(&uring)
        .args(["127.0.0.1", &p(ring.port())])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), b"go\n").unwrap();
    let out = String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap();
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .is_ok_and(|v| v.trim() != "0");
    if disabled {
        assert!(out.starts_with("setup-errno"), "{out}");
        net_world::skip(
            T,
            "io_uring is disabled on this host: the outside control cannot run",
        );
    } else {
        assert_eq!(out.trim(), "ok");
        assert_eq!(ring.received().as_deref(), Some(&b"escaped\n"[..]));
    }
}

/// Whether any ICMP packet carrying `token` was seen on this host since the last call.
fn icmp_seen(raw: &std::os::fd::OwnedFd, token: &str) -> bool {
    let mut buf = [0u8; 2048];
    let mut seen = false;
    while let Ok(n) = nix::sys::socket::recv(
        raw.as_raw_fd(),
        &mut buf,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    ) {
        seen |= buf[..n].windows(token.len()).any(|w| w == token.as_bytes());
    }
    seen
}

#[test]
fn icmp_raw_packet_and_udp_lite_sockets_are_refused() {
    const T: &str = "icmp_raw_packet_and_udp_lite_sockets_are_refused";
    let Some(w) = World::new(T) else { return };
    let _range = net::PingGroupRange::allow_root();
    // The judge: every ICMP packet on this host, seen from outside.
    let raw = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Raw,
        nix::sys::socket::SockFlag::empty(),
        nix::sys::socket::SockProtocol::Icmp,
    )
    .unwrap();
    let (t_out, t_in) = (
        format!("{}-out", std::process::id()),
        format!("{}-in", std::process::id()),
    );
    // Control of the judge: outside any run, the same ping is sent and seen.
    assert_eq!(probe_outside(&[&["ping", "127.0.0.1", &t_out]]), ["ok"]);
    std::thread::sleep(Duration::from_millis(100));
    assert!(icmp_seen(&raw, &format!("lockrun-e2e-ping-{t_out}")));

    // The judge for UDP-Lite, and its control outside any run.
    let lite = net::UdpLiteSink::bind("127.0.0.1");
    let lite_port = p(lite.addr.port());
    assert_eq!(
        probe_outside(&[&["udplite", "connect", "127.0.0.1", &lite_port]]),
        ["ok"]
    );

    let udp = UdpSink::bind("127.0.0.1:0").unwrap();
    let Some(o) = w.probe(
        // The UDP-Lite sink is allowed too: what is refused is the kind of socket.
        &[udp.addr, lite.addr],
        &[
            &["udp_sendto", "127.0.0.1", &p(udp.addr.port())],
            &["udplite", "connect", "127.0.0.1", &lite_port],
            &["udplite", "sendto", "127.0.0.1", &lite_port],
            &["ping", "127.0.0.1", &t_in],
            &["ping", "::1", &t_in],
            &["raw", "inet"],
            &["raw", "inet6"],
            &["raw", "packet"],
            &["raw", "packet_dgram"],
        ],
    ) else {
        return;
    };
    // Control inside: datagram sockets are still made and reach what is allowed.
    assert_eq!(o.lines[0], "ok");
    assert!(udp.received().is_some());
    // UDP-Lite and ping sockets: refused at creation by the sock_create hook
    // (connect on the one, sendto on the other, runs no cgroup address hook).
    // Raw: no CAP_NET_RAW. Packet: seccomp.
    for (what, line) in [
        "udplite connect",
        "udplite sendto",
        "ping",
        "ping6",
        "raw inet",
        "raw inet6",
        "packet raw",
        "packet dgram",
    ]
    .iter()
    .zip(&o.lines[1..])
    {
        assert_eperm(what, line);
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !icmp_seen(&raw, &format!("lockrun-e2e-ping-{t_in}")),
        "the refused ping was sent"
    );
    assert_eq!(lite.received(), ["escaped-connect"], "only the control's");
    o.assert_events(&[
        ("sock_create", "0.0.0.0:0", "udplite"),
        ("sock_create", "0.0.0.0:0", "udplite"),
        ("sock_create", "0.0.0.0:0", "icmp"),
        ("sock_create", "[::]:0", "icmp"),
    ]);
    // Shown as sockets of a kind no policy allows, not as connections to 0.0.0.0:0.
    assert!(
        o.stderr.contains(
            "lockrun: 4 sockets refused (a run may make inet sockets of three kinds only, \
             TCP, MPTCP and UDP, and no policy changes that): inet icmp (python3), \
             inet udplite ×2 (python3), inet6 icmp (python3)\n"
        ),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("0.0.0.0:0"), "{}", o.stderr);
    let audit = Command::new(net_world::BIN)
        .arg("audit")
        .arg(&w.audit)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&audit.stdout);
    assert!(audit.status.success(), "{shown}");
    assert!(
        shown.contains("socket inet udplite — refused when made (sock_create) ×2 [python3]"),
        "{shown}"
    );
    assert!(
        shown.contains("a socket of a kind a run may not make (inet udplite)"),
        "{shown}"
    );
    assert!(!shown.contains("0.0.0.0:0"), "{shown}");
}

#[test]
fn a_double_forked_setsid_grandchild_is_still_confined() {
    const T: &str = "a_double_forked_setsid_grandchild_is_still_confined";
    let Some(w) = World::new(T) else { return };
    let allowed = TcpSink::bind("127.0.0.1");
    let other = TcpSink::bind("127.0.0.1");
    let Some(o) = w.probe(
        &[allowed.addr],
        &[
            &["grandchild", "tcp", "127.0.0.1", &p(allowed.port())],
            &["grandchild", "tcp", "127.0.0.1", &p(other.port())],
        ],
    ) else {
        return;
    };
    // newsid=1: the grandchild is in a new session, reparented away from the probe.
    assert_eq!(o.lines[0], "newsid=1 ok");
    assert_eq!(allowed.received().as_deref(), Some(&b"escaped\n"[..]));
    assert_eq!(o.lines[1], "newsid=1 errno 1 EPERM");
    assert_eq!(other.received(), None);
    o.assert_events(&[("connect4", &other.addr.to_string(), "tcp")]);
}

#[test]
fn unix_sockets_outside_the_run_are_unreachable() {
    use std::os::linux::net::SocketAddrExt as _;
    const T: &str = "unix_sockets_outside_the_run_are_unreachable";
    let Some(w) = World::new(T) else { return };
    // A stand-in for /run/docker.sock, outside the worktree.
    let docker_path = w.outside.join("docker.sock");
    let docker = std::os::unix::net::UnixListener::bind(&docker_path).unwrap();
    docker.set_nonblocking(true).unwrap();
    let name = format!("lockrun-nete2e-{}", std::process::id());
    let abs = std::os::unix::net::UnixListener::bind_addr(
        &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
    )
    .unwrap();
    abs.set_nonblocking(true).unwrap();
    let Some(o) = w.probe(
        &[],
        &[
            &["unix_pair_in", s(&w.wt)],
            &["unix_pair_in", "$TMPDIR"],
            &["unix_stream", s(&docker_path)],
            &["unix_stream", "../outside/docker.sock"],
            &["unix_abstract", &name],
        ],
    ) else {
        return;
    };
    // Controls: server and client both in the worktree, and both in TMPDIR.
    assert_eq!(o.lines[..2], ["ok", "ok"]);
    assert_eperm("docker.sock by its path", &o.lines[2]);
    assert_eperm("docker.sock relative to the worktree", &o.lines[3]);
    // Abstract: Landlock's scoping refuses a connect to a socket bound outside the domain.
    assert_eperm("abstract socket outside", &o.lines[4]);
    let nothing = |l: &std::os::unix::net::UnixListener| matches!(l.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(nothing(&docker), "docker.sock accepted a connection");
    assert!(nothing(&abs), "the abstract socket accepted a connection");
    // The pathname refusals are the seccomp supervisor's (it resolves the
    // path as the kernel would, then refuses); the abstract refusal is
    // Landlock's, not a hook's: no kernel_network event for it.
    o.assert_events(&[
        (
            "seccomp_connect_unix",
            &format!("unix:{}", docker_path.display()),
            "unix_stream",
        ),
        (
            "seccomp_connect_unix",
            "unix:../outside/docker.sock",
            "unix_stream",
        ),
    ]);
    // Controls of the judge: outside, both are reached.
    assert_eq!(
        probe_outside(&[&["unix_stream", s(&docker_path)], &["unix_abstract", &name]]),
        ["ok", "ok"]
    );
    assert!(!nothing(&docker) && !nothing(&abs));
}

/// A cgroup the test makes, `<cgroup2>/<name>-<pid>`, outside lockrun's
/// tree; whatever is in it is killed and it is removed when dropped, on
/// every path.
struct TestCgroup(std::path::PathBuf);

impl TestCgroup {
    fn new(name: &str) -> Self {
        let root = lockrun::cgroup::cgroup2_mount().unwrap();
        let cg = Self(root.join(format!("{name}-{}", std::process::id())));
        std::fs::create_dir(&cg.0).unwrap();
        cg
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default();
        if !procs.trim().is_empty() {
            let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        }
        let t = std::time::Instant::now();
        while std::fs::remove_dir(&self.0).is_err() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn procs(cg: &Path) -> String {
    std::fs::read_to_string(cg.join("cgroup.procs")).unwrap()
}

#[test]
fn moving_out_of_the_run_cgroup_and_bpf_are_refused() {
    const T: &str = "moving_out_of_the_run_cgroup_and_bpf_are_refused";
    let Some(w) = World::new(T) else { return };
    let root = lockrun::cgroup::cgroup2_mount().unwrap();
    let sib = TestCgroup::new("lockrun-test");
    let parent = root.join(lockrun::cgroup::PARENT);
    let build = lockrun::bpf::shared::build_parent().unwrap();
    let target = |cg: &Path| cg.join("cgroup.procs").display().to_string();
    let Some(o) = w.probe(
        &[],
        &[
            &["cgroup_move", &target(&sib.0)],
            &["cgroup_move", &target(&root)],
            &["cgroup_move", &target(&parent)],
            &["cgroup_move", &target(&build)],
            &["cgroup"],
            &["bpf"],
        ],
    ) else {
        return;
    };
    // Each cgroup.procs is outside the worktree: the read-only mount
    // refuses the open for writing.
    for (what, line) in ["sibling", "root", "parent", "build's parent"]
        .iter()
        .zip(&o.lines)
    {
        assert_eq!(line, "errno 30 EROFS", "moving into the {what} cgroup");
    }
    // Still in the run's cgroup after the attempts, as seen from inside.
    assert_eq!(
        o.lines[4],
        format!(
            "{} {}",
            lockrun::cgroup::relative_path(lockrun::bpf::shared::build_id(), &o.run_id),
            o.cgroup_id
        )
    );
    assert_eperm("bpf()", &o.lines[5]);
    assert_eq!(procs(&sib.0), "", "a process reached the sibling cgroup");
    o.assert_events(&[]);
    // Control of the judge: from outside, a process can be moved into the sibling.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let moved = std::fs::write(sib.0.join("cgroup.procs"), sleeper.id().to_string());
    let listed = procs(&sib.0);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    moved.unwrap();
    assert_eq!(listed.trim(), sleeper.id().to_string());
}

/// Keeps trying to connect out and to write outside, reporting each round to a file.
const LOOP: &str = r#"
import errno, os, socket, sys, time
port, target, report = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
with open(report, "a") as r: r.write("pid %d\n" % os.getpid())
while True:
    res = []
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port)); s.sendall(b"escaped\n"); res.append("ok")
    except OSError as e:
        res.append(name(e))
    s.close()
    try:
        with open(target, "w") as f: f.write("pwned")
        res.append("ok")
    except OSError as e:
        res.append(name(e))
    with open(report, "a") as r: r.write(" ".join(res) + "\n")
    time.sleep(0.05)
"#;

/// The shell's pid, a background child's, an orphaned grandchild's (its
/// parent gone: outside the command's process tree) and the pid of a
/// ticker that left the shell's session and process group (`setsid`),
/// writing into the worktree every 20 ms.
const TICKING: &str = r#"
sleep 300 & bg=$!
(sleep 301 & echo $! > orphan) ; orphan=$(cat orphan)
setsid sh -c 'echo $$ > away; while :; do date +%s%N > tick; sleep 0.02; done' &
until [ -s away ]; do sleep 0.01; done
echo "$$ $bg $orphan $(cat away)" > pids
wait
"#;

/// How a test kills lockrun.
#[derive(Clone, Copy)]
enum KillLockrun {
    /// `SIGKILL` to lockrun's pid alone.
    Pid,
    /// `SIGKILL` to lockrun's process group (`timeout -s KILL`, a CI job
    /// cancelled): the command's processes still in it die with lockrun,
    /// and so would the watchdog if it were in it.
    Group,
    /// `cgroup.kill` of the cgroup lockrun was started in, as a service
    /// manager stops a unit (systemd's `KillMode=control-group`) or a
    /// runner kills a job's cgroup: every process in it dies at once, and
    /// so would the watchdog if it were in it.
    Cgroup,
}

/// `inner` (a lockrun command), started by a shell that first moves
/// itself into the cgroup `cg` and then execs it: lockrun is in it from
/// its first instruction, as under a service manager.
fn started_in(cg: &TestCgroup, inner: &Command) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", r#"echo $$ > "$0" && exec "$@""#])
        .arg(cg.0.join("cgroup.procs"))
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    if let Some(d) = inner.get_current_dir() {
        c.current_dir(d);
    }
    c
}

#[test]
fn a_sigkilled_lockrun_takes_its_whole_run_with_it() {
    killed_lockrun_takes_its_whole_run_with_it(
        "a_sigkilled_lockrun_takes_its_whole_run_with_it",
        KillLockrun::Pid,
    );
}

/// The runner kills lockrun's whole process group: the watchdog, in a
/// group of its own, lives to end the run's processes that left it.
#[test]
fn a_sigkill_to_lockruns_process_group_takes_its_whole_run_with_it() {
    killed_lockrun_takes_its_whole_run_with_it(
        "a_sigkill_to_lockruns_process_group_takes_its_whole_run_with_it",
        KillLockrun::Group,
    );
}

/// A service manager kills every process of lockrun's cgroup: the
/// watchdog, in a cgroup beneath the run's, lives to end the run, whose
/// processes are in the run's cgroup and not in lockrun's.
#[test]
fn a_kill_of_lockruns_cgroup_takes_its_whole_run_with_it() {
    killed_lockrun_takes_its_whole_run_with_it(
        "a_kill_of_lockruns_cgroup_takes_its_whole_run_with_it",
        KillLockrun::Cgroup,
    );
}

fn killed_lockrun_takes_its_whole_run_with_it(test: &'static str, how: KillLockrun) {
    let Some(w) = World::new(test) else { return };
    let pids_file = w.wt.join("pids");
    let tick = w.wt.join("tick");
    // The cgroup lockrun is started in, as a service manager would.
    let caller = matches!(how, KillLockrun::Cgroup).then(|| TestCgroup::new("lockrun-test-caller"));
    let inner = w.cmd(&[], &["sh", "-c", TICKING]);
    let mut cmd = match &caller {
        Some(cg) => started_in(cg, &inner),
        None => inner,
    };
    let mut bg = Background(
        cmd
            // lockrun leads a process group of its own, as under a runner.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let read_tick = || std::fs::read_to_string(&tick).unwrap_or_default();
    if !bg.until_started(&w, || {
        std::fs::read_to_string(&pids_file).is_ok_and(|p| p.ends_with('\n'))
            && !read_tick().is_empty()
    }) {
        return;
    }
    let pids: Vec<u32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 4, "{pids:?}");
    let run_id = w.run_id();
    let watchdog = watchdog_of(bg.0.id());
    // Controls: while lockrun lives, so do the run's processes and the
    // watchdog, and the worktree changes; the ticker left lockrun's
    // process group.
    let before = read_tick();
    wait_for("the tick to move", || read_tick() != before);
    for p in pids.iter().chain([&watchdog]) {
        assert!(
            !gone(*p),
            "{p} of {pids:?} (watchdog {watchdog}) is gone early"
        );
    }
    let pid_t = |pid: u32| nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    let group =
        |pid: u32| u32::try_from(nix::unistd::getpgid(Some(pid_t(pid))).unwrap().as_raw()).unwrap();
    assert_eq!(group(pids[0]), bg.0.id(), "the shell is in lockrun's group");
    assert_ne!(group(pids[3]), bg.0.id(), "the ticker left lockrun's group");
    let cgroup_of = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
            .unwrap()
    };
    let run_cgroup = lockrun::cgroup::relative_path(lockrun::bpf::shared::build_id(), &run_id);
    for p in &pids {
        assert_eq!(cgroup_of(*p), run_cgroup, "process {p} of the run");
    }
    if let Some(cg) = &caller {
        let lockrun = bg.0.id().to_string();
        assert!(
            procs(&cg.0).lines().any(|p| p == lockrun),
            "lockrun is in the caller's cgroup"
        );
    }

    // Until this test's own gc, no other test's may reap the dead run.
    let kept = net_world::ORPHAN_KEPT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match how {
        KillLockrun::Pid => bg.0.kill().unwrap(),
        KillLockrun::Group => {
            nix::sys::signal::killpg(pid_t(bg.0.id()), nix::sys::signal::Signal::SIGKILL).unwrap();
        }
        KillLockrun::Cgroup => {
            let cg = caller.as_ref().unwrap();
            std::fs::write(cg.0.join("cgroup.kill"), "1").unwrap();
        }
    }
    bg.0.wait().unwrap();

    // Judged from outside: every process of the run dies, those outside
    // the command's process tree and lockrun's process group included,
    // and the watchdog ends.
    for p in &pids {
        wait_for(&format!("process {p} of the run to die"), || gone(*p));
    }
    wait_for("the watchdog to end", || gone(watchdog));
    // The ticker's short-lived children (`date`, `sleep`) die by the same
    // kill, perhaps a moment after the four: every one must go.
    let cg = net_world::run_cgroup(&run_id);
    wait_for("the run's cgroup to empty", || procs(&cg).is_empty());
    let last = read_tick();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read_tick(), last, "the worktree still changes");

    // What is left for gc: the empty cgroup and the run dir.
    assert!(w.state.join("runs").join(&run_id).exists());
    let out = w.gc_keeping(&kept);
    drop(kept);
    assert!(out.status.success(), "{out:?}");
    assert_run_gone(&w.state, &run_id);
}

#[test]
fn a_run_whose_lockrun_and_watchdog_are_killed_stays_confined_until_gc() {
    const T: &str = "a_run_whose_lockrun_and_watchdog_are_killed_stays_confined_until_gc";
    let Some(w) = World::new(T) else { return };
    let sink = TcpSink::bind("127.0.0.1");
    let target = w.outside.join("escaped");
    let report = w.wt.join("report");
    let mut bg = Background(
        w.cmd(
            &[],
            &[
                python3(),
                "-c",
                LOOP,
                &p(sink.port()),
                s(&target),
                s(&report),
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    let rounds = || {
        std::fs::read_to_string(&report)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    if !bg.until_started(&w, || rounds().len() >= 2) {
        return;
    }
    let run_id = w.run_id();
    let pid: u32 = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .strip_prefix("pid ")
        .unwrap()
        .parse()
        .unwrap();

    // SIGKILL, to the watchdog first (as the OOM killer takes both, which
    // share memory): lockrun gets no chance to tear anything down, and
    // nothing ends the run. Until this test's own gc, no other test's may
    // reap the orphan.
    let kept = net_world::ORPHAN_KEPT
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    kill_watchdog_of(bg.0.id());
    bg.0.kill().unwrap();
    bg.0.wait().unwrap();
    let at_kill = rounds().len();
    wait_for("the command to go on after the kill", || {
        rounds().len() >= at_kill + 5
    });

    // Still confined: every round refused, judged from outside too.
    let all = rounds();
    assert!(
        all.iter().all(|r| r == "EPERM EROFS"),
        "a round got through: {all:?}"
    );
    assert_eq!(sink.received(), None, "the listener got a connection");
    assert!(!target.exists(), "the outside file was written");
    // Refusals before the kill reached the audit log.
    let events = w.events();
    assert!(
        events.iter().any(|e| e.hook == "connect4"
            && e.protocol == "tcp"
            && e.destination.to_string() == sink.addr.to_string()
            && e.tgid == pid),
        "{events:#?}"
    );
    // What the dead lockrun left: the command in its cgroup, its registration, the run dir.
    let cg = net_world::run_cgroup(&run_id);
    assert!(
        procs(&cg).lines().any(|l| l == pid.to_string()),
        "{}",
        procs(&cg)
    );
    let cg_id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&cg).unwrap());
    assert!(
        lockrun::bpf::registry::registered_runs()
            .unwrap()
            .contains(&cg_id),
        "the killed run stays registered: the hooks judge by it"
    );
    assert!(w.state.join("runs").join(&run_id).exists());

    // gc reaps it: processes, cgroup, pins, run dir.
    let out = w.gc_keeping(&kept);
    drop(kept);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains(&format!(
            "reaped {}",
            w.state.join("runs").join(&run_id).display()
        )),
        "{stdout}"
    );
    wait_for("the command's process to be gone", || gone(pid));
    assert_run_gone(&w.state, &run_id);
    assert!(
        !lockrun::bpf::registry::registered_runs()
            .unwrap()
            .contains(&cg_id),
        "gc forgot the run in the shared maps"
    );
    let n = rounds().len();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rounds().len(), n, "the loop still runs");
    assert_eq!(sink.received(), None);
    assert!(!target.exists());
}
