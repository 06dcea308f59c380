//! Requests inside a connection whose TLS the proxy terminates (issue 60):
//! a host the run's [`Inspector`] inspects (it has secrets or request
//! rules), reached by `CONNECT` or transparently. The client's handshake
//! is answered with a certificate for the host made by the run's CA
//! ([`RunTls`]); then HTTP/1.1 requests, one after another on the
//! connection (keep-alive): each origin-form head parsed strictly (its
//! `Host` must name the tunnel's host), judged by the inspector (rules,
//! placeholders), and sent upstream over TLS verified against the roots
//! the proxy trusts, on the connection the previous request left open, one
//! an earlier client connection left (the pool), or a fresh one to the
//! addresses already checked. Responses stream back as
//! they come (server-sent events chunk by chunk). Each request is recorded
//! (`via: inspected`), with the request rule that allowed it.
//!
//! A client that offers HTTP/2 (ALPN `h2`) is answered with it when the
//! upstream, asked first, agrees to it: [`inspect_h2`] relays its streams.
//! Otherwise the upstream connection made to ask serves the first request.
//!
//! A client that speaks plain HTTP inside its `CONNECT` tunnel (Node's
//! proxy agents take an `http://` URL so) is served the same way, plain on
//! both sides.
//!
//! A client that ends the handshake (it does not trust the run's CA, or
//! pins the host's key) is recorded once per host ([`ClientRefusedCert`]);
//! an upstream whose certificate does not verify is answered 502 and
//! recorded ([`UpstreamUntrusted`]).
//!
//! [`Inspector`]: crate::proxy::inspector::Inspector
//! [`RunTls`]: crate::proxy::tls::RunTls
//! [`ClientRefusedCert`]: ProxyVerdict::ClientRefusedCert
//! [`UpstreamUntrusted`]: ProxyVerdict::UpstreamUntrusted

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

use super::forward::{forward_inner, refused_inside, with_rule, ForwardError, Outgoing};
use super::inspect_h2;
use super::{dial, read_head_with, refuse_and_close, ReadError, Refusal, Shared, HEAD_BUF};
use crate::audit::{ProxyVerdict, ProxyVia};
use crate::policy::Port;
use crate::proxy::request::{parse_origin_head, Kind, RequestHead, Target};
use crate::proxy::tls::{Protocol, ALPN_H2};

/// How an inspected connection speaks: TLS the proxy terminates, or plain
/// HTTP inside a `CONNECT` tunnel (as Node's proxy agents send an `http://`
/// URL). The upstream is spoken to the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Tls,
    Plain,
}

/// Where an inspected connection's requests go: the host, its checked
/// addresses, and how it is spoken to.
#[derive(Clone, Copy)]
struct Dest<'a> {
    target: &'a Target,
    addrs: &'a [SocketAddr],
    scheme: Scheme,
}

/// The upstream connection of an inspected request.
enum Upstream {
    Tls(Box<TlsStream<TcpStream>>),
    Plain(TcpStream),
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// A stream whose first bytes were read already (to sniff them): they are
/// read again first.
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Record one event of an inspected connection.
fn record(
    shared: &Shared,
    method: &str,
    target: &Target,
    dialed: Option<SocketAddr>,
    verdict: ProxyVerdict,
    reason: String,
    status: u16,
) {
    shared.record_via(
        method,
        Some(target),
        dialed,
        verdict,
        reason,
        status,
        Some(ProxyVia::Inspected),
    );
}

/// Terminate the client's TLS for `target` and serve its requests. `addrs`
/// are the checked addresses; `allowed_by` the words of the rule that
/// allowed the host.
pub(crate) async fn intercept<S>(
    shared: &Arc<Shared>,
    client: S,
    target: &Target,
    addrs: &[SocketAddr],
    allowed_by: &str,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = BufReader::with_capacity(HEAD_BUF, client);
    let first = tokio::time::timeout(shared.head_timeout, client.fill_buf()).await;
    match first {
        Ok(Ok([TLS_HANDSHAKE, ..])) => {}
        Ok(Ok([_, ..])) => {
            // Plain HTTP inside the tunnel: judged the same, sent plain.
            let dest = Dest {
                target,
                addrs,
                scheme: Scheme::Plain,
            };
            serve(shared, client, dest, allowed_by, None).await;
            return;
        }
        // Closed, failed or silent before a byte: nothing to serve.
        _ => return,
    }
    let hello = tokio::time::timeout(
        shared.head_timeout,
        LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client),
    )
    .await;
    let start = match hello {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            handshake_failed(shared, target, &e);
            return;
        }
        Err(_) => {
            handshake_timed_out(shared, target);
            return;
        }
    };
    // A client that offers HTTP/2 is answered with it only when the
    // upstream agrees to it too: the upstream is asked first. Otherwise
    // the connection made here serves the first HTTP/1.1 request.
    let offers_h2 = start
        .client_hello()
        .alpn()
        .is_some_and(|mut offered| offered.any(|p| p == ALPN_H2));
    let mut first = None;
    let mut h2_upstream = None;
    if offers_h2 {
        match connect(shared, target, addrs, Scheme::Tls, true).await {
            Ok((Upstream::Tls(s), dialed)) if s.get_ref().1.alpn_protocol() == Some(ALPN_H2) => {
                h2_upstream = Some((s, dialed));
            }
            made => first = Some(made),
        }
    }
    let protocol = if h2_upstream.is_some() {
        Protocol::H2
    } else {
        Protocol::Http1
    };
    let Some(config) = server_config(shared, target, protocol) else {
        return;
    };
    let accepted = tokio::time::timeout(shared.head_timeout, start.into_stream(config)).await;
    let stream = match accepted {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            handshake_failed(shared, target, &e);
            return;
        }
        Err(_) => {
            handshake_timed_out(shared, target);
            return;
        }
    };
    if let Some((upstream, dialed)) = h2_upstream {
        inspect_h2::relay(shared, stream, upstream, target, dialed, allowed_by).await;
        return;
    }
    serve(
        shared,
        BufReader::with_capacity(HEAD_BUF, stream),
        Dest {
            target,
            addrs,
            scheme: Scheme::Tls,
        },
        allowed_by,
        first,
    )
    .await;
}

/// The server side of the run's TLS for `target`, speaking `protocol`;
/// `None` (recorded) when there is none.
fn server_config(
    shared: &Shared,
    target: &Target,
    protocol: Protocol,
) -> Option<Arc<rustls::ServerConfig>> {
    let host = target.host_string();
    let why = match shared
        .tls
        .as_ref()
        .map(|t| t.server_config(&host, protocol))
    {
        Some(Ok(c)) => return Some(c),
        Some(Err(e)) => e.to_string(),
        None => format!("{host}'s requests are inspected, but the run has no CA to do it with"),
    };
    record(
        shared,
        "",
        target,
        None,
        ProxyVerdict::UpstreamFailed,
        why,
        0,
    );
    None
}

/// The client's handshake did not complete in time.
fn handshake_timed_out(shared: &Shared, target: &Target) {
    let why = format!(
        "the client's TLS handshake did not complete within {} s",
        shared.head_timeout.as_secs()
    );
    record(shared, "", target, None, ProxyVerdict::BadRequest, why, 0);
}

/// The client ended the handshake: it refused the run's certificate
/// (recorded once per host), or it did not speak TLS.
fn handshake_failed(shared: &Shared, target: &Target, e: &io::Error) {
    let host = target.host_string();
    let alert = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .and_then(|r| match r {
            rustls::Error::AlertReceived(a) => Some(format!("{a:?}")),
            _ => None,
        });
    let refused_cert = alert.is_some() || e.kind() == io::ErrorKind::UnexpectedEof;
    if !refused_cert {
        let why = format!("the client's TLS handshake for {host} failed: {e}");
        record(shared, "", target, None, ProxyVerdict::BadRequest, why, 0);
        return;
    }
    let first = shared
        .refused_cert
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(host.clone());
    if first {
        let how = alert.map_or_else(
            || "closed the connection during the handshake".to_owned(),
            |a| format!("sent the alert {a}"),
        );
        let why = format!(
            "the client {how} on the run's certificate for {host}: it does not trust the run's CA \
             (it pins the host's key, or reads its own CA list instead of the run's bundle); \
             {host}'s requests are inspected, so it cannot reach {host} (later refusals for \
             this host are not recorded)"
        );
        record(
            shared,
            "",
            target,
            None,
            ProxyVerdict::ClientRefusedCert,
            why,
            0,
        );
    }
}

/// An upstream connection, and the address it was dialed at; or why none.
type Made = Result<(Upstream, SocketAddr), (Refusal, Option<SocketAddr>)>;

/// Dial the checked addresses and shake hands with the upstream, verifying
/// its certificate for `target`'s host; offering HTTP/2 first when `h2`.
async fn connect(
    shared: &Shared,
    target: &Target,
    addrs: &[SocketAddr],
    scheme: Scheme,
    h2: bool,
) -> Made {
    let (tcp, dialed) = dial(addrs, shared.connect_timeout)
        .await
        .map_err(|r| (r, None))?;
    if scheme == Scheme::Plain {
        return Ok((Upstream::Plain(tcp), dialed));
    }
    let host = target.host_string();
    let name = ServerName::try_from(host.clone()).map_err(|e| {
        (
            Refusal::upstream(502, format!("{host} is no TLS server name: {e}")),
            Some(dialed),
        )
    })?;
    let Some(tls) = shared.tls.as_ref() else {
        return Err((
            Refusal::upstream(502, "the run has no TLS client set up".into()),
            Some(dialed),
        ));
    };
    let handshake = TlsConnector::from(tls.client_config(h2)).connect(name, tcp);
    match tokio::time::timeout(shared.connect_timeout, handshake).await {
        Ok(Ok(s)) => Ok((Upstream::Tls(Box::new(s)), dialed)),
        Ok(Err(e)) => {
            let untrusted = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<rustls::Error>())
                .is_some_and(|r| {
                    matches!(
                        r,
                        rustls::Error::InvalidCertificate(_)
                            | rustls::Error::NoCertificatesPresented
                    )
                });
            let refusal = if untrusted {
                Refusal {
                    status: 502,
                    reason: format!(
                        "{host}'s certificate did not verify against the roots the proxy trusts: {e}"
                    ),
                    verdict: ProxyVerdict::UpstreamUntrusted,
                    allowed_by: None,
                }
            } else {
                Refusal::upstream(502, format!("TLS with {host} failed: {e}"))
            };
            Err((refusal, Some(dialed)))
        }
        Err(_) => Err((
            Refusal::upstream(
                504,
                format!(
                    "TLS with {host} did not complete within {} s",
                    shared.connect_timeout.as_secs()
                ),
            ),
            Some(dialed),
        )),
    }
}

/// Read the head of the next request, or answer why not. `None`: the
/// connection is done.
async fn next_head<C: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    client: &mut BufReader<C>,
    target: &Target,
    first_byte: std::time::Duration,
) -> Option<RequestHead> {
    let read = read_head_with(client, first_byte, shared.head_timeout, |b| {
        parse_origin_head(b, target)
    })
    .await;
    let (status, why) = match read {
        Ok(h) => return Some(h),
        Err(ReadError::Closed) => {
            let _ = client.get_mut().shutdown().await;
            return None;
        }
        Err(ReadError::Timeout) => (
            408,
            format!(
                "request head not complete within {} s",
                shared.head_timeout.as_secs()
            ),
        ),
        Err(ReadError::Head(e)) => (e.status(), e.to_string()),
    };
    record(
        shared,
        "",
        target,
        None,
        ProxyVerdict::BadRequest,
        why.clone(),
        status,
    );
    refuse_and_close(client, status, &why).await;
    None
}

/// The requests of one inspected connection, until it closes. `first`:
/// the upstream connection made (or tried) before the client's handshake,
/// for the first request.
async fn serve<C: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    mut client: BufReader<C>,
    dest: Dest<'_>,
    allowed_by: &str,
    mut first: Option<Made>,
) {
    let Dest { target, scheme, .. } = dest;
    let mut kept: Option<(Upstream, SocketAddr)> = None;
    let mut first_byte = shared.head_timeout;
    while let Some(head) = next_head(shared, &mut client, target, first_byte).await {
        first_byte = shared.idle;
        let Kind::Forward { path, .. } = &head.kind else {
            return;
        };
        let mut headers = head.headers.clone();
        let judged = match shared
            .inspector
            .judge(&target.host, &head.method, path, &mut headers)
        {
            Ok(j) => j,
            Err(r) => {
                keep_for_later(shared, target, kept);
                refused_inside(r)
                    .answer_via(shared, &mut client, &head, None, ProxyVia::Inspected)
                    .await;
                return;
            }
        };
        // A kept connection serves only a request that may go again when
        // it turns out to be closed; the others dial their own, and leave
        // no kept one waiting on a server that serves one at a time.
        if !head.resendable() {
            kept = None;
            shared.inspected_pool.close(target);
        }
        let allowed = with_rule(allowed_by, &judged);
        let path = judged.path.as_deref().unwrap_or(path);
        let mut body = judged.body;
        let out = Outgoing {
            head: &head,
            path,
            headers: &headers,
            default_port: match scheme {
                Scheme::Tls => Port::HTTPS,
                Scheme::Plain => Port::HTTP,
            },
            body: body.as_mut(),
        };
        let made = first.take();
        let Some(back) = one_request(shared, &mut client, out, dest, &allowed, kept, made).await
        else {
            return;
        };
        kept = back;
    }
    keep_for_later(shared, target, kept);
}

/// Keep an upstream TLS connection the client left for a later client
/// connection's request to `target` (the pool saves the handshake; each
/// request is judged and its addresses checked as ever).
fn keep_for_later(shared: &Shared, target: &Target, up: Option<(Upstream, SocketAddr)>) {
    if let Some((Upstream::Tls(s), dialed)) = up {
        shared.inspected_pool.put(target, dialed, s);
    }
}

/// Send one request upstream (on `made` when given, else on `kept`, else on
/// a fresh connection) and relay its answer. `None`: the client connection
/// is done; else the upstream connection to keep, if any.
async fn one_request<C: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    client: &mut BufReader<C>,
    mut out: Outgoing<'_>,
    dest: Dest<'_>,
    allowed: &str,
    mut kept: Option<(Upstream, SocketAddr)>,
    mut made: Option<Made>,
) -> Option<Option<(Upstream, SocketAddr)>> {
    let Dest {
        target,
        addrs,
        scheme,
    } = dest;
    let head = out.head;
    loop {
        let mut reused = made.is_none() && kept.is_some();
        let pooled = || match scheme {
            Scheme::Tls if head.resendable() => shared.inspected_pool.take(target, addrs),
            _ => None,
        };
        let next = match (made.take(), kept.take()) {
            (Some(m), _) => m,
            (None, Some(k)) => Ok(k),
            (None, None) => match pooled() {
                Some((s, dialed)) => {
                    reused = true;
                    Ok((Upstream::Tls(s), dialed))
                }
                None => connect(shared, target, addrs, scheme, false).await,
            },
        };
        let (upstream, dialed) = match next {
            Ok(u) => u,
            Err((mut failed, dialed)) => {
                if failed.verdict == ProxyVerdict::UpstreamFailed {
                    failed.allowed_by = Some(allowed.to_owned());
                }
                failed
                    .answer_via(shared, client, head, dialed, ProxyVia::Inspected)
                    .await;
                return None;
            }
        };
        let again = Outgoing {
            head,
            path: out.path,
            headers: out.headers,
            default_port: out.default_port,
            body: out.body.as_deref_mut(),
        };
        let failed = match forward_inner(shared, client, again, upstream, reused).await {
            Ok((status, keep, back)) => {
                let reason = allowed.to_owned();
                record(
                    shared,
                    &head.method,
                    target,
                    Some(dialed),
                    ProxyVerdict::Allowed,
                    reason,
                    status,
                );
                if !(keep && head.keep_alive) {
                    keep_for_later(shared, target, back.map(|u| (u, dialed)));
                    let _ = client.get_mut().shutdown().await;
                    return None;
                }
                return Some(back.map(|u| (u, dialed)));
            }
            // The kept connection had closed: once more, fresh.
            Err(ForwardError::Stale) => continue,
            Err(ForwardError::Refused(r)) => refused_inside(r),
            Err(ForwardError::BeforeResponse(status, why)) => Refusal {
                status,
                reason: why,
                verdict: if status == 400 {
                    ProxyVerdict::BadRequest
                } else {
                    ProxyVerdict::UpstreamFailed
                },
                allowed_by: Some(allowed.to_owned()),
            },
            Err(ForwardError::AfterResponse(status)) => {
                let why = format!("{allowed}; relay cut short");
                record(
                    shared,
                    &head.method,
                    target,
                    Some(dialed),
                    ProxyVerdict::Allowed,
                    why,
                    status,
                );
                return None;
            }
        };
        failed
            .answer_via(shared, client, head, Some(dialed), ProxyVia::Inspected)
            .await;
        return None;
    }
}
