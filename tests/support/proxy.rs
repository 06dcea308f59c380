//! Helpers shared by `tests/proxy.rs` (the proxy through its library API) and
//! `tests/proxy_e2e.rs` (the proxy from inside the real binary): scratch dirs,
//! named skips, and test hosts in network namespaces.
//!
//! A test host is a namespace joined to this one by a veth pair, in a /30 of
//! the range its test binary owns (`tests/proxy.rs`: 10.213.160–223,
//! `tests/proxy_e2e.rs`: 10.213.224–247; 10.213.252 is `cargo xtask bench`'s),
//! removed on drop.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc,
    clippy::manual_assert
)]

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockrun::policy::IpNet;

use super::python::python3;
pub use super::skip::skip;

static SEQ: AtomicU32 = AtomicU32::new(0);
static HOSTS: AtomicU32 = AtomicU32::new(0);

pub fn seq() -> u32 {
    SEQ.fetch_add(1, Ordering::SeqCst)
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "lockrun-proxy-{tag}-{}-{}",
            std::process::id(),
            seq()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn can_netns(test: &str) -> bool {
    if !nix::unistd::geteuid().is_root() {
        skip(test, "needs root for ip netns");
        return false;
    }
    let ok = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(test, "`ip netns` is not available");
    }
    ok
}

pub fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Which /30s a test binary may use: `10.213.<first + n>.0/30`, n < `count`.
#[derive(Clone, Copy)]
pub struct Range {
    pub first: u32,
    pub count: u32,
}

/// A test host: a network namespace joined to this one by a veth pair,
/// 10.213.X.1 here and 10.213.X.2 there, with servers started inside.
pub struct TestHost {
    pub ns: String,
    pub here: String,
    pub host_ip: IpAddr,
    pub ns_ip: IpAddr,
    pub net: IpNet,
    pub servers: Vec<Child>,
    pub dir: Scratch,
}

impl TestHost {
    pub fn new(range: Range) -> Self {
        let n = HOSTS.fetch_add(1, Ordering::SeqCst) % range.count;
        // The whole pid, so that a leftover's owner is known (`lrph` + 7
        // digits + `-` + 2 is within a link name's 15 bytes).
        let id = std::process::id();
        let ns = format!("lrpx{id}-{n}");
        let here = format!("lrph{id}-{n}");
        let there = format!("lrpn{id}-{n}");
        let octet = range.first + n;
        assert!(
            octet < 256,
            "range {}+{} leaves 10.213/16",
            range.first,
            range.count
        );
        let host_ip: IpAddr = format!("10.213.{octet}.1").parse().unwrap();
        let ns_ip: IpAddr = format!("10.213.{octet}.2").parse().unwrap();
        lockrun_leftovers::remove_dead("lrpx", "lrph");
        let net = IpNet::parse(&format!("10.213.{octet}.0/30")).unwrap();
        let holders = lockrun_leftovers::holders(&net.to_string());
        assert!(
            holders.is_empty(),
            "{net} is already held by {holders:?}: a test host made there would not be reached"
        );
        // From here on, Drop removes whatever was made, even if a step fails.
        let th = Self {
            ns: ns.clone(),
            here: here.clone(),
            host_ip,
            ns_ip,
            net,
            servers: Vec::new(),
            dir: Scratch::new("host"),
        };
        sh(&["ip", "netns", "add", &ns]);
        sh(&[
            "ip", "link", "add", &here, "type", "veth", "peer", "name", &there,
        ]);
        sh(&["ip", "link", "set", &there, "netns", &ns]);
        sh(&["ip", "addr", "add", &format!("{host_ip}/30"), "dev", &here]);
        sh(&["ip", "link", "set", &here, "up"]);
        sh(&[
            "ip",
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &there,
        ]);
        sh(&[
            "ip", "netns", "exec", &ns, "ip", "link", "set", &there, "up",
        ]);
        sh(&["ip", "netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        th
    }

    /// The veth end inside the namespace.
    pub fn there(&self) -> String {
        self.here.replacen("lrph", "lrpn", 1)
    }

    pub fn www(&self) -> PathBuf {
        self.dir.0.join("www")
    }

    pub fn access_log(&self) -> PathBuf {
        self.dir.0.join("access.log")
    }

    pub fn accept_log(&self) -> PathBuf {
        self.dir.0.join("accept.log")
    }

    /// `python3 -m http.server` on port 80 over `www()`; requests go to `access_log()`.
    pub fn serve_http(&mut self) {
        std::fs::create_dir_all(self.www()).unwrap();
        std::fs::write(self.www().join("hello.txt"), "hello from the test host\n").unwrap();
        std::fs::write(self.www().join("secret.txt"), "must not leak\n").unwrap();
        let log = std::fs::File::create(self.access_log()).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                python3(),
                "-u",
                "-m",
                "http.server",
                "80",
                "--bind",
            ])
            .arg(self.ns_ip.to_string())
            .arg("--directory")
            .arg(self.www())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.servers.push(child);
        self.wait_port(80);
    }

    /// A TCP listener on `port` that writes one line per accepted
    /// connection to `accept_log()` and closes it: judges "received nothing"
    /// at the TCP level, before any request is sent.
    pub fn serve_accept_log(&mut self, port: u16) {
        let script = format!(
            "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',{port}))\ns.listen(64)\nf=open(sys.argv[1],'a',buffering=1)\nwhile True:\n  c,a=s.accept()\n  f.write('accept %s:%d\\n' % a)\n  c.close()\n"
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, python3(), "-c", &script])
            .arg(self.accept_log())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.servers.push(child);
        self.wait_port(port);
        // wait_port's own probe connection is logged: start from empty.
        std::thread::sleep(Duration::from_millis(100));
        std::fs::write(self.accept_log(), "").unwrap();
    }

    /// Connections `serve_accept_log` accepted.
    pub fn accepts(&self) -> Vec<String> {
        std::fs::read_to_string(self.accept_log())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A TCP server on port 9000 that reads until EOF, then answers
    /// `got N bytes: <data>` and closes: proves half-close reaches it.
    pub fn serve_until_eof(&mut self) {
        let script = "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',9000))\ns.listen(8)\nwhile True:\n  c,_=s.accept()\n  d=b''\n  while True:\n    b=c.recv(4096)\n    if not b: break\n    d+=b\n  if d: c.sendall(b'got %d bytes: ' % len(d) + d)\n  c.close()\n";
        self.serve_python(script, 9000, Stdio::null());
    }

    /// `python3 -c script` in the namespace, serving on `port` (waited for),
    /// its stderr to `stderr`.
    pub fn serve_python(&mut self, script: &str, port: u16, stderr: impl Into<Stdio>) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, python3(), "-c", script])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        self.servers.push(child);
        self.wait_port(port);
    }

    /// Waits until the server started last accepts on `port`; fails
    /// at once if it exits first.
    pub fn wait_port(&mut self, port: u16) {
        let addr = SocketAddr::new(self.ns_ip, port);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(exited) = self.servers.last_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("test host server for {addr} exited before it listened: {exited}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("test host server on {addr} did not listen within 20 s");
    }

    /// Request lines the HTTP server logged.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.access_log())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"GET ") || l.contains("\"POST ") || l.contains("\"HEAD "))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.here])
            .output();
    }
}
