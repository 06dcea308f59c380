//! The transparent path (issue 59): connections the kernel brought to the
//! proxy. The run's connect hooks rewrite a TCP connect to an address of
//! the run's [name table](super::names) (198.18.0.0/15, handed out by the
//! run's [resolver](super::dns)) to this listener, `127.0.0.1:T`, and keep
//! the address the client asked for; [`Originals::take`] gives it back for
//! an accepted connection, and only for one the kernel brought from the
//! run. Then, in order:
//! 1. no original (another process of this host, or the kernel's side not
//!    yet set up): refused, recorded once;
//! 2. the original address → the name it was handed out for; an address
//!    the table never handed out: refused (it is no name);
//! 3. the same gates as `CONNECT` for (name, original port): allowlist,
//!    deny list and ports, resolution (fixed answers or the resolver), the
//!    address guard, dialing the checked addresses;
//! 4. relaying as a `CONNECT` tunnel does, except that the client's first
//!    bytes go upstream only once judged ([`super::sniff`]): a TLS
//!    `ClientHello`'s server name or an HTTP request's `Host` naming another
//!    host than the name refuses the connection (fronted). A server that
//!    speaks first (SSH) is relayed at once; the check applies to the
//!    client's first bytes whenever they come.
//!
//! A refused connection is closed with a reset (the client sees
//! `ECONNRESET`), and recorded like the proxy's other refusals, saying it
//! came transparently and what the decision rested on.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use super::names::NameTable;
use super::request::{Host, Target};
use super::server::inspect::{intercept, Prefixed};
use super::server::{decide, dial, tunnel_gated, Refusal, Shared};
use super::sniff::{sniff, Sniffed, MAX_SNIFF};
use crate::audit::{Event, ProxyBasis, ProxyEvent, ProxyVerdict, ProxyVia};
use crate::policy::{HostName, Port};

/// Where an accepted transparent connection was meant to go, as the kernel
/// recorded it when the run's client connected: taken once (read and
/// forgotten) by the client's address (`peer`) and the listener's (`local`);
/// `None` when the kernel recorded nothing for that pair, or recorded it for
/// another run (the connection is then not the run's and is refused).
/// Implemented by the kernel side ([`crate::bpf::redirect::Redirects`]).
pub trait Originals: Send + Sync + 'static {
    fn take(&self, peer: SocketAddr, local: SocketAddr) -> Option<SocketAddr>;
}

/// The transparent listener's state.
pub(crate) struct Transparent {
    pub(crate) shared: Arc<Shared>,
    pub(crate) table: Arc<NameTable>,
    pub(crate) originals: OnceLock<Arc<dyn Originals>>,
    /// A connection not from the run was recorded already.
    told_unattributed: AtomicBool,
}

impl Transparent {
    pub(crate) fn new(shared: Arc<Shared>, table: Arc<NameTable>) -> Self {
        Self {
            shared,
            table,
            originals: OnceLock::new(),
            told_unattributed: AtomicBool::new(false),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        host: String,
        port: u16,
        dialed: Option<SocketAddr>,
        verdict: ProxyVerdict,
        reason: String,
        basis: Option<ProxyBasis>,
    ) {
        self.shared.audit.record(Event::Proxy(ProxyEvent {
            method: String::new(),
            host,
            port,
            dialed,
            allowed: verdict.allowed(),
            reason,
            status: 0,
            verdict,
            via: Some(ProxyVia::Transparent),
            basis,
        }));
    }
}

/// Accept until the task is dropped (which closes every connection).
pub(crate) async fn serve(listener: TcpListener, t: Arc<Transparent>) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    // The proxy's cap counts these too; over it, closed.
                    let Ok(permit) = Arc::clone(&t.shared.slots).try_acquire_owned() else {
                        t.record(
                            String::new(), 0, None, ProxyVerdict::Overloaded,
                            format!("too many connections (run.max_connections = {})", t.shared.max_connections),
                            None,
                        );
                        reset(&stream);
                        continue;
                    };
                    tasks.spawn(connection(Arc::clone(&t), stream, peer, permit));
                }
                Err(e) => {
                    tracing::debug!("transparent accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Close with a reset rather than an orderly end: the client learns it was
/// refused (`ECONNRESET`), not that the server had nothing to say.
fn reset(s: &TcpStream) {
    let _ = s.set_zero_linger();
}

/// Steps 1–3: where the connection may go, or why not (recorded).
async fn admit(
    t: &Transparent,
    client: &TcpStream,
    peer: SocketAddr,
) -> Option<(HostName, Port, Vec<SocketAddr>, String)> {
    let local = client.local_addr().ok()?;
    let Some(original) = t.originals.get().and_then(|o| o.take(peer, local)) else {
        if !t.told_unattributed.swap(true, Ordering::Relaxed) {
            t.record(
                String::new(),
                0,
                None,
                ProxyVerdict::Unattributed,
                format!(
                    "a connection from {peer} to the transparent listener that the kernel did not \
                     bring from the run (later ones are not recorded)"
                ),
                None,
            );
        }
        return None;
    };
    let ip = original.ip();
    let Some(name) = t.table.name_of(ip) else {
        let shown = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        t.record(
            shown.to_string(),
            original.port(),
            None,
            ProxyVerdict::IpLiteral,
            format!("{shown} is no address the run's resolver handed out for an allowed name"),
            None,
        );
        return None;
    };
    let port = Port::new(original.port())?;
    let target = Target {
        host: Host::Name(name.clone()),
        port,
    };
    let refused = |r: &Refusal| {
        t.record(
            name.to_string(),
            port.get(),
            None,
            r.verdict,
            r.recorded(),
            Some(ProxyBasis::ResolvedName),
        );
    };
    let (rule, addrs) = match decide(&t.shared, &target).await {
        Ok(d) => d,
        Err(r) => {
            refused(&r);
            return None;
        }
    };
    Some((name, port, addrs, format!("allowed by `{rule}`")))
}

async fn connection(
    t: Arc<Transparent>,
    client: TcpStream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let Some((name, port, addrs, allowed_by)) = admit(&t, &client, peer).await else {
        reset(&client);
        return;
    };
    if t.shared.inspector.inspects(&Host::Name(name.clone())) {
        inspected(&t, client, name, port, &addrs, allowed_by).await;
        return;
    }
    let (upstream, dialed) = match dial(&addrs, t.shared.connect_timeout).await {
        Ok(u) => u,
        Err(mut failed) => {
            failed.allowed_by = Some(allowed_by);
            t.record(
                name.to_string(),
                port.get(),
                None,
                failed.verdict,
                failed.recorded(),
                Some(ProxyBasis::ResolvedName),
            );
            reset(&client);
            return;
        }
    };
    let recorded = AtomicBool::new(false);
    let gate = async {
        let judged = first_bytes(&client, &name, t.shared.head_timeout).await;
        recorded.store(true, Ordering::Relaxed);
        match judged {
            Ok((basis, bytes)) => {
                t.record(
                    name.to_string(),
                    port.get(),
                    Some(dialed),
                    ProxyVerdict::Allowed,
                    allowed_by.clone(),
                    Some(basis),
                );
                Ok(bytes)
            }
            Err(Judged::Refused(verdict, reason, basis)) => {
                t.record(
                    name.to_string(),
                    port.get(),
                    Some(dialed),
                    verdict,
                    reason,
                    basis,
                );
                Err(io::Error::new(io::ErrorKind::PermissionDenied, "refused"))
            }
            Err(Judged::Io(e)) => Err(e),
        }
    };
    let ended = tunnel_gated(&client, &upstream, t.shared.idle, gate).await;
    if !recorded.load(Ordering::Relaxed) {
        // Relayed, and the client never sent a byte: by the name alone.
        t.record(
            name.to_string(),
            port.get(),
            Some(dialed),
            ProxyVerdict::Allowed,
            allowed_by,
            Some(ProxyBasis::ResolvedName),
        );
    }
    // Refused: the client is reset; the upstream, which got none of its
    // bytes, sees an orderly end.
    if matches!(&ended, Err(e) if e.kind() == io::ErrorKind::PermissionDenied) {
        reset(&client);
    }
}

/// A connection to a host whose requests are inspected: never a tunnel (its
/// requests would go unjudged). TLS naming the host (or nothing) is
/// terminated and served like an inspected `CONNECT`, plain HTTP whose
/// `Host` names it is judged the same way, plain on both sides; anything
/// else is refused.
async fn inspected(
    t: &Transparent,
    client: TcpStream,
    name: HostName,
    port: Port,
    addrs: &[SocketAddr],
    allowed_by: String,
) {
    let refuse = |verdict, reason: String, basis| {
        t.record(name.to_string(), port.get(), None, verdict, reason, basis);
        reset(&client);
    };
    match first_bytes(&client, &name, t.shared.head_timeout).await {
        Ok((basis, bytes)) if bytes.first() == Some(&0x16) || basis == ProxyBasis::Host => {
            t.record(
                name.to_string(),
                port.get(),
                None,
                ProxyVerdict::Allowed,
                format!("{allowed_by}; its requests inspected"),
                Some(basis),
            );
            let target = Target {
                host: Host::Name(name.clone()),
                port,
            };
            let client = Prefixed::new(bytes, client);
            Box::pin(intercept(&t.shared, client, &target, addrs, &allowed_by)).await;
        }
        Ok((basis, _)) => refuse(
            ProxyVerdict::BadRequest,
            format!(
                "{name}'s requests are inspected, and the connection came with neither TLS nor \
                 HTTP: refused"
            ),
            Some(basis),
        ),
        Err(Judged::Refused(verdict, reason, basis)) => refuse(verdict, reason, basis),
        Err(Judged::Io(_)) => reset(&client),
    }
}

/// Why the first bytes were not let through.
enum Judged {
    /// Refused, with the verdict, the reason, and what it rested on.
    Refused(ProxyVerdict, String, Option<ProxyBasis>),
    Io(io::Error),
}

/// Read the client's first bytes until [`sniff`] can judge them, and judge
/// them against `name`: the bytes to send upstream, and what the decision
/// rested on. Waits for the first byte as long as it takes (the tunnel's
/// idle limit applies); from there, the rest must come within `complete`.
async fn first_bytes(
    client: &TcpStream,
    name: &HostName,
    complete: Duration,
) -> Result<(ProxyBasis, Vec<u8>), Judged> {
    let mut buf = Vec::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let verdict = sniff(&buf);
        if verdict != Sniffed::NeedMore {
            return judge(verdict, name).map(|b| (b, buf));
        }
        let ready = match deadline {
            None => client.readable().await,
            Some(d) => match tokio::time::timeout_at(d, client.readable()).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Judged::Refused(
                        ProxyVerdict::BadRequest,
                        format!(
                            "the client's first bytes did not complete within {} s",
                            complete.as_secs()
                        ),
                        None,
                    ))
                }
            },
        };
        ready.map_err(Judged::Io)?;
        let mut chunk = [0u8; 4096];
        let room = (MAX_SNIFF - buf.len()).min(chunk.len());
        match client.try_read(&mut chunk[..room]) {
            Ok(0) if buf.is_empty() => return Ok((ProxyBasis::ResolvedName, buf)),
            Ok(0) => {
                return Err(Judged::Refused(
                    ProxyVerdict::BadRequest,
                    "the client closed before its first bytes could be judged".into(),
                    None,
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(Judged::Io(e)),
        }
        if deadline.is_none() {
            deadline = Some(tokio::time::Instant::now() + complete);
        }
    }
}

/// The decision on sniffed first bytes for a connection to `name`.
fn judge(s: Sniffed, name: &HostName) -> Result<ProxyBasis, Judged> {
    let other = |basis: ProxyBasis, claimed: &str| {
        let shown = crate::shown::escaped(claimed);
        Judged::Refused(
            ProxyVerdict::Fronted,
            format!("the connection to {name} named {shown} ({basis}): fronted, refused"),
            Some(basis),
        )
    };
    let same = |claimed: &str| HostName::parse(claimed).is_ok_and(|c| &c == name);
    match s {
        Sniffed::Tls(Some(sni)) if same(&sni) => Ok(ProxyBasis::Sni),
        Sniffed::Tls(Some(sni)) => Err(other(ProxyBasis::Sni, &sni)),
        Sniffed::Http(hosts) if !hosts.is_empty() => match hosts.iter().find(|h| !same(h)) {
            None => Ok(ProxyBasis::Host),
            Some(h) => Err(other(ProxyBasis::Host, h)),
        },
        Sniffed::Malformed(why) => Err(Judged::Refused(
            ProxyVerdict::BadRequest,
            format!("the client's first bytes: {why}"),
            None,
        )),
        // Nothing named: by the name the address was handed out for.
        Sniffed::Tls(None) | Sniffed::Http(_) | Sniffed::Other | Sniffed::NeedMore => {
            Ok(ProxyBasis::ResolvedName)
        }
    }
}

#[cfg(test)]
mod tests;
