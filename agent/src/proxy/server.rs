//! The proxy server: accept, read a head, run the gates (see the
//! [module docs](super)), then tunnel or forward. Every decision is audited.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::allowlist::{check_ip, check_name, literal_name, Reason, Verdict};
use super::guard::{check_answer, OwnAddresses};
use super::pool::Pool;
use super::request::{parse_head, Body, HeadError, Host, Kind, RequestHead, Target, MAX_HEAD};
use super::resolver::Resolver;
use super::ProxyConfig;
use crate::audit::{AuditLog, Event, ProxyEvent, ProxyVerdict};
use crate::policy::{HostName, NetworkPolicy, Port};

/// The buffer of a tunnel direction that could get no splice pipe (see
/// `pump`), borrowed only while bytes flow.
pub const TUNNEL_BUF: usize = 64 * 1024;
/// The splice pipe's size, what one splice moves at most: 1 MiB (the
/// default `fs.pipe-max-size`) carried a 512 MiB download ~13% faster here
/// than the default 64 KiB pipe, with 16 times fewer splices. The pages are
/// the socket's own, moved, not copied.
const SPLICE_PIPE: usize = 1024 * 1024;
#[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
const SPLICE_PIPE_INT: libc::c_int = SPLICE_PIPE as libc::c_int;
/// How long a tunnel direction keeps its splice pipe after its last burst.
const PIPE_KEPT: Duration = Duration::from_secs(1);
/// The read buffer of a connection's request and response heads.
pub const HEAD_BUF: usize = 8 * 1024;
/// Connections over the limit that still get a polite 503 at once.
const OVERFLOW_ANSWERS: usize = 64;
/// The longest chunk-size or trailer line accepted in a chunked body.
const MAX_CHUNK_LINE: u64 = 4096;
/// The largest upstream response head relayed.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// State shared by every connection of one proxy.
pub(crate) struct Shared {
    network: NetworkPolicy,
    idle: Duration,
    head_timeout: Duration,
    connect_timeout: Duration,
    max_connections: usize,
    audit: Arc<AuditLog>,
    resolver: Arc<dyn Resolver>,
    own: OwnAddresses,
    /// The base64 token expected after `Basic `.
    token: Vec<u8>,
    slots: Arc<Semaphore>,
    overflow: Arc<Semaphore>,
    /// Connections dropped unanswered, past the overflow answers.
    dropped: std::sync::atomic::AtomicU64,
    /// Idle upstream connections of forwarded requests.
    pool: Pool,
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
            dropped: std::sync::atomic::AtomicU64::new(0),
            pool: Pool::default(),
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
        self.audit.record(Event::Proxy(ProxyEvent {
            method: method.to_owned(),
            host: target.map(Target::host_string).unwrap_or_default(),
            port: target.map_or(0, |t| t.port.get()),
            dialed,
            allowed: verdict.allowed(),
            reason,
            status,
            verdict,
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
            _ = prune.tick() => shared.pool.prune(false),
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
                        shared.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
    let dropped = shared.dropped.load(std::sync::atomic::Ordering::Relaxed);
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
        match parse_head(&head) {
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

/// Answer with `status`, the reason in a header and the body, and close.
async fn refuse<W: AsyncWrite + Unpin>(w: &mut W, status: u16, reason: &str) -> io::Result<()> {
    let clean: String = reason
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
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
async fn refuse_and_close(client: &mut BufReader<TcpStream>, status: u16, reason: &str) {
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
    status: u16,
    reason: String,
    verdict: ProxyVerdict,
    /// For a failure after the policy allowed the request: the words of
    /// the rule that allowed it ("allowed by" and the rule), which its
    /// record says first.
    allowed_by: Option<String>,
}

impl Refusal {
    /// The upstream failed (`502`, or `504` when it timed out).
    fn upstream(status: u16, reason: String) -> Self {
        Self {
            status,
            reason,
            verdict: ProxyVerdict::UpstreamFailed,
            allowed_by: None,
        }
    }

    /// An upstream's failure after `rule` allowed the request.
    fn allowed_by(mut self, rule: &crate::policy::HostRule) -> Self {
        self.allowed_by = Some(format!("allowed by `{rule}`"));
        self
    }

    /// What the audit log records: for an upstream's failure, the rule
    /// that allowed the request, then what failed (as a failed dial's
    /// record says it).
    fn recorded(&self) -> String {
        match &self.allowed_by {
            Some(rule) => format!("{rule}; upstream: {}", self.reason),
            None => self.reason.clone(),
        }
    }

    /// Record it and answer the client with it, closing the connection. A
    /// failure after the policy allowed the request (one that names the
    /// rule) is the upstream's, and said so: `upstream: …`.
    async fn answer(
        self,
        shared: &Shared,
        client: &mut BufReader<TcpStream>,
        head: &RequestHead,
        dialed: Option<SocketAddr>,
    ) {
        let said = match self.allowed_by {
            Some(_) => format!("upstream: {}", self.reason),
            None => self.reason.clone(),
        };
        let status = self.status;
        shared.record(
            &head.method,
            Some(head.target()),
            dialed,
            self.verdict,
            self.recorded(),
            status,
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
async fn decide(
    shared: &Shared,
    target: &Target,
) -> Result<(crate::policy::HostRule, Vec<SocketAddr>), Refusal> {
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

/// Copy both ways until both sides have closed, forwarding each half-close
/// as `shutdown(Write)` on the other side; give up after `idle` without a
/// byte in either direction.
pub async fn tunnel(a: TcpStream, b: TcpStream, idle: Duration) -> io::Result<()> {
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let both = async { tokio::try_join!(pump(&a, &b, &last, start), pump(&b, &a, &last, start)) };
    tokio::select! {
        r = both => r.map(|_| ()),
        () = idle_watch(&last, start, idle) => Err(io::Error::new(io::ErrorKind::TimedOut, "tunnel idle")),
    }
}

/// One direction of a tunnel, `r` to `w`, in the kernel: `splice(2)` from the
/// socket into a pipe and from the pipe into the other socket, so the bytes
/// are never copied through lockrun (a 512 MiB download through a
/// `read`/`write` loop spent most of its time in those two copies). The pipe
/// lives while bytes flow and for [`PIPE_KEPT`] after the last burst (a bulk
/// transfer drains the socket thousands of times; a pipe per burst cost two
/// descriptors and three syscalls each time); an idle tunnel holds no pipe
/// and no buffer. Where no pipe can be had (out of descriptors), the burst
/// is copied through a buffer instead.
async fn pump(r: &TcpStream, w: &TcpStream, last: &AtomicU64, start: Instant) -> io::Result<()> {
    use nix::fcntl::{splice, SpliceFFlags};
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let mut pipe: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> = None;
    loop {
        if pipe.is_some() {
            if tokio::time::timeout(PIPE_KEPT, r.readable()).await.is_err() {
                // Quiet: give the pipe back, wait without it.
                pipe = None;
                r.readable().await?;
            }
        } else {
            r.readable().await?;
        }
        if pipe.is_none() {
            pipe = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
                .ok()
                .map(|(pr, pw)| {
                    // Larger steps, fewer splices; the pipe stays 64 KiB if refused.
                    let _ = nix::fcntl::fcntl(
                        std::os::fd::AsRawFd::as_raw_fd(&pw),
                        nix::fcntl::FcntlArg::F_SETPIPE_SZ(SPLICE_PIPE_INT),
                    );
                    (pr, pw)
                });
        }
        let Some((pipe_r, pipe_w)) = &pipe else {
            if copy_burst(r, w, last, start).await? {
                return Ok(());
            }
            continue;
        };
        loop {
            let got = r.try_io(tokio::io::Interest::READABLE, || {
                splice(r, None, pipe_w, None, SPLICE_PIPE, flags).map_err(io::Error::from)
            });
            let n = match got {
                Ok(0) => {
                    shutdown_write(w)?;
                    return Ok(());
                }
                Ok(n) => n,
                // Drained: wait for the next burst.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            let mut left = n;
            while left > 0 {
                w.writable().await?;
                match w.try_io(tokio::io::Interest::WRITABLE, || {
                    splice(pipe_r, None, w, None, left, flags).map_err(io::Error::from)
                }) {
                    Ok(m) => left -= m,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }
}

/// The fallback of [`pump`] for one burst: read and write through a buffer
/// until `r` would block. `Ok(true)` when `r` reached its end (and `w` was
/// shut for writing).
async fn copy_burst(
    r: &TcpStream,
    w: &TcpStream,
    last: &AtomicU64,
    start: Instant,
) -> io::Result<bool> {
    let mut buf = vec![0u8; TUNNEL_BUF];
    loop {
        match r.try_read(&mut buf) {
            Ok(0) => {
                shutdown_write(w)?;
                return Ok(true);
            }
            Ok(n) => {
                let mut off = 0;
                while off < n {
                    w.writable().await?;
                    match w.try_write(&buf[off..n]) {
                        Ok(m) => off += m,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// Forward a half-close: no more bytes will go to `w`.
fn shutdown_write(w: &TcpStream) -> io::Result<()> {
    match nix::sys::socket::shutdown(
        std::os::fd::AsRawFd::as_raw_fd(w),
        nix::sys::socket::Shutdown::Write,
    ) {
        // The peer may be gone already; the other direction reports that.
        Ok(()) | Err(nix::errno::Errno::ENOTCONN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn idle_watch(last: &AtomicU64, start: Instant, idle: Duration) {
    loop {
        let since_start = Duration::from_millis(last.load(Ordering::Relaxed));
        let deadline = start + since_start + idle;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// Hop-by-hop headers, never forwarded (plus those `Connection` names).
const HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "proxy-connection",
    "proxy-authorization",
];

fn hop_by_hop(headers: &[(String, Vec<u8>)]) -> Vec<String> {
    let mut names: Vec<String> = HOP.iter().map(|s| (*s).to_owned()).collect();
    for (n, v) in headers {
        if n.eq_ignore_ascii_case("connection") {
            for tok in String::from_utf8_lossy(v).split(',') {
                let t = tok.trim().to_ascii_lowercase();
                if !t.is_empty() && t != "content-length" && t != "transfer-encoding" {
                    names.push(t);
                }
            }
        }
    }
    names
}

fn keep_header(name: &str, hop: &[String]) -> bool {
    let lower = name.to_ascii_lowercase();
    !lower.starts_with("proxy-") && !hop.contains(&lower)
}

/// Forward one absolute-form request and relay the response, on an idle
/// upstream connection from the pool when the request is safe to retry and
/// one to a just-checked address is there, else on a fresh dial. Returns
/// whether the client connection may carry on.
async fn forward(
    shared: &Shared,
    client: &mut BufReader<TcpStream>,
    head: &RequestHead,
    path: &str,
    addrs: &[SocketAddr],
    allowed_by: &str,
) -> bool {
    let target = head.target();
    let mut pooled = if head.resendable() {
        shared.pool.take(target, addrs)
    } else {
        shared.pool.close(target);
        None
    };
    loop {
        let reused = pooled.is_some();
        let (upstream, dialed) = match pooled.take() {
            Some(u) => u,
            None => match dial_or_refuse(shared, client, head, addrs, allowed_by).await {
                Some(u) => u,
                None => return false,
            },
        };
        match forward_inner(shared, client, head, path, upstream, reused).await {
            Ok((status, keep, back)) => {
                if let Some(up) = back {
                    shared.pool.put(target, dialed, up);
                }
                shared.record(
                    &head.method,
                    Some(target),
                    Some(dialed),
                    ProxyVerdict::Allowed,
                    allowed_by.to_owned(),
                    status,
                );
                return keep && head.keep_alive;
            }
            // The upstream had closed the kept connection: once more, fresh.
            Err(ForwardError::Stale) => {}
            Err(ForwardError::BeforeResponse(status, why)) => {
                // 400: the client's body did not come through as framed.
                let verdict = if status == 400 {
                    ProxyVerdict::BadRequest
                } else {
                    ProxyVerdict::UpstreamFailed
                };
                let failed = Refusal {
                    status,
                    reason: why,
                    verdict,
                    allowed_by: Some(allowed_by.to_owned()),
                };
                failed.answer(shared, client, head, Some(dialed)).await;
                return false;
            }
            // Either side may have gone: the answer was relayed, in part.
            Err(ForwardError::AfterResponse(status)) => {
                shared.record(
                    &head.method,
                    Some(target),
                    Some(dialed),
                    ProxyVerdict::Allowed,
                    format!("{allowed_by}; relay cut short"),
                    status,
                );
                return false;
            }
        }
    }
}

enum ForwardError {
    /// A connection from the pool was closed or reset before any byte of a
    /// response: nothing was sent to the client, the request may go again.
    Stale,
    /// Nothing was sent to the client yet: answer with this status.
    BeforeResponse(u16, String),
    /// The response head went out; the connection can only be closed.
    AfterResponse(u16),
}

/// How a response body ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

#[allow(clippy::too_many_lines)] // request out, response back, in order
async fn forward_inner(
    shared: &Shared,
    client: &mut BufReader<TcpStream>,
    head: &RequestHead,
    path: &str,
    upstream: TcpStream,
    reused: bool,
) -> Result<(u16, bool, Option<TcpStream>), ForwardError> {
    let before =
        |status: u16| move |e: io::Error| ForwardError::BeforeResponse(status, e.to_string());
    let sending = |e: io::Error| {
        if reused {
            ForwardError::Stale
        } else {
            ForwardError::BeforeResponse(502, e.to_string())
        }
    };
    let target = head.target();
    let authority = if target.port == Port::HTTP {
        target.host.to_string()
    } else {
        target.to_string()
    };
    let hop = hop_by_hop(&head.headers);
    let mut out = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", head.method).into_bytes();
    for (n, v) in &head.headers {
        if keep_header(n, &hop) {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
    }
    // HTTP/1.1's default, a persistent connection: it may serve a later request.
    out.extend_from_slice(b"\r\n");
    let mut upstream = BufReader::with_capacity(HEAD_BUF, upstream);
    upstream.write_all(&out).await.map_err(sending)?;
    if head.expect_continue && head.body != Body::None {
        client
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(before(400))?;
    }
    match head.body {
        Body::None => {}
        Body::Length(n) => copy_exact(client, &mut upstream, n, shared.idle)
            .await
            .map_err(before(400))?,
        Body::Chunked => relay_chunked(client, &mut upstream, shared.idle)
            .await
            .map_err(before(400))?,
    }
    upstream.flush().await.map_err(sending)?;
    if reused {
        match tokio::time::timeout(shared.idle, upstream.fill_buf()).await {
            Ok(Ok([]) | Err(_)) => return Err(ForwardError::Stale),
            Ok(Ok(_)) => {}
            Err(_) => {
                return Err(ForwardError::BeforeResponse(
                    504,
                    "no response in time".into(),
                ))
            }
        }
    }

    // The response head (skipping interim 1xx answers: we sent our own 100).
    let (status, reason, headers, minor) = loop {
        let resp = read_response_head(&mut upstream, shared.idle).await?;
        if (100..200).contains(&resp.0) {
            if resp.0 == 101 {
                return Err(ForwardError::BeforeResponse(
                    502,
                    "upstream switched protocols".into(),
                ));
            }
            continue;
        }
        break resp;
    };
    let mut framing = if head.method == "HEAD" || status == 204 || status == 304 {
        Framing::None
    } else {
        Framing::UntilClose
    };
    if framing != Framing::None {
        let mut length: Option<u64> = None;
        for (n, v) in &headers {
            if n.eq_ignore_ascii_case("transfer-encoding") {
                framing = if String::from_utf8_lossy(v)
                    .trim()
                    .eq_ignore_ascii_case("chunked")
                {
                    Framing::Chunked
                } else {
                    Framing::UntilClose
                };
                length = None;
                break;
            }
            if n.eq_ignore_ascii_case("content-length") {
                let parsed = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                match (parsed, length) {
                    (Some(p), None) => length = Some(p),
                    (Some(p), Some(l)) if p == l => {}
                    _ => {
                        return Err(ForwardError::BeforeResponse(
                            502,
                            "upstream sent an invalid Content-Length".into(),
                        ))
                    }
                }
            }
        }
        if let Some(l) = length {
            framing = Framing::Length(l);
        }
    }
    let keep = framing != Framing::UntilClose;
    let hop = hop_by_hop(&headers);
    // `hop` holds the `Connection` tokens too: `close` ends the upstream's.
    let upstream_keeps = keep && minor == 1 && !hop.iter().any(|t| t == "close");
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (n, v) in &headers {
        if keep_header(n, &hop) {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(if keep && head.keep_alive {
        b"Connection: keep-alive\r\n\r\n"
    } else {
        b"Connection: close\r\n\r\n"
    });
    // The body bytes already read go out with the head, in one segment: a
    // small response then costs the client one wake-up, not two.
    let early = match framing {
        Framing::Length(n) => upstream
            .buffer()
            .len()
            .min(usize::try_from(n).unwrap_or(usize::MAX)),
        Framing::UntilClose => upstream.buffer().len(),
        Framing::None | Framing::Chunked => 0,
    };
    out.extend_from_slice(&upstream.buffer()[..early]);
    upstream.consume(early);
    client
        .write_all(&out)
        .await
        .map_err(|_| ForwardError::AfterResponse(status))?;
    let relayed = match framing {
        Framing::None => Ok(()),
        Framing::Length(n) => {
            copy_exact(&mut upstream, client, n - early as u64, shared.idle).await
        }
        Framing::Chunked => relay_chunked(&mut upstream, client, shared.idle).await,
        Framing::UntilClose => copy_until_close(&mut upstream, client, shared.idle).await,
    };
    relayed.map_err(|_| ForwardError::AfterResponse(status))?;
    client
        .flush()
        .await
        .map_err(|_| ForwardError::AfterResponse(status))?;
    let back = (upstream_keeps && upstream.buffer().is_empty()).then(|| upstream.into_inner());
    Ok((status, keep, back))
}

/// Status, reason, headers, and the HTTP/1.x minor version.
type ResponseHead = (u16, String, Vec<(String, Vec<u8>)>, u8);

async fn read_response_head<S: AsyncRead + Unpin>(
    up: &mut BufReader<S>,
    idle: Duration,
) -> Result<ResponseHead, ForwardError> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let avail = match tokio::time::timeout(idle, up.fill_buf()).await {
            Err(_) => {
                return Err(ForwardError::BeforeResponse(
                    504,
                    "no response in time".into(),
                ))
            }
            Ok(Err(e)) => return Err(ForwardError::BeforeResponse(502, e.to_string())),
            Ok(Ok([])) => {
                return Err(ForwardError::BeforeResponse(
                    502,
                    "closed without a response".into(),
                ))
            }
            Ok(Ok(a)) => a,
        };
        let before = buf.len();
        let take = avail.len().min(MAX_RESPONSE_HEAD + 1 - before);
        buf.extend_from_slice(&avail[..take]);
        let mut raw = [httparse::EMPTY_HEADER; 128];
        let mut resp = httparse::Response::new(&mut raw);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(n)) => {
                up.consume(n - before);
                let status = resp.code.unwrap_or(502);
                let reason: String = resp
                    .reason
                    .unwrap_or("")
                    .chars()
                    .filter(|c| *c == ' ' || c.is_ascii_graphic())
                    .collect();
                let headers = resp
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect();
                return Ok((status, reason, headers, resp.version.unwrap_or(0)));
            }
            Ok(httparse::Status::Partial) if buf.len() <= MAX_RESPONSE_HEAD => up.consume(take),
            Ok(httparse::Status::Partial) => {
                return Err(ForwardError::BeforeResponse(
                    502,
                    "response head too large".into(),
                ));
            }
            Err(e) => {
                return Err(ForwardError::BeforeResponse(
                    502,
                    format!("malformed response: {e}"),
                ))
            }
        }
    }
}

fn idle_timeout() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "idle")
}

async fn copy_exact<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    mut n: u64,
    idle: Duration,
) -> io::Result<()> {
    while n > 0 {
        let avail = tokio::time::timeout(idle, r.fill_buf())
            .await
            .map_err(|_| idle_timeout())??;
        if avail.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let take = avail.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        w.write_all(&avail[..take]).await?;
        r.consume(take);
        n -= take as u64;
    }
    Ok(())
}

async fn copy_until_close<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    idle: Duration,
) -> io::Result<()> {
    loop {
        let avail = tokio::time::timeout(idle, r.fill_buf())
            .await
            .map_err(|_| idle_timeout())??;
        if avail.is_empty() {
            return Ok(());
        }
        let take = avail.len();
        w.write_all(avail).await?;
        r.consume(take);
    }
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, idle: Duration) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    tokio::time::timeout(
        idle,
        (&mut *r).take(MAX_CHUNK_LINE).read_until(b'\n', &mut line),
    )
    .await
    .map_err(|_| idle_timeout())??;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad line in chunked body",
        ));
    }
    Ok(line)
}

/// Relay a chunked body verbatim, parsing just enough to find its end.
async fn relay_chunked<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    idle: Duration,
) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad chunk size");
    loop {
        let line = read_line(r, idle).await?;
        let text = std::str::from_utf8(&line).map_err(|_| bad())?;
        let size = text
            .trim_end_matches("\r\n")
            .split(';')
            .next()
            .unwrap_or("")
            .trim_end_matches([' ', '\t']);
        if size.is_empty() || size.len() > 15 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let size = u64::from_str_radix(size, 16).map_err(|_| bad())?;
        w.write_all(&line).await?;
        if size == 0 {
            loop {
                let t = read_line(r, idle).await?;
                w.write_all(&t).await?;
                if t == b"\r\n" {
                    return Ok(());
                }
            }
        }
        copy_exact(r, w, size, idle).await?;
        let end = read_line(r, idle).await?;
        if end != b"\r\n" {
            return Err(bad());
        }
        w.write_all(&end).await?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn accept_failures_are_told_once_then_summed_up() {
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        let t0 = Instant::now();
        let mut a = AcceptErrors::default();
        assert_eq!(a.note(t0, &e), Report::First);
        for k in 1..=20 {
            assert_eq!(
                a.note(t0 + Duration::from_millis(50 * k), &e),
                Report::Counted
            );
        }
        // The next one after the period tells the count, itself included.
        assert_eq!(a.note(t0 + AcceptErrors::EVERY, &e), Report::Since(21));
        assert_eq!(a.unreported(), None);
        let t1 = t0 + AcceptErrors::EVERY;
        assert_eq!(a.note(t1 + Duration::from_millis(50), &e), Report::Counted);
        assert_eq!(a.note(t1 + Duration::from_millis(100), &e), Report::Counted);
        let (n, latest) = a.unreported().unwrap();
        assert_eq!(n, 2);
        assert!(latest.contains("Too many open files"), "{latest}");
        assert_eq!(a.unreported(), None);
        // Quiet for a period: the next failure is told as a first one.
        assert_eq!(a.note(t1 + 3 * AcceptErrors::EVERY, &e), Report::First);
    }

    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    /// The pipes this process holds (`pipe:[…]` in /proc/self/fd).
    fn pipes() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with("pipe:"))
            .count()
    }

    #[tokio::test]
    async fn a_tunnel_direction_holds_its_pipe_only_while_busy() {
        use tokio::io::AsyncWriteExt as _;
        // client <-> (a | tunnel | b) <-> upstream
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (a, _) = l.accept().await.unwrap();
        let b = TcpStream::connect(addr).await.unwrap();
        let (mut upstream, _) = l.accept().await.unwrap();
        let before = pipes();
        let relay = tokio::spawn(tunnel(a, b, Duration::from_mins(1)));
        client.write_all(&vec![7u8; 100_000]).await.unwrap();
        let mut got = vec![0u8; 100_000];
        upstream.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&x| x == 7));
        // The busy direction has its pipe (two descriptors); the other none.
        assert_eq!(pipes(), before + 2);
        tokio::time::sleep(PIPE_KEPT + Duration::from_millis(300)).await;
        assert_eq!(pipes(), before, "an idle tunnel keeps no pipe");
        // And the next burst still crosses.
        client.write_all(b"again").await.unwrap();
        let mut again = [0u8; 5];
        upstream.read_exact(&mut again).await.unwrap();
        assert_eq!(&again, b"again");
        drop(client);
        drop(upstream);
        relay.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn dial_takes_the_next_address_when_one_fails() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let good = listener.local_addr().unwrap();
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let (_, dialed) = dial(&[closed, good], Duration::from_secs(2)).await.unwrap();
        assert_eq!(dialed, good);
        let refusal = dial(&[closed], Duration::from_secs(2)).await.unwrap_err();
        assert_eq!(refusal.status, 502);
        assert_eq!(refusal.verdict, ProxyVerdict::UpstreamFailed);
        assert!(
            refusal.reason.contains(&closed.to_string()),
            "{}",
            refusal.reason
        );
    }

    #[tokio::test]
    async fn chunked_relay_is_verbatim_and_stops_at_the_end() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let mut r = BufReader::new(&body[..]);
        let mut out = Vec::new();
        relay_chunked(&mut r, &mut out, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(out, &body[..body.len() - 4]);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"NEXT");
        for bad in [
            &b"x\r\n"[..],
            b"4\r\nWikiXX",
            b"4\nWiki\r\n0\r\n\r\n",
            b"-1\r\n",
        ] {
            let mut r = BufReader::new(bad);
            assert!(
                relay_chunked(&mut r, &mut Vec::new(), Duration::from_secs(1))
                    .await
                    .is_err()
            );
        }
    }
}
