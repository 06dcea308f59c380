//! The run's proxy, driven through its library API with real clients.
//!
//! Targets are only loopback listeners this test binds and test hosts in
//! network namespaces this test creates (veth pairs in 10.213.160.0/20, one
//! /30 per test), removed on every path. Names resolve through the policy's
//! fixed answers; the injected resolver refuses everything else, so no test
//! touches ambient DNS.
//!
//! Clients (curl, git, python3) are built by [`client`]; an "inside lockrun"
//! variant wraps that command with `lockrun --policy … --` and hands it the
//! env from the run instead of [`RunningProxy::env_vars`].
//!
//! Tests that need root and `ip netns` print `skipped: <test>: <reason>` when
//! they cannot run, and fail instead under `CI=true`.

// Tests read top to bottom as scenarios: long bodies and local imports are fine here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::items_after_statements,
    clippy::manual_assert,
    clippy::struct_field_names
)]

mod support;

// The subjects, one file each in tests/proxy/ (an inline module: a crate
// root's own `mod` lines are files beside it, as `support` is).
mod proxy {
    mod connections;
    mod requests;
    mod secrets;
    mod transparent;
}

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use lockrun::audit::{AuditLog, Event, ProxyEvent, Record};
use lockrun::policy::{HostName, HostPattern, HostRule, IpNet, NetworkPolicy, PrivateGrant};
use lockrun::proxy::{NoResolver, ProxyConfig, RunningProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::proxy::{Range, Scratch, TestHost};

/// This binary's test hosts: 10.213.160.0/30 … 10.213.223.0/30.
const RANGE: Range = Range {
    first: 160,
    count: 64,
};

fn name(s: &str) -> HostName {
    HostName::parse(s).unwrap()
}

/// A policy allowing `host:port` only, resolving `host` to the test host
/// `th` and granting it that host's private network.
fn granted(th: &TestHost, host: &str, port: u16) -> NetworkPolicy {
    let ip = [th.ns_ip];
    let allow = format!("{host}:{port}");
    policy(&[&allow], &[(host, &ip)], Some((&[host], th.net)))
}

/// A policy allowing `allow` and resolving `resolve`, granting `grant` to `granted`.
fn policy(
    allow: &[&str],
    resolve: &[(&str, &[IpAddr])],
    grant: Option<(&[&str], IpNet)>,
) -> NetworkPolicy {
    NetworkPolicy {
        allow: allow.iter().map(|a| HostRule::parse(a).unwrap()).collect(),
        resolve: resolve
            .iter()
            .map(|(n, a)| (name(n), a.to_vec()))
            .collect::<BTreeMap<_, _>>(),
        private: grant
            .map(|(hosts, network)| {
                vec![PrivateGrant {
                    hosts: hosts
                        .iter()
                        .map(|h| HostPattern::parse(h).unwrap())
                        .collect(),
                    network,
                }]
            })
            .unwrap_or_default(),
        ..NetworkPolicy::default()
    }
}

struct Proxy {
    proxy: RunningProxy,
    audit_path: PathBuf,
    /// The log the proxy records in, for the run's end-of-run summary.
    audit: Arc<AuditLog>,
    _dir: Scratch,
}

impl Proxy {
    fn start(network: NetworkPolicy, tweak: impl FnOnce(&mut ProxyConfig)) -> Self {
        let dir = Scratch::new("audit");
        let audit_path = dir.0.join("audit.jsonl");
        let audit = Arc::new(AuditLog::open(Some(&audit_path)).unwrap());
        let mut config = ProxyConfig::new(network, Arc::clone(&audit), Arc::new(NoResolver));
        tweak(&mut config);
        let proxy = RunningProxy::start(config).unwrap();
        Self {
            proxy,
            audit_path,
            audit,
            _dir: dir,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.proxy.addr()
    }

    fn events(&self) -> Vec<ProxyEvent> {
        std::fs::read_to_string(&self.audit_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Record>(l).ok())
            .filter_map(|r| match r.event {
                Event::Proxy(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn auth(&self) -> String {
        let url = self.proxy.url();
        let cred = url
            .trim_start_matches("http://")
            .split('@')
            .next()
            .unwrap()
            .to_owned();
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            lockrun::proxy::server::base64(cred.as_bytes())
        )
    }
}

/// A client command. An "inside lockrun" variant wraps it here.
fn client(program: &str) -> Command {
    Command::new(program)
}

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// Send raw bytes, read until the proxy closes; returns (status, whole answer).
async fn raw(addr: SocketAddr, req: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("proxy did not close")
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    (status_of(&text), text)
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Open a CONNECT tunnel; returns the stream after the 200.
async fn connect(p: &Proxy, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(p.addr()).await.unwrap();
    s.write_all(
        format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{}\r\n",
            p.auth()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "proxy closed: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert_eq!(status_of(&head), 200, "{head}");
    s
}
