//! The relays of forwarded and inspected requests: rewritten bodies, the
//! WebSocket upgrade.
#![allow(clippy::unwrap_used)]

use super::*;

fn h(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

#[test]
fn only_an_upgrade_to_websocket_with_its_connection_token_is_one() {
    assert!(wants_websocket(&h(&[
        ("Upgrade", "websocket"),
        ("Connection", "keep-alive, Upgrade")
    ])));
    assert!(!wants_websocket(&h(&[("Upgrade", "websocket")])));
    assert!(!wants_websocket(&h(&[
        ("Upgrade", "h2c"),
        ("Connection", "Upgrade")
    ])));
}

#[tokio::test]
async fn a_rewritten_chunked_body_is_framed_anew_with_its_trailers() {
    let input = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT".to_vec();
    let mut r = BufReader::new(&input[..]);
    let mut out = Vec::new();
    let mut rw = BodyRewriter::default();
    relay_chunked_rewritten(&mut r, &mut out, Duration::from_secs(5), &mut rw)
        .await
        .unwrap();
    assert_eq!(out, b"5\r\nhello\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n");
    // The next request's bytes stay unread.
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"NEXT");
    // A malformed chunk end is refused, not passed on.
    let bad = b"3\r\nabcX\r\n0\r\n\r\n".to_vec();
    let mut r = BufReader::new(&bad[..]);
    let e = relay_chunked_rewritten(&mut r, &mut Vec::new(), Duration::from_secs(5), &mut rw)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}

#[tokio::test]
async fn a_rewritten_body_of_known_length_keeps_its_length() {
    let input = b"0123456789rest".to_vec();
    let mut r = BufReader::new(&input[..]);
    let mut out = Vec::new();
    copy_exact_rewritten(
        &mut r,
        &mut out,
        10,
        Duration::from_secs(5),
        &mut BodyRewriter::default(),
    )
    .await
    .unwrap();
    assert_eq!(out, b"0123456789");
}

#[tokio::test]
async fn an_upgraded_connection_relays_both_ways_until_both_close_or_idle() {
    let (mut client, mut a) = tokio::io::duplex(64);
    let (mut b, mut server) = tokio::io::duplex(64);
    let relay = tokio::spawn(async move {
        relay_both(&mut a, &mut b, Duration::from_secs(30)).await;
    });
    client.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
    server.write_all(b"pong").await.unwrap();
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"pong");
    // Each side's close reaches the other; then the relay ends.
    client.shutdown().await.unwrap();
    assert_eq!(server.read(&mut got).await.unwrap(), 0);
    server.shutdown().await.unwrap();
    assert_eq!(client.read(&mut got).await.unwrap(), 0);
    tokio::time::timeout(Duration::from_secs(5), relay)
        .await
        .unwrap()
        .unwrap();

    // Nothing moving either way: ended after the idle limit.
    let (_client, mut a) = tokio::io::duplex(64);
    let (mut b, _server) = tokio::io::duplex(64);
    tokio::time::timeout(
        Duration::from_secs(5),
        relay_both(&mut a, &mut b, Duration::from_millis(100)),
    )
    .await
    .unwrap();
}
