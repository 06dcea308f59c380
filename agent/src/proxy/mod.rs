//! The run's allowlisting proxy (tokio), outside the sandbox: the only way
//! the confined command reaches the network (the cgroup eBPF hooks let it
//! connect to this proxy's endpoint and nothing else).
//!
//! ## What it speaks
//! HTTP/1.1 `CONNECT host:port` tunnels (what HTTPS clients use) and plain
//! HTTP forwarding of absolute-form requests (`GET http://host/path`), several
//! requests per client connection (keep-alive). Forwarded requests lose their
//! hop-by-hop and `Proxy-*` headers. Refusals are HTTP answers with an
//! `X-Lockrun-Reason` header and a one-line body: 400 malformed, 403 refused
//! by policy, 405 method, 407 credentials, 408 head too slow, 431 head too
//! large, 502/504 upstream failure/timeout, 503 too many connections.
//!
//! ## The gates, in order ([`server`])
//! 1. strict parsing of the head and the target ([`request`]);
//! 2. the run's secret in `Proxy-Authorization`;
//! 3. the allowlist, by name, before any DNS ([`allowlist`]); IP literals
//!    only when the policy lists that address;
//! 4. resolution: the policy's fixed answers, else the injected
//!    [`Resolver`] ([`resolver`]);
//! 5. the address guard on every address of the answer ([`guard`]): one
//!    refused address refuses the request;
//! 6. dialing exactly the checked addresses, in order, with a timeout; a
//!    forwarded bodiless `GET`, `HEAD` or `OPTIONS` may instead go out on an
//!    upstream connection an earlier request left open, if its peer is one
//!    of the addresses just checked ([`pool`]).
//!
//! Every decision is an [`Event::Proxy`](crate::audit::Event::Proxy) in the
//! audit log.
//!
//! ## Inside a host's TLS (issue 60)
//! A host the run's [`inspector`] inspects (it has secrets or request
//! rules) gets no tunnel: after the `200` (or the kernel's redirect) the
//! proxy answers the client's TLS with a certificate for the host made by
//! the run's CA ([`tls`]) and serves its HTTP/1.1 requests itself
//! (`server/inspect.rs`): each judged by the inspector and sent upstream over
//! TLS verified against the system's roots or `[network] tls_ca`.
//! Plain-HTTP forwarded requests are judged the same way.
//!
//! ## Clients that ignore the proxy variables (issue 59)
//! Where the kernel can redirect ([`crate::kernel::redirect`]), a run's
//! proxy also serves:
//! - the run's resolver ([`dns`], UDP and TCP on one port of `127.0.0.1`),
//!   where the hooks bring the run's DNS: an allowed name gets an address
//!   of 198.18.0.0/15 from the run's [`names`] table, any other name
//!   NXDOMAIN; nothing is forwarded;
//! - the transparent listener ([`transparent`]), where the hooks bring a
//!   TCP connect to such an address: the kernel's record of where it was
//!   headed ([`transparent::Originals`]) gives the address, the table its
//!   name, and gates 3–6 judge that name and the port as for `CONNECT`;
//!   the client's first bytes are [sniffed](sniff) before they go
//!   upstream, and a TLS server name or HTTP `Host` naming another host
//!   refuses the connection (fronted).
//!
//! Each record says how the connection came (`via`) and, on the
//! transparent path, what the decision rested on (`basis`).
//!
//! ## Only the run may use its proxy
//! The proxy listens on `127.0.0.1` on an ephemeral port, which any local
//! process could reach. So each run gets a random 128-bit secret, and every
//! request must carry `Proxy-Authorization: Basic base64("lockrun:<secret>")`,
//! or it is answered 407. The run hands the command
//! `http://lockrun:<secret>@127.0.0.1:<port>` in `HTTPS_PROXY`, `HTTP_PROXY`,
//! `ALL_PROXY` and their lowercase forms ([`RunningProxy::env_vars`]); curl,
//! Python's urllib send the credentials from the proxy URL preemptively, on
//! CONNECT and on forwarded requests alike; git (libcurl's "any" proxy
//! authentication) first asks without them, gets the 407 challenge, and
//! asks again with them. A 407 is recorded in the audit log but is not a
//! policy refusal, and the end-of-run summary does not count it.
//! `NODE_USE_ENV_PROXY=1` makes Node's built-in `fetch` (22.21, 24.5 and
//! later) use them too. The transparent path needs no secret: only a
//! connection the kernel brought from the run has an original there.
//!
//! ## Using it from the run flow
//! ```no_run
//! # async fn f(policy: &lockrun::policy::Policy, audit: std::sync::Arc<lockrun::audit::AuditLog>) -> Result<(), lockrun::proxy::ProxyError> {
//! use std::sync::Arc;
//! use lockrun::proxy::{ProxyConfig, RunningProxy, SystemResolver};
//! let proxy = RunningProxy::start(ProxyConfig::from_policy(policy, audit, Arc::new(SystemResolver)))?;
//! let endpoint = proxy.addr(); // into the eBPF allow map
//! let env = proxy.env_vars();  // into the child's environment
//! // … run the command …
//! proxy.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Tunnels live while idle for `run.idle_tunnel` (default 900 s) and forward
//! half-closes both ways; an idle tunnel holds no buffer (each direction
//! borrows a 64 KiB one only while bytes flow; `tests/proxy.rs`
//! `idle_tunnel_memory` holds it to that). At most
//! `run.max_connections` client connections are served at once.

pub mod allowlist;
pub mod dns;
pub mod guard;
pub mod inspector;
pub mod names;
pub mod pool;
pub mod reach;
pub mod request;
pub mod resolver;
pub mod server;
pub mod sniff;
pub mod tls;
pub mod transparent;

#[cfg(test)]
mod advised;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

pub use allowlist::{Reason, Verdict};
pub use resolver::{NoResolver, ResolveError, Resolver, StaticResolver, SystemResolver};

use crate::audit::AuditLog;
use crate::policy::{NetworkPolicy, Policy};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read the proxy's listening address: {0}")]
    LocalAddr(std::io::Error),
    #[error("cannot draw the run's proxy secret from /dev/urandom: {0}")]
    Secret(std::io::Error),
    #[error("run.max_connections is 0: the proxy could serve nothing")]
    NoConnections,
    #[error("the proxy listens on loopback only, not {0}")]
    NotLoopback(SocketAddr),
    #[error("cannot start the proxy's threads: {0}")]
    Runtime(std::io::Error),
}

/// Everything the proxy needs from the run.
#[derive(Clone)]
pub struct ProxyConfig {
    pub network: NetworkPolicy,
    /// How long a tunnel (or a keep-alive connection, or a response) may stay idle.
    pub idle_tunnel: Duration,
    /// Concurrent client connections; one more is answered 503.
    pub max_connections: usize,
    pub audit: Arc<AuditLog>,
    pub resolver: Arc<dyn Resolver>,
    /// How long a client has to send a complete request head (slowloris).
    pub head_timeout: Duration,
    /// How long to wait for DNS, and for each dial.
    pub connect_timeout: Duration,
    /// Where to listen (port 0: ephemeral). Loopback only.
    pub listen: SocketAddr,
    /// Also start the run's resolver and transparent listener (on
    /// ephemeral ports of the same address), for the kernel to bring the
    /// run's DNS and connects to.
    pub transparent: bool,
    /// The run's secrets and request rules: the hosts whose requests the
    /// proxy judges inside.
    pub inspector: Arc<inspector::Inspector>,
    /// The run's CA and the upstreams' verification: needed when the
    /// inspector inspects any host (without it such a host is refused).
    pub tls: Option<Arc<tls::RunTls>>,
}

impl ProxyConfig {
    /// The settings of `policy`, with the default timeouts.
    #[must_use]
    pub fn from_policy(policy: &Policy, audit: Arc<AuditLog>, resolver: Arc<dyn Resolver>) -> Self {
        Self {
            network: policy.network.clone(),
            idle_tunnel: policy.run.idle_tunnel,
            max_connections: policy.run.max_connections,
            ..Self::new(policy.network.clone(), audit, resolver)
        }
    }

    /// Defaults: idle 900 s, 256 connections, head 15 s, connect 10 s, 127.0.0.1:0.
    #[must_use]
    pub fn new(network: NetworkPolicy, audit: Arc<AuditLog>, resolver: Arc<dyn Resolver>) -> Self {
        Self {
            network,
            idle_tunnel: Duration::from_mins(15),
            max_connections: 256,
            audit,
            resolver,
            head_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(10),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            transparent: false,
            inspector: Arc::default(),
            tls: None,
        }
    }
}

/// A proxy serving one run, on a runtime of its own with a worker thread
/// per CPU (at most [`PROXY_THREADS`]): the run's own runtime is one thread,
/// which many concurrent requests would queue behind.
pub struct RunningProxy {
    addr: SocketAddr,
    secret: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    /// Taken at shutdown or drop: a runtime dropped the usual way would
    /// block, which an async context forbids.
    runtime: Option<tokio::runtime::Runtime>,
    /// The resolver and transparent listener, when started.
    transparent: Option<TransparentSide>,
}

/// The resolver and the transparent listener of a run's proxy.
struct TransparentSide {
    listener: SocketAddr,
    resolver: SocketAddr,
    state: Arc<transparent::Transparent>,
    dns: Arc<dns::Dns>,
    /// The resolver's UDP and TCP loops and the listener's accept loop:
    /// aborted at shutdown, which closes their sockets and connections.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The most worker threads a run's proxy gets.
pub const PROXY_THREADS: usize = 2;

impl RunningProxy {
    /// Bind, draw the secret, and start serving.
    pub fn start(config: ProxyConfig) -> Result<Self, ProxyError> {
        if config.max_connections == 0 {
            return Err(ProxyError::NoConnections);
        }
        if !config.listen.ip().is_loopback() {
            return Err(ProxyError::NotLoopback(config.listen));
        }
        let secret = server::random_secret().map_err(ProxyError::Secret)?;
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .min(PROXY_THREADS);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("lockrun-proxy")
            .enable_all()
            .build()
            .map_err(ProxyError::Runtime)?;
        // Bound here, so that the address is known (and a bind failure
        // reported) before the run goes on; registered with the proxy's runtime.
        let bind_err = |source| ProxyError::Bind {
            addr: config.listen,
            source,
        };
        let std_listener = std::net::TcpListener::bind(config.listen).map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        unpaced(&std_listener);
        let addr = std_listener.local_addr().map_err(ProxyError::LocalAddr)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(bind_err)?
        };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let start_transparent = config.transparent;
        let network = config.network.clone();
        let shared = Arc::new(server::Shared::new(config, &secret));
        let side = if start_transparent {
            Some(start_side(&runtime, addr.ip(), network, &shared)?)
        } else {
            None
        };
        let task = runtime.spawn(server::serve(listener, shared, stopped));
        Ok(Self {
            addr,
            secret,
            stop: Some(stop),
            task,
            runtime: Some(runtime),
            transparent: side,
        })
    }

    /// The transparent listener's endpoint (`None` when not started).
    #[must_use]
    pub fn transparent_addr(&self) -> Option<SocketAddr> {
        self.transparent.as_ref().map(|t| t.listener)
    }

    /// The run's resolver's endpoint, UDP and TCP (`None` when not started).
    #[must_use]
    pub fn resolver_addr(&self) -> Option<SocketAddr> {
        self.transparent.as_ref().map(|t| t.resolver)
    }

    /// Where the kernel says a transparent connection was headed. Until
    /// set, every transparent connection is refused; set once (`false`
    /// when it was set already or the listener was not started).
    pub fn set_originals(&self, originals: Arc<dyn transparent::Originals>) -> bool {
        self.transparent
            .as_ref()
            .is_some_and(|t| t.state.originals.set(originals).is_ok())
    }

    /// The listening endpoint (for the kernel allow map).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://lockrun:<secret>@127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://lockrun:{}@{}", self.secret, self.addr)
    }

    /// The proxy variables for the command's environment: `HTTPS_PROXY`,
    /// `HTTP_PROXY`, `ALL_PROXY` and lowercase forms set to [`Self::url`];
    /// `NO_PROXY`/`no_proxy` empty, so nothing bypasses it.
    #[must_use]
    pub fn env_vars(&self) -> Vec<(String, String)> {
        let url = self.url();
        let mut v = Vec::new();
        for k in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
            v.push((k.to_owned(), url.clone()));
            v.push((k.to_ascii_lowercase(), url.clone()));
        }
        v.push(("NO_PROXY".to_owned(), String::new()));
        v.push(("no_proxy".to_owned(), String::new()));
        // Node's built-in fetch (22.21, 24.5 and later) uses the variables
        // only when told to.
        v.push(("NODE_USE_ENV_PROXY".to_owned(), "1".to_owned()));
        v
    }

    /// Stop accepting and close every connection and tunnel.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        if let Some(side) = self.transparent.take() {
            for t in &side.tasks {
                t.abort();
            }
            for t in side.tasks {
                let _ = t.await;
            }
            side.dns.finish();
        }
        // Every task has ended (serve closes its connections before it
        // returns); Drop lets the workers go without waiting for them.
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        // Without a shutdown (an error path): stopping the runtime aborts
        // every connection task and closes their sockets.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Bind the resolver and the transparent listener on `ip` and start them
/// on `runtime`.
fn start_side(
    runtime: &tokio::runtime::Runtime,
    ip: IpAddr,
    network: NetworkPolicy,
    shared: &Arc<server::Shared>,
) -> Result<TransparentSide, ProxyError> {
    let table = Arc::new(names::NameTable::new());
    let any = SocketAddr::new(ip, 0);
    let bind_err = |source| ProxyError::Bind { addr: any, source };
    let (udp, tcp) = dns::bind(ip).map_err(bind_err)?;
    let resolver = udp.local_addr().map_err(ProxyError::LocalAddr)?;
    let std_listener = std::net::TcpListener::bind(any).map_err(bind_err)?;
    std_listener.set_nonblocking(true).map_err(bind_err)?;
    unpaced(&std_listener);
    let listener = std_listener.local_addr().map_err(ProxyError::LocalAddr)?;
    let state = Arc::new(transparent::Transparent::new(
        Arc::clone(shared),
        Arc::clone(&table),
    ));
    let dns = Arc::new(dns::Dns::new(network, table, Arc::clone(&shared.audit)));
    let _entered = runtime.enter();
    let udp = tokio::net::UdpSocket::from_std(udp).map_err(bind_err)?;
    let tcp = tokio::net::TcpListener::from_std(tcp).map_err(bind_err)?;
    let tl = tokio::net::TcpListener::from_std(std_listener).map_err(bind_err)?;
    let tasks = vec![
        runtime.spawn(dns::serve_udp(udp, Arc::clone(&dns))),
        runtime.spawn(dns::serve_tcp(tcp, Arc::clone(&dns))),
        runtime.spawn(transparent::serve(tl, Arc::clone(&state))),
    ];
    Ok(TransparentSide {
        listener,
        resolver,
        state,
        dns,
        tasks,
    })
}

/// The congestion control of the client leg, inherited by every connection
/// the listener accepts: one that does not pace. That leg never leaves this
/// host (the proxy listens on loopback), so there is no path to probe, and a
/// pacing one (BBR, the system default on many hosts) spends a timer per
/// burst there: alternating two builds here, a 512 MiB tunnel ran at
/// 1344–1632 MiB/s with BBR on this leg and 1807–2770 MiB/s with cubic
/// (direct: 1597–2853). The upstream leg keeps the
/// system's choice. Performance only: when neither is available, the
/// default stays.
fn unpaced(listener: &std::net::TcpListener) {
    use nix::sys::socket::{setsockopt, sockopt::TcpCongestion};
    for cc in ["cubic", "reno"] {
        match setsockopt(listener, TcpCongestion, &std::ffi::OsString::from(cc)) {
            Ok(()) => return,
            Err(e) => tracing::debug!("TCP_CONGESTION {cc} on the proxy's listener: {e}"),
        }
    }
}
