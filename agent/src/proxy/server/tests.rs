#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::forward::relay_chunked;
use super::tunnel::PIPE_KEPT;
use super::*;

#[test]
fn accept_failures_are_told_once_then_summed_up() {
    let e = io::Error::from_raw_os_error(libc::EMFILE);
    let t0 = Instant::now();
    let mut a = AcceptErrors::default();
    assert_eq!(a.note(t0, &e), Report::First);
    for k in 1..=20 {
        assert_eq!(
            a.note(t0 + Duration::from_millis(50 * k), &e),
            Report::Counted
        );
    }
    // The next one after the period tells the count, itself included.
    assert_eq!(a.note(t0 + AcceptErrors::EVERY, &e), Report::Since(21));
    assert_eq!(a.unreported(), None);
    let t1 = t0 + AcceptErrors::EVERY;
    assert_eq!(a.note(t1 + Duration::from_millis(50), &e), Report::Counted);
    assert_eq!(a.note(t1 + Duration::from_millis(100), &e), Report::Counted);
    let (n, latest) = a.unreported().unwrap();
    assert_eq!(n, 2);
    assert!(latest.contains("Too many open files"), "{latest}");
    assert_eq!(a.unreported(), None);
    // Quiet for a period: the next failure is told as a first one.
    assert_eq!(a.note(t1 + 3 * AcceptErrors::EVERY, &e), Report::First);
}

#[test]
fn base64_matches_rfc4648() {
    for (i, o) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64(i.as_bytes()), o);
    }
}

/// The pipes this process holds, by inode (`pipe:[N]`, both ends alike).
fn pipes() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with("pipe:"))
        .collect()
}

/// The process's pipes once `want` holds of them, or the last look after
/// `within`: the other tests of this binary open and close pipes beside
/// (each `Command::spawn` holds one for a moment).
async fn pipes_until(
    within: Duration,
    want: impl Fn(&std::collections::BTreeSet<String>) -> bool,
) -> std::collections::BTreeSet<String> {
    let end = Instant::now() + within;
    loop {
        let now = pipes();
        if want(&now) || Instant::now() >= end {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_tunnel_direction_holds_its_pipe_only_while_busy() {
    use tokio::io::AsyncWriteExt as _;
    // client <-> (a | tunnel | b) <-> upstream
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    let (a, _) = l.accept().await.unwrap();
    let b = TcpStream::connect(addr).await.unwrap();
    let (mut upstream, _) = l.accept().await.unwrap();
    let before = pipes();
    let relay = tokio::spawn(tunnel(a, b, Duration::from_mins(1)));
    client.write_all(&vec![7u8; 100_000]).await.unwrap();
    let mut got = vec![0u8; 100_000];
    upstream.read_exact(&mut got).await.unwrap();
    assert!(got.iter().all(|&x| x == 7));
    // The busy direction has its pipe; the other none. Looked for within
    // half the time an idle pipe is kept.
    let busy = pipes_until(PIPE_KEPT / 2, |p| p.difference(&before).count() == 1).await;
    let new: Vec<&String> = busy.difference(&before).collect();
    assert_eq!(new.len(), 1, "{busy:?} beside {before:?}");
    let held = new[0].clone();
    tokio::time::sleep(PIPE_KEPT + Duration::from_millis(300)).await;
    let idle = pipes_until(Duration::from_secs(2), |p| !p.contains(&held)).await;
    assert!(
        !idle.contains(&held),
        "an idle tunnel keeps its pipe {held}"
    );
    // And the next burst still crosses.
    client.write_all(b"again").await.unwrap();
    let mut again = [0u8; 5];
    upstream.read_exact(&mut again).await.unwrap();
    assert_eq!(&again, b"again");
    drop(client);
    drop(upstream);
    relay.await.unwrap().unwrap();
}

#[tokio::test]
async fn dial_takes_the_next_address_when_one_fails() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let good = listener.local_addr().unwrap();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (_, dialed) = dial(&[closed, good], Duration::from_secs(2)).await.unwrap();
    assert_eq!(dialed, good);
    let refusal = dial(&[closed], Duration::from_secs(2)).await.unwrap_err();
    assert_eq!(refusal.status, 502);
    assert_eq!(refusal.verdict, ProxyVerdict::UpstreamFailed);
    assert!(
        refusal.reason.contains(&closed.to_string()),
        "{}",
        refusal.reason
    );
}

#[tokio::test]
async fn chunked_relay_is_verbatim_and_stops_at_the_end() {
    let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    let mut r = BufReader::new(&body[..]);
    let mut out = Vec::new();
    relay_chunked(&mut r, &mut out, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(out, &body[..body.len() - 4]);
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"NEXT");
    for bad in [
        &b"x\r\n"[..],
        b"4\r\nWikiXX",
        b"4\nWiki\r\n0\r\n\r\n",
        b"-1\r\n",
    ] {
        let mut r = BufReader::new(bad);
        assert!(
            relay_chunked(&mut r, &mut Vec::new(), Duration::from_secs(1))
                .await
                .is_err()
        );
    }
}
