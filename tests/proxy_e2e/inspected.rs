//! Hosts whose requests the proxy inspects (issue 60): their TLS terminated
//! by the proxy with the run's CA, which the run's clients trust through
//! the bundle lockrun points them at, and each request judged inside.
//! The test host serves HTTPS with a CA of the test's own, which the
//! policy names (`[network] tls_ca`) for the proxy to verify it by; a
//! second port serves a certificate of a CA nobody trusts.
//! The policy binds the secret `PH` to api.test and bad.test (`[secrets]`)
//! and gives api.test request rules; `PH`'s value is [`REAL`] in lockrun's
//! environment, and the run gets a placeholder of lockrun's making.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use lockrun::audit::{ProxyEvent, ProxyVerdict, ProxyVia};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::support::proxy::{skip, TestHost};
use crate::support::python::{self, python3};
use crate::{can_run, field, text, Net, Sandbox, RANGE};

const SERVER: &str = include_str!("../support/https_echo.py");
const REAL: &str = "sk-test-REALVALUExxxxyyyyzzzz00";

/// A CA made by the test, and certificates it signs.
struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl TestCa {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let pem = p.self_signed(&key).unwrap().pem();
        Self {
            issuer: Issuer::new(p, key),
            pem,
        }
    }

    /// A certificate for `host` and its key, as PEM files in `dir`.
    fn leaf(&self, host: &str, dir: &Path) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec![host.to_owned()]).unwrap();
        p.use_authority_key_identifier_extension = true;
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            dir.join(format!("{host}.crt")),
            dir.join(format!("{host}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// The world of these tests: `api.test:443` (HTTPS, the test CA) and
/// `bad.test:8443` (HTTPS, a CA nobody trusts), both inspected, and
/// `web.test:80` (plain HTTP, not inspected); the policy trusts the test CA
/// for upstreams. Returns the host, the policy, the test CA's file, and the
/// HTTPS servers' request log.
fn https_host() -> (TestHost, Net<'static>, PathBuf, PathBuf) {
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let dir = th.dir.0.clone();
    let ca = TestCa::new("lockrun test CA");
    let ca_file = dir.join("test-ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let log = dir.join("https.log");
    let script = dir.join("https_echo.py");
    std::fs::write(&script, SERVER).unwrap();
    let untrusted = TestCa::new("nobody trusts this CA");
    for (host, port, by) in [("api.test", 443u16, &ca), ("bad.test", 8443, &untrusted)] {
        let (c, k) = by.leaf(host, &dir);
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &th.ns, python3()])
            .arg(&script)
            .arg(port.to_string())
            .args([&c, &k, &log])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        th.servers.push(child);
        th.wait_port(port);
    }
    let mut net = Net {
        allow: vec!["web.test:80".into()],
        resolve: vec![("web.test", vec![th.ns_ip])],
        private: Some((vec!["web.test"], th.net)),
        ..Net::default()
    };
    net.allow_on("api.test", 443, th.ns_ip);
    net.allow_on("bad.test", 8443, th.ns_ip);
    (th, net, ca_file, log)
}

/// The request rules of api.test: every path the tests
/// ask for but `/refused/…`.
const RULES: &str = r#"["GET /hello.txt", "GET /one", "GET /two", "GET /urllib", "GET /requests", "POST /post", "GET /sse", "GET /ws", "GET /pinned", "GET /pinned-again", "GET /direct", "GET /py", "GET /node"]"#;

/// A sandbox whose policy trusts `ca_file` for upstreams, with `PH` bound
/// to api.test and bad.test.
fn sandbox(net: &Net, ca_file: &Path) -> Sandbox {
    sandbox_binding(net, ca_file, r#"["api.test", "bad.test"]"#)
}

/// A sandbox whose policy trusts `ca_file` for upstreams, with `PH` bound
/// to `hosts` (a TOML list).
fn sandbox_binding(net: &Net, ca_file: &Path, hosts: &str) -> Sandbox {
    let sb = Sandbox::new(net);
    let mut toml = net.toml().replacen(
        "[network]\n",
        &format!("[network]\ntls_ca = \"{}\"\n", ca_file.display()),
        1,
    );
    toml.push_str("[secrets.PH]\nhosts = ");
    toml.push_str(hosts);
    toml.push('\n');
    toml.push_str("[network.requests.\"api.test\"]\nallow = ");
    toml.push_str(RULES);
    toml.push('\n');
    std::fs::write(sb.dir.0.join("policy.toml"), toml).unwrap();
    sb
}

/// lockrun's variables: the secret's real value.
fn env() -> Vec<(&'static str, std::ffi::OsString)> {
    vec![("PH", REAL.into())]
}

/// The placeholder the run held (the script prints `ph=$PH`): never the
/// real value, and of its length.
fn placeholder(stdout: &str) -> String {
    let ph = field(stdout, "ph").to_owned();
    assert_ne!(ph, REAL, "the run held the real value");
    assert_eq!(ph.len(), REAL.len(), "{ph}");
    ph
}

fn inspected<'a>(events: &'a [ProxyEvent], path_part: &str) -> Vec<&'a ProxyEvent> {
    events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Inspected) && e.reason.contains(path_part))
        .collect()
}

#[test]
fn curl_and_python_through_connect_reach_an_inspected_host_with_the_real_value() {
    let test = "curl_and_python_through_connect_reach_an_inspected_host_with_the_real_value";
    if !can_run(test) {
        return;
    }
    let (th, net, ca_file, log) = https_host();
    let sb = sandbox(&net, &ca_file);
    let sse = r#"
import os, time, urllib.request
t0 = time.monotonic(); seen = []
with urllib.request.urlopen("https://api.test/sse") as r:
    for line in r:
        if line.startswith(b"data:"):
            seen.append((line.decode().strip(), time.monotonic() - t0))
print("sse=" + "|".join(s for s, _ in seen))
print("sse_spread=%d" % int((seen[-1][1] - seen[0][1]) * 1000))
"#;
    std::fs::write(sb.wt().join("sse.py"), sse).unwrap();
    let py = r#"
import os, urllib.request, requests
h = {"x-api-key": os.environ["PH"]}
r = urllib.request.urlopen(urllib.request.Request("https://api.test/urllib", headers=h))
print("urllib=" + r.read().decode().replace("\n", "|"))
print("requests=" + requests.get("https://api.test/requests", headers=h).text.replace("\n", "|"))
p = requests.post("https://api.test/post", headers=h, data=b"x" * 100000)
print("post=%d %s" % (p.status_code, p.text.split("\n")[2].split(" ")[0]))
"#;
    std::fs::write(sb.wt().join("py.py"), py).unwrap();
    // A WebSocket handshake through the tunnel, then bytes both ways.
    let ws = r#"
import base64, http.client, os, ssl, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
auth = base64.b64encode(("%s:%s" % (u.username, u.password)).encode()).decode()
c = http.client.HTTPSConnection(u.hostname, u.port, context=ssl.create_default_context())
c.set_tunnel("api.test", 443, headers={"Proxy-Authorization": "Basic " + auth})
c.putrequest("GET", "/ws")
for k, v in [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
             ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("x-api-key", os.environ["PH"])]:
    c.putheader(k, v)
c.endheaders()
r = c.getresponse()
print("ws_status=%d %s" % (r.status, r.getheader("sec-websocket-accept")))
got = b""
for line in (b"one\n", b"two\n"):
    c.sock.sendall(line)
    while not got.endswith(b"\n"):
        got += c.sock.recv(100)
    got += b"|"
print("ws=" + got.decode().replace("\n", ""))
"#;
    std::fs::write(sb.wt().join("ws.py"), ws).unwrap();
    let ca = ca_file.display();
    // `requests`, as the machine has it.
    let machine_python3 = python::machine_python3();
    let out = sb.run_with(
        &env(),
        &format!(
            r#"
        unset LOCKRUN_TEST_SECRET
        echo "ph=$PH"
        echo "curl=$(curl -sS -H "x-api-key: $PH" https://api.test/one https://api.test/two | tr '\n' '|')"
        {machine_python3} "$WT/py.py" 2>&1
        python3 "$WT/sse.py" 2>&1
        python3 "$WT/ws.py" 2>&1
        echo "refused=$(curl -sS -o /dev/null -w '%{{http_code}}' https://api.test/refused/by/rule)"
        echo "untrusted=$(curl -sS -o /dev/null -w '%{{http_code}}' https://bad.test:8443/)"
        echo "elsewhere=$(curl -sS -o /dev/null -w '%{{http_code}}' -H "x-api-key: $PH" http://web.test/hello.txt)"
        curl -sS --cacert {ca} https://api.test/pinned >/dev/null 2>&1; echo "pinned=$?"
        curl -sS --cacert {ca} https://api.test/pinned-again >/dev/null 2>&1
        cat "$SSL_CERT_FILE" "$NODE_EXTRA_CA_CERTS" >"$WT/scan.txt"
        "#
        ),
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let says = |k: &str| field(&stdout, k).to_owned();
    let ctx = format!("{stdout}\n{stderr}");
    let ph = placeholder(&stdout);
    // The run sent only the placeholder, and the host's echo of the value
    // came back masked as the placeholder (what the host got is judged
    // from its log below). Two requests in one curl: one client
    // connection, one upstream connection.
    assert_eq!(
        says("curl"),
        format!("path=/one|key={ph}|auth=None|path=/two|key={ph}|auth=None|"),
        "{ctx}"
    );
    assert_eq!(
        says("urllib"),
        format!("path=/urllib|key={ph}|auth=None|"),
        "{ctx}"
    );
    assert_eq!(
        says("requests"),
        format!("path=/requests|key={ph}|auth=None|"),
        "{ctx}"
    );
    assert_eq!(says("post"), "200 body=100000", "{ctx}");
    // SSE: every event, as they came (0.6 s apart), not at the end at once.
    assert_eq!(
        says("sse"),
        "data: event 0|data: event 1|data: event 2",
        "{ctx}"
    );
    let spread: u64 = says("sse_spread").parse().unwrap();
    assert!(
        spread >= 900,
        "the events arrived together ({spread} ms): {ctx}"
    );
    // WebSocket: the upstream's handshake answer, then both ways.
    assert_eq!(
        says("ws_status"),
        "101 s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
        "{ctx}"
    );
    assert_eq!(says("ws"), "echo:one|echo:two|", "{ctx}");
    // A rule refusal, an untrusted upstream, a secret elsewhere.
    assert_eq!(says("refused"), "403", "{ctx}");
    assert_eq!(says("untrusted"), "502", "{ctx}");
    assert_eq!(says("elsewhere"), "403", "{ctx}");
    // A client that trusts only the host's own CA refuses the run's.
    assert_eq!(says("pinned"), "60", "{ctx}");

    // Judged from outside: what the HTTPS host received.
    let got = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = got.lines().collect();
    let line = |path: &str| {
        lines
            .iter()
            .find(|l| l.split(' ').nth(2) == Some(path))
            .unwrap_or_else(|| panic!("no request for {path}: {got}"))
            .to_owned()
    };
    let port = |l: &str| l.split(' ').next().unwrap().to_owned();
    assert_eq!(
        port(line("/one")),
        port(line("/two")),
        "one upstream connection: {got}"
    );
    // requests came on a client connection of its own, after urllib's had
    // ended (urllib asks to close): the upstream connection urllib's
    // request left was kept for it (the pool). Curl's, further back, may
    // have aged out (30 s) under emulation.
    assert_eq!(
        port(line("/requests")),
        port(line("/urllib")),
        "/requests did not reuse the kept upstream connection: {got}"
    );
    for path in ["/one", "/two", "/urllib", "/requests"] {
        assert!(line(path).ends_with(REAL), "{path}: {got}");
    }
    assert!(!got.contains(&ph), "the placeholder went upstream: {got}");
    for never in ["/refused/by/rule", "/pinned", "/pinned-again"] {
        assert!(
            !lines.iter().any(|l| l.contains(never)),
            "{never} reached the host: {got}"
        );
    }
    assert!(
        !th.requests().iter().any(|r| r.contains("hello.txt")),
        "the placeholder's request reached web.test: {:?}",
        th.requests()
    );

    // The audit log: each inspected request, the refusals with their verdicts.
    let events = sb.proxy_events();
    let allowed: Vec<&ProxyEvent> = events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Inspected) && e.verdict == ProxyVerdict::Allowed)
        .collect();
    assert!(allowed.len() >= 7, "{events:#?}");
    assert!(
        allowed
            .iter()
            .all(|e| e.host == "api.test" && [200, 101].contains(&e.status)),
        "{allowed:#?}"
    );
    assert!(line("/ws").ends_with(REAL), "{got}");
    let rule = inspected(&events, "/refused/by/rule");
    assert!(
        rule.len() == 1 && rule[0].verdict == ProxyVerdict::RuleRefused && rule[0].status == 403,
        "{events:#?}"
    );
    let untrusted: Vec<_> = events
        .iter()
        .filter(|e| e.verdict == ProxyVerdict::UpstreamUntrusted)
        .collect();
    assert!(
        untrusted.len() == 1 && untrusted[0].host == "bad.test" && untrusted[0].status == 502,
        "{events:#?}"
    );
    let elsewhere: Vec<_> = events
        .iter()
        .filter(|e| e.verdict == ProxyVerdict::SecretElsewhere)
        .collect();
    assert!(
        elsewhere.len() == 1 && elsewhere[0].host == "web.test" && elsewhere[0].status == 403,
        "{events:#?}"
    );
    // The client's refusal of the run's certificate: once for the host,
    // and the summary says why.
    let cert: Vec<_> = events
        .iter()
        .filter(|e| e.verdict == ProxyVerdict::ClientRefusedCert)
        .collect();
    assert!(cert.len() == 1 && cert[0].host == "api.test", "{events:#?}");
    assert!(
        stderr.contains("refused the run's certificate for api.test"),
        "the summary does not explain it: {stderr}"
    );
    // The files lockrun gave the run to read hold no real value.
    let scanned = std::fs::read_to_string(sb.wt().join("scan.txt")).unwrap();
    assert!(scanned.contains("BEGIN CERTIFICATE"), "{scanned}");
    assert!(!scanned.contains(REAL), "the bundle holds the real value");
}

#[test]
fn an_inspected_host_reached_transparently_is_intercepted_never_tunnelled() {
    let test = "an_inspected_host_reached_transparently_is_intercepted_never_tunnelled";
    if !can_run(test) {
        return;
    }
    if let Err(needs) = lockrun::kernel::redirect() {
        skip(test, &format!("this kernel does not redirect: {needs}"));
        return;
    }
    let (th, mut net, ca_file, log) = https_host();
    // api.test's port 80 is the test host's plain HTTP server.
    net.allow.push("api.test:80".into());
    let sb = sandbox(&net, &ca_file);
    let node = r#"
fetch("https://api.test/node", {headers: {"x-api-key": process.env.PH}})
  .then(async r => console.log(`node=${r.status} ${(await r.text()).trim().replace(/\n/g, "|")}`),
        e => console.log(`node=error ${e.cause && e.cause.code}`));
"#;
    std::fs::write(sb.wt().join("fetch.js"), node).unwrap();
    let out = sb.run_with(
        &env(),
        r#"
        echo "ph=$PH"
        unset LOCKRUN_TEST_SECRET HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy NO_PROXY no_proxy NODE_USE_ENV_PROXY
        echo "curl=$(curl -sS -H "x-api-key: $PH" https://api.test/direct | tr '\n' '|')"
        echo "python=$(python3 -c 'import os,urllib.request as u;print(u.urlopen(u.Request("https://api.test/py",headers={"x-api-key":os.environ["PH"]})).read().decode().replace("\n","|"))')"
        if command -v node >/dev/null; then node "$WT/fetch.js"; else echo node=absent; fi
        echo "plain=$(curl -sS -w '%{http_code}' "http://api.test/hello.txt?k=$PH" | tr '\n' '|')"
        echo "plain_refused=$(curl -sS -o /dev/null -w '%{http_code}' http://api.test/secret.txt)"
        python3 -c 'import socket; s = socket.create_connection(("api.test", 80)); s.sendall(b"SSH-2.0-x\r\n")
try: print("not_http=" + repr(s.recv(100)))
except ConnectionResetError: print("not_http=reset")'
        "#,
    );
    let stdout = text(&out.stdout);
    let ctx = format!("{stdout}\n{}", text(&out.stderr));
    let says = |k: &str| field(&stdout, k).to_owned();
    let ph = placeholder(&stdout);
    assert_eq!(
        says("curl"),
        format!("path=/direct|key={ph}|auth=None|"),
        "{ctx}"
    );
    assert_eq!(
        says("python"),
        format!("path=/py|key={ph}|auth=None|"),
        "{ctx}"
    );
    if says("node") == "absent" {
        skip(test, "node is not installed: its fetch went untested");
    } else {
        assert_eq!(
            says("node"),
            format!("200 path=/node|key={ph}|auth=None"),
            "{ctx}"
        );
    }
    // Plain HTTP to the inspected host: judged as inside TLS (the
    // placeholder in the query put in, a path no rule allows refused);
    // bytes that are neither TLS nor HTTP: reset, never relayed.
    assert_eq!(says("plain"), "hello from the test host|200", "{ctx}");
    assert_eq!(says("plain_refused"), "403", "{ctx}");
    assert_eq!(says("not_http"), "reset", "{ctx}");
    let plain = th.requests();
    assert!(
        plain.len() == 1 && plain[0].contains(&format!("/hello.txt?k={REAL}")),
        "{plain:?}"
    );
    // Judged from outside: the host got the real value each time (the
    // echoes above came back masked), never the placeholder.
    let got = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!got.contains(&ph), "{got}");
    let clients: &[&str] = if says("node") == "absent" {
        &["/direct", "/py"]
    } else {
        &["/direct", "/py", "/node"]
    };
    for path in clients {
        assert!(
            got.lines()
                .any(|l| l.split(' ').nth(2) == Some(path) && l.ends_with(REAL)),
            "{path}: {got}"
        );
    }
    let events = sb.proxy_events();
    let inspected: Vec<_> = events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Inspected) && e.verdict == ProxyVerdict::Allowed)
        .collect();
    assert!(inspected.len() >= 2, "{events:#?}");
    assert!(
        events.iter().any(|e| e.via == Some(ProxyVia::Transparent)
            && e.host == "api.test"
            && e.verdict == ProxyVerdict::BadRequest
            && e.reason.contains("neither TLS nor HTTP")),
        "{events:#?}"
    );
}

/// An HTTP/2-only test host at `api.test:443` (the test CA's certificate),
/// inspected; returns the host, the policy, the test CA's file and the
/// host's log of streams. `None` when node, which serves it, is absent.
fn h2_host() -> Option<(TestHost, Net<'static>, PathBuf, PathBuf)> {
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return None;
    }
    let mut th = TestHost::new(RANGE);
    let dir = th.dir.0.clone();
    let ca = TestCa::new("lockrun test CA");
    let ca_file = dir.join("test-ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let log = dir.join("h2.log");
    let script = dir.join("h2_echo.js");
    std::fs::write(&script, H2_SERVER).unwrap();
    let (c, k) = ca.leaf("api.test", &dir);
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &th.ns, "node"])
        .arg(&script)
        .arg("443")
        .args([&c, &k, &log])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    th.servers.push(child);
    th.wait_port(443);
    let mut net = Net {
        private: Some((Vec::new(), th.net)),
        ..Net::default()
    };
    net.allow_on("api.test", 443, th.ns_ip);
    Some((th, net, ca_file, log))
}

const H2_SERVER: &str = include_str!("../support/h2_echo.js");

#[test]
fn http2_streams_to_an_inspected_host_are_judged_each_and_go_up_as_http2() {
    let test = "http2_streams_to_an_inspected_host_are_judged_each_and_go_up_as_http2";
    if !can_run(test) {
        return;
    }
    let Some((_th, net, ca_file, log)) = h2_host() else {
        skip(test, "node is not installed: no HTTP/2 test host");
        return;
    };
    let sb = sandbox_binding(&net, &ca_file, r#"["api.test"]"#);
    // One HTTP/2 session, four streams at once (SSE among them, and a body
    // several times the default flow-control window), to the
    // host by its name: not through HTTPS_PROXY (node's http2 reads no
    // proxy variable), so by the transparent redirect where the kernel
    // has it.
    let node = r#"
const http2 = require("node:http2");
const s = http2.connect("https://api.test");
s.on("error", e => console.log(`session=error ${e.code}`));
const get = (path, sent) => new Promise((done, fail) => {
  const r = s.request({":path": path, ":method": sent ? "POST" : "GET", "x-api-key": process.env.PH});
  const t0 = Date.now(), at = [];
  let status = 0, body = "";
  r.setEncoding("utf8");
  r.on("response", h => status = h[":status"]);
  r.on("data", d => { body += d; at.push(Date.now() - t0); });
  r.on("end", () => done({status, body, at}));
  r.on("error", fail);
  r.end(sent);
});
// A stream naming another host on this host's connection.
const misdirected = () => new Promise(done => {
  const r = s.request({":path": "/two", ":authority": "web.test"});
  r.on("response", h => done(h[":status"]));
  r.on("error", e => done(`error ${e.code}`));
  r.resume();
  r.end();
});
const big = Buffer.alloc(300000, "x");
Promise.all([get("/two"), get("/node"), get("/sse"), get("/post", big), misdirected()]).then(([two, node, sse, post, mis]) => {
  console.log(`misdirected=${mis}`);
  for (const [k, r] of [["two", two], ["node", node], ["post", post]])
    console.log(`${k}=${r.status} ${r.body.trim().replace(/\n/g, "|")}`);
  console.log(`sse=${sse.body.trim().split(/\n+/).join("|")}`);
  console.log(`sse_spread=${sse.at[sse.at.length - 1] - sse.at[0]}`);
  s.close();
}, e => { console.log(`streams=error ${e.code || e}`); s.close(); });
"#;
    std::fs::write(sb.wt().join("h2.js"), node).unwrap();
    let redirects = lockrun::kernel::redirect().is_ok();
    let out = sb.run_with(
        &env(),
        &format!(
            r#"
        unset LOCKRUN_TEST_SECRET
        echo "ph=$PH"
        echo "bundle_env=$SSL_CERT_FILE"
        echo "bundle_write=$( (echo x >>"$SSL_CERT_FILE") 2>&1 )"
        echo "curl=$(curl -sS --http2 -w 'v=%{{http_version}}' -H "x-api-key: $PH" https://api.test/one | tr '\n' '|')"
        echo "refused=$(curl -sS --http2 -o /dev/null -w '%{{http_code}} v=%{{http_version}}' https://api.test/refused/by/rule)"
        if {redirects}; then node "$WT/h2.js"; fi
        "#
        ),
    );
    let stdout = text(&out.stdout);
    let ctx = format!("{stdout}\n{}", text(&out.stderr));
    let says = |k: &str| field(&stdout, k).to_owned();
    let ph = placeholder(&stdout);
    // The run's CA bundle is in the run dir, readable, not writable
    // (a read-only mount: EROFS).
    assert!(says("bundle_env").ends_with("/ca-bundle.pem"), "{ctx}");
    assert!(
        says("bundle_write").ends_with("Read-only file system"),
        "{ctx}"
    );
    // curl through CONNECT: HTTP/2 with the proxy, the host's echo of the
    // value masked back to the placeholder.
    assert_eq!(
        says("curl"),
        format!("path=/one|key={ph}|body=0|proto=h2|v=2"),
        "{ctx}"
    );
    assert_eq!(says("refused"), "403 v=2", "{ctx}");
    let mut paths = vec!["/one"];
    if redirects {
        assert_eq!(
            says("two"),
            format!("200 path=/two|key={ph}|body=0|proto=h2"),
            "{ctx}"
        );
        assert_eq!(
            says("node"),
            format!("200 path=/node|key={ph}|body=0|proto=h2"),
            "{ctx}"
        );
        assert_eq!(
            says("sse"),
            "data: event 0|data: event 1|data: event 2",
            "{ctx}"
        );
        let spread: u64 = says("sse_spread").parse().unwrap();
        assert!(
            spread >= 900,
            "the events arrived together ({spread} ms): {ctx}"
        );
        assert_eq!(
            says("post"),
            format!("200 path=/post|key={ph}|body=300000|proto=h2"),
            "{ctx}"
        );
        paths.extend(["/two", "/node", "/sse", "/post"]);
        // Another host named on this host's connection: 421, recorded,
        // never sent (the host saw /two once, from the stream above).
        assert_eq!(says("misdirected"), "421", "{ctx}");
    } else {
        skip(
            test,
            "this kernel does not redirect: node's HTTP/2 session went untested",
        );
    }
    // Judged from outside: each stream reached the host as HTTP/2 with the
    // real value, never the placeholder; node's streams on one upstream
    // connection; the refused ones never.
    let got = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!got.contains(&ph), "the placeholder went upstream: {got}");
    assert!(!got.contains("/refused"), "a refused stream went up: {got}");
    let line = |path: &str| {
        got.lines()
            .find(|l| l.split(' ').nth(2) == Some(path))
            .unwrap_or_else(|| panic!("no stream for {path}: {got}"))
            .to_owned()
    };
    for path in &paths {
        assert!(
            line(path).ends_with(&format!(" h2 {REAL}")),
            "{path}: {got}"
        );
    }
    if redirects {
        let port = |p: &str| line(p).split(' ').next().unwrap().to_owned();
        assert_eq!(port("/two"), port("/node"), "{got}");
        assert_eq!(port("/two"), port("/sse"), "{got}");
        assert_eq!(port("/two"), port("/post"), "{got}");
    }
    // The audit log: each stream, the refusal naming the path.
    let events = sb.proxy_events();
    for path in &paths {
        assert!(
            events.iter().any(|e| e.via == Some(ProxyVia::Inspected)
                && e.verdict == ProxyVerdict::Allowed
                && e.status == 200
                && e.reason.contains(&format!(" {path}` of api.test"))),
            "{path}: {events:#?}"
        );
    }
    let rule = inspected(&events, "/refused/by/rule");
    assert!(
        rule.len() == 1 && rule[0].verdict == ProxyVerdict::RuleRefused && rule[0].status == 403,
        "{events:#?}"
    );
    if redirects {
        let twos = got.lines().filter(|l| l.split(' ').nth(2) == Some("/two"));
        assert_eq!(twos.count(), 1, "{got}");
        let mis = inspected(&events, "names web.test");
        assert!(
            mis.len() == 1 && mis[0].verdict == ProxyVerdict::BadRequest && mis[0].status == 421,
            "{events:#?}"
        );
    }
}
