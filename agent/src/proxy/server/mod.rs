//! The proxy server: accept, read a head, run the gates (see the
//! [module docs](super)), then tunnel or forward. Every decision is audited.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::allowlist::{check_ip, check_name, literal_name, Reason, Verdict};
use super::guard::{check_answer, OwnAddresses};
use super::inspector::Inspector;
use super::pool::Pool;
use super::request::{parse_head, HeadError, Host, Kind, RequestHead, Target, MAX_HEAD};
use super::resolver::Resolver;
use super::tls::RunTls;
use super::ProxyConfig;
use crate::audit::{AuditLog, Event, ProxyEvent, ProxyVerdict, ProxyVia};
use crate::policy::{HostName, HostRule, NetworkPolicy};

mod forward;
pub(crate) mod inspect;
mod inspect_h2;
#[cfg(test)]
mod tests;
mod tunnel;

use forward::forward;
pub use tunnel::{tunnel, tunnel_gated, TUNNEL_BUF};

/// The read buffer of a connection's request and response heads.
pub const HEAD_BUF: usize = 8 * 1024;
/// Connections over the limit that still get a polite 503 at once.
const OVERFLOW_ANSWERS: usize = 64;

/// State shared by every connection of one proxy.
pub(crate) struct Shared {
    pub(super) network: NetworkPolicy,
    pub(super) idle: Duration,
    pub(super) head_timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) audit: Arc<AuditLog>,
    pub(super) resolver: Arc<dyn Resolver>,
    pub(super) own: OwnAddresses,
    /// The base64 token expected after `Basic `.
    pub(super) token: Vec<u8>,
    pub(super) slots: Arc<Semaphore>,
    pub(super) overflow: Arc<Semaphore>,
    /// Connections dropped unanswered, past the overflow answers.
    pub(super) dropped: AtomicU64,
    /// Idle upstream connections of forwarded requests.
    pub(super) pool: Pool,
    /// Idle upstream TLS connections of inspected hosts' requests.
    pub(super) inspected_pool: Pool<Box<tokio_rustls::client::TlsStream<TcpStream>>>,
    /// The run's secrets and request rules.
    pub(super) inspector: Arc<Inspector>,
    /// The run's CA and upstream verification, when hosts are inspected.
    pub(super) tls: Option<Arc<RunTls>>,
    /// Hosts whose certificate a client refused (recorded once each).
    pub(super) refused_cert: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Shared {
    pub(crate) fn new(c: ProxyConfig, secret: &str) -> Self {
        Self {
            network: c.network,
            idle: c.idle_tunnel,
            head_timeout: c.head_timeout,
            connect_timeout: c.connect_timeout,
            max_connections: c.max_connections,
            audit: c.audit,
            resolver: c.resolver,
            own: OwnAddresses::new(),
            token: base64(format!("lockrun:{secret}").as_bytes()).into_bytes(),
            slots: Arc::new(Semaphore::new(c.max_connections)),
            overflow: Arc::new(Semaphore::new(OVERFLOW_ANSWERS)),
            dropped: AtomicU64::new(0),
            pool: Pool::default(),
            inspected_pool: Pool::default(),
            inspector: c.inspector,
            tls: c.tls,
            refused_cert: std::sync::Mutex::default(),
        }
    }

    fn record(
        &self,
        method: &str,
        target: Option<&Target>,
        dialed: Option<SocketAddr>,
        verdict: ProxyVerdict,
        reason: String,
        status: u16,
    ) {
        let via = match method {
            "" => None,
            "CONNECT" => Some(ProxyVia::Connect),
            _ => Some(ProxyVia::Forward),
        };
        self.record_via(method, target, dialed, verdict, reason, status, via);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_via(
        &self,
        method: &str,
        target: Option<&Target>,
        dialed: Option<SocketAddr>,
        verdict: ProxyVerdict,
        reason: String,
        status: u16,
        via: Option<ProxyVia>,
    ) {
        self.audit.record(Event::Proxy(ProxyEvent {
            method: method.to_owned(),
            host: target.map(Target::host_string).unwrap_or_default(),
            port: target.map_or(0, |t| t.port.get()),
            dialed,
            allowed: verdict.allowed(),
            reason,
            status,
            verdict,
            via,
            basis: None,
        }));
    }

    fn authorized(&self, value: Option<&[u8]>) -> bool {
        let Some(v) = value else { return false };
        let v = trim(v);
        if v.len() < 6 || !v[..6].eq_ignore_ascii_case(b"basic ") {
            return false;
        }
        let token = trim(&v[6..]);
        token.len() == self.token.len()
            && token
                .iter()
                .zip(&self.token)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

/// 32 hex digits from the kernel's CSPRNG.
pub(crate) fn random_secret() -> io::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().fold(String::with_capacity(32), |mut s, x| {
        s.push(char::from(b"0123456789abcdef"[usize::from(x >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(x & 15)]));
        s
    }))
}

/// Standard base64 with padding.
#[must_use]
pub fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The accept loop; returns when `stop` fires, after closing every connection.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut tasks = JoinSet::new();
    let mut prune = tokio::time::interval(super::pool::KEEP / 2);
    let mut accept_errors = AcceptErrors::default();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = prune.tick() => {
                shared.pool.prune(false);
                shared.inspected_pool.prune(false);
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = Arc::clone(&shared);
                    if let Ok(permit) = Arc::clone(&shared.slots).try_acquire_owned() {
                        tasks.spawn(connection(shared, stream, permit));
                    } else if let Ok(permit) = Arc::clone(&shared.overflow).try_acquire_owned() {
                        tasks.spawn(too_many(shared, stream, permit));
                    } else {
                        // Beyond the overflow answers the connection is
                        // dropped unanswered: counted, recorded at the end.
                        shared.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    match accept_errors.note(Instant::now(), &e) {
                        Report::First => tracing::warn!(
                            "proxy accept failed: {e} (more failures are counted, and reported \
                             every {} s)",
                            AcceptErrors::EVERY.as_secs()
                        ),
                        Report::Since(n) => tracing::warn!(
                            "proxy accept failed {n} more times in the last {} s; the latest: {e}",
                            AcceptErrors::EVERY.as_secs()
                        ),
                        Report::Counted => {}
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    if let Some((n, e)) = accept_errors.unreported() {
        let s = if n == 1 { "" } else { "s" };
        tracing::warn!("proxy accept failed {n} more time{s}; the latest: {e}");
    }
    tasks.shutdown().await;
    shared.pool.prune(true);
    shared.inspected_pool.prune(true);
    let dropped = shared.dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        shared.audit.record(Event::ProxyConnectionsDropped {
            count: dropped,
            max_connections: shared.max_connections,
            answered: OVERFLOW_ANSWERS,
        });
    }
}

/// Failed accepts (out of descriptors, most likely: the back-off retries
/// every 50 ms), told once and then summed up at most every [`Self::EVERY`]
/// and when the proxy stops, instead of a line per retry.
#[derive(Default)]
struct AcceptErrors {
    /// When a line was last written.
    told: Option<Instant>,
    /// Failures since, and the latest of them.
    unreported: Option<(u64, String)>,
}

#[derive(Debug, PartialEq, Eq)]
enum Report {
    /// The first failure: tell it.
    First,
    /// Tell it with the count of failures since the last line.
    Since(u64),
    /// Counted for the next line.
    Counted,
}

impl AcceptErrors {
    const EVERY: Duration = Duration::from_secs(10);

    fn note(&mut self, now: Instant, e: &io::Error) -> Report {
        match self.told {
            None => {
                self.told = Some(now);
                Report::First
            }
            Some(t) if now.duration_since(t) >= Self::EVERY => {
                self.told = Some(now);
                match self.unreported.take() {
                    // Quiet since the last line: a new episode.
                    None => Report::First,
                    Some((n, _)) => Report::Since(n + 1),
                }
            }
            Some(_) => {
                let n = self.unreported.as_ref().map_or(0, |(n, _)| *n);
                self.unreported = Some((n + 1, e.to_string()));
                Report::Counted
            }
        }
    }

    /// Failures counted and not yet told, and the latest.
    fn unreported(&mut self) -> Option<(u64, String)> {
        self.unreported.take()
    }
}

async fn too_many(shared: Arc<Shared>, stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let mut client = BufReader::new(stream);
    let head = read_head(&mut client, shared.head_timeout, shared.head_timeout).await;
    let (method, target) = match &head {
        Ok(h) => (h.method.clone(), Some(h.target().clone())),
        Err(_) => (String::new(), None),
    };
    let reason = format!(
        "too many connections (run.max_connections = {})",
        shared.max_connections
    );
    shared.record(
        &method,
        target.as_ref(),
        None,
        ProxyVerdict::Overloaded,
        reason.clone(),
        503,
    );
    refuse_and_close(&mut client, 503, &reason).await;
}

/// Why no request head came.
enum ReadError {
    /// The client closed (or went idle) between requests: nothing to answer.
    Closed,
    /// The head did not complete in time.
    Timeout,
    Head(HeadError),
}

async fn read_head<S: AsyncRead + Unpin>(
    client: &mut BufReader<S>,
    first_byte: Duration,
    complete: Duration,
) -> Result<RequestHead, ReadError> {
    read_head_with(client, first_byte, complete, parse_head).await
}

/// [`read_head`] with another parser (origin-form, inside a tunnel).
async fn read_head_with<S: AsyncRead + Unpin>(
    client: &mut BufReader<S>,
    first_byte: Duration,
    complete: Duration,
    parse: impl Fn(&[u8]) -> Result<Option<RequestHead>, HeadError>,
) -> Result<RequestHead, ReadError> {
    let mut head: Vec<u8> = Vec::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let wait = match deadline {
            None => tokio::time::Instant::now() + first_byte,
            Some(d) => d,
        };
        let avail = match tokio::time::timeout_at(wait, client.fill_buf()).await {
            Err(_) if deadline.is_none() => return Err(ReadError::Closed),
            Err(_) => return Err(ReadError::Timeout),
            Ok(Err(_)) => return Err(ReadError::Closed),
            Ok(Ok([])) if head.is_empty() => return Err(ReadError::Closed),
            Ok(Ok([])) => {
                return Err(ReadError::Head(HeadError::Malformed(
                    "connection closed mid-head".into(),
                )))
            }
            Ok(Ok(a)) => a,
        };
        if deadline.is_none() {
            deadline = Some(tokio::time::Instant::now() + complete);
        }
        let before = head.len();
        let take = avail.len().min(MAX_HEAD + 1 - before);
        head.extend_from_slice(&avail[..take]);
        match parse(&head) {
            Ok(Some(h)) => {
                client.consume(h.len - before);
                return Ok(h);
            }
            Ok(None) => client.consume(take),
            Err(e) => return Err(ReadError::Head(e)),
        }
    }
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "Connection established",
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// `reason` as a header value and a line of text may carry it: every
/// character but space and visible ASCII made `?`.
pub(super) fn printable(reason: &str) -> String {
    reason
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// Answer with `status`, the reason in a header and the body, and close.
async fn refuse<W: AsyncWrite + Unpin>(w: &mut W, status: u16, reason: &str) -> io::Result<()> {
    let clean = printable(reason);
    let body = format!("lockrun proxy: {clean}\n");
    let auth = if status == 407 {
        "Proxy-Authenticate: Basic realm=\"lockrun\"\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nX-Lockrun-Reason: {clean}\r\n{auth}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        status_text(status),
        body.len()
    );
    w.write_all(head.as_bytes()).await?;
    w.flush().await
}

/// Answer with a refusal, then close gracefully: stop writing and drain
/// what the client already sent (briefly), so that the kernel does not
/// answer unread bytes with a reset that would destroy the answer.
async fn refuse_and_close<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut BufReader<S>,
    status: u16,
    reason: &str,
) {
    if refuse(client, status, reason).await.is_err() {
        return;
    }
    let _ = client.get_mut().shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < 256 * 1024 {
            match client.get_mut().read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
}

/// A refusal, or an upstream's failure: the status answered, the reason
/// in words, and as the audit log's verdict.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(super) status: u16,
    pub(super) reason: String,
    pub(super) verdict: ProxyVerdict,
    /// For a failure after the policy allowed the request: the words of
    /// the rule that allowed it ("allowed by" and the rule), which its
    /// record says first.
    pub(super) allowed_by: Option<String>,
}

impl Refusal {
    /// The upstream failed (`502`, or `504` when it timed out).
    pub(super) fn upstream(status: u16, reason: String) -> Self {
        Self {
            status,
            reason,
            verdict: ProxyVerdict::UpstreamFailed,
            allowed_by: None,
        }
    }

    /// An upstream's failure after `rule` allowed the request.
    fn allowed_by(mut self, rule: &HostRule) -> Self {
        self.allowed_by = Some(format!("allowed by `{rule}`"));
        self
    }

    /// What the audit log records: for an upstream's failure, the rule
    /// that allowed the request, then what failed (as a failed dial's
    /// record says it).
    pub(super) fn recorded(&self) -> String {
        match &self.allowed_by {
            Some(rule) => format!("{rule}; upstream: {}", self.reason),
            None => self.reason.clone(),
        }
    }

    /// Record it and answer the client with it, closing the connection. A
    /// failure after the policy allowed the request (one that names the
    /// rule) is the upstream's, and said so: `upstream: …`.
    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
        self,
        shared: &Shared,
        client: &mut BufReader<S>,
        head: &RequestHead,
        dialed: Option<SocketAddr>,
    ) {
        let via = match head.method.as_str() {
            "CONNECT" => ProxyVia::Connect,
            _ => ProxyVia::Forward,
        };
        self.answer_via(shared, client, head, dialed, via).await;
    }

    /// [`Self::answer`], recorded as having come `via`.
    async fn answer_via<S: AsyncRead + AsyncWrite + Unpin>(
        self,
        shared: &Shared,
        client: &mut BufReader<S>,
        head: &RequestHead,
        dialed: Option<SocketAddr>,
        via: ProxyVia,
    ) {
        let said = match self.allowed_by {
            Some(_) => format!("upstream: {}", self.reason),
            None => self.reason.clone(),
        };
        let status = self.status;
        shared.record_via(
            &head.method,
            Some(head.target()),
            dialed,
            self.verdict,
            self.recorded(),
            status,
            Some(via),
        );
        refuse_and_close(client, status, &said).await;
    }
}

#[allow(clippy::too_many_lines)] // the gates in order, each with its refusal
async fn connection(shared: Arc<Shared>, stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let mut client = BufReader::with_capacity(HEAD_BUF, stream);
    let mut first_byte = shared.head_timeout;
    loop {
        let head = match read_head(&mut client, first_byte, shared.head_timeout).await {
            Ok(h) => h,
            Err(ReadError::Closed) => return,
            Err(ReadError::Timeout) => {
                let reason = format!(
                    "request head not complete within {} s",
                    shared.head_timeout.as_secs()
                );
                shared.record(
                    "",
                    None,
                    None,
                    ProxyVerdict::BadRequest,
                    reason.clone(),
                    408,
                );
                refuse_and_close(&mut client, 408, &reason).await;
                return;
            }
            Err(ReadError::Head(e)) => {
                let status = e.status();
                shared.record(
                    "",
                    None,
                    None,
                    ProxyVerdict::BadRequest,
                    e.to_string(),
                    status,
                );
                refuse_and_close(&mut client, status, &e.to_string()).await;
                return;
            }
        };
        first_byte = shared.idle;
        if !shared.authorized(head.proxy_auth.as_deref()) {
            let (verdict, reason) = if head.proxy_auth.is_some() {
                (ProxyVerdict::WrongCredentials, "wrong proxy credentials")
            } else {
                (
                    ProxyVerdict::NoCredentials,
                    "proxy credentials required (use the proxy URL from the environment)",
                )
            };
            shared.record(
                &head.method,
                Some(head.target()),
                None,
                verdict,
                reason.into(),
                407,
            );
            refuse_and_close(&mut client, 407, reason).await;
            return;
        }
        let target = head.target().clone();
        let (rule, addrs) = match decide(&shared, &target).await {
            Ok(d) => d,
            Err(refusal) => {
                // A name the policy allowed that did not resolve is the
                // upstream's failure: said as one, like a failed dial.
                refusal.answer(&shared, &mut client, &head, None).await;
                return;
            }
        };
        let allowed_by = format!("allowed by `{rule}`");
        match &head.kind {
            Kind::Connect(_) if shared.inspector.inspects(&target.host) => {
                shared.record(
                    &head.method,
                    Some(&target),
                    None,
                    ProxyVerdict::Allowed,
                    format!("{allowed_by}; its requests inspected"),
                    200,
                );
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                // Bytes the client sent right behind the head (its
                // ClientHello) are still in the buffer: read first.
                Box::pin(inspect::intercept(
                    &shared,
                    client,
                    &target,
                    &addrs,
                    &allowed_by,
                ))
                .await;
                return;
            }
            Kind::Connect(_) => {
                let Some((upstream, dialed)) =
                    dial_or_refuse(&shared, &mut client, &head, &addrs, &allowed_by).await
                else {
                    return;
                };
                shared.record(
                    &head.method,
                    Some(&target),
                    Some(dialed),
                    ProxyVerdict::Allowed,
                    allowed_by,
                    200,
                );
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let mut upstream = upstream;
                // Bytes the client sent right behind the head belong upstream.
                let early = client.buffer().to_vec();
                if !early.is_empty() && upstream.write_all(&early).await.is_err() {
                    return;
                }
                let _ = tunnel(client.into_inner(), upstream, shared.idle).await;
                return;
            }
            Kind::Forward { path, .. } => {
                if !forward(&shared, &mut client, &head, path, &addrs, &allowed_by).await {
                    return;
                }
            }
        }
    }
}

/// Gate 6 for one request: dial the checked addresses, or answer the client
/// with the upstream's failure (audited as allowed: the policy said yes).
async fn dial_or_refuse(
    shared: &Shared,
    client: &mut BufReader<TcpStream>,
    head: &RequestHead,
    addrs: &[SocketAddr],
    allowed_by: &str,
) -> Option<(TcpStream, SocketAddr)> {
    match dial(addrs, shared.connect_timeout).await {
        Ok(u) => Some(u),
        Err(mut failed) => {
            failed.allowed_by = Some(allowed_by.to_owned());
            failed.answer(shared, client, head, None).await;
            None
        }
    }
}

/// Gates 3-5: allowlist, resolution, address guard. The addresses to dial.
pub(super) async fn decide(
    shared: &Shared,
    target: &Target,
) -> Result<(HostRule, Vec<SocketAddr>), Refusal> {
    let forbidden = |r: Reason| Refusal {
        status: 403,
        reason: r.to_string(),
        verdict: r.verdict(),
        allowed_by: None,
    };
    let (rule, name, addrs): (_, HostName, Vec<IpAddr>) = match &target.host {
        Host::Ip(ip) => match check_ip(&shared.network, *ip, target.port) {
            Verdict::Allow(rule) => {
                let name =
                    literal_name(*ip).ok_or_else(|| forbidden(Reason::IpLiteral { addr: *ip }))?;
                (rule, name, vec![*ip])
            }
            Verdict::Deny(r) => return Err(forbidden(r)),
        },
        Host::Name(name) => match check_name(&shared.network, name, target.port) {
            Verdict::Allow(rule) => {
                let addrs = if let Some(fixed) = shared.network.resolve.get(name) {
                    fixed.clone()
                } else {
                    match tokio::time::timeout(
                        shared.connect_timeout,
                        shared.resolver.resolve(name),
                    )
                    .await
                    {
                        Err(_) => {
                            return Err(Refusal::upstream(
                                504,
                                format!("resolving {name} timed out"),
                            )
                            .allowed_by(&rule))
                        }
                        Ok(Err(e)) => {
                            return Err(Refusal::upstream(502, e.to_string()).allowed_by(&rule))
                        }
                        Ok(Ok(a)) => a,
                    }
                };
                (rule, name.clone(), addrs)
            }
            Verdict::Deny(r) => return Err(forbidden(r)),
        },
    };
    if addrs.is_empty() {
        return Err(Refusal::upstream(502, format!("{name} has no address")).allowed_by(&rule));
    }
    let own = shared.own.get().map_err(|e| Refusal {
        status: 502,
        reason: format!("cannot read this host's addresses (getifaddrs: {e}); refusing"),
        verdict: ProxyVerdict::GuardUnavailable,
        allowed_by: None,
    })?;
    check_answer(&shared.network, &name, &addrs, &own).map_err(|refusal| {
        forbidden(Reason::Address {
            host: target.host_string(),
            refusal,
        })
    })?;
    Ok((
        rule,
        addrs
            .into_iter()
            .map(|a| SocketAddr::new(a, target.port.get()))
            .collect(),
    ))
}

/// How long a dial attempt gets before the next address is tried alongside
/// (happy eyeballs, RFC 8305's recommended delay).
const STAGGER: Duration = Duration::from_millis(250);

/// Gate 6: dial the checked addresses themselves, in order: the next
/// attempt starts when the previous one fails or after [`STAGGER`], the
/// first connection wins and the others are dropped. Each attempt has
/// `timeout`.
pub(crate) async fn dial(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), Refusal> {
    let mut attempts = JoinSet::new();
    let mut next = 0;
    let mut errors = Vec::new();
    let mut all_timed_out = true;
    loop {
        if attempts.is_empty() {
            let Some(&a) = addrs.get(next) else { break };
            next += 1;
            attempts.spawn(async move {
                (
                    a,
                    tokio::time::timeout(timeout, TcpStream::connect(a)).await,
                )
            });
            continue;
        }
        let more = next < addrs.len();
        tokio::select! {
            Some(done) = attempts.join_next() => match done {
                Ok((a, Ok(Ok(s)))) => {
                    let _ = s.set_nodelay(true);
                    return Ok((s, a));
                }
                Ok((a, Ok(Err(e)))) => {
                    all_timed_out = false;
                    errors.push(format!("{a}: {e}"));
                }
                Ok((a, Err(_))) => errors.push(format!("{a}: timed out after {} s", timeout.as_secs())),
                Err(e) => errors.push(format!("dial task: {e}")),
            },
            () = tokio::time::sleep(STAGGER), if more => {
                let a = addrs[next];
                next += 1;
                attempts.spawn(async move { (a, tokio::time::timeout(timeout, TcpStream::connect(a)).await) });
            }
        }
    }
    let status = if all_timed_out { 504 } else { 502 };
    Err(Refusal::upstream(
        status,
        format!("cannot connect: {}", errors.join("; ")),
    ))
}
