//! A forwarded absolute-form request: hop-by-hop headers dropped, the
//! request relayed upstream on a pooled or fresh connection, and the
//! response relayed back, its body framed as the upstream framed it.

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
use crate::proxy::inspector::{BodyRewriter, Refused};
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
pub(super) async fn forward(
    shared: &Shared,
    client: &mut BufReader<TcpStream>,
    head: &RequestHead,
    path: &str,
    addrs: &[SocketAddr],
    allowed_by: &str,
) -> bool {
    // The run's secrets and request rules: judged on the head as it came
    // (placeholders bound to this host replaced by their values, any
    // other refused), before anything is dialed.
    let mut judged_head;
    let judged_path;
    let (head, path, mut body, allowed_by) = if shared.inspector.is_empty() {
        (head, path, None, allowed_by.to_owned())
    } else {
        judged_head = head.clone();
        let target = &head.target().host;
        match shared
            .inspector
            .judge(target, &head.method, path, &mut judged_head.headers)
        {
            Err(refused) => {
                refused_inside(refused)
                    .answer(shared, client, head, None)
                    .await;
                return false;
            }
            Ok(j) => {
                judged_path = j.path.unwrap_or_else(|| path.to_owned());
                let by = match j.rule {
                    Some(rule) => format!("{allowed_by}, and {rule}"),
                    None => allowed_by.to_owned(),
                };
                (&judged_head, judged_path.as_str(), j.body, by)
            }
        }
    };
    let allowed_by = allowed_by.as_str();
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
        match forward_inner(shared, client, head, path, upstream, reused, body.as_mut()).await {
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
            // The body held a placeholder it may not carry: the upstream
            // got the body up to it, and no more (its connection dropped).
            Err(ForwardError::Refused(inside)) => {
                refused_inside(inside)
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

/// A refusal of the inspector, as the proxy answers and records it.
fn refused_inside(r: Refused) -> Refusal {
    Refusal {
        status: r.status,
        reason: r.reason,
        verdict: r.verdict,
        allowed_by: None,
    }
}

/// A body the inspector refused on its way, as an I/O error carries it.
#[derive(Debug)]
struct BodyRefused(Refused);

impl std::fmt::Display for BodyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.reason)
    }
}

impl std::error::Error for BodyRefused {}

enum ForwardError {
    /// The inspector refused the request's body on its way.
    Refused(Refused),
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
    rewriter: Option<&mut BodyRewriter>,
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
    let body_refused =
        |e: io::Error| match e.get_ref().and_then(|i| i.downcast_ref::<BodyRefused>()) {
            Some(r) => ForwardError::Refused(r.0.clone()),
            None => ForwardError::BeforeResponse(400, e.to_string()),
        };
    match (head.body, rewriter) {
        (Body::None, _) => {}
        (Body::Length(n), None) => copy_exact(client, &mut upstream, n, shared.idle)
            .await
            .map_err(before(400))?,
        (Body::Chunked, None) => relay_chunked(client, &mut upstream, shared.idle)
            .await
            .map_err(before(400))?,
        (body, Some(rw)) => relay_rewritten(client, &mut upstream, body, rw, shared.idle)
            .await
            .map_err(body_refused)?,
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
    // A key the upstream echoes (an error quoting it) reaches the run as
    // its placeholder, in the headers and the body.
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
    let relayed = match (framing, masker.as_mut()) {
        (Framing::None, _) => Ok(()),
        (Framing::Length(n), Some(m)) => {
            relay_rewritten(&mut upstream, client, Body::Length(n), m, shared.idle).await
        }
        (Framing::Chunked, Some(m)) => {
            relay_rewritten(&mut upstream, client, Body::Chunked, m, shared.idle).await
        }
        (Framing::UntilClose, Some(m)) => {
            copy_until_close_masked(&mut upstream, client, m, shared.idle).await
        }
        (Framing::Length(n), None) => {
            copy_exact(&mut upstream, client, n - early as u64, shared.idle).await
        }
        (Framing::Chunked, None) => relay_chunked(&mut upstream, client, shared.idle).await,
        (Framing::UntilClose, None) => copy_until_close(&mut upstream, client, shared.idle).await,
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

/// The request body through the inspector's rewriter: a length-framed one
/// keeps its length (a value is its placeholder's length); a chunked one
/// is framed anew, a chunk for each piece the rewriter lets go.
async fn relay_rewritten<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    body: Body,
    rw: &mut BodyRewriter,
    idle: Duration,
) -> io::Result<()> {
    let refused = |e: Refused| io::Error::other(BodyRefused(e));
    let chunked = body == Body::Chunked;
    let mut out = Vec::new();
    let send = async |w: &mut W, out: &mut Vec<u8>| -> io::Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        if chunked {
            w.write_all(format!("{:x}\r\n", out.len()).as_bytes())
                .await?;
            out.extend_from_slice(b"\r\n");
        }
        w.write_all(out).await?;
        out.clear();
        Ok(())
    };
    let mut piece = async |r: &mut R, w: &mut W, out: &mut Vec<u8>, mut n: u64| {
        while n > 0 {
            let avail = tokio::time::timeout(idle, r.fill_buf())
                .await
                .map_err(|_| idle_timeout())??;
            if avail.is_empty() {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = avail.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            rw.feed(&avail[..take], out).map_err(refused)?;
            r.consume(take);
            n -= take as u64;
            send(w, out).await?;
        }
        io::Result::Ok(())
    };
    match body {
        Body::None => {}
        Body::Length(n) => piece(r, w, &mut out, n).await?,
        Body::Chunked => loop {
            let size = chunk_size(&read_line(r, idle).await?)?;
            if size == 0 {
                break;
            }
            piece(r, w, &mut out, size).await?;
            if read_line(r, idle).await? != b"\r\n" {
                return Err(bad_chunk());
            }
        },
    }
    rw.finish(&mut out).map_err(refused)?;
    send(w, &mut out).await?;
    if chunked {
        w.write_all(b"0\r\n").await?;
        loop {
            let t = read_line(r, idle).await?;
            w.write_all(&t).await?;
            if t == b"\r\n" {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// [`copy_until_close`] through a masker ([`crate::proxy::inspector::Inspector::masker`]).
async fn copy_until_close_masked<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    m: &mut BodyRewriter,
    idle: Duration,
) -> io::Result<()> {
    let refused = |e: Refused| io::Error::other(BodyRefused(e));
    let mut out = Vec::new();
    loop {
        let avail = tokio::time::timeout(idle, r.fill_buf())
            .await
            .map_err(|_| idle_timeout())??;
        if avail.is_empty() {
            m.finish(&mut out).map_err(refused)?;
            return w.write_all(&out).await;
        }
        let take = avail.len();
        m.feed(avail, &mut out).map_err(refused)?;
        r.consume(take);
        w.write_all(&out).await?;
        out.clear();
    }
}

fn bad_chunk() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "bad chunk size")
}

/// A chunk-size line's size (its extensions ignored).
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let text = std::str::from_utf8(line).map_err(|_| bad_chunk())?;
    let size = text
        .trim_end_matches("\r\n")
        .split(';')
        .next()
        .unwrap_or("")
        .trim_end_matches([' ', '\t']);
    if size.is_empty() || size.len() > 15 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad_chunk());
    }
    u64::from_str_radix(size, 16).map_err(|_| bad_chunk())
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
            return Err(bad_chunk());
        }
        w.write_all(&end).await?;
    }
}
