//! Requests through the proxy: what reaches an allowed test host, what is refused
//! and with which status (403, 407, 502, 504), the secret, the guard against
//! local addresses, and which upstream connections are reused.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lockrun::audit::{AuditLog, ProxyVerdict};
use lockrun::policy::{IpNet, NetworkPolicy};
use lockrun::proxy::{NoResolver, ProxyConfig, RunningProxy};
use tokio::net::{TcpListener, TcpStream};

use crate::support::proxy::{can_netns, sh, Scratch, TestHost};
use crate::support::python::python3;
use crate::{client, granted, policy, raw, run, Proxy, RANGE};

fn with_proxy_env(cmd: &mut Command, p: &Proxy) {
    for (k, v) in p.proxy.env_vars() {
        cmd.env(k, v);
    }
}

fn curl_code(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The status curl got for `target` through the proxy at `proxy`: the
/// response's (plain forwarding) or, with `tunnel`, the CONNECT's.
async fn curl_status(proxy: &str, tunnel: bool, target: &str) -> String {
    let mut c = client("curl");
    c.arg("-s");
    if tunnel {
        c.arg("-p");
    }
    c.args(["-x", proxy, "-o", "/dev/null", "-w"]);
    c.arg(if tunnel {
        "%{http_connect}"
    } else {
        "%{http_code}"
    });
    c.arg(target);
    curl_code(&run(c).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_reach_an_allowed_test_host_and_unlisted_names_get_403() {
    let test = "clients_reach_an_allowed_test_host_and_unlisted_names_get_403";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let ip = [th.ns_ip];
    let hostside = [th.host_ip];
    let p = Proxy::start(
        policy(
            &["web.test:80", "hostside.test:80"],
            &[
                ("web.test", &ip),
                ("unlisted.test", &ip),
                ("hostside.test", &hostside),
            ],
            // The grant covers this host's own end of the veth too: it must not open it.
            Some((&["web.test", "hostside.test"], th.net)),
        ),
        |_| {},
    );
    let url = p.proxy.url();

    // curl, plain HTTP forwarding (twice on one connection: keep-alive).
    let mut c = client("curl");
    c.args([
        "-sS",
        "-x",
        &url,
        "http://web.test/hello.txt",
        "http://web.test/hello.txt",
    ]);
    let out = run(c).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the test host\n".repeat(2)
    );

    // curl through a CONNECT tunnel (-p).
    let mut c = client("curl");
    c.args([
        "-sS",
        "-p",
        "-x",
        &url,
        "-w",
        "\n%{http_connect}",
        "http://web.test/hello.txt",
    ]);
    let out = run(c).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the test host\n\n200"
    );

    // python3 urllib from the proxy environment.
    let mut c = client(python3());
    c.args(["-c", "import urllib.request;print(urllib.request.urlopen('http://web.test/hello.txt').read().decode(),end='')"]);
    with_proxy_env(&mut c, &p);
    let out = run(c).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from the test host\n"
    );

    let before = th.requests().len();
    assert_eq!(before, 4, "{:?}", th.requests());

    // An unlisted name that resolves to the same host: 403, the host hears nothing.
    assert_eq!(
        curl_status(&url, false, "http://unlisted.test/secret.txt").await,
        "403"
    );
    assert_eq!(
        curl_status(&url, true, "http://unlisted.test/secret.txt").await,
        "403"
    );
    // Allowed name, port not allowed.
    assert_eq!(
        curl_status(&url, true, "http://web.test:8080/secret.txt").await,
        "403"
    );
    // Allowed and granted, but it is this host's own address.
    assert_eq!(
        curl_status(&url, true, "http://hostside.test/").await,
        "403"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(th.requests().len(), before, "{:?}", th.requests());
    assert!(!th.requests().iter().any(|l| l.contains("secret")));

    let ev = p.events();
    let allowed: Vec<_> = ev.iter().filter(|e| e.allowed).collect();
    assert!(allowed.iter().any(|e| e.method == "CONNECT"
        && e.status == 200
        && e.dialed == Some(SocketAddr::new(th.ns_ip, 80))));
    assert!(allowed
        .iter()
        .any(|e| e.method == "GET" && e.status == 200 && e.host == "web.test"));
    let refused: Vec<_> = ev.iter().filter(|e| !e.allowed).collect();
    assert_eq!(refused.len(), 4, "{refused:?}");
    assert!(
        refused[3].reason.contains("an address of this host"),
        "{}",
        refused[3].reason
    );
    assert!(refused
        .iter()
        .all(|e| e.status == 403 && e.dialed.is_none()));
    assert!(
        refused[0].reason.contains("not in the allowlist"),
        "{}",
        refused[0].reason
    );
    assert!(
        refused[2].reason.contains("only on port(s) 80"),
        "{}",
        refused[2].reason
    );
    // The same, as the verdicts `lockrun audit` and the summary go by.
    assert_eq!(
        refused.iter().map(|e| e.verdict).collect::<Vec<_>>(),
        vec![
            ProxyVerdict::NotListed,
            ProxyVerdict::NotListed,
            ProxyVerdict::PortNotAllowed,
            ProxyVerdict::Address {
                addr: th.host_ip,
                range: None,
                embedded: None,
            },
        ]
    );
    assert!(allowed.iter().all(|e| e.verdict == ProxyVerdict::Allowed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clones_over_http_through_the_proxy() {
    let test = "git_clones_over_http_through_the_proxy";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    // A bare repo served as dumb HTTP.
    let work = Scratch::new("gitsrc");
    let w = work.0.to_str().unwrap();
    sh(&["git", "-C", w, "init", "-q", "-b", "main"]);
    std::fs::write(work.0.join("README"), "cloned through lockrun's proxy\n").unwrap();
    sh(&["git", "-C", w, "add", "README"]);
    sh(&[
        "git",
        "-C",
        w,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "first",
    ]);
    let bare = th.www().join("repo.git");
    sh(&["git", "clone", "-q", "--bare", w, bare.to_str().unwrap()]);
    sh(&["git", "-C", bare.to_str().unwrap(), "update-server-info"]);

    let p = Proxy::start(granted(&th, "git.test", 80), |_| {});
    let dest = Scratch::new("clone");
    let mut c = client("git");
    c.args(["clone", "-q", "http://git.test/repo.git"])
        .arg(dest.0.join("repo"))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", &dest.0);
    with_proxy_env(&mut c, &p);
    let out = run(c).await;
    assert!(
        out.status.success(),
        "git clone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dest.0.join("repo/README")).unwrap(),
        "cloned through lockrun's proxy\n"
    );
    assert!(th
        .requests()
        .iter()
        .any(|l| l.contains("/repo.git/info/refs")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_secret_407_and_with_it_200() {
    let test = "without_the_secret_407_and_with_it_200";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let p = Proxy::start(granted(&th, "web.test", 80), |_| {});
    let bare = format!("http://{}", p.addr());
    let wrong = format!("http://lockrun:wrong@{}", p.addr());
    for (proxy, want) in [(&bare, "407"), (&wrong, "407"), (&p.proxy.url(), "200")] {
        assert_eq!(
            curl_status(proxy, false, "http://web.test/hello.txt").await,
            want,
            "plain via {proxy}"
        );
        assert_eq!(
            curl_status(proxy, true, "http://web.test/hello.txt").await,
            want,
            "CONNECT via {proxy}"
        );
    }
    assert_eq!(
        th.requests().len(),
        2,
        "only the two authorized requests arrive"
    );
    let (status, answer) = raw(p.addr(), b"CONNECT web.test:80 HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, 407);
    assert!(
        answer.contains("Proxy-Authenticate: Basic realm=\"lockrun\""),
        "{answer}"
    );
}

/// Allowed names whose answers the address guard must refuse, judged by a
/// listener on every local address that must hear nothing.
#[tokio::test]
async fn guard_refuses_local_metadata_host_and_mixed_answers() {
    let listener = TcpListener::bind("[::]:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let own = lockrun::proxy::guard::OwnAddresses::new().get().unwrap();
    let host_addr = own
        .iter()
        .copied()
        .find(|a| {
            !a.is_loopback() && !matches!(a, IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80)
        })
        .expect("this host has a non-loopback address");
    let granted = IpNet::parse("10.213.250.0/30").unwrap();
    let good: IpAddr = "10.213.250.2".parse().unwrap();
    // The host's address may also lie in a special range (documentation, on
    // some VMs); then that range is the reason given.
    let self_why = lockrun::proxy::guard::classify(host_addr)
        .map_or_else(|| "an address of this host".to_owned(), |s| s.to_string());
    let cases: Vec<(&str, Vec<IpAddr>, &str)> = vec![
        (
            "v4-loopback.test",
            vec!["127.0.0.1".parse().unwrap()],
            "loopback",
        ),
        ("v6-loopback.test", vec!["::1".parse().unwrap()], "loopback"),
        (
            "mapped.test",
            vec!["::ffff:127.0.0.1".parse().unwrap()],
            "IPv4-mapped",
        ),
        (
            "metadata.test",
            vec!["169.254.169.254".parse().unwrap()],
            "link-local",
        ),
        ("self.test", vec![host_addr], &self_why),
        (
            "mixed.test",
            vec![good, "127.0.0.1".parse().unwrap()],
            "127.0.0.1, loopback",
        ),
        (
            "mixed6.test",
            vec![good, "::ffff:127.0.0.1".parse().unwrap()],
            "IPv4-mapped",
        ),
        (
            "private.test",
            vec!["10.213.251.2".parse().unwrap()],
            "private network",
        ),
    ];
    let allow: Vec<String> = cases
        .iter()
        .map(|(n, _, _)| format!("{n}:{port}"))
        .collect();
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let resolve: Vec<(&str, &[IpAddr])> =
        cases.iter().map(|(n, a, _)| (*n, a.as_slice())).collect();
    let all: Vec<&str> = cases.iter().map(|(n, _, _)| *n).collect();
    let p = Proxy::start(policy(&allow, &resolve, Some((&all, granted))), |_| {});
    for (n, _, why) in &cases {
        for req in [
            format!("CONNECT {n}:{port} HTTP/1.1\r\n{}\r\n", p.auth()),
            format!(
                "GET http://{n}:{port}/ HTTP/1.1\r\nHost: {n}:{port}\r\n{}\r\n",
                p.auth()
            ),
        ] {
            let (status, answer) = raw(p.addr(), req.as_bytes()).await;
            assert_eq!(status, 403, "{n}: {answer}");
            assert!(
                answer.contains("X-Lockrun-Reason: ") && answer.contains(why),
                "{n}: {answer}"
            );
        }
    }
    let heard = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(heard.is_err(), "a refused address was dialed");
    let ev = p.events();
    assert_eq!(ev.len(), cases.len() * 2);
    assert!(
        ev.iter()
            .all(|e| !e.allowed && e.status == 403 && e.dialed.is_none()),
        "{ev:?}"
    );
    // An IP literal the policy does not list is refused before any guard.
    let lit = format!("127.0.0.1:{port}");
    let (status, answer) = raw(
        p.addr(),
        format!("CONNECT {lit} HTTP/1.1\r\n{}\r\n", p.auth()).as_bytes(),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer.contains("IP literal 127.0.0.1 is not listed"),
        "{answer}"
    );
}

#[tokio::test]
async fn malformed_and_adversarial_requests_get_their_status() {
    let p = Proxy::start(
        policy(
            &["ok.test", "ok.test:80", "10.213.250.2:80"],
            &[("ok.test", &["127.0.0.1".parse().unwrap()])],
            None,
        ),
        |c| c.head_timeout = Duration::from_secs(1),
    );
    let a = p.auth();
    let cases: Vec<(String, u16, &str)> = vec![
        (format!("CONNECT user@ok.test:443 HTTP/1.1\r\n{a}\r\n"), 400, "userinfo"),
        (format!("CONNECT user:pw@ok.test:443 HTTP/1.1\r\n{a}\r\n"), 400, "userinfo"),
        (format!("CONNECT ok.test:443/path HTTP/1.1\r\n{a}\r\n"), 400, "path, query or fragment"),
        (format!("CONNECT ok.test:443?q=1 HTTP/1.1\r\n{a}\r\n"), 400, "path, query or fragment"),
        (format!("CONNECT ok.test:443#frag HTTP/1.1\r\n{a}\r\n"), 400, "path, query or fragment"),
        (format!("CONNECT [ok.test]:443 HTTP/1.1\r\n{a}\r\n"), 400, "bracketed"),
        (format!("CONNECT [127.0.0.1]:443 HTTP/1.1\r\n{a}\r\n"), 400, "bracketed"),
        (format!("CONNECT ok.test HTTP/1.1\r\n{a}\r\n"), 400, "no port"),
        (format!("CONNECT ok.test:0 HTTP/1.1\r\n{a}\r\n"), 400, "invalid port"),
        (format!("CONNECT ok.test:99999 HTTP/1.1\r\n{a}\r\n"), 400, "invalid port"),
        (format!("CONNECT ok.test:https HTTP/1.1\r\n{a}\r\n"), 400, "invalid port"),
        (format!("CONNECT 127.1:443 HTTP/1.1\r\n{a}\r\n"), 400, "numeric host name"),
        (format!("CONNECT 8.8.8.8:443 HTTP/1.1\r\n{a}\r\n"), 403, "IP literal 8.8.8.8 is not listed"),
        (format!("CONNECT [::1]:443 HTTP/1.1\r\n{a}\r\n"), 403, "IP literal ::1 is not listed"),
        (format!("CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n{a}\r\n"), 403, "IP literal"),
        // Listed literal, but the guard still refuses an unGranted private address.
        (format!("GET http://10.213.250.2/ HTTP/1.1\r\nHost: 10.213.250.2\r\n{a}\r\n"), 403, "private network"),
        (format!("TRACE http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\n{a}\r\n"), 405, "method `TRACE`"),
        (format!("BREW http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\n{a}\r\n"), 405, "method `BREW`"),
        (format!("GET /relative HTTP/1.1\r\nHost: ok.test\r\n{a}\r\n"), 400, "origin-form"),
        (format!("GET https://ok.test/ HTTP/1.1\r\nHost: ok.test\r\n{a}\r\n"), 400, "only http://"),
        (format!("GET http://ok.test/ HTTP/1.1\r\nHost: evil.test\r\n{a}\r\n"), 400, "Host header disagrees"),
        (format!("GET http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\nHost: ok.test\r\n{a}\r\n"), 400, "more than one Host"),
        (format!("POST http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\nContent-Length: 4\r\nContent-Length: 5\r\n{a}\r\n"), 400, "conflicting Content-Length"),
        (format!("POST http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n{a}\r\n"), 400, "both Content-Length and Transfer-Encoding"),
        (format!("POST http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\nTransfer-Encoding: identity, chunked\r\n{a}\r\n"), 400, "Transfer-Encoding other than"),
        (format!("GET http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\nX-Long: {}\r\n{a}\r\n", "x".repeat(20_000)), 431, "larger than"),
        (format!("GET http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\n{a}"), 408, "not complete within"),
        ("\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03".to_owned(), 400, "malformed"),
    ];
    for (req, want, why) in &cases {
        let (status, answer) = raw(p.addr(), req.as_bytes()).await;
        assert_eq!(status, *want, "{req:?}: {answer}");
        assert!(answer.contains(why), "{req:?}: {answer}");
    }
    let ev = p.events();
    assert_eq!(ev.len(), cases.len());
    assert!(ev.iter().all(|e| !e.allowed && e.dialed.is_none()));
}

#[tokio::test]
async fn env_vars_carry_the_secret_and_no_bypass() {
    let p = Proxy::start(policy(&[], &[], None), |_| {});
    let env: BTreeMap<String, String> = p.proxy.env_vars().into_iter().collect();
    let url = p.proxy.url();
    assert!(url.starts_with("http://lockrun:") && url.ends_with(&format!("@{}", p.addr())));
    assert!(p.addr().ip().is_loopback());
    for k in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        assert_eq!(env[k], url);
    }
    assert_eq!(env["NO_PROXY"], "");
    assert_eq!(env["no_proxy"], "");
    let addr = p.addr();
    p.proxy.shutdown().await;
    // The listener is closed when shutdown returns, but a process another
    // test forks in these parallel tests holds a copy until its exec closes
    // it (long under emulation): refused within a bound, never accepted.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr).await {
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
                break;
            }
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(_) => panic!("still listening 10 s after shutdown"),
        }
    }
    // Loopback only.
    let audit = Arc::new(AuditLog::open(None).unwrap());
    let mut config = ProxyConfig::new(NetworkPolicy::default(), audit, Arc::new(NoResolver));
    config.listen = "0.0.0.0:0".parse().unwrap();
    assert!(matches!(
        RunningProxy::start(config),
        Err(lockrun::proxy::ProxyError::NotLoopback(_))
    ));
}

/// A chunked POST and a chunked response, twice on one client connection:
/// the body framing survives the proxy both ways, the connection is reused,
/// and no `Proxy-*` or hop-by-hop header (the run's secret!) reaches the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_are_relayed_and_proxy_headers_stripped() {
    let test = "chunked_bodies_are_relayed_and_proxy_headers_stripped";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    let script = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_POST(self):
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            body = b''
            while True:
                n = int(self.rfile.readline().split(b';')[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    break
                body += self.rfile.read(n)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get('Content-Length', '0')))
        leaked = [k for k in self.headers.keys() if k.lower().startswith('proxy-') or k.lower() in ('keep-alive', 'te', 'upgrade')]
        msg = b'got %d bytes, leaked: %s\n' % (len(body), (','.join(leaked) or 'none').encode())
        self.send_response(200)
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        half = len(msg) // 2
        self.wfile.write(b'%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n' % (half, msg[:half], len(msg) - half, msg[half:]))
    def log_message(self, fmt, *args):
        sys.stderr.write('"' + self.requestline + '"\n')
        sys.stderr.flush()
http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()
"#;
    let log = std::fs::File::create(th.access_log()).unwrap();
    th.serve_python(script, 8080, log);
    let p = Proxy::start(granted(&th, "post.test", 8080), |_| {});
    let data = Scratch::new("post");
    let file = data.0.join("body");
    std::fs::write(&file, vec![b'x'; 300_000]).unwrap();
    let mut c = client("curl");
    c.args([
        "-sS",
        "-x",
        &p.proxy.url(),
        "-H",
        "Transfer-Encoding: chunked",
        "-H",
        "Proxy-Connection: keep-alive",
        "--data-binary",
    ])
    .arg(format!("@{}", file.display()))
    .args([
        "-w",
        "connects=%{num_connects}\n",
        "http://post.test:8080/a",
        "http://post.test:8080/b",
    ]);
    let out = run(c).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "got 300000 bytes, leaked: none\nconnects=1\ngot 300000 bytes, leaked: none\nconnects=0\n"
    );
    let ev = p.events();
    assert_eq!(
        ev.iter()
            .filter(|e| e.allowed && e.method == "POST" && e.status == 200)
            .count(),
        2,
        "{ev:?}"
    );
}

/// Upstream failures: a port with nothing listening is 502; an address that
/// never answers (on-link, but no host answers ARP for it) is 504 after the
/// connect timeout; an allowed name that does not resolve is 502. All
/// audited as allowed by policy, whose upstream failed (not refusals),
/// nothing dialed; the run's summary says so, and counts no refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_refusal_is_502_and_silence_is_504() {
    let test = "upstream_refusal_is_502_and_silence_is_504";
    if !can_netns(test) {
        return;
    }
    let th = TestHost::new(RANGE);
    // 10.213.X.4/30 is on-link through our veth end, but nobody owns .5.
    let IpAddr::V4(ns4) = th.ns_ip else {
        unreachable!()
    };
    let o = ns4.octets();
    let silent: IpAddr = format!("{}.{}.{}.5", o[0], o[1], o[2]).parse().unwrap();
    sh(&[
        "ip",
        "route",
        "add",
        &format!("{}.{}.{}.4/30", o[0], o[1], o[2]),
        "dev",
        &th.here,
    ]);
    let grant = IpNet::parse(&format!("{}.{}.{}.0/29", o[0], o[1], o[2])).unwrap();
    let ip = [th.ns_ip];
    let silent = [silent];
    let p = Proxy::start(
        policy(
            &["closed.test:81", "silent.test:80", "gone.test:80"],
            &[("closed.test", &ip), ("silent.test", &silent)],
            Some((&["closed.test", "silent.test"], grant)),
        ),
        |c| c.connect_timeout = Duration::from_secs(1),
    );
    let a = p.auth();
    let (status, answer) = raw(
        p.addr(),
        format!("CONNECT closed.test:81 HTTP/1.1\r\n{a}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status, 502, "{answer}");
    assert!(
        answer.contains("cannot connect") && answer.contains("refused"),
        "{answer}"
    );
    let (status, answer) = raw(
        p.addr(),
        format!("GET http://silent.test/ HTTP/1.1\r\nHost: silent.test\r\n{a}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status, 504, "{answer}");
    assert!(answer.contains("timed out"), "{answer}");
    // No fixed answer, and the test's resolver answers nothing.
    let (status, answer) = raw(
        p.addr(),
        format!("CONNECT gone.test:80 HTTP/1.1\r\n{a}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status, 502, "{answer}");
    assert!(
        answer.contains("upstream: no resolver: gone.test"),
        "{answer}"
    );
    let ev = p.events();
    assert_eq!(
        ev.iter().map(|e| e.status).collect::<Vec<_>>(),
        vec![502, 504, 502]
    );
    assert!(
        ev.iter().all(|e| e.allowed
            && e.verdict == ProxyVerdict::UpstreamFailed
            && !e.refused()
            && e.dialed.is_none()),
        "{ev:?}"
    );
    assert!(p.audit.refused().is_empty(), "{:?}", p.audit.refused());
    let summary = p.audit.summary();
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert!(
        summary[0].starts_with(
            "lockrun: 3 proxy requests the policy allowed failed upstream, not refused: \
             closed.test:81 (allowed by `closed.test:81`; upstream: cannot connect: "
        ) && summary[0].contains(
            "gone.test:80 (allowed by `gone.test:80`; upstream: no resolver: gone.test is not in"
        ) && summary[0]
            .contains("silent.test:80 (allowed by `silent.test:80`; upstream: cannot connect: "),
        "{summary:?}"
    );
}

/// Forwarded requests keep their upstream connection for the next one, but
/// only when that is safe: a second client connection's GET goes out on the
/// first one's upstream connection; a POST never takes a kept connection
/// (and closes those kept to its host); a response with `Connection: close`
/// is not kept; a connection the upstream closed while idle is noticed
/// before use; one it closes on receiving the request (the race the peek
/// cannot see) gets the GET sent again on a fresh connection. Every request
/// is answered 200 and audited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_only_when_safe() {
    let test = "upstream_connections_are_reused_only_when_safe";
    if !can_netns(test) {
        return;
    }
    let mut th = TestHost::new(RANGE);
    // Answers with the port the request came from: the proxy's upstream
    // connection. Closes a connection idle for 3 s; after `/drop-next`, closes
    // that connection on its next request without answering.
    let script = r"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    timeout = 3
    drop = False
    def reply(self):
        if self.drop:
            self.close_connection = True
            return
        body = str(self.client_address[1]).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        if self.path == '/close':
            self.send_header('Connection', 'close')
        self.end_headers()
        self.wfile.write(body)
        self.drop = self.path == '/drop-next'
    def do_GET(self):
        self.reply()
    def do_POST(self):
        self.rfile.read(int(self.headers.get('Content-Length', '0')))
        self.reply()
    def log_message(self, fmt, *args):
        pass
http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H).serve_forever()
";
    th.serve_python(script, 8080, Stdio::null());
    let p = Proxy::start(granted(&th, "reuse.test", 8080), |_| {});
    let a = p.auth();
    // One request per client connection; the upstream port it went out on.
    let port = |method: &'static str, path: &'static str| {
        let body = if method == "POST" {
            "Content-Length: 4\r\n\r\nbody"
        } else {
            "\r\n"
        };
        let req = format!(
            "{method} http://reuse.test:8080{path} HTTP/1.1\r\nHost: reuse.test:8080\r\n{a}Connection: close\r\n{body}"
        );
        let addr = p.addr();
        async move {
            let (status, answer) = raw(addr, req.as_bytes()).await;
            assert_eq!(status, 200, "{method} {path}: {answer}");
            answer
                .rsplit("\r\n\r\n")
                .next()
                .unwrap()
                .parse::<u16>()
                .unwrap_or_else(|_| panic!("{answer}"))
        }
    };
    let p1 = port("GET", "/").await;
    assert_eq!(
        port("GET", "/").await,
        p1,
        "a GET reuses the kept connection"
    );
    let p2 = port("POST", "/").await;
    assert_ne!(p2, p1, "a POST is never sent on a kept connection");
    // The POST closed p1 (not left holding the server) and its own p2 is kept.
    assert_eq!(port("GET", "/close").await, p2, "a GET reuses the POST's");
    let p3 = port("GET", "/").await;
    assert!(
        ![p1, p2].contains(&p3),
        "p1 closed by the POST, p2 by `Connection: close`: {p3}"
    );
    // The upstream closes p3 after 3 s idle: noticed before use.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p4 = port("GET", "/drop-next").await;
    assert!(
        ![p1, p2, p3].contains(&p4),
        "{p4} after the upstream closed {p3}"
    );
    // p4 is kept, and the upstream closes it on the next request unanswered.
    let p5 = port("GET", "/").await;
    assert!(
        ![p1, p2, p3, p4].contains(&p5),
        "sent again on a fresh connection: {p5}"
    );
    let ev = p.events();
    assert_eq!(ev.len(), 7, "one audit event per request: {ev:?}");
    let dialed = SocketAddr::new(th.ns_ip, 8080);
    assert!(
        ev.iter()
            .all(|e| e.allowed && e.status == 200 && e.dialed == Some(dialed)),
        "{ev:?}"
    );
}
