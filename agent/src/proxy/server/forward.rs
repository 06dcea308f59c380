//! A forwarded absolute-form request: judged by the run's [`Inspector`]
//! (request rules, secrets), hop-by-hop headers dropped, the request
//! relayed upstream on a pooled or fresh connection, and the response
//! relayed back, its body framed as the upstream framed it. The relaying
//! is generic over the streams: the [inspected](super::inspect) requests
//! inside a tunnel whose TLS the proxy terminates go the same way.
//!
//! [`Inspector`]: crate::proxy::inspector::Inspector

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::TcpStream;

use super::{dial_or_refuse, Refusal, Shared, HEAD_BUF};
use crate::audit::ProxyVerdict;
use crate::policy::Port;
use crate::proxy::inspector::{BodyRewriter, Judged, Refused};
use crate::proxy::request::{Body, RequestHead};

/// The longest chunk-size or trailer line accepted in a chunked body.
const MAX_CHUNK_LINE: u64 = 4096;
/// The largest upstream response head relayed.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

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

pub(super) fn hop_by_hop(headers: &[(String, Vec<u8>)]) -> Vec<String> {
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
pub(super) async fn forward(
    shared: &Shared,
    client: &mut BufReader<TcpStream>,
    head: &RequestHead,
    path: &str,
    addrs: &[SocketAddr],
    allowed_by: &str,
) -> bool {
    let target = head.target();
    // Without secrets or request rules (most runs) there is nothing to
    // judge: the head's own headers go, uncopied.
    let mut judged_headers;
    let (headers, judged) = if shared.inspector.is_empty() {
        (head.headers.as_slice(), Judged::default())
    } else {
        judged_headers = head.headers.clone();
        match shared
            .inspector
            .judge(&target.host, &head.method, path, &mut judged_headers)
        {
            Ok(j) => (judged_headers.as_slice(), j),
            Err(r) => {
                refused_inside(r).answer(shared, client, head, None).await;
                return false;
            }
        }
    };
    let allowed_by = &with_rule(allowed_by, &judged);
    let path = judged.path.as_deref().unwrap_or(path);
    let mut body = judged.body;
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
        let out = Outgoing {
            head,
            path,
            headers,
            default_port: Port::HTTP,
            body: body.as_mut(),
        };
        match forward_inner(shared, client, out, upstream, reused).await {
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
            Err(ForwardError::Refused(r)) => {
                refused_inside(r)
                    .answer(shared, client, head, Some(dialed))
                    .await;
                return false;
            }
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

/// A request the inspector refused, as the proxy answers it.
pub(super) fn refused_inside(r: Refused) -> Refusal {
    Refusal {
        status: r.status,
        reason: r.reason,
        verdict: r.verdict,
        allowed_by: None,
    }
}

/// The words of the allowing rule, and the request rule when one allowed it.
pub(super) fn with_rule(allowed_by: &str, judged: &Judged) -> String {
    match &judged.rule {
        Some(rule) => format!("{allowed_by}; request rule `{rule}`"),
        None => allowed_by.to_owned(),
    }
}

/// One request as it goes upstream: its head, its path (origin-form), its
/// headers as judged, the port its `Host` leaves out, and the rewriting of
/// its body.
pub(super) struct Outgoing<'a> {
    pub(super) head: &'a RequestHead,
    pub(super) path: &'a str,
    pub(super) headers: &'a [(String, Vec<u8>)],
    pub(super) default_port: Port,
    pub(super) body: Option<&'a mut BodyRewriter>,
}

pub(super) enum ForwardError {
    /// A connection from the pool was closed or reset before any byte of a
    /// response: nothing was sent to the client, the request may go again.
    Stale,
    /// Nothing was sent to the client yet: answer with this status.
    BeforeResponse(u16, String),
    /// The response head went out; the connection can only be closed.
    AfterResponse(u16),
    /// The body carried what the inspector refuses (nothing answered yet).
    Refused(Refused),
}

/// A body refused by the inspector, carried through the relay's I/O errors.
#[derive(Debug)]
struct RefusedBody(Refused);

impl std::fmt::Display for RefusedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.reason)
    }
}

impl std::error::Error for RefusedBody {}

fn refused_body(r: Refused) -> io::Error {
    io::Error::other(RefusedBody(r))
}

/// The client's body failed to go up: the inspector refused it, or it did
/// not come through as framed (400).
fn body_failed(e: io::Error) -> ForwardError {
    match e.downcast::<RefusedBody>() {
        Ok(r) => ForwardError::Refused(r.0),
        Err(e) => ForwardError::BeforeResponse(400, e.to_string()),
    }
}

/// How a response body ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Send one request upstream and relay its response: the status, whether
/// the client connection may carry on, and the upstream connection when it
/// may serve another request.
#[allow(clippy::too_many_lines)] // request out, response back, in order
pub(super) async fn forward_inner<C, U>(
    shared: &Shared,
    client: &mut BufReader<C>,
    out: Outgoing<'_>,
    upstream: U,
    reused: bool,
) -> Result<(u16, bool, Option<U>), ForwardError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let Outgoing {
        head,
        path,
        headers: request_headers,
        default_port,
        body,
    } = out;
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
    let authority = if target.port == default_port {
        target.host.to_string()
    } else {
        target.to_string()
    };
    let hop = hop_by_hop(request_headers);
    let mut out = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", head.method).into_bytes();
    for (n, v) in request_headers {
        if keep_header(n, &hop) {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
    }
    // A WebSocket handshake asks for the upgrade again, hop by hop.
    let upgrade = wants_websocket(request_headers);
    if upgrade {
        out.extend_from_slice(b"Connection: Upgrade\r\nUpgrade: websocket\r\n");
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
    match (head.body, body) {
        (Body::None, _) => {}
        (Body::Length(n), None) => copy_exact(client, &mut upstream, n, shared.idle)
            .await
            .map_err(body_failed)?,
        (Body::Chunked, None) => relay_chunked(client, &mut upstream, shared.idle)
            .await
            .map_err(body_failed)?,
        (Body::Length(n), Some(rw)) => {
            copy_exact_rewritten(client, &mut upstream, n, shared.idle, rw)
                .await
                .map_err(body_failed)?;
        }
        (Body::Chunked, Some(rw)) => {
            relay_chunked_rewritten(client, &mut upstream, shared.idle, rw)
                .await
                .map_err(body_failed)?;
        }
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
    let (status, reason, mut headers, minor) = loop {
        let resp = read_response_head(&mut upstream, shared.idle).await?;
        if (100..200).contains(&resp.0) {
            if resp.0 == 101 && upgrade && wants_websocket(&resp.2) {
                return switched(client, upstream, &resp, shared.idle).await;
            }
            if resp.0 == 101 {
                return Err(ForwardError::BeforeResponse(
                    502,
                    "upstream switched protocols unasked, or not to WebSocket".into(),
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
    // A value the upstream echoes (an error quoting the key) reaches the
    // run as its placeholder, in the headers and the body.
    let mut masker = shared.inspector.masker(&target.host);
    if masker.is_some() {
        shared.inspector.mask_headers(&target.host, &mut headers);
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
        _ if masker.is_some() => 0,
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
    let idle = shared.idle;
    let relayed = match (framing, masker.as_mut()) {
        (Framing::None, _) => Ok(()),
        (Framing::Length(n), None) => {
            copy_exact(&mut upstream, client, n - early as u64, idle).await
        }
        (Framing::Chunked, None) => relay_chunked(&mut upstream, client, idle).await,
        (Framing::UntilClose, None) => copy_until_close(&mut upstream, client, idle).await,
        (Framing::Length(n), Some(m)) => {
            copy_exact_rewritten(&mut upstream, client, n, idle, m).await
        }
        (Framing::Chunked, Some(m)) => {
            relay_chunked_rewritten(&mut upstream, client, idle, m).await
        }
        (Framing::UntilClose, Some(m)) => {
            copy_until_close_masked(&mut upstream, client, m, idle).await
        }
    };
    relayed.map_err(|_| ForwardError::AfterResponse(status))?;
    client
        .flush()
        .await
        .map_err(|_| ForwardError::AfterResponse(status))?;
    let back = (upstream_keeps && upstream.buffer().is_empty()).then(|| upstream.into_inner());
    Ok((status, keep, back))
}

/// Whether `headers` ask for (or agree to) an upgrade to WebSocket:
/// `Upgrade: websocket` and `upgrade` among the `Connection` tokens.
fn wants_websocket(headers: &[(String, Vec<u8>)]) -> bool {
    let has = |name: &str, token: &str| {
        headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case(name)
                && String::from_utf8_lossy(v)
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    };
    has("upgrade", "websocket") && has("connection", "upgrade")
}

/// The upstream agreed to WebSocket: relay its `101` and then the bytes
/// both ways, until either side closes. The connection serves nothing after.
async fn switched<C, U>(
    client: &mut BufReader<C>,
    mut upstream: BufReader<U>,
    resp: &ResponseHead,
    idle: Duration,
) -> Result<(u16, bool, Option<U>), ForwardError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (status, reason, headers, _) = resp;
    let hop = hop_by_hop(headers);
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n").into_bytes();
    for (n, v) in headers {
        if keep_header(n, &hop) {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    client
        .write_all(&out)
        .await
        .map_err(|_| ForwardError::AfterResponse(*status))?;
    client
        .flush()
        .await
        .map_err(|_| ForwardError::AfterResponse(*status))?;
    // Bytes either side sent behind its head are in its buffer, read first.
    relay_both(client, &mut upstream, idle).await;
    Ok((*status, false, None))
}

/// Copy both ways, each read passed on at once, each end's close passed on
/// as a shutdown, until both have closed, either fails, or nothing has
/// moved either way for `idle`.
async fn relay_both<A, B>(a: &mut A, b: &mut B, idle: Duration)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let start = std::time::Instant::now();
    let last = std::sync::atomic::AtomicU64::new(0);
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let both = async {
        let r: io::Result<((), ())> = tokio::try_join!(
            one_way(&mut ar, &mut bw, &last, start),
            one_way(&mut br, &mut aw, &last, start)
        );
        r
    };
    tokio::select! {
        _ = both => {}
        () = super::tunnel::idle_watch(&last, start, idle) => {}
    }
}

/// One direction of [`relay_both`]: `r` to `w`, noting each move in `last`
/// (ms since `start`).
async fn one_way<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    last: &std::sync::atomic::AtomicU64,
    start: std::time::Instant,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return w.shutdown().await;
        }
        w.write_all(&buf[..n]).await?;
        w.flush().await?;
        last.store(
            u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
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
        // Each read goes on at once (a TLS writer may hold it otherwise).
        w.flush().await?;
    }
    Ok(())
}

/// [`copy_exact`], through the inspector's rewriting (same length out).
async fn copy_exact_rewritten<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    n: u64,
    idle: Duration,
    rw: &mut BodyRewriter,
) -> io::Result<()> {
    rewrite_exact(r, w, n, idle, rw, false).await?;
    let mut out = Vec::new();
    rw.finish(&mut out).map_err(refused_body)?;
    w.write_all(&out).await?;
    w.flush().await
}

/// `n` bytes of `r` through `rw` to `w`, what each read lets go passed on
/// at once (as a chunk of its own when `chunked`).
async fn rewrite_exact<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    mut n: u64,
    idle: Duration,
    rw: &mut BodyRewriter,
    chunked: bool,
) -> io::Result<()> {
    let mut out = Vec::new();
    while n > 0 {
        let avail = tokio::time::timeout(idle, r.fill_buf())
            .await
            .map_err(|_| idle_timeout())??;
        if avail.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let take = avail.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        out.clear();
        rw.feed(&avail[..take], &mut out).map_err(refused_body)?;
        r.consume(take);
        n -= take as u64;
        if chunked {
            write_chunk(w, &out).await?;
        } else {
            w.write_all(&out).await?;
        }
        w.flush().await?;
    }
    Ok(())
}

/// [`copy_until_close`] through a masker
/// ([`crate::proxy::inspector::Inspector::masker`]), each read passed on at once.
async fn copy_until_close_masked<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    m: &mut BodyRewriter,
    idle: Duration,
) -> io::Result<()> {
    let mut out = Vec::new();
    loop {
        let avail = tokio::time::timeout(idle, r.fill_buf())
            .await
            .map_err(|_| idle_timeout())??;
        if avail.is_empty() {
            m.finish(&mut out).map_err(refused_body)?;
            w.write_all(&out).await?;
            return w.flush().await;
        }
        let take = avail.len();
        m.feed(avail, &mut out).map_err(refused_body)?;
        r.consume(take);
        w.write_all(&out).await?;
        w.flush().await?;
        out.clear();
    }
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
        w.flush().await?;
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
pub(super) async fn relay_chunked<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    idle: Duration,
) -> io::Result<()> {
    loop {
        let line = read_line(r, idle).await?;
        let size = chunk_size(&line)?;
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
            return Err(io::Error::new(io::ErrorKind::InvalidData, "bad chunk end"));
        }
        w.write_all(&end).await?;
        w.flush().await?;
    }
}

/// `data` as one chunk (nothing when empty: that would end the body).
async fn write_chunk<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    w.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    w.write_all(data).await?;
    w.write_all(b"\r\n").await
}

/// The size of a chunk from its size line (extensions ignored).
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad chunk size");
    let text = std::str::from_utf8(line).map_err(|_| bad())?;
    let size = text
        .trim_end_matches("\r\n")
        .split(';')
        .next()
        .unwrap_or("")
        .trim_end_matches([' ', '\t']);
    if size.is_empty() || size.len() > 15 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(size, 16).map_err(|_| bad())
}

/// A chunked body through the inspector's rewriting, framed anew: each
/// chunk's rewritten bytes as a chunk, what was held back before the last
/// one, the trailers as they came.
async fn relay_chunked_rewritten<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    idle: Duration,
    rw: &mut BodyRewriter,
) -> io::Result<()> {
    let mut out = Vec::new();
    loop {
        let line = read_line(r, idle).await?;
        let size = chunk_size(&line)?;
        let last = size == 0;
        if last {
            out.clear();
            rw.finish(&mut out).map_err(refused_body)?;
            write_chunk(w, &out).await?;
        }
        rewrite_exact(r, w, size, idle, rw, true).await?;
        if !last && read_line(r, idle).await? != b"\r\n" {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "bad chunk end"));
        }
        if last {
            w.write_all(b"0\r\n").await?;
            loop {
                let t = read_line(r, idle).await?;
                w.write_all(&t).await?;
                if t == b"\r\n" {
                    return w.flush().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
