//! Clients inside a run (curl, git, python3, pip, npm, cargo) through the
//! run's proxy: an allowed test host is reached, an unlisted or local name is
//! refused, an upstream failure is told as such, and only the run may use its proxy.

use std::io::Read as _;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockrun::audit::{ProxyEvent, ProxyVerdict};

use crate::support::proxy::{skip, Scratch, TestHost};
use crate::support::{proxy, python, slow};
use crate::{can_run, field, text, web_host, Net, Sandbox, BIN, RANGE};

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
    let git = |args: &[&str]| proxy::sh(&[&["git", "-C"], args].concat());
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
    proxy::sh(&["git", "clone", "-q", "--bare", s, bare.to_str().unwrap()]);
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
    // lockrun holds descriptors of its own; with a limit of 64 the proxy
    // can accept only some of the 58 connections.
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
    // The command holds its connections 1.5 s: the proxy's retries, every
    // 50 ms, fail all that while.
    assert!(n >= 10, "only {n} failures counted: {err}");
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
    proxy::sh(&[
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
