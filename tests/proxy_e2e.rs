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

mod support;

// The subjects, one file each in tests/proxy_e2e/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod proxy_e2e {
    mod bypass_and_inbound;
    mod inspected;
    mod requests;
    mod transparent;
}

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Output};

use lockrun::audit::{Event, KernelNetEvent, ProxyEvent, Record};
use lockrun::policy::IpNet;

use crate::support::proxy::{can_netns, skip, Range, Scratch, TestHost};

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
            "lockrun -- sh -c {script:?}\n{}\nstdout: {}\nstderr: {}",
            out.status,
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
