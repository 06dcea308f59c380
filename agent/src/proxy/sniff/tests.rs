#![allow(clippy::unwrap_used)]

use super::*;

fn vec16(b: &[u8]) -> Vec<u8> {
    let mut v = u16::try_from(b.len()).unwrap().to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v
}

/// A `ClientHello` with these extensions (type, data), in one record or
/// split across records of `split` bytes.
fn hello(exts: &[(u16, Vec<u8>)], split: usize) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[32]);
    body.extend_from_slice(&[9; 32]);
    body.extend_from_slice(&vec16(&[0x13, 0x01, 0x13, 0x02]));
    body.extend_from_slice(&[1, 0]);
    let mut e = Vec::new();
    for (t, d) in exts {
        e.extend_from_slice(&t.to_be_bytes());
        e.extend_from_slice(&vec16(d));
    }
    body.extend_from_slice(&vec16(&e));
    let mut hs = vec![1];
    hs.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut out = Vec::new();
    for chunk in hs.chunks(split) {
        out.extend_from_slice(&[0x16, 3, 1]);
        out.extend_from_slice(&vec16(chunk));
    }
    out
}

fn sni(names: &[&str]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for n in names {
        list.push(0);
        list.extend_from_slice(&vec16(n.as_bytes()));
    }
    (0, vec16(&list))
}

#[test]
fn server_name() {
    let h = hello(
        &[
            (10, vec![0, 2, 0, 29]),
            sni(&["api.example.com"]),
            (43, vec![2, 3, 4]),
        ],
        1 << 14,
    );
    assert_eq!(sniff(&h), Sniffed::Tls(Some("api.example.com".into())));
    // Every prefix asks for more.
    for cut in 0..h.len() {
        assert_eq!(sniff(&h[..cut]), Sniffed::NeedMore, "{cut}");
    }
    // Bytes behind the hello don't matter.
    let mut more = h.clone();
    more.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
    assert_eq!(sniff(&more), Sniffed::Tls(Some("api.example.com".into())));
}

#[test]
fn across_records() {
    let h = hello(&[sni(&["split.example"]), (21, vec![0; 3000])], 100);
    assert_eq!(sniff(&h), Sniffed::Tls(Some("split.example".into())));
    for cut in [1, 5, 104, 105, 106, 500, h.len() - 1] {
        assert_eq!(sniff(&h[..cut]), Sniffed::NeedMore, "{cut}");
    }
}

#[test]
fn without_a_server_name() {
    assert_eq!(
        sniff(&hello(&[(10, vec![0, 2, 0, 29])], 1 << 14)),
        Sniffed::Tls(None)
    );
    assert_eq!(sniff(&hello(&[], 1 << 14)), Sniffed::Tls(None));
}

#[test]
fn malformed_hellos() {
    // Two names, two extensions, an empty name, a name with a space.
    for exts in [
        vec![sni(&["a.example", "b.example"])],
        vec![sni(&["a.example"]), sni(&["b.example"])],
        vec![sni(&[""])],
        vec![sni(&["a example"])],
    ] {
        assert!(
            matches!(sniff(&hello(&exts, 1 << 14)), Sniffed::Malformed(_)),
            "{exts:?}"
        );
    }
    // An extension longer than its list.
    let mut h = hello(&[sni(&["a.example"])], 1 << 14);
    let n = h.len();
    h[n - 16] = 0xff;
    assert!(matches!(sniff(&h), Sniffed::Malformed(_)));
    // A handshake that is not a ClientHello; a record that is not a handshake.
    let mut sh = hello(&[], 1 << 14);
    sh[5] = 2;
    assert!(matches!(sniff(&sh), Sniffed::Malformed(_)));
    assert!(matches!(sniff(&[0x16, 2, 0]), Sniffed::Malformed(_)));
    assert!(matches!(sniff(&[0x16, 3, 1, 0, 0]), Sniffed::Malformed(_)));
}

#[test]
fn http_hosts() {
    let get = b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nHost: Api.Example.com:8080\r\n\r\n";
    assert_eq!(sniff(get), Sniffed::Http(vec!["Api.Example.com".into()]));
    for cut in 0..get.len() {
        assert_eq!(sniff(&get[..cut]), Sniffed::NeedMore, "{cut}");
    }
    assert_eq!(
        sniff(b"GET http://a.example/ HTTP/1.1\r\nhost: b.example\r\n\r\n"),
        Sniffed::Http(vec!["a.example".into(), "b.example".into()])
    );
    assert_eq!(sniff(b"GET / HTTP/1.0\r\n\r\n"), Sniffed::Http(vec![]));
    assert_eq!(
        sniff(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"),
        Sniffed::Http(vec!["[::1]".into()])
    );
    assert_eq!(
        sniff(b"GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n"),
        Sniffed::Http(vec!["a".into(), "b".into()])
    );
    assert!(matches!(
        sniff(b"GET / HTTP/1.1\r\nHost:\r\n\r\n"),
        Sniffed::Malformed(_)
    ));
    assert!(matches!(
        sniff(b"GET / HTTP/1.1\r\nnocolon\r\n\r\n"),
        Sniffed::Malformed(_)
    ));
}

#[test]
fn other_protocols() {
    assert_eq!(sniff(b"SSH-2.0-OpenSSH_9.2\r\n"), Sniffed::Other);
    assert_eq!(sniff(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Sniffed::Other);
    assert_eq!(sniff(&[0, 0, 0, 8, 4, 210, 22, 47]), Sniffed::Other);
    assert_eq!(sniff(b"hello"), Sniffed::Other);
    assert_eq!(sniff(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"), Sniffed::Other);
    assert_eq!(sniff(b""), Sniffed::NeedMore);
    assert_eq!(sniff(b"GET"), Sniffed::NeedMore);
}

#[test]
fn bounded() {
    let mut endless = b"GET / HTTP/1.1\r\n".to_vec();
    endless.resize(MAX_SNIFF, b'a');
    assert!(matches!(sniff(&endless), Sniffed::Malformed(_)));
    let mut long_line = b"GET /".to_vec();
    long_line.resize(9000, b'a');
    assert!(matches!(sniff(&long_line), Sniffed::Malformed(_)));
}
