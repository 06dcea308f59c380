//! Helpers for the network tests (`tests/net.rs`, and the build tests): a
//! run (cgroup + hooks + audit log) built at the library level, probes that
//! join it before trying a way out, and sinks that judge from outside.

#![allow(clippy::missing_panics_doc, clippy::struct_field_names)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lockrun::audit::{AuditLog, Event, KernelNetEvent, Record};
use lockrun::bpf::hooks::{NetworkHooks, RedirectTo};
use lockrun::bpf::BpfError;
use lockrun::cgroup::RunCgroup;

use super::python::python3_command;
pub use super::skip::skip;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// This directory, where the probes the network tests run live.
pub fn support_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/support")
}

/// A unique run id for this test.
pub fn run_id(test: &str) -> String {
    format!(
        "t-{}-{}-{}",
        test.replace('_', "-"),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// One confined run, built like the run flow will: cgroup, then hooks.
pub struct Run {
    pub test: String,
    pub run_id: String,
    pub cg: Option<RunCgroup>,
    pub hooks: Option<NetworkHooks>,
    pub audit: Arc<AuditLog>,
    pub audit_path: PathBuf,
    pub cg_path: PathBuf,
    pub cg_id: u64,
}

impl Run {
    /// `None` (after printing the skip) when this machine cannot run kernel tests.
    pub fn start(test: &str, allowed: &[SocketAddr], unix_allowed: &[PathBuf]) -> Option<Self> {
        Self::start_with(test, allowed, unix_allowed, None)
    }

    /// [`Self::start`], with the run's connects redirected to `redirect`
    /// (`None`: as `start`).
    pub fn start_with(
        test: &str,
        allowed: &[SocketAddr],
        unix_allowed: &[PathBuf],
        redirect: Option<RedirectTo>,
    ) -> Option<Self> {
        if !nix::unistd::Uid::effective().is_root() {
            skip(test, "needs root (cgroup v2 + bpf)");
            return None;
        }
        let run_id = run_id(test);
        let cg = RunCgroup::create(lockrun::bpf::shared::build_id(), &run_id)
            .expect("create the run cgroup");
        let hooks = match NetworkHooks::attach_with(
            &cg,
            &run_id,
            allowed,
            &[],
            unix_allowed,
            lockrun_unix::UnixMode::Prefixes,
            redirect,
        ) {
            Ok(h) => h,
            Err(BpfError::ObjectMissing) => {
                skip(
                    test,
                    "the eBPF object is not built (run `cargo xtask test`)",
                );
                return None;
            }
            Err(e) => panic!("attach: {e}\n{:?}", std::error::Error::source(&e)),
        };
        // The control for `assert_clean`: a live run is registered.
        assert!(lockrun::bpf::registry::registered_runs()
            .unwrap()
            .contains(&cg.id()));
        let audit_path = std::env::temp_dir().join(format!("{run_id}.audit.jsonl"));
        let _ = std::fs::remove_file(&audit_path);
        let audit = Arc::new(AuditLog::open(Some(&audit_path)).unwrap());
        Some(Self {
            test: test.to_owned(),
            cg_path: cg.path().to_path_buf(),
            cg_id: cg.id(),
            run_id,
            cg: Some(cg),
            hooks: Some(hooks),
            audit,
            audit_path,
        })
    }

    pub fn cgroup_id(&self) -> u64 {
        self.cg.as_ref().unwrap().id()
    }

    /// Run `cmd` inside the run's cgroup: it is moved in while it waits for
    /// "go" on stdin, so everything it does after is confined. Returns stdout.
    pub fn inside(&self, mut cmd: Command) -> String {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn probe");
        self.cg.as_ref().unwrap().add_pid(child.id()).unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The python probe: `kind target port [cwd]`.
    pub fn probe(&self, args: &[&str]) -> String {
        self.probe_env(args, false)
    }

    pub fn probe_env(&self, args: &[&str], nested: bool) -> String {
        let mut cmd = python3_command();
        cmd.arg(support_dir().join("net_probe.py")).args(args);
        if nested {
            cmd.env("PROBE_NESTED", "1");
        }
        self.inside(cmd)
    }

    /// The same probe, run outside any run cgroup (for controls of the control).
    pub fn probe_outside(args: &[&str]) -> String {
        let mut child = python3_command()
            .arg(support_dir().join("net_probe.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Kernel refusals delivered so far.
    pub fn events(&self) -> Vec<KernelNetEvent> {
        self.hooks.as_ref().unwrap().drain_into(&self.audit);
        read_events(&self.audit_path)
    }

    /// Tear down like the run flow and check that nothing is left.
    pub fn finish(mut self) -> Vec<KernelNetEvent> {
        let cg = self.cg.take().unwrap();
        cg.remove()
            .and_then(lockrun::cgroup::Limits::remove)
            .expect("remove the run cgroup");
        let counters = self
            .hooks
            .take()
            .unwrap()
            .finish(&self.audit)
            .expect("finish the hooks");
        let events = read_events(&self.audit_path);
        assert_eq!(
            counters.lost, 0,
            "no event may be lost in these small tests"
        );
        assert_eq!(
            counters.total(),
            events.len() as u64,
            "every counted refusal has its event"
        );
        self.assert_clean();
        events
    }

    pub fn assert_clean(&self) {
        assert!(
            !self.cg_path.exists(),
            "cgroup {} remains",
            self.cg_path.display()
        );
        assert!(
            !lockrun::bpf::registry::registered_runs()
                .unwrap()
                .contains(&self.cg_id),
            "the run is still registered in the shared hook maps"
        );
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        drop(self.hooks.take());
        drop(self.cg.take());
        let _ = std::fs::remove_file(&self.audit_path);
    }
}

pub fn read_events(path: &Path) -> Vec<KernelNetEvent> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter_map(|r| match r.event {
            Event::KernelNetwork(k) => Some(k),
            _ => None,
        })
        .collect()
}

/// A TCP listener owned by the test, judged from outside.
pub struct TcpSink {
    pub listener: TcpListener,
    pub addr: SocketAddr,
}

impl TcpSink {
    pub fn bind(ip: &str) -> Self {
        let listener = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        Self { listener, addr }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Bytes received on connections that reached the accept queue, or
    /// `None` when no connection arrived at all.
    pub fn received(&self) -> Option<Vec<u8>> {
        match self.listener.accept() {
            Ok((mut s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                    .unwrap();
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf);
                Some(buf)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// A UDP socket owned by the test, judged from outside.
pub struct UdpSink {
    pub sock: UdpSocket,
    pub addr: SocketAddr,
}

impl UdpSink {
    pub fn bind(addr: &str) -> std::io::Result<Self> {
        let sock = UdpSocket::bind(addr)?;
        let addr = sock.local_addr()?;
        sock.set_nonblocking(true)?;
        Ok(Self { sock, addr })
    }

    pub fn received(&self) -> Option<Vec<u8>> {
        let mut buf = [0u8; 512];
        match self.sock.recv(&mut buf) {
            Ok(n) => Some(buf[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

/// A UDP-Lite socket outside any run, bound on loopback: the judge for
/// UDP-Lite probes. Neither std nor nix makes one, so it is a python3
/// process that prints its port, and, once told the test is done, every
/// datagram it got.
pub struct UdpLiteSink {
    child: std::process::Child,
    pub addr: SocketAddr,
}

impl UdpLiteSink {
    const SCRIPT: &'static str = r#"
import socket, sys
host = sys.argv[1]
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM, 136)
s.bind((host, 0))
print(s.getsockname()[1], flush=True)
sys.stdin.readline()
s.setblocking(False)
while True:
    try:
        print(s.recv(512).decode(errors="replace").strip(), flush=True)
    except BlockingIOError:
        break
"#;

    pub fn bind(ip: &str) -> Self {
        let mut child = python3_command()
            .args(["-c", Self::SCRIPT, ip])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        let mut out = child.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            port.push(char::from(byte[0]));
        }
        child.stdout = Some(out);
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let port: u16 = port.trim().parse().expect("the UDP-Lite sink's port");
        Self {
            child,
            addr: SocketAddr::new(ip, port),
        }
    }

    /// Every datagram received, one per line, in order. Ends the sink.
    pub fn received(mut self) -> Vec<String> {
        self.child
            .stdin
            .take()
            .unwrap()
            .write_all(b"done\n")
            .unwrap();
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(
            self.child.wait().unwrap().success(),
            "the UDP-Lite sink failed"
        );
        out.lines().map(str::to_owned).collect()
    }
}

impl Drop for UdpLiteSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The refusal must be EPERM, exactly.
pub fn assert_eperm(what: &str, out: &str) {
    assert!(
        out.starts_with("errno 1 EPERM"),
        "{what}: expected EPERM from the kernel hook, got {out:?}"
    );
}

/// An event for this destination, from this run's cgroup, by this hook.
pub fn assert_event(events: &[KernelNetEvent], cgroup_id: u64, hook: &str, dest: &str) {
    assert!(
        events.iter().any(|e| e.cgroup_id == cgroup_id
            && e.hook == hook
            && e.destination.to_string() == dest
            && e.pid != 0
            && !e.comm.is_empty()),
        "no {hook} event for {dest} in cgroup {cgroup_id}: {events:#?}"
    );
}

/// Lets root open ICMP ping sockets for the test's duration (per network
/// namespace): without it the kernel refuses them with EACCES before the
/// cgroup hook is asked, and the test would not prove the hook.
pub struct PingGroupRange(String);

impl PingGroupRange {
    const PATH: &'static str = "/proc/sys/net/ipv4/ping_group_range";
    pub fn allow_root() -> Self {
        let old = std::fs::read_to_string(Self::PATH).unwrap();
        std::fs::write(Self::PATH, "0 0").unwrap();
        Self(old)
    }
}

impl Drop for PingGroupRange {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, self.0.trim().replace('\t', " "));
    }
}

/// How many links a build pins for its parent cgroup: one per program,
/// `connect4`/`6`, `sendmsg4`/`6`, `sock_create`, `ingress`, `egress`; where
/// the kernel has the unix hooks (Linux 6.7), `connect_unix`,
/// `sendmsg_unix`; where it has redirection's (5.8), `recvmsg4`/`6`,
/// `getpeername4`/`6`, `sock_ops`. (The unix guard's links, where it stands
/// in for the unix hooks, are the kernel's whole, not the parent's:
/// `link-guard_*`, not counted.)
#[must_use]
pub fn parent_links() -> usize {
    let unix = if lockrun::kernel::Features::get().unix_hooks {
        2
    } else {
        0
    };
    let redirect = if lockrun::kernel::redirect().is_ok() {
        5
    } else {
        0
    };
    7 + unix + redirect
}
