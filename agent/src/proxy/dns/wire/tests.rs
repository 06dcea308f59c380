#![allow(clippy::unwrap_used)]

use super::*;

/// A query as a stub resolver sends it.
pub(in crate::proxy::dns) fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut m = vec![
        (id >> 8) as u8,
        id as u8,
        0x01,
        0x00,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    for l in name.split('.').filter(|l| !l.is_empty()) {
        m.push(u8::try_from(l.len()).unwrap());
        m.extend_from_slice(l.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    m
}

#[test]
fn parses_a_query() {
    let q = parse_query(&query(0x1234, "WWW.Example.com.", TYPE_AAAA)).unwrap();
    assert_eq!(q.id, 0x1234);
    assert!(q.rd);
    assert_eq!(q.name, "www.example.com");
    assert_eq!(q.qtype, TYPE_AAAA);
    assert_eq!(q.qclass, CLASS_IN);
}

#[test]
fn an_edns_record_behind_the_question_is_ignored() {
    let mut m = query(7, "a.example", TYPE_A);
    m[11] = 1; // ARCOUNT
    m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
    let q = parse_query(&m).unwrap();
    assert_eq!(q.name, "a.example");
    let a = answer(&q, Rcode::NoError, None);
    // The question is echoed, the OPT record is not.
    assert_eq!(a.len(), 12 + "a.example".len() + 2 + 4);
}

#[test]
fn answers_an_address() {
    let q = parse_query(&query(9, "a.example", TYPE_A)).unwrap();
    let a = answer(&q, Rcode::NoError, Some(Ipv4Addr::new(198, 18, 0, 1)));
    assert_eq!(&a[0..2], &[0, 9]);
    // QR AA RD RA, NOERROR; one question, one answer.
    assert_eq!(&a[2..4], &[0x85, 0x80]);
    assert_eq!(&a[4..8], &[0, 1, 0, 1]);
    assert_eq!(&a[8..12], &[0, 0, 0, 0]);
    let qlen = "a.example".len() + 2 + 4;
    assert_eq!(&a[12..12 + qlen], &query(9, "a.example", TYPE_A)[12..]);
    assert_eq!(
        &a[12 + qlen..],
        &[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 198, 18, 0, 1]
    );
    // An answer is not a query: it is never answered.
    assert_eq!(parse_query(&a), Err(WireError::NotQuery));
}

#[test]
fn nxdomain_and_nodata() {
    let q = parse_query(&query(1, "x.example", TYPE_A)).unwrap();
    let nx = answer(&q, Rcode::NxDomain, None);
    assert_eq!(nx[3] & 0xf, 3);
    assert_eq!(&nx[6..8], &[0, 0]);
    let nodata = answer(&q, Rcode::NoError, None);
    assert_eq!(nodata[3] & 0xf, 0);
    assert_eq!(&nodata[6..8], &[0, 0]);
}

#[test]
fn refusals() {
    let ok = query(3, "a.example", TYPE_A);
    assert_eq!(parse_query(&ok[..11]), Err(WireError::Short));
    let mut two = ok.clone();
    two[5] = 2;
    assert!(matches!(parse_query(&two), Err(WireError::Question(_))));
    let mut none = ok.clone();
    none[5] = 0;
    assert!(matches!(parse_query(&none), Err(WireError::Question(_))));
    let mut status = ok.clone();
    status[2] = 0x10; // opcode 2
    assert_eq!(parse_query(&status), Err(WireError::Opcode(2)));
    let mut compressed = ok[..12].to_vec();
    compressed.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
    assert!(matches!(
        parse_query(&compressed),
        Err(WireError::Question(_))
    ));
    // Cut anywhere inside the question.
    for cut in 12..ok.len() {
        assert!(
            matches!(parse_query(&ok[..cut]), Err(WireError::Question(_))),
            "{cut}"
        );
    }
    let mut dotted = query(3, "ab.example", TYPE_A);
    dotted[14] = b'.';
    assert!(matches!(parse_query(&dotted), Err(WireError::Question(_))));
    let long = format!("{}.example", vec!["a".repeat(63); 4].join("."));
    assert!(matches!(
        parse_query(&query(3, &long, TYPE_A)),
        Err(WireError::Question(_))
    ));
}

#[test]
fn error_answers_carry_the_id() {
    let mut two = query(0xbeef, "a.example", TYPE_A);
    two[5] = 2;
    let e = parse_query(&two).unwrap_err();
    let a = error_answer(&two, &e).unwrap();
    assert_eq!(&a[0..2], &[0xbe, 0xef]);
    assert_eq!(a[3] & 0xf, Rcode::FormErr as u8);
    assert_eq!(a.len(), 12);
    let mut resp = two.clone();
    resp[2] |= 0x80;
    assert_eq!(error_answer(&resp, &parse_query(&resp).unwrap_err()), None);
}

#[test]
fn the_root() {
    let q = parse_query(&query(1, ".", TYPE_A)).unwrap();
    assert_eq!(q.name, "");
}
