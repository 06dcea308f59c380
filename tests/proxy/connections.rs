//! Connections through the proxy: its connection limit and overflow, tunnels
//! (half-close, large transfers, pacing), idle limits and an idle tunnel's memory.

use std::process::{Command, Stdio};
use std::time::Duration;

use lockrun::audit::{Event, Record};
use lockrun::policy::NetworkPolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::proxy::{can_netns, TestHost};
use crate::{connect, granted, policy, raw, status_of, Proxy, RANGE};

#[tokio::test]
async fn over_max_connections_answers_503() {
    let p = Proxy::start(policy(&[], &[], None), |c| {
        c.max_connections = 1;
        c.head_timeout = Duration::from_secs(5);
    });
    let holder = TcpStream::connect(p.addr()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, answer) = raw(
        p.addr(),
        format!("CONNECT a.test:443 HTTP/1.1\r\n{}\r\n", p.auth()).as_bytes(),
    )
    .await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("max_connections = 1"), "{answer}");
    drop(holder);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The slot is free again: the next request gets a policy answer.
    let (status, _) = raw(
        p.addr(),
        format!("CONNECT a.test:443 HTTP/1.1\r\n{}\r\n", p.auth()).as_bytes(),
    )
    .await;
    assert_eq!(status, 403);
}

/// Past the cap and the 503s the proxy gives the first connections over it,
/// a connection is dropped unanswered: each is counted, and the log and the
/// summary say how many, so that no refusal goes unseen.
#[tokio::test]
async fn connections_dropped_past_the_overflow_answers_are_counted() {
    let p = Proxy::start(policy(&[], &[], None), |c| {
        c.max_connections = 1;
        c.head_timeout = Duration::from_secs(20);
    });
    // The one slot and every overflow answer held: each waits for a head.
    let mut held = Vec::new();
    for _ in 0..=64 {
        held.push(TcpStream::connect(p.addr()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // These ten are over both: closed at once, without a byte.
    for _ in 0..10 {
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("a connection past the overflow answers is closed at once")
            .unwrap();
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }
    drop(held);
    let Proxy {
        proxy,
        audit_path,
        audit,
        _dir,
    } = p;
    proxy.shutdown().await;
    let dropped: Vec<(u64, usize)> = std::fs::read_to_string(&audit_path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter_map(|r| match r.event {
            Event::ProxyConnectionsDropped {
                count,
                max_connections,
                ..
            } => Some((count, max_connections)),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, vec![(10, 1)]);
    let summary = audit.summary().join("\n");
    assert!(
        summary.contains("10 connections dropped unanswered (over run.max_connections = 1"),
        "{summary}"
    );
}

/// A test host that answers `got N bytes: <bytes>` once the client has
/// closed its side (port 9000, name `eof.test`), and a proxy allowing it.
fn eof_host_behind_the_proxy() -> (TestHost, Proxy) {
    let mut th = TestHost::new(RANGE);
    th.serve_until_eof();
    let p = Proxy::start(granted(&th, "eof.test", 9000), |_| {});
    (th, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_is_forwarded_while_the_reply_comes_back() {
    let test = "half_close_is_forwarded_while_the_reply_comes_back";
    if !can_netns(test) {
        return;
    }
    let (_th, p) = eof_host_behind_the_proxy();
    let mut s = connect(&p, "eof.test:9000").await;
    s.write_all(b"hello").await.unwrap();
    s.shutdown().await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&reply), "got 5 bytes: hello");
}

/// The tunnel moves bytes with splice(2) through a pipe that exists only
/// while bytes flow: 2 MiB that cannot be mistaken (a counter pattern) go up,
/// come back behind the test host's prefix, byte for byte, across many
/// pipe-sized bursts, with the half-close in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transfer_crosses_the_tunnel_intact_both_ways() {
    let test = "a_large_transfer_crosses_the_tunnel_intact_both_ways";
    if !can_netns(test) {
        return;
    }
    let (_th, p) = eof_host_behind_the_proxy();
    let data: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut s = connect(&p, "eof.test:9000").await;
    let (mut rd, mut wr) = s.split();
    let send = async {
        wr.write_all(&data).await.unwrap();
        wr.shutdown().await.unwrap();
    };
    let mut reply = Vec::new();
    let recv = async {
        tokio::time::timeout(Duration::from_mins(1), rd.read_to_end(&mut reply))
            .await
            .unwrap()
            .unwrap();
    };
    tokio::join!(send, recv);
    let prefix = format!("got {} bytes: ", data.len());
    assert_eq!(reply.len(), prefix.len() + data.len());
    assert_eq!(&reply[..prefix.len()], prefix.as_bytes());
    assert!(reply[prefix.len()..] == data[..], "the bytes differ");
}

/// The congestion control `ss` shows for the one established TCP socket
/// matching `filter` (e.g. `sport = :PORT`).
fn congestion_control(filter: &str) -> String {
    const KNOWN: [&str; 6] = ["bbr", "cubic", "reno", "dctcp", "vegas", "westwood"];
    let out = Command::new("ss")
        .args(["-tinH", "state", "established", filter])
        .output()
        .expect("ss (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let found: Vec<&str> = text
        .split_whitespace()
        .filter(|w| KNOWN.contains(w))
        .collect();
    assert_eq!(found.len(), 1, "one socket for {filter}: {text}");
    found[0].to_owned()
}

/// The client leg (loopback, never leaving the host) does not pace: the
/// proxy's side of a client connection runs cubic (or reno), whatever the
/// system default. Control: the client's own side has the system default,
/// read by the same judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_leg_does_not_pace() {
    let p = Proxy::start(NetworkPolicy::default(), |_| {});
    let client = TcpStream::connect(p.addr()).await.unwrap();
    let port = p.addr().port();
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    // The proxy's socket exists from the handshake on (in the listener's
    // queue until accepted), with the listener's congestion control.
    let proxy_side = congestion_control(&format!("sport = :{port}"));
    assert!(
        proxy_side == "cubic" || proxy_side == "reno",
        "the proxy's side runs {proxy_side}"
    );
    assert_eq!(
        congestion_control(&format!("dport = :{port}")),
        default.trim(),
        "the client's side"
    );
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tunnel_lives_past_eleven_seconds() {
    let test = "idle_tunnel_lives_past_eleven_seconds";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let p = Proxy::start(granted(&th, "web.test", 80), |_| {});
    let mut s = connect(&p, "web.test:80").await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    s.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert_eq!(status_of(&reply), 200, "{reply}");
    assert!(reply.ends_with("hello from the test host\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_idle_limit_is_enforced() {
    let test = "a_short_idle_limit_is_enforced";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let p = Proxy::start(granted(&th, "web.test", 80), |c| {
        c.idle_tunnel = Duration::from_secs(2);
    });
    // Control: within the limit the tunnel works.
    let mut s = connect(&p, "web.test:80").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.unwrap();
    assert_eq!(status_of(&String::from_utf8_lossy(&reply)), 200);
    // Past the limit the proxy has closed it: EOF, and the host heard nothing more.
    let mut s = connect(&p, "web.test:80").await;
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
        .await
        .expect("tunnel outlived its idle limit")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let _ = s.write_all(b"GET /secret.txt HTTP/1.0\r\n\r\n").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!th.requests().iter().any(|l| l.contains("secret")));
}

/// Memory per idle tunnel (a measurement, not a pass/fail timing): opens
/// `LOCKRUN_TUNNELS` (default 10,000) idle tunnels to a test host and
/// reports the growth of this process's resident memory per tunnel. The
/// client ends live in this process too, so the figure is an upper bound.
/// Fails above 64 KiB per tunnel. Run with
/// `cargo test -p lockrun --test proxy idle_tunnel_memory -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: opens 10,000 tunnels"]
async fn idle_tunnel_memory() {
    let test = "idle_tunnel_memory";
    if !can_netns(test) {
        return;
    }
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let mut n: usize = std::env::var("LOCKRUN_TUNNELS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let want = (3 * n + 1024) as u64;
    if setrlimit(Resource::RLIMIT_NOFILE, want, want).is_err() {
        // Three descriptors per tunnel live in this process (client, proxy's two ends).
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
        let fit = usize::try_from((hard - 1024) / 3).unwrap();
        if fit < n {
            println!("note: {test}: descriptor limit {hard} fits {fit} tunnels, not {n}");
            n = fit;
        }
    }
    let mut th = TestHost::new(RANGE);
    let script = format!(
        "import asyncio,resource\nresource.setrlimit(resource.RLIMIT_NOFILE,({0},{0}))\nconns=[]\nasync def h(r,w):\n  conns.append(w)\n  await r.read()\nasync def main():\n  s=await asyncio.start_server(h,'0.0.0.0',9100,backlog=4096)\n  await s.serve_forever()\nasyncio.run(main())\n",
        n + 1024
    );
    th.serve_python(&script, 9100, Stdio::null());
    let p = Proxy::start(granted(&th, "hold.test", 9100), |c| {
        c.max_connections = n + 16;
    });
    let rss = || {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
        pages * 4096
    };
    // Warm up the runtime and allocator with a few tunnels first.
    let mut tunnels = Vec::with_capacity(n);
    for _ in 0..16 {
        tunnels.push(connect(&p, "hold.test:9100").await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss();
    for _ in 16..n {
        tunnels.push(connect(&p, "hold.test:9100").await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss();
    let per = (after.saturating_sub(before)) / (n as u64 - 16);
    println!(
        "idle tunnels: {n}; resident growth {} KiB; {per} bytes per tunnel (proxy + client ends)",
        (after - before) / 1024
    );
    assert!(per <= 64 * 1024, "{per} bytes per idle tunnel");
    drop(tunnels);
}
