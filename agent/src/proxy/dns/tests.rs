#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::wire::tests::query;
use super::wire::TYPE_AAAA;
use super::*;
use crate::proxy::allowlist::tests::net;

fn q(name: &str, qtype: u16) -> Query {
    parse_query(&query(1, name, qtype)).unwrap()
}

#[test]
fn decisions() {
    let pol = net(
        &["git.example:22", "*.example.org", "10.0.0.1:80"],
        &["evil.example.org"],
    );
    let t = NameTable::new();
    let a = decide(&pol, &t, &q("git.example", TYPE_A));
    assert_eq!(a, Decision::Address(Ipv4Addr::new(198, 18, 0, 1)));
    assert_eq!(decide(&pol, &t, &q("GIT.example", TYPE_A)), a);
    assert_eq!(
        decide(&pol, &t, &q("git.example", TYPE_AAAA)),
        Decision::NoData
    );
    assert_eq!(decide(&pol, &t, &q("git.example", 16)), Decision::NoData);
    assert_eq!(
        decide(&pol, &t, &q("a.b.example.org", TYPE_A)),
        Decision::Address(Ipv4Addr::new(198, 18, 0, 2))
    );
    assert!(matches!(
        decide(&pol, &t, &q("evil.example.org", TYPE_A)),
        Decision::Refused(Reason::Denied { .. })
    ));
    for refused in [
        "example.org",
        "nope.example",
        "10.0.0.1",
        "",
        "git.example.evil",
    ] {
        assert!(
            matches!(
                decide(&pol, &t, &q(refused, TYPE_A)),
                Decision::Refused(Reason::NotListed { .. })
            ),
            "{refused}"
        );
        assert!(matches!(
            decide(&pol, &t, &q(refused, TYPE_AAAA)),
            Decision::Refused(_)
        ));
    }
    assert_eq!(t.len(), 2);
}

/// Both sides answer on one port; a refused name is recorded once.
#[tokio::test]
async fn udp_and_tcp_on_one_port() {
    let audit = Arc::new(AuditLog::unkept());
    let dns = Arc::new(Dns::new(
        net(&["git.example:22"], &[]),
        Arc::new(NameTable::new()),
        Arc::clone(&audit),
    ));
    let (udp, tcp) = bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    let addr = udp.local_addr().unwrap();
    assert_eq!(tcp.local_addr().unwrap(), addr);
    let udp_task = tokio::spawn(serve_udp(
        UdpSocket::from_std(udp).unwrap(),
        Arc::clone(&dns),
    ));
    let tcp_task = tokio::spawn(serve_tcp(
        TcpListener::from_std(tcp).unwrap(),
        Arc::clone(&dns),
    ));

    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buf = [0u8; 512];
    for (name, qtype, rcode, answers) in [
        ("git.example", TYPE_A, 0, 1),
        ("git.example", TYPE_AAAA, 0, 0),
        ("other.example", TYPE_A, 3, 0),
        ("other.example", TYPE_AAAA, 3, 0),
    ] {
        client
            .send_to(&query(0x4242, name, qtype), addr)
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), client.recv(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[0..2], &[0x42, 0x42]);
        assert_eq!(buf[3] & 0xf, rcode, "{name} {qtype}");
        assert_eq!(buf[7], answers, "{name} {qtype}");
        if answers == 1 {
            assert_eq!(&buf[n - 4..n], &[198, 18, 0, 1]);
        }
    }

    let mut stream = TcpStream::connect(addr).await.unwrap();
    for _ in 0..2 {
        let m = query(7, "git.example", TYPE_A);
        let mut framed = u16::try_from(m.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&m);
        stream.write_all(&framed).await.unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await.unwrap();
        let mut a = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut a).await.unwrap();
        assert_eq!(a[3] & 0xf, 0);
        assert_eq!(&a[a.len() - 4..], &[198, 18, 0, 1]);
    }
    udp_task.abort();
    tcp_task.abort();
    assert_eq!(audit.refused().get(&Layer::Proxy), Some(&1));
    let summary = audit.summary().join("\n");
    assert!(summary.contains("other.example (DNS)"), "{summary}");
}

/// A flood of names is recorded up to the bound, then counted.
#[test]
fn refusals_are_bounded() {
    let audit = Arc::new(AuditLog::unkept());
    let dns = Dns::new(
        net(&[], &[]),
        Arc::new(NameTable::new()),
        Arc::clone(&audit),
    );
    for i in 0..MAX_RECORDED + 100 {
        let a = dns
            .respond(&query(1, &format!("x{i}.example"), TYPE_A))
            .unwrap();
        assert_eq!(a[3] & 0xf, 3);
        // The same name again is not recorded again.
        dns.respond(&query(1, &format!("x{i}.example"), TYPE_AAAA));
    }
    assert_eq!(dns.recorded.lock().unwrap().1, 200);
    let recorded = audit.refused().get(&Layer::Proxy).copied();
    assert_eq!(recorded, Some(MAX_RECORDED as u64));
    // A response or garbage gets nothing.
    let mut resp = query(1, "x.example", TYPE_A);
    resp[2] |= 0x80;
    assert_eq!(dns.respond(&resp), None);
    assert_eq!(dns.respond(&[1, 2, 3]), None);
}

/// The machine's own host name is refused like any name not allowed, and
/// not recorded; a name that only begins with it is recorded.
#[test]
fn the_machines_own_name_is_refused_unrecorded() {
    assert!(is_own_host("build-7", "build-7"));
    assert!(is_own_host("build-7", "build-7.example.internal"));
    assert!(is_own_host(
        "build-7.example.internal",
        "build-7.example.internal"
    ));
    assert!(!is_own_host("build-7.attacker.example", "build-7"));
    assert!(!is_own_host("anything", ""));

    let audit = Arc::new(AuditLog::unkept());
    let dns = Dns::new(
        net(&["git.example"], &[]),
        Arc::new(NameTable::new()),
        Arc::clone(&audit),
    );
    let own = dns.own_host.clone();
    assert!(!own.is_empty(), "this machine has a host name");
    let own_answer = dns.respond(&query(1, &own, TYPE_A)).unwrap();
    assert_eq!(own_answer[3] & 0xf, 3, "NXDOMAIN for {own}");
    assert_eq!(audit.refused().get(&Layer::Proxy), None);
    // Control: another name not allowed is recorded.
    let other = dns.respond(&query(2, "other.example", TYPE_A)).unwrap();
    assert_eq!(other[3] & 0xf, 3);
    assert_eq!(audit.refused().get(&Layer::Proxy), Some(&1));
}
