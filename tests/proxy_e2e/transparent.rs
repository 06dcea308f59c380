//! Clients that ignore the proxy variables (issue 59): inside a run with
//! the variables removed, curl `--noproxy '*'`, Python's
//! `socket.create_connection`, Node's `fetch` and `ssh` reach an allowed
//! name through the run's resolver and the kernel's redirection to the
//! proxy; an unlisted name gets NXDOMAIN at once, an allowed name's other
//! port is reset by the proxy, an IP literal is refused by the kernel
//! (`EPERM`), and a connection whose first bytes name another host is
//! refused as fronted. Each is recorded; a control beside each succeeds.
//! Judged from outside too: the test host's logs, and a UDP listener
//! standing in for a resolver, which must receive nothing.

use std::net::{SocketAddr, UdpSocket};
use std::process::Stdio;
use std::time::Duration;

use lockrun::audit::{KernelNetEvent, ProxyBasis, ProxyEvent, ProxyVerdict, ProxyVia};

use crate::support::proxy::{skip, TestHost};
use crate::support::world::wait_for;
use crate::{can_run, field, text, web_host, Sandbox};

const PROBE: &str = include_str!("../support/transparent_probe.py");

/// Removes every proxy variable: the clients below must do without.
const UNPROXIED: &str = "unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy NO_PROXY no_proxy NODE_USE_ENV_PROXY";

/// [`can_run`], and a kernel lockrun redirects on (it says which it needs
/// otherwise: a run there keeps refusing these clients, as before).
fn can_redirect(test: &str) -> bool {
    if !can_run(test) {
        return false;
    }
    match lockrun::kernel::redirect() {
        Ok(()) => true,
        Err(needs) => {
            skip(test, &format!("this kernel does not redirect: {needs}"));
            false
        }
    }
}

/// Write the probe into the sandbox's worktree; the command that runs it.
fn probe(sb: &Sandbox, ops: &[&str]) -> String {
    std::fs::write(sb.wt().join("probe.py"), PROBE).unwrap();
    format!("python3 \"$WT/probe.py\" {}", ops.join(" "))
}

fn transparent(events: &[ProxyEvent]) -> Vec<&ProxyEvent> {
    events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Transparent))
        .collect()
}

fn refused_by_kernel(events: &[KernelNetEvent], dest: SocketAddr) -> bool {
    events
        .iter()
        .any(|k| k.hook == "connect4" && k.destination == lockrun::audit::Destination::Inet(dest))
}

#[test]
fn curl_python_and_node_reach_an_allowed_name_without_proxy_variables() {
    let test = "curl_python_and_node_reach_an_allowed_name_without_proxy_variables";
    if !can_redirect(test) {
        return;
    }
    let (th, net) = web_host();
    let sb = Sandbox::new(&net);
    let literal = format!("{}", th.ns_ip);
    let py = probe(
        &sb,
        &[
            "resolve,web.test",
            "resolve,unlisted.test",
            "get,web.test,80",
            "get,unlisted.test,80",
            "get,web.test,81",
            &format!("get,{literal},80"),
        ],
    );
    let node = r#"
const go = (u) => fetch(u).then(async r => `${r.status} ${(await r.text()).trim()}`, e => `error ${e.cause && e.cause.code}`);
(async () => {
  for (const [k, u] of [["allowed", "http://web.test/hello.txt"], ["unlisted", "http://unlisted.test/"], ["port", "http://web.test:81/"], ["literal", "http://LITERAL/hello.txt"]])
    console.log(`node_${k}=${await go(u)}`);
})();
"#
    .replace("LITERAL", &literal);
    std::fs::write(sb.wt().join("fetch.js"), node).unwrap();
    let out = sb.run(&format!(
        r#"
        {UNPROXIED}
        echo "vars=[$(env | grep -ci _proxy)]"
        echo "getent=$(getent hosts web.test | cut -d' ' -f1)"
        getent hosts unlisted.test; echo "getent_unlisted=$?"
        echo "curl=$(curl -sS --noproxy '*' http://web.test/hello.txt 2>&1)"
        curl -sS --noproxy '*' -o /dev/null http://unlisted.test/ 2>/dev/null; echo "curl_unlisted=$?"
        said=$(curl -sS --noproxy '*' -o /dev/null http://web.test:81/ 2>&1); rc=$?
        echo "curl_port=$(echo "$said" | tr -d '\n') $rc"
        curl -sS --noproxy '*' -o /dev/null http://{literal}/hello.txt 2>/dev/null; echo "curl_literal=$?"
        {py}
        if command -v node >/dev/null; then node "$WT/fetch.js"; else echo node_allowed=absent; fi
        "#
    ));
    let stdout = text(&out.stdout);
    let err = text(&out.stderr);
    let says = |k: &str| field(&stdout, k).to_owned();
    assert_eq!(says("vars"), "[0]", "{stdout}");
    // The name resolves to an address of lockrun's choosing; an unlisted
    // one is NXDOMAIN (EAI_NONAME, -2), not a timeout (EAI_AGAIN, -3).
    assert!(says("getent").starts_with("198.18."), "{stdout}\n{err}");
    assert!(
        says("resolve,web.test").starts_with("addr 198.18."),
        "{stdout}"
    );
    assert_eq!(says("getent_unlisted"), "2", "{stdout}");
    assert_eq!(says("resolve,unlisted.test"), "gaierror -2", "{stdout}");
    // curl: the control, then no name (6), reset by the proxy, refused by
    // the kernel (7).
    assert_eq!(says("curl"), "hello from the test host", "{stdout}\n{err}");
    assert_eq!(says("curl_unlisted"), "6", "{stdout}");
    // Reset by the proxy, which accepted the connection first: curl sees
    // the reset as its connect completes (7), as it sends (55) or as it
    // reads (56), by how soon it comes; the proxy's record below and the
    // kernel's silence about port 81 tell it from the kernel's refusal.
    let port = says("curl_port");
    assert!(
        (port.contains("Connection reset by peer")
            && (port.ends_with(" 55") || port.ends_with(" 56")))
            || (port.contains("Failed to connect to web.test port 81") && port.ends_with(" 7")),
        "{stdout}"
    );
    assert_eq!(says("curl_literal"), "7", "{stdout}");
    // Python by name.
    assert_eq!(says("get,web.test,80"), "ok HTTP/1.0 200 OK", "{stdout}");
    assert_eq!(says("get,unlisted.test,80"), "gaierror -2", "{stdout}");
    assert_eq!(says("get,web.test,81"), "oserror ECONNRESET", "{stdout}");
    assert_eq!(
        says(&format!("get,{literal},80")),
        "oserror EPERM",
        "{stdout}"
    );
    // Node's fetch (undici), which ignores the variables.
    if says("node_allowed") == "absent" {
        skip(test, "node is not installed: its fetch went untested");
    } else {
        assert_eq!(
            says("node_allowed"),
            "200 hello from the test host",
            "{stdout}"
        );
        assert_eq!(says("node_unlisted"), "error ENOTFOUND", "{stdout}");
        assert_eq!(says("node_port"), "error ECONNRESET", "{stdout}");
        assert_eq!(says("node_literal"), "error EPERM", "{stdout}");
    }

    // From outside: the test host served the controls only.
    let served = th.requests();
    let n_clients = if says("node_allowed") == "absent" {
        2
    } else {
        3
    };
    assert_eq!(served.len(), n_clients, "{served:#?}");
    // The audit log: allowed by Host, the other port refused, the
    // unlisted name refused by the resolver, the literal by the kernel.
    let events = sb.proxy_events();
    let t = transparent(&events);
    assert!(
        t.iter().any(|e| e.verdict == ProxyVerdict::Allowed
            && e.host == "web.test"
            && e.port == 80
            && e.basis == Some(ProxyBasis::Host)
            && e.dialed == Some(SocketAddr::new(th.ns_ip, 80))),
        "{t:#?}"
    );
    assert!(
        t.iter().any(|e| e.verdict == ProxyVerdict::PortNotAllowed
            && e.host == "web.test"
            && e.port == 81),
        "{t:#?}"
    );
    assert!(
        events.iter().any(|e| e.via == Some(ProxyVia::Dns)
            && e.host == "unlisted.test"
            && e.verdict == ProxyVerdict::NotListed),
        "{events:#?}"
    );
    let kernel = sb.kernel_events();
    assert!(
        refused_by_kernel(&kernel, SocketAddr::new(th.ns_ip, 80)),
        "{kernel:#?}"
    );
    assert!(
        !kernel.iter().any(|k| matches!(
            k.destination,
            lockrun::audit::Destination::Inet(a) if a.port() == 81
        )),
        "{kernel:#?}"
    );
    assert!(err.contains("unlisted.test (DNS)"), "{err}");
    assert!(err.contains("web.test:81"), "{err}");
}

/// A UDP listener on the test host's port 53, standing in for a resolver:
/// its packets, as it logs them.
fn stand_in_resolver(th: &mut TestHost) -> std::path::PathBuf {
    let log = th.dir.0.join("dns.log");
    let errors = th.dir.0.join("dns.err");
    let script = format!(
        "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',53))\nf=open({:?},'a',buffering=1)\nf.write('ready\\n')\nwhile True:\n  d,a=s.recvfrom(2048)\n  f.write('packet %d bytes from %s\\n' % (len(d),a[0]))\n",
        log.display().to_string()
    );
    let child = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &th.ns,
            crate::support::python::python3(),
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errors).unwrap())
        .spawn()
        .unwrap();
    th.servers.push(child);
    wait_for("the stand-in resolver to start", || {
        let failed = std::fs::read_to_string(&errors).unwrap_or_default();
        assert!(failed.is_empty(), "the stand-in resolver failed: {failed}");
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ready"))
    });
    log
}

/// The run's DNS, sent anywhere (here: straight to a resolver of the test
/// host, over UDP and TCP), is answered by lockrun: NXDOMAIN for an
/// unlisted name, an address for an allowed one, seemingly from the server
/// asked; the stand-in resolver receives nothing from the run, though it
/// receives the same query sent from outside (the control).
#[test]
fn the_runs_dns_never_leaves() {
    let test = "the_runs_dns_never_leaves";
    if !can_redirect(test) {
        return;
    }
    let (mut th, net) = web_host();
    let log = stand_in_resolver(&mut th);
    let ns = th.ns_ip.to_string();
    let sb = Sandbox::new(&net);
    let py = probe(
        &sb,
        &[
            &format!("udp,{ns},unlisted.test"),
            &format!("udp,{ns},web.test"),
            &format!("tcp,{ns},unlisted.test"),
            &format!("udp,{ns},secret-data.exfil.example"),
        ],
    );
    let out = sb.run(&format!("{UNPROXIED}\n{py}\n"));
    let stdout = text(&out.stdout);
    let says = |k: &str| field(&stdout, &k.replace("NS", &ns)).to_owned();
    assert_eq!(
        says("udp,NS,unlisted.test"),
        format!("rcode 3 from {ns}:53 answers 0"),
        "{stdout}"
    );
    assert_eq!(
        says("udp,NS,web.test"),
        format!("rcode 0 from {ns}:53 answers 1"),
        "{stdout}"
    );
    assert_eq!(
        says("tcp,NS,unlisted.test"),
        "rcode 3 answers 0",
        "{stdout}"
    );
    assert_eq!(
        says("udp,NS,secret-data.exfil.example"),
        format!("rcode 3 from {ns}:53 answers 0"),
        "{stdout}"
    );
    let from_run = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        from_run, "ready\n",
        "the stand-in resolver got the run's packets"
    );
    // The control: the same query from outside the run arrives.
    let s = UdpSocket::bind("0.0.0.0:0").unwrap();
    s.send_to(
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01",
        SocketAddr::new(th.ns_ip, 53),
    )
    .unwrap();
    wait_for(
        "the stand-in resolver to hear the query from outside",
        || std::fs::read_to_string(&log).unwrap().contains("packet"),
    );
    // And that query alone: nothing of the run's came late.
    let heard = std::fs::read_to_string(&log).unwrap();
    assert_eq!(heard.matches("packet").count(), 1, "{heard}");
    let events = sb.proxy_events();
    let dns: Vec<_> = events
        .iter()
        .filter(|e| e.via == Some(ProxyVia::Dns))
        .map(|e| e.host.as_str())
        .collect();
    assert_eq!(
        dns,
        ["unlisted.test", "secret-data.exfil.example"],
        "{events:#?}"
    );
}

/// A TCP server on `port` of the test host that logs how many bytes each
/// connection sent before it closed, and answers a line of text.
fn byte_counter(th: &mut TestHost, port: u16) -> std::path::PathBuf {
    let log = th.dir.0.join(format!("bytes-{port}.log"));
    let script = format!(
        "import socket,threading\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',{port}))\ns.listen(16)\nf=open({:?},'a',buffering=1)\ndef serve(c):\n  n=0\n  c.settimeout(5)\n  try:\n    d=c.recv(65536)\n    n=len(d)\n    if d: c.sendall(b'not tls\\r\\n')\n  except Exception: pass\n  f.write('%d\\n' % n)\n  c.close()\nwhile True:\n  c,_=s.accept()\n  threading.Thread(target=serve,args=(c,)).start()\n",
        log.display().to_string()
    );
    th.serve_python(&script, port, Stdio::null());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(&log, "").unwrap();
    log
}

/// First bytes naming another host than the name the address was handed
/// out for are refused as fronted: a TLS `ClientHello`'s server name, an
/// HTTP Host. Naming the name itself is relayed (the controls).
#[test]
fn fronted_connections_are_refused() {
    let test = "fronted_connections_are_refused";
    if !can_redirect(test) {
        return;
    }
    let (mut th, mut net) = web_host();
    net.allow_on("tls.test", 8443, th.ns_ip);
    let bytes = byte_counter(&mut th, 8443);
    let sb = Sandbox::new(&net);
    let py = probe(
        &sb,
        &["tls,tls.test,8443,tls.test", "tls,tls.test,8443,web.test"],
    );
    let out = sb.run(&format!(
        r#"
        {UNPROXIED}
        echo "host=$(curl -sS --noproxy '*' http://web.test/hello.txt 2>&1)"
        curl -sS --noproxy '*' -o /dev/null -H 'Host: other.test' http://web.test/hello.txt 2>/dev/null; echo "fronted_host=$?"
        {py}
        "#
    ));
    let stdout = text(&out.stdout);
    let says = |k: &str| field(&stdout, k).to_owned();
    assert_eq!(says("host"), "hello from the test host", "{stdout}");
    assert_eq!(says("fronted_host"), "56", "{stdout}");
    // The control reached the server, which is no TLS server.
    assert_eq!(says("tls,tls.test,8443,tls.test"), "sslerror", "{stdout}");
    assert_eq!(
        says("tls,tls.test,8443,web.test"),
        "oserror ECONNRESET",
        "{stdout}"
    );
    // From outside: only the control's hello arrived; the fronted
    // connection's upstream saw no byte, the Host one no request.
    let counts = std::fs::read_to_string(&bytes).unwrap();
    let counts: Vec<u64> = counts.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.iter().filter(|&&n| n > 0).count() == 1, "{counts:?}");
    assert_eq!(th.requests().len(), 1, "{:#?}", th.requests());
    let events = sb.proxy_events();
    let t = transparent(&events);
    let fronted: Vec<_> = t
        .iter()
        .filter(|e| e.verdict == ProxyVerdict::Fronted)
        .map(|e| (e.host.as_str(), e.basis))
        .collect();
    assert_eq!(
        fronted,
        [
            ("web.test", Some(ProxyBasis::Host)),
            ("tls.test", Some(ProxyBasis::Sni))
        ],
        "{t:#?}"
    );
    assert!(t.iter().any(|e| e.verdict == ProxyVerdict::Allowed
        && e.host == "tls.test"
        && e.basis == Some(ProxyBasis::Sni)));
}

/// `ssh` to an allowed `host:22`, by name, without proxy variables: the
/// test host's SSH banner reaches it (server-first: relayed at once). The
/// same to an unlisted name, the allowed name's other port and the
/// address itself is refused.
#[test]
fn ssh_reaches_an_allowed_host_port() {
    let test = "ssh_reaches_an_allowed_host_port";
    if !can_redirect(test) {
        return;
    }
    if std::process::Command::new("ssh")
        .arg("-V")
        .output()
        .is_err()
    {
        skip(test, "ssh is not installed");
        return;
    }
    let (mut th, mut net) = web_host();
    net.allow_on("git.test", 22, th.ns_ip);
    th.serve_python(
        "import socket,threading\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',22))\ns.listen(8)\ndef serve(c):\n  c.sendall(b'SSH-2.0-lockrun_test_banner\\r\\n')\n  c.settimeout(5)\n  try: c.recv(4096)\n  except Exception: pass\n  c.close()\nwhile True:\n  c,_=s.accept()\n  threading.Thread(target=serve,args=(c,)).start()\n",
        22,
        Stdio::null(),
    );
    let ip = th.ns_ip;
    let sb = Sandbox::new(&net);
    let ssh = "ssh -v -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10";
    let out = sb.run(&format!(
        r#"
        {UNPROXIED}
        {ssh} git@git.test true 2>"$WT/ok.err"; echo "ssh=$?"
        {ssh} git@unlisted.test true 2>"$WT/unlisted.err"; echo "ssh_unlisted=$?"
        {ssh} -p 2222 git@git.test true 2>"$WT/port.err"; echo "ssh_port=$?"
        {ssh} git@{ip} true 2>"$WT/literal.err"; echo "ssh_literal=$?"
        "#
    ));
    let stdout = text(&out.stdout);
    let err = |f: &str| std::fs::read_to_string(sb.wt().join(f)).unwrap();
    assert_eq!(field(&stdout, "ssh"), "255", "{stdout}");
    assert!(
        err("ok.err").contains("remote software version lockrun_test_banner"),
        "{}",
        err("ok.err")
    );
    assert!(
        err("unlisted.err").contains("Could not resolve hostname unlisted.test"),
        "{}",
        err("unlisted.err")
    );
    assert!(
        err("port.err").contains("Connection reset by"),
        "{}",
        err("port.err")
    );
    assert!(
        err("literal.err").contains("Operation not permitted"),
        "{}",
        err("literal.err")
    );
    let events = sb.proxy_events();
    assert_port_22_allowed_2222_refused(&events);
    assert!(refused_by_kernel(
        &sb.kernel_events(),
        SocketAddr::new(ip, 22)
    ));
}

/// `git clone` over SSH from a real `sshd` on the test host, with
/// `git.test:22` allowed and no proxy variables: the repository arrives;
/// the same from `git.test:2222` (the allowed name's other port) does not.
/// `cargo xtask test` unpacks Debian's openssh-server into the target dir.
#[test]
fn git_clones_over_ssh_from_an_allowed_host() {
    let test = "git_clones_over_ssh_from_an_allowed_host";
    if !can_redirect(test) {
        return;
    }
    let server = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("openssh-server");
    let sshd = server.join("usr/sbin/sshd");
    if !sshd.exists() {
        skip(
            test,
            &format!("no {} (cargo xtask test unpacks it)", sshd.display()),
        );
        return;
    }
    // From OpenSSH 9.8 sshd runs each connection in a program beside it,
    // found at a path it was built with, unless the config says where.
    let session = server.join("usr/lib/openssh/sshd-session");
    let session = if session.exists() {
        format!("SshdSessionPath {}\n", session.display())
    } else {
        String::new()
    };
    let (mut th, mut net) = web_host();
    net.allow_on("git.test", 22, th.ns_ip);
    let dir = th.dir.0.clone();
    let sh = |args: &[&str]| crate::support::proxy::sh(args);
    // The server: its host key, the client's key authorized, a repository.
    let host_key = dir.join("host_key");
    sh(&[
        "ssh-keygen",
        "-q",
        "-t",
        "ed25519",
        "-N",
        "",
        "-f",
        host_key.to_str().unwrap(),
    ]);
    let sb = Sandbox::new(&net);
    let client_key = sb.wt().join("id");
    sh(&[
        "ssh-keygen",
        "-q",
        "-t",
        "ed25519",
        "-N",
        "",
        "-f",
        client_key.to_str().unwrap(),
    ]);
    let authorized = dir.join("authorized_keys");
    std::fs::copy(sb.wt().join("id.pub"), &authorized).unwrap();
    let src = dir.join("src");
    let s = src.to_str().unwrap();
    sh(&["git", "init", "-q", "-b", "main", s]);
    std::fs::write(src.join("README"), "cloned over ssh from inside lockrun\n").unwrap();
    sh(&["git", "-C", s, "add", "README"]);
    sh(&[
        "git",
        "-C",
        s,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "first",
    ]);
    let bare = dir.join("repo.git");
    sh(&["git", "clone", "-q", "--bare", s, bare.to_str().unwrap()]);
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "ListenAddress {}:22\nHostKey {}\nAuthorizedKeysFile {}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n{session}",
            th.ns_ip,
            host_key.display(),
            authorized.display()
        ),
    )
    .unwrap();
    // sshd's privilege separation needs its directory (a path it was
    // built with) and its user; both made for the test, and removed after.
    let _privsep = PrivsepDir::make();
    let _user = PrivsepUser::make(&th.ns);
    let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
    // The libraries unpacked beside it (libwrap, which a machine without an
    // SSH server lacks), for sshd and the session program it runs.
    let libs = ["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"]
        .map(|d| server.join(d).display().to_string())
        .join(":");
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &th.ns])
        .arg(&sshd)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .env("LD_LIBRARY_PATH", libs)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    th.servers.push(child);
    th.wait_port(22);

    let ssh = format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10",
        client_key.display()
    );
    let repo = bare.display();
    let out = sb.run(&format!(
        r#"
        {UNPROXIED}
        export GIT_SSH_COMMAND="{ssh}"
        git clone -q root@git.test:{repo} "$WT/clone" 2>"$WT/clone.err"; echo "clone=$?"
        git clone -q ssh://root@git.test:2222{repo} "$WT/other" 2>"$WT/other.err"; echo "other=$?"
        "#
    ));
    let stdout = text(&out.stdout);
    let err = |f: &str| std::fs::read_to_string(sb.wt().join(f)).unwrap_or_default();
    assert_eq!(
        field(&stdout, "clone"),
        "0",
        "{}\nsshd: {}",
        err("clone.err"),
        std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
    );
    assert_eq!(
        std::fs::read_to_string(sb.wt().join("clone/README")).unwrap(),
        "cloned over ssh from inside lockrun\n"
    );
    assert_eq!(field(&stdout, "other"), "128", "{}", err("other.err"));
    assert!(
        err("other.err").contains("Connection reset by"),
        "{}",
        err("other.err")
    );
    assert!(!sb.wt().join("other/README").exists());
    let events = sb.proxy_events();
    assert_port_22_allowed_2222_refused(&events);
}

/// `/run/sshd`, sshd's privilege separation dir: made when missing, and
/// then removed when dropped (the test leaves the machine as it found it).
struct PrivsepDir(bool);

impl PrivsepDir {
    const PATH: &str = "/run/sshd";

    fn make() -> Self {
        if std::path::Path::new(Self::PATH).exists() {
            return Self(false);
        }
        std::fs::create_dir_all(Self::PATH).unwrap();
        Self(true)
    }
}

impl Drop for PrivsepDir {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::remove_dir(Self::PATH);
        }
    }
}

/// The user sshd's privilege separation runs as (`sshd`), which only the
/// package's installation makes: given to the test host's sshd alone, in a
/// `passwd` that `ip netns exec` binds over `/etc/passwd` for commands of
/// that namespace (`/etc/netns/<ns>/`), removed when dropped.
struct PrivsepUser(std::path::PathBuf);

impl PrivsepUser {
    fn make(ns: &str) -> Self {
        let dir = std::path::Path::new("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        let mut passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        if !passwd.lines().any(|l| l.starts_with("sshd:")) {
            passwd.push_str(
                "sshd:x:65534:65534:sshd privilege separation:/run/sshd:/usr/sbin/nologin\n",
            );
        }
        std::fs::write(dir.join("passwd"), passwd).unwrap();
        Self(dir)
    }
}

impl Drop for PrivsepUser {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // `/etc/netns` itself, when no other namespace has files there.
        let _ = std::fs::remove_dir("/etc/netns");
    }
}

/// The proxy's records of the transparent path: `git.test:22` allowed on
/// the name the run's resolver handed out, its port 2222 refused.
fn assert_port_22_allowed_2222_refused(events: &[ProxyEvent]) {
    let t = transparent(events);
    assert!(
        t.iter().any(|e| e.verdict == ProxyVerdict::Allowed
            && e.host == "git.test"
            && e.port == 22
            && e.basis == Some(ProxyBasis::ResolvedName)),
        "{t:#?}"
    );
    assert!(
        t.iter()
            .any(|e| e.verdict == ProxyVerdict::PortNotAllowed && e.port == 2222),
        "{t:#?}"
    );
}
