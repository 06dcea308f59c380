//! The transparent path through the library API (issue 59): the run's
//! resolver hands out an address for an allowed name, and a connection to
//! the transparent listener that a test double of the kernel's
//! [`Originals`] says was headed there is judged by that name, like
//! `CONNECT`. The kernel's half (the hooks that bring a run's connects
//! here) is tested from inside real runs in `tests/proxy_e2e.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockrun::audit::{ProxyBasis, ProxyEvent, ProxyVerdict, ProxyVia};
use lockrun::proxy::transparent::Originals;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use crate::support::proxy::{can_netns, TestHost};
use crate::{granted, Proxy, RANGE};

/// The kernel's part, played by the test: where each client socket (by its
/// local address) was headed.
#[derive(Default)]
struct Headed(Mutex<HashMap<SocketAddr, SocketAddr>>);

impl Originals for Headed {
    fn take(&self, peer: SocketAddr, _local: SocketAddr) -> Option<SocketAddr> {
        self.0.lock().unwrap().remove(&peer)
    }
}

/// Ask the run's resolver for `name` (type 1 = A, 28 = AAAA): the answer's
/// rcode and its address, if any.
async fn lookup(p: &Proxy, name: &str, qtype: u16) -> (u8, Option<Ipv4Addr>) {
    let mut query = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.') {
        query.push(u8::try_from(l.len()).unwrap());
        query.extend_from_slice(l.as_bytes());
    }
    query.push(0);
    query.extend_from_slice(&qtype.to_be_bytes());
    query.extend_from_slice(&[0, 1]);
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&query, p.proxy.resolver_addr().unwrap())
        .await
        .unwrap();
    let mut ans = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut ans))
        .await
        .expect("the run's resolver answers at once")
        .unwrap();
    assert_eq!(&ans[..2], &[0x12, 0x34]);
    let addr = (ans[7] == 1).then(|| Ipv4Addr::new(ans[n - 4], ans[n - 3], ans[n - 2], ans[n - 1]));
    (ans[3] & 0xf, addr)
}

/// Connect to the transparent listener as a client headed to `original`
/// would be brought there (when `headed` is given), and read all it
/// answers to `first` (sent, then the client's half-close): the bytes, or
/// the error (the proxy's reset can come before the connect has returned).
async fn exchange(
    p: &Proxy,
    headed: Option<(&Headed, SocketAddr)>,
    first: &[u8],
) -> std::io::Result<Vec<u8>> {
    let mut s = connect_to(p, headed).await?;
    if !first.is_empty() {
        s.write_all(first).await?;
        s.shutdown().await?;
    }
    read_all(&mut s).await
}

/// The test's stand-in for the kernel, set as the proxy's originals.
fn headed(p: &Proxy) -> Arc<Headed> {
    let headed = Arc::new(Headed::default());
    assert!(p
        .proxy
        .set_originals(Arc::clone(&headed) as Arc<dyn Originals>));
    headed
}

/// `name`'s address from the run's resolver, at `port`.
async fn fake(p: &Proxy, name: &str, port: u16) -> SocketAddr {
    let addr = lookup(p, name, 1).await.1.unwrap();
    SocketAddr::new(IpAddr::V4(addr), port)
}

async fn connect_to(
    p: &Proxy,
    headed: Option<(&Headed, SocketAddr)>,
) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    if let Some((h, original)) = headed {
        h.0.lock()
            .unwrap()
            .insert(sock.local_addr().unwrap(), original);
    }
    sock.connect(p.proxy.transparent_addr().unwrap()).await
}

/// Read until the end: `Ok(bytes)`, or the error (a reset).
async fn read_all(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut out))
        .await
        .expect("the proxy ends the connection")
        .map(|_| out)
}

fn transparent(events: &[ProxyEvent]) -> Vec<&ProxyEvent> {
    events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Transparent))
        .collect()
}

fn assert_reset(r: std::io::Result<Vec<u8>>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{what}: {e}"),
        Ok(b) => panic!("{what}: not reset, got {:?}", String::from_utf8_lossy(&b)),
    }
}

/// A test host answering `got N bytes: …` at EOF on 9000, allowed as
/// `eof.test:9000`, and a proxy with its transparent side started.
fn eof_host() -> (TestHost, Proxy) {
    let mut th = TestHost::new(RANGE);
    th.serve_until_eof();
    let p = Proxy::start(granted(&th, "eof.test", 9000), |c| c.transparent = true);
    (th, p)
}

/// An allowed name's address is relayed byte for byte, half-close
/// included; its other port, an address never handed out, and a connection
/// the kernel did not bring are each reset and recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_the_name_the_resolver_handed_out() {
    let test = "by_the_name_the_resolver_handed_out";
    if !can_netns(test) {
        return;
    }
    let (_th, p) = eof_host();
    let headed = Arc::new(Headed::default());
    // Before the kernel's side is set: refused.
    assert_reset(exchange(&p, None, b"").await, "before set_originals");
    assert!(p
        .proxy
        .set_originals(Arc::clone(&headed) as Arc<dyn Originals>));

    let (rcode, addr) = lookup(&p, "eof.test", 1).await;
    assert_eq!(rcode, 0);
    let fake = addr.expect("an A record");
    assert_eq!(fake.octets()[..2], [198, 18]);
    assert_eq!(lookup(&p, "EOF.test", 1).await, (0, Some(fake)));
    assert_eq!(lookup(&p, "eof.test", 28).await, (0, None));
    assert_eq!(lookup(&p, "other.test", 1).await, (3, None));

    // The control: relayed, half-close and all.
    let to = |port| SocketAddr::new(IpAddr::V4(fake), port);
    let got = exchange(&p, Some((&headed, to(9000))), b"hello").await;
    assert_eq!(got.unwrap(), b"got 5 bytes: hello");

    // The allowed name's other port.
    assert_reset(
        exchange(&p, Some((&headed, to(9001))), b"").await,
        "other port",
    );
    // An address of the network no name led to.
    let unknown = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9)), 9000);
    assert_reset(
        exchange(&p, Some((&headed, unknown)), b"").await,
        "address never handed out",
    );
    // Not brought by the kernel, twice: recorded once.
    for _ in 0..2 {
        assert_reset(exchange(&p, None, b"").await, "not from the run");
    }

    let events = p.events();
    let t = transparent(&events);
    let verdicts: Vec<_> = t
        .iter()
        .map(|e| (e.verdict, e.host.as_str(), e.port))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (ProxyVerdict::Unattributed, "", 0),
            (ProxyVerdict::Allowed, "eof.test", 9000),
            (ProxyVerdict::PortNotAllowed, "eof.test", 9001),
            (ProxyVerdict::IpLiteral, "198.18.9.9", 9000),
        ],
        "{t:#?}"
    );
    assert_eq!(t[1].basis, Some(ProxyBasis::ResolvedName));
    assert_eq!(t[1].dialed.unwrap().port(), 9000);
    // The resolver's refusal, once per name.
    let dns: Vec<_> = events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Dns))
        .map(|e| (e.host.as_str(), e.verdict))
        .collect();
    assert_eq!(dns, vec![("other.test", ProxyVerdict::NotListed)]);
    let summary = p.audit.summary().join("\n");
    assert!(summary.contains("other.test (DNS)"), "{summary}");
    assert!(summary.contains("eof.test:9001"), "{summary}");
}

/// A `ClientHello` naming `sni` (hand-built: the fields a parser walks).
fn client_hello(sni: &str) -> Vec<u8> {
    let v16 = |b: &[u8]| {
        let mut v = u16::try_from(b.len()).unwrap().to_be_bytes().to_vec();
        v.extend_from_slice(b);
        v
    };
    let mut entry = vec![0];
    entry.extend_from_slice(&v16(sni.as_bytes()));
    let mut ext = vec![0, 0];
    ext.extend_from_slice(&v16(&v16(&entry)));
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&v16(&[0x13, 0x01]));
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&v16(&ext));
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&v16(&hs));
    rec
}

/// First bytes naming another host than the name (TLS server name, HTTP
/// `Host`) are refused as fronted, and never reach the upstream; naming
/// the name itself is relayed (the controls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fronted_connections_are_refused() {
    let test = "fronted_connections_are_refused";
    if !can_netns(test) {
        return;
    }
    let (_th, p) = eof_host();
    let headed = headed(&p);
    let to = fake(&p, "eof.test", 9000).await;
    let cases: [(&[u8], bool); 4] = [
        (&client_hello("eof.test"), true),
        (&client_hello("other.example"), false),
        (b"GET / HTTP/1.1\r\nHost: eof.test:9000\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nHost: other.example\r\n\r\n", false),
    ];
    for (first, relayed) in cases {
        let r = exchange(&p, Some((&headed, to)), first).await;
        if relayed {
            let want = format!("got {} bytes: ", first.len());
            let got = r.unwrap();
            assert!(
                got.starts_with(want.as_bytes()),
                "{:?}: {:#?}",
                String::from_utf8_lossy(&got),
                p.events()
            );
            assert_eq!(&got[want.len()..], first);
        } else {
            assert_reset(r, "fronted");
        }
    }
    let events = p.events();
    let got: Vec<_> = transparent(&events)
        .iter()
        .map(|e| (e.verdict, e.basis))
        .collect();
    assert_eq!(
        got,
        vec![
            (ProxyVerdict::Allowed, Some(ProxyBasis::Sni)),
            (ProxyVerdict::Fronted, Some(ProxyBasis::Sni)),
            (ProxyVerdict::Allowed, Some(ProxyBasis::Host)),
            (ProxyVerdict::Fronted, Some(ProxyBasis::Host)),
        ]
    );
    let fronted = &transparent(&events)[1];
    assert!(
        fronted.reason.contains("other.example"),
        "{}",
        fronted.reason
    );
}

/// As through a `CONNECT` tunnel: 2 MiB that cannot be mistaken go up and
/// come back behind the test host's prefix, byte for byte, with the
/// half-close in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transfer_crosses_intact_both_ways() {
    let test = "a_large_transfer_crosses_intact_both_ways";
    if !can_netns(test) {
        return;
    }
    let (_th, p) = eof_host();
    let headed = headed(&p);
    let fake = lookup(&p, "eof.test", 1).await.1.unwrap();
    let data: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let to = SocketAddr::new(IpAddr::V4(fake), 9000);
    let reply = exchange(&p, Some((&headed, to)), &data).await.unwrap();
    let prefix = format!("got {} bytes: ", data.len());
    assert_eq!(reply.len(), prefix.len() + data.len());
    assert_eq!(&reply[..prefix.len()], prefix.as_bytes());
    assert!(reply[prefix.len()..] == data[..], "the bytes differ");
}

/// A client that waits before its first byte is not cut off (the first
/// bytes are awaited as long as the tunnel may idle): 12 s, then a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_start_lives_past_eleven_seconds() {
    let test = "a_quiet_start_lives_past_eleven_seconds";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let p = Proxy::start(granted(&th, "web.test", 80), |c| c.transparent = true);
    let headed = headed(&p);
    let to = fake(&p, "web.test", 80).await;
    let mut s = connect_to(&p, Some((&headed, to))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    s.write_all(b"GET /hello.txt HTTP/1.0\r\nHost: web.test\r\n\r\n")
        .await
        .unwrap();
    let reply = String::from_utf8_lossy(&read_all(&mut s).await.unwrap()).into_owned();
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    assert!(reply.ends_with("hello from the test host\n"), "{reply}");
}

/// A name allowed by a wildcard is relayed; a name whose answer the address
/// guard refuses (loopback, here) is refused with the guard's reason, as
/// through `CONNECT`; a denied name never gets an address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_and_the_address_guard_as_for_connect() {
    let test = "wildcards_and_the_address_guard_as_for_connect";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_until_eof();
    let ip = [th.ns_ip];
    let loopback = ["127.0.0.1".parse().unwrap()];
    let mut network = crate::policy(
        &["*.wild.test:9000", "loop.test:9000"],
        &[("a.wild.test", &ip), ("loop.test", &loopback)],
        Some((&["*.wild.test"], th.net)),
    );
    network
        .deny
        .push(lockrun::policy::HostPattern::parse("bad.wild.test").unwrap());
    let p = Proxy::start(network, |c| c.transparent = true);
    let headed = headed(&p);
    let wild = lookup(&p, "a.wild.test", 1).await.1.unwrap();
    let looped = lookup(&p, "loop.test", 1).await.1.unwrap();
    assert_eq!(lookup(&p, "bad.wild.test", 1).await, (3, None));
    let at = |a: Ipv4Addr| SocketAddr::new(IpAddr::V4(a), 9000);
    let got = exchange(&p, Some((&headed, at(wild))), b"hi").await;
    assert_eq!(got.unwrap(), b"got 2 bytes: hi");
    assert_reset(
        exchange(&p, Some((&headed, at(looped))), b"hi").await,
        "loopback answer",
    );
    let events = p.events();
    let t = transparent(&events);
    assert_eq!(t.len(), 2, "{t:#?}");
    assert_eq!(t[0].verdict, ProxyVerdict::Allowed);
    assert!(t[0].reason.contains("*.wild.test:9000"), "{}", t[0].reason);
    assert!(
        matches!(t[1].verdict, ProxyVerdict::Address { addr, range: Some(_), .. } if addr == loopback[0]),
        "{t:#?}"
    );
    let dns: Vec<_> = events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Dns))
        .map(|e| (e.host.as_str(), e.verdict))
        .collect();
    assert_eq!(dns, [("bad.wild.test", ProxyVerdict::Denied)]);
}

/// The tunnel's idle limit holds on the transparent path too, also while
/// the proxy still waits for the client's first bytes: within it, a
/// request is relayed (the control); past it, the connection is closed and
/// the test host hears nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_idle_limit_is_enforced() {
    let test = "transparent_a_short_idle_limit_is_enforced";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let p = Proxy::start(granted(&th, "web.test", 80), |c| {
        c.transparent = true;
        c.idle_tunnel = Duration::from_secs(2);
    });
    let headed = headed(&p);
    let to = fake(&p, "web.test", 80).await;
    let mut s = connect_to(&p, Some((&headed, to))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.write_all(b"GET /hello.txt HTTP/1.0\r\nHost: web.test\r\n\r\n")
        .await
        .unwrap();
    let reply = String::from_utf8_lossy(&read_all(&mut s).await.unwrap()).into_owned();
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    let mut s = connect_to(&p, Some((&headed, to))).await.unwrap();
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(6), s.read(&mut b))
        .await
        .expect("the connection outlived its idle limit")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let _ = s
        .write_all(b"GET /secret.txt HTTP/1.0\r\nHost: web.test\r\n\r\n")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!th.requests().iter().any(|l| l.contains("secret")));
    // Both recorded as relayed by the name: the second by the name alone.
    let events = p.events();
    let bases: Vec<_> = transparent(&events)
        .iter()
        .map(|e| (e.verdict, e.basis))
        .collect();
    assert_eq!(
        bases,
        [
            (ProxyVerdict::Allowed, Some(ProxyBasis::Host)),
            (ProxyVerdict::Allowed, Some(ProxyBasis::ResolvedName))
        ]
    );
}
