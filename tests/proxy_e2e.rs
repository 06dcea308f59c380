//! The proxy from inside the real binary (issue 4): `lockrun --policy … --
//! sh -c '…'` with curl, git, python3, pip, npm and cargo as the confined
//! clients, a test host in a network namespace as the only upstream, and every verdict judged
//! from outside — the test host's own logs, the audit log, curl's status
//! and exit code, and connections made from outside the run.
//!
//! Names resolve through the policy's `[network.resolve]` answers, and
//! `localhost` once through the system resolver from `/etc/hosts` (the
//! shipped binary is statically linked: its `getaddrinfo` is checked in a
//! real run); no test touches ambient DNS. Test hosts are veth pairs in 10.213.224–247
//! (one /30 per test; tests/proxy.rs owns 10.213.160–223), removed on
//! every path.
//!
//! Tests that need root and `ip netns` print `skipped: <test>: <reason>`
//! when they cannot run, and fail instead under `CI=true`.

// Tests read top to bottom as scenarios.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::manual_assert
)]

#[path = "support/build.rs"]
mod build;
#[path = "support/python.rs"]
mod python;
#[path = "support/skip.rs"]
mod skip;
#[path = "support/slow.rs"]
mod slow;
#[path = "support/proxy.rs"]
mod support;

use std::fmt::Write as _;
use std::io::Read as _;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use build::TestBuild;
use lockrun::audit::{Destination, Event, KernelNetEvent, ProxyEvent, ProxyVerdict, Record};
use lockrun::policy::IpNet;
use support::{can_netns, skip, Range, Scratch, TestHost};

const BIN: &str = env!("CARGO_BIN_EXE_lockrun");

/// This binary's test hosts: 10.213.224.0/30 … 10.213.247.0/30.
const RANGE: Range = Range {
    first: 224,
    count: 24,
};

/// What one test's policy says about the network.
#[derive(Default)]
struct Net<'a> {
    allow: Vec<String>,
    resolve: Vec<(&'a str, Vec<IpAddr>)>,
    private: Option<(Vec<&'a str>, IpNet)>,
    /// `network.local`: loopback endpoints the run reaches directly.
    local: Vec<SocketAddr>,
    /// `network.expose`: the run's ports this host's processes may reach.
    expose: Vec<u16>,
}

impl<'a> Net<'a> {
    /// Allow `host:port`, resolving to `ip`, in the private grant.
    fn allow_on(&mut self, host: &'a str, port: u16, ip: IpAddr) {
        self.allow.push(format!("{host}:{port}"));
        self.resolve.push((host, vec![ip]));
        self.private.as_mut().unwrap().0.push(host);
    }

    fn toml(&self) -> String {
        let q = |v: &mut dyn Iterator<Item = String>| {
            v.map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
        };
        let mut t = String::from("[network]\n");
        writeln!(t, "allow = [{}]", q(&mut self.allow.iter().cloned())).unwrap();
        writeln!(
            t,
            "local = [{}]",
            q(&mut self.local.iter().map(ToString::to_string))
        )
        .unwrap();
        let expose: Vec<String> = self.expose.iter().map(ToString::to_string).collect();
        writeln!(t, "expose = [{}]", expose.join(", ")).unwrap();
        if let Some((hosts, net)) = &self.private {
            t.push_str("[[network.private]]\n");
            writeln!(
                t,
                "hosts = [{}]",
                q(&mut hosts.iter().map(|h| (*h).to_owned()))
            )
            .unwrap();
            writeln!(t, "network = \"{net}\"").unwrap();
        }
        t.push_str("[network.resolve]\n");
        for (name, ips) in &self.resolve {
            writeln!(
                t,
                "{name:?} = [{}]",
                q(&mut ips.iter().map(ToString::to_string))
            )
            .unwrap();
        }
        t
    }
}

/// One run's world: worktree, state dir, home, policy file and audit log.
struct Sandbox {
    dir: Scratch,
}

impl Sandbox {
    fn new(net: &Net) -> Self {
        let dir = Scratch::new("e2e");
        for d in ["wt", "state", "home"] {
            std::fs::create_dir_all(dir.0.join(d)).unwrap();
        }
        std::fs::write(dir.0.join("policy.toml"), net.toml()).unwrap();
        Self { dir }
    }

    fn wt(&self) -> PathBuf {
        self.dir.0.join("wt")
    }

    fn audit_path(&self) -> PathBuf {
        self.dir.0.join("audit.jsonl")
    }

    /// `lockrun … -- sh -c SCRIPT`; the script sees `$WT`.
    fn cmd(&self, script: &str) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--worktree")
            .arg(self.wt())
            .arg("--state-dir")
            .arg(self.dir.0.join("state"))
            .arg("--policy")
            .arg(self.dir.0.join("policy.toml"))
            .arg("--audit-log")
            .arg(self.audit_path())
            .args(["--", "sh", "-c", script])
            .env("WT", self.wt())
            .env("HOME", self.dir.0.join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .current_dir(self.wt());
        c
    }

    fn run(&self, script: &str) -> Output {
        self.run_with(&[], script)
    }

    /// [`Self::run`], with more variables in the command's environment.
    fn run_with(&self, env: &[(&str, std::ffi::OsString)], script: &str) -> Output {
        let mut cmd = self.cmd(script);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "lockrun -- sh -c {script:?}\nstdout: {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    }

    fn events(&self) -> Vec<Event> {
        std::fs::read_to_string(self.audit_path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Record>(l).unwrap().event)
            .collect()
    }

    fn proxy_events(&self) -> Vec<ProxyEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Proxy(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn kernel_events(&self) -> Vec<KernelNetEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::KernelNetwork(k) => Some(k),
                _ => None,
            })
            .collect()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Root and `ip netns`, and a lockrun that can build a sandbox here: a
/// lockrun built without its eBPF object (plain `cargo test` on a fresh
/// tree) is a named skip, after checking that this is why it refused; any
/// other refusal fails the test.
fn can_run(test: &str) -> bool {
    if !can_netns(test) {
        return false;
    }
    let sb = Sandbox::new(&Net::default());
    let out = sb.cmd("exit 0").output().unwrap();
    if out.status.code() == Some(0) {
        return true;
    }
    let err = text(&out.stderr);
    assert!(
        out.status.code() == Some(125) && err.contains("built without its eBPF object"),
        "lockrun cannot run a command here: {:?}: {err}",
        out.status.code()
    );
    skip(
        test,
        "lockrun was built without its eBPF object (run `cargo xtask build`)",
    );
    false
}

/// A test host serving HTTP on port 80, and a policy allowing `web.test:80`
/// there, with `web.test` granted the host's /30.
fn web_host() -> (TestHost, Net<'static>) {
    let mut th = TestHost::new(RANGE);
    th.serve_http();
    let net = Net {
        allow: vec!["web.test:80".into()],
        resolve: vec![("web.test", vec![th.ns_ip])],
        private: Some((vec!["web.test"], th.net)),
        ..Net::default()
    };
    (th, net)
}

/// The `key=value` lines a script printed.
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    out.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no `{key}=` in:\n{out}"))
}

#[test]
fn curl_git_and_python_inside_reach_the_allowed_test_host() {
    let test = "curl_git_and_python_inside_reach_the_allowed_test_host";
    if !can_run(test) {
        return;
    }
    let (th, mut net) = web_host();
    net.allow_on("git.test", 80, th.ns_ip);

    // A bare repo served as dumb HTTP from the test host.
    let src = Scratch::new("gitsrc");
    let s = src.0.to_str().unwrap();
    let git = |args: &[&str]| support::sh(&[&["git", "-C"], args].concat());
    git(&[s, "init", "-q", "-b", "main"]);
    std::fs::write(src.0.join("README"), "cloned from inside lockrun\n").unwrap();
    git(&[s, "add", "README"]);
    git(&[
        s,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "first",
    ]);
    let bare = th.www().join("repo.git");
    support::sh(&["git", "clone", "-q", "--bare", s, bare.to_str().unwrap()]);
    git(&[bare.to_str().unwrap(), "update-server-info"]);

    let sb = Sandbox::new(&net);
    let out = sb.run(
        r#"
        case "$HTTPS_PROXY" in http://lockrun:?*@127.0.0.1:[0-9]*) echo env=ok ;; *) echo env=bad ;; esac
        echo "no_proxy=[$NO_PROXY$no_proxy]"
        echo "plain=$(curl -sS http://web.test/hello.txt http://web.test/hello.txt | tr '\n' '|')"
        echo "tunnel=$(curl -sS -p -w '%{http_connect}' http://web.test/hello.txt | tr '\n' '|')"
        git clone -q http://git.test/repo.git "$WT/clone" 2>"$WT/git.err"; echo "git=$?"
        echo "python=$(python3 -c 'import urllib.request;print(urllib.request.urlopen("http://web.test/hello.txt").read().decode(),end="")')"
        "#,
    );
    let stdout = text(&out.stdout);
    assert_eq!(field(&stdout, "env"), "ok", "{stdout}");
    assert_eq!(field(&stdout, "no_proxy"), "[]", "{stdout}");
    assert_eq!(
        field(&stdout, "plain"),
        "hello from the test host|hello from the test host|",
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert_eq!(
        field(&stdout, "tunnel"),
        "hello from the test host|200",
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert_eq!(
        field(&stdout, "git"),
        "0",
        "git clone: {}",
        std::fs::read_to_string(sb.wt().join("git.err")).unwrap_or_default()
    );
    assert_eq!(
        std::fs::read_to_string(sb.wt().join("clone/README")).unwrap(),
        "cloned from inside lockrun\n"
    );
    assert_eq!(
        field(&stdout, "python"),
        "hello from the test host",
        "{stdout}\n{}",
        text(&out.stderr)
    );

    // Judged at the test host: it served them all.
    let reqs = th.requests();
    assert_eq!(
        reqs.iter().filter(|l| l.contains("/hello.txt")).count(),
        4,
        "{reqs:?}"
    );
    assert!(
        reqs.iter().any(|l| l.contains("/repo.git/info/refs")),
        "{reqs:?}"
    );
    // And the audit log recorded each as allowed, dialing the checked address.
    let ev = sb.proxy_events();
    let dialed = Some(SocketAddr::new(th.ns_ip, 80));
    for (method, host) in [
        ("GET", "web.test"),
        ("CONNECT", "web.test"),
        ("GET", "git.test"),
    ] {
        assert!(
            ev.iter().any(|e| e.method == method
                && e.host == host
                && e.allowed
                && e.status == 200
                && e.dialed == dialed),
            "no allowed {method} {host} in {ev:?}"
        );
    }
    // git asks libcurl for "any" proxy auth method, so its first request goes
    // without credentials and gets a 407 challenge; nothing else is refused.
    let refused: Vec<_> = ev.iter().filter(|e| !e.allowed).collect();
    assert!(
        refused
            .iter()
            .all(|e| e.status == 407 && e.host == "git.test" && e.dialed.is_none()),
        "{refused:?}"
    );
    // (The end-of-run summary still counts that challenge as a refused
    // request: reported, not pinned here.)
    assert!(
        !text(&out.stderr).contains("web.test"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_unlisted_name_gets_403_and_the_host_hears_nothing() {
    let test = "an_unlisted_name_gets_403_and_the_host_hears_nothing";
    if !can_run(test) {
        return;
    }
    let (th, mut net) = web_host();
    // It resolves to the same host: only the allowlist stands in the way.
    net.resolve.push(("unlisted.test", vec![th.ns_ip]));
    let sb = Sandbox::new(&net);
    let out = sb.run(
        r#"
        echo "control=$(curl -s -o /dev/null -w '%{http_code}' http://web.test/hello.txt)"
        echo "plain=$(curl -s -D "$WT/plain.head" -o "$WT/plain.body" -w '%{http_code}' http://unlisted.test/secret.txt)"
        echo "tunnel=$(curl -s -p -o /dev/null -w '%{http_connect}' http://unlisted.test/secret.txt)"
        "#,
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(field(&stdout, "control"), "200", "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "plain"), "403", "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "tunnel"), "403", "{stdout}\n{stderr}");
    let head = std::fs::read_to_string(sb.wt().join("plain.head")).unwrap();
    assert!(
        head.lines()
            .any(|l| l == "X-Lockrun-Reason: unlisted.test is not in the allowlist"),
        "{head}"
    );

    // The test host served the control and nothing else.
    let reqs = th.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert!(reqs[0].contains("/hello.txt"), "{reqs:?}");

    let refused: Vec<ProxyEvent> = sb
        .proxy_events()
        .into_iter()
        .filter(|e| !e.allowed)
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    for (e, method) in refused.iter().zip(["GET", "CONNECT"]) {
        assert_eq!(e.method, method, "{e:?}");
        assert_eq!(e.host, "unlisted.test");
        assert_eq!(e.port, 80);
        assert_eq!(e.status, 403);
        assert_eq!(e.dialed, None);
        assert_eq!(e.reason, "unlisted.test is not in the allowlist");
    }
    // The end-of-run summary names the refused host.
    assert!(
        stderr
            .lines()
            .any(|l| l == "lockrun: 2 proxy requests refused: unlisted.test:80 ×2"),
        "{stderr}"
    );
}

/// A host the policy allows whose upstream fails (its checked address takes
/// no connection on that port) is the upstream's failure, not a refusal:
/// the client gets 502 with the cause, the audit log records it as allowed
/// with verdict `upstream_failed`, the end-of-run summary says "failed
/// upstream, not refused" apart from the refusals, and `lockrun audit`
/// offers no line to allow what is allowed. Beside it, a refused host is
/// still called refused (the control).
#[test]
fn an_allowed_host_whose_upstream_fails_is_not_called_refused() {
    let test = "an_allowed_host_whose_upstream_fails_is_not_called_refused";
    if !can_run(test) {
        return;
    }
    let (th, mut net) = web_host();
    // Port 81 of the test host: nothing listens there.
    net.allow_on("down.test", 81, th.ns_ip);
    net.resolve.push(("unlisted.test", vec![th.ns_ip]));
    let sb = Sandbox::new(&net);
    let out = sb.run(
        r#"
        echo "down=$(curl -s -D "$WT/down.head" -o /dev/null -w '%{http_code}' http://down.test:81/)"
        echo "unlisted=$(curl -s -o /dev/null -w '%{http_code}' http://unlisted.test/)"
        "#,
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(field(&stdout, "down"), "502", "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "unlisted"), "403", "{stdout}\n{stderr}");
    let head = std::fs::read_to_string(sb.wt().join("down.head")).unwrap();
    assert!(
        head.lines().any(
            |l| l.starts_with("X-Lockrun-Reason: upstream: cannot connect: ")
                && l.contains("Connection refused")
        ),
        "{head}"
    );

    let ev = sb.proxy_events();
    let down: Vec<_> = ev.iter().filter(|e| e.host == "down.test").collect();
    assert_eq!(down.len(), 1, "{ev:?}");
    assert!(down[0].allowed && !down[0].refused(), "{:?}", down[0]);
    assert_eq!(down[0].verdict, ProxyVerdict::UpstreamFailed);
    assert_eq!(down[0].status, 502);

    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("lockrun: "))
        .collect();
    assert_eq!(
        lines[0], "lockrun: 1 proxy request refused: unlisted.test:80",
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("lockrun: details and the policy lines"),
        "{stderr}"
    );
    assert!(
        lines[2].starts_with(
            "lockrun: 1 proxy request the policy allowed failed upstream, not refused: \
             down.test:81 (allowed by `down.test:81`; upstream: cannot connect: "
        ),
        "{stderr}"
    );
    assert_eq!(lines.len(), 3, "{stderr}");

    let audit = Command::new(BIN)
        .args(["audit", sb.audit_path().to_str().unwrap()])
        .output()
        .unwrap();
    let explained = text(&audit.stdout);
    // The refusal with its policy line; the upstream's failure apart,
    // after it, with none.
    let (refusals, failures) = explained
        .split_once("  allowed, but failed upstream (not refused; no policy line changes these):\n")
        .unwrap_or((&explained, ""));
    assert!(
        refusals.contains("unlisted.test:80 — GET → 403")
            && refusals.contains("allow = [\"unlisted.test:80\"]")
            && !refusals.contains("down.test:81 —")
            && !refusals.contains("allow = [\"down.test:81\"]")
            && failures.starts_with(
                "    down.test:81 — GET → 502: allowed by `down.test:81`; upstream: cannot connect: "
            )
            && failures.lines().count() == 1,
        "lockrun audit: {explained}{}",
        text(&audit.stderr)
    );
}

/// A proxy out of descriptors: the command holds more connections to it
/// than lockrun's descriptor limit leaves room for, so each accept retry
/// (every 50 ms) fails with EMFILE. lockrun tells the first failure and
/// then one count when the proxy stops, not a line per retry; the run
/// still ends as the command did.
#[test]
fn a_proxy_out_of_descriptors_tells_the_first_failure_then_a_count() {
    let test = "a_proxy_out_of_descriptors_tells_the_first_failure_then_a_count";
    if !can_run(test) {
        return;
    }
    let sb = Sandbox::new(&Net {
        allow: vec!["web.test:80".into()],
        ..Net::default()
    });
    let hold = r#"
import os, socket, time, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
socks = [socket.create_connection((u.hostname, u.port), timeout=5) for _ in range(58)]
time.sleep(1.5)
print("held", len(socks))
"#;
    let cmd = sb.cmd(&format!("python3 -c '{hold}'"));
    // lockrun holds ~40 descriptors of its own; with a limit of 64 the
    // proxy can accept about 20 of the 58 connections.
    let out = Command::new("prlimit")
        .arg("--nofile=64:64")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(sb.wt())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout), "held 58\n", "{err}");
    let told: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("proxy accept failed"))
        .collect();
    assert_eq!(told.len(), 2, "{err}");
    assert!(
        told[0].contains("Too many open files") && told[0].contains("reported every 10 s"),
        "{err}"
    );
    let n: u64 = told[1]
        .split("failed ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {:?}", told[1]));
    // ~1.5 s of retries every 50 ms.
    assert!(n >= 10, "only {n} failures counted: {err}");
}

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
    support::sh(&[
        "ip",
        "addr",
        "add",
        &format!("{host6}/64"),
        "dev",
        &th.here,
        "nodad",
    ]);
    support::sh(&[
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

#[test]
fn allowed_names_resolving_to_loopback_or_metadata_get_403_and_nothing_is_dialed() {
    let test = "allowed_names_resolving_to_loopback_or_metadata_get_403_and_nothing_is_dialed";
    if !can_run(test) {
        return;
    }
    let (th, mut net) = web_host();
    // Listeners where a dial would land; they must accept nothing.
    let l4 = TcpListener::bind("127.0.0.1:0").unwrap();
    let p4 = l4.local_addr().unwrap().port();
    let l6 = TcpListener::bind("[::1]:0").ok();
    let p6 = l6.as_ref().map_or(p4, |l| l.local_addr().unwrap().port());
    for l in [Some(&l4), l6.as_ref()].into_iter().flatten() {
        l.set_nonblocking(true).unwrap();
    }
    net.allow.extend([
        format!("loop4.test:{p4}"),
        format!("loop6.test:{p6}"),
        "meta.test:80".to_owned(),
    ]);
    net.resolve.extend([
        ("loop4.test", vec!["127.0.0.1".parse().unwrap()]),
        ("loop6.test", vec!["::1".parse().unwrap()]),
        ("meta.test", vec!["169.254.169.254".parse().unwrap()]),
    ]);
    // `localhost` has no fixed answer: the proxy asks the system resolver
    // (`getaddrinfo`, statically linked), which finds it in /etc/hosts.
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let system = hosts.lines().any(|l| {
        let mut w = l.split('#').next().unwrap_or("").split_whitespace();
        w.next().is_some_and(|a| a == "127.0.0.1" || a == "::1") && w.any(|n| n == "localhost")
    });
    if system {
        net.allow.push(format!("localhost:{p4}"));
    } else {
        skip(
            test,
            "the system resolver part: /etc/hosts names no loopback address `localhost`",
        );
    }
    let sb = Sandbox::new(&net);
    let out = sb.run(&format!(
        r#"
        echo "control=$(curl -s -o /dev/null -w '%{{http_code}}' http://web.test/hello.txt)"
        echo "system=$(curl -s -o /dev/null -w '%{{http_code}}' http://localhost:{p4}/)"
        echo "loop4=$(curl -s -o /dev/null -w '%{{http_code}}' http://loop4.test:{p4}/)"
        echo "loop4c=$(curl -s -p -o /dev/null -w '%{{http_connect}}' http://loop4.test:{p4}/)"
        echo "loop6=$(curl -s -o /dev/null -w '%{{http_code}}' http://loop6.test:{p6}/)"
        echo "loop6c=$(curl -s -p -o /dev/null -w '%{{http_connect}}' http://loop6.test:{p6}/)"
        echo "meta=$(curl -s -o /dev/null -w '%{{http_code}}' http://meta.test/latest/meta-data/)"
        echo "metac=$(curl -s -p -o /dev/null -w '%{{http_connect}}' http://meta.test/)"
        "#
    ));
    let stdout = text(&out.stdout);
    assert_eq!(field(&stdout, "control"), "200", "{stdout}");
    for k in ["loop4", "loop4c", "loop6", "loop6c", "meta", "metac"] {
        assert_eq!(field(&stdout, k), "403", "{k}: {stdout}");
    }
    if system {
        assert_eq!(field(&stdout, "system"), "403", "{stdout}");
    }
    // Nothing reached the loopback listeners.
    for l in [Some(&l4), l6.as_ref()].into_iter().flatten() {
        let got = l.accept();
        assert!(
            got.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "a loopback listener was reached: {got:?}"
        );
    }
    let ev = sb.proxy_events();
    for (host, why) in [
        ("loop4.test", "127.0.0.1, loopback"),
        ("loop6.test", "::1, loopback"),
        ("meta.test", "169.254.169.254, link-local"),
    ] {
        let mine: Vec<_> = ev.iter().filter(|e| e.host == host).collect();
        assert_eq!(mine.len(), 2, "{host}: {ev:?}");
        for e in mine {
            assert!(!e.allowed && e.status == 403 && e.dialed.is_none(), "{e:?}");
            assert!(
                e.reason.starts_with(&format!("{host} resolves to {why}")),
                "{host}: {}",
                e.reason
            );
        }
    }
    if system {
        // Refused for what it resolved to, by the system resolver: not a
        // 502 for a lookup that failed.
        let mine: Vec<_> = ev.iter().filter(|e| e.host == "localhost").collect();
        assert_eq!(mine.len(), 1, "localhost: {ev:?}");
        let e = mine[0];
        assert!(!e.allowed && e.status == 403 && e.dialed.is_none(), "{e:?}");
        assert!(
            e.reason.starts_with("localhost resolves to ") && e.reason.contains(", loopback"),
            "localhost: {}",
            e.reason
        );
    }
    assert_eq!(th.requests().len(), 1, "{:?}", th.requests());
}

#[test]
fn only_the_run_may_use_its_proxy() {
    let test = "only_the_run_may_use_its_proxy";
    if !can_run(test) {
        return;
    }
    let (th, net) = web_host();
    let sb = Sandbox::new(&net);
    // The run publishes its proxy's host:port (never the secret), waits for
    // the outside attempts, then uses the proxy itself.
    let mut child = sb
        .cmd(
            r#"
            echo "${HTTPS_PROXY##*@}" > "$WT/addr.part" && mv "$WT/addr.part" "$WT/addr"
            i=0; while [ ! -e "$WT/go" ] && [ $i -lt $((600 * ${LOCKRUN_TEST_SLOWDOWN:-1})) ]; do sleep 0.05; i=$((i+1)); done
            echo "curl=$(curl -s -o /dev/null -w '%{http_code}' http://web.test/hello.txt)"
            echo "tunnel=$(curl -s -p -o /dev/null -w '%{http_connect}' http://web.test/hello.txt)"
            echo "python=$(python3 -c 'import urllib.request;print(urllib.request.urlopen("http://web.test/hello.txt").status)')"
            "#,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr_file = sb.wt().join("addr");
    let deadline = Instant::now() + slow::patience(Duration::from_secs(20));
    while !addr_file.exists() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the run never published its proxy address: {}",
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let addr: SocketAddr = std::fs::read_to_string(&addr_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");

    // From outside the run: no secret, and a wrong one.
    let outside = |proxy: &str, connect: bool| -> String {
        let mut c = Command::new("curl");
        c.args(["-s", "-x", proxy, "-o", "/dev/null", "-D", "-", "-w"]);
        if connect {
            c.args(["%{http_connect}", "-p"]);
        } else {
            c.arg("%{http_code}");
        }
        let out = c.arg("http://web.test/secret.txt").output().unwrap();
        text(&out.stdout)
    };
    for proxy in [
        format!("http://{addr}"),
        format!("http://lockrun:wrong@{addr}"),
        format!("http://lockrun:@{addr}"),
    ] {
        for connect in [false, true] {
            let got = outside(&proxy, connect);
            assert!(
                got.ends_with("407"),
                "via {proxy} (CONNECT: {connect}): {got}"
            );
            assert!(
                got.contains("Proxy-Authenticate: Basic realm=\"lockrun\""),
                "{got}"
            );
        }
    }
    // A raw CONNECT with no header at all.
    {
        use std::io::Write as _;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"CONNECT web.test:80 HTTP/1.1\r\nHost: web.test:80\r\n\r\n")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 407 "), "{answer}");
    }
    assert_eq!(
        th.requests(),
        Vec::<String>::new(),
        "outside reached the host"
    );

    // Inside, the same proxy still works.
    std::fs::write(sb.wt().join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(field(&stdout, "curl"), "200", "{stdout}");
    assert_eq!(field(&stdout, "tunnel"), "200", "{stdout}");
    assert_eq!(field(&stdout, "python"), "200", "{stdout}");
    let reqs = th.requests();
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    assert!(!reqs.iter().any(|l| l.contains("secret")), "{reqs:?}");

    let ev = sb.proxy_events();
    let unauth: Vec<_> = ev.iter().filter(|e| e.status == 407).collect();
    assert_eq!(unauth.len(), 7, "{ev:?}");
    assert!(
        unauth.iter().all(|e| !e.allowed && e.dialed.is_none()),
        "{unauth:?}"
    );
}

/// Writes three small package registries under `www` as static files, each
/// naming `host` in its download links: a PEP 503 simple index with one
/// wheel (`lrtest`), an npm registry with one package (`lrpkg`), and a
/// cargo sparse registry with one crate (`lrcrate`). Each package's code
/// says the same greeting; hashes are the real ones, which each tool checks.
const REGISTRIES: &str = r#"
import base64, hashlib, io, json, os, sys, tarfile, zipfile
www, host = sys.argv[1], sys.argv[2]
GREETING = "installed through the run's proxy"
def put(path, data):
    path = os.path.join(www, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return data
def tgz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name); info.size = len(data); info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
# pip: a wheel and its simple-index page
files = {
    "lrtest/__init__.py": f"GREETING = {GREETING!r}\n".encode(),
    "lrtest-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: lrtest\nVersion: 1.0\n",
    "lrtest-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: lockrun-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}" for n, d in files.items()]
files["lrtest-1.0.dist-info/RECORD"] = ("\n".join(record + ["lrtest-1.0.dist-info/RECORD,,"]) + "\n").encode()
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
whl = put("pypi/files/lrtest-1.0-py3-none-any.whl", buf.getvalue())
put("pypi/simple/lrtest/index.html", f'<a href="../../files/lrtest-1.0-py3-none-any.whl#sha256={hashlib.sha256(whl).hexdigest()}">lrtest-1.0-py3-none-any.whl</a>\n'.encode())
# npm: a tarball and its packument
t = put("npm-files/lrpkg-1.0.0.tgz", tgz({
    "package/package.json": b'{"name":"lrpkg","version":"1.0.0","main":"index.js"}\n',
    "package/index.js": f"module.exports = {json.dumps(GREETING)};\n".encode(),
}))
put("npm/lrpkg", json.dumps({"name": "lrpkg", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": {
    "name": "lrpkg", "version": "1.0.0", "main": "index.js",
    "dist": {"tarball": f"https://{host}/npm-files/lrpkg-1.0.0.tgz", "shasum": hashlib.sha1(t).hexdigest(),
             "integrity": "sha512-" + base64.b64encode(hashlib.sha512(t).digest()).decode()}}}}).encode())
# cargo: a sparse index and its .crate
c = put("crates/dl/lrcrate/0.1.0/download", tgz({
    "lrcrate-0.1.0/Cargo.toml": b'[package]\nname = "lrcrate"\nversion = "0.1.0"\nedition = "2021"\n',
    "lrcrate-0.1.0/src/lib.rs": f"pub const GREETING: &str = {json.dumps(GREETING)};\n".encode(),
}))
put("crates/index/config.json", json.dumps({"dl": f"https://{host}/crates/dl/{{crate}}/{{version}}/download"}).encode())
put("crates/index/lr/cr/lrcrate", (json.dumps({"name": "lrcrate", "vers": "0.1.0", "deps": [], "cksum": hashlib.sha256(c).hexdigest(), "features": {}, "yanked": False}) + "\n").encode())
"#;

/// The package managers agents run most, each installing one package from
/// a registry on the allowed test host over HTTPS (through a CONNECT tunnel,
/// certificates checked end to end against a test CA), and the same tools
/// pointed at unlisted names for that host: refused with 403 by the proxy,
/// nothing installed, nothing heard by the host.
#[test]
fn pip_npm_and_cargo_inside_install_from_an_allowed_registry_and_not_from_an_unlisted_one() {
    let test =
        "pip_npm_and_cargo_inside_install_from_an_allowed_registry_and_not_from_an_unlisted_one";
    if !can_run(test) {
        return;
    }
    for tool in ["npm", "node"] {
        if Command::new(tool).arg("--version").output().is_err() {
            skip(test, &format!("{tool} is not installed"));
            return;
        }
    }
    // The registries are served over HTTPS on 443, as real ones are: every
    // tool reaches them through a CONNECT tunnel, and checks the test CA's
    // certificate for pkgs.test end to end, through the proxy.
    let mut th = TestHost::new(RANGE);
    let tls = Scratch::new("tls");
    // A test CA, and the test host's certificate signed by it, valid for
    // every name the tools use: only the allowlist may stop them.
    let (ca, cert, key) = (
        tls.0.join("ca.pem"),
        tls.0.join("cert.pem"),
        tls.0.join("key.pem"),
    );
    support::sh(&[
        "sh",
        "-ec",
        r#"cd "$0"
        ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
        openssl req -x509 $ec -days 2 -subj "/CN=lockrun test CA" -keyout ca.key -out ca.pem 2>/dev/null
        openssl req $ec -subj /CN=pkgs.test -keyout key.pem -out leaf.csr 2>/dev/null
        printf 'subjectAltName=DNS:pkgs.test,DNS:pypi-unlisted.test,DNS:npm-unlisted.test,DNS:crates-unlisted.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > leaf.ext
        openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile leaf.ext -out cert.pem 2>/dev/null"#,
        tls.0.to_str().unwrap(),
    ]);
    std::fs::create_dir_all(th.www()).unwrap();
    let log = std::fs::File::create(th.access_log()).unwrap();
    th.serve_python(
        &format!(
            "import functools, http.server, ssl\n\
             ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
             ctx.load_cert_chain({cert:?}, {key:?})\n\
             h = functools.partial(http.server.SimpleHTTPRequestHandler, directory={www:?})\n\
             s = http.server.ThreadingHTTPServer(('{ip}', 443), h)\n\
             s.socket = ctx.wrap_socket(s.socket, server_side=True)\n\
             s.serve_forever()\n",
            www = th.www(),
            ip = th.ns_ip,
        ),
        443,
        log,
    );
    let mut net = Net {
        allow: vec!["pkgs.test".into()],
        resolve: vec![("pkgs.test", vec![th.ns_ip])],
        private: Some((vec!["pkgs.test"], th.net)),
        ..Net::default()
    };
    // Unlisted, each tool its own name and path: they resolve to the same
    // host, so only the allowlist stands between them and its files.
    for unlisted in [
        "pypi-unlisted.test",
        "npm-unlisted.test",
        "crates-unlisted.test",
    ] {
        net.resolve.push((unlisted, vec![th.ns_ip]));
    }
    let gen = python::python3_command()
        .args(["-c", REGISTRIES])
        .arg(th.www())
        .arg("pkgs.test")
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", text(&gen.stderr));

    let sb = Sandbox::new(&net);
    // A cargo project depending on the registry's crate, and one on the
    // unlisted copy of it.
    for (dir, index) in [
        ("app", "https://pkgs.test/crates/index/"),
        (
            "app-unlisted",
            "https://crates-unlisted.test/unlisted/crates/index/",
        ),
    ] {
        let app = sb.wt().join(dir);
        std::fs::create_dir_all(app.join("src")).unwrap();
        std::fs::create_dir_all(app.join(".cargo")).unwrap();
        std::fs::write(
            app.join("Cargo.toml"),
            format!("[package]\nname = \"{dir}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\nlrcrate = {{ version = \"0.1\", registry = \"lrtest\" }}\n"),
        )
        .unwrap();
        std::fs::write(
            app.join("src/main.rs"),
            "fn main() { println!(\"{}\", lrcrate::GREETING); }\n",
        )
        .unwrap();
        std::fs::write(
            app.join(".cargo/config.toml"),
            format!("[registries.lrtest]\nindex = \"sparse+{index}\"\n"),
        )
        .unwrap();
    }
    // The toolchain's own cargo and rustc, not a version manager's proxy
    // (which would look for its home under the test's HOME): first on PATH
    // too, as pip runs `rustc --version` for its user agent.
    let cargo = PathBuf::from(env!("CARGO"));
    let rustc = cargo.with_file_name("rustc");
    let rustc = if rustc.exists() {
        rustc
    } else {
        PathBuf::from("rustc")
    };
    // Each tool's own cache goes to the run's temp dir; pip and npm read no
    // machine-wide configuration that could point them elsewhere.
    let out = sb.run_with(
        &[
            ("PY", python::python3().into()),
            ("CARGO_BIN", cargo.into_os_string()),
            ("RUSTC", rustc.into_os_string()),
            ("CA", ca.into_os_string()),
        ],
        r#"
        unset $(env | sed -n 's/^\(PIP_[A-Za-z_]*\)=.*/\1/p')
        export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
        export npm_config_cache="$TMPDIR/npm-cache" npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false
        # the machine's CA bundle variables would override pip's --cert
        unset REQUESTS_CA_BUNDLE CURL_CA_BUNDLE SSL_CERT_FILE SSL_CERT_DIR
        export npm_config_cafile="$CA" npm_config_fetch_retries=0
        export CARGO_HOME="$TMPDIR/cargo-home" CARGO_TERM_COLOR=never CARGO_HTTP_CAINFO="$CA"
        export PATH="$(dirname "$RUSTC"):$PATH"
        cd "$WT"
        "$PY" -m pip install -q --cert "$CA" --index-url https://pkgs.test/pypi/simple/ --target "$WT/site" lrtest >"$WT/pip.out" 2>&1; echo "pip=$?"
        echo "pip_import=$(PYTHONPATH="$WT/site" "$PY" -c 'import lrtest; print(lrtest.GREETING)')"
        npm install --registry https://pkgs.test/npm/ lrpkg >"$WT/npm.out" 2>&1; echo "npm=$?"
        echo "npm_require=$(node -e 'console.log(require("lrpkg"))')"
        (cd app && "$CARGO_BIN" run -q >"$WT/cargo.run" 2>"$WT/cargo.out"); echo "cargo=$?"
        echo "cargo_run=$(cat "$WT/cargo.run")"

        "$PY" -m pip install --retries 0 --cert "$CA" --index-url https://pypi-unlisted.test/unlisted/pypi/simple/ --target "$WT/site-unlisted" lrtest >"$WT/pip-unlisted.out" 2>&1; echo "pip_unlisted=$?"
        npm install --prefix "$WT/npm-unlisted" --registry https://npm-unlisted.test/unlisted/npm/ lrpkg >"$WT/npm-unlisted.out" 2>&1; echo "npm_unlisted=$?"
        (cd app-unlisted && CARGO_NET_RETRY=0 "$CARGO_BIN" build >"$WT/cargo-unlisted.out" 2>&1); echo "cargo_unlisted=$?"
        "#,
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let log = |name: &str| std::fs::read_to_string(sb.wt().join(name)).unwrap_or_default();
    let greeting = "installed through the run's proxy";

    // Controls: each tool installed from the allowed registry, and the code
    // it installed runs.
    assert_eq!(field(&stdout, "pip"), "0", "pip: {}", log("pip.out"));
    assert_eq!(field(&stdout, "pip_import"), greeting, "{stdout}\n{stderr}");
    assert_eq!(field(&stdout, "npm"), "0", "npm: {}", log("npm.out"));
    assert_eq!(
        field(&stdout, "npm_require"),
        greeting,
        "{stdout}\n{stderr}"
    );
    assert_eq!(field(&stdout, "cargo"), "0", "cargo: {}", log("cargo.out"));
    assert_eq!(field(&stdout, "cargo_run"), greeting, "{stdout}\n{stderr}");
    let reqs = th.requests();
    for path in [
        "/pypi/simple/lrtest/",
        "/pypi/files/lrtest-1.0-py3-none-any.whl",
        "/npm/lrpkg",
        "/npm-files/lrpkg-1.0.0.tgz",
        "/crates/index/config.json",
        "/crates/index/lr/cr/lrcrate",
        "/crates/dl/lrcrate/0.1.0/download",
    ] {
        assert!(
            reqs.iter().any(|l| l.contains(&format!("\"GET {path} "))),
            "the test host never served {path}: {reqs:?}"
        );
    }

    // The unlisted registries: each tool failed, installed nothing, and the
    // test host heard none of it. npm and cargo say 403 in their own words;
    // pip only says it found no version (the 403 is in its debug log), so
    // lockrun's own summary is where its user sees why.
    for (tool, out_file, installed, says_403) in [
        (
            "pip_unlisted",
            "pip-unlisted.out",
            "site-unlisted/lrtest",
            false,
        ),
        (
            "npm_unlisted",
            "npm-unlisted.out",
            "npm-unlisted/node_modules/lrpkg",
            true,
        ),
        (
            "cargo_unlisted",
            "cargo-unlisted.out",
            "app-unlisted/target/debug/app-unlisted",
            true,
        ),
    ] {
        let said = log(out_file);
        assert_ne!(field(&stdout, tool), "0", "{tool}: {said}");
        assert!(
            !says_403 || said.contains("403"),
            "{tool} does not say 403: {said}"
        );
        assert!(
            !sb.wt().join(installed).exists(),
            "{tool} installed {installed}"
        );
    }
    let summary = stderr
        .lines()
        .find(|l| l.contains("proxy requests refused"))
        .unwrap_or_else(|| panic!("no summary of the refused requests: {stderr}"));
    for unlisted in [
        "pypi-unlisted.test:443",
        "npm-unlisted.test:443",
        "crates-unlisted.test:443",
    ] {
        assert!(summary.contains(unlisted), "{summary}");
    }
    assert!(
        !th.requests().iter().any(|l| l.contains("/unlisted/")),
        "an unlisted registry was reached: {:?}",
        th.requests()
    );

    // The audit log: every allowed request dialed the checked address; the
    // refusals are the unlisted names, each a 403 that dialed nothing.
    let ev = sb.proxy_events();
    let dialed = Some(SocketAddr::new(th.ns_ip, 443));
    assert!(
        ev.iter()
            .filter(|e| e.allowed)
            .all(|e| e.host == "pkgs.test" && e.dialed == dialed),
        "{ev:?}"
    );
    for unlisted in [
        "pypi-unlisted.test",
        "npm-unlisted.test",
        "crates-unlisted.test",
    ] {
        let refused: Vec<_> = ev.iter().filter(|e| e.host == unlisted).collect();
        assert!(!refused.is_empty(), "no request for {unlisted} in {ev:?}");
        for e in refused {
            assert!(!e.allowed, "{e:?}");
            assert_eq!(e.status, 403, "{e:?}");
            assert_eq!(e.dialed, None, "{e:?}");
            assert_eq!(e.reason, format!("{unlisted} is not in the allowlist"));
        }
    }
    assert!(
        ev.iter()
            .all(|e| e.allowed || e.host.ends_with("-unlisted.test")),
        "{ev:?}"
    );
    // Nothing else was refused: no file or connection the tools needed.
    let other: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("refused") && !l.contains("proxy request"))
        .collect();
    assert!(other.is_empty(), "{stderr}");
}
