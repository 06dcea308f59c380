//! Around the proxy: a direct connection out is refused by the kernel, and
//! nothing outside the run connects in to a listener inside (over the veth or
//! loopback) unless exposed; a flood from outside is counted whole.

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lockrun::audit::{Destination, Event};

use crate::support::build::TestBuild;
use crate::support::proxy::TestHost;
use crate::support::{proxy, python, slow};
use crate::{can_run, field, text, web_host, Net, Sandbox, BIN, RANGE};

#[test]
fn bypassing_the_proxy_is_refused_by_the_kernel() {
    let test = "bypassing_the_proxy_is_refused_by_the_kernel";
    if !can_run(test) {
        return;
    }
    let (mut th, net) = web_host();
    th.serve_accept_log(81);
    let sb = Sandbox::new(&net);
    let ip = th.ns_ip;
    let out = sb.run(&format!(
        r#"
        echo "control=$(curl -s -o /dev/null -w '%{{http_code}}' http://web.test/hello.txt)"
        curl -sS --noproxy '*' -o /dev/null http://{ip}/secret.txt 2>"$WT/direct80.err"; echo "direct80=$?"
        curl -sS --noproxy '*' -o /dev/null http://{ip}:81/ 2>"$WT/direct81.err"; echo "direct81=$?"
        "#
    ));
    let stdout = text(&out.stdout);
    assert_eq!(field(&stdout, "control"), "200", "{stdout}");
    for port in [80, 81] {
        let err = std::fs::read_to_string(sb.wt().join(format!("direct{port}.err"))).unwrap();
        // 7: CURLE_COULDNT_CONNECT — connect(2) failed (EPERM from the hook).
        assert_eq!(field(&stdout, &format!("direct{port}")), "7", "{err}");
        assert!(err.contains("Couldn't connect to server"), "{err}");
    }

    // Judged at the test host: no request on 80, no connection at all on 81.
    let reqs = th.requests();
    assert_eq!(reqs.len(), 1, "only the control: {reqs:?}");
    assert!(!reqs.iter().any(|l| l.contains("secret")), "{reqs:?}");
    assert_eq!(th.accepts(), Vec::<String>::new());

    // The audit log holds the kernel's refusals, by destination.
    let k = sb.kernel_events();
    for port in [80, 81] {
        let dest = Destination::Inet(SocketAddr::new(ip, port));
        assert!(
            k.iter().any(|e| e.destination == dest
                && e.hook == "connect4"
                && e.protocol == "tcp"
                && e.comm == "curl"),
            "no connect4 refusal of {dest} in {k:?}"
        );
    }
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{ip}:80")) && stderr.contains(&format!("{ip}:81")),
        "summary: {stderr}"
    );
}

/// What a program inside that listens on every address hears, written to
/// `$WT/heard.log` one line per connection or datagram: TCP on a dual-stack
/// `[::]` socket (accepted, answered, closed) and UDP on another, on the
/// ports `TCP` and `UDP` name (any when unset); the ports go to
/// `$WT/ports`; `$WT/stop` ends it.
const LISTENER: &str = r#"
import os, select, socket, time
wt = os.environ["WT"]
def dual(kind, port):
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    if kind == socket.SOCK_STREAM:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", int(os.environ.get(port, 0))))
    return s
t, u = dual(socket.SOCK_STREAM, "TCP"), dual(socket.SOCK_DGRAM, "UDP")
t.listen(16)
with open(wt + "/ports.tmp", "w") as f:
    f.write("%d %d\n" % (t.getsockname()[1], u.getsockname()[1]))
os.rename(wt + "/ports.tmp", wt + "/ports")
log = open(wt + "/heard.log", "a", buffering=1)
deadline = time.time() + 60 * int(os.environ.get("LOCKRUN_TEST_SLOWDOWN", "1"))
while not os.path.exists(wt + "/stop") and time.time() < deadline:
    for s in select.select([t, u], [], [], 0.05)[0]:
        if s is t:
            c, a = t.accept()
            log.write("tcp %s\n" % a[0])
            c.sendall(b"served from inside\n")
            c.close()
        else:
            d, a = u.recvfrom(100)
            log.write("udp %s %s\n" % (a[0], d.decode()))
"#;

/// A lockrun running in the background: ended with SIGTERM (which it
/// passes on to the command, then tears the run down) and waited for if
/// the test fails first, so no run outlives its test — nor keeps a test
/// build's parent cgroup busy.
struct Running(Option<std::process::Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
        }
    }
}

/// `python3 $WT/<name>` (`script`) run in `sb`, lockrun given `env`, its
/// output piped; and the ports it wrote to `$WT/<ports>` once bound.
fn listening(
    sb: &Sandbox,
    name: &str,
    script: &str,
    env: &[(&str, &str)],
    ports: &str,
) -> (Running, Vec<u16>) {
    std::fs::write(sb.wt().join(name), script).unwrap();
    let mut run = Running(Some(
        sb.cmd(&format!(r#"exec python3 "$WT/{name}""#))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let ports = ports_written(sb, ports, &mut run);
    (run, ports)
}

/// The ports a listener inside wrote to `$WT/<name>` once bound, waited
/// for while its run goes on (a run that ended without them fails the test
/// at once, with its output).
fn ports_written(sb: &Sandbox, name: &str, run: &mut Running) -> Vec<u16> {
    let file = sb.wt().join(name);
    let deadline = Instant::now() + slow::patience(Duration::from_secs(20));
    while !file.exists() {
        let child = run.0.as_mut().unwrap();
        if child.try_wait().unwrap().is_some() {
            let out = run.0.take().unwrap().wait_with_output().unwrap();
            panic!(
                "the listener's run ended before it bound its ports ({}): {}",
                out.status,
                text(&out.stderr)
            );
        }
        assert!(
            Instant::now() < deadline,
            "the listener inside never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(&file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// The control that ends a listener's run: a datagram from loopback,
/// outside the run, must be heard inside (`$WT/heard.log`: the port is
/// exposed, or the build has no `ingress`); then `stop`, and the run must
/// exit 0. Its output.
fn heard_from_loopback_then_stopped(sb: &Sandbox, udp: u16, mut run: Running) -> Output {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"from-loopback", ("127.0.0.1", udp))
        .unwrap();
    let heard_file = sb.wt().join("heard.log");
    let deadline = Instant::now() + slow::patience(Duration::from_secs(10));
    while !std::fs::read_to_string(&heard_file)
        .unwrap_or_default()
        .contains("from-loopback")
    {
        assert!(
            Instant::now() < deadline,
            "the loopback datagram never arrived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(sb.wt().join("stop"), "").unwrap();
    let out = run.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    out
}

/// From a test host's namespace: a TCP connect to `ip:port` (`connected:`
/// and the first line it got, `timeout`, or the error) and a UDP datagram
/// `from-outside` to `ip:udp`.
fn knock_from(th: &TestHost, ip: IpAddr, tcp: u16, udp: u16) -> String {
    let script = format!(
        r#"
import socket
a = ("{ip}", {tcp})
try:
    c = socket.create_connection(a, timeout=2.5)
except socket.timeout:
    print("tcp=timeout")
except OSError as e:
    print("tcp=" + type(e).__name__)
else:
    c.settimeout(0.5)
    try:
        print("tcp=connected:" + c.recv(100).decode().strip())
    except socket.timeout:
        print("tcp=connected:")
f = socket.AF_INET6 if ":" in a[0] else socket.AF_INET
socket.socket(f, socket.SOCK_DGRAM).sendto(b"from-outside", ("{ip}", {udp}))
"#
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &th.ns, python::python3(), "-c", &script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

#[test]
fn a_listener_inside_takes_nothing_from_outside() {
    let test = "a_listener_inside_takes_nothing_from_outside";
    if !can_run(test) {
        return;
    }
    // A test host, over IPv4 and IPv6 (a ULA pair on the same veth).
    let th = TestHost::new(RANGE);
    let octet = match th.host_ip {
        IpAddr::V4(v4) => v4.octets()[2],
        IpAddr::V6(_) => unreachable!("test hosts are IPv4"),
    };
    let (host6, ns6): (IpAddr, IpAddr) = (
        format!("fd13:213:{octet}::1").parse().unwrap(),
        format!("fd13:213:{octet}::2").parse().unwrap(),
    );
    proxy::sh(&[
        "ip",
        "addr",
        "add",
        &format!("{host6}/64"),
        "dev",
        &th.here,
        "nodad",
    ]);
    proxy::sh(&[
        "ip",
        "-n",
        &th.ns,
        "addr",
        "add",
        &format!("{ns6}/64"),
        "dev",
        &th.there(),
        "nodad",
    ]);

    // The run's ports, exposed: this host's processes reach them over
    // loopback (the controls below), and still no other host does.
    let (tcp, udp) = (free_port(), free_udp_port());
    let sb = Sandbox::new(&Net {
        expose: vec![tcp, udp],
        ..Net::default()
    });
    let (ts, us) = (tcp.to_string(), udp.to_string());
    let env = [("TCP", ts.as_str()), ("UDP", us.as_str())];
    let (run, ports) = listening(&sb, "listen.py", LISTENER, &env, "ports");
    assert_eq!(ports, [tcp, udp], "the ports the listener inside bound");

    // Control: the test host reaches this host — a listener outside the
    // run, on the same address, accepts it.
    let outside = TcpListener::bind(SocketAddr::new(th.host_ip, 0)).unwrap();
    let knocked = knock_from(&th, th.host_ip, outside.local_addr().unwrap().port(), udp);
    assert_eq!(
        knocked, "tcp=connected:",
        "a listener outside the run must be reachable"
    );
    drop(outside);

    // The escape: the test host connects to the run's port on both
    // families and sends it datagrams. Nothing gets through, though the
    // ports are exposed (to this host's processes only): the SYN is
    // dropped (a timeout, not a refusal), so no byte of the run reaches it.
    for ip in [th.host_ip, host6] {
        assert_eq!(knock_from(&th, ip, tcp, udp), "tcp=timeout", "from {ip}");
    }

    // Control: loopback, outside the run, reaches the same listener (exposed).
    for ip in ["127.0.0.1", "::1"] {
        let mut c = std::net::TcpStream::connect((ip.parse::<IpAddr>().unwrap(), tcp)).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "served from inside\n", "from {ip}");
    }
    let out = heard_from_loopback_then_stopped(&sb, udp, run);

    // Judged inside's own log: exactly the loopback peers, no test host.
    let heard = std::fs::read_to_string(sb.wt().join("heard.log")).unwrap();
    let mut lines: Vec<&str> = heard.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "tcp ::1",
            "tcp ::ffff:127.0.0.1",
            "udp ::ffff:127.0.0.1 from-loopback"
        ],
        "what the listener inside heard"
    );

    // The audit log names each drop: the outside peer, the run's port.
    let k = sb.kernel_events();
    for (peer, port, protocol) in [
        (th.ns_ip, tcp, "tcp"),
        (ns6, tcp, "tcp"),
        (th.ns_ip, udp, "udp"),
        (ns6, udp, "udp"),
    ] {
        assert!(
            k.iter().any(|e| e.hook == "ingress"
                && e.direction == lockrun::audit::Direction::Inbound
                && matches!(e.destination, Destination::Inet(a) if a.ip() == peer)
                && e.local_port == port
                && e.protocol == protocol),
            "no ingress drop from {peer} to {protocol} port {port} in {k:?}"
        );
    }
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("from outside dropped")
            && stderr.contains(&format!("from {} to port {tcp} (tcp)", th.ns_ip))
            && stderr.contains(&format!("from {ns6} to port {udp} (udp)")),
        "summary: {stderr}"
    );
}

/// `egress` on its own: the second of the packet programs, which drops
/// what a run's sockets send to beyond loopback. With `ingress` left out
/// (a test build of this test's own, `LOCKRUN_TEST_WEAKEN`), an outside
/// host's SYN reaches the listener inside; the listener's SYN-ACK is the
/// run's first packet to that host, and `egress` drops it, so the
/// connection is never made and the listener never hears of it. The
/// control leaves `egress` out too: the same knock is then accepted and
/// served, which is the hole `egress` closes. Both builds deliver the
/// outside host's datagram (what only `ingress` stops), which shows each
/// weakening took effect.
#[test]
fn egress_alone_keeps_an_outside_host_from_connecting_to_a_listener_inside() {
    let test = "egress_alone_keeps_an_outside_host_from_connecting_to_a_listener_inside";
    if !can_run(test) {
        return;
    }
    let th = TestHost::new(RANGE);
    for (weaken, knocked) in [
        ("no-ingress", "tcp=timeout"),
        ("no-packet-programs", "tcp=connected:served from inside"),
    ] {
        let build = TestBuild::new(&weaken.replace('-', ""));
        let sb = Sandbox::new(&Net::default());
        let env = [
            ("LOCKRUN_TEST_BUILD_ID", build.0.as_str()),
            ("LOCKRUN_TEST_WEAKEN", weaken),
        ];
        let (run, ports) = listening(&sb, "listen.py", LISTENER, &env, "ports");
        let [tcp, udp] = ports[..] else {
            panic!("two ports expected")
        };
        assert_eq!(
            knock_from(&th, th.host_ip, tcp, udp),
            knocked,
            "{weaken}: the test host's knock"
        );
        let out = heard_from_loopback_then_stopped(&sb, udp, run);

        let heard = std::fs::read_to_string(sb.wt().join("heard.log")).unwrap();
        let outside = format!("::ffff:{}", th.ns_ip);
        let mut expected = vec![
            format!("udp {outside} from-outside"),
            "udp ::ffff:127.0.0.1 from-loopback".to_owned(),
        ];
        if weaken == "no-packet-programs" {
            expected.push(format!("tcp {outside}"));
        }
        let mut lines: Vec<&str> = heard.lines().collect();
        lines.sort_unstable();
        expected.sort_unstable();
        assert_eq!(lines, expected, "{weaken}: what the listener inside heard");

        let k = sb.kernel_events();
        assert!(
            !k.iter().any(|e| e.hook == "ingress"),
            "{weaken}: ingress was left out, yet judged: {k:?}"
        );
        let dropped_synack = k.iter().any(|e| {
            e.hook == "egress"
                && e.direction == lockrun::audit::Direction::Outbound
                && matches!(e.destination, Destination::Inet(a) if a.ip() == th.ns_ip)
                && e.local_port == tcp
                && e.protocol == "tcp"
        });
        assert_eq!(
            dropped_synack,
            weaken == "no-ingress",
            "{weaken}: egress's drop of the SYN-ACK to {} from port {tcp} in {k:?}\n{}",
            th.ns_ip,
            text(&out.stderr)
        );
        if !dropped_synack {
            continue;
        }
        // Shown as what it is: packets of the run's to outside, which no
        // policy line allows, not connections the command made.
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("packets to outside dropped")
                && stderr.contains(&format!("from port {tcp} to {}:", th.ns_ip))
                && !stderr.contains("connections refused"),
            "summary: {stderr}"
        );
        let audit = Command::new(BIN)
            .args(["audit", sb.audit_path().to_str().unwrap()])
            .output()
            .unwrap();
        let explained = text(&audit.stdout);
        assert!(
            explained.contains(&format!("from port {tcp} to {}:", th.ns_ip))
                && explained.contains("no policy line changes that"),
            "lockrun audit: {explained}{}",
            text(&audit.stderr)
        );
    }
}

/// Inside, for `nothing_outside_the_run_connects_in_over_loopback_unless_exposed`:
/// dual-stack listeners on `[::]`, TCP on `TCP` and on the exposed port
/// (`EXPOSED`), UDP on `UDP` (ports the test chose: the run reaches its
/// own by the policy's `local` endpoints); each accepted
/// connection is served a line and logged to `$WT/heard.log` (`tcp <which>
/// <peer>`), each datagram too (`udp <peer> <data>`). On `$WT/knock` a
/// second process of the run (`own.py`) reaches the listener of its own run
/// and the run's ways out, and writes what it saw to `$WT/own`.
const INBOUND: &str = r#"
import os, select, socket, subprocess, sys, time
wt = os.environ["WT"]
def dual(kind, port):
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    if kind == socket.SOCK_STREAM:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
    return s
t = dual(socket.SOCK_STREAM, int(os.environ["TCP"]))
e = dual(socket.SOCK_STREAM, int(os.environ["EXPOSED"]))
u = dual(socket.SOCK_DGRAM, int(os.environ["UDP"]))
t.listen(16)
e.listen(16)
with open(wt + "/ports.tmp", "w") as f:
    f.write("%d %d\n" % (t.getsockname()[1], u.getsockname()[1]))
os.rename(wt + "/ports.tmp", wt + "/ports")
log = open(wt + "/heard.log", "a", buffering=1)
own = None
deadline = time.time() + 60 * int(os.environ.get("LOCKRUN_TEST_SLOWDOWN", "1"))
while not os.path.exists(wt + "/stop") and time.time() < deadline:
    if own is None and os.path.exists(wt + "/knock"):
        own = subprocess.Popen([sys.executable, wt + "/own.py", str(t.getsockname()[1]), str(u.getsockname()[1])])
    for s in select.select([t, e, u], [], [], 0.05)[0]:
        if s is u:
            d, a = u.recvfrom(100)
            log.write("udp %s %s\n" % (a[0], d.decode()))
        else:
            c, a = s.accept()
            log.write("tcp %s %s\n" % ("exposed" if s is e else "t", a[0]))
            c.sendall(b"served from inside\n")
            c.close()
if own is not None:
    own.wait()
"#;

/// The second process of the run (see [`INBOUND`]): `own.py TCP UDP`.
const OWN: &str = r#"
import os, socket, subprocess, sys
wt = os.environ["WT"]
tcp, udp = int(sys.argv[1]), int(sys.argv[2])
out = []
def attempt(key, fn):
    try:
        out.append("%s=%s" % (key, fn()))
    except OSError as e:
        out.append("%s=%s" % (key, type(e).__name__))
def served(ip, port):
    with socket.create_connection((ip, port), timeout=5) as c:
        return c.makefile().readline().strip()
for ip in ["127.0.0.1", "::1"]:
    attempt("own " + ip, lambda: served(ip, tcp))
def to_own_udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return s.sendto(b"from-the-run", ("127.0.0.1", udp))
attempt("own udp", to_own_udp)
def local_udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(b"ping", ("127.0.0.1", int(os.environ["LOCAL_UDP"])))
        return s.recv(100).decode()
attempt("local udp", local_udp)
attempt("local tcp", lambda: served("127.0.0.1", int(os.environ["LOCAL_TCP"])))
attempt("proxy", lambda: subprocess.run(
    ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://web.test/hello.txt"],
    capture_output=True, text=True).stdout)
with open(wt + "/own.tmp", "w") as f:
    f.write("\n".join(out) + "\n")
os.rename(wt + "/own.tmp", wt + "/own")
"#;

/// A TCP port nothing listens on now, on any address.
fn free_port() -> u16 {
    let l = TcpListener::bind("[::]:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A UDP port no socket is bound to now, on any address.
fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("[::]:0").unwrap();
    s.local_addr().unwrap().port()
}

/// A process of this host, outside the run, connects to a port a program
/// of the run listens on, over `127.0.0.1` and `::1`, and sends it datagrams.
/// None of it reaches the run: the SYN is dropped (the client's connect
/// times out), the datagrams are not heard, and the audit log and the
/// summary name each drop as inbound from loopback. Controls: a process of
/// the same run reaches the same listener and exchanges bytes; the port the
/// policy exposes takes the outside process; and the replies to the run's
/// own connections — its proxy, a TCP and a UDP `local` endpoint — arrive.
#[test]
fn nothing_outside_the_run_connects_in_over_loopback_unless_exposed() {
    let test = "nothing_outside_the_run_connects_in_over_loopback_unless_exposed";
    if !can_run(test) {
        return;
    }
    let (th, mut net) = web_host();
    // The run's `local` endpoints, outside it: a UDP echo, a TCP server.
    let echo = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let local_udp = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 100];
        while let Ok((_, from)) = echo.recv_from(&mut buf) {
            let _ = echo.send_to(b"pong", from);
        }
    });
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let local_tcp = server.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in server.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut &c, b"served from a local endpoint\n");
        }
    });
    // The run's own ports: the listener's and the exposed one, and a UDP
    // socket's. The run reaches its own by `local`, as any loopback port.
    let (tcp, exposed, udp) = (free_port(), free_port(), free_udp_port());
    net.local = vec![
        local_udp,
        local_tcp,
        SocketAddr::from(([127, 0, 0, 1], tcp)),
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, tcp)),
        SocketAddr::from(([127, 0, 0, 1], udp)),
    ];
    net.expose = vec![exposed];
    let sb = Sandbox::new(&net);
    std::fs::write(sb.wt().join("own.py"), OWN).unwrap();
    let ports = [tcp, exposed, udp, local_udp.port(), local_tcp.port()].map(|p| p.to_string());
    let env: Vec<(&str, &str)> = ["TCP", "EXPOSED", "UDP", "LOCAL_UDP", "LOCAL_TCP"]
        .into_iter()
        .zip(ports.iter().map(String::as_str))
        .collect();
    let (mut run, bound) = listening(&sb, "inbound.py", INBOUND, &env, "ports");
    assert_eq!(bound, [tcp, udp], "the ports the listener inside bound");

    // The escape: this host's processes, outside the run, over loopback.
    for ip in ["127.0.0.1", "::1"] {
        let to = SocketAddr::new(ip.parse().unwrap(), tcp);
        let got = std::net::TcpStream::connect_timeout(&to, Duration::from_millis(2500));
        assert!(
            got.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
            "a connect from outside the run to {to} must time out (its SYN dropped): {got:?}"
        );
        std::net::UdpSocket::bind(SocketAddr::new(to.ip(), 0))
            .unwrap()
            .send_to(b"from-outside", (to.ip(), udp))
            .unwrap();
    }
    // Control: the exposed port takes them.
    for ip in ["127.0.0.1", "::1"] {
        let mut c = std::net::TcpStream::connect((ip.parse::<IpAddr>().unwrap(), exposed))
            .unwrap_or_else(|e| panic!("the exposed port {exposed} over {ip}: {e}"));
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "served from inside\n", "the exposed port over {ip}");
    }
    // Control: the run's own process reaches its listener and its ways out.
    std::fs::write(sb.wt().join("knock"), "").unwrap();
    let deadline = Instant::now() + slow::patience(Duration::from_secs(30));
    while !sb.wt().join("own").exists() {
        assert!(
            Instant::now() < deadline,
            "the run's own process never wrote"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let own = std::fs::read_to_string(sb.wt().join("own")).unwrap();
    std::fs::write(sb.wt().join("stop"), "").unwrap();
    let out = run.0.take().unwrap().wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        own.lines().collect::<Vec<_>>(),
        [
            "own 127.0.0.1=served from inside",
            "own ::1=served from inside",
            "own udp=12",
            "local udp=pong",
            "local tcp=served from a local endpoint",
            "proxy=200",
        ],
        "what the run's own process saw\n{stderr}"
    );

    // Judged by what the listener inside heard: the run's own connections
    // and datagram, the exposed port's two; nothing from outside on the others.
    let heard = std::fs::read_to_string(sb.wt().join("heard.log")).unwrap();
    let mut lines: Vec<&str> = heard.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "tcp exposed ::1",
            "tcp exposed ::ffff:127.0.0.1",
            "tcp t ::1",
            "tcp t ::ffff:127.0.0.1",
            "udp ::ffff:127.0.0.1 from-the-run",
        ],
        "what the listeners inside heard"
    );
    assert_eq!(th.requests().len(), 1, "{:?}", th.requests());

    // The audit log names each drop: inbound, from the loopback peer, to
    // the run's port.
    let k = sb.kernel_events();
    for (peer, port, protocol) in [
        ("127.0.0.1", tcp, "tcp"),
        ("::1", tcp, "tcp"),
        ("127.0.0.1", udp, "udp"),
        ("::1", udp, "udp"),
    ] {
        let peer: IpAddr = peer.parse().unwrap();
        assert!(
            k.iter().any(|e| e.hook == "ingress"
                && e.direction == lockrun::audit::Direction::Inbound
                && matches!(e.destination, Destination::Inet(a) if a.ip() == peer)
                && e.local_port == port
                && e.protocol == protocol),
            "no ingress drop from {peer} to {protocol} port {port} in {k:?}"
        );
    }
    assert!(
        !k.iter().any(|e| e.local_port == exposed),
        "nothing to the exposed port was dropped: {k:?}"
    );
    assert!(
        stderr.contains(&format!("from 127.0.0.1 to port {tcp} (tcp)"))
            && stderr.contains(&format!("from ::1 to port {udp} (udp)")),
        "summary: {stderr}"
    );
}

/// Inside: a UDP socket on `0.0.0.0`, port `UDP`, logs what it hears until `stop`
/// appears; then the run tries a connection of its own to `$TARGET`, port 9
/// (a refusal that must reach the audit log), and writes how it ended.
const FLOODED: &str = r#"
import errno, os, socket, time
wt = os.environ["WT"]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", int(os.environ["UDP"])))
with open(wt + "/port.tmp", "w") as f:
    f.write("%d\n" % u.getsockname()[1])
os.rename(wt + "/port.tmp", wt + "/port")
u.settimeout(0.05)
log = open(wt + "/heard.log", "a", buffering=1)
deadline = time.time() + 60 * int(os.environ.get("LOCKRUN_TEST_SLOWDOWN", "1"))
while not os.path.exists(wt + "/stop") and time.time() < deadline:
    try:
        d, a = u.recvfrom(100)
        log.write("udp %s %s\n" % (a[0], d.decode()))
    except socket.timeout:
        pass
c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    c.connect((os.environ["TARGET"], 9))
    r = "connected"
except OSError as e:
    r = errno.errorcode.get(e.errno, str(e.errno))
with open(wt + "/connect", "w") as f:
    f.write(r)
"#;

/// CPUs the kernel may run a program on (`/sys/devices/system/cpu/possible`).
fn possible_cpus() -> u64 {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    list.trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

#[test]
fn a_flood_from_outside_is_counted_whole_and_leaves_the_runs_own_refusals_itemized() {
    const SENT: u64 = 3000;
    let test = "a_flood_from_outside_is_counted_whole_and_leaves_the_runs_own_refusals_itemized";
    if !can_run(test) {
        return;
    }
    let th = TestHost::new(RANGE);
    // Exposed, for the control's datagram from loopback; no other host.
    let port = free_udp_port();
    let sb = Sandbox::new(&Net {
        expose: vec![port],
        ..Net::default()
    });
    let (target, udp) = (th.ns_ip.to_string(), port.to_string());
    let env = [("TARGET", target.as_str()), ("UDP", udp.as_str())];
    let (run, ports) = listening(&sb, "flooded.py", FLOODED, &env, "port");
    assert_eq!(ports, [port], "the port the socket inside bound");

    // The flood: the test host sends SENT datagrams at the run's port, in
    // bursts small enough for the veth's backlog to take whole.
    let flood = format!(
        r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range({SENT}):
    s.sendto(b"flood %d" % i, ("{ip}", {port}))
    if i % 100 == 99:
        time.sleep(0.002)
print("sent")
"#,
        ip = th.host_ip
    );
    let out = Command::new("ip")
        .args(["netns", "exec", &th.ns, python::python3(), "-c", &flood])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "sent", "{}", text(&out.stderr));

    // Control: the run still hears loopback after the flood.
    let out = heard_from_loopback_then_stopped(&sb, port, run);
    let stderr = text(&out.stderr);

    // Nothing from outside was heard; the run's own connection was refused.
    assert_eq!(
        std::fs::read_to_string(sb.wt().join("heard.log")).unwrap(),
        "udp 127.0.0.1 from-loopback\n",
        "what the socket inside heard"
    );
    assert_eq!(
        std::fs::read_to_string(sb.wt().join("connect")).unwrap(),
        "EPERM"
    );

    // The kernel counted every datagram, itemized at most its per-CPU
    // share, and the run's own refusal was itemized, not lost.
    let events = sb.events();
    let itemized = events
        .iter()
        .filter(|e| {
            matches!(e, Event::KernelNetwork(k) if k.hook == "ingress"
            && matches!(k.destination, Destination::Inet(a) if a.ip() == th.ns_ip)
            && k.local_port == port)
        })
        .count() as u64;
    let counted: u64 = events
        .iter()
        .map(|e| match e {
            Event::InboundNotItemized { count, per_cpu } => {
                assert_eq!(*per_cpu, 32);
                *count
            }
            _ => 0,
        })
        .sum();
    let bound = 32 * possible_cpus();
    assert!(
        (1..=bound).contains(&itemized),
        "{itemized} inbound drops itemized, at most {bound} may be"
    );
    assert_eq!(
        itemized + counted,
        SENT,
        "every datagram dropped is counted ({itemized} itemized)"
    );
    assert!(
        events.iter().any(|e| matches!(e, Event::KernelNetwork(k)
            if k.hook == "connect4"
                && matches!(k.destination, Destination::Inet(a) if a.ip() == th.ns_ip && a.port() == 9))),
        "the run's own refusal is itemized"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::KernelEventsLost { .. })),
        "nothing lost"
    );
    assert!(
        stderr.contains(&format!(
            "lockrun: {SENT} packets from outside dropped (a run takes no traffic from beyond loopback, and no policy changes that): from {} to port {port} (udp) ×{itemized}, {counted} more not itemized (only the first 32 on each CPU are)",
            th.ns_ip
        )),
        "summary: {stderr}"
    );
}
