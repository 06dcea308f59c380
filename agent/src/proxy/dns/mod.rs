//! The run's resolver (issue 59): the kernel's hooks bring every DNS query
//! of the run (UDP or TCP to port 53, any address) here, to `127.0.0.1:R`,
//! UDP and TCP on the same port. It answers from the policy alone and
//! never forwards a query anywhere, so a run cannot carry data out in the
//! names it asks for:
//! - a name some `allow` rule covers (on any port) and no `deny` pattern
//!   does: type A gets the name's address in the run's
//!   [name table](super::names) (198.18.0.0/15); AAAA and every other type
//!   `NOERROR` with no answer (NODATA), so clients use the A record;
//! - any other name: `NXDOMAIN` at once, recorded in the audit log as a
//!   refusal of the proxy, once per name, for at most [`MAX_RECORDED`]
//!   names (then counted, and the count said when the run ends): the run
//!   decides how many queries it sends, not how long the log grows.
//!
//! Judged by name before any DNS, as `CONNECT` is: which port the run then
//! connects to is the transparent listener's question. The wire format is
//! hand-written ([`wire`]).

pub mod wire;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::allowlist::{check_any_port, Reason, Verdict};
use super::names::NameTable;
use crate::audit::{AuditLog, Event, Layer, ProxyEvent, ProxyVia};
use crate::policy::{HostName, NetworkPolicy};
use wire::{answer, error_answer, parse_query, Query, Rcode, CLASS_IN, MAX_QUERY, TYPE_A};

/// Distinct refused names recorded one by one; past them, counted.
pub const MAX_RECORDED: usize = 256;
/// TCP connections to the resolver served at once.
const MAX_TCP: usize = 64;
/// How long a TCP connection may wait for its next query.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// What the resolver answers a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// An A record with this address of the name table.
    Address(Ipv4Addr),
    /// An allowed name, a type other than A (or a class other than IN).
    NoData,
    /// A name the policy does not allow (or no host name at all).
    Refused(Reason),
    /// Allowed, but the run's name table is full.
    TableFull,
}

impl Decision {
    fn rcode(&self) -> Rcode {
        match self {
            Self::Address(_) | Self::NoData => Rcode::NoError,
            Self::Refused(_) => Rcode::NxDomain,
            Self::TableFull => Rcode::ServFail,
        }
    }
}

/// Decide a query by the policy: pure but for the table, which hands out
/// an address the first time an allowed name is asked for by type A.
#[must_use]
pub fn decide(net: &NetworkPolicy, table: &NameTable, q: &Query) -> Decision {
    let not_listed = || {
        Decision::Refused(Reason::NotListed {
            host: q.name.clone(),
        })
    };
    // An address written as a name is not one (clients don't ask for them).
    if q.name.parse::<IpAddr>().is_ok() {
        return not_listed();
    }
    let Ok(name) = HostName::parse(&q.name) else {
        return not_listed();
    };
    match check_any_port(net, &name) {
        Verdict::Deny(r) => Decision::Refused(r),
        Verdict::Allow(_) if q.qtype != TYPE_A || q.qclass != CLASS_IN => Decision::NoData,
        Verdict::Allow(_) => match table.address_for(&name) {
            Ok(a) => Decision::Address(a),
            Err(_) => Decision::TableFull,
        },
    }
}

/// The resolver's state, shared by its UDP and TCP sides.
pub(crate) struct Dns {
    network: NetworkPolicy,
    table: Arc<NameTable>,
    audit: Arc<AuditLog>,
    /// Refused names recorded, and how many refusals went unrecorded.
    recorded: Mutex<(HashSet<String>, u64)>,
    /// This machine's host name, lowercase: answered NXDOMAIN like any name
    /// not allowed, but not recorded (see [`is_own_host`]).
    own_host: String,
}

/// Whether `name` is the machine's own host name `host` (or its first
/// label). Tools look it up unasked (git for its default identity, Python's
/// `getfqdn`), and where `/etc/hosts` does not list it the lookup comes
/// here: refused like every name not allowed, but no refusal of the run's
/// to show, since the answer never left the machine and the run named no
/// host it wanted to reach. Recording it made every such git run's summary
/// say a request was refused (seen under the kernel matrix's guests, whose
/// host name is in no `/etc/hosts`).
fn is_own_host(name: &str, host: &str) -> bool {
    let short = host.split('.').next().unwrap_or(host);
    !short.is_empty() && (name == host || name == short)
}

impl Dns {
    pub(crate) fn new(network: NetworkPolicy, table: Arc<NameTable>, audit: Arc<AuditLog>) -> Self {
        Self {
            network,
            table,
            audit,
            recorded: Mutex::new((HashSet::new(), 0)),
            own_host: nix::sys::utsname::uname()
                .map(|u| u.nodename().to_string_lossy().to_ascii_lowercase())
                .unwrap_or_default(),
        }
    }

    /// The answer to one message, if it gets one.
    fn respond(&self, msg: &[u8]) -> Option<Vec<u8>> {
        let q = match parse_query(msg) {
            Ok(q) => q,
            Err(e) => return error_answer(msg, &e),
        };
        let d = decide(&self.network, &self.table, &q);
        match &d {
            Decision::Address(a) => return Some(answer(&q, d.rcode(), Some(*a))),
            Decision::Refused(_) if is_own_host(&q.name, &self.own_host) => {}
            Decision::Refused(r) => self.refused(&q.name, r),
            Decision::TableFull => tracing::warn!(
                "the run's name table is full: no address for {}",
                crate::shown::escaped(&q.name)
            ),
            Decision::NoData => {}
        }
        Some(answer(&q, d.rcode(), None))
    }

    /// Record a refused name, the first time, while under [`MAX_RECORDED`].
    fn refused(&self, name: &str, why: &Reason) {
        let mut r = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        if r.0.contains(name) {
            return;
        }
        if r.0.len() >= MAX_RECORDED {
            r.1 += 1;
            return;
        }
        r.0.insert(name.to_owned());
        drop(r);
        self.audit.record(Event::Proxy(ProxyEvent {
            method: String::new(),
            host: name.to_owned(),
            port: 0,
            dialed: None,
            allowed: false,
            reason: why.to_string(),
            status: 0,
            verdict: why.verdict(),
            via: Some(ProxyVia::Dns),
            basis: None,
        }));
    }

    /// Say how many refusals went unrecorded (when the run ends).
    pub(crate) fn finish(&self) {
        let n = self
            .recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1;
        if n > 0 {
            self.audit.record(Event::Notice {
                layer: Layer::Proxy,
                message: format!(
                    "the run's resolver refused {n} more queries for names not allowed, past the \
                     first {MAX_RECORDED} names recorded"
                ),
            });
        }
    }
}

/// Bind the resolver's UDP socket and a TCP listener on the same port of
/// `ip` (port 0: the kernel picks one the TCP side can have too).
pub(crate) fn bind(ip: IpAddr) -> std::io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let mut last = None;
    for _ in 0..16 {
        let udp = std::net::UdpSocket::bind(SocketAddr::new(ip, 0))?;
        let port = udp.local_addr()?.port();
        match std::net::TcpListener::bind(SocketAddr::new(ip, port)) {
            Ok(tcp) => {
                udp.set_nonblocking(true)?;
                tcp.set_nonblocking(true)?;
                return Ok((udp, tcp));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port")))
}

/// Answer datagrams until the task is dropped.
pub(crate) async fn serve_udp(sock: UdpSocket, dns: Arc<Dns>) {
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("resolver recv: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if let Some(a) = dns.respond(&buf[..n]) {
            let _ = sock.send_to(&a, from).await;
        }
    }
}

/// Serve TCP connections (length-prefixed messages, RFC 1035 §4.2.2) until
/// the task is dropped, which closes them all.
pub(crate) async fn serve_tcp(listener: TcpListener, dns: Arc<Dns>) {
    let slots = Arc::new(Semaphore::new(MAX_TCP));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Over the cap: closed at once.
                    let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else { continue };
                    let dns = Arc::clone(&dns);
                    tasks.spawn(async move {
                        let _permit = permit;
                        let _ = tcp_connection(stream, &dns).await;
                    });
                }
                Err(e) => {
                    tracing::debug!("resolver accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

async fn tcp_connection(mut s: TcpStream, dns: &Dns) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE, s.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            _ => return Ok(()),
        }
        let len = usize::from(u16::from_be_bytes(len));
        if len > MAX_QUERY {
            return Ok(());
        }
        match tokio::time::timeout(TCP_IDLE, s.read_exact(&mut buf[..len])).await {
            Ok(Ok(_)) => {}
            _ => return Ok(()),
        }
        let Some(a) = dns.respond(&buf[..len]) else {
            return Ok(());
        };
        let Ok(n) = u16::try_from(a.len()) else {
            return Ok(());
        };
        let mut out = n.to_be_bytes().to_vec();
        out.extend_from_slice(&a);
        s.write_all(&out).await?;
    }
}

#[cfg(test)]
mod tests;
